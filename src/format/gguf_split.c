/*
 * gguf_split.c - reading split GGUF files (llama.cpp's gguf-split conventions; gguf.h has the
 * contract): the first shard names the others, each is opened alone and validated against it,
 * and their tensors join the first shard's table.
 *
 * The conventions (llama.cpp's tools/gguf-split and src/llama-model-loader.cpp): shard k of n
 * (0-based k) is PREFIX-%05d-of-%05d.gguf with k + 1 and n; every shard carries split.no = k
 * (u16), split.count = n (u16) and split.tensors.count (i32, the tensors of all shards); the
 * first shard carries every other metadata pair, the rest only the split.* keys; each shard is a
 * complete GGUF file whose tensor offsets are relative to its own data section. llama.cpp refuses
 * a model given by any shard but the first; so does q35, naming the first shard.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/util.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"
#include "format/gguf_names.h"

#define SPLIT_SUFFIX_FMT "-%05u-of-%05u.gguf"
#define SPLIT_SUFFIX_MAX 32 /* "-65535-of-65535.gguf" and the NUL, with room */

char *gguf_split_path(const char *prefix, uint32_t k, uint32_t n) {
  char suffix[SPLIT_SUFFIX_MAX];
  snprintf(suffix, sizeof suffix, SPLIT_SUFFIX_FMT, k + 1, n);
  char *p = malloc(strlen(prefix) + strlen(suffix) + 1);
  if (p) sprintf(p, "%s%s", prefix, suffix);
  return p;
}

char *gguf_split_prefix(const char *path, uint32_t k, uint32_t n) {
  char suffix[SPLIT_SUFFIX_MAX];
  snprintf(suffix, sizeof suffix, SPLIT_SUFFIX_FMT, k + 1, n);
  const size_t lp = strlen(path), ls = strlen(suffix);
  if (lp <= ls || strcmp(path + lp - ls, suffix) != 0) return NULL;
  return q35_strndup(path, lp - ls);
}

uint32_t gguf_n_shards(const gguf_file *f) { return f && f->n_shards > 1 ? f->n_shards : 1; }

gguf_file *gguf_shard(gguf_file *f, uint32_t k) {
  if (!f || k >= gguf_n_shards(f)) return NULL;
  return k == 0 ? f : f->shards[k];
}

/* An integer split.* key of shard s: -1 with an error when present but not an integer in
 * [0, max]; 0 and *present = 0 when absent. */
static int split_key(const gguf_file *s, q35_gguf_key_id id, uint64_t max, uint64_t *out, int *present,
                     q35_err *err) {
  const char *key = q35_gguf_key_spelling(id);
  const gguf_kv *kv = gguf_find(s, key);
  *present = kv != NULL;
  if (!kv) return 0;
  const int is_int = kv->type == GGUF_U8 || kv->type == GGUF_I8 || kv->type == GGUF_U16 || kv->type == GGUF_I16 ||
                     kv->type == GGUF_U32 || kv->type == GGUF_I32 || kv->type == GGUF_U64 || kv->type == GGUF_I64;
  const int neg = is_int && gguf_vtype_is_signed(kv->type) && kv->v.i < 0;
  const uint64_t v = gguf_vtype_is_signed(kv->type) ? (uint64_t)kv->v.i : kv->v.u;
  if (!is_int || neg || v > max)
    return q35_seterr(err, "%s: split key '%s' is corrupt (expected an integer in 0..%llu%s)", s->path, key,
                      (unsigned long long)max, is_int ? "" : ", got a non-integer value");
  *out = v;
  return 0;
}

/* split.count and split.no of shard s (no split.count: count 1, no 0). */
static int split_ids(const gguf_file *s, uint64_t *count, uint64_t *no, int *has_count, q35_err *err) {
  int has_no;
  *count = 1;
  *no = 0;
  if (split_key(s, Q35_KEY_SPLIT_COUNT, GGUF_SPLIT_MAX_SHARDS, count, has_count, err) ||
      split_key(s, Q35_KEY_SPLIT_NO, GGUF_SPLIT_MAX_SHARDS, no, &has_no, err))
    return -1;
  if (!*has_count) *no = 0; /* without split.count, split.no means nothing (as for llama.cpp) */
  if (*has_count && *count == 0)
    return q35_seterr(err, "%s: split key 'split.count' is corrupt (0; a split file has at least one shard)",
                      s->path);
  if (*has_count && !has_no && *count > 1)
    return q35_seterr(err, "%s: split.count = %llu but the key 'split.no' is missing", s->path,
                      (unsigned long long)*count);
  if (*no >= *count)
    return q35_seterr(err, "%s: split.no = %llu is not below split.count = %llu", s->path, (unsigned long long)*no,
                      (unsigned long long)*count);
  return 0;
}

/* The message for a shard other than the first given to open. */
static int not_first(const gguf_file *f, uint64_t no, uint64_t n, q35_err *err) {
  char *prefix = gguf_split_prefix(f->path, (uint32_t)no, (uint32_t)n);
  char *first = prefix ? gguf_split_path(prefix, 0, (uint32_t)n) : NULL;
  if (first)
    q35_seterr(err, "%s: this is shard %llu of %llu of a split GGUF; open the first shard, %s (the others are "
               "found by name)", f->path, (unsigned long long)no + 1, (unsigned long long)n, first);
  else
    q35_seterr(err, "%s: this is shard %llu of %llu of a split GGUF (split.no = %llu); open the first shard "
               "(split.no = 0)", f->path, (unsigned long long)no + 1, (unsigned long long)n,
               (unsigned long long)no);
  free(prefix);
  free(first);
  return -1;
}

