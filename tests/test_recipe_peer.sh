#!/usr/bin/env bash
# Export recipes (q35 export --qtype NAME) against llama.cpp's own choices: the same BF16 model
# is quantized by llama.cpp's llama_model_quantize (tests/peer/llama_quantize_peer, the engine of
# llama-quantize, with the matching llama_ftype) and exported by q35 with --qtype NAME; every
# tensor's type (read with an independent GGUF parser, tests/tools/hf_gguf_info.py) and
# general.file_type must be the same, for every recipe q35 has, on
#   - a 35B-A3B-shaped tiny MoE (GQA 8, rows multiples of 256, 8 layers + an MTP block: the
#     use_more_bits layers of attn_v / attn_qkv / ffn_down),
#   - an 8-expert tied model with rows of 64 (llama's 8-expert bumps, the tied embedding, the
#     fallbacks to 32-blocks) and one with rows of 80 / 48 (the fallbacks to f16),
#   - a dense model of 17 layers (n/16 and n/8 layer tests),
#   - a Hugging Face checkpoint (q35 export -m DIR --qtype q4_k_m vs llama on q35's BF16 export:
#     the HF plan's names, MTP block and tied embedding; rows of 64, Qwen3's real vocabulary);
# the IQ recipes and q2_k_s (with an importance matrix from q35 imatrix) through both engines'
# dry runs on those shapes, and two of them written for real; plus the override rules
# (--down-type / --qlinear win over the recipe) and the refusals (no imatrix, unknown names).
# Skips (exit 0) only when the llama.cpp peer is not installed.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
LQ=$BUILD/tests/peer/llama_quantize_peer
PY=/usr/bin/python3
TOOLS=$SRC/tests/tools

if [ ! -f "$SRC/.peer/llama/bins/linux-x64/libllama.v0.5.0.so" ]; then
  echo "skipped: llama.cpp peer not installed (run tools/setup-peers.sh)"
  exit 0
