#!/usr/bin/env bash
# bench/mtp_profile.sh - where a round of drafts goes, by function, against a plain decode step (issue 19).
#
#   bench/mtp_profile.sh MODEL.gguf [DRAFTS=2] [RUNS=3] [GEN=128]
#
# Runs `q35 run --tokens 1..8 -n GEN --print-ids --temperature 0 -t 1` under `perf record -e cpu-clock
# -F 999 --call-graph dwarf,16384`, without drafts and with --draft DRAFTS --draft-vocab 32768, RUNS
# of each in the order 0 N N 0 0 N ..., buckets each run's decode samples by their stacks
# (bench/mtp_buckets.py; per decode step, or per round = generated - 1 - accepted drafts) and prints
# the mean of each side with the bytes model's charge and the excess per bucket (bench/mtp_attr.py).
# Outputs must be identical. Env Q35 (default build/q35), OUT (default a temporary folder, removed).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
Q35=${Q35:-$here/../build/q35}
model=$1 n=${2:-2} runs=${3:-3} ng=${4:-128}
out=${OUT:-}
[ -n "$out" ] || { out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; }
mkdir -p "$out"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
one() { # DRAFT TAG
  local d=$1 tag=$2 args=()
  [ "$d" != 0 ] && args=(--draft "$d" --draft-vocab 32768)
  perf record -q -e cpu-clock -F 999 --call-graph dwarf,16384 -o "$out/$tag.data" -- "$Q35" run -m "$model" \
    --tokens 1,2,3,4,5,6,7,8 -n "$ng" --print-ids --temperature 0 -t 1 "${args[@]}" >"$out/$tag.out" 2>"$out/$tag.err"
  grep '^{' "$out/$tag.err" | tail -1 >"$out/$tag.stats"
  cmp -s "$out/$tag.out" "$out/p1.out" || { echo "OUTPUT DIFFERS: $tag" >&2; exit 1; }
  perf script -i "$out/$tag.data" -F comm,tid,time,period,event,ip,sym --no-inline 2>/dev/null >"$out/$tag.txt"
  read -r dec units <<<"$("$py" -c "import json; x=json.load(open('$out/$tag.stats')); print(x['decode_cpu_s'], x['generated_tokens'] - 1 - x['draft_accepted'])")"
  "$py" "$here/mtp_buckets.py" "$out/$tag.txt" "$dec" "$units" >"$out/$tag.buckets"
  rm -f "$out/$tag.data" "$out/$tag.txt"
  echo "$tag: $(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg), $(cat "$out/$tag.stats")" >&2
}
p=() d=()
for i in $(seq 1 "$runs"); do
  order="p d"
  [ $((i % 2)) = 0 ] && order="d p"
  for w in $order; do
    if [ "$w" = p ]; then one 0 "p$i"; p+=("$out/p$i.buckets"); else one "$n" "d$i"; d+=("$out/d$i.buckets"); fi
  done
done
e=$("$py" -c "
import json, statistics
xs = [json.load(open('$out/d%d.stats' % i)) for i in range(1, $runs + 1)]
print(statistics.median((x['generated_tokens'] - 1) / (x['generated_tokens'] - 1 - x['draft_accepted']) for x in xs))")
"$py" "$here/mtp_attr.py" "$model" "$(IFS=,; echo "${p[*]}")" "$(IFS=,; echo "${d[*]}")" "$n" "$e"
