/*
 * quant_bench.c - vec_dot throughput per tensor type and SIMD level, in GB/s of weight
 * bytes streamed, over a weight matrix much bigger than the caches, next to the machine's
 * memcpy bandwidth. Not part of ctest (no timed assertions anywhere).
 *
 * Build (from the repository root, after cmake --build build):
 *   gcc -O2 -std=gnu11 -pthread -Iinclude -Isrc bench/quant_bench.c build/libq35.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -o /tmp/quant_bench
 * Run: /tmp/quant_bench [MiB per matrix, default 256] [threads, default 1] [1: tile part only, 2: in-cache part only]
 * Levels above Q35_SIMD (or that the CPU lacks) show "-".
 *
 * Second part: the tile kernel (q35_vec_dot_tile) for prefill, a 2048 x 2048 weight matrix
 * times T = 64 and 512 activation rows, against the per-pair vec_dot loop it replaces, in
 * GOP/s (2*K*N*T / time) and the tile's speed-up; single thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

/* Activation bytes per row that every level's kernels may read: Q4_0 and Q8_0 take Q8_0X,
 * Q8_0Y or Q8_0Z depending on the level (one buffer serves all levels here; only the speed is
 * measured). */
static size_t act_row(int vt, int64_t n) {
  size_t a = q35_row_size(vt, n);
  if (vt == Q35_TYPE_Q8_0X || vt == Q35_TYPE_Q8_0Y || vt == Q35_TYPE_Q8_0Z) {
    const int lay[3] = {Q35_TYPE_Q8_0X, Q35_TYPE_Q8_0Y, Q35_TYPE_Q8_0Z};
    for (int i = 0; i < 3; i++) a = q35_row_size(lay[i], n) > a ? q35_row_size(lay[i], n) : a;
  }
  return a;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
  q35_vec_dot_fn fn;
  const uint8_t *w;
  const void *x;
  size_t row_bytes;
  int64_t n, r0, r1;
  float sink;
} job;

static void *run_job(void *p) {
  job *j = p;
  float s = 0;
  for (int64_t r = j->r0; r < j->r1; r++) s += j->fn(j->n, j->w + r * j->row_bytes, j->x);
  j->sink = s;
  return NULL;
}

static void bench_tile(void) {
  static const int types[] = {Q35_TYPE_Q8_0, Q35_TYPE_Q4_0, Q35_TYPE_Q5_0, Q35_TYPE_Q4_K, Q35_TYPE_Q5_K,
                              Q35_TYPE_Q6_K, Q35_TYPE_IQ4_XS, Q35_TYPE_F32, Q35_TYPE_F16, Q35_TYPE_BF16};
  const int64_t K = 2048, N = 2048;
  float *f = malloc(sizeof(float) * K);
  float *out = malloc(sizeof(float) * N * 512);
  printf("\ntile kernel, %lldx%lld weights, 1 thread: GOP/s (2*K*N*T/s) per-pair loop -> tile (speed-up)\n",
         (long long)N, (long long)K);
  printf("%-7s %5s %26s %26s\n", "type", "T", q35_simd_name(Q35_SIMD_AVX2), q35_simd_name(Q35_SIMD_AVX512));
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    const int type = types[t], vt = q35_vec_dot_type(type);
    const size_t wrs = q35_row_size(type, K), xrs = act_row(vt, K);
    uint8_t *w = malloc(wrs * N), *x = malloc(xrs * 512);
    for (int64_t r = 0; r < N; r++) {
      for (int64_t i = 0; i < K; i++) f[i] = (float)(((r + 1) * (i + 3) * 2654435761u) % 1000) / 50000.0f - 0.01f;
      q35_quantize_row_ref(type, f, w + r * wrs, K);
    }
    for (int64_t c = 0; c < 512; c++) {
      for (int64_t i = 0; i < K; i++) f[i] = (float)(((c + 7) * (i + 1) * 40503u) % 1000) / 500.0f - 1.0f;
      q35_quantize_row_ref(vt, f, x + c * xrs, K);
    }
    const int Ts[2] = {64, 512};
    for (int ti = 0; ti < 2; ti++) {
      const int T = Ts[ti];
      printf("%-7s %5d", q35_type_name(type), T);
      for (int level = 1; level < 3; level++) {
        q35_kernels k;
        if (q35_kernels_get(level, &k)) {
          printf(" %26s", "-");
          continue;
        }
        double bl = 1e30, bt = 1e30;
        for (int rep = 0; rep < 2; rep++) {
          double t0 = now();
          for (int64_t r = 0; r < N; r++)
            for (int c = 0; c < T; c++) out[r * T + c] = k.vec_dot[type](K, w + r * wrs, x + c * xrs);
          t0 = now() - t0;
          if (t0 < bl) bl = t0;
          t0 = now();
          q35_tile_run(&k, type, K, w, wrs, (int)N, x, xrs, T, out, (size_t)T, 1);
          t0 = now() - t0;
          if (t0 < bt) bt = t0;
        }
        const double ops = 2.0 * (double)K * (double)N * T;
        printf("   %7.1f -> %7.1f (x%4.2f)", ops / bl / 1e9, ops / bt / 1e9, bl / bt);
      }
      printf("\n");
      fflush(stdout);
    }
    free(w);
    free(x);
  }
  free(f);
  free(out);
}

