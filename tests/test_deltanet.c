/* test_deltanet.c - the delta-rule step: AVX2 and AVX-512 twins equal the scalar reference bit
 * for bit, in place and out of place (the state read from one buffer, written to another, the
 * input left as it was), and the reference agrees with a plain float64 recurrence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/deltanet.h"

static unsigned long long rs = 88172645463325252ull;
static float frand(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

int main(void) {
  int fails = 0;
  const int dims[][2] = {{128, 128}, {32, 16}, {16, 48}, {7, 13}, {6, 32}, {131, 64}, {3, 16}};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
    const int dv = dims[di][0], dk = dims[di][1];
    float *S0 = malloc(sizeof(float) * dv * dk), *S1 = malloc(sizeof(float) * dv * dk);
    float *T0 = malloc(sizeof(float) * dv * dk), *T1 = malloc(sizeof(float) * dv * dk);
    float *Sc = malloc(sizeof(float) * dv * dk);
    double *Sd = malloc(sizeof(double) * dv * dk);
    float *q = malloc(sizeof(float) * dk), *k = malloc(sizeof(float) * dk), *v = malloc(sizeof(float) * dv);
    float *o0 = malloc(sizeof(float) * dv), *o1 = malloc(sizeof(float) * dv);
    for (int i = 0; i < dv * dk; i++) Sd[i] = S0[i] = S1[i] = 0.1f * frand();
    double maxerr = 0;
    for (int step = 0; step < 20; step++) {
      double kn = 0, qn = 0;
      for (int a = 0; a < dk; a++) {
        k[a] = frand();
        q[a] = frand();
        kn += (double)k[a] * k[a];
        qn += (double)q[a] * q[a];
      }
      for (int a = 0; a < dk; a++) k[a] /= (float)sqrt(kn), q[a] /= (float)sqrt(qn); /* as the model: unit norm */
      for (int j = 0; j < dv; j++) v[j] = frand();
      const float beta = 0.5f + 0.4f * frand(), decay = 0.9f + 0.09f * frand();
      /* out of place: the machine's path on odd steps, the reference every fourth */
      const int out1 = step % 2 == 1, out0 = step % 4 == 3;
      q35_delta_step_ref(S0, out0 ? T0 : S0, dv, dk, q, k, v, beta, decay, o0);
      memcpy(Sc, S1, sizeof(float) * dv * dk);
      q35_delta_step(S1, out1 ? T1 : S1, dv, dk, q, k, v, beta, decay, o1);
      if (out1 && memcmp(Sc, S1, sizeof(float) * dv * dk)) {
        fprintf(stderr, "FAIL dv=%d dk=%d step %d: %s path wrote its input state\n", dv, dk, step,
                q35_simd_name(q35_simd_active()));
        fails++;
        break;
      }
      if (out0) { float *t = S0; S0 = T0, T0 = t; }
      if (out1) { float *t = S1; S1 = T1, T1 = t; }
      if (memcmp(S0, S1, sizeof(float) * dv * dk) || memcmp(o0, o1, sizeof(float) * dv)) {
        fprintf(stderr, "FAIL dv=%d dk=%d step %d: %s path differs from the reference\n", dv, dk, step,
                q35_simd_name(q35_simd_active()));
        fails++;
        break;
      }
      for (int j = 0; j < dv; j++) { /* float64 recurrence */
        double *Sj = Sd + (size_t)j * dk, kv = 0, oq = 0;
        for (int a = 0; a < dk; a++) Sj[a] *= decay, kv += Sj[a] * k[a];
        const double d = beta * (v[j] - kv);
        for (int a = 0; a < dk; a++) Sj[a] += k[a] * d, oq += Sj[a] * q[a];
        const double e = fabs(oq - o0[j]) / (1.0 + fabs(oq));
        if (e > maxerr) maxerr = e;
      }
    }
    printf("dv=%d dk=%d: %s == reference; reference vs float64: max rel err %.3e\n", dv, dk,
           q35_simd_name(q35_simd_active()), maxerr);
    if (maxerr > 1e-5) {
      fprintf(stderr, "FAIL dv=%d dk=%d: reference differs from the float64 recurrence (%.3e)\n", dv, dk, maxerr);
      fails++;
    }
    free(S0), free(S1), free(T0), free(T1), free(Sc), free(Sd), free(q), free(k), free(v), free(o0), free(o1);
  }
  if (fails) return 1;
  printf("test_deltanet: all passed\n");
  return 0;
}
