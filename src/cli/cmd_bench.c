/*
 * cmd_bench.c - q35 bench: prefill and decode speed on one model file.
 *
 * Random prompt tokens (fixed seed), greedy decode, one untimed warm-up run, then RUNS timed
 * runs; medians are reported. With --json one line: prefill_tok_s, decode_tok_s, ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "q35.h"
#include "base/cpu.h"
#include "base/util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define BENCH_SEED 0x9E3779B97F4A7C15ull /* xorshift seed of the random prompt ids */

static void usage(const model_args *ma) {
  printf(
      "usage: q35 bench -m MODEL.gguf [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-r RUNS] [--json]\n"
      "  -p, --prompt N    prompt tokens (random ids), default 512\n"
      "  -n, --gen N       decoded tokens (greedy), default 128\n"
      "  -r, --runs N      timed runs (after one untimed warm-up), default 3; medians are reported\n"
      "  --depth N         tokens already in the context before the measured decode (default 0)\n"
      "  --warmup N        untimed warm-up runs before the timed ones (default 1)\n"
      "  --json            one JSON line on stdout (with \"simd\": the kernel level in use)\n");
  model_args_help(stdout, ma);
}

int cmd_bench(int argc, char **argv) {
  model_args ma = {.kv = Q35_KV_F16, .chunk_help = "prefill chunk (default: whole prompt)"};
  int np = 512, ng = 128, runs = 3, json = 0, depth = 0, warmup = 1;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(&ma);
      return 0;
    } else if (model_arg(&ma, argc, argv, &i)) {
      continue;
    } else if (arg_is(argc, argv, &i, "-p") || arg_is(argc, argv, &i, "--prompt")) {
      np = (int)arg_int("-p", arg_value(argc, argv, &i), 1, 1 << 20);
    } else if (arg_is(argc, argv, &i, "-n") || arg_is(argc, argv, &i, "--gen")) {
      ng = (int)arg_int("-n", arg_value(argc, argv, &i), 1, 1 << 20);
    } else if (arg_is(argc, argv, &i, "-r") || arg_is(argc, argv, &i, "--runs")) {
      runs = (int)arg_int("-r", arg_value(argc, argv, &i), 1, 1000);
    } else if (arg_is(argc, argv, &i, "--depth")) {
      depth = (int)arg_int("--depth", arg_value(argc, argv, &i), 0, 1 << 22);
    } else if (arg_is(argc, argv, &i, "--warmup")) {
      warmup = (int)arg_int("--warmup", arg_value(argc, argv, &i), 0, 100);
    } else if (arg_is(argc, argv, &i, "--json")) {
      json = 1;
    } else {
      arg_unknown("bench", argv[i]);
    }
  }
  model_args_done(&ma, "bench");
  const int chunk = ma.chunk;
  q35_err err = {{0}};
  const q35_model_params mp = model_args_model_params(&ma);
  double t0 = q35_now();
  q35_model *m = model_args_load(&ma, &mp, &err);
  if (!m) {
    fprintf(stderr, "q35 bench: %s\n", err.msg);
    return 1;
  }
  const double load_s = q35_now() - t0;
  q35_session_params spp = q35_session_default_params();
  spp.kv_type = ma.kv;
  spp.n_ctx = depth + np + ng + 1;
  q35_session *s = q35_session_new(m, &spp, &err);
  if (!s) {
    fprintf(stderr, "q35 bench: %s\n", err.msg);
    q35_model_free(m);
    return 1;
  }
  const int V = q35_model_n_vocab(m);
  int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(np + depth));
  uint64_t x = BENCH_SEED;
  for (int i = 0; i < np + depth; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    prompt[i] = (int32_t)(x % (uint64_t)V);
  }
  double *pf = calloc((size_t)runs, sizeof(double)), *dc = calloc((size_t)runs, sizeof(double));
  q35_sampling samp = q35_sampling_default();
  samp.temperature = 0;
  int rc = 0;
  for (int r = -warmup; r < runs && rc == 0; r++) {
    q35_session_reset(s);
    if (depth > 0 && q35_session_eval(s, prompt + np, depth, chunk, NULL, 0, &err)) rc = 1;
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.sampling = &samp;
    row.n_top_logprobs = -1;
    double a = q35_now();
    if (rc == 0 && chunk > 0 && np > chunk) {
      int done = 0;
      while (np - done > chunk && rc == 0) {
        if (q35_session_eval(s, prompt + done, chunk, 0, NULL, 0, &err)) rc = 1;
        done += chunk;
      }
      row.tokens = prompt + done;
      row.n_tokens = np - done;
    } else {
      row.tokens = prompt;
      row.n_tokens = np;
    }
    if (rc == 0 && q35_step(m, &row, 1, &err)) rc = 1;
    double b = q35_now();
    int32_t cur = row.token;
    for (int i = 0; i < ng && rc == 0; i++) {
      row.tokens = &cur;
      row.n_tokens = 1;
      if (q35_step(m, &row, 1, &err)) rc = 1;
      cur = row.token;
    }
    double c = q35_now();
    if (r >= 0) {
      pf[r] = np / (b - a);
      dc[r] = ng / (c - b);
      fprintf(stderr, "run %d: prefill %.2f tok/s, decode %.2f tok/s\n", r, pf[r], dc[r]);
    }
  }
  if (rc) {
    fprintf(stderr, "q35 bench: %s\n", err.msg);
  } else {
    qsort(pf, (size_t)runs, sizeof(double), cmp_double);
    qsort(dc, (size_t)runs, sizeof(double), cmp_double);
    const double mpf = runs % 2 ? pf[runs / 2] : 0.5 * (pf[runs / 2 - 1] + pf[runs / 2]);
    const double mdc = runs % 2 ? dc[runs / 2] : 0.5 * (dc[runs / 2 - 1] + dc[runs / 2]);
    if (json)
      printf("{\"prefill_tok_s\": %.3f, \"decode_tok_s\": %.3f, \"prompt_tokens\": %d, \"gen_tokens\": %d, "
             "\"depth\": %d, \"threads\": %d, \"runs\": %d, \"load_s\": %.4f, \"session_bytes\": %zu, "
             "\"huge_mapped_bytes\": %lld, \"repacked_bytes\": %lld, \"simd\": \"%s\"}\n",
             mpf, mdc, np, ng, depth, q35_model_n_threads(m), runs, load_s, q35_session_bytes(s),
             q35_model_huge_bytes(m), q35_model_repacked_bytes(m), q35_simd_desc());
    else
      printf("prefill %.2f tok/s, decode %.2f tok/s (median of %d; %d threads)\n", mpf, mdc, runs,
             q35_model_n_threads(m));
  }
  free(pf);
  free(dc);
  free(prompt);
  q35_session_free(s);
  q35_model_free(m);
  return rc;
}
