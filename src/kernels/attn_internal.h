/*
 * attn_internal.h - the SIMD levels of the attention kernels, shared between attn.c (dispatch,
 * the AVX-512 level and the references) and attn_avx2.c. Not for use outside src/kernels/attn*.
 */
#ifndef Q35_ATTN_INTERNAL_H
#define Q35_ATTN_INTERNAL_H

#include "kernels/attn.h"

/* The scores' exp(x) for x <= 0, shared by the vector levels: 2^(x log2 e) = 2^n 2^f with f in
 * [-1/2, 1/2], 2^f by a degree-6 Taylor polynomial (coefficients ln2^k / k!, highest first;
 * relative error < 2e-7); x at or below ATTN_EXP_FLOOR gives 0 (exp there is below 2^-125). */
#define ATTN_EXP_FLOOR (-87.0f)
#define ATTN_LOG2E 1.44269504088896341f
enum { ATTN_EXP2_DEGREE = 6 };
static const float attn_exp2_taylor[ATTN_EXP2_DEGREE + 1] = {
    1.540353039338161e-4f, 1.333355814642844e-3f, 9.618129107628477e-3f, 5.550410866482158e-2f,
    2.402265069591007e-1f, 6.931471805599453e-1f, 1.0f};

/* AVX2 + FMA + F16C, every cache type; needs hd % 8 == 0 (attn_avx2.c). */
void q35_attn_avx2(const q35_attn_job *j);
/* q35_attn_avx2 on each of js[0..n), jobs that share hd, grp, type, k, v and row_bytes: each K / V
 * block converted to floats once for all of them; each job gets the bits q35_attn_avx2 gives it. */
void q35_attn_avx2_many(const q35_attn_job *js, int n);
/* aarch64 NEON, every cache type; needs hd % 8 == 0 (attn_neon.c). */
void q35_attn_neon(const q35_attn_job *j);

#endif
