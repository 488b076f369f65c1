/*
 * matmul.c - the forward pass's matrix products: Y = W X over every token of a step, so each
 * weight matrix is read once per step whatever the number of rows and tokens.
 *
 * Activations are converted once (q35_act_prepare) to the weight's vec_dot type and reused by
 * every weight of that type. Each output element is exactly one q35_vec_dot's value (the tiles of
 * kernels/quant.h are bit-identical to it), so neither the blocking nor which thread computes a
 * row changes a bit. Rows of W are handed out in claimed pieces (q35_claim_next): a thread that
 * streams faster or starts earlier takes more of them.
 */
#include <string.h>

#include "kernels/quant.h"
#include "model/forward_internal.h"

/* Y[t][n] (row stride ldy) = W_n . X_t for t < T, n < N. W: rows of `type`, row stride nb1.
 * X: T rows already converted to q35_vec_dot_type(type), row stride ldx bytes. */
typedef struct {
  const char *w;
  int type;
  size_t nb1;
  int64_t K, N, T;
  const char *x;
  size_t ldx;
  float *y;
  int64_t ldy;
  q35_pool *pool; /* whose claim hands out the rows */
  int64_t half;   /* > 0: rows claimed as pairs (i, i + half) (mm_pair_half) */
} mm_task;

/* Blocks of TB tokens x RB rows, so a token block's activations stay in cache while the thread's
 * rows stream past. */
enum { MM_TB = 32, MM_RB = 16 };
/* Rows go out in chunks of MM_GRAIN, so each claimed piece is whole row blocks. */
enum { MM_GRAIN = MM_RB };

/* Up to MM_TSMALL tokens (a verify step of one or two drafts) a piece goes to the tile kernels in
 * one call, as decode's does to the row kernels: the activations are a few KB and stay in cache
 * anyway, and a whole piece lets a kernel read two row ranges far apart at once (two memory
 * streams: the AVX-512 Q4_0 rows kernel), which 16-row blocks are too short for. */
enum { MM_TSMALL = 3 };

/* rows [n0, n1) of one product */
static void mm_rows(const mm_task *t, long n0, long n1) {
  if (t->T == 1) { /* decode: the whole piece in one call to the row kernels (no per-block call) */
    q35_vec_dot_rows(t->type, t->K, t->w + (size_t)n0 * t->nb1, t->nb1, (int)(n1 - n0), t->x, t->y + n0);
    return;
  }
  if (t->T <= MM_TSMALL) {
    q35_vec_dot_tile_ex(t->type, t->K, t->w + (size_t)n0 * t->nb1, t->nb1, (int)(n1 - n0), t->x, t->ldx, (int)t->T,
                        t->y + n0, 1, (size_t)t->ldy);
    return;
  }
  for (int64_t j0 = 0; j0 < t->T; j0 += MM_TB) {
    const int64_t j1 = j0 + MM_TB < t->T ? j0 + MM_TB : t->T;
    for (long nb = n0; nb < n1; nb += MM_RB) {
      const long ne = nb + MM_RB < n1 ? nb + MM_RB : n1;
      /* register-blocked tile: bit-identical to one q35_vec_dot per (row, token) pair; a single
       * token (decode) goes straight to the row kernels */
      if (j1 - j0 == 1) {
        q35_vec_dot_rows(t->type, t->K, t->w + (size_t)nb * t->nb1, t->nb1, (int)(ne - nb), t->x + (size_t)j0 * t->ldx,
                         t->y + j0 * t->ldy + nb);
        continue;
      }
      q35_vec_dot_tile_ex(t->type, t->K, t->w + (size_t)nb * t->nb1, t->nb1, (int)(ne - nb),
                          t->x + (size_t)j0 * t->ldx, t->ldx, (int)(j1 - j0), t->y + j0 * t->ldy + nb, 1,
                          (size_t)t->ldy);
    }
  }
}

