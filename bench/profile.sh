#!/usr/bin/env bash
# bench/profile.sh - where q35's decode time goes (perf record + a phase split).
#
#   bench/profile.sh [MODEL.gguf] [THREADS] [GEN_TOKENS]
#
# Default model: $Q35_BENCH_CACHE/a3b-L4-q4_0.gguf (made by bench/run.sh), 1 thread, 64 tokens.
# Builds q35 with frame pointers and -fno-inline-functions-called-once into
# $Q35_BENCH_BUILD-prof (default <repo>/build-bench-prof) so every layer function keeps its
# frame, records `q35 bench -p 1 -n GEN` (one-token prompt: every step is a decode step) with
# `perf record -g`, then prints the phase split (bench/profile_split.py) and perf's top symbols.
# At 1 thread the split is complete; at 2 threads the worker thread's samples show as
# "pool workers" and the spinning/sleeping as "pool wait".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${Q35_BENCH_BUILD:-$root/build-bench}-prof"
cache="${Q35_BENCH_CACHE:-$HOME/.cache/q35-bench}"
model="${1:-$cache/a3b-L4-q4_0.gguf}"
threads="${2:-1}"
gen="${3:-64}"
[ -f "$model" ] || { echo "profile: no model '$model' (run bench/run.sh first, or name one)" >&2; exit 2; }
command -v perf >/dev/null || { echo "profile: perf is not installed" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_C_FLAGS=-fno-omit-frame-pointer -fno-inline-functions-called-once -fno-optimize-sibling-calls" >/dev/null
cmake --build "$build" -j"$(nproc)" --target q35 >&2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
perf record -F 1999 -g -o "$out/perf.data" -- "$build/q35" bench -m "$model" -t "$threads" -p 1 -n "$gen" \
  -r 1 --json 2>"$out/err" || { cat "$out/err" >&2; exit 1; }
echo "== q35 decode profile: $model, $threads thread(s), $gen tokens (+1 warm-up run)"
perf script -i "$out/perf.data" -F tid,ip,sym 2>/dev/null | /usr/bin/python3 "$here/profile_split.py"
echo
echo "== perf report (self, top 20)"
perf report -i "$out/perf.data" --no-children -g none --sort symbol --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' |
  head -20
