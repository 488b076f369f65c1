/*
 * quant.c - tensor-type kernels: scalar reference twins, weight quantizers, SIMD dispatch.
 *
 * Layouts and dequantization formulas are GGML's (see quant_internal.h). Three families of
 * kernels live here, all plain C:
 *
 *   dequantize_*   block -> floats, exactly GGML's formulas (float arithmetic in the same
 *                  order, so dequantized values are bit-identical to ggml's).
 *   quantize_*     floats -> blocks. Q8_0 and Q8_K are the activation quantizers and are
 *                  exactly ggml-cpu's x86 ones (Q8_0: the AVX path, round-half-even via
 *                  _mm256_round_ps + cvtps_epi32 with saturating packs; Q8_K: the reference
 *                  with its nearest_int). The weight quantizers are ours: round to nearest
 *                  with a small scale search per (sub-)block minimising squared error.
 *   vec_dot_*      weight row . activation row (in q35_vec_dot_type), integer sums per
 *                  (sub-)block, scaled and accumulated in float per block as ggml does.
 *
 * Dispatch: the public q35_* entry points go through one table of function pointers that
 * is filled once (pthread_once) from the CPU's features, capped by Q35_SIMD. This table is
 * the one piece of global mutable state here; after initialisation it is read-only, so a
 * kernel's result depends on nothing but its inputs.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "kernels/quant_internal.h"
#include "base/util.h"

const int8_t q35_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* GGML's nearest_int: round half to even via the 1.5*2^23 trick (|f| < 2^22). */
static inline int nearest_int(float f) {
  float v = f + 12582912.f;
  int32_t i;
  memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/* Round half to even, independent of the FP environment (for finite |f| < 2^31). */
static inline float round_even(float f) {
  float t = truncf(f), r = f - t; /* exact */
  if (r > 0.5f || (r == 0.5f && fmodf(t, 2.0f) != 0.0f)) return t + 1.0f;
  if (r < -0.5f || (r == -0.5f && fmodf(t, 2.0f) != 0.0f)) return t - 1.0f;
  return t;
}

/* _mm256_cvtps_epi32 of an already-integral float: NaN and out-of-range give INT32_MIN. */
static inline int32_t cvtps_epi32(float f) {
  if (!(f >= -2147483648.0f && f < 2147483648.0f)) return INT32_MIN;
  return (int32_t)round_even(f);
}

/* _mm_max_ps(a, b): a if a > b, else b (so a NaN in either gives b). */
static inline float sse_max(float a, float b) { return a > b ? a : b; }

/* ============================== dequantize ============================== */

static void dequant_f32(const void *src, float *y, int64_t n) { memcpy(y, src, (size_t)n * 4); }

static void dequant_f16(const void *src, float *y, int64_t n) {
  const uint8_t *s = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    y[i] = q35_fp16_to_fp32(h);
  }
}

static void dequant_bf16(const void *src, float *y, int64_t n) {
  const uint8_t *s = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    y[i] = q35_bf16_to_fp32(h);
  }
}

static void dequant_q4_0(const void *src, float *y, int64_t n) {
  const blk_q4_0 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
      y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

static void dequant_q5_0(const void *src, float *y, int64_t n) {
  const blk_q5_0 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d);
    uint32_t qh;
    memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < 16; j++) {
      const int h0 = (int)((qh >> j) << 4) & 0x10;
      const int h1 = (int)(qh >> (j + 12)) & 0x10;
      y[j] = (float)(((b[i].qs[j] & 0xF) | h0) - 16) * d;
      y[j + 16] = (float)(((b[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

static void dequant_q8_0(const void *src, float *y, int64_t n) {
  const blk_q8_0 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d);
    for (int j = 0; j < QK8_0; j++) y[j] = (float)b[i].qs[j] * d;
  }
}

static void dequant_q4_k(const void *src, float *y, int64_t n) {
  const blk_q4_k *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d), dmin = q35_fp16_to_fp32(b[i].dmin);
    const uint8_t *q = b[i].qs;
    for (int c = 0; c < 4; c++, q += 32) {
      uint8_t sc, m;
      q35_scale_min_k4(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q35_scale_min_k4(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
  }
}

static void dequant_q5_k(const void *src, float *y, int64_t n) {
  const blk_q5_k *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d), dmin = q35_fp16_to_fp32(b[i].dmin);
    const uint8_t *ql = b[i].qs, *qh = b[i].qh;
    for (int c = 0; c < 4; c++, ql += 32) {
      const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
      uint8_t sc, m;
      q35_scale_min_k4(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q35_scale_min_k4(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

static void dequant_q6_k(const void *src, float *y, int64_t n) {
  const blk_q6_k *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d);
    const uint8_t *ql = b[i].ql, *qh = b[i].qh;
    const int8_t *sc = b[i].scales;
    for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * (float)sc[is + 0] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
    }
  }
}

static inline int iq4xs_scale(const blk_iq4_xs *b, int ib) {
  return (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b->scales_h >> 2 * ib) & 3) << 4)) - 32;
}

static void dequant_iq4_xs(const void *src, float *y, int64_t n) {
  const blk_iq4_xs *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d);
    const uint8_t *qs = b[i].qs;
    for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
      const float dl = d * (float)iq4xs_scale(&b[i], ib);
      for (int j = 0; j < 16; j++) {
        y[j] = dl * (float)q35_kvalues_iq4nl[qs[j] & 0xF];
        y[j + 16] = dl * (float)q35_kvalues_iq4nl[qs[j] >> 4];
      }
    }
  }
}

