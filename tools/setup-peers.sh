#!/usr/bin/env bash
# Installs the independent references the tests compare against (never vendored):
#   .peer/llama/        prebuilt llama.cpp (npm @node-llama-cpp/linux-x64@3.22.1, commit 0ad4a86)
#   tests/node_modules  HF tokenizers, Qwen3 tokenizer files, HF jinja, the OpenAI, Anthropic and
#                       Vercel AI clients, ajv + ajv-formats, playwright-core
#   .peer/llama-arm64/  the same llama.cpp release for aarch64 (npm @node-llama-cpp/linux-arm64@3.22.1),
#                       run under qemu by tests/test_aarch64.sh (one smoke comparison)
# Idempotent: does nothing for the parts already present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ ! -f .peer/llama/bins/linux-x64/libllama.v0.5.0.so ]; then
  rm -rf .peer/llama && mkdir -p .peer/llama
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @node-llama-cpp/linux-x64@3.22.1 >/dev/null)
  tar -xzf "$tmp"/*.tgz -C .peer/llama --strip-components=1
  rm -rf "$tmp"
fi
if [ ! -f .peer/llama-arm64/bins/linux-arm64/libllama.v0.5.0.so ]; then
  rm -rf .peer/llama-arm64 && mkdir -p .peer/llama-arm64
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @node-llama-cpp/linux-arm64@3.22.1 >/dev/null)
  tar -xzf "$tmp"/*.tgz -C .peer/llama-arm64 --strip-components=1
  rm -rf "$tmp"
fi
need=0
for pkg in tokenizers openai ajv-formats playwright-core @anthropic-ai/sdk ai @ai-sdk/openai-compatible; do
  [ -d "tests/node_modules/$pkg" ] || need=1
done
if [ "$need" = 1 ]; then
  (cd tests && npm install --silent --no-audit --no-fund)
fi
echo "peers ready: $root/.peer/llama, $root/tests/node_modules" >&2
