/*
 * top_p.c - top-p on the fast path, without sorting the vocabulary.
 *
 *   sample_select_vstar       v* of the top-p step (the smallest survivor value whose exact mass
 *                      strictly above it is <= top_p of the total) by weighted selection:
 *                      partition passes around a window picked from a sample, decided by
 *                      exact integer mass tests;
 *   sample_full        keep-all rows (no top-k): exp of every entry with block sums, top-p by
 *                      sample_select_vstar, min-p, the draw by blocks;
 *   sample_topp_fused  the one-pass top-p on large keep-all rows: an estimated window, one
 *                      pass that sums exactly and copies out the window, and an exact check;
 *                      a miss goes through sample_full.
 * Every decision is exact (fixed-point weights, the recipe at the top of sampler.c), so the
 * token is the reference's; samples and windows only choose which elements are looked at.
 */
#include <stdlib.h>

#include "sample/sample_internal.h"

#define SORT_SMALL 32        /* sort_desc_w: insertion sort up to this many */
#define VSTAR_SAMPLE 256     /* sample_select_vstar: sample size per round (and the radix buffer) */
#define VSTAR_SORT_MAX 48    /* sample_select_vstar: sort and scan directly up to this many */
#define VSTAR_WIN_MIN 8       /* sample_select_vstar: window half-width, samples: 8 + ms / 16 */
#define VSTAR_WIN_DIV 16
#define VSTAR_HIDDEN_DIV 4   /* a sample holding under 1/4 of its share of the mass: heavy
                              * entries it missed */
#define FUSED_HEAD_DROPS 3   /* the one-pass head: times its threshold may drop */
#define FUSED_WIDEN 0x1p-20f /* the one-pass window's edges, widened by a few ulp */

/* Insertion sort, descending. */
void sample_sort_desc_floats(float *a, int32_t n) {
  for (int32_t i = 1; i < n; i++) {
    float x = a[i];
    int32_t j = i;
    while (j > 0 && a[j - 1] < x) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = x;
  }
}

/* Sort n <= VSTAR_SAMPLE non-negative floats descending: radix sort on the bits (monotone for
 * x >= 0). */
static void sort_desc_w(float *a, int32_t n) {
  if (n <= SORT_SMALL) {
    sample_sort_desc_floats(a, n);
    return;
  }
  uint32_t buf[2][VSTAR_SAMPLE], *src = buf[0], *dst = buf[1];
  memcpy(src, a, (size_t)n * 4);
  for (int sh = 0; sh < 32; sh += 8) {
    int32_t cnt[257] = {0};
    for (int32_t i = 0; i < n; i++) cnt[((src[i] >> sh) & 255) + 1]++;
    for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b]; /* one byte per pass */
    for (int32_t i = 0; i < n; i++) dst[cnt[(src[i] >> sh) & 255]++] = src[i];
    uint32_t *t = src; src = dst; dst = t;
  }
  for (int32_t i = 0; i < n; i++) memcpy(&a[i], &src[n - 1 - i], 4);
}

static int cmp_float_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

/* Walk a descending array in groups of equal values: the last group value whose mass
 * strictly above (base + groups before it) is <= thr. */
static float scan_sorted(const float *t, int32_t n, u128 base, u128 thr) {
  float vstar = t[0];
  u128 s = base;
  for (int32_t j = 0; j < n;) {
    int32_t g = j;
    u128 gm = 0;
    while (g < n && t[g] == t[j]) gm += fix_w(t[g++]);
    if (s > thr) break;
    vstar = t[j];
    s += gm;
    j = g;
  }
  return vstar;
}

/* v* of the top-p step: the smallest value v of a[0..n) (weights, all >= 0) with
 * S(v) = sum_{a_j > v} W_j <= thr. Works on copies in s1/s2 (n + SLACK floats each).
 * Each round picks a window [lo, hi] of values from a sample, around where the sample's
 * estimated mass crosses the target; one pass gives the exact mass above the window and in
 * it and copies the window out; exact integer tests decide whether v* is above, inside or
 * below, and only the part that holds it is kept. */
