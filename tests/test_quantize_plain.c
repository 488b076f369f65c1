/*
 * test_quantize_plain.c - the plain (unweighted) weight quantizers of Q4_0, Q5_0, Q4_1, Q5_1, Q3_K:
 * every SIMD level's quantize[] (quantize_plain_vec.c at the scalar level, quantize_plain_avx2.c
 * at the AVX2 and AVX-512 levels) against the plain reference's (q35_kernels_ref:
 * quantize_weights.c / quantize_lowbit.c), BYTE for byte, for every level up to the active one
 * (runs per level: test_quantize_plain@avx2, @scalar), on rows that reach every branch of the
 * fits: gaussian blocks of scales from 1e-9 to 1e4 (fp16 subnormal and overflowing scales),
 * outliers, all-positive / all-negative blocks, zero, -0, constant and two-valued blocks, blocks
 * of float subnormals (the start's inverse scale overflows to inf), and blocks holding NaN or
 * +-inf; row lengths whose block count leaves a partial group of four or eight (the SIMD code
 * fits four or eight blocks at once; Q3_K: four or eight sub-blocks of 16).
 *
 * Then, independent of the levels: the error of the reference's blocks against a plain
 * implementation of ggml's reference quantizers (quantize_row_q4_0_ref ... q5_1_ref: the
 * block's extreme mapped onto the grid's end, one rounding): never above it in total over the
 * gaussian rows (the quality against ggml's own code is test_quant_peer / test_quant_lowbit_peer).
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

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return rs;
}
static float gauss(void) {
  const double u = ((double)(rng_u64() >> 11) + 0.5) * 0x1.0p-53, v = (double)(rng_u64() >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* one block of 32 of kind k */
static void fill_block(float *p, int k) {
  const float s = (float)pow(10.0, -9.0 + 13.0 * (double)(rng_u64() % 1000) / 1000.0);
  for (int j = 0; j < 32; j++) p[j] = gauss() * s;
  switch (k) {
    case 0: break;
    case 1: p[rng_u64() % 32] *= 40.0f; break;
    case 2: for (int j = 0; j < 32; j++) p[j] = fabsf(p[j]); break;
    case 3: for (int j = 0; j < 32; j++) p[j] = -fabsf(p[j]); break;
    case 4: memset(p, 0, 32 * sizeof *p); break;
    case 5: for (int j = 0; j < 32; j++) p[j] = j % 3 ? -0.0f : 0.0f; break;
    case 6: for (int j = 0; j < 32; j++) p[j] = s; break;
    case 7: for (int j = 0; j < 32; j++) p[j] = j % 2 ? s : -s; break;
    case 8: p[rng_u64() % 32] = NAN; break;
    case 9: p[rng_u64() % 32] = rng_u64() % 2 ? INFINITY : -INFINITY; break;
    case 10: for (int j = 0; j < 32; j++) p[j] = (float)(rng_u64() % 7) * s; break;
    case 11: p[rng_u64() % 32] = 3e38f; break;
    case 12: for (int j = 0; j < 32; j++) p[j] = gauss() * 1e-39f; break; /* float subnormals */
    default: for (int j = 0; j < 32; j++) p[j] = (float)((int)(rng_u64() % 33) - 16) * 0.25f; break; /* exact levels */
  }
}

/* ggml's reference quantizer's dequantized block (the algorithm, written here from its
 * description): symmetric: d = extreme / lo, l = round-half-up(x / d) clamped; affine: d =
 * (max - min) / nmax, l = round-half-up((x - min) / d); scales and mins stored as fp16 */
static void ggml_like(int type, const float *x, float *out) {
  if (type == Q35_TYPE_Q4_0 || type == Q35_TYPE_Q5_0) {
    const int lo = type == Q35_TYPE_Q4_0 ? -8 : -16;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
      if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    const float d = max / (float)lo, id = d ? 1.0f / d : 0, ds = q35_fp16_to_fp32(q35_fp32_to_fp16(d));
    for (int j = 0; j < 32; j++) {
      const int l = (int)floorf(x[j] * id + 0.5f);
      out[j] = ds * (float)(l < lo ? lo : l > -lo - 1 ? -lo - 1 : l);
    }
    return;
  }
  const int nmax = type == Q35_TYPE_Q4_1 ? 15 : 31;
  float mn = x[0], mx = x[0];
  for (int j = 1; j < 32; j++) mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
  const float d = (mx - mn) / (float)nmax, id = d ? 1.0f / d : 0;
  const float ds = q35_fp16_to_fp32(q35_fp32_to_fp16(d)), ms = q35_fp16_to_fp32(q35_fp32_to_fp16(mn));
  for (int j = 0; j < 32; j++) {
    const int l = (int)floorf((x[j] - mn) * id + 0.5f);
    out[j] = ds * (float)(l > nmax ? nmax : l) + ms;
  }
}

