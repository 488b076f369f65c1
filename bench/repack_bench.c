/*
 * repack_bench.c - prototype of a load-time repack of Q4_0 weights for the AVX2 one-column kernel
 * (issue 15). A group of 16 Q4_0 blocks (288 bytes) is rewritten in place-size as
 *   bytes   0..127  half 0's V_0..V_3 (the 4 x 4 dword transpose q4z2_g1 computes per group),
 *   bytes 128..255  half 1's V_0..V_3,
 *   bytes 256..287  half 0's and half 1's 8 fp16 scales in q4z2_d8's order,
 * so the kernel loads V_j and the scales directly and then runs q4z2_g1's integer and float
 * steps unchanged (same bits). A short last group of a row stays plain Q4_0. The bench compares
 * the current AVX2 kernel (src/kernels/quant_avx2.c, compiled in here) with the repacked one:
 * in cache (ROWS_C x K, repeated) and streamed (NMAT matrices of 4096 x K, each read once a
 * pass), one thread, GB/s of weights per CPU-second, alternating old new new old, and checks the
 * outputs are equal bit for bit. Not part of ctest.
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/repack_bench.c build/libq35.a -o build/repack_bench \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: build/repack_bench [ROUNDS, default 9]   (env K=2048, NMAT=64, ROWS_C=256)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/quant_avx2.c"

/* the repacked group of the 16 plain blocks at a, written to d (288 bytes) */
static QS_TARGET void q4r_pack_group(const uint8_t *a, uint8_t *d) {
  for (int h = 0; h < 2; h++) {
    const __m256i y0 = q4z2_ld2(a, 2 * h), y1 = q4z2_ld2(a, 4 + 2 * h), y2 = q4z2_ld2(a, 8 + 2 * h),
                  y3 = q4z2_ld2(a, 12 + 2 * h);
    const __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
    const __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
    _mm256_storeu_si256((__m256i *)(d + 128 * h), _mm256_unpacklo_epi64(t0, t2));
    _mm256_storeu_si256((__m256i *)(d + 128 * h + 32), _mm256_unpackhi_epi64(t0, t2));
    _mm256_storeu_si256((__m256i *)(d + 128 * h + 64), _mm256_unpacklo_epi64(t1, t3));
    _mm256_storeu_si256((__m256i *)(d + 128 * h + 96), _mm256_unpackhi_epi64(t1, t3));
  }
  const __m128i d0 = q4z2_d8(a, 0), d1 = q4z2_d8(a, 1);
  _mm_storeu_si128((__m128i *)(d + 256), d0);
  _mm_storeu_si128((__m128i *)(d + 272), d1);
}

/* one row of n elements: full groups repacked, a short last group copied as it is */
static void q4r_pack_row(const uint8_t *src, uint8_t *dst, int64_t n) {
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q4_0);
  for (int64_t q = 0; q < ng; q++) q4r_pack_group(src + (size_t)q * gsz, dst + (size_t)q * gsz);
  memcpy(dst + (size_t)ng * gsz, src + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q4_0));
}

/* q4z2_g1 on a repacked group: the same steps after the loads */
QSI void q4r_g1(const uint8_t *a, const uint8_t *b, __m256 acc[2]) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256 D[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + 256))),
                       _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + 272)))};
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const uint8_t *v = a + 128 * h;
    const __m256i V[4] = {loadu256(v), loadu256(v + 32), loadu256(v + 64), loadu256(v + 96)};
    const uint8_t *bh = b + 32 * h;
    __m256i s16 = _mm256_maddubs_epi16(_mm256_and_si256(V[0], m4), loadu256(bh));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(V[0], 4), m4), loadu256(bh + 256)));
    _Pragma("GCC unroll 3") for (int j = 1; j < 4; j++) {
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(V[j], m4), loadu256(bh + 64 * j)));
      s16 = _mm256_add_epi16(
          s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(V[j], 4), m4), loadu256(bh + 256 + 64 * j)));
    }
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), loadu256(bh + 512));
    const __m256 yd = _mm256_loadu_ps((const float *)(const void *)(bh + 576));
    acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(D[h], yd), acc[h]);
  }
}

QSI float q4r_row1(int64_t n, const uint8_t *w, size_t pfd, const uint8_t *x) {
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q4_0);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t q = 0; q < ng; q++) {
    const uint8_t *g = w + (size_t)q * gsz;
    pf_span(g + pfd, gsz);
    q4r_g1(g, x + (size_t)q * Q8Z_GROUP, acc);
  }
  if (kb) {
    uint8_t tail[16 * sizeof(blk_q4_0)];
    memset(tail, 0, gsz);
    memcpy(tail, w + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q4_0));
    q4z2_g1(tail, x + (size_t)ng * Q8Z_GROUP, acc);
  }
  return hsum8(_mm256_add_ps(acc[0], acc[1]));
}

QSI void q4r_row2(int64_t n, const uint8_t *wa, const uint8_t *wb, size_t pfd, const uint8_t *x, float *oa, float *ob) {
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q4_0);
  __m256 aa[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, ab[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t q = 0; q < ng; q++) {
    const uint8_t *ga = wa + (size_t)q * gsz, *gb = wb + (size_t)q * gsz;
    pf_span(ga + pfd, gsz);
    pf_span(gb + pfd, gsz);
    q4r_g1(ga, x + (size_t)q * Q8Z_GROUP, aa);
    q4r_g1(gb, x + (size_t)q * Q8Z_GROUP, ab);
  }
  if (kb) {
    uint8_t tail[16 * sizeof(blk_q4_0)];
    memset(tail, 0, gsz);
    memcpy(tail, wa + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q4_0));
    q4z2_g1(tail, x + (size_t)ng * Q8Z_GROUP, aa);
    memcpy(tail, wb + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q4_0));
    q4z2_g1(tail, x + (size_t)ng * Q8Z_GROUP, ab);
  }
  *oa = hsum8(_mm256_add_ps(aa[0], aa[1]));
  *ob = hsum8(_mm256_add_ps(ab[0], ab[1]));
}