static void dequant_q8_k(const void *src, float *y, int64_t n) {
  const blk_q8_k *b = src;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
    for (int j = 0; j < QK_K; j++) y[j] = b[i].d * (float)b[i].qs[j];
}

/* ===================== activation quantizers (exact ggml-cpu x86) ===================== */

void q35_quantize_q8_0_block_ref(const float *x, blk_q8_0 *y) {
  /* max|x| with the AVX reduction tree (matters only for NaN inputs). */
  float m8[8], m4[4];
  for (int l = 0; l < 8; l++)
    m8[l] = sse_max(sse_max(sse_max(fabsf(x[l]), fabsf(x[8 + l])), fabsf(x[16 + l])), fabsf(x[24 + l]));
  for (int l = 0; l < 4; l++) m4[l] = sse_max(m8[4 + l], m8[l]);
  const float amax = sse_max(sse_max(m4[0], m4[2]), sse_max(m4[1], m4[3]));
  const float d = amax / 127.f;
  y->d = q35_fp32_to_fp16(d);
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  for (int j = 0; j < QK8_0; j++) {
    int32_t q = cvtps_epi32(x[j] * id); /* packs_epi32 + packs_epi16: saturate to int8 */
    y->qs[j] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
  }
}

static void quant_q8_0(const float *x, void *dst, int64_t n) {
  blk_q8_0 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++) q35_quantize_q8_0_block_ref(x + i * QK8_0, &y[i]);
}

void q35_quantize_q8_k_block_ref(const float *x, blk_q8_k *y) {
  float max = 0, amax = 0;
  for (int j = 0; j < QK_K; j++) {
    const float ax = fabsf(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (!amax) {
    y->d = 0;
    memset(y->qs, 0, QK_K);
    memset(y->bsums, 0, sizeof y->bsums);
    return;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < QK_K; j++) {
    const int v = nearest_int(iscale * x[j]);
    y->qs[j] = (int8_t)(uint8_t)((v < 127 ? v : 127) & 0xFF); /* GGML: (int8_t)MIN(127, v) */
  }
  for (int j = 0; j < QK_K / 16; j++) {
    int s = 0;
    for (int l = 0; l < 16; l++) s += y->qs[16 * j + l];
    y->bsums[j] = (int16_t)s;
  }
  y->d = 1 / iscale;
}

static void quant_q8_k(const float *x, void *dst, int64_t n) {
  blk_q8_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++) q35_quantize_q8_k_block_ref(x + i * QK_K, &y[i]);
}

static void quant_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * 4); }

static void quant_f16(const float *x, void *dst, int64_t n) {
  uint8_t *d = dst;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = q35_fp32_to_fp16(x[i]);
    memcpy(d + 2 * i, &h, 2);
  }
}

static void quant_bf16(const float *x, void *dst, int64_t n) {
  uint8_t *d = dst;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = q35_fp32_to_bf16(x[i]);
    memcpy(d + 2 * i, &h, 2);
  }
}

