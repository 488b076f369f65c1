#!/usr/bin/env bash
# test_bad_input.sh - the CLI on bad input: truncated and corrupt GGUF models (cut at many
# points, flipped header fields, huge counts, a tensor shape or a hyperparameter that
# disagrees with the rest), bad token ids, prompts longer than --ctx, bad sampling flags,
# missing files, unknown flags and commands. Each must exit 1 or 2 (never >= 128, never 0),
# print a message on stderr that names the problem, print nothing on stdout, and raise no
# sanitizer report (in the Q35_SANITIZE build).
set -u
: "${Q35:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
n=0
"$Q35" export --tiny-test -o "$T/tiny.gguf" >/dev/null 2>&1 || { echo "FAIL: cannot make the tiny model"; exit 1; }
# sanity: the good model runs
"$Q35" run -m "$T/tiny.gguf" --tokens 1,2,3 -n 2 --print-ids --seed 1 -t 1 >"$T/out" 2>"$T/err" \
  || { echo "FAIL: the good model does not run: $(tail -3 "$T/err")"; exit 1; }

# expect NAME PATTERN -- command...: bad input; PATTERN (grep -E -i) must appear on stderr
expect() {
  local name=$1 pat=$2; shift 3
  n=$((n + 1))
  timeout 120 "$@" >"$T/out" 2>"$T/err" </dev/null
  local rc=$?
  local why=""
  if [ $rc = 0 ]; then why="exit 0"
  elif [ $rc = 124 ]; then why="hung (timeout)"
  elif [ $rc -ge 128 ]; then why="crashed (exit $rc)"
  elif [ $rc != 1 ] && [ $rc != 2 ]; then why="exit $rc (want 1 or 2)"
  fi
  [ -s "$T/out" ] && why="$why${why:+; }output on stdout: $(head -c 200 "$T/out")"
  [ -s "$T/err" ] || why="$why${why:+; }nothing on stderr"
  grep -qE "AddressSanitizer|LeakSanitizer|runtime error:|UndefinedBehaviorSanitizer" "$T/err" && why="$why${why:+; }sanitizer report"
  grep -qiE -- "$pat" "$T/err" || why="$why${why:+; }stderr does not name the problem (/$pat/)"
  if [ -n "$why" ]; then
    echo "FAIL $name: $why"; sed -n 1,15p "$T/err" | sed 's/^/     /'; fail=1
  else
    echo "ok   $name (exit $rc): $(grep -v '^loading' "$T/err" | head -1 | cut -c1-150)"
  fi
}
RM=(run --tokens 1,2,3 -n 2 --print-ids --seed 1 -t 1 -m)

# ---- corrupt model files ----
size=$(stat -c %s "$T/tiny.gguf")
for cut in 0 3 4 8 16 24 40 100 1000 4000 20000 $((size / 2)) $((size - 4096)) $((size - 1)); do
  head -c "$cut" "$T/tiny.gguf" >"$T/cut.gguf"
  expect "truncated at $cut of $size bytes" "cut.gguf" -- "$Q35" "${RM[@]}" "$T/cut.gguf"
done
# patch FILE OFFSET HEX: overwrite bytes
patch() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
corrupt() { cp "$T/tiny.gguf" "$T/bad.gguf"; patch "$T/bad.gguf" "$1" "$2"; }
corrupt 0 'XGUF';                          expect "bad magic" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt 4 '\x63\x00\x00\x00';              expect "version 99" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt 4 '\x01\x00\x00\x00';              expect "version 1" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt 8 '\xff\xff\xff\xff\xff\xff\xff\x7f'; expect "tensor count 2^63" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt 16 '\xff\xff\xff\xff\xff\xff\xff\xff'; expect "kv count 2^64-1" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt 16 '\x00\x00\x00\x00\x00\x00\x00\x00'; expect "kv count 0" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt 24 '\xff\xff\xff\xff\xff\xff\x00\x00'; expect "huge key length" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
# offsets of fields inside the file, found by a small independent GGUF walker
python3 - "$T/tiny.gguf" >"$T/fields" <<'PY' || { echo "FAIL: python gguf walker"; exit 1; }
import struct, sys
b = open(sys.argv[1], "rb").read()
o = 24
n_t, n_kv = struct.unpack_from("<QQ", b, 8)
fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t, o):
    if t in fixed: return o + fixed[t]
    if t == 8: (l,) = struct.unpack_from("<Q", b, o); return o + 8 + l
    at, an = struct.unpack_from("<IQ", b, o); o += 12
    for _ in range(an): o = skip(at, o)
    return o
