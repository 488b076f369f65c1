/*
 * sampler.c - the sampling head: penalties, temperature, top-k, top-p, min-p and a seeded
 * draw, following docs/sampling.md. Two implementations of one contract:
 *
 *   q35_sample_ref  sorts the row and follows the contract text step by step;
 *   q35_sample      never sorts the vocabulary: SIMD passes for the maximum and exp, a
 *                   threshold filter for top-k and min-p candidates, a weighted selection
 *                   by value for top-p, per-block sums for the draw.
 *
 * They return the same token bit for bit. The recipe that makes that possible:
 *
 *  1. Penalties (shared code): repetition first, as llama.cpp and vLLM order it
 *     (l = l > 0 ? l / r : l * r, once per distinct token of prompt + generated), then
 *     l -= presence + frequency * count over the generated tokens.
 *  2. Greedy at temperature 0: the lowest id holding the maximum.
 *  3. s_i = (l_i - m) / T in fp32 (m = max l). s is monotone in l, so the k-th largest s is
 *     s(k-th largest l): the fast path selects on l among threshold candidates.
 *  4. w_i = q35_sampler_exp(s_i): one polynomial exp built only from fused multiply-adds,
 *     exact products by powers of two and comparisons. Every step is a single correctly
 *     rounded IEEE operation, so the SIMD twins (same operations, lane by lane) give the same
 *     bits as the scalar code. w in [0, 1]; exp(0) = 1 exactly; below -87 it returns 0.
 *  5. Fixed point: W_i = trunc(w_i * 2^61) as a 64-bit integer (exact: a power-of-two scale
 *     and a truncating conversion). Sums of W are exact in unsigned 128-bit integers, so they
 *     do not depend on summation order. A weight with W = 0 (w < 2^-61, relative probability
 *     below 4.4e-19) is never drawn.
 *  6. top-p by value: with T1 = sum W over the top-k survivors and S(v) = sum of W_j over
 *     w_j > v, v* is the smallest survivor value with S(v*) <= top_p * T1. top_p = f * 2^-e
 *     exactly (f a 24-bit integer), so the test is S <= floor(f * T1 / 2^e) in integers.
 *     Survivors keep w >= v*.
 *  7. min-p: keep w >= min_p * w_max (a float product and comparison, same in both paths).
 *  8. Draw: k = 53 bits of Philox4x32-10(key = seed, counter = draw index), u = k / 2^53.
 *     With T2 = sum W over the final survivors, return the first survivor in ascending id
 *     whose running sum R exceeds u * T2, i.e. R > floor(k * T2 / 2^53) (integers; exact).
 *     Since k < 2^53 the last survivor always satisfies it; the code still falls back to it.
 *
 * The fast path only changes which elements are looked at (candidates that provably contain
 * every survivor) and how v* is found (partition passes with exact integer mass tests).
 *
 * Log-probabilities (optional) are log_softmax of the penalized logits, computed by one
 * shared routine, so both paths report the same numbers.
 */
#include "sample/sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define Q35_X86 1
#else
#define Q35_X86 0
#endif

typedef unsigned __int128 u128;

#define BLOCK 1024         /* elements per block sum in the full-row draw */
#define SLACK 64           /* extra elements at the end of scratch buffers (SIMD stores) */
#define FIX_SCALE 0x1p61f  /* W = trunc(w * 2^61) */
#define CHUNK 64           /* elements per maximum recorded by the top-p path's scan */
#define FUSED_MIN 16384    /* one-pass top-p (see sample_topp_fused) from this row size */
#define FUSED_HK 4         /* its head: elements above the FUSED_HK-th largest sampled one */
#define FUSED_MS 4096      /* its sample size (at most) */
#define FUSED_Z 5.0        /* its window half-width in standard deviations */
#define FUSED_EPS 0.001    /* its head: elements heavier than this share of the total over f */
#define FUSED_HMAX 8192    /* its head's largest size */
#define FUSED_BINS 64      /* its estimate's bins per unit of s = (l - m) / T */
#define FUSED_NBIN 2048    /* its number of bins (s below -32 share the last) */

/* ---- parameters ----------------------------------------------------------------------- */

q35_sampling q35_sampling_default(void) {
  q35_sampling p;
  memset(&p, 0, sizeof p);
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  return p;
}

uint64_t q35_random_seed(void) {
  uint64_t x = 0;
  ssize_t got = getrandom(&x, sizeof x, 0);
  if (got != (ssize_t)sizeof x) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &x, sizeof x) != (ssize_t)sizeof x) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      x ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
           ((uint64_t)getpid() << 32);
    }
    if (fd >= 0) close(fd);
  }
  return x >> 11; /* below 2^53: exact in a JSON number */
}

int q35_sampling_validate(const q35_sampling *p, q35_err *err) {
  if (!p) return q35_seterr(err, "sampling parameters missing");
  if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
    return q35_seterr(err, "temperature %g is invalid: must be finite and >= 0 (0 = greedy)",
                      (double)p->temperature);
  if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
    return q35_seterr(err, "top_p %g is invalid: must be in (0, 1] (1 = off)", (double)p->top_p);
  if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
    return q35_seterr(err, "min_p %g is invalid: must be in [0, 1] (0 = off)", (double)p->min_p);
  if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
    return q35_seterr(err, "presence_penalty %g is invalid: must be in [-2, 2] (0 = off)",
                      (double)p->presence_penalty);
  if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
    return q35_seterr(err, "frequency_penalty %g is invalid: must be in [-2, 2] (0 = off)",
                      (double)p->frequency_penalty);
  if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
    return q35_seterr(err, "repetition_penalty %g is invalid: must be finite and > 0 (1 = off)",
                      (double)p->repetition_penalty);
  return 0;
}

/* ---- Philox4x32-10 ---------------------------------------------------------------------- */

void q35_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) { /* key schedule: bump by the Weyl constants between rounds */
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint64_t q35_draw_u53(uint64_t seed, uint64_t n) {
  uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), 0, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  q35_philox4x32_10(ctr, key, out);
  return ((((uint64_t)out[0]) << 32) | out[1]) >> 11;
}

/* ---- the exp ---------------------------------------------------------------------------
 * x <= 0. n = round(x * log2 e) via a fused multiply-add with the 1.5 * 2^23 rounding
 * constant; r = x - n ln2 (hi and lo parts, fused); exp(r) by a degree-7 Taylor polynomial
 * in Horner form (fused); times 2^n built from the exponent bits (n >= -126 here, so the
 * factor is a normal float). Only fmaf, one subtraction, one product by a power of two and
 * a comparison: each is correctly rounded, so any faithful twin of this sequence gives the
 * same bits. Accuracy is a few ulp, which only matters for the statistics. */

#define EXP_LOG2E 1.44269504088896341f
#define EXP_ROUND 0x1.8p23f
#define EXP_LN2HI 0.693145751953125f     /* 12 significant bits: n * hi is exact */
#define EXP_LN2LO 1.42860682030941723e-6f
#define EXP_MIN (-87.0f)
#define EXP_C7 (1.0f / 5040.0f)
#define EXP_C6 (1.0f / 720.0f)
#define EXP_C5 (1.0f / 120.0f)
#define EXP_C4 (1.0f / 24.0f)
#define EXP_C3 (1.0f / 6.0f)
#define EXP_C2 0.5f

float q35_sampler_exp(float x) {
  if (x < EXP_MIN) return 0.0f; /* also -inf */
  float n = fmaf(x, EXP_LOG2E, EXP_ROUND) - EXP_ROUND;
  float r = fmaf(-n, EXP_LN2HI, x);
  r = fmaf(-n, EXP_LN2LO, r);
  float q = fmaf(EXP_C7, r, EXP_C6);
  q = fmaf(q, r, EXP_C5);
  q = fmaf(q, r, EXP_C4);
  q = fmaf(q, r, EXP_C3);
  q = fmaf(q, r, EXP_C2);
  q = fmaf(q, r, 1.0f);
  q = fmaf(q, r, 1.0f);
  int32_t ni = (int32_t)n;
  uint32_t bits = (uint32_t)(ni + 127) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  return q * scale;
}

static inline uint64_t fix_w(float w) { return (uint64_t)(int64_t)(w * FIX_SCALE); }

/* floor(top_p * T) for top_p in (0, 1]: top_p = f * 2^(e - 24) with f a 24-bit integer. */
static u128 thr_topp(float top_p, u128 total) {
  int e;
  float fr = frexpf(top_p, &e); /* top_p = fr * 2^e, fr in [0.5, 1) */
  uint64_t f = (uint64_t)(fr * 0x1p24f);
  int sh = 24 - e; /* >= 23 since top_p <= 1 */
  if (sh >= 128) return 0;
  /* total < 2^93 and f < 2^24: the product fits in 128 bits */
  return (total * f) >> sh;
}

/* floor(k * T / 2^53) for k < 2^53 and T < 2^100, without overflow. */
static u128 thr_draw(uint64_t k, u128 total) {
  uint64_t th = (uint64_t)(total >> 64), tl = (uint64_t)total;
  return (((u128)k * th) << 11) + (((u128)k * tl) >> 53);
}

/* ---- SIMD dispatch ---------------------------------------------------------------------- */

static int detect_simd(void) {
#if Q35_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
#endif
  return 0;
}