float sample_select_vstar(const q35_sampler *ws, const float *a, int32_t n, u128 mass, u128 thr,
                   float *s1, float *s2) {
  u128 base = 0; /* mass of elements known to be above everything in the current array */
  const float *cur = a;
  float *bufs[2] = {s1, s2};
  int which = 0;
  float samp[VSTAR_SAMPLE];
  for (;;) {
    if (n <= VSTAR_SORT_MAX) {
      float *t = bufs[which];
      if (t != cur) memcpy(t, cur, (size_t)n * sizeof(float));
      sample_sort_desc_floats(t, n);
      return scan_sorted(t, n, base, thr);
    }
    /* sample and estimate: the sample's own cumulative mass, normalized by its total, against
     * the exact fraction still needed (need / mass). A sample holding far less mass than
     * expected means heavy entries it missed: look above its maximum first. */
    int32_t ms = n < VSTAR_SAMPLE ? n : VSTAR_SAMPLE;
    for (int32_t j = 0; j < ms; j++) samp[j] = cur[(int64_t)j * n / ms];
    sort_desc_w(samp, ms);
    u128 need = thr - base, stot = 0, acc = 0;
    for (int32_t j = 0; j < ms; j++) stot += fix_w(samp[j]);
    int32_t jc = ms - 1; /* first sample index where the estimate passes the target */
    double frac = (double)need / (double)mass * (double)stot;
    for (int32_t j = 0; j < ms; j++) {
      acc += fix_w(samp[j]);
      if ((double)acc > frac) {
        jc = j;
        break;
      }
    }
    /* wide: a miss costs a full extra pass, a wide window little */
    int32_t d = VSTAR_WIN_MIN + ms / VSTAR_WIN_DIV;
    float hi = jc - d < 0 ? INFINITY : samp[jc - d];
    float lo = jc + d >= ms ? 0.0f : samp[jc + d];
    if (stot * (u128)n < (mass / VSTAR_HIDDEN_DIV) * (u128)ms) { /* hidden heavy entries */
      hi = INFINITY;
      lo = nextafterf(samp[0], INFINITY);
    }
    float *out = bufs[which];
    if (out == cur) out = bufs[which ^ 1];
    u128 ab, in;
    int32_t nb = k_window(ws, cur, n, lo, hi, out, &ab, &in);
    if (base + ab > thr) {
      /* v* is above the window: keep (hi, inf) */
      nb = k_window(ws, cur, n, nextafterf(hi, INFINITY), INFINITY, out, &ab, &in);
      mass = in;
    } else if (base + ab + in <= thr) {
      /* v* is below the window, or is the window's smallest value if nothing is below */
      float mn = out[0];
      for (int32_t j = 1; j < nb; j++) mn = out[j] < mn ? out[j] : mn;
      u128 rest = mass - ab - in;
      nb = k_window(ws, cur, n, 0.0f, nextafterf(lo, -INFINITY), out, &ab, &in);
      if (nb == 0 || rest == 0) return mn;
      mass = in;
    } else {
      mass = in;
    }
    base += ab;
    if (nb == n) {
      /* no progress (e.g. many equal values): one value, or sort and scan */
      float mn = out[0], mx = out[0];
      for (int32_t j = 1; j < nb; j++) {
        mn = out[j] < mn ? out[j] : mn;
        mx = out[j] > mx ? out[j] : mx;
      }
      if (mn == mx) return mx;
      qsort(out, (size_t)nb, sizeof(float), cmp_float_desc);
      return scan_sorted(out, nb, base, thr);
    }
    cur = out;
    n = nb;
    which = (out == bufs[0]) ? 1 : 0;
  }
}


/* The draw inside one block of survivors w[0 .. e - s0) (ids s0 .. e - 1, survivors w >= cut):
 * the first id at which the running sum *r exceeds thr, or -1 (then *r holds the block's
 * survivors added). */
static int32_t draw_in_block(const float *w, int32_t s0, int32_t e, float cut, u128 *r,
                             u128 thr) {
  for (int32_t i = s0; i < e; i++)
    if (w[i - s0] >= cut) {
      *r += fix_w(w[i - s0]);
      if (*r > thr) return i;
    }
  return -1;
}

