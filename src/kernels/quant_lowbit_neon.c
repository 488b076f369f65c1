/*
 * quant_lowbit_neon.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: aarch64 NEON (+ dotprod, i8mm).
 */
#include "kernels/quant_internal.h"

void q35_kernels_lowbit_neon(q35_kernels *k) { (void)k; }