/* ============================== weight quantizers ============================== */
/*
 * Symmetric grid x ~ d*L, L in [lo, hi] (Q4_0, Q5_0, Q6_K sub-blocks): try a handful of
 * inverse scales mapping the largest-magnitude element near either end of the grid, fit d by
 * least squares for each rounding, keep the lowest squared error. Returns d (0 if all zero).
 */
static float fit_symmetric(const float *x, int n, int lo, int hi) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > amax) {
      amax = fabsf(x[i]);
      max = x[i];
    }
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
  *d_out = q35_fp32_to_fp16(amax / 63.f);
  *dmin_out = q35_fp32_to_fp16(mmax / 63.f);
  const float d = q35_fp16_to_fp32(*d_out), dmin = q35_fp16_to_fp32(*dmin_out);
  uint8_t sc[8], mm[8];
  for (int j = 0; j < 8; j++) {
    int s = d > 0 ? (int)lrintf(a[j] / d) : 0, t = dmin > 0 ? (int)lrintf(m[j] / dmin) : 0;
    sc[j] = (uint8_t)(s < 0 ? 0 : s > 63 ? 63 : s);
    mm[j] = (uint8_t)(t < 0 ? 0 : t > 63 ? 63 : t);
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
    float s[16], smax = 0, samax = 0;
    for (int j = 0; j < 16; j++) {
      s[j] = fit_symmetric(x + 16 * j, 16, -32, 31);
      if (fabsf(s[j]) > samax) {
        samax = fabsf(s[j]);
        smax = s[j];
      }
    }
    y[i].d = q35_fp32_to_fp16(smax / -128.f);
    const float d = q35_fp16_to_fp32(y[i].d);
    int L[QK_K];
    for (int j = 0; j < 16; j++) {
      int sc = d != 0 ? (int)lrintf(s[j] / d) : 0;
      sc = sc < -128 ? -128 : sc > 127 ? 127 : sc;
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
  float max = 0, amax = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > amax) {
      amax = fabsf(x[i]);
      max = x[i];
    }
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
    float s[8], smax = 0, samax = 0;
    for (int j = 0; j < 8; j++) {
      s[j] = fit_iq4(x + 32 * j, 32);
      if (fabsf(s[j]) > samax) {
        samax = fabsf(s[j]);
        smax = s[j];
      }
    }
    y[i].d = q35_fp32_to_fp16(smax / -32.f);
    const float d = q35_fp16_to_fp32(y[i].d);
    y[i].scales_h = 0;
    memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    for (int j = 0; j < 8; j++) {
      int ls = d != 0 ? (int)lrintf(s[j] / d) : 0;
      ls = ls < -32 ? -32 : ls > 31 ? 31 : ls;
      const int u = ls + 32;
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

/* ============================== dot products (reference) ============================== */

static float dot_f32(int64_t n, const void *w, const void *x) {
  const uint8_t *a = w, *b = x; /* rows may be unaligned: memcpy loads */
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    float p, q;
    memcpy(&p, a + 4 * i, 4);
    memcpy(&q, b + 4 * i, 4);
    s += (double)p * q;
  }
  return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *x) {
  const uint8_t *a = w, *b = x;
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    uint16_t p, q;
    memcpy(&p, a + 2 * i, 2);
    memcpy(&q, b + 2 * i, 2);
    s += (double)q35_fp16_to_fp32(p) * q35_fp16_to_fp32(q);
  }
  return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *x) {
  const uint8_t *a = w, *b = x;
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    uint16_t p, q;
    memcpy(&p, a + 2 * i, 2);
    memcpy(&q, b + 2 * i, 2);
    s += (double)q35_bf16_to_fp32(p) * q35_bf16_to_fp32(q);
  }
  return (float)s;
}

/* Q4_0 x Q8_0X (the activation's Q8_0 blocks read back from their Q8_0X places) */
static float dot_q4_0(int64_t n, const void *w, const void *x) {
  const blk_q4_0 *a = w;
  const int64_t nb = n / QK8_0;
  float sumf = 0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8x_get(x, nb, i, &b);
    int isum = 0;
    for (int j = 0; j < 16; j++)
      isum += ((a[i].qs[j] & 0xF) - 8) * b.qs[j] + ((a[i].qs[j] >> 4) - 8) * b.qs[j + 16];
    sumf += (float)isum * (q35_fp16_to_fp32(a[i].d) * q35_fp16_to_fp32(b.d));
  }
  return sumf;
}

