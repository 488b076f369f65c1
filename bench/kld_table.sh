#!/usr/bin/env bash
# bench/kld_table.sh - KL divergence of each q35 quantization from its F32 source, side by side
# with the same per-tensor types quantized by llama.cpp's own quantizer (tests/peer/ggml_requant).
#
#   bench/kld_table.sh [LABEL=EXPORT-ARGS ...]
#
# The source is a random-weight `q35 export --tiny-test` model of the Qwen3.5-35B-A3B layer
# shape (hidden 2048, 16/2 heads of 256, DeltaNet 16/32 heads of 128, experts of 512, 8 used)
# with 4 layers, in F32; by default with 16 experts instead of 256 and a vocabulary of 32768
# instead of 248320 (VOCAB, SHAPE override them), so that the files of each engine are made and
# measured in minutes on a 2-core machine (about 1.7 CPU minutes per set). Each argument set (default:
# one per --type below) makes a q35 file with `q35 export --tiny-test $SHAPE EXPORT-ARGS` (the
# generator draws the same F32 weights whatever the type, then quantizes them with q35's
# quantizer); its llama.cpp twin is the F32 source with every tensor requantized by ggml to the
# type q35's file has for that tensor (so the two files differ only in who made the blocks).
# Both are evaluated by `q35 kld` against the source's log-probabilities (computed once, kept
# with --save-base) on the same random tokens: CHUNKS chunks of CTX tokens, the second half of
# each scored. A recipe slots in as one more set, e.g. 'ud=--qtype ud_q4_k_xl'.
# Prints a markdown table (stdout); with OUT=DIR keeps the files there and the raw JSON lines in
# DIR/kld.jsonl. Not part of ctest.
# Environment: Q35_BUILD (default <repo>/build), CTX (128), CHUNKS (4), THREADS (2), SHAPE, OUT,
# SRC_TYPE (the source's type: f32, the default, or bf16 / f16 as real checkpoints are);
# REUSE=1 with OUT keeps the source and base pass already there (more sets for the same table).
# IMATRIX=1: an importance matrix of the source (q35 imatrix over CHUNKS chunks of CTX other random
# tokens) is given to both quantizers (q35 export --imatrix, ggml_requant --imatrix); the IQ1/IQ2
# types and the iq recipes need one, e.g. IMATRIX=1 bench/kld_table.sh "iq2_xxs=--type iq2_xxs".
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=${Q35_BUILD:-$root/build}
q35=$build/q35
req=$build/tests/peer/ggml_requant
py=/usr/bin/python3
CTX=${CTX:-128}
CHUNKS=${CHUNKS:-4}
THREADS=${THREADS:-2}
VOCAB=${VOCAB:-32768}
SRC_TYPE=${SRC_TYPE:-f32}
SHAPE=${SHAPE:-"--layers 4 --interval 4 --embd 2048 --heads 16 --kv-heads 2 --head-dim 256 --rot 64
  --ssm-k-heads 16 --ssm-v-heads 32 --ssm-head-dim 128 --experts 16 --experts-used 8 --ff 512
  --shexp-ff 512 --vocab $VOCAB --seed 11"}
for b in "$q35" "$req"; do
  [ -x "$b" ] || { echo "kld_table: $b is not built (cmake --build $build)" >&2; exit 1; }
done
sets=("$@")
# the default sets (others, e.g. "iq4_xs=--type iq4_xs" "q3_k=--type q3_k", as arguments; q35's
# iq4_xs export of this source takes minutes of CPU)
[ ${#sets[@]} -gt 0 ] || sets=("q8_0=--type q8_0" "q6_k=--type q6_k" "q5_k=--type q5_k" "q4_k_m=--type q4_k_m"
  "q4_0=--type q4_0" "q2_k=--type q2_k")
if [ -n "${OUT:-}" ]; then
  W=$OUT
  mkdir -p "$W"
else
  W=$(mktemp -d)
  trap 'rm -rf "$W"' EXIT
fi
t0=$(date +%s)
log() { echo "kld_table: [$(($(date +%s) - t0)) s] $*" >&2; }

if [ "${REUSE:-0}" = 1 ] && [ -f "$W/src.gguf" ] && [ -f "$W/base.bin" ]; then
  log "reusing $W/src.gguf and $W/base.bin"
else
  # shellcheck disable=SC2086
  "$q35" export --tiny-test -o "$W/src.gguf" $SHAPE --type "$SRC_TYPE" >"$W/export.log" 2>&1 || { cat "$W/export.log"; exit 1; }
  "$py" -c "import numpy as np; r=np.random.default_rng(1); print(' '.join(map(str, r.integers(0, $VOCAB, $((CTX * CHUNKS))))))" >"$W/toks.txt"
  log "source $(du -h "$W/src.gguf" | cut -f1); base pass ($CHUNKS chunks of $CTX tokens)"
  "$q35" kld -m "$W/src.gguf" -q "$W/src.gguf" --tokens "$W/toks.txt" --ctx "$CTX" -t "$THREADS" \
    --save-base "$W/base.bin" >/dev/null 2>"$W/base.log" || { cat "$W/base.log"; exit 1; }
  : >"$W/kld.jsonl"
fi
imq=() iml=()
if [ "${IMATRIX:-0}" = 1 ]; then
  if [ ! -f "$W/imatrix.gguf" ]; then
    "$py" -c "import numpy as np; r=np.random.default_rng(2); print(','.join(map(str, r.integers(0, $VOCAB, $((CTX * CHUNKS))))))" >"$W/imtoks.txt"
    log "importance matrix of the source (q35 imatrix, $CHUNKS chunks of $CTX other tokens)"
    "$q35" imatrix -m "$W/src.gguf" --tokens "$(cat "$W/imtoks.txt")" --chunk "$CTX" -t "$THREADS" \
      -o "$W/imatrix.gguf" >/dev/null 2>"$W/imatrix.log" || { cat "$W/imatrix.log"; exit 1; }
  fi
  imq=(--imatrix "$W/imatrix.gguf") iml=(--imatrix "$W/imatrix.gguf")
fi

# rules for ggml_requant (at most 64): each tensor of FILE to the type it has there (f32 ones
# kept); one rule per tensor name with the layer number generalized when every layer agrees
rules_of() {
  "$py" - "$1" "$root/bench" <<'EOF'
import re, sys
sys.path.insert(0, sys.argv[2])
import gguf_bytes
_, tensors = gguf_bytes.read_header(sys.argv[1])
kind = lambda t: "keep" if t["type"] == "f32" else t["type"]
groups = {}
for t in tensors:
    groups.setdefault(re.sub(r"^blk\.[0-9]+\.", "blk.N.", t["name"]), []).append(t)
for key, ts in groups.items():
    if len({kind(t) for t in ts}) == 1:
        pat = re.escape(key).replace(re.escape("blk.N."), r"blk\.[0-9]+\.")
        print("^%s$=%s" % (pat, kind(ts[0])))
    else:
        for t in ts:
            print("^%s$=%s" % (re.escape(t["name"]), kind(t)))
EOF
}

field() { "$py" -c "import json,sys; d=json.loads(sys.argv[1]); print('%.*f' % (int(sys.argv[3]), d[sys.argv[2]]))" "$@"; }
printf '| set | GiB | q35 mean KLD | llama.cpp mean KLD | q35 p99 KLD | llama.cpp p99 KLD | q35 same top | llama.cpp same top | q35 PPL ratio | llama.cpp PPL ratio |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for s in "${sets[@]}"; do
  label=${s%%=*}
  args=${s#*=}
  # shellcheck disable=SC2086
  "$q35" export --tiny-test -o "$W/q35.gguf" $SHAPE $args "${imq[@]}" >"$W/export.log" 2>&1 ||
    { cat "$W/export.log"; exit 1; }
  mapfile -t rules < <(rules_of "$W/q35.gguf")
  "$req" "$W/src.gguf" "$W/llama.gguf" "${rules[@]}" "${iml[@]}" -t "$THREADS" 2>"$W/req.log" ||
    { cat "$W/req.log"; exit 1; }
  if [ "$(rules_of "$W/q35.gguf")" != "$(rules_of "$W/llama.gguf")" ]; then
    echo "kld_table: $label: the two files' tensor types differ" >&2
    exit 1
  fi
  row=()
  for who in q35 llama; do
    j=$("$q35" kld --base-logits "$W/base.bin" -q "$W/$who.gguf" -t "$THREADS" 2>"$W/kld.log") || { cat "$W/kld.log"; exit 1; }
    echo "{\"set\":\"$label\",\"blocks\":\"$who\",\"result\":$j}" >>"$W/kld.jsonl"
    row+=("$j")
  done
  gib=$(du -b "$W/q35.gguf" | awk '{printf "%.2f", $1 / 1073741824}')
  printf '| %s | %s | %s | %s | %s | %s | %s %% | %s %% | %s | %s |\n' "$label" "$gib" \
    "$(field "${row[0]}" mean_kld 5)" "$(field "${row[1]}" mean_kld 5)" \
    "$(field "${row[0]}" p99_kld 4)" "$(field "${row[1]}" p99_kld 4)" \
    "$("$py" -c "import json,sys; print('%.1f' % (100 * json.loads(sys.argv[1])['top1_agree']))" "${row[0]}")" \
    "$("$py" -c "import json,sys; print('%.1f' % (100 * json.loads(sys.argv[1])['top1_agree']))" "${row[1]}")" \
    "$(field "${row[0]}" ppl_ratio 4)" "$(field "${row[1]}" ppl_ratio 4)"
  log "$label done"
  rm -f "$W/q35.gguf" "$W/llama.gguf"
done
log "tokens scored per set: $(field "${row[0]}" tokens 0)${OUT:+; results in $W/kld.jsonl}"
