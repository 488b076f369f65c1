/*
 * ffn.c - the feed-forward half of a layer:
 *
 *   qwen35moe: p = softmax(Wrouter h); the top-k experts by p (ties to the lower id), their
 *              weights renormalized to sum 1;  out = sum_j w_j E_j(h) + sigmoid(g . h) S(h)
 *              where every expert E_j and the shared expert S are SwiGLU MLPs
 *   qwen35:    out = SwiGLU(h)
 *   SwiGLU(h) = Wdown (silu(Wgate h) * Wup h)
 *
 * The experts run over (expert, block of weight rows) units: each unit reads its rows once and
 * serves every token routed to that expert in this step. Tokens' slots are gathered in expert
 * order, so an expert's activations are contiguous; a slot's result does not depend on which
 * other tokens share its expert (each output is one q35_vec_dot).
 */
#include <math.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/vec.h"
#include "model/forward_internal.h"

/* ---- routing ---- */

/* Floor under the sum of the selected experts' probabilities before renormalizing: 2^-14, the
 * smallest normal fp16 (the clamp ggml applies there). */
#define MOE_WEIGHT_SUM_MIN 6.103515625e-5f

/* The per-token parts of the MoE layer that are not matrix products (routing, and the combine
 * below) run over the pool by tokens: each token's arithmetic is the same whichever thread runs
 * it, and at 2 threads they no longer leave the second thread idle (~2% of an 8k prefill). */
typedef struct {
  const q35_fwd *f;
  const q35_layer *L;
} moe_tok_task;

/* softmax over E router logits, top-k (ties to the lower expert id), renormalized weights.
 * Items: tokens. */
static void moe_route(void *vctx, int ith, int nth) {
  const moe_tok_task *c = vctx;
  const q35_hparams *hp = &c->f->m->hp;
  q35_bufs *b = c->f->b;
  const int E = hp->n_expert, k = hp->n_expert_used;
  long t0, t1;
  q35_split(b->T, ith, nth, &t0, &t1);
  for (int64_t t = t0; t < t1; t++) {
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
    /* The k largest, largest first, ties to the lower id: one pass in id order keeping sel / w
     * sorted, an expert going after every kept one it does not exceed. The same experts in the
     * same order as taking the largest untaken one k times (ties to the lower id), in ~a quarter
     * of the time at E 256, k 8; with NaN (the softmax gives it to every expert or to none) both
     * keep ids 0 .. k-1. */
    int n = 0;
    for (int e = 0; e < E; e++) {
      const float v = l[e];
      if (n == k && !(v > w[k - 1])) continue;
      int i = n < k ? n : k - 1;
      for (; i > 0 && v > w[i - 1]; i--) {
        sel[i] = sel[i - 1];
        w[i] = w[i - 1];
      }
      sel[i] = e;
      w[i] = v;
      if (n < k) n++;
    }
    float ws = 0.0f;
    for (int j = 0; j < k; j++) ws += w[j];
    if (ws < MOE_WEIGHT_SUM_MIN) ws = MOE_WEIGHT_SUM_MIN;
    for (int j = 0; j < k; j++) w[j] /= ws;
  }
}

/* Per-expert lists of the T*k slots (token t, choice j = slot t*k + j), in token order:
 * elist[estart[e] ..] are expert e's slots, inv[slot] its row in that order; active[] lists the
 * experts with at least one slot. Returns the number of active experts. */
static int moe_lists(const q35_hparams *hp, q35_bufs *b) {
  const int64_t E = hp->n_expert, n = b->T * hp->n_expert_used;
  memset(b->ecount, 0, (size_t)(E + 1) * 4);
  for (int64_t s = 0; s < n; s++) b->ecount[b->sel[s]]++;
  int n_active = 0;
  int32_t acc = 0;
  for (int e = 0; e < E; e++) {
    b->estart[e] = acc;
    acc += b->ecount[e];
    if (b->ecount[e]) b->active[n_active++] = e;
    b->ecount[e] = 0;
  }
  for (int64_t s = 0; s < n; s++) {
    const int e = b->sel[s];
    b->elist[b->estart[e] + b->ecount[e]++] = (int32_t)s;
  }
  for (int64_t i = 0; i < n; i++) b->inv[b->elist[i]] = (int32_t)i;
  return n_active;
}