for _ in range(n_kv):
    (l,) = struct.unpack_from("<Q", b, o); key = b[o + 8:o + 8 + l].decode(); o += 8 + l
    (t,) = struct.unpack_from("<I", b, o)
    if key.endswith(".embedding_length") and t == 4: print("embd_len_off", o + 4, struct.unpack_from("<I", b, o + 4)[0])
    if key == "tokenizer.ggml.tokens": print("tokens_type_off", o)
    o = skip(t, o + 4)
for i in range(n_t):
    (l,) = struct.unpack_from("<Q", b, o); name = b[o + 8:o + 8 + l].decode(); o += 8 + l
    (nd,) = struct.unpack_from("<I", b, o)
    if name == "token_embd.weight": print("embd_dim0_off", o + 4, struct.unpack_from("<Q", b, o + 4)[0])
    if i == n_t - 1: print("last_type_off", o + 4 + 8 * nd); print("last_offset_off", o + 8 + 8 * nd)
    o += 4 + 8 * nd + 12
PY
get() { awk -v k="$1" '$1 == k { print $2 }' "$T/fields"; }
corrupt "$(get embd_len_off)" '\x80\x00\x00\x00'
expect "embedding_length 128 vs tensors of 256" "embd|embedding|shape|token_embd" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt "$(get embd_dim0_off)" '\x80\x00\x00\x00\x00\x00\x00\x00'
expect "token_embd.weight dim 128 vs embedding_length 256" "token_embd|shape" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt "$(get last_type_off)" '\xc8\x00\x00\x00'
expect "tensor type 200" "type" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt "$(get last_offset_off)" '\x00\x00\x00\x00\x00\x00\x00\x10'
expect "tensor data offset past the end" "offset|outside|bounds|beyond|past|truncat" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
corrupt "$(get tokens_type_off)" '\x04\x00\x00\x00'
expect "tokenizer.ggml.tokens type changed to u32" "bad.gguf" -- "$Q35" "${RM[@]}" "$T/bad.gguf"
: >"$T/empty.gguf"
expect "empty file" "empty.gguf" -- "$Q35" "${RM[@]}" "$T/empty.gguf"
expect "a directory as model" "$T|directory|regular" -- "$Q35" "${RM[@]}" "$T"
expect "missing model file" "nonexistent" -- "$Q35" "${RM[@]}" "$T/nonexistent.gguf"

