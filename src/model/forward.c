/*
 * forward.c - the Qwen3.5 forward pass on the CPU: the per-step driver and the layer loop.
 *
 * One call advances several sessions ("rows") at once: every matrix product runs over all
 * tokens of all rows, so each weight matrix is read once per step; the sequence-mixing parts
 * (causal conv, delta-rule recurrence, attention) then run per row over that row's tokens.
 *
 * Layer math (GGUF conventions; the model notes in docs/DESIGN.md):
 *   x = embed(tokens)
 *   per layer:  x += Mixer(RMSNorm(x));  x += FFN(RMSNorm(x))
 *     Mixer = gated attention (every interval-th layer, attention_layer.c) or Gated DeltaNet
 *             (deltanet_layer.c);
 *     FFN   = top-k MoE + sigmoid-gated shared expert (qwen35moe) or SwiGLU (qwen35) (ffn.c)
 *   logits = Woutput RMSNorm(x)   at the positions a row asks for
 *
 * Invariances (tested): a row's logits are bit-identical whatever the other rows are, however
 * its prompt is chunked, and for any thread count. They hold because every output element is
 * computed by exactly one thread with a fixed order of operations that depends only on that
 * token's own inputs: a matrix product quantizes each activation row on its own and takes
 * one q35_vec_dot per output; the recurrence runs token by token; attention reads the
 * stored (rounded) K/V of every position, the chunk's own included.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant.h"
#include "model/forward_internal.h"

/* ---- the scratch: all buffers of a step are carved from one block grown on demand ---- */

typedef struct {
  char *base;
  size_t used, cap;
} arena;

/* 64-byte aligned pieces (a cache line, and the widest vector load) */
#define ARENA_ALIGN 64

static void *arena_get(arena *a, size_t bytes) {
  size_t off = (a->used + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  a->used = off + bytes;
  return a->base && a->used <= a->cap ? a->base + off : NULL;
}

/* Logit columns of one joint pass over the output matrix (the largest weight). Several rows'
 * logits are computed in groups of up to LG_COLS columns into b->lg and copied out, so a decode
 * step of B rows reads the matrix once, not B times. */
enum { LG_COLS = Q35_LG_COLS };

/* Bytes of the largest converted activation row any product of the model takes. */
static size_t max_row_bytes(const q35_model *m) {
  const q35_hparams *hp = &m->hp;
  int64_t ks[] = {hp->n_embd, (int64_t)hp->n_head * hp->head_dim, hp->ssm_d_inner, hp->n_ff_exp, hp->n_ff_shexp,
                  hp->n_ff, m->has_mtp ? 2 * (int64_t)hp->n_embd : 0 /* the MTP head's eh_proj input */};
  size_t best = 0;
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
    const int64_t K = ks[i];
    if (K <= 0) continue;
    size_t b = (size_t)K * sizeof(float); /* F32 conversion is the largest per element... */
    const size_t z = q35_row_size(Q35_TYPE_Q8_0Z, K); /* ...except Q8_0Z's padding on short rows */
    if (z > b) b = z;
    if (b > best) best = b;
  }
  return best + ARENA_ALIGN;
}

static void bufs_layout(const q35_model *m, q35_bufs *b, arena *a, int64_t T, int64_t max_ctx, int nthreads,
                        int joint) {
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
  /* per thread, per job slot: scores [grp][max_ctx], accumulators and queries [grp][hd] each
   * (+ slack); one slot a token of the step, at most Q35_ATTN_JOBS, and no more than fit in
   * ATT_SLOTS_FLOATS (a long context takes fewer) */
  const size_t slot = (size_t)(nh / nkv) * (size_t)(max_ctx + 2 * hd) + 32;
  enum { ATT_SLOTS_FLOATS = 8 << 20 };
  int64_t nj = T < Q35_ATTN_JOBS ? T : Q35_ATTN_JOBS;
  if ((size_t)nj * slot > ATT_SLOTS_FLOATS) nj = (int64_t)(ATT_SLOTS_FLOATS / slot);
  b->att_jobs = nj < 1 ? 1 : (int)nj;
  b->att_stride = slot * (size_t)b->att_jobs;
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
  b->gus = arena_get(a, T * 2 * (hp->is_moe ? hp->n_ff_shexp : 0) * 4);
  b->acts = arena_get(a, T * (hp->is_moe ? hp->n_ff_shexp : 0) * 4);
  b->row_of = arena_get(a, T * 4);
  b->pos_of = arena_get(a, T * 4);
  b->lg = joint ? arena_get(a, (int64_t)LG_COLS * hp->n_vocab * 4) : NULL;
}

