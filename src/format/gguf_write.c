/*
 * gguf_write.c - the GGUF writer: metadata serialized as it is set, tensors declared, then
 * written at once or streamed into "PATH.tmp" and renamed into place. The file layout is
 * described in gguf_read.c.
 *
 * Each metadata pair is serialized at once into its own blob (key + type + value), so
 * a 248,320-entry vocabulary costs one linear pass and no per-entry allocation. Setting a key
 * again replaces its value in place (keeping the first insertion position). Tensors are
 * declared (name, type, shape, optional data); offsets are assigned in declaration order when
 * writing starts, each aligned to general.alignment (32 unless set) with zero padding, and the
 * data of every tensor, the last included, is followed by padding to the alignment (as
 * llama.cpp and gguf-py write it). Writes go to "PATH.tmp", which is fsync'ed and renamed to
 * PATH only when everything succeeded; on any error or abort it is removed. Setter errors
 * (invalid tensor declarations, out of memory) are sticky and reported by save/begin.
 */
#define _GNU_SOURCE
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"
#include "format/gguf_internal.h"
#include "format/gguf_names.h"
#include "format/tensor_types.h"

/* Serialization into a q35_buf (its out-of-memory flag is sticky: checked once per pair).
 * wb_put appends in place while the buffer has room (a vocabulary is ~500k small appends)
 * and leaves growth to q35_buf_add; either way the q35_buf invariants hold. */
static inline void wb_put(q35_buf *b, const void *src, size_t n) {
  if (b->p && !b->oom && n < b->cap - b->n) {
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = 0;
    return;
  }
  q35_buf_add(b, src, n);
}

static void wb_le(q35_buf *b, uint64_t v, size_t n) {
  uint8_t t[8];
  for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
  wb_put(b, t, n);
}

static void wb_str(q35_buf *b, const char *s, size_t n) {
  wb_le(b, n, GGUF_STR_LEN_SIZE);
  wb_put(b, s, n);
}

typedef struct wkv {
  char *key;
  q35_buf blob; /* type + value */
} wkv;

typedef struct wtensor {
  char *name;
  int type;
  uint32_t n_dims;
  int64_t ne[4];
  size_t nbytes;
  uint64_t offset;
  const void *data;
} wtensor;

struct gguf_writer {
  wkv *kv;
  size_t n_kv, cap_kv;
  wtensor *t;
  size_t n_t, cap_t;
  uint32_t alignment;
  int any_layout; /* gguf_writer_allow_any_layout */
  int failed; /* sticky: a setter or declaration failed */
  q35_err ferr;
  gguf_split_opts split; /* gguf_writer_set_split; zero: one file */
  /* streaming state */
  int fd; /* -1 when no write is in progress */
  char **path, **tmp; /* per output file (shard): final and temporary names */
  size_t *first; /* per shard its first tensor, then n_t (n_shards + 1 entries) */
  uint32_t n_shards, cur; /* shards of the write in progress; the one being written */
  size_t next;
};

static void wfail(gguf_writer *w, const char *fmt, const char *a, const char *b) {
  if (w->failed) return; /* keep the first error */
  w->failed = 1;
  snprintf(w->ferr.msg, sizeof w->ferr.msg, fmt, a, b);
}

gguf_writer *gguf_writer_new(void) {
  gguf_writer *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->alignment = GGUF_DEFAULT_ALIGNMENT;
  w->fd = -1;
  return w;
}

void gguf_writer_free(gguf_writer *w) {
  if (!w) return;
  gguf_writer_abort(w);
  for (size_t i = 0; i < w->n_kv; i++) {
    free(w->kv[i].key);
    free(w->kv[i].blob.p);
  }
  free(w->kv);
  for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
  free(w->t);
  free(w);
}

/* The blob to fill for `key`: an existing pair's (cleared) or a new one. NULL on OOM. */
static q35_buf *kv_slot(gguf_writer *w, const char *key) {
  if (!w) return NULL;
  if (!key) {
    wfail(w, "gguf writer: NULL key%s%s", "", "");
    return NULL;
  }
  for (size_t i = 0; i < w->n_kv; i++)
    if (!strcmp(w->kv[i].key, key)) {
      q35_buf *b = &w->kv[i].blob;
      b->n = 0; /* keep the allocation */
      if (b->p) b->p[0] = 0;
      return b;
    }
  char *k = strdup(key);
  if (!k || q35_grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv)) {
    free(k);
    wfail(w, "gguf writer: out of memory adding key '%s'%s", key, "");
    return NULL;
  }
  w->kv[w->n_kv].key = k;
  memset(&w->kv[w->n_kv].blob, 0, sizeof(q35_buf));
  return &w->kv[w->n_kv++].blob;
}

