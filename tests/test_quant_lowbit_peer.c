/*
 * test_quant_lowbit_peer.c - q35's lowbit-family kernels (Q2_K, Q3_K, MXFP4, IQ4_NL, Q4_1,
 * Q5_1) against ggml itself: the prebuilt llama.cpp libraries in .peer/ (docs/peers.md), looked
 * up with dlsym (dequantize_row_* and ggml_quantize_chunk from libggml-base; quantize_row_q8_*,
 * ggml_vec_dot_* from libggml-cpu-haswell and, where the CPU has it, -icelake). Checked:
 *   - Q8_1 activation quantization byte-identical to ggml-cpu's x86 one;
 *   - blocks ggml_quantize_chunk made (with and without an importance vector) dequantize
 *     bit-identically under q35 and ggml; our blocks too;
 *   - q35_vec_dot / q35_vec_dot_ref vs ggml_vec_dot_* within 1e-5 of sum |w*x|, on ggml's blocks
 *     and ours;
 *   - our quantizers' error vs ggml's: unweighted, squared error <= 1.25x ggml's reference
 *     quantizer's (Q3_K, Q4_1, Q5_1: <= 1x); with an importance vector, the importance-weighted rms error <= 1.25x ggml's
 *     importance-weighted quantizer's.
 * Skips (exit 0) when the peer libraries are absent or the CPU has no AVX2.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_lowbit.h"

#include "check.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
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

typedef void (*from_float_fn)(const float *, void *, int64_t);
typedef void (*to_float_fn)(const void *, float *, int64_t);
typedef void (*vec_dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef size_t (*quantize_chunk_fn)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);

static void *must(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "FAIL: symbol %s not found in the peer library\n", name);
    exit(1);
  }
  return p;
}

static const struct {
  int type;
  const char *deq, *dot;
} types[] = {
    {Q35_TYPE_Q3_K, "dequantize_row_q3_K", "ggml_vec_dot_q3_K_q8_K"},
    {Q35_TYPE_Q2_K, "dequantize_row_q2_K", "ggml_vec_dot_q2_K_q8_K"},
    {Q35_TYPE_MXFP4, "dequantize_row_mxfp4", "ggml_vec_dot_mxfp4_q8_0"},
    {Q35_TYPE_IQ4_NL, "dequantize_row_iq4_nl", "ggml_vec_dot_iq4_nl_q8_0"},
    {Q35_TYPE_Q4_1, "dequantize_row_q4_1", "ggml_vec_dot_q4_1_q8_1"},
    {Q35_TYPE_Q5_1, "dequantize_row_q5_1", "ggml_vec_dot_q5_1_q8_1"},
};
#define NTYPES (int)(sizeof types / sizeof types[0])

/* Weight rows: gaussian with a per-32 scale, some blocks all positive / all zero / constant /
 * one outlier (the corners of the min/scale searches). */
static void fill_weights(float *w, int n) {
  for (int i = 0; i < n; i += 32) {
    const float s = (float)exp(rng_gauss()) * 0.02f;
    const int kind = (int)(rng_u64() % 10);
    for (int j = 0; j < 32; j++) {
      float v = rng_gauss() * s;
      if (kind == 0) v = fabsf(v) + s;
      if (kind == 1) v = 0;
      if (kind == 2) v = s;
      if (kind == 3 && j == 5) v = 20 * s;
      w[i + j] = v;
    }
  }
}

static double werr(const float *a, const float *b, const float *qw, int n) {
  double e = 0;
  for (int i = 0; i < n; i++) e += (qw ? qw[i] : 1.0) * ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  return e;
}

