/*
 * hf_convert.c - the conversion rules of the Hugging Face exporter (see hf_internal.h): each
 * output row is gathered from the mmapped source tensors (value-head reorder, fused or split
 * experts), run through its elementwise op, checked finite and quantized to the output type.
 * Rows are independent, so a tensor's rows are split over threads; the bytes do not depend
 * on the thread count.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "export/hf_internal.h"
#include "export/imatrix.h"
#include "export/recipe.h"
#include "format/tensor_types.h"
#include "kernels/quant.h"

/* Tensors smaller than this many elements are converted on the calling thread alone. */
#define HF_PARALLEL_MIN_ELEMS (1 << 16)

static inline int64_t vperm(int64_t j, int64_t Hk, int64_t R) { return (j % Hk) * R + j / Hk; }

/* Produce output row r of t into row (t->ne[0] floats); tmp: scratch of the same size. */
static void get_row(const plan *p, const otensor *t, int64_t r, float *row, float *tmp) {
  const int64_t n = t->ne[0], Hk = p->cfg.Hk, R = p->cfg.Hv / p->cfg.Hk;
  switch (t->gather) {
    case G_PLAIN: st_read_f32(t->src, r * n, n, row); break;
    case G_ROWPERM: {
      int64_t sr = r;
      if (r >= t->perm_start) {
        const int64_t k = r - t->perm_start, j = k / t->perm_block, w = k % t->perm_block;
        sr = t->perm_start + vperm(j, Hk, R) * t->perm_block + w;
      }
      st_read_f32(t->src, sr * n, n, row);
      break;
    }
    case G_COLPERM: {
      st_read_f32(t->src, r * n, n, tmp);
      const int64_t b = t->perm_block;
      for (int64_t c = 0; c < n; c++) row[c] = tmp[vperm(c / b, Hk, R) * b + c % b];
      break;
    }
    case G_FUSED: {
      const int64_t I = t->ne[1], e = r / I, i = r % I;
      st_read_f32(t->src, (e * t->fused_rows + t->fused_off + i) * n, n, row);
      break;
    }
    case G_SPLIT: {
      const int64_t I = t->ne[1], e = r / I, i = r % I;
      st_read_f32(t->srcs[e], i * n, n, row);
      break;
    }
  }
  if (t->op == OP_PLUS1)
    for (int64_t c = 0; c < n; c++) row[c] += 1.0f;
  else if (t->op == OP_NEGEXP)
    for (int64_t c = 0; c < n; c++) row[c] = -expf(row[c]);
}

typedef struct conv_job {
  const plan *p;
  const otensor *t;
  void *buf;
  float *row, *tmp;
  int64_t r0, r1, bad_row;
} conv_job;

/* Convert rows [r0, r1) of a tensor into its slot of the output buffer. */
static void *conv_worker(void *arg) {
  conv_job *j = arg;
  const otensor *t = j->t;
  const size_t rb = q35_row_size(t->type, t->ne[0]);
  for (int64_t r = j->r0; r < j->r1; r++) {
    get_row(j->p, t, r, j->row, j->tmp);
    for (int64_t c = 0; c < t->ne[0]; c++)
      if (!isfinite(j->row[c])) {
        j->bad_row = r;
        return NULL;
      }
    int bad; /* sizes were checked when the tensor was declared (hf_check_imatrix) */
    q35_err ignored;
    const float *qw = q35_imatrix_weights(j->p->o->imatrix, t->name, t->ne[0], r / t->ne[1], &bad, &ignored);
    q35_quantize_row_imatrix(t->type, j->row, (char *)j->buf + (size_t)r * rb, t->ne[0], qw);
  }
  return NULL;
}

int hf_check_imatrix(plan *p, const otensor *t, q35_err *err) {
  if (t->type == Q35_TYPE_F32) return 0;
  const int need = q35_recipe_needs_imatrix(p->o->recipe, t->name, t->type);
  return q35_imatrix_check(p->o->imatrix, t->name, t->type, need, t->ne[0], t->ne[2], p->o->dry_run, &p->missing_imatrix,
                           err);
}

int hf_convert_tensor(const plan *p, const otensor *t, void *buf, float *scratch, int64_t maxrow,
                      int nthreads, int64_t *bad_row) {
  conv_job jobs[HF_MAX_THREADS];
  pthread_t tid[HF_MAX_THREADS];
  const int64_t rows = t->ne[1] * t->ne[2];
  int nth = rows * t->ne[0] >= HF_PARALLEL_MIN_ELEMS ? nthreads : 1;
  if (nth > rows) nth = (int)rows;
  if (nth > HF_MAX_THREADS) nth = HF_MAX_THREADS;
  if (nth < 1) nth = 1;
  int started = 0;
  for (int k = 0; k < nth; k++) {
    conv_job *j = &jobs[k];
    j->p = p;
    j->t = t;
    j->buf = buf;
    j->row = scratch + (size_t)(2 * k) * (size_t)maxrow;
    j->tmp = scratch + (size_t)(2 * k + 1) * (size_t)maxrow;
    j->r0 = rows * k / nth;
    j->r1 = rows * (k + 1) / nth;
    j->bad_row = -1;
    if (k > 0 && pthread_create(&tid[k], NULL, conv_worker, j) == 0) started |= 1 << k;
    else if (k > 0) conv_worker(j); /* could not start a thread: do it here */
  }
  conv_worker(&jobs[0]);
  int64_t bad = -1;
  for (int k = 0; k < nth; k++) {
    if (started & (1 << k)) pthread_join(tid[k], NULL);
    if (jobs[k].bad_row >= 0 && bad < 0) bad = jobs[k].bad_row;
  }
  *bad_row = bad;
  return bad >= 0 ? -1 : 0;
}
