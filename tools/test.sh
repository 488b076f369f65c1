#!/usr/bin/env bash
# Runs the whole test suite twice:
#   1. on the normal build in build/ (tools/setup.sh makes it), including the fuzz replay
#      (tests/test_fuzz_replay.sh builds the libFuzzer targets and replays their corpora);
#   2. on a sanitizer build in build-asan/ (-DQ35_SANITIZE=ON: ASan + UBSan, leak checking on),
#      with Q35_SANITIZE_RUN=1 so tests may shrink their sizes.
# The kernel, invariance and parity tests run once per SIMD level the CPU has (NAME at the best
# level, NAME@avx2 and NAME@scalar below it; tests/CMakeLists.txt); levels the CPU lacks are
# skipped. The levels are printed at the end.
# Q35_SKIP_SANITIZE=1 skips the second run (local quick runs only; CI runs both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
t0=$(date +%s)
rc=0
# The free disk, for the record: the two builds, the fuzz build and the tests' files need ~2.5 GB.
echo "tools/test.sh: free disk at the start: $(df -h --output=avail . | tail -1 | tr -d ' ')"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 1500 || rc=$?
t1=$(date +%s)
echo "tools/test.sh: normal build suite: $((t1 - t0)) s (exit $rc)"
if [ "${Q35_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DQ35_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$jobs"
  t2=$(date +%s)
  # Excluded from the sanitizer run (pure duplicates, nothing new under ASan/UBSan):
  #   test_fuzz_replay: the fuzz targets are ASan+UBSan builds already (it skips itself there too).
  #   test_sampler@*, test_parity_llama@*: the slowest per-level variants; the sanitizer run keeps
  #     the kernel, attention, engine and invariance tests' variants (each level's own code paths).
  #   test_aarch64: the emulated aarch64 build, which does not depend on the x86 build's flags.
  exclude="^(test_fuzz_replay|test_sampler@.*|test_parity_llama@.*|test_aarch64)$"
  Q35_SANITIZE_RUN=1 \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 1500 -E "$exclude" || rc=1
  t3=$(date +%s)
  echo "tools/test.sh: sanitizer build $((t2 - t1)) s, sanitizer suite $((t3 - t2)) s"
fi
echo "tools/test.sh: SIMD levels run: $(build/tests/run_at_level --levels 2>/dev/null || echo unknown)"
echo "tools/test.sh: total $(($(date +%s) - t0)) s"
exit $rc
