/*
 * test_quant_iq.c - the IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M kernels of every SIMD
 * level this CPU has, held bit-equal to the scalar reference (quant_iq_ref.c):
 *   - vec_dot of each level == the reference's vec_dot, bit for bit, on blocks of random bytes
 *     (every grid index, sign pattern and scale; finite fp16 scales incl. zero and subnormal)
 *     against Q8_K activations from q35's quantizer and with extreme bytes (+-127);
 *   - the level's tile product == its own vec_dot per pair, bit for bit, for odd tile shapes,
 *     odd row strides and byte offsets, both output layouts, and tiles crossing the cache panels
 *     and the x86 prefill tiles' chunks (more than 4 columns: rows decoded once, quant_iq_256.inc);
 *   - every entry of the decode kernels' tables and every index field value (sign-field pairs,
 *     9/10/11/12-bit grid indices with the IQ1 delta signs) reached, row by row, against the
 *     reference (exhaustive_case: a wrong entry shows in its row; random blocks may miss it);
 *   - the reference itself against a float64 dot of the dequantized rows (1e-5 of sum |w*x|),
 *     so a wrong reference cannot hold the kernels to itself (ggml holds it in test_quant_iq_peer).
 * Runs per level too (test_quant_iq@avx2, @scalar: the public entry points at that level), and
 * under emulation per NEON variant (tests/test_aarch64.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

#include "check.h"

static uint64_t rng_state = 0x6A09E667F3BCC908ull;
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

static const struct {
  int type, d_at; /* byte offset of the fp16 scale (-1: IQ1_M's, spread over the scale words) */
} types[] = {{Q35_TYPE_IQ2_XXS, 0}, {Q35_TYPE_IQ2_XS, 0}, {Q35_TYPE_IQ2_S, 0}, {Q35_TYPE_IQ3_XXS, 0},
             {Q35_TYPE_IQ3_S, 0},   {Q35_TYPE_IQ1_S, 0},  {Q35_TYPE_IQ1_M, -1}};
#define NTYPES (int)(sizeof types / sizeof types[0])

static uint16_t rand_scale(void) {
  switch (rng_u64() % 16) {
  case 0: return 0x0000;
  case 1: return 0x8001; /* subnormal */
  case 2: return 0x7bff; /* the largest finite */
  default: return q35_fp32_to_fp16((float)exp(rng_gauss()) * 1e-3f * (rng_u64() & 1 ? -1.0f : 1.0f));
  }
}

/* nb blocks of random bytes at p, each with a finite scale */
static void random_blocks(int t, uint8_t *p, int64_t nb) {
  const size_t bs = q35_type_size(types[t].type);
  for (size_t i = 0; i < bs * (size_t)nb; i++) p[i] = (uint8_t)rng_u64();
  for (int64_t b = 0; b < nb; b++, p += bs) {
    const uint16_t d = rand_scale();
    if (types[t].d_at >= 0) memcpy(p + types[t].d_at, &d, 2);
    else
      for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
  }
}

/* a Q8_K row from q35's quantizer: gaussian, outliers, or saturated (+-127) blocks */
static void act_row(uint8_t *dst, int64_t n) {
  float *f = malloc(sizeof(float) * (size_t)n);
  const int mode = (int)(rng_u64() % 4);
  for (int64_t i = 0; i < n; i++) {
    f[i] = rng_gauss() * (rng_u64() % 50 == 0 ? 20.0f : 1.0f);
    if (mode == 3) f[i] = f[i] < 0 ? -1.0f : 1.0f;
  }
  q35_quantize_row(Q35_TYPE_Q8_K, f, dst, n);
  free(f);
}

static int same(float a, float b) { return memcmp(&a, &b, 4) == 0; }

/* rows of weights at stride ws from offset off, activations likewise */
typedef struct {
  uint8_t *wb, *xb;
  const uint8_t *w, *x;
  size_t ws, xs;
} rows;

static rows make_rows(int t, int64_t n, int nr, int nc) {
  rows m;
  const size_t wrs = q35_row_size(types[t].type, n), xrs = q35_row_size(Q35_TYPE_Q8_K, n);
  m.ws = wrs + (rng_u64() % 3 ? rng_u64() % 37 : 0);
  m.xs = xrs + (rng_u64() % 3 ? rng_u64() % 29 : 0);
  const size_t woff = rng_u64() % 8, xoff = rng_u64() % 8;
  m.wb = malloc(woff + m.ws * (size_t)nr + 64);
  m.xb = malloc(xoff + m.xs * (size_t)nc + 64);
  m.w = m.wb + woff;
  m.x = m.xb + xoff;
  for (int r = 0; r < nr; r++) random_blocks(t, m.wb + woff + (size_t)r * m.ws, n / QK_K);
  for (int c = 0; c < nc; c++) act_row(m.xb + xoff + (size_t)c * m.xs, n);
  return m;
}

