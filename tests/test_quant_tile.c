/*
 * test_quant_tile.c - the tile product (q35_vec_dot_tile and friends) against per-pair
 * vec_dot, bit for bit.
 *
 * For every type and every SIMD level this CPU has, a tile of nr x nc products (odd sizes
 * 1..9, plus tiles large enough to cross the kernels' cache panels) computed with the level's
 * tile kernel must equal, byte for byte (memcmp), the same level's vec_dot called once per
 * (row, column) pair. Rows sit at random strides and odd byte offsets; the output goes through
 * both the row-major and a transposed layout. The public entry points are checked the same
 * way (tile vs q35_vec_dot, tile_ref vs q35_vec_dot_ref), and vec_dot is checked against an
 * independent float64 dot of the dequantized rows so that a kernel that is wrong in the same
 * way in both paths cannot pass.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_iq_tables.h"
#include "kernels/quant_lowbit.h"

#include "check.h"


static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static float rng_gauss(void) {
  double u = ((double)(rng_u64() >> 11) + 0.5) * 0x1.0p-53, v = (double)(rng_u64() >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static const int types[] = {Q35_TYPE_Q8_0, Q35_TYPE_Q4_0, Q35_TYPE_Q5_0, Q35_TYPE_Q4_K, Q35_TYPE_Q5_K,
                            Q35_TYPE_Q6_K, Q35_TYPE_IQ4_XS, Q35_TYPE_F32, Q35_TYPE_F16, Q35_TYPE_BF16};
#define NTYPES (int)(sizeof types / sizeof types[0])

/* nr rows of `type` (n elements each) at stride ws, starting `off` bytes into a fresh buffer */
static uint8_t *make_rows(int type, int64_t n, int nr, size_t ws, size_t off, int act, uint8_t **base) {
  const size_t rs = q35_row_size(type, n);
  uint8_t *buf = malloc(off + ws * (size_t)nr + 64);
  for (size_t i = 0; i < off + ws * (size_t)nr + 64; i++) buf[i] = (uint8_t)rng_u64();
  float *f = malloc(sizeof(float) * (size_t)n);
  for (int r = 0; r < nr; r++) {
    const float s = act ? 1.0f : (float)exp(rng_gauss()) * 0.02f;
    for (int64_t i = 0; i < n; i++) f[i] = rng_gauss() * s * (rng_u64() % 50 == 0 ? 8.0f : 1.0f);
    uint8_t *tmp = malloc(rs);
    q35_quantize_row_ref(type, f, tmp, n);
    memcpy(buf + off + ws * (size_t)r, tmp, rs);
    free(tmp);
  }
  free(f);
  *base = buf;
  return buf + off;
}

/* The two-range one-column product of table k (its gemv2, or where it has none the two gemv
 * calls q35_vec_dot_rows2 falls back to) on ranges [0, h) and [nr - h, nr) of the nr rows at w,
 * h = (nr + 1) / 2 (they share a row when nr is odd), against want[r * wst] (vec_dot of row r on
 * column x): returns the number of rows that differ. */
static int gemv2_bad(const q35_kernels *k, int type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                     const float *want, size_t wst) {
  const int h = (nr + 1) / 2;
  const size_t ors = 1 + rng_u64() % 3;
  float *oa = malloc(sizeof(float) * ors * (size_t)h), *ob = malloc(sizeof(float) * ors * (size_t)h);
  memset(oa, 0xFF, sizeof(float) * ors * (size_t)h);
  memset(ob, 0xFF, sizeof(float) * ors * (size_t)h);
  const uint8_t *wb = w + (size_t)(nr - h) * ws;
  if (k->gemv2[type]) k->gemv2[type](n, w, wb, ws, h, x, oa, ob, ors);
  else {
    q35_tile_run(k, type, n, w, ws, h, x, 0, 1, oa, ors, 0);
    q35_tile_run(k, type, n, wb, ws, h, x, 0, 1, ob, ors, 0);
  }
  int bad = 0;
  for (int r = 0; r < h; r++)
    bad += !(memcmp(&oa[(size_t)r * ors], &want[(size_t)r * wst], 4) == 0 || (isnan(oa[r * ors]) && isnan(want[r * wst]))) +
           !(memcmp(&ob[(size_t)r * ors], &want[(size_t)(nr - h + r) * wst], 4) == 0 ||
             (isnan(ob[r * ors]) && isnan(want[(nr - h + r) * wst])));
  free(oa);
  free(ob);
  return bad;
}

/* One tile case at one level: returns 0 when everything matched. */
static void tile_case(const char *lvl, const q35_kernels *k, int type, int64_t n, int nr, int nc) {
  const int vt = q35_kernels_vec_dot_type(k, type);
  const size_t wrs = q35_row_size(type, n), xrs = q35_row_size(vt, n);
  const size_t ws = wrs + (rng_u64() % 3 == 0 ? 0 : rng_u64() % 97), xs = xrs + (rng_u64() % 3 == 0 ? 0 : rng_u64() % 61);
  uint8_t *wb, *xb;
  const uint8_t *w = make_rows(type, n, nr, ws, rng_u64() % 64, 0, &wb);
  const uint8_t *x = make_rows(vt, n, nc, xs, rng_u64() % 64, 1, &xb);
  const size_t ors = (size_t)nc + rng_u64() % 5;
  float *want = malloc(sizeof(float) * (size_t)nr * nc), *got = malloc(sizeof(float) * ors * (size_t)nr + 8);
  float *gotT = malloc(sizeof(float) * (size_t)nr * nc);
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) want[r * nc + c] = k->vec_dot[type](n, w + (size_t)r * ws, x + (size_t)c * xs);
  memset(got, 0xFF, sizeof(float) * ors * (size_t)nr + 8);
  q35_tile_run(k, type, n, w, ws, nr, x, xs, nc, got, ors, 1);
  int bad = 0;
  for (int r = 0; r < nr && !bad; r++) bad |= memcmp(want + (size_t)r * nc, got + (size_t)r * ors, sizeof(float) * nc) != 0;
  CHECK(!bad, "%s %s n=%lld %dx%d: tile != per-pair vec_dot", lvl, q35_type_name(type), (long long)n, nr, nc);
  /* transposed output: out[r + c*nr] */
  q35_tile_run(k, type, n, w, ws, nr, x, xs, nc, gotT, 1, (size_t)nr);
  bad = 0;
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) bad |= memcmp(&want[r * nc + c], &gotT[r + c * nr], 4) != 0;
  CHECK(!bad, "%s %s n=%lld %dx%d: transposed tile != per-pair vec_dot", lvl, q35_type_name(type), (long long)n, nr, nc);
  /* the two-range one-column product (gemv2) on column 0 */
  bad = gemv2_bad(k, type, n, w, ws, nr, x, want, (size_t)nc);
  CHECK(!bad, "%s %s n=%lld nr=%d: gemv2 != per-row vec_dot in %d rows", lvl, q35_type_name(type), (long long)n, nr, bad);
  free(want); free(got); free(gotT); free(wb); free(xb);
}

/* vec_dot against float64 of the dequantized rows (the tile's ground truth must be right) */
static void f64_check(const char *lvl, const q35_kernels *k, int type, int64_t n) {
  const int vt = q35_kernels_vec_dot_type(k, type);
  uint8_t *wb, *xb;
  const uint8_t *w = make_rows(type, n, 1, q35_row_size(type, n), 1, 0, &wb);
  const uint8_t *x = make_rows(vt, n, 1, q35_row_size(vt, n), 3, 1, &xb);
  float *dw = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
  q35_dequantize_row_ref(type, w, dw, n);
  q35_dequantize_row_ref(vt, x, dx, n);
  double f = 0, mag = 0;
  for (int64_t i = 0; i < n; i++) {
    f += (double)dw[i] * dx[i];
    mag += fabs((double)dw[i] * dx[i]);
  }
  const float got = k->vec_dot[type](n, w, x);
  CHECK(fabs(got - f) <= 1e-5 * mag, "%s %s n=%lld vec_dot %.9g vs f64 %.9g", lvl, q35_type_name(type), (long long)n,
        got, f);
  free(dw); free(dx); free(wb); free(xb);
}

