/*
 * iq_bench.c - the IQ1/IQ2/IQ3 kernels (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) at
 * each x86 level against llama.cpp's own kernels on the same blocks: ggml_vec_dot_TYPE_q8_K
 * from the prebuilt libggml-cpu-haswell.so (AVX2) and -zen4.so (AVX-512), loaded with dlopen.
 * Single thread, no timed assertions (not part of ctest).
 *   decode:  a matrix-vector product (one vec_dot per row) over a weight matrix in L2 (256 KiB)
 *            and one streamed from memory (MiB given), GB/s of weight bytes;
 *   prefill: a 512 x 2048 weight matrix times T = 64 activation rows, GOP/s (2*K*N*T / time):
 *            q35's tile kernel against ggml's per-pair vec_dot (what ggml-cpu's mul_mat runs
 *            for these types: no repacked layout).
 * Build (from the repository root, after cmake --build build):
 *   gcc -O2 -std=gnu11 -pthread -Iinclude -Isrc bench/iq_bench.c build/libq35.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -ldl -o /tmp/iq_bench
 * Run: /tmp/iq_bench [streamed MiB, default 256]   (peer libraries from .peer/, run from the root)
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

typedef void (*ggml_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);

static const struct {
  int type;
  const char *name;
  int d_at;
} types[] = {{Q35_TYPE_IQ2_XXS, "iq2_xxs", 0}, {Q35_TYPE_IQ2_XS, "iq2_xs", 0}, {Q35_TYPE_IQ2_S, "iq2_s", 0},
             {Q35_TYPE_IQ3_XXS, "iq3_xxs", 0}, {Q35_TYPE_IQ3_S, "iq3_s", 0},   {Q35_TYPE_IQ1_S, "iq1_s", 0},
             {Q35_TYPE_IQ1_M, "iq1_m", -1}};
#define NTYPES (int)(sizeof types / sizeof types[0])

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* the machine is shared: own CPU time */
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { return rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17; }

static void fill_blocks(int t, uint8_t *p, size_t nb) {
  const size_t bs = q35_type_size(types[t].type);
  for (size_t i = 0; i < bs * nb; i++) p[i] = (uint8_t)rnd();
  for (size_t b = 0; b < nb; b++, p += bs) {
    const uint16_t d = q35_fp32_to_fp16(1e-3f * (float)(1 + rnd() % 100));
    if (types[t].d_at >= 0) memcpy(p, &d, 2);
    else
      for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
  }
}

/* one engine's row kernel: q35 (a level's table) or ggml (a dlsym'd vec_dot) */
typedef struct {
  q35_vec_dot_fn q;
  ggml_dot_fn g;
} dotk;
static inline float call(dotk k, int64_t n, const void *w, const void *x) {
  if (k.q) return k.q(n, w, x);
  float s;
  k.g((int)n, &s, 0, w, 0, x, 0, 1);
  return s;
}

static float sink;
/* GB/s of weights for a matvec over nr rows of n elements, best of reps */
static double matvec(dotk k, const uint8_t *w, size_t wrs, int64_t nr, int64_t n, const void *x, int reps) {
  double best = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    const double t0 = now();
    float s = 0;
    for (int64_t r = 0; r < nr; r++) s += call(k, n, w + (size_t)r * wrs, x);
    const double dt = now() - t0;
    sink += s;
    if (dt < best) best = dt;
  }
  return (double)wrs * (double)nr / best / 1e9;
}

/* GOP/s of the N x K times T product: q35's tile (k.q set: through the level's table) or ggml's pair loop */
static double prefill(const q35_kernels *qk, dotk k, int type, const uint8_t *w, size_t wrs, int64_t N, int64_t K,
                      const uint8_t *x, size_t xrs, int T, float *out) {
  double best = 1e30;
  for (int rep = 0; rep < 1; rep++) {
    const double t0 = now();
    if (qk) q35_tile_run(qk, type, K, w, wrs, (int)N, x, xrs, T, out, (size_t)T, 1);
    else
      for (int64_t r = 0; r < N; r++)
        for (int c = 0; c < T; c++) out[r * T + c] = call(k, K, w + (size_t)r * wrs, x + (size_t)c * xrs);
    const double dt = now() - t0;
    if (dt < best) best = dt;
  }
  return 2.0 * (double)K * (double)N * T / best / 1e9;
}

