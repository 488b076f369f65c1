/*
 * quant_iq_ref.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight
 * types: the reference level (scalar, the twins every SIMD kernel is tested against).
 *
 *   dequant_TYPE  block -> floats with GGML's float steps in GGML's order (bit-identical to
 *                 ggml's dequantize_row_*; the layouts and grids are in quant_iq_tables.h)
 *   dot_TYPE      weight row . Q8_K activation row: exact integer sums per 32 (per 16 for the
 *                 IQ1 scales), times the odd integer sub-block scale, summed per super-block;
 *                 then one float step per super-block (d_w * d_x * isum) and the constant
 *                 factor at the end, as ggml-cpu's vec_dot_*_q8_K.
 * Each group decodes into 8 signed int8 values (qv), shared by dequantize and the dot product.
 * No quantizers yet (quantize[] stays NULL: the exporters refuse these types as targets).
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_iq_tables.h"

/* grid entry g (8 bytes, or 2 x 4 for IQ3) with sign byte s applied: signed values */
static inline void apply_signs(uint64_t g, uint8_t s, int v[8]) {
  for (int j = 0; j < 8; j++) {
    const int a = (int)((g >> (8 * j)) & 0xFF);
    v[j] = (s >> j) & 1 ? -a : a;
  }
}

static inline uint64_t pair32(uint32_t lo, uint32_t hi) { return (uint64_t)lo | ((uint64_t)hi << 32); }

/* ------------------- per-group decoding: group k (0..31) of a block -> magnitudes + signs ------------------- */

/* IQ2_XXS: group k = byte k%4 of the first word of its 32, signs from the second word */
static inline void g_iq2_xxs(const blk_iq2_xxs *b, int k, uint64_t *g, uint8_t *s, int *ls) {
  const int ib = k / 4, l = k % 4;
  const uint32_t a0 = (uint32_t)b->qs[4 * ib] | ((uint32_t)b->qs[4 * ib + 1] << 16);
  const uint32_t a1 = (uint32_t)b->qs[4 * ib + 2] | ((uint32_t)b->qs[4 * ib + 3] << 16);
  *g = q35_iq2xxs_grid[(a0 >> (8 * l)) & 0xFF];
  *s = q35_ksigns_iq2xs[(a1 >> (7 * l)) & 127];
  *ls = (int)(a1 >> 28);
}

static inline void g_iq2_xs(const blk_iq2_xs *b, int k, uint64_t *g, uint8_t *s, int *ls) {
  const uint16_t q = b->qs[k];
  *g = q35_iq2xs_grid[q & 511];
  *s = q35_ksigns_iq2xs[q >> 9];
  *ls = (b->scales[k / 4] >> (4 * ((k % 4) / 2))) & 0xF;
}

static inline void g_iq2_s(const blk_iq2_s *b, int k, uint64_t *g, uint8_t *s, int *ls) {
  const int ib = k / 4, l = k % 4;
  *g = q35_iq2s_grid[b->qs[k] | (((b->qh[ib] >> (2 * l)) & 3) << 8)];
  *s = b->qs[32 + k];
  *ls = (b->scales[ib] >> (4 * (l / 2))) & 0xF;
}

static inline void g_iq3_xxs(const blk_iq3_xxs *b, int k, uint64_t *g, uint8_t *s, int *ls) {
  const int ib = k / 4, l = k % 4;
  const uint32_t a = q35_ld32(b->qs + 64 + 4 * ib);
  *g = pair32(q35_iq3xxs_grid[b->qs[2 * k]], q35_iq3xxs_grid[b->qs[2 * k + 1]]);
  *s = q35_ksigns_iq2xs[(a >> (7 * l)) & 127];
  *ls = (int)(a >> 28);
}

