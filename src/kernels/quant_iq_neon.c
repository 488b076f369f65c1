/*
 * quant_iq_neon.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight types: aarch64 NEON (+ dotprod, i8mm).
 */
#include "kernels/quant_internal.h"

void q35_kernels_iq_neon(q35_kernels *k) { (void)k; }
