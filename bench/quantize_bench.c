/*
 * quantize_bench.c - weight quantizer speed, one thread: q35's quantizers (q35_quantize_row_weighted:
 * unweighted, and with an importance vector) against ggml's ggml_quantize_chunk from the
 * prebuilt libggml-base.so (dlopen), same rows, same importance vector, same run. MiB/s of f32
 * input per second of this thread's CPU time (so a shared machine does not skew it). Not part of
 * ctest.
 *
 * Build (from the repository root, after cmake --build build):
 *   gcc -O2 -std=gnu11 -pthread -Iinclude -Isrc bench/quantize_bench.c build/libq35.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -ldl -o /tmp/quantize_bench
 * Run: /tmp/quantize_bench [rows, default 256] [type] (rows of 4096 floats; one type, or every one)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"

#define N_PER_ROW 4096
#define GGML_LIB ".peer/llama/bins/linux-x64/libggml-base.so"

typedef size_t (*quantize_chunk_fn)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
typedef void (*quantize_init_fn)(int);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the machine may be shared */
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 2.0f;
}

/* best of 3 passes, MiB/s of input */
static double time_q35(int type, const float *x, void *dst, int64_t rows, const float *qw) {
  double best = 1e30;
  const size_t rb = q35_row_size(type, N_PER_ROW);
  for (int pass = 0; pass < 3; pass++) {
    const double t0 = now();
    for (int64_t r = 0; r < rows; r++)
      q35_quantize_row_weighted(type, x + r * N_PER_ROW, (char *)dst + r * rb, N_PER_ROW, qw);
    const double dt = now() - t0;
    if (dt < best) best = dt;
  }
  return (double)rows * N_PER_ROW * 4 / 1048576.0 / best;
}

static double time_ggml(quantize_chunk_fn qc, int type, const float *x, void *dst, int64_t rows, const float *qw) {
  double best = 1e30;
  for (int pass = 0; pass < 3; pass++) {
    const double t0 = now();
    qc(type, x, dst, 0, rows, N_PER_ROW, qw);
    const double dt = now() - t0;
    if (dt < best) best = dt;
  }
  return (double)rows * N_PER_ROW * 4 / 1048576.0 / best;
}

int main(int argc, char **argv) {
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 256;
  void *lib = dlopen(GGML_LIB, RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "quantize_bench: cannot open %s (run from the repository root): %s\n", GGML_LIB, dlerror());
    return 1;
  }
  quantize_chunk_fn qc = (quantize_chunk_fn)dlsym(lib, "ggml_quantize_chunk");
  quantize_init_fn qi = (quantize_init_fn)dlsym(lib, "ggml_quantize_init");
  if (!qc) return fprintf(stderr, "quantize_bench: no ggml_quantize_chunk\n"), 1;
  float *x = malloc((size_t)rows * N_PER_ROW * sizeof(float)), qw[N_PER_ROW];
  void *dst = malloc((size_t)rows * N_PER_ROW * 2);
  unsigned s = 1;
  for (int64_t i = 0; i < rows * N_PER_ROW; i++) x[i] = frand(&s) + 0.1f * frand(&s) * frand(&s);
  for (int j = 0; j < N_PER_ROW; j++) qw[j] = 0.25f * expf(2.8f * (frand(&s) + 1.0f) / 2.0f);
  static const int types[] = {Q35_TYPE_Q4_0,   Q35_TYPE_Q5_0,   Q35_TYPE_Q4_1,   Q35_TYPE_Q5_1,    Q35_TYPE_Q4_K,
                              Q35_TYPE_Q5_K,   Q35_TYPE_Q6_K,   Q35_TYPE_Q3_K,   Q35_TYPE_Q2_K,    Q35_TYPE_IQ4_XS,
                              Q35_TYPE_IQ4_NL, Q35_TYPE_IQ2_XXS, Q35_TYPE_IQ2_XS, Q35_TYPE_IQ2_S, Q35_TYPE_IQ3_XXS,
                              Q35_TYPE_IQ3_S,  Q35_TYPE_IQ1_S,  Q35_TYPE_IQ1_M};
  const int only = argc > 2 ? q35_type_from_name(argv[2]) : -1;
  printf("rows %lld x %d floats, 1 thread, MiB/s of f32 input per CPU second (best of 3)\n", (long long)rows, N_PER_ROW);
  printf("%-8s %10s %10s %7s | %14s %14s %7s\n", "type", "q35", "ggml", "ratio", "q35 imatrix", "ggml imatrix",
         "ratio");
  for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
    const int t = types[i];
    if (only >= 0 && t != only) continue;
    if (qi) qi(t);
    q35_quantize_row_weighted(t, x, dst, N_PER_ROW, qw); /* q35's tables (IQ grids): built once, not timed */
    const double c = time_q35(t, x, dst, rows, qw), d = time_ggml(qc, t, x, dst, rows, qw);
    if (q35_type_requires_imatrix(t)) { /* ggml has no unweighted form */
      printf("%-8s %10s %10s %7s | %14.1f %14.1f %7.2f\n", q35_type_name(t), "-", "-", "-", c, d, c / d);
      continue;
    }
    const double a = time_q35(t, x, dst, rows, NULL), b = time_ggml(qc, t, x, dst, rows, NULL);
    printf("%-8s %10.1f %10.1f %7.2f | %14.1f %14.1f %7.2f\n", q35_type_name(t), a, b, a / b, c, d, c / d);
  }
  free(x);
  free(dst);
  return 0;
}
