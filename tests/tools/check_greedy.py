#!/usr/bin/python3
"""Check a greedy continuation against reference logits computed on it (teacher forcing).

usage: check_greedy.py REF_LOGITS.bin --vocab V --prompt-len P --ids "i1 i2 ..." [--tie X]

REF_LOGITS.bin holds the reference's logits for every position of prompt + ids (T x V float32,
T = P + len(ids)); generated token k is predicted by position P - 1 + k. Passes when every
generated token is the reference's argmax there, or within X * max|logits| of it (a tie within
the stated tolerance). Prints the number of exact argmax choices and the largest shortfall.
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--prompt-len", type=int, required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--tie", type=float, default=5e-2)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.replace(",", " ").split()]
    r = np.fromfile(a.ref, dtype="<f4").astype(np.float64)
    if r.size != (a.prompt_len + len(ids)) * a.vocab:
        print(f"{a.label}: reference has {r.size // a.vocab} positions, expected "
              f"{a.prompt_len + len(ids)}")
        return 1
    r = r.reshape(-1, a.vocab)
    worst, exact, bad = 0.0, 0, []
    for k, t in enumerate(ids):
        row = r[a.prompt_len - 1 + k]
        short = (row.max() - row[t]) / max(np.abs(row).max(), 1e-30)
        exact += int(row.argmax() == t)
        worst = max(worst, short)
        if short > a.tie:
            bad.append((k, t, int(row.argmax()), short))
    print(f"{a.label}: {exact}/{len(ids)} greedy choices are the reference argmax, largest "
          f"shortfall {worst:.3e} of max|logit| (tie tolerance {a.tie:g})"
          + ("" if not bad else "  FAIL"))
    for k, t, b, s in bad[:5]:
        print(f"  step {k}: chose {t}, reference argmax {b}, shortfall {s:.3e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
