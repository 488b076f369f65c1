/*
 * mtp.c - the MTP head's forward pass (model/mtp.h) over its own KV cache.
 *
 * It reuses the trunk's layer code (attention_layer.c, ffn.c) on a step of one row whose
 * "session" is the head's cache: an attention layer with attn_index 0 reads k_cache[0] and
 * v_cache[0] of it. The head is a draft: its outputs never decide a token (verification does),
 * so it only needs to be a faithful copy of graph_mtp, not chunking invariant.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant.h"
#include "model/forward_internal.h"
#include "model/mtp.h"

struct q35_mtp_cache {
  q35_session s;       /* k_cache[0] / v_cache[0], params, pos: what the attention layer reads */
  void *k, *v;
  void *kp[1], *vp[1];
  float *cat;          /* [cap][2H] the concatenated inputs of eh_proj */
  int32_t cat_cap;
};

q35_mtp_cache *q35_mtp_cache_new(q35_model *m, int32_t n_ctx, int kv_type, q35_err *err) {
  if (!m->has_mtp) {
    q35_seterr(err, "the model file has no MTP head (nextn_predict_layers = 0)");
    return NULL;
  }
  if (n_ctx < 1) {
    q35_seterr(err, "MTP cache: context size %d is out of range", n_ctx);
    return NULL;
  }
  q35_mtp_cache *c = calloc(1, sizeof *c);
  if (!c) goto oom;
  const int64_t width = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
  c->s.model = m;
  c->s.params.n_ctx = n_ctx;
  c->s.params.kv_type = kv_type;
  c->s.kv_row_bytes = q35_row_size(kv_type, width);
  const size_t bytes = c->s.kv_row_bytes * (size_t)n_ctx;
  c->k = q35_alloc64(bytes, 0);
  c->v = q35_alloc64(bytes, 0);
  if (!c->k || !c->v) goto oom;
  c->kp[0] = c->k;
  c->vp[0] = c->v;
  c->s.k_cache = c->kp;
  c->s.v_cache = c->vp;
  c->s.bytes = 2 * bytes;
  return c;
oom:
  q35_mtp_cache_free(c);
  q35_seterr(err, "out of memory allocating the MTP head's KV cache (context %d)", n_ctx);
  return NULL;
}

void q35_mtp_cache_free(q35_mtp_cache *c) {
  if (!c) return;
  free(c->k);
  free(c->v);
  free(c->cat);
  free(c);
}

int32_t q35_mtp_cache_pos(const q35_mtp_cache *c) { return c->s.pos; }

void q35_mtp_cache_truncate(q35_mtp_cache *c, int32_t pos) {
  if (pos >= 0 && pos < c->s.pos) c->s.pos = pos;
}

static int cat_reserve(q35_mtp_cache *c, int32_t n, int64_t H, q35_err *err) {
  if (n <= c->cat_cap) return 0;
  free(c->cat);
  c->cat = q35_alloc64((size_t)n * 2 * (size_t)H * sizeof(float), 0);
  c->cat_cap = c->cat ? n : 0;
  return c->cat ? 0 : q35_seterr(err, "out of memory (MTP inputs for %d tokens)", n);
}

/* cat[t] = [enorm(embed(tokens[t])) | hnorm(hidden[t])] */
static void head_inputs(const q35_model *m, const q35_bufs *b, float *cat, const int32_t *tokens, const float *hidden,
                        int32_t n) {
  const q35_mtp *h = &m->mtp;
  const int H = m->hp.n_embd;
  for (int32_t t = 0; t < n; t++) {
    float *e = b->tmp + (size_t)t * H;
    q35_dequantize_row(h->embd.type, (const char *)h->embd.data + (size_t)tokens[t] * h->embd.nb1, e, H);
    rmsnorm(cat + (size_t)t * 2 * H, e, h->enorm.data, H, m->hp.eps);
    rmsnorm(cat + (size_t)t * 2 * H + H, hidden + (size_t)t * H, h->hnorm.data, H, m->hp.eps);
  }
}

static void norm_rows(float *dst, const float *src, const float *w, int64_t T, int H, float eps) {
  for (int64_t t = 0; t < T; t++) rmsnorm(dst + t * H, src + t * H, w, H, eps);
}

static void add_rows(float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

int q35_mtp_forward(const q35_model *m, q35_fwd_ws *ws, q35_mtp_cache *c, const int32_t *tokens, const float *hidden,
                    int32_t n, int32_t n_head_vocab, float *logits, float *g_out, q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd, V = hp->n_vocab;
  if (!m->has_mtp) return q35_seterr(err, "the model file has no MTP head");
  if (n < 1) return q35_seterr(err, "MTP: no tokens");
  if (n_head_vocab < 0 || n_head_vocab > V)
    return q35_seterr(err, "MTP: draft vocabulary %d is out of range [0, %d]", n_head_vocab, V);
  if ((int64_t)c->s.pos + n > c->s.params.n_ctx)
    return q35_seterr(err, "MTP: %d tokens at position %d exceed its context of %d", n, c->s.pos, c->s.params.n_ctx);
  for (int32_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V) return q35_seterr(err, "MTP: token id %d is out of range [0, %d)", tokens[i], V);
  q35_bufs b;
  if (cat_reserve(c, n, H, err) || q35_fwd_bufs_reserve(m, ws, &b, n, c->s.params.n_ctx, err)) return -1;
  q35_fwd_row row = {&c->s, tokens, n, 1, logits, NULL, NULL, NULL};
  const int32_t row_start = 0;
  const q35_fwd f = {m, ws->pool, &b, &row, &row_start, 1};
  for (int32_t t = 0; t < n; t++) {
    b.row_of[t] = 0;
    b.pos_of[t] = c->s.pos + t;
  }
  head_inputs(m, &b, c->cat, tokens, hidden, n);
  q35_matmul_f(ws->pool, &m->mtp.eh_proj, c->cat, 2 * (int64_t)H, n, b.x, H, b.xq);
  const q35_layer *L = &m->mtp.layer;
  norm_rows(b.h, b.x, L->attn_norm.data, n, H, hp->eps);
  q35_layer_attention(&f, L);
  add_rows(b.x, b.tmp, (int64_t)n * H);
  norm_rows(b.h, b.x, L->post_norm.data, n, H, hp->eps);
  if (hp->is_moe) q35_layer_moe(&f, L);
  else q35_layer_dense_ffn(&f, L);
  add_rows(b.x, b.tmp, (int64_t)n * H);
  c->s.pos += n;
  float *g = b.h; /* the last pair's head-normed state, then the output matrix on it */
  rmsnorm(g, b.x + (size_t)(n - 1) * H, m->mtp.head_norm.data, H, hp->eps);
  if (g_out) memcpy(g_out, g, sizeof(float) * (size_t)H);
  q35_tensor head = m->mtp.head; /* its first n_head_vocab rows */
  if (n_head_vocab) head.ne[1] = n_head_vocab;
  q35_matmul_f(ws->pool, &head, g, H, 1, logits, head.ne[1], b.xq);
  return 0;
}