/* Lay the buffers out in ws's scratch, growing it first when this step needs more. */
static int bufs_reserve(const q35_model *m, q35_fwd_ws *ws, q35_bufs *b, int64_t T, int64_t max_ctx, int joint,
                        q35_err *err) {
  const int nth = q35_pool_size(ws->pool);
  arena a = {NULL, 0, 0};
  bufs_layout(m, b, &a, T, max_ctx, nth, joint); /* sizing pass */
  if (a.used > ws->scratch_size) {
    free(ws->scratch);
    ws->scratch = q35_alloc_huge(a.used);
    ws->scratch_size = ws->scratch ? a.used : 0;
    if (!ws->scratch)
      return q35_seterr(err, "out of memory (%zu bytes of scratch for %lld tokens)", a.used, (long long)T);
  }
  a = (arena){ws->scratch, 0, ws->scratch_size};
  bufs_layout(m, b, &a, T, max_ctx, nth, joint);
  return 0;
}

/* The buffers of a pass of T tokens outside q35_forward (the MTP head, model/mtp.c); joint: with
 * b->lg, the output product of several columns. */
int q35_fwd_bufs_reserve(const q35_model *m, q35_fwd_ws *ws, q35_bufs *b, int64_t T, int64_t max_ctx, int joint,
                         q35_err *err) {
  return bufs_reserve(m, ws, b, T, max_ctx, joint, err);
}

/* ---- the step ---- */

/* Every row valid before anything runs; row_start[r] = the row's first token in the step. */
static int check_rows(const q35_model *m, const q35_fwd_row *rows, int n_rows, int32_t *row_start, int64_t *T_out,
                      int64_t *max_ctx, q35_err *err) {
  const int V = m->hp.n_vocab;
  int64_t T = 0;
  *max_ctx = 1;
  for (int r = 0; r < n_rows; r++) {
    const q35_session *s = rows[r].s;
    if (s->model != m) return q35_seterr(err, "row %d: the session belongs to another model", r);
    for (int q = 0; q < r; q++)
      if (rows[q].s == s) return q35_seterr(err, "rows %d and %d name the same session", q, r);
    if (rows[r].n < 1) return q35_seterr(err, "row %d has no tokens", r);
    if (!rows[r].x_in != (m->layer_begin == 0) || (r && !rows[r].x_out != !rows[0].x_out))
      return q35_seterr(err, "row %d: a pipeline stage of layers [%d, %d) takes %s and all rows or none return "
                        "the residual stream", r, m->layer_begin, m->layer_end,
                        m->layer_begin ? "hidden states (x_in), not tokens" : "tokens");
    if (!rows[r].x_out && rows[r].n_out && !m->output.data && !m->next)
      return q35_seterr(err, "row %d: this pipeline stage (layers [%d, %d)) has no output head", r, m->layer_begin,
                        m->layer_end);
    if (rows[r].n_out < 0 || rows[r].n_out > rows[r].n)
      return q35_seterr(err, "row %d: %d outputs for %d tokens", r, rows[r].n_out, rows[r].n);
    if ((int64_t)s->pos + rows[r].n > s->params.n_ctx)
      return q35_seterr(err, "%d tokens at position %d exceed the context limit of %d tokens (the session's n_ctx)",
                        rows[r].n, s->pos, s->params.n_ctx);
    for (int32_t i = 0; !rows[r].x_in && i < rows[r].n; i++)
      if (rows[r].tokens[i] < 0 || rows[r].tokens[i] >= V)
        return q35_seterr(err, "token id %d is out of range [0, %d)", rows[r].tokens[i], V);
    row_start[r] = (int32_t)T;
    T += rows[r].n;
    if (s->params.n_ctx > *max_ctx) *max_ctx = s->params.n_ctx;
  }
  *T_out = T;
  return 0;
}

/* b->x = the rows' token embeddings (or the residual stream a pipeline stage receives, x_in);
 * token positions and rows for the layers. Items: tokens (an 8k prompt's rows dequantized by
 * one thread were a serial phase at 2 threads). */