int q35_sampler_simd_level(void) {
  int l = detect_simd();
  const char *e = getenv("Q35_SAMPLER_SIMD"); /* testing aid: cap the level */
  if (e && *e >= '0' && *e <= '9' && *e - '0' < l) l = *e - '0';
  return l >= 3 ? 3 : l >= 2 ? 2 : 0;
}

/* ---- workspace -------------------------------------------------------------------------- */

typedef struct { float v; int32_t id; } vid;

struct q35_sampler {
  int32_t n_vocab;
  int simd;
  float *lp;       /* penalized logits */
  int32_t *cnt;    /* per-token counts for the penalties (kept zero between calls) */
  float *w;        /* weights of the full row / candidate values */
  float *s;        /* candidate s values */
  float *tmp, *tmp2; /* selection scratch */
  int32_t *ids;    /* candidate ids (ascending) */
  u128 *bsum;      /* block sums */
  float *bmax;     /* maxima of the row's CHUNKs (top-p pass) */
  double *bins;    /* 2 * FUSED_NBIN estimate bins (top-p pass) */
  vid *pairs, *pairs2; /* reference sorts */
  int fused;       /* top-p in one pass: 1 on, 0 off, 2 testing (a deliberately wrong window) */
  int64_t n_fused, n_fused_miss; /* rows that took the one-pass top-p path; of them, misses */
};

q35_sampler *q35_sampler_new(int32_t n_vocab, q35_err *err) {
  if (n_vocab < 1 || n_vocab > (1 << 30)) {
    q35_seterr(err, "sampler: vocabulary size %d out of range [1, 2^30]", (int)n_vocab);
    return NULL;
  }
  q35_sampler *ws = calloc(1, sizeof *ws);
  if (!ws) goto oom;
  size_t n = (size_t)n_vocab + SLACK;
  ws->n_vocab = n_vocab;
  ws->simd = q35_sampler_simd_level();
  ws->lp = malloc(n * sizeof(float));
  ws->cnt = calloc(n, sizeof(int32_t));
  ws->w = malloc(n * sizeof(float));
  ws->s = malloc(n * sizeof(float));
  ws->tmp = malloc(n * sizeof(float));
  ws->tmp2 = malloc(n * sizeof(float));
  ws->ids = malloc(n * sizeof(int32_t));
  ws->bsum = malloc(((size_t)n_vocab / BLOCK + 2) * sizeof(u128));
  ws->bmax = malloc(((size_t)n_vocab / CHUNK + 2) * sizeof(float));
  ws->bins = malloc(2 * FUSED_NBIN * sizeof(double));
  ws->fused = 1;
  ws->pairs = malloc(n * sizeof(vid));
  ws->pairs2 = malloc(n * sizeof(vid));
  if (!ws->lp || !ws->cnt || !ws->w || !ws->s || !ws->tmp || !ws->tmp2 || !ws->ids ||
      !ws->bsum || !ws->bmax || !ws->bins || !ws->pairs || !ws->pairs2)
    goto oom;
  return ws;
oom:
  q35_sampler_free(ws);
  q35_seterr(err, "sampler: out of memory for a vocabulary of %d", (int)n_vocab);
  return NULL;
}

void q35_sampler_free(q35_sampler *ws) {
  if (!ws) return;
  free(ws->lp);
  free(ws->cnt);
  free(ws->w);
  free(ws->s);
  free(ws->tmp);
  free(ws->tmp2);
  free(ws->ids);
  free(ws->bsum);
  free(ws->bmax);
  free(ws->bins);
  free(ws->pairs);
  free(ws->pairs2);
  free(ws);
}

int32_t q35_sampler_n_vocab(const q35_sampler *ws) { return ws->n_vocab; }

void q35_sampler_set_simd(q35_sampler *ws, int level) {
  int l = detect_simd();
  ws->simd = level < l ? level : l;
  if (ws->simd == 1) ws->simd = 0;
}

void q35_sampler_set_fused(q35_sampler *ws, int mode) { ws->fused = mode >= 0 && mode <= 2 ? mode : 1; }

void q35_sampler_fused_stats(const q35_sampler *ws, int64_t *rows, int64_t *fallbacks) {
  if (rows) *rows = ws->n_fused;
  if (fallbacks) *fallbacks = ws->n_fused_miss;
}

/* 1 / T when T is a power of two whose reciprocal is a normal float (then x / T == x * (1/T)
 * bit for bit: both round the same exact real), else 0. */
static float pow2_recip(float t) {
  int e;
  float fr = frexpf(t, &e);
  if (fr != 0.5f || e < -124 || e > 126) return 0.0f;
  return ldexpf(1.0f, 1 - e);
}

/* ---- kernels: scalar ---------------------------------------------------------------------
 * Each has an AVX-512 twin below that must give identical results. */

/* Max of l and the first index holding NaN or +inf (-1 if none). */
static float scan_scalar(const float *l, int32_t n, int32_t *bad) {
  float m = -INFINITY;
  *bad = -1;
  for (int32_t i = 0; i < n; i++) {
    float x = l[i];
    if (x != x || x == INFINITY) {
      *bad = i;
      return m;
    }
    if (x > m) m = x;
  }
  return m;
}

static int32_t find_eq_scalar(const float *l, int32_t n, float v) {
  for (int32_t i = 0; i < n; i++)
    if (l[i] == v) return i;
  return -1;
}

/* ids of elements >= t, ascending. */
static int32_t filter_ge_scalar(const float *l, int32_t n, float t, int32_t *ids) {
  int32_t c = 0;
  for (int32_t i = 0; i < n; i++)
    if (l[i] >= t) ids[c++] = i;
  return c;
}

/* w[i] = exp((l[i] - m) / T); block sums of W (per BLOCK elements) into bsum. */
static void exp_row_scalar(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
    u128 acc = 0;
    for (int32_t i = b * BLOCK; i < e; i++) {
      w[i] = q35_sampler_exp((l[i] - m) / temp);
      acc += fix_w(w[i]);
    }
    bsum[b] = acc;
  }
}

/* Block sums of W over w >= cut. */
static void block_sums_scalar(const float *w, int32_t n, float cut, u128 *bsum) {
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
    u128 acc = 0;
    for (int32_t i = b * BLOCK; i < e; i++)
      if (w[i] >= cut) acc += fix_w(w[i]);
    bsum[b] = acc;
  }
}

/* Partition pass of the weighted selection: copy elements in [lo, hi] to out; mass of the
 * elements above hi and inside the window. */
static int32_t window_scalar(const float *a, int32_t n, float lo, float hi, float *out,
                             u128 *m_above, u128 *m_in) {
  u128 ab = 0, in = 0;
  int32_t c = 0;
  for (int32_t i = 0; i < n; i++) {
    float x = a[i];
    if (x > hi) {
      ab += fix_w(x);
    } else if (x >= lo) {
      in += fix_w(x);
      out[c++] = x;
    }
  }
  *m_above = ab;
  *m_in = in;
  return c;
}

static void exp_array_scalar(const float *x, float *y, int32_t n) {
  for (int32_t i = 0; i < n; i++) y[i] = q35_sampler_exp(x[i]);
}

/* Sum of W over a_j >= cut. */
static u128 wsum_ge_scalar(const float *a, int32_t n, float cut) {
  u128 acc = 0;
  for (int32_t j = 0; j < n; j++)
    if (a[j] >= cut) acc += fix_w(a[j]);
  return acc;
}

/* scan_scalar plus the maximum of every CHUNK elements into cmax. */
static float scan_chunks_scalar(const float *l, int32_t n, float *cmax, int32_t *bad) {
  float m = -INFINITY;
  *bad = -1;
  for (int32_t b = 0; b * CHUNK < n; b++) {
    int32_t e = (b + 1) * CHUNK < n ? (b + 1) * CHUNK : n;
    float bm = -INFINITY;
    for (int32_t i = b * CHUNK; i < e; i++) {
      float x = l[i];
      if (x != x || x == INFINITY) {
        *bad = i;
        return m;
      }
      if (x > bm) bm = x;
    }
    cmax[b] = bm;
    if (bm > m) m = bm;
  }
  return m;
}

/* The one pass of the top-p path: w = exp((l - m) / T) of every element (not stored); the
 * exact total of W; per block b, the mass of w > hi in bsum[b], and the elements with
 * lo <= w <= hi copied out in order (values only), cstart[b] the index of the block's first.
 * Returns their count. */
static int32_t fused_scalar(const float *l, int32_t n, float m, float temp, float lo, float hi,
                            u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  u128 tot = 0;
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
    u128 acc = 0;
    cstart[b] = c;
    for (int32_t i = b * BLOCK; i < e; i++) {
      float w = q35_sampler_exp((l[i] - m) / temp);
      uint64_t W = fix_w(w);
      tot += W;
      if (w > hi) acc += W;
      else if (w >= lo) cw[c++] = w;
    }
    bsum[b] = acc;
  }
  *total = tot;
  return c;
}

/* ---- kernels: AVX-512 ------------------------------------------------------------------- */
#if Q35_X86
#define T512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))

T512 static inline __m512 exp512(__m512 x) {
  __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(EXP_MIN)); /* masked lanes: any finite value */
  __m512 rc = _mm512_set1_ps(EXP_ROUND);
  __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(EXP_LOG2E), rc), rc);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2LO), r);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(EXP_C7), r, _mm512_set1_ps(EXP_C6));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C5));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C4));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C3));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_C2));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  __m512i ni = _mm512_cvttps_epi32(n);
  __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23));
  return _mm512_maskz_mul_ps((__mmask16)~zero, q, scale);
}

