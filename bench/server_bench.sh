#!/usr/bin/env bash
# server_bench.sh - aggregate decode tokens/s of q35 serve with 1, 2, 4 and 8 concurrent
# streams on a 35B-A3B-shaped generated model (4 layers, q4_0), and the ratio to one stream.
# Target (issue 6): 4 streams >= 2x the single-stream aggregate.
# Usage: bench/server_bench.sh [Q35_BINARY]   env: Q35_BENCH_CACHE (model cache dir),
#        BENCH_TOKENS (tokens per stream, default 32), BENCH_STREAMS (default 1,2,4,8), THREADS.
# The model (~2.5 GB) is generated once into the cache dir. Not part of ctest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
Q35=${1:-${Q35:-$here/../build/q35}}
cache=${Q35_BENCH_CACHE:-$HOME/.cache/q35-bench}
mkdir -p "$cache"
model=$cache/a3b-shaped-4l-q4_0.gguf
if [ ! -s "$model" ]; then
  echo "generating $model (once)..." >&2
  "$Q35" export --tiny-test --embd 2048 --heads 16 --kv-heads 2 --head-dim 256 --rot 64 --ssm-k-heads 16 \
    --ssm-v-heads 32 --ssm-head-dim 128 --experts 256 --experts-used 8 --ff 512 --shexp-ff 512 --vocab 248320 \
    --layers 4 --type q4_0 -o "$model.tmp" >&2
  mv "$model.tmp" "$model"
fi
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
log=$(mktemp)
"$Q35" serve -m "$model" --host 127.0.0.1 --port "$port" --parallel 8 --ctx 1024 ${THREADS:+-t $THREADS} >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
grep -m1 "ready" "$log" >&2 || true
Q35_URL="http://127.0.0.1:$port" node "$here/server_bench.mjs"