static void public_api(void) {
  const int64_t n = 512;
  for (int t = 0; t < NTYPES; t++) {
    const int type = types[t], vt = q35_vec_dot_type(type);
    const int nr = 5, nc = 7;
    const size_t ws = q35_row_size(type, n) + 3, xs = q35_row_size(vt, n) + 1;
    uint8_t *wb, *xb;
    const uint8_t *w = make_rows(type, n, nr, ws, 5, 0, &wb);
    const uint8_t *x = make_rows(vt, n, nc, xs, 7, 1, &xb);
    float got[35], want[35], ref[35], wref[35], ex[35];
    q35_vec_dot_tile(type, n, w, ws, nr, x, xs, nc, got, nc);
    q35_vec_dot_tile_ref(type, n, w, ws, nr, x, xs, nc, ref, nc);
    q35_vec_dot_tile_ex(type, n, w, ws, nr, x, xs, nc, ex, 1, nr);
    int bad = 0, badr = 0, bade = 0;
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < nc; c++) {
        want[r * nc + c] = q35_vec_dot(type, n, w + r * ws, x + c * xs);
        wref[r * nc + c] = q35_vec_dot_ref(type, n, w + r * ws, x + c * xs);
        bade |= memcmp(&ex[r + c * nr], &want[r * nc + c], 4) != 0;
      }
    bad = memcmp(got, want, sizeof got) != 0;
    badr = memcmp(ref, wref, sizeof ref) != 0;
    CHECK(!bad, "public %s: q35_vec_dot_tile != q35_vec_dot", q35_type_name(type));
    CHECK(!badr, "public %s: q35_vec_dot_tile_ref != q35_vec_dot_ref", q35_type_name(type));
    CHECK(!bade, "public %s: q35_vec_dot_tile_ex (transposed) != q35_vec_dot", q35_type_name(type));
    free(wb); free(xb);
  }
  /* q35_vec_dot_rows2 (the active level's gemv2, or two gemv calls where it has none): odd row
   * counts, ranges apart and overlapping, a strided output */
  for (int t = 0; t < NTYPES; t++) {
    const int type = types[t], vt = q35_vec_dot_type(type);
    const int nr = 11;
    const size_t ws = q35_row_size(type, n) + 5;
    uint8_t *wb, *xb;
    const uint8_t *w = make_rows(type, n, nr, ws, 3, 0, &wb);
    const uint8_t *x = make_rows(vt, n, 1, q35_row_size(vt, n), 1, 1, &xb);
    float want[11], o[2][3 * 5];
    for (int r = 0; r < nr; r++) want[r] = q35_vec_dot(type, n, w + r * ws, x);
    static const int offs[][2] = {{0, 6}, {1, 5}, {6, 2}, {3, 3}};
    int bad = 0;
    for (int i = 0; i < 4; i++) {
      const int a = offs[i][0], b = offs[i][1], m = 5;
      memset(o, 0xFF, sizeof o);
      q35_vec_dot_rows2(type, n, w + a * ws, w + b * ws, ws, m, x, o[0], o[1], 3);
      for (int r = 0; r < m; r++)
        bad += memcmp(&o[0][3 * r], &want[a + r], 4) != 0 || memcmp(&o[1][3 * r], &want[b + r], 4) != 0;
    }
    CHECK(!bad, "public %s: q35_vec_dot_rows2 != q35_vec_dot in %d rows", q35_type_name(type), bad);
    free(wb); free(xb);
  }
  /* unsupported type: NaN, no crash; empty tiles write nothing */
  uint8_t z[64] = {0};
  float o[2] = {1, 1};
  q35_vec_dot_tile(34 /* tq1_0 */, 32, z, 0, 1, z, 0, 1, o, 1);
  CHECK(isnan(o[0]), "unsupported type gives NaN");
  o[0] = 1;
  q35_vec_dot_tile(Q35_TYPE_Q8_0, 32, z, 0, 0, z, 0, 4, o, 1);
  q35_vec_dot_tile(Q35_TYPE_Q8_0, 32, z, 0, 4, z, 0, 0, o, 1);
  CHECK(o[0] == 1 && o[1] == 1, "empty tile writes nothing");
}

/*
 * Cross-level identity for the K-quant kernels: the avx512 level's Q5_K kernels (quant_256_kquants.inc's
 * 256-bit template at that level) must give the avx2 level's bits for every row pair, as
 * vec_dot and as tiles; the avx2 tiles and both levels' one-column products (the avx2 gemv,
 * quant_avx2.c's q4k_row1) give the avx2 vec_dot's bits on the same rows. Rows are
 * raw random bytes (every 4/6-bit code, every scale and min), scales patched to finite fp16 with
 * edge values, activations with extreme bytes (-128, 127), sums that do not match their bytes,
 * and tiny, zero and huge scales. Q4_K and Q6_K are not held across the levels: the avx2 level's
 * take Q8_KP and sum per sub-block (quant_k4r_avx2.inc, quant_k6r_avx2.inc), which rounds
 * differently from the avx512 level's Q8_K kernels (kr_twin holds them to Q4_KR / Q6_KR and to the
 * reference's bound instead).
 */