static inline void g_iq3_s(const blk_iq3_s *b, int k, uint64_t *g, uint8_t *s, int *ls) {
  const int ib = k / 4, l = k % 4, h = b->qh[ib];
  *g = pair32(q35_iq3s_grid[b->qs[2 * k] | (((h >> (2 * l)) & 1) << 8)],
              q35_iq3s_grid[b->qs[2 * k + 1] | (((h >> (2 * l + 1)) & 1) << 8)]);
  *s = b->signs[k];
  *ls = (b->scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
}

/* IQ1_S group k: grid values (-1/0/1), the delta sign (+1/-1) and the 3-bit scale of its 32 */
static inline void g_iq1_s(const blk_iq1_s *b, int k, uint64_t *g, int *dsign, int *ls) {
  const uint16_t h = b->qh[k / 4];
  *g = q35_iq1s_grid[b->qs[k] | (((h >> (3 * (k % 4))) & 7) << 8)];
  *dsign = h & 0x8000 ? -1 : 1;
  *ls = (h >> 12) & 7;
}

/* IQ1_M group k: qh byte k/2 holds, per group, 3 high index bits and the delta sign (bit 3 / 7);
 * the 3-bit scale is per 16 (two per 32) in scale word k/8 */
static inline void g_iq1_m(const blk_iq1_m *b, int k, uint64_t *g, int *dsign, int *ls) {
  const int h = b->qh[k / 2] >> (4 * (k % 2));
  *g = q35_iq1s_grid[b->qs[k] | ((h & 7) << 8)];
  *dsign = h & 8 ? -1 : 1;
  const int ib = k / 4, half = (k % 4) / 2;
  *ls = (q35_ld16(b->scales + 2 * (ib / 2)) >> (6 * (ib % 2) + 3 * half)) & 7;
}

/* ============================== dequantize ============================== */

/* IQ2/IQ3: y = db * grid * (+-1) with db = d * (0.5 + s) * 0.25 (IQ2), * 0.5 (IQ3_XXS), or
 * d * (1 + 2s) (IQ3_S), in ggml's float order */
#define DEQ_SIGNED(name, BT, G, DB)                                                               \
  static void name(const void *src, float *y, int64_t n) {                                        \
    const BT *b = src;                                                                            \
    for (int64_t i = 0; i < n / QK_K; i++) {                                                      \
      const float d = q35_fp16_to_fp32(b[i].d);                                                   \
      for (int k = 0; k < 32; k++, y += 8) {                                                      \
        uint64_t g;                                                                               \
        uint8_t s;                                                                                \
        int ls;                                                                                   \
        G(&b[i], k, &g, &s, &ls);                                                                 \
        const float db = DB;                                                                      \
        for (int j = 0; j < 8; j++)                                                               \
          y[j] = db * (float)((g >> (8 * j)) & 0xFF) * ((s >> j) & 1 ? -1.f : 1.f);               \
      }                                                                                           \
    }                                                                                             \
  }
DEQ_SIGNED(dequant_iq2_xxs, blk_iq2_xxs, g_iq2_xxs, d * (0.5f + (float)ls) * 0.25f)
DEQ_SIGNED(dequant_iq2_xs, blk_iq2_xs, g_iq2_xs, d * (0.5f + (float)ls) * 0.25f)
DEQ_SIGNED(dequant_iq2_s, blk_iq2_s, g_iq2_s, d * (0.5f + (float)ls) * 0.25f)
DEQ_SIGNED(dequant_iq3_xxs, blk_iq3_xxs, g_iq3_xxs, d * (0.5f + (float)ls) * 0.5f)
DEQ_SIGNED(dequant_iq3_s, blk_iq3_s, g_iq3_s, d * (float)(1 + 2 * ls))

/* IQ1: y = dl * (grid + delta), dl = d * (2s + 1), delta = +-1/8 */
static inline void deq_iq1_group(uint64_t g, int dsign, float dl, float *y) {
  const float delta = dsign < 0 ? -Q35_IQ1S_DELTA : Q35_IQ1S_DELTA;
  for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)(uint8_t)(g >> (8 * j)) + delta);
}

static void dequant_iq1_s(const void *src, float *y, int64_t n) {
  const blk_iq1_s *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(b[i].d);
    for (int k = 0; k < 32; k++, y += 8) {
      uint64_t g;
      int ds, ls;
      g_iq1_s(&b[i], k, &g, &ds, &ls);
      deq_iq1_group(g, ds, d * (float)(2 * ls + 1), y);
    }
  }
}

static void dequant_iq1_m(const void *src, float *y, int64_t n) {
  const blk_iq1_m *b = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = q35_fp16_to_fp32(q35_iq1m_d(&b[i]));
    for (int k = 0; k < 32; k++, y += 8) {
      uint64_t g;
      int ds, ls;
      g_iq1_m(&b[i], k, &g, &ds, &ls);
      deq_iq1_group(g, ds, d * (float)(2 * ls + 1), y);
    }
  }
}

/* ============================== dot products x Q8_K ============================== */

/* sum over groups of 8: (grid * sign) . y, times (2s + 1) per 16 elements (each group's own
 * scale field; the IQ2/IQ3 scales are per 16 or per 32, equal within a 16) */
#define DOT_SIGNED(name, BT, G, FINAL)                                                            \
  static float name(int64_t n, const void *w, const void *x) {                                    \
    const BT *a = w;                                                                              \
    const blk_q8_k *b = x;                                                                        \
    float sumf = 0;                                                                               \
    for (int64_t i = 0; i < n / QK_K; i++) {                                                      \
      int32_t bsum = 0;                                                                           \
      for (int k = 0; k < 32; k++) {                                                              \
        uint64_t g;                                                                               \
        uint8_t s;                                                                                \
        int ls, v[8], sumi = 0;                                                                   \
        G(&a[i], k, &g, &s, &ls);                                                                 \
        apply_signs(g, s, v);                                                                     \
        for (int j = 0; j < 8; j++) sumi += v[j] * b[i].qs[8 * k + j];                            \
        bsum += sumi * (2 * ls + 1);                                                              \
      }                                                                                           \
      sumf += q35_fp16_to_fp32(a[i].d) * b[i].d * (float)bsum;                                    \
    }                                                                                             \
    return FINAL * sumf;                                                                          \
  }
