/*
 * kernels_avx2.c - the AVX2 (+FMA) twins of the sampling head's scalar kernels
 * (kernels_scalar.c), built like the AVX-512 ones (kernels_avx512.c) on 8-lane vectors. Each
 * gives the scalar kernel's results bit for bit: exp256 is the scalar exp's sequence of
 * correctly rounded operations lane by lane, and weights are summed as exact integers, so the
 * order of lanes and blocks does not matter. AVX2 has neither mask registers, compress nor a
 * float -> int64 conversion: masks are all-ones lanes, compress is a permutation from a table,
 * and W = trunc(w * 2^61) is built as three exact 32-bit parts (split3). Compiled with target
 * attributes; sample_internal.h calls them only at Q35_SIMD_AVX2.
 */
#include "sample/sample_internal.h"

#if Q35_SAMPLE_X86
#include <immintrin.h>

#define T256 __attribute__((target("avx2,fma")))

/* For each 8-bit lane mask, the indices of its set lanes in order, one per byte (widened to a
 * permutation by one vpmovzxbd from memory). */
static const uint64_t compress_lut[256] = {
    0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
    0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000000020100ull,
    0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
    0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull, 0x0000000003020100ull,
    0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000000040100ull,
    0x0000000000000402ull, 0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
    0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull, 0x0000000004030100ull,
    0x0000000000040302ull, 0x0000000004030200ull, 0x0000000004030201ull, 0x0000000403020100ull,
    0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
    0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull, 0x0000000005020100ull,
    0x0000000000000503ull, 0x0000000000050300ull, 0x0000000000050301ull, 0x0000000005030100ull,
    0x0000000000050302ull, 0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
    0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull, 0x0000000005040100ull,
    0x0000000000050402ull, 0x0000000005040200ull, 0x0000000005040201ull, 0x0000000504020100ull,
    0x0000000000050403ull, 0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
    0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull, 0x0000050403020100ull,
    0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000000060100ull,
    0x0000000000000602ull, 0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
    0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull, 0x0000000006030100ull,
    0x0000000000060302ull, 0x0000000006030200ull, 0x0000000006030201ull, 0x0000000603020100ull,
    0x0000000000000604ull, 0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
    0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull, 0x0000000604020100ull,
    0x0000000000060403ull, 0x0000000006040300ull, 0x0000000006040301ull, 0x0000000604030100ull,
    0x0000000006040302ull, 0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
    0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull, 0x0000000006050100ull,
    0x0000000000060502ull, 0x0000000006050200ull, 0x0000000006050201ull, 0x0000000605020100ull,
    0x0000000000060503ull, 0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
    0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull, 0x0000060503020100ull,
    0x0000000000060504ull, 0x0000000006050400ull, 0x0000000006050401ull, 0x0000000605040100ull,
    0x0000000006050402ull, 0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
    0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull, 0x0000060504030100ull,
    0x0000000605040302ull, 0x0000060504030200ull, 0x0000060504030201ull, 0x0006050403020100ull,
    0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
    0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull, 0x0000000007020100ull,
    0x0000000000000703ull, 0x0000000000070300ull, 0x0000000000070301ull, 0x0000000007030100ull,
    0x0000000000070302ull, 0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
    0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull, 0x0000000007040100ull,
    0x0000000000070402ull, 0x0000000007040200ull, 0x0000000007040201ull, 0x0000000704020100ull,
    0x0000000000070403ull, 0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
    0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull, 0x0000070403020100ull,
    0x0000000000000705ull, 0x0000000000070500ull, 0x0000000000070501ull, 0x0000000007050100ull,
    0x0000000000070502ull, 0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
    0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull, 0x0000000705030100ull,
    0x0000000007050302ull, 0x0000000705030200ull, 0x0000000705030201ull, 0x0000070503020100ull,
    0x0000000000070504ull, 0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
    0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull, 0x0000070504020100ull,
    0x0000000007050403ull, 0x0000000705040300ull, 0x0000000705040301ull, 0x0000070504030100ull,
    0x0000000705040302ull, 0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
    0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull, 0x0000000007060100ull,
    0x0000000000070602ull, 0x0000000007060200ull, 0x0000000007060201ull, 0x0000000706020100ull,
    0x0000000000070603ull, 0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
    0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull, 0x0000070603020100ull,
    0x0000000000070604ull, 0x0000000007060400ull, 0x0000000007060401ull, 0x0000000706040100ull,
    0x0000000007060402ull, 0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
    0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull, 0x0000070604030100ull,
    0x0000000706040302ull, 0x0000070604030200ull, 0x0000070604030201ull, 0x0007060403020100ull,
    0x0000000000070605ull, 0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
    0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull, 0x0000070605020100ull,
    0x0000000007060503ull, 0x0000000706050300ull, 0x0000000706050301ull, 0x0000070605030100ull,
    0x0000000706050302ull, 0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
    0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull, 0x0000070605040100ull,
    0x0000000706050402ull, 0x0000070605040200ull, 0x0000070605040201ull, 0x0007060504020100ull,
    0x0000000706050403ull, 0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
    0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull, 0x0706050403020100ull,
};

