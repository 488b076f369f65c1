/*
 * quant_ref.c - the scalar reference level of the weight kernels, plain C, for every type:
 *
 *   dequant_TYPE   block -> floats, exactly GGML's formulas (float arithmetic in the same order,
 *                  so dequantized values are bit-identical to ggml's).
 *   quant_q8_0,    the activation quantizers, exactly ggml-cpu's x86 ones (Q8_0: the AVX path,
 *   quant_q8_k     round-half-even via _mm256_round_ps + cvtps_epi32 with saturating packs;
 *                  Q8_K: the reference with its nearest_int).
 *   dot_TYPE       weight row . activation row (in q35_vec_dot_type), integer sums per
 *                  (sub-)block, scaled and accumulated in float per block as ggml does.
 *
 * The SIMD levels (quant_avx2.c, quant_avx512.c) are held equal to these by the tests. The weight
 * quantizers are in quantize_weights.c, the Q8_0X/Y/Z row packing in act_layout.c; the table
 * q35_kernels_ref fills takes both.
 */
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"

const int8_t q35_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* 1.5 * 2^23: adding it to |f| < 2^22 leaves round-half-even(f) in the low mantissa bits */
#define ROUND_MAGIC 12582912.f

/* GGML's nearest_int: round half to even via ROUND_MAGIC (|f| < 2^22). */
static inline int nearest_int(float f) {
  float v = f + ROUND_MAGIC;
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

/* F16 / BF16: each 2-byte value through `to_f32` (inlined: a constant at both uses) */
static inline void dequant_half(const void *src, float *y, int64_t n, float (*to_f32)(uint16_t)) {
  const uint8_t *s = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    y[i] = to_f32(h);
  }
}
static void dequant_f16(const void *src, float *y, int64_t n) { dequant_half(src, y, n, q35_fp16_to_fp32); }
static void dequant_bf16(const void *src, float *y, int64_t n) { dequant_half(src, y, n, q35_bf16_to_fp32); }

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

static inline void quant_half(const float *x, void *dst, int64_t n, uint16_t (*from_f32)(float)) {
  uint8_t *d = dst;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = from_f32(x[i]);
    memcpy(d + 2 * i, &h, 2);
  }
}
static void quant_f16(const float *x, void *dst, int64_t n) { quant_half(x, dst, n, q35_fp32_to_fp16); }
static void quant_bf16(const float *x, void *dst, int64_t n) { quant_half(x, dst, n, q35_fp32_to_bf16); }


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

static inline float dot_half(int64_t n, const void *w, const void *x, float (*to_f32)(uint16_t)) {
  const uint8_t *a = w, *b = x;
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    uint16_t p, q;
    memcpy(&p, a + 2 * i, 2);
    memcpy(&q, b + 2 * i, 2);
    s += (double)to_f32(p) * to_f32(q);
  }
  return (float)s;
}
static float dot_f16(int64_t n, const void *w, const void *x) { return dot_half(n, w, x, q35_fp16_to_fp32); }
static float dot_bf16(int64_t n, const void *w, const void *x) { return dot_half(n, w, x, q35_bf16_to_fp32); }

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


/* Q4_K/Q5_K (q5: Q5_K's fifth bits from qh): sum_j sc_j * (q . y)_j and sum_j m_j * bsum_j;
 * sumf += d*isum - dmin*msum. */
static inline float dot_k45(int64_t n, const void *w, const void *x, const int q5) {
  const blk_q4_k *a4 = w;
  const blk_q5_k *a5 = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const uint8_t *scales = q5 ? a5[i].scales : a4[i].scales, *qs = q5 ? a5[i].qs : a4[i].qs;
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      q35_scale_min_k4(j, scales, &sc, &m);
      const uint8_t *q = qs + 32 * (j / 2);
      const int8_t *y = b[i].qs + 32 * j;
      int s = 0;
      for (int l = 0; l < 32; l++) {
        const int lo = j % 2 ? q[l] >> 4 : q[l] & 0xF;
        s += (q5 ? lo | (((a5[i].qh[l] >> j) & 1) << 4) : lo) * y[l];
      }
      isum += sc * s;
      msum += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
    const uint16_t wd = q5 ? a5[i].d : a4[i].d, wdmin = q5 ? a5[i].dmin : a4[i].dmin;
    const float d = q35_fp16_to_fp32(wd) * b[i].d, dmin = q35_fp16_to_fp32(wdmin) * b[i].d;
    sumf += d * (float)isum - dmin * (float)msum;
  }
  return sumf;
}

