/*
 * quant_iq_avx512.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight types: AVX-512.
 */
#include "kernels/quant_internal.h"

void q35_kernels_iq_avx512(q35_kernels *k) { (void)k; }