static void free_rows(rows *m) { free(m->wb), free(m->xb); }

/* one level, one type, one shape: vec_dot == reference, tile == vec_dot (both layouts) */
static void tile_case(const char *lvl, const q35_kernels *k, const q35_kernels *ref, int t, int64_t n, int nr, int nc) {
  const int type = types[t].type;
  rows m = make_rows(t, n, nr, nc);
  float *want = malloc(sizeof(float) * (size_t)nr * nc), *got = malloc(sizeof(float) * (size_t)nr * (nc + 3) + 8);
  int bad_ref = 0, bad_tile = 0, bad_t = 0;
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) {
      const void *w = m.w + (size_t)r * m.ws, *x = m.x + (size_t)c * m.xs;
      want[r * nc + c] = k->vec_dot[type](n, w, x);
      bad_ref += !same(want[r * nc + c], ref->vec_dot[type](n, w, x));
    }
  const size_t ors = (size_t)nc + rng_u64() % 3;
  q35_tile_run(k, type, n, m.w, m.ws, nr, m.x, m.xs, nc, got, ors, 1);
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) bad_tile += !same(got[(size_t)r * ors + c], want[r * nc + c]);
  q35_tile_run(k, type, n, m.w, m.ws, nr, m.x, m.xs, nc, got, 1, (size_t)nr);
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) bad_t += !same(got[r + (size_t)c * nr], want[r * nc + c]);
  CHECK(!bad_ref, "%s %s n=%lld %dx%d: vec_dot != reference in %d pairs", lvl, q35_type_name(type), (long long)n, nr,
        nc, bad_ref);
  CHECK(!bad_tile, "%s %s n=%lld %dx%d: tile != vec_dot in %d pairs", lvl, q35_type_name(type), (long long)n, nr, nc,
        bad_tile);
  CHECK(!bad_t, "%s %s n=%lld %dx%d: transposed tile != vec_dot in %d pairs", lvl, q35_type_name(type), (long long)n,
        nr, nc, bad_t);
  free(want), free(got), free_rows(&m);
}

/* Every entry of the decode kernels' tables and every index path, at one level and type: rows
 * of one super-block each (random bytes, then the fields under test overwritten) that together
 * enumerate IQ2_XXS / IQ3_XXS / IQ2_XS's 14-bit sign-field pairs (all 16384, the sign-pair
 * table and IQ2_XS's pext path), IQ2_S's 10-bit and IQ3_S's 9-bit grid indices (pdep), and IQ1_S
 * / IQ1_M's 11-bit indices with each delta sign (the IQ1 tables, IQ1_M's 12-bit indices); each
 * row's vec_dot and one-column tile against the reference, against activations with no zero
 * byte (so a wrong sign or value in any entry changes that row's result). */
