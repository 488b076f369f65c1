/*
 * quantize_weights.c - the weight quantizers: floats -> Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_XS
 * blocks (plain C; every SIMD level uses these, but for the plain Q4_0 / Q5_0 ones, whose vector
 * twins are in quantize_plain_vec.c and quantize_plain_avx2.c), each with an importance-weighted
 * form (an importance vector qw per column: llama.cpp's imatrix). Ours, not GGML's: round to
 * nearest with a small scale search per (sub-)block minimising the weighted squared error
 * (quantize_fit.h; without qw, Q4_0 / Q5_0 take least-squares rounds from ggml's one-scale start
 * instead: its speed), good quality but not byte-identical to llama-quantize. The element weights
 * with qw are the ones ggml's quantizers use for the same type (noted at each); without qw, 1.
 * They serve the exporter and the tests; the activation quantizers (Q8_0, Q8_K, exact ggml-cpu)
 * are in quant_ref.c and the SIMD files.
 */
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quantize_fit.h"

/* Q4_K / Q5_K sub-block scales and mins: 6 bits (0..63) under the fp16 super-scales d, dmin */
#define K4_SCALE_MAX 63
/* Q6_K sub-block scales: int8 (-128..127) under d; the largest |scale| maps to -128 */
#define K6_SCALE_MIN (-128)
/* IQ4_XS sub-block scales: 6-bit signed (-32..31) under d; the largest |scale| maps to -32 */
#define IQ4_SCALE_MIN (-32)

/* The symmetric fits' candidates: the largest-magnitude element mapped to lo + k/4 (k = -2..8)
 * or hi - k/4 (k = 0..6), the negative end first. */
static int sym_targets(int lo, int hi, float *tg) {
  int n = 0;
  for (int k = -2; k <= 8; k++) tg[n++] = (float)lo + 0.25f * (float)k;
  for (int k = 0; k <= 6; k++) tg[n++] = (float)hi - 0.25f * (float)k;
  return n;
}

static inline int quant_level(float x, float id, int lo, int hi) {
  return id == 0 ? q35_clampi(0, lo, hi) : q35_clampi(q35_nearest_int(x * id), lo, hi);
}


/* Q4_0 / Q5_0: one scale per 32, x ~ d * l, l in [lo, hi] (weights: importance form with sigma2
 * the row's mean x^2, as ggml's) */
static void quant_q4_0_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q4_0 *y = dst;
  float tg[18], w[QK8_0];
  const int nt = sym_targets(-8, 7, tg);
  if (!qw) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
      uint8_t L[QK8_0];
      y[i].d = q35_fp32_to_fp16(q35_fit_sym_plain(x, QK8_0, -8, 7, Q35_PLAIN_ITERS_SYM));
      q35_plain_levels_sym(x, q35_fp16_to_fp32(y[i].d), -8, 7, L);
      for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
    return;
  }
  const float sigma2 = q35_mean_sq(x, n);
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0, qw = qw ? qw + QK8_0 : NULL) {
    q35_importance_weights(x, qw, QK8_0, sigma2, w);
    y[i].d = q35_fp32_to_fp16(q35_fit_sym(x, w, QK8_0, -8, 7, tg, nt));
    const float d = q35_fp16_to_fp32(y[i].d), id = d != 0 ? 1.0f / d : 0;
    for (int j = 0; j < 16; j++) {
      const int a = quant_level(x[j], id, -8, 7) + 8, b = quant_level(x[j + 16], id, -8, 7) + 8;
      y[i].qs[j] = (uint8_t)(a | (b << 4));
    }
  }
}

