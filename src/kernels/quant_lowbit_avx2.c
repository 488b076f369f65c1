/*
 * quant_lowbit_avx2.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: AVX2 + FMA + F16C.
 * The 256-bit templates of quant_lowbit_256.inc (maddubs + madd integer sums, float lanes with
 * fused multiply-adds), and IQ4_NL / MXFP4 x Q8_0Z (quant_lowbit_nz2.inc: the AVX-512 VBMI
 * kernels' bits); dequantize and the quantizers are the reference's. Q2_K and Q3_K here: quant_avx2.c's
 * Q8_KP kernels (quant_k2r_avx2.inc, quant_k3r_avx2.inc), which the AVX-512 level runs too.
 */
#define QS_TARGET __attribute__((target("avx2,fma,f16c")))
#define QS_VNNI 0
#include "kernels/quant_256.inc"
#include "kernels/quant_lowbit_256.inc"
#include "kernels/z2_avx2.h"
#include "kernels/quant_lowbit_nz2.inc"

/* Micro-tile shapes R x C (16 vector registers) */
QS_TILE(t_mxfp4z2, 1, 8)
NZ2_GEMV(t_mxfp4z2, LB_MXFP4, 0)
QS_TILE(t_iq4_nlz2, 1, 8)
NZ2_GEMV(t_iq4_nlz2, LB_IQ4_NL, 0)
NZ2_TILEA(t_iq4_nlz2, LB_IQ4_NL, 0)
QS_TILE(t_mxfp4r2, 1, 8)
NZ2_GEMV(t_mxfp4r2, LB_MXFP4, 1)
QS_TILE(t_iq4_nlr2, 1, 8)
NZ2_GEMV(t_iq4_nlr2, LB_IQ4_NL, 1)
NZ2_TILEA(t_iq4_nlr2, LB_IQ4_NL, 1)
QS_TILE(t_q4_1, 2, 3)
LB_GEMV1(t_q4_1, LB_Q4_1)
LT_GEMV(t_q4_1, LB_Q4_1)
LT_TILE(t_q4_1, LB_Q4_1)
QS_TILE(t_q5_1, 1, 4)
LB_GEMV1(t_q5_1, LB_Q5_1)
LT_GEMV(t_q5_1, LB_Q5_1)
QS_TILE(t_q5_1r, 1, 4)
LB_GEMV1(t_q5_1r, LB_Q5_1R)
LT_GEMV(t_q5_1r, LB_Q5_1R)
LT_TILE(t_q5_1r, LB_Q5_1R)

void q35_kernels_lowbit_avx2(q35_kernels *k) {
  /* IQ4_NL / MXFP4 x Q8_0Z, one int32 lane per block (quant_lowbit_nz2.inc), as Q4_0 here */
  LB_SET(k, Q35_TYPE_MXFP4, t_mxfp4z2);
  LB_SET(k, Q35_TYPE_IQ4_NL, t_iq4_nlz2);
  k->gemv[Q35_TYPE_MXFP4] = t_mxfp4z2_gemvn; /* one column: nz2_row1, prefetching */
  k->gemv[Q35_TYPE_IQ4_NL] = t_iq4_nlz2_gemvn;
  /* their rows are rewritten at load as IQ4_NLR / MXFP4R (Q4_0R's move: the nibbles as the kernels
   * use them), which drops the transpose and the scale gathering (docs/PERF.md, issue 16, session 21) */
  LB_SET(k, Q35_TYPE_MXFP4R, t_mxfp4r2);
  LB_SET(k, Q35_TYPE_IQ4_NLR, t_iq4_nlr2);
  k->gemv[Q35_TYPE_MXFP4R] = t_mxfp4r2_gemvn;
  k->gemv[Q35_TYPE_IQ4_NLR] = t_iq4_nlr2_gemvn;
  /* IQ4_NL's prefill: the columns' |y| copied once per row panel (NZ2_TILEA) */
  k->tile[Q35_TYPE_IQ4_NL] = t_iq4_nlz2_tilea;
  k->tile[Q35_TYPE_IQ4_NLR] = t_iq4_nlr2_tilea;
  k->repack[Q35_TYPE_MXFP4] = Q35_TYPE_MXFP4R;
  k->repack[Q35_TYPE_IQ4_NL] = Q35_TYPE_IQ4_NLR;
  k->nl_act = Q35_TYPE_Q8_0Z;
  LB_SET1(k, Q35_TYPE_Q4_1, t_q4_1);
  LB_SET1(k, Q35_TYPE_Q5_1, t_q5_1);
  k->gemv[Q35_TYPE_Q4_1] = t_q4_1_gemvt; /* one column: a lane per block (lt_row) */
  k->gemv[Q35_TYPE_Q5_1] = t_q5_1_gemvt;
  k->tile[Q35_TYPE_Q4_1] = t_q4_1_tilet; /* more than QS_NARROW columns: LT_TILE */
  /* Q5_1's rows are rewritten at load as Q5_1R (qh permuted, quant_lowbit.h), whose one-column
   * kernel takes the fifth bits with shifts instead of vpshufb (docs/PERF.md, issue 16, session 23) */
  LB_SET1(k, Q35_TYPE_Q5_1R, t_q5_1r);
  k->gemv[Q35_TYPE_Q5_1R] = t_q5_1r_gemvt;
  k->tile[Q35_TYPE_Q5_1R] = t_q5_1r_tilet;
  k->repack[Q35_TYPE_Q5_1] = Q35_TYPE_Q5_1R;
}
