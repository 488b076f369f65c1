/* imatrix.c - llama.cpp's imatrix GGUF files, read (see imatrix.h). */
#include "export/imatrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "format/gguf.h"
#include "kernels/quant.h"
#include "kernels/quant_lowbit.h"

#define SUM_SFX ".in_sum2"
#define CNT_SFX ".counts"

typedef struct {
  char *name;       /* the weight's name */
  int64_t n_per_row, n_mat; /* a legacy .dat entry: 0 and its count of values (rows are known at use) */
  float *w;         /* n_per_row * n_mat weights */
} im_entry;

struct q35_imatrix {
  im_entry *e;
  size_t n, cap;
};

void q35_imatrix_free(q35_imatrix *im) {
  if (!im) return;
  for (size_t i = 0; i < im->n; i++) {
    free(im->e[i].name);
    free(im->e[i].w);
  }
  free(im->e);
  free(im);
}

/* entry NAME from NAME.in_sum2 (t) and NAME.counts */
static int add_entry(q35_imatrix *im, const gguf_file *f, const gguf_tensor *t, q35_err *err) {
  const size_t L = (size_t)t->name.len - strlen(SUM_SFX);
  char cname[512];
  snprintf(cname, sizeof cname, "%.*s%s", (int)L, t->name.ptr, CNT_SFX);
  const gguf_tensor *c = gguf_find_tensor(f, cname);
  if (!c) return q35_seterr(err, "%s: '%.*s' has no '%s'", f->path, (int)t->name.len, t->name.ptr, cname);
  const int64_t n_per_row = t->ne[0], n_mat = t->ne[1] * t->ne[2] * t->ne[3];
  if (t->type != Q35_TYPE_F32 || c->type != Q35_TYPE_F32 || t->n_dims > 2 || c->ne[0] * c->ne[1] != n_mat)
    return q35_seterr(err, "%s: '%s' must be f32 {%lld} for '%.*s' {%lld, %lld} (f32)", f->path, cname,
                      (long long)n_mat, (int)t->name.len, t->name.ptr, (long long)n_per_row, (long long)n_mat);
  if (q35_grow((void **)&im->e, &im->cap, im->n + 1, sizeof *im->e)) return q35_seterr(err, "out of memory");
  im_entry *e = &im->e[im->n];
  e->name = malloc(L + 1);
  e->w = malloc((size_t)(n_per_row * n_mat) * sizeof(float));
  if (!e->name || !e->w) {
    free(e->name), free(e->w);
    return q35_seterr(err, "out of memory");
  }
  memcpy(e->name, t->name.ptr, L);
  e->name[L] = 0;
  e->n_per_row = n_per_row, e->n_mat = n_mat;
  const float *sum = t->data, *cnt = c->data;
  for (int64_t m = 0; m < n_mat; m++)
    for (int64_t j = 0; j < n_per_row; j++) {
      const float s = sum[m * n_per_row + j];
      e->w[m * n_per_row + j] = cnt[m] > 0 ? s / cnt[m] : 1.0f;
      if (!(s >= 0 && s < 1e38f))
        return free(e->name), free(e->w),
               q35_seterr(err, "%s: '%s' holds %g at column %lld (sums of squares are finite and >= 0)", f->path,
                          e->name, (double)s, (long long)j);
    }
  im->n++;
  return 0;
}

int q35_imatrix_count(const q35_imatrix *im) { return im ? (int)im->n : 0; }

void q35_imatrix_report(const q35_imatrix *im, const char *path) {
  fprintf(stderr, "q35 export: --imatrix %s: %d weights; used by every quantizer but q8_0 and mxfp4 (which have no "
                  "importance-weighted form, as in ggml)\n",
          path, q35_imatrix_count(im));
}

/* llama.cpp's legacy .dat imatrix (llama-imatrix --output-format dat, and every file before the
 * GGUF one): i32 entry count; per entry an i32 name length, the name, an i32 call count ncall,
 * an i32 value count nval and nval f32 sums (all experts' columns one after another); then,
 * optionally, an i32 chunk count and a dataset name. Weights = sums / ncall (the sums as they are
 * when ncall is 0), as llama-quantize reads them. */
static int load_legacy(q35_imatrix *im, const char *path, q35_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return q35_seterr(err, "%s: cannot open", path);
  int rc = 0;
  int32_t n = 0;
  if (fread(&n, 4, 1, f) != 1 || n < 1 || n > (1 << 24))
    rc = q35_seterr(err, "%s: not an imatrix file (neither GGUF nor llama.cpp's legacy .dat: no entry count)", path);
  for (int32_t i = 0; !rc && i < n; i++) {
    int32_t len = 0, ncall = 0, nval = 0;
    char name[512];
    if (fread(&len, 4, 1, f) != 1 || len < 1 || len >= (int32_t)sizeof name || fread(name, 1, (size_t)len, f) != (size_t)len) {
      rc = q35_seterr(err, "%s: legacy .dat imatrix: entry %d of %d has a bad or truncated name", path, i + 1, n);
      break;
    }
    name[len] = 0;
    if (fread(&ncall, 4, 1, f) != 1 || fread(&nval, 4, 1, f) != 1 || nval < 1 || nval > (1 << 28)) {
      rc = q35_seterr(err, "%s: legacy .dat imatrix: '%s' has a bad or truncated value count", path, name);
      break;
    }
    if (q35_grow((void **)&im->e, &im->cap, im->n + 1, sizeof *im->e)) {
      rc = q35_seterr(err, "out of memory");
      break;
    }
    im_entry *e = &im->e[im->n];
    e->name = strdup(name);
    e->w = malloc((size_t)nval * sizeof(float));
    e->n_per_row = 0, e->n_mat = nval;
    if (!e->name || !e->w) {
      free(e->name), free(e->w);
      rc = q35_seterr(err, "out of memory");
      break;
    }
    im->n++;
    if (fread(e->w, sizeof(float), (size_t)nval, f) != (size_t)nval) {
      rc = q35_seterr(err, "%s: legacy .dat imatrix: '%s' is truncated (%d values announced)", path, name, nval);
      break;
    }
    for (int32_t j = 0; j < nval; j++) {
      if (!(e->w[j] >= 0 && e->w[j] < 1e38f)) {
        rc = q35_seterr(err, "%s: '%s' holds %g at value %d (sums of squares are finite and >= 0)", path, name,
                        (double)e->w[j], j);
        break;
      }
      if (ncall > 0) e->w[j] /= (float)ncall;
    }
  }
  fclose(f);
  return rc;
}

