/*
 * quant_iq_neon.c - kernels of the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M weight
 * types: aarch64 NEON. quant_iq_neon.inc's dot products compiled twice, base NEON (vmull +
 * vpadal) and target("arch=armv8.2-a+dotprod") (SDOT), the variant chosen at run time from
 * q35_cpu_has(Q35_CPU_DOTPROD) as quant_neon.c does. Tiles decode each block once for up to 4
 * activation columns (quant_neon_tile.h) with the vec_dot's arithmetic per column, so tile ==
 * vec_dot == reference bit for bit.
 */
#include "kernels/quant_internal.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/quant_iq_tables.h"
#include "kernels/quant_neon_tile.h"

#if defined(__clang__) && __clang_major__ < 16
#define Q35_NEON_EXT 0
#else
#define Q35_NEON_EXT 1
#endif
#if defined(__clang__)
#define Q35_TARGET_DOTPROD __attribute__((target("dotprod")))
#else
#define Q35_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

/* fp16 -> fp32 by the FP unit: the same value as q35_fp16_to_fp32 for every non-NaN input */
static inline float h2f(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

#define IQ_PLAIN(t) ((float)(t))
#define IQ_EIGHTH(t) ((float)(t) * 0.125f)

#define QN_TILE(name) Q35_NEON_TILE(QN_TARGET, QN(tile_##name), QN(mc_##name))

#define QN(name) name##_base
#define QN_TARGET
#define QN_DOTPROD 0
#include "kernels/quant_iq_neon.inc"
#undef QN
#undef QN_TARGET
#undef QN_DOTPROD
#undef QNF
#undef QN_DOT_IQ

#if Q35_NEON_EXT
#define QN(name) name##_dp
#define QN_TARGET Q35_TARGET_DOTPROD
#define QN_DOTPROD 1
#include "kernels/quant_iq_neon.inc"
#undef QN
#undef QN_TARGET
#undef QN_DOTPROD
#endif

void q35_kernels_iq_neon(q35_kernels *k) {
#if Q35_NEON_EXT
  const int dp = q35_cpu_has(Q35_CPU_DOTPROD);
#define PICK(T, f) (k->vec_dot[T] = dp ? f##_dp : f##_base, k->tile[T] = dp ? tile_##f##_dp : tile_##f##_base)
#else
#define PICK(T, f) (k->vec_dot[T] = f##_base, k->tile[T] = tile_##f##_base)
#endif
  PICK(Q35_TYPE_IQ2_XXS, dot_iq2_xxs);
  PICK(Q35_TYPE_IQ2_XS, dot_iq2_xs);
  PICK(Q35_TYPE_IQ2_S, dot_iq2_s);
  PICK(Q35_TYPE_IQ3_XXS, dot_iq3_xxs);
  PICK(Q35_TYPE_IQ3_S, dot_iq3_s);
  PICK(Q35_TYPE_IQ1_S, dot_iq1_s);
  PICK(Q35_TYPE_IQ1_M, dot_iq1_m);
#undef PICK
}

#else /* not aarch64 */
void q35_kernels_iq_neon(q35_kernels *k) { (void)k; }
#endif