/* vec_dot over one weight row set that stays in L2 (GB/s of weights, in cache). */
static void bench_incache(void) {
  static const int types[] = {Q35_TYPE_Q8_0, Q35_TYPE_Q4_0, Q35_TYPE_Q5_0, Q35_TYPE_Q4_K, Q35_TYPE_Q5_K,
                              Q35_TYPE_Q6_K, Q35_TYPE_IQ4_XS, Q35_TYPE_F32, Q35_TYPE_F16, Q35_TYPE_BF16};
  const int64_t K = 4096;
  const size_t bytes = 256 * 1024;
  float *f = malloc(sizeof(float) * K);
  printf("\nvec_dot in cache (%zu KiB of weights, K=%lld, 1 thread), GB/s of weights\n", bytes >> 10, (long long)K);
  printf("%-7s %10s %10s\n", "type", q35_simd_name(Q35_SIMD_AVX2), q35_simd_name(Q35_SIMD_AVX512));
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    const int type = types[t], vt = q35_vec_dot_type(type);
    const size_t wrs = q35_row_size(type, K);
    const int64_t rows = (int64_t)(bytes / wrs) ? (int64_t)(bytes / wrs) : 1;
    uint8_t *w = malloc(wrs * rows), *x = malloc(act_row(vt, K));
    for (int64_t i = 0; i < K; i++) f[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    q35_quantize_row_ref(vt, f, x, K);
    for (int64_t r = 0; r < rows; r++) {
      for (int64_t i = 0; i < K; i++) f[i] = (float)(((r + 1) * (i + 3) * 2654435761u) % 1000) / 50000.0f - 0.01f;
      q35_quantize_row_ref(type, f, w + r * wrs, K);
    }
    printf("%-7s", q35_type_name(type));
    for (int level = 1; level < 3; level++) {
      q35_kernels k;
      if (q35_kernels_get(level, &k)) {
        printf(" %10s", "-");
        continue;
      }
      double best = 1e30;
      volatile float sink = 0;
      for (int rep = 0; rep < 20; rep++) {
        double t0 = now();
        for (int it = 0; it < 10; it++)
          for (int64_t r = 0; r < rows; r++) sink += k.vec_dot[type](K, w + r * wrs, x);
        t0 = (now() - t0) / 10;
        if (t0 < best) best = t0;
      }
      printf(" %10.2f", (double)(wrs * (size_t)rows) / best / 1e9);
    }
    printf("\n");
    free(w);
    free(x);
  }
  free(f);
}

int main(int argc, char **argv) {
  const size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 256;
  const int nth = argc > 2 ? atoi(argv[2]) : 1;
  if (argc > 3 && atoi(argv[3]) == 1) {
    bench_tile();
    return 0;
  }
  if (argc > 3 && atoi(argv[3]) == 2) {
    bench_incache();
    return 0;
  }
  const int64_t n = 4096;
  const size_t total = mib << 20;

  /* memcpy bandwidth (bytes copied per second) over the same size */
  uint8_t *src = malloc(total), *dst = malloc(total);
  memset(src, 1, total);
  memset(dst, 2, total);
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    double t = now();
    memcpy(dst, src, total);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("memcpy: %.2f GB/s (%zu MiB, 1 thread)\n", (double)total / best / 1e9, mib);
  free(dst);

  static const int types[] = {Q35_TYPE_Q8_0, Q35_TYPE_Q4_0, Q35_TYPE_Q5_0, Q35_TYPE_Q4_K, Q35_TYPE_Q5_K,
                              Q35_TYPE_Q6_K, Q35_TYPE_IQ4_XS, Q35_TYPE_F32, Q35_TYPE_F16, Q35_TYPE_BF16};
  float *xf = malloc(sizeof(float) * n), *wf = malloc(sizeof(float) * n);
  for (int64_t i = 0; i < n; i++) {
    xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    wf[i] = (float)((i * 104729) % 1000) / 50000.0f - 0.01f;
  }
  printf("%-7s %10s %10s %10s   (GB/s of weights, n=%lld, %d thread(s))\n", "type", q35_simd_name(Q35_SIMD_SCALAR),
         q35_simd_name(Q35_SIMD_AVX2), q35_simd_name(Q35_SIMD_AVX512),
         (long long)n, nth);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    const int type = types[t], vt = q35_vec_dot_type(type);
    const size_t rb = q35_row_size(type, n);
    const int64_t rows = (int64_t)(total / rb);
    uint8_t *x = malloc(act_row(vt, n));
    q35_quantize_row_ref(vt, xf, x, n);
    q35_quantize_row_ref(type, wf, src, n); /* one real row, replicated */
    for (int64_t r = 1; r < rows; r++) memcpy(src + r * rb, src, rb);
    printf("%-7s", q35_type_name(type));
    for (int level = 0; level < 3; level++) {
      q35_kernels k;
      if (q35_kernels_get(level, &k)) {
        printf(" %10s", "-");
        continue;
      }
      best = 1e30;
      for (int rep = 0; rep < (level == 0 ? 1 : 3); rep++) {
        job jobs[64];
        pthread_t th[64];
        double t0 = now();
        for (int i = 0; i < nth && i < 64; i++) {
          jobs[i] = (job){k.vec_dot[type], src, x, rb, n, rows * i / nth, rows * (i + 1) / nth, 0};
          pthread_create(&th[i], NULL, run_job, &jobs[i]);
        }
        for (int i = 0; i < nth && i < 64; i++) pthread_join(th[i], NULL);
        t0 = now() - t0;
        if (t0 < best) best = t0;
      }
      printf(" %10.2f", (double)(rb * (size_t)rows) / best / 1e9);
    }
    printf("\n");
    free(x);
  }
  free(src);
  free(xf);
  free(wf);
  bench_incache();
  bench_tile();
  return 0;
}