DOT_SIGNED(dot_iq2_xxs, blk_iq2_xxs, g_iq2_xxs, 0.125f)
DOT_SIGNED(dot_iq2_xs, blk_iq2_xs, g_iq2_xs, 0.125f)
DOT_SIGNED(dot_iq2_s, blk_iq2_s, g_iq2_s, 0.125f)
DOT_SIGNED(dot_iq3_xxs, blk_iq3_xxs, g_iq3_xxs, 0.25f)
DOT_SIGNED(dot_iq3_s, blk_iq3_s, g_iq3_s, 1.0f)

/* IQ1: sum (2s+1) * grid . y and sum (2s+1) * dsign * sum(y) per group; per super-block
 * d_w * d_x * (isum + 1/8 * dsum) */
#define DOT_IQ1(name, BT, G, D)                                                                   \
  static float name(int64_t n, const void *w, const void *x) {                                    \
    const BT *a = w;                                                                              \
    const blk_q8_k *b = x;                                                                        \
    float sumf = 0;                                                                               \
    for (int64_t i = 0; i < n / QK_K; i++) {                                                      \
      int32_t isum = 0, dsum = 0;                                                                 \
      for (int k = 0; k < 32; k++) {                                                              \
        uint64_t g;                                                                               \
        int ds, ls, sg = 0, sy = 0;                                                               \
        G(&a[i], k, &g, &ds, &ls);                                                                \
        for (int j = 0; j < 8; j++) {                                                             \
          sg += (int8_t)(uint8_t)(g >> (8 * j)) * b[i].qs[8 * k + j];                             \
          sy += b[i].qs[8 * k + j];                                                               \
        }                                                                                         \
        isum += (2 * ls + 1) * sg;                                                                \
        dsum += (2 * ls + 1) * ds * sy;                                                           \
      }                                                                                           \
      sumf += q35_fp16_to_fp32(D) * b[i].d * ((float)isum + Q35_IQ1S_DELTA * (float)dsum);        \
    }                                                                                             \
    return sumf;                                                                                  \
  }
DOT_IQ1(dot_iq1_s, blk_iq1_s, g_iq1_s, a[i].d)
DOT_IQ1(dot_iq1_m, blk_iq1_m, g_iq1_m, q35_iq1m_d(&a[i]))

/* ------------------------------ IQ2_XXSR (quant_internal.h) ------------------------------ */

/* byte b (8 sign bits) -> 8 bytes, byte k = bit k of b */
static inline uint64_t bits_to_bytes(unsigned b) {
  return ((((uint64_t)b * 0x0101010101010101ull) & 0x8040201008040201ull) + 0x7F7F7F7F7F7F7F7Full) >> 7 &
         0x0101010101010101ull;
}

void q35_iq2_xxsr_move(const void *src, void *dst, int64_t n, int back) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    if (!back) {
      const blk_iq2_xxs *a = (const blk_iq2_xxs *)src + i;
      uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ2_XXSR_BYTES;
      uint32_t w[8];
      uint8_t sc[4] = {0};
      for (int j = 0; j < 8; j++) {
        const uint8_t *p = (const uint8_t *)a->qs + 8 * j;
        w[j] = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        sc[j / 2] |= (uint8_t)((w[j] >> 28) << (4 * (j & 1)));
      }
      memcpy(o, &a->d, 2);
      memcpy(o + 2, sc, 4);
      for (int g = 0; g < 4; g++) { /* elements 8g .. 8g + 7 of every sub-block: one word per plane */
        uint64_t m0 = 0, m1 = 0, sg = 0;
        for (int j = 0; j < 8; j++) {
          /* magnitudes 0x08 / 0x19 / 0x2B: >> 4 gives their code 0 / 1 / 2 in every byte */
          const uint64_t c = (q35_iq2xxs_grid[((const uint8_t *)a->qs)[8 * j + g]] >> 4) & 0x0303030303030303ull;
          if (j < 4) m0 |= c << (2 * j);
          else m1 |= c << (2 * (j - 4));
          sg |= bits_to_bytes(q35_ksigns_iq2xs[(w[j] >> (7 * g)) & 127]) << j;
        }
        memcpy(o + 6 + 8 * g, &m0, 8);
        memcpy(o + 38 + 8 * g, &m1, 8);
        memcpy(o + 70 + 8 * g, &sg, 8);
      }
    } else {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * Q35_IQ2_XXSR_BYTES;
      blk_iq2_xxs *o = (blk_iq2_xxs *)dst + i;
      memcpy(&o->d, a, 2);
      for (int j = 0; j < 8; j++) {
        uint8_t *p = (uint8_t *)o->qs + 8 * j;
        uint32_t w = (uint32_t)((a[2 + j / 2] >> (4 * (j & 1))) & 15) << 28;
        for (int g = 0; g < 4; g++) {
          uint64_t c = 0;
          unsigned s = 0;
          for (int e = 0; e < 8; e++) {
            const int el = 8 * g + e;
            c |= (uint64_t)((a[6 + 32 * (j / 4) + el] >> (2 * (j & 3))) & 3) << (8 * e);
            s |= (unsigned)((a[70 + el] >> j) & 1) << e;
          }
          int x = 0; /* the grid entry with these codes (every code word came from one) */
          while (x < 255 && ((q35_iq2xxs_grid[x] >> 4) & 0x0303030303030303ull) != c) x++;
          p[g] = (uint8_t)x;
          w |= (uint32_t)(s & 127) << (7 * g);
        }
        p[4] = (uint8_t)w, p[5] = (uint8_t)(w >> 8), p[6] = (uint8_t)(w >> 16), p[7] = (uint8_t)(w >> 24);
      }
    }
  }
}

