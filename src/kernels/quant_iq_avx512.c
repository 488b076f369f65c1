/*
 * quant_iq_avx512.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight
 * types: AVX-512 (VNNI): the 256-bit templates of quant_iq_256.inc with vpdpwssd, masked negation
 * for the signs and BMI2's pext / pdep for the index fields (fast on every AVX-512 part; the AVX2
 * level avoids them: microcoded and slow on Zen 1/2).
 * Bit-identical to the reference (see quant_iq_256.inc); no float contraction in this file.
 */
#pragma GCC optimize("fp-contract=off")
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,bmi2")))
#define QS_VNNI 1
#include "base/cpu.h"
#include "kernels/quant_256.inc"
#define IQP_RB 4 /* prefill micro-tiles 4 x 4 */
#define IQ_PF_AHEAD 1024 /* the one-column gemv prefetches 1 KiB ahead (docs/PERF.md, session 12) */
#include "kernels/quant_iq_256.inc"

/* Micro-tile shapes R x C (32 vector registers); one-column gemv with G super-blocks per pass (G = 4
 * where it measured faster than 2: docs/PERF.md, issue 16, sessions 9 and 12) */
QS_TILE(t_iq2_xxs, 2, 4)
IQ_PTILE(t_iq2_xxs, sizeof(blk_iq2_xxs), 4, 0.125f)
IQ_GEMV(t_iq2_xxs, 2)
QS_TILE(t_iq2_xs, 2, 4)
IQ_PTILE(t_iq2_xs, sizeof(blk_iq2_xs), 4, 0.125f)
IQ_GEMV(t_iq2_xs, 4)
QS_TILE(t_iq2_s, 2, 4)
IQ_PTILE(t_iq2_s, sizeof(blk_iq2_s), 4, 0.125f)
IQ_GEMV(t_iq2_s, 2)
QS_TILE(t_iq3_xxs, 2, 4)
IQ_PTILE(t_iq3_xxs, sizeof(blk_iq3_xxs), 4, 0.25f)
IQ_GEMV(t_iq3_xxs, 2)
QS_TILE(t_iq3_s, 2, 4)
IQ_PTILE(t_iq3_s, sizeof(blk_iq3_s), 4, 1.0f) /* no IQ_GEMV: 0.97-0.99x vec_dot per row (PERF.md, session 9) */
QS_TILE(t_iq1_s, 2, 4)
IQ_PTILE(t_iq1_s, sizeof(blk_iq1_s), 4, 1.0f)
IQ_GEMV(t_iq1_s, 4)
QS_TILE(t_iq1_m, 2, 4)
IQ_PTILE(t_iq1_m, sizeof(blk_iq1_m), 4, 1.0f)
IQ_GEMV(t_iq1_m, 4)

/*
 * IQ2_XS one-column gemv with the sign bytes built in vector registers (CPUs with VBMI and GFNI):
 * per super-block one vpermb takes the high bytes of the 32 index words (sign bits 9..15 in bits
 * 1..7) and one vgf2p8affineqb shifts them down and sets bit 7 to the parity of the seven (the
 * eighth sign, as the q35_ksigns14 entries have it): the 32 sign bytes, i.e. the 8 sub-blocks'
 * 32-bit negation masks, stored once and read as masks. The template (t_iq2_xs_sbs) takes the
 * same masks per sub-block from a pext and two lookups in the 32 KiB q35_ksigns14. Everything
 * else is the template's, in its order: same integers, same float steps, same bits as vec_dot.
 */
