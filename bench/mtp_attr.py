#!/usr/bin/python3
"""mtp_attr.py MODEL PLAIN.buckets[,...] DRAFT.buckets[,...] N E - where a round of N drafts goes beyond
the bytes model (issue 19; bench/mtp_profile.sh runs it).

Per bucket of bench/mtp_buckets.py (several files: their mean): the plain step's time, the round's,
and the bytes model's charge: the plain step's mean time per byte (its time over B_trunk(1), counted
as bench/mtp_bytes.py counts) times the bucket's bytes in a round (output matrix and dense products
once, routed experts at E (1 - (1 - k/E)^(N+1)) of E plus the shared expert, the head N x B_head at
--draft-vocab 32768); work with no bytes (recurrence, attention core, norms, sampler, touches) is
charged nothing. The excess column sums to the round's time minus the bench's prediction for rounds
that emit E tokens."""
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_bytes import read_header
model, f0, f2, N, E = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
kv, tensors = read_header(model)
arch = kv["general.architecture"]
g = lambda k, d=0: kv.get("%s.%s" % (arch, k), d)
n_mtp = g("nextn_predict_layers", 0); n_layer = g("block_count") - n_mtp
Ex, k = g("expert_count"), g("expert_used_count")
by = dict(out=0, router=0, shexp=0, deltanet=0, attn=0, exps=0, mtp_dense=0, mtp_exp=0, emb_row=0, other=0)
V = 1
for t in tensors:
    nm, b = t["name"], t["bytes"]
    if nm == "output.weight": by["out"] += b; V = t["ne"][1]
    elif nm == "output_norm.weight": by["out"] += b
    elif nm == "token_embd.weight": by["emb_row"] = b // t["ne"][1]
    elif nm.startswith("blk."):
        il = int(nm.split(".")[1])
        if il >= n_layer:
            if "_exps" in nm: by["mtp_exp"] += b
            elif "nextn.embed_tokens" not in nm and "nextn.shared_head_head" not in nm: by["mtp_dense"] += b
        elif "_exps" in nm: by["exps"] += b
        elif "ffn_gate_inp.weight" in nm: by["router"] += b
        elif "shexp" in nm: by["shexp"] += b
        elif ".ssm_" in nm or "attn_qkv" in nm or "attn_gate" in nm: by["deltanet"] += b
        elif ".attn_" in nm: by["attn"] += b
        else: by["other"] += b
frac = lambda n: 1 - (1 - k / Ex) ** n
K = 32768
head = by["mtp_dense"] + by["mtp_exp"] * k / Ex + by["out"] * K / V + by["emb_row"]
step_b = by["out"] + by["router"] + by["shexp"] + by["deltanet"] + by["attn"] + by["other"] + by["exps"] * frac(1) + by["emb_row"]
# bytes per bucket: (plain step, round)
bb = {
    "trunk: output matrix": (by["out"], by["out"]),
    "trunk: experts (routed + shared)": (by["exps"] * frac(1) + by["shexp"], by["exps"] * frac(N + 1) + by["shexp"]),
    "trunk: F32 router": (by["router"], by["router"]),
    "trunk: DeltaNet products": (by["deltanet"], by["deltanet"]),
    "trunk: attention products": (by["attn"], by["attn"]),
}
headb = N * head
round_b = step_b - by["exps"] * frac(1) + by["exps"] * frac(N + 1) + N * by["emb_row"] + headb
def load(ps):
    d = {}
    ps = ps.split(",")
    for p in ps:
        for ln in open(p):
            if ln.startswith("B\t"):
                _, kk, v = ln.rstrip("\n").split("\t"); d[kk] = d.get(kk, 0) + float(v) / len(ps)
    return d
s0, s2 = load(f0), load(f2)
T0, T2 = s0.pop("total"), s2.pop("total")
rate = T0 / step_b  # ms per byte of the plain step
print("plain step %.1f MB, round %.1f MB (x%.3f); predicted speed-up %.3f; step %.2f ms, round %.2f ms (%.3f steps), measured speed-up %.3f, measured/predicted %.3f" % (
    step_b / 1e6, round_b / 1e6, round_b / step_b, E * step_b / round_b, T0, T2, T2 / T0, E * T0 / T2, (E * T0 / T2) / (E * step_b / round_b)))
print("| bucket | plain step (ms) | round of %d drafts (ms) | round / step | bytes x (round / step) | bytes model's charge (ms) | excess (ms) | share of the gap |" % N)
print("|---|---:|---:|---:|---:|---:|---:|---:|")
keys = sorted(set(s0) | set(s2), key=lambda kk: -(s2.get(kk, 0) - s0.get(kk, 0)))
rows = []
gap = T2 - rate * round_b
hk = [kk for kk in keys if kk.startswith("head:")]
for kk in keys:
    a, b2 = s0.get(kk, 0), s2.get(kk, 0)
    if kk in bb:
        sb, rb = bb[kk]
        ch = rate * rb
        fx = "%.3f" % (rb / sb) if sb else "-"
    elif kk.startswith("head:"):
        ch, fx = None, "(head)"
    else:
        ch, fx = 0.0, "0 bytes"
    rows.append((kk, a, b2, fx, ch))
hsum = sum(s2.get(kk, 0) for kk in hk)
rest = [0, 0, 0]
for kk, a, b2, fx, ch in rows:
    if ch is None:
        print("| %s | - | %.2f | - | %s | | | |" % (kk, b2, fx))
    elif max(a, b2) < 0.1:
        rest[0] += a; rest[1] += b2; rest[2] += b2 - ch
    else:
        print("| %s | %.2f | %.2f | %s | %s | %.2f | %+.2f | %.0f %% |" % (kk, a, b2, "%.2f" % (b2 / a) if a > 0 else "-", fx, ch, b2 - ch, 100 * (b2 - ch) / gap))
print("| the rest (each under 0.1 ms) | %.2f | %.2f | | | 0 | %+.2f | %.0f %% |" % (rest[0], rest[1], rest[2], 100 * rest[2] / gap))
print("| head, all (%d drafts: %.1f MB) | - | %.2f | - | - | %.2f | %+.2f | %.0f %% |" % (N, headb / 1e6, hsum, rate * headb, hsum - rate * headb, 100 * (hsum - rate * headb) / gap))
print("| total | %.2f | %.2f | %.3f | %.3f | %.2f | %+.2f | 100 %% |" % (T0, T2, T2 / T0, round_b / step_b, rate * round_b, gap))
print("bytes MB:", {kk: round(v / 1e6, 2) for kk, v in by.items()}, "frac(1) %.4f frac(%d) %.4f head %.1f MB" % (frac(1), N + 1, frac(N + 1), head / 1e6))
