#!/usr/bin/env bash
# test_mtp_parity.sh - the MTP head's draft logits against llama.cpp's graph_mtp through the peer
# (tests/peer/mtp_peer: a context of type MTP fed the same pairs; skipped when the peer is not
# built) and against an independent float64 reference (tests/tools/mtp_reference.py, written from
# graph_mtp with its own GGUF reader), on f32 tiny models with an MTP block: MoE with and without
# a shared expert, and dense. The head runs over a 3-pair chunk, single pairs and a pair chained
# on its own state, at the hidden states q35's trunk produced. Skips (77) without numpy.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
DUMP=$BUILD/tests/test_mtp_ckpt
PEER=${MTP_PEER:-$BUILD/tests/peer/mtp_peer}
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || { echo "skip: no numpy"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
SHAPE="--vocab 512 --layers 4 --interval 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --ssm-head-dim 16"
# check NAME [--no-peer] EXPORT-ARGS...
check() {
  local name=$1 use_peer=1
  shift
  [ "${1:-}" = --no-peer ] && { use_peer=0; shift; }
  if ! "$Q35" export --tiny-test $SHAPE --mtp "$@" -o "$W/m.gguf" >/dev/null 2>&1; then
    echo "FAIL $name: export"; fails=$((fails + 1)); return
  fi
  local peer_out=
  if ! "$DUMP" --dump "$W/m.gguf" "$W/d.bin"; then
    echo "FAIL $name: dump"; fails=$((fails + 1)); return
  fi
  if [ $use_peer = 0 ]; then
    echo "note: llama.cpp's qwen35moe requires the shared expert: peer part skipped"
  elif [ -x "$PEER" ]; then
    if "$PEER" -m "$W/m.gguf" "$W/d.bin" "$W/p.bin"; then
      peer_out=$W/p.bin
    else
      echo "FAIL $name: mtp_peer"; fails=$((fails + 1)); return
    fi
  else
    echo "note: $PEER not built, llama.cpp part skipped"
  fi
  if $PY "$SRC/tests/tools/mtp_reference.py" "$W/m.gguf" "$W/d.bin" $peer_out; then
    echo "ok   $name"
  else
    echo "FAIL $name"; fails=$((fails + 1))
  fi
}
check "moe + shared expert"
check "moe, no shared expert" --no-peer --shexp-ff 0 --seed 5
check "dense" --arch qwen35 --dense-ff 128 --seed 9
# the comparison can fail: a head file whose dump is compared against another file's weights
"$Q35" export --tiny-test $SHAPE --mtp --seed 2 -o "$W/a.gguf" >/dev/null 2>&1
"$Q35" export --tiny-test $SHAPE --mtp --seed 3 -o "$W/b.gguf" >/dev/null 2>&1
"$DUMP" --dump "$W/a.gguf" "$W/d.bin"
if $PY "$SRC/tests/tools/mtp_reference.py" "$W/b.gguf" "$W/d.bin" >/dev/null; then
  echo "FAIL the reference accepts another model's logits"; fails=$((fails + 1))
else
  echo "ok   the reference rejects another model's logits"
fi
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