static void exhaustive_case(const char *lvl, const q35_kernels *k, const q35_kernels *ref, int t) {
  const int type = types[t].type;
  const size_t bs = q35_type_size(type);
  int nrows = 0;
  switch (type) {
  case Q35_TYPE_IQ2_XXS: case Q35_TYPE_IQ3_XXS: case Q35_TYPE_IQ2_XS: nrows = 16384 / 8; break;
  case Q35_TYPE_IQ2_S: nrows = 1024 / 32; break;
  case Q35_TYPE_IQ3_S: nrows = 512 / 64; break;
  default: nrows = 4096 / 32; break; /* IQ1_S, IQ1_M: 2048 indices x 2 delta signs, 4 per sub-block */
  }
  uint8_t *w = malloc(bs * (size_t)nrows), *x = malloc(q35_row_size(Q35_TYPE_Q8_K, QK_K));
  random_blocks(t, w, nrows);
  float f[QK_K];
  for (int i = 0; i < QK_K; i++) f[i] = (float)(i % 7 + 1) * (i % 3 ? 1.0f : -1.0f) + 0.25f * rng_gauss();
  q35_quantize_row(Q35_TYPE_Q8_K, f, x, QK_K);
  for (int r = 0; r < nrows; r++)
    for (int ib = 0; ib < 8; ib++) {
      uint8_t *b = w + (size_t)r * bs;
      const uint32_t sb = (uint32_t)(8 * r + ib); /* the sub-block's number */
      if (type == Q35_TYPE_IQ2_XXS || type == Q35_TYPE_IQ3_XXS || type == Q35_TYPE_IQ2_XS) {
        const uint32_t lo = sb, hi = sb ^ 0x2AAA; /* two 14-bit patterns per sub-block */
        if (type == Q35_TYPE_IQ2_XS) {
          uint16_t v[4];
          memcpy(v, b + 2 + 8 * ib, 8);
          const uint32_t f7[4] = {lo & 127, lo >> 7, hi & 127, hi >> 7};
          for (int j = 0; j < 4; j++) v[j] = (uint16_t)((v[j] & 511) | f7[j] << 9);
          memcpy(b + 2 + 8 * ib, v, 8);
        } else {
          uint8_t *at = b + 2 + (type == Q35_TYPE_IQ2_XXS ? 8 * ib + 4 : 64 + 4 * ib);
          uint32_t a;
          memcpy(&a, at, 4);
          a = (a & 0xF0000000u) | lo | hi << 14;
          memcpy(at, &a, 4);
        }
      } else if (type == Q35_TYPE_IQ2_S) {
        b[66 + ib] = 0;
        for (int j = 0; j < 4; j++) {
          const uint32_t idx = 4 * sb + (uint32_t)j;
          b[2 + 4 * ib + j] = (uint8_t)idx;
          b[66 + ib] |= (uint8_t)((idx >> 8) << (2 * j));
        }
      } else if (type == Q35_TYPE_IQ3_S) {
        b[66 + ib] = 0;
        for (int j = 0; j < 8; j++) {
          const uint32_t idx = 8 * sb + (uint32_t)j;
          b[2 + 8 * ib + j] = (uint8_t)idx;
          b[66 + ib] |= (uint8_t)((idx >> 8) << j);
        }
      } else if (type == Q35_TYPE_IQ1_S) {
        uint16_t h;
        memcpy(&h, b + 34 + 2 * ib, 2);
        h &= 0x7000; /* keep the scale */
        for (int j = 0; j < 4; j++) {
          const uint32_t i = 4 * sb + (uint32_t)j; /* bit 11: the delta sign, equal for the 4 */
          b[2 + 4 * ib + j] = (uint8_t)i;
          h |= (uint16_t)(((i >> 8) & 7) << (3 * j) | (i >> 11) << 15);
        }
        memcpy(b + 34 + 2 * ib, &h, 2);
      } else { /* IQ1_M: 3 index bits and the delta bit per nibble of qh */
        b[32 + 2 * ib] = b[32 + 2 * ib + 1] = 0;
        for (int j = 0; j < 4; j++) {
          const uint32_t i = 4 * sb + (uint32_t)j;
          b[4 * ib + j] = (uint8_t)i;
          b[32 + 2 * ib + j / 2] |= (uint8_t)(((i >> 8) & 15) << (4 * (j % 2)));
        }
      }
    }
  int bad = 0;
  float *got = malloc(sizeof(float) * (size_t)nrows);
  q35_tile_run(k, type, QK_K, w, bs, nrows, x, 0, 1, got, 1, 1);
  for (int r = 0; r < nrows; r++) {
    const float want = ref->vec_dot[type](QK_K, w + (size_t)r * bs, x);
    bad += !same(k->vec_dot[type](QK_K, w + (size_t)r * bs, x), want) + !same(got[r], want);
  }
  CHECK(!bad, "%s %s: every table entry / index path: %d of %d rows differ from the reference", lvl,
        q35_type_name(type), bad, nrows);
  /* the same blocks as rows of two and of four super-blocks against copies of the activations:
   * the one-column gemv's passes over 2 and 4 super-blocks (AVX-512) read every entry too */
  const size_t xrs = q35_row_size(Q35_TYPE_Q8_K, QK_K);
  uint8_t *x4 = malloc(4 * xrs);
  for (int j = 0; j < 4; j++) memcpy(x4 + (size_t)j * xrs, x, xrs);
  for (int g = 2; g <= 4; g += 2) {
    q35_tile_run(k, type, g * QK_K, w, (size_t)g * bs, nrows / g, x4, 0, 1, got, 1, 1);
    bad = 0;
    for (int r = 0; r < nrows / g; r++)
      bad += !same(got[r], ref->vec_dot[type](g * QK_K, w + (size_t)r * g * bs, x4));
    CHECK(!bad, "%s %s: every table entry, rows of %d super-blocks: %d of %d rows differ from the reference", lvl,
          q35_type_name(type), g, bad, nrows / g);
  }
  free(x4);
  free(got), free(w), free(x);
}