static void embed_run(void *vctx, int ith, int nth) {
  const q35_fwd *f = vctx;
  const q35_model *m = f->m;
  const int H = m->hp.n_embd;
  long t0, t1;
  q35_split(f->b->T, ith, nth, &t0, &t1);
  int r = 0;
  while (r + 1 < f->n_rows && f->row_start[r + 1] <= t0) r++;
  for (long t = t0; t < t1; t++) {
    while (t >= f->row_start[r] + f->rows[r].n) r++;
    const int32_t i = (int32_t)(t - f->row_start[r]);
    f->b->row_of[t] = r;
    f->b->pos_of[t] = f->rows[r].s->pos + i;
    if (f->rows[r].x_in) {
      memcpy(f->b->x + t * H, f->rows[r].x_in + (int64_t)i * H, sizeof(float) * H);
      continue;
    }
    q35_dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)f->rows[r].tokens[i] * m->tok_embd.nb1,
                       f->b->x + t * H, H);
  }
}

typedef struct {
  q35_bufs *b;
  float *dst;
  const float *src;
  const float *w;
  int H;
  float eps;
} norm_task;

static void norm_run(void *vctx, int ith, int nth) {
  const norm_task *c = vctx;
  long t0, t1;
  q35_split(c->b->T, ith, nth, &t0, &t1);
  for (long t = t0; t < t1; t++) rmsnorm(c->dst + t * c->H, c->src + t * c->H, c->w, c->H, c->eps);
}

/* x += y over the step's T rows of H (the residual adds). Items: tokens. */
typedef struct {
  float *x;
  const float *y;
  int64_t T, H;
} add_task;

static void add_run(void *vctx, int ith, int nth) {
  const add_task *c = vctx;
  long t0, t1;
  q35_split(c->T, ith, nth, &t0, &t1);
  for (int64_t i = t0 * c->H; i < t1 * c->H; i++) c->x[i] += c->y[i];
}

static void add_into(const q35_fwd *f, float *x, const float *y) {
  add_task a = {x, y, f->b->T, f->m->hp.n_embd};
  pool_or_inline(f->pool, add_run, &a, a.T <= INLINE_ROWS);
}

/* The layer loop: the residual stream b->x through every layer (of a pipeline stage: its own). */
static void layers(const q35_fwd *f) {
  const q35_hparams *hp = &f->m->hp;
  q35_bufs *b = f->b;
  const int64_t T = b->T, H = hp->n_embd;
  for (int il = f->m->layer_begin; il < f->m->layer_end; il++) {
    const q35_layer *L = &f->m->layers[il];
    norm_task nt = {b, b->h, b->x, L->attn_norm.data, (int)H, hp->eps};
    pool_or_inline(f->pool, norm_run, &nt, T <= INLINE_ROWS);
    if (L->is_attn) q35_layer_attention(f, L);
    else q35_layer_deltanet(f, L);
    add_into(f, b->x, b->tmp);
    nt.w = L->post_norm.data;
    pool_or_inline(f->pool, norm_run, &nt, T <= INLINE_ROWS);
    if (hp->is_moe) q35_layer_moe(f, L);
    else q35_layer_dense_ffn(f, L);
    add_into(f, b->x, b->tmp);
  }
}

/* The output head: the final norm of the positions rows ask for (into b->h, and into a row's
 * hidden buffer when it has one), then the output matrix. One row: straight into its buffer.
 * Several: groups of LG_COLS columns (each output is one vec_dot whatever the group, so a row's
 * logits do not depend on its neighbours). */
