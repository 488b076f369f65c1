/*
 * top_k.c - the fast path on candidate lists: rows with top-k, and rows with min-p alone.
 * Neither sorts the vocabulary: a threshold filter (one SIMD pass) collects candidates that
 * provably contain every survivor, quickselect finds the k-th largest among them, and
 * sample_list runs the remaining steps (exp, top-p by selection, min-p, the draw) on the
 * short list in ascending id.
 */
#include "sample/sample_internal.h"

#define SELECT_SORT_MAX 16     /* quickselect: sort ranges this small */
#define TOPK_SAMPLE_FROM 4096  /* top-k: threshold from a sample for rows larger than this */
#define TOPK_SAMPLE 1024       /* its sample size */
#define TOPK_OVERSAMPLE 2      /* its threshold passes about this many times K candidates */
#define TOPK_SAFETY 2          /* ... plus this many sampled ranks */
#define MINP_LOG_MARGIN 0.05   /* min-p alone: candidates s >= log(min_p) - margin */

/* k-th largest (1-based) of a[0..n) by quickselect; reorders a. */
static float select_kth_largest(float *a, int32_t n, int32_t k) {
  int32_t lo = 0, hi = n - 1, want = k - 1;
  while (hi - lo > SELECT_SORT_MAX) {
    /* median of three as pivot; three-way partition keeps ties together */
    float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
    float piv = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
    int32_t lt = lo, i = lo, gt = hi;
    while (i <= gt) { /* [lo, lt) > piv, [lt, i) == piv, (gt, hi] < piv */
      if (a[i] > piv) {
        float t = a[i]; a[i] = a[lt]; a[lt] = t; lt++; i++;
      } else if (a[i] < piv) {
        float t = a[i]; a[i] = a[gt]; a[gt] = t; gt--;
      } else {
        i++;
      }
    }
    if (want < lt) hi = lt - 1;
    else if (want > gt) lo = gt + 1;
    else return piv;
  }
  sample_sort_desc_floats(a + lo, hi - lo + 1);
  return a[want];
}


/* The steps after top-k on an ascending list of candidate ids whose s = (l - m) / T values
 * are in s[0..n) (every top-k survivor is in the list; entries with s < kth are dropped). */
static int32_t sample_list(q35_sampler *ws, const q35_sampling *p, int32_t *ids, float *s,
                           int32_t n, float kth) {
  int32_t c = 0;
  for (int32_t j = 0; j < n; j++)
    if (s[j] >= kth) {
      ids[c] = ids[j];
      s[c++] = s[j];
    }
  n = c;
  float *w = ws->w;
  k_exp_array(ws->simd, s, w, n);
  u128 t1 = 0;
  float wmax = 0.0f;
  for (int32_t j = 0; j < n; j++) {
    t1 += fix_w(w[j]);
    if (w[j] > wmax) wmax = w[j];
  }
  float cut = 0.0f;
  if (p->top_p < 1.0f)
    cut = sample_select_vstar(ws, w, n, t1, thr_topp(p->top_p, t1), ws->tmp, ws->tmp2);
  if (p->min_p > 0.0f && p->min_p * wmax > cut) cut = p->min_p * wmax;
  u128 t2 = 0;
  int32_t last = -1;
  for (int32_t j = 0; j < n; j++)
    if (w[j] >= cut) {
      t2 += fix_w(w[j]);
      last = j;
    }
  u128 thr = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  for (int32_t j = 0; j < n; j++)
    if (w[j] >= cut) {
      r += fix_w(w[j]);
      if (r > thr) return ids[j];
    }
  return ids[last];
}

/* Top-k (K < V): candidates l >= t with t from a strided sample, so that at least K pass. */
int32_t sample_top_k(q35_sampler *ws, const float *l, int32_t V, float m, const q35_sampling *p,
                     int32_t K) {
  const float T = p->temperature;
  float t = -INFINITY;
  if (V > TOPK_SAMPLE_FROM) {
    float *samp = ws->tmp;
    int32_t ms = TOPK_SAMPLE;
    for (int32_t j = 0; j < ms; j++) samp[j] = l[(int64_t)j * V / ms];
    int64_t r = ((int64_t)K * ms * TOPK_OVERSAMPLE + V - 1) / V + TOPK_SAFETY;
    if (r < ms) t = select_kth_largest(samp, ms, (int32_t)r);
  }
  int32_t *ids = ws->ids;
  float *cv = ws->s;
  int32_t nc;
  float kth;
  for (;;) {
    nc = k_filter_ge(ws, l, V, t, ids);
    if (nc >= K) {
      for (int32_t j = 0; j < nc; j++) cv[j] = l[ids[j]];
      float kth_l = select_kth_largest(cv, nc, K);
      kth = (kth_l - m) / T;
      /* entries below t have s <= s(pred t) by monotonicity; all excluded if < kth */
      if (t == -INFINITY || (nextafterf(t, -INFINITY) - m) / T < kth) break;
    }
    t = -INFINITY;
  }
  for (int32_t j = 0; j < nc; j++) cv[j] = (l[ids[j]] - m) / T;
  return sample_list(ws, p, ids, cv, nc, kth);
}

/* Min-p alone (keep-all, top_p = 1): only entries with exp(s) >= min_p can survive;
 * s >= log(min_p) - MINP_LOG_MARGIN holds for all of them (the exp is accurate to a few ulp),
 * i.e. l >= m + T (log min_p - margin) up to rounding, which the margin absorbs. */
int32_t sample_min_p_only(q35_sampler *ws, const float *l, int32_t V, float m,
                          const q35_sampling *p) {
  const float T = p->temperature;
  double lt = (double)m + (double)T * (log((double)p->min_p) - MINP_LOG_MARGIN);
  float t = lt < FLOAT_RANGE_LO ? -INFINITY : (float)lt;
  if ((float)lt > lt) t = nextafterf(t, -INFINITY);
  int32_t *ids = ws->ids;
  float *cv = ws->s;
  int32_t nc = k_filter_ge(ws, l, V, t, ids);
  for (int32_t j = 0; j < nc; j++) cv[j] = (l[ids[j]] - m) / T;
  return sample_list(ws, p, ids, cv, nc, -INFINITY);
}
