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

/* For each 8-bit lane mask, the indices of its set lanes in order, one per nibble. */
static const uint32_t compress_lut[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};

/* All-ones in lanes 0 .. r - 1 (r >= 8: all). */
T256 static inline __m256i tail_mask(int32_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The permutation that moves the lanes set in m (a movemask) to the front, in order. */
T256 static inline __m256i compress_perm(int m) {
  __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)compress_lut[m]),
                                _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  return _mm256_and_si256(v, _mm256_set1_epi32(7));
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
 * the parts are W's bits; A <= 2^21 and B, C < 2^20. No 64-bit lane (AVX2 has no float -> int64
 * conversion) and no lane shuffle until a sum is folded. */
typedef struct {
  __m256i a, b, c;
} acc3;
#define ACC3_MAX 1024 /* adds of parts <= 2^21 per 32-bit lane before a fold: 2^31 < 2^32 */

T256 static inline void split3(__m256 w, __m256i *a, __m256i *b, __m256i *c) {
  const __m256 s21 = _mm256_set1_ps(0x1p21f), s20 = _mm256_set1_ps(0x1p20f);
  __m256 t1 = _mm256_mul_ps(w, s21);
  __m256 t2 = _mm256_mul_ps(_mm256_sub_ps(t1, _mm256_round_ps(t1, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)), s20);
  __m256 t3 = _mm256_mul_ps(_mm256_sub_ps(t2, _mm256_round_ps(t2, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)), s20);
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
    acc3 acc = acc3_zero();
    for (; i + 8 <= e; i += 8) {
      __m256 y = exp256(scaled256(_mm256_sub_ps(_mm256_loadu_ps(l + i), mv), tv, invv, pow2));
      _mm256_storeu_ps(w + i, y);
      acc_w(&acc, y, all);
    }
    if (i < e) {
      __m256i k = tail_mask(e - i);
      __m256 x = scaled256(_mm256_sub_ps(load_tail(l + i, mv, k), mv), tv, invv, pow2);
      __m256 y = _mm256_and_ps(exp256(x), _mm256_castsi256_ps(k));
      _mm256_maskstore_ps(w + i, k, y);
      acc_w(&acc, y, all);
    }
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

/* sample_fused_scalar's twin; pow2 as in scaled256. Each block's sums stay in 32-bit parts
 * (BLOCK / 8 <= ACC3_MAX adds a lane) and are folded at its end. */
T256 static inline __attribute__((always_inline)) int32_t
fused_avx2_body(const float *l, int32_t n, float m, float temp, float inv, int pow2, float lo,
                float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  __m256 mv = _mm256_set1_ps(m), tv = _mm256_set1_ps(temp), invv = _mm256_set1_ps(inv);
  __m256 lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
  u128 tot = 0;
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = block_end(b, BLOCK, n), i = b * BLOCK;
    acc3 all = acc3_zero(), above = acc3_zero();
    cstart[b] = c;
    for (; i < e; i += 8) {
      int full = e - i >= 8; /* a whole vector: no mask (all but a row's last) */
      __m256i k = full ? _mm256_set1_epi32(-1) : tail_mask(e - i);
      __m256 li = full ? _mm256_loadu_ps(l + i) : load_tail(l + i, mv, k);
      __m256 x = scaled256(_mm256_sub_ps(li, mv), tv, invv, pow2);
      __m256 y = full ? exp256(x) : _mm256_and_ps(exp256(x), _mm256_castsi256_ps(k));
      __m256i pa, pb, pc;
      split3(y, &pa, &pb, &pc);
      all.a = _mm256_add_epi32(all.a, pa);
      all.b = _mm256_add_epi32(all.b, pb);
      all.c = _mm256_add_epi32(all.c, pc);
      /* branch-free: the masks are data dependent and often mixed */
      __m256 up = _mm256_cmp_ps(y, hv, _CMP_GT_OQ);
      acc3_add(&above, pa, pb, pc, _mm256_castps_si256(up));
      __m256 in = _mm256_and_ps(_mm256_castsi256_ps(k),
                                _mm256_andnot_ps(up, _mm256_cmp_ps(y, lv, _CMP_GE_OQ)));
      c += compress_store_ps(cw + c, y, _mm256_movemask_ps(in));
    }
    bsum[b] = fold3(above);
    tot += fold3(all);
  }
  *total = tot;
  return c;
}

T256 int32_t sample_fused_avx2(const float *l, int32_t n, float m, float temp, float lo,
                               float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  float inv = pow2_recip(temp);
  if (inv != 0.0f) return fused_avx2_body(l, n, m, temp, inv, 1, lo, hi, bsum, cstart, total, cw);
  return fused_avx2_body(l, n, m, temp, 0.0f, 0, lo, hi, bsum, cstart, total, cw);
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
