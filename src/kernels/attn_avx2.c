/*
 * attn_avx2.c - the AVX2 (+FMA, F16C) attention kernel for an F16 KV cache; see attn.h.
 *
 * The same algorithm as the AVX-512 kernel in attn.c, on 256-bit vectors: the group's queries are
 * rounded to fp16 once; one pass over K converts each key once and scores it against every head
 * of the group (per-head accumulators in registers); softmax with a vector exp polynomial; then V
 * accumulates into registers over blocks of positions, several heads at once. The head count of
 * a pass is a compile-time constant (the body is inlined per count) so that the accumulators stay
 * in registers. Needs a head dim that is a multiple of 8 (attn.c falls back to the reference
 * otherwise). The result depends only on the job's inputs: every sum runs in a fixed order.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/attn_internal.h"

#define A2 __attribute__((target("avx2,fma,f16c")))

/* exp(x) for x <= 0 (x - max of the scores): 2^(x log2 e) = 2^n 2^f, f in [-1/2, 1/2], 2^f by a
 * degree-6 Taylor polynomial (relative error < 2e-7); results below 2^-126 flush to 0. The same
 * polynomial as the AVX-512 kernel's. */
#define EXP_FLOOR (-87.0f) /* below this, exp(x) < 2^-125: flushed to 0 */
A2 static inline __m256 exp_neg(__m256 x) {
  const __m256 lo = _mm256_set1_ps(EXP_FLOOR);
  const __m256 t = _mm256_mul_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(1.44269504088896341f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.540353039338161e-4f); /* Taylor: ln2^k / k! */
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.333355814642844e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265069591007e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471805599453e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  const __m256 r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  return _mm256_and_ps(r, _mm256_cmp_ps(x, lo, _CMP_GT_OQ));
}

/* lanes i < n set (n clamped to 8): the mask of a partial last vector of positions */
A2 static inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

A2 static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

A2 static inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* the 8 horizontal sums of a[0..7] as one vector (lane h = sum of a[h]) */
A2 static inline __m256 hsum8(const __m256 *a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

A2 static inline __m256 ld_h8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Most heads in one pass, positions per V block, K prefetch distance (positions), halfs per
 * 64-byte cache line, 8-dim chunks in one pass of V for a pass of at most VWIDE_HEADS heads
 * (accumulators: heads x chunks <= 8 of the 16 ymm registers). */
enum { GMAX = 8, PBLK = 128, KPF = 16, LINE_HALFS = 32, VWIDE_HEADS = 4 };

/* Scores of heads h0..h0+ng-1 at every position: sh[h][p] = dot(q_h, K[p]) * scale. */
A2 static inline __attribute__((always_inline)) void scores(const q35_attn_job *j, const float *const *qh,
                                                            float *const *sh, const int ng) {
  const int hd = j->hd, np = j->npos, nc = hd / 8;
  const uint16_t *K = j->k;
  const size_t rs = j->row_bytes / sizeof(uint16_t);
  const __m256 scale = _mm256_set1_ps(j->scale);
  for (int p = 0; p < np; p++) {
    const uint16_t *kr = K + (size_t)p * rs;
    if (p + KPF < np) /* the row KPF positions ahead, one prefetch per cache line */
      for (int i = 0; i < hd; i += LINE_HALFS) _mm_prefetch((const char *)(kr + (size_t)KPF * rs + i), _MM_HINT_T0);
    __m256 acc[GMAX];
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) acc[h] = _mm256_setzero_ps();
    for (int c = 0; c < nc; c++) {
      const __m256 kv = ld_h8(kr + 8 * c);
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qh[h] + 8 * c), kv, acc[h]);
    }
    if (ng == GMAX) {
      float s[GMAX];
      _mm256_storeu_ps(s, _mm256_mul_ps(hsum8(acc), scale));
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) sh[h][p] = s[h];
    } else {
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) sh[h][p] = hsum(acc[h]) * j->scale;
    }
  }
}

/* s[0..np) <- softmax(s), normalized */
A2 static void softmax(float *s, int np) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int p = 0;
  for (; p + 8 <= np; p += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + p));
  float mx = hmax(m);
  for (; p < np; p++) mx = s[p] > mx ? s[p] : mx;
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (p = 0; p < np; p += 8) {
    const __m256i k = tail_mask(np - p);
    const __m256 e = _mm256_and_ps(exp_neg(_mm256_sub_ps(_mm256_maskload_ps(s + p, k), vm)), _mm256_castsi256_ps(k));
    _mm256_maskstore_ps(s + p, k, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(sum));
  for (p = 0; p < np; p += 8) {
    const __m256i k = tail_mask(np - p);
    _mm256_maskstore_ps(s + p, k, _mm256_mul_ps(_mm256_maskload_ps(s + p, k), inv));
  }
}

