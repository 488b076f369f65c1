/*
 * iq_repack_avx2.c - q35_repack_row's IQ2_XXSR, IQ3_XXSR, IQ3_SR, IQ2_XSR, IQ2_SR, IQ1_SR and
 * IQ1_MR rewrites (the loader's, at the AVX2 and AVX-512 levels) on 256-bit vectors: the same
 * bytes as the scalar forward moves q35_iq2_xxsr_move, q35_iq3_xxsr_move, ... (quant_iq_ref.c,
 * their reference twins; the layouts are described in quant_internal.h), which
 * tests/test_quant_tile.c holds them to. The grid entries
 * are still looked up one by one; what runs on vectors is the per-element work the scalar moves
 * do byte by byte: codes out of the grid bytes, sign bits spread to bytes, the planes assembled.
 */
#include <string.h>

#include <immintrin.h>

#include "kernels/quant_internal.h"
#include "kernels/quant_iq_tables.h"

#define QS_TARGET __attribute__((target("avx2,fma,f16c")))

/* 32 bytes, byte 8 g + e = 0xFF where bit e of s_g is set (s_g: byte g of s, g = 0..3), else 0 */
static inline QS_TARGET __m256i signs_to_bytes(uint32_t s) {
  const __m256i bc = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s),
                                         _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                                          2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  return _mm256_cmpeq_epi8(_mm256_and_si256(bc, bit), bit);
}

/* the four sign bytes (groups g = 0..3) of the 28 sign bits of w */
static inline uint32_t ksigns4(uint32_t w) {
  return (uint32_t)q35_ksigns_iq2xs[w & 127] | (uint32_t)q35_ksigns_iq2xs[(w >> 7) & 127] << 8 |
         (uint32_t)q35_ksigns_iq2xs[(w >> 14) & 127] << 16 | (uint32_t)q35_ksigns_iq2xs[(w >> 21) & 127] << 24;
}

QS_TARGET void q35_repack_iq2_xxsr_avx2(const void *src, void *dst, int64_t n) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_iq2_xxs *a = (const blk_iq2_xxs *)src + i;
    const uint8_t *q = (const uint8_t *)a->qs;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ2_XXSR_BYTES;
    uint8_t sc[4] = {0};
    __m256i M[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, S = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
      const uint32_t w = q35_ld32(q + 8 * j + 4);
      sc[j / 2] |= (uint8_t)((w >> 28) << (4 * (j & 1)));
      /* byte 8 g + e: element e of the grid entry of group g; its magnitude's code in bits 4..5 */
      const __m256i gv = _mm256_setr_epi64x((long long)q35_iq2xxs_grid[q[8 * j]], (long long)q35_iq2xxs_grid[q[8 * j + 1]],
                                            (long long)q35_iq2xxs_grid[q[8 * j + 2]], (long long)q35_iq2xxs_grid[q[8 * j + 3]]);
      const __m256i c = _mm256_and_si256(_mm256_srli_epi16(gv, 4), m3);
      M[j / 4] = _mm256_or_si256(M[j / 4], _mm256_sll_epi16(c, _mm_cvtsi32_si128(2 * (j & 3))));
      S = _mm256_or_si256(S, _mm256_and_si256(signs_to_bytes(ksigns4(w)), _mm256_set1_epi8((char)(1 << j))));
    }
    memcpy(o, &a->d, 2);
    memcpy(o + 2, sc, 4);
    _mm256_storeu_si256((__m256i *)(void *)(o + 6), M[0]);
    _mm256_storeu_si256((__m256i *)(void *)(o + 38), M[1]);
    _mm256_storeu_si256((__m256i *)(void *)(o + 70), S);
  }
}

QS_TARGET void q35_repack_iq3_xxsr_avx2(const void *src, void *dst, int64_t n) {
  const __m256i m7 = _mm256_set1_epi8(7), b3 = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_iq3_xxs *a = (const blk_iq3_xxs *)src + i;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ3_XXSR_BYTES;
    uint8_t sc[4] = {0};
    __m256i P = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
      const uint32_t w = q35_ld32(a->qs + 64 + 4 * j);
      sc[j / 2] |= (uint8_t)((w >> 28) << (4 * (j & 1)));
      const uint8_t *q = a->qs + 8 * j;
      /* byte 4 k + b: element b of grid entry k (elements 4 k .. 4 k + 3); magnitude code in bits 3..5 */
      const __m256i gv = _mm256_setr_epi32((int)q35_iq3xxs_grid[q[0]], (int)q35_iq3xxs_grid[q[1]], (int)q35_iq3xxs_grid[q[2]],
                                           (int)q35_iq3xxs_grid[q[3]], (int)q35_iq3xxs_grid[q[4]], (int)q35_iq3xxs_grid[q[5]],
                                           (int)q35_iq3xxs_grid[q[6]], (int)q35_iq3xxs_grid[q[7]]);
      const __m256i c = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(gv, 3), m7),
                                        _mm256_and_si256(signs_to_bytes(ksigns4(w)), b3));
      if (j & 1) {
        P = _mm256_or_si256(P, _mm256_slli_epi16(c, 4));
        _mm256_storeu_si256((__m256i *)(void *)(o + 6 + 32 * (j / 2)), P);
      } else
        P = c;
    }
    memcpy(o, &a->d, 2);
    memcpy(o + 2, sc, 4);
  }
}