/* After a pair was written: note OOM, and track general.alignment. */
static void kv_done(gguf_writer *w, const char *key, q35_buf *b) {
  if (!b) return;
  if (b->oom) {
    wfail(w, "gguf writer: out of memory setting key '%s'%s", key, "");
    return;
  }
  if (strcmp(key, q35_gguf_key_spelling(Q35_KEY_GENERAL_ALIGNMENT)) != 0) return;
  const uint8_t *p = (const uint8_t *)b->p;
  uint32_t t = (uint32_t)gguf_rd_le(p, 4);
  uint64_t a = b->n == 8 && t == GGUF_U32 ? gguf_rd_le(p + 4, 4) : 0;
  if (a == 0 || (a & (a - 1)))
    wfail(w, "gguf writer: key '%s' must be a u32 power of two%s", key, "");
  else
    w->alignment = (uint32_t)a;
}

static void set_scalar(gguf_writer *w, const char *key, int type, uint64_t bits) {
  q35_buf *b = kv_slot(w, key);
  if (!b) return;
  wb_le(b, (uint32_t)type, 4);
  wb_le(b, bits, gguf_vtype_size((uint32_t)type));
  kv_done(w, key, b);
}

void gguf_set_u8(gguf_writer *w, const char *key, uint8_t v) { set_scalar(w, key, GGUF_U8, v); }
void gguf_set_i8(gguf_writer *w, const char *key, int8_t v) {
  set_scalar(w, key, GGUF_I8, (uint8_t)v);
}
void gguf_set_u16(gguf_writer *w, const char *key, uint16_t v) {
  set_scalar(w, key, GGUF_U16, v);
}
void gguf_set_i16(gguf_writer *w, const char *key, int16_t v) {
  set_scalar(w, key, GGUF_I16, (uint16_t)v);
}
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v) {
  set_scalar(w, key, GGUF_U32, v);
}
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v) {
  set_scalar(w, key, GGUF_I32, (uint32_t)v);
}
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v) {
  set_scalar(w, key, GGUF_U64, v);
}
void gguf_set_i64(gguf_writer *w, const char *key, int64_t v) {
  set_scalar(w, key, GGUF_I64, (uint64_t)v);
}
void gguf_set_f32(gguf_writer *w, const char *key, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  set_scalar(w, key, GGUF_F32, bits);
}
void gguf_set_f64(gguf_writer *w, const char *key, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  set_scalar(w, key, GGUF_F64, bits);
}
void gguf_set_bool(gguf_writer *w, const char *key, int v) {
  set_scalar(w, key, GGUF_BOOL, v != 0);
}

void gguf_set_str(gguf_writer *w, const char *key, const char *v) {
  q35_buf *b = kv_slot(w, key);
  if (!b) return;
  if (!v) v = "";
  wb_le(b, GGUF_STRING, 4);
  wb_str(b, v, strlen(v));
  kv_done(w, key, b);
}

/* Numeric array from native little-endian memory (x86-64: element bytes as they are). */
void gguf_set_arr(gguf_writer *w, const char *key, int elem_type, const void *v, uint64_t n) {
  size_t es = gguf_vtype_size((uint32_t)elem_type);
  if (!es) {
    if (w) wfail(w, "gguf writer: key '%s': gguf_set_arr needs a numeric or bool element "
                 "type%s", key ? key : "(null)", "");
    return;
  }
  q35_buf *b = kv_slot(w, key);
  if (!b) return;
  wb_le(b, GGUF_ARRAY, 4);
  wb_le(b, (uint32_t)elem_type, 4);
  wb_le(b, n, 8);
  if (n && (!v || n > SIZE_MAX / es)) b->oom = 1;
  else wb_put(b, v, (size_t)n * es);
  kv_done(w, key, b);
}

void gguf_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
  gguf_set_arr(w, key, GGUF_I32, v, n);
}

void gguf_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) {
  gguf_set_arr(w, key, GGUF_F32, v, n);
}