static float dot_q4_k(int64_t n, const void *w, const void *x) { return dot_k45(n, w, x, 0); }
static float dot_q5_k(int64_t n, const void *w, const void *x) { return dot_k45(n, w, x, 1); }

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


/* Q4_0R (tensor_types.h): per whole group of 16 Q4_0 blocks, byte i (0..3) of dword k (0..3) of
 * lane half s (0, 1) of vector j (0..3) of half h (0, 1) is nibble byte 4j + i of block
 * 4k + 2h + s, at 128h + 32j + 16s + 4k + i; the scale of that block is fp16 number 4s + k of
 * half h's 8, at 256 + 16h. (The AVX2 kernel's transposed nibbles and gathered scales, stored.)
 * A short last group of fewer than 16 blocks is copied as it is. IQ4_NLR is the same move of
 * IQ4_NL's blocks (also fp16 d then 16 nibble bytes); MXFP4R that of MXFP4's 17-byte blocks (the
 * E8M0 byte then 16 nibble bytes), whose scale bytes go to 256 + 8h + 4s + k. bs: bytes per
 * block (18 or 17), the scale being its first bs - 16. */
void q35_z2r_move(const void *srcv, void *dstv, int64_t n, int back, int bs) {
  const uint8_t *src = srcv;
  uint8_t *dst = dstv;
  const size_t b16 = 16 * (size_t)bs, ds = (size_t)bs - 16; /* group bytes, scale bytes */
  const int64_t nb = n / QK8_0, ng = nb / 16;
  for (int64_t q = 0; q < ng; q++) {
    const uint8_t *g = src + (size_t)q * b16;
    uint8_t *o = dst + (size_t)q * b16;
    for (int h = 0; h < 2; h++)
      for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++) {
          const size_t b = (size_t)(4 * k + 2 * h + s) * (size_t)bs; /* the plain block */
          const size_t d = 256 + 8 * ds * (size_t)h + ds * (size_t)(4 * s + k);
          if (back) memcpy(o + b, g + d, ds);
          else memcpy(o + d, g + b, ds);
          for (int j = 0; j < 4; j++) {
            const size_t r = 128 * (size_t)h + 32 * (size_t)j + 16 * (size_t)s + 4 * (size_t)k;
            if (back) memcpy(o + b + ds + 4 * j, g + r, 4);
            else memcpy(o + r, g + b + ds + 4 * j, 4);
          }
        }
  }
  const size_t done = (size_t)ng * b16;
  memcpy(dst + done, src + done, (size_t)(nb % 16) * (size_t)bs);
}

static void q4_0r_move(const uint8_t *src, uint8_t *dst, int64_t n, int back) {
  q35_z2r_move(src, dst, n, back, (int)sizeof(blk_q4_0));
}

/* Q8_KP (tensor_types.h): the 256 qs bytes of a Q8_K block as 8 registers of 32 bytes; bytes
 * 4j + 2h + t (j = 0..7, h, t = 0, 1) of register m (0..7) hold element 32j + 16h + 2m + t. In
 * int16 units (element pairs): unit 16m + l of Q8_KP is unit 8l + m of Q8_K (l = 0..15), a
 * 16 x 8 transpose. d and bsums stay. back: Q8_KP -> Q8_K. */
void q35_q8_kp_move(const blk_q8_k *src, blk_q8_k *dst, int back) {
  dst->d = src->d;
  memcpy(dst->bsums, src->bsums, sizeof dst->bsums);
  for (int m = 0; m < 8; m++)
    for (int l = 0; l < 16; l++) {
      if (back) memcpy(dst->qs + 2 * (8 * l + m), src->qs + 2 * (16 * m + l), 2);
      else memcpy(dst->qs + 2 * (16 * m + l), src->qs + 2 * (8 * l + m), 2);
    }
}

/* Q4_KR (tensor_types.h): per Q4_K block, d, dmin and the scales as they are; byte b of qs'
 * 32-byte load k (0..3) holds register 2k of Q8_KP's permutation in its low nibble and register
 * 2k + 1 in its high one (register m, byte 4j + 2h + t: element 32j + 16h + 2m + t). In the
 * plain block element 32j + i is nibble j & 1 of qs[32 (j >> 1) + i]. */
