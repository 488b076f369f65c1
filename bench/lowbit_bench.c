/*
 * lowbit_bench.c - the kernels of the types issue 16 added (Q3_K, Q2_K, MXFP4, IQ4_NL, Q4_1, Q5_1,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, with Q4_0 and Q4_K as yardsticks) at each
 * SIMD level this CPU has, the paths the forward pass takes:
 *   decode   one activation column times a weight matrix far bigger than the caches
 *            (q35_tile_run with nc = 1: the level's gemv), GB/s of the file's weight bytes (a
 *            layout repacked larger, IQ2_XXSR / IQ3_XXSR / IQ2_XSR / IQ2_SR / IQ3_SR / IQ1_SR / IQ1_MR, streams
 *            more than that), THREADS
 *            threads each on its own slice of rows, in calls of CHUNK rows (0: the whole slice in
 *            one call, as a decode's matmul hands each thread its rows)
 *   prefill  an expert-shaped 512 x 2048 matrix (in cache) times C = 16 and 64 activation
 *            columns through the level's tile kernel, GMAC/s, one thread
 * Where a level repacks a type at load (k->repack: Q4_0, Q4_K, Q6_K, Q2_K, Q3_K, IQ4_NL, MXFP4, Q5_1, IQ2_XXS,
 * IQ3_XXS, IQ2_XS, IQ2_S, IQ3_S, IQ1_S, IQ1_M at AVX2) the rows are
 * repacked with q35_repack_row first, as the loader does, and run through the repacked type's kernels.
 * Compare decode with bench/membw at the same thread count (the roofline). Times are CPU seconds
 * (of the slowest thread in a pass, the best of 5 passes by the same threads), as membw's "per
 * CPU-second" figure: on a shared, oversubscribed machine wall time also counts the time the
 * threads were not running. Not part of ctest.
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/lowbit_bench.c build/libq35.a -o build/lowbit_bench \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: build/lowbit_bench [MiB of weights per matrix, default 512] [THREADS, default 1] [types: comma
 *      list of names or all, default all] [CHUNK: rows per gemv call, default 64; 0: the whole slice]
 * The IQ types have no q35 quantizer: their rows are random bytes with normal fp16 scales.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

static int chunk = 64; /* rows per gemv call; 0: each thread's whole slice at once */
#define MAXREPS 5     /* passes per measurement (the best counts); 1 for the scalar level */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
  const q35_kernels *k;
  int type;
  int64_t n;
  const uint8_t *w;
  size_t ws;
  int r0, r1;
  const uint8_t *x;
  float *o;
  int reps;
  pthread_barrier_t *bar;
  double cpu[MAXREPS]; /* CPU seconds of each pass */
} job;

/* the passes over the thread's rows, all threads starting each pass together. The threads live
 * through all the passes, as the engine's pool threads do: a thread created per pass gets a cached
 * stack whose pages glibc dropped at the last thread's exit (all but 16 KiB), so a kernel frame
 * deeper than that (Q4_1 / Q5_1's one-column gemv at AVX-512, ~42 KiB) page-faults again in every
 * pass, inside the timed CPU time (docs/PERF.md, session 15, "Q4_1 / Q5_1 at small matrices") */
static void *run_job(void *p) {
  job *j = p;
  const int step = chunk > 0 ? chunk : j->r1 - j->r0;
  for (int rep = 0; rep < j->reps; rep++) {
    pthread_barrier_wait(j->bar);
    const double t0 = now();
    for (int r = j->r0; r < j->r1; r += step) {
      const int nr = j->r1 - r < step ? j->r1 - r : step;
      q35_tile_run(j->k, j->type, j->n, j->w + (size_t)r * j->ws, j->ws, nr, j->x, 0, 1, j->o + r, 1, 0);
    }
    j->cpu[rep] = now() - t0;
  }
  return NULL;
}

static const int types[] = {Q35_TYPE_Q3_K,   Q35_TYPE_Q2_K,   Q35_TYPE_MXFP4,   Q35_TYPE_IQ4_NL, Q35_TYPE_Q4_1,
                            Q35_TYPE_Q5_1,   Q35_TYPE_IQ2_XXS, Q35_TYPE_IQ2_XS, Q35_TYPE_IQ2_S,  Q35_TYPE_IQ3_XXS,
                            Q35_TYPE_IQ3_S,  Q35_TYPE_IQ1_S,  Q35_TYPE_IQ1_M,   Q35_TYPE_Q4_0,   Q35_TYPE_Q4_K};
