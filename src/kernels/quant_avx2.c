/*
 * quant_avx2.c - the AVX2 level (AVX2 + FMA + F16C) of the weight kernels: the 256-bit templates
 * of quant_256*.inc compiled with maddubs / madd integer dot products. Kernels by type:
 *   Q8_0 x Q8_0Y, Q5_0 x Q8_0, Q4_0 x Q8_0X    t_q8_0, t_q5_0, t_q4_0 (quant_256_q4_0_q5_0_q8_0.inc)
 *   Q4_K, Q5_K, Q6_K, IQ4_XS x Q8_K             t_q4_k, t_q5_k, t_q6_k, t_iq4_xs (quant_256_kquants.inc)
 *   F32, F16, BF16                              t_f32, t_f16, t_bf16 (quant_256_float.inc)
 *   quantize Q8_0, Q8_K, Q8_0X, Q8_0Y; dequantize F16, BF16, Q8_0, Q4_0 (quant_256_convert.inc)
 * The rest (weight quantizers, other dequantizers) is the reference's. quant.c selects this level
 * when q35_simd_active() is avx2 and lays the AVX-512 level over it above that.
 */
#define QS_TARGET __attribute__((target("avx2,fma,f16c")))
#define QS_VNNI 0
#include "kernels/quant_256.inc"
#include "kernels/quant_256_q4_0_q5_0_q8_0.inc"
#include "kernels/quant_256_kquants.inc"
#include "kernels/quant_256_float.inc"
#include "kernels/quant_256_convert.inc"

/* Micro-tile shapes R x C (16 vector registers) */
QS_TILE(t_q8_0, 2, 2)
QS_TILE(t_q4_0, 2, 2)
QS_TILE(t_q5_0, 2, 2)
QS_TILE(t_q4_k, 1, 4)
QS_TILE(t_q5_k, 1, 4)
QS_TILE(t_q6_k, 1, 4)
QS_TILE(t_iq4_xs, 2, 2)
QS_TILE(t_f32, 1, 2)
QS_TILE(t_f16, 1, 2)
QS_TILE(t_bf16, 1, 2)

void q35_kernels_avx2(q35_kernels *k) {
  QS_SET(k, Q35_TYPE_Q8_0, t_q8_0);
  QS_SET(k, Q35_TYPE_Q4_0, t_q4_0);
  QS_SET(k, Q35_TYPE_Q5_0, t_q5_0);
  QS_SET(k, Q35_TYPE_Q4_K, t_q4_k);
  QS_SET(k, Q35_TYPE_Q5_K, t_q5_k);
  QS_SET(k, Q35_TYPE_Q6_K, t_q6_k);
  QS_SET(k, Q35_TYPE_IQ4_XS, t_iq4_xs);
  QS_SET(k, Q35_TYPE_F32, t_f32);
  QS_SET(k, Q35_TYPE_F16, t_f16);
  QS_SET(k, Q35_TYPE_BF16, t_bf16);
  qs_fill_convert(k);
  q35_kernels_lowbit_avx2(k);
  q35_kernels_iq_avx2(k);
}
