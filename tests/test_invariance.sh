#!/usr/bin/env bash
# q35 logits must be bit-identical (cmp) for the same prompt however it is computed: in one
# chunk or in chunks of 1, 3 and 7 tokens, and with 1 or 2 threads; for every KV cache type
# (f32, f16, q8_0), on a MoE (qwen35moe) and a dense (qwen35) tiny model, every position (--all);
# and with the load-time repack of Q4_0 weights on and off.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
PY=/usr/bin/python3

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Transitional: until `q35 export --tiny-test` exists there is nothing to test.
if "$Q35" export --tiny-test -o "$W/probe.gguf" >"$W/probe.log" 2>&1; then :; else
  if grep -q "not implemented" "$W/probe.log"; then
    echo "skipped: q35 export --tiny-test is not implemented yet"
    exit 0
  fi
fi

VOCAB=512
TOKS=$("$PY" -c "import numpy as np; r=np.random.default_rng(7); print(','.join(map(str, r.integers(0, $VOCAB, 23))))")

check() { # NAME EXPORT-OPTIONS...
  local name=$1
  shift
  local m=$W/$name.gguf
  if ! "$Q35" export --tiny-test -o "$m" --vocab $VOCAB "$@" >"$W/export.log" 2>&1; then
    fail "$name: q35 export --tiny-test $* failed: $(tail -3 "$W/export.log")"
    return
  fi
  local kv chunk t n=0
  for kv in f32 f16 q8_0; do
    local ref=$W/$name.$kv.ref.bin
    if ! "$Q35" logits -m "$m" --tokens "$TOKS" --all -t 2 --kv $kv -o "$ref" 2>"$W/l.log"; then
      fail "$name kv=$kv: q35 logits failed: $(tail -3 "$W/l.log")"
      continue
    fi
    for t in 1 2; do
      for chunk in 1 3 7 0; do
        [ $t = 2 ] && [ $chunk = 0 ] && continue # that is the reference itself
        local out=$W/$name.$kv.$t.$chunk.bin copt=()
        [ $chunk != 0 ] && copt=(--chunk $chunk)
        if ! "$Q35" logits -m "$m" --tokens "$TOKS" --all -t $t --kv $kv "${copt[@]}" \
          -o "$out" 2>"$W/l.log"; then
          fail "$name kv=$kv t=$t chunk=$chunk: q35 logits failed: $(tail -3 "$W/l.log")"
          continue
        fi
        n=$((n + 1))
        cmp -s "$ref" "$out" ||
          fail "$name kv=$kv threads=$t chunk=${chunk/#0/all}: logits differ from one chunk, 2 threads"
      done
    done
  done
  echo "$name: $n variants compared"
}

S="--layers 4 --interval 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 --ff 32"
S="$S --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 16"
check moe --arch qwen35moe $S --experts 4 --experts-used 2 --type f32 --seed 21
check dense --arch qwen35 $S --type f32 --seed 22
check moe_q8_0 --arch qwen35moe --layers 2 --interval 2 --embd 64 --heads 2 --kv-heads 1 \
  --head-dim 32 --ff 32 --ssm-k-heads 2 --ssm-v-heads 2 --ssm-head-dim 32 --experts 4 \
  --experts-used 2 --type q8_0 --seed 23

# The load-time repack (Q4_0 product weights as Q4_0R, Q4_K as Q4_KR, Q3_K as Q3_KR, Q6_K as Q6_KR,
# Q2_K as Q2_KR, IQ4_NL as IQ4_NLR, MXFP4 as MXFP4R, Q5_1 as Q5_1R, IQ2_XXS / IQ3_XXS / IQ2_XS / IQ2_S / IQ3_S /
# IQ1_S / IQ1_M as IQ2_XXSR / IQ3_XXSR / IQ2_XSR / IQ2_SR / IQ3_SR / IQ1_SR / IQ1_MR (larger layouts, in memory
# of their own) at the AVX2 level, and at AVX-512 those of AVX512_REPACKS (below); the @avx2 run of this test
# exercises every one, other levels load the file's layout for the rest either way):
# logits with it equal those without (--no-repack, env Q35_REPACK=0), in one chunk and in chunks of 3, at 1 and 2
# threads. Rows of 512 elements, so the Q4_0 repack has whole groups of 16 blocks to rewrite.
# Arguments: the file's type, the seed, any further export options.
RSHAPE="--vocab $VOCAB --arch qwen35moe --layers 2 --interval 2 --embd 512 --heads 4 --kv-heads 2 --head-dim 128
  --ff 512 --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 128 --experts 4 --experts-used 2"
