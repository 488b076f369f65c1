/*
 * quantize_lowbit.c - the weight quantizers of the lowbit family: floats -> Q2_K, Q3_K, MXFP4,
 * IQ4_NL, Q4_1, Q5_1 blocks (plain C; every SIMD level uses these, but for the plain Q4_1 / Q5_1
 * / Q3_K ones, whose vector twins are in quantize_plain_vec.c and quantize_plain_avx2.c).
 *
 * Ours, not GGML's: per (sub-)block a handful of candidate scales (the range mapped onto the
 * grid, stretched a little either way), the scale (and offset) fitted by weighted least squares
 * for each candidate's rounding, the lowest weighted squared error kept; then the sub-block scales
 * are quantized under the fp16 super-scale and the elements rounded again against the scales
 * as stored. Without an importance vector, Q4_1 / Q5_1 / Q3_K fit by least-squares rounds from
 * ggml's one-scale start instead (quantize_fit.h: ggml's speed, less error than its start).
 * Weights are 1 (plain rms error) or, with an importance vector qw (llama.cpp's
 * imatrix: mean squared activation per column), qw[i] * sqrt(sigma2 + x[i]^2) as ggml's
 * importance-weighted quantizers use, sigma2 = mean x^2 of the row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_lowbit.h"
#include "kernels/quantize_fit.h"

/* round(v) clamped to [lo, hi]; NaN -> lo */
static inline int round_clamp(float v, int lo, int hi) { return q35_clampi(q35_nearest_int(v), lo, hi); }

static inline float signed_absmax(const float *x, int n) { return q35_signed_absmax(x, n); }

static inline void fit_affine(const float *x, const float *w, int n, int nmax, int neg_offset, int c_lo, int c_hi,
                              float step, float *a_out, float *b_out) {
  q35_fit_aff(x, w, n, nmax, neg_offset, c_lo, c_hi, step, a_out, b_out);
}

/* Element weights of one block: 1, or the importance form (see the top of the file). */
static void block_weights(const float *x, const float *qw, int n, float sigma2, float *w) {
  for (int i = 0; i < n; i++) w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : 1.0f;
}

static float row_sigma2(const float *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(x[i])) s += (double)x[i] * x[i];
  return n ? (float)(s / (double)n) : 0.0f;
}

/* ------------------------------ Q2_K ------------------------------ */

static void quant_q2_k_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q2_k *y = dst;
  const float sigma2 = qw ? row_sigma2(x, n) : 0;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    float w[QK_K], a[16], m[16], amax = 0, mmax = 0;
    block_weights(x, qw, QK_K, sigma2, w);
    for (int j = 0; j < 16; j++) {
      float b;
      fit_affine(x + 16 * j, w + 16 * j, 16, 3, 1, -5, 10, 0.1f, &a[j], &b);
      m[j] = -b;
      amax = fmaxf(amax, a[j]);
      mmax = fmaxf(mmax, m[j]);
    }
    y[i].d = q35_fp32_to_fp16(amax / 15.f);
    y[i].dmin = q35_fp32_to_fp16(mmax / 15.f);
    const float d = q35_fp16_to_fp32(y[i].d), dmin = q35_fp16_to_fp32(y[i].dmin);
    uint8_t L[QK_K];
    for (int j = 0; j < 16; j++) {
      /* the rounded (scale, min) and their neighbours, each with its own rounding of the levels */
      const float *xs = x + 16 * j, *ws = w + 16 * j;
      const int sc0 = d > 0 ? round_clamp(a[j] / d, 0, 15) : 0, mn0 = dmin > 0 ? round_clamp(m[j] / dmin, 0, 15) : 0;
      int best_sc = sc0, best_mn = mn0;
      float best_err = INFINITY;
      for (int sc = sc0 - 1; sc <= sc0 + 1; sc++)
        for (int mn = mn0 - 1; mn <= mn0 + 1; mn++) {
          if (sc < 0 || sc > 15 || mn < 0 || mn > 15) continue;
          const float da = d * (float)sc, dm = dmin * (float)mn, ia = da > 0 ? 1.0f / da : 0;
          float acc[4] = {0, 0, 0, 0};
          for (int l = 0; l < 16; l += 4)
            for (int k = 0; k < 4; k++) {
              const float q = q35_round_clampf((xs[l + k] + dm) * ia, 0, 3);
              const float e = xs[l + k] - (da * q - dm);
              acc[k] += ws[l + k] * e * e;
            }
          const float err = (acc[0] + acc[1]) + (acc[2] + acc[3]);
          if (err < best_err) {
            best_err = err;
            best_sc = sc;
            best_mn = mn;
          }
        }
      y[i].scales[j] = (uint8_t)(best_sc | (best_mn << 4));
      const float da = d * (float)best_sc, dm = dmin * (float)best_mn, ia = da > 0 ? 1.0f / da : 0;
      for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)(ia > 0 ? round_clamp((xs[l] + dm) * ia, 0, 3) : 0);
    }
    for (int h = 0; h < 2; h++)
      for (int l = 0; l < 32; l++) {
        const uint8_t *q = L + 128 * h + l;
        y[i].qs[32 * h + l] = (uint8_t)(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
      }
  }
}

