/*
 * quantize_plain_avx2.c - the plain (unweighted) Q4_0, Q5_0, Q4_1, Q5_1 weight quantizers on
 * 256-bit vectors, for the AVX2 level (and the AVX-512 level, which keeps them: a block is 32
 * floats, four 256-bit registers). The reference twins are quant_q4_0 / quant_q5_0
 * (quantize_weights.c) and quant_q4_1 / quant_q5_1 (quantize_lowbit.c): the same glue
 * (quantize_fit_plain.inc, scalar), with the passes over the block here in the
 * reference's order (element i in lane i % 8, lanes folded as q35_fold8 does), so every block
 * is the reference's, byte for byte (tests/test_quant_lowbit.c compares them). No float
 * contraction in this file: the reference multiplies and adds separately.
 */
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"
#include "kernels/quantize_fit.h"

#define QP_T __attribute__((target("avx2,f16c")))
#define QPF static inline QP_T

/* fp16 by F16C: the reference's conversions for every value but NaN (never stored here: the fits
 * return finite scales and offsets, or +-inf for an overflow, which both round alike) */
QPF uint16_t qp_to_fp16(float v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
QPF float qp_from_fp16(uint16_t h) { return _cvtsh_ss(h); }

/* q35_round_clampf on 8 lanes: max / min return their second operand for NaN, as the reference
 * maps NaN to lo; the magic-number rounding never gives -0 */
QPF __m256 qp_round_clamp(__m256 v, __m256 lo, __m256 hi) {
  const __m256 m = _mm256_set1_ps(12582912.0f);
  return _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_add_ps(v, m), m), lo), hi);
}

/* q35_fold8: lane k + lane k+4, then (0 + 2) + (1 + 3) */
QPF float qp_fold8(__m256 s) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

QPF float qp_hmax8(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

QPF float qp_hmin8(__m256 v) {
  __m128 h = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_min_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_min_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* lanes of |v| <= FLT_MAX (false for NaN) */
QPF __m256 qp_finite(__m256 v) {
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  return _mm256_cmp_ps(a, _mm256_set1_ps(3.40282347e38f), _CMP_LE_OQ);
}

/* q35_plain_ext_sym (max / min of values without NaN: the lane order does not change the value,
 * and no -0 arises) */
QPF void qp_ext_sym(const float *x, int n, float *mx_out, float *mn_out) {
  __m256 mx = _mm256_setzero_ps(), mn = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i), f = _mm256_and_ps(v, qp_finite(v));
    mx = _mm256_max_ps(f, mx);
    mn = _mm256_min_ps(f, mn);
  }
  *mx_out = qp_hmax8(mx) + 0.0f;
  *mn_out = qp_hmin8(mn) + 0.0f;
}

QPF void qp_pass_sym(const float *x, int n, float t, float lo, float hi, float *sxl, float *sll) {
  const __m256 tv = _mm256_set1_ps(t), lov = _mm256_set1_ps(lo), hiv = _mm256_set1_ps(hi);
  __m256 axl = _mm256_setzero_ps(), all = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i), l = qp_round_clamp(_mm256_mul_ps(tv, v), lov, hiv);
    axl = _mm256_add_ps(axl, _mm256_mul_ps(v, l));
    all = _mm256_add_ps(all, _mm256_mul_ps(l, l));
  }
  *sxl = qp_fold8(axl);
  *sll = qp_fold8(all);
}

/* q35_plain_ext_aff (the min / max over finite lanes: -0 and +0 both end as +0) */
QPF void qp_ext_aff(const float *x, int n, float *mn_out, float *mx_out, float *sum_out) {
  const __m256 inf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
  __m256 mn = inf, mx = ninf, sx = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i), f = qp_finite(v);
    mn = _mm256_min_ps(_mm256_blendv_ps(inf, v, f), mn);
    mx = _mm256_max_ps(_mm256_blendv_ps(ninf, v, f), mx);
    sx = _mm256_add_ps(sx, v);
  }
  *mn_out = qp_hmin8(mn) + 0.0f;
  *mx_out = qp_hmax8(mx) + 0.0f;
  *sum_out = qp_fold8(sx);
}

