/*
 * quantize_plain_avx2.c - the plain (unweighted) Q4_0, Q5_0, Q4_1, Q5_1, Q3_K weight quantizers
 * on 256-bit vectors, for the AVX2 level (the AVX-512 level keeps them, but for Q4_1 / Q5_1,
 * whose fit takes sixteen blocks per 512-bit register: qp_fit_aff16 below). The reference twins
 * are quant_q4_0 / quant_q5_0 (quantize_weights.c) and quant_q4_1 / quant_q5_1 / quant_q3_k
 * (quantize_lowbit.c): the same glue (quantize_fit_plain.inc, scalar; or its operations lane by
 * lane where eight or sixteen blocks are fitted at once), with the passes over the block in the
 * reference's order (element i into partial sum i % 8, partial sums folded as q35_fold8 does),
 * so every block is the reference's, byte for byte (tests/test_quantize_plain.c compares them at
 * every level). No float contraction in this file: the reference multiplies and adds separately.
 */
#if defined(__x86_64__) || defined(__i386__)
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"
#include "kernels/quantize_fit.h"

#define QP_T __attribute__((target("avx2,fma,f16c")))
#define QPF static inline QP_T

/* fp16 by F16C (qp_store_scales): the reference's conversions for every value but NaN, never
 * stored here (the fits return finite scales and offsets, or +-inf for an overflow, which both
 * round alike) */

/* q35_round_clampf on 8 lanes: max / min return their second operand for NaN, as the reference
 * maps NaN to lo. One rounding instruction for the reference's magic-number pair: the same
 * integer for |v| < 2^22, and beyond both are far outside [lo, hi] on v's side (|lo|, |hi| <= 32),
 * so the clamp gives the same end; -0 (from rounding a small negative v, where the reference
 * gives +0) is clamped to lo = 0 or kept as 0, and a zero level adds +-0 to sums that start at +0
 * or are non-zero: the same bits either way. */
