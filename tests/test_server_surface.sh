#!/usr/bin/env bash
# test_server_surface.sh - q35 serve's request surface with the official OpenAI client
# (tests/tools/server_surface.mjs): unknown and unsupported fields refused by name, tool_choice,
# legacy functions, logit_bias, echo/suffix/best_of, models/{id}, context_length_exceeded, a 413
# the client receives, distinct legacy logprobs, logprobs cut at a stop; every top-level field of
# the pinned client packages' request types documented and checked (server_fields.mjs); then the
# -v log lines.
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
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
CTX=1024 MAX_BODY=32768
"$Q35" serve -m "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" --ctx $CTX -t 2 --no-think --max-body $MAX_BODY -v \
  >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died"; cat "$tmp/server.log"; exit 1; }
  sleep 0.1
done
rc=0
Q35_URL="http://127.0.0.1:$port" Q35_MODEL="$tmp/tiny.gguf" Q35_CTX=$CTX Q35_MAX_BODY=$MAX_BODY \
  NODE_PATH="$Q35_SRC/tests/node_modules" node "$Q35_SRC/tests/tools/server_surface.mjs" || rc=$?
# every top-level field of the pinned openai / @anthropic-ai/sdk request types: documented in the
# README and refused by name when given a value no field takes (tests/tools/server_fields.mjs)
[ $rc != 0 ] || Q35_URL="http://127.0.0.1:$port" Q35_MODEL="$tmp/tiny.gguf" Q35_SRC="$Q35_SRC" \
  node "$Q35_SRC/tests/tools/server_fields.mjs" || rc=$?
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died"; cat "$tmp/server.log"; exit 1; }
[ $rc = 0 ] || { tail -n 30 "$tmp/server.log"; exit 1; }
# a body over --max-body sent whole before the answer is read (as Python's http.client, requests
# and many other clients do): the client must receive the 413, not EPIPE / a connection reset
python3 - "$port" <<'PY' || { echo "FAIL: oversized bodies"; tail -n 5 "$tmp/server.log"; exit 1; }
import http.client, json, sys
for size in (100_000, 20_000_000):
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
    body = b'{"prompt": "' + b"x" * size + b'"}'
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        status, err = r.status, json.loads(r.read())["error"]
    except OSError as e:
        sys.exit(f"a {size}-byte body: {type(e).__name__}: {e}")
    if status != 413 or err["code"] != "request_too_large":
        sys.exit(f"a {size}-byte body: {status} {err}")
PY
# the README against the server: every flag `q35 serve --help` names is documented there, and
# every endpoint the help lists is in the README and routed by the server (not "no endpoint")
fail=0
help=$("$Q35" serve --help)
for f in $(printf '%s\n' "$help" | grep -oE -- '(^|[ ,(])--[a-z][a-z0-9-]*' | sed 's/^[ ,(]//' | sort -u); do
  grep -q -- "\`$f\b" "$Q35_SRC/README.md" || { echo "FAIL: README.md does not document q35 serve $f"; fail=1; }
done
eps=$(printf '%s\n' "$help" | sed -n '/^Endpoints:/,$p' | sed 's#\[/ID\]##g' | grep -oE '(GET|POST|DELETE)(\|[A-Z]+)? /[A-Za-z0-9_/.-]*')
[ "$(printf '%s\n' "$eps" | wc -l)" -ge 12 ] || { echo "FAIL: the help lists too few endpoints: $eps"; fail=1; }
while read -r methods p; do
  doc=$(printf '%s' "$p" | sed 's#/ID#/{id}#g')
  grep -qF -- "$doc" "$Q35_SRC/README.md" || { echo "FAIL: README.md does not document $methods $doc"; fail=1; }
  for m in ${methods//|/ }; do
    body=$(curl -s -X "$m" -H 'content-type: application/json' -d '{}' "http://127.0.0.1:$port${p//\/ID//x}")
    case $body in *'"no endpoint'*) echo "FAIL: $m $p is in the help but not routed: $body"; fail=1 ;; esac
  done
done <<<"$eps"
[ $fail = 0 ] || exit 1
# -v: one line per request with the status and latency, the tokens of a completion, the reason of a 4xx
grep -Eq '^q35 serve: POST /v1/completions -> 200 in [0-9.]+ ms prompt [0-9]+ completion [0-9]+ tokens$' "$tmp/server.log" ||
  { echo "FAIL: -v logs no completion line with tokens"; fail=1; }
grep -Eq "^q35 serve: POST /v1/chat/completions -> 400 in [0-9.]+ ms: unknown field 'frobnicate'" "$tmp/server.log" ||
  { echo "FAIL: -v logs no 4xx reason"; fail=1; }
grep -Eq '^q35 serve: POST /v1/completions -> 413 in ' "$tmp/server.log" || { echo "FAIL: -v logs no 413"; fail=1; }
[ $fail = 0 ] || { grep 'q35 serve: ' "$tmp/server.log" | tail -n 20; exit 1; }
# a clean shutdown (under the sanitizers: no leak, no error report)
src=0; kill -TERM "$pid"; wait "$pid" || src=$?; pid=
[ $src = 0 ] || { echo "FAIL: server exit status $src after SIGTERM"; grep -A20 Sanitizer "$tmp/server.log" | head -40; exit 1; }
echo "PASS"
