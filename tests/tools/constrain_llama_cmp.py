#!/usr/bin/env python3
"""constrain_llama_cmp.py Q35_DUMP LLAMA_OUT - compare q35's GBNF masks (q35 schema-check
--dump-masks) with llama.cpp's grammar sampler (tests/peer/grammar_peer) step by step.

Compared: the normal tokens (the q35 dump's first line lists the others) that llama.cpp does
not count as end of generation. Known, reported apart: tokens whose bytes strict UTF-8
refuses (the dump's second line: NUL, C0, C1, F5..FF, overlong or surrogate forms), which
llama.cpp's lax decoder may take. End of generation: q35 allows <|im_end|> exactly where
llama.cpp allows it. Exit 1 on any other difference."""
import sys


def ranges(line):
    out = set()
    for part in line.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def main():
    q = open(sys.argv[1]).read().split("\n")
    l = open(sys.argv[2]).read().split("\n")
    special, suspect = ranges(q[0]), ranges(q[1])
    llama_eog = ranges(l[0][4:])
    steps = [(ranges(q[i]), q[i + 1] == "eog 1") for i in range(2, len(q) - 1, 2)]
    im_end = 151645
    bad = known = 0
    for k, (qa, q_eog) in enumerate(steps):
        la_all = ranges(l[k + 1])
        la = la_all - special - llama_eog
        qn = qa - llama_eog
        diff = (la ^ qn)
        kn = diff & suspect
        known += len(kn)
        rest = sorted(diff - suspect)
        if rest or q_eog != (im_end in la_all):
            bad += 1
            print(f"step {k}: {len(rest)} differ (first {rest[:10]}; q35 has {len(qn)}, llama {len(la)}), "
                  f"eog q35 {q_eog} llama {im_end in la_all}")
    print(f"{len(steps)} steps compared, {bad} differ, {known} known UTF-8 differences")
    return 1 if bad else 0


sys.exit(main())
