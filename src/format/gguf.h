/*
 * gguf.h - GGUF v3 reader (mmap, zero-copy, validated; format/gguf_read.c) and streaming writer
 * (format/gguf_write.c). Key and tensor names: format/gguf_names.h.
 *
 * Reader: gguf_open maps the file read-only and parses the header, every metadata
 * key/value and every tensor description, validating all of it before anything is used:
 * magic, version (2 or 3), counts against the file size, string lengths, value types, array
 * element types and lengths, tensor dimension counts (1..4) and sizes (no overflow), tensor
 * types (known, and supported by q35: q35_type_supported), alignment (general.alignment,
 * default 32), that every tensor's data lies inside the file (data section start + offset +
 * size <= file size), no duplicate keys or tensor names, and no overlapping tensors. Memory
 * used is bounded by a small multiple of the file size whatever the header's counts say.
 * Errors name the file and the key or tensor involved. Strings are views into the map
 * (gguf_str: pointer + length, not NUL-terminated).
 *
 * Split files (llama.cpp's gguf-split conventions, format/gguf_split.c): a file whose split.count
 * is above 1 is the first of split.count shards named PREFIX-%05d-of-%05d.gguf (1-based number,
 * count). gguf_open of the first shard opens and validates every other one (each is a complete
 * GGUF file; its split.no and split.count must match, no tensor name may repeat across shards,
 * the tensor counts must add up to split.tensors.count) and returns one file: the first shard's
 * metadata (the others carry only split.* keys) and every shard's tensors in one table, each
 * tensor's data pointing into its own shard's map. Given another shard than the first, gguf_open
 * refuses it and names the first shard (as llama.cpp does). GGUF_OPEN_ONE_SHARD opens a shard
 * alone, and gguf_open_mem never looks for other files.
 *
 * Writer: declare metadata and tensors (name, type, shape), then either save in one go with
 * every tensor's data in memory, or stream: gguf_writer_begin writes the header to
 * "PATH.tmp", gguf_writer_write_tensor is called once per tensor in declaration order, and
 * gguf_writer_finish flushes and renames to PATH. gguf_writer_abort (or any error) removes
 * the temporary file, so a failed write never leaves a file that looks valid.
 */
#ifndef Q35_GGUF_H
#define Q35_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "q35.h"

enum gguf_vtype {
  GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
  GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
  GGUF_I64 = 11, GGUF_F64 = 12,
};

typedef struct gguf_str {
  const char *ptr;
  uint64_t len;
} gguf_str;

typedef struct gguf_kv {
  gguf_str key;
  int type;              /* enum gguf_vtype */
  union {
    uint64_t u;          /* unsigned integers and bool */
    int64_t i;           /* signed integers */
    double f;            /* F32, F64 */
    gguf_str s;          /* STRING */
  } v;
  /* ARRAY: element type, count, raw little-endian element data (numeric arrays), and for
   * string arrays a table of views (arr_str[i]) built at open time. */
  int arr_type;
  uint64_t arr_n;
  const void *arr_data;
  gguf_str *arr_str;
} gguf_kv;

typedef struct gguf_tensor {
  gguf_str name;
  uint32_t n_dims;
  int64_t ne[4];         /* ne[0] fastest; unused dims are 1 */
  int type;              /* enum q35_type (GGML ids) */
  uint64_t offset;       /* relative to the data section */
  size_t nbytes;
  const void *data;      /* points into the map (of its shard) */
  uint32_t shard;        /* 0, or for a split file the index of the shard holding the data */
} gguf_tensor;

typedef struct gguf_file {
  char *path;
  const uint8_t *map;
  size_t size;
  uint32_t version;
  uint64_t n_kv, n_tensors;
  gguf_kv *kv;
  gguf_tensor *tensors;
  size_t alignment;
  size_t data_offset;    /* start of the tensor data section */
  int owns_map;
  struct gguf_lookup *lookup; /* private: hash indexes for gguf_find / gguf_find_tensor */
  /* A split file (n_shards > 1): this struct is the first shard (map, size, path, data_offset are
   * its own, n_tensors / tensors cover every shard); shards[k] for 1 <= k < n_shards are the
   * others, opened alone (shards[0] is NULL). Reach each with gguf_shard. */
  uint32_t n_shards;
  struct gguf_file **shards;
} gguf_file;

gguf_file *gguf_open(const char *path, q35_err *err);
/* gguf_open with flags. GGUF_OPEN_ANY_LAYOUT accepts every tensor type whose layout is known
 * (q35_type_layout_known), not only those q35 computes with: for tools that copy, split or
 * requantize tensors without computing with them (a model loader must not use it). */
#define GGUF_OPEN_ANY_LAYOUT 1u
/* Open this file alone even when it is one shard of a split file (tools that look at a shard). */
#define GGUF_OPEN_ONE_SHARD 2u
gguf_file *gguf_open_ex(const char *path, unsigned flags, q35_err *err);
/* Shard k (0 <= k < gguf_n_shards) of an open file: its own path, map, size and data section;
 * shard 0 is f itself. An unsplit file has one shard. */
uint32_t gguf_n_shards(const gguf_file *f);
gguf_file *gguf_shard(gguf_file *f, uint32_t k);
/* llama.cpp's shard names: PREFIX-%05d-of-%05d.gguf with k + 1 and n (k is 0-based). Returns a
 * malloc'ed string, or NULL (out of memory). gguf_split_prefix: PREFIX of a shard's path when it
 * ends in that shard's suffix, else NULL. */
