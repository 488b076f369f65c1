#!/usr/bin/env bash
# q35 perplexity and q35 kld against an independent numpy reference (tests/tools/kld_ref.py,
# llama.cpp's perplexity.cpp formulas) fed with per-chunk logits dumped separately:
#   - q35's own logits (q35 logits --all per chunk): every statistic within 1e-5 relative
#     (q35 keeps log-probabilities as float32; the reference works in float64 throughout);
#   - llama.cpp's logits (tests/peer/llama_peer) of the same files: perplexity within 1e-5; for
#     a file whose experts llama.cpp quantized to q4_K (attention q8_0) the KLD summary within
#     the noise of the two engines' quantized-activation rounding (docs/PERPLEXITY.md):
#     mean_kld 1e-3 relative, top1_agree within 2 tokens, ...;
#   - a file against itself: mean/max KLD exactly 0, top1_agree exactly 1;
#   - --save-base / --base-logits, -f TEXT = --tokens of its ids = --tokens-bin;
#   - bad input: vocabulary mismatch, too few tokens, missing file, id out of range, a file that
#     is not a base file: a message naming the problem and a non-zero exit.
# The llama.cpp comparison is skipped (the rest runs) when the peer is not installed.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
PEER=$BUILD/tests/peer/llama_peer
REQ=$BUILD/tests/peer/ggml_requant
PY=/usr/bin/python3
REF=$SRC/tests/tools/kld_ref.py
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

V=2048
CTX=64
CHUNKS=4
SHAPE="--layers 4 --interval 4 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 256
  --shexp-ff 256 --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 64 --experts 4 --experts-used 2
  --vocab $V --seed 7"
have_peer=0
[ -f "$SRC/.peer/llama/bins/linux-x64/libllama.v0.5.0.so" ] && [ -x "$PEER" ] && [ -x "$REQ" ] && have_peer=1

# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/base.gguf" $SHAPE --type f32 >"$W/e.log" 2>&1 || { cat "$W/e.log"; exit 1; }
if [ $have_peer = 1 ]; then # blocks made by llama.cpp's quantizer
  "$REQ" "$W/base.gguf" "$W/quant.gguf" 'ffn_(gate|up|down)_exps=q4_K' 'attn_(q|k|v|output|qkv|gate)\.weight=q8_0' \
    -t 2 2>"$W/r.log" || { cat "$W/r.log"; exit 1; }
else # some other model of the same vocabulary
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/quant.gguf" $SHAPE --type q8_0 >"$W/e.log" 2>&1 || { cat "$W/e.log"; exit 1; }
fi
"$PY" -c "import numpy as np; r=np.random.default_rng(5); print(' '.join(map(str, r.integers(0, $V, 300))))" >"$W/toks.txt"
tr -s ' ' '\n' <"$W/toks.txt" | head -$((CHUNKS * CTX)) >"$W/fed.txt"

# dump ENGINE MODEL OUT: logits of every position of each chunk, each from an empty state
dump() {
  local eng=$1 model=$2 out=$3 c t
  : >"$out"
  for ((c = 0; c < CHUNKS; c++)); do
    t=$(sed -n "$((c * CTX + 1)),$((c * CTX + CTX))p" "$W/fed.txt" | paste -sd,)
    if [ "$eng" = q35 ]; then
      "$Q35" logits -m "$model" --tokens "$t" --all -t 2 --kv f32 -o "$W/x.bin" 2>"$W/x.log"
    else
      "$PEER" logits -m "$model" --tokens "$t" --all -t 1 --kv f32 --flash 0 -o "$W/x.bin" 2>"$W/x.log"
    fi || { fail "$eng logits $model: $(tail -2 "$W/x.log")"; return 1; }
    cat "$W/x.bin" >>"$out"
  done
}
ref() {
  if "$PY" "$REF" --vocab $V --ctx $CTX --tokens "$W/fed.txt" "$@" >"$W/ref.log"; then tail -1 "$W/ref.log"
  else fail "$(grep -v '^{' "$W/ref.log")"; fi
}
json() { "$PY" -c "import json,sys; print(json.loads(open('$1').read())['$2'])"; }

