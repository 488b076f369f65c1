/*
 * q5_1t_probe.c - a design probe for the AVX2 one-column Q5_1 decode (issue 16): the kernel main
 * runs on Q5_1R rows (lt_group's Q5_1R path, quant_lowbit_256.inc: per group of 8 blocks, 8
 * two-lane loads and 12 unpacks transpose the blocks so that int32 lane l holds block l) against
 * the same arithmetic on a layout stored already transposed per group of 8 blocks ("Q5_1T", the
 * same 192 bytes: the 8 blocks' fp16 d, their 8 fp16 m, their 8 permuted qh words, then per
 * j = 0..3 the 8 blocks' nibble dwords j), which needs one load per vector and no shuffle.
 * Both compute the same int32 totals and the same float steps, so the probe checks every row's
 * result bit for bit before it times anything.
 *
 * Not part of the engine or of ctest: a measurement of the per-byte decode cost the layout would
 * save, in cache (MiB small) and streamed. Times are CPU seconds (the slowest thread of a pass,
 * the best of 5 passes), as bench/lowbit_bench.c's.
 *
 * Build: cc -O2 -mavx2 -mfma -mf16c bench/q5_1t_probe.c -o build/q5_1t_probe -pthread
 * Run:   build/q5_1t_probe [MiB of weights, default 256] [THREADS, default 1]
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 2048           /* row length (a 35B-A3B expert's input width) */
#define NB (N / 32)      /* blocks per row */
#define NG (NB / 8)      /* groups of 8 blocks per row */
#define WS (NB * 24)     /* row bytes (Q5_1: 24 per block) */
#define REPS 5
#define PIN(v) __asm__("" : "+x"(v))

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline __attribute__((always_inline)) void pf192(const uint8_t *p) {
  for (int o = 0; o < 192; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
  _mm_prefetch((const char *)p + 191, _MM_HINT_T0);
}

static inline __attribute__((always_inline)) void h16x2(__m256i v, __m256 *lo, __m256 *hi) {
  const __m256i ctl = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2,
                                       3, 6, 7, 10, 11, 14, 15);
  const __m256i t = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, ctl), 0xD8);
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(t));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(t, 1));
}

static inline __attribute__((always_inline)) float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* the fifth bits and the maddubs of both layouts (Q5_1R's permuted qh, lane l = block l) */
static inline __attribute__((always_inline)) __m256i q5_total(const __m256i V[4], __m256i QH, const __m256i *yt) {
  const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
  __m256i sl = _mm256_setzero_si256(), sh = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {
    const __m256i fl = _mm256_and_si256(_mm256_slli_epi32(QH, 4 - j), b4);
    const __m256i fh = _mm256_and_si256(_mm256_srli_epi32(QH, j), b4);
    const __m256i L = _mm256_or_si256(_mm256_and_si256(V[j], m4), fl);
    const __m256i H = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(V[j], 4), m4), fh);
    sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(L, yt[j]));
    sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(H, yt[4 + j]));
    PIN(sl);
    PIN(sh);
  }
  return _mm256_add_epi32(_mm256_madd_epi16(sl, _mm256_set1_epi16(1)), _mm256_madd_epi16(sh, _mm256_set1_epi16(1)));
}

static inline __attribute__((always_inline)) void q5_float(__m256i T, __m256 fdw, __m256 fmw, const float *xs8, __m256 *acc) {
  *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), _mm256_mul_ps(fdw, _mm256_loadu_ps(xs8)), *acc);
  *acc = _mm256_fmadd_ps(fmw, _mm256_loadu_ps(xs8 + 8), *acc);
}

