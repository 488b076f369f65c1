/*
 * quant_lowbit_ref.c - kernels of the Q2_K, Q3_K, MXFP4, IQ4_NL, Q4_1, Q5_1 weight types: the
 * reference level (scalar, the twins every SIMD kernel is tested against).
 *
 *   dequant_TYPE  block -> floats with GGML's formulas, float operations in the same order (so
 *                 the values are bit-identical to ggml's dequantize_row_*).
 *   dot_TYPE      weight row . activation row: integer sums per (sub-)block, scaled in float
 *                 per block. Activations: Q8_K (Q2_K, Q3_K), Q4_0's Q8_0X (MXFP4, IQ4_NL: Q8_0
 *                 blocks in the layout of act_layout.h, read back block by block here), Q8_1
 *                 (Q4_1, Q5_1: Q8_0's values plus s = d * sum(q), which carries the weights' offset m).
 *   quant_q8_1    the Q8_1 activation quantizer, ggml-cpu's x86 one (Q8_0's rounding).
 *
 * The weight quantizers of the family are in quantize_lowbit.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"

const int8_t q35_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* q35_e8m0_half(e) as bit patterns, for every byte e */
#define E8(e) ((e) < 2 ? 0x00200000u << (e) : (uint32_t)((e) - 1) << 23)
#define E8x4(e) E8(e), E8((e) + 1), E8((e) + 2), E8((e) + 3)
#define E8x16(e) E8x4(e), E8x4((e) + 4), E8x4((e) + 8), E8x4((e) + 12)
#define E8x64(e) E8x16(e), E8x16((e) + 16), E8x16((e) + 32), E8x16((e) + 48)
const uint32_t q35_e8m0_half_bits[256] = {E8x64(0), E8x64(64), E8x64(128), E8x64(192)};
#undef E8
#undef E8x4
#undef E8x16
#undef E8x64

/* ============================== dequantize ============================== */

static void dequant_q2_k(const void *src, float *y, int64_t n) {
  const blk_q2_k *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d), dmin = q35_fp16_to_fp32(b[i].dmin);
    for (int h = 0; h < 2; h++) {
      const uint8_t *q = b[i].qs + 32 * h;
      for (int s = 0; s < 4; s++)
        for (int half = 0; half < 2; half++) {
          const uint8_t sc = b[i].scales[8 * h + 2 * s + half];
          const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
          for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[16 * half + l] >> (2 * s)) & 3) - ml;
        }
    }
  }
}

/* Q3_K's 3-bit value of element 128h + 32s + l (l < 32): low bits from qs, minus 4 where the
 * hmask bit 4h + s is clear. */
static inline int q3k_value(const blk_q3_k *b, int h, int s, int l) {
  return ((b->qs[32 * h + l] >> (2 * s)) & 3) - (b->hmask[l] & (1u << (4 * h + s)) ? 0 : 4);
}

static void dequant_q3_k(const void *src, float *y, int64_t n) {
  const blk_q3_k *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; h++)
      for (int s = 0; s < 4; s++)
        for (int half = 0; half < 2; half++) {
          const float dl = d * (float)q3k_scale(b[i].scales, 8 * h + 2 * s + half);
          for (int l = 0; l < 16; l++) *y++ = dl * (float)q3k_value(&b[i], h, s, 16 * half + l);
        }
  }
}

static void dequant_mxfp4(const void *src, float *y, int64_t n) {
  const blk_mxfp4 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_e8m0_half(b[i].e);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)q35_kvalues_mxfp4[b[i].qs[j] & 0xF] * d;
      y[j + 16] = (float)q35_kvalues_mxfp4[b[i].qs[j] >> 4] * d;
    }
  }
}

static void dequant_iq4_nl(const void *src, float *y, int64_t n) {
  const blk_iq4_nl *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)q35_kvalues_iq4nl[b[i].qs[j] & 0xF];
      y[j + 16] = d * (float)q35_kvalues_iq4nl[b[i].qs[j] >> 4];
    }
  }
}

