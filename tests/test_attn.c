/*
 * test_attn.c - the F16-cache attention kernel (src/attn.c) against its plain scalar twin:
 * head dims 16..256 (odd numbers of 16-chunks too), groups of 1..11 query heads (more than the
 * kernel's 8 at once), 1..700 positions (block edges at 128), flat and very peaked scores,
 * keys/values of mixed magnitudes. Also: the kernel is deterministic and its result does not
 * depend on where its scratch and output buffers sit. Runs at whatever level q35_attn_level()
 * picked (the suite also runs under Q35_SIMD=scalar in other tests).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "base/util.h"

static int fails;
#define CHECK(c, ...)                                               \
  do {                                                              \
    if (!(c)) {                                                     \
      fails++;                                                      \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
      fprintf(stderr, __VA_ARGS__);                                 \
      fprintf(stderr, "\n");                                        \
    }                                                               \
  } while (0)

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}
static float gauss(void) {
  double u = ((double)(rng() >> 11) + 0.5) * 0x1.0p-53, v = (double)(rng() >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static double worst;

static void one(int hd, int grp, int npos, float qmag) {
  const size_t stride = (size_t)hd * 3 + (rng() % 2) * 8; /* several heads per cache row */
  uint16_t *k = malloc(sizeof(uint16_t) * stride * npos), *v = malloc(sizeof(uint16_t) * stride * npos);
  for (size_t i = 0; i < stride * (size_t)npos; i++) {
    k[i] = q35_fp32_to_fp16(gauss() * (rng() % 40 == 0 ? 6.0f : 1.0f));
    v[i] = q35_fp32_to_fp16(gauss() * (rng() % 30 == 0 ? 20.0f : 1.0f));
  }
  const size_t qst = (size_t)2 * hd;
  float *q = malloc(sizeof(float) * qst * grp);
  for (size_t i = 0; i < qst * (size_t)grp; i++) q[i] = gauss() * qmag;
  const size_t scs = (size_t)npos + 5;
  float *sc[3], *qs[3], *out[3];
  for (int r = 0; r < 3; r++) {
    sc[r] = malloc(sizeof(float) * (scs * grp + 3));
    qs[r] = malloc(sizeof(float) * ((size_t)hd * grp + 3));
    out[r] = malloc(sizeof(float) * ((size_t)hd * grp + 3));
  }
  const float scale = 1.0f / sqrtf((float)hd);
  const size_t off = rng() % 4; /* kernel output at an odd float offset in run 2 */
  for (int r = 0; r < 3; r++) {
    q35_attn_job j = {hd, grp, npos, k + hd, v + hd, stride, q, qst, scale,
                      sc[r] + (r == 2 ? off : 0), scs, qs[r] + (r == 2 ? off : 0), out[r] + (r == 2 ? off : 0), (size_t)hd};
    if (r == 0) q35_attn_f16_ref(&j);
    else q35_attn_f16(&j);
  }
  double vmax = 0, err = 0;
  for (size_t i = 0; i < stride * (size_t)npos; i++) vmax = fmax(vmax, fabs(q35_fp16_to_fp32(v[i])));
  for (size_t i = 0; i < (size_t)hd * grp; i++) err = fmax(err, fabs((double)out[1][i] - out[0][i]));
  worst = fmax(worst, err / vmax);
  CHECK(err <= 2e-5 * vmax, "hd %d grp %d npos %d qmag %g: |fast - ref| %.3g (max |v| %.3g)", hd, grp, npos, qmag, err,
        vmax);
  CHECK(!memcmp(out[1], out[2] + off, sizeof(float) * (size_t)hd * grp), "hd %d grp %d npos %d: result depends on buffers",
        hd, grp, npos);
  for (int r = 0; r < 3; r++) {
    free(sc[r]);
    free(qs[r]);
    free(out[r]);
  }
  free(k);
  free(v);
  free(q);
}

int main(void) {
  printf("attention kernel level: %s\n", q35_attn_level());
  static const int hds[] = {16, 48, 128, 256};
  static const int grps[] = {1, 2, 3, 8, 11};
  static const int nps[] = {1, 2, 15, 16, 17, 127, 128, 129, 300};
  for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
    for (size_t b = 0; b < sizeof grps / sizeof grps[0]; b++)
      for (size_t c = 0; c < sizeof nps / sizeof nps[0]; c++) one(hds[a], grps[b], nps[c], c % 2 ? 1.0f : 8.0f);
  one(256, 8, 700, 1.0f);
  one(256, 8, 700, 30.0f); /* one position takes nearly all the weight */
  one(256, 8, 2000, 0.05f); /* nearly flat */
  printf("worst |fast - ref| / max|v|: %.3g\n", worst);
  if (fails) {
    fprintf(stderr, "%d failure(s)\n", fails);
    return 1;
  }
  printf("test_attn: ok\n");
  return 0;
}
