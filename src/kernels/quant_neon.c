/*
 * quant_neon.c - the aarch64 NEON level of the weight kernels. Kernels by type:
 *   Q4_0 x Q8_0X, Q8_0 x Q8_0Y, Q5_0 x Q8_0,     quant_neon.inc, compiled twice: base NEON
 *   Q4_K, Q5_K, Q6_K, IQ4_XS x Q8_K              (vmull + vpadal) and target("arch=armv8.2-a+dotprod") (SDOT)
 *   F32, F16, BF16                               here: float64x2 accumulators
 *   tiles of the integer types (1 x 4)           quant_neon.inc + quant_neon_tile.h: each block
 *                                                decoded once for up to 4 activation columns
 *   Q4_0, Q8_0 tiles (2 x 2)                     here: target("+i8mm") SMMLA (vmmlaq_s32)
 *   quantize Q8_0, Q8_K, Q8_0X, Q8_0Y            here (byte-identical to the reference)
 * Which variant a table gets is decided at run time from q35_cpu_has(Q35_CPU_DOTPROD / _I8MM)
 * (hwcaps; base/cpu.c); the file itself is compiled for plain armv8-a.
 *
 * Exactness: the integer kernels return the reference's floats bit for bit (integer sums are
 * exact, the float steps are the reference's in its order), so every tile equals its vec_dot and
 * the reference. The float types sum in double like the reference, in two lanes instead of one
 * (held to the reference within the tests' tolerance). Blocks whose activation quantization could
 * differ from the reference (NaN, infinities) go to the reference block function.
 */
#include "kernels/quant_internal.h"
#include "kernels/quant_neon_tile.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <float.h>
#include <math.h>

/* The extensions' target attributes: GCC names an architecture with them (its arm_neon.h guards
 * the intrinsics with "arch=armv8.2-a+..."), clang the features. Clang before 16 declares the
 * SDOT / SMMLA intrinsics only for a whole-file -march: there the base kernels stand in. */
#if defined(__clang__) && __clang_major__ < 16
#define Q35_NEON_EXT 0
#else
#define Q35_NEON_EXT 1
#endif
#if defined(__clang__)
#define Q35_TARGET_DOTPROD __attribute__((target("dotprod")))
#define Q35_TARGET_I8MM __attribute__((target("dotprod,i8mm")))
#else
#define Q35_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define Q35_TARGET_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif

/* fp16 -> fp32 by the FP unit (FCVT; base Armv8-A): exact, the same value as q35_fp16_to_fp32
 * for every non-NaN input, without its branches */