static void quant_q5_0_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q5_0 *y = dst;
  float tg[18], w[QK8_0];
  const int nt = sym_targets(-16, 15, tg);
  if (!qw) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
      uint8_t L[QK8_0];
      y[i].d = q35_fp32_to_fp16(q35_fit_sym_plain(x, QK8_0, -16, 15, Q35_PLAIN_ITERS_SYM));
      q35_plain_levels_sym(x, q35_fp16_to_fp32(y[i].d), -16, 15, L);
      uint32_t qh = 0;
      for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
      for (int j = 0; j < 32; j++) qh |= (uint32_t)(L[j] >> 4) << j;
      memcpy(y[i].qh, &qh, 4);
    }
    return;
  }
  const float sigma2 = q35_mean_sq(x, n);
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0, qw = qw ? qw + QK8_0 : NULL) {
    q35_importance_weights(x, qw, QK8_0, sigma2, w);
    y[i].d = q35_fp32_to_fp16(q35_fit_sym(x, w, QK8_0, -16, 15, tg, nt));
    const float d = q35_fp16_to_fp32(y[i].d), id = d != 0 ? 1.0f / d : 0;
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
      const int a = quant_level(x[j], id, -16, 15) + 16, b = quant_level(x[j + 16], id, -16, 15) + 16;
      y[i].qs[j] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
      qh |= (uint32_t)(a >> 4) << j;
      qh |= (uint32_t)(b >> 4) << (j + 16);
    }
    memcpy(y[i].qh, &qh, 4);
  }
}

/* 8 non-negative sub-block values v (scales or mins) as 6-bit fields L under an fp16 super-scale:
 * the super-scale among a few candidates (max / (63 - k/2)) of least error sum wt_j (v_j - d L_j)^2,
 * wt_j the weight an error in v_j carries. Returns the super-scale's fp16 bits. */
static uint16_t choose_k4_scale(const float *v, const float *wt, uint8_t *L) {
  float vmax = 0;
  for (int j = 0; j < 8; j++) vmax = fmaxf(vmax, v[j]);
  memset(L, 0, 8);
  if (!(vmax > 0)) return 0;
  uint16_t best_h = 0;
  float best = INFINITY;
  for (int k = 0; k < 7; k++) {
    const uint16_t dh = q35_fp32_to_fp16(vmax / ((float)K4_SCALE_MAX - 0.5f * (float)k));
    const float d = q35_fp16_to_fp32(dh);
    if (!(d > 0)) continue;
    float e = 0;
    uint8_t l[8];
    for (int j = 0; j < 8; j++) {
      l[j] = (uint8_t)q35_clampi(q35_nearest_int(v[j] / d), 0, K4_SCALE_MAX);
      e += wt[j] * (v[j] - d * l[j]) * (v[j] - d * l[j]);
    }
    if (e < best) {
      best = e;
      best_h = dh;
      memcpy(L, l, 8);
    }
  }
  return best_h;
}

/* Q4_K / Q5_K sub-block j's weighted error with scale field sc and min field mn (levels rounded
 * at that scale) */



static float k4_sub_err(const float *x, const float *w, int nmax, float d, float dmin, int sc, int mn) {
  const float a = d * (float)sc, m = dmin * (float)mn, ia = a > 0 ? 1.0f / a : 0;
  float e = 0;
  for (int l = 0; l < 32; l++) {
    const float q = ia > 0 ? (float)q35_clampi(q35_nearest_int((x[l] + m) * ia), 0, nmax) : 0;
    const float r = x[l] - (a * q - m);
    e += w[l] * r * r;
  }
  return e;
}

/* Q4_K / Q5_K: x ~ a_j * l - m_j per 32, l in [0, nmax]: per sub-block a weighted affine fit; the
 * scales and mins as 6-bit fields under their super-scales (chosen by choose_k4_scale, weighting
 * a scale's error by sum w l^2 and a min's by sum w); each sub-block's pair of fields then moved
 * by +-1 where the block's error drops; the levels rounded at the scales as stored.
 * Weights: importance form with sigma2 twice the super-block's mean x^2 (as ggml's), else 1. */
