#!/usr/bin/env bash
# bench/ab.sh - before/after speed of two q35 binaries on one model file, alternating.
#
#   bench/ab.sh BEFORE_Q35 AFTER_Q35 MODEL.gguf [PAIRS=5] [THREADS=2] [PROMPT=512] [GEN=128]
#
# Runs `q35 bench -r 1 --json` with both binaries, PAIRS times (each process does its own
# untimed warm-up), in ABBA order (odd pairs BEFORE first, even pairs AFTER first: the second
# process of a pair tends to run a few percent slower on these VMs), and prints every pair's
# prefill and decode tok/s, the per-pair ratios after/before and their medians. Alternating
# pairs cancel most of the drift of a shared, noisy machine; quote only runs where the load
# average stayed at the thread count (the benchmark's own threads) or below.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
before=$1 after=$2 model=$3 pairs=${4:-5} threads=${5:-2} np=${6:-512} ng=${7:-128}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$pairs"); do
  order="before after"
  [ $((i % 2)) = 0 ] && order="after before"
  for which in $order; do
    bin=$before
    [ "$which" = after ] && bin=$after
    line=$("$bin" bench -m "$model" -t "$threads" -p "$np" -n "$ng" -r 1 --json 2>/dev/null | tail -1)
    echo "$i $which $(cut -d' ' -f1 /proc/loadavg) $line" >>"$out"
  done
done
"$py" - "$out" <<'PY'
import json, statistics, sys
rows = {}
for ln in open(sys.argv[1]):
    i, which, load, js = ln.split(" ", 3)
    rows.setdefault(int(i), {})[which] = (json.loads(js), float(load))
print("pair  prefill before/after (tok/s)  ratio   decode before/after (tok/s)  ratio   load")
pr, dr = [], []
for i in sorted(rows):
    b, lb = rows[i]["before"]; a, la = rows[i]["after"]
    rp = a["prefill_tok_s"] / b["prefill_tok_s"]; rd = a["decode_tok_s"] / b["decode_tok_s"]
    pr.append(rp); dr.append(rd)
    print("%4d  %10.1f / %-10.1f        %.3f   %9.2f / %-9.2f         %.3f   %.2f %.2f" %
          (i, b["prefill_tok_s"], a["prefill_tok_s"], rp, b["decode_tok_s"], a["decode_tok_s"], rd, lb, la))
print("median after/before: prefill %.3f, decode %.3f" % (statistics.median(pr), statistics.median(dr)))
print(json.dumps({"pairs": len(pr), "prefill_ratio_median": statistics.median(pr),
                  "decode_ratio_median": statistics.median(dr)}))
PY
