#!/usr/bin/env bash
# bench/cputime.sh - q35 vs llama.cpp at ONE thread in CPU seconds, for a shared, busy machine.
#
#   bench/cputime.sh Q35 LLAMA_PEER MODEL.gguf [LEVEL=avx2] [ROUNDS=3] [PROMPT=512] [GEN=64]
#
# Wall-clock tok/s mean little when other jobs hold the cores (a process may get a tenth of one).
# User CPU time does not count the time a process waits, so at one thread it measures the work
# itself (what memory contention from the neighbours costs still counts, for both engines alike;
# system time is left out: it is mostly loading and mapping, which varies from run to run). Each
# engine runs three times per round: prompt PROMPT with 1 decode step, prompt 32 with 1 step, and
# prompt 32 with GEN+1 steps (each run: one untimed warm-up pass and one timed pass, both counted
# by the CPU clock), and the differences give
#   prefill CPU ms per token = (T(PROMPT, 1) - T(32, 1)) / (2 (PROMPT - 32))
#   decode  CPU ms per token = (T(32, GEN+1) - T(32, 1)) / (2 GEN)
# so that loading the model, the context and the warm-up's first touches cancel out. Rounds
# alternate the order (ABBA). q35 runs with Q35_SIMD=LEVEL, llama.cpp with the CPU variant of the
# same instruction set (avx2: haswell, avx512: zen4, else skylakex). Prints per-round figures and
# the medians; the ratio is llama.cpp's CPU ms per token over q35's (> 1: q35 is faster).
# Not for 2 threads: both engines spin while waiting for their workers, which CPU time counts.
set -euo pipefail
q35=$1 peer=$2 model=$3 level=${4:-avx2} rounds=${5:-3} np=${6:-512} ng=${7:-64}
case "$level" in avx2) variant=haswell ;; avx512) variant=zen4,skylakex ;; scalar) variant=x64 ;; *) variant=$level ;; esac
[ "$np" -gt 32 ] || { echo "cputime.sh: PROMPT must exceed 32" >&2; exit 2; }
cpu() { # user CPU seconds of one command
  /usr/bin/time -f "%U" -o /tmp/cputime.$$ "$@" > /dev/null 2>&1 || { echo "cputime.sh: failed: $*" >&2; exit 1; }
  cat /tmp/cputime.$$
}
q35_run() { cpu env Q35_SIMD="$level" "$q35" bench -m "$model" -t 1 -p "$1" -n "$2" -r 1 --warmup 1; }
llama_run() {
  cpu "$peer" bench -m "$model" -t 1 -p "$1" -n "$2" -r 1 --warmup 1 --kv f16 --flash -1 --load-mode 0 \
    --cpu-variant "$variant"
}
engine() { # prints: prefill_ms decode_ms
  local a b c
  a=$("$1"_run "$np" 1); b=$("$1"_run 32 1); c=$("$1"_run 32 $((ng + 1)))
  awk -v a="$a" -v b="$b" -v c="$c" -v np="$np" -v ng="$ng" \
    'BEGIN { printf "%.3f %.3f\n", 1000 * (a - b) / (2 * (np - 32)), 1000 * (c - b) / (2 * ng) }'
}
echo "cputime: $(basename "$model"), 1 thread, q35 Q35_SIMD=$level, llama.cpp $variant, prompt $np, $ng decode steps; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
qp=() qd=() lp=() ld=()
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then q=$(engine q35); l=$(engine llama); else l=$(engine llama); q=$(engine q35); fi
  qp+=("${q% *}") qd+=("${q#* }") lp+=("${l% *}") ld+=("${l#* }")
  echo "round $r: CPU ms/token prefill q35 ${q% *} llama ${l% *}, decode q35 ${q#* } llama ${l#* } (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
rm -f /tmp/cputime.$$
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
mqp=$(med "${qp[@]}") mqd=$(med "${qd[@]}") mlp=$(med "${lp[@]}") mld=$(med "${ld[@]}")
awk -v a="$mqp" -v b="$mlp" -v c="$mqd" -v d="$mld" -v m="$(basename "$model")" -v l="$level" \
  'BEGIN { printf "%s %s 1 thread, CPU ms/token (medians): prefill q35 %.2f llama %.2f ratio %.2f; decode q35 %.2f llama %.2f ratio %.2f\n", m, l, a, b, b / a, c, d, d / c }'