static void run_cpu_variant(void *cpu, void *base, const char *variant) {
  void (*cpu_init)(void) = (void (*)(void))must(cpu, "ggml_cpu_init");
  cpu_init();
  from_float_fn q8_1 = (from_float_fn)must(cpu, "quantize_row_q8_1");
  quantize_chunk_fn qchunk = (quantize_chunk_fn)must(base, "ggml_quantize_chunk");
  const int print = !strcmp(variant, "haswell");

  const int lens[3] = {256, 2048, 4096 + 256};
  double worst_dot = 0;
  for (int li = 0; li < 3; li++) {
    const int n = lens[li];
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *qw = malloc(sizeof(float) * n);
    float *d1 = malloc(sizeof(float) * n), *d2 = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    uint8_t *a = malloc((size_t)n * 4 + 64), *b = malloc((size_t)n * 4 + 64), *c = malloc((size_t)n * 4 + 64);
    uint8_t *cq = malloc((size_t)n * 4 + 64);

    /* Q8_1 activations: byte-identical to ggml-cpu's */
    for (int v = 0; v < 2; v++) {
      for (int i = 0; i < n; i++)
        x[i] = v ? (float)((int)(rng_u64() % 253) - 126) + 0.5f : rng_gauss() * (i % 61 == 0 ? 30.0f : 1.0f);
      for (int i = 0; i < n; i += 32 * 7) memset(x + i, 0, 32 * sizeof *x);
      q8_1(x, a, n);
      q35_quantize_row(Q35_TYPE_Q8_1, x, b, n);
      q35_quantize_row_ref(Q35_TYPE_Q8_1, x, c, n);
      const size_t rs = q35_row_size(Q35_TYPE_Q8_1, n);
      CHECK(!memcmp(a, b, rs) && !memcmp(a, c, rs), "%s: q8_1 quantize differs from ggml (n=%d, variant %d)",
            variant, n, v);
    }

    for (int i = 0; i < n; i++) x[i] = rng_gauss() * (i % 61 == 0 ? 30.0f : 1.0f);
    for (int i = 0; i < n; i++) qw[i] = (float)exp(rng_gauss()); /* an imatrix: mean x^2 per column */
    for (int t = 0; t < NTYPES; t++) {
      const int type = types[t].type, vt = q35_vec_dot_type(type);
      const char *name = q35_type_name(type);
      to_float_fn gdeq = (to_float_fn)must(base, types[t].deq);
      fill_weights(w, n);
      for (int imat = 0; imat < 2; imat++) {
        const float *iw = imat ? qw : NULL;
        if (imat && type == Q35_TYPE_MXFP4) continue; /* no importance form in ggml */
        /* our blocks under ggml's dequantizer; ggml's (quantize_chunk) under ours */
        if (imat) CHECK(!q35_lowbit_quantize_weighted(type, w, a, n, iw), "weighted %s", name);
        else q35_quantize_row(type, w, a, n);
        gdeq(a, d1, n);
        q35_dequantize_row(type, a, d2, n);
        CHECK(!memcmp(d1, d2, sizeof(float) * n), "%s: our %s blocks dequantize differently under ggml (n=%d)", variant,
              name, n);
        qchunk(type, w, b, 0, 1, n, iw);
        gdeq(b, d1, n);
        q35_dequantize_row(type, b, dx, n);
        CHECK(!memcmp(d1, dx, sizeof(float) * n), "%s: ggml's %s blocks dequantize differently under q35 (n=%d%s)",
              variant, name, n, imat ? ", imatrix" : "");
        q35_dequantize_row_ref(type, b, dx, n);
        CHECK(!memcmp(d1, dx, sizeof(float) * n), "%s: %s dequantize_ref differs from ggml", variant, name);
        const double eo = werr(w, d2, iw, n), eg = werr(w, d1, iw, n);
        /* plain: squared error <= 1.25x (as test_quant_peer); importance-weighted: rms <= 1.25x */
        CHECK(eo <= (imat ? 1.5625 : 1.25) * eg, "%s: our %s quantizer%s error %.4g vs ggml's %.4g (n=%d)", variant, name,
              imat ? " (importance-weighted)" : "", sqrt(eo / n), sqrt(eg / n), n);
        /* plain Q4_1 / Q5_1: least-squares rounds from ggml's one-scale quantizer, which can only
         * lower its error; plain Q3_K: the same start, against ggml's own nudging of single
         * levels (0.97 of its rms in 2026-12): no worse than ggml's either */
        if (!imat && (type == Q35_TYPE_Q3_K || type == Q35_TYPE_Q4_1 || type == Q35_TYPE_Q5_1))
          CHECK(eo <= eg, "%s: our plain %s quantizer error %.4g above ggml's %.4g (n=%d)", variant, name, sqrt(eo / n),
                sqrt(eg / n), n);
        if (n == 4096 + 256 && print)
          printf("  %-7s %s rms error ours/ggml: %.3f\n", name, imat ? "imatrix" : "plain  ", sqrt(eo / eg));
      }
      q35_quantize_row(type, w, a, n);
      qchunk(type, w, b, 0, 1, n, NULL);
      /* dot products on both blocks with the ggml-format activation */
      vec_dot_fn gdot = (vec_dot_fn)must(cpu, types[t].dot);
      const uint8_t *rows[2] = {a, b};
      for (int r = 0; r < 2; r++) {
        /* Q8_K / Q8_0 / Q8_1: ggml's formats, byte-identical; IQ4_NL / MXFP4 take Q4_0's layout
         * (Q8_0X or Q8_0Z) of the same Q8_0 blocks, Q2_K / Q3_K at AVX2 Q8_KP (the same Q8_K blocks permuted) */
        const int gt = vt == Q35_TYPE_Q8_0X || vt == Q35_TYPE_Q8_0Z ? Q35_TYPE_Q8_0 : vt == Q35_TYPE_Q8_KP ? Q35_TYPE_Q8_K : vt;
        q35_quantize_row(gt, x, c, n);
        q35_quantize_row(vt, x, cq, n);
        float want = 0;
        gdot(n, &want, 0, rows[r], 0, c, 0, 1);
        const float got = q35_vec_dot(type, n, rows[r], cq), ref = q35_vec_dot_ref(type, n, rows[r], cq);
        q35_dequantize_row(type, rows[r], d1, n);
        q35_dequantize_row(vt, cq, dx, n);
        double mag = 0;
        for (int i = 0; i < n; i++) mag += fabs((double)d1[i] * dx[i]);
        const double tol = 1e-5 * mag + 1e-30;
        CHECK(fabs((double)got - want) <= tol && fabs((double)ref - want) <= tol,
              "%s: %s vec_dot q35 %.9g / ref %.9g vs ggml %.9g (n=%d)", variant, name, got, ref, want, n);
        if (mag > 0) worst_dot = fmax(worst_dot, fabs((double)got - want) / mag);
      }
    }
    free(x); free(w); free(qw); free(d1); free(d2); free(dx); free(a); free(b); free(c); free(cq);
  }
  printf("%s: worst |q35 vec_dot - ggml| / sum|w*x| = %.3g\n", variant, worst_dot);
}

