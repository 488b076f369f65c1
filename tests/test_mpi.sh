#!/usr/bin/env bash
# test_mpi.sh - pipeline parallelism over MPI (src/dist/pp.c): `mpirun -np N q35 ...` on loopback
# computes exactly what one process computes. References: the default build's q35 (no MPI) on the
# same files. Checked: `q35 logits --all` files byte for byte (N = 2, 3; split by bytes and by
# --pp-split; prefill in chunks; a split GGUF against the unsplit file, mapped and --no-mmap, with
# each rank's peak memory below 75% of the file), seeded `q35 run` ids and text with penalties and filters (the
# last rank samples) and with a constraint (logits come back to rank 0), tiny MoE, dense tied and
# a small file with the 35B-A3B layer shapes; a bad split and too many ranks are refused with a
# message; a rank killed mid-generation ends the job within seconds, with mpirun naming it.
# Needs Open MPI (mpirun, mpicc: tools/setup.sh installs openmpi-bin and libopenmpi-dev); skips
# (77) without it. Builds the MPI variant (-DQ35_MPI=ON, the q35 target only) under the build
# directory unless Q35_MPI_BIN names one.
set -euo pipefail
: "${Q35:?}" "${Q35_BUILD:?}" "${Q35_SRC:?}"
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
  echo "SKIP: no Open MPI (apt-get install openmpi-bin libopenmpi-dev)"
  exit 77