/* Keep-all rows: exp of every entry, block sums, v* by selection, draw by blocks. */
int32_t sample_full(q35_sampler *ws, const float *l, int32_t V, float m, const q35_sampling *p) {
  float *w = ws->w;
  u128 *bs = ws->bsum;
  int32_t nb = (V + BLOCK - 1) / BLOCK;
  k_exp_row(ws, l, V, m, p->temperature, w, bs);
  float cut = 0.0f;
  if (p->top_p < 1.0f) {
    u128 t1 = 0;
    for (int32_t b = 0; b < nb; b++) t1 += bs[b];
    cut = sample_select_vstar(ws, w, V, t1, thr_topp(p->top_p, t1), ws->tmp, ws->tmp2);
  }
  float wmax = sample_exp(0.0f); /* the maximum's weight: s = 0 */
  if (p->min_p > 0.0f && p->min_p * wmax > cut) cut = p->min_p * wmax;
  if (cut > 0.0f) k_block_sums(ws, w, V, cut, bs);
  u128 t2 = 0;
  for (int32_t b = 0; b < nb; b++) t2 += bs[b];
  u128 thr = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  int32_t last = -1;
  for (int32_t b = 0; b < nb; b++) {
    if (bs[b] == 0) continue;
    if (r + bs[b] <= thr) {
      r += bs[b];
      last = b;
      continue;
    }
    int32_t tok = draw_in_block(w + b * BLOCK, b * BLOCK, block_end(b, BLOCK, V), cut, &r, thr);
    if (tok >= 0) return tok;
    last = b; /* unreachable: the block's sum exceeds the remainder */
  }
  /* rounding left none (cannot happen with k < 2^53): the last survivor */
  for (int32_t i = (last + 1) * BLOCK - 1; i >= 0; i--)
    if (i < V && w[i] >= cut && fix_w(w[i]) > 0) return i;
  return 0;
}

/* ---- top-p on keep-all rows in one pass ------------------------------------------------
 * sample_full stores w, then finds v* with partition passes over it and sums the survivors
 * in another pass. This path reads the row once more after the maximum scan and touches only
 * a small candidate set afterwards:
 *   1. the scan also records the maximum of every CHUNK elements;
 *   2. an estimate of v* (speed only, never correctness): the heavy head of the row taken
 *      exactly (every element >= h, found through the chunk maxima), plus a strided sample of
 *      the rest scaled up; a window [lo, hi] around the estimated crossing, widened by
 *      FUSED_Z standard deviations of the sample's estimate and a slack (fused_window);
 *   3. one pass: w of every element (same arithmetic as exp_row), the exact total, per block
 *      the exact mass of w > hi, and the elements in the window copied out in id order;
 *   4. exact integer tests (as in sample_select_vstar) say whether v* is in the window: the mass
 *      above hi is <= thr and the mass above hi plus the window's is > thr. Then v* is
 *      sample_select_vstar over the window alone, and the survivors are the elements above hi plus
 *      the window's >= cut, so per-block survivor sums are the pass's sums plus the window's
 *      survivors by block. The draw walks the blocks and recomputes w in the one block it
 *      lands in (the same kernel, the same bits).
 * Otherwise (a miss, or min-p cutting above hi) the row goes through sample_full. Both give
 * the reference's token: the window only selects which elements are looked at. */

/* The estimate behind the window (fused_window's steps share it). */
typedef struct {
  float *hs, *hw;      /* the head: s and w of its nh elements */
  float *sl, *ss, *sw; /* the strided sample: l, s and w of its ms elements (ns below the head) */
  int32_t nh, ms, ns;
  double f;            /* the sample's scale: elements below the head per sampled one */
} fused_est;

/* Step 1: the strided sample, l, s and w of at most FUSED_MS elements. */
static void fused_take_sample(const q35_sampler *ws, const float *l, int32_t V, float m, float T,
                              fused_est *e) {
  int32_t ms = V / 4 < FUSED_MS ? V / 4 : FUSED_MS; /* at most a quarter of the row */
  int64_t off = V / (2 * ms);
  for (int32_t j = 0; j < ms; j++) {
    e->sl[j] = l[(int64_t)j * V / ms + off];
    e->ss[j] = (e->sl[j] - m) / T;
  }
  k_exp_array(ws->simd, e->ss, e->sw, ms);
  e->ms = ms;
}