static void q4_kr_move(const uint8_t *src, uint8_t *dst, int64_t n, int back) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_q4_k *a = (const blk_q4_k *)(const void *)src + i;
    blk_q4_k *o = (blk_q4_k *)(void *)dst + i;
    const size_t head = offsetof(blk_q4_k, qs);
    memcpy(o, a, head);
    memset(o->qs, 0, sizeof o->qs);
    for (int m = 0; m < 8; m++)
      for (int b = 0; b < 32; b++) {
        const int j = b / 4, e = 16 * ((b / 2) & 1) + 2 * m + (b & 1); /* element 32j + e */
        const int pb = 32 * (j >> 1) + e, ps = 4 * (j & 1);           /* plain byte, shift */
        const int rb = 32 * (m >> 1) + b, rs = 4 * (m & 1);           /* repacked byte, shift */
        if (back) o->qs[pb] |= (uint8_t)(((a->qs[rb] >> rs) & 0xF) << ps);
        else o->qs[rb] |= (uint8_t)(((a->qs[pb] >> ps) & 0xF) << rs);
      }
  }
}

/* Q6_KR (tensor_types.h): per Q6_K block, the scales and d as they are; the 192 bytes of ql and qh
 * as 6 loads of 32 bytes L0..L5 holding the 6-bit values w_m of Q8_KP's registers m = 0..7
 * (register m, byte 4j + 2h + t: element 32j + 16h + 2m + t):
 *   L_k (k = 0..3), byte b: w_k[b] in bits 0..5, bits 4..5 of w_{4+k}[b] in bits 6..7
 *   L_{4+p} (p = 0, 1), byte b: the low nibbles of w_{4+2p}[b] (bits 0..3) and w_{5+2p}[b] (4..7)
 * so that w_k = L_k & 0x3F and w_{4+k} = its nibble of L_{4+k/2} | (L_k >> 2) & 0x30. In the plain
 * block element 128h + 32k + l (h = 0, 1, k = 0..3, l = 0..31) has its low nibble in nibble k >> 1
 * of ql[64h + 32 (k & 1) + l] and its high 2 bits in bits 2k, 2k + 1 of qh[32h + l]. */
static int q6_plain_get(const blk_q6_k *a, int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  return ((a->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF) | (((a->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}
static void q6_plain_put(blk_q6_k *a, int e, int v) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  a->ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((v & 0xF) << (4 * (k >> 1)));
  a->qh[32 * h + l] |= (uint8_t)(((v >> 4) & 3) << (2 * k));
}
/* the 192 bytes from ql on as one array (ql and qh are adjacent in blk_q6_k) */
static int q6r_get(const uint8_t *q, int m, int b) {
  if (m < 4) return q[32 * m + b] & 0x3F;
  return ((q[128 + 32 * ((m - 4) >> 1) + b] >> (4 * (m & 1))) & 0xF) | ((q[32 * (m - 4) + b] >> 6) << 4);
}
static void q6r_put(uint8_t *q, int m, int b, int v) {
  if (m < 4) {
    q[32 * m + b] |= (uint8_t)v;
    return;
  }
  q[128 + 32 * ((m - 4) >> 1) + b] |= (uint8_t)((v & 0xF) << (4 * (m & 1)));
  q[32 * (m - 4) + b] |= (uint8_t)((v >> 4) << 6);
}
static void q6_kr_move(const uint8_t *src, uint8_t *dst, int64_t n, int back) {
  _Static_assert(offsetof(blk_q6_k, qh) == offsetof(blk_q6_k, ql) + 128, "Q6_K: qh follows ql");
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_q6_k *a = (const blk_q6_k *)(const void *)src + i;
    blk_q6_k *o = (blk_q6_k *)(void *)dst + i;
    memcpy(o, a, sizeof *o);
    memset(o->ql, 0, sizeof o->ql);
    memset(o->qh, 0, sizeof o->qh);
    for (int m = 0; m < 8; m++)
      for (int b = 0; b < 32; b++) {
        const int e = 32 * (b / 4) + 16 * ((b / 2) & 1) + 2 * m + (b & 1);
        if (back) q6_plain_put(o, e, q6r_get(a->ql, m, b));
        else q6r_put(o->ql, m, b, q6_plain_get(a, e));
      }
  }
}

/* the scalar moves: q35_repack_row's reference twin */
void q35_repack_row_ref(int type, const void *src, void *dst, int64_t n) {
  if (type == Q35_TYPE_Q4_0R) q4_0r_move(src, dst, n, 0);
  else if (type == Q35_TYPE_IQ4_NLR) q35_z2r_move(src, dst, n, 0, (int)sizeof(blk_iq4_nl));
  else if (type == Q35_TYPE_MXFP4R) q35_z2r_move(src, dst, n, 0, (int)sizeof(blk_mxfp4));
  else if (type == Q35_TYPE_Q5_1R) q35_q5_1r_move(src, dst, n, 0);
  else if (type == Q35_TYPE_Q3_KR) q35_q3_kr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_IQ2_XXSR) q35_iq2_xxsr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_IQ3_XXSR) q35_iq3_xxsr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_IQ3_SR) q35_iq3_sr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_IQ2_XSR || type == Q35_TYPE_IQ2_SR) q35_iq2_xsr_move(type, src, dst, n, 0);
  else if (type == Q35_TYPE_IQ1_SR) q35_iq1_sr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_IQ1_MR) q35_iq1_mr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_Q2_KR) q35_q2_kr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_Q4_KR) q4_kr_move(src, dst, n, 0);
  else if (type == Q35_TYPE_Q6_KR) q6_kr_move(src, dst, n, 0);
  else memcpy(dst, src, q35_row_size(type, n));
}