run() { # run NAME ARGS...: q35 ARGS > $W/NAME.json, stderr in $W/NAME.err
  local name=$1
  shift
  "$Q35" "$@" -t 2 >"$W/$name.json" 2>"$W/$name.err" || fail "q35 $*: $(tail -3 "$W/$name.err")"
}
run ppl perplexity -m "$W/base.gguf" --tokens "$W/toks.txt" --ctx $CTX
run kld kld -m "$W/base.gguf" -q "$W/quant.gguf" --tokens "$W/toks.txt" --ctx $CTX --save-base "$W/base.bin"
grep -q "Final estimate: PPL = " "$W/ppl.err" || fail "perplexity: no final estimate on stderr"
grep -q '^\[1\][0-9.]*,\[2\]' "$W/ppl.err" || fail "perplexity: no per-chunk running PPL on stderr"
grep -q "Same top p:" "$W/kld.err" || fail "kld: no summary on stderr"

# 1. the statistics, against numpy on q35's own logits
dump q35 "$W/base.gguf" "$W/qb.bin"
dump q35 "$W/quant.gguf" "$W/qq.bin"
ref --base "$W/qb.bin" --compare "$W/ppl.json" --rtol 1e-6 --label "perplexity (q35 logits)"
ref --base "$W/qb.bin" --quant "$W/qq.bin" --compare "$W/kld.json" --rtol 1e-5 --atol 1e-7 --label "kld (q35 logits)"
[ "$(json "$W/kld.json" tokens)" = $((CHUNKS * (CTX - 1 - CTX / 2))) ] || fail "kld: tokens is not chunks x (ctx/2 - 1)"

# 2. the same file twice: exactly zero
run self kld -m "$W/base.gguf" -q "$W/base.gguf" --tokens "$W/toks.txt" --ctx $CTX
for k in mean_kld max_kld rms_dp; do
  [ "$(json "$W/self.json" $k)" = 0 ] || fail "self kld: $k = $(json "$W/self.json" $k), not 0"
done
[ "$(json "$W/self.json" top1_agree)" = 1 ] || fail "self kld: top1_agree = $(json "$W/self.json" top1_agree)"

# 3. a saved base gives the same result; so do the other input forms
run reuse kld --base-logits "$W/base.bin" -q "$W/quant.gguf"
cmp -s "$W/kld.json" "$W/reuse.json" || fail "--base-logits: $(cat "$W/reuse.json") differs from the direct run"
"$PY" -c "import numpy as np; np.array(open('$W/toks.txt').read().split(), dtype='<i4').tofile('$W/toks.bin')"
run bin perplexity -m "$W/base.gguf" --tokens-bin "$W/toks.bin" --ctx $CTX
cmp -s "$W/ppl.json" "$W/bin.json" || fail "--tokens-bin differs from --tokens"
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 30) >"$W/text.txt"
"$Q35" tokenize -m "$W/base.gguf" --file "$W/text.txt" >"$W/text_ids.txt" 2>"$W/t.log" || fail "tokenize: $(cat "$W/t.log")"
run text perplexity -m "$W/base.gguf" -f "$W/text.txt" --ctx $CTX --chunks 2
run textids perplexity -m "$W/base.gguf" --tokens "$W/text_ids.txt" --ctx $CTX --chunks 2
cmp -s "$W/text.json" "$W/textids.json" || fail "-f TEXT differs from --tokens of its ids"
[ "$(json "$W/text.json" chunks)" = 2 ] || fail "--chunks 2 ran $(json "$W/text.json" chunks) chunks"

