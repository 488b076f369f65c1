/*
 * forward.c - the Qwen3.5 forward pass on the CPU.
 *
 * One call advances several sessions ("rows") at once: every matrix product runs over all
 * tokens of all rows, so each weight matrix is read once per step; the sequence-mixing parts
 * (causal conv, delta-rule recurrence, attention) then run per row over that row's tokens.
 *
 * Invariances (tested): a row's logits are bit-identical whatever the other rows are, however
 * its prompt is chunked, and for any thread count. They hold because every output element is
 * computed by exactly one thread with a fixed order of operations that depends only on that
 * token's own inputs: a matrix product quantizes each activation row on its own and takes
 * one q35_vec_dot per output; the recurrence runs token by token; attention reads the
 * stored (rounded) K/V of every position, the chunk's own included.
 *
 * Layer math (GGUF conventions, docs in /work/shared/docs/qwen35moe.md §2):
 *   x += Mixer(RMSNorm(x));  x += FFN(RMSNorm(x))
 *   Mixer = gated attention (every interval-th layer) or Gated DeltaNet;
 *   FFN   = top-k MoE + sigmoid-gated shared expert (qwen35moe) or SwiGLU (qwen35).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/deltanet.h"
#include "model/model.h"
#include "kernels/quant.h"
#include "base/util.h"

/* ------------------------------------------------------------------------------------------ */
/* scratch arena: all buffers of a step are carved from one block grown on demand            */

typedef struct {
  char *base;
  size_t used, cap;
} arena;

static void *arena_get(arena *a, size_t bytes) {
  size_t off = (a->used + 63) & ~(size_t)63;
  a->used = off + bytes;
  return a->base && a->used <= a->cap ? a->base + off : NULL;
}

/* Run fn over the pool, or inline on this thread when the work is too small to pay for a launch
 * (decode: one token). The tasks split their items with q35_split and compute each item the same
 * way whoever runs it, so the results are the same bits either way. */
/* Batched decode (a few rows) keeps its small element-wise tasks on the calling thread: a launch
 * and the wait for a worker cost more than quantizing, norming or gating a few rows. */