/* All-ones in lanes 0 .. r - 1 (r >= 8: all). */
T256 static inline __m256i tail_mask(int32_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The permutation that moves the lanes set in m (a movemask) to the front, in order. */
T256 static inline __m256i compress_perm(int m) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&compress_lut[m]));
}

/* Store the lanes of x selected by m to out (8 lanes written: out needs SLACK); their count. */
T256 static inline int32_t compress_store_ps(float *out, __m256 x, int m) {
  _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(x, compress_perm(m)));
  return __builtin_popcount((unsigned)m);
}

T256 static inline __m256 exp256(__m256 x) {
  __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)); /* zeroed lanes: any finite value */
  __m256 rc = _mm256_set1_ps(EXP_ROUND);
  __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(EXP_LOG2E), rc), rc);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2HI), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2LO), r);
  __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(EXP_C7), r, _mm256_set1_ps(EXP_C6));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_C5));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_C4));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_C3));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_C2));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
  __m256i ni = _mm256_cvttps_epi32(n);
  __m256i ebits = _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(EXP_BIAS)), 23);
  return _mm256_andnot_ps(zero, _mm256_mul_ps(q, _mm256_castsi256_ps(ebits)));
}

/* W = trunc(w * 2^61) of 8 lanes, for the weights 0 <= w <= 1 these kernels see (and -0), as
 * three 32-bit parts W = A 2^40 + B 2^20 + C: A = trunc(w 2^21), B = trunc(r1 2^20) with r1 =
 * w 2^21 - A, C = trunc(r2 2^20) with r2 = r1 2^20 - B. Every step is exact in fp32 (a
 * power-of-two scale, or a float less its integer part, which is the float's own low bits), so
 * the parts are W's bits; A <= 2^21 and B, C < 2^20. The remainders are taken from w 2^41 and
 * w 2^61 by fused multiply-adds (r1 2^20 = w 2^41 - A 2^20, r1 2^40 = w 2^61 - A 2^40, r2 2^20 =
 * r1 2^40 - B 2^20: each exact result is representable), so the three scales run side by side
 * and the dependency chain is two roundings long. No 64-bit lane (AVX2 has no float -> int64
 * conversion) and no lane shuffle until a sum is folded. */
typedef struct {
  __m256i a, b, c;
} acc3;
#define ACC3_MAX 1024 /* adds of parts <= 2^21 per 32-bit lane before a fold: 2^31 < 2^32 */