/* Q8_0X: Q8_0's quantization block by block, stored in the Q8_0X layout */
static void quant_q8_0x(const float *x, void *dst, int64_t n) {
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q35_quantize_q8_0_block_ref(x + i * QK8_0, &b);
    q8x_put(dst, nb, i, &b);
  }
}

/* Q8_0Z: the same blocks in the Q8_0Z layout (padding zeroed) */
static void quant_q8_0z(const float *x, void *dst, int64_t n) {
  const int64_t nb = n / QK8_0;
  memset(dst, 0, q35_row_size(Q35_TYPE_Q8_0Z, n));
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q35_quantize_q8_0_block_ref(x + i * QK8_0, &b);
    q8z_put(dst, i, &b);
  }
}

static void dequant_q8_0z(const void *src, float *y, int64_t n) {
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8z_get(src, i, &b);
    const float d = q35_fp16_to_fp32(b.d);
    for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = (float)b.qs[j] * d;
  }
}

static void dequant_q8_0x(const void *src, float *y, int64_t n) {
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8x_get(src, nb, i, &b);
    dequant_q8_0(&b, y + i * QK8_0, QK8_0);
  }
}

static float dot_q5_0(int64_t n, const void *w, const void *x) {
  const blk_q5_0 *a = w;
  const blk_q8_0 *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_0; i++) {
    uint32_t qh;
    memcpy(&qh, a[i].qh, 4);
    int isum = 0;
    for (int j = 0; j < 16; j++) {
      const int h0 = (int)((qh >> j) << 4) & 0x10, h1 = (int)(qh >> (j + 12)) & 0x10;
      isum += (((a[i].qs[j] & 0xF) | h0) - 16) * b[i].qs[j] +
              (((a[i].qs[j] >> 4) | h1) - 16) * b[i].qs[j + 16];
    }
    sumf += (float)isum * (q35_fp16_to_fp32(a[i].d) * q35_fp16_to_fp32(b[i].d));
  }
  return sumf;
}

/* Q8_0 x Q8_0Y (the activation's Q8_0 blocks read back from their Q8_0Y places) */
static float dot_q8_0(int64_t n, const void *w, const void *x) {
  const blk_q8_0 *a = w;
  const int64_t nb = n / QK8_0;
  float sumf = 0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8y_get(x, nb, i, &b);
    int isum = 0;
    for (int j = 0; j < QK8_0; j++) isum += a[i].qs[j] * b.qs[j];
    sumf += (float)isum * (q35_fp16_to_fp32(a[i].d) * q35_fp16_to_fp32(b.d));
  }
  return sumf;
}

static void quant_q8_0y(const float *x, void *dst, int64_t n) {
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q35_quantize_q8_0_block_ref(x + i * QK8_0, &b);
    q8y_put(dst, nb, i, &b);
  }
}

static void dequant_q8_0y(const void *src, float *y, int64_t n) {
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8y_get(src, nb, i, &b);
    dequant_q8_0(&b, y + i * QK8_0, QK8_0);
  }
}

/* Q4_K/Q5_K: sum_j sc_j * (q . y)_j and sum_j m_j * bsum_j; sumf += d*isum - dmin*msum. */
static float dot_q4_k(int64_t n, const void *w, const void *x) {
  const blk_q4_k *a = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      q35_scale_min_k4(j, a[i].scales, &sc, &m);
      const uint8_t *q = a[i].qs + 32 * (j / 2);
      const int8_t *y = b[i].qs + 32 * j;
      int s = 0;
      for (int l = 0; l < 32; l++) s += (j % 2 ? q[l] >> 4 : q[l] & 0xF) * y[l];
      isum += sc * s;
      msum += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
    const float d = q35_fp16_to_fp32(a[i].d) * b[i].d, dmin = q35_fp16_to_fp32(a[i].dmin) * b[i].d;
    sumf += d * (float)isum - dmin * (float)msum;
  }
  return sumf;
}

static float dot_q5_k(int64_t n, const void *w, const void *x) {
  const blk_q5_k *a = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      q35_scale_min_k4(j, a[i].scales, &sc, &m);
      const uint8_t *q = a[i].qs + 32 * (j / 2);
      const int8_t *y = b[i].qs + 32 * j;
      int s = 0;
      for (int l = 0; l < 32; l++) {
        const int lo = j % 2 ? q[l] >> 4 : q[l] & 0xF;
        s += (lo | (((a[i].qh[l] >> j) & 1) << 4)) * y[l];
      }
      isum += sc * s;
      msum += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
    const float d = q35_fp16_to_fp32(a[i].d) * b[i].d, dmin = q35_fp16_to_fp32(a[i].dmin) * b[i].d;
    sumf += d * (float)isum - dmin * (float)msum;
  }
  return sumf;
}

