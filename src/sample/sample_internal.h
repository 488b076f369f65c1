/*
 * sample_internal.h - what the files of the sampling head share (not a public header).
 *
 *   sampler.c          public API: parameters, workspace, shared steps (penalties, logprobs),
 *                      q35_sample (the fast path's orchestration) and q35_sample_batch
 *   reference.c        q35_sample_ref, the sort-based reference twin
 *   top_k.c            the fast path on candidate lists: top-k and min-p-only candidates
 *   top_p.c            the fast path's top-p: v* by weighted selection, keep-all rows, and
 *                      the one-pass top-p on large keep-all rows
 *   kernels_scalar.c   the one exp and the scalar row kernels
 *   kernels_avx2.c     their AVX2 (+FMA) twins (same bits)
 *   kernels_avx512.c   their AVX-512 twins (same bits)
 *   kernels_neon.c     their aarch64 NEON twins (same bits)
 *   rng.c              Philox4x32-10, the draw's uniform, OS-entropy seeds
 *
 * The exactness recipe (why the fast path and the reference agree bit for bit) is written out
 * at the top of sampler.c; docs/SAMPLING.md has the contract and the map of this folder.
 */
#ifndef Q35_SAMPLE_INTERNAL_H
#define Q35_SAMPLE_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "sample/sampler.h"

#if defined(__x86_64__) || defined(__i386__)
#define Q35_SAMPLE_X86 1
#else
#define Q35_SAMPLE_X86 0
#endif

typedef unsigned __int128 u128;

#define BLOCK 1024         /* elements per block sum in the full-row draw */
#define SLACK 64           /* extra elements at the end of scratch buffers (SIMD stores) */
#define FIX_SCALE 0x1p61f  /* W = trunc(w * 2^61) */
#define CHUNK 64           /* elements per maximum recorded by the top-p path's scan */
#define FLOAT_RANGE_LO (-3.4e38) /* a double threshold below this is no float: use -inf */

/* The one-pass top-p path (top_p.c). */
#define FUSED_MIN 16384    /* used from this row size */
#define FUSED_HK 4         /* its head: elements above the FUSED_HK-th largest sampled one */
#define FUSED_MS 4096      /* its sample size (at most) */
#define FUSED_Z 5.0        /* its window half-width in standard deviations */
#define FUSED_EPS 0.001    /* its head: elements heavier than this share of the total over f */
#define FUSED_HMAX 8192    /* its head's largest size */
#define FUSED_BINS 64      /* its estimate's bins per unit of s = (l - m) / T */
#define FUSED_NBIN 2048    /* its number of bins (s below -32 share the last) */

/* ws->fused: the one-pass top-p path off, on (the default), or on with a deliberately
 * misplaced window so that every row takes its fallback (testing). */
enum { FUSED_OFF = 0, FUSED_ON = 1, FUSED_MISPLACED = 2 };

typedef struct { float v; int32_t id; } vid;

struct q35_sampler {
  int32_t n_vocab;
  q35_simd simd;   /* the level its kernels run at (sample_kernel_level says which set) */
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
  int fused;       /* FUSED_OFF / FUSED_ON / FUSED_MISPLACED */
  int64_t n_fused, n_fused_miss; /* rows that took the one-pass top-p path; of them, misses */
};

/* ---- the exp ---------------------------------------------------------------------------
 * x <= 0. n = round(x * log2 e) via a fused multiply-add with the 1.5 * 2^23 rounding
 * constant; r = x - n ln2 (hi and lo parts, fused); exp(r) by a degree-7 Taylor polynomial
 * in Horner form (fused); times 2^n built from the exponent bits (n >= -126 here, so the
 * factor is a normal float). Only fmaf, one subtraction, one product by a power of two and
 * a comparison: each is correctly rounded, so any faithful twin of this sequence (exp256 in
 * kernels_avx2.c, exp512 in kernels_avx512.c) gives the same bits. Accuracy is a few ulp,
 * which only matters for the statistics. Inline so that the scalar kernels and the reference
 * inline it. */

#define EXP_LOG2E 1.44269504088896341f
#define EXP_ROUND 0x1.8p23f
#define EXP_LN2HI 0.693145751953125f     /* 12 significant bits: n * hi is exact */
#define EXP_LN2LO 1.42860682030941723e-6f
#define EXP_MIN (-87.0f)                 /* below: 0 (2^n would leave the normal range) */
#define EXP_BIAS 127                     /* float exponent bias: 2^n has bits (n + 127) << 23 */
#define EXP_C7 (1.0f / 5040.0f)
#define EXP_C6 (1.0f / 720.0f)
#define EXP_C5 (1.0f / 120.0f)
#define EXP_C4 (1.0f / 24.0f)
#define EXP_C3 (1.0f / 6.0f)
#define EXP_C2 0.5f

