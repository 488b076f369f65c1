/*
 * vec_avx512.c - the AVX-512 (F) elementwise kernels of vec.h, 16 floats a step: the twins' (vec.c)
 * operations one for one, so every element has the twin's bits.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/vec_internal.h"

#define V5 __attribute__((target("avx512f")))
#define S16 _mm512_set1_ps

V5 static inline __m512 vexp16(__m512 x) {
  x = _mm512_max_ps(S16(Q35_VEXP_LO), x);
  x = _mm512_min_ps(S16(Q35_VEXP_HI), x);
  const __m512 magic = S16(VEXP_MAGIC);
  const __m512 t = _mm512_fmadd_ps(x, S16(VEXP_LOG2E), magic);
  const __m512 k = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fmadd_ps(k, S16(-VEXP_LN2_HI), x);
  r = _mm512_fmadd_ps(k, S16(-VEXP_LN2_LO), r);
  __m512 p = _mm512_fmadd_ps(S16(VEXP_C5), r, S16(VEXP_C4));
  p = _mm512_fmadd_ps(p, r, S16(VEXP_C3));
  p = _mm512_fmadd_ps(p, r, S16(VEXP_C2));
  p = _mm512_fmadd_ps(p, r, S16(VEXP_C1));
  p = _mm512_fmadd_ps(p, r, S16(VEXP_C0));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), S16(1.0f));
  const __m512i kb = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic)), 23);
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(e), kb));
}

/* -x by flipping the sign bit (AVX-512 F has no float xor) */
V5 static inline __m512 vneg16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

V5 static inline __m512 vsilu16(__m512 x) {
  return _mm512_div_ps(x, _mm512_add_ps(S16(1.0f), vexp16(vneg16(x))));
}

V5 int64_t q35_vec_silu_avx512(float *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, vsilu16(_mm512_loadu_ps(x + i)));
  return i;
}

V5 int64_t q35_vec_swiglu_avx512(float *y, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(vsilu16(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
  return i;
}

V5 int64_t q35_vec_conv_silu_avx512(float *out, float *st, size_t st_stride, const float *x, const float *w,
                                  size_t w_stride, int K, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < K - 1; j++)
      sum = _mm512_fmadd_ps(_mm512_loadu_ps(st + (size_t)j * st_stride + i), _mm512_loadu_ps(w + (size_t)j * w_stride + i),
                            sum);
    const __m512 xi = _mm512_loadu_ps(x + i);
    sum = _mm512_fmadd_ps(xi, _mm512_loadu_ps(w + (size_t)(K - 1) * w_stride + i), sum);
    for (int j = 0; j + 1 < K - 1; j++)
      _mm512_storeu_ps(st + (size_t)j * st_stride + i, _mm512_loadu_ps(st + (size_t)(j + 1) * st_stride + i));
    if (K > 1) _mm512_storeu_ps(st + (size_t)(K - 2) * st_stride + i, xi);
    _mm512_storeu_ps(out + i, vsilu16(sum));
  }
  return i;
}
#endif