QPF __m256 qp_round_clamp(__m256 v, __m256 lo, __m256 hi) {
  const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_ps(_mm256_max_ps(r, lo), hi);
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

/* blocks x[0..8) (n = 16 or 32 floats each) into columns */
QPF void qp_transpose(const float *x, int n, qp_cols *c) {
  _Pragma("GCC unroll 4") for (int g = 0; g < n / 8; g++) {
    __m256 r[8], t[8], u[8];
    for (int b = 0; b < 8; b++) r[b] = _mm256_loadu_ps(x + n * b + 8 * g);
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

/* QFP_FIT_SYM of blocks x[0..8) (n = 16 or 32 each), the scales to d[0..8) */
QPF void qp_fit_sym8(const float *x, int n, int lo, int hi, int iters, float *d_out) {
  qp_cols c;
  qp_transpose(x, n, &c);
  const __m256 zero = _mm256_setzero_ps(), lov = _mm256_set1_ps((float)lo), hiv = _mm256_set1_ps((float)hi);
  __m256 mx = zero, mn = zero;
  for (int i = 0; i < n; i++) {
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
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) { /* partial sum k: elements k, k + 8, ... in order */
      __m256 sxl = zero, sll = zero;
      _Pragma("GCC unroll 4") for (int i = k; i < n; i += 8) {
        const __m256 v = c.v[i], l = qp_round_clamp(_mm256_mul_ps(t, v), lov, hiv);
        sxl = _mm256_add_ps(sxl, _mm256_mul_ps(v, l));
        sll = _mm256_add_ps(sll, _mm256_mul_ps(l, l));
      }
      axl[k] = sxl, all[k] = sll;
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

/* q35_plain_pass_aff lane-wise (blocks of 32); clamp: at 0 and nmax (else none) */
static inline __attribute__((always_inline)) QP_T void qp_pass_aff8(const qp_cols *c, __m256 t, __m256 b, __m256 nmv,
                                                                   int clamp, __m256 *sl_out, __m256 *sll_out,
                                                                   __m256 *sxl_out) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 al[8], all[8], axl[8];
  _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) { /* partial sum k: elements k, k + 8, ... in order */
    __m256 sl = zero, sll = zero, sxl = zero;
    _Pragma("GCC unroll 4") for (int i = k; i < 32; i += 8) {
      const __m256 v = c->v[i], u = _mm256_mul_ps(t, _mm256_sub_ps(v, b));
      const __m256 l = clamp ? qp_round_clamp(u, zero, nmv) : _mm256_round_ps(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      sl = _mm256_add_ps(sl, l);
      sll = _mm256_fmadd_ps(l, l, sll); /* exact: small integers (the same bits as mul, add) */
      sxl = _mm256_add_ps(sxl, _mm256_mul_ps(v, l));
    }
    al[k] = sl, all[k] = sll, axl[k] = sxl;
  }
  *sl_out = qp_fold8v(al);
  *sll_out = qp_fold8v(all);
  *sxl_out = qp_fold8v(axl);
}

/* QFP_FIT_AFF of blocks x[0..8) (n = 32) */
static QP_T void qp_fit_aff8(const float *x, int nmax, int iters, float *a_out, float *b_out) {
  qp_cols c;
  qp_transpose(x, 32, &c);
  const __m256 zero = _mm256_setzero_ps(), inf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
  const __m256 nmv = _mm256_set1_ps((float)nmax), sw = _mm256_set1_ps(32.0f);
  __m256 mn = inf, mx = ninf, sx[8];
  _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) { /* +-inf: the sum is not finite, see the end */
    __m256 s = zero;
    _Pragma("GCC unroll 4") for (int i = k; i < 32; i += 8) {
      mn = _mm256_min_ps(c.v[i], mn); /* NaN skipped: min / max return their second operand */
      mx = _mm256_max_ps(c.v[i], mx);
      s = _mm256_add_ps(s, c.v[i]);
    }
    sx[k] = s;
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
  /* the first pass needs no clamps where every live lane's t is finite (q35_fit_aff_plain's start
   * rounds every element of a finite block into [0, nmax]: quantize_plain_vec.c's pv_fit_aff) */
  const int clamp0 = _mm256_movemask_ps(_mm256_andnot_ps(qp_isfinite(t), live)) != 0;
  for (int it = 0; it <= iters; it++) {
    __m256 sl, sll, sxl;
    if (it == 0 && !clamp0) qp_pass_aff8(&c, t, b, nmv, 0, &sl, &sll, &sxl);
    else qp_pass_aff8(&c, t, b, nmv, 1, &sl, &sll, &sxl);
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
  /* a non-finite value (or an overflowing sum): the reference's own fit (its extremes skip +-inf) */
  for (int m = ~_mm256_movemask_ps(qp_isfinite(swx)) & 0xFF; m; m &= m - 1) {
    const int k = __builtin_ctz((unsigned)m);
    qp_fit_aff(x + 32 * k, 32, nmax, iters, &a_out[k], &b_out[k]);
  }
}

/* 32 float levels (small non-negative integers) as bytes, in order */
QPF __m256i qp_bytes32(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256i ab = _mm256_packs_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
  const __m256i cd = _mm256_packs_epi32(_mm256_cvttps_epi32(c), _mm256_cvttps_epi32(d));
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* q35_plain_levels_sym / _aff, given the inverse of the stored scale (0: none) and the stored min */
QPF __m256i qp_levels_sym(const float *x, float id, int lo, int hi) {
  if (id == 0) return _mm256_set1_epi8((char)-lo);
  const __m256 iv = _mm256_set1_ps(id), lov = _mm256_set1_ps((float)lo), hiv = _mm256_set1_ps((float)hi);
  __m256 r[4];
  for (int k = 0; k < 4; k++)
    r[k] = _mm256_sub_ps(qp_round_clamp(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), iv), lov, hiv), lov);
  return qp_bytes32(r[0], r[1], r[2], r[3]);
}

/* the levels clamped first, then one conversion under the default rounding (to nearest even, as
 * the magic-number pair): rounding commutes with a clamp at integers, and max_ps(v, 0) maps NaN to
 * 0 as the reference does */
QPF __m256i qp_levels_aff(const float *x, float id, float m, int nmax) {
  if (!(id > 0)) return _mm256_setzero_si256();
  const __m256 iv = _mm256_set1_ps(id), mv = _mm256_set1_ps(m), zero = _mm256_setzero_ps(),
               hiv = _mm256_set1_ps((float)nmax);
  __m256i r[4];
  for (int k = 0; k < 4; k++) {
    const __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * k), mv), iv);
    r[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, zero), hiv));
  }
  const __m256i ab = _mm256_packs_epi32(r[0], r[1]), cd = _mm256_packs_epi32(r[2], r[3]);
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* eight scales (and offsets) as stored: fp16 bits, and the floats the levels take (the
 * reference's id = d != 0 ? 1 / d : 0 for the symmetric types, d > 0 for the affine ones) */
QPF void qp_store_scales(const float *v, uint16_t *h, float *f) {
  const __m128i hv = _mm256_cvtps_ph(_mm256_loadu_ps(v), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128((__m128i *)h, hv);
  _mm256_storeu_ps(f, _mm256_cvtph_ps(hv));
}

QPF void qp_inverse(const float *d, float *id, int pos) {
  const __m256 dv = _mm256_loadu_ps(d), zero = _mm256_setzero_ps();
  const __m256 ok = pos ? _mm256_cmp_ps(dv, zero, _CMP_GT_OQ) : _mm256_cmp_ps(dv, zero, _CMP_NEQ_OQ);
  _mm256_storeu_ps(id, _mm256_and_ps(ok, _mm256_div_ps(_mm256_set1_ps(1.0f), dv)));
}

/* the 16 nibble bytes L[j] | L[j + 16] << 4 (low 4 bits of each level) */
QPF void qp_store_nibbles(uint8_t *qs, __m256i L) {
  const __m128i m4 = _mm_set1_epi8(0xF), lo = _mm_and_si128(_mm256_castsi256_si128(L), m4),
                hi = _mm_and_si128(_mm256_extracti128_si256(L, 1), m4);
  _mm_storeu_si128((__m128i *)qs, _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
}

/* bit j = bit 4 of L[j] (the fifth bit of the 5-bit levels) */
QPF uint32_t qp_bit4(__m256i L) { return (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(L, 3)); }

/* the scales of blocks i .. i + 7 (eight at once) or of block i alone: fp16 bits dh, the inverse
 * id of the stored scale (and for the affine types the stored min mf, bits mh) */
#define QP_SYM_SCALES(LO, HI)                                                                           \
  float d8[8] = {0}, df[8], id[8];                                                                      \
  uint16_t dh[8];                                                                                       \
  const int cnt = i + 8 <= nb ? 8 : 1;                                                                  \
  if (cnt == 8) qp_fit_sym8(x + 32 * i, 32, LO, HI, Q35_PLAIN_ITERS_SYM, d8);                             \
  else d8[0] = qp_fit_sym(x + 32 * i, QK8_0, LO, HI, Q35_PLAIN_ITERS_SYM);                              \
  qp_store_scales(d8, dh, df);                                                                          \
  qp_inverse(df, id, 0)

#define QP_AFF_SCALES(NMAX)                                                                             \
  float a8[8] = {0}, b8[8] = {0}, df[8], mf[8], id[8];                                                  \
  uint16_t dh[8], mh[8];                                                                                \
  const int cnt = i + 8 <= nb ? 8 : 1;                                                                  \
  if (cnt == 8) qp_fit_aff8(x + 32 * i, NMAX, Q35_PLAIN_ITERS_AFF, a8, b8);                             \
  else qp_fit_aff(x + 32 * i, QK8_0, NMAX, Q35_PLAIN_ITERS_AFF, &a8[0], &b8[0]);                        \
  qp_store_scales(a8, dh, df);                                                                          \
  qp_store_scales(b8, mh, mf);                                                                          \
  qp_inverse(df, id, 1)

static QP_T void quant_q4_0_avx2(const float *x, void *dst, int64_t n) {
  blk_q4_0 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_SYM_SCALES(-8, 7);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = dh[k];
      qp_store_nibbles(y[i].qs, qp_levels_sym(x + 32 * i, id[k], -8, 7));
    }
  }
}

static QP_T void quant_q5_0_avx2(const float *x, void *dst, int64_t n) {
  blk_q5_0 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_SYM_SCALES(-16, 15);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = dh[k];
      const __m256i L = qp_levels_sym(x + 32 * i, id[k], -16, 15);
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
      y[i].d = dh[k];
      y[i].m = mh[k];
      qp_store_nibbles(y[i].qs, qp_levels_aff(x + 32 * i, id[k], mf[k], 15));
    }
  }
}

