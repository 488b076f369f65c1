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

void q35_delta_step_ref(const float *S_in, float *S_out, int dv, int dk, const float *q, const float *k,
                        const float *v, float beta, float decay, float *o) {
  for (int j = 0; j < dv; j++) {
    const float *Si = S_in + (size_t)j * dk;
    float *Sj = S_out + (size_t)j * dk;
    float acc[16] = {0};
    for (int a = 0; a < dk; a++) {
      Sj[a] = Si[a] * decay;
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

/* R rows of S at once (R <= 4): each row's two passes are the reference's arithmetic in its order
 * (the same lanes, the same FMA chains, the same tree), so the bits do not depend on R; the R rows'
 * chains are independent, which hides the FMA latency a single row's chain of dk/16 steps exposes
 * (one row at a time ran at about a third of the FMA throughput). k and q loads are shared. The
 * first pass only reads S_in: the second recomputes the decayed row S_in * decay (the same
 * rounded products, so the reference's bits) instead of storing it and loading it back, which
 * halves the stores a token makes (and with S_in == S_out nothing is written before pass 2). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
delta_rows_avx2(const float *Sin, float *S, int R, int dk, const float *q, const float *k, const float *v, float beta,
                __m256 vd, float *o) {
  __m256 a0[4], a1[4];
  _Pragma("GCC unroll 8")
  for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int a = 0; a < dk; a += 16) {
    const __m256 k0 = _mm256_loadu_ps(k + a), k1 = _mm256_loadu_ps(k + a + 8);
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
      const float *Si = Sin + (size_t)r * dk;
      const __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(Si + a), vd);
      const __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(Si + a + 8), vd);
      a0[r] = _mm256_fmadd_ps(s0, k0, a0[r]);
      a1[r] = _mm256_fmadd_ps(s1, k1, a1[r]);
    }
  }
  __m256 dd[4];
  _Pragma("GCC unroll 8")
  for (int r = 0; r < R; r++) {
    dd[r] = _mm256_set1_ps(beta * (v[r] - hsum_avx2(a0[r], a1[r])));
    a0[r] = a1[r] = _mm256_setzero_ps();
  }
  for (int a = 0; a < dk; a += 16) {
    const __m256 k0 = _mm256_loadu_ps(k + a), k1 = _mm256_loadu_ps(k + a + 8);
    const __m256 q0 = _mm256_loadu_ps(q + a), q1 = _mm256_loadu_ps(q + a + 8);
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
      const float *Si = Sin + (size_t)r * dk;
      float *Sj = S + (size_t)r * dk;
      const __m256 s0 = _mm256_fmadd_ps(k0, dd[r], _mm256_mul_ps(_mm256_loadu_ps(Si + a), vd));
      const __m256 s1 = _mm256_fmadd_ps(k1, dd[r], _mm256_mul_ps(_mm256_loadu_ps(Si + a + 8), vd));
      _mm256_storeu_ps(Sj + a, s0);
      _mm256_storeu_ps(Sj + a + 8, s1);
      a0[r] = _mm256_fmadd_ps(s0, q0, a0[r]);
      a1[r] = _mm256_fmadd_ps(s1, q1, a1[r]);
    }
  }
  _Pragma("GCC unroll 8")
  for (int r = 0; r < R; r++) o[r] = hsum_avx2(a0[r], a1[r]);
}

__attribute__((target("avx2,fma"))) static void delta_step_avx2(const float *Sin, float *S, int dv, int dk,
                                                                 const float *q, const float *k, const float *v,
                                                                 float beta, float decay, float *o) {
  const __m256 vd = _mm256_set1_ps(decay);
  int j = 0;
  for (; j + 4 <= dv; j += 4)
    delta_rows_avx2(Sin + (size_t)j * dk, S + (size_t)j * dk, 4, dk, q, k, v + j, beta, vd, o + j);
  for (; j < dv; j++) delta_rows_avx2(Sin + (size_t)j * dk, S + (size_t)j * dk, 1, dk, q, k, v + j, beta, vd, o + j);
}

/* n tokens over a window of DELTA_WIN groups of rows at a time (see q35_delta_steps): each token
 * runs the window's groups one after another, so consecutive groups are independent chains (a
 * group's next token waits for its own previous one) and the window's rows stay in L1 over the
 * n tokens; leftover rows (dv not a multiple of the group) one at a time */
enum { DELTA_WIN = 4 };
__attribute__((target("avx2,fma"))) static void delta_steps_avx2(const float *Sin, float *S, int dv, int dk, int n,
                                                                  const float *q, const float *k, const float *v,
                                                                  size_t ld, const float *beta, const float *decay,
                                                                  float *o, size_t ldo) {
  int j0 = 0;
  for (; j0 + 4 <= dv; j0 += 4 * DELTA_WIN) {
    const int ng = (dv - j0) / 4 < DELTA_WIN ? (dv - j0) / 4 : DELTA_WIN;
    for (int i = 0; i < n; i++) {
      const size_t x = (size_t)i * ld;
      const __m256 vd = _mm256_set1_ps(decay[i]);
      for (int g = 0; g < ng; g++) {
        const int j = j0 + 4 * g;
        delta_rows_avx2((i ? S : Sin) + (size_t)j * dk, S + (size_t)j * dk, 4, dk, q + x, k + x, v + x + j, beta[i],
                        vd, o + (size_t)i * ldo + j);
      }
    }
  }
  for (int j = dv - dv % 4; j < dv; j++)
    for (int i = 0; i < n; i++) {
      const size_t x = (size_t)i * ld;
      delta_rows_avx2((i ? S : Sin) + (size_t)j * dk, S + (size_t)j * dk, 1, dk, q + x, k + x, v + x + j, beta[i],
                      _mm256_set1_ps(decay[i]), o + (size_t)i * ldo + j);
    }
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) static inline float hsum_avx512(__m512 v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

/* R rows at once (R <= 8), as delta_rows_avx2 (the decayed row recomputed in the second pass, not
 * stored by the first): each row's bits are the reference's, whatever R */
__attribute__((target("avx512f,avx512dq,avx2,fma"), always_inline)) static inline void
delta_rows_avx512(const float *Sin, float *S, int R, int dk, const float *q, const float *k, const float *v, float beta,
                  __m512 vd, float *o) {
  __m512 acc[8];
  _Pragma("GCC unroll 8")
  for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
  for (int a = 0; a < dk; a += 16) {
    const __m512 ka = _mm512_loadu_ps(k + a);
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
      const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(Sin + (size_t)r * dk + a), vd);
      acc[r] = _mm512_fmadd_ps(s, ka, acc[r]);
    }
  }
  __m512 dd[8];
  _Pragma("GCC unroll 8")
  for (int r = 0; r < R; r++) {
    dd[r] = _mm512_set1_ps(beta * (v[r] - hsum_avx512(acc[r])));
    acc[r] = _mm512_setzero_ps();
  }
  for (int a = 0; a < dk; a += 16) {
    const __m512 ka = _mm512_loadu_ps(k + a), qa = _mm512_loadu_ps(q + a);
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
      float *Sj = S + (size_t)r * dk;
      const __m512 s = _mm512_fmadd_ps(ka, dd[r], _mm512_mul_ps(_mm512_loadu_ps(Sin + (size_t)r * dk + a), vd));
      _mm512_storeu_ps(Sj + a, s);
      acc[r] = _mm512_fmadd_ps(s, qa, acc[r]);
    }
  }
  _Pragma("GCC unroll 8")
  for (int r = 0; r < R; r++) o[r] = hsum_avx512(acc[r]);
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) static void
delta_step_avx512(const float *Sin, float *S, int dv, int dk, const float *q, const float *k, const float *v,
                  float beta, float decay, float *o) {
  const __m512 vd = _mm512_set1_ps(decay);
  int j = 0;
  for (; j + 8 <= dv; j += 8)
    delta_rows_avx512(Sin + (size_t)j * dk, S + (size_t)j * dk, 8, dk, q, k, v + j, beta, vd, o + j);
  for (; j < dv; j++)
    delta_rows_avx512(Sin + (size_t)j * dk, S + (size_t)j * dk, 1, dk, q, k, v + j, beta, vd, o + j);
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) static void
delta_steps_avx512(const float *Sin, float *S, int dv, int dk, int n, const float *q, const float *k, const float *v,
                   size_t ld, const float *beta, const float *decay, float *o, size_t ldo) {
  int j0 = 0;
  for (; j0 + 8 <= dv; j0 += 8 * DELTA_WIN) {
    const int ng = (dv - j0) / 8 < DELTA_WIN ? (dv - j0) / 8 : DELTA_WIN;
    for (int i = 0; i < n; i++) {
      const size_t x = (size_t)i * ld;
      const __m512 vd = _mm512_set1_ps(decay[i]);
      for (int g = 0; g < ng; g++) {
        const int j = j0 + 8 * g;
        delta_rows_avx512((i ? S : Sin) + (size_t)j * dk, S + (size_t)j * dk, 8, dk, q + x, k + x, v + x + j, beta[i],
                          vd, o + (size_t)i * ldo + j);
      }
    }
  }
  for (int j = dv - dv % 8; j < dv; j++)
    for (int i = 0; i < n; i++) {
      const size_t x = (size_t)i * ld;
      delta_rows_avx512((i ? S : Sin) + (size_t)j * dk, S + (size_t)j * dk, 1, dk, q + x, k + x, v + x + j, beta[i],
                        _mm512_set1_ps(decay[i]), o + (size_t)i * ldo + j);
    }
}

#endif /* Q35_DELTA_X86 */

void q35_delta_step(const float *S_in, float *S_out, int dv, int dk, const float *q, const float *k, const float *v,
                    float beta, float decay, float *o) {
#if Q35_DELTA_X86
  if (dk % 16 == 0) switch (q35_simd_active()) {
    case Q35_SIMD_AVX512: delta_step_avx512(S_in, S_out, dv, dk, q, k, v, beta, decay, o); return;
    case Q35_SIMD_AVX2: delta_step_avx2(S_in, S_out, dv, dk, q, k, v, beta, decay, o); return;
    default: break;
    }
#endif
  q35_delta_step_ref(S_in, S_out, dv, dk, q, k, v, beta, decay, o);
}

void q35_delta_steps_ref(const float *S_in, float *S_out, int dv, int dk, int n, const float *q, const float *k,
                         const float *v, size_t ld, const float *beta, const float *decay, float *o, size_t ldo) {
  for (int i = 0; i < n; i++) {
    const size_t x = (size_t)i * ld;
    q35_delta_step_ref(i ? S_out : S_in, S_out, dv, dk, q + x, k + x, v + x, beta[i], decay[i], o + (size_t)i * ldo);
  }
}

void q35_delta_steps(const float *S_in, float *S_out, int dv, int dk, int n, const float *q, const float *k,
                     const float *v, size_t ld, const float *beta, const float *decay, float *o, size_t ldo) {
#if Q35_DELTA_X86
  if (dk % 16 == 0) switch (q35_simd_active()) {
    case Q35_SIMD_AVX512: delta_steps_avx512(S_in, S_out, dv, dk, n, q, k, v, ld, beta, decay, o, ldo); return;
    case Q35_SIMD_AVX2: delta_steps_avx2(S_in, S_out, dv, dk, n, q, k, v, ld, beta, decay, o, ldo); return;
    default: break;
    }
#endif
  q35_delta_steps_ref(S_in, S_out, dv, dk, n, q, k, v, ld, beta, decay, o, ldo);
}
