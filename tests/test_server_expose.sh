#!/usr/bin/env bash
# test_server_expose.sh - q35 serve exposed (tests/tools/server_expose.mjs): API keys from flags
# and a file, HTTPS with a certificate made here by openssl and trusted through
# NODE_EXTRA_CA_CERTS, CORS for a page origin, and a real browser (chromium through
# playwright-core) fetching from another origin; then --metrics-open and bad flag values.
set -euo pipefail
: "${Q35:?}" "${Q35_SRC:?}"
if ! command -v node >/dev/null || [ ! -d "$Q35_SRC/tests/node_modules/openai" ] || ! command -v openssl >/dev/null; then
  echo "SKIP: node, the openai npm package or openssl is missing (run tools/setup.sh)"
  exit 77
fi
tmp=$(mktemp -d)
pid=
stop_server() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
clean_stop() { # SIGTERM: exit status 0 (under the sanitizers: no leak, no error report)
  local st=0; kill -TERM "$pid"; wait "$pid" || st=$?; pid=
  [ $st = 0 ] || { echo "FAIL: server exit status $st after SIGTERM"; grep -A20 Sanitizer "$tmp/server.log" | head -40; exit 1; }
}
cleanup() { stop_server; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
"$Q35" export --tiny-test -o "$tmp/tiny.gguf" >/dev/null 2>&1
free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
wait_healthy() { # URL [curl flags]
  for _ in $(seq 1 200); do
    [ "$(curl -s "${@:2}" -o /dev/null -w '%{http_code}' "$1/health" || true)" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: the server did not become healthy"; cat "$tmp/server.log"; exit 1
}
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 2 -subj /CN=127.0.0.1 \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" >/dev/null 2>&1
printf '# keys\n\nsk-from-file\n' >"$tmp/keys"
port=$(free_port); page_port=$(free_port); other_port=$(free_port)
origin="http://127.0.0.1:$page_port"
"$Q35" serve -m "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" --ctx 256 -t 2 --api-key sk-flag \
  --api-key-file "$tmp/keys" --ssl-key-file "$tmp/key.pem" --ssl-cert-file "$tmp/cert.pem" --cors "$origin" \
  >"$tmp/server.log" 2>&1 &
pid=$!
wait_healthy "https://127.0.0.1:$port" --cacert "$tmp/cert.pem"
# plain HTTP to the HTTPS port gets nothing served
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
[ "$code" != 200 ] || { echo "FAIL: plain HTTP served on the HTTPS port"; exit 1; }
chromium=$(command -v chromium || true)
rc=0
Q35_URL="https://127.0.0.1:$port" Q35_MODEL="$tmp/tiny.gguf" Q35_KEYS=sk-flag,sk-from-file Q35_ORIGIN="$origin" \
  Q35_PAGE_PORT=$page_port Q35_OTHER_PORT=$other_port Q35_CHROMIUM="$chromium" NODE_EXTRA_CA_CERTS="$tmp/cert.pem" \
  node "$Q35_SRC/tests/tools/server_expose.mjs" || rc=$?
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died"; cat "$tmp/server.log"; exit 1; }
[ $rc = 0 ] || { tail -n 30 "$tmp/server.log"; exit 1; }
clean_stop
# --metrics-open: /metrics without a key, the API still closed; --cors '*'
port=$(free_port)
"$Q35" serve -m "$tmp/tiny.gguf" --host 127.0.0.1 --port "$port" --ctx 256 -t 2 --api-key k --metrics-open --cors '*' \
  >"$tmp/server.log" 2>&1 &
pid=$!
wait_healthy "http://127.0.0.1:$port"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics")" = 200 ] || { echo "FAIL: --metrics-open"; exit 1; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")" = 401 ] || { echo "FAIL: models open"; exit 1; }
curl -s -D - -o /dev/null -H 'Origin: http://any.example' "http://127.0.0.1:$port/health" | grep -qi '^access-control-allow-origin: \*' ||
  { echo "FAIL: --cors '*' sets no header"; exit 1; }
clean_stop
# bad values: each a clear message and a non-zero exit, before any model is loaded
expect_fail() { # WHAT PATTERN ARGS...
  local what=$1 pat=$2; shift 2
  set +e; "$Q35" serve -m "$tmp/tiny.gguf" --port "$(free_port)" "$@" >"$tmp/out" 2>&1; local st=$?; set -e
  [ $st != 0 ] && grep -q -- "$pat" "$tmp/out" || { echo "FAIL: $what (exit $st)"; cat "$tmp/out"; exit 1; }
}
expect_fail "missing key file" "api-key-file" --api-key-file "$tmp/nope"
printf '# only a comment\n' >"$tmp/empty"
expect_fail "key file without keys" "holds no key" --api-key-file "$tmp/empty"
expect_fail "key without cert" "ssl-cert-file" --ssl-key-file "$tmp/key.pem"
expect_fail "empty --api-key" "must not be empty" --api-key ""
expect_fail "a certificate that is not PEM" "cannot listen" --ssl-key-file "$tmp/keys" --ssl-cert-file "$tmp/keys"
echo "PASS"
