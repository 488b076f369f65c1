/* safetensors.c - validated, mmapped safetensors reader (see safetensors.h). */
#define _GNU_SOURCE
#include "export/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"

#define ST_HEADER_LEN_SIZE 8           /* the file starts with the header's length, u64 little-endian */
#define ST_MAX_DIM ((int64_t)1 << 40)  /* largest dimension accepted */

static uint64_t read_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

typedef struct st_map {
  char *path;
  uint8_t *map;
  size_t size;
} st_map;

struct st_set {
  st_map *files;
  size_t n_files, cap_files;
  st_tensor *t; /* sorted by name */
  size_t n, cap;
};

static int dtype_of(const char *s, size_t *esize) {
  static const struct {
    const char *name;
    int dt;
    size_t size;
  } tab[] = {{"F32", ST_F32, 4},   {"F16", ST_F16, 2},    {"BF16", ST_BF16, 2}, {"F64", ST_OTHER, 8},
             {"I64", ST_OTHER, 8}, {"U64", ST_OTHER, 8},  {"I32", ST_OTHER, 4}, {"U32", ST_OTHER, 4},
             {"I16", ST_OTHER, 2}, {"U16", ST_OTHER, 2},  {"I8", ST_OTHER, 1},  {"U8", ST_OTHER, 1},
             {"BOOL", ST_OTHER, 1}, {"F8_E4M3", ST_OTHER, 1}, {"F8_E5M2", ST_OTHER, 1}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (!strcmp(tab[i].name, s)) {
      *esize = tab[i].size;
      return tab[i].dt;
    }
  *esize = 0; /* unknown: offsets are still checked, the shape cannot be */
  return ST_OTHER;
}

void st_close(st_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_files; i++) {
    if (s->files[i].map) munmap(s->files[i].map, s->files[i].size);
    free(s->files[i].path);
  }
  for (size_t i = 0; i < s->n; i++) free(s->t[i].name);
  free(s->files);
  free(s->t);
  free(s);
}

static int cmp_tensor(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Map path read-only; *size its bytes. NULL with a message when it cannot be. */
static uint8_t *map_file(const char *path, size_t *size, q35_err *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    q35_seterr(err, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat sb;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
    close(fd);
    q35_seterr(err, "%s: not a regular file", path);
    return NULL;
  }
  *size = (size_t)sb.st_size;
  if (*size < ST_HEADER_LEN_SIZE) {
    close(fd);
    q35_seterr(err, "%s: truncated safetensors file (%zu bytes, the header length alone needs 8)", path, *size);
    return NULL;
  }
  uint8_t *map = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    q35_seterr(err, "%s: mmap failed: %s", path, strerror(errno));
    return NULL;
  }
  return map;
}

/* The shape of a header entry: non-negative integers (each at most ST_MAX_DIM), product in
 * int64. 0, or -1 (no message: the caller names the tensor). */
static int parse_shape(json_t *js, st_tensor *t) {
  int64_t n = 1;
  t->n_dims = (int)json_array_size(js);
  for (int d = 0; d < t->n_dims; d++) {
    json_t *e = json_array_get(js, (size_t)d);
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > ST_MAX_DIM) return -1;
    t->shape[d] = json_integer_value(e);
    if (t->shape[d] && n > INT64_MAX / t->shape[d]) return -1;
    n *= t->shape[d];
  }
  t->n_elem = n;
  return 0;
}

/* One header entry name -> {dtype, shape, data_offsets} into t (the data section of file f
 * is data, dsize bytes). */