static void set_arr_strs(gguf_writer *w, const char *key, const char *const *v,
                         const gguf_str *s, uint64_t n) {
  q35_buf *b = kv_slot(w, key);
  if (!b) return;
  wb_le(b, GGUF_ARRAY, 4);
  wb_le(b, GGUF_STRING, 4);
  wb_le(b, n, 8);
  for (uint64_t i = 0; i < n && !b->oom; i++) {
    if (v) {
      const char *e = v[i] ? v[i] : "";
      wb_str(b, e, strlen(e));
    } else {
      wb_str(b, s[i].ptr, (size_t)s[i].len);
    }
  }
  kv_done(w, key, b);
}

void gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
  set_arr_strs(w, key, v, NULL, n);
}

void gguf_set_arr_gstr(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n) {
  set_arr_strs(w, key, NULL, v, n);
}

void gguf_set_kv_from(gguf_writer *w, const gguf_kv *kv) {
  if (!w || !kv) return;
  char *key = q35_strndup(kv->key.ptr, (size_t)kv->key.len);
  if (!key) {
    wfail(w, "gguf writer: out of memory copying a key%s%s", "", "");
    return;
  }
  if (kv->type == GGUF_ARRAY) {
    if (kv->arr_type == GGUF_STRING) {
      set_arr_strs(w, key, NULL, kv->arr_str, kv->arr_n);
    } else {
      gguf_set_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
    }
  } else if (kv->type == GGUF_STRING) {
    q35_buf *b = kv_slot(w, key);
    if (b) {
      wb_le(b, GGUF_STRING, 4);
      wb_str(b, kv->v.s.ptr, (size_t)kv->v.s.len);
      kv_done(w, key, b);
    }
  } else if (kv->type == GGUF_F32) {
    gguf_set_f32(w, key, (float)kv->v.f);
  } else if (kv->type == GGUF_F64) {
    gguf_set_f64(w, key, kv->v.f);
  } else if (gguf_vtype_size((uint32_t)kv->type)) {
    set_scalar(w, key, kv->type, gguf_vtype_is_signed(kv->type) ? (uint64_t)kv->v.i : kv->v.u);
  } else {
    wfail(w, "gguf writer: key '%s' has an invalid value type%s", key, "");
  }
  free(key);
}

void gguf_writer_allow_any_layout(gguf_writer *w) {
  if (w) w->any_layout = 1;
}

int gguf_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims,
                    const int64_t *ne, const void *data) {
  if (!w) return -1;
  if (!name || !ne) {
    wfail(w, "gguf writer: gguf_add_tensor needs a name and a shape%s%s", "", "");
    return -1;
  }
  if (w->fd >= 0) {
    wfail(w, "gguf writer: tensor '%s' declared while a write is in progress%s", name, "");
    return -1;
  }
  if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
    wfail(w, "gguf writer: tensor '%s' must have 1..4 dimensions%s", name, "");
    return -1;
  }
  if (w->any_layout ? !q35_type_layout_known(type) : !q35_type_supported(type)) {
    const char *tn = q35_type_name(type);
    wfail(w, w->any_layout ? "gguf writer: tensor '%s' has type %s, which has no known layout"
                           : "gguf writer: tensor '%s' has type %s, which q35 does not support",
          name, tn ? tn : "(unknown id)");
    return -1;
  }
  wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
  int64_t nel = 1;
  for (uint32_t d = 0; d < n_dims; d++) {
    if (ne[d] < 1 || __builtin_mul_overflow(nel, ne[d], &nel)) {
      wfail(w, "gguf writer: tensor '%s' has an invalid shape%s", name, "");
      return -1;
    }
    t.ne[d] = ne[d];
  }
  if (t.ne[0] % q35_type_block(type)) {
    wfail(w, "gguf writer: tensor '%s': ne[0] is not a multiple of the %s block size", name,
          q35_type_name(type));
    return -1;
  }
  uint64_t nb;
  if (__builtin_mul_overflow((uint64_t)q35_row_size(type, t.ne[0]),
                             (uint64_t)(nel / t.ne[0]), &nb) ||
      nb > SIZE_MAX / 2) {
    wfail(w, "gguf writer: tensor '%s' is too large%s", name, "");
    return -1;
  }
  t.nbytes = (size_t)nb;
  if (strlen(name) >= GGUF_MAX_TENSOR_NAME) {
    wfail(w, "gguf writer: tensor name '%s' is too long (llama.cpp's limit is 63 bytes)%s",
          name, "");
    return -1;
  }
  for (size_t i = 0; i < w->n_t; i++)
    if (!strcmp(w->t[i].name, name)) {
      wfail(w, "gguf writer: duplicate tensor name '%s'%s", name, "");
      return -1;
    }
  if (w->n_t >= INT_MAX || !(t.name = strdup(name)) ||
      q35_grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t)) {
    free(t.name);
    wfail(w, "gguf writer: out of memory declaring tensor '%s'%s", name, "");
    return -1;
  }
  w->t[w->n_t] = t;
  return (int)w->n_t++;
}