static int is_gguf(const char *path) {
  FILE *f = fopen(path, "rb");
  char m[4] = {0};
  const int ok = f && fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
  if (f) fclose(f);
  return ok;
}

q35_imatrix *q35_imatrix_load(const char *path, q35_err *err) {
  if (!is_gguf(path)) {
    q35_imatrix *im = calloc(1, sizeof *im);
    if (!im || load_legacy(im, path, err)) {
      if (!im) q35_seterr(err, "out of memory");
      q35_imatrix_free(im);
      return NULL;
    }
    return im;
  }
  gguf_file *f = gguf_open_ex(path, GGUF_OPEN_ANY_LAYOUT, err);
  if (!f) return NULL;
  q35_imatrix *im = calloc(1, sizeof *im);
  int rc = im ? 0 : q35_seterr(err, "out of memory");
  const size_t ls = strlen(SUM_SFX);
  for (uint64_t i = 0; !rc && i < f->n_tensors; i++) {
    const gguf_tensor *t = &f->tensors[i];
    if (t->name.len > ls && !memcmp(t->name.ptr + t->name.len - ls, SUM_SFX, ls)) rc = add_entry(im, f, t, err);
  }
  if (!rc && im->n == 0)
    rc = q35_seterr(err, "%s: not an imatrix file (a GGUF without NAME%s tensors)", path, SUM_SFX);
  gguf_close(f);
  if (rc) {
    q35_imatrix_free(im);
    return NULL;
  }
  return im;
}

const float *q35_imatrix_weights(const q35_imatrix *im, const char *name, int64_t n_per_row, int64_t mat,
                                 int *bad, q35_err *err) {
  *bad = 0;
  if (!im) return NULL;
  for (size_t i = 0; i < im->n; i++) {
    const im_entry *e = &im->e[i];
    if (strcmp(e->name, name)) continue;
    if (e->n_per_row == 0) { /* a legacy entry: its values are whole rows of n_per_row, one per matrix or one for all */
      const int64_t nm = n_per_row > 0 && e->n_mat % n_per_row == 0 ? e->n_mat / n_per_row : 0;
      if (nm == 0 || (nm != 1 && mat >= nm)) {
        *bad = 1;
        q35_seterr(err, "imatrix: '%s' has %lld weights (legacy .dat); the tensor has rows of %lld and matrix %lld",
                   name, (long long)e->n_mat, (long long)n_per_row, (long long)mat);
        return NULL;
      }
      return e->w + (nm == 1 ? 0 : mat) * n_per_row;
    }
    if (e->n_per_row != n_per_row || (e->n_mat != 1 && mat >= e->n_mat)) {
      *bad = 1;
      q35_seterr(err, "imatrix: '%s' has %lld x %lld weights; the tensor has rows of %lld and matrix %lld", name,
                 (long long)e->n_per_row, (long long)e->n_mat, (long long)n_per_row, (long long)mat);
      return NULL;
    }
    return e->w + (e->n_mat == 1 ? 0 : mat) * n_per_row;
  }
  return NULL;
}

int q35_imatrix_check(const q35_imatrix *im, const char *name, int type, int need, int64_t n_per_row, int64_t n_mat,
                      int dry_run, int *missing, q35_err *err) {
  int bad;
  const float *w = q35_imatrix_weights(im, name, n_per_row, n_mat - 1, &bad, err);
  if (bad) return -1;
  if (need && !w && dry_run) {
    if (missing) *missing = 1;
    return 0;
  }
  if (need && !w && !im)
    return q35_seterr(err, "%s: %s needs an importance matrix (as in llama-quantize): give one with --imatrix FILE "
                           "(q35 imatrix -m MODEL -f TEXT writes it)", name, q35_type_name(type));
  if (need && !w)
    return q35_seterr(err, "%s: %s needs importance weights and the imatrix has none for this tensor", name,
                      q35_type_name(type));
  return 0;
}

int q35_imatrix_type_weighted(int type) {
  switch (type) {
    case Q35_TYPE_F32: case Q35_TYPE_F16: case Q35_TYPE_BF16: case Q35_TYPE_Q8_0: case Q35_TYPE_MXFP4: return 0;
    default: return q35_type_quantizable(type);
  }
}

void q35_quantize_row_imatrix(int type, const float *src, void *dst, int64_t n, const float *qw) {
  if (qw && !q35_quantize_row_weighted(type, src, dst, n, qw)) return;
  q35_quantize_row(type, src, dst, n);
}
