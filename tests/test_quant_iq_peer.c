/*
 * test_quant_iq_peer.c - q35's IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M kernels
 * against ggml itself (the prebuilt llama.cpp libraries in .peer/, see docs/peers.md), as
 * test_quant_peer.c does for the first types:
 *   - blocks made by ggml's own quantizer (ggml_quantize_chunk, with an importance vector where
 *     ggml_quantize_requires_imatrix says so) dequantize bit-identically under q35's
 *     dequantizers (the active level's and the reference) and ggml's dequantize_row_*;
 *   - so do blocks of random bytes (every grid index, sign pattern and scale; the fp16 scale
 *     kept finite), which pins the transcribed grids and sign tables entry by entry;
 *   - q35_vec_dot / q35_vec_dot_ref against ggml's ggml_vec_dot_*_q8_K from libggml-cpu-haswell
 *     (AVX2) and -icelake (AVX-512, where the CPU has it) and against ggml's scalar
 *     *_generic twin, within 1e-5 of sum |w*x| (the float steps' order differs, not the integers).
 * Skips (exit 0, with a message) when the peer libraries are not installed or the CPU has no AVX2.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/quant.h"

#include "check.h"

static uint64_t rng_state = 0x3243F6A8885A308Dull;
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
typedef int (*requires_imatrix_fn)(int);

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
  const char *name; /* ggml's function-name spelling */
  int d_at;         /* byte offset of the fp16 super-block scale (-1: IQ1_M's spread one) */
} types[] = {
    {Q35_TYPE_IQ2_XXS, "iq2_xxs", 0}, {Q35_TYPE_IQ2_XS, "iq2_xs", 0}, {Q35_TYPE_IQ2_S, "iq2_s", 0},
    {Q35_TYPE_IQ3_XXS, "iq3_xxs", 0}, {Q35_TYPE_IQ3_S, "iq3_s", 0},   {Q35_TYPE_IQ1_S, "iq1_s", 0},
    {Q35_TYPE_IQ1_M, "iq1_m", -1},
};
#define NTYPES (int)(sizeof types / sizeof types[0])

/* a finite fp16 scale of moderate size, either sign */
static uint16_t rand_scale(void) {
  const float s = (float)exp(rng_gauss()) * 1e-3f * (rng_u64() & 1 ? -1.0f : 1.0f);
  return q35_fp32_to_fp16(s);
}

/* random bytes, then a finite scale in each block */
static void random_blocks(int t, uint8_t *q, int nb) {
  const size_t bs = q35_type_size(types[t].type);
  for (size_t i = 0; i < bs * (size_t)nb; i++) q[i] = (uint8_t)rng_u64();
  for (int b = 0; b < nb; b++) {
    uint8_t *p = q + bs * (size_t)b;
    const uint16_t d = rand_scale();
    if (types[t].d_at >= 0) {
      memcpy(p + types[t].d_at, &d, 2);
    } else { /* IQ1_M: the top nibble of each of the four scale words (bytes 48..55) */
      for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
    }
  }
}

static void check_dequant(const char *what, int t, to_float_fn gdeq, const uint8_t *q, int n, float *d1,
                          float *d2) {
  const int type = types[t].type;
  gdeq(q, d1, n);
  q35_dequantize_row(type, q, d2, n);
  CHECK(!memcmp(d1, d2, sizeof(float) * n), "%s %s blocks dequantize differently under q35 (%s, n=%d)", what,
        types[t].name, q35_simd_name(q35_simd_active()), n);
  q35_dequantize_row_ref(type, q, d2, n);
  CHECK(!memcmp(d1, d2, sizeof(float) * n), "%s %s blocks dequantize differently under q35's reference (n=%d)",
        what, types[t].name, n);
}

static double worst_dot[2], worst_generic;
static uint8_t *cache[3][16][2]; /* [length][type]: ggml-quantized and random blocks */