/* The head's first threshold: the FUSED_HK-th largest sampled l (inf when there are fewer). */
static float fused_first_head(const fused_est *e) {
  float top[FUSED_HK]; /* the FUSED_HK largest sampled values, descending */
  for (int k = 0; k < FUSED_HK; k++) top[k] = -INFINITY;
  for (int32_t j = 0; j < e->ms; j++) {
    float x = e->sl[j];
    if (!(x > top[FUSED_HK - 1])) continue;
    int k = FUSED_HK - 1;
    for (; k > 0 && top[k - 1] < x; k--) top[k] = top[k - 1];
    top[k] = x;
  }
  return top[FUSED_HK - 1] == -INFINITY ? INFINITY : top[FUSED_HK - 1];
}

/* s of every element with l >= h (in the chunks whose maximum is >= h) into hs; their count,
 * or -1 when there are more than FUSED_HMAX. */
static int32_t fused_collect_head(const q35_sampler *ws, const float *l, int32_t V, float m,
                                  float T, const float *bmax, float h, float *hs) {
  int32_t nch = (V + CHUNK - 1) / CHUNK, nh = 0;
  int32_t *idb = ws->ids;
  for (int32_t b = 0; b < nch && h < INFINITY; b++) {
    if (!(bmax[b] >= h)) continue;
    int32_t s0 = b * CHUNK, e = block_end(b, CHUNK, V);
    int32_t c = k_filter_ge(ws, l + s0, e - s0, h, idb);
    if (nh + c > FUSED_HMAX) return -1;
    for (int32_t j = 0; j < c; j++) hs[nh++] = (l[s0 + idb[j]] - m) / T;
  }
  return nh;
}

/* Where the head may drop to: where one element's weight is FUSED_EPS of the estimated total
 * over f (below it, an element seen or missed by the sample moves the estimate by at most about
 * FUSED_EPS); h itself (no drop) when that is not lower, or when the sample says it would take
 * more than about FUSED_HMAX / 2 elements. ht, st: the head's and the sample's w sums. */
static float fused_next_head(const fused_est *e, float m, float T, float h, double ht,
                             double st) {
  double f = e->f;
  double wh = FUSED_EPS * (ht + f * st) / f;
  if (!(wh < 1.0)) return h;
  double lh = (double)m + (double)T * log(wh);
  if (!(lh < (double)h) || lh < FLOAT_RANGE_LO) return h;
  float hn = (float)lh;
  if ((double)hn > lh) hn = nextafterf(hn, -INFINITY);
  int32_t cnt = 0;
  for (int32_t j = 0; j < e->ms; j++) cnt += e->sl[j] >= hn;
  if ((double)cnt * f > FUSED_HMAX / 2) return h;
  return hn;
}

/* Step 2: the head, taken exactly: every element >= h. First h = fused_first_head (the top of
 * the row, which a sample sees too rarely), then it drops as fused_next_head says, at most
 * FUSED_HEAD_DROPS times; a head over FUSED_HMAX elements keeps the previous h (or none:
 * h = inf). Fills the head, f, and the sample below h (in place). */
static void fused_head(const q35_sampler *ws, const float *l, int32_t V, float m, float T,
                       const float *bmax, fused_est *e) {
  float h = fused_first_head(e), hprev = INFINITY;
  for (int iter = 0;; iter++) {
    int last = 0;
    e->nh = fused_collect_head(ws, l, V, m, T, bmax, h, e->hs);
    if (e->nh < 0) { /* too many: back to the previous head, and stop there */
      h = hprev;
      e->nh = fused_collect_head(ws, l, V, m, T, bmax, h, e->hs);
      if (e->nh < 0) h = INFINITY, e->nh = 0; /* cannot happen: hprev's head fitted */
      last = 1;
    }
    k_exp_array(ws->simd, e->hs, e->hw, e->nh);
    int32_t ns = 0;
    double st = 0.0, ht = 0.0;
    for (int32_t j = 0; j < e->ms; j++)
      if (e->sl[j] < h) {
        ns++;
        st += e->sw[j];
      }
    for (int32_t j = 0; j < e->nh; j++) ht += e->hw[j];
    e->f = ns > 0 ? (double)(V - e->nh) / ns : 0.0;
    if (last || iter >= FUSED_HEAD_DROPS || e->f <= 0.0) break;
    float hn = fused_next_head(e, m, T, h, ht, st);
    if (!(hn < h)) break;
    hprev = h;
    h = hn;
  }
  /* keep the sample below h, in place */
  int32_t c = 0;
  for (int32_t j = 0; j < e->ms; j++)
    if (e->sl[j] < h) {
      e->ss[c] = e->ss[j];
      e->sw[c++] = e->sw[j];
    }
  e->ns = c;
}