static void output_head(const q35_fwd *f, int joint) {
  const q35_model *m = f->m;
  q35_bufs *b = f->b;
  const int H = m->hp.n_embd, V = m->hp.n_vocab;
  q35_fwd_row *rows = f->rows;
  int64_t G = 0;
  for (int r = 0; r < f->n_rows; r++) {
    /* every position's hidden state, for a session that asks (hidden_all): the sampled positions'
       is the norm just made for the output matrix (copied, not made twice: a decode row that keeps
       it for the MTP head costs the step a copy), the others' made here */
    float *all = rows[r].s->hidden_all;
    const int32_t o0 = rows[r].n - rows[r].n_out;
    for (int32_t i = 0; all && i < o0; i++)
      rmsnorm(all + (size_t)i * H, b->x + (int64_t)(f->row_start[r] + i) * H, m->output_norm.data, H, m->hp.eps);
    for (int32_t i = o0; i < rows[r].n; i++, G++) {
      rmsnorm(b->h + G * H, b->x + (int64_t)(f->row_start[r] + i) * H, m->output_norm.data, H, m->hp.eps);
      if (rows[r].hidden) memcpy(rows[r].hidden + (size_t)(i - o0) * H, b->h + G * H, sizeof(float) * H);
      if (all) memcpy(all + (size_t)i * H, b->h + G * H, sizeof(float) * H);
    }
  }
  if (G == 0) return;
  q35_mm_observe(&m->output, 0, b->h, H, H, G, NULL, 1);
  q35_act xa = Q35_ACT_NONE;
  q35_act_prepare(f->pool, &xa, q35_vec_dot_type(m->output.type), b->h, H, H, G, b->xq);
  if (!joint) {
    for (int r = 0; r < f->n_rows; r++)
      if (rows[r].n_out) q35_matmul(f->pool, &m->output, &xa, rows[r].n_out, rows[r].logits, V);
    return;
  }
  int r = 0;
  int64_t done_in_row = 0; /* columns of row r already copied out */
  for (int64_t g0 = 0; g0 < G; g0 += LG_COLS) {
    const int64_t cnt = G - g0 < LG_COLS ? G - g0 : LG_COLS;
    q35_act part = xa;
    part.data = xa.data + (size_t)g0 * xa.ld;
    q35_matmul(f->pool, &m->output, &part, cnt, b->lg, V);
    for (int64_t c = 0; c < cnt;) { /* hand the group's columns to their rows, in order */
      while (!rows[r].n_out) r++;
      const int64_t need = rows[r].n_out;
      const int64_t take = need - done_in_row < cnt - c ? need - done_in_row : cnt - c;
      memcpy(rows[r].logits + done_in_row * V, b->lg + c * V, (size_t)(take * V) * sizeof(float));
      c += take;
      done_in_row += take;
      if (done_in_row == need) r++, done_in_row = 0;
    }
  }
}

static int forward_batch(const q35_model *m, q35_fwd_ws *ws, q35_fwd_row *rows, int n_rows, q35_err *err) {
  int32_t row_start[n_rows];
  int64_t T = 0, max_ctx = 1;
  if (check_rows(m, rows, n_rows, row_start, &T, &max_ctx, err)) return -1;
  /* rows that want logits: one of them writes straight into its buffer; several share passes
   * over the output matrix through b.lg */
  int n_want = 0;
  for (int r = 0; r < n_rows; r++) n_want += rows[r].n_out > 0;
  const int joint = n_want > 1;
  q35_bufs b;
  if (bufs_reserve(m, ws, &b, T, max_ctx, joint, err)) return -1;
  const q35_fwd f = {m, ws->pool, &b, rows, row_start, n_rows};
  pool_or_inline(ws->pool, embed_run, (void *)&f, T <= INLINE_ROWS);
  layers(&f);
  for (int r = 0; r < n_rows; r++) rows[r].s->pos += rows[r].n;
  if (rows[0].x_out) { /* a pipeline stage before the last: the residual stream goes on */
    for (int r = 0; r < n_rows; r++)
      memcpy(rows[r].x_out, b.x + (int64_t)row_start[r] * m->hp.n_embd, sizeof(float) * rows[r].n * m->hp.n_embd);
    return 0;
  }
  if (m->next) return m->next->forward(m->next, rows, n_rows, b.x, T, err); /* the later stages' layers and head */
  output_head(&f, joint);
  return 0;
}

/* A long prompt of one session runs as consecutive passes of at most Q35_STEP_MAX tokens: the
 * step's scratch (about 265 KB a token, laid out for the pass's T) is then that of Q35_STEP_MAX
 * tokens, so a first long prompt clears and holds a quarter of the memory at 8k and its
 * intermediates (the experts' outputs, T x 8 x n_embd floats) are written and read back sooner.
 * The invariance contract makes the bits those of one pass (a token's results do not depend on
 * how its row is chunked). Only a plain row splits: no pipeline stage (x_in / x_out, a next
 * stage), no DeltaNet checkpoints or every-position hidden states (both index the pass's
 * tokens from its first), no product observer (q35 imatrix sums per product call). */
#define Q35_STEP_MAX 2048

/* The longest pass: Q35_STEP_MAX, or the environment's Q35_STEP_MAX (a testing aid: the split
 * path on short prompts, tests/test_invariance.sh). */
static int step_max(int32_t *out, q35_err *err) {
  *out = Q35_STEP_MAX;
  const char *s = getenv("Q35_STEP_MAX");
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 1 || v > (1L << 24))
    return q35_seterr(err, "Q35_STEP_MAX=%s: want a whole number of tokens from 1 to 16777216", s);
  *out = (int32_t)v;
  return 0;
}