static void dequant_q4_1(const void *src, float *y, int64_t n) {
  const blk_q4_1 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d), m = q35_fp16_to_fp32(b[i].m);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)(b[i].qs[j] & 0xF) * d + m;
      y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
    }
  }
}

static inline int q5_1_value(const blk_q5_1 *b, int j) {
  uint32_t qh;
  memcpy(&qh, b->qh, 4);
  const int lo = j < 16 ? b->qs[j] & 0xF : b->qs[j - 16] >> 4;
  return lo | (int)(((qh >> j) & 1) << 4);
}

static void dequant_q5_1(const void *src, float *y, int64_t n) {
  const blk_q5_1 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d), m = q35_fp16_to_fp32(b[i].m);
    for (int j = 0; j < 32; j++) y[j] = (float)q5_1_value(&b[i], j) * d + m;
  }
}

static void dequant_q8_1(const void *src, float *y, int64_t n) {
  const blk_q8_1 *b = src;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = q35_fp16_to_fp32(b[i].d);
    for (int j = 0; j < QK8_0; j++) y[j] = (float)b[i].qs[j] * d;
  }
}

/* ============================== Q8_1 activations ============================== */

/* ggml-cpu's x86 quantize_row_q8_1: Q8_0's values and scale, plus s = fp16(d * sum(q)) with d
 * the unrounded max|x| / 127. */
static void quant_q8_1(const float *x, void *dst, int64_t n) {
  blk_q8_1 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    blk_q8_0 q;
    q35_quantize_q8_0_block_ref(x, &q);
    float amax = 0;
    for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
    int sum = 0;
    for (int j = 0; j < QK8_0; j++) sum += q.qs[j];
    y[i].d = q.d;
    y[i].s = q35_fp32_to_fp16(amax / 127.f * (float)sum);
    memcpy(y[i].qs, q.qs, QK8_0);
  }
}

/* ============================== dot products ============================== */

/* Q2_K x Q8_K: d * sum_j sc_j (q . y)_j - dmin * sum_j m_j bsum_j */
static float dot_q2_k(int64_t n, const void *w, const void *x) {
  const blk_q2_k *a = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0, msum = 0;
    for (int j = 0; j < 16; j++) {
      const int h = j / 8, s = (j % 8) / 2, half = j % 2;
      const uint8_t *q = a[i].qs + 32 * h + 16 * half;
      const int8_t *y = b[i].qs + 16 * j;
      int t = 0;
      for (int l = 0; l < 16; l++) t += ((q[l] >> (2 * s)) & 3) * y[l];
      isum += (a[i].scales[j] & 0xF) * t;
      msum += (a[i].scales[j] >> 4) * b[i].bsums[j];
    }
    const float d = b[i].d * q35_fp16_to_fp32(a[i].d), dmin = b[i].d * q35_fp16_to_fp32(a[i].dmin);
    sumf += d * (float)isum - dmin * (float)msum;
  }
  return sumf;
}

/* Q3_K x Q8_K: d * sum_j sc_j (q3 . y)_j */
static float dot_q3_k(int64_t n, const void *w, const void *x) {
  const blk_q3_k *a = w;
  const blk_q8_k *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int j = 0; j < 16; j++) {
      const int h = j / 8, s = (j % 8) / 2, half = j % 2;
      const int8_t *y = b[i].qs + 16 * j;
      int t = 0;
      for (int l = 0; l < 16; l++) t += q3k_value(&a[i], h, s, 16 * half + l) * y[l];
      isum += q3k_scale(a[i].scales, j) * t;
    }
    sumf += q35_fp16_to_fp32(a[i].d) * b[i].d * (float)isum;
  }
  return sumf;
}

/* ------------------------------ Q3_KR ------------------------------ */

/* quant_lowbit.h's layout: the 3-bit value u of element 32j + e (e < 32) is 2 bits at bits 2 (j & 3)
 * of qs byte 32 (j >> 2) + e and bit j of hmask byte e; Q3_KR's register m, byte b = 4j + 2h + t
 * holds u of element 32j + 16h + 2m + t in the planes at byte b */
