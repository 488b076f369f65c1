/*
 * test_quantize_peer.c - q35's weight quantizers against ggml's own (ggml_quantize_chunk of the
 * prebuilt libggml-base in .peer/, docs/peers.md), on the same rows and the same importance
 * vector: the IQ1/IQ2/IQ3 family (with and without importance), and the importance-weighted
 * forms of Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K, IQ4_NL, Q4_1, Q5_1.
 *   - q35's blocks dequantize bit-identically under ggml's dequantize_row_* and q35's;
 *   - error: with an importance vector qw, sum qw * (x - q)^2 (the error llama.cpp's imatrix
 *     weights measure); without one, the error under the weights ggml's unweighted quantizer
 *     minimises (x^2 for IQ3 and IQ1_M, sigma2/4 + x^2 for IQ2_S, 1 for the others: facts of
 *     ggml-quants.c) and, printed too, the plain squared error; q35's rms over ggml's, per type,
 *     summed over the rows, within the type's bound in the table below;
 *   - without an importance vector the types ggml refuses to quantize
 *     (ggml_quantize_requires_imatrix) are the ones q35_type_requires_imatrix names.
 * Rows: 64 rows of 2048 (Q35_SANITIZE_RUN: 8), gaussian with a per-32 scale spread (log-normal),
 * some blocks all positive / zero / constant / with an outlier; importance log-normal per column.
 * Skips (exit 0) when the peer library is absent.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "kernels/quant.h"

#include "check.h"

static uint64_t rng_state = 0x6A09E667F3BCC909ull;
static uint64_t rng_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static float rng_gauss(void) {
  double u = ((double)(rng_u64() >> 11) + 0.5) * 0x1.0p-53, v = (double)(rng_u64() >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

typedef void (*to_float_fn)(const void *, float *, int64_t);
typedef size_t (*quantize_chunk_fn)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
typedef _Bool (*requires_imatrix_fn)(int); /* C++ bool */
typedef void (*quantize_init_fn)(int);

/* type, ggml's dequantizer, and the bounds on q35's error over ggml's: with an importance
 * vector, and without (0: not checked, the type needs one) */
static const struct {
  int type;
  const char *deq;
  double bound_w, bound_plain;
} types[] = {
    {Q35_TYPE_IQ2_XXS, "dequantize_row_iq2_xxs", 1.00, 0},   {Q35_TYPE_IQ2_XS, "dequantize_row_iq2_xs", 1.00, 0},
    {Q35_TYPE_IQ2_S, "dequantize_row_iq2_s", 1.00, 1.00},    {Q35_TYPE_IQ3_XXS, "dequantize_row_iq3_xxs", 1.00, 1.00},
    {Q35_TYPE_IQ3_S, "dequantize_row_iq3_s", 1.00, 1.00},    {Q35_TYPE_IQ1_S, "dequantize_row_iq1_s", 1.00, 0},
    {Q35_TYPE_IQ1_M, "dequantize_row_iq1_m", 1.00, 1.00},
    /* the importance-weighted forms of the older types (their plain forms: test_quant_peer and
     * test_quant_lowbit_peer) */
    {Q35_TYPE_Q4_0, "dequantize_row_q4_0", 1.05, 0},         {Q35_TYPE_Q5_0, "dequantize_row_q5_0", 1.05, 0},
    {Q35_TYPE_Q4_K, "dequantize_row_q4_K", 1.05, 0},         {Q35_TYPE_Q5_K, "dequantize_row_q5_K", 1.05, 0},
    {Q35_TYPE_Q6_K, "dequantize_row_q6_K", 1.05, 0},         {Q35_TYPE_IQ4_XS, "dequantize_row_iq4_xs", 1.05, 0},
    {Q35_TYPE_Q2_K, "dequantize_row_q2_K", 1.05, 0},         {Q35_TYPE_Q3_K, "dequantize_row_q3_K", 1.05, 0},
    {Q35_TYPE_IQ4_NL, "dequantize_row_iq4_nl", 1.05, 0},     {Q35_TYPE_Q4_1, "dequantize_row_q4_1", 1.05, 0},
    {Q35_TYPE_Q5_1, "dequantize_row_q5_1", 1.05, 0},
};
#define NTYPES (int)(sizeof types / sizeof types[0])

/* corners = 0: gaussian with a log-normal scale per 32; 1: also some blocks all positive / zero /
 * constant / with an outlier (the corners of the scale searches) */
static void fill_rows(float *w, int64_t n, int corners) {
  for (int64_t i = 0; i < n; i += 32) {
    const float s = (float)exp(0.7 * rng_gauss()) * 0.02f;
    const int kind = corners ? (int)(rng_u64() % 16) : 15;
    for (int j = 0; j < 32; j++) {
      float v = rng_gauss() * s;
      if (kind == 0) v = fabsf(v) + s;
      if (kind == 1) v = 0;
      if (kind == 2) v = s;
      if (kind == 3 && j == 5) v = 12 * s;
      w[i + j] = v;
    }
  }
}

/* The element weight ggml's quantizer of `type` uses without an importance vector (its objective):
 * x^2 (IQ3_XXS, IQ3_S, IQ1_M), sigma2 / 4 + x^2 with sigma2 = 2 mean x^2 of the 256-block
 * (IQ2_S), else 1. */