static const uint16_t fp16_edges[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x1400, 0x9400};
static uint16_t rnd_fp16(void) {
  if (rng_u64() % 8 == 0) return fp16_edges[rng_u64() % (sizeof fp16_edges / sizeof fp16_edges[0])];
  return (uint16_t)((rng_u64() % 2) << 15 | (0x0400 + rng_u64() % (0x7800 - 0x0400))); /* finite, normal */
}
static void rnd_q8k_row(uint8_t *x, int64_t n, int wild) {
  for (int64_t i = 0; i < n / QK_K; i++) {
    blk_q8_k *b = (blk_q8_k *)(void *)(x + (size_t)i * sizeof(blk_q8_k));
    const int mode = (int)(rng_u64() % 6);
    for (int j = 0; j < QK_K; j++) {
      int v = (int)(int8_t)rng_u64();
      if (mode == 1) v = -128;
      if (mode == 2) v = 127;
      if (mode == 3) v = j % 2 ? -128 : 127;
      if (mode == 4) v = (int)(rng_u64() % 255) - 127;
      b->qs[j] = (int8_t)v;
    }
    for (int g = 0; g < QK_K / 16; g++) {
      int sum = 0;
      for (int j = 0; j < 16; j++) sum += b->qs[16 * g + j];
      b->bsums[g] = mode == 5 ? (int16_t)rng_u64() : (int16_t)sum;
    }
    const int dm = (int)(rng_u64() % 10);
    b->d = dm == 0 ? 0.0f : dm == 1 ? 1e-30f : dm == 2 && wild ? 1e30f : dm == 3 ? -3e-5f : rng_gauss() * 0.01f;
  }
}
static void rnd_kquant_row(int type, uint8_t *w, int64_t n) {
  const size_t bs = q35_row_size(type, QK_K);
  for (size_t i = 0; i < bs * (size_t)(n / QK_K); i++) w[i] = (uint8_t)rng_u64();
  for (int64_t i = 0; i < n / QK_K; i++) {
    uint8_t *b = w + (size_t)i * bs;
    uint16_t d = rnd_fp16(), dm = rnd_fp16();
    if (type == Q35_TYPE_Q6_K || type == Q35_TYPE_Q6_KR) memcpy(b + offsetof(blk_q6_k, d), &d, 2);
    else if (type == Q35_TYPE_Q3_K) memcpy(b + offsetof(blk_q3_k, d), &d, 2);
    else if (type == Q35_TYPE_Q2_K) memcpy(b + offsetof(blk_q2_k, d), &d, 2), memcpy(b + offsetof(blk_q2_k, dmin), &dm, 2);
    else memcpy(b, &d, 2), memcpy(b + 2, &dm, 2);
  }
}
static int same_float(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

static void kquant_cross_level(void) {
  q35_kernels k1, k2;
  if (q35_kernels_get(Q35_SIMD_AVX2, &k1) != 0 || q35_kernels_get(Q35_SIMD_AVX512, &k2) != 0) {
    printf("k-quant cross-level: avx2 or avx512 not available, skipped\n");
    return;
  }
  static const int kt[] = {Q35_TYPE_Q5_K};
  long pairs = 0, finite = 0;
  for (int t = 0; t < 1; t++) {
    const int type = kt[t];
    const int64_t nmax = 16 * QK_K;
    const size_t wrs = q35_row_size(type, nmax), xrs = q35_row_size(Q35_TYPE_Q8_K, nmax);
    const int NR = 9, NC = 9;
    uint8_t *w = malloc(wrs * NR + 1), *x = malloc(xrs * NC + 1);
    float got[81], want[81];
    for (int rep = 0; rep < 120; rep++) {
      const int64_t n = QK_K * (1 + (int64_t)(rng_u64() % 16));
      const size_t ws = q35_row_size(type, n), xs = q35_row_size(Q35_TYPE_Q8_K, n);
      const int nr = 1 + (int)(rng_u64() % NR), nc = 1 + (int)(rng_u64() % NC);
      uint8_t *wo = w + rep % 2, *xo = x + (rep / 2) % 2; /* odd addresses too */
      for (int r = 0; r < nr; r++) rnd_kquant_row(type, wo + (size_t)r * ws, n);
      for (int c = 0; c < nc; c++) rnd_q8k_row(xo + (size_t)c * xs, n, rep % 8 == 7);
      int bad = 0;
      for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
          want[r * nc + c] = k1.vec_dot[type](n, wo + (size_t)r * ws, xo + (size_t)c * xs);
          const float v = k2.vec_dot[type](n, wo + (size_t)r * ws, xo + (size_t)c * xs);
          bad += !same_float(v, want[r * nc + c]);
          pairs++;
          finite += isfinite(v) && v != 0;
        }
      CHECK(!bad, "%s n=%lld: avx512 vec_dot != avx2 vec_dot in %d of %d pairs", q35_type_name(type), (long long)n,
            bad, nr * nc);
      q35_tile_run(&k2, type, n, wo, ws, nr, xo, xs, nc, got, (size_t)nc, 1);
      bad = 0;
      for (int i = 0; i < nr * nc; i++) bad += !same_float(got[i], want[i]);
      CHECK(!bad, "%s n=%lld %dx%d: avx512 tile != avx2 vec_dot in %d pairs", q35_type_name(type), (long long)n, nr, nc,
            bad);
      /* the avx2 tiles, and both levels' one-column products (the gemv) on these rows */
      q35_tile_run(&k1, type, n, wo, ws, nr, xo, xs, nc, got, (size_t)nc, 1);
      bad = 0;
      for (int i = 0; i < nr * nc; i++) bad += !same_float(got[i], want[i]);
      CHECK(!bad, "%s n=%lld %dx%d: avx2 tile != avx2 vec_dot in %d pairs", q35_type_name(type), (long long)n, nr, nc,
            bad);
      for (int lv = 0; lv < 2; lv++) {
        q35_tile_run(lv ? &k2 : &k1, type, n, wo, ws, nr, xo, xs, 1, got, 1, 0);
        bad = 0;
        for (int r = 0; r < nr; r++) bad += !same_float(got[r], want[r * nc]);
        CHECK(!bad, "%s n=%lld %dx1: %s one column != avx2 vec_dot in %d rows", q35_type_name(type), (long long)n, nr,
              lv ? "avx512" : "avx2", bad);
        bad = gemv2_bad(lv ? &k2 : &k1, type, n, wo, ws, nr, xo, want, (size_t)nc);
        CHECK(!bad, "%s n=%lld nr=%d: %s gemv2 != avx2 vec_dot in %d rows", q35_type_name(type), (long long)n, nr,
              lv ? "avx512" : "avx2", bad);
      }
    }
    free(w);
    free(x);
  }
  CHECK(finite * 4 > pairs * 3, "k-quant cross-level: only %ld of %ld results finite and nonzero", finite, pairs);
  printf("k-quant cross-level: %ld pairs, %ld finite and nonzero\n", pairs, finite);
}

/* Q8_0 weights of raw bytes (-128 included) with finite fp16 scales: the level's vec_dot and
 * tiles against a float64 dot of the dequantized rows (the Q8_0Z kernels take |w| = 128 through
 * vpsignb). */
static void q8_0_raw_weights(const char *lvl, const q35_kernels *k) {
  const int64_t n = 32 * 37;
  const int nr = 3, nc = 5, vt = q35_kernels_vec_dot_type(k, Q35_TYPE_Q8_0);
  const size_t ws = q35_row_size(Q35_TYPE_Q8_0, n), xs = q35_row_size(vt, n);
  uint8_t *w = malloc(ws * nr), *xb;
  for (size_t i = 0; i < ws * nr; i++) w[i] = rng_u64() % 4 == 0 ? 0x80 : (uint8_t)rng_u64();
  for (int64_t b = 0; b < (n / 32) * nr; b++) {
    const uint16_t d = (uint16_t)(0x2000 + rng_u64() % 0x1800); /* finite, about 2^-7 .. 2^-1 */
    memcpy(w + 34 * (size_t)b, &d, 2);
  }
  const uint8_t *x = make_rows(vt, n, nc, xs, 0, 1, &xb);
  float *dw = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n), got[15];
  q35_tile_run(k, Q35_TYPE_Q8_0, n, w, ws, nr, x, xs, nc, got, (size_t)nc, 1);
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) {
      q35_dequantize_row_ref(Q35_TYPE_Q8_0, w + (size_t)r * ws, dw, n);
      q35_dequantize_row_ref(vt, x + (size_t)c * xs, dx, n);
      double f = 0, mag = 0;
      for (int64_t i = 0; i < n; i++) {
        f += (double)dw[i] * dx[i];
        mag += fabs((double)dw[i] * dx[i]);
      }
      const float v = k->vec_dot[Q35_TYPE_Q8_0](n, w + (size_t)r * ws, x + (size_t)c * xs);
      CHECK(fabs(v - f) <= 1e-5 * mag, "%s q8_0 raw weights vec_dot %.9g vs f64 %.9g", lvl, v, f);
      CHECK(same_float(got[r * nc + c], v), "%s q8_0 raw weights tile != vec_dot", lvl);
    }
  CHECK(gemv2_bad(k, Q35_TYPE_Q8_0, n, w, ws, nr, x, got, (size_t)nc) == 0, "%s q8_0 raw weights gemv2 != vec_dot", lvl);
  free(w); free(xb); free(dw); free(dx);
}

/*
 * Cross-level identity for Q4_0, IQ4_NL and MXFP4 x Q8_0Z: where both the avx2 level (256-bit
 * halves, maddubs; quant_avx2.c, quant_lowbit_nz2.inc) and the avx512 level (512-bit, vpdpbusd,
 * VBMI) take Q8_0Z, they must give the same bits, as vec_dot and as tiles. Rows are raw random
 * nibble bytes with finite fp16 scales (edge values too; MXFP4: E8M0 bytes near 1 and the
 * subnormal-bits 0 and 1); activation blocks hold random, all -128, all 127 and alternating
 * extreme bytes (the avx2 kernels' int16 sums peak there) with every kind of scale; lengths
 * include a last group of 1..15 blocks.
 */
