/*
 * gguf_internal.h - what the GGUF reader (gguf_read.c) and writer (gguf_write.c) share: the
 * format's constants and the value-type helpers. Private to src/format/.
 */
#ifndef Q35_GGUF_INTERNAL_H
#define Q35_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/gguf.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF code assumes a little-endian host (GGUF is little-endian; arrays are used in place)"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_MAGIC_SIZE 4
#define GGUF_VERSION 3     /* written and read */
#define GGUF_VERSION_MIN 2 /* the oldest version read (same layout as 3) */
#define GGUF_STR_LEN_SIZE 8 /* a string is a u64 length, then its bytes */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_SPLIT_MAX_SHARDS 65535u /* split.count is a u16 */
#define GGUF_MAX_TENSOR_NAME 64 /* llama.cpp's GGML_MAX_NAME, including the NUL */

/* Bytes per element of a scalar value type; 0 for STRING/ARRAY/unknown. */
static inline size_t gguf_vtype_size(uint32_t t) {
  switch (t) {
  case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
  case GGUF_U16: case GGUF_I16: return 2;
  case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
  case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
  default: return 0;
  }
}

static inline int gguf_vtype_is_signed(int t) {
  return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

/* The n-byte little-endian value at p (n <= 8). */
static inline uint64_t gguf_rd_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  memcpy(&v, p, n); /* little-endian host: the low n bytes */
  return v;
}

/* Split files (gguf_split.c): after a file parsed, open and join the other shards of a split file
 * (a no-op for an unsplit one); refuse a shard other than the first. */
int gguf_split_attach(gguf_file *f, unsigned flags, q35_err *err);
/* Rebuild the tensor-name index after f->tensors changed (gguf_read.c); *dup = index of the first
 * duplicate name or SIZE_MAX. -1 on out of memory. */
int gguf_reindex_tensors(gguf_file *f, size_t *dup);

#endif