static float dot_q6_k(int64_t n, const void *w, const void *x) {
  const blk_q6_k *a = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int h = 0; h < 2; h++) {
      const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
      const int8_t *y = b[i].qs + 128 * h, *sc = a[i].scales + 8 * h;
      int s[8] = {0};
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        s[is + 0] += (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32) * y[l];
        s[is + 2] += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * y[l + 32];
        s[is + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * y[l + 64];
        s[is + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * y[l + 96];
      }
      for (int k = 0; k < 8; k++) isum += sc[k] * s[k];
    }
    sumf += q35_fp16_to_fp32(a[i].d) * b[i].d * (float)isum;
  }
  return sumf;
}

static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
  const blk_iq4_xs *a = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int ib = 0; ib < 8; ib++) {
      const uint8_t *q = a[i].qs + 16 * ib;
      const int8_t *y = b[i].qs + 32 * ib;
      int s = 0;
      for (int j = 0; j < 16; j++)
        s += q35_kvalues_iq4nl[q[j] & 0xF] * y[j] + q35_kvalues_iq4nl[q[j] >> 4] * y[j + 16];
      isum += iq4xs_scale(&a[i], ib) * s;
    }
    sumf += q35_fp16_to_fp32(a[i].d) * b[i].d * (float)isum;
  }
  return sumf;
}

/* ============================== tables and dispatch ============================== */

static void kernels_ref(q35_kernels *k) {
  memset(k, 0, sizeof *k);
#define SET(T, dq, qz, vd) \
  (k->dequantize[T] = (dq), k->quantize[T] = (qz), k->vec_dot[T] = (vd))
  SET(Q35_TYPE_F32, dequant_f32, quant_f32, dot_f32);
  SET(Q35_TYPE_F16, dequant_f16, quant_f16, dot_f16);
  SET(Q35_TYPE_BF16, dequant_bf16, quant_bf16, dot_bf16);
  SET(Q35_TYPE_Q4_0, dequant_q4_0, quant_q4_0, dot_q4_0);
  SET(Q35_TYPE_Q5_0, dequant_q5_0, quant_q5_0, dot_q5_0);
  SET(Q35_TYPE_Q8_0, dequant_q8_0, quant_q8_0, dot_q8_0);
  SET(Q35_TYPE_Q4_K, dequant_q4_k, quant_q4_k, dot_q4_k);
  SET(Q35_TYPE_Q5_K, dequant_q5_k, quant_q5_k, dot_q5_k);
  SET(Q35_TYPE_Q6_K, dequant_q6_k, quant_q6_k, dot_q6_k);
  SET(Q35_TYPE_IQ4_XS, dequant_iq4_xs, quant_iq4_xs, dot_iq4_xs);
  SET(Q35_TYPE_Q8_K, dequant_q8_k, quant_q8_k, NULL);
  SET(Q35_TYPE_Q8_0X, dequant_q8_0x, quant_q8_0x, NULL);
  SET(Q35_TYPE_Q8_0Y, dequant_q8_0y, quant_q8_0y, NULL);
  SET(Q35_TYPE_Q8_0Z, dequant_q8_0z, quant_q8_0z, NULL);
#undef SET
  k->q4_0_act = Q35_TYPE_Q8_0X;
}

static int cpu_has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

