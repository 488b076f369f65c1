/*
 * vec.h - elementwise float kernels of the forward pass: SiLU, SwiGLU and the DeltaNet causal
 * conv step, with a vector exp polynomial instead of libm's expf.
 *
 * Every kernel has a scalar reference twin (suffix _ref, vec.c) that evaluates the same
 * polynomial with the same operations (fmaf where the SIMD code fuses), so the AVX2 and
 * AVX-512 paths (vec_avx2.c, vec_avx512.c) give the twin's bits for every element: results do
 * not depend on the SIMD level, on n or on where an element sits (tails run the twin). The
 * dispatch takes q35_simd_active()'s level. In-place calls (y == x, out == x) are allowed.
 *
 * exp: inputs are clamped to [Q35_VEXP_LO, Q35_VEXP_HI] (NaN stays NaN), range-reduced
 * (x = k ln2 + r, |r| <= ln2/2, k by round to nearest even), e^r by a degree-7 polynomial
 * (Horner with fma), times 2^k (added to the exponent field): within a few ulp of exp(x) on
 * the clamped range. So
 * silu(x) = x / (1 + exp(-x)) is ~0 (not -0) for x < -88 and silu(-inf) = -inf.
 */
#ifndef Q35_VEC_H
#define Q35_VEC_H

#include <stddef.h>
#include <stdint.h>

#define Q35_VEXP_LO (-87.0f)
#define Q35_VEXP_HI 88.0f

/* exp(x) by the polynomial above (the scalar definition every level reproduces). */
float q35_vec_expf_ref(float x);

/* y[i] = x[i] / (1 + exp(-x[i])). */
void q35_vec_silu(float *y, const float *x, int64_t n);
void q35_vec_silu_ref(float *y, const float *x, int64_t n);

/* y[i] = silu(g[i]) * u[i]. */
void q35_vec_swiglu(float *y, const float *g, const float *u, int64_t n);
void q35_vec_swiglu_ref(float *y, const float *g, const float *u, int64_t n);

/* One token of a causal depthwise conv over n channels, then SiLU:
 *   sum = 0; sum = fma(st[j][i], w[j][i], sum) for j < K-1; sum = fma(x[i], w[K-1][i], sum)
 *   out[i] = silu(sum); the state shifts by one (st[j] = st[j+1], st[K-2] = x)
 * st: K-1 rows of the previous inputs, oldest first, row stride st_stride floats; w: K rows,
 * tap-major (row j = tap j of every channel), row stride w_stride floats. 1 <= K. */
void q35_vec_conv_silu(float *out, float *st, size_t st_stride, const float *x, const float *w, size_t w_stride,
                       int K, int64_t n);
void q35_vec_conv_silu_ref(float *out, float *st, size_t st_stride, const float *x, const float *w,
                           size_t w_stride, int K, int64_t n);

#endif
