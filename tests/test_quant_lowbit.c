/*
 * test_quant_lowbit.c - the lowbit family (Q2_K, Q3_K, MXFP4, IQ4_NL, Q4_1, Q5_1) at the active
 * SIMD level against the scalar reference: dequantize bit-equal, vec_dot within the float
 * rounding bound below, the tile product (every pair of a tile equal to its vec_dot bit for bit),
 * on rows at odd byte offsets. Runs per level (test_quant_lowbit@avx2, @scalar); the comparison
 * with ggml is test_quant_lowbit_peer.
 *
 * Then, for every level up to the active one (q35_kernels_get), on raw random blocks (every code,
 * every scale byte, fp16 scales with edge values; activations with -128 / 127 bytes, and for
 * Q2_K, whose reference takes the mins through them, 16-element sums that do not match their
 * bytes): the level's vec_dot within the bound of the reference's, its tile (odd row / column
 * counts 1..9, random strides, odd addresses, row-major and transposed outputs, block counts that
 * leave partial groups) and its one-column gemv bit-equal to its vec_dot (the invariant of
 * docs/DESIGN.md: one value per (row, token) whatever the batching); and vec_dot of quantized
 * rows within 1e-5 of a float64 dot of the dequantized rows.
 *
 * The bound: the reference adds one float term per block (per super-block for Q2_K / Q3_K) to
 * its sum, one after the other; the SIMD kernels accumulate the same exact integer sums in 8 or
 * 16 float lanes with fused multiply-adds and add the lanes at the end. Both results are the
 * exact sum of the terms plus at most one rounding per addition and product, so they differ by
 * at most (2 nb + 24) u M with u = 2^-24, nb the number of blocks and M the sum of the terms'
 * magnitudes (mag_terms below). A wrong integer anywhere shifts a result by at least
 * d_w d_x, about 1 / n of M: far above the bound at these lengths.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"

#include "check.h"

static uint64_t rs = 0x1234567ull;
static float gauss(void) {
  rs = rs * 6364136223846793005ull + 1442695040888963407ull;
  double u = ((double)(rs >> 11) + 0.5) * 0x1.0p-53;
  rs = rs * 6364136223846793005ull + 1442695040888963407ull;
  double v = (double)(rs >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static uint64_t rng_u64(void) {
  rs = rs * 6364136223846793005ull + 1442695040888963407ull;
  return rs ^ (rs >> 29);
}

static const uint16_t fp16_edges[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x1400, 0x9400};
static uint16_t rnd_fp16(void) {
  if (rng_u64() % 8 == 0) return fp16_edges[rng_u64() % (sizeof fp16_edges / sizeof fp16_edges[0])];
  return (uint16_t)((rng_u64() % 2) << 15 | (0x1000 + rng_u64() % (0x5000 - 0x1000))); /* finite, normal */
}
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static int same_float(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

/* n elements of raw random weight blocks of `type`, fp16 scales patched to finite values */
static void rnd_weights(int type, uint8_t *w, int64_t n) {
  const int blk = q35_type_block(type);
  const size_t bs = q35_row_size(type, blk);
  for (size_t i = 0; i < bs * (size_t)(n / blk); i++) w[i] = (uint8_t)rng_u64();
  for (int64_t i = 0; i < n / blk; i++) {
    uint8_t *b = w + (size_t)i * bs;
    switch (type) {
    case Q35_TYPE_Q2_K: put16(b + offsetof(blk_q2_k, d), rnd_fp16()), put16(b + offsetof(blk_q2_k, dmin), rnd_fp16()); break;
    case Q35_TYPE_Q3_K: put16(b + offsetof(blk_q3_k, d), rnd_fp16()); break;
    case Q35_TYPE_MXFP4: if (rng_u64() % 4) b[0] = (uint8_t)(110 + rng_u64() % 30); break; /* else any exponent */
    case Q35_TYPE_IQ4_NL: put16(b, rnd_fp16()); break;
    default: put16(b, rnd_fp16()), put16(b + 2, rnd_fp16()); break; /* Q4_1, Q5_1: d, m */
    }
  }
}

/* n elements of random activation blocks of `vt` (Q8_K, Q8_0 or Q8_1; Q8_0X / Q8_0Z: random
 * Q8_0 blocks in that layout, their offset lanes consistent with their bytes). Q8_K's bsums match
 * the bytes unless `odd_sums` (Q2_K: its reference and kernels both take the mins through them). */
static void rnd_act_blocks(int vt, uint8_t *x, int64_t n, int odd_sums);
static void rnd_act(int vt, uint8_t *x, int64_t n, int odd_sums) {
  if (vt == Q35_TYPE_Q8_KP) { /* random Q8_K blocks, permuted (Q2_K / Q3_K's activations at AVX2 and AVX-512) */
    const size_t rs = q35_row_size(Q35_TYPE_Q8_K, n);
    uint8_t *tmp = malloc(rs);
    rnd_act_blocks(Q35_TYPE_Q8_K, tmp, n, odd_sums);
    q35_act_convert(Q35_TYPE_Q8_K, tmp, rs, vt, x, rs, n, 1);
    free(tmp);
    return;
  }
  if (vt == Q35_TYPE_Q8_0X || vt == Q35_TYPE_Q8_0Z) {
    const int64_t nb = n / QK8_0;
    uint8_t *tmp = malloc(q35_row_size(Q35_TYPE_Q8_0, n));
    rnd_act_blocks(Q35_TYPE_Q8_0, tmp, n, 0);
    memset(x, 0, q35_row_size(vt, n));
    for (int64_t i = 0; i < nb; i++) q35_act_put(vt, x, nb, i, (const blk_q8_0 *)(const void *)(tmp + (size_t)i * sizeof(blk_q8_0)));
    free(tmp);
    return;
  }
  rnd_act_blocks(vt, x, n, odd_sums);
}
static void rnd_act_blocks(int vt, uint8_t *x, int64_t n, int odd_sums) {
  const int blk = q35_type_block(vt);
  const size_t bs = q35_row_size(vt, blk);
  for (int64_t i = 0; i < n / blk; i++) {
    uint8_t *b = x + (size_t)i * bs;
    const int mode = (int)(rng_u64() % 5);
    int8_t *qs = vt == Q35_TYPE_Q8_K ? ((blk_q8_k *)(void *)b)->qs : (int8_t *)(b + (vt == Q35_TYPE_Q8_1 ? 4 : 2));
    for (int j = 0; j < blk; j++) {
      int v = (int)(int8_t)rng_u64();
      if (mode == 1) v = -128;
      if (mode == 2) v = 127;
      if (mode == 3) v = j % 2 ? -128 : 127;
      qs[j] = (int8_t)v;
    }
    if (vt == Q35_TYPE_Q8_K) {
      blk_q8_k *k = (blk_q8_k *)(void *)b;
      for (int g = 0; g < QK_K / 16; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += qs[16 * g + j];
        k->bsums[g] = mode == 4 && odd_sums ? (int16_t)rng_u64() : (int16_t)sum;
      }
      k->d = rng_u64() % 10 == 0 ? 0.0f : (float)(gauss() * 0.01);
    } else {
      put16(b, rnd_fp16());
      if (vt == Q35_TYPE_Q8_1) put16(b + 2, rnd_fp16());
    }
  }
}

/* M of the bound above: sum over elements of |w_i x_i| (dequantized by the reference, float64),
 * plus the offset terms the kernels take from the activation's sums: Q4_1 / Q5_1 |m_w s_x| per
 * block, Q2_K dmin_w d_x sum_j m_j |bsum_j| per super-block (activation rows in `vt`, the
 * reference's layout) */
static double mag_terms(const q35_kernels *ref, int type, int vt, int64_t n, const uint8_t *w, const uint8_t *x) {
  float *dw = malloc(sizeof(float) * (size_t)n), *dx = malloc(sizeof(float) * (size_t)n);
  ref->dequantize[type](w, dw, n);
  ref->dequantize[vt](x, dx, n);
  double m = 0;
  for (int64_t i = 0; i < n; i++) m += fabs((double)dw[i] * dx[i]);
  if (type == Q35_TYPE_Q4_1 || type == Q35_TYPE_Q5_1) {
    const size_t bs = q35_row_size(type, QK8_0);
    for (int64_t i = 0; i < n / QK8_0; i++) {
      uint16_t mw, sx;
      memcpy(&mw, w + (size_t)i * bs + 2, 2);
      memcpy(&sx, x + (size_t)i * sizeof(blk_q8_1) + 2, 2);
      m += fabs((double)q35_fp16_to_fp32(mw) * q35_fp16_to_fp32(sx));
    }
  }
  if (type == Q35_TYPE_Q2_K)
    for (int64_t i = 0; i < n / QK_K; i++) {
      const blk_q2_k *a = (const blk_q2_k *)(const void *)w + i;
      const blk_q8_k *b = (const blk_q8_k *)(const void *)x + i;
      double t = 0;
      for (int j = 0; j < 16; j++) t += (a->scales[j] >> 4) * fabs((double)b->bsums[j]);
      m += fabs((double)q35_fp16_to_fp32(a->dmin) * b->d) * t;
    }
  free(dw);
  free(dx);
  return m;
}

/* the bound (2 nb + 24) u M, nb = blocks (super-blocks for the 256-element types) */
static double bound(int type, int64_t n, double mag) {
  const double nb = (double)(n / q35_type_block(type));
  return (2 * nb + 24) * 0x1.0p-24 * mag + 1e-30;
}

static int near_ref(float v, float r, double tol) { return same_float(v, r) || fabs((double)v - r) <= tol; }

/* the level's kernels on random blocks: vec_dot == reference within the bound, tile and gemv == vec_dot */
static void random_blocks(q35_simd level, const q35_kernels *k, const q35_kernels *ref, int type) {
  const int vt = q35_kernels_vec_dot_type(k, type), rvt = q35_kernels_vec_dot_type(ref, type), blk = q35_type_block(type);
  const int nblk[4] = {1, 3, blk == QK_K ? 2 : 16, blk == QK_K ? 5 : 39}; /* 32-blocks: partial groups of 4, 8, 16 */
  const char *lv = q35_simd_name(level);
  long bad_ref = 0, bad_tile = 0, bad_gemv = 0;
  double worst = 0;
  CHECK(level == Q35_SIMD_SCALAR || k->vec_dot[type] != ref->vec_dot[type], "%s %s: the level has no kernel of its own",
        lv, q35_type_name(type));
  for (int rep = 0; rep < 24; rep++) {
    const int64_t n = (int64_t)blk * nblk[rep % 4];
    const int nr = 1 + (int)(rng_u64() % 9), nc = 1 + (int)(rng_u64() % 9);
    const size_t ws = q35_row_size(type, n) + rng_u64() % 7, xs = q35_row_size(vt, n) + rng_u64() % 5;
    const size_t rxs = q35_row_size(rvt, n);
    uint8_t *wb = malloc(ws * 9 + 8), *xb = malloc(xs * 9 + 8), *rx = malloc(rxs * 9);
    uint8_t *w = wb + rep % 3, *x = xb + (rep / 3) % 3; /* odd addresses too */
    for (int r = 0; r < nr; r++) rnd_weights(type, w + (size_t)r * ws, n);
    for (int c = 0; c < nc; c++) rnd_act(vt, x + (size_t)c * xs, n, type == Q35_TYPE_Q2_K);
    /* the same activations in the reference's layout */
    if (vt == rvt)
      for (int c = 0; c < nc; c++) memcpy(rx + (size_t)c * rxs, x + (size_t)c * xs, rxs);
    else q35_act_convert(vt, x, xs, rvt, rx, rxs, n, nc);
    float want[81], got[81], tr[81], gv[9];
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < nc; c++) {
        const float v = want[r * nc + c] = k->vec_dot[type](n, w + (size_t)r * ws, x + (size_t)c * xs);
        const float vr = ref->vec_dot[type](n, w + (size_t)r * ws, rx + (size_t)c * rxs);
        const double mag = mag_terms(ref, type, rvt, n, w + (size_t)r * ws, rx + (size_t)c * rxs);
        if (!(mag < 0x1.0p120)) continue; /* partial sums may overflow, in an order-dependent way */
        bad_ref += !near_ref(v, vr, bound(type, n, mag));
        if (mag > 0) worst = fmax(worst, fabs((double)v - vr) / mag);
      }
    q35_tile_run(k, type, n, w, ws, nr, x, xs, nc, got, (size_t)nc, 1);
    q35_tile_run(k, type, n, w, ws, nr, x, xs, nc, tr, 1, (size_t)nr);
    for (int i = 0; i < nr * nc; i++) bad_tile += !same_float(got[i], want[i]) + !same_float(tr[(i % nc) * nr + i / nc], want[i]);
    for (int c = 0; c < nc; c++) {
      q35_tile_run(k, type, n, w, ws, nr, x + (size_t)c * xs, xs, 1, gv, 1, 0);
      for (int r = 0; r < nr; r++) bad_gemv += !same_float(gv[r], want[r * nc + c]);
    }
    free(wb);
    free(xb);
    free(rx);
  }
  CHECK(!bad_ref, "%s %s: vec_dot off the reference beyond the bound in %ld random pairs", lv, q35_type_name(type), bad_ref);
  CHECK(!bad_tile, "%s %s: tile != vec_dot in %ld random pairs", lv, q35_type_name(type), bad_tile);
  CHECK(!bad_gemv, "%s %s: gemv != vec_dot in %ld random pairs", lv, q35_type_name(type), bad_gemv);
  if (level != Q35_SIMD_SCALAR) printf("  %s %-7s worst |vec_dot - ref| / M: %.2g\n", lv, q35_type_name(type), worst);
}

