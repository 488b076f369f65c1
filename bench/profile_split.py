#!/usr/bin/python3
"""profile_split.py - where q35's decode time goes, from `perf script` call stacks.

    perf script -i perf.data -F tid,ip,sym | /usr/bin/python3 bench/profile_split.py

Each sample is attributed to a phase by the frames on its stack (outermost match wins for the
phase, the leaf decides the kind):
  phase: attention (q35_layer_attention), deltanet (q35_layer_deltanet: projections, conv, recurrence,
         out-projection), moe experts (moe_mm), moe other (router, top-k, shared expert, combine:
         the rest of q35_layer_moe), output matrix (output_head: q35_matmul/q35_act_prepare),
         norms+residual+embedding (the rest of q35_forward), sampling (q35_step outside
         q35_forward), pool workers (a worker thread; phase unknown), pool wait (spinning or
         sleeping in the thread pool), other.
  kind:  dot (vec_dot kernels), act-quant (quantize_row), recurrence (gdn_*), attn-core
         (attn_*), math (expf/logf...), kernel, other.
Needs a build whose frames survive (bench/profile.sh builds one with frame pointers and
-fno-inline-functions-called-once); at 1 thread every sample is on the main thread, so the
phase split is complete.
"""
import collections
import sys


WAIT_SYMS = {"__sched_yield", "sched_yield", "pthread_cond_wait", "___pthread_cond_wait",
             "__pthread_cond_wait", "__futex_abstimed_wait_common", "futex_wait", "__x64_sys_futex",
             "__x64_sys_sched_yield", "do_sched_yield", "pthread_mutex_lock", "___pthread_mutex_lock",
             "__lll_lock_wait", "pthread_cond_broadcast", "___pthread_cond_broadcast", "__pthread_cond_broadcast"}


def phase_of(frames):
    """frames: list of symbols, leaf first."""
    syms = frames[::-1]  # outermost first
    s = set(frames)
    leaf = frames[0] if frames else "?"
    if leaf in ("worker", "q35_pool_run") or (s & WAIT_SYMS and ("worker" in s or "q35_pool_run" in s)):
        return "pool wait (spin/yield/sleep/wake)"
    if "worker" in s:
        return "pool workers (phase unknown)"
    for f in syms:
        if f == "q35_layer_attention":
            return "attention"
        if f == "q35_layer_deltanet":
            return "deltanet"
        if f == "q35_layer_moe":
            return "moe experts" if "moe_mm" in s else "moe other"
        if f == "q35_layer_dense_ffn":
            return "dense ffn"
    if "q35_forward" in s:
        i = frames.index("q35_forward")
        callee = frames[i - 1] if i > 0 else ""
        if callee in ("output_head", "q35_matmul", "q35_act_prepare", "q35_matmul_f") or "output_head" in s:
            return "output matrix"
        return "norms+residual+embedding"
    if "q35_context_step" in s or "q35_step" in s:
        return "sampling"
    if "q35_session_eval" in s or "q35_context_eval" in s or "cmd_bench" in s:
        return "other (bench loop)"
    return "other (startup, load, page faults)"


def kind_of(frames):
    leaf = frames[0] if frames else "?"
    for f in frames[:4]:
        if "vec_dot" in f or f.startswith("dot_"):
            return "dot"
        if "quantize_row" in f or f == "cvt_run":
            return "act-quant"
    if leaf.startswith("gdn_"):
        return "recurrence/conv"
    if leaf.startswith("attn_") or leaf.startswith("kv_"):
        return "attn-core"
    if leaf.startswith(("__exp", "__log", "exp", "log", "__ieee754", "__expf", "__logf")):
        return "libm"
    if leaf.startswith(("[k]", "__x64", "do_", "schedule", "__schedule", "entry_", "asm_", "native_")):
        return "kernel"
    return "other"


def main():
    samples = []
    cur = None
    for line in sys.stdin:
        if not line.strip():
            if cur is not None:
                samples.append(cur)
            cur = None
            continue
        if not line.startswith("\t"):
            if cur is not None:
                samples.append(cur)
            cur = []
            continue
        parts = line.split()
        if cur is None or len(parts) < 2:
            continue
        sym = parts[1]
        if "+0x" in sym:
            sym = sym.split("+0x")[0]
        cur.append(sym)
    if cur:
        samples.append(cur)
    n = len(samples)
    if n == 0:
        print("profile_split: no samples", file=sys.stderr)
        return 1
    ph = collections.Counter()
    pk = collections.Counter()
    leaf = collections.Counter()
    for fr in samples:
        p = phase_of(fr)
        ph[p] += 1
        pk[(p, kind_of(fr))] += 1
        leaf[fr[0] if fr else "?"] += 1
    print("samples: %d" % n)
    print("%-28s %6s   split by kind" % ("phase", "share"))
    for p, c in ph.most_common():
        kinds = ", ".join("%s %.0f%%" % (k, 100.0 * v / c) for (pp, k), v in
                          sorted(pk.items(), key=lambda kv: -kv[1]) if pp == p and 100.0 * v / c >= 1)
        print("%-28s %5.1f%%   %s" % (p, 100.0 * c / n, kinds))
    print("\ntop leaf functions (self time):")
    for f, c in leaf.most_common(15):
        print("  %5.1f%%  %s" % (100.0 * c / n, f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