/* the loader's rewrite: on 256-bit vectors where the CPU runs them (the same bytes as the scalar
 * moves, tests/test_quant_tile.c), else the scalar moves */
void q35_repack_row(int type, const void *src, void *dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (q35_simd_active() >= Q35_SIMD_AVX2 && q35_simd_active() <= Q35_SIMD_AVX512) switch (type) {
    case Q35_TYPE_Q4_0R: q35_repack_z2r_avx2(src, dst, n, (int)sizeof(blk_q4_0)); return;
    case Q35_TYPE_IQ4_NLR: q35_repack_z2r_avx2(src, dst, n, (int)sizeof(blk_iq4_nl)); return;
    case Q35_TYPE_MXFP4R: q35_repack_z2r_avx2(src, dst, n, (int)sizeof(blk_mxfp4)); return;
    case Q35_TYPE_Q3_KR: q35_repack_q3_kr_avx2(src, dst, n); return;
    case Q35_TYPE_Q2_KR: q35_repack_q2_kr_avx2(src, dst, n); return;
    case Q35_TYPE_Q4_KR: q35_repack_q4_kr_avx2(src, dst, n); return;
    case Q35_TYPE_Q6_KR: q35_repack_q6_kr_avx2(src, dst, n); return;
    case Q35_TYPE_IQ2_XXSR: q35_repack_iq2_xxsr_avx2(src, dst, n); return;
    case Q35_TYPE_IQ3_XXSR: q35_repack_iq3_xxsr_avx2(src, dst, n); return;
    case Q35_TYPE_IQ3_SR: q35_repack_iq3_sr_avx2(src, dst, n); return;
    case Q35_TYPE_IQ2_XSR: case Q35_TYPE_IQ2_SR: q35_repack_iq2_xsr_avx2(type, src, dst, n); return;
    case Q35_TYPE_IQ1_SR: q35_repack_iq1_sr_avx2(src, dst, n); return;
    case Q35_TYPE_IQ1_MR: q35_repack_iq1_mr_avx2(src, dst, n); return;
    default: break;
    }
#endif
  q35_repack_row_ref(type, src, dst, n);
}

void q35_unrepack_row(int type, const void *src, void *dst, int64_t n) {
  if (type == Q35_TYPE_Q4_0R) q4_0r_move(src, dst, n, 1);
  else if (type == Q35_TYPE_IQ4_NLR) q35_z2r_move(src, dst, n, 1, (int)sizeof(blk_iq4_nl));
  else if (type == Q35_TYPE_MXFP4R) q35_z2r_move(src, dst, n, 1, (int)sizeof(blk_mxfp4));
  else if (type == Q35_TYPE_Q5_1R) q35_q5_1r_move(src, dst, n, 1);
  else if (type == Q35_TYPE_Q3_KR) q35_q3_kr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_Q2_KR) q35_q2_kr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_IQ2_XXSR) q35_iq2_xxsr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_IQ3_XXSR) q35_iq3_xxsr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_IQ3_SR) q35_iq3_sr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_IQ2_XSR || type == Q35_TYPE_IQ2_SR) q35_iq2_xsr_move(type, src, dst, n, 1);
  else if (type == Q35_TYPE_IQ1_SR) q35_iq1_sr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_IQ1_MR) q35_iq1_mr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_Q4_KR) q4_kr_move(src, dst, n, 1);
  else if (type == Q35_TYPE_Q6_KR) q6_kr_move(src, dst, n, 1);
  else memcpy(dst, src, q35_row_size(type, n));
}

/* the reference twins of Q4_KR (Q4_K's on the row moved back, block by block) and Q8_KP (Q8_K's
 * quantizer then the permutation; the dequantizer on the block moved back) */
static void dequant_q4_kr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q4_k b;
    q4_kr_move((const uint8_t *)src + (size_t)i * sizeof b, (uint8_t *)&b, QK_K, 1);
    dequant_q4_k(&b, y + i * QK_K, QK_K);
  }
}