/* ---- the experts' matrix products ---- */

typedef struct {
  const q35_fwd *f;
  const q35_layer *L;
  int phase;          /* 0: gate+up, 1: down */
  int rb;             /* weight rows per block (moe_rows) */
  int n_active;
  /* the shared expert's blocks after the routed experts' units, in the same launch (0: none):
   * its T rows of converted activations (h for gate+up, its SwiGLU output for down) */
  int shared;
  const char *xs;
  size_t lds;
} moe_task;

/* units: (active expert, pair of blocks of rb weight rows); phase 0 pairs a gate block with the
 * up block of the same rows, phase 1 down block j with block j + half (half the matrix away).
 * An expert with one slot (decode) runs its pair as one q35_vec_dot_rows2: one core reads the two
 * blocks as two memory streams, more bytes per second than one (docs/PERF.md, issue 15 session
 * 14). More slots go through each block's tile MOE_CB at a time. */
enum { MOE_RB = 16, MOE_CB = 32 };
/* Rows per block for a step of T tokens in phase 0 / 1. Prefill (more than MOE_T_SMALL tokens)
 * keeps MOE_RB (a unit's tiles reuse each weight block over many columns: short blocks keep them
 * in cache and split evenly).
 * A decode step (T = 1: every expert has one slot) reads each unit's rows once, as two streams,
 * and short calls stream less per second: gate / up go in 64-row blocks (72 KB a stream for a
 * 2048-wide Q4_0 expert), down in 128-row blocks (36 KB a stream for a 512-wide one), still 8
 * units an expert in each phase for two threads to share (docs/PERF.md, issue 15 session 16).
 * The bits do not depend on it: every output is one row's product. */
enum { MOE_RB_DEC0 = 64, MOE_RB_DEC1 = 128 };
/* A verify step of up to MOE_T_SMALL tokens (drafts of 1..3 after the last accepted token) takes
 * decode's blocks too: most of its active experts have one slot (the rows2 path, as in decode),
 * and the rest at most MOE_T_SMALL columns, whose activations stay in cache over any block; short
 * blocks there only cut the streams short (docs/PERF.md, issue 19 session 21). */
enum { MOE_T_SMALL = 4 };
static int moe_rows(int64_t T, int phase) {
  return T > MOE_T_SMALL ? MOE_RB : phase == 0 ? MOE_RB_DEC0 : MOE_RB_DEC1;
}
static int moe_pairs(int rows, int phase, int rb) {
  const int nb = (rows + rb - 1) / rb;
  return phase == 0 ? nb : (nb + 1) / 2;
}
static int moe_blocks(const q35_hparams *hp, int phase, int rb) {
  return moe_pairs(phase == 0 ? hp->n_ff_exp : hp->n_embd, phase, rb);
}
/* the shared expert's units: gate+up pairs, or down pairs */
static int moe_shared_blocks(const q35_hparams *hp, int phase, int rb) {
  return moe_pairs(phase == 0 ? hp->n_ff_shexp : hp->n_embd, phase, rb);
}

/* One block's weights and output columns. */
typedef struct {
  const q35_tensor *w; /* NULL: none */
  const char *wr;      /* row r0 of the block */
  int nr;              /* rows r0 .. r0 + nr */
  int ocol;            /* output column of row r0 */
} moe_blk;

/* One unit: two blocks of one shape (b[1].w NULL where the pair has no second) and their
 * destination. */
typedef struct {
  moe_blk b[2];
  int64_t K, ldo;
  float *out;
  const char *x; /* the gathered, converted activations */
} moe_unit;

/* rows [r0, r0 + rb) of rows, clipped, of the matrix at base (row stride w->nb1) */
static moe_blk moe_blk_at(const q35_tensor *w, const char *base, int r0, int rb, int rows, int ocol) {
  moe_blk k;
  k.w = w;
  k.nr = r0 + rb < rows ? rb : rows - r0;
  k.wr = base + (size_t)r0 * w->nb1;
  k.ocol = ocol;
  return k;
}

