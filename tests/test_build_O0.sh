#!/bin/bash
# The SIMD sources build at -O0 too (a Debug build, or a sanitizer build at -O0/-O1): every
# intrinsic that takes an immediate gets a constant expression, not a value that only unrolling or
# constant propagation at -O2 turns into one (gcc rejects those at -O0 with "must be an N-bit
# immediate"). Compiles each source that includes an intrinsics header with the project's warning
# flags at -O0, and names each file that fails.
set -u
SRC=${Q35_SRC:?}
CC=${CC:-cc}
fail=0 n=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in $(grep -rl --include='*.c' -e '<immintrin.h>' -e '<arm_neon.h>' -e 'quant_256.inc' "$SRC/src" | sort); do
  n=$((n + 1))
  if ! "$CC" -O0 -std=gnu11 -Wall -Wextra -Werror -fno-math-errno -pthread -I"$SRC/include" -I"$SRC/src" \
      -c "$f" -o "$out/x.o" 2>"$out/err"; then
    echo "FAIL: ${f#$SRC/} does not build at -O0:"
    grep -m 3 error "$out/err"
    fail=$((fail + 1))
  fi
done
echo "test_build_O0: $n sources, $fail failed"
[ "$n" -gt 5 ] || { echo "FAIL: found only $n SIMD sources"; exit 1; }
[ "$fail" -eq 0 ]
