#!/usr/bin/env bash
# Runs the whole test suite on the build in build/ (tools/setup.sh makes it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ctest --test-dir build --output-on-failure -j2 --timeout 1500