/* the down pair of unit j of a matrix of H rows at base: blocks j and j + half */
static void moe_down_pair(moe_unit *u, const q35_tensor *w, const char *base, int j, int rb, int H) {
  const int half = moe_pairs(H, 1, rb) * rb;
  u->b[0] = moe_blk_at(w, base, j * rb, rb, H, j * rb);
  u->b[1].w = NULL;
  if (half + j * rb < H) u->b[1] = moe_blk_at(w, base, half + j * rb, rb, H, half + j * rb);
}

/* Unit blk of the shared expert (phase 0: gate and up blocks into b->gus; 1: down into b->sh),
 * over the step's T tokens in c->xs. */
static moe_unit moe_shared_unit(const moe_task *c, int blk) {
  const q35_hparams *hp = &c->f->m->hp;
  const q35_layer *L = c->L;
  const q35_bufs *b = c->f->b;
  const int Is = hp->n_ff_shexp, H = hp->n_embd, rb = c->rb;
  moe_unit u;
  if (c->phase == 0) {
    u.b[0] = moe_blk_at(&L->gate_shexp, L->gate_shexp.data, blk * rb, rb, Is, blk * rb);
    u.b[1] = moe_blk_at(&L->up_shexp, L->up_shexp.data, blk * rb, rb, Is, Is + blk * rb);
    u.K = H;
    u.ldo = 2 * Is;
    u.out = b->gus;
  } else {
    moe_down_pair(&u, &L->down_shexp, L->down_shexp.data, blk, rb, H);
    u.K = Is;
    u.ldo = H;
    u.out = b->sh;
  }
  u.x = c->xs;
  return u;
}

static moe_unit moe_unit_of(const moe_task *c, int e, int blk) {
  const q35_hparams *hp = &c->f->m->hp;
  const q35_layer *L = c->L;
  const q35_bufs *b = c->f->b;
  const int I = hp->n_ff_exp, H = hp->n_embd, rb = c->rb;
  moe_unit u;
  if (c->phase == 0) {
    const int r0 = blk * rb;
    if (L->gate_up_exps.data) { /* gate rows 0 .. I, up rows I .. 2I of expert e's matrix */
      const char *base = (const char *)L->gate_up_exps.data + (size_t)e * L->gate_up_exps.nb2;
      u.b[0] = moe_blk_at(&L->gate_up_exps, base, r0, rb, I, r0);
      u.b[1] = moe_blk_at(&L->gate_up_exps, base + (size_t)I * L->gate_up_exps.nb1, r0, rb, I, I + r0);
    } else {
      u.b[0] = moe_blk_at(&L->gate_exps, (const char *)L->gate_exps.data + (size_t)e * L->gate_exps.nb2, r0, rb, I, r0);
      u.b[1] = moe_blk_at(&L->up_exps, (const char *)L->up_exps.data + (size_t)e * L->up_exps.nb2, r0, rb, I, I + r0);
    }
    u.K = H;
    u.ldo = 2 * I;
    u.out = b->gu;
    u.x = b->xq2;
  } else {
    moe_down_pair(&u, &L->down_exps, (const char *)L->down_exps.data + (size_t)e * L->down_exps.nb2, blk, rb, H);
    u.K = I;
    u.ldo = H;
    u.out = b->y;
    u.x = b->xq3;
  }
  return u;
}

/* Unit u on nc0 activation rows from x (row stride ldx) into out (row stride u->ldo): one
 * column with two blocks of one type and shape as a q35_vec_dot_rows2, else each block's tiles. */
static void moe_unit_run(const moe_unit *u, const char *x, size_t ldx, int64_t nc0, float *out) {
  const moe_blk *p = &u->b[0], *q = &u->b[1];
  if (nc0 == 1 && q->w && q->w->type == p->w->type && q->w->nb1 == p->w->nb1 && q->nr == p->nr) {
    q35_vec_dot_rows2(p->w->type, u->K, p->wr, q->wr, p->w->nb1, p->nr, x, out + p->ocol, out + q->ocol, 1);
    return;
  }
  for (int i = 0; i < 2 && u->b[i].w; i++) {
    const moe_blk *k = &u->b[i];
    for (int64_t c0 = 0; c0 < nc0; c0 += MOE_CB) {
      const int nc = nc0 - c0 < MOE_CB ? (int)(nc0 - c0) : MOE_CB;
      q35_vec_dot_tile_ex(k->w->type, u->K, k->wr, k->w->nb1, k->nr, x + (size_t)c0 * ldx, ldx, nc,
                          out + (size_t)c0 * u->ldo + k->ocol, 1, (size_t)u->ldo);
    }
  }
}