static QP_T void quant_q5_1_avx2(const float *x, void *dst, int64_t n) {
  blk_q5_1 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP_AFF_SCALES(31);
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = dh[k];
      y[i].m = mh[k];
      const __m256i L = qp_levels_aff(x + 32 * i, id[k], mf[k], 31);
      qp_store_nibbles(y[i].qs, L);
      const uint32_t qh = qp_bit4(L);
      memcpy(y[i].qh, &qh, 4);
    }
  }
}

/*
 * The AVX-512 level: the affine fit of sixteen blocks at once (Q4_1 / Q5_1), qp_fit_aff8's
 * operations on 512-bit registers (lane b: block b), comparisons as masks. Lane-wise the same
 * operations in the same order, so the same bits.
 */
#define QP5_T __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))
#define QP5F static inline QP5_T

QP5F __m512 qp5_join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

QP5F __mmask16 qp5_finite(__m512 v) { /* |v| <= FLT_MAX (false for NaN) */
  return _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(3.40282347e38f), _CMP_LE_OQ);
}

QP5F __mmask16 qp5_isfinite(__m512 v) { return _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_LT_OQ); }

QP5F __m512 qp5_round_clamp(__m512 v, __m512 lo, __m512 hi) { /* as qp_round_clamp */
  const __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_min_ps(_mm512_max_ps(r, lo), hi);
}

