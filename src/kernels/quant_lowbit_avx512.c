/*
 * quant_lowbit_avx512.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: AVX-512.
 * The 256-bit templates of quant_lowbit_256.inc with VNNI (vpdpbusd / vpdpwssd) and the larger
 * tiles 32 vector registers allow; bit-identical to the reference (and so to the AVX2 level).
 */
/* no fused multiply-adds: the float steps must round as the reference's (quant_lowbit_256.inc) */
#pragma GCC optimize("fp-contract=off")
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "kernels/quant_256.inc"
#include "kernels/quant_lowbit_256.inc"

/* Micro-tile shapes R x C (32 vector registers) */
QS_TILE(t_q3_k, 2, 4)
QS_TILE(t_q2_k, 2, 4)
QS_TILE(t_mxfp4, 2, 4)
QS_TILE(t_iq4_nl, 2, 4)
QS_TILE(t_q4_1, 2, 4)
QS_TILE(t_q5_1, 2, 4)
LB_GEMV(t_q3_k)
LB_GEMV(t_q2_k)
LB_GEMV(t_mxfp4)
LB_GEMV(t_iq4_nl)
LB_GEMV(t_q4_1)
LB_GEMV(t_q5_1)

void q35_kernels_lowbit_avx512(q35_kernels *k) {
  LB_SET(k, Q35_TYPE_Q3_K, t_q3_k);
  LB_SET(k, Q35_TYPE_Q2_K, t_q2_k);
  LB_SET(k, Q35_TYPE_MXFP4, t_mxfp4);
  LB_SET(k, Q35_TYPE_IQ4_NL, t_iq4_nl);
  LB_SET(k, Q35_TYPE_Q4_1, t_q4_1);
  LB_SET(k, Q35_TYPE_Q5_1, t_q5_1);
}