T256 static inline void split3(__m256 w, __m256i *a, __m256i *b, __m256i *c) {
  const __m256 s20 = _mm256_set1_ps(0x1p20f), s40 = _mm256_set1_ps(0x1p40f);
  __m256 t1 = _mm256_mul_ps(w, _mm256_set1_ps(0x1p21f));
  __m256 u2 = _mm256_mul_ps(w, _mm256_set1_ps(0x1p41f));
  __m256 u3 = _mm256_mul_ps(w, _mm256_set1_ps(0x1p61f));
  __m256 fa = _mm256_round_ps(t1, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  __m256 t2 = _mm256_fnmadd_ps(fa, s20, u2);
  __m256 r3 = _mm256_fnmadd_ps(fa, s40, u3);
  __m256 fb = _mm256_round_ps(t2, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  __m256 t3 = _mm256_fnmadd_ps(fb, s20, r3);
  *a = _mm256_cvttps_epi32(t1);
  *b = _mm256_cvttps_epi32(t2);
  *c = _mm256_cvttps_epi32(t3);
}

T256 static inline acc3 acc3_zero(void) {
  acc3 z = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  return z;
}

/* s += the parts of the lanes set in k (all-ones lanes) */
T256 static inline void acc3_add(acc3 *s, __m256i a, __m256i b, __m256i c, __m256i k) {
  s->a = _mm256_add_epi32(s->a, _mm256_and_si256(a, k));
  s->b = _mm256_add_epi32(s->b, _mm256_and_si256(b, k));
  s->c = _mm256_add_epi32(s->c, _mm256_and_si256(c, k));
}

/* W of the lanes of w set in k, into s */
T256 static inline void acc_w(acc3 *s, __m256 w, __m256 k) {
  __m256i a, b, c;
  split3(_mm256_and_ps(w, k), &a, &b, &c);
  s->a = _mm256_add_epi32(s->a, a);
  s->b = _mm256_add_epi32(s->b, b);
  s->c = _mm256_add_epi32(s->c, c);
}

/* The exact sum of the lanes (each read as unsigned 32-bit). */
T256 static inline u128 fold3(acc3 s) {
  uint32_t x[3][8];
  _mm256_storeu_si256((__m256i *)x[0], s.a);
  _mm256_storeu_si256((__m256i *)x[1], s.b);
  _mm256_storeu_si256((__m256i *)x[2], s.c);
  uint64_t sa = 0, sb = 0, sc = 0;
  for (int i = 0; i < 8; i++) {
    sa += x[0][i];
    sb += x[1][i];
    sc += x[2][i];
  }
  return ((u128)sa << 40) + ((u128)sb << 20) + sc;
}

T256 static inline float reduce_max256(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/* Lanes holding NaN or +inf: not (x < +inf) unless x is -inf or finite. */
T256 static inline __m256 bad256(__m256 x) {
  return _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ);
}

/* p[0 .. 7] in the lanes set in k, fill in the others (which are not read). */
T256 static inline __m256 load_tail(const float *p, __m256 fill, __m256i k) {
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, k), _mm256_castsi256_ps(k));
}

T256 float sample_scan_avx2(const float *l, int32_t n, int32_t *bad) {
  __m256 ninf = _mm256_set1_ps(-INFINITY), m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  __m256 badv = _mm256_setzero_ps();
  int32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a = _mm256_loadu_ps(l + i), b = _mm256_loadu_ps(l + i + 8);
    __m256 c = _mm256_loadu_ps(l + i + 16), d = _mm256_loadu_ps(l + i + 24);
    badv = _mm256_or_ps(badv, _mm256_or_ps(_mm256_or_ps(bad256(a), bad256(b)),
                                           _mm256_or_ps(bad256(c), bad256(d))));
    m0 = _mm256_max_ps(m0, a);
    m1 = _mm256_max_ps(m1, b);
    m2 = _mm256_max_ps(m2, c);
    m3 = _mm256_max_ps(m3, d);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(l + i);
    badv = _mm256_or_ps(badv, bad256(a));
    m0 = _mm256_max_ps(m0, a);
  }
  if (i < n) {
    __m256 a = load_tail(l + i, ninf, tail_mask(n - i));
    badv = _mm256_or_ps(badv, bad256(a));
    m0 = _mm256_max_ps(m0, a);
  }
  if (_mm256_movemask_ps(badv)) return sample_scan_scalar(l, n, bad);
  *bad = -1;
  return reduce_max256(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

T256 int32_t sample_find_eq_avx2(const float *l, int32_t n, float v) {
  __m256 vv = _mm256_set1_ps(v);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), vv, _CMP_EQ_OQ));
    if (k) return i + __builtin_ctz((unsigned)k);
  }
  int32_t j = sample_find_eq_scalar(l + i, n - i, v);
  return j < 0 ? -1 : i + j;
}

