#!/usr/bin/env bash
# Installs the Debian packages q35 builds with and the test references, then builds q35 into
# build/. Safe to re-run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pkgs="build-essential cmake pkg-config libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev python3 python3-numpy clang libclang-rt-14-dev curl json-schema-test-suite haproxy openmpi-bin libopenmpi-dev"
bash tools/install-deps.sh $pkgs
# the browser the server's CORS test drives (through npm playwright-core), and openssl for its TLS test
bash tools/install-deps.sh chromium openssl
# node and npm: the machine's own (Node.js 20 here) when present, else Debian's
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  bash tools/install-deps.sh nodejs npm
fi
bash tools/setup-peers.sh
# the aarch64 cross toolchain, qemu-user-static and the arm64 libraries (tests/test_aarch64.sh)
bash tools/build-aarch64.sh --deps-only
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
