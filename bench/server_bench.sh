#!/usr/bin/env bash
# server_bench.sh - aggregate decode tokens/s of q35 serve with 1, 2, 4 and 8 concurrent
# streams on a 35B-A3B-shaped generated model (4 layers, q4_0): the ratio to one stream, and to
# llama.cpp's library decoding the same number of sequences in one llama_decode per step
# (tests/peer/llama_peer parallel). Target (issue 6): 4 streams >= 2x the single-stream aggregate.
#
# Usage: bench/server_bench.sh [Q35_BINARY]
#   env: Q35_BENCH_CACHE (model cache dir), BENCH_TOKENS (tokens per stream, default 32),
#        BENCH_STREAMS (default 1,2,4,8), BENCH_ROUNDS (default 3), THREADS (default: all cores),
#        LLAMA_PEER (llama_peer binary; default: next to the q35 binary's tests/peer; "none" skips
#        the llama.cpp side), LLAMA_LOAD_MODE (default 1 = mmap).
# The server and llama.cpp run one after the other, never together. The model (~2.5 GB) is
# generated once into the cache dir. Not part of ctest. The machine is shared and noisy: read
# the ratios (same rounds), not the absolute figures.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
Q35=${1:-${Q35:-$here/../build/q35}}
cache=${Q35_BENCH_CACHE:-$HOME/.cache/q35-bench}
mkdir -p "$cache"
model=$cache/a3b-L4-q4_0.gguf # the name bench/run.sh uses
[ -s "$model" ] || [ ! -s "$cache/a3b-shaped-4l-q4_0.gguf" ] || model=$cache/a3b-shaped-4l-q4_0.gguf
if [ ! -s "$model" ]; then
  echo "generating $model (once)..." >&2
  "$Q35" export --tiny-test --embd 2048 --heads 16 --kv-heads 2 --head-dim 256 --rot 64 --ssm-k-heads 16 \
    --ssm-v-heads 32 --ssm-head-dim 128 --experts 256 --experts-used 8 --ff 512 --shexp-ff 512 --vocab 248320 \
    --layers 4 --type q4_0 -o "$model.tmp" >&2
  mv "$model.tmp" "$model"
fi
threads=${THREADS:-$(nproc)}
streams=${BENCH_STREAMS:-1,2,4,8}
ntok=${BENCH_TOKENS:-32}
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
log=$(mktemp)
out=$(mktemp)
# SERVE_ARGS: extra flags for q35 serve (default --no-mmap, the faster load mode here; see bench/README.md)
"$Q35" serve -m "$model" --host 127.0.0.1 --port "$port" --parallel 8 --ctx 1024 -t "$threads" ${SERVE_ARGS---no-mmap} >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log" "$out"' EXIT
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
grep -m1 "ready" "$log" >&2 || true
echo "== q35 serve, $threads threads, $ntok tokens per stream" >&2
Q35_URL="http://127.0.0.1:$port" node "$here/server_bench.mjs" | tee "$out"
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true

peer=${LLAMA_PEER:-$(dirname "$Q35")/tests/peer/llama_peer}
[ "$peer" = none ] && exit 0
if [ ! -x "$peer" ]; then
  echo "server_bench: no llama_peer at $peer (build the llama_peer target, or LLAMA_PEER=none)" >&2
  exit 0
fi
echo "== llama.cpp library, $threads threads: N sequences, one llama_decode per step" >&2
"$peer" parallel -m "$model" --seqs "$streams" -p 10 -n "$ntok" -r "${BENCH_ROUNDS:-3}" -t "$threads" --kv f16 \
  --flash -1 --load-mode "${LLAMA_LOAD_MODE:-1}" --json | tee -a "$out"
node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l.startsWith("{"));
const q = lines.map(JSON.parse).find((o) => o.bench === "server_decode");
const l = lines.map(JSON.parse).filter((o) => o.engine === "llama.cpp");
const l1 = l.find((o) => o.seqs === 1);
const rows = q.results.map((r) => {
  const p = l.find((o) => o.seqs === r.streams);
  return { streams: r.streams, q35_tok_s: r.tok_s, q35_x_single: r.ratio, llama_tok_s: p ? p.decode_tok_s : null,
    llama_x_single: p && l1 ? p.decode_tok_s / l1.decode_tok_s : null, q35_vs_llama: p ? r.tok_s / p.decode_tok_s : null };
});
for (const r of rows)
  console.log(`streams ${r.streams}: q35 serve ${r.q35_tok_s.toFixed(2)} tok/s (${r.q35_x_single.toFixed(2)}x single), ` +
    `llama.cpp ${r.llama_tok_s === null ? "-" : r.llama_tok_s.toFixed(2)} tok/s (${r.llama_x_single === null ? "-" : r.llama_x_single.toFixed(2)}x single), ` +
    `q35/llama.cpp ${r.q35_vs_llama === null ? "-" : r.q35_vs_llama.toFixed(2)}`);
console.log(JSON.stringify({ bench: "server_vs_llama", results: rows }));
' "$out"