T256 int32_t sample_filter_ge_avx2(const float *l, int32_t n, float t, int32_t *ids) {
  __m256 tv = _mm256_set1_ps(t);
  __m256i iv = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), step = _mm256_set1_epi32(8);
  int32_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), tv, _CMP_GE_OQ));
    if (k) {
      _mm256_storeu_si256((__m256i *)(ids + c), _mm256_permutevar8x32_epi32(iv, compress_perm(k)));
      c += __builtin_popcount((unsigned)k);
    }
    iv = _mm256_add_epi32(iv, step);
  }
  for (; i < n; i++)
    if (l[i] >= t) ids[c++] = i;
  return c;
}

/* (l - m) / T of 8 lanes: a product by inv = 1 / T when T is a power of two (pow2; the same
 * bits, see pow2_recip), else a division. */
T256 static inline __m256 scaled256(__m256 d, __m256 tv, __m256 invv, int pow2) {
  return pow2 ? _mm256_mul_ps(d, invv) : _mm256_div_ps(d, tv);
}

/* sample_exp_row_scalar's twin; pow2 as in scaled256 (a constant in each instance below). */
T256 static inline __attribute__((always_inline)) void
exp_row_avx2_body(const float *l, int32_t n, float m, float temp, float inv, int pow2, float *w,
                  u128 *bsum) {
  __m256 mv = _mm256_set1_ps(m), tv = _mm256_set1_ps(temp), invv = _mm256_set1_ps(inv);
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int32_t b = 0; b * BLOCK < n; b++) { /* BLOCK / 8 <= ACC3_MAX adds a lane */
    int32_t e = block_end(b, BLOCK, n), i = b * BLOCK;
    for (; i + 8 <= e; i += 8) {
      __m256 x = scaled256(_mm256_sub_ps(_mm256_loadu_ps(l + i), mv), tv, invv, pow2);
      _mm256_storeu_ps(w + i, exp256(x));
    }
    __m256i k = tail_mask(e - i); /* used only when i < e */
    __m256 yt = _mm256_setzero_ps();
    if (i < e) {
      __m256 x = scaled256(_mm256_sub_ps(load_tail(l + i, mv, k), mv), tv, invv, pow2);
      yt = _mm256_and_ps(exp256(x), _mm256_castsi256_ps(k));
      _mm256_maskstore_ps(w + i, k, yt);
    }
    /* the sums from the block just stored (L1), as in fused_avx2_body */
    acc3 acc = acc3_zero();
    int32_t j = b * BLOCK;
    for (; j + 8 <= e; j += 8) acc_w(&acc, _mm256_loadu_ps(w + j), all);
    if (j < e) acc_w(&acc, yt, all);
    bsum[b] = fold3(acc);
  }
}

T256 void sample_exp_row_avx2(const float *l, int32_t n, float m, float temp, float *w,
                              u128 *bsum) {
  float inv = pow2_recip(temp);
  if (inv != 0.0f) exp_row_avx2_body(l, n, m, temp, inv, 1, w, bsum);
  else exp_row_avx2_body(l, n, m, temp, 0.0f, 0, w, bsum);
}

/* Sum of W over a_j >= cut (wsum_ge and each block of block_sums). */
T256 static inline u128 wsum_ge256(const float *a, int32_t n, float cut) {
  __m256 cv = _mm256_set1_ps(cut);
  acc3 acc = acc3_zero();
  u128 sum = 0;
  int32_t j = 0, cnt = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_loadu_ps(a + j);
    acc_w(&acc, x, _mm256_cmp_ps(x, cv, _CMP_GE_OQ));
    if (++cnt == ACC3_MAX) {
      sum += fold3(acc);
      acc = acc3_zero();
      cnt = 0;
    }
  }
  if (j < n) {
    __m256 k = _mm256_castsi256_ps(tail_mask(n - j));
    __m256 x = _mm256_maskload_ps(a + j, _mm256_castps_si256(k));
    acc_w(&acc, x, _mm256_and_ps(k, _mm256_cmp_ps(x, cv, _CMP_GE_OQ)));
  }
  return sum + fold3(acc);
}

T256 u128 sample_wsum_ge_avx2(const float *a, int32_t n, float cut) {
  return wsum_ge256(a, n, cut);
}

T256 void sample_block_sums_avx2(const float *w, int32_t n, float cut, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++)
    bsum[b] = wsum_ge256(w + b * BLOCK, block_end(b, BLOCK, n) - b * BLOCK, cut);
}