enum { INLINE_ROWS = 8, INLINE_ELEMS = 32768 };
static void pool_or_inline(q35_pool *pool, void (*fn)(void *, int, int), void *ctx, int inline_ok) {
  if (inline_ok) fn(ctx, 0, 1);
  else q35_pool_run(pool, fn, ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* small math helpers (scalar; their order of operations is part of the invariance)           */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* y = x / sqrt(mean(x^2) + eps) * w   (sum in double, as ggml does) */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / sqrtf((float)(sum / n) + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* ------------------------------------------------------------------------------------------ */
/* matrix products                                                                            */

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
} mm_task;

/* rows [n0, n1) of one product */
static void mm_rows(const mm_task *t, long n0, long n1) {
  /* blocks of tokens x blocks of rows, so a token block's activations stay in cache while the
   * thread's rows stream past; each output is still exactly one q35_vec_dot's value */
  enum { TB = 32, RB = 16 };
  for (int64_t j0 = 0; j0 < t->T; j0 += TB) {
    const int64_t j1 = j0 + TB < t->T ? j0 + TB : t->T;
    for (long nb = n0; nb < n1; nb += RB) {
      const long ne = nb + RB < n1 ? nb + RB : n1;
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

/* Rows go out in claimed pieces (q35_claim_next): a thread that streams faster or starts earlier
 * takes more of them. RB-row chunks, so each piece is whole row blocks. */
enum { MM_GRAIN = 16 };

static void mm_run(void *ctx, int ith, int nth) {
  const mm_task *t = ctx;
  (void)nth;
  long n0, n1;
  int from = 0;
  while (q35_claim_next(t->pool, ith, &from, &n0, &n1)) mm_rows(t, n0, n1);
}

/* Several products on the same activations in one launch: the threads split the rows of all of
 * them as one list (each row's value is the same whichever thread computes it). */
typedef struct {
  mm_task t[4];
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
      const int64_t lo = a0 > base ? a0 : base, hi = a1 < base + mm->t[i].N ? a1 : base + mm->t[i].N;
      if (lo < hi) mm_rows(&mm->t[i], (long)(lo - base), (long)(hi - base));
      base += mm->t[i].N;
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

/* Activations converted once and reused by every weight of the same vec_dot type. */
typedef struct {
  int type;   /* vec_dot type, -1 when not converted yet */
  char *data;
  size_t ld;
} qact;

static void qact_make(q35_model *m, qact *q, int vtype, const float *x, int64_t ldx, int64_t K, int64_t T,
                      char *buf) {
  if (q->type == vtype) return;
  cvt_task c = {x, ldx, K, T, vtype, buf, q35_row_size(vtype, K)};
  pool_or_inline(m->pool, cvt_run, &c, T * K <= INLINE_ELEMS);
  q->type = vtype;
  q->data = buf;
  q->ld = c.ldo;
}

static void matmul(q35_model *m, const q35_tensor *w, const qact *xa, int64_t T, float *y, int64_t ldy) {
  mm_task t = {w->data, w->type, w->nb1, w->ne[0], w->ne[1], T, xa->data, xa->ld, y, ldy, m->pool};
  q35_claim_init(m->pool, (long)t.N, MM_GRAIN);
  q35_pool_run(m->pool, mm_run, &t);
}

/* y = W x for float activations x (T rows, stride ldx), converting them first into buf. */
static void matmul_f(q35_model *m, const q35_tensor *w, const float *x, int64_t ldx, int64_t T, float *y,
                     int64_t ldy, char *buf) {
  qact q = {-1, NULL, 0};
  qact_make(m, &q, q35_vec_dot_type(w->type), x, ldx, w->ne[0], T, buf);
  matmul(m, w, &q, T, y, ldy);
}

/* y_i = W_i x for n (<= 4) weights on the same float activations x (T rows of K = W_i->ne[0],
 * stride ldx): one conversion and one launch when their vec_dot types agree. xa caches the
 * conversion (into buf) for later products on the same x. */
static void matmul_same(q35_model *m, const q35_tensor *const *ws, float *const *ys, const int64_t *ldy, int n, qact *xa,
                        const float *x, int64_t ldx, int64_t T, char *buf) {
  int same = 1;
  for (int i = 1; i < n; i++) same &= q35_vec_dot_type(ws[i]->type) == q35_vec_dot_type(ws[0]->type);
  if (!same) {
    for (int i = 0; i < n; i++) {
      qact_make(m, xa, q35_vec_dot_type(ws[i]->type), x, ldx, ws[i]->ne[0], T, buf);
      matmul(m, ws[i], xa, T, ys[i], ldy[i]);
    }
    return;
  }
  qact_make(m, xa, q35_vec_dot_type(ws[0]->type), x, ldx, ws[0]->ne[0], T, buf);
  mm_multi mm = {.n = n};
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    mm.t[i] = (mm_task){ws[i]->data, ws[i]->type, ws[i]->nb1, ws[i]->ne[0], ws[i]->ne[1], T,
                        xa->data,    xa->ld,      ys[i],      ldy[i],       m->pool};
    total += ws[i]->ne[1];
  }
  q35_claim_init(m->pool, (long)total, MM_GRAIN);
  q35_pool_run(m->pool, mm_multi_run, &mm);
}

/* ------------------------------------------------------------------------------------------ */
/* the step's buffers                                                                          */

typedef struct {
  int64_t T;              /* tokens in the step */
  float *x, *h, *tmp;     /* residual, normed, mixer/ffn output: [T][H] */
  char *xq;               /* converted activations (largest row kind) */
  char *xq2;              /* a second conversion buffer (MoE: activations gathered by expert) */
  char *xq3;              /* MoE: expert hidden activations, converted */
  /* attention */
  float *qg, *k, *v, *o;  /* [T][nh*2hd], [T][nkv*hd] x2, [T][nh*hd] */
  float *att;             /* per thread: scores [grp][n_ctx] + acc [grp][hd] */
  size_t att_stride;
  /* DeltaNet */
  float *qkv, *z, *beta, *alpha, *conv;
  /* FFN */
  float *logits_r;        /* router logits [T][E] */
  int32_t *sel;           /* [T][k] selected experts */
  float *selw;            /* [T][k] weights */
  int32_t *elist, *ecount, *estart; /* per expert lists of (t*k + slot) */
  int32_t *active;        /* experts with at least one slot */
  int32_t *inv;           /* slot -> its row in expert order */
  float *gu;              /* [T*k][2I] gate|up, or dense [T][2F] */
  float *act;             /* [T*k][I] or [T][F] */
  float *y;               /* [T*k][H] */
  float *sh, *shg;        /* shared expert out [T][H], gates [T] */
  /* row bookkeeping */
  int32_t *row_of;        /* token -> row */
  int32_t *pos_of;        /* token -> absolute position */
  int64_t max_ctx;
  float *lg;              /* joint output product of several rows: [LG_COLS][V] (NULL: one row) */
} bufs;

/* Logit columns of one joint pass over the output matrix (the largest weight: 0.29 GB in Q4_0
 * for 35B-A3B). Several rows' logits are computed in groups of up to LG_COLS columns into
 * b->lg and copied out, so a decode step of B rows reads the matrix once, not B times. */
enum { LG_COLS = 16 };

static size_t max_row_bytes(const q35_model *m) {
  const q35_hparams *hp = &m->hp;
  int64_t K = hp->n_embd;
  int64_t ks[] = {hp->n_embd, (int64_t)hp->n_head * hp->head_dim, hp->ssm_d_inner, hp->n_ff_exp, hp->n_ff_shexp,
                  hp->n_ff};
  size_t best = 0;
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
    K = ks[i];
    if (K <= 0) continue;
    size_t b = (size_t)K * sizeof(float); /* F32 conversion is the largest per element... */
    const size_t z = q35_row_size(Q35_TYPE_Q8_0Z, K); /* ...except Q8_0Z's padding on short rows */
    if (z > b) b = z;
    if (b > best) best = b;
  }
  return best + 64;
}

static void bufs_layout(q35_model *m, bufs *b, arena *a, int64_t T, int64_t max_ctx, int nthreads, int joint) {
  const q35_hparams *hp = &m->hp;
  const int64_t H = hp->n_embd, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
  const int64_t C = 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  const int64_t Hv = hp->ssm_dt_rank, DI = hp->ssm_d_inner;
  const int64_t k = hp->is_moe ? hp->n_expert_used : 1, E = hp->is_moe ? hp->n_expert : 1;
  const int64_t I = hp->is_moe ? (hp->n_ff_exp > hp->n_ff_shexp ? hp->n_ff_exp : hp->n_ff_shexp) : hp->n_ff;
  const size_t rb = max_row_bytes(m);
  b->T = T;
  b->max_ctx = max_ctx;
  b->x = arena_get(a, T * H * 4);
  b->h = arena_get(a, T * H * 4);
  b->tmp = arena_get(a, T * H * 4);
  b->xq = arena_get(a, (size_t)(T * k) * rb);
  b->xq2 = arena_get(a, (size_t)(T * k) * rb);
  b->xq3 = arena_get(a, (size_t)(T * k) * rb);
  b->qg = arena_get(a, T * nh * 2 * hd * 4);
  b->k = arena_get(a, T * nkv * hd * 4);
  b->v = arena_get(a, T * nkv * hd * 4);
  b->o = arena_get(a, T * (nh * hd > DI ? nh * hd : DI) * 4);
  b->att_stride = (size_t)(nh / nkv) * (size_t)(max_ctx + 2 * hd) + 32;
  b->att = arena_get(a, (size_t)nthreads * b->att_stride * 4);
  b->qkv = arena_get(a, T * C * 4);
  b->z = arena_get(a, T * DI * 4);
  b->beta = arena_get(a, T * Hv * 4);
  b->alpha = arena_get(a, T * Hv * 4);
  b->conv = arena_get(a, T * C * 4);
  b->logits_r = arena_get(a, T * E * 4);
  b->sel = arena_get(a, T * k * 4);
  b->selw = arena_get(a, T * k * 4);
  b->elist = arena_get(a, T * k * 4);
  b->ecount = arena_get(a, (E + 1) * 4);
  b->estart = arena_get(a, (E + 1) * 4);
  b->active = arena_get(a, (E + 1) * 4);
  b->inv = arena_get(a, T * k * 4);
  b->gu = arena_get(a, T * k * 2 * I * 4);
  b->act = arena_get(a, T * k * I * 4);
  b->y = arena_get(a, T * k * H * 4);
  b->sh = arena_get(a, T * H * 4);
  b->shg = arena_get(a, T * 4);
  b->row_of = arena_get(a, T * 4);
  b->pos_of = arena_get(a, T * 4);
  b->lg = joint ? arena_get(a, (int64_t)LG_COLS * hp->n_vocab * 4) : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* KV cache element conversion                                                                 */

static void kv_store(int type, const float *src, void *dst, int64_t n) {
  if (type == Q35_KV_F32) memcpy(dst, src, (size_t)n * 4);
  else q35_quantize_row(type == Q35_KV_F16 ? Q35_TYPE_F16 : Q35_TYPE_Q8_0, src, dst, n);
}


/* ------------------------------------------------------------------------------------------ */
/* gated attention                                                                             */

typedef struct {
  q35_model *m;
  const q35_layer *L;
  bufs *b;
  q35_fwd_row *rows;
  const int32_t *row_start;
} attn_ctx;

/* q/k RMSNorm + partial NeoX RoPE; store k, v into the cache. Items: tokens. */
static void attn_prep(void *vctx, int ith, int nth) {
  attn_ctx *c = vctx;
  const q35_hparams *hp = &c->m->hp;
  const int nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, nrot = hp->n_rot;
  const float theta_scale = powf(hp->rope_theta, -2.0f / (float)nrot);
  long t0, t1;
  q35_split(c->b->T, ith, nth, &t0, &t1);
  float cosv[2048], sinv[2048];
  for (long t = t0; t < t1; t++) {
    const int pos = c->b->pos_of[t];
    float theta = (float)pos;
    for (int j = 0; j < nrot / 2; j++) {
      cosv[j] = cosf(theta);
      sinv[j] = sinf(theta);
      theta *= theta_scale;
    }
    for (int h = 0; h < nh + nkv; h++) {
      float *x = h < nh ? c->b->qg + ((size_t)t * nh + h) * 2 * hd : c->b->k + ((size_t)t * nkv + (h - nh)) * hd;
      rmsnorm(x, x, h < nh ? c->L->q_norm.data : c->L->k_norm.data, hd, hp->eps);
      for (int j = 0; j < nrot / 2; j++) {
        const float a = x[j], bb = x[j + nrot / 2];
        x[j] = a * cosv[j] - bb * sinv[j];
        x[j + nrot / 2] = bb * cosv[j] + a * sinv[j];
      }
    }
    q35_session *s = c->rows[c->b->row_of[t]].s;
    const int kvt = s->params.kv_type;
    const int li = c->L->attn_index;
    kv_store(kvt, c->b->k + (size_t)t * nkv * hd, (char *)s->k_cache[li] + (size_t)pos * s->kv_row_bytes,
             (int64_t)nkv * hd);
    kv_store(kvt, c->b->v + (size_t)t * nkv * hd, (char *)s->v_cache[li] + (size_t)pos * s->kv_row_bytes,
             (int64_t)nkv * hd);
  }
}

/* f16 -> f32 with F16C where the CPU has it: exact, so the same bits as the scalar path. */
__attribute__((target("avx2,f16c"))) static void f16_row_f16c(const uint16_t *src, float *dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = q35_fp16_to_fp32(src[i]);
}

static void kv_row_to_f32(int etype, const void *src, float *dst, int n) {
  static int f16c = -1; /* CPU feature probe, set once (idempotent) */
  if (f16c < 0) f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  if (etype == Q35_TYPE_F16 && f16c) f16_row_f16c(src, dst, n);
  else q35_dequantize_row(etype, src, dst, n);
}

/* Scores, softmax, weighted V, output gate. Items: (token, KV head); the query heads of one
 * group share each K/V row load. Per query head the arithmetic is the same whatever the
 * grouping: dot in a fixed order, max, exp, sum in double, V accumulated position by position. */
static void attn_core(void *vctx, int ith, int nth) {
  attn_ctx *c = vctx;
  const q35_hparams *hp = &c->m->hp;
  const int nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, grp = nh / nkv;
  const float scale = 1.0f / sqrtf((float)hd);
  /* [grp][max_ctx] scores, [grp][hd] accumulators, [grp][hd] queries in the cache's dot type */
  float *sc = c->b->att + (size_t)ith * c->b->att_stride;
  float *acc = sc + (size_t)grp * c->b->max_ctx;
  char *qq = (char *)(acc + (size_t)grp * hd);
  float kvrow[4096]; /* one head: head_dim <= 4096 */
  long i0, i1;
  q35_split(c->b->T * nkv, ith, nth, &i0, &i1);
  for (long it = i0; it < i1; it++) {
    const long t = it / nkv;
    const int g = (int)(it % nkv);
    const int pos = c->b->pos_of[t];
    q35_session *s = c->rows[c->b->row_of[t]].s;
    const int kvt = s->params.kv_type, li = c->L->attn_index;
    const int etype = kvt == Q35_KV_F32 ? Q35_TYPE_F32 : kvt == Q35_KV_F16 ? Q35_TYPE_F16 : Q35_TYPE_Q8_0;
    const size_t kv_off = q35_row_size(etype, (int64_t)g * hd);
    const char *kc = s->k_cache[li], *vc = s->v_cache[li];
    const float *q0 = c->b->qg + ((size_t)t * nh + (size_t)g * grp) * 2 * hd;
    if (etype == Q35_TYPE_F16) { /* the default cache: src/attn.c */
      const q35_attn_job job = {hd, grp, pos + 1, (const uint16_t *)(const void *)(kc + kv_off),
                                (const uint16_t *)(const void *)(vc + kv_off), s->kv_row_bytes / 2, q0, (size_t)2 * hd,
                                scale, sc, (size_t)c->b->max_ctx, (float *)(void *)qq, acc, (size_t)hd};
      q35_attn_f16(&job);
    } else {
      /* scores: the query converted to the cache's dot type (as ggml does for an f16 or q8_0
       * cache), one q35_vec_dot per stored key */
      const int qtype = q35_vec_dot_type(etype);
      const size_t qrb = q35_row_size(qtype, hd);
      for (int h = 0; h < grp; h++) {
        if (etype == Q35_TYPE_F32) memcpy(qq + (size_t)h * qrb, q0 + (size_t)h * 2 * hd, qrb);
        else q35_quantize_row(qtype, q0 + (size_t)h * 2 * hd, qq + (size_t)h * qrb, hd);
      }
      for (int p = 0; p <= pos; p++) {
        const char *kr = kc + (size_t)p * s->kv_row_bytes + kv_off;
        for (int h = 0; h < grp; h++)
          sc[(size_t)h * c->b->max_ctx + p] = q35_vec_dot(etype, hd, kr, qq + (size_t)h * qrb) * scale;
      }
      for (int h = 0; h < grp; h++) {
        float *sh = sc + (size_t)h * c->b->max_ctx;
        float mx = -INFINITY;
        for (int p = 0; p <= pos; p++) mx = sh[p] > mx ? sh[p] : mx;
        double sum = 0.0;
        for (int p = 0; p <= pos; p++) {
          sh[p] = expf(sh[p] - mx);
          sum += sh[p];
        }
        const float inv = (float)(1.0 / sum);
        for (int p = 0; p <= pos; p++) sh[p] *= inv;
        memset(acc + (size_t)h * hd, 0, (size_t)hd * sizeof(float));
      }
      for (int p = 0; p <= pos; p++) {
        const float *vr;
        if (etype == Q35_TYPE_F32) {
          vr = (const float *)(vc + (size_t)p * s->kv_row_bytes + kv_off);
        } else {
          kv_row_to_f32(etype, vc + (size_t)p * s->kv_row_bytes + kv_off, kvrow, hd);
          vr = kvrow;
        }
        for (int h = 0; h < grp; h++) {
          const float w = sc[(size_t)h * c->b->max_ctx + p];
          float *a = acc + (size_t)h * hd;
          for (int i = 0; i < hd; i++) a[i] += w * vr[i];
        }
      }
    }
    for (int h = 0; h < grp; h++) {
      const float *gate = q0 + (size_t)h * 2 * hd + hd;
      float *o = c->b->o + ((size_t)t * nh + (size_t)g * grp + h) * hd;
      const float *a = acc + (size_t)h * hd;
      for (int i = 0; i < hd; i++) o[i] = a[i] * sigmoidf(gate[i]);
    }
  }
}

static void layer_attention(q35_model *m, const q35_layer *L, bufs *b, q35_fwd_row *rows, const int32_t *row_start) {
  const q35_hparams *hp = &m->hp;
  const int64_t T = b->T, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
  qact xa = {-1, NULL, 0};
  const q35_tensor *ws[3] = {&L->wq, &L->wk, &L->wv};
  float *ys[3] = {b->qg, b->k, b->v};
  const int64_t lds[3] = {nh * 2 * hd, nkv * hd, nkv * hd};
  matmul_same(m, ws, ys, lds, 3, &xa, b->h, hp->n_embd, T, b->xq);
  attn_ctx c = {m, L, b, rows, row_start};
  pool_or_inline(m->pool, attn_prep, &c, T <= INLINE_ROWS);
  q35_pool_run(m->pool, attn_core, &c);
  matmul_f(m, &L->wo, b->o, nh * hd, T, b->tmp, hp->n_embd, b->xq);
}

/* ------------------------------------------------------------------------------------------ */
/* Gated DeltaNet                                                                              */

typedef struct {
  q35_model *m;
  const q35_layer *L;
  bufs *b;
  q35_fwd_row *rows;
  const int32_t *row_start;
  int n_rows;
} gdn_ctx;

/* Causal depthwise conv + SiLU. Items: channels (each runs through every row's tokens). */
static void gdn_conv(void *vctx, int ith, int nth) {
  gdn_ctx *c = vctx;
  const q35_hparams *hp = &c->m->hp;
  const int K = hp->conv_kernel;
  const int64_t C = 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  const float *w = c->L->conv.data;
  const int li = c->L->attn_index;
  long c0, c1;
  q35_split(C, ith, nth, &c0, &c1);
  for (int r = 0; r < c->n_rows; r++) {
    float *st = c->rows[r].s->conv_state[li]; /* [K-1][C], oldest first */
    for (int32_t i = 0; i < c->rows[r].n; i++) {
      const int64_t t = c->row_start[r] + i;
      const float *xin = c->b->qkv + t * C;
      float *out = c->b->conv + t * C;
      for (long ch = c0; ch < c1; ch++) {
        const float *wc = w + (size_t)ch * K;
        float sum = 0.0f;
        for (int j = 0; j < K - 1; j++) sum += st[(size_t)j * C + ch] * wc[j];
        sum += xin[ch] * wc[K - 1];
        for (int j = 0; j < K - 2; j++) st[(size_t)j * C + ch] = st[(size_t)(j + 1) * C + ch];
        if (K > 1) st[(size_t)(K - 2) * C + ch] = xin[ch];
        out[ch] = silu(sum);
      }
    }
  }
}

/* L2-normalize q and k heads (q also scaled by 1/sqrt(dk)). Items: (token, key head). */
static void gdn_qk_norm(void *vctx, int ith, int nth) {
  gdn_ctx *c = vctx;
  const q35_hparams *hp = &c->m->hp;
  const int Hk = hp->ssm_n_group, dk = hp->ssm_d_state;
  const int64_t C = 2 * (int64_t)Hk * dk + hp->ssm_d_inner;
  const float qscale = 1.0f / sqrtf((float)dk);
  long i0, i1;
  q35_split(c->b->T * Hk * 2, ith, nth, &i0, &i1);
  for (long it = i0; it < i1; it++) {
    const long t = it / (2 * Hk);
    const int part = (int)(it % (2 * Hk)); /* 0..Hk-1: q heads, Hk..2Hk-1: k heads */
    float *x = c->b->conv + t * C + (size_t)part * dk;
    float ss = 0.0f;
    for (int i = 0; i < dk; i++) ss += x[i] * x[i];
    float sc = 1.0f / sqrtf(ss + hp->eps);
    if (part < Hk) sc *= qscale;
    for (int i = 0; i < dk; i++) x[i] *= sc;
  }
}

/* The delta rule, token by token, and the gated RMSNorm. Items: (row, value head). */
static void gdn_recur(void *vctx, int ith, int nth) {
  gdn_ctx *c = vctx;
  const q35_hparams *hp = &c->m->hp;
  const int Hk = hp->ssm_n_group, Hv = hp->ssm_dt_rank, dk = hp->ssm_d_state, dv = hp->ssm_d_state;
  const int64_t C = 2 * (int64_t)Hk * dk + hp->ssm_d_inner;
  const float *dt_bias = c->L->dt_bias.data, *ssm_a = c->L->ssm_a.data, *nw = c->L->ssm_norm.data;
  const int li = c->L->attn_index;
  long i0, i1;
  q35_split((long)c->n_rows * Hv, ith, nth, &i0, &i1);
  for (long it = i0; it < i1; it++) {
    const int r = (int)(it / Hv), hv = (int)(it % Hv), hk = hv % Hk;
    float *S = c->rows[r].s->ssm_state[li] + (size_t)hv * dv * dk; /* [dv][dk] */
    for (int32_t i = 0; i < c->rows[r].n; i++) {
      const int64_t t = c->row_start[r] + i;
      const float *row = c->b->conv + t * C;
      const float *q = row + (size_t)hk * dk, *k = row + (size_t)(Hk + hk) * dk;
      const float *v = row + 2 * (size_t)Hk * dk + (size_t)hv * dv;
      const float beta = sigmoidf(c->b->beta[t * Hv + hv]);
      const float g = ssm_a[hv] * softplus(c->b->alpha[t * Hv + hv] + dt_bias[hv]);
      const float decay = expf(g);
      float *o = c->b->o + t * hp->ssm_d_inner + (size_t)hv * dv;
      q35_delta_step(S, dv, dk, q, k, v, beta, decay, o);
      /* gated RMSNorm: norm over the head, times w, times silu(z) */
      const float *z = c->b->z + t * hp->ssm_d_inner + (size_t)hv * dv;
      double ss = 0.0;
      for (int j = 0; j < dv; j++) ss += (double)(o[j] * o[j]);
      const float sc = 1.0f / sqrtf((float)(ss / dv) + hp->eps);
      for (int j = 0; j < dv; j++) o[j] = o[j] * sc * nw[j] * silu(z[j]);
    }
  }
}

static void layer_deltanet(q35_model *m, const q35_layer *L, bufs *b, q35_fwd_row *rows, const int32_t *row_start,
                           int n_rows) {
  const q35_hparams *hp = &m->hp;
  const int64_t T = b->T, H = hp->n_embd, Hv = hp->ssm_dt_rank;
  const int64_t C = 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  qact xa = {-1, NULL, 0};
  const q35_tensor *ws[4] = {&L->wqkv, &L->wz, &L->wbeta, &L->walpha};
  float *outs[4] = {b->qkv, b->z, b->beta, b->alpha};
  const int64_t lds[4] = {C, hp->ssm_d_inner, Hv, Hv};
  matmul_same(m, ws, outs, lds, 4, &xa, b->h, H, T, b->xq);
  gdn_ctx c = {m, L, b, rows, row_start, n_rows};
  q35_pool_run(m->pool, gdn_conv, &c);
  pool_or_inline(m->pool, gdn_qk_norm, &c, T <= INLINE_ROWS);
  q35_pool_run(m->pool, gdn_recur, &c);
  matmul_f(m, &L->ssm_out, b->o, hp->ssm_d_inner, T, b->tmp, H, b->xq);
}

/* ------------------------------------------------------------------------------------------ */
/* FFN: sparse MoE with shared expert, or dense SwiGLU                                         */

/* softmax over E router logits, top-k (ties to the lower expert id), renormalized weights */
static void moe_route(const q35_hparams *hp, bufs *b) {
  const int E = hp->n_expert, k = hp->n_expert_used;
  for (int64_t t = 0; t < b->T; t++) {
    float *l = b->logits_r + t * E;
    float mx = -INFINITY;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < E; e++) {
      l[e] = expf(l[e] - mx);
      sum += l[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < E; e++) l[e] *= inv;
    int32_t *sel = b->sel + t * k;
    float *w = b->selw + t * k;
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int q = 0; q < j; q++) taken |= sel[q] == e;
        if (!taken && (best < 0 || l[e] > l[best])) best = e;
      }
      sel[j] = best;
      w[j] = l[best];
    }
    float ws = 0.0f;
    for (int j = 0; j < k; j++) ws += w[j];
    if (ws < 6.103515625e-5f) ws = 6.103515625e-5f;
    for (int j = 0; j < k; j++) w[j] /= ws;
  }
}

/* Expert matrix products over (expert, weight row) units; each unit serves every token routed
 * to that expert. */
typedef struct {
  q35_model *m;
  const q35_layer *L;
  bufs *b;
  int phase;          /* 0: gate+up, 1: down */
  int n_active;
  const int32_t *active;
} moe_ctx;

/* units: (active expert, block of MOE_RB weight rows); phase 0 has gate blocks then up blocks */
enum { MOE_RB = 16, MOE_CB = 32 };
static int moe_blocks(const q35_hparams *hp, int phase) {
  const int nbh = (hp->n_ff_exp + MOE_RB - 1) / MOE_RB;
  return phase == 0 ? 2 * nbh : (hp->n_embd + MOE_RB - 1) / MOE_RB;
}

/* Units go out in claimed pieces (q35_claim_next), one unit per chunk. */
static void moe_mm(void *vctx, int ith, int nth) {
  moe_ctx *c = vctx;
  const q35_hparams *hp = &c->m->hp;
  const q35_layer *L = c->L;
  bufs *b = c->b;
  const int I = hp->n_ff_exp, H = hp->n_embd;
  const int nbh = (I + MOE_RB - 1) / MOE_RB, nblk = moe_blocks(hp, c->phase);
  (void)nth;
  long u0, u1;
  int from = 0;
  const size_t ldx = c->phase == 0 ? q35_row_size(q35_vec_dot_type(L->gate_up_exps.data ? L->gate_up_exps.type
                                                                                         : L->gate_exps.type), H)
                                   : q35_row_size(q35_vec_dot_type(L->down_exps.type), I);
  while (q35_claim_next(c->m->pool, ith, &from, &u0, &u1)) {
    for (long u = u0; u < u1; u++) {
      const int e = c->active[u / nblk], blk = (int)(u % nblk);
      const q35_tensor *w;
      const char *wr;
      int r0, r1, ocol; /* rows [r0, r1) of the block; output column of row r0 */
      int64_t K, ldo;
      float *out;
      const char *x;
      if (c->phase == 0) {
        const int part = blk >= nbh; /* 0: gate, 1: up */
        r0 = (blk % nbh) * MOE_RB;
        r1 = r0 + MOE_RB < I ? r0 + MOE_RB : I;
        if (L->gate_up_exps.data) {
          w = &L->gate_up_exps;
          wr = (const char *)w->data + (size_t)e * w->nb2 + (size_t)(part * I + r0) * w->nb1;
        } else {
          w = part ? &L->up_exps : &L->gate_exps;
          wr = (const char *)w->data + (size_t)e * w->nb2 + (size_t)r0 * w->nb1;
        }
        ocol = part * I + r0;
        K = H;
        ldo = 2 * I;
        out = b->gu;
        x = b->xq2;
      } else {
        r0 = blk * MOE_RB;
        r1 = r0 + MOE_RB < H ? r0 + MOE_RB : H;
        w = &L->down_exps;
        wr = (const char *)w->data + (size_t)e * w->nb2 + (size_t)r0 * w->nb1;
        ocol = r0;
        K = I;
        ldo = H;
        out = b->y;
        x = b->xq3;
      }
      /* this expert's slots are rows [estart, estart + ecount) of the gathered activations */
      for (int32_t c0 = 0; c0 < b->ecount[e]; c0 += MOE_CB) {
        const int32_t i0 = b->estart[e] + c0, nc = b->ecount[e] - c0 < MOE_CB ? b->ecount[e] - c0 : MOE_CB;
        q35_vec_dot_tile_ex(w->type, K, wr, w->nb1, r1 - r0, x + (size_t)i0 * ldx, ldx, nc,
                            out + (size_t)i0 * ldo + ocol, 1, (size_t)ldo);
      }
    }
  }
}

/* Gather the converted activation row of each slot's token, in expert order. */
typedef struct {
  bufs *b;
  int64_t n, k;
  size_t ld;
} gather_ctx;

static void gather_run(void *vctx, int ith, int nth) {
  gather_ctx *g = vctx;
  long i0, i1;
  q35_split(g->n, ith, nth, &i0, &i1);
  for (long i = i0; i < i1; i++) memcpy(g->b->xq2 + (size_t)i * g->ld, g->b->xq + (size_t)(g->b->elist[i] / g->k) * g->ld, g->ld);
}

typedef struct {
  bufs *b;
  int64_t n, width;   /* rows, width of act */
  const float *gu;    /* [n][2*width] gate|up */
  float *act;
} swiglu_ctx;

static void swiglu_run(void *vctx, int ith, int nth) {
  swiglu_ctx *c = vctx;
  long r0, r1;
  q35_split(c->n, ith, nth, &r0, &r1);
  for (long r = r0; r < r1; r++) {
    const float *g = c->gu + r * 2 * c->width, *u = g + c->width;
    float *a = c->act + r * c->width;
    for (int64_t i = 0; i < c->width; i++) a[i] = silu(g[i]) * u[i];
  }
}

/* out = down(silu(gate h) * up h) for the normed activations b->h; xa caches their conversion. */
static void swiglu_ffn(q35_model *m, const q35_tensor *gate, const q35_tensor *up, const q35_tensor *down, bufs *b,
                       qact *xa, float *out) {
  const int64_t T = b->T, H = m->hp.n_embd, F = gate->ne[1];
  const q35_tensor *ws[2] = {gate, up};
  float *ys[2] = {b->gu, b->gu + F};
  const int64_t lds[2] = {2 * F, 2 * F};
  matmul_same(m, ws, ys, lds, 2, xa, b->h, H, T, b->xq);
  swiglu_ctx s = {b, T, F, b->gu, b->act};
  pool_or_inline(m->pool, swiglu_run, &s, T * F <= INLINE_ELEMS);
  matmul_f(m, down, b->act, F, T, out, H, b->xq2);
}

static void layer_moe(q35_model *m, const q35_layer *L, bufs *b) {
  const q35_hparams *hp = &m->hp;
  const int64_t T = b->T, H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used, I = hp->n_ff_exp;
  /* router (on float activations converted to the router's dot type) */
  matmul_f(m, &L->router, b->h, H, T, b->logits_r, E, b->xq);
  moe_route(hp, b);
  /* per-expert lists of slots, in token order */
  memset(b->ecount, 0, (size_t)(E + 1) * 4);
  for (int64_t s = 0; s < T * k; s++) b->ecount[b->sel[s]]++;
  moe_ctx cc = {m, L, b, 0, 0, b->active}, *c = &cc;
  int32_t acc = 0;
  for (int e = 0; e < E; e++) {
    b->estart[e] = acc;
    acc += b->ecount[e];
    if (b->ecount[e]) b->active[c->n_active++] = e;
    b->ecount[e] = 0;
  }
  for (int64_t s = 0; s < T * k; s++) {
    const int e = b->sel[s];
    b->elist[b->estart[e] + b->ecount[e]++] = (int32_t)s;
  }
  for (int64_t i = 0; i < T * k; i++) b->inv[b->elist[i]] = (int32_t)i;
  /* gate + up for every routed (token, slot), on the activations gathered in expert order */
  const int gtype = L->gate_up_exps.data ? L->gate_up_exps.type : L->gate_exps.type;
  qact xa = {-1, NULL, 0};
  qact_make(m, &xa, q35_vec_dot_type(gtype), b->h, H, H, T, b->xq);
  gather_ctx ga = {b, T * k, k, xa.ld};
  pool_or_inline(m->pool, gather_run, &ga, T <= INLINE_ROWS);
  c->phase = 0;
  q35_claim_init(m->pool, (long)c->n_active * moe_blocks(hp, 0), 1);
  q35_pool_run(m->pool, moe_mm, c);
  swiglu_ctx sw = {b, T * k, I, b->gu, b->act};
  pool_or_inline(m->pool, swiglu_run, &sw, T * k * I <= INLINE_ELEMS);
  qact aa = {-1, NULL, 0};
  qact_make(m, &aa, q35_vec_dot_type(L->down_exps.type), b->act, I, I, T * k, b->xq3);
  c->phase = 1;
  q35_claim_init(m->pool, (long)c->n_active * moe_blocks(hp, 1), 1);
  q35_pool_run(m->pool, moe_mm, c);
  /* shared expert */
  const int64_t Is = hp->n_ff_shexp;
  if (Is > 0) {
    swiglu_ffn(m, &L->gate_shexp, &L->up_shexp, &L->down_shexp, b, &xa, b->sh);
    if (L->shexp_gate.data) {
      q35_tensor g = L->shexp_gate;
      g.ne[1] = 1;
      matmul_f(m, &g, b->h, H, T, b->shg, 1, b->xq2);
    }
  }
  /* combine: routed experts in slot order, then the gated shared expert */
  for (int64_t t = 0; t < T; t++) {
    float *out = b->tmp + t * H;
    for (int64_t i = 0; i < H; i++) out[i] = 0.0f;
    for (int64_t j = 0; j < k; j++) {
      const float w = b->selw[t * k + j];
      const float *y = b->y + (int64_t)b->inv[t * k + j] * H;
      for (int64_t i = 0; i < H; i++) out[i] += y[i] * w;
    }
    if (Is > 0) {
      const float sg = L->shexp_gate.data ? sigmoidf(b->shg[t]) : 1.0f;
      const float *sh = b->sh + t * H;
      for (int64_t i = 0; i < H; i++) out[i] += sh[i] * sg;
    }
  }
}

static void layer_dense_ffn(q35_model *m, const q35_layer *L, bufs *b) {
  qact xa = {-1, NULL, 0};
  swiglu_ffn(m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, b, &xa, b->tmp);
}

/* ------------------------------------------------------------------------------------------ */
/* the step                                                                                    */

typedef struct {
  bufs *b;
  float *dst;
  const float *src;
  const float *w;
  int H;
  float eps;
  int add;  /* 1: dst += src (residual) */
} norm_ctx;

static void norm_run(void *vctx, int ith, int nth) {
  norm_ctx *c = vctx;
  long t0, t1;
  q35_split(c->b->T, ith, nth, &t0, &t1);
  for (long t = t0; t < t1; t++) rmsnorm(c->dst + t * c->H, c->src + t * c->H, c->w, c->H, c->eps);
}

int q35_forward(q35_model *m, q35_fwd_row *rows, int n_rows, q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd, V = hp->n_vocab;
  int64_t T = 0, max_ctx = 1;
  int32_t row_start[n_rows > 0 ? n_rows : 1];
  if (n_rows < 1) return q35_seterr(err, "a step needs at least one row");
  for (int r = 0; r < n_rows; r++) {
    q35_session *s = rows[r].s;
    if (s->model != m) return q35_seterr(err, "row %d: the session belongs to another model", r);
    for (int q = 0; q < r; q++)
      if (rows[q].s == s) return q35_seterr(err, "rows %d and %d name the same session", q, r);
    if (rows[r].n < 1) return q35_seterr(err, "row %d has no tokens", r);
    if ((int64_t)s->pos + rows[r].n > s->params.n_ctx)
      return q35_seterr(err, "%d tokens at position %d exceed the context limit of %d tokens (raise --ctx)",
                        rows[r].n, s->pos, s->params.n_ctx);
    for (int32_t i = 0; i < rows[r].n; i++)
      if (rows[r].tokens[i] < 0 || rows[r].tokens[i] >= V)
        return q35_seterr(err, "token id %d is out of range [0, %d)", rows[r].tokens[i], V);
    row_start[r] = (int32_t)T;
    T += rows[r].n;
    if (s->params.n_ctx > max_ctx) max_ctx = s->params.n_ctx;
  }
  /* rows that want logits: one of them writes straight into its buffer; several share passes
   * over the output matrix through b.lg */
  int n_want = 0;
  for (int r = 0; r < n_rows; r++) n_want += rows[r].want != 0;
  const int joint = n_want > 1;
  /* size and carve the scratch */
  const int nth = q35_pool_size(m->pool);
  arena a = {NULL, 0, 0};
  bufs b;
  bufs_layout(m, &b, &a, T, max_ctx, nth, joint);
  if (a.used > m->scratch_size) {
    free(m->scratch);
    m->scratch = q35_alloc64(a.used, 0);
    m->scratch_size = m->scratch ? a.used : 0;
    if (!m->scratch) return q35_seterr(err, "out of memory (%zu bytes of scratch for %lld tokens)", a.used,
                                       (long long)T);
  }
  a = (arena){m->scratch, 0, m->scratch_size};
  bufs_layout(m, &b, &a, T, max_ctx, nth, joint);

  for (int r = 0; r < n_rows; r++)
    for (int32_t i = 0; i < rows[r].n; i++) {
      const int64_t t = row_start[r] + i;
      b.row_of[t] = r;
      b.pos_of[t] = rows[r].s->pos + i;
      q35_dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)rows[r].tokens[i] * m->tok_embd.nb1,
                         b.x + t * H, H);
    }

  for (int il = 0; il < hp->n_layer; il++) {
    const q35_layer *L = &m->layers[il];
    norm_ctx nc = {&b, b.h, b.x, L->attn_norm.data, H, hp->eps, 0};
    pool_or_inline(m->pool, norm_run, &nc, T <= INLINE_ROWS);
    if (L->is_attn) layer_attention(m, L, &b, rows, row_start);
    else layer_deltanet(m, L, &b, rows, row_start, n_rows);
    for (int64_t i = 0; i < T * H; i++) b.x[i] += b.tmp[i];
    nc.w = L->post_norm.data;
    pool_or_inline(m->pool, norm_run, &nc, T <= INLINE_ROWS);
    if (hp->is_moe) layer_moe(m, L, &b);
    else layer_dense_ffn(m, L, &b);
    for (int64_t i = 0; i < T * H; i++) b.x[i] += b.tmp[i];
  }

  /* logits for the positions asked for: gather, final norm, output matrix */
  int64_t G = 0;
  for (int r = 0; r < n_rows; r++) {
    if (rows[r].want == 1) {
      rmsnorm(b.h + G * H, b.x + (int64_t)(row_start[r] + rows[r].n - 1) * H, m->output_norm.data, H, hp->eps);
      G++;
    } else if (rows[r].want == 2) {
      for (int32_t i = 0; i < rows[r].n; i++, G++)
        rmsnorm(b.h + G * H, b.x + (int64_t)(row_start[r] + i) * H, m->output_norm.data, H, hp->eps);
    }
  }
  for (int r = 0; r < n_rows; r++) rows[r].s->pos += rows[r].n;
  if (G == 0) return 0;
  /* one row: straight into its buffer. Several: groups of LG_COLS columns (each output is one
   * vec_dot whatever the group, so a row's logits do not depend on its neighbours) */
  qact xa = {-1, NULL, 0};
  qact_make(m, &xa, q35_vec_dot_type(m->output.type), b.h, H, H, G, b.xq);
  if (!joint) {
    for (int r = 0; r < n_rows; r++)
      if (rows[r].want) matmul(m, &m->output, &xa, rows[r].want == 1 ? 1 : rows[r].n, rows[r].logits, V);
    return 0;
  }
  int r = 0;
  int64_t done_in_row = 0; /* columns of row r already copied out */
  for (int64_t g0 = 0; g0 < G; g0 += LG_COLS) {
    const int64_t cnt = G - g0 < LG_COLS ? G - g0 : LG_COLS;
    qact part = xa;
    part.data = xa.data + (size_t)g0 * xa.ld;
    matmul(m, &m->output, &part, cnt, b.lg, V);
    for (int64_t c = 0; c < cnt;) { /* hand the group's columns to their rows, in order */
      while (!rows[r].want) r++;
      const int64_t need = rows[r].want == 1 ? 1 : rows[r].n;
      const int64_t take = need - done_in_row < cnt - c ? need - done_in_row : cnt - c;
      memcpy(rows[r].logits + done_in_row * V, b.lg + c * V, (size_t)(take * V) * sizeof(float));
      c += take;
      done_in_row += take;
      if (done_in_row == need) r++, done_in_row = 0;
    }
  }
  return 0;
}