fi
tmp=$(mktemp -d)
bg=
cleanup() { [ -z "$bg" ] || kill "$bg" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
same_file() { if cmp -s "$1" "$2" && [ -s "$1" ]; then ok "$3"; else bad "$3"; fi; }
same() { if [ "$1" = "$2" ] && [ -n "$1" ]; then ok "$3"; else bad "$3 ('$1' vs '$2')"; fi; }

mpiq=${Q35_MPI_BIN:-}
nompi=1 # $Q35 is the build without MPI
if ldd "$Q35" 2>/dev/null | grep -q libmpi; then mpiq=$Q35 nompi=0; fi
if [ -z "$mpiq" ]; then
  dir=$Q35_BUILD/mpi
  extra=()
  [ "${Q35_SANITIZE_RUN:-0}" = 1 ] && extra=(-DQ35_SANITIZE=ON)
  t0=$(date +%s)
  cmake -S "$Q35_SRC" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DQ35_MPI=ON "${extra[@]}" >/dev/null
  cmake --build "$dir" --target q35 -j"$(nproc)" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
  echo "built the MPI variant in $(($(date +%s) - t0)) s"
  mpiq=$dir/q35
fi
# Open MPI's own allocations are not q35's leaks
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
mpi() {
  local np=$1
  shift
  timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none -np "$np" "$mpiq" "$@"
}

"$Q35" export --tiny-test -o "$tmp/moe.gguf" --layers 6 --type q8_0 >/dev/null 2>&1
"$Q35" export --tiny-test -o "$tmp/dense.gguf" --arch qwen35 --layers 4 --tied --type q4_0 >/dev/null 2>&1
"$Q35" export --tiny-test -o "$tmp/a3b.gguf" --embd 2048 --heads 16 --kv-heads 2 --head-dim 256 --rot 64 \
  --ssm-k-heads 16 --ssm-v-heads 32 --ssm-head-dim 128 --experts 4 --experts-used 2 --ff 512 --shexp-ff 512 \
  --vocab 2048 --layers 4 --type q8_0 >/dev/null 2>&1

toks=1,2,3,4,5,6,7,8,9,10,11
for m in moe dense a3b; do
  "$Q35" logits -m "$tmp/$m.gguf" --tokens $toks --all -t 1 -o "$tmp/$m.ref" 2>/dev/null
  mpi 2 logits -m "$tmp/$m.gguf" --tokens $toks --all -t 1 -o "$tmp/$m.2" 2>"$tmp/err2" || cat "$tmp/err2"
  same_file "$tmp/$m.ref" "$tmp/$m.2" "$m: logits of 2 ranks (split by bytes) = one process"
  mpi 3 logits -m "$tmp/$m.gguf" --tokens $toks --all -t 1 --chunk 4 -o "$tmp/$m.3" 2>"$tmp/err3" || cat "$tmp/err3"
  same_file "$tmp/$m.ref" "$tmp/$m.3" "$m: logits of 3 ranks, prefill in chunks of 4 = one process"
done
# a split GGUF (13 shards of at most 20 MB): each stage maps its tensors from whichever shards hold
# them (no data of the others); the logits equal one process on the unsplit file, and each rank's
# peak resident memory is about its share (under 75% of the file; not under the sanitizers)
"$Q35" export --tiny-test -o "$tmp/a3bs.gguf" --embd 2048 --heads 16 --kv-heads 2 --head-dim 256 --rot 64 \
  --ssm-k-heads 16 --ssm-v-heads 32 --ssm-head-dim 128 --experts 4 --experts-used 2 --ff 512 --shexp-ff 512 \
  --vocab 2048 --layers 4 --type q8_0 --split-max-size 20M >/dev/null 2>&1
s1=$tmp/a3bs-00001-of-00013.gguf
mpi 2 logits -m "$s1" --tokens $toks --all -t 1 -o "$tmp/a3bs.2" 2>"$tmp/errs2" || cat "$tmp/errs2"
same_file "$tmp/a3b.ref" "$tmp/a3bs.2" "a3b split in 13 shards: logits of 2 ranks = one process on the unsplit file"
mpi 3 logits -m "$s1" --tokens $toks --all -t 1 --chunk 4 --no-mmap -o "$tmp/a3bs.3" 2>"$tmp/errs3" || cat "$tmp/errs3"
same_file "$tmp/a3b.ref" "$tmp/a3bs.3" "a3b split in 13 shards: logits of 3 ranks, --no-mmap, chunks of 4 = one process"
if [ "${Q35_SANITIZE_RUN:-0}" != 1 ]; then
  fmib=$(($(stat -c %s "$tmp/a3b.gguf") / 1048576))
  for e in errs2 errs3; do
    peaks=$(grep -o 'peak resident memory [0-9.]*' "$tmp/$e" | awk '{print $4}' | sort -n | tr '\n' ' ')
    if [ -n "$peaks" ] && [ "$(echo "$peaks" | awk -v f="$fmib" '{for (i = 1; i <= NF; i++) if ($i > 0.75 * f) bad = 1} END {print bad + 0}')" = 0 ]; then
      ok "split file, $e: every rank's peak resident memory (${peaks}MiB) < 75% of the file (${fmib} MiB)"
    else
      bad "split file, $e: peak resident memory '${peaks}' MiB of a ${fmib} MiB file"
    fi
  done
fi
grep -q "pipeline: 3 ranks: rank 0 layers \[0, 1) .*rank 2 layers \[3, 4)" "$tmp/err3" &&
  ok "a3b: the split is printed ($(grep -o 'pipeline: 3 ranks.*' "$tmp/err3"))" || bad "no split line: $(cat "$tmp/err3")"
for split in 0:1,1:5,5:6 0:4,4:5,5:6; do
  mpi 3 logits -m "$tmp/moe.gguf" --tokens $toks --all -t 1 --pp-split $split -o "$tmp/s.bin" 2>/dev/null || true
  same_file "$tmp/moe.ref" "$tmp/s.bin" "moe: logits of 3 ranks with --pp-split $split = one process"
done
mpi 2 logits -m "$tmp/moe.gguf" --tokens $toks -t 1 --pp_split 0:5,5:6 -o "$tmp/last2" 2>/dev/null || true
"$Q35" logits -m "$tmp/moe.gguf" --tokens $toks -t 1 -o "$tmp/last1" 2>/dev/null
same_file "$tmp/last1" "$tmp/last2" "moe: last-position logits of 2 ranks (--pp_split 0:5,5:6) = one process"

# seeded generation: the last rank samples (penalties, top-k / top-p, min-p), ids and text
samp=(--seed 7 --temperature 0.9 --top-k 40 --top-p 0.95 --min-p 0.01 --repetition-penalty 1.2 --presence-penalty 0.3)
for m in moe dense a3b; do
  a=$("$Q35" run -m "$tmp/$m.gguf" --tokens 1,2,3 -n 24 --print-ids -t 1 "${samp[@]}" 2>/dev/null)
  for np in 2 3; do
    b=$(mpi $np run -m "$tmp/$m.gguf" --tokens 1,2,3 -n 24 --print-ids -t 1 "${samp[@]}" 2>/dev/null || true)
    same "$a" "$b" "$m: seeded ids of $np ranks = one process"
  done
done
a=$("$Q35" run -m "$tmp/moe.gguf" -p "pipeline" -n 24 -t 1 "${samp[@]}" 2>/dev/null | od -An -tx1 | tr -d ' \n')
b=$(mpi 3 run -m "$tmp/moe.gguf" -p "pipeline" -n 24 -t 1 "${samp[@]}" 2>/dev/null | od -An -tx1 | tr -d ' \n' || true)
same "$a" "$b" "moe: seeded text of 3 ranks = one process"
a=$(echo "from stdin" | "$Q35" run -m "$tmp/dense.gguf" -n 16 -t 1 "${samp[@]}" 2>/dev/null | od -An -tx1 | tr -d ' \n')
b=$(echo "from stdin" | mpi 2 run -m "$tmp/dense.gguf" -n 16 -t 1 "${samp[@]}" 2>/dev/null | od -An -tx1 | tr -d ' \n' || true)
same "$a" "$b" "dense: seeded text of a prompt on stdin (rank 0 reads it), 2 ranks = one process"
a=$("$Q35" run -m "$tmp/moe.gguf" -p "x" -n 12 -t 1 --seed 3 --regex '[a-d]+' 2>/dev/null)
b=$(mpi 2 run -m "$tmp/moe.gguf" -p "x" -n 12 -t 1 --seed 3 --regex '[a-d]+' 2>/dev/null || true)
same "$a" "$b" "moe: constrained seeded text of 2 ranks (logits to rank 0, masks there) = one process"

# speculation (MTP drafts, issue 19): rank 0 binds the head and drafts; every stage checkpoints its
# own layers' state in a verify row and restores it on a rollback (CKPT_RESTORE); the last rank
# samples the verify rows and returns every position's hidden state (the head's input). --draft N
# under 2 and 3 ranks prints the ids of one process's --draft N and --draft 0 (greedy, seeded with
# penalties, a regex constraint: logits to rank 0) with the same drafts and acceptances, on a head
# that agrees with the trunk at a set rate (whose trunk maps each token to the next, whatever the
# state) and on random weights (nearly every draft rejected; a stage that kept a rejected draft's
# state would change the tokens)
"$Q35" export --tiny-test -o "$tmp/mtp.gguf" --layers 6 --mtp-agree 0.7 --type q8_0 >/dev/null 2>&1
"$Q35" export --tiny-test -o "$tmp/rmtp.gguf" --layers 6 --mtp --type q8_0 >/dev/null 2>&1
dstats() { grep -o '"draft_tokens": [0-9]*, "draft_accepted": [0-9]*' "$1" | tail -1 || true; }
for m in mtp rmtp; do
  for s in "--temperature 0" "--seed 5 --temperature 0.8 --top-k 40 --repetition-penalty 1.2 --presence-penalty 0.3"; do
    ids=(-m "$tmp/$m.gguf" --tokens 1,2,3,4,5,6,7,8,9,10,11,12 -n 40 --print-ids -t 1)
    a=$("$Q35" run "${ids[@]}" $s --draft 0 2>/dev/null || true)
    a2=$("$Q35" run "${ids[@]}" $s --draft 2 2>"$tmp/d1" || true)
    same "$a" "$a2" "$m ($s): one process, --draft 2 = --draft 0"
    for np in 2 3; do
      b=$(mpi $np run "${ids[@]}" $s --draft 2 2>"$tmp/d$np" || true)
      same "$a" "$b" "$m ($s): --draft 2 on $np ranks = one process's --draft 0"
      same "$(dstats "$tmp/d1")" "$(dstats "$tmp/d$np")" "$m ($s): $np ranks drafted and accepted as one process"
      # (the agreeing head: drafts accepted and rejected, so every stage rolls back at every depth)
      [ $m = rmtp ] || dstats "$tmp/d$np" | awk '{d = $2 + 0; a = $4 + 0; exit !(a > 0 && a < d)}' ||
        bad "$m ($s): $np ranks: drafts all or none accepted ($(dstats "$tmp/d$np"))"
    done
  done
done
a=$("$Q35" run -m "$tmp/mtp.gguf" -p "x" -n 16 -t 1 --seed 3 --regex '[a-d]+( [a-d]+)*' 2>/dev/null)
b=$(mpi 2 run -m "$tmp/mtp.gguf" -p "x" -n 16 -t 1 --seed 3 --regex '[a-d]+( [a-d]+)*' --draft 3 2>/dev/null || true)
same "$a" "$b" "mtp: constrained seeded text, --draft 3 on 2 ranks = one process's --draft 0"
mpi 2 bench -m "$tmp/a3b.gguf" -t 1 -p 8 -n 4 -r 1 --json >"$tmp/bench.json" 2>/dev/null || true
grep -q '"decode_tok_s"' "$tmp/bench.json" && ok "bench on 2 ranks: $(head -c 80 "$tmp/bench.json")" || bad "bench on 2 ranks"

# serve: rank 0 owns HTTP, tokenization and the scheduler; the answers (seeded chat and
# completions, streamed and not, n = 8, structured outputs (a JSON schema, a regex-free grammar:
# logits to rank 0, masks there), concurrent requests, a follow-up turn that reuses a stored
# prefix through a collective snapshot restore) equal a single-process server's byte for byte
# (ids and timestamps left out). Under N ranks the sequences run in N groups whose steps are in
# flight at once (--pp-groups, default N): n = 8 decodes in steps of 4 rows, two groups in flight,
# and 3 ranks (3 groups) answer concurrent plain and constrained requests as one process does.
# The reference is the build without MPI when there is one.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() {
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health" || true)" = 200 ] && return 0
    sleep 0.1
  done
  return 1
}
sopts=(--parallel 8 --ctx 512 -t 1 --no-think --max-sessions 4)
p1=$(free_port)
"$Q35" serve -m "$tmp/moe.gguf" --port "$p1" "${sopts[@]}" >"$tmp/s1.log" 2>&1 &
s1=$!
p2=$(free_port)
timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
  -np 2 "$mpiq" serve -m "$tmp/moe.gguf" --port "$p2" "${sopts[@]}" >"$tmp/s2.log" 2>&1 &