static void quant_kaffine_levels(const float *x, const float *qw, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                                 uint8_t *scales, uint8_t *L) {
  float a[8], m[8], wa[8], wm[8], w[QK_K];
  q35_importance_weights(x, qw, QK_K, qw ? 2 * q35_mean_sq(x, QK_K) : 0, w);
  for (int j = 0; j < 8; j++) {
    const float *xs = x + 32 * j, *ws = w + 32 * j;
    float b;
    q35_fit_aff(xs, ws, 32, nmax, 1, -5, 5, 0.1f, &a[j], &b);
    m[j] = -b;
    wa[j] = wm[j] = 0;
    const float ia = a[j] > 0 ? 1.0f / a[j] : 0;
    for (int l = 0; l < 32; l++) {
      const float q = ia > 0 ? (float)q35_clampi(q35_nearest_int((xs[l] - b) * ia), 0, nmax) : 0;
      wa[j] += ws[l] * q * q;
      wm[j] += ws[l];
    }
  }
  uint8_t sc[8], mn[8];
  *d_out = choose_k4_scale(a, wa, sc);
  *dmin_out = choose_k4_scale(m, wm, mn);
  const float d = q35_fp16_to_fp32(*d_out), dmin = q35_fp16_to_fp32(*dmin_out);
  for (int j = 0; j < 8; j++) {
    const float *xs = x + 32 * j, *ws = w + 32 * j;
    int bs = sc[j], bm = mn[j];
    float best = k4_sub_err(xs, ws, nmax, d, dmin, bs, bm);
    for (int s2 = sc[j] - 1; s2 <= sc[j] + 1; s2++) {
      if (s2 < 0 || s2 > K4_SCALE_MAX) continue;
      /* the min fields around the stored one, and the one of the least-squares min for the levels
       * at this scale (a constant block is fitted by the min's finer steps) */
      const float ea = d * (float)s2, ia = ea > 0 ? 1.0f / ea : 0, em = dmin * (float)mn[j];
      float sw = 0, sr = 0;
      for (int l = 0; l < 32; l++) {
        const float q = ia > 0 ? (float)q35_clampi(q35_nearest_int((xs[l] + em) * ia), 0, nmax) : 0;
        sw += ws[l], sr += ws[l] * (ea * q - xs[l]);
      }
      const int mls = dmin > 0 && sw > 0 ? q35_clampi(q35_nearest_int(sr / sw / dmin), 0, K4_SCALE_MAX) : 0;
      const int cand[4] = {mn[j] - 1, mn[j], mn[j] + 1, mls};
      for (int c = 0; c < 4; c++) {
        const int m2 = cand[c];
        if (m2 < 0 || m2 > K4_SCALE_MAX || (s2 == bs && m2 == bm) || (c == 3 && m2 >= mn[j] - 1 && m2 <= mn[j] + 1))
          continue;
        const float e = k4_sub_err(xs, ws, nmax, d, dmin, s2, m2);
        if (e < best) best = e, bs = s2, bm = m2;
      }
    }
    sc[j] = (uint8_t)bs, mn[j] = (uint8_t)bm;
    const float ea = d * (float)bs, em = dmin * (float)bm, ia = ea > 0 ? 1.0f / ea : 0;
    for (int l = 0; l < 32; l++)
      L[32 * j + l] = (uint8_t)(ia > 0 ? q35_clampi(q35_nearest_int((xs[l] + em) * ia), 0, nmax) : 0);
  }
  memset(scales, 0, 12);
  for (int j = 0; j < 4; j++) {
    scales[j] = sc[j];
    scales[j + 4] = mn[j];
  }
  for (int j = 4; j < 8; j++) {
    scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
    scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
    scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
  }
}

static void quant_q4_k_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q4_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    uint8_t L[QK_K];
    uint16_t d, dmin;
    quant_kaffine_levels(x, qw, 15, &d, &dmin, y[i].scales, L);
    y[i].d = d;
    y[i].dmin = dmin;
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++)
        y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

static void quant_q5_k_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q5_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    uint8_t L[QK_K];
    uint16_t d, dmin;
    quant_kaffine_levels(x, qw, 31, &d, &dmin, y[i].scales, L);
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

