/*
 * quant_iq_avx512.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight
 * types: AVX-512 (VNNI): the 256-bit templates of quant_iq_256.inc with vpdpwssd.
 * Bit-identical to the reference (see quant_iq_256.inc); no float contraction in this file.
 */
#pragma GCC optimize("fp-contract=off")
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "kernels/quant_256.inc"
#include "kernels/quant_iq_256.inc"

/* Micro-tile shapes R x C (32 vector registers) */
QS_TILE(t_iq2_xxs, 2, 4)
QS_TILE(t_iq2_xs, 2, 4)
QS_TILE(t_iq2_s, 2, 4)
QS_TILE(t_iq3_xxs, 2, 4)
QS_TILE(t_iq3_s, 2, 4)
QS_TILE(t_iq1_s, 2, 4)
QS_TILE(t_iq1_m, 2, 4)

void q35_kernels_iq_avx512(q35_kernels *k) {
  QS_SET(k, Q35_TYPE_IQ2_XXS, t_iq2_xxs);
  QS_SET(k, Q35_TYPE_IQ2_XS, t_iq2_xs);
  QS_SET(k, Q35_TYPE_IQ2_S, t_iq2_s);
  QS_SET(k, Q35_TYPE_IQ3_XXS, t_iq3_xxs);
  QS_SET(k, Q35_TYPE_IQ3_S, t_iq3_s);
  QS_SET(k, Q35_TYPE_IQ1_S, t_iq1_s);
  QS_SET(k, Q35_TYPE_IQ1_M, t_iq1_m);
}
