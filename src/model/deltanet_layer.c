/*
 * deltanet_layer.c - the Gated DeltaNet layer (every layer that is not full attention):
 *
 *   qkv = Wqkv h,  z = Wz h,  beta = sigmoid(Wbeta h),  g = ssm_a * softplus(Walpha h + dt_bias)
 *   qkv: causal depthwise conv over the last conv_kernel tokens (the session keeps the K-1 before
 *        this step), then SiLU (kernels/vec.h: fma taps, the vector exp polynomial)
 *   q, k: per-head L2 norm (q also scaled by 1/sqrt(dk))
 *   per value head: S = e^g S + beta (v - e^g S k) k^T,  o = S q   (kernels/deltanet.h)
 *   o: gated RMSNorm (RMSNorm over the head, times w, times silu(z));  out = Wout o
 *
 * Value head j reads key head j mod Hk. The conv and recurrent state live in the session
 * (conv_state, ssm_state), so a row's tokens run through them in order.
 */
#include <math.h>
#include <string.h>

#include "kernels/deltanet.h"
#include "kernels/vec.h"
#include "model/forward_internal.h"

#define CONV_KMAX 16   /* load.c's MAX_CONV_KERNEL */
#define CONV_BLOCK 256 /* channels whose transposed taps sit on the stack at once */

/* channels of the conv: q and k of every key head, v of every value head */
static int64_t conv_channels(const q35_hparams *hp) {
  return 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
}

/* An armed session (model/mtp.h): channels [cb, cb + nch) of the conv state after token i into
 * checkpoint slot i. */
static void ckpt_conv_save(const q35_session *s, int li, int32_t i, const float *st, int64_t C, int K, long cb,
                           int nch) {
  float *slot = s->ckpt_conv[li] + (size_t)i * (size_t)(K - 1) * (size_t)C;
  for (int j = 0; j < K - 1; j++) memcpy(slot + j * C + cb, st + j * C + cb, sizeof(float) * (size_t)nch);
}

/* Causal depthwise conv + SiLU. Items: channels (each runs through every row's tokens). */
static void gdn_conv(void *vctx, int ith, int nth) {
  const q35_layer_task *c = vctx;
  const q35_fwd *f = c->f;
  const q35_hparams *hp = &f->m->hp;
  const int K = hp->conv_kernel;
  const int64_t C = conv_channels(hp);
  const float *w = c->L->conv.data;
  const int li = c->L->attn_index;
  if (K < 1 || K > CONV_KMAX) return; /* load.c refuses such a file */
  long c0, c1;
  q35_split(C, ith, nth, &c0, &c1);
  /* channel blocks: the block's taps transposed once to tap-major (the vec kernel's layout),
   * then every row's tokens in order (a channel's state advances token by token) */
  float wt[CONV_KMAX * CONV_BLOCK];
  for (long cb = c0; cb < c1; cb += CONV_BLOCK) {
    const int nch = (int)(c1 - cb < CONV_BLOCK ? c1 - cb : CONV_BLOCK);
    for (int ch = 0; ch < nch; ch++)
      for (int j = 0; j < K; j++) wt[j * CONV_BLOCK + ch] = w[(size_t)(cb + ch) * K + j];
    for (int r = 0; r < f->n_rows; r++) {
      const q35_session *s = f->rows[r].s;
      float *st = s->conv_state[li]; /* [K-1][C], oldest first */
      for (int32_t i = 0; i < f->rows[r].n; i++) {
        const int64_t t = f->row_start[r] + i;
        q35_vec_conv_silu(f->b->conv + t * C + cb, st + cb, (size_t)C, f->b->qkv + t * C + cb, wt, CONV_BLOCK, K,
                          nch);
        if (i < s->ckpt_n) ckpt_conv_save(s, li, i, st, C, K, cb, nch);
      }
    }
  }
}

/* L2-normalize q and k heads (q also scaled by 1/sqrt(dk)). Items: (token, key head). */
static void gdn_qk_norm(void *vctx, int ith, int nth) {
  const q35_layer_task *c = vctx;
  const q35_fwd *f = c->f;
  const q35_hparams *hp = &f->m->hp;
  const int Hk = hp->ssm_n_group, dk = hp->ssm_d_state;
  const int64_t C = conv_channels(hp);
  const float qscale = 1.0f / sqrtf((float)dk);
  long i0, i1;
  q35_split(f->b->T * Hk * 2, ith, nth, &i0, &i1);
  for (long it = i0; it < i1; it++) {
    const long t = it / (2 * Hk);
    const int part = (int)(it % (2 * Hk)); /* 0..Hk-1: q heads, Hk..2Hk-1: k heads */
    float *x = f->b->conv + t * C + (size_t)part * dk;
    float ss = 0.0f;
    for (int i = 0; i < dk; i++) ss += x[i] * x[i];
    float sc = 1.0f / sqrtf(ss + hp->eps);
    if (part < Hk) sc *= qscale;
    for (int i = 0; i < dk; i++) x[i] *= sc;
  }
}

