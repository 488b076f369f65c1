/*
 * mtp.c - the MTP head's forward pass (model/mtp.h) over its own KV cache.
 *
 * It reuses the trunk's layer code (attention_layer.c, ffn.c) on a step whose rows' "sessions"
 * are head caches: an attention layer with attn_index 0 reads k_cache[0] and v_cache[0] of each.
 * The head is a draft: its outputs never decide a token (verification does), so exactness does
 * not depend on it; it is still chunking and batch invariant like the trunk (the same layer
 * code), so a session's drafts do not depend on how its pairs were grouped into passes (a
 * restored snapshot drafts exactly as the session it was taken from).
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant.h"
#include "model/forward_internal.h"
#include "model/mtp.h"

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
  c->draft_vocab = m->hp.n_vocab;
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
  free(c->pend_h);
  free(c->pend_t);
  free(c);
}

int32_t q35_mtp_cache_pos(const q35_mtp_cache *c) { return c->s.pos; }

uint64_t q35_mtp_cache_bytes(const q35_model *m, int32_t n_ctx, int kv_type) {
  return 2 * (uint64_t)q35_row_size(kv_type, (int64_t)m->hp.n_head_kv * m->hp.head_dim) * (uint64_t)n_ctx;
}

/* The skipped entries [zpos, pos) written (zeros), before the head reads or writes the cache. */
static void zero_skipped(q35_mtp_cache *c) {
  if (c->zpos >= c->s.pos) return;
  const size_t at = (size_t)c->zpos * c->s.kv_row_bytes, len = (size_t)(c->s.pos - c->zpos) * c->s.kv_row_bytes;
  memset((char *)c->k + at, 0, len);
  memset((char *)c->v + at, 0, len);
  c->zpos = c->s.pos;
}

void q35_mtp_cache_set_pos(q35_mtp_cache *c, int32_t pos) {
  if (pos > c->s.pos) { /* the entries from s.pos on stay: those before it that are skipped get their zeros */
    zero_skipped(c);
    c->zpos = pos;
  } else if (c->zpos > pos) {
    c->zpos = pos;
  }
  c->s.pos = pos;
}

void q35_mtp_cache_truncate(q35_mtp_cache *c, int32_t pos) {
  if (pos >= 0 && pos < c->s.pos) q35_mtp_cache_set_pos(c, pos);
}

void q35_mtp_cache_skip(q35_mtp_cache *c, int32_t n) {
  if (n <= 0) return;
  if (n > c->s.params.n_ctx - c->s.pos) n = c->s.params.n_ctx - c->s.pos;
  c->s.pos += n; /* [zpos, s.pos): zeros, written by zero_skipped */
}

static int cat_reserve(q35_fwd_ws *ws, int64_t T, int64_t H, q35_err *err) {
  const size_t need = (size_t)T * 2 * (size_t)H;
  if (need <= ws->mtp_cat_cap) return 0;
  free(ws->mtp_cat);
  ws->mtp_cat = q35_alloc64(need * sizeof(float), 0);
  ws->mtp_cat_cap = ws->mtp_cat ? need : 0;
  return ws->mtp_cat ? 0 : q35_seterr(err, "out of memory (MTP inputs for %lld tokens)", (long long)T);
}

