#!/usr/bin/env bash
# bench/mtp_serve_bench.sh - q35 serve with speculation (the default: --draft 2, adaptive) against
# --draft 0 on one file, aggregate decode tok/s at 1 and 4 concurrent streams (issue 19: "at 4
# streams never slower than without speculation").
#
#   bench/mtp_serve_bench.sh MODEL.gguf [ROUNDS=3] [STREAMS=1,4] [TOKENS=64] [THREADS=2] [ON flags...]
#
# Each round starts the server once with --draft 0 and once with the ON flags (default: none,
# i.e. the defaults; e.g. `--draft-vocab 32768`, `--draft 3 --draft-fixed`), in ABBA order, and
# runs bench/server_bench.mjs (one round of each stream count, streamed completions at
# temperature 1, seeded) against it; the speculating server's /metrics gives the acceptance and
# the drafts per decode row it chose. Prints per stream count the tok/s of both per round, the
# median ratio and the load average. Needs node.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
Q35=${Q35:-$here/../build/q35}
model=$1 rounds=${2:-3} streams=${3:-1,4} ntok=${4:-64} threads=${5:-2}
shift $(($# < 5 ? $# : 5))
on=("$@")
out=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$out"' EXIT
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
serve() { # NAME FLAGS...: start, bench, metrics, stop
  local name=$1
  shift
  "$Q35" serve -m "$model" --host 127.0.0.1 --port "$port" --parallel 4 --ctx 1024 -t "$threads" "$@" \
    >"$out/log_$name" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && break
    kill -0 $pid 2>/dev/null || { cat "$out/log_$name"; exit 1; }
    sleep 0.2
  done
  echo "$(cut -d' ' -f1 /proc/loadavg)" >"$out/load_$name"
  Q35_URL="http://127.0.0.1:$port" BENCH_TOKENS=$ntok BENCH_STREAMS=$streams BENCH_ROUNDS=1 \
    node "$here/server_bench.mjs" 2>/dev/null | tail -1 >"$out/res_$name"
  curl -s "http://127.0.0.1:$port/metrics" | grep '^q35_draft\|^q35_steps_total\|^q35_step_rows_total' >"$out/met_$name"
  kill $pid
  wait $pid 2>/dev/null || true
  pid=
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    serve "off_$r" --draft 0
    serve "on_$r" "${on[@]}"
  else
    serve "on_$r" "${on[@]}"
    serve "off_$r" --draft 0
  fi
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys, os
d, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for r in range(1, rounds + 1):
    for w in ("off", "on"):
        j = json.loads(open(os.path.join(d, "res_%s_%d" % (w, r))).read())
        for x in j["results"]:
            res.setdefault(x["streams"], {}).setdefault(r, {})[w] = x["tok_s"]
        met = dict(l.split() for l in open(os.path.join(d, "met_%s_%d" % (w, r))) if l.strip())
        if w == "on":
            print("round %d: speculating server: %s drafts, %s accepted (%.2f), %s rows drafted, %s steps, load %s/%s" % (
                r, met.get("q35_draft_tokens_total"), met.get("q35_draft_accepted_tokens_total"),
                float(met.get("q35_draft_acceptance", 0)), met.get("q35_draft_rows_total"), met.get("q35_steps_total"),
                open(os.path.join(d, "load_off_%d" % r)).read().strip(), open(os.path.join(d, "load_on_%d" % r)).read().strip()))
print("| streams | tok/s without / with (per round) | speed-up (median of per-round ratios) |")
print("|---|---|---|")
f = lambda x: "-" if x is None else "%.1f" % x
for s in sorted(res):
    pr = ["%s / %s" % (f(res[s][r]["off"]), f(res[s][r]["on"])) for r in sorted(res[s])]
    ok = [res[s][r]["on"] / res[s][r]["off"] for r in res[s] if res[s][r]["on"] and res[s][r]["off"]]
    print("| %d | %s | %s |" % (s, ", ".join(pr), "%.3fx" % statistics.median(ok) if ok else "-"))
PY