/* W = trunc(w * 2^61) of 16 lanes, accumulated as high and low 32-bit halves in 64-bit
 * lanes (each add < 2^32, so 2^32 adds cannot overflow). */
T512 static inline void acc_fix512(__m512 w, __m512i *hi, __m512i *lo) {
  __m512 ws = _mm512_mul_ps(w, _mm512_set1_ps(FIX_SCALE));
  __m512i a = _mm512_cvttps_epi64(_mm512_castps512_ps256(ws));
  __m512i b = _mm512_cvttps_epi64(_mm512_extractf32x8_ps(ws, 1));
  __m512i m32 = _mm512_set1_epi64(0xffffffffll);
  *hi = _mm512_add_epi64(*hi, _mm512_add_epi64(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(b, 32)));
  *lo = _mm512_add_epi64(*lo, _mm512_add_epi64(_mm512_and_si512(a, m32), _mm512_and_si512(b, m32)));
}

T512 static inline u128 fold512(__m512i hi, __m512i lo) {
  uint64_t h[8], l[8];
  _mm512_storeu_si512(h, hi);
  _mm512_storeu_si512(l, lo);
  u128 s = 0;
  for (int i = 0; i < 8; i++) s += ((u128)h[i] << 32) + l[i];
  return s;
}

T512 static float scan_512(const float *l, int32_t n, int32_t *bad) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  __m512 pinf = _mm512_set1_ps(INFINITY);
  __mmask16 badm = 0;
  int32_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 a = _mm512_loadu_ps(l + i), b = _mm512_loadu_ps(l + i + 16);
    __m512 c = _mm512_loadu_ps(l + i + 32), d = _mm512_loadu_ps(l + i + 48);
    /* NaN or +inf: not (x < +inf) unless x is -inf or finite */
    badm |= _mm512_cmp_ps_mask(a, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(b, pinf, _CMP_NLT_UQ) |
            _mm512_cmp_ps_mask(c, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(d, pinf, _CMP_NLT_UQ);
    m0 = _mm512_max_ps(m0, a);
    m1 = _mm512_max_ps(m1, b);
    m2 = _mm512_max_ps(m2, c);
    m3 = _mm512_max_ps(m3, d);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_loadu_ps(l + i);
    badm |= _mm512_cmp_ps_mask(a, pinf, _CMP_NLT_UQ);
    m0 = _mm512_max_ps(m0, a);
  }
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
    __m512 a = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, l + i);
    badm |= _mm512_cmp_ps_mask(a, pinf, _CMP_NLT_UQ);
    m0 = _mm512_max_ps(m0, a);
  }
  if (badm) return scan_scalar(l, n, bad);
  *bad = -1;
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

T512 static int32_t find_eq_512(const float *l, int32_t n, float v) {
  __m512 vv = _mm512_set1_ps(v);
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), vv, _CMP_EQ_OQ);
    if (k) return i + __builtin_ctz(k);
  }
  int32_t j = find_eq_scalar(l + i, n - i, v);
  return j < 0 ? -1 : i + j;
}

T512 static int32_t filter_ge_512(const float *l, int32_t n, float t, int32_t *ids) {
  __m512 tv = _mm512_set1_ps(t);
  __m512i iv = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i step = _mm512_set1_epi32(16);
  int32_t c = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), tv, _CMP_GE_OQ);
    if (k) { /* compress into a register, then a plain store (fast on every x86) */
      _mm512_storeu_si512(ids + c, _mm512_maskz_compress_epi32(k, iv));
      c += __builtin_popcount(k);
    }
    iv = _mm512_add_epi32(iv, step);
  }
  for (; i < n; i++)
    if (l[i] >= t) ids[c++] = i;
  return c;
}

T512 static void exp_row_512_pow2(const float *l, int32_t n, float m, float inv, float *w, u128 *bsum);
T512 static void exp_row_512(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum) {
  float inv = pow2_recip(temp);
  if (inv != 0.0f) { exp_row_512_pow2(l, n, m, inv, w, bsum); return; }
  __m512 mv = _mm512_set1_ps(m), tv = _mm512_set1_ps(temp);
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t s = b * BLOCK, e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n, i = s;
    __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
    for (; i + 16 <= e; i += 16) {
      __m512 x = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(l + i), mv), tv);
      __m512 y = exp512(x);
      _mm512_storeu_ps(w + i, y);
      acc_fix512(y, &hi, &lo);
    }
    if (i < e) {
      __mmask16 k = (__mmask16)((1u << (e - i)) - 1);
      __m512 x = _mm512_div_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(mv, k, l + i), mv), tv);
      __m512 y = _mm512_maskz_mov_ps(k, exp512(x));
      _mm512_mask_storeu_ps(w + i, k, y);
      acc_fix512(y, &hi, &lo);
    }
    bsum[b] = fold512(hi, lo);
  }
}

/* exp_row_512 for a power-of-two temperature: x / T == x * (1 / T) exactly. */
T512 static void exp_row_512_pow2(const float *l, int32_t n, float m, float inv, float *w, u128 *bsum) {
  __m512 mv = _mm512_set1_ps(m), iv = _mm512_set1_ps(inv);
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t s = b * BLOCK, e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n, i = s;
    __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
    for (; i + 16 <= e; i += 16) {
      __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(l + i), mv), iv);
      __m512 y = exp512(x);
      _mm512_storeu_ps(w + i, y);
      acc_fix512(y, &hi, &lo);
    }
    if (i < e) {
      __mmask16 k = (__mmask16)((1u << (e - i)) - 1);
      __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(mv, k, l + i), mv), iv);
      __m512 y = _mm512_maskz_mov_ps(k, exp512(x));
      _mm512_mask_storeu_ps(w + i, k, y);
      acc_fix512(y, &hi, &lo);
    }
    bsum[b] = fold512(hi, lo);
  }
}

T512 static void block_sums_512(const float *w, int32_t n, float cut, u128 *bsum) {
  __m512 cv = _mm512_set1_ps(cut);
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t s = b * BLOCK, e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n, i = s;
    __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
    for (; i + 16 <= e; i += 16) {
      __m512 x = _mm512_loadu_ps(w + i);
      acc_fix512(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, cv, _CMP_GE_OQ), x), &hi, &lo);
    }
    if (i < e) {
      __mmask16 k = (__mmask16)((1u << (e - i)) - 1);
      __m512 x = _mm512_maskz_loadu_ps(k, w + i);
      acc_fix512(_mm512_maskz_mov_ps(k & _mm512_cmp_ps_mask(x, cv, _CMP_GE_OQ), x), &hi, &lo);
    }
    bsum[b] = fold512(hi, lo);
  }
}

T512 static int32_t window_512(const float *a, int32_t n, float lo, float hi, float *out,
                               u128 *m_above, u128 *m_in) {
  __m512 lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi);
  __m512i ah = _mm512_setzero_si512(), al = ah, ih = ah, il = ah;
  int32_t c = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(a + i);
    __mmask16 up = _mm512_cmp_ps_mask(x, hv, _CMP_GT_OQ);
    __mmask16 in = _mm512_cmp_ps_mask(x, lv, _CMP_GE_OQ) & (__mmask16)~up;
    acc_fix512(_mm512_maskz_mov_ps(up, x), &ah, &al);
    if (in) {
      acc_fix512(_mm512_maskz_mov_ps(in, x), &ih, &il);
      _mm512_storeu_ps(out + c, _mm512_maskz_compress_ps(in, x));
      c += __builtin_popcount(in);
    }
  }
  u128 ab = fold512(ah, al), inm = fold512(ih, il);
  for (; i < n; i++) {
    float x = a[i];
    if (x > hi) {
      ab += fix_w(x);
    } else if (x >= lo) {
      inm += fix_w(x);
      out[c++] = x;
    }
  }
  *m_above = ab;
  *m_in = inm;
  return c;
}

T512 static u128 wsum_ge_512(const float *a, int32_t n, float cut) {
  __m512 cv = _mm512_set1_ps(cut);
  __m512i hi = _mm512_setzero_si512(), lo = hi;
  int32_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 x = _mm512_loadu_ps(a + j);
    acc_fix512(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, cv, _CMP_GE_OQ), x), &hi, &lo);
  }
  if (j < n) {
    __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
    __m512 x = _mm512_maskz_loadu_ps(k, a + j);
    acc_fix512(_mm512_maskz_mov_ps(k & _mm512_cmp_ps_mask(x, cv, _CMP_GE_OQ), x), &hi, &lo);
  }
  return fold512(hi, lo);
}