/* Units go out in claimed pieces (q35_claim_next), one unit per chunk. */
static void moe_mm(void *vctx, int ith, int nth) {
  const moe_task *c = vctx;
  const q35_hparams *hp = &c->f->m->hp;
  const q35_layer *L = c->L;
  const q35_bufs *b = c->f->b;
  const int nblk = moe_blocks(hp, c->phase, c->rb);
  (void)nth;
  long u0, u1;
  int from = 0;
  const int in_type = c->phase == 0 ? (L->gate_up_exps.data ? L->gate_up_exps.type : L->gate_exps.type)
                                    : L->down_exps.type;
  const size_t ldx = q35_row_size(q35_vec_dot_type(in_type), c->phase == 0 ? hp->n_embd : hp->n_ff_exp);
  const long n_routed = (long)c->n_active * nblk;
  while (q35_claim_next(c->f->pool, ith, &from, &u0, &u1)) {
    for (long i = u0; i < u1; i++) {
      if (i >= n_routed) { /* the shared expert: every token */
        const moe_unit u = moe_shared_unit(c, (int)(i - n_routed));
        moe_unit_run(&u, u.x, c->lds, b->T, u.out);
        continue;
      }
      const int e = b->active[i / nblk];
      const moe_unit u = moe_unit_of(c, e, (int)(i % nblk));
      /* this expert's slots are rows [estart, estart + ecount) of the gathered activations */
      moe_unit_run(&u, u.x + (size_t)b->estart[e] * ldx, ldx, b->ecount[e], u.out + (size_t)b->estart[e] * u.ldo);
    }
  }
}

/* Gather the converted activation row of each slot's token, in expert order. */
typedef struct {
  q35_bufs *b;
  int64_t n, k;
  size_t ld;
} gather_task;

static void gather_run(void *vctx, int ith, int nth) {
  const gather_task *g = vctx;
  long i0, i1;
  q35_split(g->n, ith, nth, &i0, &i1);
  for (long i = i0; i < i1; i++)
    memcpy(g->b->xq2 + (size_t)i * g->ld, g->b->xq + (size_t)(g->b->elist[i] / g->k) * g->ld, g->ld);
}

/* ---- SwiGLU ---- */

typedef struct {
  int64_t n, width;   /* rows, width of act */
  const float *gu;    /* [n][2*width] gate|up */
  float *act;
} swiglu_task;

static void swiglu_run(void *vctx, int ith, int nth) {
  const swiglu_task *c = vctx;
  long r0, r1;
  q35_split(c->n, ith, nth, &r0, &r1);
  for (long r = r0; r < r1; r++) {
    const float *g = c->gu + r * 2 * c->width, *u = g + c->width;
    float *a = c->act + r * c->width;
    q35_vec_swiglu(a, g, u, c->width);
  }
}

/* out = down(silu(gate h) * up h) for the normed activations b->h; xa caches their conversion. */
static void swiglu_ffn(const q35_fwd *f, const q35_tensor *gate, const q35_tensor *up, const q35_tensor *down,
                       q35_act *xa, float *out) {
  q35_bufs *b = f->b;
  const int64_t T = b->T, H = f->m->hp.n_embd, F = gate->ne[1];
  const q35_tensor *ws[2] = {gate, up};
  float *ys[2] = {b->gu, b->gu + F};
  const int64_t lds[2] = {2 * F, 2 * F};
  q35_matmul_same(f->pool, ws, ys, lds, 2, xa, b->h, H, T, b->xq);
  swiglu_task s = {T, F, b->gu, b->act};
  pool_or_inline(f->pool, swiglu_run, &s, T * F <= INLINE_ELEMS);
  q35_matmul_f(f->pool, down, b->act, F, T, out, H, b->xq2);
}

/* ---- the MoE layer ---- */

/* The observer (forward_internal.h) sees each active expert's rows: gate/up on the tokens routed
 * to it (b->h), down on its slots' SwiGLU outputs (b->act, in expert order, filled later: the
 * down call is made by observe_down after SwiGLU). */