/* The delta rule, token by token, and the gated RMSNorm. Items: (row, value head). */
static void gdn_recur(void *vctx, int ith, int nth) {
  const q35_layer_task *c = vctx;
  const q35_fwd *f = c->f;
  const q35_bufs *b = f->b;
  const q35_hparams *hp = &f->m->hp;
  const int Hk = hp->ssm_n_group, Hv = hp->ssm_dt_rank, dk = hp->ssm_d_state, dv = hp->ssm_d_state;
  const int64_t C = conv_channels(hp);
  const float *dt_bias = c->L->dt_bias.data, *ssm_a = c->L->ssm_a.data, *nw = c->L->ssm_norm.data;
  const int li = c->L->attn_index;
  long i0, i1;
  q35_split((long)f->n_rows * Hv, ith, nth, &i0, &i1);
  const size_t in = (size_t)C + 2 * (size_t)Hv; /* a slot of saved inputs (checkpoint.c) */
  for (long it = i0; it < i1; it++) {
    const int r = (int)(it / Hv), hv = (int)(it % Hv), hk = hv % Hk;
    const q35_session *s = f->rows[r].s;
    const size_t hoff = (size_t)hv * dv * dk;
    /* armed (model/mtp.h): the row's tokens run on the spare's head region (after the first
       token the state stays there, in cache), the live state stays the state before the pass;
       q35_layer_deltanet swaps the two once every head is done */
    const float *Sin = s->ssm_state[li] + hoff;                                       /* [dv][dk] */
    float *Sout = s->ckpt_n > 0 ? s->ckpt_spare[li] + hoff : s->ssm_state[li] + hoff;
    for (int32_t i = 0; i < f->rows[r].n; i++) {
      const int64_t t = f->row_start[r] + i;
      const float *row = b->conv + t * C;
      const float *q = row + (size_t)hk * dk, *k = row + (size_t)(Hk + hk) * dk;
      const float *v = row + 2 * (size_t)Hk * dk + (size_t)hv * dv;
      const float beta = sigmoidf(b->beta[t * Hv + hv]);
      const float g = ssm_a[hv] * softplus(b->alpha[t * Hv + hv] + dt_bias[hv]);
      const float decay = expf(g);
      float *o = b->o + t * hp->ssm_d_inner + (size_t)hv * dv;
      if (i < s->ckpt_n) { /* what a rollback's replay needs of token i: this head's part of it */
        float *x = s->ckpt_in[li] + (size_t)i * in;
        if (hv < Hk) { /* key head hv's q and k (every key head is some value head's, Hv % Hk == 0) */
          memcpy(x + (size_t)hv * dk, q, sizeof(float) * (size_t)dk);
          memcpy(x + (size_t)(Hk + hv) * dk, k, sizeof(float) * (size_t)dk);
        }
        memcpy(x + 2 * (size_t)Hk * dk + (size_t)hv * dv, v, sizeof(float) * (size_t)dv);
        x[C + hv] = beta;
        x[C + Hv + hv] = decay;
      }
      q35_delta_step(Sin, Sout, dv, dk, q, k, v, beta, decay, o);
      Sin = Sout;
      /* gated RMSNorm: norm over the head, times w, times silu(z) */
      const float *z = b->z + t * hp->ssm_d_inner + (size_t)hv * dv;
      double ss = 0.0;
      for (int j = 0; j < dv; j++) ss += (double)(o[j] * o[j]);
      const float sc = 1.0f / sqrtf((float)(ss / dv) + hp->eps);
      for (int j0 = 0; j0 < dv; j0 += CONV_BLOCK) { /* silu(z) a block at a time */
        const int m = dv - j0 < CONV_BLOCK ? dv - j0 : CONV_BLOCK;
        float sz[CONV_BLOCK];
        q35_vec_silu(sz, z + j0, m);
        for (int j = 0; j < m; j++) o[j0 + j] = o[j0 + j] * sc * nw[j0 + j] * sz[j];
      }
    }
  }
}

void q35_layer_deltanet(const q35_fwd *f, const q35_layer *L) {
  const q35_hparams *hp = &f->m->hp;
  q35_bufs *b = f->b;
  const int64_t T = b->T, H = hp->n_embd, Hv = hp->ssm_dt_rank;
  q35_act xa = Q35_ACT_NONE;
  const q35_tensor *ws[4] = {&L->wqkv, &L->wz, &L->wbeta, &L->walpha};
  float *outs[4] = {b->qkv, b->z, b->beta, b->alpha};
  const int64_t lds[4] = {conv_channels(hp), hp->ssm_d_inner, Hv, Hv};
  q35_matmul_same(f->pool, ws, outs, lds, 4, &xa, b->h, H, T, b->xq);
  q35_layer_task c = {f, L};
  q35_pool_run(f->pool, gdn_conv, &c);
  pool_or_inline(f->pool, gdn_qk_norm, &c, T <= INLINE_ROWS);
  q35_pool_run(f->pool, gdn_recur, &c);
  /* armed rows ran in the spare: it becomes the live state, the live one the state before the pass */
  for (int r = 0; r < f->n_rows; r++) {
    q35_session *s = f->rows[r].s;
    if (s->ckpt_n < 1 || f->rows[r].n < 1) continue;
    float *live = s->ssm_state[L->attn_index];
    s->ssm_state[L->attn_index] = s->ckpt_spare[L->attn_index];
    s->ckpt_spare[L->attn_index] = live;
  }
  q35_matmul_f(f->pool, &L->ssm_out, b->o, hp->ssm_d_inner, T, b->tmp, H, b->xq);
}