void q35_q3_kr_move(const void *src, void *dst, int64_t n, int back) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    const uint8_t *s = (const uint8_t *)src + (size_t)i * Q3KR_BLOCK;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q3KR_BLOCK;
    uint8_t u[8][32], f[16];
    if (!back) {
      blk_q3_k b;
      memcpy(&b, s, sizeof b); /* src == dst allowed */
      for (int m = 0; m < 8; m++)
        for (int c = 0; c < 32; c++) {
          const int e = 32 * (c / 4) + 16 * ((c / 2) & 1) + 2 * m + (c & 1), j = e / 32, l = e % 32;
          u[m][c] = (uint8_t)(((b.qs[32 * (j >> 2) + l] >> (2 * (j & 3))) & 3) | ((b.hmask[l] >> j) & 1) << 2);
        }
      for (int j = 0; j < 16; j++) f[j] = (uint8_t)(q3k_scale(b.scales, j) & 63);
      memcpy(o, &b.d, 2);
      for (int j = 0; j < 8; j++) o[Q3KR_SCALES + j] = (uint8_t)(f[j] << 2 | (f[8 + j] & 3));
      for (int j = 0; j < 4; j++) o[Q3KR_SCALES + 8 + j] = (uint8_t)(f[8 + j] >> 2 | (f[12 + j] >> 2) << 4);
      for (int c = 0; c < 32; c++) {
        o[Q3KR_PLANES + c] = (uint8_t)(u[0][c] | u[1][c] << 3 | (u[6][c] & 3) << 6);
        o[Q3KR_PLANES + 32 + c] = (uint8_t)(u[2][c] | u[3][c] << 3 | (u[7][c] & 3) << 6);
        o[Q3KR_PLANES + 64 + c] = (uint8_t)(u[4][c] | u[5][c] << 3 | (u[6][c] >> 2) << 6 | (u[7][c] >> 2) << 7);
      }
    } else {
      blk_q3_k b;
      memset(&b, 0, sizeof b);
      const uint8_t *p = s + Q3KR_PLANES;
      for (int c = 0; c < 32; c++) {
        u[0][c] = p[c] & 7, u[1][c] = (p[c] >> 3) & 7;
        u[2][c] = p[32 + c] & 7, u[3][c] = (p[32 + c] >> 3) & 7;
        u[4][c] = p[64 + c] & 7, u[5][c] = (p[64 + c] >> 3) & 7;
        u[6][c] = (uint8_t)(p[c] >> 6 | ((p[64 + c] >> 6) & 1) << 2);
        u[7][c] = (uint8_t)(p[32 + c] >> 6 | (p[64 + c] >> 7) << 2);
      }
      for (int m = 0; m < 8; m++)
        for (int c = 0; c < 32; c++) {
          const int e = 32 * (c / 4) + 16 * ((c / 2) & 1) + 2 * m + (c & 1), j = e / 32, l = e % 32;
          b.qs[32 * (j >> 2) + l] |= (uint8_t)((u[m][c] & 3) << (2 * (j & 3)));
          b.hmask[l] |= (uint8_t)((u[m][c] >> 2) << j);
        }
      for (int j = 0; j < 8; j++) {
        f[j] = s[Q3KR_SCALES + j] >> 2;
        f[8 + j] = (uint8_t)((s[Q3KR_SCALES + j] & 3) | ((s[Q3KR_SCALES + 8 + j % 4] >> (4 * (j / 4))) & 15) << 2);
      }
      for (int j = 0; j < 16; j++) {
        const int raw = f[j] ^ 32; /* the biased 6-bit scale of the file */
        b.scales[j % 8] |= (uint8_t)((raw & 15) << (j < 8 ? 0 : 4));
        b.scales[8 + j % 4] |= (uint8_t)((raw >> 4) << (2 * (j / 4)));
      }
      memcpy(&b.d, s, 2);
      memcpy(o, &b, sizeof b);
    }
  }
}

/* ------------------------------ Q2_KR ------------------------------ */