static inline float h2f(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

/* ------------------------------ integer dot products ------------------------------ */

#define QN_TILE(name) Q35_NEON_TILE(QN_TARGET, QN(tile_##name), QN(mc_##name))

#define QN(name) name##_base
#define QN_TARGET
#define QN_DOTPROD 0
#include "kernels/quant_neon.inc"
#undef QN
#undef QN_TARGET
#undef QN_DOTPROD

#if Q35_NEON_EXT
#define QN(name) name##_dp
#define QN_TARGET Q35_TARGET_DOTPROD
#define QN_DOTPROD 1
#include "kernels/quant_neon.inc"
#undef QN
#undef QN_TARGET
#undef QN_DOTPROD
#endif

/* ------------------------------ float dot products ------------------------------ */

/* Widen 4 + 4 floats to double and accumulate their products (exact in double) in two lanes. */
static inline float64x2_t fma4_f64(float64x2_t acc, float32x4_t a, float32x4_t b, float64x2_t *acc_hi) {
  *acc_hi = vfmaq_f64(*acc_hi, vcvt_high_f64_f32(a), vcvt_high_f64_f32(b));
  return vfmaq_f64(acc, vcvt_f64_f32(vget_low_f32(a)), vcvt_f64_f32(vget_low_f32(b)));
}

/* kind 0: F32, 1: F16, 2: BF16 (inlined with a constant kind) */
static inline __attribute__((always_inline)) float32x4_t load4(const uint8_t *p, int64_t i, const int kind) {
  if (kind == 0) return vld1q_f32((const float *)(const void *)(p + 4 * i));
  const uint16x4_t h = vld1_u16((const uint16_t *)(const void *)(p + 2 * i));
  if (kind == 1) return vcvt_f32_f16(vreinterpret_f16_u16(h));
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

static inline __attribute__((always_inline)) float dot_float(int64_t n, const void *w, const void *x, const int kind) {
  const uint8_t *a = w, *b = x;
  float64x2_t s0 = vdupq_n_f64(0), s1 = vdupq_n_f64(0), s2 = vdupq_n_f64(0), s3 = vdupq_n_f64(0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = fma4_f64(s0, load4(a, i, kind), load4(b, i, kind), &s1);
    s2 = fma4_f64(s2, load4(a, i + 4, kind), load4(b, i + 4, kind), &s3);
  }
  double s = vaddvq_f64(vaddq_f64(vaddq_f64(s0, s2), vaddq_f64(s1, s3)));
  for (; i < n; i++) {
    float p, q;
    if (kind == 0) {
      memcpy(&p, a + 4 * i, 4);
      memcpy(&q, b + 4 * i, 4);
    } else {
      uint16_t hp, hq;
      memcpy(&hp, a + 2 * i, 2);
      memcpy(&hq, b + 2 * i, 2);
      p = kind == 1 ? q35_fp16_to_fp32(hp) : q35_bf16_to_fp32(hp);
      q = kind == 1 ? q35_fp16_to_fp32(hq) : q35_bf16_to_fp32(hq);
    }
    s += (double)p * q;
  }
  return (float)s;
}
static float dot_f32_neon(int64_t n, const void *w, const void *x) { return dot_float(n, w, x, 0); }
static float dot_f16_neon(int64_t n, const void *w, const void *x) { return dot_float(n, w, x, 1); }
static float dot_bf16_neon(int64_t n, const void *w, const void *x) { return dot_float(n, w, x, 2); }

/* ------------------------------ activation quantizers ------------------------------ */

/* Q8_0: the reference's d and round-half-even (FCVTNS) with saturating narrows; a block with a
 * NaN or an infinity in it or in its scaled values (where x86's conversion semantics matter:
 * it turns both into INT32_MIN) goes to the reference. */
static void q8_0_block_neon(const float *x, blk_q8_0 *y) {
  float32x4_t v[8], m = vdupq_n_f32(0);
  for (int j = 0; j < 8; j++) {
    v[j] = vld1q_f32(x + 4 * j);
    m = vmaxq_f32(m, vabsq_f32(v[j]));
  }
  const float amax = vmaxvq_f32(m); /* NaN if any lane is NaN */
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  if (!(amax <= FLT_MAX) || !(id <= FLT_MAX)) { /* (a tiny amax overflows id: inf * x) */
    q35_quantize_q8_0_block_ref(x, y);
    return;
  }
  const float d = amax / 127.f;
  y->d = q35_fp32_to_fp16(d);
  for (int j = 0; j < 8; j += 2) {
    const int16x8_t h = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[j], id))),
                                     vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[j + 1], id))));
    vst1_s8(y->qs + 4 * j, vqmovn_s16(h));
  }
}

static void quant_q8_0_neon(const float *x, void *dst, int64_t n) {
  blk_q8_0 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++) q8_0_block_neon(x + i * QK8_0, &y[i]);
}
static void quant_q8_0x_neon(const float *x, void *dst, int64_t n) {
  q35_act_quantize(Q35_TYPE_Q8_0X, x, dst, n, q8_0_block_neon);
}
static void quant_q8_0y_neon(const float *x, void *dst, int64_t n) {
  q35_act_quantize(Q35_TYPE_Q8_0Y, x, dst, n, q8_0_block_neon);
}

/* Q8_K: the reference's scale from the first element of largest magnitude, round-half-even
 * (FCVTNS, the reference's nearest_int for |v| <= 127), 16-element sums by ADDLV. */
static void q8_k_block_neon(const float *x, blk_q8_k *y) {
  float32x4_t m = vdupq_n_f32(0);
  for (int j = 0; j < QK_K; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
  const float amax = vmaxvq_f32(m);
  if (!(amax <= FLT_MAX) || amax == 0.0f) { /* NaN / infinity, or all zeros: the reference */
    q35_quantize_q8_k_block_ref(x, y);
    return;
  }
  int j0 = 0;
  while (fabsf(x[j0]) != amax) j0++;
  const float iscale = -127.f / x[j0];
  if (!(fabsf(iscale) <= FLT_MAX)) { /* a tiny maximum: the scaled values overflow */
    q35_quantize_q8_k_block_ref(x, y);
    return;
  }
  for (int j = 0; j < QK_K; j += 16) {
    int16x8_t h[2];
    for (int t = 0; t < 2; t++)
      h[t] = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 8 * t), iscale))),
                          vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 8 * t + 4), iscale))));
    const int8x16_t q = vminq_s8(vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])), vdupq_n_s8(127));
    vst1q_s8(y->qs + j, q);
    y->bsums[j / 16] = (int16_t)vaddlvq_s8(q);
  }
  y->d = 1 / iscale;
}

static void quant_q8_k_neon(const float *x, void *dst, int64_t n) {
  blk_q8_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++) q8_k_block_neon(x + i * QK_K, &y[i]);
}

