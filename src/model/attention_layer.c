/*
 * attention_layer.c - the gated full-attention layer (every full_attention_interval-th layer):
 *
 *   [q | gate] = Wq h,  k = Wk h,  v = Wv h
 *   q, k: per-head RMSNorm, then partial NeoX RoPE over the first n_rot dims
 *   k, v stored at the token's position in the session's KV cache (F32, F16 or Q8_0)
 *   o_h = softmax(q_h . K / sqrt(hd)) V   over positions 0..pos (kernels/attn.h)
 *   out = Wo (o * sigmoid(gate))
 *
 * Grouped-query attention: query head h reads KV head h / (n_head / n_head_kv).
 */
#include <math.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/quant.h"
#include "model/forward_internal.h"

/* The RoPE tables of one position hold n_rot / 2 <= head_dim / 2 angles. */
#define ROPE_MAX_PAIRS (Q35_ATTN_MAX_HEAD_DIM / 2)

static int kv_elem_type(int kv_type) {
  return kv_type == Q35_KV_F32 ? Q35_TYPE_F32 : kv_type == Q35_KV_F16 ? Q35_TYPE_F16 : Q35_TYPE_Q8_0;
}

static void kv_store(int kv_type, const float *src, void *dst, int64_t n) {
  if (kv_type == Q35_KV_F32) memcpy(dst, src, (size_t)n * 4);
  else q35_quantize_row(kv_elem_type(kv_type), src, dst, n);
}

/* q/k RMSNorm + partial NeoX RoPE; store k, v into the cache. Items: tokens. */
static void attn_prep(void *vctx, int ith, int nth) {
  const q35_layer_task *c = vctx;
  const q35_fwd *f = c->f;
  const q35_bufs *b = f->b;
  const q35_hparams *hp = &f->m->hp;
  const int nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, nrot = hp->n_rot;
  const float theta_scale = powf(hp->rope_theta, -2.0f / (float)nrot);
  long t0, t1;
  q35_split(b->T, ith, nth, &t0, &t1);
  float cosv[ROPE_MAX_PAIRS], sinv[ROPE_MAX_PAIRS];
  for (long t = t0; t < t1; t++) {
    const int pos = b->pos_of[t];
    float theta = (float)pos;
    for (int j = 0; j < nrot / 2; j++) {
      cosv[j] = cosf(theta);
      sinv[j] = sinf(theta);
      theta *= theta_scale;
    }
    for (int h = 0; h < nh + nkv; h++) {
      float *x = h < nh ? b->qg + ((size_t)t * nh + h) * 2 * hd : b->k + ((size_t)t * nkv + (h - nh)) * hd;
      rmsnorm(x, x, h < nh ? c->L->q_norm.data : c->L->k_norm.data, hd, hp->eps);
      for (int j = 0; j < nrot / 2; j++) {
        const float a = x[j], bb = x[j + nrot / 2];
        x[j] = a * cosv[j] - bb * sinv[j];
        x[j + nrot / 2] = bb * cosv[j] + a * sinv[j];
      }
    }
    q35_session *s = f->rows[b->row_of[t]].s;
    const int kvt = s->params.kv_type;
    const int li = c->L->attn_index;
    kv_store(kvt, b->k + (size_t)t * nkv * hd, (char *)s->k_cache[li] + (size_t)pos * s->kv_row_bytes,
             (int64_t)nkv * hd);
    kv_store(kvt, b->v + (size_t)t * nkv * hd, (char *)s->v_cache[li] + (size_t)pos * s->kv_row_bytes,
             (int64_t)nkv * hd);
  }
}

/* Items [i0, i1) (item = token * nkv + KV head) for thread ith of nth, balanced by work: an
 * item reads pos + 1 cache rows, so an even split of the items of a causal prompt would leave
 * the last thread the longest contexts (3/4 of the work at 2 threads). ATTN_ITEM_BASE stands
 * for an item's fixed costs (query conversion, gate). Any split gives the same results: items
 * are independent. */
#define ATTN_ITEM_BASE 64
static uint64_t attn_item_work(const q35_bufs *b, long it, long nkv) {
  return (uint64_t)b->pos_of[it / nkv] + 1 + ATTN_ITEM_BASE;
}

