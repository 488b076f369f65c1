/*
 * step_batch.c - decode cost of one q35_step with B = 1, 2, 4, 8 sessions (library level, no
 * HTTP): milliseconds per step and aggregate tokens/s, to see what batching rows buys.
 * TEMP (default 0 = greedy) and LOGPROBS (default -1 = none; 0 = the token's) set every row's
 * sampling like a request would (the server bench asks temperature 1, logprobs 0); the
 * sampling head's share of the step is printed separately.
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/step_batch.c build/libq35.a -o build/step_batch \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lm -pthread
 * Run: build/step_batch MODEL.gguf [THREADS] [STEPS] [TEMP] [LOGPROBS] [MAXB]   (Q35_NO_MMAP=1: weights
 * read into memory, as q35 bench --no-mmap)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "q35.h"
#include "base/util.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: step_batch MODEL.gguf [THREADS] [STEPS] [TEMP] [LOGPROBS] [MAXB]\n");
    return 2;
  }
  q35_err e;
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = argc > 2 ? atoi(argv[2]) : 0;
  mp.no_mmap = getenv("Q35_NO_MMAP") && atoi(getenv("Q35_NO_MMAP")); /* Q35_NO_MMAP=1: like --no-mmap */
  const int N_timed = argc > 3 ? atoi(argv[3]) : 16;
  const float temp = argc > 4 ? (float)atof(argv[4]) : 0.0f;
  const int lp = argc > 5 ? atoi(argv[5]) : -1;
  const int maxb = argc > 6 ? atoi(argv[6]) : 8;
  if (N_timed < 1 || maxb < 1 || maxb > 8 || lp < -1 || lp > Q35_MAX_TOP_LOGPROBS || temp < 0) {
    fprintf(stderr, "step_batch: STEPS >= 1, MAXB in [1, 8], LOGPROBS in [-1, %d], TEMP >= 0\n",
            Q35_MAX_TOP_LOGPROBS);
    return 2;
  }
  q35_model *m = q35_model_load(argv[1], &mp, &e);
  if (!m) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  double one = 0;
  /* pass 0 is an untimed warm-up at B = 8 (32 steps): the first pass over the expert weights is
   * slower (first touches), which would flatter every B > 1 against B = 1 */
  for (int pass = 0; pass < 2; pass++)
  for (int B = pass ? 1 : 8; B <= (pass ? maxb : 8); B *= 2) {
    const int N = pass ? N_timed : 32;
    if (pass && getenv("STEP_BATCH_ONLY") && atoi(getenv("STEP_BATCH_ONLY")) != B) continue; /* for perf */
    q35_session *s[8];
    q35_row rows[8];
    int32_t tok[8];
    q35_sampling sp[8];
    q35_session_params pp = q35_session_default_params();
    pp.n_ctx = N + 8;
    for (int b = 0; b < B; b++) {
      s[b] = q35_session_new(m, &pp, &e);
      if (!s[b]) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
      }
      tok[b] = 100 + 7 * b;
      sp[b] = q35_sampling_default();
      sp[b].temperature = temp;
      sp[b].seed = (uint64_t)b;
    }
    double t0 = 0, s0 = 0;
    for (int it = 0; it < N + 2; it++) { /* two untimed steps */
      if (it == 2) {
        t0 = q35_now();
        s0 = q35_model_sample_seconds(m);
      }
      for (int b = 0; b < B; b++) {
        memset(&rows[b], 0, sizeof rows[b]);
        sp[b].draw_index = (uint64_t)it;
        rows[b].session = s[b];
        rows[b].tokens = &tok[b];
        rows[b].n_tokens = 1;
        rows[b].sampling = &sp[b];
        rows[b].n_top_logprobs = lp;
      }
      if (q35_step(m, rows, B, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
      }
      for (int b = 0; b < B; b++) tok[b] = rows[b].token;
    }
    const double dt = (q35_now() - t0) / N;
    const double ds = (q35_model_sample_seconds(m) - s0) / N;
    for (int b = 0; b < B; b++) q35_session_free(s[b]);
    if (!pass) continue;
    if (B == 1) one = 1 / dt;
    printf("B=%d: %.1f ms per step (sampling %.2f ms), %.1f tok/s aggregate, %.2fx one row\n", B, dt * 1e3,
           ds * 1e3, B / dt, B / dt / (one > 0 ? one : B / dt));
  }
  q35_model_free(m);
  return 0;
}
