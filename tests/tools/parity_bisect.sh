#!/usr/bin/env bash
# Localize a q35 vs llama.cpp logits mismatch by model shape (a diagnosis aid, not a test):
# one-layer models of each layer type (GDN only / attention only), MoE vs dense FFN,
# Hk == Hv vs Hk != Hv, tied vs untied, prompts of 1, 2, 7 and 70 tokens; f32 weights,
# f32 KV cache, flash attention off. Prints the compare_logits.py line of every case.
#   usage: tests/tools/parity_bisect.sh [BUILD_DIR] [extra export options...]
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-${Q35_BUILD:-$SRC/build}}
shift || true
Q35=${Q35:-$BUILD/q35}
PEER=${LLAMA_PEER:-$BUILD/tests/peer/llama_peer}
PY=/usr/bin/python3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
V=512

run_case() { # NAME EXPORT-OPTIONS...
  local name=$1
  shift
  if ! "$Q35" export --tiny-test -o "$W/m.gguf" --vocab $V "$@" "${EXTRA[@]}" >"$W/e.log" 2>&1; then
    echo "$name: export failed: $(tail -2 "$W/e.log")"
    return
  fi
  local n
  for n in 1 2 7 70; do
    local toks
    toks=$("$PY" -c "import numpy as np; r=np.random.default_rng($n); print(','.join(map(str, r.integers(0, $V, $n))))")
    "$Q35" logits -m "$W/m.gguf" --tokens "$toks" --all -t 2 --kv f32 -o "$W/q.bin" 2>"$W/q.log" ||
      { echo "$name T=$n: q35 logits failed: $(tail -2 "$W/q.log")"; continue; }
    "$PEER" logits -m "$W/m.gguf" --tokens "$toks" --all -t 2 -o "$W/l.bin" 2>"$W/l.log" ||
      { echo "$name T=$n: llama_peer failed: $(tail -2 "$W/l.log")"; continue; }
    "$PY" "$SRC/tests/tools/compare_logits.py" "$W/q.bin" "$W/l.bin" --vocab $V --tol 1e-4 \
      --label "$name T=$n" | head -1
  done
}

EXTRA=("$@")
# llama.cpp (0ad4a86) aborts (GGML_ASSERT(buffer) in ggml-backend.cpp) on a model whose layers are
# all of one type (its hybrid memory then allocates an empty KV or recurrent cache), so the
# smallest case is 2 layers: one Gated DeltaNet layer, then one attention layer (interval 2).
B="--layers 2 --interval 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 --ff 32"
B="$B --ssm-head-dim 16 --type f32 --seed 5"
for arch in qwen35 qwen35moe; do
  M=""
  [ $arch = qwen35moe ] && M="--experts 4 --experts-used 2"
  run_case "$arch Hk=Hv=2" --arch $arch $B $M --ssm-k-heads 2 --ssm-v-heads 2
  run_case "$arch Hk=2,Hv=4" --arch $arch $B $M --ssm-k-heads 2 --ssm-v-heads 4
  run_case "$arch Hk=Hv=2 tied" --arch $arch $B $M --ssm-k-heads 2 --ssm-v-heads 2 --tied
  run_case "$arch Hk=Hv=2 GQA 4/1" --arch $arch $B $M --ssm-k-heads 2 --ssm-v-heads 2 --kv-heads 1
  run_case "$arch Hk=Hv=2 MHA 4/4" --arch $arch $B $M --ssm-k-heads 2 --ssm-v-heads 2 --kv-heads 4
done
C="--arch qwen35moe $B --ssm-k-heads 2 --ssm-v-heads 2"
run_case "qwen35moe top-1 of 4" $C --experts 4 --experts-used 1
run_case "qwen35moe top-4 of 4" $C --experts 4 --experts-used 4
