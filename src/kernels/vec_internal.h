/*
 * vec_internal.h - what vec.c and its SIMD files share: the exp polynomial's constants and the
 * SIMD entry points. Each SIMD entry point handles the first floor(n / W) * W elements (W its
 * vector width) and returns that count; vec.c runs the scalar twin on the rest.
 */
#ifndef Q35_VEC_INTERNAL_H
#define Q35_VEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/vec.h"

#define VEXP_LOG2E 1.44269504088896341f
#define VEXP_MAGIC 12582912.0f      /* 1.5 * 2^23: x + MAGIC rounds x to an integer (|x| < 2^22) */
#define VEXP_LN2_HI 0.693359375f     /* ln 2 in 9 bits: k * LN2_HI is exact for |k| < 2^15 */
#define VEXP_LN2_LO (-2.12194440e-4f) /* ln 2 - LN2_HI */
/* e^r = 1 + r + r^2 (C0 + C1 r + ... + C5 r^5) on |r| <= ln2/2 (Cephes expf's minimax fit) */
#define VEXP_C0 5.0000001201e-1f
#define VEXP_C1 1.6666665459e-1f
#define VEXP_C2 4.1665795894e-2f
#define VEXP_C3 8.3334519073e-3f
#define VEXP_C4 1.3981999507e-3f
#define VEXP_C5 1.9875691500e-4f

#if defined(__x86_64__) || defined(__i386__)
int64_t q35_vec_silu_avx2(float *y, const float *x, int64_t n);
int64_t q35_vec_swiglu_avx2(float *y, const float *g, const float *u, int64_t n);
int64_t q35_vec_conv_silu_avx2(float *out, float *st, size_t st_stride, const float *x, const float *w,
                               size_t w_stride, int K, int64_t n);
int64_t q35_vec_silu_avx512(float *y, const float *x, int64_t n);
int64_t q35_vec_swiglu_avx512(float *y, const float *g, const float *u, int64_t n);
int64_t q35_vec_conv_silu_avx512(float *out, float *st, size_t st_stride, const float *x, const float *w,
                                 size_t w_stride, int K, int64_t n);
#endif

#endif