fi
[ -x "$LQ" ] || { echo "FAIL: the peer is installed but $LQ was not built" >&2; exit 1; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# name -> llama_ftype (llama.h)
RECIPES="q4_0:2 q4_1:3 q5_0:8 q5_1:9 q8_0:7 q2_k:10 q3_k_s:11 q3_k_m:12 q3_k_l:13 q4_k_s:14 q4_k_m:15
  q5_k_s:16 q5_k_m:17 q6_k:18 iq4_nl:25 iq4_xs:30 mxfp4_moe:38 bf16:32 f16:1"

# "file_type N" then "tensor type" per line, sorted
types() {
  "$PY" "$TOOLS/hf_gguf_info.py" "$1" | "$PY" -c "
import json, sys
d = json.load(sys.stdin)
print('file_type', d['kv'].get('general.file_type'))
for n in sorted(d['tensors']): print(n, d['tensors'][n]['type'])"
}

# same_types LABEL LLAMA.gguf Q35.gguf
same_types() {
  if ! diff <(types "$2") <(types "$3") >"$W/d.txt"; then
    fail "$1: q35's types differ from llama.cpp's (< llama, > q35): $(head -8 "$W/d.txt" | tr '\n' ' ')"
  fi
}

# sweep LABEL "RECIPES" TINY-SHAPE...: those recipes on one tiny shape
sweep() {
  local label=$1 list=$2
  shift 2
  "$Q35" export --tiny-test -o "$W/src.gguf" "$@" --type bf16 2>"$W/e.log" ||
    { fail "$label: export: $(tail -2 "$W/e.log")"; return; }
  local r n ft
  for r in $list; do
    n=${r%%:*} ft=${r##*:}
    "$LQ" "$W/src.gguf" "$W/l.gguf" "$ft" >"$W/l.log" 2>&1 ||
      { fail "$label $n: llama_model_quantize: $(grep -i error "$W/l.log" | tail -2)"; continue; }
    "$Q35" export --tiny-test -o "$W/q.gguf" "$@" --qtype "$n" 2>"$W/q.log" ||
      { fail "$label $n: q35 export --qtype: $(tail -2 "$W/q.log")"; continue; }
    same_types "$label $n" "$W/l.gguf" "$W/q.gguf"
  done
}

A3B="--layers 8 --interval 4 --embd 256 --heads 8 --kv-heads 1 --head-dim 64 --ff 256 --shexp-ff 256
  --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 64 --experts 4 --experts-used 2 --vocab 1024 --mtp"
# shellcheck disable=SC2086
sweep a3b "$RECIPES" $A3B
# the other shapes: the recipes whose rules they reach
sweep e8-tied "q2_k:10 q4_k_m:15 iq4_xs:30 mxfp4_moe:38" \
  --layers 4 --interval 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 64 --shexp-ff 64 \
  --experts 8 --experts-used 2 --vocab 512 --tied
sweep odd-rows "q4_k_m:15 q8_0:7 iq4_xs:30" \
  --layers 2 --interval 2 --embd 80 --heads 2 --kv-heads 1 --head-dim 40 --rot 16 --ff 48 \
  --shexp-ff 48 --ssm-k-heads 2 --ssm-v-heads 2 --ssm-head-dim 40 --experts 4 --experts-used 2 --vocab 512
sweep dense17 "q3_k_m:12 q4_k_m:15 q4_k_s:14" \
  --arch qwen35 --layers 17 --interval 4 --embd 256 --heads 4 --kv-heads 1 --head-dim 64 --ff 256 \
  --vocab 512

# Hugging Face checkpoint: q35's BF16 export quantized by llama vs q35 export --qtype
if "$PY" "$TOOLS/hf_make_checkpoint.py" "$W/hf" --link-tokenizer --layers 4 --heads 8 --kv-heads 1 --head-dim 32 \
    --tied >"$W/mk.log" 2>&1; then
  if "$Q35" export -m "$W/hf" -o "$W/hf_bf16.gguf" --quiet 2>"$W/e.log" &&
      "$Q35" export -m "$W/hf" -o "$W/hf_q.gguf" --qtype Q4_K_M --quiet 2>>"$W/e.log"; then
    if "$LQ" "$W/hf_bf16.gguf" "$W/hf_l.gguf" 15 >"$W/l.log" 2>&1; then
      same_types "hf q4_k_m" "$W/hf_l.gguf" "$W/hf_q.gguf"
    else
      fail "hf: llama_model_quantize: $(grep -i error "$W/l.log" | tail -2)"
    fi
    # an explicit --qlinear wins over the recipe for the linear weights (q4_k_m: q5_0 on rows of 64)
    "$Q35" export -m "$W/hf" -o "$W/hf_o.gguf" --qtype q4_k_m --qlinear q8_0 --quiet 2>"$W/e.log" ||
      fail "hf --qtype + --qlinear: $(tail -2 "$W/e.log")"
    types "$W/hf_o.gguf" >"$W/o.txt"
    grep -q "^blk.1.ffn_gate_exps.weight 8$" "$W/o.txt" && grep -q "^blk.1.ssm_out.weight 8$" "$W/o.txt" ||
      fail "hf: --qlinear q8_0 did not override q4_k_m"
  else
    fail "hf export: $(tail -2 "$W/e.log")"
  fi
  rm -rf "$W/hf" "$W"/hf_*.gguf
else
  fail "hf_make_checkpoint.py: $(tail -2 "$W/mk.log")"
fi

# per-tensor flags override the recipe; --type overrides it for the other linear weights
# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/o.gguf" $A3B --qtype q4_k_m --down-type q8_0 2>"$W/e.log" ||
  fail "--qtype + --down-type: $(tail -2 "$W/e.log")"
types "$W/o.gguf" >"$W/o.txt"
grep -q "^blk.1.ffn_down_exps.weight 8$" "$W/o.txt" && grep -q "^blk.3.attn_v.weight 8$" "$W/o.txt" &&
  grep -q "^blk.0.attn_qkv.weight 14$" "$W/o.txt" && grep -q "^blk.1.attn_qkv.weight 12$" "$W/o.txt" ||
  fail "--down-type q8_0 did not override q4_k_m's ffn_down / attn_v alone"

# The IQ recipes and q2_k_s (which llama-quantize writes only with an importance matrix), through
# both engines' dry runs (the types chosen, nothing quantized: llama_model_quantize's dry run read
# from its log by llama_quantize_peer --dry-run, q35 export --dry-run), with an imatrix from
# q35 imatrix on each shape, and a few without one (the rules that change with it).
IQ_RECIPES="iq2_xxs:19 iq2_xs:20 iq2_s:28 iq2_m:29 iq3_xxs:23 iq3_xs:22 iq3_s:26 iq3_m:27 iq1_s:24 iq1_m:31
  q2_k_s:21"
# dry LABEL "RECIPES" IMATRIX|- SHAPE...
dry() {
  local label=$1 list=$2 im=$3
  shift 3
  "$Q35" export --tiny-test -o "$W/dsrc.gguf" "$@" --type bf16 2>"$W/e.log" ||
    { fail "$label: export: $(tail -2 "$W/e.log")"; return; }
  local imq=() iml=()
  if [ "$im" != - ]; then
    "$Q35" imatrix -m "$W/dsrc.gguf" --tokens "$(seq -s, 1 7 448)" --chunk 32 -o "$W/im.gguf" -t 2 2>"$W/i.log" ||
      { fail "$label: q35 imatrix: $(tail -2 "$W/i.log")"; return; }
    imq=(--imatrix "$W/im.gguf") iml=(--imatrix "$W/im.gguf")
  fi
  local r n ft
  for r in $list; do
    n=${r%%:*} ft=${r##*:}
    "$LQ" "$W/dsrc.gguf" "$W/l.gguf" "$ft" "${iml[@]}" --dry-run 2>"$W/l.log" | sort >"$W/l.txt" ||
      { fail "$label $n: llama dry run: $(grep -i error "$W/l.log" | tail -2)"; continue; }
    "$Q35" export --tiny-test -o "$W/q.gguf" "$@" --qtype "$n" "${imq[@]}" --dry-run 2>"$W/q.log" | sort >"$W/q.txt" ||
      { fail "$label $n: q35 export --dry-run: $(tail -2 "$W/q.log")"; continue; }
    [ -s "$W/l.txt" ] || { fail "$label $n: llama's dry run listed no tensors"; continue; }
    diff "$W/l.txt" "$W/q.txt" >"$W/d.txt" ||
      fail "$label $n (dry run): q35's types differ from llama.cpp's (< llama, > q35): $(head -8 "$W/d.txt" | tr '\n' ' ')"
  done
}
# shellcheck disable=SC2086
dry a3b "$IQ_RECIPES" im $A3B
# shellcheck disable=SC2086
dry a3b-noim "iq3_xxs:23 iq4_xs:30 iq3_m:27" - $A3B
dry e8-tied "iq2_xxs:19 iq2_m:29 iq3_xxs:23 iq3_m:27 iq1_s:24 q2_k_s:21" im \
  --layers 4 --interval 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 64 --shexp-ff 64 \
  --experts 8 --experts-used 2 --vocab 512 --tied
dry dense17 "iq2_xxs:19 iq2_s:28 iq3_xxs:23 iq3_xs:22 iq3_m:27 iq1_m:31 q2_k_s:21" im \
  --arch qwen35 --layers 17 --interval 4 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 256 --vocab 512

# an IQ recipe written for real by both (a file whose blocks are q35's IQ quantizers', and the
# dry run's types are the file's)
SMALL="--layers 4 --interval 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 256 --shexp-ff 256
  --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 64 --experts 2 --experts-used 1 --vocab 512"
# shellcheck disable=SC2086
if "$Q35" export --tiny-test -o "$W/s.gguf" $SMALL --type bf16 2>"$W/e.log" &&
    "$Q35" imatrix -m "$W/s.gguf" --tokens "$(seq -s, 3 5 320)" --chunk 32 -o "$W/sim.gguf" -t 2 2>"$W/i.log"; then
  for r in iq2_xxs:19; do
    n=${r%%:*} ft=${r##*:}
    "$LQ" "$W/s.gguf" "$W/l.gguf" "$ft" --imatrix "$W/sim.gguf" >"$W/l.log" 2>&1 ||
      { fail "small $n: llama_model_quantize: $(grep -i error "$W/l.log" | tail -2)"; continue; }
    "$Q35" export --tiny-test -o "$W/q.gguf" $SMALL --qtype "$n" --imatrix "$W/sim.gguf" 2>"$W/q.log" ||
      { fail "small $n: q35 export: $(tail -2 "$W/q.log")"; continue; }
    same_types "small $n" "$W/l.gguf" "$W/q.gguf"
    "$Q35" export --tiny-test -o "$W/q.gguf" $SMALL --qtype "$n" --imatrix "$W/sim.gguf" --dry-run 2>/dev/null |
      sort >"$W/qd.txt"
    types "$W/q.gguf" | grep -v '^file_type' | sed 's/ [0-9]*$//' >"$W/qn.txt"
    [ "$(cut -d' ' -f1 "$W/qd.txt")" = "$(cut -d' ' -f1 "$W/qn.txt" | sort)" ] ||
      fail "small $n: the dry run's tensors are not the file's"
  done
else
  fail "small: export / imatrix: $(tail -2 "$W/e.log" "$W/i.log")"
fi

# refusals: the very-low-bit recipes and types without an importance matrix name --imatrix; an
# unknown name lists the recipes; types that need none are written without one
for r in iq2_xxs iq1_m iq3_xxs q2_k_s; do
  "$Q35" export --tiny-test -o "$W/x.gguf" --qtype "$r" 2>"$W/x.log" && fail "--qtype $r accepted without --imatrix"
  grep -q "needs an importance matrix.*--imatrix FILE" "$W/x.log" || fail "--qtype $r: $(cat "$W/x.log")"
done
"$Q35" export --tiny-test -o "$W/x.gguf" --type iq2_xs 2>"$W/x.log" && fail "--type iq2_xs accepted without --imatrix"
grep -q "iq2_xs needs an importance matrix" "$W/x.log" || fail "--type iq2_xs: $(cat "$W/x.log")"
[ -e "$W/x.gguf" ] && fail "a refused export left a file"
"$Q35" export --tiny-test -o "$W/x.gguf" --type iq3_s 2>"$W/x.log" || fail "--type iq3_s refused: $(cat "$W/x.log")"
"$Q35" export --tiny-test -o "$W/x.gguf" --qtype q4_k_x 2>"$W/x.log" && fail "--qtype q4_k_x accepted"
grep -q "unknown recipe 'q4_k_x'.*q4_k_m" "$W/x.log" || fail "--qtype q4_k_x: $(cat "$W/x.log")"

[ $fails -eq 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
