/*
 * test_sampler.c - the sampling head against its contract (docs/SAMPLING.md).
 *
 *  - Philox4x32-10 against the Random123 known-answer vectors (kat_vectors).
 *  - the exp: SIMD twin bit-identical to the scalar routine; accuracy against libm.
 *  - fast path == sort-based reference, bit for bit (token, logprob, alternatives), on
 *    100,000 random rows (fewer under Q35_SANITIZE_RUN): V log-uniform in 1 .. 300,000,
 *    ties, -inf entries, huge and tiny logit ranges, every parameter kind, penalties,
 *    batches of 1 .. 64; also with the SIMD level lowered to scalar (and, for the one-pass
 *    top-p path, to every level below the active one).
 *  - statistics: empirical frequencies vs the filtered, renormalized softmax computed here in
 *    double with libm (independent of the sampler's exp and fixed-point sums): total
 *    variation below 0.8 sqrt(bins / N) (twice its expected bound) and a chi-square test
 *    at p ~ 1e-6.
 *  - support examples, greedy equivalences, seeds, batch independence, validation errors,
 *    bad rows, penalty semantics.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "check.h"
#include "sample/sample_internal.h"
#include "sample/sampler.h"

/* test-local generator (splitmix64) */
static uint64_t rs = 0x1234567887654321ull;
static uint64_t rnd(void) {
  uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double unif(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static double gauss(void) {
  double u = unif(), v = unif();
  return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ---- Philox ---- */
static void test_philox(void) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int t = 0; t < 3; t++) {
    uint32_t out[4];
    q35_philox4x32_10(kat[t], kat[t] + 4, out);
    for (int j = 0; j < 4; j++)
      CHECK(out[j] == kat[t][6 + j], "philox kat %d word %d: %08x want %08x", t, j, out[j],
            kat[t][6 + j]);
  }
  /* the draw's 53 bits: key = seed, counter = draw index */
  uint64_t seed = 0x0123456789abcdefull, n = 0xfedcba9876543210ull;
  uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), 0, 0}, key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  q35_philox4x32_10(ctr, key, out);
  uint64_t want = ((((uint64_t)out[0]) << 32) | out[1]) >> 11;
  CHECK(q35_draw_u53(seed, n) == want, "u53 layout");
  CHECK(q35_draw_u53(seed, n) < (1ull << 53), "u53 range");
  /* uniformity of u: mean and a 16-bin histogram over many draw indices */
  int bins[16] = {0};
  double mean = 0;
  const int N = 160000;
  for (int i = 0; i < N; i++) {
    uint64_t k = q35_draw_u53(42, (uint64_t)i);
    bins[k >> 49]++;
    mean += (double)k * 0x1p-53;
  }
  mean /= N;
  CHECK(fabs(mean - 0.5) < 0.005, "u mean %g", mean);
  double chi = 0;
  for (int b = 0; b < 16; b++) chi += (bins[b] - N / 16.0) * (bins[b] - N / 16.0) / (N / 16.0);
  CHECK(chi < 50, "u histogram chi2 %g (15 dof)", chi);
  uint64_t s = q35_random_seed(), s2 = q35_random_seed();
  CHECK(s < (1ull << 53) && s2 < (1ull << 53), "random seed below 2^53");
  CHECK(s != s2, "two random seeds equal");
}

/* ---- exp ---- */
static void test_exp(void) {
  enum { N = 1 << 16 };
  static float x[N + 7], y[N + 7];
  int n = 0;
  x[n++] = 0.0f;
  x[n++] = -0.0f;
  x[n++] = -INFINITY;
  x[n++] = -87.0f;
  x[n++] = nextafterf(-87.0f, 0.0f);
  x[n++] = nextafterf(-87.0f, -INFINITY);
  x[n++] = -1e30f;
  x[n++] = -1e-30f;
  x[n++] = -FLT_MIN;
  while (n < N + 7) {
    double u = unif();
    x[n++] = (float)(u < 0.5 ? -90.0 * unif() : -exp(40.0 * unif() - 30.0));
  }
  q35_sampler_exp_array(x, y, N + 7);
  int mism = 0;
  double maxrel = 0;
  for (int i = 0; i < N + 7; i++) {
    float s = q35_sampler_exp(x[i]);
    if (fbits(s) != fbits(y[i])) mism++;
    if (x[i] >= -80.0f) {
      double r = fabs((double)s - exp((double)x[i])) / exp((double)x[i]);
      if (r > maxrel) maxrel = r;
    }
  }
  CHECK(mism == 0, "exp SIMD (level %s) differs from scalar in %d of %d", q35_simd_name(q35_simd_active()), mism,
        N + 7);
  CHECK(maxrel < 1e-6, "exp max relative error %g", maxrel);
  CHECK(q35_sampler_exp(0.0f) == 1.0f && q35_sampler_exp(-0.0f) == 1.0f, "exp(0) != 1");
  CHECK(q35_sampler_exp(-INFINITY) == 0.0f, "exp(-inf) != 0");
  /* monotone on a grid (not required, but catches gross polynomial mistakes) */
  float prev = 0.0f;
  for (float t = -86.9f; t <= 0.0f; t += 0.001f) {
    float e = q35_sampler_exp(t);
    CHECK(e >= prev * (1.0f - 1e-6f), "exp not monotone at %g", (double)t);
    prev = e;
  }
  printf("exp: SIMD level %s bit-identical on %d inputs; max rel error %.3g\n",
         q35_simd_name(q35_simd_active()), N + 7, maxrel);
}

/* ---- random rows and parameters ---- */

static int32_t pick_vocab(void) {
  double u = unif();
  if (u < 0.007) return 100000 + (int32_t)(rnd() % 200001); /* a few hundred large rows */
  if (u < 0.05) return 1 + (int32_t)exp(unif() * log(300000.0));
  /* most small: log-uniform in 1 .. 3000 */
  return (int32_t)exp(unif() * log(3000.0));
}

