/*
 * quant_iq_avx2.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight types: AVX2 + FMA + F16C.
 */
#include "kernels/quant_internal.h"

void q35_kernels_iq_avx2(q35_kernels *k) { (void)k; }