char *gguf_split_path(const char *prefix, uint32_t k, uint32_t n);
char *gguf_split_prefix(const char *path, uint32_t k, uint32_t n);
/* Parse a GGUF image already in memory (not copied; must outlive the result). */
gguf_file *gguf_open_mem(const void *data, size_t size, const char *name, q35_err *err);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
int gguf_str_eq(gguf_str s, const char *c);

/* Typed getters: return 0 and store the value, or -1 with an error naming the key (missing,
 * wrong type, out of range). Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, q35_err *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, q35_err *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, q35_err *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, q35_err *err);
/* Same, but a missing key yields `def` (a present key of the wrong type is still an error). */
int gguf_get_u32_or(const gguf_file *f, const char *key, uint32_t def, uint32_t *out, q35_err *err);
int gguf_get_f32_or(const gguf_file *f, const char *key, float def, float *out, q35_err *err);
/* An array: 0 and *out = its pair, or -1 with an error naming the key (missing, not an
 * array, or elements not of elem_type). elem_type GGUF_ANY_INT accepts any integer
 * element type (read them with gguf_arr_int); GGUF_F32 also accepts f64 (gguf_arr_f32). */
#define GGUF_ANY_INT (-1)
int gguf_get_arr(const gguf_file *f, const char *key, int elem_type, const gguf_kv **out,
                 q35_err *err);
/* Integer array element i as int64 (any integer element type). */
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);
float gguf_arr_f32(const gguf_kv *kv, uint64_t i);

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
/* Metadata, in insertion order. Strings are copied. Setting a key again replaces its value
 * (keeping its position). Setters cannot fail visibly: an error (out of memory, invalid
 * general.alignment, invalid tensor declaration) is remembered and reported by
 * gguf_writer_save / gguf_writer_begin. The writer aligns tensors to general.alignment if
 * set (u32 power of two), else 32. */
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_set_f32(gguf_writer *w, const char *key, float v);
void gguf_set_bool(gguf_writer *w, const char *key, int v);
void gguf_set_str(gguf_writer *w, const char *key, const char *v);
void gguf_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* The remaining scalar types, a numeric/bool array of any element type (elem_type: enum
 * gguf_vtype, data in native little-endian layout), and a string array from views. */
void gguf_set_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_set_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_set_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_set_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_set_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_set_f64(gguf_writer *w, const char *key, double v);
void gguf_set_arr(gguf_writer *w, const char *key, int elem_type, const void *v, uint64_t n);
void gguf_set_arr_gstr(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n);
/* Copy every metadata pair of an open file (used to carry a tokenizer block over). */
void gguf_set_kv_from(gguf_writer *w, const gguf_kv *kv);
/* Let this writer declare tensors of every type whose layout is known (q35_type_layout_known),
 * not only those q35 computes with: for the tools that write blocks another quantizer made
 * (tests/peer/ggml_requant) or copy tensors through (split / requantize). A normal export never
 * calls it, so it still refuses a type q35 could not load. */
void gguf_writer_allow_any_layout(gguf_writer *w);
/* Declare a tensor; data may be NULL when streaming. ne[0] fastest, n_dims 1..4. Returns its
 * index, or -1 (and a sticky error) for an invalid declaration: duplicate name, n_dims out
 * of 1..4, ne < 1, a type q35 does not support (any known layout after
 * gguf_writer_allow_any_layout), ne[0] not a multiple of the block size.
 * The data size is q35_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]. */
int gguf_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims,
                    const int64_t *ne, const void *data);
/* Write everything at once (all tensors declared with data). Atomic (temp file + rename). */
int gguf_writer_save(gguf_writer *w, const char *path, q35_err *err);
/* Split the output into shards in llama.cpp's gguf-split conventions: a new shard starts before
 * the tensor that would take the current one's tensor data (each tensor padded to the alignment)
 * past max_bytes, or that would be its max_tensors + 1-th tensor (0: no limit of that kind; a
 * shard always holds at least one tensor, so a tensor larger than max_bytes gets a shard of its
 * own). The first shard carries every metadata pair plus split.no (u16, 0-based), split.count
 * (u16) and split.tensors.count (i32, all shards' tensors); the others carry only those three
 * (and general.alignment when not 32). The path given to save / begin names them: "X.gguf" (or
 * "X") writes X-00001-of-0000N.gguf ... X-0000N-of-0000N.gguf, even when N is 1, each in a
 * temporary file until all are complete. *n_shards_out (when not NULL) receives N on success.
 * The writer owns the split.* keys: those set by hand are never written, split or not (so a copy
 * of a split file's metadata makes a valid unsplit file). */
typedef struct gguf_split_opts {
  uint64_t max_bytes;
  uint32_t max_tensors;
  uint32_t *n_shards_out;
} gguf_split_opts;
void gguf_writer_set_split(gguf_writer *w, const gguf_split_opts *split);
/* Whether a split was asked for (max_bytes or max_tensors set). */
static inline int gguf_split_wanted(const gguf_split_opts *s) { return s && (s->max_bytes || s->max_tensors); }
/* Streaming. */
int gguf_writer_begin(gguf_writer *w, const char *path, q35_err *err);
int gguf_writer_write_tensor(gguf_writer *w, int index, const void *data, q35_err *err);
int gguf_writer_finish(gguf_writer *w, q35_err *err);
void gguf_writer_abort(gguf_writer *w);

#endif
