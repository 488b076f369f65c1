/*
 * sampler_bench.c - per-row time of the sampling head at V = 248,320 on one thread, against
 * (a) llama.cpp's sampler chain (top_k -> top_p -> [min_p] -> temp -> dist) through the
 * prebuilt library, including the fill of its llama_token_data array from the logits, which
 * llama.cpp does for every token; (b) the floor: one pass reading the row and computing the
 * exp of every element (the shared SIMD exp, into an L1-resident buffer, summed).
 *
 * Rows: "flat" N(0, 1) logits; "peaked" the same plus a nucleus of 10 tokens 12 above the
 * rest (they hold ~99.9% of the mass). 8 distinct rows are cycled so the caches see what a
 * model step leaves them: a row written shortly before.
 *
 * Build and run: bench/sampler.sh. Output: a table on stderr, then one JSON line on stdout:
 * {"V":248320,"configs":{"flat/keep-all":{"q35_us":..,"llama_us":..,"floor_us":..},..}}.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/sampler.h"

/* ---- the llama.cpp sampler API (include/llama.h, ggml-org/llama.cpp), declared here ---- */
typedef int32_t llama_token;
typedef struct llama_token_data {
  llama_token id;
  float logit;
  float p;
} llama_token_data;
typedef struct llama_token_data_array {
  llama_token_data *data;
  size_t size;
  int64_t selected;
  bool sorted;
} llama_token_data_array;
struct llama_sampler;
typedef struct llama_sampler_chain_params {
  bool no_perf;
} llama_sampler_chain_params;
llama_sampler_chain_params llama_sampler_chain_default_params(void);
struct llama_sampler *llama_sampler_chain_init(llama_sampler_chain_params params);
void llama_sampler_chain_add(struct llama_sampler *chain, struct llama_sampler *smpl);
struct llama_sampler *llama_sampler_init_top_k(int32_t k);
struct llama_sampler *llama_sampler_init_top_p(float p, size_t min_keep);
struct llama_sampler *llama_sampler_init_min_p(float p, size_t min_keep);
struct llama_sampler *llama_sampler_init_temp(float t);
struct llama_sampler *llama_sampler_init_dist(uint32_t seed);
void llama_sampler_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p);
void llama_sampler_free(struct llama_sampler *smpl);

#define V 248320
#define NROWS 8

/* The thread's CPU time: every timed call runs on this one thread, so other processes on a
 * shared machine do not count (their cache traffic still may). */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static double unif(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (double)(rs >> 11) * 0x1p-53;
}
static double gauss(void) {
  return sqrt(-2.0 * log(unif() + 1e-300)) * cos(6.283185307179586 * unif());
}

typedef struct {
  const char *name;
  int32_t top_k;
  float top_p, min_p;
  int batch; /* 1, or 8: q35_sample_batch over 8 rows, time per row */
} config;

static volatile float sink;

/* The floor: exp of every element of the row (shifted into the exp's domain by a constant
 * bound, no max pass), through an L1-resident buffer, summed with independent accumulators. */
static double floor_pass(const float *l) {
  float buf[1024], out[1024], acc[16] = {0};
  for (int i = 0; i < V; i += 1024) {
    int c = V - i < 1024 ? V - i : 1024;
    for (int j = 0; j < c; j++) buf[j] = l[i + j] - 40.0f;
    q35_sampler_exp_array(buf, out, c);
    for (int j = 0; j + 16 <= c; j += 16)
      for (int k = 0; k < 16; k++) acc[k] += out[j + k];
  }
  double s = 0;
  for (int k = 0; k < 16; k++) s += acc[k];
  return s;
}