/* the reference against float64 of the dequantized rows */
static void f64_case(int t, int64_t n) {
  const int type = types[t].type;
  rows m = make_rows(t, n, 1, 1);
  float *dw = malloc(sizeof(float) * (size_t)n), *dx = malloc(sizeof(float) * (size_t)n);
  q35_dequantize_row_ref(type, m.w, dw, n);
  q35_dequantize_row_ref(Q35_TYPE_Q8_K, m.x, dx, n);
  double f = 0, mag = 0;
  for (int64_t i = 0; i < n; i++) f += (double)dw[i] * dx[i], mag += fabs((double)dw[i] * dx[i]);
  const float got = q35_vec_dot_ref(type, n, m.w, m.x);
  CHECK(fabs(got - f) <= 1e-5 * mag + 1e-30, "%s n=%lld reference vec_dot %.9g vs f64 %.9g", q35_type_name(type),
        (long long)n, got, f);
  free(dw), free(dx), free_rows(&m);
}

/* the public entry points at the active level (what the per-level variants exercise) */
static void public_api(int t) {
  const int type = types[t].type, nr = 5, nc = 3;
  const int64_t n = 3 * QK_K;
  rows m = make_rows(t, n, nr, nc);
  float got[15];
  q35_vec_dot_tile(type, n, m.w, m.ws, nr, m.x, m.xs, nc, got, nc);
  int bad = 0;
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) {
      const float v = q35_vec_dot(type, n, m.w + (size_t)r * m.ws, m.x + (size_t)c * m.xs);
      bad += !same(v, q35_vec_dot_ref(type, n, m.w + (size_t)r * m.ws, m.x + (size_t)c * m.xs));
      bad += !same(got[r * nc + c], v);
    }
  CHECK(!bad, "public %s at %s: vec_dot / tile != reference in %d cases", q35_type_name(type),
        q35_simd_name(q35_simd_active()), bad);
  free_rows(&m);
}

int main(void) {
  printf("SIMD level: %s\n", q35_simd_name(q35_simd_active()));
  q35_kernels ref;
  q35_kernels_get(Q35_SIMD_SCALAR, &ref);
  for (int t = 0; t < NTYPES; t++) {
    public_api(t);
    f64_case(t, QK_K);
    f64_case(t, 11 * QK_K);
  }
  long cases = 0;
  const int emu = getenv("Q35_EMULATED") != NULL; /* under qemu (tests/test_aarch64.sh): 10-50x slower */
  for (q35_simd level = Q35_SIMD_SCALAR + 1; level <= Q35_SIMD_NEON; level++) {
    q35_kernels k;
    if (q35_kernels_get(level, &k) != 0) continue;
    const int before = failures;
    for (int t = 0; t < NTYPES; t++) {
      exhaustive_case(q35_simd_name(level), &k, &ref, t);
      for (int nr = 1; nr <= 9; nr += 2)
        for (int nc = 1; nc <= 9; nc += (nr == 1 ? 1 : 2)) {
          tile_case(q35_simd_name(level), &k, &ref, t, QK_K * (1 + (int64_t)(rng_u64() % 3)), nr, nc);
          cases++;
        }
      /* one column (decode) over longer rows: AVX-512's gemv adds a row's super-blocks 2 or 4 at
       * a time (quant_iq_256.inc's _rowg), whose float order only shows from 4 super-blocks on;
       * 8 (whole passes) and 7 (4 + 2 + 1: every tail) */
      tile_case(q35_simd_name(level), &k, &ref, t, 8 * QK_K, 5, 1);
      tile_case(q35_simd_name(level), &k, &ref, t, 7 * QK_K, 4, 1);
      cases += 2;
      if (!emu) { /* crosses the column panel (NEON has no tile kernels: the emulated run skips it);
                   * x86 prefill tiles: rows decoded 8 super-blocks at a time, 64-column panels */
        tile_case(q35_simd_name(level), &k, &ref, t, 4096, 11, 67);
        tile_case(q35_simd_name(level), &k, &ref, t, 17 * QK_K, 7, 70);
        cases += 2;
      }
    }
    printf("level %s: %s\n", q35_simd_name(level), failures == before ? "ok" : "FAILED");
  }
  printf("%ld tile cases\n", cases);
  return check_done("test_quant_iq");
}