static void z_cross_level(int type) {
  const char *tn = q35_type_name(type);
  q35_kernels k1, k2;
  if (q35_kernels_get(Q35_SIMD_AVX2, &k1) != 0 || q35_kernels_get(Q35_SIMD_AVX512, &k2) != 0 ||
      q35_kernels_vec_dot_type(&k1, type) != Q35_TYPE_Q8_0Z || q35_kernels_vec_dot_type(&k2, type) != Q35_TYPE_Q8_0Z) {
    printf("%s x q8_0z cross-level: not both levels take Q8_0Z here, skipped\n", tn);
    return;
  }
  const int64_t nmax = 32 * 16 * 5;
  const int NR = 7, NC = 35; /* columns enough for the avx2 level's 1 x 16 tiles and their leftovers */
  const size_t wmax = q35_row_size(type, nmax), xmax = q35_row_size(Q35_TYPE_Q8_0Z, nmax);
  const size_t wb = q35_row_size(type, 32); /* bytes of a block: the scale at its start */
  uint8_t *w = malloc(wmax * NR + 1), *x = malloc(xmax * NC);
  float got[NR * NC], want[NR * NC];
  long pairs = 0, finite = 0;
  for (int rep = 0; rep < 200; rep++) {
    const int64_t n = 32 * (1 + (int64_t)(rng_u64() % (nmax / 32)));
    const size_t ws = q35_row_size(type, n), xs = q35_row_size(Q35_TYPE_Q8_0Z, n);
    const int nr = 1 + (int)(rng_u64() % NR), nc = 1 + (int)(rng_u64() % NC);
    uint8_t *wo = w + rep % 2; /* odd addresses too */
    for (size_t i = 0; i < ws * (size_t)nr; i++) wo[i] = (uint8_t)rng_u64();
    for (int64_t b = 0; b < (n / 32) * nr; b++) {
      if (type == Q35_TYPE_MXFP4) { /* E8M0 exponents around 1, the subnormal-bits ones (0, 1) too */
        wo[wb * (size_t)b] = (uint8_t)(rng_u64() % 8 == 0 ? rng_u64() % 2 : 112 + rng_u64() % 24);
        continue;
      }
      const uint16_t d = rnd_fp16();
      memcpy(wo + wb * (size_t)b, &d, 2);
    }
    for (int c = 0; c < nc; c++) {
      uint8_t *row = x + (size_t)c * xs;
      memset(row, 0, xs);
      const int mode = (int)(rng_u64() % 5);
      for (int64_t b = 0; b < n / 32; b++) {
        blk_q8_0 q;
        for (int j = 0; j < 32; j++)
          q.qs[j] = (int8_t)(mode == 1 ? -128 : mode == 2 ? 127 : mode == 3 ? (j % 2 ? -128 : 127) : (int)rng_u64());
        q.d = rnd_fp16();
        q35_act_put(Q35_TYPE_Q8_0Z, row, n / 32, b, &q);
      }
    }
    int bad = 0;
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < nc; c++) {
        want[r * nc + c] = k2.vec_dot[type](n, wo + (size_t)r * ws, x + (size_t)c * xs);
        const float v = k1.vec_dot[type](n, wo + (size_t)r * ws, x + (size_t)c * xs);
        bad += !same_float(v, want[r * nc + c]);
        pairs++;
        finite += isfinite(v) && v != 0;
      }
    CHECK(!bad, "%s n=%lld: avx2 vec_dot != avx512 vec_dot in %d of %d pairs", tn, (long long)n, bad, nr * nc);
    q35_tile_run(&k1, type, n, wo, ws, nr, x, xs, nc, got, (size_t)nc, 1);
    bad = 0;
    for (int i = 0; i < nr * nc; i++) bad += !same_float(got[i], want[i]);
    CHECK(!bad, "%s n=%lld %dx%d: avx2 tile != avx512 vec_dot in %d pairs", tn, (long long)n, nr, nc, bad);
    for (int lv = 0; lv < 2; lv++) {
      bad = gemv2_bad(lv ? &k2 : &k1, type, n, wo, ws, nr, x, want, (size_t)nc);
      CHECK(!bad, "%s n=%lld nr=%d: %s gemv2 != avx512 vec_dot in %d rows", tn, (long long)n, nr, lv ? "avx512" : "avx2",
            bad);
    }
  }
  free(w);
  free(x);
  CHECK(finite * 4 > pairs * 3, "%s cross-level: only %ld of %ld results finite and nonzero", tn, finite, pairs);
  printf("%s x q8_0z cross-level: %ld pairs, %ld finite and nonzero\n", tn, pairs, finite);
}

static void rows2_two_streams(q35_simd level, const q35_kernels *k);
static void rows_adjacent_pairs(q35_simd level, const q35_kernels *k);
static void gemv_two_streams(q35_simd level, const q35_kernels *k);
static void z2r_twin(q35_simd level, const q35_kernels *k, int t0, int t1);
static void kr_twin(q35_simd level, const q35_kernels *k, int t0, int t1);
static void iq_r_twin(q35_simd level, const q35_kernels *k, int t0, int t1);
static void repack_vector_twin(void);

int main(void) {
  public_api();
  repack_vector_twin();
  kquant_cross_level();
  z_cross_level(Q35_TYPE_Q4_0);
  z_cross_level(Q35_TYPE_IQ4_NL);
  z_cross_level(Q35_TYPE_MXFP4);
  long cases = 0;
  /* under an emulator (tests/test_aarch64.sh sets Q35_EMULATED): the SIMD level only */
  const int emu = getenv("Q35_EMULATED") != NULL;
  for (q35_simd level = Q35_SIMD_SCALAR; level <= Q35_SIMD_NEON; level++) {
    q35_kernels k;
    if (emu && level == Q35_SIMD_SCALAR && q35_simd_active() != Q35_SIMD_SCALAR) continue;
    if (q35_kernels_get(level, &k) != 0) {
      printf("level %s: not available (this CPU or Q35_SIMD), skipped\n", q35_simd_name(level));
      continue;
    }
    const int before = failures;
    q8_0_raw_weights(q35_simd_name(level), &k);
    for (int t = 0; t < NTYPES; t++) {
      const int type = types[t];
      const int blk = q35_type_block(type) < 32 ? 8 : q35_type_block(type);
      /* n: one block, a few, odd block counts; float types also lengths with a scalar tail, and
       * one that ends a chunk of QS_T_FLTK (512 elements) short, then 8-element steps and a tail */
      int64_t ns[6] = {blk, 3 * blk, 2 * 256 + (blk == 32 ? 64 : 0), 1024 + 256, 37, 2 * 512 + 480 + 16 + 5};
      const int nn = q35_type_block(type) == 1 ? 6 : 4;
      for (int ni = 0; ni < nn; ni++) {
        f64_check(q35_simd_name(level), &k, type, ns[ni]);
        for (int nr = 1; nr <= 9; nr += (ni < 2 ? 1 : 2))
          for (int nc = 1; nc <= 9; nc += (ni < 2 ? 1 : 3)) {
            tile_case(q35_simd_name(level), &k, type, ns[ni], nr, nc);
            cases++;
          }
        /* wide tiles (the avx2 level's Q4_0 runs 1 x 16) and their leftover columns */
        static const int wide[] = {16, 23, 33};
        for (int nr = 1; nr <= 5; nr += 2)
          for (int i = 0; i < 3; i++) {
            tile_case(q35_simd_name(level), &k, type, ns[ni], nr, wide[i]);
            cases++;
          }
      }
      /* big enough to cross the column and row panels */
      if (level > 0) {
        tile_case(q35_simd_name(level), &k, type, 4096, 21, 67);
        cases++;
        /* one column of many rows: the avx2 gemv's two-stream path (rows 128 KiB and more apart),
         * an odd row count, and (Q4_0, Q8_0) a last group of 3 blocks */
        if (type == Q35_TYPE_Q4_0 || type == Q35_TYPE_Q8_0)
          for (int i = 0; i < 2; i++, cases++) tile_case(q35_simd_name(level), &k, type, i ? 2048 + 96 : 2048, 301, 1);
      }
    }
    rows2_two_streams(level, &k);
    rows_adjacent_pairs(level, &k);
    gemv_two_streams(level, &k);
    z2r_twin(level, &k, Q35_TYPE_Q4_0, Q35_TYPE_Q4_0R);
    z2r_twin(level, &k, Q35_TYPE_IQ4_NL, Q35_TYPE_IQ4_NLR);
    z2r_twin(level, &k, Q35_TYPE_MXFP4, Q35_TYPE_MXFP4R);
    z2r_twin(level, &k, Q35_TYPE_Q5_1, Q35_TYPE_Q5_1R);
    /* the k-quants repacked at load, one table-driven test */
    static const int krt[][2] = {{Q35_TYPE_Q4_K, Q35_TYPE_Q4_KR},
                                 {Q35_TYPE_Q6_K, Q35_TYPE_Q6_KR},
                                 {Q35_TYPE_Q2_K, Q35_TYPE_Q2_KR},
                                 {Q35_TYPE_Q3_K, Q35_TYPE_Q3_KR}};
    for (size_t i = 0; i < sizeof krt / sizeof krt[0]; i++) kr_twin(level, &k, krt[i][0], krt[i][1]);
    iq_r_twin(level, &k, Q35_TYPE_IQ2_XXS, Q35_TYPE_IQ2_XXSR);
    iq_r_twin(level, &k, Q35_TYPE_IQ3_XXS, Q35_TYPE_IQ3_XXSR);
    iq_r_twin(level, &k, Q35_TYPE_IQ3_S, Q35_TYPE_IQ3_SR);
    iq_r_twin(level, &k, Q35_TYPE_IQ2_XS, Q35_TYPE_IQ2_XSR);
    iq_r_twin(level, &k, Q35_TYPE_IQ2_S, Q35_TYPE_IQ2_SR);
    iq_r_twin(level, &k, Q35_TYPE_IQ1_S, Q35_TYPE_IQ1_SR);
    iq_r_twin(level, &k, Q35_TYPE_IQ1_M, Q35_TYPE_IQ1_MR);
    printf("level %s: %s\n", q35_simd_name(level), failures == before ? "ok" : "FAILED");
  }
  printf("%ld tile cases\n", cases);
  return check_done("test_quant_tile");
}

