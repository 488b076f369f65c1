#!/usr/bin/env bash
# test_cluster.sh - replicas behind HAProxy (issue 20 part A): deploy/haproxy.cfg passes
# `haproxy -c`, tools/cluster.sh's generated config for 3 replicas is deploy/haproxy.cfg itself,
# then 3 replicas (1 thread each) + HAProxy started by tools/cluster.sh take 24 concurrent
# session clients (tests/tools/cluster_load.mjs) while one replica is killed and another drained.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
if ! command -v haproxy >/dev/null; then echo "SKIP: haproxy is not installed"; exit 77; fi
if ! command -v node >/dev/null; then echo "SKIP: node is missing"; exit 77; fi
tmp=$(mktemp -d)
cleanup() { bash "$Q35_SRC/tools/cluster.sh" --stop "$tmp" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

haproxy -c -q -f "$Q35_SRC/deploy/haproxy.cfg" || { echo "FAIL: haproxy -c rejects deploy/haproxy.cfg"; exit 1; }
bash "$Q35_SRC/tools/cluster.sh" --config 3 | diff -u "$Q35_SRC/deploy/haproxy.cfg" - ||
  { echo "FAIL: tools/cluster.sh --config 3 differs from deploy/haproxy.cfg"; exit 1; }
if bash "$Q35_SRC/tools/cluster.sh" 0 --detach --dir "$tmp/bad" 2>"$tmp/err"; then
  echo "FAIL: cluster.sh accepted 0 replicas"; exit 1
fi
grep -q "replica count" "$tmp/err" || { echo "FAIL: no clear error for 0 replicas"; cat "$tmp/err"; exit 1; }

# four consecutive free loopback ports: the replicas' three, then the balancer's
base=$(node -e '
const net=require("net");
const free=(p)=>new Promise(r=>{const s=net.createServer();s.once("error",()=>r(false));s.listen(p,"127.0.0.1",()=>s.close(()=>r(true)))});
(async()=>{for(let b=20000+Math.floor(Math.random()*20000);b<60000;b+=7){let ok=true;for(let i=0;i<4&&ok;i++)ok=await free(b+i);if(ok){console.log(b);return}}process.exit(1)})()')
lb=$((base + 3))
"$Q35" export --tiny-test -o "$tmp/tiny.gguf" >/dev/null 2>&1
bash "$Q35_SRC/tools/cluster.sh" 3 --detach --dir "$tmp" -m "$tmp/tiny.gguf" --q35 "$Q35" --port "$lb" \
  --base-port "$base" -t 1 -- --no-think --ctx 2048 --parallel 4 --max-sessions 64 --drain-timeout 20 >"$tmp/cluster.out"
cat "$tmp/cluster.out"
if [ "${Q35_SANITIZE_RUN:-0}" = 1 ]; then CLIENTS=12 RUN_S=24 KILL=8 DRAIN=14 BMAX=-1 AFF=0.85; else CLIENTS=24 RUN_S=30 KILL=10 DRAIN=18 BMAX=6 AFF=0.95; fi
rc=0
Q35_URL="http://127.0.0.1:$lb" \
Q35_REPLICAS="r1=http://127.0.0.1:$base,r2=http://127.0.0.1:$((base + 1)),r3=http://127.0.0.1:$((base + 2))" \
Q35_PIDS="r1=$(cat "$tmp/r1.pid"),r2=$(cat "$tmp/r2.pid"),r3=$(cat "$tmp/r3.pid")" \
Q35_BOUNDED_MAX=$BMAX Q35_AFFINITY_MIN=$AFF Q35_CLIENTS=$CLIENTS Q35_RUN_S=$RUN_S Q35_KILL=r1 Q35_KILL_AT_S=$KILL Q35_DRAIN=r2 Q35_DRAIN_AT_S=$DRAIN \
  timeout 400 node "$Q35_SRC/tests/tools/cluster_load.mjs" || rc=$?
# the drained replica exits 0 by itself
r2=$(cat "$tmp/r2.pid")
for _ in $(seq 1 300); do kill -0 "$r2" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$r2" 2>/dev/null; then echo "FAIL: the drained replica r2 did not exit"; rc=1; fi
if ! grep -q "drain" "$tmp/r2.log"; then echo "FAIL: r2's log does not mention the drain"; tail -5 "$tmp/r2.log"; rc=1; fi
kill -0 "$(cat "$tmp/r3.pid")" 2>/dev/null || { echo "FAIL: replica r3 died"; tail -20 "$tmp/r3.log"; rc=1; }
if grep -qE 'runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer' "$tmp"/r*.log; then
  echo "FAIL: sanitizer report in a replica's log"; grep -h -A5 -E 'runtime error|Sanitizer' "$tmp"/r*.log | head -40; rc=1
fi
[ $rc = 0 ] && echo "PASS: test_cluster" || { echo "FAIL: test_cluster"; tail -5 "$tmp/haproxy.log"; }
exit $rc