T512 static float scan_chunks_512(const float *l, int32_t n, float *cmax, int32_t *bad) {
  __m512 pinf = _mm512_set1_ps(INFINITY), ninf = _mm512_set1_ps(-INFINITY), g = ninf;
  __mmask16 badm = 0;
  int32_t i = 0, b = 0;
  for (; i + CHUNK <= n; i += CHUNK, b++) { /* CHUNK = 64: four vectors */
    __m512 x0 = _mm512_loadu_ps(l + i), x1 = _mm512_loadu_ps(l + i + 16);
    __m512 x2 = _mm512_loadu_ps(l + i + 32), x3 = _mm512_loadu_ps(l + i + 48);
    badm |= _mm512_cmp_ps_mask(x0, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(x1, pinf, _CMP_NLT_UQ) |
            _mm512_cmp_ps_mask(x2, pinf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(x3, pinf, _CMP_NLT_UQ);
    __m512 mm = _mm512_max_ps(_mm512_max_ps(x0, x1), _mm512_max_ps(x2, x3));
    cmax[b] = _mm512_reduce_max_ps(mm);
    g = _mm512_max_ps(g, mm);
  }
  if (i < n) {
    __m512 mm = ninf;
    for (; i < n; i += 16) {
      __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
      __m512 x = _mm512_mask_loadu_ps(ninf, k, l + i);
      badm |= _mm512_cmp_ps_mask(x, pinf, _CMP_NLT_UQ);
      mm = _mm512_max_ps(mm, x);
    }
    cmax[b] = _mm512_reduce_max_ps(mm);
    g = _mm512_max_ps(g, mm);
  }
  if (badm) return scan_chunks_scalar(l, n, cmax, bad);
  *bad = -1;
  return _mm512_reduce_max_ps(g);
}

/* fused_scalar's twin; pow2: multiply by inv = 1 / T instead of dividing (same bits).
 * W of lanes 0-7 and 8-15 goes into separate 64-bit lanes: W <= 2^61, so four vectors add at
 * most 2^63 to a lane; every four vectors the lanes are split into 32-bit halves and added
 * into wide accumulators (as acc_fix512 does per vector). */
T512 static inline __attribute__((always_inline)) int32_t
fused_512_body(const float *l, int32_t n, float m, float temp, float inv, int pow2, float lo,
               float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  __m512 mv = _mm512_set1_ps(m), tv = _mm512_set1_ps(temp), invv = _mm512_set1_ps(inv);
  __m512 lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi), sc = _mm512_set1_ps(FIX_SCALE);
  __m512i m32 = _mm512_set1_epi64(0xffffffffll), z = _mm512_setzero_si512();
  __m512i th = z, tl = z; /* total: high and low 32-bit halves */
  int32_t c = 0;
  for (int32_t b = 0; b * BLOCK < n; b++) {
    int32_t e = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n, i = b * BLOCK;
    __m512i ah = z, al = z; /* mass above hi, halves */
    cstart[b] = c;
    while (i < e) {
      __m512i ta = z, tb = z, ua = z, ub = z;
      int full = e - i >= 64; /* four whole vectors: no masks (the common case) */
      for (int u = 0; u < 4 && i < e; u++, i += 16) {
        __mmask16 k = full || e - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (e - i)) - 1);
        __m512 d = _mm512_sub_ps(full ? _mm512_loadu_ps(l + i) : _mm512_mask_loadu_ps(mv, k, l + i), mv);
        __m512 x = pow2 ? _mm512_mul_ps(d, invv) : _mm512_div_ps(d, tv);
        __m512 y = full ? exp512(x) : _mm512_maskz_mov_ps(k, exp512(x));
        __m512 ys = _mm512_mul_ps(y, sc);
        __m512i wa = _mm512_cvttps_epi64(_mm512_castps512_ps256(ys));
        __m512i wb = _mm512_cvttps_epi64(_mm512_extractf32x8_ps(ys, 1));
        ta = _mm512_add_epi64(ta, wa);
        tb = _mm512_add_epi64(tb, wb);
        /* branch-free: the masks are data dependent and often mixed */
        __mmask16 up = _mm512_cmp_ps_mask(y, hv, _CMP_GT_OQ);
        ua = _mm512_mask_add_epi64(ua, (__mmask8)up, ua, wa);
        ub = _mm512_mask_add_epi64(ub, (__mmask8)(up >> 8), ub, wb);
        __mmask16 in = _mm512_mask_cmp_ps_mask(k & (__mmask16)~up, y, lv, _CMP_GE_OQ);
        _mm512_storeu_ps(cw + c, _mm512_maskz_compress_ps(in, y));
        c += __builtin_popcount(in);
      }
      th = _mm512_add_epi64(th, _mm512_add_epi64(_mm512_srli_epi64(ta, 32), _mm512_srli_epi64(tb, 32)));
      tl = _mm512_add_epi64(tl, _mm512_add_epi64(_mm512_and_si512(ta, m32), _mm512_and_si512(tb, m32)));
      ah = _mm512_add_epi64(ah, _mm512_add_epi64(_mm512_srli_epi64(ua, 32), _mm512_srli_epi64(ub, 32)));
      al = _mm512_add_epi64(al, _mm512_add_epi64(_mm512_and_si512(ua, m32), _mm512_and_si512(ub, m32)));
    }
    bsum[b] = fold512(ah, al);
  }
  *total = fold512(th, tl);
  return c;
}

T512 static int32_t fused_512(const float *l, int32_t n, float m, float temp, float lo, float hi,
                              u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
  float inv = pow2_recip(temp);
  if (inv != 0.0f) return fused_512_body(l, n, m, temp, inv, 1, lo, hi, bsum, cstart, total, cw);
  return fused_512_body(l, n, m, temp, 0.0f, 0, lo, hi, bsum, cstart, total, cw);
}

T512 static void exp_array_512(const float *x, float *y, int32_t n) {
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, k, exp512(_mm512_maskz_loadu_ps(k, x + i)));
  }
}
#endif /* Q35_X86 */

/* ---- kernel dispatch ---- */

static float k_scan(const q35_sampler *ws, const float *l, int32_t n, int32_t *bad) {
#if Q35_X86
  if (ws->simd >= 3) return scan_512(l, n, bad);
#endif
  return scan_scalar(l, n, bad);
}
static int32_t k_find_eq(const q35_sampler *ws, const float *l, int32_t n, float v) {
#if Q35_X86
  if (ws->simd >= 3) return find_eq_512(l, n, v);
#endif
  return find_eq_scalar(l, n, v);
}
static int32_t k_filter_ge(const q35_sampler *ws, const float *l, int32_t n, float t, int32_t *ids) {
#if Q35_X86
  if (ws->simd >= 3) return filter_ge_512(l, n, t, ids);
#endif
  return filter_ge_scalar(l, n, t, ids);
}
static void k_exp_row(const q35_sampler *ws, const float *l, int32_t n, float m, float temp,
                      float *w, u128 *bsum) {
#if Q35_X86
  if (ws->simd >= 3) { exp_row_512(l, n, m, temp, w, bsum); return; }
#endif
  exp_row_scalar(l, n, m, temp, w, bsum);
}
static void k_block_sums(const q35_sampler *ws, const float *w, int32_t n, float cut, u128 *bsum) {
#if Q35_X86
  if (ws->simd >= 3) { block_sums_512(w, n, cut, bsum); return; }
#endif
  block_sums_scalar(w, n, cut, bsum);
}
static int32_t k_window(const q35_sampler *ws, const float *a, int32_t n, float lo, float hi,
                        float *out, u128 *m_above, u128 *m_in) {
#if Q35_X86
  if (ws->simd >= 3) return window_512(a, n, lo, hi, out, m_above, m_in);
#endif
  return window_scalar(a, n, lo, hi, out, m_above, m_in);
}
static float k_scan_chunks(const q35_sampler *ws, const float *l, int32_t n, float *cmax,
                           int32_t *bad) {
#if Q35_X86
  if (ws->simd >= 3) return scan_chunks_512(l, n, cmax, bad);
#endif
  return scan_chunks_scalar(l, n, cmax, bad);
}
static u128 k_wsum_ge(const q35_sampler *ws, const float *a, int32_t n, float cut) {
#if Q35_X86
  if (ws->simd >= 3) return wsum_ge_512(a, n, cut);
#endif
  return wsum_ge_scalar(a, n, cut);
}
static int32_t k_fused(const q35_sampler *ws, const float *l, int32_t n, float m, float temp,
                       float lo, float hi, u128 *bsum, int32_t *cstart, u128 *total, float *cw) {
#if Q35_X86
  if (ws->simd >= 3) return fused_512(l, n, m, temp, lo, hi, bsum, cstart, total, cw);
#endif
  return fused_scalar(l, n, m, temp, lo, hi, bsum, cstart, total, cw);
}
static void k_exp_array(int simd, const float *x, float *y, int32_t n) {
#if Q35_X86
  if (simd >= 3) { exp_array_512(x, y, n); return; }
#endif
  (void)simd;
  exp_array_scalar(x, y, n);
}

void q35_sampler_exp_array(const float *x, float *y, int32_t n) {
  k_exp_array(q35_sampler_simd_level(), x, y, n);
}

/* ---- shared steps ----------------------------------------------------------------------- */

static int penalties_active(const q35_sampling *p) {
  return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
         p->repetition_penalty != 1.0f;
}