/* Q6_K: x ~ d * s_j * l per 16, l in [-32, 31] (weights: qw itself, as ggml's) */
static void quant_q6_k_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q6_k *y = dst;
  float tg[18], w[16];
  const int nt = sym_targets(-32, 31, tg);
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    float s[16];
    for (int j = 0; j < 16; j++) {
      for (int l = 0; l < 16; l++) w[l] = qw ? qw[16 * j + l] : 1.0f;
      s[j] = q35_fit_sym(x + 16 * j, w, 16, -32, 31, tg, nt);
    }
    const float smax = q35_signed_absmax(s, 16);
    y[i].d = q35_fp32_to_fp16(smax / (float)K6_SCALE_MIN);
    const float d = q35_fp16_to_fp32(y[i].d);
    int L[QK_K];
    for (int j = 0; j < 16; j++) {
      const int sc = d != 0 ? q35_clampi(q35_nearest_int(s[j] / d), K6_SCALE_MIN, -K6_SCALE_MIN - 1) : 0;
      y[i].scales[j] = (int8_t)sc;
      const float ds = d * (float)sc, id = ds != 0 ? 1.0f / ds : 0;
      for (int l = 0; l < 16; l++) L[16 * j + l] = quant_level(x[16 * j + l], id, -32, 31) + 32;
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

/* IQ4_XS: x ~ d * s_j * kv[l] per 32 (weights: importance form, sigma2 twice the super-block's
 * mean x^2, as ggml's) */
static void quant_iq4_xs_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_iq4_xs *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    float s[8], w[QK_K];
    q35_importance_weights(x, qw, QK_K, qw ? 2 * q35_mean_sq(x, QK_K) : 0, w);
    for (int j = 0; j < 8; j++) s[j] = q35_fit_iq4(x + 32 * j, w + 32 * j, 32);
    const float smax = q35_signed_absmax(s, 8);
    y[i].d = q35_fp32_to_fp16(smax / (float)IQ4_SCALE_MIN);
    const float d = q35_fp16_to_fp32(y[i].d);
    y[i].scales_h = 0;
    memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    for (int j = 0; j < 8; j++) {
      const int ls = d != 0 ? q35_clampi(q35_nearest_int(s[j] / d), IQ4_SCALE_MIN, -IQ4_SCALE_MIN - 1) : 0;
      const int u = ls - IQ4_SCALE_MIN; /* stored biased, 0..63 */
      y[i].scales_l[j / 2] |= (uint8_t)((u & 0xF) << 4 * (j % 2));
      y[i].scales_h |= (uint16_t)((u >> 4) << 2 * j);
      const float dl = d * (float)ls, idl = dl != 0 ? 1.0f / dl : 0;
      const float *xs = x + 32 * j;
      for (int l = 0; l < 16; l++) {
        const int a = dl != 0 ? q35_iq4_nearest(xs[l] * idl) : 8;
        const int b = dl != 0 ? q35_iq4_nearest(xs[l + 16] * idl) : 8;
        y[i].qs[16 * j + l] = (uint8_t)(a | (b << 4));
      }
    }
  }
}

static void quant_q4_0(const float *x, void *dst, int64_t n) { quant_q4_0_w(x, dst, n, NULL); }
static void quant_q5_0(const float *x, void *dst, int64_t n) { quant_q5_0_w(x, dst, n, NULL); }
static void quant_q4_k(const float *x, void *dst, int64_t n) { quant_q4_k_w(x, dst, n, NULL); }
static void quant_q5_k(const float *x, void *dst, int64_t n) { quant_q5_k_w(x, dst, n, NULL); }
static void quant_q6_k(const float *x, void *dst, int64_t n) { quant_q6_k_w(x, dst, n, NULL); }
static void quant_iq4_xs(const float *x, void *dst, int64_t n) { quant_iq4_xs_w(x, dst, n, NULL); }

void q35_kernels_weight_quantizers(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q4_0] = quant_q4_0;
  k->quantize[Q35_TYPE_Q5_0] = quant_q5_0;
  k->quantize[Q35_TYPE_Q4_K] = quant_q4_k;
  k->quantize[Q35_TYPE_Q5_K] = quant_q5_k;
  k->quantize[Q35_TYPE_Q6_K] = quant_q6_k;
  k->quantize[Q35_TYPE_IQ4_XS] = quant_iq4_xs;
}

int q35_weights_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw) {
  switch (type) {
    case Q35_TYPE_Q4_0: quant_q4_0_w(src, dst, n, qw); return 0;
    case Q35_TYPE_Q5_0: quant_q5_0_w(src, dst, n, qw); return 0;
    case Q35_TYPE_Q4_K: quant_q4_k_w(src, dst, n, qw); return 0;
    case Q35_TYPE_Q5_K: quant_q5_k_w(src, dst, n, qw); return 0;
    case Q35_TYPE_Q6_K: quant_q6_k_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ4_XS: quant_iq4_xs_w(src, dst, n, qw); return 0;
    default: return -1;
  }
}