QPF void qp_pass_aff(const float *x, int n, float t, float b, float nmax, float *sl, float *sll, float *sxl) {
  const __m256 tv = _mm256_set1_ps(t), bv = _mm256_set1_ps(b), zero = _mm256_setzero_ps(), hiv = _mm256_set1_ps(nmax);
  __m256 al = zero, all = zero, axl = zero;
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i), l = qp_round_clamp(_mm256_mul_ps(tv, _mm256_sub_ps(v, bv)), zero, hiv);
    al = _mm256_add_ps(al, l);
    all = _mm256_add_ps(all, _mm256_mul_ps(l, l));
    axl = _mm256_add_ps(axl, _mm256_mul_ps(v, l));
  }
  *sl = qp_fold8(al);
  *sll = qp_fold8(all);
  *sxl = qp_fold8(axl);
}

#define QFP_ATTR QP_T
#define QFP_EXT_SYM qp_ext_sym
#define QFP_PASS_SYM qp_pass_sym
#define QFP_EXT_AFF qp_ext_aff
#define QFP_PASS_AFF qp_pass_aff
#define QFP_FIT_SYM qp_fit_sym
#define QFP_FIT_AFF qp_fit_aff
#include "kernels/quantize_fit_plain.inc"

/*
 * Eight blocks at once: the same fits with block b in lane b (each lane runs the glue above in
 * vector form, a finished lane masked instead of leaving the loop), so the chain of dependent
 * steps of one block (pass, fold, division, next pass) is paid once per eight. Lane-wise the
 * operations, their operands and their order are the glue's (its sums: element 8c + k into
 * partial sum k in order of c, partial sums folded as q35_fold8), so every lane's result is the
 * scalar glue's, bit for bit.
 */
typedef struct {
  __m256 v[32]; /* v[i] lane b: element i of block b */
} qp_cols;

