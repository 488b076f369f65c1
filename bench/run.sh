#!/usr/bin/env bash
# bench/run.sh - q35 vs llama.cpp speed on Qwen3.5-35B-A3B-shaped random-weight GGUFs.
#
#   bench/run.sh [--quick] [--8] [bench.py options ...]
#
# Builds q35, llama_peer (tests/peer) and bench/membw.c into $Q35_BENCH_BUILD (default
# <repo>/build-bench) when missing or stale, generates the GGUFs once into $Q35_BENCH_CACHE
# (default ~/.cache/q35-bench), then runs bench/bench.py: prefill 512 / decode 128 at 1 and 2
# threads for Q8_0, Q4_0, Q4_K_M (4 layers; --8 adds 8 layers), decode at 8k and 32k context for
# Q4_0 at 2 threads, memory bandwidth and the roofline fraction, peak RSS and load time.
# Prints a table and, last, one JSON line. `bench/run.sh --help` lists bench.py's options.
# --simd avx2,avx512 runs the table once per SIMD level: q35 with Q35_SIMD=LEVEL, llama.cpp with
# the CPU variant of the same instruction set (llama_peer --cpu-variant: haswell for avx2, zen4
# or skylakex for avx512, x64 for scalar); the "simd" column names what each engine ran.
# Not part of ctest; numbers are ratios from the same run (the machine is shared and noisy).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${Q35_BENCH_BUILD:-$root/build-bench}"
export Q35_BENCH_CACHE="${Q35_BENCH_CACHE:-$HOME/.cache/q35-bench}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3

args=()
for a in "$@"; do
  case "$a" in
    --8) args+=(--layers 4,8) ;;
    -h|--help) "$py" "$here/bench.py" --help; exit 0 ;;
    *) args+=("$a") ;;
  esac
done

if [ ! -d "$root/.peer/llama/bins/linux-x64" ]; then
  echo "bench: llama.cpp peer not installed; run: bash $root/tools/setup-peers.sh" >&2
  exit 1
fi
echo "bench: building into $build" >&2
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target q35 llama_peer >&2
if [ ! -x "$build/bench/membw" ] || [ "$here/membw.c" -nt "$build/bench/membw" ]; then
  mkdir -p "$build/bench"
  cc -O3 -march=native -std=gnu11 -Wall -Wextra -Werror -pthread "$here/membw.c" -o "$build/bench/membw"
fi
exec "$py" "$here/bench.py" --q35 "$build/q35" --peer "$build/tests/peer/llama_peer" \
  --membw "$build/bench/membw" --src "$root" "${args[@]}"