/* main's lt_group (Q5_1R): 8 blocks of 24 bytes at a */
static inline __attribute__((always_inline)) void group_r(const uint8_t *a, const __m256i *yt, const float *xs8, __m256 *acc) {
  __m256i y[4], z[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) {
    y[k] = _mm256_loadu2_m128i((const __m128i *)(const void *)(a + (k + 4) * 24 + 8), (const __m128i *)(const void *)(a + k * 24 + 8));
    z[k] = _mm256_loadu2_m128i((const __m128i *)(const void *)(a + (k + 4) * 24), (const __m128i *)(const void *)(a + k * 24));
  }
  const __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
  const __m256i V[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                        _mm256_unpackhi_epi64(t1, t3)};
  const __m256i s0 = _mm256_unpacklo_epi32(z[0], z[1]), s1 = _mm256_unpacklo_epi32(z[2], z[3]);
  const __m256i DM = _mm256_unpacklo_epi64(s0, s1), QH = _mm256_unpackhi_epi64(s0, s1);
  __m256 fdw, fmw;
  h16x2(DM, &fdw, &fmw);
  q5_float(q5_total(V, QH, yt), fdw, fmw, xs8, acc);
}

/* the transposed group: the 8 blocks' fp16 d, their 8 fp16 m, their 8 qh' words, then for j =
 * 0..3 the 8 blocks' nibble dwords j */
static inline __attribute__((always_inline)) void group_t(const uint8_t *a, const __m256i *yt, const float *xs8, __m256 *acc) {
  const __m256i V[4] = {_mm256_loadu_si256((const __m256i *)(const void *)(a + 64)),
                        _mm256_loadu_si256((const __m256i *)(const void *)(a + 96)),
                        _mm256_loadu_si256((const __m256i *)(const void *)(a + 128)),
                        _mm256_loadu_si256((const __m256i *)(const void *)(a + 160))};
  const __m256 fdw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)a));
  const __m256 fmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + 16)));
  const __m256i QH = _mm256_loadu_si256((const __m256i *)(const void *)(a + 32));
  q5_float(q5_total(V, QH, yt), fdw, fmw, xs8, acc);
}

/* a Q5_1R group (8 x 24 bytes) -> the transposed group */
static void to_t(const uint8_t *g, uint8_t *o) {
  for (int l = 0; l < 8; l++) {
    memcpy(o + 2 * l, g + 24 * l, 2);
    memcpy(o + 16 + 2 * l, g + 24 * l + 2, 2);
    memcpy(o + 32 + 4 * l, g + 24 * l + 4, 4);
    for (int j = 0; j < 4; j++) memcpy(o + 64 + 32 * j + 4 * l, g + 24 * l + 8 + 4 * j, 4);
  }
}

typedef struct {
  int T; /* 0: Q5_1R, 1: transposed */
  const uint8_t *w;
  int r0, r1;
  const __m256i *yt;
  const float *xsc;
  float *o;
  pthread_barrier_t *bar;
  double cpu[REPS];
} job;

__attribute__((noinline)) static void rows_r(const uint8_t *w, int r0, int r1, const __m256i *yt, const float *xsc, float *o) {
  for (int r = r0; r < r1; r++) {
    __m256 acc = _mm256_setzero_ps();
    const uint8_t *row = w + (size_t)r * WS;
    for (int g = 0; g < NG; g++) {
      pf192(row + 192 * g + 6144);
      group_r(row + 192 * g, yt + 8 * g, xsc + 16 * g, &acc);
    }
    o[r] = hsum8(acc);
  }
}

__attribute__((noinline)) static void rows_t(const uint8_t *w, int r0, int r1, const __m256i *yt, const float *xsc, float *o) {
  for (int r = r0; r < r1; r++) {
    __m256 acc = _mm256_setzero_ps();
    const uint8_t *row = w + (size_t)r * WS;
    for (int g = 0; g < NG; g++) {
      pf192(row + 192 * g + 6144);
      group_t(row + 192 * g, yt + 8 * g, xsc + 16 * g, &acc);
    }
    o[r] = hsum8(acc);
  }
}