int main(void) {
  static const int types[] = {Q35_TYPE_Q4_0, Q35_TYPE_Q5_0, Q35_TYPE_Q4_1, Q35_TYPE_Q5_1};
  static const int ltypes[] = {Q35_TYPE_Q4_0, Q35_TYPE_Q5_0, Q35_TYPE_Q4_1, Q35_TYPE_Q5_1, Q35_TYPE_Q3_K};
  static const int lens[] = {32, 32 * 7, 32 * 8, 32 * 13, 256 * 3, 4096};
  printf("SIMD level: %s\n", q35_simd_name(q35_simd_active()));
  const int rows = 40, maxn = 4096;
  float *x = malloc(sizeof(float) * maxn * rows), *d = malloc(sizeof(float) * maxn), *g = malloc(sizeof(float) * 32);
  uint8_t *a = malloc((size_t)maxn * 2), *b = malloc((size_t)maxn * 2);
  q35_kernels ref;
  q35_kernels_ref(&ref); /* the plain reference (the scalar level's table has the vector twins) */
  for (q35_simd level = Q35_SIMD_SCALAR; level <= Q35_SIMD_NEON; level++) {
    q35_kernels k;
    if (q35_kernels_get(level, &k) != 0) continue;
    const int before = failures;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
      const int n = lens[li];
      for (int r = 0; r < rows; r++) {
        /* row r: kinds mixed per block, or (r < 14) all of kind r, so that a group of eight
         * lanes holds one kind and a mix */
        for (int i = 0; i < n; i += 32) fill_block(x + i, r < 14 ? r : (int)(rng_u64() % 14));
        for (size_t t = 0; t < sizeof ltypes / sizeof *ltypes; t++) {
          const int type = ltypes[t];
          if (type == Q35_TYPE_Q3_K && n % 256) continue;
          const size_t sz = q35_row_size(type, n);
          memset(a, 0xA5, sz);
          memset(b, 0x5A, sz);
          k.quantize[type](x, a, n);
          ref.quantize[type](x, b, n);
          CHECK(!memcmp(a, b, sz), "%s %s n=%d row %d: blocks differ from the reference", q35_simd_name(level),
                q35_type_name(type), n, r);
        }
      }
    }
    printf("level %s: %s\n", q35_simd_name(level), failures == before ? "ok" : "FAILED");
  }

  /* quality: the reference's blocks against the one-scale start, gaussian rows with outliers */
  const int n = maxn;
  for (int i = 0; i < n * rows; i++) x[i] = gauss() * (i % 61 == 0 ? 8.0f : 1.0f) * (1 + (i / 32) % 5);
  for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
    const int type = types[t];
    double eo = 0, eg = 0;
    for (int r = 0; r < rows; r++) {
      const float *xr = x + (size_t)r * n;
      ref.quantize[type](xr, a, n);
      q35_dequantize_row_ref(type, a, d, n);
      for (int i = 0; i < n; i += 32) {
        ggml_like(type, xr + i, g);
        for (int j = 0; j < 32; j++) {
          eo += ((double)xr[i + j] - d[i + j]) * ((double)xr[i + j] - d[i + j]);
          eg += ((double)xr[i + j] - g[j]) * ((double)xr[i + j] - g[j]);
        }
      }
    }
    printf("  %-5s rms error over the one-scale start's: %.3f\n", q35_type_name(type), sqrt(eo / eg));
    CHECK(eo <= eg, "%s: rms error %.4g above the one-scale start's %.4g", q35_type_name(type), sqrt(eo / n / rows),
          sqrt(eg / n / rows));
  }
  free(x), free(d), free(g), free(a), free(b);
  return check_done("test_quantize_plain");
}