/* t_q4z2_gemv's row order (rows r and r + nr / 2 together once far apart) on repacked rows */
static QS_TARGET void q4r_gemv(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, int nc,
                               float *o, size_t ors, size_t ocs) {
  (void)xs, (void)nc, (void)ocs; /* one column only */
  const uint8_t *w = wv;
  const size_t pfd = pf_ahead(1, ws);
  const int h = nr / 2;
  int r = 0;
  if ((size_t)h * ws >= TWO_STREAM_BYTES) {
    for (; r < h; r++) q4r_row2(n, w + (size_t)r * ws, w + (size_t)(r + h) * ws, pfd, xv, &o[(size_t)r * ors],
                                &o[(size_t)(r + h) * ors]);
    r = 2 * h;
  }
  for (; r < nr; r++) o[(size_t)r * ors] = q4r_row1(n, w + (size_t)r * ws, pfd, xv);
}

typedef void (*gemv_fn)(int64_t, const void *, size_t, int, const void *, size_t, int, float *, size_t, size_t);

static double cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* one pass: every matrix once (reps times), returns CPU seconds */
static double pass(gemv_fn f, const uint8_t *w, int rows, int nmat, int reps, int64_t K, size_t ws, const void *x,
                   float *y) {
  const double t0 = cpu();
  for (int k = 0; k < reps; k++)
    for (int m = 0; m < nmat; m++) f(K, w + (size_t)m * rows * ws, ws, rows, x, 0, 1, y + (size_t)m * rows, 1, 0);
  return cpu() - t0;
}

static void run(const char *name, const uint8_t *wo, const uint8_t *wn, int rows, int nmat, int reps, int64_t K,
                size_t ws, const void *x, int rounds) {
  float *yo = calloc((size_t)rows * nmat, sizeof(float)), *yn = calloc((size_t)rows * nmat, sizeof(float));
  double *to = malloc(sizeof(double) * rounds), *tn = malloc(sizeof(double) * rounds);
  const double gb = (double)ws * rows * nmat * reps / 1e9;
  for (int i = 0; i < rounds; i++) { /* old new new old ... */
    if (i % 2 == 0) {
      to[i] = pass(t_q4z2_gemv, wo, rows, nmat, reps, K, ws, x, yo);
      tn[i] = pass(q4r_gemv, wn, rows, nmat, reps, K, ws, x, yn);
    } else {
      tn[i] = pass(q4r_gemv, wn, rows, nmat, reps, K, ws, x, yn);
      to[i] = pass(t_q4z2_gemv, wo, rows, nmat, reps, K, ws, x, yo);
    }
  }
  const int same = memcmp(yo, yn, sizeof(float) * (size_t)rows * nmat) == 0;
  qsort(to, rounds, sizeof(double), cmpd);
  qsort(tn, rounds, sizeof(double), cmpd);
  printf("%s %d x %lld x %d (%.1f MB), %d rounds: old %.1f GB/s per CPU-s (median; %.1f .. %.1f)  new %.1f (%.1f .. "
         "%.1f)  new/old %.3f  bits %s\n",
         name, rows, (long long)K, nmat, (double)ws * rows * nmat / 1e6, rounds, gb / to[rounds / 2],
         gb / to[rounds - 1], gb / to[0], gb / tn[rounds / 2], gb / tn[rounds - 1], gb / tn[0],
         to[rounds / 2] / tn[rounds / 2], same ? "equal" : "DIFFER");
  free(yo), free(yn), free(to), free(tn);
}

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 9;
  const int64_t K = getenv("K") ? atoll(getenv("K")) : 2048;
  const int nmat = getenv("NMAT") ? atoi(getenv("NMAT")) : 64, rows_c = getenv("ROWS_C") ? atoi(getenv("ROWS_C")) : 256;
  if (K % 32 || rounds < 1 || nmat < 1 || rows_c < 1) return 2;
  const int rows = 4096;
  const size_t ws = q35_row_size(Q35_TYPE_Q4_0, K), mb = ws * rows;
  uint8_t *wo = aligned_alloc(64, (mb * nmat + 63) / 64 * 64), *wn = aligned_alloc(64, (mb * nmat + 63) / 64 * 64);
  float *f = malloc(sizeof(float) * (size_t)K);
  srand(1);
  for (size_t r = 0; r < (size_t)rows * nmat; r++) {
    if (r < 512) {
      for (int64_t i = 0; i < K; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
      q35_quantize_row(Q35_TYPE_Q4_0, f, wo + r * ws, K);
    } else memcpy(wo + r * ws, wo + (r % 512) * ws, ws);
    q4r_pack_row(wo + r * ws, wn + r * ws, K);
  }
  for (int64_t i = 0; i < K; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  void *x = aligned_alloc(64, (q35_row_size(Q35_TYPE_Q8_0Z, K) + 63) / 64 * 64 + 4096);
  q35_quantize_row(Q35_TYPE_Q8_0Z, f, x, K);
  run("in cache ", wo, wn, rows_c, 1, 200, K, ws, x, rounds);
  run("streamed ", wo, wn, rows, nmat, 1, K, ws, x, rounds);
  free(wo), free(wn), free(f), free(x);
  return 0;
}
