/*
 * q35 sample - run the sampling head over rows of logits read from a file.
 *
 *   q35 sample --logits FILE.bin --vocab V [--temperature T] [--top_k K] [--top_p P]
 *              [--min_p M] [--seed S] [--draws N] [--presence_penalty X]
 *              [--frequency_penalty X] [--repetition_penalty X] [--history IDS]
 *              [--n_prompt N] [--logprobs]
 *
 * FILE holds B rows of V little-endian float32. For each row one line of N token ids (draw
 * indices 0 .. N-1) goes to stdout, space-separated; with --logprobs each id is followed by
 * ":logprob". The seed used goes to stderr ("seed: S"). Exit 2 on usage errors and invalid
 * parameters, 1 on an unreadable or malformed file or bad logits.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "q35.h"
#include "base/buf.h"
#include "sample/sampler.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: q35 sample --logits FILE.bin --vocab V [--draws N] [--temperature T]\n"
          "                  [--top_k K] [--top_p P] [--min_p M] [--seed S]\n"
          "                  [--presence_penalty X] [--frequency_penalty X]\n"
          "                  [--repetition_penalty X] [--history IDS] [--n_prompt N] [--logprobs]\n"
          "FILE holds B rows of V little-endian float32 logits. Prints one line per row with N\n"
          "sampled ids (draw indices 0..N-1); the seed used goes to stderr.\n"
          "Defaults: temperature 1 (0 or -1 = greedy), top_k 0 (all), top_p 1, min_p 0,\n"
          "no penalties, seed random, draws 1. --history: token ids, the first --n_prompt of\n"
          "them the prompt (repetition penalty), the rest generated (presence, frequency).\n");
}

static uint64_t parse_u64(const char *flag, const char *v) {
  char *end;
  errno = 0;
  if (*v == '-' || *v == '+' || *v == ' ') die("%s: '%s' is not a non-negative integer", flag, v);
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end) die("%s: '%s' is not an integer in [0, 2^64)", flag, v);
  return (uint64_t)x;
}

int cmd_sample(int argc, char **argv) {
  const char *path = NULL;
  int64_t V = 0, draws = 1;
  int have_seed = 0, logprobs = 0;
  int32_t *hist = NULL, n_hist = 0;
  int64_t n_prompt = 0;
  q35_sampling p = q35_sampling_default();
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(stdout);
      return 0;
    } else if (arg_is(argc, argv, &i, "--logits")) {
      path = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--vocab")) {
      V = arg_int("--vocab", arg_value(argc, argv, &i), 1, 1 << 30);
    } else if (arg_is(argc, argv, &i, "--draws")) {
      draws = arg_int("--draws", arg_value(argc, argv, &i), 0, INT32_MAX);
    } else if (sampling_arg(&p, argc, argv, &i)) {
      continue;
    } else if (arg_is(argc, argv, &i, "--seed")) {
      p.seed = parse_u64("--seed", arg_value(argc, argv, &i));
      have_seed = 1;
    } else if (arg_is(argc, argv, &i, "--history")) {
      free(hist);
      hist = arg_ids("--history", arg_value(argc, argv, &i), &n_hist);
    } else if (arg_is(argc, argv, &i, "--n_prompt")) {
      n_prompt = arg_int("--n_prompt", arg_value(argc, argv, &i), 0, INT32_MAX);
    } else if (arg_is(argc, argv, &i, "--logprobs")) {
      logprobs = 1;
    } else {
      arg_unknown("sample", argv[i]);
    }
  }
  if (!path) {
    usage(stderr);
    die("sample: --logits FILE is required");
  }
  if (V <= 0) die("sample: --vocab V is required");
  if (n_prompt > n_hist) {
    free(hist);
    die("sample: --n_prompt %lld exceeds the --history length %d", (long long)n_prompt, (int)n_hist);
  }
  for (int32_t j = 0; j < n_hist; j++)
    if (hist[j] >= V) {
      const int bad = hist[j];
      free(hist);
      die("sample: --history token %d out of range [0, %lld)", bad, (long long)V);
    }
  q35_err err;
  if (q35_sampling_validate(&p, &err)) {
    free(hist);
    die("sample: %s", err.msg);
  }
  if (!have_seed) p.seed = q35_random_seed();

  size_t size = 0;
  char *raw = q35_read_file(path, &size, &err);
  if (!raw) {
    fprintf(stderr, "q35: sample: %s\n", err.msg);
    return 1;
  }
  const size_t row_bytes = (size_t)V * sizeof(float);
  if (size == 0 || size % row_bytes != 0) {
    fprintf(stderr,
            "q35: sample: %s has %zu bytes, not a positive multiple of 4 * vocab = %zu "
            "(rows of %lld little-endian float32)\n",
            path, size, row_bytes, (long long)V);
    free(raw);
    return 1;
  }
  const size_t B = size / row_bytes;
  float *rows = malloc(size);
  q35_sampler *ws = q35_sampler_new((int32_t)V, &err);
  if (!rows || !ws) {
    fprintf(stderr, "q35: sample: %s\n", ws ? "out of memory" : err.msg);
    free(raw);
    return 1;
  }
  const unsigned char *u8 = (const unsigned char *)raw;
  for (size_t j = 0; j < B * (size_t)V; j++) { /* little-endian on any host */
    uint32_t u = (uint32_t)u8[4 * j] | (uint32_t)u8[4 * j + 1] << 8 | (uint32_t)u8[4 * j + 2] << 16 |
                 (uint32_t)u8[4 * j + 3] << 24;
    memcpy(&rows[j], &u, 4);
  }
  free(raw);
  fprintf(stderr, "seed: %llu\n", (unsigned long long)p.seed);
  int rc = 0;
  for (size_t b = 0; b < B && rc == 0; b++) {
    for (int64_t n = 0; n < draws; n++) {
      q35_sample_result r;
      p.draw_index = (uint64_t)n;
      if (q35_sample(ws, rows + b * (size_t)V, (int32_t)V, &p, hist, n_hist, (int32_t)n_prompt,
                     logprobs ? 0 : -1, &r, &err)) {
        fprintf(stderr, "q35: sample: row %zu: %s\n", b, err.msg);
        rc = 1;
        break;
      }
      if (logprobs) printf(n ? " %d:%.6g" : "%d:%.6g", (int)r.token, (double)r.logprob);
      else printf(n ? " %d" : "%d", (int)r.token);
    }
    if (rc == 0) putchar('\n');
  }
  if (fflush(stdout) != 0) rc = 1;
  q35_sampler_free(ws);
  free(rows);
  free(hist);
  return rc;
}
