#!/usr/bin/env bash
# fuzz/run.sh NAME SECONDS [extra libFuzzer flags] - runs build-fuzz/NAME_fuzz for SECONDS on
# its seed corpus fuzz/corpus/NAME/. New interesting inputs go to build-fuzz/corpus-NAME/ (not
# the committed seed corpus); a crash is written to build-fuzz/crash-NAME/ -- copy it to
# fuzz/regressions/NAME/ once understood. Prints libFuzzer's final stats line (execs, exec/s).
# Environment: FUZZ_BUILD (default build-fuzz), FUZZ_JOBS (parallel workers, default 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:?usage: fuzz/run.sh NAME SECONDS}
secs=${2:?usage: fuzz/run.sh NAME SECONDS}
shift 2
B=${FUZZ_BUILD:-$root/build-fuzz}
bin=$B/${name}_fuzz
[ -x "$bin" ] || bash "$root/fuzz/build.sh" "$B" >&2
[ -x "$bin" ] || { echo "fuzz/run.sh: no target $name" >&2; exit 2; }
mkdir -p "$B/corpus-$name" "$B/crash-$name" "$root/fuzz/corpus/$name"
dict=()
[ -f "$root/fuzz/dict/$name.dict" ] && dict=(-dict="$root/fuzz/dict/$name.dict")
regs=()
[ -d "$root/fuzz/regressions/$name" ] && regs=("$root/fuzz/regressions/$name")
jobs=${FUZZ_JOBS:-1}
par=()
[ "$jobs" -gt 1 ] && par=(-fork="$jobs" -ignore_crashes=0)
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$B/crash-$name/" "${par[@]}" "${dict[@]}" "$@" \
  "$B/corpus-$name" "$root/fuzz/corpus/$name" "${regs[@]}"