#undef QS_TARGET
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,fma,f16c,bmi2")))
/* vpermb indices: byte 2t + 1 (the high byte of word t) into byte t */
static const uint8_t iqx_hidx[64] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                     33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
/* result bit i (matrix byte 7 - i) = source bit i + 1 for i < 7; bit 7 = the parity of source bits 1..7 */
#define IQX_SGN_MATRIX 0x02040810204080FEull
QSI void iqx_sbs(const int KK, const uint8_t *w, const uint8_t *x, int64_t i, float *sum) {
  const size_t BSZ = sizeof(blk_iq2_xs);
  __m256i acc[4], odd[4];
  uint32_t sm[4][8];
  _Pragma("GCC unroll 4") for (int k = 0; k < KK; k++) {
    const uint8_t *bw = w + (size_t)(i + k) * BSZ;
    odd[k] = iq_odd(scl_iq2_xs(bw));
    const __m512i hi = _mm512_permutexvar_epi8(_mm512_loadu_si512(iqx_hidx), _mm512_loadu_si512(bw + 2));
    const __m512i sg = _mm512_gf2p8affine_epi64_epi8(hi, _mm512_set1_epi64((long long)IQX_SGN_MATRIX), 0);
    _mm256_storeu_si256((__m256i *)(void *)sm[k], _mm512_castsi512_si256(sg));
    acc[k] = _mm256_setzero_si256();
  }
  _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {
    _Pragma("GCC unroll 4") for (int k = 0; k < KK; k++) {
      const uint8_t *bw = w + (size_t)(i + k) * BSZ;
      const blk_q8_k *b = (const blk_q8_k *)x + i + k;
      __m256i q, s;
      dec_iq2_xs(bw, ib, &q, &s);
      const __m256i y = loadu256(b->qs + 32 * ib);
      const __m256i ys = _mm256_mask_sub_epi8(y, (__mmask32)sm[k][ib], _mm256_setzero_si256(), y);
      acc[k] = madd_acc(acc[k], _mm256_maddubs_epi16(q, ys), iq_sc(odd[k], ib));
    }
  }
  _Pragma("GCC unroll 4") for (int k = 0; k < KK; k++) {
    const float dw = dw_d(w + (size_t)(i + k) * BSZ);
    const blk_q8_k *b = (const blk_q8_k *)x + i + k;
    *sum += dw * b->d * hsum_i32_f(acc[k]);
  }
}
/* t_iq2_xs_rowg's passes (G = 4, then 2 and 1) and prefetch with iqx_sbs */
static QS_TARGET void t_iq2_xs_gemvx(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, int nc,
                                     float *o, size_t ors, size_t ocs) {
  (void)xs, (void)nc, (void)ocs; /* one column */
  const size_t BSZ = sizeof(blk_iq2_xs);
  const int64_t nsb = n / QK_K;
  for (int r = 0; r < nr; r++) {
    const uint8_t *w = (const uint8_t *)wv + (size_t)r * ws;
    float sum = 0;
    int64_t i = 0;
    for (; i + 4 <= nsb; i += 4) {
      pf_span(w + (size_t)(i + 4) * BSZ + IQ_PF_AHEAD, 4 * BSZ);
      iqx_sbs(4, w, xv, i, &sum);
    }
    if (i + 2 <= nsb) iqx_sbs(2, w, xv, i, &sum), i += 2;
    if (i < nsb) iqx_sbs(1, w, xv, i, &sum);
    o[(size_t)r * ors] = 0.125f * sum;
  }
}

/*
 * IQ2_XXS / IQ3_XXS one-column gemv with the sign bytes built in vector registers (VBMI and GFNI):
 * their sub-block's four 7-bit sign fields lie in bits 0..27 of one 32-bit word (the scale in
 * 28..31). Per super-block one vpmultishiftqb puts each field in its own byte (bit offsets 0, 7,
 * 14 and 21 of each word of a qword; bit 7 of the byte is the next field's first bit) and one
 * vgf2p8affineqb keeps bits 0..6 and sets bit 7 to their parity (the eighth sign, as in
 * q35_ksigns14): the 8 sub-blocks' 32-bit negation masks, stored once and read as masks, where the
 * template (SGN 3 / 4) takes each from two lookups in the 32 KiB q35_ksigns14. IQ3_XXS's 8 words
 * are contiguous (32 bytes); IQ2_XXS's are the high halves of the 8 qwords of qs (64 bytes), so
 * sub-block ib's mask is the result's dword 2 ib there. Scales, grid lookups, the passes and
 * prefetch and the float steps are the template's (SC32 1), in its order: same bits as vec_dot.
 */
