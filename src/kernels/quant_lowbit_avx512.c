/*
 * quant_lowbit_avx512.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: AVX-512.
 */
#include "kernels/quant_internal.h"

void q35_kernels_lowbit_avx512(q35_kernels *k) { (void)k; }