/* cat[t] = [enorm(embed(tokens[t])) | hnorm(hidden[t])] for n pairs; e: n_embd floats of scratch */
static void head_inputs(const q35_model *m, float *e, float *cat, const int32_t *tokens, const float *hidden,
                        int32_t n) {
  const q35_mtp *h = &m->mtp;
  const int H = m->hp.n_embd;
  for (int32_t t = 0; t < n; t++) {
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

#define MTP_MAX_ROWS 256 /* rows of one head pass (a step's rows: q35_context_step's limit) */

static int forward_rows(const q35_model *m, q35_fwd_ws *ws, q35_mtp_row *rows, int n_rows, int32_t n_head_vocab,
                        q35_err *err);

int q35_mtp_forward_rows(const q35_model *m, q35_fwd_ws *ws, q35_mtp_row *rows, int n_rows, int32_t n_head_vocab,
                         q35_err *err) {
  if (n_rows < 1) return q35_seterr(err, "MTP: no rows");
  if (n_rows <= MTP_MAX_ROWS) return forward_rows(m, ws, rows, n_rows, n_head_vocab, err);
  for (int q = 0; q < n_rows; q++) /* then passes of MTP_MAX_ROWS rows (the same numbers) */
    for (int r = 0; r < q; r++)
      if (rows[r].c == rows[q].c) return q35_seterr(err, "MTP: rows %d and %d name the same cache", r, q);
  for (int r0 = 0; r0 < n_rows; r0 += MTP_MAX_ROWS)
    if (forward_rows(m, ws, rows + r0, n_rows - r0 < MTP_MAX_ROWS ? n_rows - r0 : MTP_MAX_ROWS, n_head_vocab, err))
      return -1;
  return 0;
}

static int forward_rows(const q35_model *m, q35_fwd_ws *ws, q35_mtp_row *rows, int n_rows, int32_t n_head_vocab,
                        q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd, V = hp->n_vocab;
  if (!m->has_mtp) return q35_seterr(err, "the model file has no MTP head");
  if (n_head_vocab < 0 || n_head_vocab > V)
    return q35_seterr(err, "MTP: draft vocabulary %d is out of range [0, %d]", n_head_vocab, V);
  int64_t T = 0, max_ctx = 1;
  for (int r = 0; r < n_rows; r++) {
    const q35_mtp_cache *c = rows[r].c;
    if (rows[r].n < 1) return q35_seterr(err, "MTP: row %d has no tokens", r);
    if ((int64_t)c->s.pos + rows[r].n > c->s.params.n_ctx)
      return q35_seterr(err, "MTP: %d tokens at position %d exceed its context of %d", rows[r].n, c->s.pos,
                        c->s.params.n_ctx);
    for (int32_t i = 0; i < rows[r].n; i++)
      if (rows[r].tokens[i] < 0 || rows[r].tokens[i] >= V)
        return q35_seterr(err, "MTP: token id %d is out of range [0, %d)", rows[r].tokens[i], V);
    for (int q = 0; q < r; q++)
      if (rows[q].c == c) return q35_seterr(err, "MTP: rows %d and %d name the same cache", q, r);
    T += rows[r].n;
    if (c->s.params.n_ctx > max_ctx) max_ctx = c->s.params.n_ctx;
  }
  q35_bufs b;
  int n_want = 0;
  for (int r = 0; r < n_rows; r++) n_want += rows[r].logits != NULL;
  if (cat_reserve(ws, T, H, err) || q35_fwd_bufs_reserve(m, ws, &b, T, max_ctx, n_want > 1, err)) return -1;
  q35_fwd_row fr[MTP_MAX_ROWS];
  int32_t row_start[MTP_MAX_ROWS];
  int64_t t0 = 0;
  for (int r = 0; r < n_rows; r++) {
    q35_mtp_cache *c = rows[r].c;
    zero_skipped(c);
    fr[r] = (q35_fwd_row){&c->s, rows[r].tokens, rows[r].n, 1, NULL, NULL, NULL, NULL};
    row_start[r] = (int32_t)t0;
    for (int32_t i = 0; i < rows[r].n; i++) {
      b.row_of[t0 + i] = r;
      b.pos_of[t0 + i] = c->s.pos + i;
    }
    head_inputs(m, b.tmp, ws->mtp_cat + (size_t)t0 * 2 * H, rows[r].tokens, rows[r].hidden, rows[r].n);
    t0 += rows[r].n;
  }
  const q35_fwd f = {m, ws->pool, &b, fr, row_start, n_rows};
  q35_matmul_f(ws->pool, &m->mtp.eh_proj, ws->mtp_cat, 2 * (int64_t)H, T, b.x, H, b.xq);
  const q35_layer *L = &m->mtp.layer;
  norm_rows(b.h, b.x, L->attn_norm.data, T, H, hp->eps);
  q35_layer_attention(&f, L);
  add_rows(b.x, b.tmp, T * H);
  /* The attention layer has written every pair's K and V into the head's cache: that is all a
   * pair other than a row's last one is for (a round's first draft takes in the pairs the round
   * before emitted, only the last one's logits are drafted from), and nothing after this point
   * reaches the cache. So the FFN and the rest run on the last pair of each row that wants
   * logits only, gathered into the first G rows of b.x in row order (row r's last pair is at
   * or after position G, so no source is overwritten before it is read). A token's FFN output
   * does not depend on the other tokens of the pass (the layer code is batch invariant), so the
   * logits keep their bits; a pass of 3 pairs reads one token's experts, not the union of 3. */
  int64_t G = 0;
  for (int r = 0; r < n_rows; r++) {
    rows[r].c->s.pos += rows[r].n;
    rows[r].c->zpos = rows[r].c->s.pos;
    if (!rows[r].logits) continue;
    const int64_t last = row_start[r] + rows[r].n - 1;
    if (last != G) memcpy(b.x + G * H, b.x + last * H, sizeof(float) * (size_t)H);
    G++;
  }
  if (G == 0) return 0;
  b.T = G;
  norm_rows(b.h, b.x, L->post_norm.data, G, H, hp->eps);
  if (hp->is_moe) q35_layer_moe(&f, L);
  else q35_layer_dense_ffn(&f, L);
  add_rows(b.x, b.tmp, G * H);
  /* the head-normed state g of each of those pairs into b.h (column g), then the output matrix's
   * first n_head_vocab rows on those columns */
  for (int r = 0, g = 0; r < n_rows; r++) {
    if (!rows[r].logits) continue;
    float *gv = b.h + (int64_t)g * H;
    rmsnorm(gv, b.x + (int64_t)g * H, m->mtp.head_norm.data, H, hp->eps);
    if (rows[r].g_out) memcpy(rows[r].g_out, gv, sizeof(float) * (size_t)H);
    g++;
  }
  q35_tensor head = m->mtp.head; /* its first n_head_vocab rows */
  if (n_head_vocab) head.ne[1] = n_head_vocab;
  const int64_t K = head.ne[1];
  if (G == 1) { /* straight into the row's buffer */
    for (int r = 0; r < n_rows; r++)
      if (rows[r].logits) q35_matmul_f(ws->pool, &head, b.h, H, 1, rows[r].logits, K, b.xq);
    return 0;
  }
  /* several: groups of Q35_LG_COLS columns through the joint output buffer b.lg */
  int r = 0;
  for (int64_t g0 = 0; g0 < G; g0 += Q35_LG_COLS) {
    const int64_t cnt = G - g0 < Q35_LG_COLS ? G - g0 : Q35_LG_COLS;
    q35_matmul_f(ws->pool, &head, b.h + g0 * H, H, cnt, b.lg, K, b.xq);
    for (int64_t c = 0; c < cnt; c++, r++) {
      while (!rows[r].logits) r++;
      memcpy(rows[r].logits, b.lg + c * K, sizeof(float) * (size_t)K);
    }
  }
  return 0;
}

int q35_mtp_forward(const q35_model *m, q35_fwd_ws *ws, q35_mtp_cache *c, const int32_t *tokens, const float *hidden,
                    int32_t n, int32_t n_head_vocab, float *logits, float *g_out, q35_err *err) {
  q35_mtp_row row = {c, tokens, hidden, n, logits, g_out};
  if (!logits) return q35_seterr(err, "MTP: no logits buffer");
  return q35_mtp_forward_rows(m, ws, &row, 1, n_head_vocab, err);
}
