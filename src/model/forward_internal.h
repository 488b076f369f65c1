/*
 * forward_internal.h - what the pieces of the forward pass share: the step's state (q35_fwd),
 * its scratch buffers, the matrix products (matmul.c) and the small scalar math every layer uses.
 *
 *   forward.c          the per-step driver: rows, scratch, embedding, the layer loop, the output head
 *   matmul.c           activations converted once, matrix products over all tokens of the step
 *   attention_layer.c  gated full attention (q/k norm, RoPE, KV cache, kernels/attn.h, output gate)
 *   deltanet_layer.c   Gated DeltaNet (causal conv, q/k L2 norm, the delta rule, gated RMSNorm)
 *   ffn.c              the MoE FFN (router, experts, shared expert) and the dense SwiGLU FFN
 *
 * Every function here keeps the invariance contract of forward.c: each output element is computed
 * by exactly one thread, in an order of operations that depends only on its own token's inputs.
 */
#ifndef Q35_FORWARD_INTERNAL_H
#define Q35_FORWARD_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/threadpool.h"
#include "model/model.h"

/* ---- running a task ---- */

/* Batched decode (a few rows) keeps its small element-wise tasks on the calling thread: a launch
 * and the wait for a worker cost more than quantizing, norming or gating a few rows. */
enum { INLINE_ROWS = 8, INLINE_ELEMS = 32768 };

/* Run fn over the pool, or inline on this thread when the work is too small to pay for a launch
 * (decode: one token). The tasks split their items with q35_split and compute each item the same
 * way whoever runs it, so the results are the same bits either way. */
static inline void pool_or_inline(q35_pool *pool, void (*fn)(void *, int, int), void *ctx, int inline_ok) {
  if (inline_ok) fn(ctx, 0, 1);
  else q35_pool_run(pool, fn, ctx);
}

/* ---- small math helpers (scalar; their order of operations is part of the invariance) ---- */

/* SiLU: kernels/vec.h (q35_vec_silu, _swiglu, _conv_silu), one exp polynomial at every level */
static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
/* log(1 + e^x); above this x, e^x swamps the 1 in float */
#define SOFTPLUS_LINEAR_ABOVE 20.0f
static inline float softplus(float x) { return x > SOFTPLUS_LINEAR_ABOVE ? x : log1pf(expf(x)); }

