#!/usr/bin/env bash
# test_server.sh - q35 serve against the official OpenAI client (tests/tools/server_test.mjs):
# chat and completions (streamed and not), seeds across requests and concurrency, usage,
# logprobs, prefix reuse (warm == cold), sessions, errors, limits and disconnects.
# Starts the server on a free loopback port with a generated model; always kills it.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
if ! command -v node >/dev/null || [ ! -d "$Q35_SRC/tests/node_modules/openai" ]; then
  echo "SKIP: node or the openai npm package is missing (run tools/setup-peers.sh)"
  exit 77
fi
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"$Q35" export --tiny-test -o "$tmp/tiny.gguf" >/dev/null 2>&1

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

CTX=512 MAX_BODY=65536 PARALLEL=4 MAX_QUEUE=2
start_server() {
  port=$(free_port)
  "$Q35" serve -m "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" --parallel $PARALLEL --ctx $CTX -t 2 \
    --max-sessions 2 --no-think --max-queue $MAX_QUEUE --max-body $MAX_BODY >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: the server did not become healthy"; cat "$tmp/server.log"; return 1
}
start_server

# usage errors of the command itself
if "$Q35" serve >/dev/null 2>&1; then echo "FAIL: serve without -m succeeded"; exit 1; fi
set +e
"$Q35" serve -m "$tmp/tiny.gguf" --port notaport >/dev/null 2>&1; rc=$?
set -e
[ $rc = 2 ] || { echo "FAIL: bad --port exit status $rc, want 2"; exit 1; }

rc=0
Q35_URL="http://127.0.0.1:$port" Q35_MODEL="$tmp/tiny.gguf" Q35_CTX=$CTX Q35_MAX_BODY=$MAX_BODY \
  Q35_PARALLEL=$PARALLEL Q35_MAX_QUEUE=$MAX_QUEUE NODE_PATH="$Q35_SRC/tests/node_modules" \
  node "$Q35_SRC/tests/tools/server_test.mjs" || rc=$?
if ! kill -0 "$pid" 2>/dev/null; then echo "FAIL: the server died"; cat "$tmp/server.log"; exit 1; fi
if [ $rc != 0 ]; then tail -n 30 "$tmp/server.log"; exit 1; fi
# a clean shutdown on SIGTERM
src=0; kill -TERM "$pid"; wait "$pid" || src=$?; pid=
[ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM"; exit 1; }
echo "PASS"
