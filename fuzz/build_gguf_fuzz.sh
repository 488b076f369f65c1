#!/bin/bash
# Build the GGUF reader fuzzer (clang + libFuzzer + ASan/UBSan) into build-fuzz/gguf_fuzz.
# Run: build-fuzz/gguf_fuzz -max_total_time=60 fuzz/corpus/gguf   (add a scratch dir first
# to keep new inputs out of the committed seed corpus: gguf_fuzz NEW_DIR fuzz/corpus/gguf)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build-fuzz
clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Iinclude -Isrc fuzz/gguf_fuzz.c src/format/gguf_read.c src/format/gguf_write.c src/format/gguf_names.c \
  src/format/tensor_types.c src/base/buf.c src/base/util.c -lm \
  -o build-fuzz/gguf_fuzz
echo "built build-fuzz/gguf_fuzz"