/* ------------------------------ Q3_K ------------------------------ */

static void quant_q3_k_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q3_k *y = dst;
  const float sigma2 = qw ? row_sigma2(x, n) : 0;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    float w[QK_K], s[16];
    block_weights(x, qw, QK_K, sigma2, w);
    /* the largest element mapped near either end of the 8 levels: more candidates hardly lower
     * the error (measured against 14 from -4.2 to 4.2) */
    static const float tg[] = {-4.2f, -4.0f, -3.8f, -3.5f, -3.2f, 3.2f, 3.0f, 2.8f};
    for (int j = 0; j < 16; j++)
      s[j] = qw ? q35_fit_sym(x + 16 * j, w + 16 * j, 16, -4, 3, tg, 8)
                : q35_fit_sym_plain(x + 16 * j, 16, -4, 3, Q35_PLAIN_ITERS_SYM); /* no imatrix: ggml's start */
    const float smax = signed_absmax(s, 16);
    y[i].d = q35_fp32_to_fp16(smax / -32.f);
    const float d = q35_fp16_to_fp32(y[i].d);
    memset(y[i].scales, 0, sizeof y[i].scales);
    memset(y[i].hmask, 0, sizeof y[i].hmask);
    memset(y[i].qs, 0, sizeof y[i].qs);
    for (int j = 0; j < 16; j++) {
      const int sc0 = d != 0 ? round_clamp(s[j] / d, -32, 31) : 0;
      int sc = sc0;
      float best_err = INFINITY;
      for (int c = sc0 - 1; c <= sc0 + 1 && d != 0; c++) {
        if (c < -32 || c > 31) continue;
        const float ds = d * (float)c, ids = ds != 0 ? 1.0f / ds : 0;
        float acc[4] = {0, 0, 0, 0};
        for (int l = 0; l < 16; l += 4)
          for (int k = 0; k < 4; k++) {
            const float v = x[16 * j + l + k], e = v - ds * q35_round_clampf(v * ids, -4, 3);
            acc[k] += w[16 * j + l + k] * e * e;
          }
        const float err = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        if (err < best_err) {
          best_err = err;
          sc = c;
        }
      }
      const int u = sc + 32;
      y[i].scales[j % 8] |= (uint8_t)((u & 0xF) << (j < 8 ? 0 : 4));
      y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
      const float ds = d * (float)sc, ids = ds != 0 ? 1.0f / ds : 0;
      const int h = j / 8, sh = (j % 8) / 2, half = j % 2;
      for (int l = 0; l < 16; l++) {
        const int q = (ids != 0 ? round_clamp(x[16 * j + l] * ids, -4, 3) : 0) + 4; /* 0..7 */
        const int e = 16 * half + l;
        y[i].qs[32 * h + e] |= (uint8_t)((q & 3) << (2 * sh));
        if (q & 4) y[i].hmask[e] |= (uint8_t)(1u << (4 * h + sh));
      }
    }
  }
}

/* ------------------------------ MXFP4 ------------------------------ */

/* Index of the code book entry nearest to v (in units of the halved scale). */
static inline int mxfp4_index(float v) {
  const float a = fabsf(v);
  const int k = a < 0.5f ? 0 : a < 1.5f ? 1 : a < 2.5f ? 2 : a < 3.5f ? 3 : a < 5.f ? 4 : a < 7.f ? 5 : a < 10.f ? 6 : 7;
  return v < 0 && k ? k + 8 : k;
}

static void quant_mxfp4(const float *x, void *dst, int64_t n) {
  blk_mxfp4 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; j++)
      if (isfinite(x[j])) amax = fmaxf(amax, fabsf(x[j]));
    /* amax -> 6 * 2^(e - 127) .. 12 * 2^(e-127)/2: e0 = floor(log2 amax) - 2 + 127; try around it */
    const int e0 = amax > 0 ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
    int best_e = e0 < 0 ? 0 : e0 > 254 ? 254 : e0;
    double best_err = INFINITY;
    for (int e = e0 - 1; e <= e0 + 1 && amax > 0; e++) {
      if (e < 0 || e > 254) continue;
      const float d = q35_e8m0_half((uint8_t)e);
      double err = 0;
      for (int j = 0; j < QK8_0; j++) {
        const float v = isfinite(x[j]) ? x[j] : 0;
        const double r = v - (double)q35_kvalues_mxfp4[mxfp4_index(ldexpf(v, 128 - e))] * d;
        err += r * r;
      }
      if (err < best_err) {
        best_err = err;
        best_e = e;
      }
    }
    y[i].e = (uint8_t)best_e;
    for (int j = 0; j < 16; j++) {
      const float v0 = isfinite(x[j]) ? x[j] : 0, v1 = isfinite(x[j + 16]) ? x[j + 16] : 0;
      y[i].qs[j] = (uint8_t)(mxfp4_index(ldexpf(v0, 128 - best_e)) | (mxfp4_index(ldexpf(v1, 128 - best_e)) << 4));
    }
  }
}

