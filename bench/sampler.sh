#!/usr/bin/env bash
# sampler.sh - build and run the sampling-head benchmark (bench/sampler_bench.c) against the
# prebuilt llama.cpp library (tools/setup-peers.sh installs it). Not part of ctest.
# Usage: bench/sampler.sh [REPS]   (prints a table on stderr, one JSON line on stdout)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA=${LLAMA_DIR:-$ROOT/.peer/llama/bins/linux-x64}
OUT=${TMPDIR:-/tmp}/q35_sampler_bench.$$
trap 'rm -f "$OUT"' EXIT
[ -f "$LLAMA/libllama.v0.5.0.so" ] || { echo "sampler.sh: llama.cpp library not found in $LLAMA (run tools/setup-peers.sh)" >&2; exit 1; }
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -Werror -fno-math-errno -pthread -I"$ROOT/include" -I"$ROOT/src" \
  "$ROOT/bench/sampler_bench.c" "$ROOT"/src/sample/*.c "$ROOT/src/base/util.c" "$ROOT/src/base/cpu.c" -o "$OUT" \
  -L"$LLAMA" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -Wl,-rpath,"$LLAMA" -lm
if command -v taskset >/dev/null; then taskset -c 0 "$OUT" "$@"; else "$OUT" "$@"; fi