static int parse_entry(const st_map *f, const char *key, json_t *v, const uint8_t *data, size_t dsize,
                       st_tensor *t, q35_err *err) {
  const char *path = f->path;
  json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"), *jo = json_object_get(v, "data_offsets");
  if (!json_is_object(v) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
      json_array_size(jo) != 2)
    return q35_seterr(err, "%s: tensor '%s': header entry needs dtype (string), shape (array) and data_offsets "
                           "([begin, end])", path, key);
  if (json_array_size(js) > ST_MAX_DIMS)
    return q35_seterr(err, "%s: tensor '%s': %zu dimensions (at most %d supported)", path, key, json_array_size(js),
                      ST_MAX_DIMS);
  memset(t, 0, sizeof *t);
  snprintf(t->dtype_name, sizeof t->dtype_name, "%s", json_string_value(jd));
  size_t esize;
  t->dtype = dtype_of(json_string_value(jd), &esize);
  if (parse_shape(js, t)) return q35_seterr(err, "%s: tensor '%s': invalid shape", path, key);
  const int64_t n = t->n_elem;
  json_t *b0 = json_array_get(jo, 0), *b1 = json_array_get(jo, 1);
  if (!json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
      json_integer_value(b1) < json_integer_value(b0))
    return q35_seterr(err, "%s: tensor '%s': invalid data_offsets", path, key);
  uint64_t o0 = (uint64_t)json_integer_value(b0), o1 = (uint64_t)json_integer_value(b1);
  if (o1 > dsize)
    return q35_seterr(err, "%s: tensor '%s': data_offsets [%llu, %llu] lie outside the data section (%zu bytes): "
                           "truncated file?", path, key, (unsigned long long)o0, (unsigned long long)o1, dsize);
  if (esize && ((uint64_t)n > (o1 - o0) / esize || (uint64_t)n * esize != o1 - o0))
    return q35_seterr(err, "%s: tensor '%s': shape holds %lld %s elements (%llu bytes) but data_offsets span %llu "
                           "bytes", path, key, (long long)n, t->dtype_name, (unsigned long long)n * esize,
                      (unsigned long long)(o1 - o0));
  t->data = data + o0;
  t->nbytes = (size_t)(o1 - o0);
  t->file = f->path;
  t->name = strdup(key);
  if (!t->name) return q35_seterr(err, "out of memory");
  return 0;
}

/* Map one file and append its tensors. Returns the file index or -1. */
static int add_file(st_set *s, const char *path, q35_err *err) {
  for (size_t i = 0; i < s->n_files; i++)
    if (!strcmp(s->files[i].path, path)) return (int)i;
  size_t size;
  uint8_t *map = map_file(path, &size, err);
  if (!map) return -1;
  if (q35_grow((void **)&s->files, &s->cap_files, s->n_files + 1, sizeof *s->files)) {
    munmap(map, size);
    return q35_seterr(err, "out of memory");
  }
  st_map *f = &s->files[s->n_files];
  f->path = strdup(path);
  f->map = map;
  f->size = size;
  const int fi = (int)s->n_files++;
  if (!f->path) return q35_seterr(err, "out of memory");

  const uint64_t hlen = read_le64(map);
  if (hlen > size - ST_HEADER_LEN_SIZE)
    return q35_seterr(err, "%s: truncated or not a safetensors file: header length %llu exceeds the file size %zu",
                      path, (unsigned long long)hlen, size);
  const uint8_t *data = map + ST_HEADER_LEN_SIZE + hlen;
  const size_t dsize = size - ST_HEADER_LEN_SIZE - (size_t)hlen;
  json_error_t je;
  json_t *root = json_loadb((const char *)map + ST_HEADER_LEN_SIZE, (size_t)hlen, 0, &je);
  if (!root) return q35_seterr(err, "%s: malformed safetensors header JSON: %s (line %d)", path, je.text, je.line);
  if (!json_is_object(root)) {
    json_decref(root);
    return q35_seterr(err, "%s: safetensors header is not a JSON object", path);
  }
  int rc = 0;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) continue;
    if (q35_grow((void **)&s->t, &s->cap, s->n + 1, sizeof *s->t)) {
      rc = q35_seterr(err, "out of memory");
      break;
    }
    if ((rc = parse_entry(f, key, v, data, dsize, &s->t[s->n], err))) break;
    s->n++;
  }
  json_decref(root);
  return rc ? -1 : fi;
}

static st_set *finish(st_set *s, q35_err *err) {
  if (s->n > 1) qsort(s->t, s->n, sizeof *s->t, cmp_tensor); /* t is NULL when there are none */
  for (size_t i = 1; i < s->n; i++)
    if (!strcmp(s->t[i].name, s->t[i - 1].name)) {
      q35_seterr(err, "tensor '%s' appears twice: in %s and in %s", s->t[i].name, s->t[i - 1].file, s->t[i].file);
      st_close(s);
      return NULL;
    }
  return s;
}

