/*
 * quantize_fit.h - the scale searches the weight quantizers share (quantize_weights.c,
 * quantize_lowbit.c): a (sub-)block x[0..n) with element weights w[0..n) is fitted by a grid
 * of integer levels times a scale (and, for the affine types, plus an offset).
 *
 * Each search tries a handful of candidate inverse scales (the block's range mapped onto the
 * grid, stretched a little either way), rounds every element at each, and keeps the candidate
 * whose rounding has the least weighted squared error at its own least-squares scale. That error
 * has a closed form for a fixed rounding (symmetric: sxx - sxl^2 / sll; affine: sxx - (a sxl +
 * b sx) at the normal equations' a, b), so one pass over the block per candidate suffices, in
 * float (n <= 32). Rounding is to nearest, ties to even, by the float magic-number trick
 * (|v| < 2^22), which compilers vectorise where lrintf would not.
 *
 * Weights: 1 (plain squared error), or with an importance vector qw (llama.cpp's imatrix: mean
 * squared activation per column) the forms ggml's quantizers use, built by the callers.
 */
#ifndef Q35_QUANTIZE_FIT_H
#define Q35_QUANTIZE_FIT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant_blocks.h"

/* round to nearest, ties to even; v is first clamped to +-(2^22 - 1) (NaN to the lower end) */
static inline int q35_nearest_int(float v) {
  v = !(v >= -4194303.0f) ? -4194303.0f : v > 4194303.0f ? 4194303.0f : v; /* no libm call */
  const float t = v + 12582912.0f; /* 1.5 * 2^23: the integer lands in the low mantissa bits */
  int32_t i;
  memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

static inline int q35_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The same in float: round to nearest even, clamped to [lo, hi] (NaN to lo), without leaving the
 * float domain, so that the candidate loops below vectorise (|v| >= 2^22 rounds wrongly but is
 * clamped to the right end anyway). */
static inline float q35_round_clampf(float v, float lo, float hi) {
  const float r = (v + 12582912.0f) - 12582912.0f;
  return !(r >= lo) ? lo : r > hi ? hi : r;
}

/* The element of largest magnitude (the first of equals; 0 if none is non-zero and finite). */
static inline float q35_signed_absmax(const float *x, int n) {
  float max = 0, a = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > a && isfinite(x[i])) {
      a = fabsf(x[i]);
      max = x[i];
    }
  return max;
}

/* Symmetric grid x ~ d * l, l in [lo, hi]: the signed absmax element mapped to each of the nt
 * targets tg[] (values near lo or hi), the rounding of best closed-form score; returns its
 * least-squares d (0 for a zero block). n is a multiple of 4 (<= 32): the sums run in 4 lanes. */
static inline float q35_fit_sym(const float *x, const float *w, int n, int lo, int hi, const float *tg, int nt) {
  const float max = q35_signed_absmax(x, n);
  if (max == 0) return 0;
  float wx[32];
  for (int i = 0; i < n; i++) wx[i] = w[i] * x[i];
  float best = -1, best_d = max / (float)lo;
  for (int c = 0; c < nt; c++) {
    const float t = tg[c] / max;
    float axl[4] = {0, 0, 0, 0}, all[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i += 4)
      for (int k = 0; k < 4; k++) {
        const float l = q35_round_clampf(t * x[i + k], (float)lo, (float)hi);
        axl[k] += wx[i + k] * l;
        all[k] += w[i + k] * l * l;
      }
    const float sxl = (axl[0] + axl[1]) + (axl[2] + axl[3]), sll = (all[0] + all[1]) + (all[2] + all[3]);
    if (sll > 0 && sxl * sxl > best * sll) {
      const float d = sxl / sll;
      if (d == 0 || !isfinite(d)) continue;
      best = sxl * sxl / sll;
      best_d = d;
    }
  }
  return best_d;
}

/* Affine grid x ~ a * l + b, l in [0, nmax], a >= 0; with neg_offset b <= 0 (the K-quants store -b
 * as an unsigned min). Candidates: the range [min, max] (min clamped to <= 0 with neg_offset)
 * mapped onto nmax + step * c levels, c_lo <= c <= c_hi; the rounding of best closed-form score
 * gives a, b by weighted least squares. A constant or zero block gives a = 0, b = its value
 * (or a = max / nmax, b = 0 for a positive constant with neg_offset). n as for q35_fit_sym. */
