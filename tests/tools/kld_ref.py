#!/usr/bin/python3
"""Reference perplexity and KL-divergence statistics (numpy), written from llama.cpp's
tools/perplexity/perplexity.cpp formulas, over logits dumped by any engine.

usage: kld_ref.py --vocab V --ctx N --tokens FED.txt --base BASE.bin [--quant QUANT.bin]
                  [--compare Q35.json] [--rtol R] [--atol A] [--tol KEY=RTOL,ATOL ...]

FED.txt: the n_chunk * n_ctx token ids fed (whitespace separated), chunk after chunk.
BASE.bin / QUANT.bin: float32 logits of every position of every chunk (n_chunk * n_ctx * V),
each chunk evaluated from an empty state (llama_peer logits --all / q35 logits --all per chunk).
Scored: positions first = n_ctx // 2 .. n_ctx - 2 of each chunk, predicting the next token.

Without --quant: perplexity, {"ppl", "ppl_err", "tokens", "chunks"}. With --quant: the KLD
summary under the names `q35 kld` prints. Prints the JSON line; with --compare, checks every
key of the reference against that JSON (|q35 - ref| <= atol + rtol |ref|) and exits 1 on a
mismatch, listing each.
"""
import argparse
import json
import math
import sys

import numpy as np

KLD_FRACTIONS = [0.999, 0.99, 0.95, 0.90, 0.10, 0.05, 0.01, 0.001]
DP_FRACTIONS = [0.999, 0.99, 0.95, 0.90, 0.75, 0.25, 0.10, 0.05, 0.01, 0.001]


def frac_name(prefix, f):
    d = ("%.3f" % f)[2:]
    while len(d) > 2 and d.endswith("0"):
        d = d[:-1]
    return "%s_p%s" % (prefix, d)


def log_softmax(rows):
    rows = rows.astype(np.float64)
    m = rows.max(axis=1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))


def scored(path, vocab, ctx, n_chunk):
    """log-probabilities of the scored rows, (n_chunk * (ctx - 1 - ctx//2), vocab)."""
    a = np.fromfile(path, dtype="<f4")
    if a.size != n_chunk * ctx * vocab:
        sys.exit("%s: %d floats, expected %d" % (path, a.size, n_chunk * ctx * vocab))
    a = a.reshape(n_chunk, ctx, vocab)
    first = ctx // 2
    return log_softmax(a[:, first:ctx - 1, :].reshape(-1, vocab))


def mean_err(x):
    """llama.cpp's mean_and_uncertainty: the standard error only above 10 values."""
    n = len(x)
    m = float(np.mean(x))
    var = float(np.mean(np.square(x))) - m * m
    return m, (math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0)


def ppl_stats(lp, nxt, n_chunk):
    nll = -lp[np.arange(len(nxt)), nxt]
    n = len(nll)
    m = nll.mean()
    var = np.mean(nll * nll) - m * m
    ppl = math.exp(m)
    return {"ppl": ppl, "ppl_err": math.sqrt(var / (n - 1)) * ppl if var > 0 else 0.0, "tokens": n, "chunks": n_chunk}