static void observe_experts(const q35_layer *L, const q35_bufs *b, int n_active, int64_t H, int64_t I, int64_t k) {
  (void)I;
  for (int a = 0; a < n_active; a++) {
    const int e = b->active[a];
    const int32_t *rows = b->elist + b->estart[e];
    if (L->gate_up_exps.data) {
      q35_mm_observe(&L->gate_up_exps, e, b->h, H, H, b->ecount[e], rows, k);
    } else {
      q35_mm_observe(&L->gate_exps, e, b->h, H, H, b->ecount[e], rows, k);
      q35_mm_observe(&L->up_exps, e, b->h, H, H, b->ecount[e], rows, k);
    }
  }
}

static void observe_down(const q35_layer *L, const q35_bufs *b, int n_active, int64_t I) {
  for (int a = 0; a < n_active; a++) {
    const int e = b->active[a];
    q35_mm_observe(&L->down_exps, e, b->act + (int64_t)b->estart[e] * I, I, I, b->ecount[e], NULL, 1);
  }
}

/* The routed experts: gate + up for every (token, slot) on the activations gathered in expert
 * order, SwiGLU, down. xa receives the conversion of h. With `shared`, the shared expert's
 * gate + up and down run in the same two launches (into b->gus, b->acts, b->sh): a decode step
 * has fewer launches to wait for, and each product is still one q35_vec_dot per output. */
static void moe_experts(const q35_fwd *f, const q35_layer *L, int n_active, q35_act *xa, int shared) {
  const q35_hparams *hp = &f->m->hp;
  q35_bufs *b = f->b;
  const int64_t T = b->T, H = hp->n_embd, k = hp->n_expert_used, I = hp->n_ff_exp, Is = hp->n_ff_shexp;
  const int gtype = L->gate_up_exps.data ? L->gate_up_exps.type : L->gate_exps.type;
  if (q35_mm_observer) observe_experts(L, b, n_active, H, I, k);
  if (shared) {
    q35_mm_observe(&L->gate_shexp, 0, b->h, H, H, T, NULL, 1);
    q35_mm_observe(&L->up_shexp, 0, b->h, H, H, T, NULL, 1);
  }
  q35_act_prepare(f->pool, xa, q35_vec_dot_type(gtype), b->h, H, H, T, b->xq);
  gather_task ga = {b, T * k, k, xa->ld};
  pool_or_inline(f->pool, gather_run, &ga, T <= INLINE_ROWS);
  moe_task c = {f, L, 0, moe_rows(T, 0), n_active, shared, xa->data, xa->ld};
  q35_claim_init(f->pool, (long)n_active * moe_blocks(hp, 0, c.rb) + (shared ? moe_shared_blocks(hp, 0, c.rb) : 0), 1);
  q35_pool_run(f->pool, moe_mm, &c);
  swiglu_task sw = {T * k, I, b->gu, b->act};
  pool_or_inline(f->pool, swiglu_run, &sw, T * k * I <= INLINE_ELEMS);
  if (shared) {
    swiglu_task ss = {T, Is, b->gus, b->acts};
    pool_or_inline(f->pool, swiglu_run, &ss, T * Is <= INLINE_ELEMS);
  }
  if (q35_mm_observer) observe_down(L, b, n_active, I);
  if (shared) q35_mm_observe(&L->down_shexp, 0, b->acts, Is, Is, T, NULL, 1);
  q35_act aa = Q35_ACT_NONE;
  q35_act_prepare(f->pool, &aa, q35_vec_dot_type(L->down_exps.type), b->act, I, I, T * k, b->xq3);
  if (shared) { /* h's conversion in b->xq is spent: the shared SwiGLU output's goes there */
    q35_act as = Q35_ACT_NONE;
    q35_act_prepare(f->pool, &as, q35_vec_dot_type(L->down_shexp.type), b->acts, Is, Is, T, b->xq);
    c.xs = as.data;
    c.lds = as.ld;
    xa->type = -1; /* no longer h */
  }
  c.phase = 1;
  c.rb = moe_rows(T, 1);
  q35_claim_init(f->pool, (long)n_active * moe_blocks(hp, 1, c.rb) + (shared ? moe_shared_blocks(hp, 1, c.rb) : 0), 1);
  q35_pool_run(f->pool, moe_mm, &c);
}

