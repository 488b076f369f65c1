/*
 * quantize_weights.c - the weight quantizers: floats -> Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_XS
 * blocks (plain C; every SIMD level uses these). Ours, not GGML's: round to nearest with a small
 * scale search per (sub-)block minimising the squared error, good quality but not necessarily
 * byte-identical to llama-quantize. They serve the exporter and the tests; the activation
 * quantizers (Q8_0, Q8_K, exact ggml-cpu) are in quant_ref.c and the SIMD files.
 */
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"

/* Q4_K / Q5_K sub-block scales and mins: 6 bits (0..63) under the fp16 super-scales d, dmin */
#define K4_SCALE_MAX 63
/* Q6_K sub-block scales: int8 (-128..127) under d; the largest |scale| maps to -128 */
#define K6_SCALE_MIN (-128)
/* IQ4_XS sub-block scales: 6-bit signed (-32..31) under d; the largest |scale| maps to -32 */
#define IQ4_SCALE_MIN (-32)

/* The element of largest magnitude (the first of equals; 0 if all are 0 or NaN), its magnitude
 * in *amax. */
static float signed_absmax(const float *x, int n, float *amax) {
  float max = 0, a = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > a) {
      a = fabsf(x[i]);
      max = x[i];
    }
  *amax = a;
  return max;
}

/*
 * Symmetric grid x ~ d*L, L in [lo, hi] (Q4_0, Q5_0, Q6_K sub-blocks): try a handful of
 * inverse scales mapping the largest-magnitude element near either end of the grid, fit d by
 * least squares for each rounding, keep the lowest squared error. Returns d (0 if all zero).
 */
static float fit_symmetric(const float *x, int n, int lo, int hi) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax == 0 || !isfinite(amax)) return 0;
  float best_d = max / (float)lo, best_err = INFINITY;
  for (int c = 0; c < 16; c++) {
    /* c < 9: max -> lo + 0.25c (negative end); else max -> hi - 0.25(c-9) */
    const float target = c < 9 ? (float)lo + 0.25f * (float)c : (float)hi - 0.25f * (float)(c - 9);
    const float t = target / max;
    double sxl = 0, sll = 0;
    for (int i = 0; i < n; i++) {
      int l = (int)lrintf(t * x[i]);
      l = l < lo ? lo : l > hi ? hi : l;
      sxl += (double)x[i] * l;
      sll += (double)l * l;
    }
    if (sll == 0) continue;
    const float d = (float)(sxl / sll);
    double err = 0;
    for (int i = 0; i < n; i++) {
      int l = (int)lrintf(x[i] / d);
      l = l < lo ? lo : l > hi ? hi : l;
      const double e = x[i] - (double)d * l;
      err += e * e;
    }
    if (err < best_err) {
      best_err = (float)err;
      best_d = d;
    }
  }
  return best_d;
}

static inline int quant_level(float x, float d, int lo, int hi) {
  if (d == 0) return lo <= 0 && hi >= 0 ? 0 : lo;
  int l = (int)lrintf(x / d);
  return l < lo ? lo : l > hi ? hi : l;
}

static void quant_q4_0(const float *x, void *dst, int64_t n) {
  blk_q4_0 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    y[i].d = q35_fp32_to_fp16(fit_symmetric(x, QK8_0, -8, 7));
    const float d = q35_fp16_to_fp32(y[i].d);
    for (int j = 0; j < 16; j++) {
      const int a = quant_level(x[j], d, -8, 7) + 8, b = quant_level(x[j + 16], d, -8, 7) + 8;
      y[i].qs[j] = (uint8_t)(a | (b << 4));
    }
  }
}

static void quant_q5_0(const float *x, void *dst, int64_t n) {
  blk_q5_0 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    y[i].d = q35_fp32_to_fp16(fit_symmetric(x, QK8_0, -16, 15));
    const float d = q35_fp16_to_fp32(y[i].d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
      const int a = quant_level(x[j], d, -16, 15) + 16, b = quant_level(x[j + 16], d, -16, 15) + 16;
      y[i].qs[j] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
      qh |= (uint32_t)(a >> 4) << j;
      qh |= (uint32_t)(b >> 4) << (j + 16);
    }
    memcpy(y[i].qh, &qh, 4);
  }
}

/*
 * Affine grid x ~ a*L - m, L in [0, nmax], a >= 0, m >= 0 (Q4_K/Q5_K sub-blocks of 32).
 * Candidate roundings from the [min(0,min x), max x] range stretched a little either way;
 * (a, m) fitted by least squares per candidate (m clamped at 0); lowest error wins.
 */