T256 int32_t sample_window_avx2(const float *a, int32_t n, float lo, float hi, float *out,
                                u128 *m_above, u128 *m_in) {
  __m256 lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
  acc3 above = acc3_zero(), inside = acc3_zero();
  u128 sab = 0, sin = 0;
  int32_t c = 0, i = 0, cnt = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(a + i);
    __m256 up = _mm256_cmp_ps(x, hv, _CMP_GT_OQ);
    __m256 in = _mm256_andnot_ps(up, _mm256_cmp_ps(x, lv, _CMP_GE_OQ));
    __m256i pa, pb, pc;
    split3(x, &pa, &pb, &pc);
    acc3_add(&above, pa, pb, pc, _mm256_castps_si256(up));
    acc3_add(&inside, pa, pb, pc, _mm256_castps_si256(in));
    int k = _mm256_movemask_ps(in);
    if (k) c += compress_store_ps(out + c, x, k);
    if (++cnt == ACC3_MAX) {
      sab += fold3(above);
      sin += fold3(inside);
      above = inside = acc3_zero();
      cnt = 0;
    }
  }
  u128 tab, tin; /* the tail, as the scalar kernel does it */
  c += sample_window_scalar(a + i, n - i, lo, hi, out + c, &tab, &tin);
  *m_above = sab + fold3(above) + tab;
  *m_in = sin + fold3(inside) + tin;
  return c;
}

T256 float sample_scan_chunks_avx2(const float *l, int32_t n, float *cmax, int32_t *bad) {
  __m256 ninf = _mm256_set1_ps(-INFINITY), g = ninf, badv = _mm256_setzero_ps();
  int32_t i = 0, b = 0;
  for (; i + CHUNK <= n; i += CHUNK, b++) { /* CHUNK = 64: eight vectors, as two groups */
    __m256 mm = ninf;
    for (int h = 0; h < CHUNK; h += 32) {
      __m256 x0 = _mm256_loadu_ps(l + i + h), x1 = _mm256_loadu_ps(l + i + h + 8);
      __m256 x2 = _mm256_loadu_ps(l + i + h + 16), x3 = _mm256_loadu_ps(l + i + h + 24);
      badv = _mm256_or_ps(badv, _mm256_or_ps(_mm256_or_ps(bad256(x0), bad256(x1)),
                                             _mm256_or_ps(bad256(x2), bad256(x3))));
      mm = _mm256_max_ps(mm, _mm256_max_ps(_mm256_max_ps(x0, x1), _mm256_max_ps(x2, x3)));
    }
    cmax[b] = reduce_max256(mm);
    g = _mm256_max_ps(g, mm);
  }
  if (i < n) {
    __m256 mm = ninf;
    for (; i < n; i += 8) {
      __m256 x = load_tail(l + i, ninf, tail_mask(n - i));
      badv = _mm256_or_ps(badv, bad256(x));
      mm = _mm256_max_ps(mm, x);
    }
    cmax[b] = reduce_max256(mm);
    g = _mm256_max_ps(g, mm);
  }
  if (_mm256_movemask_ps(badv)) return sample_scan_chunks_scalar(l, n, cmax, bad);
  *bad = -1;
  return reduce_max256(g);
}

/* One vector of the fused pass: y's parts into all, those of y > hi into above, the lanes of
 * y in [lo, hi] (and in k when tail) copied out to cw; returns the count copied. hi2: every
 * w > hi has C = 0 (hi >= 2^-18: such a w is a multiple of 2^-41, so W is a multiple of 2^20),
 * so the mass above takes two parts. */
