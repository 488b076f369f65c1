/*
 * test_attn.c - the attention kernels (kernels/attn.c) against their plain scalar twins, for each
 * KV cache type:
 *   F16: head dims 8..256 (odd numbers of 16- and 8-chunks too: a head dim that is a multiple of 8
 *        only runs the AVX2 kernel at the AVX-512 level), groups of 1..11 query heads (more than
 *        the kernels' 8 at once), 1..2000 positions (block edges at 128), flat and very
 *        peaked scores, keys/values of mixed magnitudes;
 *   F32 and Q8_0 (head dims that are multiples of 32): the same grid.
 * Also: each kernel is deterministic, its result does not depend on where its scratch and
 * output buffers sit, a head scored alone (a group of one) gets the bits it gets in its group, and a
 * job run with others in one q35_attn_many gets the bits it gets alone. Runs at whatever level q35_attn_level() picked; ctest runs it again
 * as test_attn@avx2 and test_attn@scalar (Q35_SIMD=avx2 / scalar).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "kernels/attn.h"
#include "kernels/quant.h"

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

static double worst[3]; /* per type: worst |fast - ref| / max |v| */

static const char *tname(int type) { return type == Q35_TYPE_F16 ? "f16" : type == Q35_TYPE_F32 ? "f32" : "q8_0"; }
static int tindex(int type) { return type == Q35_TYPE_F16 ? 0 : type == Q35_TYPE_F32 ? 1 : 2; }

/* npos cache rows of w elements of `type` (gaussians, one in spike_every scaled by spike);
 * *vmax receives the largest magnitude stored in columns [hd, 2 hd) (the head under test). */
static char *make_cache(int type, int w, int hd, int npos, int spike_every, float spike, double *vmax) {
  const size_t rb = q35_row_size(type, w);
  char *c = malloc(rb * (size_t)npos);
  float *row = malloc(sizeof(float) * (size_t)w), *back = malloc(sizeof(float) * (size_t)w);
  for (int p = 0; p < npos; p++) {
    for (int i = 0; i < w; i++) row[i] = gauss() * (rng() % spike_every == 0 ? spike : 1.0f);
    char *dst = c + (size_t)p * rb;
    if (type == Q35_TYPE_F32) memcpy(dst, row, sizeof(float) * (size_t)w);
    else q35_quantize_row(type, row, dst, w);
    q35_dequantize_row(type, dst, back, w);
    for (int i = hd; i < 2 * hd; i++) *vmax = fmax(*vmax, fabs(back[i]));
  }
  free(row);
  free(back);
  return c;
}

