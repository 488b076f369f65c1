/*
 * vec.c - the elementwise kernels' dispatch and their scalar reference twins (see vec.h).
 *
 * The twins spell out the SIMD files' operations one by one: fmaf where those fuse, plain
 * float operations elsewhere, min/max in the operand order of the x86 instructions (so NaN
 * propagates the same way). Nothing here is a mul followed by an add that the compiler could
 * contract: every such pair is an explicit fmaf.
 */
#include "kernels/vec.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/vec_internal.h"

float q35_vec_expf_ref(float x) {
  x = Q35_VEXP_LO > x ? Q35_VEXP_LO : x; /* maxps(lo, x): NaN stays */
  x = Q35_VEXP_HI < x ? Q35_VEXP_HI : x; /* minps(hi, x) */
  const float t = fmaf(x, VEXP_LOG2E, VEXP_MAGIC);
  const float k = t - VEXP_MAGIC;
  float r = fmaf(k, -VEXP_LN2_HI, x);
  r = fmaf(k, -VEXP_LN2_LO, r);
  float p = fmaf(VEXP_C5, r, VEXP_C4);
  p = fmaf(p, r, VEXP_C3);
  p = fmaf(p, r, VEXP_C2);
  p = fmaf(p, r, VEXP_C1);
  p = fmaf(p, r, VEXP_C0);
  const float z = r * r;
  const float e = fmaf(p, z, r) + 1.0f;
  /* times 2^k by adding k to the exponent field: exact, as the result is normal on the clamped
   * range (k in [-126, 127]); an integer add also leaves no product for a compiler to fuse
   * with a following add (silu's 1 + exp) */
  uint32_t tb, mb, eb;
  const float magic = VEXP_MAGIC;
  memcpy(&tb, &t, 4);
  memcpy(&mb, &magic, 4);
  memcpy(&eb, &e, 4);
  eb += (tb - mb) << 23;
  float y;
  memcpy(&y, &eb, 4);
  return y;
}

static inline float silu1(float x) { return x / (1.0f + q35_vec_expf_ref(-x)); }

void q35_vec_silu_ref(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = silu1(x[i]);
}

void q35_vec_swiglu_ref(float *y, const float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = silu1(g[i]) * u[i];
}

void q35_vec_conv_silu_ref(float *out, float *st, size_t st_stride, const float *x, const float *w,
                           size_t w_stride, int K, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float sum = 0.0f;
    for (int j = 0; j < K - 1; j++) sum = fmaf(st[(size_t)j * st_stride + i], w[(size_t)j * w_stride + i], sum);
    const float xi = x[i];
    sum = fmaf(xi, w[(size_t)(K - 1) * w_stride + i], sum);
    for (int j = 0; j + 1 < K - 1; j++) st[(size_t)j * st_stride + i] = st[(size_t)(j + 1) * st_stride + i];
    if (K > 1) st[(size_t)(K - 2) * st_stride + i] = xi;
    out[i] = silu1(sum);
  }
}

/* ---- dispatch: the SIMD part, then the twin on the tail ---- */

#if defined(__x86_64__) || defined(__i386__)
#define VEC_X86 1
#else
#define VEC_X86 0
#endif

void q35_vec_silu(float *y, const float *x, int64_t n) {
  int64_t i = 0;
#if VEC_X86
  const q35_simd l = q35_simd_active();
  if (l == Q35_SIMD_AVX512) i = q35_vec_silu_avx512(y, x, n);
  else if (l == Q35_SIMD_AVX2) i = q35_vec_silu_avx2(y, x, n);
#endif
  q35_vec_silu_ref(y + i, x + i, n - i);
}

void q35_vec_swiglu(float *y, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
#if VEC_X86
  const q35_simd l = q35_simd_active();
  if (l == Q35_SIMD_AVX512) i = q35_vec_swiglu_avx512(y, g, u, n);
  else if (l == Q35_SIMD_AVX2) i = q35_vec_swiglu_avx2(y, g, u, n);
#endif
  q35_vec_swiglu_ref(y + i, g + i, u + i, n - i);
}

void q35_vec_conv_silu(float *out, float *st, size_t st_stride, const float *x, const float *w, size_t w_stride,
                       int K, int64_t n) {
  int64_t i = 0;
#if VEC_X86
  const q35_simd l = q35_simd_active();
  if (l == Q35_SIMD_AVX512) i = q35_vec_conv_silu_avx512(out, st, st_stride, x, w, w_stride, K, n);
  else if (l == Q35_SIMD_AVX2) i = q35_vec_conv_silu_avx2(out, st, st_stride, x, w, w_stride, K, n);
#endif
  q35_vec_conv_silu_ref(out + i, st + i, st_stride, x + i, w + i, w_stride, K, n - i);
}
