#!/usr/bin/env bash
# test_fuzz_replay.sh - builds every libFuzzer target (fuzz/build.sh) and
#   1. replays each target's seed corpus fuzz/corpus/NAME/ and regression inputs
#      fuzz/regressions/NAME/ (every input once: a crash, sanitizer report, leak or failed
#      property is a failure);
#   2. fuzzes each target for FUZZ_RUNS inputs (default 20000; FUZZ_SECONDS caps the time, default 60)
#      from its corpus with a fixed seed, into a scratch dir;
#   3. replays fuzz/pending/NAME/ (known, reported bugs not fixed yet): reported, not failed;
#      one that passes is flagged so it can move to fuzz/regressions/.
# Skips (exit 0 with SKIP) when clang/libFuzzer is unavailable, and in the sanitizer ctest
# run (Q35_SANITIZE_RUN=1): the fuzz build is already ASan+UBSan, running it twice adds nothing.
set -uo pipefail
: "${Q35_SRC:?}" "${Q35_BUILD:?}"
if [ "${Q35_SANITIZE_RUN:-0}" = 1 ]; then echo "SKIP: the fuzz targets are sanitized builds already (run in the normal ctest run)"; exit 0; fi
B=$Q35_BUILD/fuzz
rc=0
bash "$Q35_SRC/fuzz/build.sh" "$B" 2>"$B.log" >/dev/null || rc=$?
if [ $rc = 77 ]; then echo "SKIP: $(cat "$B.log")"; exit 0; fi
if [ $rc != 0 ]; then echo "FAIL: fuzz/build.sh exited $rc"; cat "$B.log"; exit 1; fi
secs=${FUZZ_SECONDS:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fail=0
n_targets=0
for bin in "$B"/*_fuzz; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); name=${name%_fuzz}
  n_targets=$((n_targets + 1))
  files=()
  for d in "$Q35_SRC/fuzz/corpus/$name" "$Q35_SRC/fuzz/regressions/$name"; do
    [ -d "$d" ] && while IFS= read -r f; do files+=("$f"); done < <(find "$d" -type f | sort)
  done
  if [ ${#files[@]} -gt 0 ]; then
    if "$bin" -timeout=60 -rss_limit_mb=4096 "${files[@]}" >"$tmp/$name.replay" 2>&1; then
      echo "ok   $name: replayed ${#files[@]} inputs"
    else
      echo "FAIL $name: replay of ${#files[@]} inputs"; grep -a -m40 -E "ERROR|SUMMARY|property|Running:|runtime error" "$tmp/$name.replay"; fail=1
      continue
    fi
  else
    echo "FAIL $name: no seed corpus in fuzz/corpus/$name"; fail=1
  fi
  mkdir -p "$tmp/c-$name" "$tmp/x-$name"
  # a fixed seed and a fixed number of runs keep CI reproducible: the same inputs run on a fast
  # or a slow machine (FUZZ_SEED=0 asks libFuzzer for a random seed; FUZZ_SECONDS caps the time)
  if "$bin" -seed="${FUZZ_SEED:-1}" -runs="${FUZZ_RUNS:-20000}" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$tmp/x-$name/" "$tmp/c-$name" "$Q35_SRC/fuzz/corpus/$name" >"$tmp/$name.fuzz" 2>&1; then
    echo "ok   $name: fuzzed $(grep -a -m1 number_of_executed_units "$tmp/$name.fuzz" | awk '{print $2}') executions"
  else
    echo "FAIL $name: fuzzing found a failing input (fuzz/run.sh $name to reproduce):"
    grep -a -m40 -E "ERROR|SUMMARY|property|runtime error|Base64" "$tmp/$name.fuzz"; fail=1
  fi
done
for d in "$Q35_SRC"/fuzz/pending/*/; do
  [ -d "$d" ] || continue
  name=$(basename "$d"); bin=$B/${name}_fuzz
  [ -x "$bin" ] || continue
  for f in "$d"*; do
    [ -f "$f" ] || continue
    if "$bin" "$f" >/dev/null 2>&1; then echo "note $name: pending input $(basename "$f") passes now: move it to fuzz/regressions/$name/"
    else echo "note $name: pending input $(basename "$f") still fails (known bug, docs/HARDENING.md)"; fi
  done
done
[ $n_targets -ge 1 ] || { echo "FAIL: no fuzz targets built"; exit 1; }
[ $fail = 0 ] && echo "PASS ($n_targets targets)" || exit 1
