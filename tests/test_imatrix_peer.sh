#!/usr/bin/env bash
# q35 export --imatrix FILE: llama.cpp's imatrix GGUF, written here by an independent writer
# (tests/tools/imatrix_tool.py: random sums and counts, one expert with count 0), read by q35 and
# by llama.cpp (tests/peer/llama_quantize_peer: ggml's own GGUF reader, handed to
# llama_model_quantize):
#   - the recipes whose choices depend on having an imatrix (iq4_xs: ffn_down of the first
#     eighth stays iq4_xs; q4_0: it becomes q4_1) pick llama.cpp's types;
#   - the weights reach the quantizers: for a tensor of each type with a weighted form (q2_K, q3_K,
#     q4_K, q5_K, q6_K, iq4_xs, iq4_nl, q4_0, q5_0, q4_1, iq3_s; the IQ family's weighted forms are
#     held to ggml's error by test_quantize_peer), the importance-
#     weighted squared error (each expert with its own weights; dequantized by ggml's
#     dequantize_row_*) is lower with --imatrix than without, and a q8_0 file (no weighted form,
#     as in ggml) is byte-identical;
#   - the same importance in llama.cpp's legacy .dat format (imatrix_tool.py write-dat) gives a
#     byte-identical export; truncated or foreign .dat files are refused with a message;
#   - q35 imatrix's file matches a float64 recomputation of layer 0's input activations, and
#     llama.cpp's quantizer reads it;
#   - bad files are refused with a message (not an imatrix; wrong row length).
# Skips (exit 0) only when the llama.cpp peer is not installed.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
LQ=$BUILD/tests/peer/llama_quantize_peer
PY=/usr/bin/python3
TOOLS=$SRC/tests/tools
LIB=$SRC/.peer/llama/bins/linux-x64

if [ ! -f "$LIB/libllama.v0.5.0.so" ]; then
  echo "skipped: llama.cpp peer not installed (run tools/setup-peers.sh)"
  exit 0