#if Q35_NEON_EXT
/* ------------------------------ i8mm tiles ------------------------------ */
/*
 * SMMLA multiplies a 2 x 8 by an 8 x 2 int8 matrix into 2 x 2 int32 lanes [r0c0, r0c1, r1c0,
 * r1c1]: two weight rows' 8 bytes against two activation columns' 8 bytes. A 2 x 2 tile takes
 * each block's four exact sums from one accumulator, then each (row, column) goes through the
 * reference's float steps (lane by lane, in block order), so a tile equals its four vec_dots.
 */
#define I8MM Q35_TARGET_I8MM

/* The two 8-byte halves of a and b interleaved: {a[0..7], b[0..7]} and {a[8..15], b[8..15]}. */
I8MM static inline int8x16_t zlo(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
I8MM static inline int8x16_t zhi(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
/* acc + the 2 x 2 sums of 16 elements: rows (a0, a1), columns (b0, b1) */
I8MM static inline int32x4_t mm16(int32x4_t acc, int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
  acc = vmmlaq_s32(acc, zlo(a0, a1), zlo(b0, b1));
  return vmmlaq_s32(acc, zhi(a0, a1), zhi(b0, b1));
}

/* the float steps of four (row, column) pairs: s[l] += (float)isum[l] * (wd_r * xd_c) */
I8MM static inline float32x4_t scale4(float32x4_t s, int32x4_t isum, float wd0, float wd1, float xd0, float xd1) {
  const float32x4_t wd = {wd0, wd0, wd1, wd1}, xd = {xd0, xd1, xd0, xd1};
  return vaddq_f32(s, vmulq_f32(vcvtq_f32_s32(isum), vmulq_f32(wd, xd)));
}

static inline void store4(float *o, size_t ors, size_t ocs, float32x4_t s) {
  o[0] = vgetq_lane_f32(s, 0);
  o[ocs] = vgetq_lane_f32(s, 1);
  o[ors] = vgetq_lane_f32(s, 2);
  o[ors + ocs] = vgetq_lane_f32(s, 3);
}

I8MM static void q4_0_2x2(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *o, size_t ors,
                          size_t ocs) {
  const blk_q4_0 *a0 = (const blk_q4_0 *)(const void *)w, *a1 = (const blk_q4_0 *)(const void *)(w + ws);
  const int64_t nb = n / QK8_0;
  const uint8x16_t m4 = vdupq_n_u8(0xF);
  float32x4_t s = vdupq_n_f32(0);
  for (int64_t i = 0; i < nb; i++) {
    int k, p;
    const uint8_t *g0 = q8x_at(x, nb, i, &k, &p), *g1 = g0 + xs;
    const uint8x16_t q0 = vld1q_u8(a0[i].qs), q1 = vld1q_u8(a1[i].qs);
    const int32_t f0 = vaddvq_s32(vld1q_s32((const int32_t *)(const void *)(g0 + 32 * k + 16 * p)));
    const int32_t f1 = vaddvq_s32(vld1q_s32((const int32_t *)(const void *)(g1 + 32 * k + 16 * p)));
    int32x4_t acc = {f0, f1, f0, f1};
    acc = mm16(acc, vreinterpretq_s8_u8(vandq_u8(q0, m4)), vreinterpretq_s8_u8(vandq_u8(q1, m4)),
               vld1q_s8((const int8_t *)(g0 + 16 * p)), vld1q_s8((const int8_t *)(g1 + 16 * p)));
    acc = mm16(acc, vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)),
               vld1q_s8((const int8_t *)(g0 + 16 * k + 16 * p)), vld1q_s8((const int8_t *)(g1 + 16 * k + 16 * p)));
    float d0, d1;
    memcpy(&d0, g0 + 48 * k + 16 * p, 4);
    memcpy(&d1, g1 + 48 * k + 16 * p, 4);
    s = scale4(s, acc, h2f(a0[i].d), h2f(a1[i].d), d0, d1);
  }
  store4(o, ors, ocs, s);
}

I8MM static void q8_0_2x2(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *o, size_t ors,
                          size_t ocs) {
  const blk_q8_0 *a0 = (const blk_q8_0 *)(const void *)w, *a1 = (const blk_q8_0 *)(const void *)(w + ws);
  const int64_t nb = n / QK8_0;
  float32x4_t s = vdupq_n_f32(0);
  for (int64_t i = 0; i < nb; i++) {
    int k, p;
    const uint8_t *g0 = q8y_at(x, nb, i, &k, &p), *g1 = g0 + xs;
    const int8_t *y0 = (const int8_t *)(g0 + 32 * p), *y1 = (const int8_t *)(g1 + 32 * p);
    int32x4_t acc = mm16(vdupq_n_s32(0), vld1q_s8(a0[i].qs), vld1q_s8(a1[i].qs), vld1q_s8(y0), vld1q_s8(y1));
    acc = mm16(acc, vld1q_s8(a0[i].qs + 16), vld1q_s8(a1[i].qs + 16), vld1q_s8(y0 + 16), vld1q_s8(y1 + 16));
    float d0, d1;
    memcpy(&d0, g0 + 64 * k + 32 * p, 4);
    memcpy(&d1, g1 + 64 * k + 32 * p, 4);
    s = scale4(s, acc, h2f(a0[i].d), h2f(a1[i].d), d0, d1);
  }
  store4(o, ors, ocs, s);
}