/* y = x / sqrt(mean(x^2) + eps) * w   (sum in double, as ggml does) */
static inline void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / sqrtf((float)(sum / n) + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* ---- the step's buffers: all carved from one scratch block (forward.c) ---- */

/* the most tokens whose attention jobs (one KV head each) run together in one q35_attn_many
 * call: they share the conversion of each K / V block */
enum { Q35_ATTN_JOBS = 8 };

/* columns of one joint output product (q35_bufs.lg) */
enum { Q35_LG_COLS = 16 };

typedef struct {
  int64_t T;              /* tokens in the step */
  float *x, *h, *tmp;     /* residual, normed, mixer/ffn output: [T][H] */
  char *xq;               /* converted activations (largest row kind) */
  char *xq2;              /* a second conversion buffer (MoE: activations gathered by expert) */
  char *xq3;              /* MoE: expert hidden activations, converted */
  /* attention */
  float *qg, *k, *v, *o;  /* [T][nh*2hd], [T][nkv*hd] x2, [T][nh*hd] */
  float *att;             /* per thread: att_jobs slots of scores [grp][n_ctx] + acc [grp][hd] + queries */
  size_t att_stride;      /* floats per thread */
  int att_jobs;           /* attention jobs (tokens of one KV head) a thread runs in one q35_attn_many */
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
  float *gus, *acts;      /* shared expert gate|up [T][2Is] and SwiGLU output [T][Is] */
  /* row bookkeeping */
  int32_t *row_of;        /* token -> row */
  int32_t *pos_of;        /* token -> absolute position */
  int64_t max_ctx;
  float *lg;              /* joint output product of several rows: [LG_COLS][V] (NULL: one row) */
} q35_bufs;

/* One forward pass in flight: the weights, the threads, the buffers and the rows. Tokens of all
 * rows are laid out row after row: row r's tokens are [row_start[r], row_start[r] + rows[r].n). */
typedef struct {
  const q35_model *m;
  q35_pool *pool;
  q35_bufs *b;
  q35_fwd_row *rows;
  const int32_t *row_start;
  int n_rows;
} q35_fwd;

/* A layer's task context (the pool hands it to every thread). */
typedef struct {
  const q35_fwd *f;
  const q35_layer *L;
} q35_layer_task;

/* ---- matrix products (matmul.c) ---- */

/* Activations converted once and reused by every weight of the same vec_dot type. */
typedef struct {
  int type;   /* vec_dot type, -1 when not converted yet */
  char *data;
  size_t ld;
} q35_act;
#define Q35_ACT_NONE ((q35_act){-1, NULL, 0})

/* Convert T float rows x (stride ldx floats) of length K to vtype rows in buf (no-op when q
 * already holds that type). */
void q35_act_prepare(q35_pool *pool, q35_act *q, int vtype, const float *x, int64_t ldx, int64_t K, int64_t T,
                     char *buf);
/* Y[t][n] (row stride ldy) = W_n . X_t for the T converted rows of xa. */
void q35_matmul(q35_pool *pool, const q35_tensor *w, const q35_act *xa, int64_t T, float *y, int64_t ldy);
/* y = W x for float activations x (T rows, stride ldx), converting them first into buf. */
/* An observer of the matrix products (q35 imatrix): called on the stepping thread, before the
 * product, with the float activations weight w multiplies -- row t (t < T) is
 * x + (rows ? rows[t] / rdiv : t) * ldx, K floats -- and the expert (the matrix of a 3-D expert
 * tensor, else 0). Off (NULL, the default): one pointer test per product. */
typedef void (*q35_mm_observer_fn)(void *ctx, const q35_tensor *w, int64_t expert, const float *x, int64_t ldx,
                                   int64_t K, int64_t T, const int32_t *rows, int64_t rdiv);
extern q35_mm_observer_fn q35_mm_observer;
extern void *q35_mm_observer_ctx;
static inline void q35_mm_observe(const q35_tensor *w, int64_t expert, const float *x, int64_t ldx, int64_t K,
                                  int64_t T, const int32_t *rows, int64_t rdiv) {
  if (q35_mm_observer) q35_mm_observer(q35_mm_observer_ctx, w, expert, x, ldx, K, T, rows, rdiv);
}

void q35_matmul_f(q35_pool *pool, const q35_tensor *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                  char *buf);
/* y_i = W_i x for n (<= 4) weights on the same float activations x (T rows of K = W_i->ne[0],
 * stride ldx): one conversion and one launch when their vec_dot types agree. xa caches the
 * conversion (into buf) for later products on the same x. */
void q35_matmul_same(q35_pool *pool, const q35_tensor *const *ws, float *const *ys, const int64_t *ldy, int n,
                     q35_act *xa, const float *x, int64_t ldx, int64_t T, char *buf);

/* The step's buffers for T tokens (contexts up to max_ctx) in ws's scratch, as q35_forward lays
 * them out (forward.c); for passes that drive the layers themselves (model/mtp.c). joint: also
 * b->lg, [Q35_LG_COLS][n_vocab] floats for an output product of several columns. */
int q35_fwd_bufs_reserve(const q35_model *m, q35_fwd_ws *ws, q35_bufs *b, int64_t T, int64_t max_ctx, int joint,
                         q35_err *err);

/* ---- the layers: each reads f->b->h (the normed input) and writes its output to f->b->tmp ---- */

void q35_layer_attention(const q35_fwd *f, const q35_layer *L);  /* attention_layer.c */
void q35_layer_deltanet(const q35_fwd *f, const q35_layer *L);   /* deltanet_layer.c */
void q35_layer_moe(const q35_fwd *f, const q35_layer *L);        /* ffn.c */
void q35_layer_dense_ffn(const q35_fwd *f, const q35_layer *L);  /* ffn.c */

#endif