/* the reference twins of IQ2_XXSR: IQ2_XXS's on the row moved back */
static void dequant_iq2_xxsr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq2_xxs b;
    q35_iq2_xxsr_move((const uint8_t *)src + (size_t)i * Q35_IQ2_XXSR_BYTES, &b, QK_K, 1);
    dequant_iq2_xxs(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq2_xxsr(int64_t n, const void *w, const void *x) {
  blk_iq2_xxs *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq2_xxs) + 1);
  if (!p) return NAN;
  q35_iq2_xxsr_move(w, p, n, 1);
  const float v = dot_iq2_xxs(n, p, x);
  free(p);
  return v;
}

/* IQ3_XXSR and IQ3_SR share the planes after the scales (quant_internal.h): the 4-bit code of
 * element e of sub-block j is nibble j & 1 of byte 6 + 32 (j / 2) + e. Sub-block j's 32 codes c
 * into the planes (the even sub-block first: it clears the byte) / out of them. */
static void r4_put(uint8_t *o, int j, const uint8_t c[32]) {
  for (int e = 0; e < 32; e++) {
    uint8_t *p = o + 6 + 32 * (j / 2) + e;
    *p = (uint8_t)((j & 1 ? *p : 0) | c[e] << (4 * (j & 1)));
  }
}
static void r4_get(const uint8_t *a, int j, uint8_t c[32]) {
  for (int e = 0; e < 32; e++) c[e] = (a[6 + 32 * (j / 2) + e] >> (4 * (j & 1))) & 15;
}
/* four codes' magnitude fields (bits 0..2) as the bytes of a word */
static uint32_t r4_mag4(const uint8_t *c) {
  return (uint32_t)(c[0] & 7) | (uint32_t)(c[1] & 7) << 8 | (uint32_t)(c[2] & 7) << 16 | (uint32_t)(c[3] & 7) << 24;
}

void q35_iq3_xxsr_move(const void *src, void *dst, int64_t n, int back) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    uint8_t c[32];
    if (!back) {
      const blk_iq3_xxs *a = (const blk_iq3_xxs *)src + i;
      uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ3_XXSR_BYTES;
      uint8_t sc[4] = {0};
      memcpy(o, &a->d, 2);
      for (int j = 0; j < 8; j++) {
        const uint32_t w = q35_ld32(a->qs + 64 + 4 * j);
        sc[j / 2] |= (uint8_t)((w >> 28) << (4 * (j & 1)));
        for (int g = 0; g < 4; g++) { /* elements 8g .. 8g + 7: two grid entries, one sign field */
          /* magnitudes 4, 12, ..., 52, 62: >> 3 gives their code 0..7 in every byte */
          const uint64_t m = ((uint64_t)q35_iq3xxs_grid[a->qs[8 * j + 2 * g]] |
                              (uint64_t)q35_iq3xxs_grid[a->qs[8 * j + 2 * g + 1]] << 32) >> 3 & 0x0707070707070707ull;
          const uint64_t v = m | bits_to_bytes(q35_ksigns_iq2xs[(w >> (7 * g)) & 127]) << 3;
          for (int e = 0; e < 8; e++) c[8 * g + e] = (uint8_t)(v >> (8 * e));
        }
        r4_put(o, j, c);
      }
      memcpy(o + 2, sc, 4);
    } else {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * Q35_IQ3_XXSR_BYTES;
      blk_iq3_xxs *o = (blk_iq3_xxs *)dst + i;
      memcpy(&o->d, a, 2);
      for (int j = 0; j < 8; j++) {
        uint32_t w = (uint32_t)((a[2 + j / 2] >> (4 * (j & 1))) & 15) << 28;
        r4_get(a, j, c);
        for (int g = 0; g < 4; g++) {
          unsigned s = 0;
          for (int h = 0; h < 2; h++) {
            const uint32_t m = r4_mag4(c + 8 * g + 4 * h);
            for (int e = 0; e < 4; e++) s |= (unsigned)(c[8 * g + 4 * h + e] >> 3) << (4 * h + e);
            int x = 0; /* the grid entry with these codes */
            while (x < 255 && ((q35_iq3xxs_grid[x] >> 3) & 0x07070707u) != m) x++;
            o->qs[8 * j + 2 * g + h] = (uint8_t)x;
          }
          w |= (uint32_t)(s & 127) << (7 * g);
        }
        memcpy(o->qs + 64 + 4 * j, &w, 4);
      }
    }
  }
}