/* Decode (T = 1) with several threads: a thread's claimed piece of rows [n0, n1) runs as one call,
 * so a piece shorter than twice the row kernels' two-stream distance (TWO_STREAM_BYTES apart in
 * quant_avx2.c: 2 x 128 KiB) reads one memory stream and starts its prefetch cold. The claim
 * hands each thread a quarter of what is left of its share, down to 16-row chunks, so most pieces
 * of a small matrix (and every share's tail) would be such short pieces. Instead the rows go out as
 * pairs: claimed index i stands for rows i and i + half, run as one q35_vec_dot_rows2 (the gemv2
 * kernels: two memory streams per core for the whole product, even for the last chunks), for
 * matrices whose halves are at least MM_PAIR_BYTES apart and types with such a kernel. Each row's
 * value is still its q35_vec_dot's. */
#define MM_PAIR_BYTES ((size_t)128 << 10)
static int64_t mm_pair_half(const q35_pool *pool, int type, int64_t N, int64_t T, size_t nb1) {
  if (T != 1 || q35_pool_size(pool) < 2 || !q35_vec_dot_has_rows2(type)) return 0;
  return (size_t)(N / 2) * nb1 >= MM_PAIR_BYTES ? N / 2 : 0;
}
/* the number of claimed indices of t: its rows, or its pairs */
static int64_t mm_claim_n(const mm_task *t) { return t->half ? t->half : t->N; }

/* claimed indices [i0, i1) of t: rows, or pairs (i, i + half); the last pair's claimer also takes
 * the odd last row */
static void mm_piece(const mm_task *t, long i0, long i1) {
  if (!t->half) {
    mm_rows(t, i0, i1);
    return;
  }
  q35_vec_dot_rows2(t->type, t->K, t->w + (size_t)i0 * t->nb1, t->w + (size_t)(i0 + t->half) * t->nb1, t->nb1,
                    (int)(i1 - i0), t->x, t->y + i0, t->y + i0 + t->half, 1);
  if (i1 == t->half && 2 * t->half < t->N) mm_rows(t, (long)(2 * t->half), (long)t->N);
}

static void mm_run(void *ctx, int ith, int nth) {
  const mm_task *t = ctx;
  (void)nth;
  long n0, n1;
  int from = 0;
  while (q35_claim_next(t->pool, ith, &from, &n0, &n1)) mm_piece(t, n0, n1);
}

/* Several products on the same activations in one launch: the threads split the rows of all of
 * them as one list (each row's value is the same whichever thread computes it). */
enum { MM_MULTI_MAX = 4 };
typedef struct {
  mm_task t[MM_MULTI_MAX];
  int n;
} mm_multi;

static void mm_multi_run(void *ctx, int ith, int nth) {
  const mm_multi *mm = ctx;
  (void)nth;
  long a0, a1;
  int from = 0;
  while (q35_claim_next(mm->t[0].pool, ith, &from, &a0, &a1)) {
    int64_t base = 0;
    for (int i = 0; i < mm->n; i++) {
      const int64_t ni = mm_claim_n(&mm->t[i]);
      const int64_t lo = a0 > base ? a0 : base, hi = a1 < base + ni ? a1 : base + ni;
      if (lo < hi) mm_piece(&mm->t[i], (long)(lo - base), (long)(hi - base));
      base += ni;
    }
  }
}

/* Convert T float rows (stride ldx floats) of length K to vec_dot_type rows. */
typedef struct {
  const float *x;
  int64_t ldx, K, T;
  int type;
  char *out;
  size_t ldo;
} cvt_task;

static void cvt_run(void *ctx, int ith, int nth) {
  const cvt_task *c = ctx;
  long t0, t1;
  q35_split(c->T, ith, nth, &t0, &t1);
  for (long t = t0; t < t1; t++) {
    if (c->type == Q35_TYPE_F32)
      memcpy(c->out + (size_t)t * c->ldo, c->x + t * c->ldx, (size_t)c->K * sizeof(float));
    else
      q35_quantize_row(c->type, c->x + t * c->ldx, c->out + (size_t)t * c->ldo, c->K);
  }
}

void q35_act_prepare(q35_pool *pool, q35_act *q, int vtype, const float *x, int64_t ldx, int64_t K, int64_t T,
                     char *buf) {
  if (q->type == vtype) return;
  cvt_task c = {x, ldx, K, T, vtype, buf, q35_row_size(vtype, K)};
  pool_or_inline(pool, cvt_run, &c, T * K <= INLINE_ELEMS);
  q->type = vtype;
  q->data = buf;
  q->ld = c.ldo;
}