static void attn_split(const q35_bufs *b, long nkv, int ith, int nth, long *i0, long *i1) {
  const long n = b->T * nkv;
  uint64_t total = 0;
  for (long it = 0; it < n; it++) total += attn_item_work(b, it, nkv);
  const uint64_t lo = total * (uint64_t)ith / (uint64_t)nth, hi = total * (uint64_t)(ith + 1) / (uint64_t)nth;
  /* thread k's first item: the first whose preceding work is >= k total / nth */
  uint64_t acc = 0;
  long it = 0;
  for (; it < n && acc < lo; it++) acc += attn_item_work(b, it, nkv);
  *i0 = it;
  for (; it < n && acc < hi; it++) acc += attn_item_work(b, it, nkv);
  *i1 = ith == nth - 1 ? n : it;
}

/* Scores, softmax, weighted V (kernels/attn.h), output gate. Items: (token, KV head); the query
 * heads of one group share each K/V row load, and the items of one KV head at up to att_jobs
 * consecutive tokens of one session run in one q35_attn_many (sharing each K/V block's
 * conversion). Every item gets the same bits however the items are grouped. */
static void attn_core(void *vctx, int ith, int nth) {
  const q35_layer_task *c = vctx;
  const q35_fwd *f = c->f;
  const q35_bufs *b = f->b;
  const q35_hparams *hp = &f->m->hp;
  const int nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, grp = nh / nkv;
  const float scale = 1.0f / sqrtf((float)hd);
  const int nj = b->att_jobs;
  const size_t slot = b->att_stride / (size_t)nj;
  long i0, i1;
  attn_split(b, nkv, ith, nth, &i0, &i1);
  if (i0 >= i1) return;
  q35_attn_job job[Q35_ATTN_JOBS];
  long tok[Q35_ATTN_JOBS];
  const int li = c->L->attn_index;
  for (long ta = i0 / nkv, tl = (i1 - 1) / nkv; ta <= tl;) {
    /* tokens [ta, tb): at most nj, one session */
    long tb = ta + 1;
    while (tb <= tl && tb - ta < nj && b->row_of[tb] == b->row_of[ta]) tb++;
    const q35_session *s = f->rows[b->row_of[ta]].s;
    const int etype = kv_elem_type(s->params.kv_type);
    for (int g = 0; g < nkv; g++) {
      const size_t kv_off = q35_row_size(etype, (int64_t)g * hd);
      int n = 0;
      for (long t = ta; t < tb; t++) {
        const long it = t * nkv + g;
        if (it < i0 || it >= i1) continue;
        /* this slot's [grp][max_ctx] scores, [grp][hd] accumulators, [grp][hd] converted queries */
        float *sc = b->att + (size_t)ith * b->att_stride + (size_t)n * slot;
        float *acc = sc + (size_t)grp * b->max_ctx;
        float *qq = acc + (size_t)grp * hd;
        const float *q0 = b->qg + ((size_t)t * nh + (size_t)g * grp) * 2 * hd;
        const q35_attn_job jt = {hd, grp, b->pos_of[t] + 1, etype, (const char *)s->k_cache[li] + kv_off,
                                 (const char *)s->v_cache[li] + kv_off, s->kv_row_bytes, q0, (size_t)2 * hd,
                                 scale, sc, (size_t)b->max_ctx, qq, acc, (size_t)hd};
        job[n] = jt;
        tok[n++] = t;
      }
      if (!n) continue;
      q35_attn_many(job, n);
      for (int u = 0; u < n; u++)
        for (int h = 0; h < grp; h++) {
          const float *gate = job[u].q + (size_t)h * 2 * hd + hd;
          float *o = b->o + ((size_t)tok[u] * nh + (size_t)g * grp + h) * hd;
          const float *a = job[u].out + (size_t)h * hd;
          for (int i = 0; i < hd; i++) o[i] = a[i] * sigmoidf(gate[i]);
        }
    }
    ta = tb;
  }
}

void q35_layer_attention(const q35_fwd *f, const q35_layer *L) {
  const q35_hparams *hp = &f->m->hp;
  q35_bufs *b = f->b;
  const int64_t T = b->T, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
  q35_act xa = Q35_ACT_NONE;
  const q35_tensor *ws[3] = {&L->wq, &L->wk, &L->wv};
  float *ys[3] = {b->qg, b->k, b->v};
  const int64_t lds[3] = {nh * 2 * hd, nkv * hd, nkv * hd};
  q35_matmul_same(f->pool, ws, ys, lds, 3, &xa, b->h, hp->n_embd, T, b->xq);
  q35_layer_task c = {f, L};
  pool_or_inline(f->pool, attn_prep, &c, T <= INLINE_ROWS);
  q35_pool_run(f->pool, attn_core, &c);
  q35_matmul_f(f->pool, &L->wo, b->o, nh * hd, T, b->tmp, hp->n_embd, b->xq);
}
