/*
 * gguf_read.c - the GGUF reader: parse, validate, map (mmap, zero-copy). The writer is gguf_write.c.
 *
 * File layout (all little-endian):
 *
 *   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x      { string key | u32 value type | value }
 *   n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 type | u64 offset }
 *   zero padding up to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset, offset a multiple of the alignment
 *
 * A string is u64 length + bytes (no NUL). An array value is u32 element type + u64 count +
 * elements. Nested arrays are rejected (nothing in llama.cpp's conventions uses them).
 *
 * Reader. Everything is parsed through a bounds-checked cursor (struct rd) over the mapped
 * bytes, so a corrupt file can only ever produce an error, never a read outside the map.
 * Allocation is driven by what has actually been parsed, never by a count read from the file:
 * the kv and tensor tables grow by doubling as entries parse, and a count is first checked
 * against the bytes that remain (every kv needs >= 13 bytes, every tensor info >= 32, every
 * string-array element >= 8), so the memory used is bounded by a small multiple of the file
 * size. Keys and tensor names are indexed in open-addressing hash tables, which also detect
 * duplicates. Strings are views into the map (gguf_str); string arrays get a table of views.
 */
#define _GNU_SOURCE
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"
#include "format/gguf_internal.h"
#include "format/gguf_names.h"
#include "format/tensor_types.h"

_Static_assert(offsetof(gguf_kv, key) == 0 && offsetof(gguf_tensor, name) == 0,
               "the name indexes read the key / name at offset 0");
#define GGUF_MIN_KV_SIZE 13 /* key length (8) + type (4) + smallest value (1) */
#define GGUF_MIN_TENSOR_INFO_SIZE 32 /* name length 8, n_dims 4, one ne 8, type 4, offset 8 */
#define GGUF_MAP_ALIGN ((size_t)2 << 20) /* files of 2x this or more are mapped at this alignment */
#define FALLBACK_PAGE_SIZE 4096 /* when sysconf cannot say */
#define SHOW_MAX_CHARS 96 /* of a name from the file quoted in a message */