static int step_splits(const q35_model *m, const q35_fwd_row *r) {
  return !m->next && m->layer_begin == 0 && !r->x_in && !r->x_out && r->s->ckpt_n == 0 && !r->s->hidden_all &&
         !q35_mm_observer;
}

/* The row's tokens as passes of Q35_STEP_MAX without outputs, then the rest (at least n_out
 * tokens) with them. The whole row is checked first, and the first pass grows the scratch for the
 * largest, so a refused step moves nothing. */
static int forward_pieces(const q35_model *m, q35_fwd_ws *ws, q35_fwd_row *rows, int32_t smax, q35_err *err) {
  int32_t row_start[1];
  int64_t T = 0, max_ctx = 1;
  if (check_rows(m, rows, 1, row_start, &T, &max_ctx, err)) return -1;
  const q35_fwd_row r = rows[0];
  int32_t last = r.n;
  while (last > smax && last - smax >= r.n_out) last -= smax;
  q35_bufs b;
  if (bufs_reserve(m, ws, &b, last > smax ? last : smax, max_ctx, 0, err)) return -1;
  int32_t done = 0;
  while (r.n - done > last) {
    q35_fwd_row p = r;
    p.tokens = r.tokens + done;
    p.n = smax;
    p.n_out = 0;
    p.logits = NULL;
    p.hidden = NULL;
    if (forward_batch(m, ws, &p, 1, err)) return -1;
    done += smax;
  }
  q35_fwd_row p = r;
  p.tokens = r.tokens + done;
  p.n = r.n - done;
  return forward_batch(m, ws, &p, 1, err);
}

/* Micro-batches of fewer tokens than this lose: a decode step is bound by streaming the stage's
 * weights, which every micro-batch does again (docs/PERF.md: on the loaded VM, N = 2 serve with 2
 * and 4 decode rows per step was 22% and 36% slower split in two than whole, even with 8). */
#define MICRO_MIN_TOKENS 4

/* A pipeline's first stage with rows and tokens enough: micro-batches. The rows go as n_micro groups of
 * contiguous rows of about equal tokens, each through this stage's layers and on down the chain
 * while this stage computes the next group (the later stages overlap). A row's results do not
 * depend on which other rows share its pass (the invariance contract), so the groups give the
 * same bits as one pass; docs/DESIGN.md "Micro-batches". */
int q35_forward(const q35_model *m, q35_fwd_ws *ws, q35_fwd_row *rows, int n_rows, q35_err *err) {
  if (n_rows < 1) return q35_seterr(err, "a step needs at least one row");
  if (n_rows == 1) {
    int32_t smax;
    if (step_max(&smax, err)) return -1;
    if (rows[0].n > smax && step_splits(m, &rows[0])) return forward_pieces(m, ws, rows, smax, err);
  }
  q35_stage_next *nx = m->next;
  int64_t T_all = 0;
  for (int r = 0; r < n_rows; r++) T_all += rows[r].n;
  if (!nx || nx->n_micro < 2 || n_rows < nx->n_micro || T_all < (int64_t)MICRO_MIN_TOKENS * nx->n_micro ||
      rows[0].x_out)
    return forward_batch(m, ws, rows, n_rows, err);
  int32_t row_start[n_rows];
  int64_t T = 0, max_ctx = 1;
  if (check_rows(m, rows, n_rows, row_start, &T, &max_ctx, err)) return -1; /* a refused step moves nothing */
  const int k = nx->n_micro;
  if (nx->micro(nx, Q35_STAGE_MICRO_BEGIN, err)) return -1;
  int rc = 0, g0 = 0;
  int64_t done = 0;
  for (int g = 0; g < k && rc == 0; g++) {
    /* group g ends where the tokens so far come closest to (g + 1) / k of the whole, leaving a
     * row for each later group */
    int g1 = g0 + 1;
    int64_t t = done + rows[g0].n;
    const double goal = (double)T * (g + 1) / k;
    while (g1 < n_rows - (k - 1 - g) && (g == k - 1 || t + rows[g1].n / 2.0 < goal)) t += rows[g1++].n;
    if (g == k - 1) g1 = n_rows;
    rc = forward_batch(m, ws, rows + g0, g1 - g0, err);
    done = t;
    g0 = g1;
  }
  q35_err e2;
  const int erc = nx->micro(nx, Q35_STAGE_MICRO_END, rc ? &e2 : err);
  return rc || erc ? -1 : 0;
}