/* IQ3_SR: IQ3_S's grid magnitudes are the odd 1, 3, ..., 15 (>> 1: code 0..7) and every element
 * has its own sign bit; the scales' nibbles are already in the layout's order. The way back finds
 * each 4-code word's grid index (the 512 entries are distinct) in an inverse table built per call. */
void q35_iq3_sr_move(const void *src, void *dst, int64_t n, int back) {
  uint16_t inv[4096] = {0};
  if (back)
    for (int x = 0; x < 512; x++) {
      const uint32_t m = (q35_iq3s_grid[x] >> 1) & 0x07070707u;
      inv[(m & 7) | (m >> 5 & 0x38) | (m >> 10 & 0x1C0) | (m >> 15 & 0xE00)] = (uint16_t)x;
    }
  for (int64_t i = 0; i < n / QK_K; i++) {
    uint8_t c[32];
    if (!back) {
      const blk_iq3_s *a = (const blk_iq3_s *)src + i;
      uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ3_SR_BYTES;
      memcpy(o, &a->d, 2);
      memcpy(o + 2, a->scales, 4);
      for (int j = 0; j < 8; j++) {
        for (int g = 0; g < 4; g++) { /* group k = 4j + g: elements 8g .. 8g + 7 of sub-block j */
          const int k = 4 * j + g;
          const uint64_t m = ((uint64_t)q35_iq3s_grid[a->qs[2 * k] | (((a->qh[j] >> (2 * g)) & 1) << 8)] |
                              (uint64_t)q35_iq3s_grid[a->qs[2 * k + 1] | (((a->qh[j] >> (2 * g + 1)) & 1) << 8)] << 32) >>
                                 1 & 0x0707070707070707ull;
          const uint64_t v = m | bits_to_bytes(a->signs[k]) << 3;
          for (int e = 0; e < 8; e++) c[8 * g + e] = (uint8_t)(v >> (8 * e));
        }
        r4_put(o, j, c);
      }
    } else {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * Q35_IQ3_SR_BYTES;
      blk_iq3_s *o = (blk_iq3_s *)dst + i;
      memcpy(&o->d, a, 2);
      memcpy(o->scales, a + 2, 4);
      for (int j = 0; j < 8; j++) {
        unsigned h = 0;
        r4_get(a, j, c);
        for (int g = 0; g < 4; g++) {
          const int k = 4 * j + g;
          unsigned s = 0;
          for (int e = 0; e < 8; e++) s |= (unsigned)(c[8 * g + e] >> 3) << e;
          o->signs[k] = (uint8_t)s;
          for (int t = 0; t < 2; t++) {
            const uint8_t *q = c + 8 * g + 4 * t;
            const unsigned x = inv[(q[0] & 7) | (q[1] & 7) << 3 | (q[2] & 7) << 6 | (q[3] & 7) << 9];
            o->qs[2 * k + t] = (uint8_t)x;
            h |= (x >> 8) << (2 * g + t);
          }
        }
        o->qh[j] = (uint8_t)h;
      }
    }
  }
}

static void dequant_iq3_xxsr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq3_xxs b;
    q35_iq3_xxsr_move((const uint8_t *)src + (size_t)i * Q35_IQ3_XXSR_BYTES, &b, QK_K, 1);
    dequant_iq3_xxs(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq3_xxsr(int64_t n, const void *w, const void *x) {
  blk_iq3_xxs *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq3_xxs) + 1);
  if (!p) return NAN;
  q35_iq3_xxsr_move(w, p, n, 1);
  const float v = dot_iq3_xxs(n, p, x);
  free(p);
  return v;
}

/* the reference twins of IQ3_SR: IQ3_S's on the row moved back */
static void dequant_iq3_sr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq3_s b;
    q35_iq3_sr_move((const uint8_t *)src + (size_t)i * Q35_IQ3_SR_BYTES, &b, QK_K, 1);
    dequant_iq3_s(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq3_sr(int64_t n, const void *w, const void *x) {
  blk_iq3_s *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq3_s) + 1);
  if (!p) return NAN;
  q35_iq3_sr_move(w, p, n, 1);
  const float v = dot_iq3_s(n, p, x);
  free(p);
  return v;
}

/* ------------------------------ IQ2_XSR / IQ2_SR (quant_internal.h) ------------------------------ */

/* grid entry of IQ2_XS / IQ2_S by its eight 2-bit magnitude codes (code e at bits 2e: the key), for
 * the move back; every grid entry's codes differ, and a repacked row's codes came from one */
