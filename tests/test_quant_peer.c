/*
 * test_quant_peer.c - q35's tensor-type kernels against ggml itself (the prebuilt llama.cpp
 * libraries that tools/setup-peers.sh installs into .peer/; see docs/peers.md).
 *
 * ggml's functions are looked up with dlsym from libggml-base.so (dequantize_row_*,
 * quantize_row_q8_K_ref, ggml_quantize_chunk) and the AVX2 ("haswell") and, where the CPU
 * has it, AVX-512 ("icelake") builds of libggml-cpu (quantize_row_q8_0 / q8_K, the
 * ggml_vec_dot_* kernels, fp16/bf16 conversion). Checked, at every SIMD level q35 has here
 * (Q35_SIMD is not needed: the public entry points plus the reference twins are compared):
 *   - Q8_0 / Q8_K activation quantization byte-identical to ggml-cpu's x86 one;
 *   - F16 / BF16 conversion byte-identical to ggml-cpu's;
 *   - our weight blocks dequantize bit-identically under ggml's dequantize_row_*;
 *   - ggml-quantized blocks dequantize bit-identically under ours;
 *   - q35_vec_dot vs ggml_vec_dot_* within 1e-5 of sum |w*x|;
 *   - our weight quantizers' rms error is no worse than 1.25x ggml's reference quantizer (Q4_0,
 *     Q5_0: no worse than 1x).
 * Skips (exit 0, with a message) when the peer libraries are not installed or the CPU has
 * no AVX2 (ggml's non-AVX Q8_0 path rounds differently, so there is no x86 contract then).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/quant.h"
#include "base/util.h"

#include "check.h"


static uint64_t rng_state = 0x243F6A8885A308D3ull;
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
    {Q35_TYPE_Q4_0, "dequantize_row_q4_0", "ggml_vec_dot_q4_0_q8_0"},
    {Q35_TYPE_Q5_0, "dequantize_row_q5_0", "ggml_vec_dot_q5_0_q8_0"},
    {Q35_TYPE_Q8_0, "dequantize_row_q8_0", "ggml_vec_dot_q8_0_q8_0"},
    {Q35_TYPE_Q4_K, "dequantize_row_q4_K", "ggml_vec_dot_q4_K_q8_K"},
    {Q35_TYPE_Q5_K, "dequantize_row_q5_K", "ggml_vec_dot_q5_K_q8_K"},
    {Q35_TYPE_Q6_K, "dequantize_row_q6_K", "ggml_vec_dot_q6_K_q8_K"},
    {Q35_TYPE_IQ4_XS, "dequantize_row_iq4_xs", "ggml_vec_dot_iq4_xs_q8_K"},
    {Q35_TYPE_F16, "ggml_fp16_to_fp32_row", "ggml_vec_dot_f16"},
    {Q35_TYPE_BF16, "ggml_bf16_to_fp32_row", "ggml_vec_dot_bf16"},
    {Q35_TYPE_F32, NULL, "ggml_vec_dot_f32"},
};
#define NTYPES (int)(sizeof types / sizeof types[0])

/* Activation-like rows: gaussian, a few outliers, exact .5 ties, zero and tiny blocks. */
static void fill_act(float *x, int n, int variant) {
  for (int i = 0; i < n; i++) x[i] = rng_gauss() * (i % 61 == 0 ? 30.0f : 1.0f);
  if (variant == 1) /* ties: amax 127 -> id 1 (Q8_0) and signed max -127 -> iscale 1 (Q8_K) */
    for (int i = 0; i < n; i++) x[i] = i % 32 == 0 ? (i % 256 == 0 ? -127.0f : 127.0f)
                                                   : (float)((int)(rng_u64() % 253) - 126) + 0.5f;
  if (variant == 2)
    for (int b = 0; b < n / 32; b++) {
      float *p = x + 32 * b;
      switch (b % 6) {
      case 0: memset(p, 0, 32 * sizeof *p); break;
      case 1: for (int i = 0; i < 32; i++) p[i] *= 1e-39f; break; /* subnormal block */
      case 2: for (int i = 0; i < 32; i++) p[i] *= 3e37f; break;
      case 3: for (int i = 0; i < 32; i++) p[i] = (float)(i % 3) - 1.0f; break;
      default: break;
      }
    }
}

