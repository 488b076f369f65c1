/*
 * newtypes_bench.c - the kernels of the 13 types issue 16 added (Q3_K, Q2_K, MXFP4, IQ4_NL, Q4_1,
 * Q5_1, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; Q4_0 and Q4_K as yardsticks) at
 * each x86 level against llama.cpp's own on the same weight blocks: ggml_vec_dot_TYPE_ACT from
 * the prebuilt libggml-cpu-haswell.so (AVX2) and -zen4.so (AVX-512), loaded with dlopen, each
 * engine with its own activation format of the same floats. Single thread, CPU time of the
 * thread (the machine may be shared), engines alternating round after round, each keeping its
 * best. No timed assertions (not part of ctest).
 *   decode:  a matrix-vector product over a weight matrix in L2 (384 KiB) and one streamed from
 *            memory (MiB given): q35 through its one-column gemv (what the forward pass runs),
 *            ggml one vec_dot per row; GB/s of the file's weight bytes (where a level repacks the
 *            type at load, Q5_1 / IQ2_XXS / IQ3_XXS / IQ2_XS / IQ2_S / IQ3_S / IQ1_S / IQ1_M at AVX2, q35 runs on the
 *            rows repacked, as the loader leaves them)
 *   prefill: a 512 x 2048 weight matrix times T = 64 activation rows, GOP/s (2 K N T / time):
 *            q35's tile kernel against ggml's per-pair vec_dot. That is what ggml-cpu's mul_mat
 *            runs for these types except Q2_K (repacked 8x8 gemm), IQ4_NL (llamafile's tinyBLAS)
 *            and the yardsticks Q4_0 / Q4_K (repacked): compare those in whole-model runs.
 * Weights: random bytes with scales set to normal values (fp16 d in 1e-3..0.1, MXFP4 exponents
 * near 2^-7), so no subnormal slows either engine.
 * Build (from the repository root, after cmake --build build):
 *   gcc -O2 -std=gnu11 -pthread -Iinclude -Isrc bench/newtypes_bench.c build/libq35.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -ldl -o /tmp/newtypes_bench
 * Run: /tmp/newtypes_bench [streamed MiB, default 256] [type names, comma list: default all]
 *      (peer libraries from .peer/, run from the repository root)
 */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

typedef void (*ggml_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef void (*ggml_from_float)(const float *, void *, int64_t);

/* the type, ggml's name, ggml's activation type (q35 type id), where the fp16 scales sit
 * (byte offsets; -1: none; MXFP4 / IQ1_M handled apart) */
static const struct {
  int type;
  const char *name;
  int act;
  int d0, d1;
} types[] = {
    {Q35_TYPE_Q3_K, "q3_K", Q35_TYPE_Q8_K, 108, -1},    {Q35_TYPE_Q2_K, "q2_K", Q35_TYPE_Q8_K, 80, 82},
    {Q35_TYPE_MXFP4, "mxfp4", Q35_TYPE_Q8_0, -1, -1},   {Q35_TYPE_IQ4_NL, "iq4_nl", Q35_TYPE_Q8_0, 0, -1},
    {Q35_TYPE_Q4_1, "q4_1", Q35_TYPE_Q8_1, 0, 2},       {Q35_TYPE_Q5_1, "q5_1", Q35_TYPE_Q8_1, 0, 2},
    {Q35_TYPE_IQ2_XXS, "iq2_xxs", Q35_TYPE_Q8_K, 0, -1}, {Q35_TYPE_IQ2_XS, "iq2_xs", Q35_TYPE_Q8_K, 0, -1},
    {Q35_TYPE_IQ2_S, "iq2_s", Q35_TYPE_Q8_K, 0, -1},     {Q35_TYPE_IQ3_XXS, "iq3_xxs", Q35_TYPE_Q8_K, 0, -1},
    {Q35_TYPE_IQ3_S, "iq3_s", Q35_TYPE_Q8_K, 0, -1},     {Q35_TYPE_IQ1_S, "iq1_s", Q35_TYPE_Q8_K, 0, -1},
    {Q35_TYPE_IQ1_M, "iq1_m", Q35_TYPE_Q8_K, -1, -1},    {Q35_TYPE_Q4_0, "q4_0", Q35_TYPE_Q8_0, 0, -1},
    {Q35_TYPE_Q4_K, "q4_K", Q35_TYPE_Q8_K, 0, 2},
};
#define NTYPES (int)(sizeof types / sizeof types[0])

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { return rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17; }

static void fill_blocks(int t, uint8_t *p, size_t nb) {
  const size_t bs = q35_type_size(types[t].type);
  for (size_t i = 0; i < bs * nb; i++) p[i] = (uint8_t)rnd();
  for (size_t b = 0; b < nb; b++, p += bs) {
    const uint16_t d = q35_fp32_to_fp16(1e-3f * (float)(1 + rnd() % 100));
    if (types[t].d0 >= 0) memcpy(p + types[t].d0, &d, 2);
    if (types[t].d1 >= 0) memcpy(p + types[t].d1, &d, 2);
    if (types[t].type == Q35_TYPE_MXFP4) p[0] = (uint8_t)(118 + rnd() % 4);
    if (types[t].type == Q35_TYPE_IQ1_M)
      for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
  }
}

/* one engine's kernel: q35 (a level's table: gemv / tile) or ggml (a dlsym'd vec_dot) */
typedef struct {
  const q35_kernels *q;
  ggml_dot_fn g;
} eng;

static float sink;
/* GB/s of weights for a matvec over nr rows of n elements, best of reps */
/* (brs: the file type's bytes per row, which the rate counts: a repacked layout's may differ) */
static double matvec(eng e, int type, const uint8_t *w, size_t wrs, int64_t nr, int64_t n, const void *x, float *out,
                     int reps, size_t brs) {
  double best = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    const double t0 = now();
    if (e.q)
      for (int64_t r = 0; r < nr; r += 16) /* as the forward pass: row blocks of 16 */
        q35_tile_run(e.q, type, n, w + (size_t)r * wrs, wrs, (int)(nr - r < 16 ? nr - r : 16), x, 0, 1, out + r, 1, 0);
    else
      for (int64_t r = 0; r < nr; r++) e.g((int)n, out + r, 0, w + (size_t)r * wrs, 0, x, 0, 1);
    const double dt = now() - t0;
    sink += out[nr / 2];
    if (dt < best) best = dt;
  }
  return (double)brs * (double)nr / best / 1e9;
}