static double ggml_plain_weight(int type, const float *x, int64_t i) {
  if (type == Q35_TYPE_IQ3_XXS || type == Q35_TYPE_IQ3_S || type == Q35_TYPE_IQ1_M) return (double)x[i] * x[i];
  if (type == Q35_TYPE_IQ2_S) {
    const int64_t b = i - i % 256;
    double s = 0;
    for (int j = 0; j < 256; j++) s += (double)x[b + j] * x[b + j];
    return 0.25 * 2 * s / 256 + (double)x[i] * x[i];
  }
  return 1;
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
  const char *src = getenv("Q35_SRC");
  char path[4200];
  snprintf(path, sizeof path, "%s/.peer/llama/bins/linux-x64/libggml-base.so", src ? src : ".");
  void *base = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!base) {
    printf("test_quantize_peer: peer library not installed (%s), skipped\n", path);
    return 0;
  }
  quantize_chunk_fn qchunk = (quantize_chunk_fn)dlsym(base, "ggml_quantize_chunk");
  requires_imatrix_fn qreq = (requires_imatrix_fn)dlsym(base, "ggml_quantize_requires_imatrix");
  quantize_init_fn qinit = (quantize_init_fn)dlsym(base, "ggml_quantize_init");
  CHECK(qchunk && qreq && qinit, "ggml_quantize_chunk / _requires_imatrix / _init not found");
  if (!qchunk || !qreq || !qinit) return check_done("test_quantize_peer");

  const char *san = getenv("Q35_SANITIZE_RUN");
  const int64_t rows = san && *san && strcmp(san, "0") ? 8 : 64, n = 2048;
  float *x = malloc(sizeof(float) * (size_t)(rows * n)), *qw = malloc(sizeof(float) * (size_t)n);
  float *d1 = malloc(sizeof(float) * (size_t)n), *d2 = malloc(sizeof(float) * (size_t)n);
  uint8_t *a = malloc((size_t)(rows * n) * 2), *b = malloc((size_t)(rows * n) * 2);
  for (int64_t i = 0; i < n; i++) qw[i] = (float)exp(1.2 * rng_gauss());

  printf("%-8s %-8s %-9s %12s %12s %7s %6s | %7s | %9s %9s\n", "type", "rows", "importance", "q35 rms", "ggml rms",
         "ratio", "bound", "plain", "q35 s", "ggml s");
  printf("(rms: plain; ratio: q35/ggml rms under the quantizers' weights; plain: q35/ggml plain rms; s: CPU seconds)\n");
  for (int set = 0; set < 2; set++) {
  fill_rows(x, rows * n, set);
  for (int t = 0; t < NTYPES; t++) {
    const int type = types[t].type;
    const char *name = q35_type_name(type);
    to_float_fn gdeq = (to_float_fn)dlsym(base, types[t].deq);
    CHECK(gdeq != NULL, "%s not found", types[t].deq);
    if (!gdeq) continue;
    CHECK(!!qreq(type) == !!q35_type_requires_imatrix(type), "%s: ggml requires an imatrix: %d, q35 says %d", name,
          qreq(type), q35_type_requires_imatrix(type));
    if (!set) {
      const double t0 = cpu_now();
      qinit(type);
      printf("%-8s ggml_quantize_init %.2f s\n", name, cpu_now() - t0);
    }
    const size_t rs = q35_row_size(type, n);
    for (int imat = 1; imat >= 0; imat--) {
      const double bound = imat ? types[t].bound_w : types[t].bound_plain;
      if (bound == 0) continue;
      const float *iw = imat ? qw : NULL;
      q35_quantize_row_weighted(type, x, a, n, iw); /* first use builds q35's tables: not timed */
      double t0 = cpu_now();
      for (int64_t r = 0; r < rows; r++)
        CHECK(!q35_quantize_row_weighted(type, x + r * n, a + r * rs, n, iw), "%s: no weighted form", name);
      const double tq = cpu_now() - t0;
      t0 = cpu_now();
      qchunk(type, x, b, 0, rows, n, iw);
      const double tg = cpu_now() - t0;
      double eo = 0, eg = 0, po = 0, pg = 0; /* weighted (objective) and plain errors */
      for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        gdeq(a + r * rs, d1, n);
        q35_dequantize_row_ref(type, a + r * rs, d2, n);
        CHECK(!memcmp(d1, d2, sizeof(float) * (size_t)n), "%s: q35's blocks dequantize differently under ggml (row %lld)",
              name, (long long)r);
        gdeq(b + r * rs, d1, n);
        for (int64_t i = 0; i < n; i++) {
          const double w = iw ? iw[i] : ggml_plain_weight(type, xr, i);
          const double e1 = (double)xr[i] - d2[i], e2 = (double)xr[i] - d1[i];
          eo += w * e1 * e1, eg += w * e2 * e2;
          po += e1 * e1, pg += e2 * e2;
        }
      }
      const double ratio = sqrt(eo / eg);
      printf("%-8s %-8s %-9s %12.5g %12.5g %7.3f %6.2f | %7.3f | %9.3f %9.3f\n", name, set ? "corners" : "gauss",
             imat ? "imatrix" : "none", sqrt(po / (double)(rows * n)), sqrt(pg / (double)(rows * n)), ratio, bound,
             sqrt(po / pg), tq, tg);
      CHECK(ratio <= bound, "%s%s: weighted rms error %.4g is %.3fx ggml's %.4g (bound %.2f)", name,
            imat ? " (imatrix)" : "", sqrt(eo / (double)(rows * n)), ratio, sqrt(eg / (double)(rows * n)), bound);
    }
  }
  }
  free(x), free(qw), free(d1), free(d2), free(a), free(b);
  return check_done("test_quantize_peer");
}
