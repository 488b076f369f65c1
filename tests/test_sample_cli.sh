#!/usr/bin/env bash
# test_sample_cli.sh - drives `$Q35 sample`: output shape, seeds, flag spellings, greedy against
# an argmax computed here (python), support restriction, and the error paths (bad flags, bad
# parameter values, a file whose size is not a multiple of 4 * V, NaN / +inf / all -inf rows).
set -u
Q35=${Q35:?set Q35 to the q35 binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# rows of little-endian float32: 3 rows of V=1000 random logits, a 4-token row, bad rows
python3 - "$T" <<'EOF'
import random, struct, sys, math
d = sys.argv[1]
random.seed(5)
rows = [[random.gauss(0, 2) for _ in range(1000)] for _ in range(3)]
with open(d + "/r3.bin", "wb") as f:
    for r in rows: f.write(struct.pack("<1000f", *r))
with open(d + "/argmax.txt", "w") as f:
    for r in rows:
        rf = [struct.unpack("<f", struct.pack("<f", x))[0] for x in r]
        f.write("%d\n" % rf.index(max(rf)))
p = [0.5, 0.3, 0.15, 0.05]
open(d + "/p4.bin", "wb").write(struct.pack("<4f", *[math.log(x) for x in p]))
open(d + "/nan.bin", "wb").write(struct.pack("<4f", 0.0, float("nan"), 1.0, 2.0))
open(d + "/inf.bin", "wb").write(struct.pack("<4f", 0.0, 1.0, float("inf"), 2.0))
open(d + "/ninf.bin", "wb").write(struct.pack("<4f", *[float("-inf")] * 4))
open(d + "/odd.bin", "wb").write(b"\0" * 10)
EOF

# shape: B lines of N ids, nothing else on stdout; seed on stderr
out=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 7 --seed 42 2>"$T/err")
rc=$?
[ $rc -eq 0 ] && ok "runs" || bad "exit $rc: $(cat "$T/err")"
[ "$(echo "$out" | wc -l)" -eq 3 ] && ok "3 lines" || bad "expected 3 lines, got: $out"
echo "$out" | awk '{ if (NF != 7) exit 1; for (i = 1; i <= NF; i++) if ($i !~ /^[0-9]+$/ || $i >= 1000) exit 1 }' \
  && ok "7 ids in range per line" || bad "line shape: $out"
grep -qx "seed: 42" "$T/err" && ok "seed on stderr" || bad "stderr: $(cat "$T/err")"

# same seed, same output; other seed, other output; both flag spellings
out2=$("$Q35" sample --logits="$T/r3.bin" --vocab=1000 --draws=7 --seed=42 2>/dev/null)
[ "$out" = "$out2" ] && ok "seeded run repeats (--flag=value)" || bad "seeded rerun differs"
out3=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 7 --seed 43 2>/dev/null)
[ "$out" != "$out3" ] && ok "another seed differs" || bad "seed 43 gave the same ids"
a=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 20 --seed 9 --top_k 5 --top_p 0.9 --min_p 0.01 --temperature 0.8 2>/dev/null)
b=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 20 --seed 9 --top-k 5 --top-p 0.9 --min-p 0.01 --temperature 0.8 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "--top_k and --top-k spellings agree" || bad "spellings differ: $a / $b"
# the first draws of a longer run are the shorter run (draw index = position)
c=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 3 --seed 42 2>/dev/null)
[ "$c" = "$(echo "$out" | cut -d' ' -f1-3)" ] && ok "draw n does not depend on --draws" || bad "prefix differs"

# unseeded: a random seed below 2^53 is reported
"$Q35" sample --logits "$T/p4.bin" --vocab 4 --draws 3 >/dev/null 2>"$T/err"
s=$(sed -n 's/^seed: \([0-9]*\)$/\1/p' "$T/err")
[ -n "$s" ] && python3 -c "import sys; sys.exit(0 if int('$s') < 2**53 else 1)" && ok "random seed $s reported" || bad "no seed: $(cat "$T/err")"

# greedy (temperature 0 and its -1 alias) is the argmax computed by python
g0=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 1 --temperature 0 2>/dev/null)
g1=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 1 --temperature -1 2>/dev/null)
[ "$g0" = "$(cat "$T/argmax.txt")" ] && ok "greedy = argmax" || bad "greedy $g0 vs $(cat "$T/argmax.txt")"
[ "$g0" = "$g1" ] && ok "--temperature -1 is greedy" || bad "-1 alias: $g1"
k1=$("$Q35" sample --logits "$T/r3.bin" --vocab 1000 --draws 5 --top_k 1 --seed 3 2>/dev/null | cut -d' ' -f1)
[ "$k1" = "$(cat "$T/argmax.txt")" ] && ok "top_k 1 = argmax" || bad "top_k 1: $k1"