/* IQ3_SR: entry t of sub-block j (elements 4 t .. 4 t + 3) has the index qs[8 j + t] with bit t of
 * qh[j] as its ninth bit; its 32 signs are the four bytes signs[4 j ..] */
QS_TARGET void q35_repack_iq3_sr_avx2(const void *src, void *dst, int64_t n) {
  const __m256i m7 = _mm256_set1_epi8(7), b3 = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_iq3_s *a = (const blk_iq3_s *)src + i;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ3_SR_BYTES;
    memcpy(o, &a->d, 2);
    memcpy(o + 2, a->scales, 4);
    __m256i P = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
      const uint8_t *q = a->qs + 8 * j;
      const unsigned h = a->qh[j];
#define G3(t) (int)q35_iq3s_grid[q[t] | ((h >> (t)) & 1) << 8]
      const __m256i gv = _mm256_setr_epi32(G3(0), G3(1), G3(2), G3(3), G3(4), G3(5), G3(6), G3(7));
#undef G3
      const __m256i c = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(gv, 1), m7),
                                        _mm256_and_si256(signs_to_bytes(q35_ld32(a->signs + 4 * j)), b3));
      if (j & 1) {
        P = _mm256_or_si256(P, _mm256_slli_epi16(c, 4));
        _mm256_storeu_si256((__m256i *)(void *)(o + 6 + 32 * (j / 2)), P);
      } else
        P = c;
    }
  }
}

/* IQ2_XSR / IQ2_SR: as IQ2_XXSR's planes, from IQ2_XS's 16-bit index-and-sign words or IQ2_S's
 * index bytes (two high bits in qh) and stored sign bytes */
QS_TARGET void q35_repack_iq2_xsr_avx2(int type, const void *src, void *dst, int64_t n) {
  const int xs = type == Q35_TYPE_IQ2_XSR;
  const size_t bs = xs ? sizeof(blk_iq2_xs) : sizeof(blk_iq2_s);
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < n / QK_K; i++) {
    const uint8_t *a = (const uint8_t *)src + (size_t)i * bs;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ2_XSR_BYTES;
    __m256i M[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, S = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
      __m256i gv;
      uint32_t sb;
      if (xs) {
        const uint8_t *p = a + 2 + 8 * j;
        const uint16_t v0 = q35_ld16(p), v1 = q35_ld16(p + 2), v2 = q35_ld16(p + 4), v3 = q35_ld16(p + 6);
        gv = _mm256_setr_epi64x((long long)q35_iq2xs_grid[v0 & 511], (long long)q35_iq2xs_grid[v1 & 511],
                                (long long)q35_iq2xs_grid[v2 & 511], (long long)q35_iq2xs_grid[v3 & 511]);
        sb = (uint32_t)q35_ksigns_iq2xs[v0 >> 9] | (uint32_t)q35_ksigns_iq2xs[v1 >> 9] << 8 |
             (uint32_t)q35_ksigns_iq2xs[v2 >> 9] << 16 | (uint32_t)q35_ksigns_iq2xs[v3 >> 9] << 24;
      } else {
        const blk_iq2_s *b = (const blk_iq2_s *)(const void *)a;
        const unsigned h = b->qh[j];
        gv = _mm256_setr_epi64x((long long)q35_iq2s_grid[b->qs[4 * j] | (h & 3) << 8],
                                (long long)q35_iq2s_grid[b->qs[4 * j + 1] | ((h >> 2) & 3) << 8],
                                (long long)q35_iq2s_grid[b->qs[4 * j + 2] | ((h >> 4) & 3) << 8],
                                (long long)q35_iq2s_grid[b->qs[4 * j + 3] | ((h >> 6) & 3) << 8]);
        sb = q35_ld32(b->qs + 32 + 4 * j);
      }
      const __m256i c = _mm256_and_si256(_mm256_srli_epi16(gv, 4), m3);
      M[j / 4] = _mm256_or_si256(M[j / 4], _mm256_sll_epi16(c, _mm_cvtsi32_si128(2 * (j & 3))));
      S = _mm256_or_si256(S, _mm256_and_si256(signs_to_bytes(sb), _mm256_set1_epi8((char)(1 << j))));
    }
    memcpy(o, a, 2);
    memcpy(o + 2, a + bs - 8, 8);
    _mm256_storeu_si256((__m256i *)(void *)(o + 10), M[0]);
    _mm256_storeu_si256((__m256i *)(void *)(o + 42), M[1]);
    _mm256_storeu_si256((__m256i *)(void *)(o + 74), S);
  }
}