/* big tiles cross the drivers' row and column panels; vec_dot against float64 of the dequantized rows */
static void big_tile_f64(q35_simd level, const q35_kernels *k, int type, int emu) {
  const int64_t n = emu ? 1024 : 4096;
  const int nr = emu ? 5 : 13, nc = emu ? 7 : 21;
  const int vt = q35_kernels_vec_dot_type(k, type);
  const size_t ws = q35_row_size(type, n) + 1, xs = q35_row_size(vt, n) + 3;
  uint8_t *w = malloc(ws * nr), *x = malloc(xs * nc);
  float *f = malloc(sizeof(float) * n), *dw = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
  float *got = malloc(sizeof(float) * nr * nc);
  for (int r = 0; r < nr; r++) {
    for (int64_t i = 0; i < n; i++) f[i] = gauss() * 0.02f;
    k->quantize[type](f, w + (size_t)r * ws, n);
  }
  for (int c = 0; c < nc; c++) {
    for (int64_t i = 0; i < n; i++) f[i] = gauss();
    k->quantize[vt](f, x + (size_t)c * xs, n);
  }
  q35_tile_run(k, type, n, w, ws, nr, x, xs, nc, got, (size_t)nc, 1);
  long bad = 0, far = 0;
  for (int r = 0; r < nr; r++) {
    k->dequantize[type](w + (size_t)r * ws, dw, n);
    for (int c = 0; c < nc; c++) {
      const float v = k->vec_dot[type](n, w + (size_t)r * ws, x + (size_t)c * xs);
      bad += !same_float(v, got[r * nc + c]);
      k->dequantize[vt](x + (size_t)c * xs, dx, n);
      double s = 0, mag = 0;
      for (int64_t i = 0; i < n; i++) s += (double)dw[i] * dx[i], mag += fabs((double)dw[i] * dx[i]);
      /* Q4_1 / Q5_1: the offset term goes through the activation's fp16 sum s */
      const double tol = (vt == Q35_TYPE_Q8_1 ? 2e-3 : 1e-5) * mag + 1e-30;
      far += !(fabs(v - s) <= tol);
    }
  }
  CHECK(!bad, "%s %s %lld %dx%d: tile != vec_dot in %ld pairs", q35_simd_name(level), q35_type_name(type), (long long)n, nr, nc, bad);
  CHECK(!far, "%s %s: vec_dot off the float64 dot in %ld pairs", q35_simd_name(level), q35_type_name(type), far);
  free(w); free(x); free(f); free(dw); free(dx); free(got);
}