/* Open shard k of n at path and check its split keys against the first shard's. */
static gguf_file *open_shard(const gguf_file *first, const char *path, uint32_t k, uint32_t n, unsigned flags,
                             q35_err *err) {
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) {
    q35_seterr(err, "%s: shard %u of %u of the split GGUF %s is missing", path, k + 1, n, first->path);
    return NULL;
  }
  gguf_file *s = gguf_open_ex(path, flags | GGUF_OPEN_ONE_SHARD, err);
  if (!s) return NULL;
  uint64_t count, no;
  int has_count;
  if (split_ids(s, &count, &no, &has_count, err)) goto fail;
  if (!has_count) {
    q35_seterr(err, "%s: shard %u of %u of the split GGUF %s has no split.count key (not a shard of it)", path,
               k + 1, n, first->path);
    goto fail;
  }
  if (count != n) {
    q35_seterr(err, "%s: split.count = %llu, but the first shard %s says %u", path, (unsigned long long)count,
               first->path, n);
    goto fail;
  }
  if (no != k) {
    q35_seterr(err, "%s: split.no = %llu (it says it is shard %llu), but its name makes it shard %u of %u", path,
               (unsigned long long)no, (unsigned long long)no + 1, k + 1, n);
    goto fail;
  }
  return s;
fail:
  gguf_close(s);
  return NULL;
}

/* split.tensors.count of shard s, where present, equals the tensors of all shards. */
static int check_tensor_count(const gguf_file *s, uint64_t total, q35_err *err) {
  uint64_t v;
  int present;
  if (split_key(s, Q35_KEY_SPLIT_TENSORS_COUNT, INT32_MAX, &v, &present, err)) return -1;
  if (present && v != total)
    return q35_seterr(err, "%s: split.tensors.count = %llu, but the shards hold %llu tensors", s->path,
                      (unsigned long long)v, (unsigned long long)total);
  return 0;
}

/* Every shard's tensors into the first shard's table (tagged with their shard), re-indexed. */
static int merge_tensors(gguf_file *f, uint64_t total, q35_err *err) {
  if (total > SIZE_MAX / sizeof *f->tensors) return q35_seterr(err, "%s: too many tensors", f->path);
  gguf_tensor *t = realloc(f->tensors, (size_t)(total ? total : 1) * sizeof *t);
  if (!t) return q35_seterr(err, "%s: out of memory merging the shards' tensors", f->path);
  f->tensors = t;
  uint64_t n = f->n_tensors;
  for (uint32_t k = 1; k < f->n_shards; k++)
    for (uint64_t i = 0; i < f->shards[k]->n_tensors; i++) {
      t[n] = f->shards[k]->tensors[i];
      t[n++].shard = k;
    }
  f->n_tensors = n;
  size_t dup;
  if (gguf_reindex_tensors(f, &dup)) return q35_seterr(err, "%s: out of memory indexing tensors", f->path);
  if (dup != SIZE_MAX) {
    const gguf_tensor *d = &t[dup];
    uint32_t other = 0;
    for (size_t i = 0; i < dup; i++)
      if (t[i].name.len == d->name.len && memcmp(t[i].name.ptr, d->name.ptr, d->name.len) == 0) {
        other = t[i].shard;
        break;
      }
    return q35_seterr(err, "%s: tensor '%.*s' appears in two shards (%s and %s)", f->path,
                      (int)(d->name.len > 96 ? 96 : d->name.len), d->name.ptr, gguf_shard(f, other)->path,
                      gguf_shard(f, d->shard)->path);
  }
  return 0;
}

int gguf_split_attach(gguf_file *f, unsigned flags, q35_err *err) {
  uint64_t count, no;
  int has_count;
  f->n_shards = 1;
  if (split_ids(f, &count, &no, &has_count, err)) return -1;
  if (no != 0) return not_first(f, no, count, err);
  if (count == 1) return check_tensor_count(f, f->n_tensors, err);
  const uint32_t n = (uint32_t)count;
  char *prefix = gguf_split_prefix(f->path, 0, n);
  if (!prefix) {
    char suffix[SPLIT_SUFFIX_MAX];
    snprintf(suffix, sizeof suffix, SPLIT_SUFFIX_FMT, 1u, n);
    return q35_seterr(err, "%s: the first shard of a split GGUF of %u shards must be named PREFIX%s (llama.cpp's "
                      "convention), so that the other shards can be found", f->path, n, suffix);
  }
  f->shards = calloc(n, sizeof *f->shards);
  if (!f->shards) {
    free(prefix);
    return q35_seterr(err, "%s: out of memory", f->path);
  }
  f->n_shards = n;
  uint64_t total = f->n_tensors;
  int rc = 0;
  for (uint32_t k = 1; k < n && rc == 0; k++) {
    char *path = gguf_split_path(prefix, k, n);
    if (!path) rc = q35_seterr(err, "%s: out of memory", f->path);
    else if (!(f->shards[k] = open_shard(f, path, k, n, flags, err))) rc = -1;
    else total += f->shards[k]->n_tensors;
    free(path);
  }
  free(prefix);
  if (rc) return -1;
  for (uint32_t k = 0; k < n; k++)
    if (check_tensor_count(gguf_shard(f, k), total, err)) return -1;
  return merge_tensors(f, total, err);
}
