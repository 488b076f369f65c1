/*
 * mm_bench.c - the forward pass's product (q35_matmul_f, src/model/matmul.c) on a trunk-shaped
 * Q4_0 matrix at 1..3 tokens and one thread (env THREADS=N: N threads), streamed from memory:
 * NMAT matrices of ROWS x K (default 64 of 4096 x 2048, 4.7 MB each, 302 MB in all) each
 * multiplied once a pass, so every matrix comes from memory as in a decode or verify step. Prints
 * per token count the best CPU time over 7 passes (of the thread; with THREADS > 1 of the process,
 * every thread's waits included), GB/s of weights per CPU-second and the best wall time. Not part
 * of ctest.
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/mm_bench.c build/libq35.a -o build/mm_bench \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: build/mm_bench [ROWS, default 4096] [NMAT, default 64]   (env K=2048, COLS=123, THREADS=1,
 * TYPE=q4_0 or f32: TYPE=f32 ROWS=256 is the MoE router's shape, 2 MiB a matrix). Q4_0 rows are
 * repacked as the loader does where the level repacks them (Q4_0R; the type printed says which).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/tensor_types.h"
#include "kernels/quant.h"
#include "model/forward_internal.h"

static int nthreads = 1;
static double cpu(void) {
  struct timespec t;
  clock_gettime(nthreads > 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double wall(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  const int rows = argc > 1 ? atoi(argv[1]) : 4096, nmat = argc > 2 ? atoi(argv[2]) : 64;
  const int64_t K = getenv("K") ? atoll(getenv("K")) : 2048;
  const char *cols = getenv("COLS") ? getenv("COLS") : "123";
  nthreads = getenv("THREADS") ? atoi(getenv("THREADS")) : 1;
  const int type = getenv("TYPE") && !strcmp(getenv("TYPE"), "f32") ? Q35_TYPE_F32 : Q35_TYPE_Q4_0;
  if (rows < 1 || nmat < 1 || K % 256 || nthreads < 1) {
    fprintf(stderr, "usage: mm_bench [ROWS] [NMAT]   (env K a multiple of 256, COLS=123, TYPE=q4_0|f32)\n");
    return 2;
  }
  const size_t ws = q35_row_size(type, K), mb = ws * (size_t)rows;
  uint8_t *w = aligned_alloc(64, (mb * (size_t)nmat + 63) / 64 * 64);
  float *f = malloc(sizeof(float) * (size_t)K * 8);
  srand(1);
  for (int r = 0; r < 64 && r < rows; r++) {
    for (int64_t i = 0; i < K; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    if (type == Q35_TYPE_F32) memcpy(w + (size_t)r * ws, f, ws);
    else q35_quantize_row(Q35_TYPE_Q4_0, f, w + (size_t)r * ws, K);
  }
  /* the rows as the loader leaves them: repacked where the level repacks the type (q35_repack_type,
   * Q4_0R; env Q35_REPACK=0 keeps the file's layout) */
  const int rt = q35_repack_type(type);
  if (rt != type) {
    uint8_t *tmp = malloc(ws);
    for (int r = 0; r < 64 && r < rows; r++) {
      q35_repack_row(rt, w + (size_t)r * ws, tmp, K);
      memcpy(w + (size_t)r * ws, tmp, ws);
    }
    free(tmp);
  }
  for (size_t r = 64; r < (size_t)rows * (size_t)nmat; r++) memcpy(w + r * ws, w + (r % 64) * ws, ws);
  for (int64_t i = 0; i < K * 8; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  float *y = malloc(sizeof(float) * (size_t)rows * 8);
  char *buf = aligned_alloc(64, (q35_row_size(q35_vec_dot_type(type), K) * 8 + 63) / 64 * 64 + 4096);
  q35_pool *pool = q35_pool_new(nthreads);
  printf("%s %d x %lld, %d matrices (%.0f MB), %d thread(s)\n", q35_type_name(rt), rows, (long long)K, nmat, (double)mb * nmat / 1e6,
         q35_pool_size(pool));
  for (const char *c = cols; *c; c++) {
    const int T = *c - '0';
    if (T < 1 || T > 8) continue;
    double best = 1e30, best_wall = 1e30;
    for (int k = 0; k < 7; k++) {
      const double t0 = cpu(), w0 = wall();
      for (int m = 0; m < nmat; m++) {
        const q35_tensor t = {w + (size_t)m * mb, rt, {K, rows, 1, 1}, ws, mb};
        q35_matmul_f(pool, &t, f, K, T, y, rows, buf);
      }
      const double dt = cpu() - t0, dw = wall() - w0;
      if (dt < best) best = dt;
      if (dw < best_wall) best_wall = dw;
    }
    printf("tokens %d: %.2f ms CPU  %.1f GB/s per CPU-second  %.2f ms wall\n", T, best * 1e3,
           (double)mb * nmat / best / 1e9, best_wall * 1e3);
  }
  q35_pool_free(pool);
  free(w);
  free(f);
  free(y);
  free(buf);
  return 0;
}