/* Q4_1 / Q5_1 / MXFP4 / IQ4_NL one-column gemv and gemv2 (two bases; NULL: two gemv calls, as q35_vec_dot_rows2)
 * bit-equal to vec_dot row by row: odd row counts, a big matrix whose halves lie far apart (the
 * AVX-512 kernels then read pairs of rows far apart together) and small ones, two bases far apart
 * and near, block counts with and without tails after the kernels' groups (of 16, 8 and 4 blocks). */
static void rows2_check(q35_simd level, const q35_kernels *k, int type) {
  const int vt = q35_kernels_vec_dot_type(k, type);
  long bad = 0;
  for (int rep = 0; rep < 8; rep++) {
    /* blocks a row: groups of 16 and 8 with no tail (64), tails of 7 and 3 after the groups of 8 and 4
     * (55), a tail of 2 after the groups of 4 (54, the AVX2 MXFP4 / IQ4_NL gemv's k = 2), fewer
     * blocks than one group of 8 (6); rep 3 keeps 55 for its 1801 rows' ~2 MiB */
    static const int nbs[8] = {64, 55, 54, 55, 6, 55, 6, 54};
    /* Q2_K, Q3_K: whole super-blocks, 1..9 of them */
    const int64_t n = type == Q35_TYPE_Q2_K || type == Q35_TYPE_Q3_K ? 256 * (int64_t)(nbs[rep] / 8 + 1) : 32 * nbs[rep];
    /* 1801: more than one of the AVX-512 kernels' ~2 MiB blocks of row pairs */
    const int nr = rep < 4 ? (rep == 3 ? 1801 : 301 + 2 * (rep % 2)) : 1 + rep % 4 * 2 + (rep == 7 ? 6 : 0);
    const size_t ws = q35_row_size(type, n) + (size_t)rep % 3;
    /* gemv2's bases: far apart (a gap of 200 rows) or near (interleaved halves of one range) */
    const size_t span = ws * (size_t)(2 * nr + 200) + 8;
    uint8_t *wbuf = malloc(span), *xb = malloc(q35_row_size(vt, n) + 8);
    uint8_t *w = wbuf + rep % 3, *x = xb + rep % 2;
    for (size_t i = 0; i + ws <= span - 3; i += ws) rnd_weights(type, w + i, n);
    rnd_act(vt, x, n, 0);
    float *want = malloc(sizeof(float) * (size_t)(2 * nr + 200)), *oa = malloc(sizeof(float) * 2 * (size_t)nr);
    for (int r = 0; r < 2 * nr + 200; r++) want[r] = k->vec_dot[type](n, w + (size_t)r * ws, x);
    q35_tile_run(k, type, n, w, ws, nr, x, 0, 1, oa, 1, 0); /* gemv */
    for (int r = 0; r < nr; r++) bad += !same_float(oa[r], want[r]);
    for (int far = 0; far < 2; far++) {
      const int rb = far ? nr + 200 : 1; /* row of wb's first row */
      const size_t wstr = far ? ws : 2 * ws, ostr = 2; /* near: every other row of each base */
      float *ob = oa + 1;
      if (k->gemv2[type]) k->gemv2[type](n, w, w + (size_t)rb * ws, wstr, nr, x, oa, ob, ostr);
      else {
        q35_tile_run(k, type, n, w, wstr, nr, x, 0, 1, oa, ostr, 0);
        q35_tile_run(k, type, n, w + (size_t)rb * ws, wstr, nr, x, 0, 1, ob, ostr, 0);
      }
      for (int r = 0; r < nr; r++) {
        const int ra = far ? r : 2 * r, rbr = far ? rb + r : rb + 2 * r;
        bad += !same_float(oa[2 * r], want[ra]) + !same_float(ob[2 * r], want[rbr]);
      }
    }
    free(wbuf); free(xb); free(want); free(oa);
  }
  CHECK(!bad, "%s %s: gemv / gemv2 != vec_dot in %ld rows", q35_simd_name(level), q35_type_name(type), bad);
}