/*
 * Q4_0's two-stream paths against per-row vec_dot: the one-row tiles of 1..3 columns (the AVX-512
 * level runs rows r and r + nr/2 together once the halves are 128 KiB apart), and the gemv2 entry
 * (two ranges, row r of each) with the ranges near each other and far apart, either way round,
 * through the level's table and, for the active level, through q35_vec_dot_rows2.
 */
static void rows2_two_streams(q35_simd level, const q35_kernels *k) {
  const char *lvl = q35_simd_name(level);
  const int type = Q35_TYPE_Q4_0, vt = q35_kernels_vec_dot_type(k, type);
  for (int i = 0; i < 2; i++) {
    const int64_t n = i ? 2048 + 96 : 2048; /* the second: a last group of 3 blocks */
    for (int nc = 2; nc <= 3; nc++) tile_case(lvl, k, type, n, 301, nc);
    const int nr = 37, ors = 3;
    const size_t ws = q35_row_size(type, n) + (size_t)(16 * i), far = (size_t)300 << 10;
    const int nall = 2 * nr + (int)(far / ws); /* the last nr rows start > 300 KiB after the first */
    uint8_t *wbuf, *xb;
    const uint8_t *w = make_rows(type, n, nall, ws, 3, 0, &wbuf);
    const uint8_t *x = make_rows(vt, n, 1, q35_row_size(vt, n), 5, 1, &xb);
    const int pairs[4][2] = {{0, nr}, {nr, 0}, {0, nall - nr}, {nall - nr, 0}}; /* first rows of wa, wb */
    float *oa = malloc(sizeof(float) * (size_t)(nr * ors)), *ob = malloc(sizeof(float) * (size_t)(nr * ors));
    for (int p = 0; p < 4; p++) {
      const uint8_t *wa = w + (size_t)pairs[p][0] * ws, *wb = w + (size_t)pairs[p][1] * ws;
      for (int api = 0; api < 2; api++) {
        if (api ? q35_simd_active() != level : !k->gemv2[type]) continue;
        memset(oa, 0xFF, sizeof(float) * (size_t)(nr * ors));
        memset(ob, 0xFF, sizeof(float) * (size_t)(nr * ors));
        if (api) q35_vec_dot_rows2(type, n, wa, wb, ws, nr, x, oa, ob, (size_t)ors);
        else k->gemv2[type](n, wa, wb, ws, nr, x, oa, ob, (size_t)ors);
        int bad = 0, gap = 0;
        for (int r = 0; r < nr; r++) {
          const float ea = k->vec_dot[type](n, wa + (size_t)r * ws, x), eb = k->vec_dot[type](n, wb + (size_t)r * ws, x);
          bad += memcmp(&ea, &oa[r * ors], 4) != 0;
          bad += memcmp(&eb, &ob[r * ors], 4) != 0;
          for (int j = 1; j < ors; j++) gap += !isnan(oa[r * ors + j]) || !isnan(ob[r * ors + j]);
        }
        CHECK(!bad, "%s q4_0 n=%lld rows2 (%s, rows %d and %d): %d of %d outputs != vec_dot", lvl, (long long)n,
              api ? "q35_vec_dot_rows2" : "gemv2", pairs[p][0], pairs[p][1], bad, 2 * nr);
        CHECK(!gap, "%s q4_0 rows2: %d writes between the output rows", lvl, gap);
      }
    }
    free(oa); free(ob); free(wbuf); free(xb);
  }
}

/*
 * Q4_0's one-row tiles of 2 and 3 columns on rows closer together than the two-stream threshold:
 * the AVX-512 level runs adjacent rows r and r + 1 as pairs (each activation vector loaded once
 * for both), an odd count's last row alone. Full groups of 16 blocks and a short last group (n =
 * 2048 + 96: 3 blocks; n = 576: 2), even and odd row counts, against per-pair vec_dot.
 */
static void rows_adjacent_pairs(q35_simd level, const q35_kernels *k) {
  static const int64_t ns[3] = {2048, 2048 + 96, 576};
  static const int nrs[5] = {2, 3, 8, 17, 64};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++)
      for (int nc = 2; nc <= 3; nc++) tile_case(q35_simd_name(level), k, Q35_TYPE_Q4_0, ns[i], nrs[j], nc);
}

/*
 * The K-quant one-column products of many rows (the avx2 gemv runs rows r and r + nr/2 together
 * once the halves are 128 KiB apart) against the level's per-row vec_dot, on the cross-level
 * check's wild rows (raw bytes, edge scales, extreme and inconsistent activations) at odd
 * addresses: row counts just under and just over the two-stream threshold (odd, so one row is
 * left over) and 301, an output stride of 3 whose gaps must stay untouched (a NaN pattern that
 * no product gives marks what was not written).
 */
static void gemv_two_streams(q35_simd level, const q35_kernels *k) {
  const char *lvl = q35_simd_name(level);
  static const int kt[] = {Q35_TYPE_Q4_K, Q35_TYPE_Q5_K, Q35_TYPE_Q6_K, Q35_TYPE_Q4_KR, Q35_TYPE_Q6_KR};
  const size_t far = (size_t)128 << 10, ors = 3;
  const uint32_t unset = 0x7FC0DEADu;
  for (int t = 0; t < 5; t++) {
    const int type = kt[t], vt = q35_kernels_vec_dot_type(k, type);
    if (vt != Q35_TYPE_Q8_K && vt != Q35_TYPE_Q8_KP) continue; /* the same random blocks either way */
    for (int i = 0; i < 2; i++) {
      const int64_t n = i ? 9 * QK_K : 8 * QK_K;
      const size_t ws = q35_row_size(type, n) + (size_t)(8 * i), xs = q35_row_size(Q35_TYPE_Q8_K, n);
      const int hmin = (int)((far + ws - 1) / ws); /* the fewest rows per half that take two streams */
      const int nrs[3] = {2 * hmin - 1, 2 * hmin + 1, 301};
      uint8_t *wbuf = malloc(ws * 301 + 1), *xbuf = malloc(xs + 1);
      uint8_t *w = wbuf + 1, *x = xbuf + 1; /* odd addresses */
      for (int r = 0; r < 301; r++) rnd_kquant_row(type, w + (size_t)r * ws, n);
      rnd_q8k_row(x, n, i);
      float *want = malloc(sizeof(float) * 301), *o = malloc(sizeof(float) * 301 * ors);
      for (int r = 0; r < 301; r++) want[r] = k->vec_dot[type](n, w + (size_t)r * ws, x);
      for (int j = 0; j < 3; j++) {
        const int nr = nrs[j] < 301 ? nrs[j] : 301;
        for (size_t g = 0; g < 301 * ors; g++) memcpy(&o[g], &unset, 4);
        q35_tile_run(k, type, n, w, ws, nr, x, xs, 1, o, ors, 0);
        int bad = 0, gap = 0;
        for (int r = 0; r < nr; r++) {
          bad += !same_float(o[(size_t)r * ors], want[r]) || memcmp(&o[(size_t)r * ors], &unset, 4) == 0;
          for (size_t g = 1; g < ors; g++) gap += memcmp(&o[(size_t)r * ors + g], &unset, 4) != 0;
        }
        for (size_t g = (size_t)nr * ors; g < 301 * ors; g++) gap += memcmp(&o[g], &unset, 4) != 0;
        CHECK(!bad, "%s %s n=%lld nr=%d: one column of many rows != vec_dot in %d rows", lvl, q35_type_name(type),
              (long long)n, nr, bad);
        CHECK(!gap, "%s %s n=%lld nr=%d: %d writes outside the output rows", lvl, q35_type_name(type), (long long)n,
              nr, gap);
      }
      free(want); free(o); free(wbuf); free(xbuf);
    }
  }
}

