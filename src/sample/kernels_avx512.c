/*
 * kernels_avx512.c - the AVX-512 twins of the sampling head's scalar kernels
 * (kernels_scalar.c). Each gives the scalar kernel's results bit for bit: exp512 is the scalar
 * exp's sequence of correctly rounded operations lane by lane, and weights are summed as exact
 * integers, so the order of lanes and blocks does not matter. Compiled for the AVX-512 level
 * with target attributes; sample_internal.h calls them only at Q35_SIMD_AVX512.
 */
#include "sample/sample_internal.h"

#if Q35_SAMPLE_X86
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))

/* Lanes 0 .. r - 1 of a 16-lane vector (1 <= r; r >= 16: all). */
static inline __mmask16 tail_mask(int32_t r) {
  return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
}

T512 static inline __m512 exp512(__m512 x) {
  __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(EXP_MIN)); /* masked lanes: any finite value */
  __m512 rc = _mm512_set1_ps(EXP_ROUND);
  __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(EXP_LOG2E), rc), rc);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2LO), r);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(EXP_C7), r, _mm512_set1_ps(EXP_C6));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C5));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C4));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C3));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C2));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  __m512i ni = _mm512_cvttps_epi32(n);
  __m512i ebits = _mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(EXP_BIAS)), 23);
  __m512 scale = _mm512_castsi512_ps(ebits);
  return _mm512_maskz_mul_ps((__mmask16)~zero, q, scale);
}

/* Two vectors of 64-bit sums added into wide accumulators as their high and low 32-bit halves
 * (each add < 2^32, so 2^32 adds cannot overflow). */
T512 static inline void acc_halves(__m512i a, __m512i b, __m512i *hi, __m512i *lo) {
  __m512i m32 = _mm512_set1_epi64(0xffffffffll);
  *hi = _mm512_add_epi64(*hi, _mm512_add_epi64(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(b, 32)));
  *lo = _mm512_add_epi64(*lo, _mm512_add_epi64(_mm512_and_si512(a, m32), _mm512_and_si512(b, m32)));
}

/* W = trunc(w * 2^61) of 16 lanes (lanes 0-7 and 8-15 in two vectors of 64-bit lanes). */
T512 static inline void fix512(__m512 w, __m512i *a, __m512i *b) {
  __m512 ws = _mm512_mul_ps(w, _mm512_set1_ps(FIX_SCALE));
  *a = _mm512_cvttps_epi64(_mm512_castps512_ps256(ws));
  *b = _mm512_cvttps_epi64(_mm512_extractf32x8_ps(ws, 1));
}

/* W of 16 lanes, accumulated into hi and lo (acc_halves). */
T512 static inline void acc_fix512(__m512 w, __m512i *hi, __m512i *lo) {
  __m512i a, b;
  fix512(w, &a, &b);
  acc_halves(a, b, hi, lo);
}

T512 static inline u128 fold512(__m512i hi, __m512i lo) {
  uint64_t h[8], l[8];
  _mm512_storeu_si512(h, hi);
  _mm512_storeu_si512(l, lo);
  u128 s = 0;
  for (int i = 0; i < 8; i++) s += ((u128)h[i] << 32) + l[i];
  return s;
}

T512 float sample_scan_512(const float *l, int32_t n, int32_t *bad) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  __m512 pinf = _mm512_set1_ps(INFINITY);
  __mmask16 badm = 0;
  int32_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 a = _mm512_loadu_ps(l + i), b = _mm512_loadu_ps(l + i + 16);
    __m512 c = _mm512_loadu_ps(l + i + 32), d = _mm512_loadu_ps(l + i + 48);
    /* NaN or +inf: not (x < +inf) unless x is -inf or finite */
    badm |= _mm512_cmp_ps_mask(a, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(b, pinf, _CMP_NLT_UQ) |
            _mm512_cmp_ps_mask(c, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(d, pinf, _CMP_NLT_UQ);
    m0 = _mm512_max_ps(m0, a);
    m1 = _mm512_max_ps(m1, b);
    m2 = _mm512_max_ps(m2, c);
    m3 = _mm512_max_ps(m3, d);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_loadu_ps(l + i);
    badm |= _mm512_cmp_ps_mask(a, pinf, _CMP_NLT_UQ);
    m0 = _mm512_max_ps(m0, a);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 a = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, l + i);
    badm |= _mm512_cmp_ps_mask(a, pinf, _CMP_NLT_UQ);
    m0 = _mm512_max_ps(m0, a);
  }
  if (badm) return sample_scan_scalar(l, n, bad);
  *bad = -1;
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

