#!/usr/bin/env bash
# The aarch64 build under emulation (issue 15): cross-compiles build-aarch64/ (tools/build-aarch64.sh)
# and runs, under qemu-aarch64-static, once per NEON variant through qemu's CPU models
#   cortex-a53   base NEON          (the kernels' vmull / vpadal variants)
#   neoverse-n1  NEON + dotprod     (SDOT)
#   max          + i8mm             (SMMLA tiles)
# the weight-kernel twins (test_quant, test_quant_tile, test_deltanet, test_quant_lowbit, test_quant_iq: the NEON level against the
# reference), checking that each model got the variant it should ("simd" of the dispatch), and
# tiny-model logits (f32, q8_0, q4_0, q4_k_m weights) against the x86 llama.cpp peer's logits of
# the same file computed natively (tests/peer/llama_peer, tolerances of test_parity_llama.sh).
# Once, on `max`: the attention and sampling-head twins (test_attn, test_sampler), the plain
# quantizers' vector twins (test_quantize_plain: quantize_plain_vec.c on NEON's generic vectors), the
# invariance test (tests/test_invariance.sh with Q35 = the emulated binary) and one smoke test
# against llama.cpp's own arm64 build (.peer/llama-arm64 from tools/setup-peers.sh, or
# Q35_ARM64_PEER=DIR; skipped when absent): tests/peer/llama_peer.c cross-compiled against it,
# its q8_0-model logits under qemu against the emulated q35's. The tests see
# Q35_EMULATED=1 (smaller grids: qemu is 10-50x slower). The CPU models run in parallel.
# Skips (exit 77) when the cross compiler, qemu-user-static or the arm64 libraries are absent
# (tools/setup.sh installs them; .ci/run runs it). Q35_AARCH64_CPUS overrides the models.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
A=${Q35_AARCH64_BUILD:-$SRC/build-aarch64}
PEER=${LLAMA_PEER:-$BUILD/tests/peer/llama_peer}
PY=/usr/bin/python3
ARM64_PEER=${Q35_ARM64_PEER:-$SRC/.peer/llama-arm64}/bins/linux-arm64
CPUS=${Q35_AARCH64_CPUS:-cortex-a53 neoverse-n1 max}

for tool in aarch64-linux-gnu-gcc qemu-aarch64-static; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool not installed (tools/setup.sh installs it)"; exit 77; }
done
[ -f /usr/lib/aarch64-linux-gnu/pkgconfig/libmicrohttpd.pc ] ||
  { echo "skipped: the arm64 -dev packages are not installed (tools/build-aarch64.sh installs them)"; exit 77; }

t0=$(date +%s)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if ! Q35_AARCH64_BUILD=$A Q35_AARCH64_TARGETS="q35 test_quant test_quant_tile test_deltanet test_attn test_sampler test_quant_lowbit test_quant_iq test_quantize_plain" \
  bash "$SRC/tools/build-aarch64.sh" >"$W/build.log" 2>&1; then
  tail -30 "$W/build.log"
  echo "FAIL: the aarch64 build failed"
  exit 1
fi
echo "aarch64 build: $(($(date +%s) - t0)) s"
export Q35_EMULATED=1
QEMU="$SRC/tools/qemu-aarch64.sh"
X86_Q35=$BUILD/q35
[ -x "$X86_Q35" ] || X86_Q35=""

# the variant each CPU model must get
want_desc() {
  case $1 in
  cortex-a53 | cortex-a57 | cortex-a72) echo neon ;;
  neoverse-n1 | cortex-a76 | a64fx) echo neon+dotprod ;;
  *) echo neon+dotprod+i8mm ;;
  esac
}