static void run_cpu_variant(void *cpu, void *base, int vi, const char *variant) {
  void (*cpu_init)(void) = (void (*)(void))must(cpu, "ggml_cpu_init");
  cpu_init();
  from_float_fn q8_k = (from_float_fn)must(cpu, "quantize_row_q8_K");
  quantize_chunk_fn qchunk = (quantize_chunk_fn)must(base, "ggml_quantize_chunk");
  requires_imatrix_fn needs_im = (requires_imatrix_fn)must(base, "ggml_quantize_requires_imatrix");

  const int lens[3] = {256, 1024, 4096 + 256};
  for (int li = 0; li < 3; li++) {
    const int n = lens[li];
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *im = malloc(sizeof(float) * n);
    float *d1 = malloc(sizeof(float) * n), *d2 = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    uint8_t *q = malloc((size_t)n + 64), *r = malloc((size_t)n + 64), *xa = malloc((size_t)n * 2 + 64),
            *xb = malloc((size_t)n * 2 + 64);
    for (int i = 0; i < n; i++) x[i] = rng_gauss() * (i % 61 == 0 ? 30.0f : 1.0f);
    q8_k(x, xa, n);
    q35_quantize_row(Q35_TYPE_Q8_K, x, xb, n);
    CHECK(!memcmp(xa, xb, q35_row_size(Q35_TYPE_Q8_K, n)), "%s: q8_K activation differs from ggml's", variant);
    q35_dequantize_row(Q35_TYPE_Q8_K, xb, dx, n);

    for (int t = 0; t < NTYPES; t++) {
      const int type = types[t].type;
      char nm[64];
      CHECK(q35_type_supported(type), "%s is not supported", types[t].name);
      CHECK(q35_vec_dot_type(type) == Q35_TYPE_Q8_K, "%s vec_dot type", types[t].name);
      snprintf(nm, sizeof nm, "dequantize_row_%s", types[t].name);
      to_float_fn gdeq = (to_float_fn)must(base, nm);
      snprintf(nm, sizeof nm, "ggml_vec_dot_%s_q8_K", types[t].name);
      vec_dot_fn gdot = (vec_dot_fn)must(cpu, nm);
      snprintf(nm, sizeof nm, "ggml_vec_dot_%s_q8_K_generic", types[t].name);
      vec_dot_fn ggen = (vec_dot_fn)must(cpu, nm);

      /* weights with a per-32 scale spread and an importance vector */
      for (int i = 0; i < n; i += 32) {
        const float s = (float)exp(rng_gauss()) * 0.02f;
        for (int j = 0; j < 32; j++) w[i + j] = rng_gauss() * s;
      }
      for (int i = 0; i < n; i++) im[i] = (float)exp(rng_gauss());
      /* the importance vector where ggml needs one; elsewhere with and without (by length) */
      const float *imx = needs_im(type) || li != 1 ? im : NULL;
      const size_t rs = q35_row_size(type, n);
      /* ggml's quantizers are slow: the blocks are made once and kept for the second variant */
      if (!cache[li][t][0]) {
        cache[li][t][0] = malloc(rs);
        cache[li][t][1] = malloc(rs);
        const size_t wrote = qchunk(type, w, cache[li][t][0], 0, 1, n, imx);
        CHECK(wrote == rs, "%s: ggml_quantize_chunk wrote %zu bytes, q35 row size %zu", types[t].name, wrote, rs);
        random_blocks(t, cache[li][t][1], n / 256);
        check_dequant("ggml's", t, gdeq, cache[li][t][0], n, d1, d2);
        check_dequant("random", t, gdeq, cache[li][t][1], n, d1, d2);
      }
      memcpy(q, cache[li][t][0], rs);
      memcpy(r, cache[li][t][1], rs);

      const uint8_t *rows[2] = {q, r};
      for (int k = 0; k < 2; k++) {
        float want = 0, gen = 0;
        gdot(n, &want, 0, rows[k], 0, xa, 0, 1);
        ggen(n, &gen, 0, rows[k], 0, xa, 0, 1);
        const float got = q35_vec_dot(type, n, rows[k], xb), ref = q35_vec_dot_ref(type, n, rows[k], xb);
        q35_dequantize_row_ref(type, rows[k], d1, n);
        double mag = 0;
        for (int i = 0; i < n; i++) mag += fabs((double)d1[i] * dx[i]);
        const double tol = 1e-5 * mag + 1e-30;
        CHECK(fabs((double)got - want) <= tol && fabs((double)ref - want) <= tol,
              "%s: %s vec_dot q35 %.9g / ref %.9g vs ggml %.9g (n=%d, %s blocks)", variant, types[t].name, got,
              ref, want, n, k ? "random" : "ggml's");
        CHECK(fabs((double)ref - gen) <= tol, "%s: %s vec_dot ref %.9g vs ggml generic %.9g (n=%d)", variant,
              types[t].name, ref, gen, n);
        if (mag > 0) {
          worst_dot[vi] = fmax(worst_dot[vi], fabs((double)got - want) / mag);
          worst_generic = fmax(worst_generic, fabs((double)ref - gen) / mag);
        }
      }
    }
    free(x); free(w); free(im); free(d1); free(d2); free(dx); free(q); free(r); free(xa); free(xb);
  }
  printf("%s: worst |q35 vec_dot - ggml| / sum|w*x| = %.3g\n", variant, worst_dot[vi]);
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
    printf("test_quant_iq_peer: CPU without AVX2/FMA/F16C, skipped\n");
    return 0;
  }
  snprintf(path, sizeof path, "%s/libggml-base.so", dir);
  void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!base) {
    printf("test_quant_iq_peer: peer library not installed (%s), skipped\n", path);
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
    run_cpu_variant(cpu, base, v, variants[v]);
  }
  for (int l = 0; l < 3; l++)
    for (int t = 0; t < NTYPES; t++) free(cache[l][t][0]), free(cache[l][t][1]);
  printf("worst |q35 ref vec_dot - ggml generic| / sum|w*x| = %.3g\n", worst_generic);
  return check_done("test_quant_iq_peer");
}