s2=$!
p3=$(free_port)
timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
  -np 3 "$mpiq" serve -m "$tmp/moe.gguf" --port "$p3" "${sopts[@]}" >"$tmp/s3.log" 2>&1 &
s3=$!
bg="$s1 $s2 $s3"
cleanup() { for p in $bg; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
if wait_health "$p1" && wait_health "$p2" && wait_health "$p3"; then
  ok "servers under mpirun -np 2 and -np 3 are healthy: $(grep -o 'pipeline: 2 ranks.*' "$tmp/s2.log" | head -1)"
else
  bad "the servers did not become healthy: $(tail -5 "$tmp/s2.log" "$tmp/s3.log")"
fi
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v k="q35_$2" '$1 == k {print $2}'; }
for pg in "$p2 2" "$p3 3"; do
  set -- $pg
  [ "$(metric "$1" step_groups)" = "$2" ] && ok "serve on $2 ranks: $2 groups of sequences in flight" ||
    bad "serve on $2 ranks: step_groups '$(metric "$1" step_groups)'"
done
# post PORT PATH BODY [session]: the answer with ids and timestamps dropped, one JSON value a line
post() {
  curl -s -N -H 'Content-Type: application/json' ${4:+-H "X-Session-Id: $4"} -d "$3" "http://127.0.0.1:$1$2" |
    /usr/bin/python3 -c '
import json, sys
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if k not in ("id", "created", "system_fingerprint")}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
for line in sys.stdin:
    line = line.strip()
    if line.startswith("data: "):
        line = line[6:]
    if not line or line == "[DONE]":
        continue
    print(json.dumps(clean(json.loads(line)), sort_keys=True))'
}
sys='{"role":"system","content":"You are a pipeline."}'
u1='{"role":"user","content":"Tell me about stages and ranks."}'
u2='{"role":"user","content":"Something else entirely."}'
declare -A body
body[chat]='{"model":"moe.gguf","messages":['"$sys,$u1"'],"max_tokens":20,"seed":11,"temperature":0.9,"logprobs":true,"top_logprobs":3}'
body[stream]='{"model":"moe.gguf","messages":['"$sys,$u2"'],"max_tokens":20,"seed":12,"temperature":0.8,"stream":true,"stream_options":{"include_usage":true}}'
body[n8]='{"model":"moe.gguf","messages":['"$sys,$u1"'],"max_tokens":12,"seed":13,"n":8,"top_p":0.9,"presence_penalty":0.5}'
body[completion]='{"model":"moe.gguf","prompt":"pipeline parallel","max_tokens":16,"seed":14,"temperature":1.0,"top_k":30}'
schema='{"type":"object","properties":{"stage":{"type":"integer"},"name":{"type":"string","maxLength":6}},"required":["stage","name"]}'
body[schema]='{"model":"moe.gguf","messages":['"$sys,$u1"'],"max_tokens":24,"seed":15,"n":2,"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":'"$schema"'}}}'
body[grammar]='{"model":"moe.gguf","prompt":"ranks:","max_tokens":12,"seed":16,"grammar":"root ::= [a-d]+ \"!\""}'
for k in chat stream n8 completion schema grammar; do
  path=/v1/chat/completions
  [ $k = completion ] || [ $k = grammar ] && path=/v1/completions
  s0=$(metric "$p1" steps_total) t0=$(metric "$p2" steps_total)
  a=$(post "$p1" $path "${body[$k]}")
  b=$(post "$p2" $path "${body[$k]}")
  same "$a" "$b" "serve $k: 2 ranks = one process ($(echo "$b" | wc -l) JSON values)"
  [ $k = n8 ] && n8_1=$(($(metric "$p1" steps_total) - s0)) n8_2=$(($(metric "$p2" steps_total) - t0))
