/*
 * test_quant_lowbit.c - the lowbit family (Q2_K, Q3_K, MXFP4, IQ4_NL, Q4_1, Q5_1) at the active
 * SIMD level held bit-equal to the scalar reference: dequantize, vec_dot, the tile product (every
 * pair of a tile equal to its vec_dot), on rows at odd byte offsets. Runs per level (test_quant_lowbit@avx2,
 * @scalar); the comparison with ggml is test_quant_lowbit_peer.
 *
 * Then, for every level up to the active one (q35_kernels_get), on raw random blocks (every code,
 * every scale byte, fp16 scales with edge values; activations with -128 / 127 bytes and sums that
 * do not match their bytes): the level's vec_dot bit-equal to the reference's, its tile (odd
 * row / column counts 1..9, random strides, odd addresses, row-major and transposed outputs,
 * block counts that leave a partial group of 8) and its one-column gemv bit-equal to its
 * vec_dot; and vec_dot of quantized rows within 1e-5 of a float64 dot of the dequantized rows.
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

/* n elements of random activation blocks of `vt` (Q8_K, Q8_0 or Q8_1) */
static void rnd_act(int vt, uint8_t *x, int64_t n) {
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
        k->bsums[g] = mode == 4 ? (int16_t)rng_u64() : (int16_t)sum;
      }
      k->d = rng_u64() % 10 == 0 ? 0.0f : (float)(gauss() * 0.01);
    } else {
      put16(b, rnd_fp16());
      if (vt == Q35_TYPE_Q8_1) put16(b + 2, rnd_fp16());
    }
  }
}

/* the level's kernels on random blocks: vec_dot == reference, tile and gemv == vec_dot */
static void random_blocks(q35_simd level, const q35_kernels *k, const q35_kernels *ref, int type) {
  const int vt = q35_kernels_vec_dot_type(k, type), blk = q35_type_block(type);
  const int nblk[4] = {1, 3, blk == QK_K ? 2 : 8, blk == QK_K ? 5 : 19}; /* 32-blocks: partial groups of 8 */
  const char *lv = q35_simd_name(level);
  long bad_ref = 0, bad_tile = 0, bad_gemv = 0;
  CHECK(level == Q35_SIMD_SCALAR || k->vec_dot[type] != ref->vec_dot[type], "%s %s: the level has no kernel of its own",
        lv, q35_type_name(type));
  for (int rep = 0; rep < 24; rep++) {
    const int64_t n = (int64_t)blk * nblk[rep % 4];
    const int nr = 1 + (int)(rng_u64() % 9), nc = 1 + (int)(rng_u64() % 9);
    const size_t ws = q35_row_size(type, n) + rng_u64() % 7, xs = q35_row_size(vt, n) + rng_u64() % 5;
    uint8_t *wb = malloc(ws * 9 + 8), *xb = malloc(xs * 9 + 8);
    uint8_t *w = wb + rep % 3, *x = xb + (rep / 3) % 3; /* odd addresses too */
    for (int r = 0; r < nr; r++) rnd_weights(type, w + (size_t)r * ws, n);
    for (int c = 0; c < nc; c++) rnd_act(vt, x + (size_t)c * xs, n);
    float want[81], got[81], tr[81], gv[9];
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < nc; c++) {
        want[r * nc + c] = k->vec_dot[type](n, w + (size_t)r * ws, x + (size_t)c * xs);
        bad_ref += !same_float(want[r * nc + c], ref->vec_dot[type](n, w + (size_t)r * ws, x + (size_t)c * xs));
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
  }
  CHECK(!bad_ref, "%s %s: vec_dot != reference in %ld random pairs", lv, q35_type_name(type), bad_ref);
  CHECK(!bad_tile, "%s %s: tile != vec_dot in %ld random pairs", lv, q35_type_name(type), bad_tile);
  CHECK(!bad_gemv, "%s %s: gemv != vec_dot in %ld random pairs", lv, q35_type_name(type), bad_gemv);
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
        CHECK(isfinite(v) && v == vr, "%s vec_dot %.9g vs ref %.9g", q35_type_name(type), v, vr);
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
    printf("level %s: %s\n", q35_simd_name(level), failures == before ? "ok" : "FAILED");
  }
  return check_done("test_quant_lowbit");
}
