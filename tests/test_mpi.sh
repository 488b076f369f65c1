#!/usr/bin/env bash
# test_mpi.sh - pipeline parallelism over MPI (src/dist/pp.c): `mpirun -np N q35 ...` on loopback
# computes exactly what one process computes. References: the default build's q35 (no MPI) on the
# same files. Checked: `q35 logits --all` files byte for byte (N = 2, 3; split by bytes and by
# --pp-split; prefill in chunks), seeded `q35 run` ids and text with penalties and filters (the
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
mpi 2 bench -m "$tmp/a3b.gguf" -t 1 -p 8 -n 4 -r 1 --json >"$tmp/bench.json" 2>/dev/null || true
grep -q '"decode_tok_s"' "$tmp/bench.json" && ok "bench on 2 ranks: $(head -c 80 "$tmp/bench.json")" || bad "bench on 2 ranks"

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
exit $fail