/* blocks x[0..8) (32 floats each) into columns */
QPF void qp_transpose(const float *x, qp_cols *c) {
  for (int g = 0; g < 4; g++) {
    __m256 r[8], t[8], u[8];
    for (int b = 0; b < 8; b++) r[b] = _mm256_loadu_ps(x + 32 * b + 8 * g);
    for (int b = 0; b < 8; b += 2) {
      t[b] = _mm256_unpacklo_ps(r[b], r[b + 1]);
      t[b + 1] = _mm256_unpackhi_ps(r[b], r[b + 1]);
    }
    for (int h = 0; h < 8; h += 4) {
      u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
      u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
      u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
      u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
      c->v[8 * g + j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
      c->v[8 * g + j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
    }
  }
}

/* q35_fold8 lane-wise */
QPF __m256 qp_fold8v(const __m256 *s) {
  const __m256 h0 = _mm256_add_ps(s[0], s[4]), h1 = _mm256_add_ps(s[1], s[5]), h2 = _mm256_add_ps(s[2], s[6]),
               h3 = _mm256_add_ps(s[3], s[7]);
  return _mm256_add_ps(_mm256_add_ps(h0, h2), _mm256_add_ps(h1, h3));
}

QPF __m256 qp_isfinite(__m256 v) { /* |v| < inf (false for NaN) */
  return _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
}

/* QFP_FIT_SYM of blocks x[0..8) (n = 32), the scales to d[0..8) */
static QP_T void qp_fit_sym8(const float *x, int lo, int hi, int iters, float *d_out) {
  qp_cols c;
  qp_transpose(x, &c);
  const __m256 zero = _mm256_setzero_ps(), lov = _mm256_set1_ps((float)lo), hiv = _mm256_set1_ps((float)hi);
  __m256 mx = zero, mn = zero;
  for (int i = 0; i < 32; i++) {
    const __m256 f = _mm256_and_ps(c.v[i], qp_finite(c.v[i]));
    mx = _mm256_max_ps(f, mx);
    mn = _mm256_min_ps(f, mn);
  }
  mx = _mm256_add_ps(mx, zero);
  mn = _mm256_add_ps(mn, zero);
  const __m256 neg_mn = _mm256_xor_ps(mn, _mm256_set1_ps(-0.0f));
  const __m256 max = _mm256_blendv_ps(mx, mn, _mm256_cmp_ps(neg_mn, mx, _CMP_GE_OQ));
  const __m256 is0 = _mm256_cmp_ps(max, zero, _CMP_EQ_OQ);
  __m256 d = _mm256_div_ps(max, lov), t = _mm256_div_ps(lov, max), live = _mm256_andnot_ps(is0, _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
  for (int it = 0; it <= iters; it++) {
    __m256 axl[8], all[8];
    for (int k = 0; k < 8; k++) axl[k] = all[k] = zero;
    for (int i = 0; i < 32; i++) {
      const __m256 v = c.v[i], l = qp_round_clamp(_mm256_mul_ps(t, v), lov, hiv);
      axl[i % 8] = _mm256_add_ps(axl[i % 8], _mm256_mul_ps(v, l));
      all[i % 8] = _mm256_add_ps(all[i % 8], _mm256_mul_ps(l, l));
    }
    const __m256 sxl = qp_fold8v(axl), sll = qp_fold8v(all);
    const __m256 dn = _mm256_div_ps(sxl, sll), tn = _mm256_div_ps(sll, sxl);
    __m256 ok = _mm256_and_ps(live, _mm256_cmp_ps(sll, zero, _CMP_GT_OQ));
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(dn, zero, _CMP_NEQ_OQ));
    ok = _mm256_and_ps(ok, _mm256_and_ps(qp_isfinite(dn), qp_isfinite(tn)));
    d = _mm256_blendv_ps(d, dn, ok);
    t = _mm256_blendv_ps(t, tn, ok);
    live = ok;
  }
  _mm256_storeu_ps(d_out, _mm256_andnot_ps(is0, d)); /* +0 for a zero block */
}

/* QFP_FIT_AFF of blocks x[0..8) (n = 32) */
static QP_T void qp_fit_aff8(const float *x, int nmax, int iters, float *a_out, float *b_out) {
  qp_cols c;
  qp_transpose(x, &c);
  const __m256 zero = _mm256_setzero_ps(), inf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
  const __m256 nmv = _mm256_set1_ps((float)nmax), sw = _mm256_set1_ps(32.0f);
  __m256 mn = inf, mx = ninf, sx[8];
  for (int k = 0; k < 8; k++) sx[k] = zero;
  for (int i = 0; i < 32; i++) {
    const __m256 v = c.v[i], f = qp_finite(v);
    mn = _mm256_min_ps(_mm256_blendv_ps(inf, v, f), mn);
    mx = _mm256_max_ps(_mm256_blendv_ps(ninf, v, f), mx);
    sx[i % 8] = _mm256_add_ps(sx[i % 8], v);
  }
  mn = _mm256_add_ps(mn, zero);
  mx = _mm256_add_ps(mx, zero);
  const __m256 swx = qp_fold8v(sx), none = _mm256_cmp_ps(mn, mx, _CMP_GT_OQ);
  mn = _mm256_andnot_ps(none, mn);
  mx = _mm256_andnot_ps(none, mx);
  const __m256 range = _mm256_sub_ps(mx, mn);
  __m256 live = _mm256_and_ps(_mm256_cmp_ps(mx, mn, _CMP_GT_OQ), qp_isfinite(range));
  __m256 a = _mm256_and_ps(live, _mm256_div_ps(range, nmv)), b = mn, t = _mm256_div_ps(nmv, range);
  live = _mm256_and_ps(live, qp_isfinite(swx));
  const __m256 eps_sw = _mm256_mul_ps(_mm256_set1_ps(1e-5f), sw);
  for (int it = 0; it <= iters; it++) {
    __m256 al[8], all[8], axl[8];
    for (int k = 0; k < 8; k++) al[k] = all[k] = axl[k] = zero;
    for (int i = 0; i < 32; i++) {
      const __m256 v = c.v[i], l = qp_round_clamp(_mm256_mul_ps(t, _mm256_sub_ps(v, b)), zero, nmv);
      al[i % 8] = _mm256_add_ps(al[i % 8], l);
      all[i % 8] = _mm256_add_ps(all[i % 8], _mm256_mul_ps(l, l));
      axl[i % 8] = _mm256_add_ps(axl[i % 8], _mm256_mul_ps(v, l));
    }
    const __m256 sl = qp_fold8v(al), sll = qp_fold8v(all), sxl = qp_fold8v(axl);
    const __m256 det = _mm256_sub_ps(_mm256_mul_ps(sw, sll), _mm256_mul_ps(sl, sl));
    const __m256 na = _mm256_sub_ps(_mm256_mul_ps(sw, sxl), _mm256_mul_ps(sl, swx));
    const __m256 an = _mm256_div_ps(na, det), tn = _mm256_div_ps(det, na);
    const __m256 bn = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sll, swx), _mm256_mul_ps(sl, sxl)), det);
    __m256 ok = _mm256_and_ps(live, _mm256_cmp_ps(det, _mm256_mul_ps(eps_sw, sll), _CMP_GT_OQ));
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(an, zero, _CMP_GT_OQ));
    ok = _mm256_and_ps(ok, _mm256_and_ps(qp_isfinite(an), _mm256_and_ps(qp_isfinite(bn), qp_isfinite(tn))));
    a = _mm256_blendv_ps(a, an, ok);
    b = _mm256_blendv_ps(b, bn, ok);
    t = _mm256_blendv_ps(t, tn, ok);
    live = ok;
  }
  _mm256_storeu_ps(a_out, a);
  _mm256_storeu_ps(b_out, b);
}