QP5F __m512 qp5_fold8v(const __m512 *s) {
  const __m512 h0 = _mm512_add_ps(s[0], s[4]), h1 = _mm512_add_ps(s[1], s[5]), h2 = _mm512_add_ps(s[2], s[6]),
               h3 = _mm512_add_ps(s[3], s[7]);
  return _mm512_add_ps(_mm512_add_ps(h0, h2), _mm512_add_ps(h1, h3));
}

/* qp_pass_aff8 on sixteen blocks */
static inline __attribute__((always_inline)) QP5_T void qp5_pass_aff16(const __m512 *v, __m512 t, __m512 b, __m512 nmv,
                                                                     int clamp, __m512 *sl_out, __m512 *sll_out,
                                                                     __m512 *sxl_out) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 al[8], all[8], axl[8];
  _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
    __m512 sl = zero, sll = zero, sxl = zero;
    _Pragma("GCC unroll 4") for (int i = k; i < 32; i += 8) {
      const __m512 u = _mm512_mul_ps(t, _mm512_sub_ps(v[i], b));
      const __m512 l = clamp ? qp5_round_clamp(u, zero, nmv) : _mm512_roundscale_ps(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      sl = _mm512_add_ps(sl, l);
      sll = _mm512_fmadd_ps(l, l, sll); /* exact, as in qp_pass_aff8 */
      sxl = _mm512_add_ps(sxl, _mm512_mul_ps(v[i], l));
    }
    al[k] = sl, all[k] = sll, axl[k] = sxl;
  }
  *sl_out = qp5_fold8v(al);
  *sll_out = qp5_fold8v(all);
  *sxl_out = qp5_fold8v(axl);
}

