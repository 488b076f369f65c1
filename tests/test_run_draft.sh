#!/usr/bin/env bash
# test_run_draft.sh - speculative decoding with the MTP head (issue 19): `q35 run --draft N`
# prints exactly the ids of `--draft 0`, bit for bit, for N = 1, 2, 3:
#   - on models whose head agrees with the trunk at a set rate (q35 export --tiny-test
#     --mtp-agree: MoE and dense), so drafts are accepted, partly accepted and rejected (the
#     stats line must show accepted < drafted and accepted > 0: the rollback runs at every depth);
#   - on a random head (almost nothing accepted: rollback after the first token every step);
#   - greedy and seeded sampling with top-k / top-p / min-p, presence / frequency / repetition
#     penalties, a --regex constraint, a prompt split into chunks, the context limit cutting the
#     last drafts short, the scalar SIMD level with 2 threads, a q8_0 KV cache, text mode (EOG stops) and a two-turn chat (snapshot reuse);
#   - --draft-vocab K (drafts among ids < K) with penalties;
#   - bad input: --draft on a file without an MTP head, --draft out of range, --draft-vocab
#     without --draft or above the vocabulary.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

SHAPE="--vocab 512 --layers 4 --interval 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --ssm-head-dim 16"
"$Q35" export --tiny-test $SHAPE --mtp-agree 0.7 -o "$W/moe.gguf" >/dev/null 2>&1 || fail "export moe"
"$Q35" export --tiny-test $SHAPE --arch qwen35 --dense-ff 128 --mtp-agree 0.9 --seed 3 -o "$W/dense.gguf" \
  >/dev/null 2>&1 || fail "export dense"
"$Q35" export --tiny-test $SHAPE --mtp -o "$W/rand.gguf" >/dev/null 2>&1 || fail "export random head"
"$Q35" export --tiny-test $SHAPE -o "$W/nomtp.gguf" >/dev/null 2>&1 || fail "export without head"

PROMPT=1,2,3,4,5,6,7,8,9,10,11,12
# run MODEL DRAFT ARGS...: ids on stdout into $W/out, the stats line into $W/stats
run() {
  local m=$1 d=$2
  shift 2
  "$Q35" run -m "$W/$m.gguf" --draft "$d" "$@" >"$W/out" 2>"$W/err" || { cat "$W/err"; return 1; }
  grep '^{' "$W/err" | tail -1 >"$W/stats"
}
stat() { sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p" "$W/stats"; }

tot_drafted=0
tot_accepted=0
# same MODEL NAME ARGS...: --draft 1..3 (plus $DRAFT_EXTRA) print what --draft 0 prints
same() {
  local m=$1 name=$2
  shift 2
  run "$m" 0 "$@" || { fail "$m $name: --draft 0 failed"; return; }
  cp "$W/out" "$W/ref"
  [ "$(stat draft_tokens)" = 0 ] || fail "$m $name: --draft 0 drafted"
  for d in 1 2 3; do
    if ! run "$m" $d "$@" ${DRAFT_EXTRA:-}; then fail "$m $name: --draft $d failed"; continue; fi
    if cmp -s "$W/out" "$W/ref"; then
      local dt da
      dt=$(stat draft_tokens)
      da=$(stat draft_accepted)
      tot_drafted=$((tot_drafted + dt))
      tot_accepted=$((tot_accepted + da))
      ok "$m $name --draft $d == --draft 0 (drafted $dt, accepted $da)"
    else
      fail "$m $name --draft $d differs from --draft 0"
    fi
  done
}

IDS="--tokens $PROMPT -n 48 --print-ids"
for m in moe dense; do
  same $m greedy $IDS --temperature 0
  same $m "seed 7 t 0.8" $IDS --seed 7 --temperature 0.8
  same $m "seed 11 t 1.5 top-k 5" $IDS --seed 11 --temperature 1.5 --top-k 5
  same $m "seed 3 t 1.2 top-p 0.9 min-p 0.05" $IDS --seed 3 --temperature 1.2 --top-p 0.9 --min-p 0.05
  same $m "seed 5 penalties" $IDS --seed 5 --temperature 1 --presence-penalty 0.5 --frequency-penalty 0.3 \
    --repetition-penalty 1.3
done
[ $tot_accepted -gt 0 ] && [ $tot_accepted -lt $tot_drafted ] &&
  ok "agreeing heads: $tot_accepted of $tot_drafted drafts accepted (some accepted, some rejected)" ||
  fail "agreeing heads: $tot_accepted of $tot_drafted drafts accepted (need some of each)"
same moe "prompt in chunks of 5" $IDS --seed 9 --temperature 0.9 --chunk 5
Q35_SIMD=scalar same moe "scalar level, 2 threads" $IDS --seed 13 --temperature 0.9 -t 2
same dense "q8_0 KV cache" $IDS --seed 14 --temperature 0.9 --kv q8_0
same moe "context limit" --tokens $PROMPT -n 27 --print-ids --ctx 40 --seed 2 --temperature 0.7
same moe "regex constraint (text mode)" -p hello -n 48 --seed 4 --temperature 1 --regex '[a-z ]{1,40}'
same moe "text mode" -p "hello world" -n 40 --seed 6 --temperature 0.9
DRAFT_EXTRA="--draft-vocab 128" same moe "draft vocabulary 128, penalties" $IDS --seed 12 --temperature 0.8 \
  --repetition-penalty 1.2
same rand "random head" $IDS --seed 8 --temperature 0.8
same rand "random head greedy" $IDS --temperature 0

# chat: two turns (the second reuses the session's snapshot, so its prefill starts past 0)
for d in 0 2; do
  printf 'hi\nhow are you\n' | "$Q35" run -m "$W/moe.gguf" --chat -n 30 --draft $d --seed 1 --temperature 0.7 \
    >"$W/chat$d" 2>"$W/chat_err$d" || fail "chat --draft $d failed"
done
if cmp -s "$W/chat0" "$W/chat2" && [ -s "$W/chat0" ]; then
  ok "chat, two turns: --draft 2 == --draft 0 ($(grep -o '"draft_accepted": [0-9]*' "$W/chat_err2" | tr '\n' ' '))"
else
  fail "chat, two turns: --draft 2 differs from --draft 0"
fi

# bad input
if "$Q35" run -m "$W/nomtp.gguf" --tokens 1,2 -n 4 --draft 2 >"$W/out" 2>"$W/err"; then
  fail "--draft on a file without an MTP head was accepted"
elif grep -q "MTP head" "$W/err"; then
  ok "--draft without an MTP head: refused, the message names the head"
else
  fail "--draft without an MTP head: unclear message: $(cat "$W/err")"
fi
for bad in "--draft-vocab 100" "--draft 1 --draft-vocab 513" "--draft 1 --draft-vocab -3"; do
  if "$Q35" run -m "$W/moe.gguf" --tokens 1,2 -n 4 $bad >/dev/null 2>"$W/err"; then
    fail "$bad accepted"
  else
    ok "$bad refused ($(head -c 90 "$W/err" | tr '\n' ' '))"
  fi
done
for bad in -1 17 x; do
  if "$Q35" run -m "$W/moe.gguf" --tokens 1,2 -n 4 --draft $bad >/dev/null 2>"$W/err"; then
    fail "--draft $bad accepted"
  else
    ok "--draft $bad refused ($(head -c 80 "$W/err"))"
  fi
done

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