static inline float sample_exp(float x) {
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
  uint32_t bits = (uint32_t)(ni + EXP_BIAS) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  return q * scale;
}

/* ---- exact arithmetic ------------------------------------------------------------------- */

/* W = trunc(w * 2^61): a power-of-two scale and a truncating conversion, exact. */
static inline uint64_t fix_w(float w) { return (uint64_t)(int64_t)(w * FIX_SCALE); }

/* floor(top_p * T) for top_p in (0, 1]: top_p = f * 2^(e - 24) with f a 24-bit integer. */
static inline u128 thr_topp(float top_p, u128 total) {
  int e;
  float fr = frexpf(top_p, &e); /* top_p = fr * 2^e, fr in [0.5, 1) */
  uint64_t f = (uint64_t)(fr * 0x1p24f);
  int sh = 24 - e; /* >= 23 since top_p <= 1 */
  if (sh >= 128) return 0;
  /* total < 2^93 and f < 2^24: the product fits in 128 bits */
  return (total * f) >> sh;
}

/* floor(k * T / 2^53) for k < 2^53 and T < 2^100, without overflow. */
static inline u128 thr_draw(uint64_t k, u128 total) {
  uint64_t th = (uint64_t)(total >> 64), tl = (uint64_t)total;
  return (((u128)k * th) << 11) + (((u128)k * tl) >> 53);
}

/* 1 / T when T is a power of two whose reciprocal is a normal float (then x / T == x * (1/T)
 * bit for bit: both round the same exact real), else 0. */
static inline float pow2_recip(float t) {
  int e;
  float fr = frexpf(t, &e);
  if (fr != 0.5f || e < -124 || e > 126) return 0.0f;
  return ldexpf(1.0f, 1 - e);
}

/* End of block b of `size` elements in a row of n. */
static inline int32_t block_end(int32_t b, int32_t size, int32_t n) {
  return (b + 1) * size < n ? (b + 1) * size : n;
}

/* ---- kernels, by level -------------------------------------------------------------------
 * Each scalar kernel has an AVX2 and an AVX-512 twin that give identical results (kernels_*.c). */

float sample_scan_scalar(const float *l, int32_t n, int32_t *bad);
int32_t sample_find_eq_scalar(const float *l, int32_t n, float v);
int32_t sample_filter_ge_scalar(const float *l, int32_t n, float t, int32_t *ids);
void sample_exp_row_scalar(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum);
void sample_block_sums_scalar(const float *w, int32_t n, float cut, u128 *bsum);
int32_t sample_window_scalar(const float *a, int32_t n, float lo, float hi, float *out,
                             u128 *m_above, u128 *m_in);
void sample_exp_array_scalar(const float *x, float *y, int32_t n);
u128 sample_wsum_ge_scalar(const float *a, int32_t n, float cut);
float sample_scan_chunks_scalar(const float *l, int32_t n, float *cmax, int32_t *bad);
int32_t sample_fused_scalar(const float *l, int32_t n, float m, float temp, float lo, float hi,
                     u128 *bsum, int32_t *cstart, u128 *total, float *cw);

#if Q35_SAMPLE_X86
float sample_scan_512(const float *l, int32_t n, int32_t *bad);
int32_t sample_find_eq_512(const float *l, int32_t n, float v);
int32_t sample_filter_ge_512(const float *l, int32_t n, float t, int32_t *ids);
void sample_exp_row_512(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum);
void sample_block_sums_512(const float *w, int32_t n, float cut, u128 *bsum);
int32_t sample_window_512(const float *a, int32_t n, float lo, float hi, float *out, u128 *m_above,
                   u128 *m_in);
void sample_exp_array_512(const float *x, float *y, int32_t n);
u128 sample_wsum_ge_512(const float *a, int32_t n, float cut);
float sample_scan_chunks_512(const float *l, int32_t n, float *cmax, int32_t *bad);
int32_t sample_fused_512(const float *l, int32_t n, float m, float temp, float lo, float hi,
                         u128 *bsum, int32_t *cstart, u128 *total, float *cw);
float sample_scan_avx2(const float *l, int32_t n, int32_t *bad);
int32_t sample_find_eq_avx2(const float *l, int32_t n, float v);
int32_t sample_filter_ge_avx2(const float *l, int32_t n, float t, int32_t *ids);
void sample_exp_row_avx2(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum);
void sample_block_sums_avx2(const float *w, int32_t n, float cut, u128 *bsum);
int32_t sample_window_avx2(const float *a, int32_t n, float lo, float hi, float *out, u128 *m_above,
                   u128 *m_in);