/* 32 float levels (small non-negative integers) as bytes, in order */
QPF __m256i qp_bytes32(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256i ab = _mm256_packs_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
  const __m256i cd = _mm256_packs_epi32(_mm256_cvttps_epi32(c), _mm256_cvttps_epi32(d));
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* q35_plain_levels_sym / _aff */
QPF __m256i qp_levels_sym(const float *x, float d, int lo, int hi) {
  const float id = d != 0 ? 1.0f / d : 0;
  if (id == 0) return _mm256_set1_epi8((char)-lo);
  const __m256 iv = _mm256_set1_ps(id), lov = _mm256_set1_ps((float)lo), hiv = _mm256_set1_ps((float)hi);
  __m256 r[4];
  for (int k = 0; k < 4; k++)
    r[k] = _mm256_sub_ps(qp_round_clamp(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), iv), lov, hiv), lov);
  return qp_bytes32(r[0], r[1], r[2], r[3]);
}

QPF __m256i qp_levels_aff(const float *x, float d, float m, int nmax) {
  const float id = d > 0 ? 1.0f / d : 0;
  if (!(id > 0)) return _mm256_setzero_si256();
  const __m256 iv = _mm256_set1_ps(id), mv = _mm256_set1_ps(m), zero = _mm256_setzero_ps(),
               hiv = _mm256_set1_ps((float)nmax);
  __m256 r[4];
  for (int k = 0; k < 4; k++)
    r[k] = qp_round_clamp(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * k), mv), iv), zero, hiv);
  return qp_bytes32(r[0], r[1], r[2], r[3]);
}