static inline void q35_fit_aff(const float *x, const float *w, int n, int nmax, int neg_offset, int c_lo, int c_hi,
                               float step, float *a_out, float *b_out) {
  float mn = INFINITY, mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if (isfinite(x[i])) {
      mn = fminf(mn, x[i]);
      mx = fmaxf(mx, x[i]);
    }
  if (mn > mx) mn = mx = 0;
  if (neg_offset && mn > 0) mn = 0;
  *a_out = 0;
  *b_out = mn;
  if (!(mx > mn) || !isfinite(mx - mn)) return;
  float sw = 0, swx = 0, wx[32], xm[32];
  for (int i = 0; i < n; i++) {
    sw += w[i];
    swx += w[i] * x[i];
    wx[i] = w[i] * x[i];
    xm[i] = x[i] - mn;
  }
  float best = -INFINITY, best_a = (mx - mn) / (float)nmax, best_b = mn;
  for (int c = c_lo; c <= c_hi; c++) {
    const float t = ((float)nmax + step * (float)c) / (mx - mn);
    float al[4] = {0, 0, 0, 0}, all[4] = {0, 0, 0, 0}, axl[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i += 4)
      for (int k = 0; k < 4; k++) {
        const float l = q35_round_clampf(t * xm[i + k], 0, (float)nmax);
        al[k] += w[i + k] * l;
        all[k] += w[i + k] * l * l;
        axl[k] += wx[i + k] * l;
      }
    const float sl = (al[0] + al[1]) + (al[2] + al[3]), sll = (all[0] + all[1]) + (all[2] + all[3]);
    const float sxl = (axl[0] + axl[1]) + (axl[2] + axl[3]);
    const float det = sw * sll - sl * sl;
    if (!(det > 1e-5f * sw * sll)) continue; /* all levels equal (a constant block): no line to fit */
    float a = (sw * sxl - sl * swx) / det, b = (sll * swx - sl * sxl) / det;
    if (neg_offset && b > 0) {
      b = 0;
      a = sxl / sll;
    }
    if (!(a > 0) || !isfinite(a)) continue;
    const float g = a * sxl + b * swx; /* sxx - error at (a, b) */
    if (g > best) {
      best = g;
      best_a = a;
      best_b = b;
    }
  }
  *a_out = best_a;
  *b_out = best_b;
}

/* The plain (unweighted, w = 1) fits: ggml's one-scale start (the block's extreme mapped onto the
 * grid's end, as its reference quantizers do), then `iters` rounds of the closed-form
 * least-squares rescale for the rounded levels followed by a re-rounding at the new scale. Each
 * step can only lower the error (least squares is optimal for fixed levels, rounding to nearest
 * for a fixed scale), so the result is never worse than ggml's start, up to the fp16 storage of
 * the scale. A few passes over the block instead of a candidate search: ggml_quantize_chunk's
 * speed.
 *
 * The passes over the block (q35_plain_*) have SIMD twins (quantize_plain_avx2.c) that must give
 * the same bits, so their sums have a fixed order: n is 16 or 32, element i goes to lane i % 8,
 * each lane adds its elements in index order (from +0), and the 8 lanes are folded as a 256-bit
 * register is: lane k + lane k+4, then k + k+2, then 0 + 1 (q35_fold8). The glue (the scalar
 * arithmetic between the passes) is shared: quantize_fit_plain.inc, included with the passes'
 * names. Non-finite values count as 0 in the extremes; a block holding one keeps
 * its start (its sums are not finite). */

/* least-squares rounds after the start: the symmetric fits converge after one (0.98 of ggml's rms
 * on test_quant_peer's rows after 1, 2 or 3), the affine ones keep gaining (q4_1: 0.87, 0.84, 0.82) */
#define Q35_PLAIN_ITERS_SYM 1
#define Q35_PLAIN_ITERS_AFF 1

static inline float q35_fold8(const float s[8]) {
  const float h0 = s[0] + s[4], h1 = s[1] + s[5], h2 = s[2] + s[6], h3 = s[3] + s[7];
  return (h0 + h2) + (h1 + h3);
}

/* largest and least value, non-finite ones as 0 (so mx >= +0 >= mn; no -0 survives) */
static inline void q35_plain_ext_sym(const float *x, int n, float *mx_out, float *mn_out) {
  float mx = 0, mn = 0;
  for (int i = 0; i < n; i++) {
    const float v = fabsf(x[i]) <= 3.40282347e38f ? x[i] : 0.0f;
    mx = v > mx ? v : mx;
    mn = v < mn ? v : mn;
  }
  *mx_out = mx + 0.0f;
  *mn_out = mn + 0.0f;
}

/* sum x l and sum l l of l = round_clampf(t x, lo, hi) */
static inline void q35_plain_pass_sym(const float *x, int n, float t, float lo, float hi, float *sxl, float *sll) {
  float axl[8] = {0, 0, 0, 0, 0, 0, 0, 0}, all[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i += 8)
    for (int k = 0; k < 8; k++) {
      const float l = q35_round_clampf(t * x[i + k], lo, hi);
      axl[k] += x[i + k] * l;
      all[k] += l * l;
    }
  *sxl = q35_fold8(axl);
  *sll = q35_fold8(all);
}

/* least and largest finite value (+-0 as +0; min > max if none), and the sum of all values */
static inline void q35_plain_ext_aff(const float *x, int n, float *mn_out, float *mx_out, float *sum_out) {
  float mn = INFINITY, mx = -INFINITY, sx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i += 8)
    for (int k = 0; k < 8; k++) {
      const float v = x[i + k], f = fabsf(v) <= 3.40282347e38f;
      mn = f && v < mn ? v : mn;
      mx = f && v > mx ? v : mx;
      sx[k] += v;
    }
  *mn_out = mn + 0.0f;
  *mx_out = mx + 0.0f;
  *sum_out = q35_fold8(sx);
}