# 4. against llama.cpp's logits of the same files
if [ $have_peer = 1 ]; then
  dump llama "$W/base.gguf" "$W/lb.bin"
  dump llama "$W/quant.gguf" "$W/lq.bin"
  ref --base "$W/lb.bin" --compare "$W/ppl.json" --rtol 1e-5 --label "perplexity (llama.cpp logits)"
  n=$(json "$W/kld.json" tokens)
  # only what the engines' rounding noise leaves comparable (quantiles of the tails and the
  # small mean differences move with single positions)
  ref --base "$W/lb.bin" --quant "$W/lq.bin" --compare "$W/kld.json" --rtol 1e9 --atol 1e9 \
    --tol ppl_base=1e-5,0 --tol ppl_base_err=1e-5,0 --tol ppl_quant=2e-3,0 --tol ppl_quant_err=2e-3,0 \
    --tol mean_kld=1e-3,0 --tol mean_kld_err=2e-3,0 --tol max_kld=5e-3,0 --tol median_kld=1e-2,0 \
    --tol kld_p90=1e-2,0 --tol kld_p99=1e-2,0 --tol rms_dp=2e-2,0 --tol ln_ppl_ratio=0,3e-3 \
    --tol top1_agree=0,"$("$PY" -c "print(2.5 / $n)")" --label "kld (llama.cpp logits)"
else
  echo "note: llama.cpp peer not installed; the comparison with its logits is skipped"
fi

# 5. bad input
refuse() { # refuse "MESSAGE" ARGS...
  local msg=$1
  shift
  if "$Q35" "$@" >"$W/bad.out" 2>"$W/bad.err"; then fail "q35 $* succeeded"; return; fi
  grep -q -- "$msg" "$W/bad.err" || fail "q35 $*: expected '$msg', got: $(cat "$W/bad.err")"
  [ -s "$W/bad.out" ] && fail "q35 $*: printed on stdout after an error"
}
# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/v1024.gguf" ${SHAPE/--vocab $V/--vocab 1024} --type f32 >/dev/null 2>&1
refuse "vocabulary mismatch" kld -m "$W/base.gguf" -q "$W/v1024.gguf" --tokens "$W/toks.txt" --ctx $CTX
refuse "vocabulary mismatch" kld --base-logits "$W/base.bin" -q "$W/v1024.gguf"
refuse "at least 600 (2 x --ctx 300)" perplexity -m "$W/base.gguf" --tokens "$W/toks.txt" --ctx 300
refuse "at least 600 (2 x --ctx 300)" kld -m "$W/base.gguf" -q "$W/quant.gguf" --tokens "$W/toks.txt" --ctx 300
refuse "$W/nope.txt" perplexity -m "$W/base.gguf" --tokens "$W/nope.txt"
refuse "$W/nope.gguf" kld -m "$W/base.gguf" -q "$W/nope.gguf" --tokens "$W/toks.txt"
refuse "$W/nope.gguf" perplexity -m "$W/nope.gguf" --tokens "$W/toks.txt"
echo "5 9 2048 3" >"$W/big.txt"
refuse "id 2048, outside the model's vocabulary of 2048" perplexity -m "$W/base.gguf" --tokens "$W/big.txt" --ctx 3
echo "5 x 7" >"$W/junk.txt"
refuse "not a token id" perplexity -m "$W/base.gguf" --tokens "$W/junk.txt"
refuse "not a base file" kld --base-logits "$W/toks.txt" -q "$W/quant.gguf"
head -c 5000 "$W/base.bin" >"$W/trunc.bin"
refuse "truncated" kld --base-logits "$W/trunc.bin" -q "$W/quant.gguf"
refuse "-q QUANT.gguf is required" kld -m "$W/base.gguf" --tokens "$W/toks.txt"
refuse "give one of" perplexity -m "$W/base.gguf" --tokens "$W/toks.txt" -f "$W/text.txt"
refuse "--ctx must be at least 3" perplexity -m "$W/base.gguf" --tokens "$W/toks.txt" --ctx 2

[ $fails -eq 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