T512 int32_t sample_find_eq_512(const float *l, int32_t n, float v) {
  __m512 vv = _mm512_set1_ps(v);
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), vv, _CMP_EQ_OQ);
    if (k) return i + __builtin_ctz(k);
  }
  int32_t j = sample_find_eq_scalar(l + i, n - i, v);
  return j < 0 ? -1 : i + j;
}

T512 int32_t sample_filter_ge_512(const float *l, int32_t n, float t, int32_t *ids) {
  __m512 tv = _mm512_set1_ps(t);
  __m512i iv = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i step = _mm512_set1_epi32(16);
  int32_t c = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), tv, _CMP_GE_OQ);
    if (k) { /* compress into a register, then a plain store (fast on every x86) */
      _mm512_storeu_si512(ids + c, _mm512_maskz_compress_epi32(k, iv));
      c += __builtin_popcount(k);
    }
    iv = _mm512_add_epi32(iv, step);
  }
  for (; i < n; i++)
    if (l[i] >= t) ids[c++] = i;
  return c;
}

/* (l - m) / T of 16 lanes: a product by inv = 1 / T when T is a power of two (pow2; the same
 * bits, see pow2_recip), else a division. */
T512 static inline __m512 scaled512(__m512 d, __m512 tv, __m512 invv, int pow2) {
  return pow2 ? _mm512_mul_ps(d, invv) : _mm512_div_ps(d, tv);
}

/* sample_exp_row_scalar's twin; pow2 as in scaled512 (a constant in each instance below). */
T512 static inline __attribute__((always_inline)) void
exp_row_512_body(const float *l, int32_t n, float m, float temp, float inv, int pow2, float *w,
                 u128 *bsum) {
  __m512 mv = _mm512_set1_ps(m), tv = _mm512_set1_ps(temp), invv = _mm512_set1_ps(inv);
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = block_end(b, BLOCK, n), i = b * BLOCK;
    __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
    for (; i + 16 <= e; i += 16) {
      __m512 x = scaled512(_mm512_sub_ps(_mm512_loadu_ps(l + i), mv), tv, invv, pow2);
      __m512 y = exp512(x);
      _mm512_storeu_ps(w + i, y);
      acc_fix512(y, &hi, &lo);
    }
    if (i < e) {
      __mmask16 k = tail_mask(e - i);
      __m512 x = scaled512(_mm512_sub_ps(_mm512_mask_loadu_ps(mv, k, l + i), mv), tv, invv, pow2);
      __m512 y = _mm512_maskz_mov_ps(k, exp512(x));
      _mm512_mask_storeu_ps(w + i, k, y);
      acc_fix512(y, &hi, &lo);
    }
    bsum[b] = fold512(hi, lo);
  }
}

T512 void sample_exp_row_512(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum) {
  float inv = pow2_recip(temp);
  if (inv != 0.0f) exp_row_512_body(l, n, m, temp, inv, 1, w, bsum);
  else exp_row_512_body(l, n, m, temp, 0.0f, 0, w, bsum);
}