/* quant_lowbit.h's layout: value of element 32j + e (e < 32) at bits 2 (j & 3) of plain byte
 * 32 (j >> 2) + e; Q2_KR's register m, byte b = 4j + 2h + t holds element 32j + 16h + 2m + t at
 * bits 2 (m & 3) of byte 32 (m >> 2) + b */
void q35_q2_kr_move(const void *src, void *dst, int64_t n, int back) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_q2_k *a = (const blk_q2_k *)src + i;
    blk_q2_k *o = (blk_q2_k *)dst + i;
    uint8_t qs[QK_K / 4];
    memset(qs, 0, sizeof qs);
    for (int m = 0; m < 8; m++)
      for (int b = 0; b < 32; b++) {
        const int j = b / 4, e = 16 * ((b / 2) & 1) + 2 * m + (b & 1);
        const int pb = 32 * (j >> 2) + e, ps = 2 * (j & 3); /* plain byte, shift */
        const int rb = 32 * (m >> 2) + b, rs = 2 * (m & 3); /* repacked byte, shift */
        if (back) qs[pb] |= (uint8_t)(((a->qs[rb] >> rs) & 3) << ps);
        else qs[rb] |= (uint8_t)(((a->qs[pb] >> ps) & 3) << rs);
      }
    memmove(o, a, sizeof *o); /* scales, d, dmin (src == dst allowed) */
    memcpy(o->qs, qs, sizeof qs);
  }
}

/* the reference twins of Q2_KR: Q2_K's on the row moved back (activations Q8_K: the _ref entry
 * points convert the AVX2 level's Q8_KP) */
static void dequant_q2_kr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q2_k b;
    q35_q2_kr_move((const uint8_t *)src + (size_t)i * sizeof b, &b, QK_K, 1);
    dequant_q2_k(&b, y + i * QK_K, QK_K);
  }
}

static float dot_q2_kr(int64_t n, const void *w, const void *x) {
  blk_q2_k *p = malloc((size_t)(n / QK_K) * sizeof(blk_q2_k) + 1);
  if (!p) return NAN;
  q35_q2_kr_move(w, p, n, 1);
  const float v = dot_q2_k(n, p, x);
  free(p);
  return v;
}

/* the reference twins of Q3_KR: Q3_K's on the row moved back (activations Q8_K: the _ref entry
 * points convert the AVX2 level's Q8_KP) */
static void dequant_q3_kr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q3_k b;
    q35_q3_kr_move((const uint8_t *)src + (size_t)i * Q3KR_BLOCK, &b, QK_K, 1);
    dequant_q3_k(&b, y + i * QK_K, QK_K);
  }
}

static float dot_q3_kr(int64_t n, const void *w, const void *x) {
  blk_q3_k *p = malloc((size_t)(n / QK_K) * sizeof(blk_q3_k) + 1);
  if (!p) return NAN;
  q35_q3_kr_move(w, p, n, 1);
  const float v = dot_q3_k(n, p, x);
  free(p);
  return v;
}

/* MXFP4 / IQ4_NL x Q4_0's activations (Q8_0X: the Q8_0 blocks read back from their places):
 * code book values (kv) times int8, scaled per block */
static float dot_mxfp4(int64_t n, const void *w, const void *x) {
  const blk_mxfp4 *a = w;
  const int64_t nb = n / QK8_0;
  float sumf = 0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8x_get(x, nb, i, &b);
    int isum = 0;
    for (int j = 0; j < 16; j++)
      isum += q35_kvalues_mxfp4[a[i].qs[j] & 0xF] * b.qs[j] + q35_kvalues_mxfp4[a[i].qs[j] >> 4] * b.qs[j + 16];
    sumf += q35_fp16_to_fp32(b.d) * q35_e8m0_half(a[i].e) * (float)isum;
  }
  return sumf;
}

static float dot_iq4_nl(int64_t n, const void *w, const void *x) {
  const blk_iq4_nl *a = w;
  const int64_t nb = n / QK8_0;
  float sumf = 0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q8x_get(x, nb, i, &b);
    int isum = 0;
    for (int j = 0; j < 16; j++)
      isum += q35_kvalues_iq4nl[a[i].qs[j] & 0xF] * b.qs[j] + q35_kvalues_iq4nl[a[i].qs[j] >> 4] * b.qs[j + 16];
    sumf += q35_fp16_to_fp32(b.d) * q35_fp16_to_fp32(a[i].d) * (float)isum;
  }
  return sumf;
}