/* GOP/s of the N x K times T product */
static double prefill(eng e, int type, const uint8_t *w, size_t wrs, int64_t N, int64_t K, const uint8_t *x,
                      size_t xrs, int T, float *out) {
  const double t0 = now();
  if (e.q) q35_tile_run(e.q, type, K, w, wrs, (int)N, x, xrs, T, out, (size_t)T, 1);
  else
    for (int64_t r = 0; r < N; r++)
      for (int c = 0; c < T; c++) e.g((int)K, out + r * T + c, 0, w + (size_t)r * wrs, 0, x + (size_t)c * xrs, 0, 1);
  const double dt = now() - t0;
  sink += out[0];
  return 2.0 * (double)K * (double)N * T / dt / 1e9;
}

static int wanted(const char *list, const char *name) {
  if (!list) return 1;
  const size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const size_t big = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
  const char *only = argc > 2 ? argv[2] : NULL;
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
  if (!base) fprintf(stderr, "newtypes_bench: llama.cpp peer libraries not found (.peer/), q35 only\n");
  q35_kernels lv[2];
  const int have[2] = {q35_kernels_get(Q35_SIMD_AVX2, &lv[0]) == 0, q35_kernels_get(Q35_SIMD_AVX512, &lv[1]) == 0};

  const int64_t K = 2048, NP = 512, T = 64;
  const size_t xmax = 4 * (size_t)K + 4096; /* any activation row of K elements */
  uint8_t *xq[2][3], *xg = malloc(xmax * T);
  float *f = malloc(sizeof(float) * K * T), *out = malloc(sizeof(float) * (size_t)(NP * T + (big >> 6)));
  for (int64_t i = 0; i < K * T; i++) f[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  for (int v = 0; v < 2; v++)
    for (int a = 0; a < 3; a++) xq[v][a] = malloc(xmax * T);
  printf("1 thread, K = %lld; decode GB/s of weights (L2-resident 384 KiB | streamed %zu MiB); prefill GOP/s "
         "(%lld x %lld times T = %lld); ratio = q35 / ggml\n",
         (long long)K, big >> 20, (long long)NP, (long long)K, (long long)T);
  printf("%-8s %-8s %10s %17s %10s %17s\n", "type", "what", "q35 avx2", "ggml haswell", "q35 avx512", "ggml zen4");
  for (int t = 0; t < NTYPES; t++) {
    if (!wanted(only, types[t].name)) continue;
    const int type = types[t].type;
    const size_t wrs = q35_row_size(type, K);
    const int64_t nbig = (int64_t)(big / wrs), nsmall = (int64_t)((384 << 10) / wrs);
    uint8_t *w = malloc(wrs * (size_t)nbig);
    fill_blocks(t, w, (size_t)nbig * (size_t)(K / q35_type_block(type)));
    /* a level that repacks the type at load (IQ2_XXS at AVX2) runs on the rows repacked, as the
     * loader leaves them */
    int rt[2] = {type, type};
    size_t rrs[2] = {wrs, wrs};
    uint8_t *wr[2] = {w, w};
    for (int v = 0; v < 2; v++)
      if (have[v] && lv[v].repack[type] && (rt[v] = lv[v].repack[type]) != type) {
        rrs[v] = q35_row_size(rt[v], K);
        wr[v] = malloc(rrs[v] * (size_t)nbig);
        for (int64_t r = 0; r < nbig; r++) q35_repack_row(rt[v], w + (size_t)r * wrs, wr[v] + (size_t)r * rrs[v], K);
      }
    eng e[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    const uint8_t *xe[4] = {0, 0, 0, 0};
    size_t xrs[4] = {0, 0, 0, 0};
    char nm[64];
    const char *an = types[t].act == Q35_TYPE_Q8_K ? "q8_K" : types[t].act == Q35_TYPE_Q8_1 ? "q8_1" : "q8_0";
    snprintf(nm, sizeof nm, "ggml_vec_dot_%s_%s", types[t].name, an);
    /* ggml's activations (ggml's formats are q35's Q8_0 / Q8_1 / Q8_K byte for byte) */
    const size_t grs = q35_row_size(types[t].act, K);
    for (int c = 0; c < T; c++) q35_quantize_row(types[t].act, f + c * K, xg + (size_t)c * grs, K);
    for (int v = 0; v < 2; v++) {
      if (have[v]) {
        const int vt = q35_kernels_vec_dot_type(&lv[v], type);
        e[2 * v].q = &lv[v];
        xrs[2 * v] = q35_row_size(vt, K);
        for (int c = 0; c < T; c++) lv[v].quantize[vt](f + c * K, xq[v][0] + (size_t)c * xrs[2 * v], K);
        xe[2 * v] = xq[v][0];
      }
      if (cpu[v] && (e[2 * v + 1].g = (ggml_dot_fn)dlsym(cpu[v], nm)) != NULL) xe[2 * v + 1] = xg, xrs[2 * v + 1] = grs;
    }
    double r[3][4] = {{0}};
    for (int round = 0; round < 6; round++)
      for (int k = 0; k < 4; k++) {
        const int ok = e[k].q || e[k].g, ty = e[k].q ? rt[k / 2] : type;
        const uint8_t *wk = e[k].q ? wr[k / 2] : w;
        const size_t ks = e[k].q ? rrs[k / 2] : wrs;
        const double v[3] = {ok ? matvec(e[k], ty, wk, ks, nsmall, K, xe[k], out, 20, wrs) : NAN,
                             ok && round < 2 ? matvec(e[k], ty, wk, ks, nbig, K, xe[k], out, 1, wrs) : NAN,
                             ok && round < 3 ? prefill(e[k], ty, wk, ks, NP, K, xe[k], xrs[k], (int)T, out) : NAN};
        for (int j = 0; j < 3; j++)
          if (!ok) r[j][k] = NAN;
          else if (v[j] > r[j][k]) r[j][k] = v[j];
      }
    const char *what[3] = {"dec L2", "dec mem", "prefill"};
    for (int j = 0; j < 3; j++) {
      printf("%-8s %-8s", types[t].name, what[j]);
      for (int k = 0; k < 4; k++) {
        if (k % 2) printf(" %9.2f (x%5.2f)", r[j][k], r[j][k - 1] / r[j][k]);
        else printf(" %10.2f", r[j][k]);
      }
      printf("\n");
    }
    fflush(stdout);
    for (int v = 0; v < 2; v++)
      if (wr[v] != w) free(wr[v]);
    free(w);
  }
  for (int v = 0; v < 2; v++)
    for (int a = 0; a < 3; a++) free(xq[v][a]);
  free(xg), free(f), free(out);
  return sink == 12345.f;
}
