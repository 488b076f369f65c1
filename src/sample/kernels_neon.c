/*
 * kernels_neon.c - the aarch64 NEON twins of the sampling head's scalar kernels
 * (kernels_scalar.c), bit for bit. exp4 is the scalar exp's sequence of correctly rounded
 * operations (fmaf -> FMLA, the same subtraction, product and comparison) lane by lane; the
 * division by the temperature is FDIV, correctly rounded like the scalar one. Weights are summed
 * as exact integers (W = trunc(w * 2^61) split into 32-bit halves summed in 64-bit lanes), so
 * the order of lanes does not matter. Where a kernel's output is a list in index order (filters,
 * the window, the one pass), whole vectors with nothing to report are skipped with a compare
 * and the rest goes through the scalar kernel's own per-element step. sample_internal.h calls
 * these at Q35_SIMD_NEON.
 */
#include "sample/sample_internal.h"

#if defined(__aarch64__)
#include <arm_neon.h>

/* sample_exp of 4 lanes (x <= 0; below EXP_MIN: 0) */
static inline float32x4_t exp4(float32x4_t x) {
  const float32x4_t rnd = vdupq_n_f32(EXP_ROUND);
  const float32x4_t n = vsubq_f32(vfmaq_f32(rnd, x, vdupq_n_f32(EXP_LOG2E)), rnd);
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(EXP_LN2HI)); /* x - n * hi, fused */
  r = vfmsq_f32(r, n, vdupq_n_f32(EXP_LN2LO));
  float32x4_t q = vfmaq_f32(vdupq_n_f32(EXP_C6), vdupq_n_f32(EXP_C7), r);
  q = vfmaq_f32(vdupq_n_f32(EXP_C5), q, r);
  q = vfmaq_f32(vdupq_n_f32(EXP_C4), q, r);
  q = vfmaq_f32(vdupq_n_f32(EXP_C3), q, r);
  q = vfmaq_f32(vdupq_n_f32(EXP_C2), q, r);
  q = vfmaq_f32(vdupq_n_f32(1.0f), q, r);
  q = vfmaq_f32(vdupq_n_f32(1.0f), q, r);
  const int32x4_t ni = vcvtq_s32_f32(n); /* integral already: truncation is exact */
  const float32x4_t scale = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(ni, vdupq_n_s32(EXP_BIAS)), 23));
  const uint32x4_t keep = vmvnq_u32(vcltq_f32(x, vdupq_n_f32(EXP_MIN))); /* not x < EXP_MIN */
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(q, scale)), keep));
}

/* (l - m) / temp, then exp: the scalar kernels' w */
static inline float32x4_t w4(const float *l, float32x4_t m, float32x4_t temp) {
  return exp4(vdivq_f32(vsubq_f32(vld1q_f32(l), m), temp));
}

/* W = trunc(w * 2^61) of 4 lanes (0 <= w <= 1) added to the 32-bit halves' 64-bit lane sums */
static inline void fix_acc(float32x4_t w, uint64x2_t *lo, uint64x2_t *hi) {
  const float32x4_t s = vmulq_n_f32(w, FIX_SCALE);
  const uint64x2_t a = vreinterpretq_u64_s64(vcvtq_s64_f64(vcvt_f64_f32(vget_low_f32(s))));
  const uint64x2_t b = vreinterpretq_u64_s64(vcvtq_s64_f64(vcvt_high_f64_f32(s)));
  const uint32x4_t l32 = vuzp1q_u32(vreinterpretq_u32_u64(a), vreinterpretq_u32_u64(b));
  const uint32x4_t h32 = vuzp2q_u32(vreinterpretq_u32_u64(a), vreinterpretq_u32_u64(b));
  *lo = vpadalq_u32(*lo, l32);
  *hi = vpadalq_u32(*hi, h32);
}

static inline u128 fix_total(uint64x2_t lo, uint64x2_t hi) {
  const u128 l = (u128)vgetq_lane_u64(lo, 0) + vgetq_lane_u64(lo, 1);
  const u128 h = (u128)vgetq_lane_u64(hi, 0) + vgetq_lane_u64(hi, 1);
  return (h << 32) + l;
}

/* lanes of a compare mask set? */
static inline int any4(uint32x4_t m) { return vmaxvq_u32(m) != 0; }

float sample_scan_neon(const float *l, int32_t n, int32_t *bad) {
  float32x4_t m = vdupq_n_f32(-INFINITY);
  const float32x4_t inf = vdupq_n_f32(INFINITY);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(l + i);
    /* NaN (x != x) or +inf: the scalar kernel reports the first from here */
    if (any4(vorrq_u32(vmvnq_u32(vceqq_f32(x, x)), vceqq_f32(x, inf)))) break;
    m = vmaxq_f32(m, x);
  }
  const float vm = vmaxvq_f32(m);
  const float rest = sample_scan_scalar(l + i, n - i, bad);
  if (*bad >= 0) *bad += i;
  return rest > vm ? rest : vm;
}

int32_t sample_find_eq_neon(const float *l, int32_t n, float v) {
  const float32x4_t vv = vdupq_n_f32(v);
  int32_t i = 0;
  for (; i + 4 <= n; i += 4)
    if (any4(vceqq_f32(vld1q_f32(l + i), vv))) break;
  const int32_t r = sample_find_eq_scalar(l + i, n - i, v);
  return r < 0 ? -1 : r + i;
}

int32_t sample_filter_ge_neon(const float *l, int32_t n, float t, int32_t *ids) {
  const float32x4_t vt = vdupq_n_f32(t);
  int32_t c = 0, i = 0;
  for (; i + 4 <= n; i += 4) {
    if (!any4(vcgeq_f32(vld1q_f32(l + i), vt))) continue;
    for (int32_t k = i; k < i + 4; k++)
      if (l[k] >= t) ids[c++] = k;
  }
  for (; i < n; i++)
    if (l[i] >= t) ids[c++] = i;
  return c;
}

