#!/usr/bin/env bash
# test_server_load.sh - load and fault test of q35 serve (issue 8 part 3), driven by
# tests/tools/server_load.mjs: >= 32 concurrent loopback clients for two identical bounded rounds
# mixing streamed/plain, chat/completions, seeded/unseeded, short/long prompts, named sessions, slow
# readers, mid-stream disconnects and malformed/wrong-type/out-of-range/oversized requests.
# Pass: the server stays alive and healthy, no request hangs, valid requests are 200 with the right
# shape and seeded ones equal their solo run, invalid ones are 4xx, and peak RSS (VmHWM) after the
# second round is within the noise margin of the first. Q35_SANITIZE_RUN=1 shrinks the load.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
if ! command -v node >/dev/null || [ ! -d "$Q35_SRC/tests/node_modules/openai" ]; then
  echo "SKIP: node is missing (run tools/setup-peers.sh)"
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

CTX=512 MAX_BODY=65536 PARALLEL=4 MAX_QUEUE=128
if [ "${Q35_SANITIZE_RUN:-0}" = 1 ]; then
  # ASan's quarantine holds freed memory, so peak RSS is noisier; the leak checker covers leaks there
  CLIENTS=32 ROUND_S=6 MARGIN_PCT=25 MARGIN_MB=128
else
  CLIENTS=40 ROUND_S=16 MARGIN_PCT=10 MARGIN_MB=20
fi

port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
"$Q35" serve -m "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" --parallel $PARALLEL --ctx $CTX -t 2 \
  --max-sessions 16 --no-think --max-queue $MAX_QUEUE --max-body $MAX_BODY >"$tmp/server.log" 2>&1 &
pid=$!
healthy=0
for _ in $(seq 1 300); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  if [ "$code" = 200 ]; then healthy=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ $healthy != 1 ]; then echo "FAIL: the server did not become healthy"; cat "$tmp/server.log"; exit 1; fi

rc=0
Q35_URL="http://127.0.0.1:$port" Q35_PID=$pid Q35_MODEL_ID=tiny.gguf Q35_CTX=$CTX Q35_MAX_BODY=$MAX_BODY \
  Q35_CLIENTS=$CLIENTS Q35_ROUND_S=$ROUND_S Q35_REQ_TIMEOUT_S=60 Q35_RSS_MARGIN_PCT=$MARGIN_PCT \
  Q35_RSS_MARGIN_MB=$MARGIN_MB NODE_PATH="$Q35_SRC/tests/node_modules" \
  timeout 240 node "$Q35_SRC/tests/tools/server_load.mjs" || rc=$?
if ! kill -0 "$pid" 2>/dev/null; then
  echo "FAIL: the server died under load"; tail -n 40 "$tmp/server.log"; exit 1
fi
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
if [ "$code" != 200 ]; then echo "FAIL: /health answers '$code' after the load"; exit 1; fi
if [ $rc != 0 ]; then echo "FAIL: server_load.mjs exit status $rc"; tail -n 30 "$tmp/server.log"; exit 1; fi
# a clean shutdown on SIGTERM after the load
src=0; kill -TERM "$pid"; wait "$pid" || src=$?; pid=
[ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM"; tail -n 40 "$tmp/server.log"; exit 1; }
if grep -qE 'runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer' "$tmp/server.log"; then
  echo "FAIL: sanitizer report in the server log"; grep -m3 -A8 -E 'runtime error|ERROR: ' "$tmp/server.log"; exit 1
fi
echo "PASS"