repack() {
  local ty=$1 m=$W/repack_$1.gguf n=0 t opt seed=$2
  shift 2
  # shellcheck disable=SC2086 # RSHAPE: options
  if ! "$Q35" export --tiny-test -o "$m" $RSHAPE --type "$ty" --seed "$seed" "$@" >"$W/export.log" 2>&1; then
    fail "repack $ty: q35 export --tiny-test failed: $(tail -3 "$W/export.log")"
    return
  fi
  for t in 1 2; do
    for opt in "" "--chunk 3"; do
      # shellcheck disable=SC2086 # opt is empty or two words
      if ! "$Q35" logits -m "$m" --tokens "$TOKS" --all -t $t $opt -o "$W/r.on.bin" 2>"$W/l.log" ||
        ! "$Q35" logits -m "$m" --tokens "$TOKS" --all -t $t $opt --no-repack -o "$W/r.off.bin" 2>>"$W/l.log" ||
        ! Q35_REPACK=0 "$Q35" logits -m "$m" --tokens "$TOKS" --all -t $t $opt -o "$W/r.env.bin" 2>>"$W/l.log"; then
        fail "repack $ty t=$t $opt: q35 logits failed: $(tail -3 "$W/l.log")"
        continue
      fi
      n=$((n + 1))
      cmp -s "$W/r.on.bin" "$W/r.off.bin" || fail "repack $ty t=$t $opt: logits with the repack differ from --no-repack"
      cmp -s "$W/r.on.bin" "$W/r.env.bin" || fail "repack $ty t=$t $opt: logits with the repack differ from Q35_REPACK=0"
    done
  done
  # and the repack did run where it should: q35 bench --json's repacked_bytes > 0 exactly at the
  # AVX2 level and, for the types the AVX-512 level runs on the AVX2 level's repacked kernels
  # (AVX512_REPACKS, src/kernels/quant.c), at AVX-512 too; 0 with --no-repack
  local j on off simd want=0
  j=$("$Q35" bench -m "$m" -t 1 -p 2 -n 2 -r 1 --json 2>>"$W/l.log" | tail -1)
  on=$(printf '%s' "$j" | sed -n 's/.*"repacked_bytes": \([0-9-]*\).*/\1/p')
  simd=$(printf '%s' "$j" | sed -n 's/.*"simd": "\([a-z0-9+]*\)".*/\1/p')
  off=$("$Q35" bench -m "$m" -t 1 -p 2 -n 2 -r 1 --json --no-repack 2>>"$W/l.log" | tail -1 |
    sed -n 's/.*"repacked_bytes": \([0-9-]*\).*/\1/p')
  [ "$simd" = avx2 ] && want=1
  [ "$simd" = avx512 ] && case " $AVX512_REPACKS " in *" $ty "*) want=1 ;; esac
  if [ -z "$on" ] || [ -z "$simd" ] || [ -z "$off" ]; then
    fail "repack $ty: q35 bench --json gave no repacked_bytes / simd: $j $(tail -3 "$W/l.log")"
  elif [ $want = 1 ] && [ "$on" -le 0 ]; then
    fail "repack $ty: nothing repacked at the $simd level (repacked_bytes $on)"
  elif [ $want = 0 ] && [ "$on" -ne 0 ]; then
    fail "repack $ty: $on bytes repacked at the $simd level"
  elif [ "$off" -ne 0 ]; then
    fail "repack $ty: --no-repack still repacked $off bytes"
  fi
  echo "repack $ty: $n variants compared; $simd level, $on bytes repacked"
}
AVX512_REPACKS="iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m q2_k q3_k"
# IQ4_NL / MXFP4 where the CPU has VBMI (their AVX-512 kernels then take Q8_0Z, as the AVX2 R ones)
grep -qw avx512vbmi /proc/cpuinfo 2>/dev/null && AVX512_REPACKS="$AVX512_REPACKS iq4_nl mxfp4"
repack q4_0 24
repack q4_k 25
repack q3_k 26
repack q6_k 27
repack iq4_nl 28
repack mxfp4 29
repack q2_k 30
repack q5_1 38
# IQ2_XXS / IQ3_XXS / IQ2_XS / IQ2_S need importance weights (IQ3_S takes the same): q35 imatrix on the f32 model of the same shape and seed (the
# embedding, which the imatrix does not cover, as q4_K)
# shellcheck disable=SC2086 # RSHAPE: options
if "$Q35" export --tiny-test -o "$W/im_src.gguf" $RSHAPE --type f32 --seed 31 >"$W/export.log" 2>&1 &&
  "$Q35" imatrix -m "$W/im_src.gguf" --tokens "$TOKS" --chunk 8 -o "$W/im.gguf" -t 2 >>"$W/export.log" 2>&1; then
  repack iq2_xxs 31 --embd-type q4_k --imatrix "$W/im.gguf"
  repack iq3_xxs 31 --embd-type q4_k --imatrix "$W/im.gguf"
  repack iq3_s 31 --embd-type q4_k --imatrix "$W/im.gguf"
  repack iq2_xs 31 --embd-type q4_k --imatrix "$W/im.gguf"
  repack iq2_s 31 --embd-type q4_k --imatrix "$W/im.gguf"
  repack iq1_s 31 --embd-type q4_k --imatrix "$W/im.gguf"
  repack iq1_m 31 --embd-type q4_k --imatrix "$W/im.gguf"
