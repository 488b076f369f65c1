/* buf.c - growable buffers and whole-file reads (see buf.h). */
#include "base/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int reserve(q35_buf *b, size_t extra) {
  if (b->oom) return -1;
  if (b->n + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->oom = 1;
      return -1;
    }
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

int q35_buf_add(q35_buf *b, const void *data, size_t n) {
  if (reserve(b, n)) return -1;
  if (n) memcpy(b->p + b->n, data, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

int q35_buf_str(q35_buf *b, const char *s) { return q35_buf_add(b, s, strlen(s)); }

int q35_buf_char(q35_buf *b, char c) { return q35_buf_add(b, &c, 1); }

int q35_buf_printf(q35_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (k < 0 || reserve(b, (size_t)k)) return -1;
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)k;
  return 0;
}

char *q35_buf_take(q35_buf *b, size_t *len) {
  if (!b->p && !b->oom) q35_buf_add(b, "", 0);
  char *p = b->oom ? NULL : b->p;
  if (len) *len = b->oom ? 0 : b->n;
  if (b->oom) free(b->p);
  *b = (q35_buf){0};
  return p;
}

void q35_buf_free(q35_buf *b) {
  free(b->p);
  *b = (q35_buf){0};
}

char *q35_strndup(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (!p) return NULL;
  if (n) memcpy(p, s, n);
  p[n] = 0;
  return p;
}

int q35_grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 16;
  while (nc < need) {
    if (nc > ((size_t)-1) / 2 / (elem ? elem : 1)) return -1;
    nc *= 2;
  }
  void *q = realloc(*p, nc * elem);
  if (!q) return -1;
  memset((char *)q + *cap * elem, 0, (nc - *cap) * elem);
  *p = q;
  *cap = nc;
  return 0;
}

char *q35_read_stream(FILE *f, size_t *len) {
  q35_buf b = {0};
  char chunk[65536];
  size_t r;
  while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
    if (q35_buf_add(&b, chunk, r)) break;
  if (ferror(f)) {
    q35_buf_free(&b);
    if (len) *len = 0;
    return NULL;
  }
  return q35_buf_take(&b, len);
}

char *q35_read_file(const char *path, size_t *len, q35_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    q35_seterr(err, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  char *p = q35_read_stream(f, len);
  const int bad = ferror(f);
  fclose(f);
  if (!p) q35_seterr(err, "%s: %s", path, bad ? "read error" : "out of memory");
  return p;
}