/* QFP_FIT_AFF of blocks x[0..16) (n = 32) */
static QP5_T void qp_fit_aff16(const float *x, int nmax, int iters, float *a_out, float *b_out) {
  qp_cols c0, c1;
  qp_transpose(x, 32, &c0);
  qp_transpose(x + 256, 32, &c1);
  __m512 v[32];
  for (int i = 0; i < 32; i++) v[i] = qp5_join(c0.v[i], c1.v[i]);
  const __m512 zero = _mm512_setzero_ps(), inf = _mm512_set1_ps(INFINITY), ninf = _mm512_set1_ps(-INFINITY);
  const __m512 nmv = _mm512_set1_ps((float)nmax), sw = _mm512_set1_ps(32.0f);
  __m512 mn = inf, mx = ninf, sx[8];
  _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) { /* as qp_fit_aff8: +-inf ends at the fallback */
    __m512 s = zero;
    _Pragma("GCC unroll 4") for (int i = k; i < 32; i += 8) {
      mn = _mm512_min_ps(v[i], mn);
      mx = _mm512_max_ps(v[i], mx);
      s = _mm512_add_ps(s, v[i]);
    }
    sx[k] = s;
  }
  mn = _mm512_add_ps(mn, zero);
  mx = _mm512_add_ps(mx, zero);
  const __m512 swx = qp5_fold8v(sx);
  const __mmask16 some = (__mmask16)~_mm512_cmp_ps_mask(mn, mx, _CMP_GT_OQ);
  mn = _mm512_maskz_mov_ps(some, mn);
  mx = _mm512_maskz_mov_ps(some, mx);
  const __m512 range = _mm512_sub_ps(mx, mn);
  __mmask16 live = _mm512_cmp_ps_mask(mx, mn, _CMP_GT_OQ) & qp5_isfinite(range);
  __m512 a = _mm512_maskz_mov_ps(live, _mm512_div_ps(range, nmv)), b = mn, t = _mm512_div_ps(nmv, range);
  live &= qp5_isfinite(swx);
  const __m512 eps_sw = _mm512_mul_ps(_mm512_set1_ps(1e-5f), sw);
  const int clamp0 = (live & ~qp5_isfinite(t)) != 0; /* as qp_fit_aff8 */
  for (int it = 0; it <= iters; it++) {
    __m512 sl, sll, sxl;
    if (it == 0 && !clamp0) qp5_pass_aff16(v, t, b, nmv, 0, &sl, &sll, &sxl);
    else qp5_pass_aff16(v, t, b, nmv, 1, &sl, &sll, &sxl);
    const __m512 det = _mm512_sub_ps(_mm512_mul_ps(sw, sll), _mm512_mul_ps(sl, sl));
    const __m512 na = _mm512_sub_ps(_mm512_mul_ps(sw, sxl), _mm512_mul_ps(sl, swx));
    const __m512 an = _mm512_div_ps(na, det), tn = _mm512_div_ps(det, na);
    const __m512 bn = _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sll, swx), _mm512_mul_ps(sl, sxl)), det);
    __mmask16 ok = live & _mm512_cmp_ps_mask(det, _mm512_mul_ps(eps_sw, sll), _CMP_GT_OQ);
    ok &= _mm512_cmp_ps_mask(an, zero, _CMP_GT_OQ) & qp5_isfinite(an) & qp5_isfinite(bn) & qp5_isfinite(tn);
    a = _mm512_mask_blend_ps(ok, a, an);
    b = _mm512_mask_blend_ps(ok, b, bn);
    t = _mm512_mask_blend_ps(ok, t, tn);
    live = ok;
  }
  _mm512_storeu_ps(a_out, a);
  _mm512_storeu_ps(b_out, b);
  for (unsigned m = (unsigned)(__mmask16)~qp5_isfinite(swx); m; m &= m - 1) { /* as qp_fit_aff8 */
    const int k = __builtin_ctz(m);
    qp_fit_aff(x + 32 * k, 32, nmax, iters, &a_out[k], &b_out[k]);
  }
}