/* Step 3: the bins, by s = (l - m) / T in bins of 1 / FUSED_BINS (s below the last edge share
 * the last bin): per bin the estimated mass bm (head entries count once, sample entries f
 * times) and the sample's sum of w^2 bq (for the variance). Returns the estimated total; *s2
 * the sample's sum of w^2. */
static double fused_bins(q35_sampler *ws, const fused_est *e, double *s2) {
  double *bm = ws->bins, *bq = ws->bins + FUSED_NBIN;
  memset(ws->bins, 0, 2 * FUSED_NBIN * sizeof(double));
  double tot = 0.0, q2 = 0.0;
  for (int32_t j = 0; j < e->nh; j++) {
    float x = -e->hs[j] * FUSED_BINS;
    int32_t k = x < FUSED_NBIN - 1 ? (int32_t)x : FUSED_NBIN - 1;
    bm[k] += e->hw[j];
    tot += e->hw[j];
  }
  for (int32_t j = 0; j < e->ns; j++) {
    float x = -e->ss[j] * FUSED_BINS;
    int32_t k = x < FUSED_NBIN - 1 ? (int32_t)x : FUSED_NBIN - 1;
    double w = e->sw[j];
    bm[k] += e->f * w;
    bq[k] += w * w;
    tot += e->f * w;
    q2 += w * w;
  }
  *s2 = q2;
  return tot;
}

/* Step 4: walk the bins from the top: r = estimated mass fraction at or above the bin's lower
 * edge; the ratio estimator's variance is f^2 ((1 - r)^2 sum_above w^2 + r^2 sum_below w^2)
 * / tot^2. hi: the lower edge of the last bin with r + z sd + slack <= q; lo: the lower edge
 * of the first with r - z sd - slack > q. Compared squared (no square roots). Edges are turned
 * into weights with the shared exp, widened by a few ulp. */
static void fused_crossing(const q35_sampler *ws, const fused_est *e, double q, double tot,
                           double s2, float *plo, float *phi) {
  const double *bm = ws->bins, *bq = ws->bins + FUSED_NBIN;
  const double f = e->f;
  int32_t khi = -1, klo = FUSED_NBIN - 1;
  double itot = 1.0 / tot, a = 0.0, sa2 = 0.0;
  double slack = 2.0 / (e->ms > 0 ? e->ms : 1) + 2 * FUSED_EPS; /* sample granularity, head */
  double zf2 = FUSED_Z * FUSED_Z * f * f * itot * itot;
  int hi_open = 1;
  for (int32_t k = 0; k < FUSED_NBIN; k++) {
    if (bm[k] == 0.0) continue;
    a += bm[k];
    sa2 += bq[k];
    double r = a * itot;
    double var = zf2 * ((1 - r) * (1 - r) * sa2 + r * r * (s2 - sa2));
    if (hi_open) {
      double g = q - r - slack;
      if (g >= 0 && g * g >= var) khi = k;
      else hi_open = 0;
    }
    double g = r - q - slack;
    if (g > 0 && g * g > var) {
      klo = k;
      break;
    }
  }
  /* bin k holds s in (-(k + 1) / B, -k / B] */
  float hi = INFINITY, lo = 0.0f;
  if (khi >= 0) hi = sample_exp(-(float)(khi + 1) / FUSED_BINS) * (1.0f + FUSED_WIDEN);
  if (klo < FUSED_NBIN - 1) lo = sample_exp(-(float)(klo + 1) / FUSED_BINS) * (1.0f - FUSED_WIDEN);
  *plo = lo > hi ? hi : lo;
  *phi = hi;
}