fi
[ -x "$LQ" ] || { echo "FAIL: the peer is installed but $LQ was not built" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
types() {
  "$PY" "$TOOLS/hf_gguf_info.py" "$1" | "$PY" -c "
import json, sys
d = json.load(sys.stdin)
for n in sorted(d['tensors']): print(n, d['tensors'][n]['type'])"
}

SHAPE="--layers 8 --interval 4 --embd 256 --heads 8 --kv-heads 1 --head-dim 64 --ff 256 --shexp-ff 256
  --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 64 --experts 4 --experts-used 2 --vocab 512"
# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/src.gguf" $SHAPE --type bf16 2>"$W/e.log" || fail "export: $(tail -2 "$W/e.log")"
"$PY" "$TOOLS/imatrix_tool.py" write "$W/src.gguf" "$W/im.gguf" 5 || fail "imatrix_tool.py write"

for r in iq4_xs:30 q4_0:2; do
  n=${r%%:*} ft=${r##*:}
  "$LQ" "$W/src.gguf" "$W/l.gguf" "$ft" --imatrix "$W/im.gguf" >"$W/l.log" 2>&1 ||
    { fail "$n: llama_model_quantize --imatrix: $(grep -i error "$W/l.log" | tail -2)"; continue; }
  grep -q "have importance matrix data" "$W/l.log" || fail "$n: llama.cpp did not take the imatrix"
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/q.gguf" $SHAPE --qtype "$n" --imatrix "$W/im.gguf" 2>"$W/q.log" ||
    { fail "$n: q35 --imatrix: $(tail -2 "$W/q.log")"; continue; }
  diff <(types "$W/l.gguf") <(types "$W/q.gguf") >"$W/d.txt" ||
    fail "$n --imatrix: q35's types differ from llama.cpp's: $(head -6 "$W/d.txt" | tr '\n' ' ')"
done

# the weights reach the quantizers (TYPE:RECIPE:TENSOR, the tensor having TYPE in RECIPE; the
# export without the imatrix gives every linear weight TYPE)
for t in q2_K:q2_k:blk.1.ffn_up_exps.weight q3_K:q3_k_s:blk.2.ffn_gate_exps.weight \
    iq4_nl:iq4_nl:blk.1.ssm_out.weight q4_1:q4_1:blk.5.attn_gate.weight q4_K:q4_k_s:blk.2.ffn_gate_exps.weight \
    q5_K:q5_k_s:blk.5.ffn_up_exps.weight q6_K:q6_k:blk.1.ssm_out.weight iq4_xs:iq4_xs:blk.3.attn_q.weight \
    q4_0:q4_0:blk.1.ffn_up_exps.weight q5_0:q5_0:blk.6.attn_gate.weight iq3_s:iq3_s:blk.2.ffn_gate_exps.weight; do
  IFS=: read -r ty rec name <<<"$t"
  lty=$(echo "$ty" | tr K k)
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/a.gguf" $SHAPE --qtype "$rec" --imatrix "$W/im.gguf" 2>"$W/q.log" &&
    "$Q35" export --tiny-test -o "$W/b.gguf" $SHAPE --type "$lty" 2>>"$W/q.log" ||
    { fail "$ty: export: $(tail -2 "$W/q.log")"; continue; }
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/c.gguf" $SHAPE --qtype "$rec" --imatrix "$W/im.gguf" --dry-run 2>/dev/null |
    grep -q "^$name $ty\$" || fail "$ty: $name is not $ty in recipe $rec"
  read -r ea eb < <("$PY" "$TOOLS/imatrix_tool.py" werr "$LIB" "$W/src.gguf" "$W/a.gguf" "$W/b.gguf" "$name" \
    "$W/im.gguf") || { fail "$ty: imatrix_tool.py werr"; continue; }
  "$PY" -c "import sys; sys.exit(0 if $ea < 0.97 * $eb else 1)" ||
    fail "$ty ($name): weighted error with --imatrix $ea is not below that without $eb"
done
# q8_0 has no weighted form (as in ggml): the imatrix changes nothing
# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/a.gguf" $SHAPE --qtype q8_0 --imatrix "$W/im.gguf" 2>"$W/q.log" &&
  "$Q35" export --tiny-test -o "$W/b.gguf" $SHAPE --qtype q8_0 2>>"$W/q.log" || fail "q8_0 export: $(tail -2 "$W/q.log")"
cmp -s "$W/a.gguf" "$W/b.gguf" || fail "a q8_0 file changed with --imatrix"

# the legacy .dat format: the same importance, the same file; bad .dat files refused
"$PY" "$TOOLS/imatrix_tool.py" write-dat "$W/src.gguf" "$W/im.dat" 5 || fail "imatrix_tool.py write-dat"
for rec in q4_k_m; do
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/a.gguf" $SHAPE --qtype $rec --imatrix "$W/im.gguf" 2>"$W/q.log" &&
    "$Q35" export --tiny-test -o "$W/b.gguf" $SHAPE --qtype $rec --imatrix "$W/im.dat" 2>>"$W/q.log" ||
    { fail "$rec with a .dat imatrix: $(tail -2 "$W/q.log")"; continue; }
  cmp -s "$W/a.gguf" "$W/b.gguf" || fail "$rec: the .dat imatrix gives another file than the GGUF one"
done
head -c 1000 "$W/im.dat" >"$W/trunc.dat"
printf 'not an imatrix' >"$W/junk.dat"
for bad in trunc junk; do
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/x.gguf" $SHAPE --qtype q4_k_m --imatrix "$W/$bad.dat" 2>"$W/x.log" &&
    fail "$bad.dat accepted as an imatrix"
  grep -q "truncated\|not an imatrix file" "$W/x.log" || fail "$bad.dat: $(cat "$W/x.log")"
done

# q35 imatrix: computed over token ids on an f32 model, checked against a float64 recomputation of
# layer 0's input (tests/tools/imatrix_tool.py check), then read by llama.cpp (its quantizer takes
# it) and by q35 export
TOKS=$("$PY" -c "import numpy as np; r=np.random.default_rng(1); print(','.join(map(str, r.integers(0, 512, 52))))")
# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/f32.gguf" $SHAPE 2>"$W/e.log" || fail "export f32: $(tail -2 "$W/e.log")"
if "$Q35" imatrix -m "$W/f32.gguf" --tokens "$TOKS" --chunk 16 -o "$W/qim.gguf" -t 2 2>"$W/i.log"; then
  "$PY" "$TOOLS/imatrix_tool.py" check "$W/f32.gguf" "$W/qim.gguf" "$TOKS" 16 >"$W/c.log" 2>&1 ||
    fail "q35 imatrix: $(tail -2 "$W/c.log")"
  "$LQ" "$W/src.gguf" "$W/l.gguf" 30 --imatrix "$W/qim.gguf" >"$W/l.log" 2>&1 ||
    fail "llama_model_quantize with q35's imatrix: $(grep -i error "$W/l.log" | tail -2)"
  # shellcheck disable=SC2086
  "$Q35" export --tiny-test -o "$W/q.gguf" $SHAPE --qtype iq4_xs --imatrix "$W/qim.gguf" 2>"$W/q.log" ||
    fail "q35 export with q35's imatrix: $(tail -2 "$W/q.log")"
  diff <(types "$W/l.gguf") <(types "$W/q.gguf") >/dev/null || fail "types differ with q35's imatrix"
else
  fail "q35 imatrix: $(tail -2 "$W/i.log")"
fi
"$Q35" imatrix -m "$W/f32.gguf" --tokens 1,2,3 --chunk 16 -o "$W/x.gguf" 2>"$W/x.log" && fail "imatrix: short text"
grep -q "fewer than one chunk of 16" "$W/x.log" || fail "imatrix short text: $(cat "$W/x.log")"

# refusals
"$Q35" export --tiny-test -o "$W/x.gguf" --qtype q2_k --imatrix "$W/src.gguf" 2>"$W/x.log" &&
  fail "a model accepted as an imatrix"
grep -q "not an imatrix file" "$W/x.log" || fail "model as imatrix: $(cat "$W/x.log")"
# shellcheck disable=SC2086
"$Q35" export --tiny-test -o "$W/x.gguf" $SHAPE --embd 512 --qtype q2_k --imatrix "$W/im.gguf" 2>"$W/x.log" &&
  fail "an imatrix of another row length accepted"
grep -q "imatrix: '.*' has 256 x" "$W/x.log" || fail "wrong row length: $(cat "$W/x.log")"
[ -e "$W/x.gguf" ] && fail "a refused export left a file"

[ $fails -eq 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