static uint16_t iq2_inv_xs[1 << 16], iq2_inv_s[1 << 16];
static pthread_once_t iq2_inv_once = PTHREAD_ONCE_INIT;
static unsigned iq2_codes_key(uint64_t c) { /* c: code e in byte e */
  unsigned k = 0;
  for (int e = 0; e < 8; e++) k |= (unsigned)((c >> (8 * e)) & 3) << (2 * e);
  return k;
}
static void iq2_inv_build(void) {
  for (int x = 0; x < 512; x++) iq2_inv_xs[iq2_codes_key(q35_iq2xs_grid[x] >> 4)] = (uint16_t)x;
  for (int x = 0; x < 1024; x++) iq2_inv_s[iq2_codes_key(q35_iq2s_grid[x] >> 4)] = (uint16_t)x;
}

_Static_assert(offsetof(blk_iq2_xs, scales) == sizeof(blk_iq2_xs) - 8, "iq2_xs scales last");
_Static_assert(offsetof(blk_iq2_s, scales) == sizeof(blk_iq2_s) - 8, "iq2_s scales last");
void q35_iq2_xsr_move(int type, const void *src, void *dst, int64_t n, int back) {
  const int xs = type == Q35_TYPE_IQ2_XSR;
  const size_t bs = xs ? sizeof(blk_iq2_xs) : sizeof(blk_iq2_s);
  if (back) pthread_once(&iq2_inv_once, iq2_inv_build);
  for (int64_t i = 0; i < n / QK_K; i++) {
    if (!back) {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * bs;
      uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ2_XSR_BYTES;
      memcpy(o, a, 2);
      memcpy(o + 2, a + bs - 8, 8); /* the scales: the last 8 bytes of both block types */
      for (int g = 0; g < 4; g++) { /* elements 8g .. 8g + 7 of every sub-block: one word per plane */
        uint64_t m0 = 0, m1 = 0, sg = 0;
        for (int j = 0; j < 8; j++) {
          uint64_t grid;
          unsigned sb;
          if (xs) {
            const uint16_t v = (uint16_t)(a[2 + 2 * (4 * j + g)] | a[3 + 2 * (4 * j + g)] << 8);
            grid = q35_iq2xs_grid[v & 511], sb = q35_ksigns_iq2xs[v >> 9];
          } else {
            const blk_iq2_s *b = (const blk_iq2_s *)(const void *)a;
            grid = q35_iq2s_grid[b->qs[4 * j + g] | ((b->qh[j] >> (2 * g)) & 3) << 8], sb = b->qs[32 + 4 * j + g];
          }
          /* magnitudes 0x08 / 0x19 / 0x2B: >> 4 gives their code 0 / 1 / 2 in every byte */
          const uint64_t c = (grid >> 4) & 0x0303030303030303ull;
          if (j < 4) m0 |= c << (2 * j);
          else m1 |= c << (2 * (j - 4));
          sg |= bits_to_bytes(sb) << j;
        }
        memcpy(o + 10 + 8 * g, &m0, 8);
        memcpy(o + 42 + 8 * g, &m1, 8);
        memcpy(o + 74 + 8 * g, &sg, 8);
      }
    } else {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * Q35_IQ2_XSR_BYTES;
      uint8_t *o = (uint8_t *)dst + (size_t)i * bs;
      memset(o, 0, bs);
      memcpy(o, a, 2);
      memcpy(o + bs - 8, a + 2, 8);
      for (int j = 0; j < 8; j++)
        for (int g = 0; g < 4; g++) {
          unsigned key = 0, s = 0;
          for (int e = 0; e < 8; e++) {
            const int el = 8 * g + e;
            key |= (unsigned)((a[10 + 32 * (j / 4) + el] >> (2 * (j & 3))) & 3) << (2 * e);
            s |= (unsigned)((a[74 + el] >> j) & 1) << e;
          }
          if (xs) {
            const unsigned v = iq2_inv_xs[key] | (s & 127) << 9;
            o[2 + 2 * (4 * j + g)] = (uint8_t)v, o[3 + 2 * (4 * j + g)] = (uint8_t)(v >> 8);
          } else {
            blk_iq2_s *b = (blk_iq2_s *)(void *)o;
            const unsigned x = iq2_inv_s[key];
            b->qs[4 * j + g] = (uint8_t)x;
            b->qh[j] |= (uint8_t)((x >> 8) << (2 * g));
            b->qs[32 + 4 * j + g] = (uint8_t)s;
          }
        }
    }
  }
}

/* ------------------------------ IQ1_SR (quant_internal.h) ------------------------------ */

/* the grid entry of each 8-element code word (g + 1 per element, base 3, element 0 the lowest
 * digit): the move back's inverse of q35_iq1s_grid, built once */
static uint16_t iq1s_inv[6561];
static pthread_once_t iq1s_inv_once = PTHREAD_ONCE_INIT;
static void iq1s_inv_build(void) {
  for (int x = 0; x < 2048; x++) {
    int key = 0;
    for (int e = 7; e >= 0; e--) key = 3 * key + (int8_t)(uint8_t)(q35_iq1s_grid[x] >> (8 * e)) + 1;
    iq1s_inv[key] = (uint16_t)x;
  }
}