static void fit_affine(const float *x, int n, int nmax, float *scale, float *min_out) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < n; i++) {
    mn = fminf(mn, x[i]);
    mx = fmaxf(mx, x[i]);
  }
  if (mn > 0) mn = 0;
  if (mx <= mn || !isfinite(mx - mn)) {
    *scale = 0;
    *min_out = -mn;
    return;
  }
  float best_a = (mx - mn) / (float)nmax, best_m = -mn, best_err = INFINITY;
  for (int c = -5; c <= 5; c++) {
    const float t = ((float)nmax + 0.1f * (float)c) / (mx - mn);
    double sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
      int l = (int)lrintf(t * (x[i] - mn));
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      sl += l;
      sll += (double)l * l;
      sx += x[i];
      sxl += (double)x[i] * l;
    }
    /* minimise sum (x - a l - b)^2 over a, b; b = -m must be <= 0 */
    const double det = n * sll - sl * sl;
    double a, b;
    if (det <= 0) continue;
    a = (n * sxl - sl * sx) / det;
    b = (sll * sx - sl * sxl) / det;
    if (b > 0) {
      b = 0;
      a = sxl / sll;
    }
    if (a <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; i++) {
      int l = (int)lrint((x[i] - b) / a);
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      const double e = x[i] - (a * l + b);
      err += e * e;
    }
    if (err < best_err) {
      best_err = (float)err;
      best_a = (float)a;
      best_m = (float)-b;
    }
  }
  *scale = best_a;
  *min_out = best_m;
}

/* Quantize 8 sub-block (scale, min) pairs to 6 bits under fp16 super-scales; pack them. */
static void pack_k4_scales(const float *a, const float *m, uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t *scales, float *eff_a, float *eff_m) {
  float amax = 0, mmax = 0;
  for (int j = 0; j < 8; j++) {
    amax = fmaxf(amax, a[j]);
    mmax = fmaxf(mmax, m[j]);
  }
  *d_out = q35_fp32_to_fp16(amax / (float)K4_SCALE_MAX);
  *dmin_out = q35_fp32_to_fp16(mmax / (float)K4_SCALE_MAX);
  const float d = q35_fp16_to_fp32(*d_out), dmin = q35_fp16_to_fp32(*dmin_out);
  uint8_t sc[8], mm[8];
  for (int j = 0; j < 8; j++) {
    int s = d > 0 ? (int)lrintf(a[j] / d) : 0, t = dmin > 0 ? (int)lrintf(m[j] / dmin) : 0;
    sc[j] = (uint8_t)(s < 0 ? 0 : s > K4_SCALE_MAX ? K4_SCALE_MAX : s);
    mm[j] = (uint8_t)(t < 0 ? 0 : t > K4_SCALE_MAX ? K4_SCALE_MAX : t);
    eff_a[j] = d * sc[j];
    eff_m[j] = dmin * mm[j];
  }
  memset(scales, 0, 12);
  for (int j = 0; j < 4; j++) {
    scales[j] = sc[j];
    scales[j + 4] = mm[j];
  }
  for (int j = 4; j < 8; j++) {
    scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mm[j] & 0xF) << 4));
    scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
    scales[j] |= (uint8_t)((mm[j] >> 4) << 6);
  }
}

static void quant_kaffine_levels(const float *x, int nmax, uint16_t *d, uint16_t *dmin,
                                 uint8_t *scales, uint8_t *L) {
  float a[8], m[8], ea[8], em[8];
  for (int j = 0; j < 8; j++) fit_affine(x + 32 * j, 32, nmax, &a[j], &m[j]);
  pack_k4_scales(a, m, d, dmin, scales, ea, em);
  for (int j = 0; j < 8; j++)
    for (int l = 0; l < 32; l++) {
      int q = ea[j] > 0 ? (int)lrintf((x[32 * j + l] + em[j]) / ea[j]) : 0;
      L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
    }
}

static void quant_q4_k(const float *x, void *dst, int64_t n) {
  blk_q4_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    uint8_t L[QK_K];
    uint16_t d, dmin;
    quant_kaffine_levels(x, 15, &d, &dmin, y[i].scales, L);
    y[i].d = d;
    y[i].dmin = dmin;
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++)
        y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

static void quant_q5_k(const float *x, void *dst, int64_t n) {
  blk_q5_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    uint8_t L[QK_K];
    uint16_t d, dmin;
    quant_kaffine_levels(x, 31, &d, &dmin, y[i].scales, L);
    y[i].d = d;
    y[i].dmin = dmin;
    memset(y[i].qh, 0, sizeof y[i].qh);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        const int a = L[64 * c + l], b = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
        y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
      }
  }
}

