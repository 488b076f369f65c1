/* test_vec.c - the elementwise kernels (kernels/vec.h): at the active SIMD level (this test also
 * runs as test_vec@avx2 and @scalar) every kernel equals its scalar twin bit for bit, for every
 * length (SIMD body and scalar tail), misalignment and special value; and the twins agree with
 * plain float64 math: exp within 4 ulp of exp(), SiLU / SwiGLU / the conv step within a
 * relative 1e-6 (plus 1e-30 absolute) of the double-precision formulas. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "check.h"
#include "kernels/vec.h"

static unsigned long long rs = 88172645463325252ull;
static double urand(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}

static int same_bits(float a, float b) {
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y || (a != a && b != b);
}

/* distance in units in the last place between a float and a double */
static double ulps(float got, double want) {
  const double u = ldexp(1.0, ilogb(want) - 23);
  return fabs((double)got - want) / u;
}

/* inputs: mostly the activations' range, some wide, and special values */
static float input(int i) {
  static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 87.5f, -87.5f, 88.0f, -88.0f, 100.0f, -100.0f,
                                  1e-30f, -1e-30f, INFINITY, -INFINITY, NAN, 3.4e38f, -3.4e38f};
  if (i % 37 == 0) return special[(i / 37) % (int)(sizeof special / sizeof special[0])];
  if (i % 5 == 0) return (float)((urand() * 2 - 1) * 90.0);
  return (float)((urand() * 2 - 1) * 8.0);
}

static void test_exp(void) {
  double worst = 0;
  for (int i = 0; i < 200000; i++) {
    const float x = (float)((urand() * 2 - 1) * 87.0);
    const double d = ulps(q35_vec_expf_ref(x), exp((double)x));
    if (d > worst) worst = d;
  }
  CHECK(worst <= 4.0, "exp polynomial: worst %.2f ulp", worst);
  CHECK(q35_vec_expf_ref(0.0f) == 1.0f);
  CHECK(isnan(q35_vec_expf_ref(NAN)));
  CHECK(q35_vec_expf_ref(-INFINITY) > 0.0f && q35_vec_expf_ref(-INFINITY) < 1e-37f);
  CHECK(isfinite(q35_vec_expf_ref(INFINITY)) && q35_vec_expf_ref(INFINITY) > 1e38f);
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

static int close_rel(float got, double want) {
  if (isnan(want)) return 1; /* silu(-inf) etc.: see vec.h */
  if (isinf(want)) return got == want;
  return fabs((double)got - want) <= 1e-6 * fabs(want) + 1e-30;
}

#define NMAX 300
static void test_elementwise(void) {
  float x[NMAX + 16], u[NMAX + 16], y0[NMAX + 16], y1[NMAX + 16];
  for (int n = 0; n <= NMAX; n += (n < 40 ? 1 : 37)) {
    for (int off = 0; off < 3; off++) {
      for (int i = 0; i < n + off; i++) x[i] = input(i * 7 + n), u[i] = (float)(urand() * 4 - 2);
      q35_vec_silu_ref(y0 + off, x + off, n);
      q35_vec_silu(y1 + off, x + off, n);
      int bad = 0, far = 0;
      for (int i = 0; i < n; i++) {
        bad += !same_bits(y0[off + i], y1[off + i]);
        if (fabsf(x[off + i]) < 80.0f) far += !close_rel(y0[off + i], silu_d(x[off + i]));
      }
      CHECK(bad == 0, "silu n %d off %d: %d elements differ from the twin", n, off, bad);
      CHECK(far == 0, "silu n %d off %d: %d elements off the float64 formula", n, off, far);
      q35_vec_swiglu_ref(y0 + off, x + off, u + off, n);
      q35_vec_swiglu(y1 + off, x + off, u + off, n);
      bad = far = 0;
      for (int i = 0; i < n; i++) {
        bad += !same_bits(y0[off + i], y1[off + i]);
        if (fabsf(x[off + i]) < 80.0f) far += !close_rel(y0[off + i], silu_d(x[off + i]) * u[off + i]);
      }
      CHECK(bad == 0, "swiglu n %d off %d: %d elements differ from the twin", n, off, bad);
      CHECK(far == 0, "swiglu n %d off %d: %d elements off the float64 formula", n, off, far);
      memcpy(y1, x, sizeof(float) * (size_t)(n + off)); /* in place */
      q35_vec_silu(y1 + off, y1 + off, n);
      q35_vec_silu_ref(y0 + off, x + off, n);
      bad = 0;
      for (int i = 0; i < n; i++) bad += !same_bits(y0[off + i], y1[off + i]);
      CHECK(bad == 0, "silu in place n %d: %d differ", n, bad);
    }
  }
}

/* the conv step over T tokens: kernel vs twin (state and output bits), twin vs float64 */
static void test_conv(int K, int C, int T) {
  const size_t ss = (size_t)C + 3, ws = (size_t)C + 5; /* strides wider than C */
  float *st0 = calloc(ss * (size_t)(K > 1 ? K - 1 : 1), sizeof(float));
  float *st1 = calloc(ss * (size_t)(K > 1 ? K - 1 : 1), sizeof(float));
  double *hist = calloc((size_t)(T + K) * (size_t)C, sizeof(double));
  float *w = malloc(sizeof(float) * ws * (size_t)K), *x = malloc(sizeof(float) * (size_t)C);
  float *o0 = malloc(sizeof(float) * (size_t)C), *o1 = malloc(sizeof(float) * (size_t)C);
  for (size_t i = 0; i < ws * (size_t)K; i++) w[i] = (float)(urand() - 0.5);
  int bad = 0, far = 0;
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < C; i++) x[i] = (float)(urand() * 4 - 2), hist[(size_t)(t + K - 1) * C + i] = x[i];
    q35_vec_conv_silu_ref(o0, st0, ss, x, w, ws, K, C);
    q35_vec_conv_silu(o1, st1, ss, x, w, ws, K, C);
    for (int i = 0; i < C; i++) {
      bad += !same_bits(o0[i], o1[i]);
      double s = 0;
      for (int j = 0; j < K; j++) s += hist[(size_t)(t + j) * C + i] * (double)w[(size_t)j * ws + i];
      far += !(fabs((double)o0[i] - silu_d(s)) <= 1e-6 * fabs(silu_d(s)) + 1e-6);
    }
    for (int j = 0; j < K - 1; j++)
      for (int i = 0; i < C; i++) bad += !same_bits(st0[(size_t)j * ss + i], st1[(size_t)j * ss + i]);
  }
  CHECK(bad == 0, "conv K %d C %d: %d values differ from the twin", K, C, bad);
  CHECK(far == 0, "conv K %d C %d: %d outputs off the float64 formula", K, C, far);
  free(st0), free(st1), free(hist), free(w), free(x), free(o0), free(o1);
}

int main(void) {
  printf("test_vec: SIMD level %s\n", q35_simd_name(q35_simd_active()));
  test_exp();
  test_elementwise();
  const int convs[][2] = {{4, 64}, {4, 37}, {1, 20}, {2, 17}, {3, 8}, {5, 131}};
  for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) test_conv(convs[i][0], convs[i][1], 9);
  return check_done("test_vec");
}
