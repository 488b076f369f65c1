#!/usr/bin/python3
"""mtp_bytes.py - the bytes-per-step model of speculative decoding with the MTP head (issue 19).

    /usr/bin/python3 bench/mtp_bytes.py MODEL.gguf [--layers L] [--draft-vocab K] [--predict N:E ...]

From the GGUF's tensor sizes (gguf_bytes.py's reader): what one round of `q35 run --draft N`
reads on a memory-bound CPU, and the speed-up that predicts over plain decoding:
  B_trunk(n)  the trunk fed n tokens in one step: every non-expert tensor of every layer once,
              the experts of each layer at the expected number of distinct experts n tokens
              route to, E (1 - (1 - k/E)^n) of E (uniform routing), the output matrix once,
              n embedding rows;
  B_head      one draft: the MTP layer (non-expert tensors, eh_proj, k experts) and the output
              matrix (or K of its rows with --draft-vocab K), one embedding row;
  round       N drafts + one verify of N + 1 tokens emits E_N(a) = (1 - a^(N+1)) / (1 - a) tokens
              at acceptance a per draft (drafts accepted in order);
  speed-up    E_N(a) B_trunk(1) / (N B_head + B_trunk(N + 1)).
--predict N:E prints only the predicted speed-up of rounds of N drafts that emit E tokens each on
average (E measured: 1 + accepted drafts per round), one line per pair (bench/mtp_bench.sh).
--layers L extrapolates the trunk to L layers (per-layer bytes scaled, output unchanged), e.g.
40 for the real 35B-A3B. --pending counts what a round's first draft really runs: the head fed the
round's pending pairs (the tokens the last round emitted, 1 + its accepted drafts: src/engine/
draft.c make_drafts), so its experts at the union those tokens route to instead of k; with
--predict the pending count's distribution is the one of rounds at the acceptance that E implies. The recurrent state and KV cache are left out (small at short depth).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_bytes import read_header  # noqa: E402


def model(path, layers=None, draft_vocab=None):
    kv, tensors = read_header(path)
    arch = kv["general.architecture"]
    g = lambda k, d=0: kv.get("%s.%s" % (arch, k), d)
    n_mtp = g("nextn_predict_layers", 0)
    n_layer = g("block_count") - n_mtp
    E, k = g("expert_count", 0), g("expert_used_count", 0)
    dense, experts, mtp_dense, mtp_exp, out, emb_row, V = 0, 0, 0, 0, 0, 0, 1
    for t in tensors:
        nm, b = t["name"], t["bytes"]
        if nm == "output.weight":
            out += b
            V = t["ne"][1]
        elif nm == "token_embd.weight":
            emb_row = b // t["ne"][1]
        elif nm.startswith("blk."):
            il = int(nm.split(".")[1])
            is_exp = "_exps" in nm
            if il >= n_layer:
                if is_exp:
                    mtp_exp += b
                elif "nextn.embed_tokens" not in nm and "nextn.shared_head_head" not in nm:
                    mtp_dense += b
            elif is_exp:
                experts += b
            else:
                dense += b
        else:
            out += b  # output_norm
    scale = (layers or n_layer) / n_layer
    frac = lambda n: (1 - (1 - k / E) ** n) if E else 1.0

    def trunk(n):
        return scale * (dense + experts * frac(n)) + out + n * emb_row

    head_out = out * (min(draft_vocab, V) / V if draft_vocab else 1.0)
    head = mtp_dense + (mtp_exp * k / E if E else mtp_exp) + head_out + emb_row
    model.head_at = lambda n: head + (mtp_exp * (frac(n) - (k / E)) if E else 0.0)  # the head fed n tokens
    return trunk, head, n_layer


def accept_of(n, emitted):
    """The acceptance a with (1 - a^(n+1)) / (1 - a) = emitted (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        lo, hi = (a, hi) if sum(a ** j for j in range(n + 1)) < emitted else (lo, a)
    return (lo + hi) / 2


def first_head(n, a):
    """Bytes of a round's first draft: the head fed the pending pairs, j tokens with the probability
    that the round before emitted j (a^(j-1) (1 - a) for j <= n, a^n for n + 1)."""
    p = [a ** (j - 1) * (1 - a) for j in range(1, n + 1)] + [a ** n]
    return sum(pj * model.head_at(j) for j, pj in zip(range(1, n + 2), p))


def predict(path, n, emitted, layers=None, draft_vocab=None, pending=False):
    """Predicted speed-up of rounds of n drafts emitting `emitted` tokens each on average."""
    trunk, head, _ = model(path, layers, draft_vocab)
    heads = n * head if not pending else first_head(n, accept_of(n, emitted)) + (n - 1) * head
    return emitted * trunk(1) / (heads + trunk(n + 1))


def main(argv):
    path, layers, dv, pred, pending = None, None, None, [], False
    i = 1
    while i < len(argv):
        if argv[i] == "--layers":
            layers = int(argv[i + 1]); i += 1
        elif argv[i] == "--draft-vocab":
            dv = int(argv[i + 1]); i += 1
        elif argv[i] == "--pending":
            pending = True
        elif argv[i] == "--predict":  # N:E, rounds of N drafts emitting E tokens each (measured)
            pred.append(tuple(float(x) for x in argv[i + 1].split(":"))); i += 1
        else:
            path = argv[i]
        i += 1
    if pred:
        for n, e in pred:
            print("%.4f" % predict(path, int(n), e, layers, dv, pending))
        return 0
    trunk, head, nl = model(path, layers, dv)
    print("%s: %d trunk layers%s; B_trunk(1) %.1f MB, B_head %.1f MB%s%s" % (
        os.path.basename(path), layers or nl, " (extrapolated)" if layers else "", trunk(1) / 1e6, head / 1e6,
        ", draft vocabulary %d" % dv if dv else "", ", first draft over the pending pairs" if pending else ""))
    print("| acceptance | N = 1 | N = 2 | N = 3 |")
    print("|---|---|---|---|")
    for a in (0.5, 0.6, 0.7, 0.8, 0.9):
        row = []
        for N in (1, 2, 3):
            tokens = (1 - a ** (N + 1)) / (1 - a)
            heads = N * head if not pending else first_head(N, a) + (N - 1) * head
            row.append("%.2fx" % (tokens * trunk(1) / (heads + trunk(N + 1))))
        print("| %.1f | %s |" % (a, " | ".join(row)))


sys.exit(main(sys.argv))
