/*
 * reference.c - q35_sample_ref, the sort-based reference twin of q35_sample: it sorts the row
 * and follows the contract (docs/SAMPLING.md) step by step, so it is easy to check against the
 * text. It shares with the fast path only what makes the two agree bit for bit (the recipe at
 * the top of sampler.c): the penalties, the exp, the fixed-point weights and thresholds, and
 * the log-sum-exp of the logprobs.
 */
#include <stdlib.h>

#include "sample/sample_internal.h"

static int cmp_vid_desc(const void *a, const void *b) {
  const vid *x = a, *y = b;
  if (x->v > y->v) return -1;
  if (x->v < y->v) return 1;
  return (x->id > y->id) - (x->id < y->id);
}
static int cmp_vid_id(const void *a, const void *b) {
  const vid *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

/* 5. top-p by value over b[0..n) (weights w with ids; sorted here): walk groups of equal w in
 * descending order; v* is the last group whose mass strictly before it is <= thr. */
static float ref_top_p_cut(vid *b, int32_t n, float top_p, u128 t1) {
  qsort(b, (size_t)n, sizeof *b, cmp_vid_desc);
  u128 thr = thr_topp(top_p, t1), s = 0;
  float vstar = b[0].v;
  for (int32_t j = 0; j < n;) {
    int32_t g = j;
    u128 gm = 0;
    while (g < n && b[g].v == b[j].v) gm += fix_w(b[g++].v);
    if (s > thr) break;
    vstar = b[j].v;
    s += gm;
    j = g;
  }
  return vstar;
}

/* Steps 2-7 on the penalized row l (maximum m, temperature > 0): the token. */
static int32_t ref_filter_draw(q35_sampler *ws, const float *l, int32_t V, float m,
                               const q35_sampling *p) {
  /* 2. s = (l - max) / T; sort descending, ties by id */
  vid *a = ws->pairs;
  for (int32_t i = 0; i < V; i++) {
    a[i].v = (l[i] - m) / p->temperature;
    a[i].id = i;
  }
  qsort(a, (size_t)V, sizeof *a, cmp_vid_desc);
  /* 3. top-k with ties kept */
  int32_t K = (p->top_k <= 0 || p->top_k >= V) ? V : (int32_t)p->top_k;
  float kth = a[K - 1].v;
  int32_t n1 = K;
  while (n1 < V && a[n1].v >= kth) n1++;
  /* 4. w = exp(s), fixed-point total */
  vid *b = ws->pairs2;
  u128 t1 = 0;
  float wmax = 0.0f;
  for (int32_t j = 0; j < n1; j++) {
    b[j].v = sample_exp(a[j].v);
    b[j].id = a[j].id;
    t1 += fix_w(b[j].v);
    if (b[j].v > wmax) wmax = b[j].v;
  }
  /* 5. top-p */
  float cut = p->top_p < 1.0f ? ref_top_p_cut(b, n1, p->top_p, t1) : 0.0f;
  /* 6. min-p */
  if (p->min_p > 0.0f && p->min_p * wmax > cut) cut = p->min_p * wmax;
  /* 7. draw over the survivors in ascending id */
  int32_t n2 = 0;
  for (int32_t j = 0; j < n1; j++)
    if (b[j].v >= cut) b[n2++] = b[j];
  qsort(b, (size_t)n2, sizeof *b, cmp_vid_id);
  u128 t2 = 0;
  for (int32_t j = 0; j < n2; j++) t2 += fix_w(b[j].v);
  u128 thr = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  for (int32_t j = 0; j < n2; j++) {
    r += fix_w(b[j].v);
    if (r > thr) return b[j].id;
  }
  return b[n2 - 1].id;
}

/* Logprobs, the alternatives by sorting the row (independent of the fast path's scan). */
static void ref_logprobs(q35_sampler *ws, const float *l, int32_t V, float m, int32_t tok,
                         int32_t n_top, q35_sample_result *out) {
  out->n_top = 0;
  out->logprob = NAN;
  if (n_top < 0) return;
  double lse = sample_row_lse(ws, l, V, m);
  out->logprob = (float)((double)l[tok] - lse);
  vid *a = ws->pairs;
  for (int32_t i = 0; i < V; i++) {
    a[i].v = l[i];
    a[i].id = i;
  }
  qsort(a, (size_t)V, sizeof *a, cmp_vid_desc);
  out->n_top = n_top < V ? n_top : V;
  for (int32_t j = 0; j < out->n_top; j++) {
    out->top_ids[j] = a[j].id;
    out->top_logprobs[j] = (float)((double)a[j].v - lse);
  }
}

int q35_sample_ref(q35_sampler *ws, const float *logits, int32_t n_vocab, const q35_sampling *p,
                   const int32_t *history, int32_t n_history, int32_t n_prompt, int32_t n_top,
                   q35_sample_result *out, q35_err *err) {
  if (sample_check_inputs(ws, logits, n_vocab, p, history, n_history, n_prompt, n_top, out, err))
    return -1;
  const int32_t V = n_vocab;
  /* 0. penalties */
  for (int32_t i = 0; i < V; i++) {
    float x = logits[i];
    if (x != x || x == INFINITY) return sample_row_error(err, logits, i, 0);
  }
  sample_apply_penalties(ws, logits, V, p, history, n_history, n_prompt);
  const float *l = ws->lp;
  float m = -INFINITY;
  for (int32_t i = 0; i < V; i++) {
    if (l[i] != l[i] || l[i] == INFINITY) return sample_row_error(err, l, i, 1);
    if (l[i] > m) m = l[i];
  }
  if (m == -INFINITY) return q35_seterr(err, "logits: all %d entries are -inf", (int)V);
  int32_t tok = -1;
  if (p->temperature == 0.0f) {
    /* 1. greedy: lowest id holding the maximum */
    for (int32_t i = 0; i < V && tok < 0; i++)
      if (l[i] == m) tok = i;
  } else {
    tok = ref_filter_draw(ws, l, V, m, p);
  }
  out->token = tok;
  ref_logprobs(ws, l, V, m, tok, n_top, out);
  return 0;
}