/* Q4_1 / Q5_1 with sixteen blocks at once, then eight, then one */
#define QP5_AFF_SCALES(NMAX)                                                                            \
  float a8[16] = {0}, b8[16] = {0}, df[16], mf[16], id[16];                                             \
  uint16_t dh[16], mh[16];                                                                              \
  const int cnt = i + 16 <= nb ? 16 : i + 8 <= nb ? 8 : 1;                                              \
  if (cnt == 16) qp_fit_aff16(x + 32 * i, NMAX, Q35_PLAIN_ITERS_AFF, a8, b8);                           \
  else if (cnt == 8) qp_fit_aff8(x + 32 * i, NMAX, Q35_PLAIN_ITERS_AFF, a8, b8);                        \
  else qp_fit_aff(x + 32 * i, QK8_0, NMAX, Q35_PLAIN_ITERS_AFF, &a8[0], &b8[0]);                        \
  for (int h = 0; h < 16; h += 8) {                                                                     \
    qp_store_scales(a8 + h, dh + h, df + h);                                                            \
    qp_store_scales(b8 + h, mh + h, mf + h);                                                            \
    qp_inverse(df + h, id + h, 1);                                                                      \
  }

static QP5_T void quant_q4_1_avx512(const float *x, void *dst, int64_t n) {
  blk_q4_1 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP5_AFF_SCALES(15)
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = dh[k];
      y[i].m = mh[k];
      qp_store_nibbles(y[i].qs, qp_levels_aff(x + 32 * i, id[k], mf[k], 15));
    }
  }
}

static QP5_T void quant_q5_1_avx512(const float *x, void *dst, int64_t n) {
  blk_q5_1 *y = dst;
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb;) {
    QP5_AFF_SCALES(31)
    for (int k = 0; k < cnt; k++, i++) {
      y[i].d = dh[k];
      y[i].m = mh[k];
      const __m256i L = qp_levels_aff(x + 32 * i, id[k], mf[k], 31);
      qp_store_nibbles(y[i].qs, L);
      const uint32_t qh = qp_bit4(L);
      memcpy(y[i].qh, &qh, 4);
    }
  }
}

void q35_kernels_quantize_plain_avx512(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q4_1] = quant_q4_1_avx512;
  k->quantize[Q35_TYPE_Q5_1] = quant_q5_1_avx512;
}

/* Q3_K (quant_q3_k_w without an importance vector): the sub-block scales eight at a time, the
 * +-1 scale search and the levels on 16-element vectors, the packing on 32-byte vectors. */

/* the search's error of sub-block xs at scale ds (inverse ids): the reference's four partial sums
 * (element l into sum l % 4, in order of l; its weights are 1) folded as (0 + 1) + (2 + 3) */
QPF float qp_q3_err(const float *xs, float ds, float ids) {
  const __m256 dv = _mm256_set1_ps(ds), iv = _mm256_set1_ps(ids), lo = _mm256_set1_ps(-4.0f), hi = _mm256_set1_ps(3.0f);
  __m256 E[2];
  for (int h = 0; h < 2; h++) {
    const __m256 v = _mm256_loadu_ps(xs + 8 * h);
    const __m256 e = _mm256_sub_ps(v, _mm256_mul_ps(dv, qp_round_clamp(_mm256_mul_ps(v, iv), lo, hi)));
    E[h] = _mm256_mul_ps(e, e);
  }
  __m128 acc = _mm_add_ps(_mm256_castps256_ps128(E[0]), _mm256_extractf128_ps(E[0], 1));
  acc = _mm_add_ps(acc, _mm256_castps256_ps128(E[1]));
  acc = _mm_add_ps(acc, _mm256_extractf128_ps(E[1], 1));
  const __m128 t = _mm_add_ps(acc, _mm_shuffle_ps(acc, acc, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehl_ps(t, t)));
}