static void run_cpu_variant(void *cpu, void *base, const char *variant) {
  void (*cpu_init)(void) = (void (*)(void))must(cpu, "ggml_cpu_init");
  cpu_init();
  from_float_fn q8_0 = (from_float_fn)must(cpu, "quantize_row_q8_0");
  from_float_fn q8_k = (from_float_fn)must(cpu, "quantize_row_q8_K");
  from_float_fn to_f16 = (from_float_fn)must(cpu, "ggml_cpu_fp32_to_fp16");
  from_float_fn to_bf16 = (from_float_fn)must(cpu, "ggml_cpu_fp32_to_bf16");
  quantize_chunk_fn qchunk = (quantize_chunk_fn)must(base, "ggml_quantize_chunk");

  const int lens[3] = {256, 2048, 4096 + 256};
  double worst_dot = 0;
  for (int li = 0; li < 3; li++) {
    const int n = lens[li];
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    float *d1 = malloc(sizeof(float) * n), *d2 = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    uint8_t *a = malloc((size_t)n * 4 + 64), *b = malloc((size_t)n * 4 + 64), *c = malloc((size_t)n * 4 + 64);
    uint8_t *cq = malloc((size_t)n * 4 + 64);

    /* activation quantizers and half conversions: byte-identical */
    for (int v = 0; v < 3; v++) {
      fill_act(x, n, v);
      const struct { int type; from_float_fn fn; } act[4] = {
          {Q35_TYPE_Q8_0, q8_0}, {Q35_TYPE_Q8_K, q8_k}, {Q35_TYPE_F16, to_f16}, {Q35_TYPE_BF16, to_bf16}};
      for (int k = 0; k < 4; k++) {
        const size_t rs = q35_row_size(act[k].type, n);
        act[k].fn(x, a, n);
        q35_quantize_row(act[k].type, x, b, n);
        q35_quantize_row_ref(act[k].type, x, c, n);
        CHECK(!memcmp(a, b, rs), "%s: %s quantize (%s) differs from ggml (n=%d, variant %d)", variant,
              q35_type_name(act[k].type), q35_simd_name(q35_simd_active()), n, v);
        CHECK(!memcmp(a, c, rs), "%s: %s quantize_ref differs from ggml (n=%d, variant %d)", variant,
              q35_type_name(act[k].type), n, v);
      }
    }

    fill_act(x, n, 0);
    for (int t = 0; t < NTYPES; t++) {
      const int type = types[t].type, vt = q35_vec_dot_type(type);
      const size_t ws = q35_row_size(type, n);
      for (int i = 0; i < n; i += 32) {
        const float s = (float)exp(rng_gauss()) * 0.02f;
        for (int j = 0; j < 32; j++) w[i + j] = rng_gauss() * s;
      }
      /* our blocks under ggml's dequantizer, and ggml's blocks under ours */
      q35_quantize_row(type, w, a, n);
      if (types[t].deq) {
        to_float_fn gdeq = (to_float_fn)must(base, types[t].deq);
        gdeq(a, d1, n);
        q35_dequantize_row(type, a, d2, n);
        CHECK(!memcmp(d1, d2, sizeof(float) * n), "%s: our %s blocks dequantize differently under ggml (n=%d)",
              variant, q35_type_name(type), n);
        qchunk(type, w, b, 0, 1, n, NULL);
        gdeq(b, d1, n);
        q35_dequantize_row(type, b, dx, n);
        CHECK(!memcmp(d1, dx, sizeof(float) * n), "%s: ggml's %s blocks dequantize differently under q35 (n=%d)",
              variant, q35_type_name(type), n);
        /* quantizer quality: ours vs ggml's reference quantizer */
        double eo = 0, eg = 0;
        for (int i = 0; i < n; i++) {
          eo += ((double)w[i] - d2[i]) * ((double)w[i] - d2[i]);
          eg += ((double)w[i] - d1[i]) * ((double)w[i] - d1[i]);
        }
        if (type != Q35_TYPE_F16 && type != Q35_TYPE_BF16) {
          CHECK(eo <= 1.25 * eg, "%s: our %s quantizer rms error %.4g vs ggml's %.4g", variant,
                q35_type_name(type), sqrt(eo / n), sqrt(eg / n));
          /* Q4_0 / Q5_0 start from ggml's scale and only lower the error from there
           * (quantize_fit.h's plain fits): never above ggml's */
          if (type == Q35_TYPE_Q4_0 || type == Q35_TYPE_Q5_0)
            CHECK(eo <= eg, "%s: our %s quantizer rms error %.4g above ggml's %.4g", variant, q35_type_name(type),
                  sqrt(eo / n), sqrt(eg / n));
          if (n == 4096 + 256 && !strcmp(variant, "haswell"))
            printf("  %-7s rms error ours/ggml: %.3f\n", q35_type_name(type), sqrt(eo / eg));
        }
      }
      /* dot products on ggml-quantized weights (ours too) with the ggml-format activation */
      vec_dot_fn gdot = (vec_dot_fn)must(cpu, types[t].dot);
      const uint8_t *rows[2] = {a, b};
      for (int r = 0; r < (types[t].deq ? 2 : 1); r++) {
        /* ggml takes Q8_0 (Q8_K) where q35 takes its own layouts of the same values (Q8_0X/Y/Z, Q8_KP) */
        q35_quantize_row(vt == Q35_TYPE_Q8_0X || vt == Q35_TYPE_Q8_0Y || vt == Q35_TYPE_Q8_0Z ? Q35_TYPE_Q8_0
                         : vt == Q35_TYPE_Q8_KP                                             ? Q35_TYPE_Q8_K
                                                                                            : vt,
                         x, c, n);
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
              "%s: %s vec_dot q35 %.9g / ref %.9g vs ggml %.9g (n=%d)", variant, q35_type_name(type), got, ref,
              want, n);
        if (mag > 0) worst_dot = fmax(worst_dot, fabs((double)got - want) / mag);
      }
      (void)ws;
    }
    free(x); free(w); free(d1); free(d2); free(dx); free(a); free(b); free(c); free(cq);
  }
  printf("%s: worst |q35 vec_dot - ggml| / sum|w*x| = %.3g\n", variant, worst_dot);
}

/* The peer's CPU variants are x86-64 libraries: elsewhere every feature reads as absent (skip). */
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
    printf("test_quant_peer: CPU without AVX2/FMA/F16C, skipped\n");
    return 0;
  }
  snprintf(path, sizeof path, "%s/libggml-base.so", dir);
  void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!base) {
    printf("test_quant_peer: peer library not installed (%s), skipped\n", path);
    return 0;
  }
  printf("q35 SIMD level: %s\n", q35_simd_name(q35_simd_active()));
  const char *variants[2] = {"haswell", "icelake"};
  for (int v = 0; v < 2; v++) {
    if (v == 1 && !(CPU_HAS("avx512f") && CPU_HAS("avx512bw") &&
                    CPU_HAS("avx512vl") && CPU_HAS("avx512vnni") &&
                    CPU_HAS("avx512vbmi")))
      continue;
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, variants[v]);
    void *cpu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(cpu != NULL, "cannot load %s: %s", path, dlerror());
    if (!cpu) continue;
    run_cpu_variant(cpu, base, variants[v]);
  }
  return check_done("test_quant_peer");
}