#define WRITE_CHUNK ((size_t)1 << 30) /* bytes per write(2) call: well below its 2 GiB limit */
#define TMP_SUFFIX ".tmp"

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n > WRITE_CHUNK ? WRITE_CHUNK : n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

static int write_pad(int fd, uint64_t pos, uint32_t alignment) {
  static const uint8_t zeros[256];
  size_t pad = (size_t)((alignment - pos % alignment) % alignment);
  while (pad) {
    size_t k = pad < sizeof zeros ? pad : sizeof zeros;
    if (write_all(fd, zeros, k)) return -1;
    pad -= k;
  }
  return 0;
}

static void stream_cleanup(gguf_writer *w, int remove_tmp) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  for (uint32_t k = 0; k < w->n_shards; k++) {
    if (w->tmp && remove_tmp && w->tmp[k]) unlink(w->tmp[k]); /* (those not created yet: ENOENT) */
    if (w->tmp) free(w->tmp[k]);
    if (w->path) free(w->path[k]);
  }
  free(w->tmp);
  free(w->path);
  free(w->first);
  w->tmp = w->path = NULL;
  w->first = NULL;
  w->n_shards = w->cur = 0;
}

void gguf_writer_abort(gguf_writer *w) {
  if (w && (w->fd >= 0 || w->tmp)) stream_cleanup(w, 1);
}

static int io_fail(gguf_writer *w, q35_err *err, const char *what) {
  q35_seterr(err, "%s: %s: %s", w->tmp && w->tmp[w->cur] ? w->tmp[w->cur] : "(gguf writer)", what,
             strerror(errno));
  stream_cleanup(w, 1);
  return -1;
}

void gguf_writer_set_split(gguf_writer *w, const gguf_split_opts *split) {
  if (!w) return;
  memset(&w->split, 0, sizeof w->split);
  if (split) w->split = *split;
}

static int splitting(const gguf_writer *w) { return gguf_split_wanted(&w->split); }

static uint64_t padded(const gguf_writer *w, size_t n) {
  return ((uint64_t)n + w->alignment - 1) / w->alignment * w->alignment;
}

/* Which tensors go into which shard (gguf.h: gguf_writer_set_split), and every tensor's offset
 * within its shard's data section. */
static int plan_shards(gguf_writer *w) {
  w->first = malloc((w->n_t + 2) * sizeof *w->first);
  if (!w->first) return -1;
  uint32_t n = 1;
  w->first[0] = 0;
  uint64_t bytes = 0, count = 0;
  for (size_t i = 0; i < w->n_t; i++) {
    const uint64_t b = padded(w, w->t[i].nbytes);
    const int full = count > 0 && splitting(w) &&
                     ((w->split.max_bytes && bytes + b > w->split.max_bytes) ||
                      (w->split.max_tensors && count >= w->split.max_tensors));
    if (full) {
      w->first[n++] = i;
      bytes = count = 0;
    }
    w->t[i].offset = bytes;
    bytes += b;
    count++;
  }
  w->first[n] = w->n_t;
  w->n_shards = n;
  return 0;
}

/* The output names: PATH (one file), or PREFIX-%05d-of-%05d.gguf with PREFIX = PATH less a
 * ".gguf" ending; each with a temporary twin. */
static int name_shards(gguf_writer *w, const char *path) {
  w->path = calloc(w->n_shards, sizeof *w->path);
  w->tmp = calloc(w->n_shards, sizeof *w->tmp);
  if (!w->path || !w->tmp) return -1;
  char *prefix = NULL;
  if (splitting(w)) {
    const size_t n = strlen(path), ext = strlen(".gguf");
    prefix = q35_strndup(path, n > ext && !strcmp(path + n - ext, ".gguf") ? n - ext : n);
    if (!prefix) return -1;
  }
  for (uint32_t k = 0; k < w->n_shards; k++) {
    w->path[k] = prefix ? gguf_split_path(prefix, k, w->n_shards) : strdup(path);
    w->tmp[k] = w->path[k] ? malloc(strlen(w->path[k]) + sizeof TMP_SUFFIX) : NULL;
    if (!w->tmp[k]) break;
    sprintf(w->tmp[k], "%s" TMP_SUFFIX, w->path[k]);
  }
  free(prefix);
  return w->tmp[w->n_shards - 1] ? 0 : -1;
}

