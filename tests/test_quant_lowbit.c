/*
 * test_quant_lowbit.c - the lowbit family (Q2_K, Q3_K, MXFP4, IQ4_NL, Q4_1, Q5_1) at the active
 * SIMD level held bit-equal to the scalar reference: dequantize, vec_dot, the tile product (every
 * pair of a tile equal to its vec_dot), on rows at odd byte offsets. Runs per level (test_quant_lowbit@avx2,
 * @scalar); the comparison with ggml is test_quant_lowbit_peer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/quant.h"

#include "check.h"

static uint64_t rs = 0x1234567ull;
static float gauss(void) {
  rs = rs * 6364136223846793005ull + 1442695040888963407ull;
  double u = ((double)(rs >> 11) + 0.5) * 0x1.0p-53;
  rs = rs * 6364136223846793005ull + 1442695040888963407ull;
  double v = (double)(rs >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
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
  return check_done("test_quant_lowbit");
}
