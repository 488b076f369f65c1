#!/usr/bin/python3
"""mtp_buckets.py PERF_SCRIPT_OUT DECODE_CPU_S [UNITS] - a `q35 run` profile's decode samples by part
(issue 19; bench/mtp_profile.sh runs it).

PERF_SCRIPT_OUT: `perf script -F comm,tid,time,period,event,ip,sym --no-inline` of a `perf record -e
cpu-clock --call-graph dwarf` run. The decode is the last DECODE_CPU_S seconds of cpu-clock periods
(the stats line's decode_cpu_s; what comes before is the load and the prompt step). Each sample goes
to one bucket by the names on its stack (first match in the order below; where the stack did not
unwind, by its leaf); printed per UNIT (a decode step, or a round of drafts): lines "B<TAB>bucket<TAB>ms"
and the top leaf symbols "L<TAB>symbol<TAB>ms"."""
import collections, sys
path, dec, units = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
samples, cur = [], None
for ln in open(path, errors="replace"):
    if not ln.strip():
        if cur: samples.append(cur)
        cur = None
        continue
    if not ln.startswith((" ", "\t")):
        parts = ln.split()
        # header: comm tid time: period cpu-clock:
        per = 0
        for i, p in enumerate(parts):
            if p.endswith(":") and i + 1 < len(parts) and parts[i + 1].isdigit():
                per = int(parts[i + 1])
        cur = [per, []]
        continue
    f = ln.split()
    sym = f[1] if len(f) > 1 else "?"
    sym = sym.split("+")[0]
    cur[1].append(sym)
if cur: samples.append(cur)
# the decode: the last `dec` seconds of CPU
acc, start = 0.0, len(samples)
while start > 0 and acc < dec * 1e9:
    start -= 1
    acc += samples[start][0]
dsamp = samples[start:]
MM = {"q35_matmul", "q35_matmul_f", "q35_matmul_same", "mm_rows", "mm_run", "mm_multi_run", "q35_act_prepare", "cvt_run"}
def bucket(fr):
    s = set(fr)
    leaf = fr[0] if fr else "?"
    if "q35_session_ckpt_touch" in s: return "slot touch (first drafting step)"
    if "touch_reserve" in s or "lg_reserve" in s or "hid_reserve" in s: return "logits touch (first drafting step)"
    if "forward_rows" in s or "q35_mtp_forward_rows" in s:
        if "q35_layer_moe" in s: return "head: MoE FFN"
        if "q35_layer_attention" in s: return "head: attention layer"
        if s & MM: return "head: eh_proj + draft output (32768 rows)"
        return "head: other (norms, inputs)"
    if "sample_draft" in s: return "head: draft sampling"
    if "q35_session_ckpt_rollback" in s or "q35_session_ckpt_restore" in s: return "rollback copy"
    if "q35_forward" in s or "forward_batch" in s:
        if "gdn_recur" in s: return "trunk: recurrence (gdn_recur)"
        if "gdn_conv" in s or "gdn_qk_norm" in s: return "trunk: conv + q/k norm"
        if "attn_core" in s: return "trunk: attention core"
        if "q35_layer_moe" in s:
            if "moe_mm" in s or "moe_experts" in s: return "trunk: experts (routed + shared)"
            if "f32" in leaf: return "trunk: F32 router"
            if s & MM: return "trunk: MoE other products"
            return "trunk: MoE other (route, gather, combine)"
        if "q35_layer_deltanet" in s:
            if s & MM: return "trunk: DeltaNet products"
            return "trunk: DeltaNet other"
        if "q35_layer_attention" in s:
            if s & MM: return "trunk: attention products"
            return "trunk: attention other"
        if "output_head" in s or s & MM: return "trunk: output matrix"
        return "trunk: norms, residual, embedding"
    if "q35_sample" in s or "sample_run" in s: return "sampler (trunk positions)"
    if leaf.startswith("q35_vec_conv_silu") or leaf == "gdn_conv": return "trunk: conv + q/k norm"
    if leaf in ("attn_prep", "quant_f16"): return "trunk/head: attention prep + KV store (stack lost)"
    if leaf.startswith("__powf") or leaf.startswith("__expf") or leaf.startswith("__exp"): return "math (stack lost)"
    if "memmove" in leaf or "memcpy" in leaf or "memset" in leaf: return "other: memcpy/memset (stack lost)"
    if leaf[:1].islower() and ("page" in leaf or "pte" in leaf or "pmd" in leaf or "fault" in leaf or "munmap" in leaf
                               or "unmap" in leaf or "irq" in leaf or "folio" in leaf or "clear" in leaf):
        return "kernel: page faults, zeroing, unmapping (stack lost)"
    return "other: " + leaf
b = collections.Counter()
leafc = collections.Counter()
for per, fr in dsamp:
    b[bucket(fr)] += per / 1e6
    leafc[fr[0] if fr else "?"] += per / 1e6
tot = sum(b.values())
print("# %d decode samples of %d, %.1f ms CPU; per unit (%g units)" % (len(dsamp), len(samples), tot, units))
for k, v in sorted(b.items(), key=lambda kv: -kv[1]):
    print("B\t%s\t%.3f" % (k, v / units))
print("B\ttotal\t%.3f" % (tot / units))
for k, v in leafc.most_common(40):
    print("L\t%s\t%.3f" % (k, v / units))