void sample_exp_row_neon(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum) {
  const float32x4_t vm = vdupq_n_f32(m), vt = vdupq_n_f32(temp);
  for (int32_t b = 0; b * BLOCK < n; b++) {
    const int32_t e = block_end(b, BLOCK, n);
    uint64x2_t lo = vdupq_n_u64(0), hi = vdupq_n_u64(0);
    int32_t i = b * BLOCK;
    for (; i + 4 <= e; i += 4) {
      const float32x4_t x = w4(l + i, vm, vt);
      vst1q_f32(w + i, x);
      fix_acc(x, &lo, &hi);
    }
    u128 acc = fix_total(lo, hi);
    for (; i < e; i++) {
      w[i] = sample_exp((l[i] - m) / temp);
      acc += fix_w(w[i]);
    }
    bsum[b] = acc;
  }
}

u128 sample_wsum_ge_neon(const float *a, int32_t n, float cut) {
  const float32x4_t vc = vdupq_n_f32(cut);
  uint64x2_t lo = vdupq_n_u64(0), hi = vdupq_n_u64(0);
  int32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float32x4_t x = vld1q_f32(a + j);
    const uint32x4_t k = vcgeq_f32(x, vc);
    if (any4(k)) fix_acc(vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), k)), &lo, &hi);
  }
  return fix_total(lo, hi) + sample_wsum_ge_scalar(a + j, n - j, cut);
}

void sample_block_sums_neon(const float *w, int32_t n, float cut, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++)
    bsum[b] = sample_wsum_ge_neon(w + b * BLOCK, block_end(b, BLOCK, n) - b * BLOCK, cut);
}

int32_t sample_window_neon(const float *a, int32_t n, float lo, float hi, float *out, u128 *m_above,
                           u128 *m_in) {
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  uint64x2_t al = vdupq_n_u64(0), ah = vdupq_n_u64(0);
  u128 in = 0, ab = 0;
  int32_t c = 0, i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(a + i);
    const uint32x4_t above = vcgtq_f32(x, vhi);
    fix_acc(vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), above)), &al, &ah);
    if (!any4(vbicq_u32(vcgeq_f32(x, vlo), above))) continue;
    for (int32_t k = i; k < i + 4; k++)
      if (!(a[k] > hi) && a[k] >= lo) {
        in += fix_w(a[k]);
        out[c++] = a[k];
      }
  }
  u128 tab, tin;
  c += sample_window_scalar(a + i, n - i, lo, hi, out + c, &tab, &tin);
  ab = fix_total(al, ah) + tab;
  *m_above = ab;
  *m_in = in + tin;
  return c;
}

void sample_exp_array_neon(const float *x, float *y, int32_t n) {
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp4(vld1q_f32(x + i)));
  for (; i < n; i++) y[i] = sample_exp(x[i]);
}

float sample_scan_chunks_neon(const float *l, int32_t n, float *cmax, int32_t *bad) {
  float m = -INFINITY;
  *bad = -1;
  const float32x4_t inf = vdupq_n_f32(INFINITY);
  for (int32_t b = 0; b * CHUNK < n; b++) {
    const int32_t s = b * CHUNK, e = block_end(b, CHUNK, n);
    float32x4_t bm = vdupq_n_f32(-INFINITY);
    int32_t i = s;
    for (; i + 4 <= e; i += 4) {
      const float32x4_t x = vld1q_f32(l + i);
      if (any4(vorrq_u32(vmvnq_u32(vceqq_f32(x, x)), vceqq_f32(x, inf)))) break;
      bm = vmaxq_f32(bm, x);
    }
    float bmax = vmaxvq_f32(bm);
    for (; i < e; i++) {
      const float x = l[i];
      if (x != x || x == INFINITY) {
        *bad = i;
        return m;
      }
      if (x > bmax) bmax = x;
    }
    cmax[b] = bmax;
    if (bmax > m) m = bmax;
  }
  return m;
}

int32_t sample_fused_neon(const float *l, int32_t n, float m, float temp, float lo, float hi,
                          u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  const float32x4_t vm = vdupq_n_f32(m), vt = vdupq_n_f32(temp), vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  uint64x2_t tl = vdupq_n_u64(0), th = vdupq_n_u64(0);
  u128 tot = 0;
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    const int32_t e = block_end(b, BLOCK, n);
    uint64x2_t al = vdupq_n_u64(0), ah = vdupq_n_u64(0);
    u128 acc = 0;
    cstart[b] = c;
    int32_t i = b * BLOCK;
    for (; i + 4 <= e; i += 4) {
      const float32x4_t w = w4(l + i, vm, vt);
      fix_acc(w, &tl, &th);
      const uint32x4_t above = vcgtq_f32(w, vhi);
      fix_acc(vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(w), above)), &al, &ah);
      if (!any4(vbicq_u32(vcgeq_f32(w, vlo), above))) continue;
      float t[4];
      vst1q_f32(t, w);
      for (int k = 0; k < 4; k++)
        if (!(t[k] > hi) && t[k] >= lo) cw[c++] = t[k];
    }
    for (; i < e; i++) {
      const float w = sample_exp((l[i] - m) / temp);
      const uint64_t W = fix_w(w);
      tot += W;
      if (w > hi) acc += W;
      else if (w >= lo) cw[c++] = w;
    }
    bsum[b] = acc + fix_total(al, ah);
  }
  *total = tot + fix_total(tl, th);
  return c;
}

#endif /* __aarch64__ */