static const char *vtype_name(int t) {
  static const char *const names[] = {"u8",  "i8",  "u16",  "i16",    "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  return t >= 0 && t <= GGUF_F64 ? names[t] : "unknown";
}

static int vtype_is_int(int t) {
  return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 ||
         t == GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

/* Sign-extend an n-byte little-endian value. */
static int64_t rd_le_signed(const uint8_t *p, size_t n) {
  uint64_t v = gguf_rd_le(p, n);
  if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~(uint64_t)0 << (8 * n);
  return (int64_t)v;
}

/* A printable, bounded rendering of a name from the file, for error messages. */
static const char *show(gguf_str s, char *buf, size_t cap) {
  size_t o = 0;
  for (uint64_t i = 0; i < s.len && o + 5 < cap; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    if (i >= SHOW_MAX_CHARS) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (c >= 0x20 && c != 0x7f) {
      buf[o++] = (char)c;
    } else {
      snprintf(buf + o, cap - o, "\\x%02x", c);
      o += 4;
    }
  }
  buf[o] = 0;
  return buf;
}

/* ---------------------------------------------------------------------------------------- */
/* Hash index over names (keys or tensor names).                                             */

struct name_index {
  size_t *slot; /* entry index + 1; 0 = empty */
  size_t mask;
};

struct gguf_lookup {
  struct name_index kv, tensors;
};

static uint64_t hash_bytes(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

static int str_eq_n(gguf_str a, const char *p, size_t n) {
  return a.len == n && (n == 0 || memcmp(a.ptr, p, n) == 0);
}

/* Build an index over n names (name(i) for entry i). Returns the index of the first duplicate
 * entry via *dup (or SIZE_MAX), -1 on out of memory. */
static int index_build(struct name_index *ix, size_t n, const void *names, size_t stride,
                       size_t *dup) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  ix->slot = calloc(cap, sizeof *ix->slot);
  if (!ix->slot) return -1;
  ix->mask = cap - 1;
  *dup = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    const gguf_str *s = (const gguf_str *)((const char *)names + i * stride);
    size_t h = (size_t)hash_bytes(s->ptr, s->len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
      size_t e = ix->slot[h];
      if (!e) {
        ix->slot[h] = i + 1;
        break;
      }
      const gguf_str *o = (const gguf_str *)((const char *)names + (e - 1) * stride);
      if (str_eq_n(*o, s->ptr, s->len)) {
        *dup = i;
        return 0;
      }
    }
  }
  return 0;
}

static size_t index_find(const struct name_index *ix, const void *names, size_t stride,
                         const char *name) {
  if (!ix->slot || !name) return SIZE_MAX;
  size_t n = strlen(name);
  for (size_t h = (size_t)hash_bytes(name, n) & ix->mask;; h = (h + 1) & ix->mask) {
    size_t e = ix->slot[h];
    if (!e) return SIZE_MAX;
    const gguf_str *o = (const gguf_str *)((const char *)names + (e - 1) * stride);
    if (str_eq_n(*o, name, n)) return e - 1;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Reader                                                                                     */

typedef struct rd {
  const uint8_t *p;
  size_t size, pos;
  const char *file;
  q35_err *err;
  unsigned flags; /* GGUF_OPEN_* */
  char what[192]; /* what is being read, for messages: "key 'x'", "tensor #3", ... */
} rd;

static size_t rd_left(const rd *r) { return r->size - r->pos; }

static int rd_need(rd *r, uint64_t n, const char *field) {
  if (n > rd_left(r))
    return q35_seterr(r->err,
                      "%s: truncated: %s of %s needs %llu bytes at offset %zu, but only %zu "
                      "remain in the file (%zu bytes)",
                      r->file, field, r->what, (unsigned long long)n, r->pos, rd_left(r),
                      r->size);
  return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *field) {
  if (rd_need(r, 4, field)) return -1;
  *v = (uint32_t)gguf_rd_le(r->p + r->pos, 4);
  r->pos += 4;
  return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *field) {
  if (rd_need(r, 8, field)) return -1;
  *v = gguf_rd_le(r->p + r->pos, 8);
  r->pos += 8;
  return 0;
}

/* A string; `field` names it in messages ("the key"), or for elem != NO_ELEM it is string
 * element `elem` of an array. Messages are only formatted on error (this runs per token). */
#define NO_ELEM UINT64_MAX
static int rd_str(rd *r, gguf_str *s, const char *field, uint64_t elem) {
  char name[64];
  if (rd_left(r) < GGUF_STR_LEN_SIZE ||
      gguf_rd_le(r->p + r->pos, GGUF_STR_LEN_SIZE) > rd_left(r) - GGUF_STR_LEN_SIZE) {
    if (elem == NO_ELEM) snprintf(name, sizeof name, "%s", field);
    else snprintf(name, sizeof name, "string element %llu", (unsigned long long)elem);
  }
  if (rd_left(r) < GGUF_STR_LEN_SIZE)
    return q35_seterr(r->err,
                      "%s: truncated: the length of %s of %s needs 8 bytes at offset %zu, but "
                      "only %zu remain in the file (%zu bytes)",
                      r->file, name, r->what, r->pos, rd_left(r), r->size);
  uint64_t len = gguf_rd_le(r->p + r->pos, GGUF_STR_LEN_SIZE);
  r->pos += GGUF_STR_LEN_SIZE;
  if (len > rd_left(r))
    return q35_seterr(r->err,
                      "%s: %s of %s has length %llu at offset %zu, past the end of the file "
                      "(%zu bytes remain)",
                      r->file, name, r->what, (unsigned long long)len, r->pos - GGUF_STR_LEN_SIZE, rd_left(r));
  s->ptr = (const char *)r->p + r->pos;
  s->len = len;
  r->pos += (size_t)len;
  return 0;
}

/* Parse one value of type t (not ARRAY) into kv->v. */
static int rd_scalar(rd *r, uint32_t t, gguf_kv *kv) {
  if (t == GGUF_STRING) return rd_str(r, &kv->v.s, "the string value", NO_ELEM);
  size_t n = gguf_vtype_size(t);
  if (rd_need(r, n, "the value")) return -1;
  const uint8_t *p = r->p + r->pos;
  r->pos += n;
  if (t == GGUF_F32) {
    float f;
    memcpy(&f, p, 4);
    kv->v.f = f;
  } else if (t == GGUF_F64) {
    memcpy(&kv->v.f, p, 8);
  } else if (t == GGUF_BOOL) {
    kv->v.u = p[0] != 0;
  } else if (gguf_vtype_is_signed((int)t)) {
    kv->v.i = rd_le_signed(p, n);
  } else {
    kv->v.u = gguf_rd_le(p, n);
  }
  return 0;
}

static int rd_value(rd *r, uint32_t t, gguf_kv *kv) {
  if (t != GGUF_ARRAY) {
    if (t != GGUF_STRING && !gguf_vtype_size(t))
      return q35_seterr(r->err, "%s: %s has unknown value type %u (valid: 0..12)", r->file,
                        r->what, t);
    return rd_scalar(r, t, kv);
  }
  uint32_t et;
  uint64_t n;
  if (rd_u32(r, &et, "the array element type")) return -1;
  if (et == GGUF_ARRAY)
    return q35_seterr(r->err, "%s: %s is an array of arrays, which q35 does not support",
                      r->file, r->what);
  if (et != GGUF_STRING && !gguf_vtype_size(et))
    return q35_seterr(r->err, "%s: %s is an array of unknown element type %u (valid: 0..12)",
                      r->file, r->what, et);
  if (rd_u64(r, &n, "the array count")) return -1;
  kv->arr_type = (int)et;
  kv->arr_data = r->p + r->pos;
  size_t min_elem = et == GGUF_STRING ? GGUF_STR_LEN_SIZE : gguf_vtype_size(et);
  if (n > rd_left(r) / min_elem)
    return q35_seterr(r->err,
                      "%s: %s has an array count of %llu %s elements, which cannot fit in the "
                      "%zu bytes left in the file",
                      r->file, r->what, (unsigned long long)n, vtype_name((int)et), rd_left(r));
  kv->arr_n = n;
  if (et != GGUF_STRING) {
    r->pos += (size_t)n * min_elem;
    return 0;
  }
  kv->arr_str = malloc((size_t)(n ? n : 1) * sizeof *kv->arr_str);
  if (!kv->arr_str)
    return q35_seterr(r->err, "%s: out of memory for the %llu strings of %s", r->file,
                      (unsigned long long)n, r->what);
  for (uint64_t i = 0; i < n; i++)
    if (rd_str(r, &kv->arr_str[i], NULL, i)) return -1;
  return 0;
}

/* "f32, f16, ..." for error messages: the float types first, then by GGML id. */
static const char *supported_types_list(char *buf, size_t cap) {
  static const int first[] = {Q35_TYPE_F32, Q35_TYPE_F16, Q35_TYPE_BF16, Q35_TYPE_Q8_0};
  size_t o = 0;
  buf[0] = 0;
  for (int k = 0; k < 4 + Q35_TYPE_COUNT; k++) {
    int t = k < 4 ? first[k] : k - 4;
    if (k >= 4 && (t == Q35_TYPE_F32 || t == Q35_TYPE_F16 || t == Q35_TYPE_BF16 ||
                   t == Q35_TYPE_Q8_0))
      continue;
    if (!q35_type_supported(t) || o >= cap) continue;
    o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", q35_type_name(t));
  }
  return buf;
}

static int rd_tensor_info(rd *r, gguf_tensor *t, size_t alignment) {
  char nb[128];
  if (rd_str(r, &t->name, "the name", NO_ELEM)) return -1;
  snprintf(r->what, sizeof r->what, "tensor '%s'", show(t->name, nb, sizeof nb));
  if (rd_u32(r, &t->n_dims, "n_dims")) return -1;
  if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
    return q35_seterr(r->err, "%s: %s has n_dims = %u (must be 1..4)", r->file, r->what,
                      t->n_dims);
  int64_t nel = 1;
  for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
  for (uint32_t d = 0; d < t->n_dims; d++) {
    uint64_t v;
    if (rd_u64(r, &v, "a dimension")) return -1;
    if (v < 1 || v > (uint64_t)INT64_MAX)
      return q35_seterr(r->err, "%s: %s has dimension ne[%u] = %llu (must be 1 .. 2^63-1)", r->file,
                        r->what, d, (unsigned long long)v);
    t->ne[d] = (int64_t)v;
    if (__builtin_mul_overflow(nel, t->ne[d], &nel))
      return q35_seterr(r->err, "%s: %s has an element count that overflows 64 bits",
                        r->file, r->what);
  }
  uint32_t type;
  if (rd_u32(r, &type, "the type")) return -1;
  const char *tn = q35_type_name((int)type);
  if (!tn)
    return q35_seterr(r->err, "%s: %s has unknown tensor type id %u", r->file, r->what, type);
  if (!((r->flags & GGUF_OPEN_ANY_LAYOUT) ? q35_type_layout_known((int)type)
                                           : q35_type_supported((int)type))) {
    char list[256];
    if (r->flags & GGUF_OPEN_ANY_LAYOUT)
      return q35_seterr(r->err, "%s: %s has type %s, whose block layout q35 does not know",
                        r->file, r->what, tn);
    return q35_seterr(r->err, "%s: %s has type %s, which q35 does not support (supported: %s)",
                      r->file, r->what, tn, supported_types_list(list, sizeof list));
  }
  t->type = (int)type;
  if (rd_u64(r, &t->offset, "the data offset")) return -1;
  int blk = q35_type_block(t->type);
  if (t->ne[0] % blk)
    return q35_seterr(r->err,
                      "%s: %s has ne[0] = %lld, not a multiple of the %s block size %d",
                      r->file, r->what, (long long)t->ne[0], tn, blk);
  /* bytes = row_size * rows; the row count divides nel, so it cannot overflow. */
  uint64_t rows = (uint64_t)(nel / t->ne[0]);
  uint64_t row, nbytes;
  if (__builtin_mul_overflow((uint64_t)q35_type_size(t->type), (uint64_t)(t->ne[0] / blk),
                             &row) ||
      __builtin_mul_overflow(row, rows, &nbytes) || nbytes > (uint64_t)SIZE_MAX)
    return q35_seterr(r->err, "%s: %s has a byte size that overflows 64 bits", r->file,
                      r->what);
  t->nbytes = (size_t)nbytes;
  if (t->offset % alignment)
    return q35_seterr(r->err,
                      "%s: %s has data offset %llu, not a multiple of the alignment %zu",
                      r->file, r->what, (unsigned long long)t->offset, alignment);
  return 0;
}

static int cmp_tensor_offset(const void *a, const void *b) {
  const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Magic, version and the two counts (checked against the bytes left). */
static int parse_header(gguf_file *f, rd *r) {
  q35_err *err = r->err;
  if (f->size < GGUF_MAGIC_SIZE || memcmp(f->map, GGUF_MAGIC, GGUF_MAGIC_SIZE) != 0) {
    if (f->size < GGUF_MAGIC_SIZE)
      return q35_seterr(err, "%s: not a GGUF file (only %zu bytes, too short for the magic)", f->path,
                        f->size);
    return q35_seterr(err, "%s: not a GGUF file (magic is %02x %02x %02x %02x, expected \"GGUF\")",
                      f->path, f->map[0], f->map[1], f->map[2], f->map[3]);
  }
  r->pos = GGUF_MAGIC_SIZE;
  if (rd_u32(r, &f->version, "the version")) return -1;
  if (f->version != GGUF_VERSION_MIN && f->version != GGUF_VERSION)
    return q35_seterr(err, "%s: unsupported GGUF version %u (q35 reads versions 2 and 3%s)", f->path,
                      f->version,
                      (f->version & 0xffff) == 0 ? "; this may be a big-endian file" : "");
  if (rd_u64(r, &f->n_tensors, "n_tensors") || rd_u64(r, &f->n_kv, "n_kv")) return -1;
  if (f->n_kv > rd_left(r) / GGUF_MIN_KV_SIZE)
    return q35_seterr(err, "%s: header claims n_kv = %llu metadata pairs, implausible for a file of "
                      "%zu bytes", f->path, (unsigned long long)f->n_kv, f->size);
  if (f->n_tensors > rd_left(r) / GGUF_MIN_TENSOR_INFO_SIZE)
    return q35_seterr(err, "%s: header claims n_tensors = %llu, implausible for a file of %zu bytes",
                      f->path, (unsigned long long)f->n_tensors, f->size);
  return 0;
}

/* Every metadata pair, then the key index (which finds duplicates). *cap: entries allocated. */
static int parse_kvs(gguf_file *f, rd *r, size_t *cap) {
  q35_err *err = r->err;
  char nb[128];
  for (uint64_t i = 0; i < f->n_kv; i++) {
    if (q35_grow((void **)&f->kv, cap, (size_t)i + 1, sizeof *f->kv))
      return q35_seterr(err, "%s: out of memory reading metadata", f->path);
    gguf_kv *kv = &f->kv[i];
    snprintf(r->what, sizeof r->what, "metadata pair #%llu", (unsigned long long)i);
    if (rd_str(r, &kv->key, "the key", NO_ELEM)) return -1;
    snprintf(r->what, sizeof r->what, "key '%s'", show(kv->key, nb, sizeof nb));
    uint32_t t;
    if (rd_u32(r, &t, "the value type")) return -1;
    kv->type = (int)t;
    if (rd_value(r, t, kv)) return -1;
  }
  f->lookup = calloc(1, sizeof *f->lookup);
  if (!f->lookup) return q35_seterr(err, "%s: out of memory", f->path);
  size_t dup;
  /* (the key / name is the first member of gguf_kv / gguf_tensor) */
  if (index_build(&f->lookup->kv, (size_t)f->n_kv, f->kv, sizeof *f->kv, &dup))
    return q35_seterr(err, "%s: out of memory indexing metadata", f->path);
  if (dup != SIZE_MAX)
    return q35_seterr(err, "%s: duplicate metadata key '%s'", f->path,
                      show(f->kv[dup].key, nb, sizeof nb));
  return 0;
}

/* general.alignment: an unsigned power of two that fits u32, default 32. */
static int parse_alignment(gguf_file *f, q35_err *err) {
  const char *key = q35_gguf_key_spelling(Q35_KEY_GENERAL_ALIGNMENT);
  f->alignment = GGUF_DEFAULT_ALIGNMENT;
  const gguf_kv *al = gguf_find(f, key);
  if (!al) return 0;
  uint64_t a = 0;
  int ok = vtype_is_int(al->type) && !(gguf_vtype_is_signed(al->type) && al->v.i < 0);
  if (ok) a = gguf_vtype_is_signed(al->type) ? (uint64_t)al->v.i : al->v.u;
  if (!ok)
    return q35_seterr(err, "%s: key '%s' must be a u32 power of two, but has type %s", f->path, key,
                      vtype_name(al->type));
  if (a == 0 || a > UINT32_MAX || (a & (a - 1)))
    return q35_seterr(err, "%s: key '%s' = %llu is not a non-zero power of two", f->path, key,
                      (unsigned long long)a);
  f->alignment = (size_t)a;
  return 0;
}

/* Every tensor info, then the name index (which finds duplicates). */
static int parse_tensor_infos(gguf_file *f, rd *r) {
  q35_err *err = r->err;
  char nb[128];
  size_t tcap = 0;
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    if (q35_grow((void **)&f->tensors, &tcap, (size_t)i + 1, sizeof *f->tensors))
      return q35_seterr(err, "%s: out of memory reading tensor infos", f->path);
    snprintf(r->what, sizeof r->what, "tensor #%llu", (unsigned long long)i);
    if (rd_tensor_info(r, &f->tensors[i], f->alignment)) return -1;
  }
  size_t dup;
  if (index_build(&f->lookup->tensors, (size_t)f->n_tensors, f->tensors, sizeof *f->tensors,
                  &dup))
    return q35_seterr(err, "%s: out of memory indexing tensors", f->path);
  if (dup != SIZE_MAX)
    return q35_seterr(err, "%s: duplicate tensor name '%s'", f->path,
                      show(f->tensors[dup].name, nb, sizeof nb));
  return 0;
}

int gguf_reindex_tensors(gguf_file *f, size_t *dup) {
  free(f->lookup->tensors.slot);
  f->lookup->tensors.slot = NULL;
  return index_build(&f->lookup->tensors, (size_t)f->n_tensors, f->tensors, sizeof *f->tensors, dup);
}

/* Data section: the header end rounded up to the alignment; every tensor inside the file. */
static int place_tensor_data(gguf_file *f, size_t hdr, q35_err *err) {
  char nb[128];
  f->data_offset = (hdr + f->alignment - 1) / f->alignment * f->alignment;
  if (f->data_offset < hdr) f->data_offset = SIZE_MAX; /* overflow: nothing fits */
  if (f->n_tensors == 0) f->data_offset = hdr; /* as ggml reports it: no data section */
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    gguf_tensor *t = &f->tensors[i];
    size_t avail = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    if (f->data_offset > f->size || t->offset > avail || t->nbytes > avail - t->offset)
      return q35_seterr(err, "%s: tensor '%s' data (offset %llu, %zu bytes) lies past the end of "
                        "the file (data section starts at byte %zu of %zu)", f->path,
                        show(t->name, nb, sizeof nb), (unsigned long long)t->offset, t->nbytes,
                        f->data_offset, f->size);
    t->data = f->map + f->data_offset + t->offset;
  }
  return 0;
}

/* No two tensors' byte ranges overlap (sorted by offset, each must end before the next). */
static int check_overlaps(gguf_file *f, q35_err *err) {
  if (f->n_tensors < 2) return 0;
  gguf_tensor **order = malloc((size_t)f->n_tensors * sizeof *order);
  if (!order) return q35_seterr(err, "%s: out of memory", f->path);
  for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
  qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_tensor_offset);
  int rc = 0;
  for (uint64_t i = 0; i + 1 < f->n_tensors; i++) {
    if (order[i]->offset + order[i]->nbytes > order[i + 1]->offset) {
      char nb[128], nb2[128];
      rc = q35_seterr(err, "%s: tensor '%s' (offset %llu, %zu bytes) overlaps tensor '%s' "
                      "(offset %llu)", f->path, show(order[i]->name, nb, sizeof nb),
                      (unsigned long long)order[i]->offset, order[i]->nbytes,
                      show(order[i + 1]->name, nb2, sizeof nb2),
                      (unsigned long long)order[i + 1]->offset);
      break;
    }
  }
  free(order);
  return rc;
}

static gguf_file *parse(gguf_file *f, unsigned flags, q35_err *err) {
  rd r = {.p = f->map, .size = f->size, .pos = 0, .file = f->path, .err = err, .flags = flags};
  size_t cap = 0; /* entries allocated in f->kv (zeroed beyond those parsed) */
  snprintf(r.what, sizeof r.what, "the header");
  if (parse_header(f, &r) || parse_kvs(f, &r, &cap) || parse_alignment(f, err) ||
      parse_tensor_infos(f, &r) || place_tensor_data(f, r.pos, err) || check_overlaps(f, err)) {
    f->n_kv = cap < f->n_kv ? cap : f->n_kv; /* gguf_close frees what was allocated */
    gguf_close(f);
    return NULL;
  }
  return f;
}

gguf_file *gguf_open_mem(const void *data, size_t size, const char *name, q35_err *err) {
  gguf_file *f = calloc(1, sizeof *f);
  if (f) f->path = strdup(name ? name : "(memory)");
  if (!f || !f->path) {
    free(f);
    q35_seterr(err, "%s: out of memory", name ? name : "(memory)");
    return NULL;
  }
  static const uint8_t empty[1];
  f->map = size ? data : empty;
  f->size = size;
  return parse(f, 0, err);
}

/* Map a file read-only at a 2 MiB-aligned address, so the kernel can map 2 MiB page-cache
 * folios with one PMD entry each (model/mapping.c asks for them); the slack of the reservation
 * is unmapped again. MAP_FAILED when the file is small or the reservation fails. */
static void *map_aligned(int fd, size_t size) {
  const size_t huge = GGUF_MAP_ALIGN;
  if (size < 2 * huge || size > SIZE_MAX - huge) return MAP_FAILED;
  uint8_t *r = mmap(NULL, size + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return MAP_FAILED;
  uint8_t *a = (uint8_t *)(((uintptr_t)r + huge - 1) & ~(uintptr_t)(huge - 1));
  void *m = mmap(a, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  if (m == MAP_FAILED) {
    munmap(r, size + huge);
    return MAP_FAILED;
  }
  if (a > r) munmap(r, (size_t)(a - r));
  const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : FALLBACK_PAGE_SIZE;
  uint8_t *end = a + ((size + (size_t)pg - 1) & ~((size_t)pg - 1));
  if (r + size + huge > end) munmap(end, (size_t)(r + size + huge - end));
  return m;
}

gguf_file *gguf_open(const char *path, q35_err *err) { return gguf_open_ex(path, 0, err); }

gguf_file *gguf_open_ex(const char *path, unsigned flags, q35_err *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    q35_seterr(err, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    q35_seterr(err, "%s: cannot stat: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    q35_seterr(err, "%s: not a regular file", path);
    close(fd);
    return NULL;
  }
  if ((uint64_t)st.st_size > SIZE_MAX) {
    q35_seterr(err, "%s: file too large to map", path);
    close(fd);
    return NULL;
  }
  size_t size = (size_t)st.st_size;
  gguf_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    close(fd);
    q35_seterr(err, "%s: out of memory", path);
    return NULL;
  }
  if (size == 0) {
    close(fd);
    return parse(f, flags, err); /* map stays NULL; parse rejects size 0 before touching it */
  }
  void *m = map_aligned(fd, size);
  if (m == MAP_FAILED) m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED) {
    q35_seterr(err, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    free(f->path);
    free(f);
    return NULL;
  }
  /* No madvise here: the kernel's default readahead suits both parsing the header and a
   * first pass over the weights; callers may advise ranges themselves (f->map). */
  f->map = m;
  f->size = size;
  f->owns_map = 1;
  f = parse(f, flags, err);
  if (f && !(flags & GGUF_OPEN_ONE_SHARD) && gguf_split_attach(f, flags, err)) {
    gguf_close(f);
    return NULL;
  }
  return f;
}

void gguf_close(gguf_file *f) {
  if (!f) return;
  if (f->shards)
    for (uint32_t k = 1; k < f->n_shards; k++) gguf_close(f->shards[k]);
  free(f->shards);
  if (f->kv)
    for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].arr_str);
  free(f->kv);
  free(f->tensors);
  if (f->lookup) {
    free(f->lookup->kv.slot);
    free(f->lookup->tensors.slot);
    free(f->lookup);
  }
  if (f->owns_map && f->map) munmap((void *)f->map, f->size);
  free(f->path);
  free(f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
  if (!f || !f->lookup || !f->n_kv) return NULL;
  size_t i = index_find(&f->lookup->kv, f->kv, sizeof *f->kv, key);
  return i == SIZE_MAX ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
  if (!f || !f->lookup || !f->n_tensors) return NULL;
  size_t i = index_find(&f->lookup->tensors, f->tensors, sizeof *f->tensors, name);
  return i == SIZE_MAX ? NULL : &f->tensors[i];
}

int gguf_str_eq(gguf_str s, const char *c) { return str_eq_n(s, c, strlen(c)); }

/* ---- typed getters ---- */

static const gguf_kv *need_key(const gguf_file *f, const char *key, q35_err *err) {
  const gguf_kv *kv = gguf_find(f, key);
  if (!kv) q35_seterr(err, "%s: missing key '%s'", f->path, key);
  return kv;
}

static int get_u32_kv(const gguf_file *f, const gguf_kv *kv, uint32_t *out, q35_err *err) {
  char nb[128];
  if (!vtype_is_int(kv->type))
    return q35_seterr(err, "%s: key '%s' has type %s, expected an integer", f->path,
                      show(kv->key, nb, sizeof nb), vtype_name(kv->type));
  int neg = gguf_vtype_is_signed(kv->type) && kv->v.i < 0;
  uint64_t v = gguf_vtype_is_signed(kv->type) ? (uint64_t)kv->v.i : kv->v.u;
  if (neg || v > UINT32_MAX)
    return q35_seterr(err, "%s: key '%s' = %s%llu is out of range (0..4294967295)", f->path,
                      show(kv->key, nb, sizeof nb), neg ? "-" : "",
                      neg ? (unsigned long long)-(uint64_t)kv->v.i : (unsigned long long)v);
  *out = (uint32_t)v;
  return 0;
}

static int get_f32_kv(const gguf_file *f, const gguf_kv *kv, float *out, q35_err *err) {
  char nb[128];
  if (kv->type != GGUF_F32 && kv->type != GGUF_F64)
    return q35_seterr(err, "%s: key '%s' has type %s, expected f32", f->path,
                      show(kv->key, nb, sizeof nb), vtype_name(kv->type));
  if (isfinite(kv->v.f) && fabs(kv->v.f) > FLT_MAX)
    return q35_seterr(err, "%s: key '%s' = %g is out of the f32 range", f->path,
                      show(kv->key, nb, sizeof nb), kv->v.f);
  *out = (float)kv->v.f;
  return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, q35_err *err) {
  const gguf_kv *kv = need_key(f, key, err);
  return kv ? get_u32_kv(f, kv, out, err) : -1;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, q35_err *err) {
  const gguf_kv *kv = need_key(f, key, err);
  return kv ? get_f32_kv(f, kv, out, err) : -1;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, q35_err *err) {
  const gguf_kv *kv = need_key(f, key, err);
  if (!kv) return -1;
  if (kv->type != GGUF_BOOL)
    return q35_seterr(err, "%s: key '%s' has type %s, expected bool", f->path, key,
                      vtype_name(kv->type));
  *out = kv->v.u != 0;
  return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, q35_err *err) {
  const gguf_kv *kv = need_key(f, key, err);
  if (!kv) return -1;
  if (kv->type != GGUF_STRING)
    return q35_seterr(err, "%s: key '%s' has type %s, expected string", f->path, key,
                      vtype_name(kv->type));
  *out = kv->v.s;
  return 0;
}

int gguf_get_u32_or(const gguf_file *f, const char *key, uint32_t def, uint32_t *out,
                    q35_err *err) {
  const gguf_kv *kv = gguf_find(f, key);
  if (!kv) {
    *out = def;
    return 0;
  }
  return get_u32_kv(f, kv, out, err);
}

int gguf_get_f32_or(const gguf_file *f, const char *key, float def, float *out, q35_err *err) {
  const gguf_kv *kv = gguf_find(f, key);
  if (!kv) {
    *out = def;
    return 0;
  }
  return get_f32_kv(f, kv, out, err);
}

int gguf_get_arr(const gguf_file *f, const char *key, int elem_type, const gguf_kv **out,
                 q35_err *err) {
  const gguf_kv *kv = need_key(f, key, err);
  if (!kv) return -1;
  if (kv->type != GGUF_ARRAY)
    return q35_seterr(err, "%s: key '%s' has type %s, expected an array", f->path, key,
                      vtype_name(kv->type));
  int ok = elem_type == GGUF_ANY_INT ? vtype_is_int(kv->arr_type)
           : elem_type == GGUF_F32   ? kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64
                                     : kv->arr_type == elem_type;
  if (!ok)
    return q35_seterr(err, "%s: key '%s' is an array of %s, expected an array of %s", f->path,
                      key, vtype_name(kv->arr_type),
                      elem_type == GGUF_ANY_INT ? "integers" : vtype_name(elem_type));
  *out = kv;
  return 0;
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i) {
  if (!kv || kv->type != GGUF_ARRAY || i >= kv->arr_n) return 0;
  size_t n = gguf_vtype_size((uint32_t)kv->arr_type);
  if (!vtype_is_int(kv->arr_type) && kv->arr_type != GGUF_BOOL) return 0;
  const uint8_t *p = (const uint8_t *)kv->arr_data + i * n;
  return gguf_vtype_is_signed(kv->arr_type) ? rd_le_signed(p, n) : (int64_t)gguf_rd_le(p, n);
}

float gguf_arr_f32(const gguf_kv *kv, uint64_t i) {
  if (!kv || kv->type != GGUF_ARRAY || i >= kv->arr_n) return 0.0f;
  const uint8_t *p = (const uint8_t *)kv->arr_data;
  if (kv->arr_type == GGUF_F32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  if (kv->arr_type == GGUF_F64) {
    double d;
    memcpy(&d, p + 8 * i, 8);
    return (float)d;
  }
  if (vtype_is_int(kv->arr_type) && gguf_vtype_is_signed(kv->arr_type)) return (float)gguf_arr_int(kv, i);
  if (vtype_is_int(kv->arr_type)) return (float)(uint64_t)gguf_arr_int(kv, i);
  return 0.0f;
}