static const char *only; /* comma list of type names, NULL: all */

static int wanted(int type) {
  if (!only) return 1;
  const char *name = q35_type_name(type);
  const size_t n = strlen(name);
  for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* one row of n elements of `type`: q35's quantizer on f, or (types without one: IQ) random bytes
 * with the fp16 super-block scale set to a normal value */
static void make_row(int type, const float *f, uint8_t *dst, int64_t n, uint64_t seed) {
  if (q35_type_quantizable(type)) {
    q35_quantize_row_ref(type, f, dst, n);
    return;
  }
  const size_t bs = q35_type_size(type), nb = (size_t)(n / q35_type_block(type));
  for (size_t i = 0; i < bs * nb; i++) dst[i] = (uint8_t)((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  for (size_t b = 0; b < nb; b++) {
    const uint16_t d = q35_fp32_to_fp16(1e-3f * (float)(1 + (b * 37 + seed % 97) % 100));
    uint8_t *p = dst + b * bs;
    if (type == Q35_TYPE_IQ1_M)
      for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
    else memcpy(p, &d, 2);
  }
}
#define NT (int)(sizeof types / sizeof types[0])

static void bench_decode(size_t mib, int nth) {
  const int64_t n = 2048;
  const size_t total = mib << 20;
  uint8_t *src = malloc(total);
  float *xf = malloc(sizeof(float) * n), *wf = malloc(sizeof(float) * n);
  for (int64_t i = 0; i < n; i++) {
    xf[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    wf[i] = (float)((i * 104729) % 1000) / 50000.0f - 0.01f;
  }
  printf("decode: GB/s of weights, %zu MiB matrix, n = %lld, %d thread(s), calls of %d rows (0: the slice)\n%-7s", mib,
         (long long)n, nth, chunk, "type");
  for (int l = 0; l <= Q35_SIMD_AVX512; l++) printf(" %8s", q35_simd_name(l));
  printf("\n");
  for (int t = 0; t < NT; t++) {
    const int type = types[t];
    const size_t rb = q35_row_size(type, n);
    const int rows = (int)(total / rb);
    if (!wanted(type)) continue;
    make_row(type, wf, src, n, 1); /* one row, replicated */
    for (int r = 1; r < rows; r++) memcpy(src + (size_t)r * rb, src, rb);
    uint8_t *srp = NULL; /* the rows repacked, for a level that repacks the type */
    float *o = malloc(sizeof(float) * (size_t)rows);
    printf("%-7s", q35_type_name(type));
    for (int l = 0; l <= Q35_SIMD_AVX512; l++) {
      q35_kernels k;
      if (q35_kernels_get(l, &k)) {
        printf(" %8s", "-");
        continue;
      }
      uint8_t *x = malloc(q35_row_size(Q35_TYPE_Q8_0X, n) + q35_row_size(Q35_TYPE_Q8_K, n));
      q35_quantize_row_ref(q35_kernels_vec_dot_type(&k, type), xf, x, n);
      const int rt = k.repack[type] ? k.repack[type] : type;
      /* a repacked row may be larger than the file's (IQ2_XXSR, IQ3_XXSR, IQ3_SR): its own stride */
      const size_t rrb = q35_row_size(rt, n);
      if (rt != type && !srp) {
        srp = malloc(rrb * (size_t)rows);
        q35_repack_row(rt, src, srp, n);
        for (int r = 1; r < rows; r++) memcpy(srp + (size_t)r * rrb, srp, rrb);
      }
      const int reps = l == 0 ? 1 : MAXREPS, nt = nth < 64 ? nth : 64;
      job jobs[64];
      pthread_t th[64];
      pthread_barrier_t bar;
      pthread_barrier_init(&bar, NULL, (unsigned)nt);
      for (int i = 0; i < nt; i++) {
        jobs[i] = (job){&k, rt, n, rt != type ? srp : src, rt != type ? rrb : rb, rows * i / nth, rows * (i + 1) / nth, x, o, reps,
                        &bar, {0}};
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
      }
      for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
      pthread_barrier_destroy(&bar);
      double best = 1e30; /* per pass the slowest thread's time, the best pass */
      for (int rep = 0; rep < reps; rep++) {
        double dt = 0;
        for (int i = 0; i < nt; i++)
          if (jobs[i].cpu[rep] > dt) dt = jobs[i].cpu[rep];
        if (dt < best) best = dt;
      }
      printf(" %8.2f", (double)(rb * (size_t)rows) / best / 1e9);
      free(x);
    }
    printf("\n");
    free(o);
    free(srp);
  }
  free(src);
  free(xf);
  free(wf);
}

static void bench_prefill(void) {
  const int64_t n = 2048;
  const int rows = 512, cmax = 64;
  float *f = malloc(sizeof(float) * (size_t)n);
  float *out = malloc(sizeof(float) * (size_t)rows * cmax);
  printf("\nprefill: GMAC/s, %d x %lld weights (in cache) times C columns, 1 thread\n%-7s", rows, (long long)n, "type");
  for (int l = 0; l <= Q35_SIMD_AVX512; l++) printf("  %8s C=16 %5s C=64", q35_simd_name(l), "");
  printf("\n");
  for (int t = 0; t < NT; t++) {
    const int type = types[t];
    const size_t wrs = q35_row_size(type, n);
    if (!wanted(type)) continue;
    uint8_t *w = malloc(wrs * (size_t)rows);
    for (int r = 0; r < rows; r++) {
      for (int64_t i = 0; i < n; i++) f[i] = (float)((i * 131 + r * 7) % 1000) / 50000.0f - 0.01f;
      make_row(type, f, w + (size_t)r * wrs, n, (uint64_t)r + 1);
    }
    printf("%-7s", q35_type_name(type));
    for (int l = 0; l <= Q35_SIMD_AVX512; l++) {
      q35_kernels k;
      if (q35_kernels_get(l, &k)) {
        printf("  %13s %10s", "-", "-");
        continue;
      }
      const int vt = q35_kernels_vec_dot_type(&k, type), rt = k.repack[type] ? k.repack[type] : type;
      uint8_t *wp = w;
      const size_t rrs = q35_row_size(rt, n); /* the repacked rows' stride (larger for IQ2_XXSR, IQ3_XXSR, IQ3_SR) */
      if (rt != type) {
        wp = malloc(rrs * (size_t)rows);
        for (int r = 0; r < rows; r++) q35_repack_row(rt, w + (size_t)r * wrs, wp + (size_t)r * rrs, n);
      }
      const size_t xrs = q35_row_size(vt, n) > q35_row_size(Q35_TYPE_Q8_0X, n) ? q35_row_size(vt, n)
                                                                             : q35_row_size(Q35_TYPE_Q8_0X, n);
      uint8_t *x = malloc(xrs * cmax);
      for (int c = 0; c < cmax; c++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)((i * 7919 + c * 31) % 1000) / 500.0f - 1.0f;
        q35_quantize_row_ref(vt, f, x + (size_t)c * xrs, n);
      }
      for (int ci = 0; ci < 2; ci++) {
        const int C = ci ? 64 : 16;
        double best = 1e30;
        for (int rep = 0; rep < (l == 0 ? 1 : 7); rep++) {
          const double t0 = now();
          q35_tile_run(&k, rt, n, wp, rrs, rows, x, xrs, C, out, (size_t)C, 1);
          const double dt = now() - t0;
          if (dt < best) best = dt;
        }
        printf(ci ? " %10.2f" : "  %13.2f", (double)rows * (double)n * C / best / 1e9);
      }
      free(x);
      if (wp != w) free(wp);
    }
    printf("\n");
    free(w);
  }
  free(f);
  free(out);
}

int main(int argc, char **argv) {
  const size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 512;
  const int nth = argc > 2 ? atoi(argv[2]) : 1;
  only = argc > 3 && strcmp(argv[3], "all") ? argv[3] : NULL;
  chunk = argc > 4 ? atoi(argv[4]) : 64;
  bench_decode(mib, nth);
  bench_prefill();
  return 0;
}