T256 static inline __attribute__((always_inline)) int32_t
fused_step(__m256 y, int tail, __m256 k, __m256 lv, __m256 hv, int hi2, acc3 *all,
           acc3 *above, float *cw) {
  __m256i pa, pb, pc;
  split3(y, &pa, &pb, &pc);
  all->a = _mm256_add_epi32(all->a, pa);
  all->b = _mm256_add_epi32(all->b, pb);
  all->c = _mm256_add_epi32(all->c, pc);
  /* branch-free: the masks are data dependent and often mixed */
  __m256i up = _mm256_castps_si256(_mm256_cmp_ps(y, hv, _CMP_GT_OQ));
  above->a = _mm256_add_epi32(above->a, _mm256_and_si256(pa, up));
  above->b = _mm256_add_epi32(above->b, _mm256_and_si256(pb, up));
  if (!hi2) above->c = _mm256_add_epi32(above->c, _mm256_and_si256(pc, up));
  __m256 in = _mm256_andnot_ps(_mm256_castsi256_ps(up), _mm256_cmp_ps(y, lv, _CMP_GE_OQ));
  if (tail) in = _mm256_and_ps(k, in);
  return compress_store_ps(cw, y, _mm256_movemask_ps(in));
}

/* sample_fused_scalar's twin; pow2 as in scaled256, hi2 as in fused_step (constants in each
 * instance below). Each block runs as two loops over an L1-resident buffer of its weights: the
 * exp into yb, then the parts' sums and the window copy from yb. One loop holding both is one
 * long dependent chain per vector over more than 16 ymm registers' worth of constants and
 * accumulators, and runs slower than the two (docs/PERF.md, issue 15). Each block's sums stay
 * in 32-bit parts (BLOCK / 8 <= ACC3_MAX adds a lane) and are folded at its end; whole vectors
 * take no mask, only a row's last partial one does (its lanes past the row are 0 in yb). */
T256 static inline __attribute__((always_inline)) int32_t
fused_avx2_body(const float *l, int32_t n, float m, float temp, float inv, int pow2, int hi2,
                float lo, float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  __m256 mv = _mm256_set1_ps(m), tv = _mm256_set1_ps(temp), invv = _mm256_set1_ps(inv);
  __m256 lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
  const __m256 ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  float yb[BLOCK] __attribute__((aligned(32)));
  u128 tot = 0;
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    const float *lb = l + b * BLOCK;
    int32_t len = block_end(b, BLOCK, n) - b * BLOCK, i = 0;
    for (; i + 8 <= len; i += 8) {
      __m256 x = scaled256(_mm256_sub_ps(_mm256_loadu_ps(lb + i), mv), tv, invv, pow2);
      _mm256_store_ps(yb + i, exp256(x));
    }
    __m256i k = tail_mask(len - i); /* used only when i < len (BLOCK % 8 == 0: yb has room) */
    if (i < len) {
      __m256 x = scaled256(_mm256_sub_ps(load_tail(lb + i, mv, k), mv), tv, invv, pow2);
      _mm256_store_ps(yb + i, _mm256_and_ps(exp256(x), _mm256_castsi256_ps(k)));
    }
    acc3 all = acc3_zero(), above = acc3_zero();
    cstart[b] = c;
    int32_t j = 0;
    for (; j + 8 <= len; j += 8)
      c += fused_step(_mm256_load_ps(yb + j), 0, ones, lv, hv, hi2, &all, &above, cw + c);
    if (j < len)
      c += fused_step(_mm256_load_ps(yb + j), 1, _mm256_castsi256_ps(k), lv, hv, hi2, &all,
                      &above, cw + c);
    bsum[b] = fold3(above);
    tot += fold3(all);
  }
  *total = tot;
  return c;
}

T256 int32_t sample_fused_avx2(const float *l, int32_t n, float m, float temp, float lo,
                               float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  float inv = pow2_recip(temp);
  if (hi >= 0x1p-18f) {
    if (inv != 0.0f)
      return fused_avx2_body(l, n, m, temp, inv, 1, 1, lo, hi, bsum, cstart, total, cw);
    return fused_avx2_body(l, n, m, temp, 0.0f, 0, 1, lo, hi, bsum, cstart, total, cw);
  }
  if (inv != 0.0f)
    return fused_avx2_body(l, n, m, temp, inv, 1, 0, lo, hi, bsum, cstart, total, cw);
  return fused_avx2_body(l, n, m, temp, 0.0f, 0, 0, lo, hi, bsum, cstart, total, cw);
}

T256 void sample_exp_array_avx2(const float *x, float *y, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp256(_mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i k = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, k, exp256(_mm256_maskload_ps(x + i, k)));
  }
}
#endif /* Q35_SAMPLE_X86 */