int main(int argc, char **argv) {
  const size_t big = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
  void *base = dlopen(".peer/llama/bins/linux-x64/libggml-base.so", RTLD_NOW | RTLD_GLOBAL);
  const char *vnames[2] = {"haswell", "zen4"};
  void *cpu[2] = {0, 0};
  for (int v = 0; v < 2 && base; v++) {
    char path[256];
    snprintf(path, sizeof path, ".peer/llama/bins/linux-x64/libggml-cpu-%s.so", vnames[v]);
    if (v == 1 && !__builtin_cpu_supports("avx512vnni")) continue;
    cpu[v] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (cpu[v]) ((void (*)(void))dlsym(cpu[v], "ggml_cpu_init"))();
  }
  if (!base) fprintf(stderr, "iq_bench: llama.cpp peer libraries not found (.peer/), q35 only\n");
  q35_kernels lv[2];
  const int have[2] = {q35_kernels_get(Q35_SIMD_AVX2, &lv[0]) == 0, q35_kernels_get(Q35_SIMD_AVX512, &lv[1]) == 0};

  const int64_t K = 2048, NP = 512, T = 64;
  const size_t xrs = q35_row_size(Q35_TYPE_Q8_K, K);
  uint8_t *x = malloc(xrs * T);
  float *f = malloc(sizeof(float) * K), *out = malloc(sizeof(float) * NP * T);
  for (int c = 0; c < T; c++) {
    for (int64_t i = 0; i < K; i++) f[i] = (float)((rnd() % 2001) - 1000) / 1000.0f;
    q35_quantize_row(Q35_TYPE_Q8_K, f, x + (size_t)c * xrs, K);
  }
  printf("1 thread, K = %lld; decode GB/s of weights (L2-resident 256 KiB | streamed %zu MiB); prefill GOP/s "
         "(%lld x %lld times T = %lld)\n",
         (long long)K, big >> 20, (long long)NP, (long long)K, (long long)T);
  printf("%-8s %-7s %16s %16s %16s %16s\n", "type", "what", "q35 avx2", "ggml haswell", "q35 avx512", "ggml zen4");
  for (int t = 0; t < NTYPES; t++) {
    const size_t wrs = q35_row_size(types[t].type, K);
    const int64_t nbig = (int64_t)(big / wrs), nsmall = (int64_t)((256 << 10) / wrs);
    uint8_t *w = malloc(wrs * (size_t)nbig);
    fill_blocks(t, w, (size_t)nbig * (size_t)(K / QK_K));
    dotk ks[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    char nm[64];
    snprintf(nm, sizeof nm, "ggml_vec_dot_%s_q8_K", types[t].name);
    for (int v = 0; v < 2; v++) {
      if (have[v]) ks[2 * v].q = lv[v].vec_dot[types[t].type];
      if (cpu[v]) ks[2 * v + 1].g = (ggml_dot_fn)dlsym(cpu[v], nm);
    }
    /* the engines alternate, round after round, each keeping its best (the machine may be shared) */
    double r[3][4] = {{0}};
    for (int round = 0; round < 8; round++)
      for (int e = 0; e < 4; e++) {
        const int ok = ks[e].q || ks[e].g;
        const double v[3] = {ok ? matvec(ks[e], w, wrs, nsmall, K, x, 25) : NAN,
                             ok && round < 2 ? matvec(ks[e], w, wrs, nbig, K, x, 1) : NAN,
                             ok && round < 3 ? prefill(ks[e].q ? &lv[e / 2] : NULL, ks[e], types[t].type, w, wrs, NP,
                                                       K, x, xrs, (int)T, out)
                                             : NAN};
        for (int k = 0; k < 3; k++)
          if (!ok) r[k][e] = NAN;
          else if (v[k] > r[k][e]) r[k][e] = v[k];
      }
    const char *what[3] = {"dec L2", "dec mem", "prefill"};
    for (int k = 0; k < 3; k++) {
      printf("%-8s %-7s", types[t].name, what[k]);
      for (int e = 0; e < 4; e++) {
        if (e % 2) printf(" %9.2f (x%4.2f)", r[k][e], r[k][e - 1] / r[k][e]);
        else printf(" %16.2f", r[k][e]);
      }
      printf("\n");
    }
    fflush(stdout);
    free(w);
  }
  free(x), free(f), free(out);
  return sink == 12345.f;
}
