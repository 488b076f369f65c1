#!/usr/bin/env bash
# bench/mtp_bench.sh - speculative decoding with the MTP head (issue 19), measured against the
# bytes-per-step model: `q35 run --draft N` against `--draft 0` on one file, alternating.
#
#   bench/mtp_bench.sh MODEL.gguf [PAIRS=3] [THREADS=1] [GEN=128] [DRAFTS="1 2 3"] [EXTRA run flags...]
#
# Each pair runs `q35 run --tokens 1..8 -n GEN --print-ids --temperature 0 -t THREADS` with
# --draft 0 and with --draft N (+ EXTRA, e.g. --draft-vocab 32768 or --draft-adapt), in ABBA order
# (odd pairs without drafts first), and reads decode tok/s, the decode's CPU seconds, drafts and
# accepted drafts from the stats line. Per N: the median of the per-pair ratios of wall-clock
# tok/s and of tokens per CPU-second (the work a token took: on a loaded machine the wall clock
# also counts other processes; with THREADS 1 no pool thread spins), the acceptance (accepted / drafted), the
# tokens per round E = generated / rounds, and the prediction of bench/mtp_bytes.py for rounds of
# N drafts emitting E tokens (with --draft-vocab K taken from EXTRA); every output is checked
# identical to --draft 0. The load average is printed beside each pair: this machine is shared,
# quote ratios only from one sitting and say the load.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
Q35=${Q35:-$here/../build/q35}
model=$1 pairs=${2:-3} threads=${3:-1} ng=${4:-128} drafts=${5:-"1 2 3"}
shift $(($# < 5 ? $# : 5))
extra=("$@")
dv=0
for ((i = 0; i < ${#extra[@]}; i++)); do
  case "${extra[$i]}" in --draft-vocab | --draft_vocab) dv=${extra[$((i + 1))]} ;; esac
done
py=/usr/bin/python3
[ -x "$py" ] || py=python3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # N OUTFILE: one run, the stats line into OUTFILE.stats
  local n=$1 f=$2 args=()
  [ "$n" != 0 ] && args=(--draft "$n" "${extra[@]}")
  "$Q35" run -m "$model" --tokens 1,2,3,4,5,6,7,8 -n "$ng" --print-ids --temperature 0 -t "$threads" \
    "${args[@]}" >"$f" 2>"$f.err"
  grep '^{' "$f.err" | tail -1 >"$f.stats"
}
echo "model $model, $threads threads, $ng tokens, extra: ${extra[*]:-none}" >&2
for n in $drafts; do
  for i in $(seq 1 "$pairs"); do
    order="0 $n"
    [ $((i % 2)) = 0 ] && order="$n 0"
    for d in $order; do
      run "$d" "$out/r_${n}_${i}_$d"
      echo "$n $i $d $(cut -d' ' -f1 /proc/loadavg) $(cat "$out/r_${n}_${i}_$d.stats")" >>"$out/all"
      cmp -s "$out/r_${n}_${i}_$d" "$out/r_${n}_1_0" || { echo "OUTPUT DIFFERS: --draft $d, pair $i" >&2; exit 1; }
    done
  done
done
"$py" - "$out/all" "$model" "$dv" "$here" <<'PY'
import json, statistics, subprocess, sys
rows = {}
for ln in open(sys.argv[1]):
    n, i, d, load, js = ln.split(" ", 4)
    rows.setdefault(int(n), {}).setdefault(int(i), {})[int(d)] = (json.loads(js), float(load))
model, dv, here = sys.argv[2], int(sys.argv[3]), sys.argv[4]
print("| drafts | acceptance | tokens / round | tok per CPU-s without / with (per pair) | speed-up, CPU time (median) | speed-up, wall clock (median) | predicted | CPU-time speed-up / predicted | load |")
print("|---|---|---|---|---|---|---|---|---|")
cpu_rate = lambda x: (x["generated_tokens"] - 1) / x["decode_cpu_s"] if x.get("decode_cpu_s") else float("nan")
for n in sorted(rows):
    ratios, cratios, pairs, loads, acc, ems = [], [], [], [], [], []
    for i in sorted(rows[n]):
        b, lb = rows[n][i][0]; a, la = rows[n][i][n]
        ratios.append(a["decode_tok_s"] / b["decode_tok_s"])
        cratios.append(cpu_rate(a) / cpu_rate(b))
        pairs.append("%.1f / %.1f" % (cpu_rate(b), cpu_rate(a)))
        loads.append(max(lb, la))
        d, k = a["draft_tokens"], a["draft_accepted"]
        acc.append(k / d if d else 0.0)
        rounds = d / n if n else 0
        ems.append((a["generated_tokens"] - 1) / rounds if rounds else 1.0)
    e = statistics.median(ems)
    cmd = ["/usr/bin/python3", here + "/mtp_bytes.py", model, "--predict", "%d:%f" % (n, e)]
    if dv:
        cmd += ["--draft-vocab", str(dv)]
    pred = float(subprocess.check_output(cmd).decode().split()[0])
    m, c = statistics.median(ratios), statistics.median(cratios)
    print("| %d | %.2f | %.2f | %s | %.3fx | %.3fx | %.3fx | %.2f | %.1f-%.1f |" % (
        n, statistics.median(acc), e, ", ".join(pairs), c, m, pred, c / pred, min(loads), max(loads)))
PY