static void *run(void *p) {
  job *j = p;
  for (int rep = 0; rep < REPS; rep++) {
    pthread_barrier_wait(j->bar);
    const double t0 = cpu_now();
    (j->T ? rows_t : rows_r)(j->w, j->r0, j->r1, j->yt, j->xsc, j->o);
    j->cpu[rep] = cpu_now() - t0;
  }
  return NULL;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}

static double bench(int T, const uint8_t *w, int rows, int nth, const __m256i *yt, const float *xsc, float *o) {
  job jobs[16];
  pthread_t th[16];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)nth);
  for (int i = 0; i < nth; i++) {
    jobs[i] = (job){T, w, rows * i / nth, rows * (i + 1) / nth, yt, xsc, o, &bar, {0}};
    pthread_create(&th[i], NULL, run, &jobs[i]);
  }
  for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&bar);
  double best = 1e30;
  for (int rep = 0; rep < REPS; rep++) {
    double dt = 0;
    for (int i = 0; i < nth; i++)
      if (jobs[i].cpu[rep] > dt) dt = jobs[i].cpu[rep];
    if (dt < best) best = dt;
  }
  return (double)rows * WS / best / 1e9;
}

int main(int argc, char **argv) {
  const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
  int nth = argc > 2 ? atoi(argv[2]) : 1;
  if (nth < 1 || nth > 16) nth = 1;
  const int rows = (int)((mib << 20) / WS);
  const size_t bytes = (size_t)rows * WS + 8192; /* + the prefetch's reach past the last row */
  uint8_t *wr = aligned_alloc(64, (bytes + 63) / 64 * 64), *wt = aligned_alloc(64, (bytes + 63) / 64 * 64);
  __m256i *yt = aligned_alloc(32, sizeof(__m256i) * NB);
  float *xsc = malloc(sizeof(float) * 2 * NB), *o1 = malloc(sizeof(float) * (size_t)rows), *o2 = malloc(sizeof(float) * (size_t)rows);
  /* 64 distinct random rows, replicated; normal fp16 d and m */
  for (size_t i = 0; i < bytes; i++) wr[i] = (uint8_t)rnd();
  for (int r = 0; r < 64 && r < rows; r++)
    for (int b = 0; b < NB; b++) {
      uint8_t *p = wr + (size_t)r * WS + 24 * b;
      const uint16_t d = (uint16_t)(0x1800 + rnd() % 0x800), m = (uint16_t)(0x9800 + rnd() % 0x800);
      memcpy(p, &d, 2), memcpy(p + 2, &m, 2);
    }
  for (int r = 64; r < rows; r++) memcpy(wr + (size_t)r * WS, wr + (size_t)(r % 64) * WS, WS);
  memcpy(wt, wr, bytes);
  for (int r = 0; r < rows; r++)
    for (int g = 0; g < NG; g++) to_t(wr + (size_t)r * WS + 192 * g, wt + (size_t)r * WS + 192 * g);
  int8_t *yb = (int8_t *)yt;
  for (int i = 0; i < 32 * NB; i++) yb[i] = (int8_t)((int)(rnd() % 255) - 127);
  for (int i = 0; i < 2 * NB; i++) xsc[i] = (float)(rnd() % 2000) / 1000.0f - 1.0f;
  rows_r(wr, 0, rows, yt, xsc, o1);
  rows_t(wt, 0, rows, yt, xsc, o2);
  if (memcmp(o1, o2, sizeof(float) * (size_t)rows)) {
    fprintf(stderr, "q5_1t_probe: the layouts' results differ\n");
    return 1;
  }
  printf("q5_1t_probe: %zu MiB, %d thread(s), rows equal bit for bit; GB/s per CPU-second:", mib, nth);
  for (int k = 0; k < 8; k++) { /* R T T R R T T R */
    const int t = (0x66 >> k) & 1;
    printf(" %s %.2f", t ? "T" : "R", bench(t, t ? wt : wr, rows, nth, yt, xsc, o1));
  }
  printf("\n");
  free(wr), free(wt), free(yt), free(xsc), free(o1), free(o2);
  return 0;
}
