/*
 * quant_iq_ref.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight types: the reference level (scalar, the twins every SIMD kernel is tested against).
 */
#include "kernels/quant_internal.h"

void q35_kernels_iq_ref(q35_kernels *k) { (void)k; }

int q35_iq_vec_dot_type(const q35_kernels *k, int type) {
  (void)k;
  (void)type;
  return -1;
}