/* out[i] += y[i] * w with the product and the sum rounded separately (no fused multiply-add), in
 * 8-float generic vectors (GCC's vector extension: SSE or NEON at the baseline, the same bits as
 * the scalar loop, which the compiler at -O2 left scalar) */
typedef float f8 __attribute__((vector_size(32)));
static void axpy_sep(float *out, const float *y, float w, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f8 o, v;
    memcpy(&o, out + i, sizeof o);
    memcpy(&v, y + i, sizeof v);
    v *= w;
    o += v;
    memcpy(out + i, &o, sizeof o);
  }
  for (; i < n; i++) out[i] += y[i] * w;
}

/* combine: routed experts in slot order, then the gated shared expert. Items: tokens. */
static void moe_combine(void *vctx, int ith, int nth) {
  const moe_tok_task *c = vctx;
  const q35_hparams *hp = &c->f->m->hp;
  const q35_layer *L = c->L;
  const q35_bufs *b = c->f->b;
  const int64_t H = hp->n_embd, k = hp->n_expert_used, Is = hp->n_ff_shexp;
  long t0, t1;
  q35_split(b->T, ith, nth, &t0, &t1);
  for (int64_t t = t0; t < t1; t++) {
    float *out = b->tmp + t * H;
    memset(out, 0, sizeof(float) * (size_t)H);
    for (int64_t j = 0; j < k; j++)
      axpy_sep(out, b->y + (int64_t)b->inv[t * k + j] * H, b->selw[t * k + j], H);
    if (Is > 0) axpy_sep(out, b->sh + t * H, L->shexp_gate.data ? sigmoidf(b->shg[t]) : 1.0f, H);
  }
}

void q35_layer_moe(const q35_fwd *f, const q35_layer *L) {
  const q35_hparams *hp = &f->m->hp;
  q35_bufs *b = f->b;
  const int64_t T = b->T, H = hp->n_embd, E = hp->n_expert, Is = hp->n_ff_shexp;
  /* router and the shared expert's gate (one launch when their dot types agree), on float
   * activations converted to the router's dot type */
  q35_tensor g = L->shexp_gate;
  g.ne[1] = 1;
  const q35_tensor *rw[2] = {&L->router, &g};
  float *ry[2] = {b->logits_r, b->shg};
  const int64_t rld[2] = {E, 1};
  q35_act xr = Q35_ACT_NONE;
  q35_matmul_same(f->pool, rw, ry, rld, Is > 0 && L->shexp_gate.data ? 2 : 1, &xr, b->h, H, T, b->xq);
  moe_tok_task rt = {f, L};
  pool_or_inline(f->pool, moe_route, &rt, T <= INLINE_ROWS);
  const int n_active = moe_lists(hp, b);
  /* the shared expert rides in the routed experts' launches when its gate and up take the same
   * converted activations as theirs, and the step's tokens fit one tile pass (decode, small
   * batches): a unit of moe_mm reads all of its tokens' activations, which for a long prompt
   * q35_matmul's token blocks keep in cache instead */
  const int gtype = q35_vec_dot_type(L->gate_up_exps.data ? L->gate_up_exps.type : L->gate_exps.type);
  const int shared = Is > 0 && T <= MOE_CB && q35_vec_dot_type(L->gate_shexp.type) == gtype &&
                     q35_vec_dot_type(L->up_shexp.type) == gtype;
  q35_act xa = Q35_ACT_NONE;
  moe_experts(f, L, n_active, &xa, shared);
  if (Is > 0 && !shared) swiglu_ffn(f, &L->gate_shexp, &L->up_shexp, &L->down_shexp, &xa, b->sh);
  moe_tok_task ct = {f, L};
  pool_or_inline(f->pool, moe_combine, &ct, T <= INLINE_ROWS);
}

void q35_layer_dense_ffn(const q35_fwd *f, const q35_layer *L) {
  q35_act xa = Q35_ACT_NONE;
  swiglu_ffn(f, &L->ffn_gate, &L->ffn_up, &L->ffn_down, &xa, f->b->tmp);
}
