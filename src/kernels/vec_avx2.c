/*
 * vec_avx2.c - the AVX2 (+FMA) elementwise kernels of vec.h, 8 floats a step: the twins' (vec.c)
 * operations one for one, so every element has the twin's bits.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/vec_internal.h"

#define V2 __attribute__((target("avx2,fma")))
#define S8 _mm256_set1_ps

V2 static inline __m256 vexp8(__m256 x) {
  x = _mm256_max_ps(S8(Q35_VEXP_LO), x);
  x = _mm256_min_ps(S8(Q35_VEXP_HI), x);
  const __m256 magic = S8(VEXP_MAGIC);
  const __m256 t = _mm256_fmadd_ps(x, S8(VEXP_LOG2E), magic);
  const __m256 k = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fmadd_ps(k, S8(-VEXP_LN2_HI), x);
  r = _mm256_fmadd_ps(k, S8(-VEXP_LN2_LO), r);
  __m256 p = _mm256_fmadd_ps(S8(VEXP_C5), r, S8(VEXP_C4));
  p = _mm256_fmadd_ps(p, r, S8(VEXP_C3));
  p = _mm256_fmadd_ps(p, r, S8(VEXP_C2));
  p = _mm256_fmadd_ps(p, r, S8(VEXP_C1));
  p = _mm256_fmadd_ps(p, r, S8(VEXP_C0));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), S8(1.0f));
  const __m256i kb = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic)), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e), kb));
}

V2 static inline __m256 vsilu8(__m256 x) {
  return _mm256_div_ps(x, _mm256_add_ps(S8(1.0f), vexp8(_mm256_xor_ps(x, S8(-0.0f)))));
}

V2 int64_t q35_vec_silu_avx2(float *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, vsilu8(_mm256_loadu_ps(x + i)));
  return i;
}

V2 int64_t q35_vec_swiglu_avx2(float *y, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(vsilu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
  return i;
}

V2 int64_t q35_vec_conv_silu_avx2(float *out, float *st, size_t st_stride, const float *x, const float *w,
                                  size_t w_stride, int K, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < K - 1; j++)
      sum = _mm256_fmadd_ps(_mm256_loadu_ps(st + (size_t)j * st_stride + i), _mm256_loadu_ps(w + (size_t)j * w_stride + i),
                            sum);
    const __m256 xi = _mm256_loadu_ps(x + i);
    sum = _mm256_fmadd_ps(xi, _mm256_loadu_ps(w + (size_t)(K - 1) * w_stride + i), sum);
    for (int j = 0; j + 1 < K - 1; j++)
      _mm256_storeu_ps(st + (size_t)j * st_stride + i, _mm256_loadu_ps(st + (size_t)(j + 1) * st_stride + i));
    if (K > 1) _mm256_storeu_ps(st + (size_t)(K - 2) * st_stride + i, xi);
    _mm256_storeu_ps(out + i, vsilu8(sum));
  }
  return i;
}
#endif