done
# n = 8 under 2 groups: steps of 4 rows, about twice the steps of one process (8-row steps)
if [ "$(metric "$p2" step_rows)" -le 4 ] && [ $((2 * n8_2)) -ge $((3 * n8_1)) ]; then
  ok "serve n8: $n8_2 steps of at most 4 rows on 2 ranks (2 groups in flight), $n8_1 on one process"
else
  bad "serve n8: $n8_2 steps on 2 ranks (latest of $(metric "$p2" step_rows) rows), $n8_1 on one process"
fi
# concurrent requests, plain and constrained, n = 2: rows of every group in one step on each server
cbody() {
  case $1 in
    1|3) echo '{"model":"moe.gguf","messages":['"$sys"',{"role":"user","content":"row '$1'"}],"max_tokens":16,"seed":'$1',"n":2}' ;;
    2) echo '{"model":"moe.gguf","messages":['"$sys"',{"role":"user","content":"row 2"}],"max_tokens":16,"seed":2,"n":2,"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":'"$schema"'}}}' ;;
    4) echo '{"model":"moe.gguf","prompt":"row 4","max_tokens":16,"seed":4,"n":2,"grammar":"root ::= [a-z ]+"}' ;;
  esac
}
for i in 1 2 3 4; do
  path=/v1/chat/completions
  [ $i = 4 ] && path=/v1/completions
  for p in "$p1" "$p2" "$p3"; do post "$p" $path "$(cbody $i)" >"$tmp/c$p.$i" & done