def kld_stats(lb, lq, nxt, n_chunk):
    n = len(nxt)
    idx = np.arange(n)
    kld = np.sum(np.exp(lb) * (lb - lq), axis=1)
    nll_q, nll_b = -lq[idx, nxt], -lb[idx, nxt]
    dp = np.exp(-nll_q) - np.exp(-nll_b)
    r = {}
    lq_m, lq_e = mean_err(nll_q)
    lb_m, lb_e = mean_err(nll_b)
    cov = (np.mean(nll_q * nll_b) - lq_m * lb_m) / (n - 1) if n >= 10 else 0.0
    r["ppl_quant"], r["ppl_base"] = math.exp(lq_m), math.exp(lb_m)
    r["ppl_quant_err"], r["ppl_base_err"] = r["ppl_quant"] * lq_e, r["ppl_base"] * lb_e
    r["ppl_cor"] = cov / (lq_e * lb_e) if lq_e * lb_e > 0 else None
    r["ln_ppl_ratio"] = lq_m - lb_m
    r["ln_ppl_ratio_err"] = math.sqrt(max(lq_e ** 2 + lb_e ** 2 - 2 * cov, 0.0))
    r["ppl_ratio"] = math.exp(r["ln_ppl_ratio"])
    r["ppl_ratio_err"] = r["ppl_ratio"] * r["ln_ppl_ratio_err"]
    r["ppl_diff"] = r["ppl_quant"] - r["ppl_base"]
    pc = r["ppl_quant"] * r["ppl_base"] * cov
    r["ppl_diff_err"] = math.sqrt(max(r["ppl_quant_err"] ** 2 + r["ppl_base_err"] ** 2 - 2 * pc, 0.0))
    r["mean_kld"], r["mean_kld_err"] = mean_err(kld)
    ks = np.sort(kld)
    r["max_kld"], r["min_kld"], r["median_kld"] = float(ks[-1]), float(ks[0]), float(np.median(ks))
    for f in KLD_FRACTIONS:
        r[frac_name("kld", f)] = float(np.quantile(ks, f))
    r["p99_kld"] = r["kld_p99"]
    r["mean_dp"], r["mean_dp_err"] = mean_err(dp)
    ds = np.sort(dp)
    r["max_dp"], r["min_dp"], r["median_dp"] = float(ds[-1]), float(ds[0]), float(np.median(ds))
    for f in DP_FRACTIONS:
        r[frac_name("dp", f)] = float(np.quantile(ds, f))
    mse, mse_e = mean_err(dp * dp)
    r["rms_dp"] = math.sqrt(mse)
    r["rms_dp_err"] = 0.5 / r["rms_dp"] * mse_e if r["rms_dp"] > 0 else 0.0
    top = float(np.mean(np.argmax(lb, axis=1) == np.argmax(lq, axis=1)))
    r["top1_agree"], r["top1_agree_err"] = top, math.sqrt(top * (1 - top) / (n - 1))
    r["tokens"], r["chunks"] = n, n_chunk
    return r


def compare(ref, got, rtol, atol, per_key):
    bad = []
    for k, want in ref.items():
        if k not in got:
            bad.append("%s: missing in q35's output" % k)
            continue
        have = got[k]
        if want is None or have is None:
            if want is not have:
                bad.append("%s: q35 %s, reference %s" % (k, have, want))
            continue
        rt, at = per_key.get(k, (rtol, atol))
        if abs(have - want) > at + rt * abs(want):
            bad.append("%s: q35 %.9g, reference %.9g (rtol %g, atol %g)" % (k, have, want, rt, at))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--quant")
    ap.add_argument("--compare")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--atol", type=float, default=1e-9)
    ap.add_argument("--tol", action="append", default=[], help="KEY=RTOL,ATOL")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    fed = np.array(open(a.tokens).read().split(), dtype=np.int64)
    if fed.size % a.ctx:
        sys.exit("%s: %d tokens is not a whole number of chunks of %d" % (a.tokens, fed.size, a.ctx))
    n_chunk = fed.size // a.ctx
    first = a.ctx // 2
    nxt = fed.reshape(n_chunk, a.ctx)[:, first + 1:].reshape(-1)
    lb = scored(a.base, a.vocab, a.ctx, n_chunk)
    ref = ppl_stats(lb, nxt, n_chunk) if not a.quant else kld_stats(lb, scored(a.quant, a.vocab, a.ctx, n_chunk),
                                                                       nxt, n_chunk)
    print(json.dumps(ref))
    if a.compare:
        per_key = {}
        for t in a.tol:
            k, v = t.split("=")
            r, at = v.split(",")
            per_key[k] = (float(r), float(at))
        got = json.loads(open(a.compare).read().strip().splitlines()[-1])
        bad = compare(ref, got, a.rtol, a.atol, per_key)
        for b in bad:
            print("MISMATCH %s: %s" % (a.label, b))
        if bad:
            sys.exit(1)
        print("ok %s: %d values agree" % (a.label, len(ref)))


if __name__ == "__main__":
    main()