/* ------------------------------ IQ4_NL ------------------------------ */

static void quant_iq4_nl_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_iq4_nl *y = dst;
  const float sigma2 = qw ? row_sigma2(x, n) : 0;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0, qw = qw ? qw + QK8_0 : NULL) {
    float w[QK8_0];
    block_weights(x, qw, QK8_0, sigma2, w);
    y[i].d = q35_fp32_to_fp16(q35_fit_iq4(x, w, QK8_0));
    const float d = q35_fp16_to_fp32(y[i].d), id = d != 0 ? 1.0f / d : 0;
    for (int j = 0; j < 16; j++) {
      const int a = id != 0 ? q35_iq4_nearest(x[j] * id) : 8, b = id != 0 ? q35_iq4_nearest(x[j + 16] * id) : 8;
      y[i].qs[j] = (uint8_t)(a | (b << 4));
    }
  }
}

/* ------------------------------ Q4_1 / Q5_1 ------------------------------ */

/* x ~ d*L + m with L in [0, nmax] (d, m fp16): the fit (the candidate search with weights w, the
 * plain least-squares rounds without: w NULL), then levels against the stored d, m. */
static void affine_block(const float *x, const float *w, int nmax, uint16_t *dh, uint16_t *mh, uint8_t *L) {
  float a, b;
  if (w) fit_affine(x, w, QK8_0, nmax, 0, -18, 18, 0.05f, &a, &b);
  else q35_fit_aff_plain(x, QK8_0, nmax, Q35_PLAIN_ITERS_AFF, &a, &b);
  *dh = q35_fp32_to_fp16(a);
  *mh = q35_fp32_to_fp16(b);
  const float d = q35_fp16_to_fp32(*dh), m = q35_fp16_to_fp32(*mh);
  q35_plain_levels_aff(x, d, m, nmax, L);
}

static void quant_q4_1_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q4_1 *y = dst;
  const float sigma2 = qw ? row_sigma2(x, n) : 0;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0, qw = qw ? qw + QK8_0 : NULL) {
    float w[QK8_0];
    uint8_t L[QK8_0];
    if (qw) block_weights(x, qw, QK8_0, sigma2, w);
    uint16_t dh, mh;
    affine_block(x, qw ? w : NULL, 15, &dh, &mh, L);
    y[i].d = dh;
    y[i].m = mh;
    for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
  }
}

static void quant_q5_1_w(const float *x, void *dst, int64_t n, const float *qw) {
  blk_q5_1 *y = dst;
  const float sigma2 = qw ? row_sigma2(x, n) : 0;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0, qw = qw ? qw + QK8_0 : NULL) {
    float w[QK8_0];
    uint8_t L[QK8_0];
    if (qw) block_weights(x, qw, QK8_0, sigma2, w);
    uint16_t dh, mh;
    affine_block(x, qw ? w : NULL, 31, &dh, &mh, L);
    y[i].d = dh;
    y[i].m = mh;
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
    for (int j = 0; j < 32; j++) qh |= (uint32_t)(L[j] >> 4) << j;
    memcpy(y[i].qh, &qh, 4);
  }
}

/* ------------------------------ entry points ------------------------------ */

static void quant_q2_k(const float *x, void *dst, int64_t n) { quant_q2_k_w(x, dst, n, NULL); }
static void quant_q3_k(const float *x, void *dst, int64_t n) { quant_q3_k_w(x, dst, n, NULL); }
static void quant_iq4_nl(const float *x, void *dst, int64_t n) { quant_iq4_nl_w(x, dst, n, NULL); }
static void quant_q4_1(const float *x, void *dst, int64_t n) { quant_q4_1_w(x, dst, n, NULL); }
static void quant_q5_1(const float *x, void *dst, int64_t n) { quant_q5_1_w(x, dst, n, NULL); }

int q35_lowbit_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw) {
  switch (type) {
  case Q35_TYPE_Q2_K: quant_q2_k_w(src, dst, n, qw); return 0;
  case Q35_TYPE_Q3_K: quant_q3_k_w(src, dst, n, qw); return 0;
  case Q35_TYPE_IQ4_NL: quant_iq4_nl_w(src, dst, n, qw); return 0;
  case Q35_TYPE_Q4_1: quant_q4_1_w(src, dst, n, qw); return 0;
  case Q35_TYPE_Q5_1: quant_q5_1_w(src, dst, n, qw); return 0;
  case Q35_TYPE_MXFP4: quant_mxfp4(src, dst, n); return 0; /* no importance form (as ggml) */
  default: return -1;
  }
}

void q35_kernels_lowbit_quantizers(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q2_K] = quant_q2_k;
  k->quantize[Q35_TYPE_Q3_K] = quant_q3_k;
  k->quantize[Q35_TYPE_MXFP4] = quant_mxfp4;
  k->quantize[Q35_TYPE_IQ4_NL] = quant_iq4_nl;
  k->quantize[Q35_TYPE_Q4_1] = quant_q4_1;
  k->quantize[Q35_TYPE_Q5_1] = quant_q5_1;
}