done
nocache() { sed 's/"cached_tokens": [0-9]*/"cached_tokens": N/'; }
wait_jobs() { for j in $(jobs -p); do case " $bg " in *" $j "*) ;; *) wait "$j" || true ;; esac; done; }
wait_jobs
for i in 1 2 3 4; do
  # (cached_tokens depend on which free slot each choice took, i.e. on arrival order, and the
  # 3-rank server saw none of the earlier requests; the session turns below check prefix reuse)
  same "$(nocache <"$tmp/c$p1.$i")" "$(nocache <"$tmp/c$p2.$i")" "serve: concurrent request $i, 2 ranks = one process"
  same "$(nocache <"$tmp/c$p1.$i")" "$(nocache <"$tmp/c$p3.$i")" "serve: concurrent request $i, 3 ranks = one process"
done
# a session's follow-up turn: the stored prefix comes back on every rank (cached_tokens > 0)
a1=$(post "$p1" /v1/chat/completions '{"model":"moe.gguf","messages":['"$sys,$u1"'],"max_tokens":8,"seed":21}' sess1)
b1=$(post "$p2" /v1/chat/completions '{"model":"moe.gguf","messages":['"$sys,$u1"'],"max_tokens":8,"seed":21}' sess1)
same "$a1" "$b1" "serve: a session's first turn, 2 ranks = one process"
reply=$(echo "$b1" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"]))')
# the branch off the system prompt (a snapshot restore), then the follow-up of the first turn
for k in 1 2; do
  if [ $k = 1 ]; then m='['"$sys,$u2"']'; else m='['"$sys,$u1"',{"role":"assistant","content":'"$reply"'},{"role":"user","content":"And then?"}]'; fi
  a=$(post "$p1" /v1/chat/completions '{"model":"moe.gguf","messages":'"$m"',"max_tokens":12,"seed":2'$k'}' sess1)
  b=$(post "$p2" /v1/chat/completions '{"model":"moe.gguf","messages":'"$m"',"max_tokens":12,"seed":2'$k'}' sess1)
  c=$(echo "$b" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null || echo 0)
  same "$a" "$b" "serve: follow-up $k of a session, 2 ranks = one process"
  if [ "${c:-0}" -gt 0 ]; then ok "serve: follow-up $k reused $c prompt tokens under mpirun"; else bad "serve: follow-up $k reused no prefix: $b"; fi
done
restores=$(curl -s "http://127.0.0.1:$p2/metrics" | awk '/^q35_prefix_cache_hits_total/ {print $2}')
[ "${restores:-0}" -ge 2 ] && ok "serve: $restores prefix hits under mpirun" || bad "serve: prefix hits '$restores'"
kill "$s1" "$s2" "$s3" 2>/dev/null || true
wait "$s1" 2>/dev/null || true
wait "$s2" 2>/dev/null || true
wait "$s3" 2>/dev/null || true
bg=

# serve with speculation under mpirun: --draft N steps one group (q35_context_step: the draft step
# verifies and rolls back within the call). Seeded chat with logprobs, n = 2, and a session's
# follow-up turn (a prefix restore, the head's state with it) equal a one-process server with the
# same --draft byte for byte, with drafts accepted on the pipeline; --draft with --pp-groups 2 is
# refused with a message.
dopts=(--parallel 4 --ctx 512 -t 1 --no-think --max-sessions 4 --draft 2 --draft-fixed)
p1=$(free_port)
"$Q35" serve -m "$tmp/mtp.gguf" --port "$p1" "${dopts[@]}" >"$tmp/d1.log" 2>&1 &
s1=$!
p2=$(free_port)
timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
  -np 2 "$mpiq" serve -m "$tmp/mtp.gguf" --port "$p2" "${dopts[@]}" >"$tmp/d2.log" 2>&1 &
s2=$!
bg="$s1 $s2"
if wait_health "$p1" && wait_health "$p2"; then
  dchat='{"model":"mtp.gguf","messages":['"$sys,$u1"'],"max_tokens":24,"seed":31,"temperature":0.8,"logprobs":true,"top_logprobs":2}'
  dn2='{"model":"mtp.gguf","prompt":"speculate","max_tokens":20,"seed":32,"n":2,"temperature":0.7}'
  for k in dchat dn2; do
    path=/v1/chat/completions
    [ $k = dn2 ] && path=/v1/completions
    a=$(post "$p1" $path "${!k}")
    b=$(post "$p2" $path "${!k}")
    same "$a" "$b" "serve --draft 2: $k, 2 ranks = one process"
  done
  a1=$(post "$p1" /v1/chat/completions '{"model":"mtp.gguf","messages":['"$sys,$u1"'],"max_tokens":8,"seed":33}' ds)
  b1=$(post "$p2" /v1/chat/completions '{"model":"mtp.gguf","messages":['"$sys,$u1"'],"max_tokens":8,"seed":33}' ds)
  reply=$(echo "$b1" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"]))' || echo '""')
  m='['"$sys,$u1"',{"role":"assistant","content":'"$reply"'},{"role":"user","content":"And then?"}]'
  a=$(post "$p1" /v1/chat/completions '{"model":"mtp.gguf","messages":'"$m"',"max_tokens":16,"seed":34}' ds)
  b=$(post "$p2" /v1/chat/completions '{"model":"mtp.gguf","messages":'"$m"',"max_tokens":16,"seed":34}' ds)
  c=$(echo "$b" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null || echo 0)
  same "$a1$a" "$b1$b" "serve --draft 2: a session's two turns, 2 ranks = one process"
  [ "${c:-0}" -gt 0 ] && ok "serve --draft 2: the follow-up reused $c prompt tokens under mpirun" ||
    bad "serve --draft 2: the follow-up reused no prefix: $b"
  acc=$(metric "$p2" draft_accepted_tokens_total)
  [ "$(metric "$p2" step_groups)" = 1 ] && [ "${acc:-0}" -gt 0 ] &&
    ok "serve --draft 2 on 2 ranks: one group, $acc drafts accepted of $(metric "$p2" draft_tokens_total)" ||
    bad "serve --draft 2 on 2 ranks: step_groups '$(metric "$p2" step_groups)', accepted '$acc'"
else
  bad "the --draft servers did not become healthy: $(tail -5 "$tmp/d1.log" "$tmp/d2.log")"
fi
kill "$s1" "$s2" 2>/dev/null || true
wait "$s1" 2>/dev/null || true
wait "$s2" 2>/dev/null || true
bg=
if mpi 2 serve -m "$tmp/mtp.gguf" --port "$(free_port)" --draft 2 --pp-groups 2 >/dev/null 2>"$tmp/err"; then
  bad "serve --draft 2 --pp-groups 2 under mpirun ran"
else
  grep -q "speculation steps one group" "$tmp/err" && ok "serve --draft 2 --pp-groups 2: $(grep -o 'draft 2 with.*' "$tmp/err" | head -1)" ||
    bad "serve --draft 2 --pp-groups 2: $(head -c 300 "$tmp/err")"
fi

# refusals: a clear message, a non-zero exit, no hang
if mpi 3 logits -m "$tmp/moe.gguf" --tokens 1,2 -t 1 --pp-split 0:2,3:6,6:6 -o "$tmp/x" >/dev/null 2>"$tmp/err"; then
  bad "a split with a gap accepted"
else
  grep -q "pp-split '0:2,3:6,6:6': range 1 must be 2:E" "$tmp/err" && ok "a split with a gap is refused: $(grep -m1 -o "pp-split.*contiguous" "$tmp/err")" ||
    bad "unclear error: $(head -c 300 "$tmp/err")"
fi
if mpi 5 logits -m "$tmp/dense.gguf" --tokens 1,2 -t 1 -o "$tmp/x" >/dev/null 2>"$tmp/err"; then
  bad "5 ranks for 4 layers accepted"
else
  grep -q "5 ranks for a model of 4 layers" "$tmp/err" && ok "5 ranks for 4 layers refused" || bad "unclear error: $(head -c 300 "$tmp/err")"
fi
if [ $nompi = 0 ]; then
  :
elif "$Q35" logits -m "$tmp/moe.gguf" --tokens 1,2 --pp-split 0:6 -o "$tmp/x" >/dev/null 2>"$tmp/err"; then
  bad "--pp-split accepted by the build without MPI"
else
  grep -q "needs a build with MPI" "$tmp/err" && ok "the build without MPI refuses --pp-split" || bad "unclear error: $(cat "$tmp/err")"
  if "$Q35" serve -m "$tmp/moe.gguf" --pp-groups 2 >/dev/null 2>"$tmp/err"; then
    bad "serve --pp-groups accepted by the build without MPI"
  else
    grep -q "pp-groups needs a build with MPI" "$tmp/err" && ok "the build without MPI refuses serve --pp-groups" ||
      bad "unclear error: $(cat "$tmp/err")"
  fi
fi

# a rank killed mid-generation: the job ends within seconds, naming the rank
(rc=0
 mpi 3 run -m "$tmp/moe.gguf" --tokens 1,2,3 -n 1000000 --ctx 1000010 --print-ids -t 1 --seed 1 >/dev/null 2>"$tmp/kerr" || rc=$?
 echo $rc >"$tmp/krc") &
bg=$!
victim=
for _ in $(seq 100); do
  victim=$(pgrep -f "^$mpiq run -m $tmp/moe.gguf" | sort -n | sed -n 2p || true)
  [ -n "$victim" ] && grep -q "seed: 1" "$tmp/kerr" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
t0=$(date +%s.%N)
kill -9 "$victim"
for _ in $(seq 150); do [ -s "$tmp/krc" ] && break; sleep 0.1; done
t1=$(date +%s.%N)
bg=
if [ -s "$tmp/krc" ] && [ "$(cat "$tmp/krc")" != 0 ] && grep -q "exited on signal 9" "$tmp/kerr"; then
  ok "killing a rank ends the job in $(echo "$t1 - $t0" | bc) s (exit $(cat "$tmp/krc")): $(grep -o 'process rank [0-9].*Killed)' "$tmp/kerr" | head -1)"
else
  bad "killing a rank: exit '$(cat "$tmp/krc" 2>/dev/null)', $(head -c 400 "$tmp/kerr")"
fi

# a stopped rank (SIGSTOP: alive, so MPI sees no failure) mid-generation: after --pp-timeout
# seconds without progress the job ends with a message naming the rank, not a hang
rm -f "$tmp/hrc"
(rc=0
 mpi 3 run -m "$tmp/moe.gguf" --tokens 1,2,3 -n 1000000 --ctx 1000010 --print-ids -t 1 --seed 2 --pp-timeout 2 \
   >/dev/null 2>"$tmp/herr" || rc=$?
 echo $rc >"$tmp/hrc") &
bg=$!
victim=
for _ in $(seq 100); do
  victim=$(pgrep -f "^$mpiq run -m $tmp/moe.gguf" | sort -n | sed -n 2p || true)
  [ -n "$victim" ] && grep -q "seed: 2" "$tmp/herr" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
t0=$(date +%s.%N)
kill -STOP "$victim"
for _ in $(seq 300); do [ -s "$tmp/hrc" ] && break; sleep 0.1; done
t1=$(date +%s.%N)
kill -CONT "$victim" 2>/dev/null || true
bg=
if [ -s "$tmp/hrc" ] && [ "$(cat "$tmp/hrc")" != 0 ] && grep -q "no progress for 2 s (--pp-timeout)" "$tmp/herr"; then
  ok "a stopped rank ends the job in $(echo "$t1 - $t0" | bc) s (exit $(cat "$tmp/hrc")): $(grep -o 'rank [0-9]: [a-z ]* rank [0-9]: no progress[^;]*' "$tmp/herr" | head -1)"
else
  bad "a stopped rank: exit '$(cat "$tmp/hrc" 2>/dev/null)', $(head -c 400 "$tmp/herr")"
fi
exit $fail