static int cpu_has_avx512(void) {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* Overlay a level's entries onto a table (NULL entries keep what is there). */
static void overlay(q35_kernels *dst, const q35_kernels *src) {
  if (src->q4_0_act) dst->q4_0_act = src->q4_0_act;
  for (int t = 0; t < Q35_TYPE_COUNT; t++) {
    if (src->vec_dot[t]) dst->vec_dot[t] = src->vec_dot[t];
    if (src->quantize[t]) dst->quantize[t] = src->quantize[t];
    if (src->dequantize[t]) dst->dequantize[t] = src->dequantize[t];
    /* a tile kernel must match the table's vec_dot: a level that brings a vec_dot without a
     * tile drops the lower level's tile (the loop over vec_dot takes over) */
    if (src->vec_dot[t]) dst->tile[t] = src->tile[t];
    else if (src->tile[t]) dst->tile[t] = src->tile[t];
    if (src->vec_dot[t]) dst->gemv[t] = src->gemv[t];
    else if (src->gemv[t]) dst->gemv[t] = src->gemv[t];
  }
}

int q35_kernels_get(int level, q35_kernels *out) {
  kernels_ref(out);
  if (level >= 1) {
    if (!cpu_has_avx2()) return -1;
    q35_kernels k;
    memset(&k, 0, sizeof k);
    q35_kernels_avx2(&k);
    overlay(out, &k);
  }
  if (level >= 2) {
    if (!cpu_has_avx512()) return -1;
    q35_kernels k;
    memset(&k, 0, sizeof k);
    q35_kernels_avx512(&k);
    overlay(out, &k);
  }
  return level >= 0 && level <= 2 ? 0 : -1;
}

/* The dispatch table: written once under pthread_once, read-only afterwards. */
static q35_kernels g_kernels, g_ref_kernels;
static int g_level;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void dispatch_init(void) {
  int cap = 2;
  const char *env = getenv("Q35_SIMD");
  if (env && *env) {
    if (!strcmp(env, "scalar")) cap = 0;
    else if (!strcmp(env, "avx2")) cap = 1;
  }
  int level = cap >= 2 && cpu_has_avx512() ? 2 : cap >= 1 && cpu_has_avx2() ? 1 : 0;
  kernels_ref(&g_ref_kernels);
  q35_kernels_get(level, &g_kernels);
  g_level = level;
}

static inline const q35_kernels *kern(void) {
  pthread_once(&g_once, dispatch_init);
  return &g_kernels;
}

static inline const q35_kernels *kern_ref(void) {
  pthread_once(&g_once, dispatch_init);
  return &g_ref_kernels;
}

const char *q35_simd_level(void) {
  kern();
  return g_level == 2 ? "avx512" : g_level == 1 ? "avx2" : "scalar";
}

int q35_kernels_vec_dot_type(const q35_kernels *k, int type) {
  switch (type) {
  case Q35_TYPE_F32: case Q35_TYPE_F16: case Q35_TYPE_BF16: return type;
  case Q35_TYPE_Q8_0: return Q35_TYPE_Q8_0Y;
  case Q35_TYPE_Q4_0: return k->q4_0_act ? k->q4_0_act : Q35_TYPE_Q8_0X;
  case Q35_TYPE_Q5_0: return Q35_TYPE_Q8_0;
  case Q35_TYPE_Q4_K: case Q35_TYPE_Q5_K: case Q35_TYPE_Q6_K: case Q35_TYPE_IQ4_XS: return Q35_TYPE_Q8_K;
  default: return -1;
  }
}

int q35_vec_dot_type(int type) { return q35_kernels_vec_dot_type(kern(), type); }

/* The _ref entry points take activations in q35_vec_dot_type's layout; where that is not the
 * reference table's own (Q8_0Z), they read the same Q8_0 blocks into the reference's layout
 * first. Returns x itself or a malloc'ed copy in *tmp (NULL on allocation failure). */
static const void *ref_act(int type, int64_t n, const void *x, size_t xs, int nc, size_t *rxs, void **tmp) {
  *tmp = NULL;
  *rxs = xs;
  if (type != Q35_TYPE_Q4_0 || kern()->q4_0_act != Q35_TYPE_Q8_0Z) return x;
  const int64_t nb = n / QK8_0;
  const size_t rs = q35_row_size(Q35_TYPE_Q8_0X, n);
  uint8_t *o = malloc(rs * (size_t)(nc > 0 ? nc : 1));
  if (!o) return NULL;
  for (int c = 0; c < nc; c++)
    for (int64_t i = 0; i < nb; i++) {
      blk_q8_0 b;
      q8z_get((const uint8_t *)x + (size_t)c * xs, i, &b);
      q8x_put(o + (size_t)c * rs, nb, i, &b);
    }
  *tmp = o;
  *rxs = rs;
  return o;
}

static inline int type_ok(int type) { return type >= 0 && type < Q35_TYPE_COUNT; }

/* Unknown types: dequantize writes zeros, quantize writes nothing, vec_dot returns NaN
 * (callers check q35_type_supported first; these are no-crash fallbacks). */
void q35_dequantize_row(int type, const void *src, float *dst, int64_t n) {
  const q35_kernels *k = kern();
  if (type_ok(type) && k->dequantize[type]) k->dequantize[type](src, dst, n);
  else memset(dst, 0, (size_t)n * sizeof *dst);
}

void q35_dequantize_row_ref(int type, const void *src, float *dst, int64_t n) {
  const q35_kernels *k = kern_ref();
  if (type_ok(type) && k->dequantize[type]) k->dequantize[type](src, dst, n);
  else memset(dst, 0, (size_t)n * sizeof *dst);
}

void q35_quantize_row(int type, const float *src, void *dst, int64_t n) {
  const q35_kernels *k = kern();
  if (type_ok(type) && k->quantize[type]) k->quantize[type](src, dst, n);
}

void q35_quantize_row_ref(int type, const float *src, void *dst, int64_t n) {
  const q35_kernels *k = kern_ref();
  if (type_ok(type) && k->quantize[type]) k->quantize[type](src, dst, n);
}

float q35_vec_dot(int type, int64_t n, const void *w, const void *x) {
  const q35_kernels *k = kern();
  return type_ok(type) && k->vec_dot[type] ? k->vec_dot[type](n, w, x) : NAN;
}

float q35_vec_dot_ref(int type, int64_t n, const void *w, const void *x) {
  const q35_kernels *k = kern_ref();
  if (!type_ok(type) || !k->vec_dot[type]) return NAN;
  void *tmp;
  size_t rxs;
  const void *rx = ref_act(type, n, x, 0, 1, &rxs, &tmp);
  const float v = rx ? k->vec_dot[type](n, w, rx) : NAN;
  free(tmp);
  return v;
}

void q35_tile_run(const q35_kernels *k, int type, int64_t n, const void *w, size_t ws, int nr, const void *x,
                  size_t xs, int nc, float *out, size_t ors, size_t ocs) {
  if (nr <= 0 || nc <= 0) return;
  /* one column: the 1 x 1 kernels stream faster than the R x 1 tiles (same bits either way) */
  if (type_ok(type) && k->tile[type] && nc > 1) {
    k->tile[type](n, w, ws, nr, x, xs, nc, out, ors, ocs);
    return;
  }
  if (type_ok(type) && k->gemv[type] && nc == 1) {
    k->gemv[type](n, w, ws, nr, x, xs, 1, out, ors, ocs);
    return;
  }
  const q35_vec_dot_fn f = type_ok(type) ? k->vec_dot[type] : NULL;
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++)
      out[(size_t)r * ors + (size_t)c * ocs] =
          f ? f(n, (const char *)w + (size_t)r * ws, (const char *)x + (size_t)c * xs) : NAN;
}

