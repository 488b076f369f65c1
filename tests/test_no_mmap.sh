#!/usr/bin/env bash
# test_no_mmap.sh - `--no-mmap` (weights read into anonymous memory, moved over the file mapping)
# computes exactly what the mapped file computes: logits of a MoE and a dense tiny model, greedy
# ids from `q35 run`, and `q35 bench` accepts the flag; a truncated file is refused the same way;
# the 2 MiB-page mapping of a larger file (and its re-read) computes the same as both.
set -euo pipefail
: "${Q35:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if [ "$1" = "$2" ]; then echo "ok   $3"; else echo "FAIL $3"; fail=1; fi; }
"$Q35" export --tiny-test -o "$tmp/moe.gguf" --type q4_0 >/dev/null 2>&1
"$Q35" export --tiny-test -o "$tmp/dense.gguf" --arch qwen35 --type q8_0 >/dev/null 2>&1
for m in moe dense; do
  "$Q35" logits -m "$tmp/$m.gguf" --tokens 1,2,3,4,5,6,7 --all -o "$tmp/a.bin" 2>/dev/null
  "$Q35" logits -m "$tmp/$m.gguf" --tokens 1,2,3,4,5,6,7 --all -o "$tmp/b.bin" --no-mmap 2>/dev/null
  [ -s "$tmp/a.bin" ] || { echo "FAIL no logits"; fail=1; }
  check "$(md5sum <"$tmp/a.bin")" "$(md5sum <"$tmp/b.bin")" "$m: logits identical with --no-mmap"
  a=$("$Q35" run -m "$tmp/$m.gguf" --tokens 1,2,3 -n 16 --temperature 0 --print-ids 2>/dev/null)
  b=$("$Q35" run -m "$tmp/$m.gguf" --tokens 1,2,3 -n 16 --temperature 0 --print-ids --no_mmap 2>/dev/null)
  check "$a" "$b" "$m: greedy ids identical with --no_mmap"
done
"$Q35" bench -m "$tmp/moe.gguf" -t 1 -p 8 -n 4 -r 1 --json --no-mmap >"$tmp/b.json" 2>/dev/null
grep -q '"decode_tok_s"' "$tmp/b.json" && echo "ok   bench --no-mmap" || { echo "FAIL bench --no-mmap"; fail=1; }
# A 32 MiB file (past the 2 MiB-page threshold): its first load finds it in the page cache in
# small pages, as the exporter wrote it, and re-reads it through the mapping in 2 MiB pages where
# the kernel can; whatever the kernel does, the logits equal --no-huge-pages and --no-mmap.
"$Q35" export --tiny-test -o "$tmp/big.gguf" --vocab 16384 --type f32 >/dev/null 2>&1
"$Q35" logits -m "$tmp/big.gguf" --tokens 1,2,3,4,5 --all -o "$tmp/h.bin" 2>/dev/null
"$Q35" logits -m "$tmp/big.gguf" --tokens 1,2,3,4,5 --all -o "$tmp/s.bin" --no-huge-pages 2>/dev/null
"$Q35" logits -m "$tmp/big.gguf" --tokens 1,2,3,4,5 --all -o "$tmp/n.bin" --no_mmap 2>/dev/null
[ -s "$tmp/h.bin" ] || { echo "FAIL no logits (32 MiB model)"; fail=1; }
check "$(md5sum <"$tmp/h.bin")" "$(md5sum <"$tmp/s.bin")" "32 MiB model: logits identical with 2 MiB and default pages"
check "$(md5sum <"$tmp/h.bin")" "$(md5sum <"$tmp/n.bin")" "32 MiB model: logits identical with --no-mmap"
"$Q35" bench -m "$tmp/big.gguf" -t 1 -p 4 -n 2 -r 1 --json >"$tmp/h.json" 2>/dev/null
hb=$(sed -n 's/.*"huge_mapped_bytes": \(-\{0,1\}[0-9]*\).*/\1/p' "$tmp/h.json")
[ -n "$hb" ] && echo "ok   bench reports huge_mapped_bytes ($hb of $(stat -c %s "$tmp/big.gguf") bytes on this kernel)" ||
  { echo "FAIL bench --json lacks huge_mapped_bytes"; fail=1; }
head -c 100000 "$tmp/moe.gguf" >"$tmp/trunc.gguf"
if "$Q35" run -m "$tmp/trunc.gguf" --tokens 1,2 -n 2 --no-mmap >/dev/null 2>"$tmp/err"; then
  echo "FAIL truncated file accepted"; fail=1
else
  grep -qi "trunc\|size\|beyond\|end of" "$tmp/err" && echo "ok   truncated file refused: $(head -c 120 "$tmp/err")" || { echo "FAIL unclear error: $(cat "$tmp/err")"; fail=1; }
fi
exit $fail