# tiny models (the shapes of test_parity_llama.sh, fewer of them): NAME VOCAB MODE OPTIONS...
E="--layers 4 --interval 4 --embd 128 --heads 4 --kv-heads 2 --head-dim 64 --ff 64"
Q="--layers 4 --interval 4 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 256 --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 64"
MODELS=(
  "moe_f32 1536 f32 --arch qwen35moe $E --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 32 --experts 8 --experts-used 2 --type f32 --seed 1"
  "moe_q8_0 2048 quant --arch qwen35moe $Q --experts 4 --experts-used 2 --type q8_0 --seed 5"
  "moe_q4_0 2048 quant --arch qwen35moe $Q --experts 4 --experts-used 2 --type q4_0 --seed 5"
  "moe_q4_k_m 2048 quant --arch qwen35moe $Q --experts 4 --experts-used 2 --type q4_k_m --seed 5"
)
NTOK=24

# The peer's logits once per model (native x86), the model files exported by the x86 build.
have_peer=0
if [ -x "$PEER" ] && [ -n "$X86_Q35" ]; then
  have_peer=1
  toks=$("$PY" -c "import numpy as np; r=np.random.default_rng(13); print(','.join(map(str, r.integers(0, 1024, $NTOK))))")
  for spec in "${MODELS[@]}"; do
    read -r name vocab mode opts <<<"$spec"
    # shellcheck disable=SC2086
    "$X86_Q35" export --tiny-test -o "$W/$name.gguf" --vocab "$vocab" $opts >"$W/$name.export.log" 2>&1 ||
      fail "$name: export failed: $(tail -3 "$W/$name.export.log")"
    "$PEER" logits -m "$W/$name.gguf" --tokens "$toks" --all -t 1 --kv f32 --flash 0 -o "$W/$name.peer.bin" \
      2>"$W/$name.peer.log" || fail "$name: llama_peer logits failed: $(tail -3 "$W/$name.peer.log")"
  done
else
  echo "note: no x86 build with the llama.cpp peer ($PEER): the logits comparison is skipped"
fi

# llama.cpp's arm64 build under qemu against the emulated q35 (logits of $W/max.moe_q8_0.bin)
arm64_peer_smoke() {
  if [ ! -f "$ARM64_PEER/libllama.v0.5.0.so" ]; then
    echo "arm64 llama.cpp smoke: skipped ($ARM64_PEER not installed)"
    return 0
  fi
  if ! aarch64-linux-gnu-gcc -O2 -std=gnu11 -DLLAMA_PEER_BACKEND_DIR="\"$ARM64_PEER\"" "$SRC/tests/peer/llama_peer.c" \
    -o "$W/llama_peer_arm64" -L"$ARM64_PEER" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -lm \
    -Wl,-rpath,"$ARM64_PEER" 2>"$W/peer_arm64.log"; then
    echo "FAIL: arm64 llama_peer does not build: $(tail -3 "$W/peer_arm64.log")"
    return 1
  fi
  if ! Q35_QEMU_CPU=max bash "$QEMU" "$W/llama_peer_arm64" logits -m "$W/moe_q8_0.gguf" --tokens "$toks" --all -t 1 \
    --kv f32 --flash 0 -o "$W/arm64_peer.bin" 2>"$W/peer_arm64.log"; then
    echo "FAIL: arm64 llama_peer logits failed: $(tail -3 "$W/peer_arm64.log")"
    return 1
  fi
  "$PY" "$SRC/tests/tools/compare_logits.py" "$W/max.moe_q8_0.bin" "$W/arm64_peer.bin" --vocab 2048 --quant --tol 0.5 \
    --mean-tol 2e-2 --tie 5e-2 --first-tol 1e-4 --label "arm64 llama.cpp vs q35 (max) moe_q8_0" 2>&1 ||
    { echo "FAIL: logits differ from the arm64 llama.cpp"; return 1; }
}

