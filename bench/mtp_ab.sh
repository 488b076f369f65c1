#!/usr/bin/env bash
# bench/mtp_ab.sh - before/after of two q35 binaries at one draft length, alternating (issue 19).
#
#   bench/mtp_ab.sh BEFORE_Q35 AFTER_Q35 MODEL.gguf [PAIRS=3] [THREADS=1] [GEN=64] [DRAFT=0] [EXTRA run flags...]
#
# Each pair runs `q35 run --tokens 1..8 -n GEN --print-ids --temperature 0 -t THREADS --draft DRAFT
# EXTRA` (as bench/mtp_bench.sh) with both binaries in ABBA order (odd pairs BEFORE first) and
# prints per pair the tokens per CPU-second of the decode (stats line: (generated_tokens - 1) /
# decode_cpu_s) of each, the load average, and the median of the per-pair ratios after / before.
# Both outputs must be identical (a change that moves a token is a bug, not a speed-up).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
before=$1 after=$2 model=$3 pairs=${4:-3} threads=${5:-1} ng=${6:-64} draft=${7:-0}
shift $(($# < 7 ? $# : 7))
extra=("$@")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rate() { # OUT.err: tokens per CPU-second of the decode from the stats line
  grep '^{' "$1" | tail -1 | /usr/bin/python3 -c 'import json,sys; x=json.load(sys.stdin); print("%.2f" % ((x["generated_tokens"]-1)/x["decode_cpu_s"]))'
}
ratios=()
for i in $(seq 1 "$pairs"); do
  order="before after"
  [ $((i % 2)) = 0 ] && order="after before"
  for which in $order; do
    bin=$before
    [ "$which" = after ] && bin=$after
    "$bin" run -m "$model" --tokens 1,2,3,4,5,6,7,8 -n "$ng" --print-ids --temperature 0 -t "$threads" \
      --draft "$draft" "${extra[@]}" >"$out/$which" 2>"$out/$which.err"
    eval "r_$which=\$(rate \"\$out/\$which.err\")"
  done
  cmp -s "$out/before" "$out/after" || { echo "OUTPUTS DIFFER (pair $i)" >&2; exit 1; }
  ratio=$(/usr/bin/python3 -c "print('%.3f' % ($r_after / $r_before))")
  ratios+=("$ratio")
  echo "pair $i ($order): before $r_before, after $r_after tok per CPU-s, after/before $ratio, load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "draft $draft ${extra[*]}: median after/before $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}') over $pairs pairs"
