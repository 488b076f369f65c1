/*
 * quant_iq_avx2.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight
 * types: AVX2 + FMA + F16C, the 256-bit templates of quant_iq_256.inc with maddubs + madd.
 * Bit-identical to the reference (see quant_iq_256.inc); no float contraction in this file.
 */
#pragma GCC optimize("fp-contract=off")
#define QS_TARGET __attribute__((target("avx2,fma,f16c")))
#define QS_VNNI 0
#include "kernels/quant_256.inc"
#define IQP_RB 2 /* prefill micro-tiles 2 x 4 */
#define IQ_IQ1S_SC32 2 /* IQ1_S gemv: per-32 scales by broadcast loads (docs/PERF.md, session 13) */
#include "kernels/quant_iq_256.inc"

/* Micro-tile shapes R x C (16 vector registers); one-column gemv with G super-blocks per pass
 * (docs/PERF.md, issue 16, session 9) */
QS_TILE(t_iq2_xxs, 2, 2)
IQ_PTILE(t_iq2_xxs, sizeof(blk_iq2_xxs), 4, 0.125f)
IQ_GEMV(t_iq2_xxs, 2)
QS_TILE(t_iq2_xs, 2, 2)
IQ_PTILE(t_iq2_xs, sizeof(blk_iq2_xs), 4, 0.125f)
IQ_GEMV(t_iq2_xs, 2)
QS_TILE(t_iq2_s, 2, 2)
IQ_PTILE(t_iq2_s, sizeof(blk_iq2_s), 4, 0.125f)
IQ_GEMV(t_iq2_s, 4)
QS_TILE(t_iq3_xxs, 2, 2)
IQ_PTILE(t_iq3_xxs, sizeof(blk_iq3_xxs), 4, 0.25f)
IQ_GEMV(t_iq3_xxs, 2)
QS_TILE(t_iq3_s, 2, 2)
IQ_PTILE(t_iq3_s, sizeof(blk_iq3_s), 4, 1.0f) /* no IQ_GEMV: no gain (PERF.md, session 9) */
QS_TILE(t_iq1_s, 2, 2)
IQ_PTILE(t_iq1_s, sizeof(blk_iq1_s), 4, 1.0f)
IQ_GEMV(t_iq1_s, 4)
QS_TILE(t_iq1_m, 2, 2)
IQ_PTILE(t_iq1_m, sizeof(blk_iq1_m), 4, 1.0f)
IQ_GEMV(t_iq1_m, 4)
QS_TILE(t_iq2_xxsr, 2, 2)
IQ_PTILE(t_iq2_xxsr, Q35_IQ2_XXSR_BYTES, 4, 0.125f)
IQ_GEMV(t_iq2_xxsr, 2)
QS_TILE(t_iq3_xxsr, 2, 2)
IQ_PTILE(t_iq3_xxsr, Q35_IQ3_XXSR_BYTES, 4, 0.25f)
IQ_GEMV(t_iq3_xxsr, 2)
QS_TILE(t_iq3_sr, 2, 2)
IQ_PTILE(t_iq3_sr, Q35_IQ3_SR_BYTES, 4, 1.0f)
IQ_GEMV(t_iq3_sr, 2)
QS_TILE(t_iq2_xsr, 2, 2)
IQ_PTILE(t_iq2_xsr, Q35_IQ2_XSR_BYTES, 4, 0.125f)
IQ_GEMV(t_iq2_xsr, 2)
QS_TILE(t_iq1_sr, 2, 2)
IQ_PTILE(t_iq1_sr, Q35_IQ1_SR_BYTES, 4, 1.0f)
IQ_GEMV(t_iq1_sr, 4)
QS_TILE(t_iq1_mr, 2, 2)
IQ_PTILE(t_iq1_mr, Q35_IQ1_MR_BYTES, 4, 1.0f)
IQ_GEMV(t_iq1_mr, 4)

void q35_kernels_iq_avx2(q35_kernels *k) {
  q35_iq_tables_init();
  IQ_SET_G(k, Q35_TYPE_IQ2_XXS, t_iq2_xxs);
  IQ_SET_G(k, Q35_TYPE_IQ2_XS, t_iq2_xs);
  IQ_SET_G(k, Q35_TYPE_IQ2_S, t_iq2_s);
  IQ_SET_G(k, Q35_TYPE_IQ3_XXS, t_iq3_xxs);
  IQ_SET(k, Q35_TYPE_IQ3_S, t_iq3_s);
  IQ_SET_G(k, Q35_TYPE_IQ1_S, t_iq1_s);
  IQ_SET_G(k, Q35_TYPE_IQ1_M, t_iq1_m);
  /* IQ2_XXS's product weights are rewritten at load as IQ2_XXSR (whole 3-bit values, 1.55x the
   * bytes), which the kernels decode with a vpshufb instead of grid and sign lookups: the
   * decode is compute-bound, so it wins streamed too (docs/PERF.md, issue 16, session 22) */
  IQ_SET_G(k, Q35_TYPE_IQ2_XXSR, t_iq2_xxsr);
  k->repack[Q35_TYPE_IQ2_XXS] = Q35_TYPE_IQ2_XXSR;
  /* IQ3_XXS likewise as IQ3_XXSR (4-bit codes, 1.37x the bytes) */
  IQ_SET_G(k, Q35_TYPE_IQ3_XXSR, t_iq3_xxsr);
  k->repack[Q35_TYPE_IQ3_XXS] = Q35_TYPE_IQ3_XXSR;
  /* IQ3_S likewise as IQ3_SR (the same 4-bit codes, 1.22x the bytes) */
  IQ_SET_G(k, Q35_TYPE_IQ3_SR, t_iq3_sr);
  k->repack[Q35_TYPE_IQ3_S] = Q35_TYPE_IQ3_SR;
  /* IQ2_XS and IQ2_S likewise, both into one layout (IQ2_XXSR's planes, sixteen scales) */
  IQ_SET_G(k, Q35_TYPE_IQ2_XSR, t_iq2_xsr);
  k->repack[Q35_TYPE_IQ2_XS] = Q35_TYPE_IQ2_XSR;
  IQ_SET_G(k, Q35_TYPE_IQ2_SR, t_iq2_xsr);
  k->repack[Q35_TYPE_IQ2_S] = Q35_TYPE_IQ2_SR;
  /* IQ1_S likewise as IQ1_SR (2-bit grid codes, 1.48x the bytes): shifts and masks instead of
   * four grid lookups and their inserts per 32 weights (docs/PERF.md, issue 16, session 23) */
  IQ_SET_G(k, Q35_TYPE_IQ1_SR, t_iq1_sr);
  k->repack[Q35_TYPE_IQ1_S] = Q35_TYPE_IQ1_SR;
  /* IQ1_M likewise as IQ1_MR (1.46x the bytes; the delta per 8 from a 16-row table) */
  IQ_SET_G(k, Q35_TYPE_IQ1_MR, t_iq1_mr);
  k->repack[Q35_TYPE_IQ1_M] = Q35_TYPE_IQ1_MR;
}