typedef void (*tile22_fn)(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *o, size_t ors,
                          size_t ocs);

/* 2 x 2 tiles over the pairs of rows and columns; the odd row and column by the dotprod vec_dot
 * (the same bits). */
static inline __attribute__((always_inline)) void tile_2x2(tile22_fn t22, q35_vec_dot_fn vd, int64_t n, const void *wv,
                                                           size_t ws, int nr, const void *xv, size_t xs, int nc,
                                                           float *o, size_t ors, size_t ocs) {
  const uint8_t *w = wv, *x = xv;
  int r = 0;
  for (; r + 2 <= nr; r += 2) {
    int c = 0;
    for (; c + 2 <= nc; c += 2) t22(n, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs, o + r * ors + c * ocs, ors, ocs);
    for (; c < nc; c++)
      for (int rr = r; rr < r + 2; rr++) o[rr * ors + c * ocs] = vd(n, w + (size_t)rr * ws, x + (size_t)c * xs);
  }
  for (; r < nr; r++)
    for (int c = 0; c < nc; c++) o[r * ors + c * ocs] = vd(n, w + (size_t)r * ws, x + (size_t)c * xs);
}

static void tile_q4_0_i8mm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *o,
                           size_t ors, size_t ocs) {
  tile_2x2(q4_0_2x2, dot_q4_0_dp, n, w, ws, nr, x, xs, nc, o, ors, ocs);
}
static void tile_q8_0_i8mm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *o,
                           size_t ors, size_t ocs) {
  tile_2x2(q8_0_2x2, dot_q8_0_dp, n, w, ws, nr, x, xs, nc, o, ors, ocs);
}

#endif /* Q35_NEON_EXT */

/* ------------------------------ the table ------------------------------ */

void q35_kernels_neon(q35_kernels *k) {
#if Q35_NEON_EXT
  const int dp = q35_cpu_has(Q35_CPU_DOTPROD), mm = dp && q35_cpu_has(Q35_CPU_I8MM);
#define PICK(T, f) (k->vec_dot[T] = dp ? f##_dp : f##_base, k->tile[T] = dp ? tile_##f##_dp : tile_##f##_base)
#else
#define PICK(T, f) (k->vec_dot[T] = f##_base, k->tile[T] = tile_##f##_base)
#endif
  PICK(Q35_TYPE_Q4_0, dot_q4_0);
  PICK(Q35_TYPE_Q8_0, dot_q8_0);
  PICK(Q35_TYPE_Q5_0, dot_q5_0);
  PICK(Q35_TYPE_Q4_K, dot_q4_k);
  PICK(Q35_TYPE_Q5_K, dot_q5_k);
  PICK(Q35_TYPE_Q6_K, dot_q6_k);
  PICK(Q35_TYPE_IQ4_XS, dot_iq4_xs);
#undef PICK
  k->vec_dot[Q35_TYPE_F32] = dot_f32_neon;
  k->vec_dot[Q35_TYPE_F16] = dot_f16_neon;
  k->vec_dot[Q35_TYPE_BF16] = dot_bf16_neon;
#if Q35_NEON_EXT
  if (mm) { /* i8mm (Armv8.6) CPUs have dotprod (mandatory from Armv8.4) */
    k->tile[Q35_TYPE_Q4_0] = tile_q4_0_i8mm;
    k->tile[Q35_TYPE_Q8_0] = tile_q8_0_i8mm;
  }
#endif
  k->quantize[Q35_TYPE_Q8_0] = quant_q8_0_neon;
  k->quantize[Q35_TYPE_Q8_0X] = quant_q8_0x_neon;
  k->quantize[Q35_TYPE_Q8_0Y] = quant_q8_0y_neon;
  k->quantize[Q35_TYPE_Q8_K] = quant_q8_k_neon;
  q35_kernels_lowbit_neon(k);
  q35_kernels_iq_neon(k);
}

#else /* not aarch64: no NEON level (quant.c never asks) */
void q35_kernels_neon(q35_kernels *k) { (void)k; }
#endif
