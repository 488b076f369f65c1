#!/usr/bin/env bash
# fuzz/build.sh [BUILD_DIR] - builds every libFuzzer target fuzz/*_fuzz.c into BUILD_DIR
# (default build-fuzz/) with clang, -fsanitize=fuzzer,address,undefined.
#
# The library sources (src/**/*.c except the CLI and src/dist, the MPI build's) are compiled once into BUILD_DIR/obj and
# archived; a target links only the objects it needs. Targets that test static functions of a
# source file (hfconfig_fuzz: config.json) #include that file.
# A target whose sources are missing from this checkout is skipped with a note.
# Rebuilds only what changed (by mtime). Exit 77 when clang or libFuzzer is unavailable.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$root/build-fuzz}
case $B in /*) ;; *) B=$PWD/$B ;; esac
CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
  for c in clang clang-14 clang-15 clang-16; do command -v $c >/dev/null 2>&1 && { CC=$c; break; }; done
fi
[ -n "$CC" ] || { echo "fuzz/build.sh: clang not found" >&2; exit 77; }
mkdir -p "$B/obj"
# libFuzzer present? (Debian: libclang-rt-14-dev)
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}' >"$B/probe.c"
if ! $CC -fsanitize=fuzzer "$B/probe.c" -o "$B/probe" 2>/dev/null; then
  echo "fuzz/build.sh: $CC cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)" >&2
  exit 77
fi
PKGS="jansson libpcre2-8 libutf8proc libmicrohttpd"
CFLAGS="-std=gnu11 -g -O1 -pthread -fno-omit-frame-pointer -fno-sanitize-recover=all -Wall -Wextra -Wno-unused-function -I$root/include -I$root/src -DQ35_FUZZ_SRC=\"$root\" $(pkg-config --cflags $PKGS)"
LIBS="$(pkg-config --libs $PKGS) -lm -pthread"
SAN="-fsanitize=address,undefined"

# library objects
mapfile -t srcs < <(cd "$root" && find src -name '*.c' ! -path 'src/cli/*' ! -path 'src/dist/*' | sort)
# objects whose source is gone (a file renamed or split) leave the archive
declare -A want=()
for s in "${srcs[@]}"; do want["$B/obj/$(echo "${s%.c}" | tr / _).o"]=1; done
for o in "$B"/obj/*.o; do
  [ -e "$o" ] || continue
  if [ -z "${want[$o]:-}" ]; then rm -f "$o" "$o.log" "$B/libq35fuzz.a"; fi
done
jobs=()
for s in "${srcs[@]}"; do
  o="$B/obj/$(echo "${s%.c}" | tr / _).o"
  if [ ! -f "$o" ] || [ "$root/$s" -nt "$o" ] || [ -n "$(find "$root/src" "$root/include" -name '*.h' -newer "$o" | head -1)" ]; then
    jobs+=("$s")
  fi
done
if [ ${#jobs[@]} -gt 0 ]; then
  # A file clang cannot compile (clang 14 rejects some GCC-accepted intrinsics/builtins in the
  # SIMD kernels) is compiled by gcc without instrumentation instead, with a note: the parsers
  # under test never depend on those kernels, they only have to link.
  export B root CC CFLAGS SAN
  # The weight kernels' SIMD sources (src/kernels/*_avx2.c, *_avx512.c, *_neon.c) go to gcc
  # uninstrumented from the start: no target parses through them, the sanitizer build of the test
  # suite covers them, and clang's ASan build of each takes minutes (most of this script's time).
  printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -I{} bash -c '
    s={}; o="$B/obj/$(echo "${s%.c}" | tr / _).o"
    gcc_plain() {
      gcc -std=gnu11 -O2 -g -pthread -I"$root/include" -I"$root/src" $(pkg-config --cflags jansson libpcre2-8 libutf8proc libmicrohttpd) \
        -c "$root/$s" -o "$o" || { rm -f "$o"; exit 255; }
    }
    case $s in
      src/kernels/*_avx2.c | src/kernels/*_avx512.c | src/kernels/*_neon.c) gcc_plain; exit 0 ;;
    esac
    if ! $CC $CFLAGS $SAN -fsanitize=fuzzer-no-link -c "$root/$s" -o "$o" 2>"$o.log"; then
      echo "fuzz/build.sh: $s: clang failed ($(grep -m1 error: "$o.log" | cut -c1-160)); using gcc, uninstrumented" >&2
      gcc_plain
    fi'
  rm -f "$B/libq35fuzz.a"
fi
if [ ! -f "$B/libq35fuzz.a" ]; then
  ar rcs "$B/libq35fuzz.a" "$B"/obj/*.o
fi

# targets
built=0
for f in "$root"/fuzz/*_fuzz.c; do
  name=$(basename "$f" .c); name=${name%_fuzz}
  # a target may name the files it needs: "// needs: src/export/hf.c"
  miss=""
  for n in $(sed -n 's|^// needs: ||p' "$f"); do [ -f "$root/$n" ] || miss="$miss $n"; done
  if [ -n "$miss" ]; then echo "fuzz/build.sh: skip $name (missing:$miss)" >&2; continue; fi
  out="$B/${name}_fuzz"
  deps=$(sed -n 's|^// needs: ||p' "$f" | sed "s|^|$root/|")
  if [ ! -f "$out" ] || [ "$f" -nt "$out" ] || [ "$B/libq35fuzz.a" -nt "$out" ] || \
     [ -n "$(for d in $deps; do [ "$d" -nt "$out" ] && echo x; done)" ]; then
    $CC $CFLAGS $SAN -fsanitize=fuzzer "$f" "$B/libq35fuzz.a" $LIBS -o "$out"
  fi
  built=$((built + 1))
done
echo "fuzz/build.sh: $built targets in $B"