static int check_inputs(const q35_sampler *ws, const float *logits, int32_t n_vocab,
                        const q35_sampling *p, const int32_t *history, int32_t n_history,
                        int32_t n_prompt, int32_t n_top, q35_sample_result *out, q35_err *err) {
  if (!ws || !logits || !out) return q35_seterr(err, "sample: missing workspace, logits or output");
  if (n_vocab < 1 || n_vocab > ws->n_vocab)
    return q35_seterr(err, "sample: n_vocab %d out of range [1, %d] (the workspace's size)",
                      (int)n_vocab, (int)ws->n_vocab);
  if (q35_sampling_validate(p, err)) return -1;
  if (n_history < 0 || (n_history > 0 && !history))
    return q35_seterr(err, "sample: bad history (n_history %d)", (int)n_history);
  if (n_prompt < 0 || n_prompt > n_history)
    return q35_seterr(err, "sample: n_prompt %d out of range [0, n_history = %d]", (int)n_prompt,
                      (int)n_history);
  for (int32_t i = 0; i < n_history; i++)
    if (history[i] < 0 || history[i] >= n_vocab)
      return q35_seterr(err, "sample: history token %d (at %d) out of range [0, %d)",
                        (int)history[i], (int)i, (int)n_vocab);
  if (n_top < -1 || n_top > Q35_MAX_TOP_LOGPROBS)
    return q35_seterr(err, "sample: n_top %d out of range [-1, %d]", (int)n_top,
                      Q35_MAX_TOP_LOGPROBS);
  return 0;
}

/* Penalties into ws->lp (a copy of the row). */
static void apply_penalties(q35_sampler *ws, const float *logits, int32_t n_vocab,
                            const q35_sampling *p, const int32_t *history, int32_t n_history,
                            int32_t n_prompt) {
  float *lp = ws->lp;
  int32_t *cnt = ws->cnt;
  memcpy(lp, logits, (size_t)n_vocab * sizeof(float));
  const int32_t REP_DONE = 0x40000000;
  for (int32_t i = n_prompt; i < n_history; i++) cnt[history[i]]++;
  if (p->repetition_penalty != 1.0f) {
    float r = p->repetition_penalty;
    for (int32_t i = 0; i < n_history; i++) {
      int32_t t = history[i];
      if (cnt[t] & REP_DONE) continue;
      cnt[t] |= REP_DONE;
      lp[t] = lp[t] > 0.0f ? lp[t] / r : lp[t] * r;
    }
  }
  if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
    for (int32_t i = n_prompt; i < n_history; i++) {
      int32_t t = history[i];
      int32_t c = cnt[t] & ~REP_DONE;
      if (c == 0) continue; /* already applied (counts are zeroed below as we go) */
      float d = p->presence_penalty + p->frequency_penalty * (float)c;
      lp[t] = lp[t] - d;
      cnt[t] &= REP_DONE;
    }
  }
  for (int32_t i = 0; i < n_history; i++) cnt[history[i]] = 0;
}

static int row_error(q35_err *err, const float *l, int32_t bad, int penalized) {
  float x = l[bad];
  if (penalized)
    return q35_seterr(err, "logits: entry %d is %s after repetition_penalty (overflow)",
                      (int)bad, x != x ? "NaN" : "+inf");
  return q35_seterr(err, "logits: entry %d is %s (logits must be finite or -inf)", (int)bad,
                    x != x ? "NaN" : "+inf");
}

/* log(sum exp(l)) of a row with maximum m: m + log(sum exp(l - m)) with the shared exp and
 * double accumulation. Shared by both paths, so their log-probabilities agree exactly. */
/* m + log(sum of exp(l - m)). The sum runs in eight double lanes (element i in lane i % 8),
 * combined pairwise at the end: a fixed order, and eight independent add chains instead of one
 * (one chain over a 248k vocabulary was most of a logprobs row's cost). */
static double row_lse(const q35_sampler *ws, const float *l, int32_t n, float m) {
  float buf[256], ex[256];
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int32_t i = 0; i < n; i += 256) {
    int32_t c = n - i < 256 ? n - i : 256;
    for (int32_t j = 0; j < c; j++) buf[j] = l[i + j] - m;
    k_exp_array(ws->simd, buf, ex, c);
    int32_t j = 0;
    for (; j + 8 <= c; j += 8)
      for (int q = 0; q < 8; q++) acc[q] += (double)ex[j + q];
    for (; j < c; j++) acc[j % 8] += (double)ex[j]; /* i is a multiple of 8: lane (i + j) % 8 */
  }
  const double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  return (double)m + log(sum);
}

/* The fast path's alternatives: one scan keeping the best n_top (value desc, id asc) in an
 * insertion-sorted list; scanning ids in ascending order, an equal value never displaces an
 * earlier id. */
static void fill_logprobs(const q35_sampler *ws, const float *l, int32_t n, float m, int32_t tok,
                          int32_t n_top, q35_sample_result *out) {
  out->n_top = 0;
  if (n_top < 0) {
    out->logprob = NAN;
    return;
  }
  double lse = row_lse(ws, l, n, m);
  out->logprob = (float)((double)l[tok] - lse);
  if (n_top > n) n_top = n;
  int32_t k = 0;
  for (int32_t i = 0; i < n && n_top > 0; i++) {
    float x = l[i];
    if (k == n_top && !(x > l[out->top_ids[k - 1]])) continue;
    int32_t j = k < n_top ? k++ : k - 1;
    while (j > 0 && x > l[out->top_ids[j - 1]]) {
      out->top_ids[j] = out->top_ids[j - 1];
      j--;
    }
    out->top_ids[j] = i;
  }
  out->n_top = k;
  for (int32_t j = 0; j < k; j++) out->top_logprobs[j] = (float)((double)l[out->top_ids[j]] - lse);
}

/* ---- the reference ---------------------------------------------------------------------- */