static void one(int type, int hd, int grp, int npos, float qmag) {
  /* several heads per cache row (the head under test at column hd); F16 rows with 8 more */
  const int w = hd * 3 + (type == Q35_TYPE_F16 ? (int)(rng() % 2) * 8 : 0);
  const size_t rb = q35_row_size(type, w);
  double kmax = 0, vmax = 0;
  char *k = make_cache(type, w, hd, npos, 40, 6.0f, &kmax);
  char *v = make_cache(type, w, hd, npos, 30, 20.0f, &vmax);
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
  const size_t off = rng() % 4; /* kernel scratch and output at an odd float offset in run 2 */
  const size_t col = q35_row_size(type, hd); /* the group's head: column hd of each row */
  for (int r = 0; r < 3; r++) {
    q35_attn_job j = {hd, grp, npos, type, k + col, v + col, rb, q, qst, scale,
                      sc[r] + (r == 2 ? off : 0), scs, qs[r] + (r == 2 ? off : 0), out[r] + (r == 2 ? off : 0), (size_t)hd};
    if (r == 0) q35_attn_ref(&j);
    else q35_attn(&j);
  }
  double err = 0;
  for (size_t i = 0; i < (size_t)hd * grp; i++) err = fmax(err, fabs((double)out[1][i] - out[0][i]));
  worst[tindex(type)] = fmax(worst[tindex(type)], err / vmax);
  CHECK(err <= 2e-5 * vmax, "%s hd %d grp %d npos %d qmag %g: |fast - ref| %.3g (max |v| %.3g)", tname(type), hd, grp,
        npos, qmag, err, vmax);
  CHECK(!memcmp(out[1], out[2] + off, sizeof(float) * (size_t)hd * grp), "%s hd %d grp %d npos %d: result depends on buffers",
        tname(type), hd, grp, npos);
  /* each head alone (a group of one): the same bits as inside the group, whatever tile of heads
   * and keys the kernel scored it in and whichever neighbours shared the tile */
  for (int h = 0; h < grp; h++) {
    q35_attn_job j = {hd, 1, npos, type, k + col, v + col, rb, q + (size_t)h * qst, qst, scale,
                      sc[2], scs, qs[2], out[2], (size_t)hd};
    q35_attn(&j);
    CHECK(!memcmp(out[1] + (size_t)h * hd, out[2], sizeof(float) * (size_t)hd),
          "%s hd %d grp %d npos %d: head %d alone differs from head %d in the group", tname(type), hd, grp, npos, h, h);
  }
  /* several jobs over the same cache in one q35_attn_many (consecutive positions of one sequence,
   * as a prefill has them, or any lengths): each gets the bits it gets alone */
  {
    enum { NJ = 6 };
    const int nj = 2 + (int)(rng() % (NJ - 1)), consecutive = (int)(rng() % 2);
    q35_attn_job js[NJ];
    float *jq[NJ], *jsc[NJ], *jqs[NJ], *jout[NJ];
    for (int i = 0; i < nj; i++) {
      const int np = consecutive ? (npos - i > 0 ? npos - i : 1) : 1 + (int)(rng() % (uint64_t)npos);
      jq[i] = malloc(sizeof(float) * qst * grp);
      for (size_t e = 0; e < qst * (size_t)grp; e++) jq[i][e] = gauss() * qmag;
      jsc[i] = malloc(sizeof(float) * scs * grp);
      jqs[i] = malloc(sizeof(float) * (size_t)hd * grp);
      jout[i] = malloc(sizeof(float) * (size_t)hd * grp);
      const q35_attn_job jj = {hd, grp, np, type, k + col, v + col, rb, jq[i], qst, scale, jsc[i], scs, jqs[i], jout[i], (size_t)hd};
      js[i] = jj;
    }
    q35_attn_many(js, nj);
    for (int i = 0; i < nj; i++) {
      q35_attn_job j = js[i];
      j.sc = sc[2], j.qs = qs[2], j.out = out[2];
      q35_attn(&j);
      CHECK(!memcmp(out[2], jout[i], sizeof(float) * (size_t)hd * grp),
            "%s hd %d grp %d npos %d: job %d of %d (npos %d) in q35_attn_many differs from it alone", tname(type), hd, grp,
            npos, i, nj, js[i].npos);
    }
    for (int i = 0; i < nj; i++) {
      free(jq[i]);
      free(jsc[i]);
      free(jqs[i]);
      free(jout[i]);
    }
  }
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
  /* under an emulator (tests/test_aarch64.sh sets Q35_EMULATED): every other position count and
   * none of the three long ones */
  const int emu = getenv("Q35_EMULATED") != NULL;
  printf("attention kernel level (f16 cache): %s\n", q35_attn_level());
  static const int types[] = {Q35_TYPE_F16, Q35_TYPE_F32, Q35_TYPE_Q8_0};
  static const int hds[] = {8, 16, 24, 32, 40, 48, 128, 256};
  static const int grps[] = {1, 2, 3, 7, 8, 11}; /* the kernels' passes: 8, 4, 2 and 1 heads */
  static const int nps[] = {1, 2, 15, 16, 17, 127, 128, 129, 300};
  for (size_t ty = 0; ty < sizeof types / sizeof types[0]; ty++) {
    const int type = types[ty];
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++) {
      if (type == Q35_TYPE_Q8_0 && hds[a] % 32) continue; /* a Q8_0 cache needs whole blocks per head */
      if (type == Q35_TYPE_F16 && hds[a] == 32) continue; /* the F16 grid as it always was */
      if (type != Q35_TYPE_F16 && hds[a] % 16) continue;  /* odd 8-dim chunks: the F16 AVX2 kernel */
      for (size_t b = 0; b < sizeof grps / sizeof grps[0]; b++)
        for (size_t c = 0; c < sizeof nps / sizeof nps[0]; c += emu ? 2 : 1)
          one(type, hds[a], grps[b], nps[c], c % 2 ? 1.0f : 8.0f);
    }
    if (emu) continue;
    one(type, 256, 8, 700, 1.0f);
    one(type, 256, 8, 700, 30.0f); /* one position takes nearly all the weight */
    one(type, 256, 8, 2000, 0.05f); /* nearly flat */
  }
  for (size_t ty = 0; ty < sizeof types / sizeof types[0]; ty++)
    printf("%s cache: worst |fast - ref| / max|v|: %.3g\n", tname(types[ty]), worst[tindex(types[ty])]);
  return check_done("test_attn");
}