/* Sum of W over a_j >= cut (wsum_ge and each block of block_sums). */
T512 static inline u128 wsum_ge512(const float *a, int32_t n, float cut) {
  __m512 cv = _mm512_set1_ps(cut);
  __m512i hi = _mm512_setzero_si512(), lo = hi;
  int32_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 x = _mm512_loadu_ps(a + j);
    acc_fix512(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, cv, _CMP_GE_OQ), x), &hi, &lo);
  }
  if (j < n) {
    __mmask16 k = tail_mask(n - j);
    __m512 x = _mm512_maskz_loadu_ps(k, a + j);
    acc_fix512(_mm512_maskz_mov_ps(k & _mm512_cmp_ps_mask(x, cv, _CMP_GE_OQ), x), &hi, &lo);
  }
  return fold512(hi, lo);
}

T512 u128 sample_wsum_ge_512(const float *a, int32_t n, float cut) { return wsum_ge512(a, n, cut); }

T512 void sample_block_sums_512(const float *w, int32_t n, float cut, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++)
    bsum[b] = wsum_ge512(w + b * BLOCK, block_end(b, BLOCK, n) - b * BLOCK, cut);
}

T512 int32_t sample_window_512(const float *a, int32_t n, float lo, float hi, float *out,
                               u128 *m_above, u128 *m_in) {
  __m512 lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi);
  __m512i ah = _mm512_setzero_si512(), al = ah, ih = ah, il = ah;
  int32_t c = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(a + i);
    __mmask16 up = _mm512_cmp_ps_mask(x, hv, _CMP_GT_OQ);
    __mmask16 in = _mm512_cmp_ps_mask(x, lv, _CMP_GE_OQ) & (__mmask16)~up;
    acc_fix512(_mm512_maskz_mov_ps(up, x), &ah, &al);
    if (in) {
      acc_fix512(_mm512_maskz_mov_ps(in, x), &ih, &il);
      _mm512_storeu_ps(out + c, _mm512_maskz_compress_ps(in, x));
      c += __builtin_popcount(in);
    }
  }
  u128 tab, tin; /* the tail, as the scalar kernel does it */
  c += sample_window_scalar(a + i, n - i, lo, hi, out + c, &tab, &tin);
  *m_above = fold512(ah, al) + tab;
  *m_in = fold512(ih, il) + tin;
  return c;
}

