#!/usr/bin/env bash
# pp_serve.sh - q35 serve as one process (N = 1) and as a pipeline of N = 2 ranks under mpirun,
# the latter with one step at a time (--pp-groups 1) and with the sequences in 2 groups whose steps
# are in flight at once (--pp-groups 2, the default):
# aggregate decode tok/s at 1, 2, 4 and 8 concurrent streams (bench/server_bench.mjs: the
# steady-state window, medians over rounds) and each rank's resident memory (VmRSS and VmHWM of
# the rank processes, read from /proc while the server runs). One thread per rank, ranks bound
# to separate cores (mpirun --bind-to core); N = 1 gets one thread too, so N = 2 uses twice the
# cores. Model: 35B-A3B layer shapes (hidden 2048, 32 experts top-8), 8 layers, vocab 32768,
# q8_0 (1.3 GB), generated once into the cache dir. docs/PERF.md has the figures and the model
# of a real cluster.
#
# Usage: bench/pp_serve.sh [BUILD_DIR_WITHOUT_MPI [MPI_BUILD_DIR]]   (default build, build-mpi)
#   env: Q35_BENCH_CACHE, BENCH_TOKENS (32), BENCH_STREAMS (1,2,4,8), BENCH_ROUNDS (3),
#        PP_MICRO (--pp-micro for N = 2; default: one micro-batch per rank),
#        BENCH_CONFIGS ("1 2:1 2:2": N = 1, then N = 2 with --pp-groups 1 and 2),
#        BENCH_NICE (e.g. -10: run the servers at that nice level, as root, so that other tenants
#        of a shared machine take less of their cores)
# Not part of ctest. On a shared machine read the ratios within one run, not the absolute figures.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
q35=${1:-$here/../build}/q35
mpiq=${2:-$here/../build-mpi}/q35
cache=${Q35_BENCH_CACHE:-$HOME/.cache/q35-bench}
mkdir -p "$cache"
model=$cache/a3b-e32-L8-v32k-q8_0.gguf
if [ ! -s "$model" ]; then
  echo "generating $model (once)..." >&2
  "$q35" export --tiny-test --embd 2048 --heads 16 --kv-heads 2 --head-dim 256 --rot 64 --ssm-k-heads 16 \
    --ssm-v-heads 32 --ssm-head-dim 128 --experts 32 --experts-used 8 --ff 512 --shexp-ff 512 --vocab 32768 \
    --layers 8 --type q8_0 -o "$model.tmp" >&2
  mv "$model.tmp" "$model"
fi
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
log=$(mktemp)
pid=
trap '[ -z "$pid" ] || kill $pid 2>/dev/null; rm -f "$log"' EXIT
# rss PID...: "VmRSS / VmHWM MiB" of each
rss() {
  for p in "$@"; do
    awk '/^VmRSS/ {r=$2} /^VmHWM/ {h=$2} END {printf "%.0f / %.0f MiB; ", r/1024, h/1024}' "/proc/$p/status"
  done
  echo
}
for cfg in ${BENCH_CONFIGS:-1 2:1 2:2}; do
  n=${cfg%%:*}
  groups=
  [ "$cfg" = "$n" ] || groups=${cfg#*:}
  port=$(free_port)
  sargs=(serve -m "$model" --host 127.0.0.1 --port "$port" --parallel 8 --ctx 1024 -t 1 --no-think)
  nice=()
  [ -z "${BENCH_NICE:-}" ] || nice=(nice -n "$BENCH_NICE")
  if [ $n = 1 ]; then
    "${nice[@]}" taskset -c 0 "$q35" "${sargs[@]}" >"$log" 2>&1 &
  else
    "${nice[@]}" mpirun --allow-run-as-root --oversubscribe --bind-to core --mca btl self,vader \
      --mca btl_vader_single_copy_mechanism none -np "$n" "$mpiq" "${sargs[@]}" ${PP_MICRO:+--pp-micro $PP_MICRO} \
      ${groups:+--pp-groups $groups} >"$log" 2>&1 &
  fi
  pid=$!
  for _ in $(seq 1 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && break
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.2
  done
  grep -m1 "pipeline:" "$log" >&2 || true
  if [ $n = 1 ]; then ranks=$pid; else ranks=$(pgrep -f "^$mpiq serve -m $model" | sort -n | xargs); fi
  # each process's rank and its CPU seconds once loaded: "rank seconds" lines
  loaded=$(for r in $ranks; do
    k=$(tr '\0' '\n' <"/proc/$r/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    awk -v k="${k:-0}" -v hz="$(getconf CLK_TCK)" '{printf "%s %.2f\n", k, ($14 + $15) / hz}' "/proc/$r/stat"
  done)
  tag=N=$n${groups:+,groups=$groups}
  echo "== $tag: q35 serve, 1 thread per rank, ${BENCH_TOKENS:-32} tokens per stream; load: $(uptime)" >&2
  Q35_URL="http://127.0.0.1:$port" node "$here/server_bench.mjs" | sed "s/^/$tag /"
  tokens=$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "q35_generated_tokens_total" {print $2}')
  # shellcheck disable=SC2086
  echo "$tag resident memory per rank (VmRSS / VmHWM): $(rss $ranks)"
  if [ $n = 1 ]; then
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' /proc/$pid/stat)
    echo "$tag CPU: $cpu s, $(echo "$loaded" | awk '{print $2}') s of it loading"
    echo "$loaded" | awk -v c="$cpu" -v t="$tokens" -v tag="$tag" '{w = c - $2; printf "%s compute after loading: %.2f s for %d generated tokens: %.2f ms/token\n", tag, w, t, 1000 * w / t}'
    kill $pid 2>/dev/null || true
  else
    # SIGTERM to rank 0 alone: the server stops, its model's QUIT stops the other ranks, and each
    # prints its CPU seconds and those spent in MPI waits (polling, spinning sends)
    for r in $ranks; do
      tr '\0' '\n' <"/proc/$r/environ" | grep -qx OMPI_COMM_WORLD_RANK=0 && kill "$r" 2>/dev/null
    done
  fi
  wait $pid 2>/dev/null || true
  if [ $n != 1 ]; then
    grep "done: peak resident memory" "$log" | sed "s/^/$tag /"
    # compute = CPU after loading less MPI waits, per rank; with every stage busy the slowest bounds
    # the throughput, with one stage at a time their sum does (dedicated cores, free hops)
    { echo "$loaded"; grep "done: peak resident memory" "$log"; } | awk -v t="$tokens" -v tag="$tag" '
      /^[0-9]+ [0-9.]+$/ {load[$1] = $2; next}
      { match($0, /rank [0-9]+/); r = substr($0, RSTART + 5, RLENGTH - 5)
        match($0, /CPU [0-9.]+ s/); c = substr($0, RSTART + 4, RLENGTH - 6)
        match($0, /it [0-9.]+ s in MPI/); w = substr($0, RSTART + 3, RLENGTH - 12)
        comp[r] = c - w; wt[r] = w; n++ }
      END { sum = 0; mx = 0; line = ""
        for (r = 0; r < n; r++) { x = comp[r] - load[r]; sum += x; if (x > mx) mx = x
          line = line sprintf(" rank %d %.2f s (MPI waits %.2f s);", r, x, wt[r]) }
        printf "%s compute after loading, less MPI waits:%s %d generated tokens: %.2f ms/token in all; bound on dedicated cores: %.1f tok/s one stage at a time, %.1f tok/s every stage busy\n", tag, line, t, 1000 * sum / t, t / sum, t / mx }'
  fi
  pid=
done
