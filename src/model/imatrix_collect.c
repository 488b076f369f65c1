/* imatrix_collect.c - the importance matrix of a model over a text (see imatrix_collect.h). */
#include "model/imatrix_collect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/gguf.h"
#include "model/forward_internal.h"

/* One observed weight: the GGUF tensor whose data the product reads. */
typedef struct {
  const gguf_tensor *t;
  int64_t K, n_mat;
  double *sum;   /* [n_mat][K] */
  double *count; /* [n_mat] */
} acc_entry;

typedef struct {
  const gguf_file *g;
  acc_entry *e; /* one per GGUF tensor, allocated when first seen */
  int failed;
  long unmatched; /* products on weights not found in the file */
} acc;

static void observe(void *ctx, const q35_tensor *w, int64_t expert, const float *x, int64_t ldx, int64_t K,
                    int64_t T, const int32_t *rows, int64_t rdiv) {
  acc *a = ctx;
  const gguf_file *g = a->g;
  uint64_t i = 0;
  while (i < g->n_tensors && g->tensors[i].data != w->data) i++;
  if (i == g->n_tensors) { /* a weight not read in place from the file (converted at load) */
    a->unmatched++;
    return;
  }
  acc_entry *e = &a->e[i];
  if (!e->sum) {
    e->t = &g->tensors[i];
    e->K = K;
    e->n_mat = w->ne[2] > 1 ? w->ne[2] : 1;
    e->sum = calloc((size_t)(e->K * e->n_mat), sizeof(double));
    e->count = calloc((size_t)e->n_mat, sizeof(double));
    if (!e->sum || !e->count) {
      a->failed = 1;
      return;
    }
  }
  double *s = e->sum + expert * e->K;
  for (int64_t t = 0; t < T; t++) {
    const float *r = x + (rows ? rows[t] / rdiv : t) * ldx;
    for (int64_t j = 0; j < K; j++) s[j] += (double)r[j] * r[j];
  }
  e->count[expert] += (double)T;
}

static int write_imatrix(const acc *a, int n_chunks, int32_t chunk, const char *dataset, const char *out,
                         q35_err *err) {
  gguf_writer *w = gguf_writer_new();
  if (!w) return q35_seterr(err, "out of memory");
  const char *ds[1] = {dataset};
  gguf_set_str(w, "general.type", "imatrix");
  gguf_set_arr_str(w, "imatrix.datasets", ds, 1);
  gguf_set_u32(w, "imatrix.chunk_count", (uint32_t)n_chunks);
  gguf_set_u32(w, "imatrix.chunk_size", (uint32_t)chunk);
  float **bufs = calloc(2 * a->g->n_tensors + 1, sizeof *bufs);
  int nb = 0, rc = bufs ? 0 : q35_seterr(err, "out of memory");
  for (uint64_t i = 0; !rc && i < a->g->n_tensors; i++) {
    const acc_entry *e = &a->e[i];
    if (!e->sum) continue;
    float *s = malloc((size_t)(e->K * e->n_mat) * sizeof(float)), *c = malloc((size_t)e->n_mat * sizeof(float));
    bufs[nb++] = s, bufs[nb++] = c;
    if (!s || !c) {
      rc = q35_seterr(err, "out of memory");
      break;
    }
    for (int64_t j = 0; j < e->K * e->n_mat; j++) s[j] = (float)e->sum[j];
    for (int64_t m = 0; m < e->n_mat; m++) c[m] = (float)e->count[m];
    char name[600];
    const int64_t ns[4] = {e->K, e->n_mat, 1, 1}, nc[4] = {1, e->n_mat, 1, 1};
    snprintf(name, sizeof name, "%.*s.in_sum2", (int)e->t->name.len, e->t->name.ptr);
    if (gguf_add_tensor(w, name, 0, 2, ns, s) < 0) rc = q35_seterr(err, "%s: cannot add '%s'", out, name);
    snprintf(name, sizeof name, "%.*s.counts", (int)e->t->name.len, e->t->name.ptr);
    if (!rc && gguf_add_tensor(w, name, 0, 2, nc, c) < 0) rc = q35_seterr(err, "%s: cannot add '%s'", out, name);
  }
  if (!rc) rc = gguf_writer_save(w, out, err);
  for (int i = 0; i < nb; i++) free(bufs[i]);
  free(bufs);
  gguf_writer_free(w);
  return rc;
}

int q35_imatrix_compute(q35_model *model, const int32_t *tokens, int64_t n, int32_t chunk, const char *dataset,
                        const char *out, q35_err *err) {
  if (chunk < 1) return q35_seterr(err, "imatrix: --chunk must be at least 1");
  const int64_t n_chunks = n / chunk;
  if (n_chunks < 1)
    return q35_seterr(err, "imatrix: the text has %lld tokens, fewer than one chunk of %d", (long long)n, chunk);
  acc a = {model->gguf, calloc(model->gguf->n_tensors + 1, sizeof(acc_entry)), 0, 0};
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = chunk;
  q35_session *s = a.e ? q35_session_new(model, &sp, err) : NULL;
  /* every position's logits, so the output matrix sees every token (as in llama-imatrix) */
  float *logits = malloc((size_t)chunk * (size_t)q35_model_n_vocab(model) * sizeof(float));
  int rc = s ? 0 : -1;
  if (!a.e || !logits) rc = q35_seterr(err, "out of memory (%d x %d logits)", chunk, q35_model_n_vocab(model));
  q35_mm_observer_ctx = &a;
  q35_mm_observer = observe;
  for (int64_t c = 0; !rc && c < n_chunks; c++) {
    q35_session_reset(s);
    rc = q35_session_eval(s, tokens + c * chunk, chunk, chunk, logits, 1, err);
    if (!rc && a.failed) rc = q35_seterr(err, "out of memory");
    fprintf(stderr, "q35 imatrix: chunk %lld/%lld\n", (long long)c + 1, (long long)n_chunks);
  }
  q35_mm_observer = NULL;
  q35_mm_observer_ctx = NULL;
  if (a.unmatched)
    fprintf(stderr, "q35 imatrix: warning: %ld products on weights converted at load (not in the file) are not "
                    "recorded\n", a.unmatched);
  if (!rc) rc = write_imatrix(&a, (int)n_chunks, chunk, dataset, out, err);
  q35_session_free(s);
  free(logits);
  for (uint64_t i = 0; a.e && i < model->gguf->n_tensors; i++) {
    free(a.e[i].sum);
    free(a.e[i].count);
  }
  free(a.e);
  return rc;
}