/*
 * Q4_0R / IQ4_NLR / MXFP4R / Q5_1R (t1: Q4_0 / IQ4_NL / MXFP4 / Q5_1 rows repacked at load,
 * q35_repack_row)
 * against the plain type t0 at every level: the repack moves back to the same bytes, its dequantize
 * gives t0's floats, and its vec_dot, tiles (every shape the level runs: 1..9 rows, 1..9 and the
 * wide 16 / 23 / 33 columns), one column of many rows (the two-stream gemv) and gemv2 give t0's
 * results bit for bit, on lengths with and without a short last group (which stays plain). The
 * level's kernels for t1 may be a lower level's (the AVX2 ones, where a level does not load t1);
 * the results must still equal that table's t0 ones. At AVX-512 with VBMI, IQ4_NLR / MXFP4R are
 * loaded and their tiles and gemv are that level's own (the AVX2 vec_dot and gemv2): all held to
 * the level's plain IQ4_NL / MXFP4 here. At the scalar level this holds the reference twins (the
 * row moved back, then t0's reference) to t0's reference. MXFP4: a third of the rows take E8M0
 * bytes 0..3 (the subnormal scales) and 120..135.
 */
static void z2r_twin(q35_simd level, const q35_kernels *k, int t0, int t1) {
  const char *lvl = q35_simd_name(level), *nm = q35_type_name(t1);
  if (q35_kernels_vec_dot_type(k, t0) != q35_kernels_vec_dot_type(k, t1)) {
    CHECK(0, "%s: %s takes another activation type than %s", lvl, nm, q35_type_name(t0));
    return;
  }
  const int vt = q35_kernels_vec_dot_type(k, t0);
  /* t0's results from this table where its t1 kernels are the Q8_0Z ones; where t0 takes Q8_0X
   * (AVX-512 without VBMI, the testing aid Q35_Q4_0_X, the reference) t1 keeps the reference
   * entries, so they are held to the reference table's t0 */
  q35_kernels refk;
  q35_kernels_ref(&refk);
  const q35_kernels *kq = vt == Q35_TYPE_Q8_0Z ? k : &refk;
  q35_kernels a2k;
  if (t0 == Q35_TYPE_Q5_1 && k->vec_dot[t1] != refk.vec_dot[t1]) {
    /* Q5_1R's kernels are the avx2 level's (at avx512 too, never loaded there): held to that
     * table's Q5_1 */
    kq = k;
    if (level == Q35_SIMD_AVX512) {
      if (q35_kernels_get(Q35_SIMD_AVX2, &a2k) != 0) {
        CHECK(0, "%s: no avx2 table for %s", lvl, nm);
        return;
      }
      kq = &a2k;
    }
  }
  static const int64_t ns[] = {32, 96, 512, 512 + 64, 1024 + 256, 2048, 2048 + 96};
  static const int ncs[] = {1, 2, 3, 4, 5, 8, 9, 16, 23, 33};
  for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
    const int64_t n = ns[ni];
    const int nrmax = n >= 2048 ? 301 : 9;
    const size_t rs = q35_row_size(t0, n), ws = rs + (ni % 2 ? 0 : 7), xs = q35_row_size(vt, n) + (ni % 3 ? 0 : 5);
    uint8_t *wb, *xb;
    uint8_t *w = make_rows(t0, n, nrmax, ws, 1 + ni, 0, &wb);
    const uint8_t *x = make_rows(vt, n, 33, xs, 3, 1, &xb);
    if (t0 == Q35_TYPE_MXFP4)
      for (int r = 0; r < nrmax; r += 3)
        for (int64_t i = 0; i < n / 32; i++) w[(size_t)r * ws + (size_t)i * 17] = (uint8_t)(rng_u64() % 2 ? rng_u64() % 4 : 120 + rng_u64() % 16);
    uint8_t *rb = malloc(ws * (size_t)nrmax + 64), *back = malloc(rs);
    uint8_t *wr = rb + 5; /* an odd address */
    int bad = 0;
    for (int r = 0; r < nrmax; r++) {
      q35_repack_row(t1, w + (size_t)r * ws, wr + (size_t)r * ws, n);
      q35_unrepack_row(t1, wr + (size_t)r * ws, back, n);
      bad += memcmp(back, w + (size_t)r * ws, rs) != 0;
    }
    CHECK(!bad, "%s %s n=%lld: repack then unrepack changed %d rows", lvl, nm, (long long)n, bad);
    float *f0 = malloc(sizeof(float) * (size_t)n), *f1 = malloc(sizeof(float) * (size_t)n);
    bad = 0;
    for (int r = 0; r < 3; r++) {
      k->dequantize[t0](w + (size_t)r * ws, f0, n);
      k->dequantize[t1](wr + (size_t)r * ws, f1, n);
      bad += memcmp(f0, f1, sizeof(float) * (size_t)n) != 0;
      bad += !same_float(kq->vec_dot[t0](n, w + (size_t)r * ws, x), k->vec_dot[t1](n, wr + (size_t)r * ws, x));
    }
    CHECK(!bad, "%s %s n=%lld: dequantize / vec_dot differ from %s's", lvl, nm, (long long)n, q35_type_name(t0));
    free(f0), free(f1);
    float *want = malloc(sizeof(float) * (size_t)nrmax * 33), *got = malloc(sizeof(float) * (size_t)nrmax * 33);
    const int nrs[] = {1, 2, 3, 4, 5, 7, 9, nrmax};
    for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; i++)
      for (size_t j = 0; j < sizeof ncs / sizeof ncs[0]; j++) {
        const int nr = nrs[i], nc = nrmax > 9 && nr > 9 && ncs[j] > 3 ? 0 : ncs[j];
        if (!nc || (i == sizeof nrs / sizeof nrs[0] - 1 && nr == 9)) continue;
        memset(want, 0xFF, sizeof(float) * (size_t)nr * nc);
        memset(got, 0xFF, sizeof(float) * (size_t)nr * nc);
        q35_tile_run(kq, t0, n, w, ws, nr, x, xs, nc, want, (size_t)nc, 1);
        q35_tile_run(k, t1, n, wr, ws, nr, x, xs, nc, got, (size_t)nc, 1);
        CHECK(!memcmp(want, got, sizeof(float) * (size_t)nr * nc), "%s %s n=%lld %dx%d: tile != %s's", lvl, nm,
              (long long)n, nr, nc, q35_type_name(t0));
        if (nc == 1) {
          bad = gemv2_bad(k, t1, n, wr, ws, nr, x, want, 1);
          CHECK(!bad, "%s %s n=%lld nr=%d: gemv2 != %s's in %d rows", lvl, nm, (long long)n, nr, q35_type_name(t0), bad);
        }
      }
    free(want), free(got), free(rb), free(back), free(wb), free(xb);
  }
}

/*
 * Q4_KR / Q6_KR / Q2_KR / Q3_KR (t1: Q4_K / Q6_K / Q2_K / Q3_K repacked at load, q35_repack_row;
 * the AVX2 vector rewrite where the CPU runs it) against the plain type (t0) at every level: the
 * repack moves back to the same bytes, its dequantize gives t0's floats, its
 * vec_dot is within the float64 bound of the dequantized rows (f64_check's, on a quantized row
 * repacked; the reference twins, t0's on the row moved back and Q8_K's on the block moved back,
 * dequantize them), and its vec_dot, tiles (1..9 rows, 1..9 and the wide 16 / 23 / 33 columns),
 * one column of many rows and gemv2 give t0's results bit for bit from the table whose t0 takes
 * t1's activations: this level's (the reference: Q8_K; avx2: Q8_KP, where plain t0 is rearranged
 * on the fly), or at avx512, whose t0 takes Q8_K but whose t1 kernels are the avx2 level's, the
 * avx2 table's; t0's gemv2 equals its tile there too. Weights are raw random blocks (every scale,
 * min and code bit pattern; d, dmin finite fp16 with edge values: rnd_kquant_row).
 */