/* IQ1_SR / IQ1_MR: the planes M0, M1 (at m) of a super-block whose group k = 4 j + g has the grid
 * index idx[k]: the grid's -1 / 0 / 1 plus one, two bits per sub-block */
static inline QS_TARGET void iq1_planes(const uint16_t idx[32], uint8_t *m) {
  const __m256i one = _mm256_set1_epi8(1);
  __m256i M[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int j = 0; j < 8; j++) {
    const uint16_t *x = idx + 4 * j;
    const __m256i gv = _mm256_setr_epi64x((long long)q35_iq1s_grid[x[0]], (long long)q35_iq1s_grid[x[1]],
                                          (long long)q35_iq1s_grid[x[2]], (long long)q35_iq1s_grid[x[3]]);
    M[j / 4] = _mm256_or_si256(M[j / 4], _mm256_sll_epi16(_mm256_add_epi8(gv, one), _mm_cvtsi32_si128(2 * (j & 3))));
  }
  _mm256_storeu_si256((__m256i *)(void *)m, M[0]);
  _mm256_storeu_si256((__m256i *)(void *)(m + 32), M[1]);
}

QS_TARGET void q35_repack_iq1_sr_avx2(const void *src, void *dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_iq1_s *a = (const blk_iq1_s *)src + i;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ1_SR_BYTES;
    uint16_t idx[32];
    memcpy(o, &a->d, 2);
    for (int j = 0; j < 8; j++) {
      const uint16_t h = a->qh[j];
      o[2 + j] = (uint8_t)((h >> 8) & 0xF0);
      for (int g = 0; g < 4; g++) idx[4 * j + g] = (uint16_t)(a->qs[4 * j + g] | ((h >> (3 * g)) & 7) << 8);
    }
    iq1_planes(idx, o + 10);
  }
}

QS_TARGET void q35_repack_iq1_mr_avx2(const void *src, void *dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_iq1_m *a = (const blk_iq1_m *)src + i;
    uint8_t *o = (uint8_t *)dst + (size_t)i * Q35_IQ1_MR_BYTES;
    uint16_t idx[32];
    const uint16_t d = q35_iq1m_d(a);
    memcpy(o, &d, 2);
    for (int w = 0; w < 4; w++) { /* the scales of elements 64 w .. 64 w + 63, 16 at a time */
      const unsigned s = q35_ld16(a->scales + 2 * w);
      o[2 + 2 * w] = (uint8_t)((s & 7) | ((s >> 3) & 7) << 4);
      o[3 + 2 * w] = (uint8_t)(((s >> 6) & 7) | ((s >> 9) & 7) << 4);
    }
    for (int j = 0; j < 8; j++) {
      const unsigned h0 = a->qh[2 * j], h1 = a->qh[2 * j + 1]; /* groups 4 j, 4 j + 1 | 4 j + 2, 4 j + 3 */
      o[10 + j] = (uint8_t)(((h0 >> 3) & 1) << 4 | ((h0 >> 7) & 1) << 5 | ((h1 >> 3) & 1) << 6 | ((h1 >> 7) & 1) << 7);
      idx[4 * j] = (uint16_t)(a->qs[4 * j] | (h0 & 7) << 8);
      idx[4 * j + 1] = (uint16_t)(a->qs[4 * j + 1] | ((h0 >> 4) & 7) << 8);
      idx[4 * j + 2] = (uint16_t)(a->qs[4 * j + 2] | (h1 & 7) << 8);
      idx[4 * j + 3] = (uint16_t)(a->qs[4 * j + 3] | ((h1 >> 4) & 7) << 8);
    }
    iq1_planes(idx, o + 18);
  }
}
