/*
 * quant_lowbit_neon.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: aarch64 NEON (+ dotprod, i8mm).
 * vec_dot of each type from quant_lowbit_neon.inc, compiled for base NEON and for dotprod (SDOT),
 * the variant chosen at run time from q35_cpu_has(Q35_CPU_DOTPROD) as quant_neon.c does. Each
 * returns the reference's float bit for bit; tiles decode each block once for up to 4 activation
 * columns (quant_neon_tile.h) with the vec_dot's arithmetic per column: the same bits.
 */
#include "kernels/quant_internal.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <stddef.h>

#include "kernels/quant_lowbit.h"
#include "kernels/quant_neon_tile.h"

/* as quant_neon.c: GCC names an architecture with the extension, clang the feature; clang < 16
 * declares SDOT only for a whole-file -march (the base kernels stand in there) */
#if defined(__clang__) && __clang_major__ < 16
#define LN_EXT 0
#else
#define LN_EXT 1
#endif
#if defined(__clang__)
#define LN_TARGET_DOTPROD __attribute__((target("dotprod")))
#else
#define LN_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

/* fp16 -> fp32 by the FP unit: exact, q35_fp16_to_fp32's value for every non-NaN input */
static inline float ln_h2f(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

/* the 16 Q3_K scales, unbiased (q3k_scale, four at a time) */
static inline void ln_q3k_scales(const uint8_t *s, int8_t out[16]) {
  uint32_t a[3], v[4];
  memcpy(a, s, 12);
  v[0] = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
  v[1] = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
  v[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
  v[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
  vst1q_s8(out, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(v)), vdupq_n_s8(32)));
}

#define LN_TILE(name) Q35_NEON_TILE(LN_TARGET, LN(tile_##name), LN(mc_##name))

#define LN(name) name##_base
#define LN_TARGET
#define LN_DOTPROD 0
#include "kernels/quant_lowbit_neon.inc"
#undef LN
#undef LN_TARGET
#undef LN_DOTPROD
#undef LNF

#if LN_EXT
#define LN(name) name##_dp
#define LN_TARGET LN_TARGET_DOTPROD
#define LN_DOTPROD 1
#include "kernels/quant_lowbit_neon.inc"
#undef LN
#undef LN_TARGET
#undef LN_DOTPROD
#endif

void q35_kernels_lowbit_neon(q35_kernels *k) {
#if LN_EXT
  const int dp = q35_cpu_has(Q35_CPU_DOTPROD);
#define PICK(T, f) (k->vec_dot[T] = dp ? f##_dp : f##_base, k->tile[T] = dp ? tile_##f##_dp : tile_##f##_base)
#else
#define PICK(T, f) (k->vec_dot[T] = f##_base, k->tile[T] = tile_##f##_base)
#endif
  PICK(Q35_TYPE_Q3_K, dot_q3_k);
  PICK(Q35_TYPE_Q2_K, dot_q2_k);
  PICK(Q35_TYPE_MXFP4, dot_mxfp4);
  PICK(Q35_TYPE_IQ4_NL, dot_iq4_nl);
  PICK(Q35_TYPE_Q4_1, dot_q4_1);
  PICK(Q35_TYPE_Q5_1, dot_q5_1);
#undef PICK
}

#else /* not aarch64: no NEON level */
void q35_kernels_lowbit_neon(q35_kernels *k) { (void)k; }
#endif