void q35_vec_dot_rows(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x, float *out) {
  const q35_kernels *k = kern();
  if (nr <= 0) return;
  if (type_ok(type) && k->gemv[type]) {
    k->gemv[type](n, w, w_stride, nr, x, 0, 1, out, 1, 0);
    return;
  }
  const q35_vec_dot_fn f = type_ok(type) ? k->vec_dot[type] : NULL;
  for (int r = 0; r < nr; r++) out[r] = f ? f(n, (const char *)w + (size_t)r * w_stride, x) : NAN;
}

void q35_vec_dot_tile(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                      size_t x_stride, int nc, float *out, size_t out_stride) {
  q35_tile_run(kern(), type, n, w, w_stride, nr, x, x_stride, nc, out, out_stride, 1);
}

void q35_vec_dot_tile_ex(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                         size_t x_stride, int nc, float *out, size_t out_rs, size_t out_cs) {
  q35_tile_run(kern(), type, n, w, w_stride, nr, x, x_stride, nc, out, out_rs, out_cs);
}

void q35_vec_dot_tile_ref(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                          size_t x_stride, int nc, float *out, size_t out_stride) {
  void *tmp;
  size_t rxs;
  const void *rx = ref_act(type, n, x, x_stride, nc, &rxs, &tmp);
  if (!rx) {
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < nc; c++) out[(size_t)r * out_stride + c] = NAN;
    return;
  }
  q35_tile_run(kern_ref(), type, n, w, w_stride, nr, rx, rxs, nc, out, out_stride, 1);
  free(tmp);
}