/* The estimated window [lo, hi] for top_p q (see above); bmax: the row's chunk maxima. */
static void fused_window(q35_sampler *ws, const float *l, int32_t V, float m, float T, double q,
                         const float *bmax, float *plo, float *phi) {
  fused_est e = {.hs = ws->tmp, .hw = ws->tmp + FUSED_HMAX, .ss = ws->tmp2,
                 .sw = ws->tmp2 + FUSED_MS, .sl = ws->tmp2 + 2 * FUSED_MS};
  fused_take_sample(ws, l, V, m, T, &e);
  fused_head(ws, l, V, m, T, bmax, &e);
  double s2, tot = fused_bins(ws, &e, &s2);
  fused_crossing(ws, &e, q, tot, s2, plo, phi);
  if (ws->fused == FUSED_MISPLACED) /* testing: a window that misses v* (below it, then above) */
    *plo = *phi = (ws->n_fused & 1) ? 0.0f : 2.0f;
}

/* Returns the token, or -1 on a miss (the caller then uses sample_full). */
int32_t sample_topp_fused(q35_sampler *ws, const float *l, int32_t V, float m,
                          const q35_sampling *p, const float *bmax) {
  const float T = p->temperature;
  float lo, hi;
  fused_window(ws, l, V, m, T, (double)p->top_p, bmax, &lo, &hi);
  /* min-p: cmin = min_p * w_max (w_max = exp(0) = 1). When it is above the window, the cut is
   * cmin as soon as v* < cmin, i.e. as soon as the mass of w >= cmin is <= thr: take
   * hi = the float below cmin (w > hi <=> w >= cmin) and no window. */
  float cmin = p->min_p * sample_exp(0.0f);
  int minp_mode = p->min_p > 0.0f && cmin > hi && ws->fused != FUSED_MISPLACED;
  if (minp_mode) hi = lo = nextafterf(cmin, 0.0f);
  u128 *bs = ws->bsum, t1;
  float *cw = ws->s;
  int32_t *cst = ws->ids;
  int32_t nb = (V + BLOCK - 1) / BLOCK;
  int32_t nc = k_fused(ws, l, V, m, T, lo, hi, bs, cst, &t1, cw);
  cst[nb] = nc;
  ws->n_fused++;
  u128 base = 0, in = 0;
  for (int32_t b = 0; b < nb; b++) base += bs[b];
  u128 thr = thr_topp(p->top_p, t1);
  float cut;
  if (minp_mode) {
    if (base > thr) goto miss;
    cut = cmin; /* no window element is >= cmin */
  } else {
    in = k_wsum_ge(ws, cw, nc, 0.0f);
    if (nc == 0 || base > thr || base + in <= thr) goto miss;
    cut = sample_select_vstar(ws, cw, nc, in, thr - base, ws->tmp, ws->tmp2);
    if (p->min_p > 0.0f && cmin > cut) cut = cmin; /* <= hi here */
    for (int32_t b = 0; b < nb; b++)
      if (cst[b + 1] > cst[b]) bs[b] += k_wsum_ge(ws, cw + cst[b], cst[b + 1] - cst[b], cut);
  }
  u128 t2 = 0;
  for (int32_t b = 0; b < nb; b++) t2 += bs[b];
  u128 thd = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  for (int32_t b = 0; b < nb; b++) {
    if (r + bs[b] <= thd) {
      r += bs[b];
      continue;
    }
    int32_t s0 = b * BLOCK, e = block_end(b, BLOCK, V);
    u128 dummy;
    k_exp_row(ws, l + s0, e - s0, m, T, ws->w, &dummy);
    return draw_in_block(ws->w, s0, e, cut, &r, thd); /* -1 unreachable: the block's sum
                                                        * exceeds the remainder */
  }
  return -1; /* unreachable (k < 2^53 and t2 > 0): sample_full decides */
miss:
  ws->n_fused_miss++;
  return -1;
}
