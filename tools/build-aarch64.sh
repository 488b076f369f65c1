#!/usr/bin/env bash
# build-aarch64.sh [CMAKE_ARGS...] - cross-compiles q35 for aarch64 Linux into build-aarch64/
# (build-aarch64/q35 and the test programs), with Debian's gcc-aarch64-linux-gnu and the :arm64
# -dev packages of q35's libraries (dpkg --add-architecture arm64). Installs what is missing
# (the cross compiler, qemu-user-static to run the result: tools/run-aarch64.sh); safe to re-run.
# Q35_AARCH64_BUILD overrides the build folder; Q35_AARCH64_TARGETS the targets (default: all).
# --deps-only: install what is missing and stop (tools/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi
bash tools/install-deps.sh cmake pkg-config gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu \
  libc6-dev-arm64-cross qemu-user-static \
  libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libmicrohttpd-dev:arm64
[ "${1:-}" = --deps-only ] && exit 0
out="${Q35_AARCH64_BUILD:-$root/build-aarch64}"
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$root/tools/aarch64-toolchain.cmake" "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build "$out" -j"$(nproc)" ${Q35_AARCH64_TARGETS:+--target $Q35_AARCH64_TARGETS}
