/* deltanet.c - the delta-rule step (see deltanet.h): scalar reference, AVX2 and AVX-512 twins, the
 * one q35_simd_active() names taken (the reference where dk is not a multiple of 16). */
#include "kernels/deltanet.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#define Q35_DELTA_X86 1
#include <immintrin.h>
#else
#define Q35_DELTA_X86 0
#endif

static float reduce16(float *a) {
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) a[i] += a[i + w];
  return a[0];
}

void q35_delta_step_ref(float *S, int dv, int dk, const float *q, const float *k, const float *v, float beta,
                        float decay, float *o) {
  for (int j = 0; j < dv; j++) {
    float *Sj = S + (size_t)j * dk;
    float acc[16] = {0};
    for (int a = 0; a < dk; a++) {
      Sj[a] *= decay;
      acc[a % 16] = fmaf(Sj[a], k[a], acc[a % 16]);
    }
    const float d = beta * (v[j] - reduce16(acc));
    float acc2[16] = {0};
    for (int a = 0; a < dk; a++) {
      Sj[a] = fmaf(k[a], d, Sj[a]);
      acc2[a % 16] = fmaf(Sj[a], q[a], acc2[a % 16]);
    }
    o[j] = reduce16(acc2);
  }
}

#if Q35_DELTA_X86
__attribute__((target("avx2,fma"))) static inline float hsum_avx2(__m256 lo, __m256 hi) {
  __m256 s8 = _mm256_add_ps(lo, hi);                                                  /* i + (i+8) */
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  /* + (i+4) */
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                 /* + (i+2) */
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));                                   /* + (i+1) */
  return _mm_cvtss_f32(s1);
}

__attribute__((target("avx2,fma"))) static void delta_step_avx2(float *S, int dv, int dk, const float *q,
                                                                 const float *k, const float *v, float beta,
                                                                 float decay, float *o) {
  const __m256 vd = _mm256_set1_ps(decay);
  for (int j = 0; j < dv; j++) {
    float *Sj = S + (size_t)j * dk;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int a = 0; a < dk; a += 16) {
      __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(Sj + a), vd), s1 = _mm256_mul_ps(_mm256_loadu_ps(Sj + a + 8), vd);
      _mm256_storeu_ps(Sj + a, s0);
      _mm256_storeu_ps(Sj + a + 8, s1);
      a0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(k + a), a0);
      a1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(k + a + 8), a1);
    }
    const __m256 dd = _mm256_set1_ps(beta * (v[j] - hsum_avx2(a0, a1)));
    a0 = _mm256_setzero_ps();
    a1 = _mm256_setzero_ps();
    for (int a = 0; a < dk; a += 16) {
      __m256 s0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + a), dd, _mm256_loadu_ps(Sj + a));
      __m256 s1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + a + 8), dd, _mm256_loadu_ps(Sj + a + 8));
      _mm256_storeu_ps(Sj + a, s0);
      _mm256_storeu_ps(Sj + a + 8, s1);
      a0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(q + a), a0);
      a1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(q + a + 8), a1);
    }
    o[j] = hsum_avx2(a0, a1);
  }
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) static inline float hsum_avx512(__m512 v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) static void delta_step_avx512(float *S, int dv, int dk,
                                                                                   const float *q, const float *k,
                                                                                   const float *v, float beta,
                                                                                   float decay, float *o) {
  const __m512 vd = _mm512_set1_ps(decay);
  for (int j = 0; j < dv; j++) {
    float *Sj = S + (size_t)j * dk;
    __m512 acc = _mm512_setzero_ps();
    for (int a = 0; a < dk; a += 16) {
      __m512 s = _mm512_mul_ps(_mm512_loadu_ps(Sj + a), vd);
      _mm512_storeu_ps(Sj + a, s);
      acc = _mm512_fmadd_ps(s, _mm512_loadu_ps(k + a), acc);
    }
    const __m512 dd = _mm512_set1_ps(beta * (v[j] - hsum_avx512(acc)));
    acc = _mm512_setzero_ps();
    for (int a = 0; a < dk; a += 16) {
      __m512 s = _mm512_fmadd_ps(_mm512_loadu_ps(k + a), dd, _mm512_loadu_ps(Sj + a));
      _mm512_storeu_ps(Sj + a, s);
      acc = _mm512_fmadd_ps(s, _mm512_loadu_ps(q + a), acc);
    }
    o[j] = hsum_avx512(acc);
  }
}

#endif /* Q35_DELTA_X86 */

void q35_delta_step(float *S, int dv, int dk, const float *q, const float *k, const float *v, float beta, float decay,
                    float *o) {
#if Q35_DELTA_X86
  if (dk % 16 == 0) switch (q35_simd_active()) {
    case Q35_SIMD_AVX512: delta_step_avx512(S, dv, dk, q, k, v, beta, decay, o); return;
    case Q35_SIMD_AVX2: delta_step_avx2(S, dv, dk, q, k, v, beta, decay, o); return;
    default: break;
    }
#endif
  q35_delta_step_ref(S, dv, dk, q, k, v, beta, decay, o);
}