# ---- prompts and token ids ----
M=(-m "$T/tiny.gguf" -n 2 --print-ids --seed 1 -t 1)
expect "token id = vocab size" "1024|token|range" -- "$Q35" run "${M[@]}" --tokens 1,2,1024
expect "token id 2^31" "token|range|2147483648" -- "$Q35" run "${M[@]}" --tokens 2147483648
expect "negative token id" "token|range|-1" -- "$Q35" run "${M[@]}" --tokens 1,-1
expect "non-numeric token id" "token|abc" -- "$Q35" run "${M[@]}" --tokens 1,abc
expect "empty --tokens" "token|empty" -- "$Q35" run "${M[@]}" --tokens ""
expect "prompt longer than --ctx" "ctx|context" -- "$Q35" run "${M[@]}" --ctx 8 --tokens 1,2,3,4,5,6,7,8,9,10,11,12
expect "--ctx 0" "ctx|context" -- "$Q35" run "${M[@]}" --ctx 0 --tokens 1,2
expect "tokenize: missing --file" "nonexistent" -- "$Q35" tokenize -m "$T/tiny.gguf" --file "$T/nonexistent.txt"
expect "tokenize: missing tokenizer.json" "nonexistent" -- "$Q35" tokenize --tokenizer "$T/nonexistent.json" --text hi
expect "tokenize: invalid UTF-8" "utf-8|byte" -- "$Q35" tokenize -m "$T/tiny.gguf" --text "$(printf 'a\xffb')"
expect "detokenize id out of range" "1024|range|id" -- "$Q35" detokenize -m "$T/tiny.gguf" --ids 5,1024
expect "tokenize with a missing model" "nonexistent" -- "$Q35" tokenize -m "$T/nonexistent.gguf" --text hi

# ---- sampling flags ----
R=("$Q35" run "${M[@]}" --tokens 1,2,3)
expect "--temperature nan" "temperature" -- "${R[@]}" --temperature nan
expect "--temperature inf" "temperature" -- "${R[@]}" --temperature inf
expect "--temperature -2" "temperature" -- "${R[@]}" --temperature -2
expect "--temperature abc" "temperature" -- "${R[@]}" --temperature abc
expect "--top_p 0" "top_p" -- "${R[@]}" --top_p 0
expect "--top_p 1.5" "top_p" -- "${R[@]}" --top_p 1.5
expect "--top_p nan" "top_p" -- "${R[@]}" --top-p nan
expect "--min_p 2" "min_p" -- "${R[@]}" --min_p 2
expect "--min_p -0.1" "min_p" -- "${R[@]}" --min-p -0.1
expect "--repetition_penalty 0" "repetition_penalty" -- "${R[@]}" --repetition_penalty 0
expect "--presence_penalty 3" "presence_penalty" -- "${R[@]}" --presence_penalty 3
expect "--frequency_penalty -2.5" "frequency_penalty" -- "${R[@]}" --frequency_penalty -2.5
expect "--top_k abc" "top_k" -- "${R[@]}" --top_k abc
expect "--seed xyz" "seed" -- "${R[@]}" --seed xyz
expect "-n -5" "-n|max_new_tokens|tokens" -- "${R[@]}" -n -5
expect "--threads 0x" "thread|-t" -- "${R[@]}" -t 0x

# ---- host limits ----
expect "--mem-budget 12Q" "mem-budget" -- "${R[@]}" --mem-budget 12Q
expect "--mem-budget -1G" "mem-budget" -- "${R[@]}" --mem-budget -1G
expect "--ctx 1M under --mem-budget 64M" "mem-budget.*ctx|ctx.*mem-budget" -- "${R[@]}" --ctx 1048576 --mem-budget 64M
expect "serve --mem-budget x" "mem-budget" -- "$Q35" serve -m "$T/tiny.gguf" --mem-budget x
expect "serve --timeout -1" "timeout" -- "$Q35" serve -m "$T/tiny.gguf" --timeout -1
expect "serve --session-idle-timeout abc" "idle" -- "$Q35" serve -m "$T/tiny.gguf" --session-idle-timeout abc

# ---- usage ----
expect "unknown flag" "bogus" -- "${R[@]}" --bogus
expect "flag without its value" "temperature" -- "$Q35" run -m "$T/tiny.gguf" --tokens 1,2 --temperature
expect "no model" "model|-m" -- "$Q35" run --tokens 1,2
expect "unknown command" "frobnicate" -- "$Q35" frobnicate
expect "sample: bad --top_p" "top_p" -- "$Q35" sample --logits "$T/tiny.gguf" --vocab 1024 --top_p 1.5

echo "$n cases"
[ $fail = 0 ] && echo PASS || exit 1