/* result bit i (matrix byte 7 - i) = source bit i for i < 7; bit 7 = the parity of source bits 0..6 */
#define IQX7_SGN_MATRIX 0x010204081020407Full
QSI void iqx7_sbs(const int T3, const int KK, const uint8_t *w, const uint8_t *x, int64_t i, float *sum) {
  const size_t BSZ = T3 ? sizeof(blk_iq3_xxs) : sizeof(blk_iq2_xxs);
  __m256i acc[4], odd[4];
  uint32_t sc32[4][8], sm[4][16];
  _Pragma("GCC unroll 4") for (int k = 0; k < KK; k++) {
    const uint8_t *bw = w + (size_t)(i + k) * BSZ;
    odd[k] = iq_odd(T3 ? scl_iq3_xxs(bw) : scl_iq2_xxs(bw));
    iq_sc32_store(odd[k], sc32[k]);
    if (T3) { /* byte j of a qword from bit 7 j (j < 4) / 32 + 7 (j - 4): both words' fields */
      const __m256i f = _mm256_multishift_epi64_epi8(_mm256_set1_epi64x(0x352E2720150E0700ll), loadu256(bw + 66));
      _mm256_storeu_si256((__m256i *)(void *)sm[k],
                          _mm256_gf2p8affine_epi64_epi8(f, _mm256_set1_epi64x((long long)IQX7_SGN_MATRIX), 0));
    } else { /* bytes j and 4 + j of a qword from bit 32 + 7 j: the high word's fields, twice */
      const __m512i f = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x352E2720352E2720ll), _mm512_loadu_si512(bw + 2));
      _mm512_storeu_si512(sm[k], _mm512_gf2p8affine_epi64_epi8(f, _mm512_set1_epi64((long long)IQX7_SGN_MATRIX), 0));
    }
    acc[k] = _mm256_setzero_si256();
  }
  _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {
    _Pragma("GCC unroll 4") for (int k = 0; k < KK; k++) {
      const uint8_t *bw = w + (size_t)(i + k) * BSZ;
      const blk_q8_k *b = (const blk_q8_k *)x + i + k;
      __m256i q, s;
      if (T3)
        dec_iq3_xxs(bw, ib, &q, &s);
      else
        dec_iq2_xxs(bw, ib, &q, &s);
      const __m256i sc = _mm256_set1_epi32((int)sc32[k][ib]);
      const __m256i y = loadu256(b->qs + 32 * ib);
      const __m256i ys = _mm256_mask_sub_epi8(y, (__mmask32)sm[k][T3 ? ib : 2 * ib], _mm256_setzero_si256(), y);
      acc[k] = madd_acc(acc[k], _mm256_maddubs_epi16(q, ys), sc);
    }
  }
  _Pragma("GCC unroll 4") for (int k = 0; k < KK; k++) {
    const float dw = dw_d(w + (size_t)(i + k) * BSZ);
    const blk_q8_k *b = (const blk_q8_k *)x + i + k;
    *sum += dw * b->d * hsum_i32_f(acc[k]);
  }
}
/* T##_rowg's passes (G super-blocks, then 2 and 1; G = 2 as IQ_GEMV's for both types: 4 measured
 * level for IQ2_XXS and slower for IQ3_XXS, docs/PERF.md) and prefetch with iqx7_sbs */
QSI void iqx7_gemv(const int T3, const int G, int64_t n, const void *wv, size_t ws, int nr, const void *xv, float *o,
                   size_t ors) {
  const size_t BSZ = T3 ? sizeof(blk_iq3_xxs) : sizeof(blk_iq2_xxs);
  const int64_t nsb = n / QK_K;
  for (int r = 0; r < nr; r++) {
    const uint8_t *w = (const uint8_t *)wv + (size_t)r * ws;
    float sum = 0;
    int64_t i = 0;
    for (; i + G <= nsb; i += G) {
      pf_span(w + (size_t)(i + G) * BSZ + IQ_PF_AHEAD, (size_t)G * BSZ);
      iqx7_sbs(T3, G, w, xv, i, &sum);
    }
    if (G > 2 && i + 2 <= nsb) iqx7_sbs(T3, 2, w, xv, i, &sum), i += 2;
    if (i < nsb) iqx7_sbs(T3, 1, w, xv, i, &sum);
    o[(size_t)r * ors] = (T3 ? 0.25f : 0.125f) * sum;
  }
}
static QS_TARGET void t_iq2_xxs_gemvx(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, int nc,
                                      float *o, size_t ors, size_t ocs) {
  (void)xs, (void)nc, (void)ocs; /* one column */
  iqx7_gemv(0, 2, n, wv, ws, nr, xv, o, ors);
}
static QS_TARGET void t_iq3_xxs_gemvx(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, int nc,
                                      float *o, size_t ors, size_t ocs) {
  (void)xs, (void)nc, (void)ocs; /* one column */
  iqx7_gemv(1, 2, n, wv, ws, nr, xv, o, ors);
}

void q35_kernels_iq_avx512(q35_kernels *k) {
  q35_iq_tables_init();
  IQ_SET_G(k, Q35_TYPE_IQ2_XXS, t_iq2_xxs);
  IQ_SET_G(k, Q35_TYPE_IQ2_XS, t_iq2_xs);
  IQ_SET_G(k, Q35_TYPE_IQ2_S, t_iq2_s);
  IQ_SET_G(k, Q35_TYPE_IQ3_XXS, t_iq3_xxs);
  IQ_SET(k, Q35_TYPE_IQ3_S, t_iq3_s);
  IQ_SET_G(k, Q35_TYPE_IQ1_S, t_iq1_s);
  IQ_SET_G(k, Q35_TYPE_IQ1_M, t_iq1_m);
  if (q35_cpu_has(Q35_CPU_AVX512_VBMI) && q35_cpu_has(Q35_CPU_GFNI)) {
    k->gemv[Q35_TYPE_IQ2_XS] = t_iq2_xs_gemvx;
    k->gemv[Q35_TYPE_IQ2_XXS] = t_iq2_xxs_gemvx;
    k->gemv[Q35_TYPE_IQ3_XXS] = t_iq3_xxs_gemvx;
  }
}