/* the reference twins of IQ4_NLR / MXFP4R: IQ4_NL's / MXFP4's on the row moved back (the
 * dequantizers group by group, as a row may be long) */
static void dequant_iq4_nlr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16 * QK8_0) {
    blk_iq4_nl g[16];
    const int64_t m = n - i < 16 * QK8_0 ? n - i : 16 * QK8_0;
    q35_z2r_move((const uint8_t *)src + (size_t)(i / QK8_0) * sizeof g[0], g, m, 1, (int)sizeof g[0]);
    dequant_iq4_nl(g, y + i, m);
  }
}

static void dequant_mxfp4r(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16 * QK8_0) {
    blk_mxfp4 g[16];
    const int64_t m = n - i < 16 * QK8_0 ? n - i : 16 * QK8_0;
    q35_z2r_move((const uint8_t *)src + (size_t)(i / QK8_0) * sizeof g[0], g, m, 1, (int)sizeof g[0]);
    dequant_mxfp4(g, y + i, m);
  }
}

static float dot_iq4_nlr(int64_t n, const void *w, const void *x) {
  blk_iq4_nl *p = malloc((size_t)(n / QK8_0) * sizeof(blk_iq4_nl) + 1);
  if (!p) return NAN;
  q35_z2r_move(w, p, n, 1, (int)sizeof(blk_iq4_nl));
  const float v = dot_iq4_nl(n, p, x);
  free(p);
  return v;
}

static float dot_mxfp4r(int64_t n, const void *w, const void *x) {
  blk_mxfp4 *p = malloc((size_t)(n / QK8_0) * sizeof(blk_mxfp4) + 1);
  if (!p) return NAN;
  q35_z2r_move(w, p, n, 1, (int)sizeof(blk_mxfp4));
  const float v = dot_mxfp4(n, p, x);
  free(p);
  return v;
}

/* Q5_1 <-> Q5_1R (quant_lowbit.h): element e's fifth bit between bit e and bit 8 (e % 4) + e / 4 */
void q35_q5_1r_move(const void *src, void *dst, int64_t n, int back) {
  const blk_q5_1 *a = src;
  blk_q5_1 *o = dst;
  for (int64_t i = 0; i < n / QK8_0; i++) {
    uint32_t qh, r = 0;
    memcpy(&qh, a[i].qh, 4);
    if (back)
      for (int e = 0; e < 32; e++) r |= ((qh >> (8 * (e % 4) + e / 4)) & 1u) << e;
    else /* the load's way (tests/test_quant_tile.c holds it to the bit loop back): per byte i the
          * bits 4k + i gathered into bits k */
      for (int b = 0; b < 4; b++) {
        uint32_t y = (qh >> b) & 0x11111111u;
        y = (y | y >> 3) & 0x03030303u;
        y = (y | y >> 6) & 0x000F000Fu;
        y = (y | y >> 12) & 0xFFu;
        r |= y << (8 * b);
      }
    o[i] = a[i];
    memcpy(o[i].qh, &r, 4);
  }
}

/* the reference twins of Q5_1R: Q5_1's on the blocks moved back (a group at a time, as a row
 * may be long) */
static void dequant_q5_1r(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16 * QK8_0) {
    blk_q5_1 g[16];
    const int64_t m = n - i < 16 * QK8_0 ? n - i : 16 * QK8_0;
    q35_q5_1r_move((const blk_q5_1 *)src + i / QK8_0, g, m, 1);
    dequant_q5_1(g, y + i, m);
  }
}

