/*
 * quant_lowbit_avx2.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: AVX2 + FMA + F16C.
 */
#include "kernels/quant_internal.h"

void q35_kernels_lowbit_avx2(q35_kernels *k) { (void)k; }