void q35_iq1_sr_move(const void *src, void *dst, int64_t n, int back) {
  if (back) pthread_once(&iq1s_inv_once, iq1s_inv_build);
  for (int64_t i = 0; i < n / QK_K; i++) {
    if (!back) {
      const blk_iq1_s *a = (const blk_iq1_s *)src + i;
      uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ1_SR_BYTES;
      memcpy(o, &a->d, 2);
      memset(o + 10, 0, 64);
      for (int j = 0; j < 8; j++) {
        const uint16_t h = a->qh[j];
        o[2 + j] = (uint8_t)((h >> 8) & 0xF0);
        for (int g = 0; g < 4; g++) {
          const uint64_t v = q35_iq1s_grid[a->qs[4 * j + g] | ((h >> (3 * g)) & 7) << 8];
          for (int e = 0; e < 8; e++)
            o[10 + 32 * (j / 4) + 8 * g + e] |= (uint8_t)(((int8_t)(uint8_t)(v >> (8 * e)) + 1) << (2 * (j & 3)));
        }
      }
    } else {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * Q35_IQ1_SR_BYTES;
      blk_iq1_s *o = (blk_iq1_s *)dst + i;
      memcpy(&o->d, a, 2);
      for (int j = 0; j < 8; j++) {
        uint16_t h = (uint16_t)(a[2 + j] << 8);
        for (int g = 0; g < 4; g++) {
          int key = 0;
          for (int e = 7; e >= 0; e--) key = 3 * key + ((a[10 + 32 * (j / 4) + 8 * g + e] >> (2 * (j & 3))) & 3);
          const int x = iq1s_inv[key]; /* every code word came from a grid entry */
          o->qs[4 * j + g] = (uint8_t)x;
          h |= (uint16_t)((x >> 8) << (3 * g));
        }
        o->qh[j] = h;
      }
    }
  }
}

/* the reference twins of IQ2_XSR / IQ2_SR: IQ2_XS's / IQ2_S's on the row moved back */
static void dequant_iq2_xsr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq2_xs b;
    q35_iq2_xsr_move(Q35_TYPE_IQ2_XSR, (const uint8_t *)src + (size_t)i * Q35_IQ2_XSR_BYTES, &b, QK_K, 1);
    dequant_iq2_xs(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq2_xsr(int64_t n, const void *w, const void *x) {
  blk_iq2_xs *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq2_xs) + 1);
  if (!p) return NAN;
  q35_iq2_xsr_move(Q35_TYPE_IQ2_XSR, w, p, n, 1);
  const float v = dot_iq2_xs(n, p, x);
  free(p);
  return v;
}
static void dequant_iq2_sr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq2_s b;
    q35_iq2_xsr_move(Q35_TYPE_IQ2_SR, (const uint8_t *)src + (size_t)i * Q35_IQ2_XSR_BYTES, &b, QK_K, 1);
    dequant_iq2_s(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq2_sr(int64_t n, const void *w, const void *x) {
  blk_iq2_s *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq2_s) + 1);
  if (!p) return NAN;
  q35_iq2_xsr_move(Q35_TYPE_IQ2_SR, w, p, n, 1);
  const float v = dot_iq2_s(n, p, x);
  free(p);
  return v;
}

static void dequant_iq1_sr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq1_s b;
    q35_iq1_sr_move((const uint8_t *)src + (size_t)i * Q35_IQ1_SR_BYTES, &b, QK_K, 1);
    dequant_iq1_s(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq1_sr(int64_t n, const void *w, const void *x) {
  blk_iq1_s *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq1_s) + 1);
  if (!p) return NAN;
  q35_iq1_sr_move(w, p, n, 1);
  const float v = dot_iq1_s(n, p, x);
  free(p);
  return v;
}

