/*
 * sampler_ab.c - the sampling head alone on the top-p (or keep-all) row, for old-vs-new runs of
 * two trees in alternating order: q35_sample on "flat" N(0, 1) rows and "peaked" rows (the same
 * plus 10 tokens 12 above the rest), V = 248,320, 8 cycled rows, thread CPU time, best of 7
 * means over 40 calls. No llama.cpp (bench/sampler.sh has the peer and the floor). The sink
 * (sum of the tokens) must match between trees.
 *
 * Build a tree's binary and run it (TREE: a checkout's root):
 *   cc -std=gnu11 -O2 -Wall -Wextra -Werror -fno-math-errno -pthread -ITREE/include \
 *     -ITREE/src bench/sampler_ab.c TREE/src/sample/[a-z]*.c TREE/src/base/util.c \
 *     TREE/src/base/cpu.c -o ab -lm
 *   Q35_SIMD=avx2 taskset -c 0 ./ab [TOP_P]     (TOP_P default 0.9; 1 = keep-all)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sample/sampler.h"

#define V 248320
#define NR 8

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static double unif(void) { /* xorshift64 */
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (double)(rs >> 11) * 0x1p-53;
}
static double gauss(void) {
  double u = unif() + 1e-300, v = unif();
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int main(int argc, char **argv) {
  float top_p = argc > 1 ? (float)atof(argv[1]) : 0.9f;
  float *fl = malloc(sizeof(float) * V * NR), *pk = malloc(sizeof(float) * V * NR);
  if (!fl || !pk) return 1;
  for (size_t i = 0; i < (size_t)V * NR; i++) fl[i] = pk[i] = (float)gauss();
  for (int r = 0; r < NR; r++)
    for (int j = 0; j < 10; j++) pk[(size_t)r * V + (size_t)(unif() * V)] = 12.0f + (float)gauss();
  q35_err err;
  q35_sampler *ws = q35_sampler_new(V, &err);
  if (!ws) return 1;
  q35_sampling p = q35_sampling_default();
  p.top_p = top_p;
  p.seed = 1;
  for (int d = 0; d < 2; d++) {
    const float *rows = d ? pk : fl;
    double best = 1e9;
    long sink = 0;
    for (int rep = 0; rep < 7; rep++) {
      double t0 = now();
      for (int it = 0; it < 40; it++) {
        q35_sample_result res;
        p.draw_index = (uint64_t)it;
        if (q35_sample(ws, rows + (size_t)(it % NR) * V, V, &p, NULL, 0, 0, -1, &res, &err)) {
          fprintf(stderr, "sampler_ab: %s\n", err.msg);
          return 1;
        }
        sink += res.token;
      }
      double dt = (now() - t0) / 40;
      if (dt < best) best = dt;
    }
    printf("%s %.1f us (sink %ld)\n", d ? "peaked" : "flat", best * 1e6, sink);
  }
  q35_sampler_free(ws);
  free(fl);
  free(pk);
  return 0;
}
