#!/usr/bin/env bash
# qemu-aarch64.sh PROGRAM ARGS... - runs an aarch64 Linux program under qemu-aarch64-static (user
# mode) with the arm64 libraries of Debian's multiarch packages and cross toolchain.
# Q35_QEMU_CPU picks the emulated CPU model (qemu's -cpu): e.g. cortex-a53 (base NEON, no
# dotprod), neoverse-n1 (dotprod), max (everything qemu has, i8mm included). Default: max.
set -euo pipefail
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
# the loader (under the prefix) and libc from the same package (libc6-arm64-cross) first, then
# the :arm64 libraries
export QEMU_SET_ENV="LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib:/usr/lib/aarch64-linux-gnu:/lib/aarch64-linux-gnu"
exec qemu-aarch64-static -cpu "${Q35_QEMU_CPU:-max}" "$@"