/* out[h][8c .. 8(c+nv)) += sum over p in [p0, p1) of w[h][p] V[p][same dims], for ng heads:
 * ng x nv accumulators in registers, the V rows of the next block prefetched. */
A2 static inline __attribute__((always_inline)) void v_pass(const q35_attn_job *j, int h0, const float *const *sh, int c,
                                                            int p0, int p1, const int ng, const int nv) {
  const uint16_t *V = j->v;
  const size_t rs = j->row_bytes / sizeof(uint16_t);
  const int np = j->npos, pf = (8 * c) % LINE_HALFS < 8 * nv; /* this pass starts a cache line */
  __m256 a[GMAX][2];
#pragma GCC unroll 8
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 2
    for (int u = 0; u < nv; u++) a[h][u] = _mm256_loadu_ps(j->out + (size_t)(h0 + h) * j->out_stride + 8 * (c + u));
  for (int p = p0; p < p1; p++) {
    const uint16_t *vr = V + (size_t)p * rs + 8 * c;
    if (pf && p + PBLK < np) _mm_prefetch((const char *)(vr + (size_t)PBLK * rs), _MM_HINT_T0); /* next block */
    __m256 v[2];
#pragma GCC unroll 2
    for (int u = 0; u < nv; u++) v[u] = ld_h8(vr + 8 * u);
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) {
      const __m256 w = _mm256_broadcast_ss(sh[h] + p);
#pragma GCC unroll 2
      for (int u = 0; u < nv; u++) a[h][u] = _mm256_fmadd_ps(w, v[u], a[h][u]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 2
    for (int u = 0; u < nv; u++) _mm256_storeu_ps(j->out + (size_t)(h0 + h) * j->out_stride + 8 * (c + u), a[h][u]);
}

/* heads h0..h0+ng-1 (ng <= GMAX), inlined into callers with a constant ng (see the file comment) */
A2 static inline __attribute__((always_inline)) void heads_body(const q35_attn_job *j, int h0, const int ng) {
  const int hd = j->hd, np = j->npos, nc = hd / 8;
  const int nv = ng <= VWIDE_HEADS ? 2 : 1; /* 8-dim chunks per V pass */
  float *qs = j->qs;
  const float *qh[GMAX];
  float *sh[GMAX];
  for (int h = 0; h < ng; h++) {
    float *q = qs + (size_t)(h0 + h) * hd;
    const float *src = j->q + (size_t)(h0 + h) * j->q_stride;
    for (int c = 0; c < nc; c++) /* round to fp16 and back */
      _mm256_storeu_ps(q + 8 * c, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + 8 * c), _MM_FROUND_TO_NEAREST_INT)));
    qh[h] = q;
    sh[h] = j->sc + (size_t)(h0 + h) * j->sc_stride;
  }
  scores(j, qh, sh, ng);
  for (int h = 0; h < ng; h++) softmax(sh[h], np);
  for (int h = 0; h < ng; h++) memset(j->out + (size_t)(h0 + h) * j->out_stride, 0, sizeof(float) * (size_t)hd);
  for (int p0 = 0; p0 < np; p0 += PBLK) {
    const int p1 = np - p0 < PBLK ? np : p0 + PBLK;
    int c = 0;
    for (; c + nv <= nc; c += nv) v_pass(j, h0, (const float *const *)sh, c, p0, p1, ng, nv);
    if (c < nc) v_pass(j, h0, (const float *const *)sh, c, p0, p1, ng, 1); /* a last 8-dim chunk */
  }
}

A2 static void heads8(const q35_attn_job *j, int h0) { heads_body(j, h0, 8); }
A2 static void heads4(const q35_attn_job *j, int h0) { heads_body(j, h0, 4); }
A2 static void heads2(const q35_attn_job *j, int h0) { heads_body(j, h0, 2); }
A2 static void heads1(const q35_attn_job *j, int h0) { heads_body(j, h0, 1); }

A2 void q35_attn_f16_avx2(const q35_attn_job *j) {
  for (int h0 = 0; h0 < j->grp;) {
    const int left = j->grp - h0;
    if (left >= 8) heads8(j, h0), h0 += 8;
    else if (left >= 4) heads4(j, h0), h0 += 4;
    else if (left >= 2) heads2(j, h0), h0 += 2;
    else heads1(j, h0), h0 += 1;
  }
}
