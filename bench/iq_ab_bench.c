/*
 * iq_ab_bench.c - the AVX2 IQ decode (one-column gemv) of two builds of quant_iq_avx2.c in one
 * process, old against new, with ggml haswell's vec_dot in the same rounds: the two q35 kernels
 * run on the same weights and activations, round after round in rotating order (old new ggml,
 * ggml new old, ...), each engine's CPU time per round its best of 20 passes (L2) or one pass
 * (streamed); printed: the best GB/s of each, the medians of the per-round ratios, and a check
 * that old and new give the same bits. Tighter than newtypes_bench's separate processes on the
 * shared machine (docs/PERF.md, issue 16, session 14). No timed assertions (not part of ctest).
 * Build (OLD: a checkout with the old kernels; both objects renamed):
 *   F="-O2 -Wall -Wextra -Werror -fno-math-errno -pthread -std=gnu11"
 *   gcc $F -I$OLD/include -I$OLD/src -Dq35_kernels_iq_avx2=old_iq -c $OLD/src/kernels/quant_iq_avx2.c -o old.o
 *   gcc $F -Iinclude -Isrc -Dq35_kernels_iq_avx2=new_iq -c src/kernels/quant_iq_avx2.c -o new.o
 *   gcc -O2 -std=gnu11 -pthread -Iinclude -Isrc bench/iq_ab_bench.c old.o new.o build/libq35.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -ldl -o /tmp/iq_ab_bench
 * Run from the repository root (the peer libraries in .peer/):
 *   /tmp/iq_ab_bench [types, e.g. iq2_xxs,iq1_m; default all six] [rounds, default 15] [streamed MiB; 0: L2]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"
void old_iq(q35_kernels *k);
void new_iq(q35_kernels *k);
typedef void (*gfn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { return rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17; }
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
int main(int argc, char **argv) {
  const char *names[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq1_s", "iq1_m"};
  const int ids[] = {Q35_TYPE_IQ2_XXS, Q35_TYPE_IQ2_XS, Q35_TYPE_IQ2_S,
                     Q35_TYPE_IQ3_XXS, Q35_TYPE_IQ1_S,  Q35_TYPE_IQ1_M};
  const int rounds = argc > 2 && atoi(argv[2]) > 0 && atoi(argv[2]) <= 64 ? atoi(argv[2]) : 15;
  const size_t mib = argc > 3 ? (size_t)atoi(argv[3]) : 0; /* 0: L2 384 KiB */
  void *base = dlopen(".peer/llama/bins/linux-x64/libggml-base.so", RTLD_NOW | RTLD_GLOBAL);
  void *cpu = dlopen(".peer/llama/bins/linux-x64/libggml-cpu-haswell.so", RTLD_NOW | RTLD_LOCAL);
  if (!base || !cpu)
    return 1;
  ((void (*)(void))dlsym(cpu, "ggml_cpu_init"))();
  q35_kernels ko, kn;
  q35_kernels_get(Q35_SIMD_AVX2, &ko);
  kn = ko;
  old_iq(&ko);
  new_iq(&kn);
  const int64_t K = 2048;
  float *f = malloc(sizeof(float) * K);
  for (int i = 0; i < K; i++)
    f[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  for (int t = 0; t < 6; t++) {
    if (argc > 1 && !strstr(argv[1], names[t]))
      continue;
    const int type = ids[t];
    const size_t wrs = q35_row_size(type, K);
    const int64_t nr = (int64_t)((mib ? mib << 20 : 384 << 10) / wrs);
    uint8_t *w = malloc(wrs * nr);
    for (size_t i = 0; i < wrs * nr; i++)
      w[i] = (uint8_t)rnd();
    const size_t bs = q35_type_size(type), nb = wrs * nr / bs;
    for (size_t b = 0; b < nb; b++) {
      const uint16_t d = q35_fp32_to_fp16(1e-3f * (float)(1 + rnd() % 100));
      uint8_t *p = w + b * bs;
      if (type != Q35_TYPE_IQ1_M)
        memcpy(p, &d, 2);
      else
        for (int k = 0; k < 4; k++)
          p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
    }
    char nm[64];
    snprintf(nm, sizeof nm, "ggml_vec_dot_%s_q8_K", names[t]);
    gfn g = (gfn)dlsym(cpu, nm);
    uint8_t *xg = malloc(q35_row_size(Q35_TYPE_Q8_K, K)), *xq = malloc(q35_row_size(Q35_TYPE_Q8_K, K) + 64);
    q35_quantize_row(Q35_TYPE_Q8_K, f, xg, K);
    const int vt = q35_kernels_vec_dot_type(&ko, type);
    ko.quantize[vt](f, xq, K);
    float *oo = malloc(4 * nr), *on = malloc(4 * nr), *og = malloc(4 * nr);
    double *r[3];
    for (int e = 0; e < 3; e++)
      r[e] = malloc(sizeof(double) * rounds);
    const int reps = mib ? 1 : 20;
    for (int rd = 0; rd < rounds; rd++)
      for (int e0 = 0; e0 < 3; e0++) {
        const int e = (rd & 1) ? 2 - e0 : e0; /* old new ggml, then ggml new old */
        double best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
          const double t0 = now();
          if (e == 2)
            for (int64_t i = 0; i < nr; i++)
              g((int)K, og + i, 0, w + i * wrs, 0, xg, 0, 1);
          else
            for (int64_t i = 0; i < nr; i += 16)
              q35_tile_run(e ? &kn : &ko, type, K, w + i * wrs, wrs, (int)(nr - i < 16 ? nr - i : 16), xq, 0, 1,
                           (e ? on : oo) + i, 1, 0);
          const double dt = now() - t0;
          if (dt < best)
            best = dt;
        }
        r[e][rd] = (double)wrs * nr / best / 1e9;
      }
    if (memcmp(oo, on, 4 * nr))
      printf("%s: OLD != NEW\n", names[t]);
    double ratio_on[64], ratio_og[64], ratio_ng[64];
    for (int rd = 0; rd < rounds; rd++)
      ratio_on[rd] = r[1][rd] / r[0][rd], ratio_og[rd] = r[0][rd] / r[2][rd], ratio_ng[rd] = r[1][rd] / r[2][rd];
    qsort(ratio_on, rounds, 8, cmpd);
    qsort(ratio_og, rounds, 8, cmpd);
    qsort(ratio_ng, rounds, 8, cmpd);
    double bo = 0, bn = 0, bg = 0;
    for (int rd = 0; rd < rounds; rd++) {
      if (r[0][rd] > bo)
        bo = r[0][rd];
      if (r[1][rd] > bn)
        bn = r[1][rd];
      if (r[2][rd] > bg)
        bg = r[2][rd];
    }
    printf("%-8s %s best GB/s old %.2f new %.2f ggml %.2f | best new/old %.3f old/g %.2f new/g %.2f | median new/old "
           "%.3f old/g %.2f new/g %.2f\n",
           names[t], mib ? "mem" : "L2 ", bo, bn, bg, bn / bo, bo / bg, bn / bg, ratio_on[rounds / 2],
           ratio_og[rounds / 2], ratio_ng[rounds / 2]);
  }
  return 0;
}