static QP_T void quant_q3_k_avx2(const float *x, void *dst, int64_t n) {
  blk_q3_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float s[16];
    qp_fit_sym8(x, 16, -4, 3, Q35_PLAIN_ITERS_SYM, s);
    qp_fit_sym8(x + 128, 16, -4, 3, Q35_PLAIN_ITERS_SYM, s + 8);
    const float smax = q35_signed_absmax(s, 16);
    y[i].d = q35_fp32_to_fp16(smax / -32.f);
    const float d = q35_fp16_to_fp32(y[i].d);
    memset(y[i].scales, 0, sizeof y[i].scales);
    _Alignas(32) uint8_t L[QK_K];
    for (int j = 0; j < 16; j++) {
      const float *xs = x + 16 * j;
      const int sc0 = d != 0 ? q35_clampi(q35_nearest_int(s[j] / d), -32, 31) : 0;
      int sc = sc0;
      float best_err = INFINITY;
      for (int c = sc0 - 1; c <= sc0 + 1 && d != 0; c++) {
        if (c < -32 || c > 31) continue;
        const float ds = d * (float)c, ids = ds != 0 ? 1.0f / ds : 0;
        const float err = qp_q3_err(xs, ds, ids);
        if (err < best_err) {
          best_err = err;
          sc = c;
        }
      }
      const int u = sc + 32;
      y[i].scales[j % 8] |= (uint8_t)((u & 0xF) << (j < 8 ? 0 : 4));
      y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
      const float ds = d * (float)sc, ids = ds != 0 ? 1.0f / ds : 0;
      if (ids == 0) {
        memset(L + 16 * j, 4, 16);
        continue;
      }
      const __m256 iv = _mm256_set1_ps(ids), lo = _mm256_set1_ps(-4.0f), hi = _mm256_set1_ps(3.0f),
                   four = _mm256_set1_ps(4.0f);
      const __m256 a = _mm256_add_ps(qp_round_clamp(_mm256_mul_ps(_mm256_loadu_ps(xs), iv), lo, hi), four);
      const __m256 b = _mm256_add_ps(qp_round_clamp(_mm256_mul_ps(_mm256_loadu_ps(xs + 8), iv), lo, hi), four);
      _mm_storeu_si128((__m128i *)(L + 16 * j), _mm256_castsi256_si128(qp_bytes32(a, b, a, b)));
    }
    /* element g = 128 h + 32 sh + e: 2 bits at qs[32 h + e] << 2 sh, the third at hmask[e] bit g / 32 */
    const __m256i one = _mm256_set1_epi8(1), three = _mm256_set1_epi8(3);
    __m256i hm = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) {
      const __m256i v = _mm256_load_si256((const __m256i *)(L + 32 * k));
      hm = _mm256_or_si256(hm, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 2), one), k));
    }
    _mm256_storeu_si256((__m256i *)y[i].hmask, hm);
    for (int h = 0; h < 2; h++) {
      __m256i q = _mm256_setzero_si256();
      for (int sh = 0; sh < 4; sh++) {
        const __m256i v = _mm256_load_si256((const __m256i *)(L + 128 * h + 32 * sh));
        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(v, three), 2 * sh));
      }
      _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * h), q);
    }
  }
}

void q35_kernels_quantize_plain_avx2(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q3_K] = quant_q3_k_avx2;
  k->quantize[Q35_TYPE_Q4_0] = quant_q4_0_avx2;
  k->quantize[Q35_TYPE_Q5_0] = quant_q5_0_avx2;
  k->quantize[Q35_TYPE_Q4_1] = quant_q4_1_avx2;
  k->quantize[Q35_TYPE_Q5_1] = quant_q5_1_avx2;
}
#endif