/* the 16 nibble bytes L[j] | L[j + 16] << 4 (low 4 bits of each level) */
QPF void qp_store_nibbles(uint8_t *qs, __m256i L) {
  const __m128i m4 = _mm_set1_epi8(0xF), lo = _mm_and_si128(_mm256_castsi256_si128(L), m4),
                hi = _mm_and_si128(_mm256_extracti128_si256(L, 1), m4);
  _mm_storeu_si128((__m128i *)qs, _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
}

/* bit j = bit 4 of L[j] (the fifth bit of the 5-bit levels) */
QPF uint32_t qp_bit4(__m256i L) { return (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(L, 3)); }

/* the scales of blocks i .. i + 7 (eight at once) or of block i alone, as fp16 */
#define QP_SYM_SCALES(LO, HI)                                                                           \
  float d8[8];                                                                                          \
  const int m8 = i + 8 <= nb;                                                                           \
  if (m8) qp_fit_sym8(x + 32 * i, LO, HI, Q35_PLAIN_ITERS_SYM, d8);                                     \
  else d8[0] = qp_fit_sym(x + 32 * i, QK8_0, LO, HI, Q35_PLAIN_ITERS_SYM);                              \
  const int cnt = m8 ? 8 : 1

#define QP_AFF_SCALES(NMAX)                                                                             \
  float a8[8], b8[8];                                                                                   \
  const int m8 = i + 8 <= nb;                                                                           \
  if (m8) qp_fit_aff8(x + 32 * i, NMAX, Q35_PLAIN_ITERS_AFF, a8, b8);                                   \
  else qp_fit_aff(x + 32 * i, QK8_0, NMAX, Q35_PLAIN_ITERS_AFF, &a8[0], &b8[0]);                        \
  const int cnt = m8 ? 8 : 1

static QP_T void quant_q4_0_avx2(const float *x, void *dst, int64_t n) {
  blk_q4_0 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_SYM_SCALES(-8, 7);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = qp_to_fp16(d8[k]);
      qp_store_nibbles(y[i].qs, qp_levels_sym(x + 32 * i, qp_from_fp16(y[i].d), -8, 7));
    }
  }
}

static QP_T void quant_q5_0_avx2(const float *x, void *dst, int64_t n) {
  blk_q5_0 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_SYM_SCALES(-16, 15);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = qp_to_fp16(d8[k]);
      const __m256i L = qp_levels_sym(x + 32 * i, qp_from_fp16(y[i].d), -16, 15);
      qp_store_nibbles(y[i].qs, L);
      const uint32_t qh = qp_bit4(L);
      memcpy(y[i].qh, &qh, 4);
    }
  }
}

static QP_T void quant_q4_1_avx2(const float *x, void *dst, int64_t n) {
  blk_q4_1 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_AFF_SCALES(15);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = qp_to_fp16(a8[k]);
      y[i].m = qp_to_fp16(b8[k]);
      qp_store_nibbles(y[i].qs, qp_levels_aff(x + 32 * i, qp_from_fp16(y[i].d), qp_from_fp16(y[i].m), 15));
    }
  }
}

static QP_T void quant_q5_1_avx2(const float *x, void *dst, int64_t n) {
  blk_q5_1 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_AFF_SCALES(31);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = qp_to_fp16(a8[k]);
      y[i].m = qp_to_fp16(b8[k]);
      const __m256i L = qp_levels_aff(x + 32 * i, qp_from_fp16(y[i].d), qp_from_fp16(y[i].m), 31);
      qp_store_nibbles(y[i].qs, L);
      const uint32_t qh = qp_bit4(L);
      memcpy(y[i].qh, &qh, 4);
    }
  }
}

void q35_kernels_quantize_plain_avx2(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q4_0] = quant_q4_0_avx2;
  k->quantize[Q35_TYPE_Q5_0] = quant_q5_0_avx2;
  k->quantize[Q35_TYPE_Q4_1] = quant_q4_1_avx2;
  k->quantize[Q35_TYPE_Q5_1] = quant_q5_1_avx2;
}
#endif
