#!/usr/bin/python3
"""paired_roofline.py - decode against the memory-bandwidth roofline, with the bandwidth sampled
right before and right after each engine's run.

On a VM whose memory bandwidth moves by tens of percent within minutes, bench.py's median of
samples taken between configurations can sit far from what a given decode run had (roofline
fractions over 100 %). Here every run is bracketed: membw, q35, membw, llama.cpp, membw; each
engine's fraction divides its bytes per second (tok/s x bench/gguf_bytes.py's bytes a token at
the run's depth) by the mean of the two samples around it. Both engines run one SIMD level
(q35 with Q35_SIMD, llama_peer with --cpu-variant), as bench.py --simd does.

    bench/paired_roofline.py --q35 build/q35 --peer build/tests/peer/llama_peer \
        --membw build/membw [--layers 4,8] [--types q4_0,q4_k_m,q8_0] [--threads 2,1] \
        [--rounds 1] [--simd avx2] [--prompt 16] [--gen 64]

Models: $Q35_BENCH_CACHE (default ~/.cache/q35-bench)/a3b-L{layers}-{type}.gguf (bench.py
generates them). Prints a markdown table on stdout, progress on stderr.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_bytes  # noqa: E402

VARIANT = {"scalar": "x64", "avx2": "haswell", "avx512": "zen4"}


def last_json(s):
    for line in reversed(s.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output")


def run(argv, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(argv, capture_output=True, text=True, env=e)
    if p.returncode != 0:
        raise SystemExit("paired_roofline: %s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr[-600:]))
    return last_json(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--q35", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--membw", required=True)
    ap.add_argument("--layers", default="4")
    ap.add_argument("--types", default="q4_0,q4_k_m,q8_0")
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--simd", default="avx2", choices=sorted(VARIANT))
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--cache", default=os.environ.get("Q35_BENCH_CACHE", os.path.expanduser("~/.cache/q35-bench")))
    a = ap.parse_args()

    def bw(t):
        return run([a.membw, "-t", str(t), "-r", "40", "--json"])["median_gb_s"]

    def load():
        return " ".join(open("/proc/loadavg").read().split()[:3])

    print("%s, load %s, simd %s / %s" % (time.strftime("%H:%M:%S UTC", time.gmtime()), load(), a.simd, VARIANT[a.simd]))
    print()
    print("| file | threads | q35 tok/s | GB/s before / after | q35 % roofline | llama.cpp tok/s | GB/s after | "
          "llama.cpp % roofline | q35 / llama.cpp |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for _ in range(a.rounds):
        for layers in [int(x) for x in a.layers.split(",")]:
            for ty in a.types.split(","):
                m = os.path.join(a.cache, "a3b-L%d-%s.gguf" % (layers, ty))
                if not os.path.exists(m):
                    raise SystemExit("paired_roofline: %s not found (bench/bench.py generates it)" % m)
                gb = gguf_bytes.decode_bytes(m, depth=a.prompt, kv_type="f16")["decode_bytes"] / 1e9
                for t in [int(x) for x in a.threads.split(",")]:
                    common = ["bench", "-m", m, "-t", str(t), "-p", str(a.prompt), "-n", str(a.gen), "-r", "1", "--json"]
                    b1 = bw(t)
                    q = run([a.q35] + common, {"Q35_SIMD": a.simd})["decode_tok_s"]
                    b2 = bw(t)
                    ll = run([a.peer] + common + ["--kv", "f16", "--flash", "-1", "--load-mode", "0",
                                                  "--cpu-variant", VARIANT[a.simd]])["decode_tok_s"]
                    b3 = bw(t)
                    fq, fl = q * gb / ((b1 + b2) / 2), ll * gb / ((b2 + b3) / 2)
                    print("| L%d %s | %d | %.1f | %.1f / %.1f | %.0f %% | %.1f | %.1f | %.0f %% | %.2f |"
                          % (layers, ty, t, q, b1, b2, 100 * fq, ll, b3, 100 * fl, q / ll), flush=True)
                    print("paired_roofline: L%d %s t%d done (load %s)" % (layers, ty, t, load()), file=sys.stderr)
    print()
    print("%s, load %s" % (time.strftime("%H:%M:%S UTC", time.gmtime()), load()))


if __name__ == "__main__":
    main()