static void quant_q6_k(const float *x, void *dst, int64_t n) {
  blk_q6_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float s[16], samax;
    for (int j = 0; j < 16; j++) s[j] = fit_symmetric(x + 16 * j, 16, -32, 31);
    const float smax = signed_absmax(s, 16, &samax);
    y[i].d = q35_fp32_to_fp16(smax / (float)K6_SCALE_MIN);
    const float d = q35_fp16_to_fp32(y[i].d);
    int L[QK_K];
    for (int j = 0; j < 16; j++) {
      int sc = d != 0 ? (int)lrintf(s[j] / d) : 0;
      sc = sc < K6_SCALE_MIN ? K6_SCALE_MIN : sc > -K6_SCALE_MIN - 1 ? -K6_SCALE_MIN - 1 : sc;
      y[i].scales[j] = (int8_t)sc;
      const float ds = d * (float)sc;
      for (int l = 0; l < 16; l++) L[16 * j + l] = quant_level(x[16 * j + l], ds, -32, 31) + 32;
    }
    for (int h = 0; h < 2; h++) {
      const int *q = L + 128 * h;
      uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; l++) {
        ql[l] = (uint8_t)((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
        ql[l + 32] = (uint8_t)((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
        qh[l] = (uint8_t)((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                          ((q[l + 96] >> 4) << 6));
      }
    }
  }
}

/* Index of the code book value nearest to v (ties to the lower index). */
static inline int iq4_nearest(float v) {
  int lo = 0, hi = 15;
  if (v <= q35_kvalues_iq4nl[0]) return 0;
  if (v >= q35_kvalues_iq4nl[15]) return 15;
  while (hi - lo > 1) { /* kv[lo] < v < kv[hi] invariant-ish */
    int mid = (lo + hi) / 2;
    if (v < q35_kvalues_iq4nl[mid]) hi = mid;
    else lo = mid;
  }
  return v - q35_kvalues_iq4nl[lo] <= q35_kvalues_iq4nl[hi] - v ? lo : hi;
}

/* Best scale for one IQ4 sub-block: x ~ dl * kv[L]. */
static float fit_iq4(const float *x, int n) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax == 0 || !isfinite(amax)) return 0;
  float best = max / -127.f, best_err = INFINITY;
  for (int c = 0; c < 20; c++) {
    /* max -> around the negative end (-127) or the positive end (113) of the code book */
    const float target = c < 10 ? -127.f + 2.0f * (float)(c - 3) : 113.f + 2.0f * (float)(c - 13);
    const float t = target / max;
    double sxk = 0, skk = 0;
    for (int i = 0; i < n; i++) {
      const int k = q35_kvalues_iq4nl[iq4_nearest(t * x[i])];
      sxk += (double)x[i] * k;
      skk += (double)k * k;
    }
    const float dl = (float)(sxk / skk);
    if (dl == 0) continue;
    double err = 0;
    for (int i = 0; i < n; i++) {
      const double e = x[i] - (double)dl * q35_kvalues_iq4nl[iq4_nearest(x[i] / dl)];
      err += e * e;
    }
    if (err < best_err) {
      best_err = (float)err;
      best = dl;
    }
  }
  return best;
}

static void quant_iq4_xs(const float *x, void *dst, int64_t n) {
  blk_iq4_xs *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float s[8], samax;
    for (int j = 0; j < 8; j++) s[j] = fit_iq4(x + 32 * j, 32);
    const float smax = signed_absmax(s, 8, &samax);
    y[i].d = q35_fp32_to_fp16(smax / (float)IQ4_SCALE_MIN);
    const float d = q35_fp16_to_fp32(y[i].d);
    y[i].scales_h = 0;
    memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    for (int j = 0; j < 8; j++) {
      int ls = d != 0 ? (int)lrintf(s[j] / d) : 0;
      ls = ls < IQ4_SCALE_MIN ? IQ4_SCALE_MIN : ls > -IQ4_SCALE_MIN - 1 ? -IQ4_SCALE_MIN - 1 : ls;
      const int u = ls - IQ4_SCALE_MIN; /* stored biased, 0..63 */
      y[i].scales_l[j / 2] |= (uint8_t)((u & 0xF) << 4 * (j % 2));
      y[i].scales_h |= (uint16_t)((u >> 4) << 2 * j);
      const float dl = d * (float)ls;
      const float *xs = x + 32 * j;
      for (int l = 0; l < 16; l++) {
        const int a = dl != 0 ? iq4_nearest(xs[l] / dl) : 8;
        const int b = dl != 0 ? iq4_nearest(xs[l + 16] / dl) : 8;
        y[i].qs[16 * j + l] = (uint8_t)(a | (b << 4));
      }
    }
  }
}

void q35_kernels_weight_quantizers(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q4_0] = quant_q4_0;
  k->quantize[Q35_TYPE_Q5_0] = quant_q5_0;
  k->quantize[Q35_TYPE_Q4_K] = quant_q4_k;
  k->quantize[Q35_TYPE_Q5_K] = quant_q5_k;
  k->quantize[Q35_TYPE_Q6_K] = quant_q6_k;
  k->quantize[Q35_TYPE_IQ4_XS] = quant_iq4_xs;
}

int q35_weights_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw) {
  (void)type, (void)src, (void)dst, (void)n, (void)qw;
  return -1;
}
