#!/usr/bin/env bash
# Export throughput and peak anonymous memory of `q35 export` on a random-weight HF checkpoint
# (hidden 256, 8 layers, 64 experts of 512; ~0.4 GB BF16). Not a test: prints numbers only.
#   usage: bench/export_bench.sh [Q35] [THREADS]
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
Q35=${1:-$SRC/build/q35}
T=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 "$SRC/tests/tools/hf_make_checkpoint.py" "$W/ck" --link-tokenizer --text-only --hidden 256 \
  --layers 8 --heads 4 --kv-heads 2 --head-dim 64 --lin-k-heads 2 --lin-v-heads 4 --lin-dim 64 \
  --experts 64 --topk 4 --moe-ff 512 --shexp-ff 512 --dtype BF16 --shards 4 >/dev/null
SZ=$(du -sbL "$W/ck"/*.safetensors | awk '{s += $1} END {print s}')
echo "checkpoint: $((SZ / 1048576)) MiB BF16"
for q in bf16 q8_0 q4_0 q4_k; do
  t0=$(date +%s.%N)
  "$Q35" export --model-dir "$W/ck" -o "$W/out.gguf" --qlinear "$q" --qembedding q8_0 --stats -q ${T:+-t $T} \
    2>"$W/log" || { cat "$W/log"; exit 1; }
  t1=$(date +%s.%N)
  peak=$(sed -n 's/.*rss_anon_peak \([0-9]*\).*largest_out \([0-9]*\).*/\1 \2/p' "$W/log")
  awk -v q="$q" -v t0="$t0" -v t1="$t1" -v sz="$SZ" -v pk="$peak" 'BEGIN {
    split(pk, a, " "); s = t1 - t0;
    printf "%-5s %6.2f s  %7.1f MiB/s of checkpoint  peak RssAnon %.1f MiB (largest output tensor %.1f MiB)\n",
      q, s, sz / 1048576 / s, a[1] / 1048576, a[2] / 1048576 }'
  rm -f "$W/out.gguf"
done
