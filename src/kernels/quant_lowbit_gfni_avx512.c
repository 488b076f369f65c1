/*
 * quant_lowbit_gfni_avx512.c - Q2_K / Q3_K x Q8_K at the AVX-512 level on CPUs with GFNI: the
 * template of quant_lowbit_k23.inc with each step's 2-bit fields extracted by one vgf2p8affineqb
 * (a shift and a mask in one instruction). Same integer sums and float steps as the instance in
 * quant_lowbit_avx512.c, so the same bits; installed over it by q35_kernels_lowbit_avx512.
 */
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,gfni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "kernels/quant_256.inc"
#include "kernels/quant_lowbit_256.inc"

#define K23_GFNI 1
#include "kernels/quant_lowbit_k23.inc"

void q35_kernels_lowbit_gfni_avx512(q35_kernels *k) {
  LB_SET(k, Q35_TYPE_Q3_K, t_q3_k5);
  LB_SET(k, Q35_TYPE_Q2_K, t_q2_k5);
}