void q35_iq1_mr_move(const void *src, void *dst, int64_t n, int back) {
  if (back) pthread_once(&iq1s_inv_once, iq1s_inv_build);
  for (int64_t i = 0; i < n / QK_K; i++) {
    if (!back) {
      const blk_iq1_m *a = (const blk_iq1_m *)src + i;
      uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ1_MR_BYTES;
      const uint16_t d = q35_iq1m_d(a);
      memcpy(o, &d, 2);
      memset(o + 2, 0, 80);
      for (int f = 0; f < 16; f++) /* the scale of elements 16 f .. 16 f + 15 */
        o[2 + f / 2] |= (uint8_t)(((q35_ld16(a->scales + 2 * (f / 4)) >> (3 * (f % 4))) & 7) << (4 * (f & 1)));
      for (int k = 0; k < 32; k++) { /* group k: elements 8 k .. 8 k + 7 */
        const int j = k / 4, g = k % 4, h = a->qh[k / 2] >> (4 * (k % 2));
        o[10 + j] |= (uint8_t)(((h >> 3) & 1) << (4 + g));
        const uint64_t v = q35_iq1s_grid[a->qs[k] | (h & 7) << 8];
        for (int e = 0; e < 8; e++)
          o[18 + 32 * (j / 4) + 8 * g + e] |= (uint8_t)(((int8_t)(uint8_t)(v >> (8 * e)) + 1) << (2 * (j & 3)));
      }
    } else {
      const uint8_t *a = (const uint8_t *)src + (size_t)i * Q35_IQ1_MR_BYTES;
      blk_iq1_m *o = (blk_iq1_m *)dst + i;
      const uint16_t d = q35_ld16(a);
      memset(o, 0, sizeof *o);
      for (int w = 0; w < 4; w++) {
        uint16_t v = (uint16_t)(((d >> (4 * w)) & 15) << 12);
        for (int f = 4 * w; f < 4 * w + 4; f++) v |= (uint16_t)(((a[2 + f / 2] >> (4 * (f & 1))) & 7) << (3 * (f % 4)));
        memcpy(o->scales + 2 * w, &v, 2);
      }
      for (int k = 0; k < 32; k++) {
        const int j = k / 4, g = k % 4;
        int key = 0;
        for (int e = 7; e >= 0; e--) key = 3 * key + ((a[18 + 32 * (j / 4) + 8 * g + e] >> (2 * (j & 3))) & 3);
        const int x = iq1s_inv[key]; /* every code word came from a grid entry */
        o->qs[k] = (uint8_t)x;
        o->qh[k / 2] |= (uint8_t)(((x >> 8) | ((a[10 + j] >> (4 + g)) & 1) << 3) << (4 * (k % 2)));
      }
    }
  }
}

static void dequant_iq1_mr(const void *src, float *y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_iq1_m b;
    q35_iq1_mr_move((const uint8_t *)src + (size_t)i * Q35_IQ1_MR_BYTES, &b, QK_K, 1);
    dequant_iq1_m(&b, y + i * QK_K, QK_K);
  }
}
static float dot_iq1_mr(int64_t n, const void *w, const void *x) {
  blk_iq1_m *p = malloc((size_t)(n / QK_K) * sizeof(blk_iq1_m) + 1);
  if (!p) return NAN;
  q35_iq1_mr_move(w, p, n, 1);
  const float v = dot_iq1_m(n, p, x);
  free(p);
  return v;
}

void q35_kernels_iq_ref(q35_kernels *k) {
#define SET(T, dq, vd) (k->dequantize[T] = (dq), k->vec_dot[T] = (vd))
  SET(Q35_TYPE_IQ2_XXS, dequant_iq2_xxs, dot_iq2_xxs);
  SET(Q35_TYPE_IQ2_XS, dequant_iq2_xs, dot_iq2_xs);
  SET(Q35_TYPE_IQ2_S, dequant_iq2_s, dot_iq2_s);
  SET(Q35_TYPE_IQ3_XXS, dequant_iq3_xxs, dot_iq3_xxs);
  SET(Q35_TYPE_IQ3_S, dequant_iq3_s, dot_iq3_s);
  SET(Q35_TYPE_IQ1_S, dequant_iq1_s, dot_iq1_s);
  SET(Q35_TYPE_IQ1_M, dequant_iq1_m, dot_iq1_m);
  SET(Q35_TYPE_IQ2_XXSR, dequant_iq2_xxsr, dot_iq2_xxsr);
  SET(Q35_TYPE_IQ3_XXSR, dequant_iq3_xxsr, dot_iq3_xxsr);
  SET(Q35_TYPE_IQ3_SR, dequant_iq3_sr, dot_iq3_sr);
  SET(Q35_TYPE_IQ2_XSR, dequant_iq2_xsr, dot_iq2_xsr);
  SET(Q35_TYPE_IQ2_SR, dequant_iq2_sr, dot_iq2_sr);
  SET(Q35_TYPE_IQ1_SR, dequant_iq1_sr, dot_iq1_sr);
  SET(Q35_TYPE_IQ1_MR, dequant_iq1_mr, dot_iq1_mr);
#undef SET
}

int q35_iq_vec_dot_type(const q35_kernels *k, int type) {
  (void)k;
  switch (type) {
  case Q35_TYPE_IQ2_XXS: case Q35_TYPE_IQ2_XS: case Q35_TYPE_IQ2_S: case Q35_TYPE_IQ3_XXS:
  case Q35_TYPE_IQ3_S: case Q35_TYPE_IQ1_S: case Q35_TYPE_IQ1_M: case Q35_TYPE_IQ2_XXSR:
  case Q35_TYPE_IQ3_XXSR: case Q35_TYPE_IQ3_SR: case Q35_TYPE_IQ2_XSR: case Q35_TYPE_IQ2_SR:
  case Q35_TYPE_IQ1_SR: case Q35_TYPE_IQ1_MR:
    return Q35_TYPE_Q8_K;
  default:
    return -1;
  }
}