# per_cpu CPU: everything for one CPU model, its report in $W/CPU.out, failures counted in $W/CPU.fails
per_cpu() {
  local cpu=$1 nf=0 t
  local out=$W/$cpu.out
  export Q35_QEMU_CPU=$cpu
  local s=$(date +%s)
  for t in test_quant test_quant_tile test_deltanet test_quant_lowbit test_quant_iq; do
    if Q35_QEMU_CPU=$cpu bash "$QEMU" "$A/tests/$t" >"$W/$cpu.$t.log" 2>&1; then
      echo "$cpu $t: $(tail -1 "$W/$cpu.$t.log")" >>"$out"
    else
      echo "FAIL: $cpu $t:" >>"$out"; grep -m5 FAIL "$W/$cpu.$t.log" >>"$out"; nf=$((nf + 1))
    fi
  done
  local got want
  got=$(grep -m1 '^dispatch level:' "$W/$cpu.test_quant.log" | sed 's/dispatch level: //')
  want=$(want_desc "$cpu")
  [ "$got" = "$want" ] || { echo "FAIL: $cpu: the kernels ran at '$got', not '$want'" >>"$out"; nf=$((nf + 1)); }
  if [ $have_peer = 1 ]; then
    for spec in "${MODELS[@]}"; do
      read -r name vocab mode opts <<<"$spec"
      local copt=(--tol 1e-4)
      [ "$mode" = quant ] && copt=(--quant --tol 0.5 --mean-tol 2e-2 --tie 5e-2 --first-tol 1e-4)
      if ! Q35_QEMU_CPU=$cpu bash "$QEMU" "$A/q35" logits -m "$W/$name.gguf" --tokens "$toks" --all -t 2 --kv f32 \
        -o "$W/$cpu.$name.bin" 2>"$W/$cpu.$name.log"; then
        echo "FAIL: $cpu $name: q35 logits failed: $(tail -3 "$W/$cpu.$name.log")" >>"$out"; nf=$((nf + 1))
        continue
      fi
      "$PY" "$SRC/tests/tools/compare_logits.py" "$W/$cpu.$name.bin" "$W/$name.peer.bin" --vocab "$vocab" \
        "${copt[@]}" --label "$cpu $name" >>"$out" 2>&1 || { echo "FAIL: $cpu $name: logits differ from llama.cpp" >>"$out"; nf=$((nf + 1)); }
    done
  fi
  if [ "$cpu" = max ]; then
    for t in test_attn test_sampler test_quantize_plain; do
      if Q35_SANITIZE_RUN=1 Q35_QEMU_CPU=$cpu bash "$QEMU" "$A/tests/$t" >"$W/$cpu.$t.log" 2>&1; then
        echo "$cpu $t: $(tail -1 "$W/$cpu.$t.log")" >>"$out"
      else
        echo "FAIL: $cpu $t:" >>"$out"; grep -m5 FAIL "$W/$cpu.$t.log" >>"$out"; nf=$((nf + 1))
      fi
    done
    if Q35_SRC=$SRC Q35=$SRC/tools/run-aarch64.sh Q35_AARCH64_BUILD=$A bash "$SRC/tests/test_invariance.sh" \
      >"$W/$cpu.inv.log" 2>&1; then
      echo "$cpu test_invariance: $(tail -1 "$W/$cpu.inv.log")" >>"$out"
    else
      echo "FAIL: $cpu test_invariance:" >>"$out"; grep -m5 FAIL "$W/$cpu.inv.log" >>"$out"; nf=$((nf + 1))
    fi
  fi
  if [ "$cpu" = max ] && [ $have_peer = 1 ]; then arm64_peer_smoke >>"$out" || nf=$((nf + 1)); fi
  echo "$cpu: $(($(date +%s) - s)) s" >>"$out"
  echo $nf >"$W/$cpu.fails"
}

for cpu in $CPUS; do per_cpu "$cpu" & done
wait
for cpu in $CPUS; do
  cat "$W/$cpu.out"
  fails=$((fails + $(cat "$W/$cpu.fails" 2>/dev/null || echo 1)))
done
echo "test_aarch64: $(($(date +%s) - t0)) s in all"
if [ $fails -ne 0 ]; then
  echo "test_aarch64: $fails failure(s)"
  exit 1
fi
echo "test_aarch64: all passed"