void sample_exp_array_avx2(const float *x, float *y, int32_t n);
u128 sample_wsum_ge_avx2(const float *a, int32_t n, float cut);
float sample_scan_chunks_avx2(const float *l, int32_t n, float *cmax, int32_t *bad);
int32_t sample_fused_avx2(const float *l, int32_t n, float m, float temp, float lo, float hi,
                         u128 *bsum, int32_t *cstart, u128 *total, float *cw);
#endif

#if defined(__aarch64__)
float sample_scan_neon(const float *l, int32_t n, int32_t *bad);
int32_t sample_find_eq_neon(const float *l, int32_t n, float v);
int32_t sample_filter_ge_neon(const float *l, int32_t n, float t, int32_t *ids);
void sample_exp_row_neon(const float *l, int32_t n, float m, float temp, float *w, u128 *bsum);
void sample_block_sums_neon(const float *w, int32_t n, float cut, u128 *bsum);
int32_t sample_window_neon(const float *a, int32_t n, float lo, float hi, float *out, u128 *m_above,
                           u128 *m_in);
void sample_exp_array_neon(const float *x, float *y, int32_t n);
u128 sample_wsum_ge_neon(const float *a, int32_t n, float cut);
float sample_scan_chunks_neon(const float *l, int32_t n, float *cmax, int32_t *bad);
int32_t sample_fused_neon(const float *l, int32_t n, float m, float temp, float lo, float hi,
                          u128 *bsum, int32_t *cstart, u128 *total, float *cw);
#endif

/* Which kernel set runs at each level (base/cpu.h): Q35_SIMD_AVX512 the AVX-512 kernels,
 * Q35_SIMD_AVX2 the AVX2 ones, Q35_SIMD_NEON the NEON ones, Q35_SIMD_SCALAR the scalar ones.
 * SAMPLE_DISPATCH(level, k512, k256, kneon, kscalar) evaluates the one call this build has
 * (the other architecture's calls are not compiled). */
enum { SAMPLE_K_SCALAR = 0, SAMPLE_K_AVX2 = 1, SAMPLE_K_AVX512 = 2, SAMPLE_K_NEON = 3 };
static inline int sample_kernel_level(q35_simd level) {
  switch (level) {
#if Q35_SAMPLE_X86
  case Q35_SIMD_AVX512: return SAMPLE_K_AVX512;
  case Q35_SIMD_AVX2: return SAMPLE_K_AVX2;
#elif defined(__aarch64__)
  case Q35_SIMD_NEON: return SAMPLE_K_NEON;
#endif
  default: return SAMPLE_K_SCALAR;
  }
}

#if Q35_SAMPLE_X86
#define SAMPLE_DISPATCH(level, k512, k256, kneon, kscalar)                                      \
  (sample_kernel_level(level) == SAMPLE_K_AVX512 ? (k512)                                       \
   : sample_kernel_level(level) == SAMPLE_K_AVX2 ? (k256)                                       \
                                                 : (kscalar))
#elif defined(__aarch64__)
#define SAMPLE_DISPATCH(level, k512, k256, kneon, kscalar)                                      \
  (sample_kernel_level(level) == SAMPLE_K_NEON ? (kneon) : (kscalar))
#else
#define SAMPLE_DISPATCH(level, k512, k256, kneon, kscalar) ((void)(level), (kscalar))
#endif

