/*
 * constrain_bench.c - constraint compile time and token-mask time over a corpus of schemas
 * (bench/constrain_bench.sh builds and runs it; not part of ctest).
 *
 *   constrain_bench TOKENIZER.json [--pad N] [--steps S] [--seed X] SCHEMA.json...
 *
 * For each schema: compile (timed), then random walks through its language: at each step the
 * mask of the current state (timed), then a random allowed token (one of the shortest with
 * probability 1/4, so structures close), S steps in all, restarting at the end of a document.
 * --pad N extends the vocabulary to N tokens with concatenations of two random tokens (the
 * 248,320-token figure). Prints a line per schema on stderr and one JSON line on stdout:
 * {"schemas":..,"refused":..,"masks":..,"mask_us_median":..,"mask_us_p99":..,
 *  "mask_us_first_median":..,"compile_ms_median":..,"compile_ms_max":..,"n_vocab":..}
 * mask_us_first_* counts only masks computed for a state the first time (no cache hit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "constrain/constrain.h"
#include "text/tokenizer.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double *v;
  size_t n, cap;
} vec;

static void push(vec *v, double x) {
  if (q35_grow((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v) == 0) v->v[v->n++] = x;
}

static double pct(vec *v, double p) {
  if (!v->n) return 0;
  qsort(v->v, v->n, sizeof *v->v, cmp_d);
  return v->v[(size_t)((double)(v->n - 1) * p)];
}

/* A vocabulary of the tokenizer's tokens, padded to n with two-token concatenations. */
static q35_constraint_vocab *padded_vocab(const q35_tokenizer *t, int32_t n, q35_err *err) {
  const int32_t nt = q35_tokenizer_n_vocab(t);
  if (n <= nt) return q35_constraint_vocab_from_tok(t, nt, err);
  const char **bytes = calloc((size_t)n, sizeof *bytes);
  size_t *lens = calloc((size_t)n, sizeof *lens);
  uint8_t *kind = calloc((size_t)n, 1);
  char **own = calloc((size_t)n, sizeof *own);
  for (int32_t i = 0; i < n; i++) {
    if (i < nt) {
      const int type = q35_token_type(t, i);
      bytes[i] = q35_token_bytes(t, i, &lens[i]);
      kind[i] = q35_tokenizer_is_eog(t, i) ? 1 : (type == Q35_TOKEN_CONTROL || type == Q35_TOKEN_UNUSED) ? 2 : 0;
      continue;
    }
    int32_t a, b;
    do {
      a = (int32_t)(next_rand() % (uint64_t)nt);
      b = (int32_t)(next_rand() % (uint64_t)nt);
    } while (q35_token_type(t, a) != Q35_TOKEN_NORMAL || q35_token_type(t, b) != Q35_TOKEN_NORMAL);
    size_t la, lb;
    const char *pa = q35_token_bytes(t, a, &la), *pb = q35_token_bytes(t, b, &lb);
    own[i] = malloc(la + lb + 1);
    memcpy(own[i], pa, la);
    memcpy(own[i] + la, pb, lb);
    bytes[i] = own[i];
    lens[i] = la + lb;
  }
  q35_constraint_vocab *v = q35_constraint_vocab_from_bytes(n, bytes, lens, kind, err);
  for (int32_t i = 0; i < n; i++) free(own[i]);
  free(own);
  free(bytes);
  free(lens);
  free(kind);
  return v;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: constrain_bench TOKENIZER.json [--pad N] [--steps S] [--seed X] SCHEMA.json...\n");
    return 2;
  }
  int32_t pad = 0;
  int steps = 400;
  int first = 2;
  for (; first < argc && !strncmp(argv[first], "--", 2); first += 2) {
    if (first + 1 >= argc) return 2;
    if (!strcmp(argv[first], "--pad")) pad = atoi(argv[first + 1]);
    else if (!strcmp(argv[first], "--steps")) steps = atoi(argv[first + 1]);
    else if (!strcmp(argv[first], "--seed")) rng = strtoull(argv[first + 1], NULL, 10) | 1;
  }
  const char *slow_env = getenv("Q35_BENCH_SLOW");
  const double slow_us = slow_env ? atof(slow_env) : 0;
  q35_err err;
  q35_tokenizer *t = q35_tokenizer_from_json(argv[1], NULL, &err);
  if (!t) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const double tv = q35_now();
  q35_constraint_vocab *v = padded_vocab(t, pad, &err);
  if (!v) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const int32_t n = q35_constraint_vocab_n(v);
  fprintf(stderr, "vocabulary: %d tokens, built in %.1f ms\n", n, (q35_now() - tv) * 1e3);
  const size_t words = (size_t)(n + 31) / 32;
  vec all = {0}, fresh = {0}, comp = {0};
  int n_schemas = 0, refused = 0;
  for (int a = first; a < argc; a++) {
    size_t len;
    char *text = q35_read_file(argv[a], &len, &err);
    if (!text) continue;
    const double t0 = q35_now();
    q35_constraint *c = q35_constraint_new(v, Q35_CONSTRAINT_JSON_SCHEMA, text, len, NULL, &err);
    const double ms = (q35_now() - t0) * 1e3;
    free(text);
    n_schemas++;
    if (!c) {
      refused++;
      fprintf(stderr, "%-50s refused: %s\n", argv[a], err.msg);
      continue;
    }
    push(&comp, ms);
    vec mine = {0};
    static char text_so_far[1 << 16];
    int32_t n_text = 0;
    int32_t *allowed = malloc((size_t)n * sizeof *allowed);
    for (int s = 0; s < steps; s++) {
      const size_t before = q35_constraint_bytes(c);
      const double m0 = q35_now();
      const uint32_t *mask = q35_constraint_mask_ref(c);
      const double us = (q35_now() - m0) * 1e6;
      push(&all, us);
      push(&mine, us);
      if (q35_constraint_bytes(c) != before) push(&fresh, us);
      if (slow_us > 0 && us > slow_us) { /* Q35_BENCH_SLOW=US: the text before each slow mask */
        fprintf(stderr, "  slow %.0f us after:", us);
        for (int32_t k = 0; k < n_text; k++) fputc(text_so_far[k], stderr);
        fputc('\n', stderr);
      }
      int32_t na = 0;
      size_t shortest = (size_t)-1;
      for (size_t w = 0; w < words; w++)
        for (uint32_t m = mask[w]; m; m &= m - 1) {
          const int32_t id = (int32_t)(w * 32 + (size_t)__builtin_ctz(m));
          allowed[na++] = id;
        }
      if (na == 0 || q35_constraint_is_finished(c)) {
        q35_constraint_rollback(c, q35_constraint_n_tokens(c), &err);
        n_text = 0;
        continue;
      }
      int32_t pick = allowed[next_rand() % (uint64_t)na];
      if (next_rand() % 4 == 0) { /* one of the shortest: lets strings and arrays close */
        for (int32_t i = 0; i < na; i++) {
          size_t l = 0;
          q35_token_bytes(t, allowed[i] < q35_tokenizer_n_vocab(t) ? allowed[i] : 0, &l);
          if (allowed[i] >= q35_tokenizer_n_vocab(t)) l = 99;
          if (q35_tokenizer_is_eog(t, allowed[i])) l = 0;
          if (l < shortest) {
            shortest = l;
            pick = allowed[i];
          }
        }
      }
      if (q35_constraint_accept(c, pick, &err)) break;
      if (pick < q35_tokenizer_n_vocab(t)) {
        size_t l = 0;
        const char *b = q35_token_bytes(t, pick, &l);
        if (b && n_text + (int32_t)l < (int32_t)sizeof text_so_far) {
          memcpy(text_so_far + n_text, b, l);
          n_text += (int32_t)l;
        }
      }
    }
    fprintf(stderr, "%-50s compile %8.2f ms, masks median %8.2f us, p99 %9.2f us, store %zu KiB\n", argv[a], ms,
            pct(&mine, 0.5), pct(&mine, 0.99), q35_constraint_bytes(c) >> 10);
    free(mine.v);
    free(allowed);
    q35_constraint_free(c);
  }
  printf("{\"schemas\":%d,\"refused\":%d,\"masks\":%zu,\"mask_us_median\":%.2f,\"mask_us_p99\":%.2f,"
         "\"mask_us_first_median\":%.2f,\"compile_ms_median\":%.2f,\"compile_ms_max\":%.2f,\"n_vocab\":%d}\n",
         n_schemas, refused, all.n, pct(&all, 0.5), pct(&all, 0.99), pct(&fresh, 0.5), pct(&comp, 0.5), pct(&comp, 1.0),
         n);
  q35_tokenizer_free(t);
  return 0;
}