/* One thread and a decode's or a verify's 1..MM_TSMALL tokens: the whole matrix in one call. The
 * claim would hand the lone thread pieces of a quarter of what is left, down to 16-row blocks,
 * each a new call whose halves are too close for the row and tile kernels' two memory streams
 * (and start their prefetch cold); one call reads two streams from end to end. Same value per
 * row either way. */
static int mm_whole(const q35_pool *pool, int64_t T) { return T <= MM_TSMALL && q35_pool_size(pool) == 1; }

void q35_matmul(q35_pool *pool, const q35_tensor *w, const q35_act *xa, int64_t T, float *y, int64_t ldy) {
  mm_task t = {w->data, w->type, w->nb1, w->ne[0], w->ne[1], T, xa->data, xa->ld, y, ldy, pool, 0};
  if (mm_whole(pool, T)) {
    mm_rows(&t, 0, (long)t.N);
    return;
  }
  /* mm_rows streams all T activation rows once per claimed piece: where they outweigh the
   * weights several times (the F32 router at a long prompt: 8 KiB a token against 2 MiB of
   * weights), pieces of 4 row blocks read them a quarter as often */
  const int big_x = (double)T * (double)xa->ld > 4.0 * (double)t.N * (double)w->nb1;
  t.half = mm_pair_half(pool, t.type, t.N, T, t.nb1);
  q35_claim_init(pool, (long)mm_claim_n(&t), big_x ? 4 * MM_GRAIN : MM_GRAIN);
  q35_pool_run(pool, mm_run, &t);
}

q35_mm_observer_fn q35_mm_observer;
void *q35_mm_observer_ctx;

void q35_matmul_f(q35_pool *pool, const q35_tensor *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                  char *buf) {
  q35_mm_observe(w, 0, x, ldx, w->ne[0], T, NULL, 1);
  q35_act q = Q35_ACT_NONE;
  q35_act_prepare(pool, &q, q35_vec_dot_type(w->type), x, ldx, w->ne[0], T, buf);
  q35_matmul(pool, w, &q, T, y, ldy);
}

void q35_matmul_same(q35_pool *pool, const q35_tensor *const *ws, float *const *ys, const int64_t *ldy, int n,
                     q35_act *xa, const float *x, int64_t ldx, int64_t T, char *buf) {
  for (int i = 0; i < n; i++) q35_mm_observe(ws[i], 0, x, ldx, ws[i]->ne[0], T, NULL, 1);
  int same = n <= MM_MULTI_MAX;
  for (int i = 1; i < n; i++) same &= q35_vec_dot_type(ws[i]->type) == q35_vec_dot_type(ws[0]->type);
  if (!same) {
    for (int i = 0; i < n; i++) {
      q35_act_prepare(pool, xa, q35_vec_dot_type(ws[i]->type), x, ldx, ws[i]->ne[0], T, buf);
      q35_matmul(pool, ws[i], xa, T, ys[i], ldy[i]);
    }
    return;
  }
  q35_act_prepare(pool, xa, q35_vec_dot_type(ws[0]->type), x, ldx, ws[0]->ne[0], T, buf);
  if (mm_whole(pool, T)) {
    for (int i = 0; i < n; i++) q35_matmul(pool, ws[i], xa, T, ys[i], ldy[i]);
    return;
  }
  mm_multi mm = {.n = n};
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    mm.t[i] = (mm_task){ws[i]->data, ws[i]->type, ws[i]->nb1, ws[i]->ne[0], ws[i]->ne[1], T,
                        xa->data,    xa->ld,      ys[i],      ldy[i],       pool,
                        mm_pair_half(pool, ws[i]->type, ws[i]->ne[1], T, ws[i]->nb1)};
    total += mm_claim_n(&mm.t[i]);
  }
  /* as q35_matmul: larger pieces where the activations outweigh the weights several times */
  double wbytes = 0.0;
  for (int i = 0; i < n; i++) wbytes += (double)ws[i]->ne[1] * (double)ws[i]->nb1;
  const int big_x = (double)T * (double)xa->ld > 4.0 * wbytes;
  q35_claim_init(pool, (long)total, big_x ? 4 * MM_GRAIN : MM_GRAIN);
  q35_pool_run(pool, mm_multi_run, &mm);
}