static void kr_twin(q35_simd level, const q35_kernels *k, const int t0, const int t1) {
  const char *lvl = q35_simd_name(level), *tn = q35_type_name(t1);
  const int vt = q35_kernels_vec_dot_type(k, t1);
  q35_kernels other;
  const q35_kernels *kq = k;
  if (q35_kernels_vec_dot_type(k, t0) != vt) {
    if (q35_kernels_get(Q35_SIMD_AVX2, &other) != 0 || q35_kernels_vec_dot_type(&other, t0) != vt) {
      CHECK(0, "%s: no table whose %s takes %s's activation type", lvl, q35_type_name(t0), tn);
      return;
    }
    kq = &other;
  }
  static const int64_t ns[] = {256, 768, 2048, 4096};
  static const int ncs[] = {1, 2, 3, 4, 5, 8, 9, 16, 23, 33};
  for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
    const int64_t n = ns[ni];
    { /* vec_dot of a quantized row, repacked, against float64 (f64_check's bound) */
      uint8_t *qb, *ab;
      const uint8_t *qw = make_rows(t0, n, 1, q35_row_size(t0, n), 1, 0, &qb);
      const uint8_t *qx = make_rows(vt, n, 1, q35_row_size(vt, n), 3, 1, &ab);
      uint8_t *qr = malloc(q35_row_size(t0, n));
      q35_repack_row(t1, qw, qr, n);
      float *dw = malloc(sizeof(float) * (size_t)n), *dx = malloc(sizeof(float) * (size_t)n);
      q35_dequantize_row_ref(t1, qr, dw, n);
      q35_dequantize_row_ref(vt, qx, dx, n);
      double f = 0, mag = 0;
      for (int64_t i = 0; i < n; i++) f += (double)dw[i] * dx[i], mag += fabs((double)dw[i] * dx[i]);
      const float got = k->vec_dot[t1](n, qr, qx);
      CHECK(fabs(got - f) <= 1e-5 * mag, "%s %s n=%lld vec_dot %.9g vs f64 %.9g", lvl, tn, (long long)n, got, f);
      free(dw), free(dx), free(qr), free(qb), free(ab);
    }
    const int nrmax = n >= 2048 ? 301 : 9;
    const size_t rs = q35_row_size(t0, n), ws = rs + (ni % 2 ? 0 : 7), xs = q35_row_size(vt, n) + (ni % 3 ? 0 : 5);
    uint8_t *wb = malloc(ws * (size_t)nrmax + 64), *xb = malloc(xs * 33 + 64);
    uint8_t *w = wb + 1 + ni, *x = xb + 3;
    for (int r = 0; r < nrmax; r++) rnd_kquant_row(t0, w + (size_t)r * ws, n);
    for (int c = 0; c < 33; c++) rnd_q8k_row(x + (size_t)c * xs, n, 0);
    uint8_t *rb = malloc(ws * (size_t)nrmax + 64), *back = malloc(rs);
    uint8_t *wr = rb + 5; /* an odd address */
    int bad = 0;
    for (int r = 0; r < nrmax; r++) {
      q35_repack_row(t1, w + (size_t)r * ws, wr + (size_t)r * ws, n);
      q35_unrepack_row(t1, wr + (size_t)r * ws, back, n);
      bad += memcmp(back, w + (size_t)r * ws, rs) != 0;
    }
    CHECK(!bad, "%s %s n=%lld: repack then unrepack changed %d rows", lvl, tn, (long long)n, bad);
    float *f0 = malloc(sizeof(float) * (size_t)n), *f1 = malloc(sizeof(float) * (size_t)n);
    bad = 0;
    for (int r = 0; r < 3; r++) {
      k->dequantize[t0](w + (size_t)r * ws, f0, n);
      k->dequantize[t1](wr + (size_t)r * ws, f1, n);
      bad += memcmp(f0, f1, sizeof(float) * (size_t)n) != 0;
      bad += !same_float(kq->vec_dot[t0](n, w + (size_t)r * ws, x), k->vec_dot[t1](n, wr + (size_t)r * ws, x));
    }
    CHECK(!bad, "%s %s n=%lld: dequantize / vec_dot differ from the plain type's", lvl, tn, (long long)n);
    free(f0), free(f1);
    float *want = malloc(sizeof(float) * (size_t)nrmax * 33), *got = malloc(sizeof(float) * (size_t)nrmax * 33);
    const int nrs[] = {1, 2, 3, 4, 5, 7, 9, nrmax};
    for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; i++)
      for (size_t j = 0; j < sizeof ncs / sizeof ncs[0]; j++) {
        const int nr = nrs[i], nc = nrmax > 9 && nr > 9 && ncs[j] > 3 ? 0 : ncs[j];
        if (!nc || (i == sizeof nrs / sizeof nrs[0] - 1 && nr == 9)) continue;
        memset(want, 0xFF, sizeof(float) * (size_t)nr * nc);
        memset(got, 0xFF, sizeof(float) * (size_t)nr * nc);
        q35_tile_run(kq, t0, n, w, ws, nr, x, xs, nc, want, (size_t)nc, 1);
        q35_tile_run(k, t1, n, wr, ws, nr, x, xs, nc, got, (size_t)nc, 1);
        CHECK(!memcmp(want, got, sizeof(float) * (size_t)nr * nc), "%s %s n=%lld %dx%d: tile != the plain type's", lvl,
              tn, (long long)n, nr, nc);
        bad = 0;
        for (int r = 0; r < nr; r++)
          for (int c = 0; c < nc; c++)
            bad += !same_float(got[r * nc + c], k->vec_dot[t1](n, wr + (size_t)r * ws, x + (size_t)c * xs));
        CHECK(!bad, "%s %s n=%lld %dx%d: tile != vec_dot in %d pairs", lvl, tn, (long long)n, nr, nc, bad);
        if (nc == 1) {
          bad = gemv2_bad(k, t1, n, wr, ws, nr, x, want, 1);
          CHECK(!bad, "%s %s n=%lld nr=%d: gemv2 != the plain type's in %d rows", lvl, tn, (long long)n, nr, bad);
          bad = gemv2_bad(kq, t0, n, w, ws, nr, x, want, 1);
          CHECK(!bad, "%s %s n=%lld nr=%d: the plain type's gemv2 != its tile in %d rows", lvl, tn, (long long)n, nr, bad);
        }
      }
    free(want), free(got), free(rb), free(back), free(wb), free(xb);
  }
}

/*
 * IQ2_XXSR / IQ3_XXSR / IQ2_XSR / IQ2_SR / IQ3_SR / IQ1_SR / IQ1_MR (the x86 levels' load-time layouts of
 * IQ2_XXS / IQ3_XXS / IQ2_XS / IQ2_S / IQ3_S / IQ1_S / IQ1_M, 102 / 134 / 106 / 106 / 134 / 74 / 82 bytes per
 * 256 elements where the file types have 66 / 98 / 74 / 82 / 110 / 50 / 56): repack then unrepack gives the row
 * back byte for byte; dequantize, vec_dot, tiles of
 * every shape (rows with tails of the row and column panels, one column through gemv / gemv2) on
 * the repacked rows give IQ2_XXS's results on the plain rows bit for bit, at every level.
 */