st_set *st_open_file(const char *path, q35_err *err) {
  st_set *s = calloc(1, sizeof *s);
  if (!s) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  if (add_file(s, path, err) < 0) {
    st_close(s);
    return NULL;
  }
  return finish(s, err);
}

st_set *st_open_dir(const char *dir, q35_err *err) {
  char idx[PATH_MAX], single[PATH_MAX];
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
  snprintf(single, sizeof single, "%s/model.safetensors", dir);
  if (access(idx, F_OK) != 0) {
    if (access(single, F_OK) != 0) {
      q35_seterr(err, "%s: no model.safetensors.index.json and no model.safetensors", dir);
      return NULL;
    }
    return st_open_file(single, err);
  }
  json_error_t je;
  json_t *root = json_load_file(idx, 0, &je);
  if (!root) {
    q35_seterr(err, "%s: malformed JSON: %s (line %d)", idx, je.text, je.line);
    return NULL;
  }
  json_t *wm = json_object_get(root, "weight_map");
  if (!json_is_object(wm)) {
    json_decref(root);
    q35_seterr(err, "%s: key 'weight_map' is missing or not an object", idx);
    return NULL;
  }
  st_set *s = calloc(1, sizeof *s);
  if (!s) {
    json_decref(root);
    q35_seterr(err, "out of memory");
    return NULL;
  }
  const char *key;
  json_t *v;
  int rc = 0;
  /* open every shard named */
  json_object_foreach(wm, key, v) {
    if (!json_is_string(v)) {
      rc = q35_seterr(err, "%s: weight_map['%s'] is not a file name", idx, key);
      break;
    }
    const char *shard = json_string_value(v);
    if (strchr(shard, '/') || !strcmp(shard, "..") || !*shard) {
      rc = q35_seterr(err, "%s: weight_map['%s'] = '%s' is not a plain file name", idx, key, shard);
      break;
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, shard);
    if (access(p, F_OK) != 0) {
      rc = q35_seterr(err, "%s: shard '%s' (holding '%s') is missing", idx, shard, key);
      break;
    }
    if (add_file(s, p, err) < 0) {
      rc = -1;
      break;
    }
  }
  if (!rc && !finish(s, err)) s = NULL, rc = -1;
  /* every tensor of the index must be in the shard it names */
  if (!rc) {
    json_object_foreach(wm, key, v) {
      const st_tensor *t = st_find(s, key);
      const char *shard = json_string_value(v);
      size_t ls = strlen(shard), lf = t ? strlen(t->file) : 0;
      if (!t || lf < ls + 1 || strcmp(t->file + lf - ls, shard) || t->file[lf - ls - 1] != '/') {
        rc = q35_seterr(err, "%s: weight_map names '%s' in shard '%s', but that shard does not hold it", idx, key,
                        shard);
        break;
      }
    }
  }
  json_decref(root);
  if (rc) {
    st_close(s);
    return NULL;
  }
  return s;
}

size_t st_count(const st_set *s) { return s->n; }
const st_tensor *st_get(const st_set *s, size_t i) { return i < s->n ? &s->t[i] : NULL; }

const st_tensor *st_find(const st_set *s, const char *name) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(s->t[mid].name, name);
    if (!c) return &s->t[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

uint64_t st_total_bytes(const st_set *s) {
  uint64_t b = 0;
  for (size_t i = 0; i < s->n; i++) b += s->t[i].nbytes;
  return b;
}

void st_read_f32(const st_tensor *t, int64_t off, int64_t n, float *dst) {
  switch (t->dtype) {
    case ST_F32: memcpy(dst, t->data + off * 4, (size_t)n * 4); break;
    case ST_F16: {
      const uint8_t *p = t->data + off * 2;
      for (int64_t i = 0; i < n; i++) dst[i] = q35_fp16_to_fp32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    }
    case ST_BF16: {
      const uint8_t *p = t->data + off * 2;
      for (int64_t i = 0; i < n; i++) dst[i] = q35_bf16_to_fp32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    }
    default:
      for (int64_t i = 0; i < n; i++) dst[i] = 0.0f;
  }
}
