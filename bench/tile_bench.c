/*
 * tile_bench.c - the prefill tile product in cache: an expert-shaped weight matrix (ROWS x N,
 * default 512 x 2048, the 35B-A3B expert gate/up shape) of each weight type times C activation
 * columns (default 16, about one expert's share of a 512-token prompt) through
 * q35_vec_dot_tile_ex, at the SIMD level Q35_SIMD selects. Prints the best of REPS passes in
 * GMAC/s per type. Not part of ctest (no timed assertions anywhere).
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/tile_bench.c build/libq35.a -o build/tile_bench \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: Q35_SIMD=avx2 build/tile_bench [ROWS] [N] [C] [REPS]
 *   env TYPES=q4_0,q8_0 runs only those types. Times are the thread's CPU time (best pass).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/tensor_types.h"
#include "kernels/quant.h"

/* this thread's CPU time: the best pass is then the one least disturbed on a shared machine */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  const int rows = argc > 1 ? atoi(argv[1]) : 512;
  const int64_t n = argc > 2 ? atoll(argv[2]) : 2048;
  const int cols = argc > 3 ? atoi(argv[3]) : 16;
  const int reps = argc > 4 ? atoi(argv[4]) : 30;
  static const struct { int type; const char *name; } types[] = {
      {Q35_TYPE_Q4_0, "q4_0"}, {Q35_TYPE_Q8_0, "q8_0"}, {Q35_TYPE_Q4_K, "q4_k"}, {Q35_TYPE_Q5_K, "q5_k"},
      {Q35_TYPE_Q6_K, "q6_k"}, {Q35_TYPE_Q5_0, "q5_0"}, {Q35_TYPE_IQ4_XS, "iq4_xs"}, {Q35_TYPE_F32, "f32"},
      {Q35_TYPE_Q4_KR, "q4_kr"}, {Q35_TYPE_Q6_KR, "q6_kr"}, /* q4_kr, q6_kr: Q4_K / Q6_K rows repacked
                                                                  as the loader does at AVX2 */
      {Q35_TYPE_IQ1_S, "iq1_s"}, {Q35_TYPE_IQ1_SR, "iq1_sr"}, {Q35_TYPE_IQ1_M, "iq1_m"},
      {Q35_TYPE_IQ1_MR, "iq1_mr"}}; /* iq1_sr, iq1_mr likewise (larger rows) */
  float *f = malloc(sizeof(float) * (size_t)n * (size_t)(rows > cols ? rows : cols));
  srand(1);
  for (int64_t i = 0; i < n * (rows > cols ? rows : cols); i++) f[i] = (float)rand() / RAND_MAX - 0.5f;
  float *out = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
  const char *only = getenv("TYPES");
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    if (only && !strstr(only, types[t].name)) continue;
    const int ty = types[t].type, xt = q35_vec_dot_type(ty);
    const size_t ws = q35_row_size(ty, n), xs = q35_row_size(xt, n);
    unsigned char *w = malloc(ws * (size_t)rows), *x = malloc(xs * (size_t)cols);
    for (int r = 0; r < rows; r++) {
      unsigned char *wr = w + (size_t)r * ws;
      if (q35_unrepack_type(ty) != ty) {
        unsigned char *tmp = malloc(ws); /* at least the plain row's bytes */
        q35_quantize_row(q35_unrepack_type(ty), f + (size_t)r * (size_t)n, tmp, n);
        q35_repack_row(ty, tmp, wr, n);
        free(tmp);
      } else {
        q35_quantize_row(ty, f + (size_t)r * (size_t)n, wr, n);
      }
    }
    for (int c = 0; c < cols; c++) q35_quantize_row(xt, f + (size_t)c * (size_t)n, x + (size_t)c * xs, n);
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
      const double t0 = now();
      q35_vec_dot_tile_ex(ty, n, w, ws, rows, x, xs, cols, out, 1, (size_t)rows);
      const double dt = now() - t0;
      if (dt < best) best = dt;
    }
    printf("%-7s %d x %lld x %d: %8.1f us  %6.2f GMAC/s\n", types[t].name, rows, (long long)n, cols, best * 1e6,
           (double)rows * (double)n * cols / best / 1e9);
    free(w);
    free(x);
  }
  free(f);
  free(out);
  return 0;
}