/* sum l, sum l l, sum x l of l = round_clampf(t (x - b), 0, nmax) */
static inline void q35_plain_pass_aff(const float *x, int n, float t, float b, float nmax, float *sl, float *sll,
                                      float *sxl) {
  float al[8] = {0, 0, 0, 0, 0, 0, 0, 0}, all[8] = {0, 0, 0, 0, 0, 0, 0, 0}, axl[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i += 8)
    for (int k = 0; k < 8; k++) {
      const float l = q35_round_clampf(t * (x[i + k] - b), 0, nmax);
      al[k] += l;
      all[k] += l * l;
      axl[k] += x[i + k] * l;
    }
  *sl = q35_fold8(al);
  *sll = q35_fold8(all);
  *sxl = q35_fold8(axl);
}

/* the glue: q35_fit_sym_plain / q35_fit_aff_plain (see quantize_fit_plain.inc) */
#define QFP_ATTR
#define QFP_EXT_SYM q35_plain_ext_sym
#define QFP_PASS_SYM q35_plain_pass_sym
#define QFP_EXT_AFF q35_plain_ext_aff
#define QFP_PASS_AFF q35_plain_pass_aff
#define QFP_FIT_SYM q35_fit_sym_plain
#define QFP_FIT_AFF q35_fit_aff_plain
#include "kernels/quantize_fit_plain.inc"
#undef QFP_ATTR
#undef QFP_EXT_SYM
#undef QFP_PASS_SYM
#undef QFP_EXT_AFF
#undef QFP_PASS_AFF
#undef QFP_FIT_SYM
#undef QFP_FIT_AFF

/* The levels of a block of 32 at the stored scale d: symmetric biased by -lo into [0, hi - lo]
 * (all -lo for d = 0), affine (x - m) / d in [0, nmax] (all 0 unless d > 0). */
static inline void q35_plain_levels_sym(const float *x, float d, int lo, int hi, uint8_t *L) {
  const float id = d != 0 ? 1.0f / d : 0;
  if (id == 0) {
    memset(L, -lo, 32);
    return;
  }
  for (int j = 0; j < 32; j++) L[j] = (uint8_t)(int)(q35_round_clampf(x[j] * id, (float)lo, (float)hi) - (float)lo);
}

static inline void q35_plain_levels_aff(const float *x, float d, float m, int nmax, uint8_t *L) {
  const float id = d > 0 ? 1.0f / d : 0;
  if (!(id > 0)) {
    memset(L, 0, 32);
    return;
  }
  for (int j = 0; j < 32; j++) L[j] = (uint8_t)(int)q35_round_clampf((x[j] - m) * id, 0, (float)nmax);
}

/* Index of the IQ4 code book value (q35_kvalues_iq4nl, sorted) nearest to v, ties to the lower
 * one: a 4-step binary search over the midpoints between consecutive values. */
static inline int q35_iq4_nearest(float v) {
  const int8_t *kv = q35_kvalues_iq4nl;
  int i = 0;
  for (int step = 8; step > 0; step >>= 1)
    if (v > 0.5f * (float)(kv[i + step - 1] + kv[i + step])) i += step;
  return i;
}

/* IQ4 scale for a block of n: x ~ d * kv[l]; the largest-magnitude element mapped near either end
 * of the code book (-133 .. -109 and 107 .. 117 in steps of 2), the rounding of best closed-form
 * weighted score; returns its least-squares d (0 for a zero block). */
static inline float q35_fit_iq4(const float *x, const float *w, int n) {
  const float max = q35_signed_absmax(x, n);
  if (max == 0) return 0;
  float best = -1, best_d = max / -127.f;
  for (int c = 0; c < 16; c++) {
    const float target = c < 10 ? -127.f + 2.0f * (float)(c - 3) : 113.f + 2.0f * (float)(c - 13);
    const float t = target / max;
    float axk[4] = {0, 0, 0, 0}, akk[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i += 4)
      for (int j = 0; j < 4; j++) {
        const float k = (float)q35_kvalues_iq4nl[q35_iq4_nearest(t * x[i + j])];
        axk[j] += w[i + j] * x[i + j] * k;
        akk[j] += w[i + j] * k * k;
      }
    const float sxk = (axk[0] + axk[1]) + (axk[2] + axk[3]), skk = (akk[0] + akk[1]) + (akk[2] + akk[3]);
    if (skk > 0 && sxk * sxk > best * skk) {
      const float d = sxk / skk;
      if (d == 0 || !isfinite(d)) continue;
      best = sxk * sxk / skk;
      best_d = d;
    }
  }
  return best_d;
}

/* Element weights qw[i] * sqrt(sigma2 + x[i]^2) (ggml's importance form), or 1 without qw. */
static inline void q35_importance_weights(const float *x, const float *qw, int n, float sigma2, float *w) {
  for (int i = 0; i < n; i++) w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : 1.0f;
}

/* mean x^2 of n values (finite ones) */
static inline float q35_mean_sq(const float *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(x[i])) s += (double)x[i] * x[i];
  return n ? (float)(s / (double)n) : 0.0f;
}

#endif