/* Q4_1 / Q5_1 x Q8_1: d_w d_x (q . y) + m_w s_x */
static float dot_q4_1(int64_t n, const void *w, const void *x) {
  const blk_q4_1 *a = w;
  const blk_q8_1 *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_0; i++) {
    int isum = 0;
    for (int j = 0; j < 16; j++) isum += (a[i].qs[j] & 0xF) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
    sumf += q35_fp16_to_fp32(a[i].d) * q35_fp16_to_fp32(b[i].d) * (float)isum +
            q35_fp16_to_fp32(a[i].m) * q35_fp16_to_fp32(b[i].s);
  }
  return sumf;
}

static float dot_q5_1(int64_t n, const void *w, const void *x) {
  const blk_q5_1 *a = w;
  const blk_q8_1 *b = x;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_0; i++) {
    int isum = 0;
    for (int j = 0; j < 32; j++) isum += q5_1_value(&a[i], j) * b[i].qs[j];
    sumf += q35_fp16_to_fp32(a[i].d) * q35_fp16_to_fp32(b[i].d) * (float)isum +
            q35_fp16_to_fp32(a[i].m) * q35_fp16_to_fp32(b[i].s);
  }
  return sumf;
}

static float dot_q5_1r(int64_t n, const void *w, const void *x) {
  blk_q5_1 *p = malloc((size_t)(n / QK8_0) * sizeof(blk_q5_1) + 1);
  if (!p) return NAN;
  q35_q5_1r_move(w, p, n, 1);
  const float v = dot_q5_1(n, p, x);
  free(p);
  return v;
}

/* ============================== the table ============================== */

void q35_kernels_lowbit_ref(q35_kernels *k) {
#define SET(T, dq, vd) (k->dequantize[T] = (dq), k->vec_dot[T] = (vd))
  SET(Q35_TYPE_Q2_K, dequant_q2_k, dot_q2_k);
  SET(Q35_TYPE_Q3_K, dequant_q3_k, dot_q3_k);
  SET(Q35_TYPE_Q3_KR, dequant_q3_kr, dot_q3_kr);
  SET(Q35_TYPE_Q2_KR, dequant_q2_kr, dot_q2_kr);
  SET(Q35_TYPE_MXFP4, dequant_mxfp4, dot_mxfp4);
  SET(Q35_TYPE_IQ4_NL, dequant_iq4_nl, dot_iq4_nl);
  SET(Q35_TYPE_IQ4_NLR, dequant_iq4_nlr, dot_iq4_nlr);
  SET(Q35_TYPE_MXFP4R, dequant_mxfp4r, dot_mxfp4r);
  SET(Q35_TYPE_Q4_1, dequant_q4_1, dot_q4_1);
  SET(Q35_TYPE_Q5_1, dequant_q5_1, dot_q5_1);
  SET(Q35_TYPE_Q5_1R, dequant_q5_1r, dot_q5_1r);
#undef SET
  k->dequantize[Q35_TYPE_Q8_1] = dequant_q8_1;
  k->quantize[Q35_TYPE_Q8_1] = quant_q8_1;
  q35_kernels_lowbit_quantizers(k);
}

int q35_lowbit_vec_dot_type(const q35_kernels *k, int type) {
  switch (type) {
  /* Q8_K, or Q8_KP where the level has those kernels (AVX2 and AVX-512: quant_k2r_avx2.inc, quant_k3r_avx2.inc) */
  case Q35_TYPE_Q3_K: return k->q3_k_act ? k->q3_k_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q3_KR: return k->q3_kr_act ? k->q3_kr_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q2_K: return k->q2_k_act ? k->q2_k_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q2_KR: return k->q2_kr_act ? k->q2_kr_act : Q35_TYPE_Q8_K;
  /* a layout of Q4_0's (the same nibble blocks with other values): Q8_0X, or Q8_0Z where the
   * level has those kernels (nl_act) */
  case Q35_TYPE_MXFP4: case Q35_TYPE_IQ4_NL: case Q35_TYPE_MXFP4R: case Q35_TYPE_IQ4_NLR: return k->nl_act ? k->nl_act : Q35_TYPE_Q8_0X;
  case Q35_TYPE_Q4_1: case Q35_TYPE_Q5_1: case Q35_TYPE_Q5_1R: return Q35_TYPE_Q8_1;
  default: return -1;
  }
}