static int is_split_key(const char *key) {
  return !strcmp(key, q35_gguf_key_spelling(Q35_KEY_SPLIT_NO)) ||
         !strcmp(key, q35_gguf_key_spelling(Q35_KEY_SPLIT_COUNT)) ||
         !strcmp(key, q35_gguf_key_spelling(Q35_KEY_SPLIT_TENSORS_COUNT));
}

/* Whether metadata pair i goes into shard k: every pair into an unsplit file or the first shard,
 * general.alignment into the others when it is not the default (their tensor offsets depend on
 * it). The split.* keys describe the files this writer writes, so it writes its own and never
 * those set by hand (copied from a split file's metadata, say, they would make an unsplit copy
 * look like a first shard). */
static int kv_in_shard(const gguf_writer *w, size_t i, uint32_t k) {
  if (is_split_key(w->kv[i].key)) return 0;
  if (!splitting(w)) return 1;
  return k == 0 || (w->alignment != GGUF_DEFAULT_ALIGNMENT &&
                    !strcmp(w->kv[i].key, q35_gguf_key_spelling(Q35_KEY_GENERAL_ALIGNMENT)));
}

static void wb_split_kv(q35_buf *h, q35_gguf_key_id id, int type, uint64_t v) {
  const char *key = q35_gguf_key_spelling(id);
  wb_str(h, key, strlen(key));
  wb_le(h, (uint32_t)type, 4);
  wb_le(h, v, gguf_vtype_size((uint32_t)type));
}

/* Shard k's header: its metadata, its tensor infos, padding to the alignment. */
static void build_header(const gguf_writer *w, uint32_t k, q35_buf *h) {
  const size_t t0 = w->first[k], t1 = w->first[k + 1];
  uint64_t n_kv = splitting(w) ? 3 : 0;
  for (size_t i = 0; i < w->n_kv; i++) n_kv += (uint64_t)kv_in_shard(w, i, k);
  wb_put(h, GGUF_MAGIC, GGUF_MAGIC_SIZE);
  wb_le(h, GGUF_VERSION, 4);
  wb_le(h, t1 - t0, 8);
  wb_le(h, n_kv, 8);
  for (size_t i = 0; i < w->n_kv; i++) {
    if (!kv_in_shard(w, i, k)) continue;
    wb_str(h, w->kv[i].key, strlen(w->kv[i].key));
    wb_put(h, w->kv[i].blob.p, w->kv[i].blob.n);
  }
  if (splitting(w)) { /* after the other pairs, as gguf-split writes them */
    wb_split_kv(h, Q35_KEY_SPLIT_NO, GGUF_U16, k);
    wb_split_kv(h, Q35_KEY_SPLIT_COUNT, GGUF_U16, w->n_shards);
    wb_split_kv(h, Q35_KEY_SPLIT_TENSORS_COUNT, GGUF_I32, w->n_t);
  }
  for (size_t i = t0; i < t1; i++) {
    const wtensor *t = &w->t[i];
    wb_str(h, t->name, strlen(t->name));
    wb_le(h, t->n_dims, 4);
    for (uint32_t d = 0; d < t->n_dims; d++) wb_le(h, (uint64_t)t->ne[d], 8);
    wb_le(h, (uint32_t)t->type, 4);
    wb_le(h, t->offset, 8);
  }
  while (h->n % w->alignment) wb_le(h, 0, 1);
}

/* Create shard k's temporary file and write its header. */
static int open_shard(gguf_writer *w, uint32_t k, q35_err *err) {
  q35_buf h = {0};
  build_header(w, k, &h);
  if (h.oom) {
    free(h.p);
    q35_seterr(err, "%s: out of memory building the GGUF header", w->path[k]);
    stream_cleanup(w, 1);
    return -1;
  }
  w->cur = k;
  w->fd = open(w->tmp[k], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    free(h.p);
    return io_fail(w, err, "cannot create");
  }
  int rc = write_all(w->fd, h.p, h.n);
  free(h.p);
  return rc ? io_fail(w, err, "write failed") : 0;
}