static int cmp_vid_desc(const void *a, const void *b) {
  const vid *x = a, *y = b;
  if (x->v > y->v) return -1;
  if (x->v < y->v) return 1;
  return (x->id > y->id) - (x->id < y->id);
}
static int cmp_vid_id(const void *a, const void *b) {
  const vid *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

int q35_sample_ref(q35_sampler *ws, const float *logits, int32_t n_vocab, const q35_sampling *p,
                   const int32_t *history, int32_t n_history, int32_t n_prompt, int32_t n_top,
                   q35_sample_result *out, q35_err *err) {
  if (check_inputs(ws, logits, n_vocab, p, history, n_history, n_prompt, n_top, out, err)) return -1;
  const int32_t V = n_vocab;
  /* 0. penalties */
  for (int32_t i = 0; i < V; i++) {
    float x = logits[i];
    if (x != x || x == INFINITY) return row_error(err, logits, i, 0);
  }
  apply_penalties(ws, logits, V, p, history, n_history, n_prompt);
  const float *l = ws->lp;
  float m = -INFINITY;
  for (int32_t i = 0; i < V; i++) {
    if (l[i] != l[i] || l[i] == INFINITY) return row_error(err, l, i, 1);
    if (l[i] > m) m = l[i];
  }
  if (m == -INFINITY) return q35_seterr(err, "logits: all %d entries are -inf", (int)V);
  int32_t tok = -1;
  if (p->temperature == 0.0f) {
    /* 1. greedy: lowest id holding the maximum */
    for (int32_t i = 0; i < V && tok < 0; i++)
      if (l[i] == m) tok = i;
  } else {
    /* 2. s = (l - max) / T; sort descending, ties by id */
    vid *a = ws->pairs;
    for (int32_t i = 0; i < V; i++) {
      a[i].v = (l[i] - m) / p->temperature;
      a[i].id = i;
    }
    qsort(a, (size_t)V, sizeof *a, cmp_vid_desc);
    /* 3. top-k with ties kept */
    int32_t K = (p->top_k <= 0 || p->top_k >= V) ? V : (int32_t)p->top_k;
    float kth = a[K - 1].v;
    int32_t n1 = K;
    while (n1 < V && a[n1].v >= kth) n1++;
    /* 4. w = exp(s), fixed-point total */
    vid *b = ws->pairs2;
    u128 t1 = 0;
    float wmax = 0.0f;
    for (int32_t j = 0; j < n1; j++) {
      b[j].v = q35_sampler_exp(a[j].v);
      b[j].id = a[j].id;
      t1 += fix_w(b[j].v);
      if (b[j].v > wmax) wmax = b[j].v;
    }
    /* 5. top-p by value: walk groups of equal w in descending order */
    float cut = 0.0f;
    if (p->top_p < 1.0f) {
      qsort(b, (size_t)n1, sizeof *b, cmp_vid_desc);
      u128 thr = thr_topp(p->top_p, t1), s = 0;
      float vstar = b[0].v;
      for (int32_t j = 0; j < n1;) {
        int32_t g = j;
        u128 gm = 0;
        while (g < n1 && b[g].v == b[j].v) gm += fix_w(b[g++].v);
        if (s > thr) break;
        vstar = b[j].v;
        s += gm;
        j = g;
      }
      cut = vstar;
    }
    /* 6. min-p */
    if (p->min_p > 0.0f && p->min_p * wmax > cut) cut = p->min_p * wmax;
    /* 7. draw over the survivors in ascending id */
    int32_t n2 = 0;
    for (int32_t j = 0; j < n1; j++)
      if (b[j].v >= cut) b[n2++] = b[j];
    qsort(b, (size_t)n2, sizeof *b, cmp_vid_id);
    u128 t2 = 0;
    for (int32_t j = 0; j < n2; j++) t2 += fix_w(b[j].v);
    u128 thr = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
    tok = b[n2 - 1].id;
    for (int32_t j = 0; j < n2; j++) {
      r += fix_w(b[j].v);
      if (r > thr) {
        tok = b[j].id;
        break;
      }
    }
  }
  out->token = tok;
  out->n_top = 0;
  out->logprob = NAN;
  if (n_top >= 0) {
    /* alternatives by sorting the row (independent of the fast path's scan) */
    double lse = row_lse(ws, l, V, m);
    out->logprob = (float)((double)l[tok] - lse);
    vid *a = ws->pairs;
    for (int32_t i = 0; i < V; i++) {
      a[i].v = l[i];
      a[i].id = i;
    }
    qsort(a, (size_t)V, sizeof *a, cmp_vid_desc);
    out->n_top = n_top < V ? n_top : V;
    for (int32_t j = 0; j < out->n_top; j++) {
      out->top_ids[j] = a[j].id;
      out->top_logprobs[j] = (float)((double)a[j].v - lse);
    }
  }
  return 0;
}

/* ---- the fast path ---------------------------------------------------------------------- */

static void sort_desc_floats(float *a, int32_t n) {
  for (int32_t i = 1; i < n; i++) {
    float x = a[i];
    int32_t j = i;
    while (j > 0 && a[j - 1] < x) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = x;
  }
}

/* Sort non-negative floats descending: radix sort on the bits (monotone for x >= 0). */
static void sort_desc_w(float *a, int32_t n) {
  if (n <= 32) {
    sort_desc_floats(a, n);
    return;
  }
  uint32_t buf[2][256], *src = buf[0], *dst = buf[1];
  memcpy(src, a, (size_t)n * 4);
  for (int sh = 0; sh < 32; sh += 8) {
    int32_t cnt[257] = {0};
    for (int32_t i = 0; i < n; i++) cnt[((src[i] >> sh) & 255) + 1]++;
    for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
    for (int32_t i = 0; i < n; i++) dst[cnt[(src[i] >> sh) & 255]++] = src[i];
    uint32_t *t = src; src = dst; dst = t;
  }
  for (int32_t i = 0; i < n; i++) memcpy(&a[i], &src[n - 1 - i], 4);
}

static int cmp_float_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

/* k-th largest (1-based) of a[0..n) by quickselect; reorders a. */
static float select_kth_largest(float *a, int32_t n, int32_t k) {
  int32_t lo = 0, hi = n - 1, want = k - 1;
  while (hi - lo > 16) {
    /* median of three as pivot; three-way partition keeps ties together */
    float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
    float piv = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
    int32_t lt = lo, i = lo, gt = hi;
    while (i <= gt) { /* [lo, lt) > piv, [lt, i) == piv, (gt, hi] < piv */
      if (a[i] > piv) {
        float t = a[i]; a[i] = a[lt]; a[lt] = t; lt++; i++;
      } else if (a[i] < piv) {
        float t = a[i]; a[i] = a[gt]; a[gt] = t; gt--;
      } else {
        i++;
      }
    }
    if (want < lt) hi = lt - 1;
    else if (want > gt) lo = gt + 1;
    else return piv;
  }
  sort_desc_floats(a + lo, hi - lo + 1);
  return a[want];
}

/* Walk a descending array in groups of equal values: the last group value whose mass
 * strictly above (base + groups before it) is <= thr. */
static float scan_sorted(const float *t, int32_t n, u128 base, u128 thr) {
  float vstar = t[0];
  u128 s = base;
  for (int32_t j = 0; j < n;) {
    int32_t g = j;
    u128 gm = 0;
    while (g < n && t[g] == t[j]) gm += fix_w(t[g++]);
    if (s > thr) break;
    vstar = t[j];
    s += gm;
    j = g;
  }
  return vstar;
}

/* v* of the top-p step: the smallest value v of a[0..n) (weights, all >= 0) with
 * S(v) = sum_{a_j > v} W_j <= thr. Works on copies in s1/s2 (n + SLACK floats each).
 * Each round picks a window [lo, hi] of values from a sample, around where the sample's
 * estimated mass crosses the target; one pass gives the exact mass above the window and in
 * it and copies the window out; exact integer tests decide whether v* is above, inside or
 * below, and only the part that holds it is kept. */
static float select_vstar(const q35_sampler *ws, const float *a, int32_t n, u128 mass, u128 thr,
                          float *s1, float *s2) {
  u128 base = 0; /* mass of elements known to be above everything in the current array */
  const float *cur = a;
  float *bufs[2] = {s1, s2};
  int which = 0;
  float samp[256];
  for (;;) {
    if (n <= 48) {
      float *t = bufs[which];
      if (t != cur) memcpy(t, cur, (size_t)n * sizeof(float));
      sort_desc_floats(t, n);
      return scan_sorted(t, n, base, thr);
    }
    /* sample and estimate: the sample's own cumulative mass, normalized by its total, against
     * the exact fraction still needed (need / mass). A sample holding far less mass than
     * expected means heavy entries it missed: look above its maximum first. */
    int32_t ms = n < 256 ? n : 256;
    for (int32_t j = 0; j < ms; j++) samp[j] = cur[(int64_t)j * n / ms];
    sort_desc_w(samp, ms);
    u128 need = thr - base, stot = 0, acc = 0;
    for (int32_t j = 0; j < ms; j++) stot += fix_w(samp[j]);
    int32_t jc = ms - 1; /* first sample index where the estimate passes the target */
    double frac = (double)need / (double)mass * (double)stot;
    for (int32_t j = 0; j < ms; j++) {
      acc += fix_w(samp[j]);
      if ((double)acc > frac) {
        jc = j;
        break;
      }
    }
    int32_t d = 8 + ms / 16; /* wide: a miss costs a full extra pass, a wide window little */
    float hi = jc - d < 0 ? INFINITY : samp[jc - d];
    float lo = jc + d >= ms ? 0.0f : samp[jc + d];
    if (stot * (u128)n < (mass / 4) * (u128)ms) { /* hidden heavy entries */
      hi = INFINITY;
      lo = nextafterf(samp[0], INFINITY);
    }
    float *out = bufs[which];
    if (out == cur) out = bufs[which ^ 1];
    u128 ab, in;
    int32_t nb = k_window(ws, cur, n, lo, hi, out, &ab, &in);
    if (base + ab > thr) {
      /* v* is above the window: keep (hi, inf) */
      nb = k_window(ws, cur, n, nextafterf(hi, INFINITY), INFINITY, out, &ab, &in);
      mass = in;
    } else if (base + ab + in <= thr) {
      /* v* is below the window, or is the window's smallest value if nothing is below */
      float mn = out[0];
      for (int32_t j = 1; j < nb; j++) mn = out[j] < mn ? out[j] : mn;
      u128 rest = mass - ab - in;
      nb = k_window(ws, cur, n, 0.0f, nextafterf(lo, -INFINITY), out, &ab, &in);
      if (nb == 0 || rest == 0) return mn;
      mass = in;
    } else {
      mass = in;
    }
    base += ab;
    if (nb == n) {
      /* no progress (e.g. many equal values): one value, or sort and scan */
      float mn = out[0], mx = out[0];
      for (int32_t j = 1; j < nb; j++) {
        mn = out[j] < mn ? out[j] : mn;
        mx = out[j] > mx ? out[j] : mx;
      }
      if (mn == mx) return mx;
      qsort(out, (size_t)nb, sizeof(float), cmp_float_desc);
      return scan_sorted(out, nb, base, thr);
    }
    cur = out;
    n = nb;
    which = (out == bufs[0]) ? 1 : 0;
  }
}

/* The steps after top-k on an ascending list of candidate ids whose s = (l - m) / T values
 * are in s[0..n) (every top-k survivor is in the list; entries with s < kth are dropped). */
static int32_t sample_list(q35_sampler *ws, const float *l, const q35_sampling *p, int32_t *ids,
                           float *s, int32_t n, float kth) {
  (void)l;
  int32_t c = 0;
  for (int32_t j = 0; j < n; j++)
    if (s[j] >= kth) {
      ids[c] = ids[j];
      s[c++] = s[j];
    }
  n = c;
  float *w = ws->w;
  k_exp_array(ws->simd, s, w, n);
  u128 t1 = 0;
  float wmax = 0.0f;
  for (int32_t j = 0; j < n; j++) {
    t1 += fix_w(w[j]);
    if (w[j] > wmax) wmax = w[j];
  }
  float cut = 0.0f;
  if (p->top_p < 1.0f) cut = select_vstar(ws, w, n, t1, thr_topp(p->top_p, t1), ws->tmp, ws->tmp2);
  if (p->min_p > 0.0f && p->min_p * wmax > cut) cut = p->min_p * wmax;
  u128 t2 = 0;
  int32_t last = -1;
  for (int32_t j = 0; j < n; j++)
    if (w[j] >= cut) {
      t2 += fix_w(w[j]);
      last = j;
    }
  u128 thr = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  for (int32_t j = 0; j < n; j++)
    if (w[j] >= cut) {
      r += fix_w(w[j]);
      if (r > thr) return ids[j];
    }
  return ids[last];
}

/* Keep-all rows: exp of every entry, block sums, v* by selection, draw by blocks. */
static int32_t sample_full(q35_sampler *ws, const float *l, int32_t V, float m,
                           const q35_sampling *p) {
  float *w = ws->w;
  u128 *bs = ws->bsum;
  int32_t nb = (V + BLOCK - 1) / BLOCK;
  k_exp_row(ws, l, V, m, p->temperature, w, bs);
  float cut = 0.0f;
  if (p->top_p < 1.0f) {
    u128 t1 = 0;
    for (int32_t b = 0; b < nb; b++) t1 += bs[b];
    cut = select_vstar(ws, w, V, t1, thr_topp(p->top_p, t1), ws->tmp, ws->tmp2);
  }
  float wmax = q35_sampler_exp(0.0f); /* the maximum's weight: s = 0 */
  if (p->min_p > 0.0f && p->min_p * wmax > cut) cut = p->min_p * wmax;
  if (cut > 0.0f) k_block_sums(ws, w, V, cut, bs);
  u128 t2 = 0;
  for (int32_t b = 0; b < nb; b++) t2 += bs[b];
  u128 thr = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  int32_t last = -1;
  for (int32_t b = 0; b < nb; b++) {
    if (bs[b] == 0) continue;
    if (r + bs[b] <= thr) {
      r += bs[b];
      last = b;
      continue;
    }
    int32_t e = (b + 1) * BLOCK < V ? (b + 1) * BLOCK : V;
    for (int32_t i = b * BLOCK; i < e; i++)
      if (w[i] >= cut) {
        r += fix_w(w[i]);
        if (r > thr) return i;
      }
    last = b; /* unreachable: the block's sum exceeds the remainder */
  }
  /* rounding left none (cannot happen with k < 2^53): the last survivor */
  for (int32_t i = (last + 1) * BLOCK - 1; i >= 0; i--)
    if (i < V && w[i] >= cut && fix_w(w[i]) > 0) return i;
  return 0;
}

/* ---- top-p on keep-all rows in one pass ------------------------------------------------
 * sample_full stores w, then finds v* with partition passes over it and sums the survivors
 * in another pass. This path reads the row once more after the maximum scan and touches only
 * a small candidate set afterwards:
 *   1. the scan also records the maximum of every CHUNK elements;
 *   2. an estimate of v* (speed only, never correctness): the heavy head of the row taken
 *      exactly (every element >= h, found through the chunk maxima), plus a strided sample of
 *      the rest scaled up; a window [lo, hi] around the estimated crossing, widened by
 *      FUSED_Z standard deviations of the sample's estimate and a slack (fused_window);
 *   3. one pass: w of every element (same arithmetic as exp_row), the exact total, per block
 *      the exact mass of w > hi, and the elements in the window copied out in id order;
 *   4. exact integer tests (as in select_vstar) say whether v* is in the window: the mass
 *      above hi is <= thr and the mass above hi plus the window's is > thr. Then v* is
 *      select_vstar over the window alone, and the survivors are the elements above hi plus
 *      the window's >= cut, so per-block survivor sums are the pass's sums plus the window's
 *      survivors by block. The draw walks the blocks and recomputes w in the one block it
 *      lands in (the same kernel, the same bits).
 * Otherwise (a miss, or min-p cutting above hi) the row goes through sample_full. Both give
 * the reference's token: the window only selects which elements are looked at. */

/* The estimated window [lo, hi] for top_p q; see above. bmax: the row's block maxima.
 * Estimates are binned by s = (l - m) / T in bins of 1/FUSED_BINS (s below -FUSED_SMAX
 * share the last bin): per bin the estimated mass (head entries count once, sample entries
 * f times) and the sample's sum of w^2 (for the variance). */
static void fused_window(q35_sampler *ws, const float *l, int32_t V, float m, float T, double q,
                         const float *bmax, float *plo, float *phi) {
  int32_t nch = (V + CHUNK - 1) / CHUNK;
  float *hs = ws->tmp, *ss = ws->tmp2, *hw = ws->tmp + FUSED_HMAX, *sw = ws->tmp2 + FUSED_MS;
  int32_t *idb = ws->ids;
  /* 1. the strided sample: l, s and w of FUSED_MS elements */
  float *sl = ws->tmp2 + 2 * FUSED_MS;
  int32_t ms = V / 4 < FUSED_MS ? V / 4 : FUSED_MS, ns = 0;
  int64_t off = V / (2 * ms);
  for (int32_t j = 0; j < ms; j++) {
    sl[j] = l[(int64_t)j * V / ms + off];
    ss[j] = (sl[j] - m) / T;
  }
  k_exp_array(ws->simd, ss, sw, ms);
  /* 2. the head, taken exactly: every element >= h (they are in the chunks whose maximum is
   * >= h). First h = the FUSED_HK-th largest sampled l (the top of the row, which a sample
   * sees too rarely). Then h drops to where one element's weight is FUSED_EPS of the
   * estimated total over f (the sample's scale): below h, an element seen or missed by the
   * sample moves the estimate by at most about FUSED_EPS. It does not drop when the sample
   * says that would take more than about FUSED_HMAX / 2 elements; a head over FUSED_HMAX
   * elements keeps the previous h (or none: h = inf). The sample counts only elements
   * below h. */
  float top[FUSED_HK]; /* the FUSED_HK largest sampled values, descending */
  for (int k = 0; k < FUSED_HK; k++) top[k] = -INFINITY;
  for (int32_t j = 0; j < ms; j++) {
    float x = sl[j];
    if (!(x > top[FUSED_HK - 1])) continue;
    int k = FUSED_HK - 1;
    for (; k > 0 && top[k - 1] < x; k--) top[k] = top[k - 1];
    top[k] = x;
  }
  float h = top[FUSED_HK - 1] == -INFINITY ? INFINITY : top[FUSED_HK - 1], hprev = INFINITY;
  int32_t nh = 0;
  double f = 0.0;
  for (int iter = 0;; iter++) {
    nh = 0;
    for (int32_t b = 0; b < nch && h < INFINITY; b++) {
      if (!(bmax[b] >= h)) continue;
      int32_t s0 = b * CHUNK, e = (b + 1) * CHUNK < V ? (b + 1) * CHUNK : V;
      int32_t c = k_filter_ge(ws, l + s0, e - s0, h, idb);
      if (nh + c > FUSED_HMAX) { /* too many: back to the previous head */
        h = hprev;
        nh = 0;
        b = -1;
        hprev = INFINITY;
        iter = 99;
        continue;
      }
      for (int32_t j = 0; j < c; j++) hs[nh++] = (l[s0 + idb[j]] - m) / T;
    }
    k_exp_array(ws->simd, hs, hw, nh);
    ns = 0;
    double st = 0.0, ht = 0.0;
    for (int32_t j = 0; j < ms; j++)
      if (sl[j] < h) {
        ns++;
        st += sw[j];
      }
    for (int32_t j = 0; j < nh; j++) ht += hw[j];
    f = ns > 0 ? (double)(V - nh) / ns : 0.0;
    if (iter >= 3 || f <= 0.0) break;
    double wh = FUSED_EPS * (ht + f * st) / f;
    if (!(wh < 1.0)) break;
    double lh = (double)m + (double)T * log(wh);
    if (!(lh < (double)h) || lh < -3.4e38) break;
    float hn = (float)lh;
    if ((double)hn > lh) hn = nextafterf(hn, -INFINITY);
    int32_t cnt = 0;
    for (int32_t j = 0; j < ms; j++) cnt += sl[j] >= hn;
    if ((double)cnt * f > FUSED_HMAX / 2) break;
    hprev = h;
    h = hn;
  }
  /* keep the sample below h, in place */
  {
    int32_t c = 0;
    for (int32_t j = 0; j < ms; j++)
      if (sl[j] < h) {
        ss[c] = ss[j];
        sw[c++] = sw[j];
      }
    ns = c;
  }
  /* 3. bins */
  double *bm = ws->bins, *bq = ws->bins + FUSED_NBIN;
  memset(ws->bins, 0, 2 * FUSED_NBIN * sizeof(double));
  double tot = 0.0, s2 = 0.0;
  for (int32_t j = 0; j < nh; j++) {
    float x = -hs[j] * FUSED_BINS;
    int32_t k = x < FUSED_NBIN - 1 ? (int32_t)x : FUSED_NBIN - 1;
    bm[k] += hw[j];
    tot += hw[j];
  }
  for (int32_t j = 0; j < ns; j++) {
    float x = -ss[j] * FUSED_BINS;
    int32_t k = x < FUSED_NBIN - 1 ? (int32_t)x : FUSED_NBIN - 1;
    double w = sw[j];
    bm[k] += f * w;
    bq[k] += w * w;
    tot += f * w;
    s2 += w * w;
  }
  /* 4. walk the bins from the top: r = estimated mass fraction at or above the bin's lower
   * edge; the ratio estimator's variance is f^2 ((1 - r)^2 sum_above w^2 + r^2 sum_below w^2)
   * / tot^2. hi: the lower edge of the last bin with r + z sd + slack <= q; lo: the lower
   * edge of the first with r - z sd - slack > q. Compared squared (no square roots). Edges
   * are turned into weights with the shared exp, widened by a few ulp. */
  int32_t khi = -1, klo = FUSED_NBIN - 1;
  double itot = 1.0 / tot, a = 0.0, sa2 = 0.0, slack = 2.0 / (ms > 0 ? ms : 1) + 2 * FUSED_EPS;
  double zf2 = FUSED_Z * FUSED_Z * f * f * itot * itot;
  int hi_open = 1;
  for (int32_t k = 0; k < FUSED_NBIN; k++) {
    if (bm[k] == 0.0) continue;
    a += bm[k];
    sa2 += bq[k];
    double r = a * itot;
    double var = zf2 * ((1 - r) * (1 - r) * sa2 + r * r * (s2 - sa2));
    if (hi_open) {
      double g = q - r - slack;
      if (g >= 0 && g * g >= var) khi = k;
      else hi_open = 0;
    }
    double g = r - q - slack;
    if (g > 0 && g * g > var) {
      klo = k;
      break;
    }
  }
  /* bin k holds s in (-(k + 1) / B, -k / B] */
  float hi = khi < 0 ? INFINITY : q35_sampler_exp(-(float)(khi + 1) / FUSED_BINS) * (1.0f + 0x1p-20f);
  float lo = klo >= FUSED_NBIN - 1 ? 0.0f : q35_sampler_exp(-(float)(klo + 1) / FUSED_BINS) * (1.0f - 0x1p-20f);
  if (lo > hi) lo = hi;
  if (ws->fused == 2) { /* testing: a window that misses v* (below it, then above it) */
    lo = hi = (ws->n_fused & 1) ? 0.0f : 2.0f;
  }
  *plo = lo;
  *phi = hi;
}

/* Returns the token, or -1 on a miss (the caller then uses sample_full). */
static int32_t sample_topp_fused(q35_sampler *ws, const float *l, int32_t V, float m,
                                 const q35_sampling *p, const float *bmax) {
  const float T = p->temperature;
  float lo, hi;
  fused_window(ws, l, V, m, T, (double)p->top_p, bmax, &lo, &hi);
  /* min-p: cmin = min_p * w_max (w_max = exp(0) = 1). When it is above the window, the cut is
   * cmin as soon as v* < cmin, i.e. as soon as the mass of w >= cmin is <= thr: take
   * hi = the float below cmin (w > hi <=> w >= cmin) and no window. */
  float cmin = p->min_p * q35_sampler_exp(0.0f);
  int minp_mode = p->min_p > 0.0f && cmin > hi && ws->fused != 2;
  if (minp_mode) hi = lo = nextafterf(cmin, 0.0f);
  u128 *bs = ws->bsum, t1;
  float *cw = ws->s;
  int32_t *cst = ws->ids;
  int32_t nb = (V + BLOCK - 1) / BLOCK;
  int32_t nc = k_fused(ws, l, V, m, T, lo, hi, bs, cst, &t1, cw);
  cst[nb] = nc;
  ws->n_fused++;
  u128 base = 0, in = 0;
  for (int32_t b = 0; b < nb; b++) base += bs[b];
  u128 thr = thr_topp(p->top_p, t1);
  float cut;
  if (minp_mode) {
    if (base > thr) goto miss;
    cut = cmin; /* no window element is >= cmin */
  } else {
    in = k_wsum_ge(ws, cw, nc, 0.0f);
    if (nc == 0 || base > thr || base + in <= thr) goto miss;
    cut = select_vstar(ws, cw, nc, in, thr - base, ws->tmp, ws->tmp2);
    if (p->min_p > 0.0f && cmin > cut) cut = cmin; /* <= hi here */
    for (int32_t b = 0; b < nb; b++)
      if (cst[b + 1] > cst[b]) bs[b] += k_wsum_ge(ws, cw + cst[b], cst[b + 1] - cst[b], cut);
  }
  u128 t2 = 0;
  for (int32_t b = 0; b < nb; b++) t2 += bs[b];
  u128 thd = thr_draw(q35_draw_u53(p->seed, p->draw_index), t2), r = 0;
  for (int32_t b = 0; b < nb; b++) {
    if (r + bs[b] <= thd) {
      r += bs[b];
      continue;
    }
    int32_t s0 = b * BLOCK, e = (b + 1) * BLOCK < V ? (b + 1) * BLOCK : V;
    u128 dummy;
    k_exp_row(ws, l + s0, e - s0, m, T, ws->w, &dummy);
    for (int32_t i = s0; i < e; i++)
      if (ws->w[i - s0] >= cut) {
        r += fix_w(ws->w[i - s0]);
        if (r > thd) return i;
      }
    break; /* unreachable: the block's sum exceeds the remainder */
  }
  return -1; /* unreachable (k < 2^53 and t2 > 0): sample_full decides */
miss:
  ws->n_fused_miss++;
  return -1;
}

int q35_sample(q35_sampler *ws, const float *logits, int32_t n_vocab, const q35_sampling *p,
               const int32_t *history, int32_t n_history, int32_t n_prompt, int32_t n_top,
               q35_sample_result *out, q35_err *err) {
  if (check_inputs(ws, logits, n_vocab, p, history, n_history, n_prompt, n_top, out, err)) return -1;
  const int32_t V = n_vocab;
  const float *l = logits;
  int32_t bad;
  int penalized = 0;
  if (n_history > 0 && penalties_active(p)) {
    (void)k_scan(ws, logits, V, &bad);
    if (bad >= 0) return row_error(err, logits, bad, 0);
    apply_penalties(ws, logits, V, p, history, n_history, n_prompt);
    l = ws->lp;
    penalized = 1;
  }
  const int32_t K0 = (p->top_k <= 0 || p->top_k >= V) ? V : (int32_t)p->top_k;
  const int fused = ws->fused && p->temperature != 0.0f && K0 == V && p->top_p < 1.0f &&
                    V >= FUSED_MIN;
  float m = fused ? k_scan_chunks(ws, l, V, ws->bmax, &bad) : k_scan(ws, l, V, &bad);
  if (bad >= 0) return row_error(err, l, bad, penalized);
  if (m == -INFINITY) return q35_seterr(err, "logits: all %d entries are -inf", (int)V);
  const float T = p->temperature;
  int32_t tok;
  if (T == 0.0f) {
    tok = k_find_eq(ws, l, V, m);
  } else {
    int32_t K = (p->top_k <= 0 || p->top_k >= V) ? V : (int32_t)p->top_k;
    if (K < V) {
      /* top-k: candidates l >= t with t from a strided sample, so that at least K pass */
      float t = -INFINITY;
      if (V > 4096) {
        float *samp = ws->tmp;
        int32_t ms = 1024;
        for (int32_t j = 0; j < ms; j++) samp[j] = l[(int64_t)j * V / ms];
        int64_t r = ((int64_t)K * ms * 2 + V - 1) / V + 2; /* about 2K expected candidates */
        if (r < ms) t = select_kth_largest(samp, ms, (int32_t)r);
      }
      int32_t *ids = ws->ids;
      float *cv = ws->s;
      int32_t nc;
      float kth_l, kth;
      for (;;) {
        nc = k_filter_ge(ws, l, V, t, ids);
        if (nc >= K) {
          for (int32_t j = 0; j < nc; j++) cv[j] = l[ids[j]];
          kth_l = select_kth_largest(cv, nc, K);
          kth = (kth_l - m) / T;
          /* entries below t have s <= s(pred t) by monotonicity; all excluded if < kth */
          if (t == -INFINITY || (nextafterf(t, -INFINITY) - m) / T < kth) break;
        }
        t = -INFINITY;
      }
      for (int32_t j = 0; j < nc; j++) cv[j] = (l[ids[j]] - m) / T;
      tok = sample_list(ws, l, p, ids, cv, nc, kth);
    } else if (p->top_p == 1.0f && p->min_p > 0.0f) {
      /* min-p alone: only entries with exp(s) >= min_p can survive; s >= log(min_p) - 0.05
       * holds for all of them (the exp is accurate to a few ulp), i.e. l >= m + T (log min_p
       * - 0.05) up to rounding, which the margin absorbs. */
      double lt = (double)m + (double)T * (log((double)p->min_p) - 0.05);
      float t = lt < -3.4e38 ? -INFINITY : (float)lt;
      if ((float)lt > lt) t = nextafterf(t, -INFINITY);
      int32_t *ids = ws->ids;
      float *cv = ws->s;
      int32_t nc = k_filter_ge(ws, l, V, t, ids);
      for (int32_t j = 0; j < nc; j++) cv[j] = (l[ids[j]] - m) / T;
      tok = sample_list(ws, l, p, ids, cv, nc, -INFINITY);
    } else {
      tok = fused ? sample_topp_fused(ws, l, V, m, p, ws->bmax) : -1;
      if (tok < 0) tok = sample_full(ws, l, V, m, p);
    }
  }
  out->token = tok;
  fill_logprobs(ws, l, V, m, tok, n_top, out);
  return 0;
}

int q35_sample_batch(q35_sampler *ws, const float *logits, int32_t n_rows, int32_t n_vocab,
                     const q35_sampling *p, const q35_sample_history *hist, int32_t n_top,
                     q35_sample_result *out, q35_err *err) {
  if (n_rows < 0) return q35_seterr(err, "sample: n_rows %d < 0", (int)n_rows);
  for (int32_t b = 0; b < n_rows; b++) {
    const q35_sample_history *h = hist ? &hist[b] : NULL;
    q35_err e;
    if (q35_sample(ws, logits + (size_t)b * (size_t)n_vocab, n_vocab, &p[b], h ? h->tokens : NULL,
                   h ? h->n_tokens : 0, h ? h->n_prompt : 0, n_top, &out[b], &e))
      return q35_seterr(err, "row %d: %s", (int)b, e.msg);
  }
  return 0;
}