T512 float sample_scan_chunks_512(const float *l, int32_t n, float *cmax, int32_t *bad) {
  __m512 pinf = _mm512_set1_ps(INFINITY), ninf = _mm512_set1_ps(-INFINITY), g = ninf;
  __mmask16 badm = 0;
  int32_t i = 0, b = 0;
  for (; i + CHUNK <= n; i += CHUNK, b++) { /* CHUNK = 64: four vectors */
    __m512 x0 = _mm512_loadu_ps(l + i), x1 = _mm512_loadu_ps(l + i + 16);
    __m512 x2 = _mm512_loadu_ps(l + i + 32), x3 = _mm512_loadu_ps(l + i + 48);
    badm |= _mm512_cmp_ps_mask(x0, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(x1, pinf, _CMP_NLT_UQ) |
            _mm512_cmp_ps_mask(x2, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(x3, pinf, _CMP_NLT_UQ);
    __m512 mm = _mm512_max_ps(_mm512_max_ps(x0, x1), _mm512_max_ps(x2, x3));
    cmax[b] = _mm512_reduce_max_ps(mm);
    g = _mm512_max_ps(g, mm);
  }
  if (i < n) {
    __m512 mm = ninf;
    for (; i < n; i += 16) {
      __mmask16 k = tail_mask(n - i);
      __m512 x = _mm512_mask_loadu_ps(ninf, k, l + i);
      badm |= _mm512_cmp_ps_mask(x, pinf, _CMP_NLT_UQ);
      mm = _mm512_max_ps(mm, x);
    }
    cmax[b] = _mm512_reduce_max_ps(mm);
    g = _mm512_max_ps(g, mm);
  }
  if (badm) return sample_scan_chunks_scalar(l, n, cmax, bad);
  *bad = -1;
  return _mm512_reduce_max_ps(g);
}

/* sample_fused_scalar's twin; pow2 as in scaled512.
 * W of lanes 0-7 and 8-15 goes into separate 64-bit lanes: W <= 2^61, so four vectors add at
 * most 2^63 to a lane; every four vectors the lanes are split into 32-bit halves and added
 * into wide accumulators (as acc_fix512 does per vector). Each block runs as two loops over an
 * L1-resident buffer of its weights, the exp into ybuf and then the sums and the window copy
 * from ybuf: shorter dependent chains per loop than one loop doing both (as kernels_avx2.c's
 * fused_avx2_body; docs/PERF.md, issue 15). Lanes past the row are 0 in ybuf. */
T512 static inline __attribute__((always_inline)) int32_t
fused_512_body(const float *l, int32_t n, float m, float temp, float inv, int pow2, float lo,
               float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  __m512 mv = _mm512_set1_ps(m), tv = _mm512_set1_ps(temp), invv = _mm512_set1_ps(inv);
  __m512 lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi);
  __m512i z = _mm512_setzero_si512();
  __m512i th = z, tl = z; /* total: high and low 32-bit halves */
  float ybuf[BLOCK] __attribute__((aligned(64)));
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = block_end(b, BLOCK, n), i = b * BLOCK;
    __m512i ah = z, al = z; /* mass above hi, halves */
    const int32_t s0 = i; /* ybuf[j] is the weight of element s0 + j */
    int32_t t = i;
    for (; t + 16 <= e; t += 16) {
      __m512 x = scaled512(_mm512_sub_ps(_mm512_loadu_ps(l + t), mv), tv, invv, pow2);
      _mm512_store_ps(ybuf + (t - s0), exp512(x));
    }
    if (t < e) {
      __mmask16 k = tail_mask(e - t);
      __m512 x = scaled512(_mm512_sub_ps(_mm512_mask_loadu_ps(mv, k, l + t), mv), tv, invv, pow2);
      _mm512_store_ps(ybuf + (t - s0), _mm512_maskz_mov_ps(k, exp512(x)));
    }
    cstart[b] = c;
    while (i < e) {
      __m512i ta = z, tb = z, ua = z, ub = z;
      int full = e - i >= 64; /* four whole vectors: no masks (the common case) */
      for (int u = 0; u < 4 && i < e; u++, i += 16) {
        __mmask16 k = full ? (__mmask16)0xffff : tail_mask(e - i);
        __m512 y = _mm512_load_ps(ybuf + (i - s0));
        __m512i wa, wb;
        fix512(y, &wa, &wb);
        ta = _mm512_add_epi64(ta, wa);
        tb = _mm512_add_epi64(tb, wb);
        /* branch-free: the masks are data dependent and often mixed */
        __mmask16 up = _mm512_cmp_ps_mask(y, hv, _CMP_GT_OQ);
        ua = _mm512_mask_add_epi64(ua, (__mmask8)up, ua, wa);
        ub = _mm512_mask_add_epi64(ub, (__mmask8)(up >> 8), ub, wb);
        __mmask16 in = _mm512_mask_cmp_ps_mask(k & (__mmask16)~up, y, lv, _CMP_GE_OQ);
        _mm512_storeu_ps(cw + c, _mm512_maskz_compress_ps(in, y));
        c += __builtin_popcount(in);
      }
      acc_halves(ta, tb, &th, &tl);
      acc_halves(ua, ub, &ah, &al);
    }
    bsum[b] = fold512(ah, al);
  }
  *total = fold512(th, tl);
  return c;
}

T512 int32_t sample_fused_512(const float *l, int32_t n, float m, float temp, float lo, float hi,
                              u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  float inv = pow2_recip(temp);
  if (inv != 0.0f) return fused_512_body(l, n, m, temp, inv, 1, lo, hi, bsum, cstart, total, cw);
  return fused_512_body(l, n, m, temp, 0.0f, 0, lo, hi, bsum, cstart, total, cw);
}

T512 void sample_exp_array_512(const float *x, float *y, int32_t n) {
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, exp512(_mm512_maskz_loadu_ps(k, x + i)));
  }
}
#endif /* Q35_SAMPLE_X86 */