/* Flush and close the shard being written (its temporary file stays until finish). */
static int close_shard(gguf_writer *w, q35_err *err) {
  if (fsync(w->fd)) return io_fail(w, err, "fsync failed");
  int fd = w->fd;
  w->fd = -1;
  return close(fd) ? io_fail(w, err, "close failed") : 0;
}

int gguf_writer_begin(gguf_writer *w, const char *path, q35_err *err) {
  if (!w || !path) return q35_seterr(err, "gguf writer: no writer or path");
  if (w->fd >= 0) return q35_seterr(err, "%s: a write to %s is already in progress", path, w->path[w->cur]);
  if (w->failed) return q35_seterr(err, "%s: %s", path, w->ferr.msg);
  if (splitting(w) && w->n_t > INT32_MAX) return q35_seterr(err, "%s: too many tensors for a split file", path);
  if (plan_shards(w) || (splitting(w) && w->n_shards > GGUF_SPLIT_MAX_SHARDS) || name_shards(w, path)) {
    const int too_many = w->n_shards > GGUF_SPLIT_MAX_SHARDS;
    stream_cleanup(w, 0);
    return q35_seterr(err, too_many ? "%s: more than 65535 shards (raise the split size or tensor limit)" : "%s: out of memory",
                      path);
  }
  w->next = 0;
  return open_shard(w, 0, err);
}

int gguf_writer_write_tensor(gguf_writer *w, int index, const void *data, q35_err *err) {
  if (!w || w->fd < 0) return q35_seterr(err, "gguf writer: no write in progress");
  if (index < 0 || (size_t)index != w->next) {
    q35_seterr(err, "%s: tensor #%d written out of order (expected #%zu%s%s%s)", w->path[w->cur], index,
               w->next, w->next < w->n_t ? ", '" : "", w->next < w->n_t ? w->t[w->next].name : "",
               w->next < w->n_t ? "'" : "");
    stream_cleanup(w, 1);
    return -1;
  }
  const wtensor *t = &w->t[index];
  if (!data) {
    q35_seterr(err, "%s: tensor '%s' has no data", w->path[w->cur], t->name);
    stream_cleanup(w, 1);
    return -1;
  }
  if ((size_t)index == w->first[w->cur + 1]) /* the first tensor of the next shard */
    if (close_shard(w, err) || open_shard(w, w->cur + 1, err)) return -1;
  if (write_all(w->fd, data, t->nbytes) || write_pad(w->fd, t->nbytes, w->alignment))
    return io_fail(w, err, "write failed");
  w->next++;
  return 0;
}

/* Make the rename durable: fsync the directory holding path (best effort). */
static void fsync_dir(const char *path) {
  char *d = strdup(path);
  if (!d) return;
  char *slash = strrchr(d, '/');
  const char *dir = slash ? (slash == d ? "/" : (*slash = 0, d)) : ".";
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(d);
}

int gguf_writer_finish(gguf_writer *w, q35_err *err) {
  if (!w || w->fd < 0) return q35_seterr(err, "gguf writer: no write in progress");
  if (w->next != w->n_t) {
    q35_seterr(err, "%s: tensor '%s' (#%zu of %zu) was never written", w->path[w->cur],
               w->t[w->next].name, w->next, w->n_t);
    stream_cleanup(w, 1);
    return -1;
  }
  if (close_shard(w, err)) return -1;
  for (uint32_t k = 0; k < w->n_shards; k++)
    if (rename(w->tmp[k], w->path[k])) {
      const int e = errno;
      for (uint32_t j = 0; j < k; j++) unlink(w->path[j]); /* no incomplete set of shards is left */
      w->cur = k;
      errno = e;
      return io_fail(w, err, "cannot rename into place");
    }
  fsync_dir(w->path[0]);
  if (w->split.n_shards_out) *w->split.n_shards_out = w->n_shards;
  stream_cleanup(w, 0);
  return 0;
}

int gguf_writer_save(gguf_writer *w, const char *path, q35_err *err) {
  if (!w) return q35_seterr(err, "gguf writer: no writer");
  for (size_t i = 0; i < w->n_t; i++)
    if (!w->t[i].data)
      return q35_seterr(err, "%s: tensor '%s' was declared without data", path ? path : "",
                        w->t[i].name);
  if (gguf_writer_begin(w, path, err)) return -1;
  for (size_t i = 0; i < w->n_t; i++)
    if (gguf_writer_write_tensor(w, (int)i, w->t[i].data, err)) return -1;
  return gguf_writer_finish(w, err);
}