static inline float k_scan(const q35_sampler *ws, const float *l, int32_t n, int32_t *bad) {
  return SAMPLE_DISPATCH(ws->simd, sample_scan_512(l, n, bad),
                         sample_scan_avx2(l, n, bad), sample_scan_neon(l, n, bad),
                         sample_scan_scalar(l, n, bad));
}
static inline int32_t k_find_eq(const q35_sampler *ws, const float *l, int32_t n, float v) {
  return SAMPLE_DISPATCH(ws->simd, sample_find_eq_512(l, n, v),
                         sample_find_eq_avx2(l, n, v), sample_find_eq_neon(l, n, v),
                         sample_find_eq_scalar(l, n, v));
}
static inline int32_t k_filter_ge(const q35_sampler *ws, const float *l, int32_t n, float t,
                                  int32_t *ids) {
  return SAMPLE_DISPATCH(ws->simd, sample_filter_ge_512(l, n, t, ids),
                         sample_filter_ge_avx2(l, n, t, ids),
                         sample_filter_ge_neon(l, n, t, ids),
                         sample_filter_ge_scalar(l, n, t, ids));
}
static inline void k_exp_row(const q35_sampler *ws, const float *l, int32_t n, float m, float temp,
                             float *w, u128 *bsum) {
  SAMPLE_DISPATCH(ws->simd, sample_exp_row_512(l, n, m, temp, w, bsum),
                  sample_exp_row_avx2(l, n, m, temp, w, bsum),
                  sample_exp_row_neon(l, n, m, temp, w, bsum),
                  sample_exp_row_scalar(l, n, m, temp, w, bsum));
}
static inline void k_block_sums(const q35_sampler *ws, const float *w, int32_t n, float cut,
                                u128 *bsum) {
  SAMPLE_DISPATCH(ws->simd, sample_block_sums_512(w, n, cut, bsum),
                  sample_block_sums_avx2(w, n, cut, bsum),
                  sample_block_sums_neon(w, n, cut, bsum),
                  sample_block_sums_scalar(w, n, cut, bsum));
}
static inline int32_t k_window(const q35_sampler *ws, const float *a, int32_t n, float lo,
                               float hi, float *out, u128 *m_above, u128 *m_in) {
  return SAMPLE_DISPATCH(ws->simd, sample_window_512(a, n, lo, hi, out, m_above, m_in),
                         sample_window_avx2(a, n, lo, hi, out, m_above, m_in),
                         sample_window_neon(a, n, lo, hi, out, m_above, m_in),
                         sample_window_scalar(a, n, lo, hi, out, m_above, m_in));
}
static inline float k_scan_chunks(const q35_sampler *ws, const float *l, int32_t n, float *cmax,
                                  int32_t *bad) {
  return SAMPLE_DISPATCH(ws->simd, sample_scan_chunks_512(l, n, cmax, bad),
                         sample_scan_chunks_avx2(l, n, cmax, bad),
                         sample_scan_chunks_neon(l, n, cmax, bad),
                         sample_scan_chunks_scalar(l, n, cmax, bad));
}
static inline u128 k_wsum_ge(const q35_sampler *ws, const float *a, int32_t n, float cut) {
  return SAMPLE_DISPATCH(ws->simd, sample_wsum_ge_512(a, n, cut),
                         sample_wsum_ge_avx2(a, n, cut), sample_wsum_ge_neon(a, n, cut),
                         sample_wsum_ge_scalar(a, n, cut));
}
static inline int32_t k_fused(const q35_sampler *ws, const float *l, int32_t n, float m,
                              float temp, float lo, float hi, u128 *bsum, int32_t *cstart,
                              u128 *total, float *cw) {
  return SAMPLE_DISPATCH(ws->simd, sample_fused_512(l, n, m, temp, lo, hi, bsum, cstart, total, cw),
                         sample_fused_avx2(l, n, m, temp, lo, hi, bsum, cstart, total, cw),
                         sample_fused_neon(l, n, m, temp, lo, hi, bsum, cstart, total, cw),
                         sample_fused_scalar(l, n, m, temp, lo, hi, bsum, cstart, total, cw));
}
static inline void k_exp_array(q35_simd level, const float *x, float *y, int32_t n) {
  SAMPLE_DISPATCH(level, sample_exp_array_512(x, y, n),
                  sample_exp_array_avx2(x, y, n), sample_exp_array_neon(x, y, n),
                  sample_exp_array_scalar(x, y, n));
}

/* ---- steps shared between files --------------------------------------------------------- */

/* sampler.c: input checks, penalties into ws->lp, the error for a bad row entry, log-sum-exp */
int sample_check_inputs(const q35_sampler *ws, const float *logits, int32_t n_vocab,
                        const q35_sampling *p, const int32_t *history, int32_t n_history,
                        int32_t n_prompt, int32_t n_top, q35_sample_result *out, q35_err *err);
void sample_apply_penalties(q35_sampler *ws, const float *logits, int32_t n_vocab,
                            const q35_sampling *p, const int32_t *history, int32_t n_history,
                            int32_t n_prompt);
int sample_row_error(q35_err *err, const float *l, int32_t bad, int penalized);
double sample_row_lse(const q35_sampler *ws, const float *l, int32_t n, float m);

/* top_p.c */
void sample_sort_desc_floats(float *a, int32_t n);
float sample_select_vstar(const q35_sampler *ws, const float *a, int32_t n, u128 mass, u128 thr,
                   float *s1, float *s2);
int32_t sample_full(q35_sampler *ws, const float *l, int32_t V, float m, const q35_sampling *p);
int32_t sample_topp_fused(q35_sampler *ws, const float *l, int32_t V, float m,
                          const q35_sampling *p, const float *bmax);

/* top_k.c */
int32_t sample_top_k(q35_sampler *ws, const float *l, int32_t V, float m, const q35_sampling *p,
                     int32_t K);
int32_t sample_min_p_only(q35_sampler *ws, const float *l, int32_t V, float m,
                          const q35_sampling *p);

#endif