int main(void) {
  const int types[] = {Q35_TYPE_Q3_K, Q35_TYPE_Q2_K, Q35_TYPE_MXFP4, Q35_TYPE_IQ4_NL, Q35_TYPE_Q4_1, Q35_TYPE_Q5_1};
  const int n = 1024, NR = 5, NC = 3;
  printf("SIMD level: %s\n", q35_simd_name(q35_simd_active()));
  float *w = malloc(sizeof(float) * n * NR), *x = malloc(sizeof(float) * n * NC);
  float *d1 = malloc(sizeof(float) * n), *d2 = malloc(sizeof(float) * n);
  uint8_t *wq = malloc((size_t)n * NR * 4 + 64), *xq = malloc((size_t)n * NC * 4 + 64);
  for (int i = 0; i < n * NR; i++) w[i] = gauss() * 0.02f * (i % 97 == 0 ? 10.f : 1.f);
  for (int i = 0; i < n * NC; i++) x[i] = gauss();
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    const int type = types[t], vt = q35_vec_dot_type(type);
    CHECK(q35_type_supported(type), "%s supported", q35_type_name(type));
    const size_t ws = q35_row_size(type, n) + 3, xs = q35_row_size(vt, n) + 1; /* odd strides */
    for (int r = 0; r < NR; r++) q35_quantize_row(type, w + r * n, wq + 1 + r * ws, n);
    for (int c = 0; c < NC; c++) q35_quantize_row(vt, x + c * n, xq + c * xs, n);
    q35_dequantize_row(type, wq + 1, d1, n);
    q35_dequantize_row_ref(type, wq + 1, d2, n);
    CHECK(!memcmp(d1, d2, sizeof(float) * n), "%s dequantize differs from the reference", q35_type_name(type));
    float out[5 * 3], ref[5 * 3];
    q35_vec_dot_tile(type, n, wq + 1, ws, NR, xq, xs, NC, out, NC);
    q35_vec_dot_tile_ref(type, n, wq + 1, ws, NR, xq, xs, NC, ref, NC);
    for (int r = 0; r < NR; r++)
      for (int c = 0; c < NC; c++) {
        const float v = q35_vec_dot(type, n, wq + 1 + r * ws, xq + c * xs);
        const float vr = q35_vec_dot_ref(type, n, wq + 1 + r * ws, xq + c * xs);
        double mag = 0;
        q35_dequantize_row_ref(type, wq + 1 + r * ws, d1, n);
        for (int i = 0; i < n; i++) mag += fabs((double)d1[i] * x[c * n + i]);
        /* 1e-3: the activation's own quantization error on top of the bound above */
        CHECK(isfinite(v) && fabs((double)v - vr) <= 1e-3 * mag, "%s vec_dot %.9g vs ref %.9g", q35_type_name(type), v, vr);
        CHECK(out[r * NC + c] == v && ref[r * NC + c] == vr, "%s tile (%d,%d) %.9g vs vec_dot %.9g",
              q35_type_name(type), r, c, out[r * NC + c], v);
      }
  }
  free(w); free(x); free(d1); free(d2); free(wq); free(xq);
  q35_kernels ref;
  q35_kernels_get(Q35_SIMD_SCALAR, &ref);
  /* under an emulator (tests/test_aarch64.sh sets Q35_EMULATED): the SIMD level only, smaller tiles */
  const int emu = getenv("Q35_EMULATED") != NULL;
  for (q35_simd level = Q35_SIMD_SCALAR; level <= Q35_SIMD_NEON; level++) {
    q35_kernels k;
    if (emu && level == Q35_SIMD_SCALAR && q35_simd_active() != Q35_SIMD_SCALAR) continue;
    if (q35_kernels_get(level, &k) != 0) continue;
    const int before = failures;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      random_blocks(level, &k, &ref, types[t]);
      big_tile_f64(level, &k, types[t], emu);
    }
    rows2_check(level, &k, Q35_TYPE_Q4_1);
    rows2_check(level, &k, Q35_TYPE_Q5_1);
    rows2_check(level, &k, Q35_TYPE_MXFP4); /* the avx2 gemv's row kernels (nx_row) on many rows */
    rows2_check(level, &k, Q35_TYPE_IQ4_NL);
    rows2_check(level, &k, Q35_TYPE_Q2_K); /* the avx2 gemv / gemv2 on Q8_KP (k2r_row2) */
    rows2_check(level, &k, Q35_TYPE_Q3_K); /* likewise k3r_row2 */
    printf("level %s: %s\n", q35_simd_name(level), failures == before ? "ok" : "FAILED");
  }
  return check_done("test_quant_lowbit");
}
