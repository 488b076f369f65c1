/*
 * kernels_scalar.c - the one exp of the sampling head and its scalar row kernels: the maximum
 * scan (with the NaN / +inf check), the greedy search, threshold filters, exp of a row with
 * exact fixed-point block sums, the partition pass of the weighted selection and the one pass
 * of the top-p path. Each has an AVX2 twin (kernels_avx2.c) and an AVX-512 twin
 * (kernels_avx512.c) that give identical results; sample_internal.h dispatches between them
 * by SIMD level.
 */
#include "sample/sample_internal.h"

float q35_sampler_exp(float x) { return sample_exp(x); }

void q35_sampler_exp_array(const float *x, float *y, int32_t n) {
  k_exp_array(q35_simd_active(), x, y, n);
}

/* Max of l and the first index holding NaN or +inf (-1 if none). */
float sample_scan_scalar(const float *l, int32_t n, int32_t *bad) {
  float m = -INFINITY;
  *bad = -1;
  for (int32_t i = 0; i < n; i++) {
    float x = l[i];
    if (x != x || x == INFINITY) {
      *bad = i;
      return m;
    }
    if (x > m) m = x;
  }
  return m;
}

int32_t sample_find_eq_scalar(const float *l, int32_t n, float v) {
  for (int32_t i = 0; i < n; i++)
    if (l[i] == v) return i;
  return -1;
}

/* ids of elements >= t, ascending. */
int32_t sample_filter_ge_scalar(const float *l, int32_t n, float t, int32_t *ids) {
  int32_t c = 0;
  for (int32_t i = 0; i < n; i++)
    if (l[i] >= t) ids[c++] = i;
  return c;
}

/* w[i] = exp((l[i] - m) / T); block sums of W (per BLOCK elements) into bsum. */
void sample_exp_row_scalar(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = block_end(b, BLOCK, n);
    u128 acc = 0;
    for (int32_t i = b * BLOCK; i < e; i++) {
      w[i] = sample_exp((l[i] - m) / temp);
      acc += fix_w(w[i]);
    }
    bsum[b] = acc;
  }
}

/* Block sums of W over w >= cut. */
void sample_block_sums_scalar(const float *w, int32_t n, float cut, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++)
    bsum[b] = sample_wsum_ge_scalar(w + b * BLOCK, block_end(b, BLOCK, n) - b * BLOCK, cut);
}

/* Partition pass of the weighted selection: copy elements in [lo, hi] to out; mass of the
 * elements above hi and inside the window. */
int32_t sample_window_scalar(const float *a, int32_t n, float lo, float hi, float *out,
                             u128 *m_above, u128 *m_in) {
  u128 ab = 0, in = 0;
  int32_t c = 0;
  for (int32_t i = 0; i < n; i++) {
    float x = a[i];
    if (x > hi) {
      ab += fix_w(x);
    } else if (x >= lo) {
      in += fix_w(x);
      out[c++] = x;
    }
  }
  *m_above = ab;
  *m_in = in;
  return c;
}

void sample_exp_array_scalar(const float *x, float *y, int32_t n) {
  for (int32_t i = 0; i < n; i++) y[i] = sample_exp(x[i]);
}

/* Sum of W over a_j >= cut. */
u128 sample_wsum_ge_scalar(const float *a, int32_t n, float cut) {
  u128 acc = 0;
  for (int32_t j = 0; j < n; j++)
    if (a[j] >= cut) acc += fix_w(a[j]);
  return acc;
}

/* sample_scan_scalar plus the maximum of every CHUNK elements into cmax. */
float sample_scan_chunks_scalar(const float *l, int32_t n, float *cmax, int32_t *bad) {
  float m = -INFINITY;
  *bad = -1;
  for (int32_t b = 0; b * CHUNK < n; b++) {
    int32_t e = block_end(b, CHUNK, n);
    float bm = -INFINITY;
    for (int32_t i = b * CHUNK; i < e; i++) {
      float x = l[i];
      if (x != x || x == INFINITY) {
        *bad = i;
        return m;
      }
      if (x > bm) bm = x;
    }
    cmax[b] = bm;
    if (bm > m) m = bm;
  }
  return m;
}

/* The one pass of the top-p path: w = exp((l - m) / T) of every element (not stored); the
 * exact total of W; per block b, the mass of w > hi in bsum[b], and the elements with
 * lo <= w <= hi copied out in order (values only), cstart[b] the index of the block's first.
 * Returns their count. */
int32_t sample_fused_scalar(const float *l, int32_t n, float m, float temp, float lo, float hi,
                     u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  u128 tot = 0;
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = block_end(b, BLOCK, n);
    u128 acc = 0;
    cstart[b] = c;
    for (int32_t i = b * BLOCK; i < e; i++) {
      float w = sample_exp((l[i] - m) / temp);
      uint64_t W = fix_w(w);
      tot += W;
      if (w > hi) acc += W;
      else if (w >= lo) cw[c++] = w;
    }
    bsum[b] = acc;
  }
  *total = tot;
  return c;
}