#if defined(__x86_64__)
#define CPU_INIT() __builtin_cpu_init()
#define CPU_HAS(f) __builtin_cpu_supports(f)
#else
#define CPU_INIT() ((void)0)
#define CPU_HAS(f) 0
#endif

int main(void) {
  const char *src = getenv("Q35_SRC");
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s/.peer/llama/bins/linux-x64", src ? src : ".");
  CPU_INIT();
  if (!CPU_HAS("avx2") || !CPU_HAS("fma") || !CPU_HAS("f16c")) {
    printf("test_quant_lowbit_peer: CPU without AVX2/FMA/F16C, skipped\n");
    return 0;
  }
  snprintf(path, sizeof path, "%s/libggml-base.so", dir);
  void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!base) {
    printf("test_quant_lowbit_peer: peer library not installed (%s), skipped\n", path);
    return 0;
  }
  printf("q35 SIMD level: %s\n", q35_simd_name(q35_simd_active()));
  const char *variants[2] = {"haswell", "icelake"};
  for (int v = 0; v < 2; v++) {
    if (v == 1 && !(CPU_HAS("avx512f") && CPU_HAS("avx512bw") && CPU_HAS("avx512vl") && CPU_HAS("avx512vnni") &&
                    CPU_HAS("avx512vbmi")))
      continue;
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, variants[v]);
    void *cpu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(cpu != NULL, "cannot load %s: %s", path, dlerror());
    if (!cpu) continue;
    run_cpu_variant(cpu, base, variants[v]);
  }
  return check_done("test_quant_lowbit_peer");
}
