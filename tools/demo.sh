#!/usr/bin/env bash
# The main job on a built-in default: install the build dependencies, build q35, generate a
# small random-weight Qwen3.5-MoE model, and generate text from a prompt on it (streamed to
# stdout, statistics on stderr). Random weights give random text: this shows the pipeline.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/install-deps.sh build-essential cmake pkg-config libjansson-dev libmicrohttpd-dev libpcre2-dev \
  libutf8proc-dev
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target q35 >/dev/null
mkdir -p .cache
[ -f .cache/demo-tiny.gguf ] || ./build/q35 export --tiny-test -o .cache/demo-tiny.gguf
./build/q35 run -m .cache/demo-tiny.gguf -p "${1:-Hello, world! The quick brown fox}" -n 48 --seed 42