static void iq_r_twin(q35_simd level, const q35_kernels *k, int t0, int t1) {
  const char *lvl = q35_simd_name(level), *nm = q35_type_name(t1);
  const size_t bsz = q35_type_size(t0);
  const int vt = q35_kernels_vec_dot_type(k, t1);
  CHECK(vt == q35_kernels_vec_dot_type(k, t0), "%s %s: activation type %d, the plain type's %d", lvl, nm, vt,
        q35_kernels_vec_dot_type(k, t0));
  static const int64_t ns[] = {256, 768, 2048, 4096};
  static const int ncs[] = {1, 2, 3, 4, 5, 8, 9, 16, 23, 33, 67};
  for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
    const int64_t n = ns[ni];
    const int nrmax = n >= 2048 ? 301 : 9;
    const size_t rs = q35_row_size(t0, n), rsr = q35_row_size(t1, n);
    const size_t ws = rs + (ni % 2 ? 0 : 7), wsr = rsr + (ni % 2 ? 3 : 0), xs = q35_row_size(vt, n) + (ni % 3 ? 0 : 5);
    uint8_t *wb = malloc(ws * (size_t)nrmax + 64), *xb = malloc(xs * 67 + 64);
    uint8_t *w = wb + 1 + ni, *x = xb + 3;
    for (int r = 0; r < nrmax; r++)
      for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t *b = w + (size_t)r * ws + (size_t)i * bsz;
        for (size_t j = 0; j < bsz; j++) b[j] = (uint8_t)rng_u64();
        const uint16_t d = rnd_fp16();
        if (t0 == Q35_TYPE_IQ1_M) /* IQ1_M's d: the top nibbles of its four scale words */
          for (int w4 = 0; w4 < 4; w4++) {
            uint8_t *sw = b + offsetof(blk_iq1_m, scales) + 2 * w4 + 1;
            *sw = (uint8_t)((*sw & 0x0F) | ((d >> (4 * w4)) & 15) << 4);
          }
        else memcpy(b, &d, 2);
      }
    /* activations as q35's Q8_K quantizer makes them: values in -127..127 (the plain kernels negate
     * them) and bsums the sums of their bytes (IQ2_XXSR's bias comes back through them, as the IQ
     * prefill tiles' does) */
    for (int c = 0; c < 67; c++) {
      rnd_q8k_row(x + (size_t)c * xs, n, 0);
      for (int64_t i = 0; i < n / QK_K; i++) {
        blk_q8_k *b = (blk_q8_k *)(void *)(x + (size_t)c * xs + (size_t)i * sizeof(blk_q8_k));
        for (int g = 0; g < QK_K / 16; g++) {
          int sum = 0;
          for (int j = 0; j < 16; j++) sum += b->qs[16 * g + j] = b->qs[16 * g + j] < -127 ? -127 : b->qs[16 * g + j];
          b->bsums[g] = (int16_t)sum;
        }
      }
    }
    uint8_t *rb = malloc(wsr * (size_t)nrmax + 64), *back = malloc(rs);
    uint8_t *wr = rb + 5; /* an odd address */
    int bad = 0;
    for (int r = 0; r < nrmax; r++) {
      q35_repack_row(t1, w + (size_t)r * ws, wr + (size_t)r * wsr, n);
      q35_unrepack_row(t1, wr + (size_t)r * wsr, back, n);
      bad += memcmp(back, w + (size_t)r * ws, rs) != 0;
    }
    CHECK(!bad, "%s %s n=%lld: repack then unrepack changed %d rows", lvl, nm, (long long)n, bad);
    float *f0 = malloc(sizeof(float) * (size_t)n), *f1 = malloc(sizeof(float) * (size_t)n);
    bad = 0;
    for (int r = 0; r < 3; r++) {
      k->dequantize[t0](w + (size_t)r * ws, f0, n);
      k->dequantize[t1](wr + (size_t)r * wsr, f1, n);
      bad += memcmp(f0, f1, sizeof(float) * (size_t)n) != 0;
      bad += !same_float(k->vec_dot[t0](n, w + (size_t)r * ws, x), k->vec_dot[t1](n, wr + (size_t)r * wsr, x));
    }
    CHECK(!bad, "%s %s n=%lld: dequantize / vec_dot differ from the plain type's", lvl, nm, (long long)n);
    free(f0), free(f1);
    float *want = malloc(sizeof(float) * (size_t)nrmax * 67), *got = malloc(sizeof(float) * (size_t)nrmax * 67);
    const int nrs[] = {1, 2, 3, 4, 5, 7, 9, nrmax};
    for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; i++)
      for (size_t j = 0; j < sizeof ncs / sizeof ncs[0]; j++) {
        const int nr = nrs[i], nc = nrmax > 9 && nr > 9 && ncs[j] > 3 ? 0 : ncs[j];
        if (!nc || (i == sizeof nrs / sizeof nrs[0] - 1 && nr == 9)) continue;
        memset(want, 0xFF, sizeof(float) * (size_t)nr * nc);
        memset(got, 0xFF, sizeof(float) * (size_t)nr * nc);
        q35_tile_run(k, t0, n, w, ws, nr, x, xs, nc, want, (size_t)nc, 1);
        q35_tile_run(k, t1, n, wr, wsr, nr, x, xs, nc, got, (size_t)nc, 1);
        CHECK(!memcmp(want, got, sizeof(float) * (size_t)nr * nc), "%s %s n=%lld %dx%d: tile != the plain type's", lvl, nm,
              (long long)n, nr, nc);
        bad = 0;
        for (int r = 0; r < nr; r++)
          for (int c = 0; c < nc; c++)
            bad += !same_float(got[r * nc + c], k->vec_dot[t1](n, wr + (size_t)r * wsr, x + (size_t)c * xs));
        CHECK(!bad, "%s %s n=%lld %dx%d: tile != vec_dot in %d pairs", lvl, nm, (long long)n, nr, nc, bad);
        if (nc == 1) {
          bad = gemv2_bad(k, t1, n, wr, wsr, nr, x, want, 1);
          CHECK(!bad, "%s %s n=%lld nr=%d: gemv2 != the plain type's in %d rows", lvl, nm, (long long)n, nr, bad);
        }
      }
    free(want), free(got), free(rb), free(back), free(wb), free(xb);
  }
}

/*
 * The loader's rewrite q35_repack_row (256-bit vectors at the AVX2 and AVX-512 levels: Q4_0R,
 * IQ4_NLR, MXFP4R, Q2_KR, Q3_KR, Q4_KR, Q6_KR, IQ2_XXSR, IQ3_XXSR, IQ3_SR, IQ2_XSR, IQ2_SR, IQ1_SR,
 * IQ1_MR) against its reference twin q35_repack_row_ref (the scalar moves), at the active level
 * (ctest runs this binary at each): the same bytes for rows of random bytes (every index, sign and
 * scale bit pattern), lengths with and without a short last group of 16 blocks, written at an odd
 * address: every byte of the row written, nothing outside it.
 */
static void repack_vector_twin(void) {
  static const int ts[][2] = {{Q35_TYPE_Q4_0, Q35_TYPE_Q4_0R},     {Q35_TYPE_IQ4_NL, Q35_TYPE_IQ4_NLR},
                              {Q35_TYPE_MXFP4, Q35_TYPE_MXFP4R},   {Q35_TYPE_Q5_1, Q35_TYPE_Q5_1R},
                              {Q35_TYPE_Q2_K, Q35_TYPE_Q2_KR},     {Q35_TYPE_Q3_K, Q35_TYPE_Q3_KR},
                              {Q35_TYPE_Q4_K, Q35_TYPE_Q4_KR},     {Q35_TYPE_Q6_K, Q35_TYPE_Q6_KR},
                              {Q35_TYPE_IQ2_XXS, Q35_TYPE_IQ2_XXSR}, {Q35_TYPE_IQ3_XXS, Q35_TYPE_IQ3_XXSR},
                              {Q35_TYPE_IQ3_S, Q35_TYPE_IQ3_SR},   {Q35_TYPE_IQ2_XS, Q35_TYPE_IQ2_XSR},
                              {Q35_TYPE_IQ2_S, Q35_TYPE_IQ2_SR},   {Q35_TYPE_IQ1_S, Q35_TYPE_IQ1_SR},
                              {Q35_TYPE_IQ1_M, Q35_TYPE_IQ1_MR}};
  static const int64_t ns[] = {256, 512 + 64, 768, 2048 + 96, 4096};
  const char *lvl = q35_simd_name(q35_simd_active());
  for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
    const int t0 = ts[t][0], t1 = ts[t][1];
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
      const int64_t n = ns[ni];
      if (n % q35_type_block(t0)) continue;
      const size_t rs = q35_row_size(t0, n), ro = q35_row_size(t1, n);
      uint8_t *src = malloc(rs + 1), *a = malloc(ro + 64), *b = malloc(ro + 64);
      int bad = 0, over = 0;
      for (int rep = 0; rep < 20; rep++) {
        for (size_t i = 0; i < rs; i++) src[i + 1] = (uint8_t)rng_u64();
        /* different fills: a byte either leaves unwritten differs (the loader does not copy the
         * file's bytes under a same-size rewrite first: every byte must be written) */
        memset(a, 0x5A, ro + 64), memset(b, 0xA5, ro + 64);
        q35_repack_row(t1, src + 1, a + 3, n);
        q35_repack_row_ref(t1, src + 1, b + 3, n);
        bad += memcmp(a + 3, b + 3, ro) != 0;
        for (size_t i = 0; i < ro + 64; i++)
          if (i < 3 || i >= ro + 3) over += (a[i] != 0x5A) + (b[i] != 0xA5);
      }
      CHECK(!bad, "%s %s n=%lld: q35_repack_row != q35_repack_row_ref in %d of 20 rows", lvl, q35_type_name(t1),
            (long long)n, bad);
      CHECK(!over, "%s %s n=%lld: %d bytes written outside the row", lvl, q35_type_name(t1), (long long)n, over);
      free(src), free(a), free(b);
    }
  }
}
