/*
 * attn_internal.h - the SIMD levels of the attention kernels, shared between attn.c (dispatch,
 * the AVX-512 level and the references) and attn_avx2.c. Not for use outside src/kernels/attn*.
 */
#ifndef Q35_ATTN_INTERNAL_H
#define Q35_ATTN_INTERNAL_H

#include "kernels/attn.h"

/* AVX2 + FMA + F16C, every cache type; needs hd % 8 == 0 (attn_avx2.c). */
void q35_attn_avx2(const q35_attn_job *j);

#endif