else
  fail "repack iq2_xxs: f32 source or q35 imatrix failed: $(tail -3 "$W/export.log")"
fi

# A prompt longer than the longest pass (Q35_STEP_MAX, 2048 tokens by default, model/forward.c) runs
# as several passes inside one step: its last position's logits equal those of the same prompt in
# chunks of 70 (passes that never split), at 1 and 2 threads, on the repack checks' MoE shape as
# Q4_K (the AVX2 level repacks it), KV f16. The environment's Q35_STEP_MAX=100 makes the split
# path cheap to reach: 330 tokens are passes of 100, 100, 100 and 30.
LONG=$("$PY" -c "import numpy as np; r=np.random.default_rng(9); print(','.join(map(str, r.integers(0, $VOCAB, 330))))")
lm=$W/long.gguf
# shellcheck disable=SC2086 # RSHAPE: options
if "$Q35" export --tiny-test -o "$lm" $RSHAPE --type q4_k --seed 41 >"$W/export.log" 2>&1; then
  n=0
  for t in 1 2; do
    if ! Q35_STEP_MAX=100 "$Q35" logits -m "$lm" --tokens "$LONG" -t $t -o "$W/long.$t.bin" 2>"$W/l.log"; then
      fail "long prompt t=$t: q35 logits failed: $(tail -3 "$W/l.log")"
      continue
    fi
    if ! Q35_STEP_MAX=100 "$Q35" logits -m "$lm" --tokens "$LONG" -t $t --chunk 70 -o "$W/long.$t.70.bin" 2>"$W/l.log"; then
      fail "long prompt t=$t chunk=70: q35 logits failed: $(tail -3 "$W/l.log")"
      continue
    fi
    n=$((n + 1))
    cmp -s "$W/long.$t.bin" "$W/long.$t.70.bin" ||
      fail "long prompt t=$t: one step (split into passes) differs from chunks of 70"
  done
  echo "long prompt: $n variants compared"
  if Q35_STEP_MAX=0 "$Q35" logits -m "$lm" --tokens "$LONG" -o "$W/long.bad.bin" 2>"$W/l.log"; then
    fail "Q35_STEP_MAX=0 was accepted"
  elif ! grep -q 'Q35_STEP_MAX=0' "$W/l.log"; then
    fail "Q35_STEP_MAX=0: the error does not name the variable: $(tail -2 "$W/l.log")"
  fi
else
  fail "long prompt: q35 export --tiny-test failed: $(tail -3 "$W/export.log")"
fi

if [ $fails -ne 0 ]; then
  echo "test_invariance: $fails failure(s)"
  exit 1
fi
echo "test_invariance: all passed"