static void gen_row(float *l, int32_t V) {
  int kind = (int)(rnd() % 9);
  double sigma = exp(unif() * 8.0 - 3.0);
  double off = (unif() - 0.5) * (rnd() % 4 == 0 ? 1e6 : 20.0);
  for (int32_t i = 0; i < V; i++) l[i] = (float)(off + sigma * gauss());
  switch (kind) {
  case 0: /* ties: few distinct values */
    {
      int q = 1 + (int)(rnd() % 5);
      for (int32_t i = 0; i < V; i++) l[i] = (float)(rnd() % (uint64_t)q);
    }
    break;
  case 1: /* -inf entries */
    {
      double frac = unif();
      for (int32_t i = 0; i < V; i++)
        if (unif() < frac) l[i] = -INFINITY;
      l[rnd() % (uint64_t)V] = (float)gauss();
    }
    break;
  case 2: /* huge range */
    for (int32_t i = 0; i < V; i++) l[i] = (float)((unif() - 0.5) * 6e38);
    break;
  case 3: /* tiny range: all within a few ulp */
    {
      float b = (float)(gauss() * 10);
      for (int32_t i = 0; i < V; i++) {
        float x = b;
        for (int k = (int)(rnd() % 4); k > 0; k--) x = nextafterf(x, INFINITY);
        l[i] = x;
      }
    }
    break;
  case 4: /* peaked: a nucleus of ~10 high entries */
    for (int j = 0; j < 10; j++) l[rnd() % (uint64_t)V] = (float)(off + sigma * (8 + gauss()));
    break;
  case 5: /* tied maxima */
    {
      float mx = -INFINITY;
      for (int32_t i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
      for (int j = 0; j < 3; j++) l[rnd() % (uint64_t)V] = mx;
    }
    break;
  case 6: /* sorted ascending (adversarial for strided samples) */
    for (int32_t i = 0; i < V; i++) l[i] = (float)i * (float)sigma;
    break;
  default:
    break;
  }
}

static void gen_params(q35_sampling *p, int32_t V) {
  *p = q35_sampling_default();
  static const float temps[] = {0.0f, 1e-30f, 1e-4f, 0.1f, 0.7f, 1.0f, 1.0f, 1.0f, 1.5f, 3.0f, 1e30f};
  p->temperature = temps[rnd() % (sizeof temps / sizeof temps[0])];
  if (rnd() % 8 == 0) p->temperature = (float)(unif() * 4);
  switch (rnd() % 10) {
  case 0: case 1: case 2: p->top_k = 0; break;
  case 3: p->top_k = -(int64_t)(rnd() % 10); break;
  case 4: p->top_k = 1; break;
  case 5: p->top_k = 1 + (int64_t)(rnd() % 100); break;
  case 6: p->top_k = 50; break;
  case 7: p->top_k = V - 1 + (int64_t)(rnd() % 3); break;
  case 8: p->top_k = (int64_t)1 << 40; break;
  default: p->top_k = 1 + (int64_t)(rnd() % (uint64_t)V); break;
  }
  static const float tps[] = {1.0f, 1.0f, 1.0f, 0.9f, 0.5f, 0.95f, 0.01f, 1e-6f, 0.99999994f, 0.3f};
  p->top_p = tps[rnd() % (sizeof tps / sizeof tps[0])];
  if (rnd() % 8 == 0) p->top_p = (float)(unif() * 0.999 + 0.001);
  static const float mps[] = {0.0f, 0.0f, 0.0f, 0.05f, 0.1f, 0.5f, 1.0f, 1e-10f, 1e-30f};
  p->min_p = mps[rnd() % (sizeof mps / sizeof mps[0])];
  if (rnd() % 8 == 0) p->min_p = (float)unif();
  if (rnd() % 6 == 0) {
    p->presence_penalty = (float)((unif() - 0.5) * 4);
    p->frequency_penalty = (float)((unif() - 0.5) * 4);
    p->repetition_penalty = (float)exp((unif() - 0.5) * 3);
  }
  p->seed = rnd();
  p->draw_index = rnd() % 3 == 0 ? rnd() : rnd() % 100;
}

/* Random logit biases for one row (one row in five): a few ids, some repeated, biases from
 * small to the +-100 OpenAI allows. */
#define BIAS_MAX 8
static void gen_bias(q35_sampling *p, int32_t V, q35_logit_bias *store) {
  if (rnd() % 5) return;
  const int n = 1 + (int)(rnd() % BIAS_MAX);
  static const float big[] = {-100.0f, 100.0f, -1e4f, 5.0f};
  for (int i = 0; i < n; i++) {
    store[i].token = i > 0 && rnd() % 4 == 0 ? store[i - 1].token : (int32_t)(rnd() % (uint64_t)V);
    store[i].bias = rnd() % 3 ? (float)((unif() - 0.5) * 20) : big[rnd() % 4];
  }
  p->logit_bias = store;
  p->n_logit_bias = n;
}

static int same_result(const q35_sample_result *a, const q35_sample_result *b) {
  if (a->token != b->token || fbits(a->logprob) != fbits(b->logprob) || a->n_top != b->n_top) return 0;
  for (int j = 0; j < a->n_top; j++)
    if (a->top_ids[j] != b->top_ids[j] || fbits(a->top_logprobs[j]) != fbits(b->top_logprobs[j])) return 0;
  return 1;
}

static void dump_case(const char *what, int32_t V, const q35_sampling *p, int32_t a, int32_t b) {
  fprintf(stderr, "  %s: V=%d T=%g top_k=%lld top_p=%.9g min_p=%.9g pen=(%g,%g,%g) seed=%llu n=%llu: fast %d ref %d\n",
          what, (int)V, (double)p->temperature, (long long)p->top_k, (double)p->top_p,
          (double)p->min_p, (double)p->presence_penalty, (double)p->frequency_penalty,
          (double)p->repetition_penalty, (unsigned long long)p->seed,
          (unsigned long long)p->draw_index, (int)a, (int)b);
}

static void test_fast_vs_ref(int n_rows) {
  const int32_t VMAX = 300000;
  q35_err err;
  q35_sampler *ws = q35_sampler_new(VMAX, &err);
  q35_sampler *ws0 = q35_sampler_new(VMAX, &err);
  q35_sampler_set_simd(ws0, Q35_SIMD_SCALAR);
  float *rows = malloc((size_t)64 * 3000 * sizeof(float));
  float *big = malloc((size_t)VMAX * sizeof(float));
  int32_t hist[64];
  static q35_logit_bias bias_store[64][BIAS_MAX];
  int rows_done = 0, large = 0, errors_seen = 0, scalar_checked = 0;
  while (rows_done < n_rows) {
    /* either a batch of small rows or one row of any size */
    int32_t V = pick_vocab();
    int B = (V <= 3000 && rnd() % 4 == 0) ? 1 + (int)(rnd() % 64) : 1;
    float *L = B > 1 ? rows : big;
    for (int b = 0; b < B; b++) gen_row(L + (size_t)b * V, V);
    q35_sampling ps[64];
    q35_sample_history hs[64];
    int32_t n_top = rnd() % 4 == 0 ? (int32_t)(rnd() % 21) : (rnd() % 2 ? 0 : -1);
    for (int b = 0; b < B; b++) {
      gen_params(&ps[b], V);
      gen_bias(&ps[b], V, bias_store[b]);
      int32_t nh = (int32_t)(rnd() % 3 == 0 ? rnd() % 64 : 0);
      for (int j = 0; j < nh; j++) hist[j] = (int32_t)(rnd() % (uint64_t)V);
      hs[b].tokens = hist;
      hs[b].n_tokens = nh;
      hs[b].n_prompt = nh ? (int32_t)(rnd() % (uint64_t)(nh + 1)) : 0;
      (void)hs;
    }
    /* hist is shared by the batch rows here only when B == 1 (each row gets the same) */
    q35_sample_result fr[64];
    int frc = B > 1 ? q35_sample_batch(ws, L, B, V, ps, hs, n_top, fr, &err)
                    : q35_sample(ws, L, V, &ps[0], hs[0].tokens, hs[0].n_tokens, hs[0].n_prompt,
                                 n_top, &fr[0], &err);
    /* the reference row by row; a row it rejects must make the fast call fail too, and the
     * batch's message must name that row */
    q35_sample_result rrs[64];
    int first_bad = -1;
    for (int b = 0; b < B && first_bad < 0; b++) {
      q35_err e2;
      if (q35_sample_ref(ws, L + (size_t)b * V, V, &ps[b], hs[b].tokens, hs[b].n_tokens,
                         hs[b].n_prompt, n_top, &rrs[b], &e2) != 0)
        first_bad = b;
    }
    if (first_bad >= 0) {
      char want[32];
      snprintf(want, sizeof want, "row %d:", first_bad);
      CHECK(frc != 0, "ref rejected row %d but fast succeeded", first_bad);
      CHECK(B == 1 || strstr(err.msg, want), "batch error '%s' should name %s", err.msg, want);
      errors_seen++;
      continue;
    }
    for (int b = 0; b < B; b++) {
      const q35_sample_result rr = rrs[b];
      CHECK(frc == 0, "fast failed: %s", err.msg);
      if (frc) break;
      if (!same_result(&fr[b], &rr)) {
        CHECK(0, "fast != ref (row %d of %d): token %d vs %d, logprob %.9g vs %.9g, n_top %d vs %d",
              b, B, fr[b].token, rr.token, (double)fr[b].logprob, (double)rr.logprob, fr[b].n_top, rr.n_top);
        dump_case("case", V, &ps[b], fr[b].token, rr.token);
      }
      if (rnd() % 16 == 0 || (V >= 100000 && rnd() % 4 == 0)) { /* scalar kernels too */
        q35_sample_result sr;
        if (q35_sample(ws0, L + (size_t)b * V, V, &ps[b], hs[b].tokens, hs[b].n_tokens,
                       hs[b].n_prompt, n_top, &sr, &err) == 0) {
          scalar_checked++;
          if (!same_result(&sr, &rr)) {
            CHECK(0, "scalar fast != ref: token %d vs %d", sr.token, rr.token);
            dump_case("scalar case", V, &ps[b], sr.token, rr.token);
          }
        }
      }
      if (V >= 100000) large++;
      rows_done++;
    }
  }
  printf("fast == ref: %d rows (%d with V >= 100000, %d also with scalar kernels, %d rows with "
         "overflowing penalties rejected by both)\n",
         rows_done, large, scalar_checked, errors_seen);
  free(rows);
  free(big);
  q35_sampler_free(ws);
  q35_sampler_free(ws0);
}

/* The one-pass top-p path (keep-all rows, top_p < 1, V >= 16384) against the reference on
 * rows built to be hard for its estimate: flat, peaked, a hidden heavy subpopulation, ties,
 * sorted, tiny and huge ranges; with its window on, deliberately misplaced (every row takes
 * the fallback) and at every SIMD level below the active one (workspace 2 is scalar). */
static void test_fused_topp(int n_rows) {
  const int32_t VMAX = 70000;
  q35_err err;
  q35_sampler *ws[2 + Q35_SIMD_NEON] = {0};
  /* levels below the active one: x86 scalar .. active - 1, aarch64 scalar */
  int nws = 2 + (q35_simd_active() == Q35_SIMD_NEON ? 1 : (int)q35_simd_active());
  for (int k = 0; k < nws; k++) ws[k] = q35_sampler_new(VMAX, &err);
  q35_sampler_set_fused(ws[1], 2);
  for (int k = 2; k < nws; k++) q35_sampler_set_simd(ws[k], (q35_simd)(k - 2));
  float *l = malloc(sizeof(float) * VMAX);
  static const float tps[] = {0.9f, 0.5f, 0.95f, 0.99f, 0.3f, 1e-6f, 0.99999994f, 0.7f};
  static const float temps[] = {1.0f, 0.7f, 1.5f, 0.25f, 3.0f, 1e-4f};
  static const float mps[] = {0.0f, 0.0f, 0.01f, 0.2f, 1e-6f};
  int mism = 0;
  for (int r = 0; r < n_rows; r++) {
    int32_t V = 16384 + (int32_t)(rnd() % (uint64_t)(VMAX - 16384));
    int kind = r % 8;
    for (int32_t i = 0; i < V; i++) l[i] = (float)gauss();
    switch (kind) {
    case 1: for (int j = 0; j < 10; j++) l[rnd() % (uint64_t)V] = 12.0f + (float)gauss(); break;
    case 2: /* a few hundred heavy entries spread over the row */
      for (int32_t i = 0; i < V; i++) l[i] = (float)(1.5 * gauss() - 5);
      for (int j = 0; j < 200; j++) l[rnd() % (uint64_t)V] = 5.0f + 3.0f * (float)unif();
      break;
    case 3: for (int32_t i = 0; i < V; i++) l[i] = (float)(rnd() % 7); break;
    case 4: for (int32_t i = 0; i < V; i++) l[i] = (float)i * 1e-3f; break;
    case 5: for (int32_t i = 0; i < V; i++) l[i] = (float)(3.0 * gauss()); break;
    case 6: for (int32_t i = 0; i < V; i++) l[i] = (float)(-log(-log(unif() + 1e-300) + 1e-300) * 2); break;
    case 7: for (int32_t i = 0; i < V; i++) l[i] = 1.0f + (float)(rnd() % 3) * 1e-7f; break;
    default: break;
    }
    q35_sampling p = q35_sampling_default();
    p.top_p = tps[rnd() % 8];
    p.temperature = temps[rnd() % 6];
    p.min_p = mps[rnd() % 5];
    p.seed = rnd();
    p.draw_index = rnd() % 100;
    q35_sample_result want, got;
    CHECK(q35_sample_ref(ws[0], l, V, &p, NULL, 0, 0, -1, &want, &err) == 0, "ref: %s", err.msg);
    for (int k = 0; k < nws; k++) {
      CHECK(q35_sample(ws[k], l, V, &p, NULL, 0, 0, -1, &got, &err) == 0, "fast: %s", err.msg);
      if (got.token != want.token && mism++ < 5) {
        CHECK(0, "one-pass top-p (workspace %d, kind %d) != ref: token %d vs %d", k, kind,
              got.token, want.token);
        dump_case("case", V, &p, got.token, want.token);
      }
    }
  }
  int64_t rows[2 + Q35_SIMD_NEON], fb[2 + Q35_SIMD_NEON];
  for (int k = 0; k < nws; k++) {
    q35_sampler_fused_stats(ws[k], &rows[k], &fb[k]);
    CHECK(rows[k] == n_rows, "every row should enter the one-pass path: %lld of %d (workspace %d)",
          (long long)rows[k], n_rows, k);
  }
  CHECK(fb[0] < n_rows / 2, "one-pass path fell back on %lld of %d rows", (long long)fb[0], n_rows);
  CHECK(fb[1] == n_rows, "the misplaced window fell back on only %lld of %d rows",
        (long long)fb[1], n_rows);
  printf("one-pass top-p == ref: %d rows x %d workspaces; fallbacks: %lld (window on, %s), %lld "
         "(misplaced)", n_rows, nws, (long long)fb[0], q35_simd_name(q35_simd_active()), (long long)fb[1]);
  for (int k = 2; k < nws; k++) printf(", %lld (%s)", (long long)fb[k], q35_simd_name((q35_simd)(k - 2)));
  printf("\n");
  free(l);
  for (int k = 0; k < nws; k++) q35_sampler_free(ws[k]);
}

/* ---- kernel twins ----
 * Every row kernel of sample_internal.h at every SIMD level up to the active one, against the
 * scalar kernel, bit for bit, on lengths 0 .. 80 (every tail) and a few block edges: rows from
 * gen_row (ties, -inf, huge and tiny ranges), NaN and +inf at random places, weights with the
 * edge values of W = trunc(w * 2^61) (0, 1, subnormals, 2^-61 and its neighbours). */

#define TWIN_NMAX 17000

static int twin_levels(q35_simd *lv) {
  int n = 0;
  lv[n++] = Q35_SIMD_SCALAR;
  if (q35_simd_active() == Q35_SIMD_NEON) lv[n++] = Q35_SIMD_NEON;
  else
    for (int k = Q35_SIMD_AVX2; k <= (int)q35_simd_active(); k++) lv[n++] = (q35_simd)k;
  return n;
}

static int32_t twin_len(int r) {
  static const int32_t big[] = {127, 1000, 1023, 1024, 1025, 2047, 2049, 3000, 8195, TWIN_NMAX};
  return r <= 80 ? r : big[r % (int)(sizeof big / sizeof big[0])];
}

static float twin_weight(void) {
  switch (rnd() % 8) {
  case 0: return 0.0f;
  case 1: return 1.0f;
  case 2: return ldexpf(1.0f + (float)(rnd() % 4) * 0x1p-23f, -61 - (int)(rnd() % 3));
  case 3: return (float)unif() * FLT_MIN; /* subnormal */
  case 4: return nextafterf(1.0f, 0.0f);
  default: return (float)exp(-30.0 * unif());
  }
}

static int same_floats(const float *a, const float *b, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    if (fbits(a[i]) != fbits(b[i])) return 0;
  return 1;
}

static int same_sums(const u128 *a, const u128 *b, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

/* One row at one level (ws) against the scalar kernels (s0); buffers [0] scalar, [1] the level. */
static void twin_check(const q35_sampler *ws, const q35_sampler *s0, const float *l, const float *wt,
                       const float *xe, int32_t n, float temp, float *w[2], float *o[2], float *cm[2],
                       int32_t *ids[2], int32_t *cst[2], u128 *bs[2]) {
  const char *nm = q35_simd_name(ws->simd);
  int32_t nb = (n + BLOCK - 1) / BLOCK, nch = (n + CHUNK - 1) / CHUNK, bad0, bad, c, c0;
  float m0 = k_scan(s0, l, n, &bad0), m = k_scan(ws, l, n, &bad);
  CHECK(fbits(m) == fbits(m0) && bad == bad0, "scan %s n=%d", nm, (int)n);
  m0 = k_scan_chunks(s0, l, n, cm[0], &bad0);
  m = k_scan_chunks(ws, l, n, cm[1], &bad);
  CHECK(fbits(m) == fbits(m0) && bad == bad0, "scan_chunks %s n=%d", nm, (int)n);
  if (bad0 < 0) CHECK(same_floats(cm[1], cm[0], nch), "scan_chunks maxima %s n=%d", nm, (int)n);
  float t = n ? l[rnd() % (uint64_t)n] : 0.0f;
  CHECK(k_find_eq(ws, l, n, t) == k_find_eq(s0, l, n, t), "find_eq %s n=%d", nm, (int)n);
  CHECK(k_find_eq(ws, l, n, m0) == k_find_eq(s0, l, n, m0), "find_eq max %s n=%d", nm, (int)n);
  c0 = k_filter_ge(s0, l, n, t, ids[0]);
  c = k_filter_ge(ws, l, n, t, ids[1]);
  CHECK(c == c0 && !memcmp(ids[1], ids[0], (size_t)c * 4), "filter_ge %s n=%d", nm, (int)n);
  if (bad0 >= 0) return; /* the exp kernels see rows without NaN / +inf */
  if (m0 == -INFINITY) m0 = 0.0f;
  k_exp_row(s0, l, n, m0, temp, w[0], bs[0]);
  k_exp_row(ws, l, n, m0, temp, w[1], bs[1]);
  CHECK(same_floats(w[1], w[0], n) && same_sums(bs[1], bs[0], nb), "exp_row %s n=%d T=%g", nm,
        (int)n, (double)temp);
  float lo = n ? wt[rnd() % (uint64_t)n] : 0.0f, hi = n ? wt[rnd() % (uint64_t)n] : 0.0f;
  if (lo > hi) { float x = lo; lo = hi; hi = x; }
  if (rnd() % 5 == 0) hi = INFINITY;
  k_block_sums(s0, wt, n, lo, bs[0]);
  k_block_sums(ws, wt, n, lo, bs[1]);
  CHECK(same_sums(bs[1], bs[0], nb), "block_sums %s n=%d", nm, (int)n);
  CHECK(k_wsum_ge(ws, wt, n, lo) == k_wsum_ge(s0, wt, n, lo) &&
            k_wsum_ge(ws, w[0], n, 0.0f) == k_wsum_ge(s0, w[0], n, 0.0f),
        "wsum_ge %s n=%d", nm, (int)n);
  u128 ab, in, ab0, in0, tot, tot0;
  c0 = k_window(s0, wt, n, lo, hi, o[0], &ab0, &in0);
  c = k_window(ws, wt, n, lo, hi, o[1], &ab, &in);
  CHECK(c == c0 && same_floats(o[1], o[0], c) && ab == ab0 && in == in0, "window %s n=%d", nm,
        (int)n);
  lo = n ? w[0][rnd() % (uint64_t)n] : 0.0f, hi = n ? w[0][rnd() % (uint64_t)n] : 1.0f;
  if (lo > hi) { float x = lo; lo = hi; hi = x; }
  c0 = k_fused(s0, l, n, m0, temp, lo, hi, bs[0], cst[0], &tot0, o[0]);
  c = k_fused(ws, l, n, m0, temp, lo, hi, bs[1], cst[1], &tot, o[1]);
  CHECK(c == c0 && tot == tot0 && same_floats(o[1], o[0], c) && same_sums(bs[1], bs[0], nb) &&
            !memcmp(cst[1], cst[0], (size_t)nb * 4),
        "fused %s n=%d T=%g", nm, (int)n, (double)temp);
  k_exp_array(Q35_SIMD_SCALAR, xe, o[0], n);
  k_exp_array(ws->simd, xe, o[1], n);
  CHECK(same_floats(o[1], o[0], n), "exp_array %s n=%d", nm, (int)n);
}

static void test_kernel_twins(int n_rows) {
  q35_simd lv[3];
  int nl = twin_levels(lv);
  q35_sampler ks[3];
  memset(ks, 0, sizeof ks);
  for (int k = 0; k < nl; k++) ks[k].simd = lv[k];
  size_t cap = TWIN_NMAX + SLACK;
  float *l = malloc(cap * 4), *wt = malloc(cap * 4), *xe = malloc(cap * 4), *w[2], *o[2], *cm[2];
  int32_t *ids[2], *cst[2];
  u128 *bs[2];
  for (int k = 0; k < 2; k++) {
    w[k] = malloc(cap * 4), o[k] = malloc(cap * 4), cm[k] = malloc(cap * 4);
    ids[k] = malloc(cap * 4), cst[k] = malloc(cap * 4), bs[k] = malloc(cap * sizeof(u128));
  }
  static const float temps[] = {1.0f, 0.7f, 0.5f, 3.0f, 1e-4f, 2.0f};
  int bad_rows = 0;
  for (int r = 0; r < n_rows; r++) {
    int32_t n = twin_len(r % 90);
    if (n > 0) gen_row(l, n);
    if (n > 0 && r % 7 == 3) l[rnd() % (uint64_t)n] = rnd() % 2 ? NAN : INFINITY, bad_rows++;
    for (int32_t i = 0; i < n; i++) wt[i] = twin_weight(), xe[i] = -(float)(90.0 * unif());
    if (n > 2) xe[0] = -INFINITY, xe[1] = -87.0f, xe[2] = nextafterf(-87.0f, -INFINITY);
    float temp = temps[rnd() % 6];
    for (int k = 1; k < nl; k++) twin_check(&ks[k], &ks[0], l, wt, xe, n, temp, w, o, cm, ids, cst, bs);
  }
  printf("kernel twins: %d rows (%d with NaN / +inf), levels up to %s bit-identical to scalar\n",
         n_rows, bad_rows, q35_simd_name(lv[nl - 1]));
  for (int k = 0; k < 2; k++) {
    free(w[k]), free(o[k]), free(cm[k]), free(ids[k]), free(cst[k]), free(bs[k]);
  }
  free(l);
  free(wt);
  free(xe);
}

/* ---- statistics ---- */

/* The contract's distribution in double, with libm exp and sorting: an independent model. */
static void expected_dist(const float *l, int V, const q35_sampling *p, double *prob) {
  double m = -INFINITY;
  for (int i = 0; i < V; i++) m = l[i] > m ? l[i] : m;
  double *s = malloc(sizeof(double) * V);
  int *ord = malloc(sizeof(int) * V);
  for (int i = 0; i < V; i++) {
    s[i] = ((double)l[i] - m) / p->temperature;
    ord[i] = i;
  }
  for (int i = 1; i < V; i++) { /* insertion sort by s desc */
    int x = ord[i], j = i;
    while (j > 0 && s[ord[j - 1]] < s[x]) { ord[j] = ord[j - 1]; j--; }
    ord[j] = x;
  }
  int K = (p->top_k <= 0 || p->top_k >= V) ? V : (int)p->top_k;
  double kth = s[ord[K - 1]];
  for (int i = 0; i < V; i++) prob[i] = s[i] >= kth ? exp(s[i]) : 0.0;
  double tot = 0;
  for (int i = 0; i < V; i++) tot += prob[i];
  if (p->top_p < 1.0f) {
    double before = 0, last = 0;
    int keep_to = 0;
    for (int j = 0; j < V; j++) {
      double w = prob[ord[j]];
      if (w == 0) break;
      if (before <= p->top_p * tot) { keep_to = j; last = w; }
      before += w;
    }
    (void)keep_to;
    for (int i = 0; i < V; i++) if (prob[i] < last) prob[i] = 0;
  }
  if (p->min_p > 0) {
    double mx = 0;
    for (int i = 0; i < V; i++) mx = prob[i] > mx ? prob[i] : mx;
    for (int i = 0; i < V; i++) if (prob[i] < p->min_p * mx) prob[i] = 0;
  }
  tot = 0;
  for (int i = 0; i < V; i++) tot += prob[i];
  for (int i = 0; i < V; i++) prob[i] /= tot;
  free(s);
  free(ord);
}

static void stats_case(q35_sampler *ws, const char *name, const float *l, int V, q35_sampling p, int N) {
  double *prob = calloc((size_t)V, sizeof(double));
  long *cnt = calloc((size_t)V, sizeof(long));
  expected_dist(l, V, &p, prob);
  q35_err err;
  for (int n = 0; n < N; n++) {
    q35_sample_result r;
    p.draw_index = (uint64_t)n;
    if (q35_sample(ws, l, V, &p, NULL, 0, 0, -1, &r, &err)) {
      CHECK(0, "%s: %s", name, err.msg);
      break;
    }
    cnt[r.token]++;
  }
  /* categories with an expected count >= 5 on their own, the rest pooled into one bin */
  double tv = 0, chi = 0, pool_p = 0;
  long pool_c = 0;
  int dof = -1, zero_hit = 0;
  for (int i = 0; i < V; i++) {
    if (prob[i] == 0) {
      if (cnt[i]) zero_hit++;
    } else if (prob[i] * N < 5) {
      pool_p += prob[i];
      pool_c += cnt[i];
    } else {
      double e = prob[i] * N;
      tv += fabs((double)cnt[i] / N - prob[i]);
      chi += (cnt[i] - e) * (cnt[i] - e) / e;
      dof++;
    }
  }
  if (pool_p > 0) {
    double e = pool_p * N;
    tv += fabs((double)pool_c / N - pool_p);
    chi += (pool_c - e) * (pool_c - e) / e;
    dof++;
  }
  tv *= 0.5;
  /* chi-square critical value at p ~ 1e-6: dof + 7 sqrt(2 dof) + 25 (generous) */
  double crit = dof + 7.0 * sqrt(2.0 * (dof > 0 ? dof : 1)) + 25.0;
  /* E[TV] <= 0.4 sqrt(bins / N) for multinomial noise; allow twice that */
  double tv_lim = 0.8 * sqrt((dof + 1.0) / N);
  CHECK(tv < tv_lim, "%s: total variation %.4f >= %.4f", name, tv, tv_lim);
  CHECK(chi < crit, "%s: chi2 %.1f >= %.1f (%d dof)", name, chi, crit, dof);
  CHECK(zero_hit == 0, "%s: %d tokens outside the support were drawn", name, zero_hit);
  printf("stats %-38s N=%d bins=%d TV=%.4f (limit %.4f) chi2=%.1f (dof %d, limit %.1f)\n", name, N,
         dof + 1, tv, tv_lim, chi, dof, crit);
  free(prob);
  free(cnt);
}

static void test_stats(int N) {
  q35_err err;
  q35_sampler *ws = q35_sampler_new(100000, &err);
  float l8[8] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};
  q35_sampling p = q35_sampling_default();
  p.seed = 7;
  stats_case(ws, "V=8 keep-all", l8, 8, p, N);
  p.temperature = 0.5f;
  stats_case(ws, "V=8 T=0.5", l8, 8, p, N);
  p.temperature = 1.3f; p.top_k = 4;
  stats_case(ws, "V=8 T=1.3 top_k=4", l8, 8, p, N);
  p.top_k = 0; p.top_p = 0.8f; p.temperature = 1.0f;
  stats_case(ws, "V=8 top_p=0.8", l8, 8, p, N);
  p.top_p = 1.0f; p.min_p = 0.2f;
  stats_case(ws, "V=8 min_p=0.2", l8, 8, p, N);
  p.min_p = 0.0f; p.top_k = 6; p.top_p = 0.9f; p.min_p = 0.1f; p.temperature = 0.8f;
  stats_case(ws, "V=8 top_k=6 top_p=0.9 min_p=0.1 T=.8", l8, 8, p, N);
  if (getenv("Q35_EMULATED")) { /* under an emulator: the large rows below take minutes */
    q35_sampler_free(ws);
    return;
  }
  /* a large row: flat normal logits, check the distribution over the 64 heaviest tokens
   * folded with the rest (keep-all and top_p go through the full-row path) */
  int V = 100000;
  float *l = malloc(sizeof(float) * V);
  for (int i = 0; i < V; i++) l[i] = (float)(gauss() * 0.5);
  for (int j = 0; j < 30; j++) l[rnd() % V] = 6.0f + (float)gauss();
  p = q35_sampling_default();
  p.seed = 99;
  stats_case(ws, "V=100000 peaked keep-all", l, V, p, N / 10);
  p.top_p = 0.7f;
  stats_case(ws, "V=100000 peaked top_p=0.7", l, V, p, N / 10);
  p.top_p = 1.0f; p.top_k = 20;
  stats_case(ws, "V=100000 peaked top_k=20", l, V, p, N / 10);
  free(l);
  q35_sampler_free(ws);
}

/* ---- contract examples ---- */

static int32_t draw(q35_sampler *ws, const float *l, int32_t V, q35_sampling p, uint64_t n) {
  q35_sample_result r;
  q35_err err;
  p.draw_index = n;
  if (q35_sample(ws, l, V, &p, NULL, 0, 0, -1, &r, &err)) {
    CHECK(0, "draw: %s", err.msg);
    return -1;
  }
  return r.token;
}

/* the set of tokens seen in `n` draws, as a bit mask (V <= 32) */
static uint32_t support(q35_sampler *ws, const float *l, int32_t V, q35_sampling p, int n) {
  uint32_t m = 0;
  for (int i = 0; i < n; i++) m |= 1u << draw(ws, l, V, p, (uint64_t)i);
  return m;
}

static void test_examples(void) {
  q35_err err;
  q35_sampler *ws = q35_sampler_new(2000, &err);
  float a[4], b[4];
  const double pa[4] = {0.5, 0.3, 0.15, 0.05}, pb[4] = {0.15, 0.5, 0.05, 0.3};
  for (int i = 0; i < 4; i++) {
    a[i] = (float)log(pa[i]);
    b[i] = (float)log(pb[i]);
  }
  q35_sampling p = q35_sampling_default();
  p.seed = 1234;
  p.top_p = 0.9f;
  CHECK(support(ws, a, 4, p, 3000) == 0x7, "top_p 0.9 support %x want {0,1,2}", support(ws, a, 4, p, 3000));
  p = q35_sampling_default();
  p.top_k = 2;
  CHECK(support(ws, b, 4, p, 3000) == 0xa, "top_k 2 support %x want {1,3}", support(ws, b, 4, p, 3000));
  p.top_k = 3;
  p.top_p = 0.83f;
  CHECK(support(ws, a, 4, p, 3000) == 0x3, "top_k 3 + top_p 0.83 support %x want {0,1}", support(ws, a, 4, p, 3000));
  p = q35_sampling_default();
  CHECK(support(ws, a, 4, p, 3000) == 0xf, "keep-all support %x must reach the tail token", support(ws, a, 4, p, 3000));
  p.top_k = 1000;
  CHECK(support(ws, a, 4, p, 3000) == 0xf, "top_k > V support %x must reach every token", support(ws, a, 4, p, 3000));
  p.top_k = (int64_t)1 << 62;
  CHECK(support(ws, a, 4, p, 3000) == 0xf, "top_k 2^62 support %x", support(ws, a, 4, p, 3000));
  /* top_p ties: the smallest kept probability's ties are kept */
  float t[5] = {0.0f, -1.0f, -1.0f, -1.0f, -5.0f};
  p = q35_sampling_default();
  p.top_p = 0.5f;
  CHECK(support(ws, t, 5, p, 3000) == 0xf, "top_p ties support %x want {0,1,2,3}", support(ws, t, 5, p, 3000));
  /* a tied maximum under top_k = 1: both maxima are drawn */
  float tm[4] = {1.0f, 3.0f, 0.0f, 3.0f};
  p.top_p = 1.0f;
  p.top_k = 1;
  CHECK(support(ws, tm, 4, p, 2000) == 0xa, "top_k 1 with tied maxima support %x want {1,3}", support(ws, tm, 4, p, 2000));
  p.temperature = 0.0f;
  CHECK(support(ws, tm, 4, p, 50) == 0x2, "greedy tie must pick the lowest id");

  /* top_k = 1 and tiny temperature equal greedy; temperature -1 is the CLI's business */
  float *l = malloc(sizeof(float) * 2000);
  for (int r = 0; r < 200; r++) {
    int32_t V = 1 + (int32_t)(rnd() % 2000);
    for (int i = 0; i < V; i++) l[i] = (float)(gauss() * 3);
    q35_sampling g = q35_sampling_default();
    g.temperature = 0.0f;
    int32_t gt = draw(ws, l, V, g, 0);
    int32_t am = 0;
    for (int i = 1; i < V; i++) if (l[i] > l[am]) am = i;
    CHECK(gt == am, "greedy %d != argmax %d", gt, am);
    q35_sampling k1 = q35_sampling_default();
    k1.top_k = 1;
    k1.seed = rnd();
    CHECK(draw(ws, l, V, k1, rnd()) == gt, "top_k=1 != greedy");
    q35_sampling tt = q35_sampling_default();
    tt.temperature = 1e-20f;
    tt.seed = rnd();
    CHECK(draw(ws, l, V, tt, rnd()) == gt, "tiny temperature != greedy");
  }
  /* same seed: same tokens regardless of row position and batch size */
  {
    enum { V = 1500, BMAX = 17 };
    float *rows = malloc(sizeof(float) * V * BMAX);
    for (int i = 0; i < V * BMAX; i++) rows[i] = (float)gauss();
    q35_sampling ps[BMAX];
    q35_sample_result out[BMAX], one;
    for (int bsz = 1; bsz <= BMAX; bsz += 4) {
      for (int b = 0; b < bsz; b++) {
        ps[b] = q35_sampling_default();
        ps[b].seed = 555;
        ps[b].draw_index = 3;
      }
      /* put the probe row at position bsz - 1 */
      memcpy(rows + (size_t)(bsz - 1) * V, rows + (size_t)(BMAX - 1) * V, sizeof(float) * V);
      CHECK(q35_sample_batch(ws, rows, bsz, V, ps, NULL, 2, out, &err) == 0, "batch: %s", err.msg);
      CHECK(q35_sample(ws, rows + (size_t)(BMAX - 1) * V, V, &ps[0], NULL, 0, 0, 2, &one, &err) == 0, "single");
      CHECK(same_result(&out[bsz - 1], &one), "batch of %d, last row differs from a single call", bsz);
    }
    free(rows);
  }
  /* different seeds differ; same seed repeats */
  {
    for (int i = 0; i < 1000; i++) l[i] = 0.0f;
    q35_sampling s1 = q35_sampling_default(), s2 = s1;
    s1.seed = 1;
    s2.seed = 2;
    int same = 0, rep = 1;
    for (int n = 0; n < 20; n++) {
      int32_t x = draw(ws, l, 1000, s1, (uint64_t)n);
      same += x == draw(ws, l, 1000, s2, (uint64_t)n);
      rep &= x == draw(ws, l, 1000, s1, (uint64_t)n);
    }
    CHECK(same < 5, "seeds 1 and 2 agree on %d of 20 draws", same);
    CHECK(rep, "same seed did not repeat");
  }
  /* penalties: hand-computed */
  {
    float pl[3] = {1.0f, 2.0f, 3.0f};
    int32_t h[2] = {2, 2};
    q35_sampling g = q35_sampling_default();
    g.temperature = 0.0f;
    g.presence_penalty = 0.5f;
    g.frequency_penalty = 0.4f; /* 3 - 0.5 - 0.8 = 1.7 < 2 */
    q35_sample_result r, rr;
    CHECK(q35_sample(ws, pl, 3, &g, h, 2, 0, 3, &r, &err) == 0 && r.token == 1, "presence+frequency");
    CHECK(q35_sample_ref(ws, pl, 3, &g, h, 2, 0, 3, &rr, &err) == 0 && same_result(&r, &rr), "penalty ref");
    CHECK(fabs(r.top_logprobs[1] - (1.7 - log(exp(1.0) + exp(2.0) + exp(1.7)))) < 1e-5,
          "penalized logprob %g", (double)r.top_logprobs[1]);
    /* generated-only: the same tokens as prompt get no presence/frequency */
    CHECK(q35_sample(ws, pl, 3, &g, h, 2, 2, 0, &r, &err) == 0 && r.token == 2, "prompt tokens are not penalized by presence");
    g.presence_penalty = g.frequency_penalty = 0.0f;
    g.repetition_penalty = 2.0f; /* 3 -> 1.5 < 2 */
    CHECK(q35_sample(ws, pl, 3, &g, h, 2, 2, 0, &r, &err) == 0 && r.token == 1, "repetition over the prompt");
    float nl[3] = {-1.0f, -1.5f, -3.0f};
    int32_t h0 = 0;
    CHECK(q35_sample(ws, nl, 3, &g, &h0, 1, 0, 0, &r, &err) == 0 && r.token == 1, "repetition on a negative logit multiplies");
    /* counts from repeated tokens: frequency 1.0 and token 2 seen twice: 3 - 2 = 1 < 2 */
    g.repetition_penalty = 1.0f;
    g.frequency_penalty = 1.0f;
    CHECK(q35_sample(ws, pl, 3, &g, h, 2, 0, 0, &r, &err) == 0 && r.token == 1, "frequency counts");
    int32_t hb = 5;
    CHECK(q35_sample(ws, pl, 3, &g, &hb, 1, 0, 0, &r, &err) != 0 && strstr(err.msg, "history"), "history out of range");
    /* overflow to +inf through the repetition penalty is an error, not a token */
    float big[2] = {3e38f, 1.0f};
    g.frequency_penalty = 0.0f;
    g.repetition_penalty = 1e-3f;
    CHECK(q35_sample(ws, big, 2, &g, &h0, 1, 1, 0, &r, &err) != 0 && strstr(err.msg, "repetition"),
          "penalty overflow: %s", err.msg);
  }
  /* logprobs against a direct double computation */
  {
    float x[5] = {0.5f, -1.0f, 2.0f, 2.0f, -INFINITY};
    q35_sampling g = q35_sampling_default();
    g.temperature = 0.0f;
    q35_sample_result r;
    CHECK(q35_sample(ws, x, 5, &g, NULL, 0, 0, 20, &r, &err) == 0, "logprobs");
    double lse = log(exp(0.5) + exp(-1.0) + 2 * exp(2.0));
    CHECK(r.token == 2 && fabs(r.logprob - (2.0 - lse)) < 1e-6, "logprob %g", (double)r.logprob);
    CHECK(r.n_top == 5 && r.top_ids[0] == 2 && r.top_ids[1] == 3 && r.top_ids[2] == 0 && r.top_ids[3] == 1 && r.top_ids[4] == 4,
          "top ids");
    CHECK(isinf(r.top_logprobs[4]) && r.top_logprobs[4] < 0, "-inf logprob");
    CHECK(q35_sample(ws, x, 5, &g, NULL, 0, 0, -1, &r, &err) == 0 && isnan(r.logprob) && r.n_top == 0, "n_top -1");
  }
  free(l);
  q35_sampler_free(ws);
}

static void test_validation(void) {
  q35_err err;
  q35_sampler *ws = q35_sampler_new(16, &err);
  float l[4] = {0, 1, 2, 3};
  const struct { const char *param; int field; float v; } bad[] = {
      {"temperature", 0, -0.5f}, {"temperature", 0, NAN}, {"temperature", 0, INFINITY},
      {"temperature", 0, -1.0f}, {"top_p", 1, 0.0f}, {"top_p", 1, -0.1f}, {"top_p", 1, 1.5f},
      {"top_p", 1, NAN}, {"min_p", 2, -0.1f}, {"min_p", 2, 1.1f}, {"min_p", 2, NAN},
      {"presence_penalty", 3, 2.5f}, {"presence_penalty", 3, -2.01f}, {"presence_penalty", 3, NAN},
      {"frequency_penalty", 4, 2.5f}, {"frequency_penalty", 4, -3.0f}, {"frequency_penalty", 4, NAN},
      {"repetition_penalty", 5, 0.0f}, {"repetition_penalty", 5, -1.0f},
      {"repetition_penalty", 5, INFINITY}, {"repetition_penalty", 5, NAN},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    q35_sampling p = q35_sampling_default();
    float *f[] = {&p.temperature, &p.top_p, &p.min_p, &p.presence_penalty, &p.frequency_penalty,
                  &p.repetition_penalty};
    *f[bad[i].field] = bad[i].v;
    q35_sample_result r;
    err.msg[0] = 0;
    CHECK(q35_sampling_validate(&p, &err) != 0 && strstr(err.msg, bad[i].param), "validate %s=%g: '%s'", bad[i].param, (double)bad[i].v, err.msg);
    CHECK(q35_sample(ws, l, 4, &p, NULL, 0, 0, 0, &r, &err) != 0 && strstr(err.msg, bad[i].param), "sample %s=%g", bad[i].param, (double)bad[i].v);
    CHECK(q35_sample_ref(ws, l, 4, &p, NULL, 0, 0, 0, &r, &err) != 0 && strstr(err.msg, bad[i].param), "ref %s=%g", bad[i].param, (double)bad[i].v);
  }
  /* valid edges */
  q35_sampling p = q35_sampling_default();
  p.top_p = 1.0f; p.min_p = 1.0f; p.presence_penalty = -2.0f; p.frequency_penalty = 2.0f;
  p.repetition_penalty = 1e-6f; p.temperature = 0.0f; p.top_k = INT64_MIN;
  CHECK(q35_sampling_validate(&p, &err) == 0, "valid edges rejected: %s", err.msg);
  /* bad rows */
  const struct { float v; const char *msg; } rowbad[] = {{NAN, "NaN"}, {INFINITY, "+inf"}};
  for (int i = 0; i < 2; i++) {
    float x[40];
    for (int j = 0; j < 40; j++) x[j] = (float)j;
    x[33] = rowbad[i].v;
    q35_sample_result r;
    q35_sampling d = q35_sampling_default();
    CHECK(q35_sample(ws, x, 16, &d, NULL, 0, 0, 0, &r, &err) == 0, "entry 33 is outside the row");
    ws = (q35_sampler_free(ws), q35_sampler_new(40, &err));
    CHECK(q35_sample(ws, x, 40, &d, NULL, 0, 0, 0, &r, &err) != 0 && strstr(err.msg, rowbad[i].msg) && strstr(err.msg, "33"),
          "bad row: '%s'", err.msg);
    CHECK(q35_sample_ref(ws, x, 40, &d, NULL, 0, 0, 0, &r, &err) != 0 && strstr(err.msg, rowbad[i].msg), "ref bad row");
    d.temperature = 0.0f;
    CHECK(q35_sample(ws, x, 40, &d, NULL, 0, 0, -1, &r, &err) != 0, "greedy bad row");
  }
  float ninf[20];
  for (int j = 0; j < 20; j++) ninf[j] = -INFINITY;
  q35_sample_result r;
  q35_sampling d = q35_sampling_default();
  CHECK(q35_sample(ws, ninf, 20, &d, NULL, 0, 0, -1, &r, &err) != 0 && strstr(err.msg, "-inf"), "all -inf: '%s'", err.msg);
  CHECK(q35_sample_ref(ws, ninf, 20, &d, NULL, 0, 0, -1, &r, &err) != 0 && strstr(err.msg, "-inf"), "ref all -inf");
  CHECK(q35_sample(ws, l, 41, &d, NULL, 0, 0, -1, &r, &err) != 0, "n_vocab above the workspace");
  CHECK(q35_sample(ws, l, 4, &d, NULL, 0, 0, 21, &r, &err) != 0, "n_top 21");
  CHECK(q35_sampler_new(0, &err) == NULL, "sampler of 0");
  q35_sampler_free(ws);
}

/* logit_bias against a plain reference written here: l' = l + sum of the token's biases, then
 * greedy = the lowest id of max l', logprob = log_softmax(l') in double; -100 bans, +100
 * forces (a seeded draw at T = 1 never leaves the forced token); ids outside the vocabulary
 * and non-finite biases are refused with the id named. Both paths, every SIMD level. */
static void test_logit_bias(void) {
  q35_err err;
  enum { V = 1000 };
  q35_sampler *ws = q35_sampler_new(V, &err);
  static float l[V], lb[V];
  int checked = 0;
  for (int rep = 0; rep < 200; rep++) {
    for (int32_t i = 0; i < V; i++) l[i] = (float)(gauss() * 2);
    q35_logit_bias b[6];
    for (int i = 0; i < 6; i++) {
      b[i].token = i == 5 ? b[0].token : (int32_t)(rnd() % V);
      b[i].bias = (float)((unif() - 0.5) * 16);
    }
    memcpy(lb, l, sizeof l);
    for (int i = 0; i < 6; i++) lb[b[i].token] += b[i].bias;
    int32_t want = 0;
    for (int32_t i = 1; i < V; i++)
      if (lb[i] > lb[want]) want = i;
    double mx = lb[want], sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)lb[i] - mx);
    q35_sampling p = q35_sampling_default();
    p.temperature = 0.0f;
    p.logit_bias = b;
    p.n_logit_bias = 6;
    for (int path = 0; path < 2 + Q35_SIMD_NEON; path++) {
      q35_sample_result r;
      if (path >= 2) q35_sampler_set_simd(ws, (q35_simd)(path - 2));
      const int rc = path == 0 ? q35_sample_ref(ws, l, V, &p, NULL, 0, 0, 3, &r, &err)
                               : q35_sample(ws, l, V, &p, NULL, 0, 0, 3, &r, &err);
      CHECK(rc == 0, "logit_bias sample: %s", err.msg);
      CHECK(r.token == want, "logit_bias greedy (path %d): %d, want %d", path, r.token, want);
      CHECK(fabs((double)r.logprob - ((double)lb[want] - mx - log(sum))) < 1e-4,
            "logit_bias logprob %g, want %g", (double)r.logprob, (double)lb[want] - mx - log(sum));
      checked++;
    }
    q35_sampler_set_simd(ws, q35_simd_active());
    /* +100 forces, -100 bans the argmax: seeded draws at T = 1 */
    const int32_t force = (int32_t)(rnd() % V);
    q35_logit_bias f = {force, 100.0f}, ban = {want, -100.0f};
    p.temperature = 1.0f;
    for (int k = 0; k < 20; k++) {
      q35_sample_result r1, r2;
      p.seed = rnd();
      p.logit_bias = &f;
      p.n_logit_bias = 1;
      CHECK(q35_sample(ws, l, V, &p, NULL, 0, 0, -1, &r1, &err) == 0 && r1.token == force,
            "+100 did not force %d (got %d)", force, r1.token);
      p.temperature = 0.0f;
      p.logit_bias = &ban;
      CHECK(q35_sample(ws, l, V, &p, NULL, 0, 0, -1, &r2, &err) == 0 && r2.token != want,
            "-100 did not ban %d", want);
      p.temperature = 1.0f;
    }
  }
  /* refusals name the id */
  q35_sampling p = q35_sampling_default();
  const q35_logit_bias out[] = {{V, 1.0f}}, neg[] = {{-3, 1.0f}}, inf[] = {{7, INFINITY}};
  q35_sample_result r;
  p.logit_bias = out;
  p.n_logit_bias = 1;
  CHECK(q35_sample(ws, l, V, &p, NULL, 0, 0, -1, &r, &err) != 0 && strstr(err.msg, "1000"), "id V: '%s'", err.msg);
  CHECK(q35_sample_ref(ws, l, V, &p, NULL, 0, 0, -1, &r, &err) != 0 && strstr(err.msg, "1000"), "ref id V");
  CHECK(q35_sampling_check_vocab(&p, V, &err) != 0 && strstr(err.msg, "logit_bias"), "check_vocab: '%s'", err.msg);
  p.logit_bias = neg;
  CHECK(q35_sampling_validate(&p, &err) != 0 && strstr(err.msg, "-3"), "negative id: '%s'", err.msg);
  p.logit_bias = inf;
  CHECK(q35_sampling_validate(&p, &err) != 0 && strstr(err.msg, "7"), "inf bias: '%s'", err.msg);
  p.logit_bias = NULL;
  CHECK(q35_sampling_validate(&p, &err) != 0, "n_logit_bias 1 with no array accepted");
  printf("logit_bias == plain reference: %d rows\n", checked);
  q35_sampler_free(ws);
}

int main(void) {
  int sanitize = getenv("Q35_SANITIZE_RUN") != NULL;
  /* under an emulator (tests/test_aarch64.sh sets Q35_EMULATED): the kernel twins at the
   * sanitizer size, the rest smaller */
  int emu = getenv("Q35_EMULATED") != NULL;
  test_philox();
  test_exp();
  test_validation();
  test_logit_bias();
  test_examples();
  test_stats(emu ? 2000 : sanitize ? 20000 : 200000);
  test_fast_vs_ref(emu ? 300 : sanitize ? 4000 : 100000);
  test_fused_topp(emu ? 8 : sanitize ? 40 : 200);
  test_kernel_twins(emu || sanitize ? 900 : 9000);
  return check_done("test_sampler");
}
