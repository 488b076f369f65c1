#!/usr/bin/env bash
# bench/mtp_serve_bench.sh - q35 serve with speculation (the default: --draft 2, adaptive) against
# --draft 0 on one file, at 1 and 4 concurrent streams (issue 19: "at 4 streams never slower
# than without speculation").
#
#   bench/mtp_serve_bench.sh MODEL.gguf [ROUNDS=3] [STREAMS="1 4"] [TOKENS=64] [THREADS=1] [ON flags...]
#
# For each round and stream count the server is started once with --draft 0 and once with the ON
# flags (default: none, i.e. the defaults; e.g. `--draft-vocab 32768`), in ABBA order, and
# bench/server_bench.mjs runs one round of that many streamed completions (temperature 1,
# seeded) against it. Reported per stream count: the aggregate tok/s of the steady window (wall
# clock) and the generated tokens per CPU-second of the server process (its utime + stime from
# /proc: the work, which a loaded machine does not inflate the way it stretches the wall clock;
# with THREADS 1 no pool thread spins), per round and the median ratio; and the speculating
# server's drafts, acceptance and drafted rows from /metrics. PROMPT_IDS=1,2,3,... gives token-id
# prompts (on a --mtp-agree-vocab K file, ids below K keep the generation among them). WARMUP=0:
# no one-stream warm-up request before the measured round (by default server_bench.mjs sends one,
# TOKENS at one row, and the server's CPU time counts it: half the steps of a "4 streams" run
# are then one-row steps). Needs node.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
Q35=${Q35:-$here/../build/q35}
model=$1 rounds=${2:-3} streams=${3:-"1 4"} ntok=${4:-64} threads=${5:-1}
shift $(($# < 5 ? $# : 5))
on=("$@")
out=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$out"' EXIT
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
tck=$(getconf CLK_TCK)
serve() { # NAME STREAMS FLAGS...: start, bench, CPU time and metrics, stop
  local name=$1 s=$2
  shift 2
  "$Q35" serve -m "$model" --host 127.0.0.1 --port "$port" --parallel 4 --ctx 1024 -t "$threads" "$@" \
    >"$out/log_$name" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && break
    kill -0 $pid 2>/dev/null || { cat "$out/log_$name"; exit 1; }
    sleep 0.2
  done
  local c0 c1
  c0=$(awk '{print $14 + $15}' /proc/$pid/stat)
  echo "$(cut -d' ' -f1 /proc/loadavg)" >"$out/load_$name"
  Q35_URL="http://127.0.0.1:$port" BENCH_TOKENS=$ntok BENCH_STREAMS=$s BENCH_ROUNDS=1 BENCH_PROMPT_IDS=${PROMPT_IDS:-} BENCH_WARMUP=${WARMUP:-1} \
    node "$here/server_bench.mjs" 2>/dev/null | tail -1 >"$out/res_$name"
  c1=$(awk '{print $14 + $15}' /proc/$pid/stat)
  curl -s "http://127.0.0.1:$port/metrics" | grep '^q35_draft\|^q35_steps_total\|^q35_generated_tokens_total' >"$out/met_$name"
  echo "q35_cpu_s $(echo "($c1 - $c0) / $tck" | bc -l)" >>"$out/met_$name"
  kill $pid
  wait $pid 2>/dev/null || true
  pid=
}
for r in $(seq 1 "$rounds"); do
  for s in $streams; do
    if [ $((r % 2)) = 1 ]; then
      serve "off_${s}_$r" "$s" --draft 0
      serve "on_${s}_$r" "$s" "${on[@]}"
    else
      serve "on_${s}_$r" "$s" "${on[@]}"
      serve "off_${s}_$r" "$s" --draft 0
    fi
  done
done
/usr/bin/python3 - "$out" "$rounds" "$streams" <<'PY'
import json, statistics, sys, os
d, rounds, streams = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split()]
def met(name):
    return {k: float(v) for k, v in (l.split() for l in open(os.path.join(d, "met_" + name)) if l.strip())}
def wall(name):
    j = json.loads(open(os.path.join(d, "res_" + name)).read())
    return j["results"][0]["tok_s"]
print("| streams | tok/s (wall) without / with | tokens per CPU-s without / with | speed-up, CPU time (median) | speed-up, wall (median) | drafts, accepted, acceptance, rows drafted / steps | load |")
print("|---|---|---|---|---|---|---|")
f = lambda x: "-" if x is None else "%.1f" % x
for s in streams:
    wl, cp, cr, wr, dr, ld = [], [], [], [], [], []
    for r in range(1, rounds + 1):
        a, b = "off_%d_%d" % (s, r), "on_%d_%d" % (s, r)
        ma, mb = met(a), met(b)
        ca = ma["q35_generated_tokens_total"] / ma["q35_cpu_s"]
        cb = mb["q35_generated_tokens_total"] / mb["q35_cpu_s"]
        wa, wb = wall(a), wall(b)
        wl.append("%s / %s" % (f(wa), f(wb)))
        cp.append("%.1f / %.1f" % (ca, cb))
        cr.append(cb / ca)
        if wa and wb:
            wr.append(wb / wa)
        dr.append("%d, %d, %.2f, %d / %d" % (mb.get("q35_draft_tokens_total", 0), mb.get("q35_draft_accepted_tokens_total", 0),
                                            mb.get("q35_draft_acceptance", 0), mb.get("q35_draft_rows_total", 0), mb.get("q35_steps_total", 0)))
        ld.append(open(os.path.join(d, "load_" + a)).read().strip() + "/" + open(os.path.join(d, "load_" + b)).read().strip())
    print("| %d | %s | %s | %.3fx | %s | %s | %s |" % (s, ", ".join(wl), ", ".join(cp), statistics.median(cr),
          "%.3fx" % statistics.median(wr) if wr else "-", "; ".join(dr), ", ".join(ld)))
PY
