/*
 * attn_bench.c - one attention item (kernels/attn.h) over a KV cache (F16, or TYPE=f32|q8_0): 8 query heads of 256
 * dims (one KV group of the 35B-A3B shape; cache rows hold 2 KV heads) against 8k and 32k cached
 * positions, 1 thread, for the scalar reference (q35_attn_ref), the AVX2 kernel
 * (q35_attn_avx2) and q35_attn at the active level (AVX-512 where the CPU has it; Q35_SIMD
 * lowers it). Prints the median of REP runs in ms per item. Not part of ctest.
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/attn_bench.c build/libq35.a -o build/attn_bench \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: build/attn_bench [POSITIONS...]   (default 8192 32768)
 *   env TYPE=f16|f32|q8_0 picks the cache type (default f16).
 *   env REP=N runs each kernel N times (default 9; the reference runs at most 3 times).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/attn_internal.h"
#include "kernels/quant.h"

enum { HD = 256, GRP = 8, NKV = 2, REF_REP_MAX = 3 };

static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* median ms of rep calls of fn on j */
static double time_ms(void (*fn)(const q35_attn_job *), const q35_attn_job *j, int rep) {
  double t[64];
  if (rep > 64) rep = 64;
  for (int r = 0; r < rep; r++) {
    const double t0 = q35_now();
    fn(j);
    t[r] = (q35_now() - t0) * 1e3;
  }
  qsort(t, (size_t)rep, sizeof t[0], cmpd);
  return t[rep / 2];
}

static void bench(int type, int npos, int rep) {
  const size_t rb = q35_row_size(type, NKV * HD);
  char *k = q35_alloc64(rb * (size_t)npos, 0), *v = q35_alloc64(rb * (size_t)npos, 0);
  float *q = malloc(sizeof(float) * HD * GRP), *sc = malloc(sizeof(float) * (size_t)npos * GRP);
  float *qs = malloc(sizeof(float) * HD * GRP), *out = malloc(sizeof(float) * HD * GRP);
  float kr[NKV * HD], vr[NKV * HD];
  uint64_t s = 88172645463325252ull;
  for (int p = 0; p < npos; p++) {
    for (int i = 0; i < NKV * HD; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      kr[i] = (float)(int)(s % 2001 - 1000) / 1000.0f;
      vr[i] = (float)(int)(s >> 32 & 1023) / 512.0f - 1.0f;
    }
    q35_quantize_row(type, kr, k + (size_t)p * rb, NKV * HD);
    q35_quantize_row(type, vr, v + (size_t)p * rb, NKV * HD);
  }
  for (int i = 0; i < HD * GRP; i++) q[i] = (float)((i * 37) % 101 - 50) / 25.0f;
  const q35_attn_job j = {HD, GRP, npos, type, k, v, rb, q, HD, 0.0625f, sc, (size_t)npos, qs, out, HD};
  const double tr = time_ms(q35_attn_ref, &j, rep < REF_REP_MAX ? rep : REF_REP_MAX);
  const double t2 = time_ms(q35_attn_avx2, &j, rep);
  const double ta = time_ms(q35_attn, &j, rep);
  printf("npos %6d: reference %9.2f ms   avx2 %7.2f ms (%5.1fx)   q35_attn [%s f16 level] %7.2f ms (%5.1fx)\n", npos, tr, t2,
         tr / t2, q35_attn_level(), ta, tr / ta);
  free(k), free(v), free(q), free(sc), free(qs), free(out);
}

int main(int argc, char **argv) {
  if (!q35_simd_supported(Q35_SIMD_AVX2)) {
    fprintf(stderr, "attn_bench: this CPU has no AVX2\n");
    return 1;
  }
  const int rep = getenv("REP") ? atoi(getenv("REP")) : 9;
  const char *tn = getenv("TYPE") ? getenv("TYPE") : "f16";
  const int type = !strcmp(tn, "f32") ? Q35_TYPE_F32 : !strcmp(tn, "q8_0") ? Q35_TYPE_Q8_0 : Q35_TYPE_F16;
  printf("one item: %d query heads x %d dims, %s cache, 1 thread, median of %d runs (reference: %d)\n", GRP, HD, tn, rep,
         rep < REF_REP_MAX ? rep : REF_REP_MAX);
  if (argc < 2) {
    bench(type, 8192, rep);
    bench(type, 32768, rep);
  }
  for (int a = 1; a < argc; a++) bench(type, atoi(argv[a]), rep);
  return 0;
}