static float dot_q4_kr(int64_t n, const void *w, const void *x) {
  blk_q4_k *p = malloc((size_t)(n / QK_K) * sizeof(blk_q4_k) + 1);
  if (!p) return NAN;
  q4_kr_move(w, (uint8_t *)p, n, 1);
  const float v = dot_q4_k(n, p, x);
  free(p);
  return v;
}

/* and of Q6_KR: Q6_K's on the row moved back */
static void dequant_q6_kr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q6_k b;
    q6_kr_move((const uint8_t *)src + (size_t)i * sizeof b, (uint8_t *)&b, QK_K, 1);
    dequant_q6_k(&b, y + i * QK_K, QK_K);
  }
}

static float dot_q6_kr(int64_t n, const void *w, const void *x) {
  blk_q6_k *p = malloc((size_t)(n / QK_K) * sizeof(blk_q6_k) + 1);
  if (!p) return NAN;
  q6_kr_move(w, (uint8_t *)p, n, 1);
  const float v = dot_q6_k(n, p, x);
  free(p);
  return v;
}

static void quant_q8_kp(const float *x, void *dst, int64_t n) {
  blk_q8_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q8_k b;
    q35_quantize_q8_k_block_ref(x + i * QK_K, &b);
    q35_q8_kp_move(&b, &y[i], 0);
  }
}

static void dequant_q8_kp(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q8_k b;
    q35_q8_kp_move((const blk_q8_k *)src + i, &b, 1);
    dequant_q8_k(&b, y + i * QK_K, QK_K);
  }
}

/* the reference twins of Q4_0R: Q4_0's on the row moved back */
static void dequant_q4_0r(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16 * QK8_0) { /* group by group: a row may be long */
    blk_q4_0 g[16];
    const int64_t m = n - i < 16 * QK8_0 ? n - i : 16 * QK8_0;
    q4_0r_move((const uint8_t *)src + (size_t)(i / QK8_0) * sizeof(blk_q4_0), (uint8_t *)g, m, 1);
    dequant_q4_0(g, y + i, m);
  }
}

static float dot_q4_0r(int64_t n, const void *w, const void *x) {
  blk_q4_0 *p = malloc((size_t)(n / QK8_0) * sizeof(blk_q4_0) + 1);
  if (!p) return NAN;
  q4_0r_move(w, (uint8_t *)p, n, 1);
  const float v = dot_q4_0(n, p, x);
  free(p);
  return v;
}

/* ============================== the reference table ============================== */

void q35_kernels_ref(q35_kernels *k) {
  memset(k, 0, sizeof *k);
#define SET(T, dq, qz, vd) (k->dequantize[T] = (dq), k->quantize[T] = (qz), k->vec_dot[T] = (vd))
  SET(Q35_TYPE_F32, dequant_f32, quant_f32, dot_f32);
  SET(Q35_TYPE_F16, dequant_f16, quant_f16, dot_f16);
  SET(Q35_TYPE_BF16, dequant_bf16, quant_bf16, dot_bf16);
  SET(Q35_TYPE_Q4_0, dequant_q4_0, NULL, dot_q4_0);
  SET(Q35_TYPE_Q4_0R, dequant_q4_0r, NULL, dot_q4_0r);
  SET(Q35_TYPE_Q5_0, dequant_q5_0, NULL, dot_q5_0);
  SET(Q35_TYPE_Q8_0, dequant_q8_0, quant_q8_0, dot_q8_0);
  SET(Q35_TYPE_Q4_K, dequant_q4_k, NULL, dot_q4_k);
  SET(Q35_TYPE_Q5_K, dequant_q5_k, NULL, dot_q5_k);
  SET(Q35_TYPE_Q6_K, dequant_q6_k, NULL, dot_q6_k);
  SET(Q35_TYPE_IQ4_XS, dequant_iq4_xs, NULL, dot_iq4_xs);
  SET(Q35_TYPE_Q8_K, dequant_q8_k, quant_q8_k, NULL);
  SET(Q35_TYPE_Q4_KR, dequant_q4_kr, NULL, dot_q4_kr);
  SET(Q35_TYPE_Q8_KP, dequant_q8_kp, quant_q8_kp, NULL);
  SET(Q35_TYPE_Q6_KR, dequant_q6_kr, NULL, dot_q6_kr);
#undef SET
  q35_kernels_weight_quantizers(k);
  q35_kernels_act_layouts(k);
  k->q4_0_act = Q35_TYPE_Q8_0X;
  q35_kernels_lowbit_ref(k);
  q35_kernels_iq_ref(k);
  q35_kernels_iq_quantizers(k);
}

