#!/usr/bin/python3
"""bench.py - q35 vs llama.cpp on Qwen3.5-35B-A3B-shaped random-weight GGUFs (driven by run.sh).

Runs `q35 bench` and `llama_peer bench` on the same file with the same thread count, one timed
run per process, alternating ABBA (q35, llama.cpp, llama.cpp, q35, ...); prints medians and the ratio
q35 / llama.cpp; measures the memory bandwidth (bench/membw.c) between the groups and prints
decode as a fraction of the roofline (bytes read per decoded token, bench/gguf_bytes.py, over
the bandwidth); records each process's peak RSS (wait4) and model load time. Ends with one
JSON line with everything. See bench/README.md.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_bytes  # noqa: E402

SHAPE = ["--embd", "2048", "--heads", "16", "--kv-heads", "2", "--head-dim", "256", "--rot", "64",
         "--ssm-k-heads", "16", "--ssm-v-heads", "32", "--ssm-head-dim", "128", "--experts", "256",
         "--experts-used", "8", "--ff", "512", "--shexp-ff", "512", "--vocab", "248320"]
MODE_NAME = {0: "read", -1: "auto(mmap)", 1: "mmap"}
# --simd LEVEL: q35 runs with Q35_SIMD=LEVEL, llama_peer with --cpu-variant of the same
# instruction set (the first variant in the list this CPU can run).
PEER_VARIANT = {"scalar": "x64", "avx2": "haswell", "avx512": "zen4,skylakex"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run_proc(argv, timeout, env=None):
    """Runs argv (env: extra environment variables); returns (rc, stdout, stderr, wall_s, peak_rss_bytes)."""
    full_env = dict(os.environ, **env) if env else None
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=fo, stderr=fe, env=full_env)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        fo.seek(0)
        fe.seek(0)
        return p.returncode, fo.read().decode(errors="replace"), fe.read().decode(errors="replace"), wall, \
            ru.ru_maxrss * 1024


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


class Bench:
    def __init__(self, a):
        self.a = a
        self.bw = {}  # threads -> list of membw results
        self.results = []
        self.errors = []
        self.level = None  # --simd level of the configs being run (None: each engine's own best)

    # ---- models --------------------------------------------------------------------------
    def model(self, layers, qtype):
        path = os.path.join(self.a.cache, "a3b-L%d-%s.gguf" % (layers, qtype))
        if os.path.exists(path):
            return path
        os.makedirs(self.a.cache, exist_ok=True)
        part = path + ".part"
        argv = [self.a.q35, "export", "--tiny-test", "-o", part, "--layers", str(layers), "--type", qtype] + SHAPE
        log("bench: generating %s (once; cached) ..." % path)
        t0 = time.monotonic()
        rc, out, err, _, _ = run_proc(argv, 4 * 3600)
        if rc != 0:
            raise SystemExit("bench: generating %s failed (%d): %s" % (path, rc, err.strip()[-2000:]))
        os.rename(part, path)
        log("bench: generated %s in %.0f s" % (path, time.monotonic() - t0))
        return path

    # ---- bandwidth -----------------------------------------------------------------------
    def membw(self, threads_list):
        for t in threads_list:
            rc, out, err, _, _ = run_proc([self.a.membw, "-t", str(t), "-s", str(self.a.membw_mib), "-r", "5",
                                           "--json"], 600)
            if rc != 0:
                self.errors.append("membw -t %d failed: %s" % (t, err.strip()))
                continue
            r = last_json(out)
            r["time"] = time.time()
            r["loadavg"] = loadavg()
            self.bw.setdefault(t, []).append(r)
            log("bench: membw %d thread(s): %.1f GB/s (best %.1f; per CPU-second %.1f)"
                % (t, r["median_gb_s"], r["best_gb_s"], r["cpu_median_gb_s"]))

    def bw_of(self, t):
        xs = self.bw.get(t, [])
        if not xs:
            return None
        return {"median_gb_s": median([x["median_gb_s"] for x in xs]),
                "best_gb_s": max(x["best_gb_s"] for x in xs),
                "cpu_median_gb_s": median([x["cpu_median_gb_s"] for x in xs]), "samples": len(xs)}

    # ---- one engine run ------------------------------------------------------------------
    def q35_run(self, model, threads, p, n, depth):
        argv = [self.a.q35, "bench", "-m", model, "-t", str(threads), "-p", str(p), "-n", str(n), "-r", "1",
                "--json"]
        if depth:
            argv += ["--depth", str(depth), "--chunk", "512", "--warmup", "0"]
        if self.a.q35_load == "read":
            argv += ["--no-mmap"]
        return self.engine_run("q35/%s" % self.a.q35_load, argv, {"Q35_SIMD": self.level} if self.level else None)

    def llama_run(self, model, threads, p, n, depth, mode):
        argv = [self.a.peer, "bench", "-m", model, "-t", str(threads), "-p", str(p), "-n", str(n), "-r", "1",
                "--kv", "f16", "--flash", "-1", "--load-mode", str(mode), "--json"]
        if depth:
            argv += ["--depth", str(depth), "--warmup", "0"]
        if self.level:
            argv += ["--cpu-variant", PEER_VARIANT[self.level]]
        return self.engine_run("llama.cpp/%s" % MODE_NAME[mode], argv)

    def engine_run(self, name, argv, env=None):
        la = loadavg()
        rc, out, err, wall, rss = run_proc(argv, self.a.timeout, env)
        if rc != 0:
            msg = "%s failed (rc %d): %s :: %s" % (name, rc, " ".join(argv), err.strip()[-600:])
            log("bench: " + msg)
            self.errors.append(msg)
            return None
        try:
            j = last_json(out)
        except ValueError as e:
            self.errors.append("%s: %s" % (name, e))
            return None
        r = {"prefill_tok_s": j.get("prefill_tok_s"), "decode_tok_s": j.get("decode_tok_s"),
             "load_s": j.get("load_s"), "peak_rss_bytes": rss, "process_wall_s": wall,
             "loadavg_1m": la[0] if la else None, "huge_mapped_bytes": j.get("huge_mapped_bytes"),
             "simd": j.get("simd") or j.get("cpu_variant")}
        hm = r["huge_mapped_bytes"]
        log("bench:   %-18s prefill %8.2f tok/s  decode %7.2f tok/s  load %.2f s  rss %.2f GB  (%.0f s)%s%s"
            % (name, r["prefill_tok_s"] or 0, r["decode_tok_s"] or 0, r["load_s"] or 0, rss / 1e9, wall,
               "  2 MiB-mapped %.2f GB" % (hm / 1e9) if hm else "", "  simd %s" % r["simd"] if r["simd"] else ""))
        return r

    # ---- one configuration: alternating rounds ---------------------------------------------
    def config(self, kind, layers, qtype, threads, p, n, depth, modes, rounds):
        model = self.model(layers, qtype)
        bytes_info = gguf_bytes.decode_bytes(model, depth=depth + p, kv_type="f16")
        label = "%s L%d %s t%d" % (kind, layers, qtype, threads) + (" @%s" % self.level if self.level else "")
        log("bench: %s (p %d, n %d, depth %d, %d round(s))" % (label, p, n, depth, rounds))
        runs = {"q35": []}
        for m in modes:
            runs["llama_%d" % m] = []
        for i in range(rounds):  # ABBA: odd rounds run llama.cpp first, so drift hits both alike
            if i % 2 == 0:
                runs["q35"].append(self.q35_run(model, threads, p, n, depth))
            for m in modes:
                runs["llama_%d" % m].append(self.llama_run(model, threads, p, n, depth, m))
            if i % 2 == 1:
                runs["q35"].append(self.q35_run(model, threads, p, n, depth))
        res = {"kind": kind, "label": label, "layers": layers, "type": qtype, "threads": threads, "prompt": p,
               "gen": n, "depth": depth, "rounds": rounds, "model": model,
               "decode_bytes": bytes_info["decode_bytes"], "weights_bytes": bytes_info["weights_bytes"],
               "kv_cache_bytes": bytes_info["kv_cache_bytes"],
               "deltanet_state_bytes": bytes_info["deltanet_state_bytes"],
               "parts_bytes": bytes_info["parts_bytes"], "engines": {}, "simd_level": self.level}
        for k, rs in runs.items():
            ok = [r for r in rs if r]
            res["engines"][k] = {
                "runs": ok,
                "simd": "/".join(sorted({r["simd"] for r in ok if r.get("simd")})) or None,
                "prefill_tok_s": median([r["prefill_tok_s"] for r in ok]),
                "decode_tok_s": median([r["decode_tok_s"] for r in ok]),
                "load_s": median([r["load_s"] for r in ok]),
                "peak_rss_bytes": max([r["peak_rss_bytes"] for r in ok], default=None),
            }
        # llama.cpp: the faster load mode, per metric
        best = {}
        for metric in ("prefill_tok_s", "decode_tok_s"):
            cands = [(res["engines"]["llama_%d" % m][metric], m) for m in modes
                     if res["engines"]["llama_%d" % m][metric] is not None]
            best[metric] = max(cands) if cands else (None, None)
        res["llama_best"] = {"prefill_tok_s": best["prefill_tok_s"][0], "prefill_load_mode": best["prefill_tok_s"][1],
                             "decode_tok_s": best["decode_tok_s"][0], "decode_load_mode": best["decode_tok_s"][1]}
        q = res["engines"]["q35"]
        res["ratio_prefill"] = (q["prefill_tok_s"] / best["prefill_tok_s"][0]
                                if q["prefill_tok_s"] and best["prefill_tok_s"][0] else None)
        res["ratio_decode"] = (q["decode_tok_s"] / best["decode_tok_s"][0]
                               if q["decode_tok_s"] and best["decode_tok_s"][0] else None)
        # paired per-round ratios (same round = closest in time), as a check on drift
        pr = []
        for i in range(rounds):
            qa = runs["q35"][i]
            la = [runs["llama_%d" % m][i] for m in modes if runs["llama_%d" % m][i]]
            if qa and la:
                pr.append(qa["decode_tok_s"] / max(x["decode_tok_s"] for x in la))
        res["ratio_decode_paired_median"] = median(pr)
        self.results.append(res)
        return res

    def finish_roofline(self):
        for res in self.results:
            bw = self.bw_of(res["threads"])
            res["bandwidth"] = bw
            for k, e in list(res["engines"].items()) + [("llama_best", res["llama_best"])]:
                d = e.get("decode_tok_s")
                e["achieved_gb_s"] = d * res["decode_bytes"] / 1e9 if d else None
                e["roofline_frac"] = (d * res["decode_bytes"] / 1e9 / bw["median_gb_s"]
                                      if d and bw and bw["median_gb_s"] else None)


def fmt(x, f="%.1f"):
    return f % x if x is not None else "-"


def print_table(b):
    out = sys.stdout
    hdr = ("%-30s %-20s %9s %9s %6s | %8s %8s %6s %6s | %7s %7s %7s | %7s %7s | %5s %5s"
           % ("config", "simd q35/llama", "q35 pp", "llama pp", "ratio", "q35 tg", "llama tg", "ratio", "paired", "GB/tok", "q35 %rf",
              "lla %rf", "q35 RSS", "lla RSS", "q35ld", "llald"))
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in b.results:
        q = r["engines"]["q35"]
        lb = r["llama_best"]
        modes = [k for k in r["engines"] if k.startswith("llama_")]
        lrss = max([r["engines"][k]["peak_rss_bytes"] or 0 for k in modes], default=0)
        lload = min([r["engines"][k]["load_s"] for k in modes if r["engines"][k]["load_s"] is not None],
                    default=None)
        cfg = "%s %s L%d t%d%s" % (r["kind"], r["type"], r["layers"], r["threads"],
                                   (" d%dk" % (r["depth"] // 1024)) if r["depth"] else "")
        lsimd = "/".join(sorted({r["engines"][k]["simd"] for k in modes if r["engines"][k]["simd"]})) or "-"
        simd = "%s/%s" % (q["simd"] or "-", lsimd)
        pp_l = fmt(lb["prefill_tok_s"]) + ("" if r["kind"] != "pp+tg" else "")
        print("%-30s %-20s %9s %9s %6s | %8s %8s %6s %6s | %7s %7s %7s | %7s %7s | %5s %5s"
              % (cfg, simd, fmt(q["prefill_tok_s"]) if not r["depth"] else "-", pp_l if not r["depth"] else "-",
                 fmt(r["ratio_prefill"], "%.2f") if not r["depth"] else "-",
                 fmt(q["decode_tok_s"], "%.2f"), fmt(lb["decode_tok_s"], "%.2f"), fmt(r["ratio_decode"], "%.2f"),
                 fmt(r["ratio_decode_paired_median"], "%.2f"), fmt(r["decode_bytes"] / 1e9, "%.3f"),
                 fmt(q.get("roofline_frac") and 100 * q["roofline_frac"], "%.0f%%"),
                 fmt(lb.get("roofline_frac") and 100 * lb["roofline_frac"], "%.0f%%"),
                 fmt(q["peak_rss_bytes"] and q["peak_rss_bytes"] / 1e9, "%.2fG"), fmt(lrss / 1e9, "%.2fG"),
                 fmt(q["load_s"], "%.2f"), fmt(lload, "%.2f")), file=out)
    print("", file=out)
    print("llama.cpp per load mode (read = load_mode 0, auto = mmap; the table uses the faster per metric):",
          file=out)
    for r in b.results:
        parts = []
        for k, e in r["engines"].items():
            if k.startswith("llama_"):
                m = int(k.split("_")[1])
                parts.append("%s pp %s tg %s" % (MODE_NAME[m], fmt(e["prefill_tok_s"]), fmt(e["decode_tok_s"], "%.2f")))
        print("  %-26s %s" % (r["label"] + (" d%d" % r["depth"] if r["depth"] else ""), " | ".join(parts)), file=out)
    print("ranges over the rounds (min-max tok/s):", file=out)
    for r in b.results:
        parts = []
        for k, e in r["engines"].items():
            for metric, short in (("prefill_tok_s", "pp"), ("decode_tok_s", "tg")):
                xs = [x[metric] for x in e["runs"] if x.get(metric) is not None]
                if xs and not (metric == "prefill_tok_s" and r["depth"]):
                    parts.append("%s %s %s-%s" % (k, short, fmt(min(xs)), fmt(max(xs))))
        print("  %-30s %s" % (r["label"], " | ".join(parts)), file=out)
    for t in sorted(b.bw):
        bw = b.bw_of(t)
        print("memory bandwidth, %d thread(s): %.1f GB/s median of %d samples (best %.1f; per CPU-second %.1f)"
              % (t, bw["median_gb_s"], bw["samples"], bw["best_gb_s"], bw["cpu_median_gb_s"]), file=out)
    out.flush()


def git_rev(src):
    try:
        rev = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip() != ""
        return rev + ("+dirty" if dirty else "")
    except OSError:
        return None


def run_levels(b, a, layers, types, threads, rounds, modes2, modes1, depths, depth_rounds):
    """One pass over every configuration at b.level."""
    for L in layers:
        for ty in types:
            for t in threads:
                b.config("pp+tg", L, ty, t, a.prompt, a.gen, 0, modes2 if t >= 2 else modes1, rounds)
                b.membw([t])
    for d in depths:
        # llama.cpp load mode: the faster decode mode measured for Q4_0 L{first} at 2 threads, else 0
        mode = 0
        for r in b.results:
            if r["type"] == "q4_0" and r["threads"] == 2 and r["layers"] == layers[0] and r["simd_level"] == b.level and \
                    r["llama_best"]["decode_load_mode"] is not None:
                mode = r["llama_best"]["decode_load_mode"]
        b.config("tg@depth", layers[0], "q4_0", 2, 16, a.depth_gen, d, [mode], depth_rounds)
        b.membw([2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--q35", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--membw", required=True)
    ap.add_argument("--src", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--cache", default=os.environ.get("Q35_BENCH_CACHE",
                                                      os.path.expanduser("~/.cache/q35-bench")))
    ap.add_argument("--quick", action="store_true", help="1 round, 2 threads only, llama.cpp load_mode 0 only, "
                    "depth 8k only")
    ap.add_argument("--layers", default="4", help="comma list of layer counts (4,8)")
    ap.add_argument("--types", default="q8_0,q4_0,q4_k_m")
    ap.add_argument("--threads", default=None, help="comma list (default 1,2; --quick: 2)")
    ap.add_argument("--runs", type=int, default=None, help="alternating rounds per config (default 3; quick 1)")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--depths", default=None, help="comma list of decode depths for Q4_0 at 2 threads "
                    "(default 8192,32768; quick 8192; 0 or empty: none)")
    ap.add_argument("--depth-runs", type=int, default=None, help="rounds per depth (default 2; quick 1)")
    ap.add_argument("--depth-gen", type=int, default=32)
    ap.add_argument("--modes", default=None, help="llama.cpp load modes at 2 threads (default 0,-1; quick 0)")
    ap.add_argument("--modes-1t", default="0", help="llama.cpp load modes at 1 thread (default 0)")
    ap.add_argument("--q35-load", default="mmap", choices=["read", "mmap"],
                    help="q35's load mode: mmap (its default: zero copy, 2 MiB pages) or read (--no-mmap, "
                         "weights copied into anonymous memory); default mmap")
    ap.add_argument("--simd", default=None, help="comma list of SIMD levels (scalar, avx2, avx512): the whole "
                    "table once per level, q35 with Q35_SIMD=LEVEL and llama.cpp with the CPU variant of the "
                    "same instruction set (avx2: haswell; avx512: zen4 or skylakex; scalar: x64); default: "
                    "each engine's own best")
    ap.add_argument("--membw-mib", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json-out", default=None, help="also write the final JSON to this file")
    a = ap.parse_args()
    q = a.quick
    threads = [int(x) for x in (a.threads or ("2" if q else "1,2")).split(",") if x]
    rounds = a.runs or (1 if q else 3)
    depths = [int(x) for x in (a.depths if a.depths is not None else ("8192" if q else "8192,32768")).split(",")
              if x and int(x) > 0]
    depth_rounds = a.depth_runs or (1 if q else 2)
    modes2 = [int(x) for x in (a.modes or ("0" if q else "0,-1")).split(",")]
    modes1 = [int(x) for x in a.modes_1t.split(",")]
    types = [x for x in a.types.split(",") if x]
    layers = [int(x) for x in a.layers.split(",") if x]

    b = Bench(a)
    t_start = time.time()
    la0 = loadavg()
    log("bench: loadavg %s; cache %s" % (la0, a.cache))
    for L in layers:  # generate everything first (slow once, then cached)
        for ty in types:
            b.model(L, ty)
    if depths and "q4_0" not in types:
        b.model(layers[0], "q4_0")
    bw_threads = sorted(set(threads) | {2} if depths else set(threads))
    b.membw(bw_threads)
    levels = [x for x in (a.simd or "").split(",") if x] or [None]
    for lv in levels:
        if lv is not None and lv not in PEER_VARIANT:
            raise SystemExit("bench: --simd: unknown level '%s' (expected %s)" % (lv, ", ".join(PEER_VARIANT)))
    for lv in levels:
        b.level = lv
        run_levels(b, a, layers, types, threads, rounds, modes2, modes1, depths, depth_rounds)
    b.finish_roofline()
    print_table(b)
    busy = [la for la in [la0, loadavg()] if la and la[0] > (os.cpu_count() or 1)]
    if busy:
        print("WARNING: load average %.1f on %d CPUs during this run: other processes competed for the cores. "
              "Multi-threaded runs suffer most (a thread that waits at a barrier for a descheduled peer); "
              "llama.cpp's per-op barriers make its 2-thread decode collapse under oversubscription. "
              "Compare ratios only from quiet runs." % (max(la[0] for la in busy), os.cpu_count() or 1))
    summary = {
        "bench": "q35-vs-llama.cpp", "git": git_rev(a.src), "host": platform.node(), "nproc": os.cpu_count(),
        "loadavg_start": la0, "loadavg_end": loadavg(), "elapsed_s": time.time() - t_start,
        "settings": {"quick": q, "threads": threads, "rounds": rounds, "prompt": a.prompt, "gen": a.gen,
                     "depths": depths, "simd": levels, "depth_rounds": depth_rounds, "depth_gen": a.depth_gen,
                     "llama_modes_2t": modes2, "llama_modes_1t": modes1, "q35_load": a.q35_load, "types": types, "layers": layers,
                     "kv": "f16 (both); llama.cpp flash attention auto"},
        "bandwidth": {str(t): b.bw_of(t) for t in sorted(b.bw)}, "bandwidth_samples": b.bw,
        "results": b.results, "errors": b.errors,
    }
    line = json.dumps(summary, separators=(",", ":"))
    if a.json_out:
        with open(a.json_out, "w") as f:
            f.write(line + "\n")
    print(line)
    if b.errors:
        log("bench: %d error(s); see \"errors\" in the JSON" % len(b.errors))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