/* best-of-5 of the mean over `reps` calls of fn on cycled rows */
#define TIME(out_us, reps, ...)                                     \
  do {                                                             \
    double best = 1e30;                                            \
    for (int rep = 0; rep < 5; rep++) {                            \
      double t0 = now();                                           \
      for (int it = 0; it < (reps); it++) {                        \
        const float *row = rows + (size_t)(it % NROWS) * V;        \
        (void)row;                                                 \
        __VA_ARGS__;                                               \
      }                                                            \
      double dt = (now() - t0) / (reps);                           \
      if (dt < best) best = dt;                                    \
    }                                                              \
    out_us = best * 1e6;                                           \
  } while (0)

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 40;
  if (reps < 1) reps = 1;
  float *flat = malloc(sizeof(float) * V * NROWS), *peak = malloc(sizeof(float) * V * NROWS);
  for (size_t i = 0; i < (size_t)V * NROWS; i++) flat[i] = peak[i] = (float)gauss();
  for (int r = 0; r < NROWS; r++)
    for (int j = 0; j < 10; j++) peak[(size_t)r * V + (size_t)(unif() * V)] = 12.0f + (float)gauss();
  q35_err err;
  q35_sampler *ws = q35_sampler_new(V, &err);
  llama_token_data *td = malloc(sizeof(llama_token_data) * V);
  const config cfgs[] = {
      {"keep-all", 0, 1.0f, 0.0f, 1},      {"top_k=50", 50, 1.0f, 0.0f, 1},
      {"top_p=0.9", 0, 0.9f, 0.0f, 1},     {"top_k=50+top_p=0.9", 50, 0.9f, 0.0f, 1},
      {"min_p=0.05", 0, 1.0f, 0.05f, 1},   {"B=8 top_k=50+top_p=0.9", 50, 0.9f, 0.0f, 8},
  };
  const int ncfg = (int)(sizeof cfgs / sizeof cfgs[0]);
  fprintf(stderr, "sampler bench: V=%d, 1 thread, SIMD level %s, %d reps (best of 5)\n", V,
          q35_simd_name(q35_simd_active()), reps);
  fprintf(stderr, "%-32s %10s %10s %10s %8s %8s\n", "config", "q35 us", "llama us", "floor us",
          "q35/flr", "llama/q35");
  printf("{\"V\":%d,\"threads\":1,\"configs\":{", V);
  int first = 1;
  for (int dist = 0; dist < 2; dist++) {
    const float *rows = dist ? peak : flat;
    double floor_us;
    TIME(floor_us, reps, sink += (float)floor_pass(row));
    for (int c = 0; c < ncfg; c++) {
      const config *cf = &cfgs[c];
      q35_sampling p = q35_sampling_default();
      p.top_k = cf->top_k;
      p.top_p = cf->top_p;
      p.min_p = cf->min_p;
      p.seed = 1234;
      double q_us, l_us;
      uint64_t n = 0;
      q35_sample_result res[8];
      if (cf->batch == 1) {
        TIME(q_us, reps, {
          p.draw_index = n++;
          if (q35_sample(ws, row, V, &p, NULL, 0, 0, -1, &res[0], &err)) {
            fprintf(stderr, "q35: %s\n", err.msg);
            return 1;
          }
          sink += (float)res[0].token;
        });
      } else {
        q35_sampling ps[8];
        for (int b = 0; b < 8; b++) ps[b] = p;
        TIME(q_us, (reps + 7) / 8, {
          for (int b = 0; b < 8; b++) ps[b].draw_index = n;
          n++;
          if (q35_sample_batch(ws, rows, 8, V, ps, NULL, -1, res, &err)) {
            fprintf(stderr, "q35: %s\n", err.msg);
            return 1;
          }
          sink += (float)res[7].token;
        });
        q_us /= 8;
      }
      struct llama_sampler *ch = llama_sampler_chain_init(llama_sampler_chain_default_params());
      llama_sampler_chain_add(ch, llama_sampler_init_top_k(cf->top_k));
      llama_sampler_chain_add(ch, llama_sampler_init_top_p(cf->top_p, 1));
      if (cf->min_p > 0) llama_sampler_chain_add(ch, llama_sampler_init_min_p(cf->min_p, 1));
      llama_sampler_chain_add(ch, llama_sampler_init_temp(1.0f));
      llama_sampler_chain_add(ch, llama_sampler_init_dist(1234));
      int lreps = cf->batch == 1 ? reps : ((reps + 7) / 8) * 8;
      TIME(l_us, lreps, {
        for (int i = 0; i < V; i++) {
          td[i].id = i;
          td[i].logit = row[i];
          td[i].p = 0.0f;
        }
        llama_token_data_array arr = {td, V, -1, false};
        llama_sampler_apply(ch, &arr);
        sink += (float)arr.data[arr.selected].id;
      });
      llama_sampler_free(ch);
      char name[96];
      snprintf(name, sizeof name, "%s/%s", dist ? "peaked" : "flat", cf->name);
      fprintf(stderr, "%-32s %10.1f %10.1f %10.1f %8.2f %8.2f\n", name, q_us, l_us, floor_us,
              q_us / floor_us, l_us / q_us);
      printf("%s\"%s\":{\"q35_us\":%.2f,\"llama_us\":%.2f,\"floor_us\":%.2f}", first ? "" : ",",
             name, q_us, l_us, floor_us);
      first = 0;
    }
  }
  printf("}}\n");
  q35_sampler_free(ws);
  free(flat);
  free(peak);
  free(td);
  return 0;
}