# support restriction on probs [0.5, 0.3, 0.15, 0.05]
sup() { "$Q35" sample --logits "$T/p4.bin" --vocab 4 --draws 3000 --seed 11 "$@" 2>/dev/null | tr ' ' '\n' | sort -u | tr '\n' ' '; }
[ "$(sup --top_p 0.9)" = "0 1 2 " ] && ok "top_p 0.9 -> {0,1,2}" || bad "top_p 0.9: $(sup --top_p 0.9)"
[ "$(sup --top_k 3 --top_p 0.83)" = "0 1 " ] && ok "top_k 3, top_p 0.83 -> {0,1}" || bad "top_k 3 top_p .83: $(sup --top_k 3 --top_p 0.83)"
[ "$(sup)" = "0 1 2 3 " ] && ok "defaults reach the tail token" || bad "defaults: $(sup)"
[ "$(sup --top_k 100)" = "0 1 2 3 " ] && ok "top_k > V reaches every token" || bad "top_k 100: $(sup --top_k 100)"
[ "$(sup --min_p 0.5)" = "0 1 " ] && ok "min_p 0.5 -> {0,1}" || bad "min_p: $(sup --min_p 0.5)"
# penalties: generated token 0 with a large presence penalty leaves {1,2,3}... greedy picks 1
pg=$("$Q35" sample --logits "$T/p4.bin" --vocab 4 --temperature 0 --presence_penalty 2 --history 0 2>/dev/null)
[ "$pg" = "1" ] && ok "presence penalty moves greedy" || bad "presence: $pg"
pp=$("$Q35" sample --logits "$T/p4.bin" --vocab 4 --temperature 0 --presence_penalty 2 --history 0 --n_prompt 1 2>/dev/null)
[ "$pp" = "0" ] && ok "prompt tokens are not presence-penalized" || bad "n_prompt: $pp"

# errors: usage (2) and runtime (1), message on stderr, nothing on stdout
expect() { # expect CODE WORD args...
  local code=$1 word=$2; shift 2
  local o
  o=$("$Q35" sample "$@" 2>"$T/err")
  local rc=$?
  if [ $rc -eq "$code" ] && [ -z "$o" ] && grep -qi -- "$word" "$T/err"; then ok "exit $code ($word): $*"
  else bad "expected exit $code with '$word' for: $* (got $rc, stdout '$o', stderr '$(cat "$T/err")')"; fi
}
expect 2 "unknown" --logits "$T/p4.bin" --vocab 4 --bogus 1
expect 2 "logits" --vocab 4
expect 2 "vocab" --logits "$T/p4.bin"
expect 2 "vocab" --logits "$T/p4.bin" --vocab 0
expect 2 "temperature" --logits "$T/p4.bin" --vocab 4 --temperature -0.5
expect 2 "temperature" --logits "$T/p4.bin" --vocab 4 --temperature nan
expect 2 "temperature" --logits "$T/p4.bin" --vocab 4 --temperature abc
expect 2 "top_p" --logits "$T/p4.bin" --vocab 4 --top_p 0
expect 2 "top_p" --logits "$T/p4.bin" --vocab 4 --top-p 1.5
expect 2 "min_p" --logits "$T/p4.bin" --vocab 4 --min_p 2
expect 2 "top_k" --logits "$T/p4.bin" --vocab 4 --top_k 1.5
expect 2 "presence_penalty" --logits "$T/p4.bin" --vocab 4 --presence_penalty 3
expect 2 "frequency_penalty" --logits "$T/p4.bin" --vocab 4 --frequency-penalty -3
expect 2 "repetition_penalty" --logits "$T/p4.bin" --vocab 4 --repetition_penalty 0
expect 2 "seed" --logits "$T/p4.bin" --vocab 4 --seed -1
expect 2 "draws" --logits "$T/p4.bin" --vocab 4 --draws x
expect 2 "needs a value" --logits "$T/p4.bin" --vocab 4 --seed
expect 2 "history" --logits "$T/p4.bin" --vocab 4 --history 7
expect 1 "multiple of 4" --logits "$T/odd.bin" --vocab 2
expect 1 "multiple of 4" --logits "$T/p4.bin" --vocab 3
expect 1 "cannot open" --logits "$T/missing.bin" --vocab 4
expect 1 "NaN" --logits "$T/nan.bin" --vocab 4
expect 1 "+inf" --logits "$T/inf.bin" --vocab 4
expect 1 "-inf" --logits "$T/ninf.bin" --vocab 4 --temperature 0
"$Q35" sample --help >/dev/null 2>&1 && ok "--help" || bad "--help failed"

exit $fail
