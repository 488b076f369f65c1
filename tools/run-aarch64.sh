#!/usr/bin/env bash
# run-aarch64.sh ARGS... - runs build-aarch64/q35 (tools/build-aarch64.sh makes it) under
# qemu-aarch64-static: the same commands, flags and output formats as the x86 build.
# Q35_QEMU_CPU=cortex-a53|neoverse-n1|max|... picks the emulated CPU (default max);
# Q35_AARCH64_BUILD overrides the build folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${Q35_AARCH64_BUILD:-$root/build-aarch64}/q35"
if [ ! -x "$bin" ]; then
  echo "run-aarch64.sh: $bin not found (run bash tools/build-aarch64.sh first)" >&2
  exit 1
fi
exec bash "$root/tools/qemu-aarch64.sh" "$bin" "$@"
