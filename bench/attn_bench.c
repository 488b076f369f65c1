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
 *   env JOBS=N also times q35_attn_many on N jobs at consecutive positions ending at npos, per job
 *   (default 8, the prefill's Q35_ATTN_JOBS; 1 skips it).
 *   env CLOCK=cpu times by the thread's CPU clock instead of the wall clock (a shared, loaded
 *   machine), QUANT=F prints that quantile of the runs instead of the median (0.25: the quieter
 *   runs), REF=0 skips the (slow) reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/attn_internal.h"
#include "kernels/quant.h"

enum { HD = 256, GRP = 8, NKV = 2, REF_REP_MAX = 3 };

static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* seconds by the clock CLOCK names (the wall clock by default) */
static double now_s(void) {
  const char *c = getenv("CLOCK");
  if (!c || strcmp(c, "cpu")) return q35_now();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the QUANT quantile (default the median) of rep calls of fn on j, ms */
static double time_ms(void (*fn)(const q35_attn_job *), const q35_attn_job *j, int rep) {
  double t[64];
  if (rep > 64) rep = 64;
  for (int r = 0; r < rep; r++) {
    const double t0 = now_s();
    fn(j);
    t[r] = (now_s() - t0) * 1e3;
  }
  qsort(t, (size_t)rep, sizeof t[0], cmpd);
  const double qu = getenv("QUANT") ? atof(getenv("QUANT")) : 0.5;
  const int i = (int)(qu * rep);
  return t[i < 0 ? 0 : i >= rep ? rep - 1 : i];
}

enum { JOBS_MAX = 16 };
static q35_attn_job jobs[JOBS_MAX];
static int jobs_n;
static void many(const q35_attn_job *j) {
  (void)j;
  q35_attn_many(jobs, jobs_n);
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
  const int ref = !getenv("REF") || atoi(getenv("REF")) != 0;
  const double tr = ref ? time_ms(q35_attn_ref, &j, rep < REF_REP_MAX ? rep : REF_REP_MAX) : 0.0;
  const double t2 = time_ms(q35_attn_avx2, &j, rep);
  const double ta = time_ms(q35_attn, &j, rep);
  printf("npos %6d: reference %9.2f ms   avx2 %7.2f ms (%5.1fx)   q35_attn [%s f16 level] %7.2f ms (%5.1fx)\n", npos, tr, t2,
         tr / t2, q35_attn_level(), ta, tr / ta);
  if (jobs_n > 1) { /* JOBS consecutive positions (npos - JOBS + 1 .. npos) in one q35_attn_many */
    for (int i = 0; i < jobs_n; i++) {
      jobs[i] = j;
      jobs[i].npos = npos - jobs_n + 1 + i > 0 ? npos - jobs_n + 1 + i : 1;
      jobs[i].sc = malloc(sizeof(float) * (size_t)npos * GRP);
      jobs[i].qs = malloc(sizeof(float) * HD * GRP);
      jobs[i].out = malloc(sizeof(float) * HD * GRP);
    }
    const double tm = time_ms(many, &j, rep) / jobs_n;
    printf("npos %6d: q35_attn_many of %d consecutive positions: %7.2f ms per job (%5.2fx q35_attn)\n", npos, jobs_n, tm,
           ta / tm);
    for (int i = 0; i < jobs_n; i++) free(jobs[i].sc), free(jobs[i].qs), free(jobs[i].out);
  }
  free(k), free(v), free(q), free(sc), free(qs), free(out);
}

int main(int argc, char **argv) {
  if (!q35_simd_supported(Q35_SIMD_AVX2)) {
    fprintf(stderr, "attn_bench: this CPU has no AVX2\n");
    return 1;
  }
  const int rep = getenv("REP") ? atoi(getenv("REP")) : 9;
  jobs_n = getenv("JOBS") ? atoi(getenv("JOBS")) : 8;
  jobs_n = jobs_n < 1 ? 1 : jobs_n > JOBS_MAX ? JOBS_MAX : jobs_n;
  const char *tn = getenv("TYPE") ? getenv("TYPE") : "f16";
  const int type = !strcmp(tn, "f32") ? Q35_TYPE_F32 : !strcmp(tn, "q8_0") ? Q35_TYPE_Q8_0 : Q35_TYPE_F16;
  printf("one item: %d query heads x %d dims, %s cache, 1 thread, quantile %.2f of %d runs (reference: %d), %s clock\n", GRP,
         HD, tn, getenv("QUANT") ? atof(getenv("QUANT")) : 0.5, rep, rep < REF_REP_MAX ? rep : REF_REP_MAX,
         getenv("CLOCK") && !strcmp(getenv("CLOCK"), "cpu") ? "CPU" : "wall");
  if (argc < 2) {
    bench(type, 8192, rep);
    bench(type, 32768, rep);
  }
  for (int a = 1; a < argc; a++) bench(type, atoi(argv[a]), rep);
  return 0;
}
