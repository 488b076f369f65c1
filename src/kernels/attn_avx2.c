/*
 * attn_avx2.c - the AVX2 (+FMA, F16C) attention kernels for F16, F32 and Q8_0 KV caches; see
 * attn.h.
 *
 * The algorithm of the AVX-512 kernel in attn.c, on 256-bit vectors and in register tiles shaped
 * for 16 ymm registers: the group's queries are brought to the cache's dot type once (as floats);
 * one pass over K scores tiles of up to 4 heads x 3 keys (each key chunk converted once per tile;
 * a Q8_0 block: its scale times its int8 values); softmax with a vector exp polynomial; then V
 * accumulates into registers over blocks of positions in tiles of 4 heads x 3 8-dim chunks. Both
 * tiles keep 12 independent FMA chains in flight (the FMA latency times its throughput is 8, and
 * 8 chains left the FMA units idle a third of the time). The head count of a pass and the cache
 * type are compile-time constants (the body is inlined per count and type) so that the
 * accumulators stay in registers. Needs a head dim that is a multiple of 8 (attn.c takes another
 * path otherwise). The result depends only on the job's inputs, and a head's result not on the
 * other heads of its group: each score is one FMA chain over the chunks in order and one fixed
 * reduction tree (hsum4), each output element one FMA chain over the positions in order.
 *
 * q35_attn_avx2_many runs several jobs over one cache (a prefill's consecutive tokens of one KV
 * head): blocks of K and V rows are converted to floats once (FBUF bytes, L1-sized) and every
 * job's heads read them, with the same chains, so each job gets the bits it gets alone.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/attn_internal.h"
#include "kernels/quant.h"

#define A2 __attribute__((target("avx2,fma,f16c")))

/* exp(x) for x <= 0 (x - max of the scores): see attn_internal.h */
A2 static inline __m256 exp_neg(__m256 x) {
  const __m256 lo = _mm256_set1_ps(ATTN_EXP_FLOOR);
  const __m256 t = _mm256_mul_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(ATTN_LOG2E));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(attn_exp2_taylor[0]);
  for (int k = 1; k <= ATTN_EXP2_DEGREE; k++) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(attn_exp2_taylor[k]));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23); /* 2^n: n into the exponent field */
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

/* Q8_0 cache rows: blocks of Q8_BLOCK int8 values after their fp16 scale (Q8_SCALE_BYTES), in
 * Q8_BLOCK_BYTES bytes; Q8_CHUNKS 8-element chunks a block. */
enum { Q8_BLOCK = 32, Q8_SCALE_BYTES = 2, Q8_BLOCK_BYTES = Q8_SCALE_BYTES + Q8_BLOCK, Q8_CHUNKS = Q8_BLOCK / 8 };

/* Most heads in one pass, positions per V block, K prefetch distance (positions), bytes per
 * cache line; a V tile: at most VH heads x VMAX 8-dim chunks (12 accumulators, 3 V chunks and a
 * weight: the 16 ymm registers; 12 independent FMA chains cover the FMA latency, where the 8
 * heads x 1 chunk tile before it did not: 15% less time in the V phase, bench/attn_bench.c). */
enum { GMAX = 8, PBLK = 128, KPF = 16, LINE = 64, VH = 4, VMAX = 3 };

/* Where 8-element chunk c of a cache row starts (for Q8_0, its int8 values), in bytes. */
static inline size_t chunk_off(int type, int c) {
  if (type == Q35_TYPE_F16) return (size_t)16 * c;
  if (type == Q35_TYPE_F32) return (size_t)32 * c;
  return (size_t)(c / Q8_CHUNKS) * Q8_BLOCK_BYTES + Q8_SCALE_BYTES + 8 * (c % Q8_CHUNKS);
}

/* Its last byte. */
static inline size_t chunk_end(int type, int c) {
  return chunk_off(type, c) + (type == Q35_TYPE_F32 ? 32 : type == Q35_TYPE_F16 ? 16 : 8) - 1;
}

/* Chunk c of a cache row as 8 floats. For Q8_0, c's block scale times its int8 values. */
A2 static inline __attribute__((always_inline)) __m256 ld_chunk(const char *row, int c, const int type) {
  if (type == Q35_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 16 * (size_t)c)));
  if (type == Q35_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)(row + 32 * (size_t)c));
  const char *b = row + (size_t)(c / Q8_CHUNKS) * Q8_BLOCK_BYTES;
  uint16_t d;
  memcpy(&d, b, sizeof d);
  const __m128i q = _mm_loadl_epi64((const __m128i *)(b + Q8_SCALE_BYTES + 8 * (c % Q8_CHUNKS)));
  const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  return _mm256_mul_ps(x, _mm256_set1_ps(_cvtsh_ss(d)));
}

/* The horizontal sums of a0..a3 (lane h: the sum of a_h's 8 lanes), every one by the same tree
 * ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)), whichever vectors share the call: a score
 * gets the same bits in a tile of any shape (see scores). */
A2 static inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

/* Keys in one score tile (at most), query heads in one score tile (at most). */
enum { KT = 3, HT = 4 };

/* Scores of ht heads (qh[0..ht), ht <= HT) at the kt keys p..p+kt-1: sh[h][p + k] =
 * hsum4-tree(lane sums over the chunks in order) * scale. ht x kt accumulators in registers, each
 * key chunk converted once for the tile's heads. Every score is the same FMA chain (chunks in
 * order, from zero) and the same reduction tree whatever ht, kt and the tile's neighbours. */
A2 static inline __attribute__((always_inline)) void score_tile(const q35_attn_job *j, const float *const *qh,
                                                                float *const *sh, int p, const int ht, const int kt,
                                                                const int type) {
  const int nc = j->hd / 8;
  const int cpl = type == Q35_TYPE_Q8_0 ? Q8_CHUNKS : 1; /* chunks per load group (one Q8_0 block) */
  const char *kr = (const char *)j->k + (size_t)p * j->row_bytes;
  const size_t rb = j->row_bytes;
  __m256 acc[HT][KT];
#pragma GCC unroll 4
  for (int h = 0; h < ht; h++)
#pragma GCC unroll 4
    for (int k = 0; k < kt; k++) acc[h][k] = _mm256_setzero_ps();
  for (int c = 0; c < nc; c += cpl) {
#pragma GCC unroll 4
    for (int u = 0; u < cpl; u++) {
      __m256 kv[KT];
#pragma GCC unroll 4
      for (int k = 0; k < kt; k++) kv[k] = ld_chunk(kr + (size_t)k * rb, c + u, type);
#pragma GCC unroll 4
      for (int h = 0; h < ht; h++) {
        const __m256 qv = _mm256_loadu_ps(qh[h] + 8 * (c + u));
#pragma GCC unroll 4
        for (int k = 0; k < kt; k++) acc[h][k] = _mm256_fmadd_ps(qv, kv[k], acc[h][k]);
      }
    }
  }
  const __m128 scale = _mm_set1_ps(j->scale);
#pragma GCC unroll 4
  for (int k = 0; k < kt; k++) {
    float s[4];
    _mm_storeu_ps(s, _mm_mul_ps(hsum4(acc[0][k], acc[ht > 1][k], acc[ht > 2 ? 2 : 0][k], acc[ht > 3 ? 3 : 0][k]), scale));
#pragma GCC unroll 4
    for (int h = 0; h < ht; h++) sh[h][p + k] = s[h];
  }
}

/* Scores of heads h0..h0+ng-1 at positions [p0, p1): tiles of up to HT heads x KT keys, K rows
 * prefetched KPF positions ahead (one prefetch per cache line). */
A2 static inline __attribute__((always_inline)) void scores(const q35_attn_job *j, const float *const *qh,
                                                            float *const *sh, int p0, int p1, const int ng,
                                                            const int type) {
  const int ht = ng < HT ? ng : HT, np = j->npos;
  const char *K = j->k;
  const size_t rb = j->row_bytes, hb = q35_row_size(type, j->hd); /* the head's bytes in a row */
  int p = p0;
  for (; p + KT <= p1; p += KT) {
    for (int k = 0; k < KT; k++)
      if (p + k + KPF < np) {
        const char *pr = K + (size_t)(p + k + KPF) * rb;
        for (size_t i = 0; i < hb; i += LINE) _mm_prefetch(pr + i, _MM_HINT_T0);
        _mm_prefetch(pr + hb - 1, _MM_HINT_T0);
      }
    for (int h = 0; h < ng; h += ht) score_tile(j, qh + h, sh + h, p, ht, KT, type);
  }
  for (; p < p1; p++)
    for (int h = 0; h < ng; h += ht) score_tile(j, qh + h, sh + h, p, ht, 1, type);
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

/* one position p (V row vr) into the ng x nv accumulators of v_pass */
A2 static inline __attribute__((always_inline)) void v_step(__m256 a[VH][VMAX], const char *vr, const float *const *sh,
                                                            int p, int c, const int ng, const int nv, const int type) {
  __m256 v[VMAX];
#pragma GCC unroll 4
  for (int u = 0; u < nv; u++) v[u] = ld_chunk(vr, c + u, type);
#pragma GCC unroll 4
  for (int h = 0; h < ng; h++) {
    const __m256 w = _mm256_broadcast_ss(sh[h] + p);
#pragma GCC unroll 4
    for (int u = 0; u < nv; u++) a[h][u] = _mm256_fmadd_ps(w, v[u], a[h][u]);
  }
}

/* out[h][8c .. 8(c+nv)) += sum over p in [p0, p1) of w[h][p] V[p][same dims], for ng <= VH
 * heads and nv <= VMAX chunks: ng x nv accumulators in registers (each (head, dim) one FMA chain
 * over the positions in order, whatever the tile), the V rows of the next block prefetched (the cache line
 * where this pass's chunks end, when the previous pass ended in another one). */
A2 static inline __attribute__((always_inline)) void v_pass(const q35_attn_job *j, int h0, const float *const *sh, int c,
                                                            int p0, int p1, const int ng, const int nv, const int type) {
  const char *V = j->v;
  const size_t rb = j->row_bytes, end = chunk_end(type, c + nv - 1);
  const int np = j->npos, pf = c == 0 || chunk_end(type, c - 1) / LINE != end / LINE;
  __m256 a[VH][VMAX];
#pragma GCC unroll 4
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 4
    for (int u = 0; u < nv; u++) a[h][u] = _mm256_loadu_ps(j->out + (size_t)(h0 + h) * j->out_stride + 8 * (c + u));
  /* positions [p0, pe) prefetch, [pe, p1) do not: no test per position in either loop (the
   * test and its spilled bound were 6 of the loop's 33 instructions for 12 FMAs) */
  const int pe = !pf || np - PBLK <= p0 ? p0 : np - PBLK < p1 ? np - PBLK : p1;
  const char *vr = V + (size_t)p0 * rb;
  for (int p = p0; p < pe; p++, vr += rb) {
    _mm_prefetch(vr + (size_t)PBLK * rb + end, _MM_HINT_T0); /* next block */
    v_step(a, vr, sh, p, c, ng, nv, type);
  }
  for (int p = pe; p < p1; p++, vr += rb) v_step(a, vr, sh, p, c, ng, nv, type);
#pragma GCC unroll 4
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 4
    for (int u = 0; u < nv; u++) _mm256_storeu_ps(j->out + (size_t)(h0 + h) * j->out_stride + 8 * (c + u), a[h][u]);
}

/* The group's queries in the cache's dot type, as floats: rounded to fp16 (F16), quantized to
 * Q8_0 and back (Q8_0, as ggml does), as they are (F32). */
A2 static void queries(const q35_attn_job *j, int h0, int ng, int type) {
  const int hd = j->hd;
  uint8_t q8[Q35_ATTN_MAX_HEAD_DIM / Q8_BLOCK * Q8_BLOCK_BYTES];
  for (int h = h0; h < h0 + ng; h++) {
    float *q = (float *)j->qs + (size_t)h * hd;
    const float *src = j->q + (size_t)h * j->q_stride;
    if (type == Q35_TYPE_F16) {
      for (int i = 0; i < hd; i += 8)
        _mm256_storeu_ps(q + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT)));
    } else if (type == Q35_TYPE_Q8_0) {
      q35_quantize_row(Q35_TYPE_Q8_0, src, q8, hd);
      q35_dequantize_row(Q35_TYPE_Q8_0, q8, q, hd);
    } else {
      memcpy(q, src, sizeof(float) * (size_t)hd);
    }
  }
}

/* heads h0..h0+ng-1 (ng <= GMAX) of a `type` cache, inlined into callers with a constant ng and
 * type (see the file comment) */
A2 static inline __attribute__((always_inline)) void heads_body(const q35_attn_job *j, int h0, const int ng, const int type) {
  const int hd = j->hd, np = j->npos, nc = hd / 8;
  const int vh = ng < VH ? ng : VH; /* heads per V tile */
  const float *qh[GMAX];
  float *sh[GMAX];
  queries(j, h0, ng, type);
  for (int h = 0; h < ng; h++) {
    qh[h] = (const float *)j->qs + (size_t)(h0 + h) * hd;
    sh[h] = j->sc + (size_t)(h0 + h) * j->sc_stride;
  }
  scores(j, qh, sh, 0, np, ng, type);
  for (int h = 0; h < ng; h++) softmax(sh[h], np);
  for (int h = 0; h < ng; h++) memset(j->out + (size_t)(h0 + h) * j->out_stride, 0, sizeof(float) * (size_t)hd);
  for (int p0 = 0; p0 < np; p0 += PBLK) {
    const int p1 = np - p0 < PBLK ? np : p0 + PBLK;
    for (int hh = 0; hh < ng; hh += vh) {
      const float *const *w = (const float *const *)sh + hh;
      int c = 0;
      for (; c + VMAX <= nc; c += VMAX) v_pass(j, h0 + hh, w, c, p0, p1, vh, VMAX, type);
      if (nc - c == 2) v_pass(j, h0 + hh, w, c, p0, p1, vh, 2, type); /* the last 8-dim chunks */
      else if (nc - c == 1) v_pass(j, h0 + hh, w, c, p0, p1, vh, 1, type);
    }
  }
}

/* One kernel per cache type: passes of 8, 4, 2 and 1 heads over the group. */
#define ATTN_KERNEL(name, type)                                                              \
  A2 static void name##8(const q35_attn_job *j, int h0) { heads_body(j, h0, 8, type); }      \
  A2 static void name##4(const q35_attn_job *j, int h0) { heads_body(j, h0, 4, type); }      \
  A2 static void name##2(const q35_attn_job *j, int h0) { heads_body(j, h0, 2, type); }      \
  A2 static void name##1(const q35_attn_job *j, int h0) { heads_body(j, h0, 1, type); }      \
  A2 static void name(const q35_attn_job *j) {                                               \
    for (int h0 = 0; h0 < j->grp;) {                                                         \
      const int left = j->grp - h0;                                                          \
      if (left >= 8) name##8(j, h0), h0 += 8;                                                \
      else if (left >= 4) name##4(j, h0), h0 += 4;                                           \
      else if (left >= 2) name##2(j, h0), h0 += 2;                                           \
      else name##1(j, h0), h0 += 1;                                                          \
    }                                                                                        \
  }
ATTN_KERNEL(attn_f16, Q35_TYPE_F16)
ATTN_KERNEL(attn_f32, Q35_TYPE_F32)
ATTN_KERNEL(attn_q8_0, Q35_TYPE_Q8_0)

/* ------------------------- several jobs over one cache (q35_attn_avx2_many) ------------------------- */

/* Bytes of the f32 copy of a block of K or V rows (the head's part of each row) */
enum { FBUF = 16384 };

/* Rows [p0, p1) of the head's cache part at c (K or V), as floats: to buf (hd floats a row) for
 * F16 and Q8_0, the same values ld_chunk gives; an F32 cache is read in place (*stride: floats
 * from one row to the next). */
A2 static inline __attribute__((always_inline)) const float *rows_f32(const q35_attn_job *j, const char *c, int p0, int p1,
                                                                      float *buf, size_t *stride, const int type) {
  const size_t rb = j->row_bytes;
  const int nc = j->hd / 8, n = p1 - p0;
  const char *r = c + (size_t)p0 * rb;
  if (type == Q35_TYPE_F32) {
    *stride = rb / sizeof(float);
    return (const float *)(const void *)r;
  }
  *stride = (size_t)j->hd;
  for (int p = 0; p < n; p++, r += rb) {
    float *d = buf + (size_t)p * j->hd;
    for (int k = 0; k < nc; k++) _mm256_storeu_ps(d + 8 * k, ld_chunk(r, k, type));
  }
  return buf;
}

/* Slice s of ns of the rows [p0, p1) of the head's cache part at c (hb bytes a row), prefetched
 * (one prefetch per cache line). The next block's rows are fetched in slices between the tiles of
 * the current one, not all at once: a burst of a whole block's lines fills the line fill buffers
 * and stalls the loads behind it. Always inlined: GCC 12 finds a function of prefetches and loads
 * alone "pure" and drops its calls, prefetches and all. */
A2 static inline __attribute__((always_inline)) void prefetch_slice(const q35_attn_job *j, size_t hb, const char *c,
                                                                    int p0, int p1, int s, int ns) {
  const size_t rb = j->row_bytes;
  const int n = p1 - p0, a = p0 + (int)((long)n * s / ns), b = p0 + (int)((long)n * (s + 1) / ns);
  for (int p = a; p < b; p++) {
    const char *pr = c + (size_t)p * rb;
    for (size_t i = 0; i < hb; i += LINE) _mm_prefetch(pr + i, _MM_HINT_T0);
    _mm_prefetch(pr + hb - 1, _MM_HINT_T0);
  }
}

/* The block d after the one at p0 (K's blocks of kb rows, then V's, over npmax rows): *base,
 * rows [*q0, *q1) (empty past V's last). Two ahead for F16 and Q8_0: a slice fetched during the
 * current block's last tiles still has a whole block's time to arrive (from memory, not only L3).
 * One for F32, fetched in one burst before the block's tiles, as before the slices: its blocks
 * are read in place, not converted, and the slices measured slower there. */
static inline void block_ahead(const q35_attn_job *jb, int kb, int is_v, int p0, const char **base, int *q0, int *q1) {
  const int d = jb->type == Q35_TYPE_F32 ? 1 : 2;
  const int np = jb->npos, nb = (np + kb - 1) / kb, t = (is_v ? nb : 0) + p0 / kb + d;
  *base = t < nb ? jb->k : jb->v;
  *q0 = *q1 = 0;
  if (t >= 2 * nb) return;
  *q0 = (t < nb ? t : t - nb) * kb;
  *q1 = np - *q0 < kb ? np : *q0 + kb;
}

/* score_tile on keys already in floats: kf (row k at kf + k * ks), the same chain per score. */
A2 static inline __attribute__((always_inline)) void score_tile_f(const q35_attn_job *j, const float *const *qh,
                                                                  float *const *sh, int p, const float *kf, size_t ks,
                                                                  const int ht, const int kt) {
  const int nc = j->hd / 8;
  __m256 acc[HT][KT];
#pragma GCC unroll 4
  for (int h = 0; h < ht; h++)
#pragma GCC unroll 4
    for (int k = 0; k < kt; k++) acc[h][k] = _mm256_setzero_ps();
  for (int c = 0; c < nc; c++) {
    __m256 kv[KT];
#pragma GCC unroll 4
    for (int k = 0; k < kt; k++) kv[k] = _mm256_loadu_ps(kf + (size_t)k * ks + 8 * c);
#pragma GCC unroll 4
    for (int h = 0; h < ht; h++) {
      const __m256 qv = _mm256_loadu_ps(qh[h] + 8 * c);
#pragma GCC unroll 4
      for (int k = 0; k < kt; k++) acc[h][k] = _mm256_fmadd_ps(qv, kv[k], acc[h][k]);
    }
  }
  const __m128 scale = _mm_set1_ps(j->scale);
#pragma GCC unroll 4
  for (int k = 0; k < kt; k++) {
    float s[4];
    _mm_storeu_ps(s, _mm_mul_ps(hsum4(acc[0][k], acc[ht > 1][k], acc[ht > 2 ? 2 : 0][k], acc[ht > 3 ? 3 : 0][k]), scale));
#pragma GCC unroll 4
    for (int h = 0; h < ht; h++) sh[h][p + k] = s[h];
  }
}

/* scores of ht heads at keys [p0, p1) from the float rows kf (row p0 first) */
A2 static inline __attribute__((always_inline)) void scores_f(const q35_attn_job *j, const float *const *qh,
                                                              float *const *sh, int p0, int p1, const float *kf,
                                                              size_t ks, const int ht) {
  int p = p0;
  for (; p + KT <= p1; p += KT) score_tile_f(j, qh, sh, p, kf + (size_t)(p - p0) * ks, ks, ht, KT);
  for (; p < p1; p++) score_tile_f(j, qh, sh, p, kf + (size_t)(p - p0) * ks, ks, ht, 1);
}

/* v_pass on float rows vf (row p0 first, vs floats apart): out[h][8c .. 8(c+nv)) of ng heads
 * (outputs o[h]) += sum over p in [p0, p1) of w[h][p] V[p], each element the FMA chain of v_pass. */
A2 static inline __attribute__((always_inline)) void v_pass_f(float *const *o, const float *const *sh, int c, int p0,
                                                              int p1, const float *vf, size_t vs, const int ng,
                                                              const int nv) {
  __m256 a[VH][VMAX];
#pragma GCC unroll 4
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 4
    for (int u = 0; u < nv; u++) a[h][u] = _mm256_loadu_ps(o[h] + 8 * (c + u));
  const float *vr = vf + 8 * (size_t)c;
  for (int p = p0; p < p1; p++, vr += vs) {
    __m256 v[VMAX];
#pragma GCC unroll 4
    for (int u = 0; u < nv; u++) v[u] = _mm256_loadu_ps(vr + 8 * u);
#pragma GCC unroll 4
    for (int h = 0; h < ng; h++) {
      const __m256 w = _mm256_broadcast_ss(sh[h] + p);
#pragma GCC unroll 4
      for (int u = 0; u < nv; u++) a[h][u] = _mm256_fmadd_ps(w, v[u], a[h][u]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 4
    for (int u = 0; u < nv; u++) _mm256_storeu_ps(o[h] + 8 * (c + u), a[h][u]);
}

/* the V block [p0, p1) of the ng heads (ng <= VH) whose outputs are o: tiles of 3, 2, 1 chunks */
A2 static inline __attribute__((always_inline)) void v_block_f(int nc, float *const *o, const float *const *sh, int p0,
                                                               int p1, const float *vf, size_t vs, const int ng) {
  int c = 0;
  for (; c + VMAX <= nc; c += VMAX) v_pass_f(o, sh, c, p0, p1, vf, vs, ng, VMAX);
  if (nc - c == 2) v_pass_f(o, sh, c, p0, p1, vf, vs, ng, 2);
  else if (nc - c == 1) v_pass_f(o, sh, c, p0, p1, vf, vs, ng, 1);
}

/* ht (constant) -> an inlined body */
#define ATTN_BY_HT(ht, call)                                                                                   \
  switch (ht) {                                                                                                \
  case 4: { const int HT_ = 4; call; } break;                                                                 \
  case 3: { const int HT_ = 3; call; } break;                                                                 \
  case 2: { const int HT_ = 2; call; } break;                                                                 \
  default: { const int HT_ = 1; call; } break;                                                                \
  }

/* The jobs js[0..n) (sharing hd, grp, type, k, v, row_bytes; each its own npos, queries, scratch
 * and output): every K (then V) block of rows converted to floats once, then used by the heads of
 * every job that reaches it. Each score and each output element is the chain of heads_body (the
 * same FMAs in the same order, on the same float values), so each job gets the bits
 * q35_attn_avx2 gives it alone. */
A2 static inline __attribute__((always_inline)) void many_body(const q35_attn_job *js, int n, const int type) {
  const int hd = js[0].hd, grp = js[0].grp, nc = hd / 8;
  int kb = FBUF / (int)(sizeof(float) * (size_t)hd); /* rows a block: a multiple of KT where it can */
  if (kb >= KT) kb -= kb % KT;
  if (kb < 1) kb = 1;
  float buf[FBUF / sizeof(float)] __attribute__((aligned(32)));
  int npmax = 0;
  for (int i = 0; i < n; i++) {
    queries(&js[i], 0, grp, type);
    npmax = js[i].npos > npmax ? js[i].npos : npmax;
    for (int h = 0; h < grp; h++) memset(js[i].out + (size_t)h * js[i].out_stride, 0, sizeof(float) * (size_t)hd);
  }
  q35_attn_job jb = js[0]; /* the longest job: bounds the rows prefetched */
  jb.npos = npmax;
  const size_t hb = q35_row_size(type, hd); /* the head's bytes in a cache row */
  prefetch_slice(&jb, hb, jb.k, kb < npmax ? kb : npmax, 2 * kb < npmax ? 2 * kb : npmax, 0, 1); /* K's second block */
  for (int p0 = 0; p0 < npmax; p0 += kb) { /* scores */
    const int p1 = npmax - p0 < kb ? npmax : p0 + kb;
    size_t ks;
    const float *kf = rows_f32(&jb, jb.k, p0, p1, buf, &ks, type);
    const char *nx;
    int q0, q1;
    block_ahead(&jb, kb, 0, p0, &nx, &q0, &q1);
    if (type == Q35_TYPE_F32) prefetch_slice(&jb, hb, nx, q0, q1, 0, 1);
    int ns = 0, s = 0; /* prefetch slices: one per job and head tile */
    for (int i = 0; i < n; i++) ns += js[i].npos > p0 ? (grp + HT - 1) / HT : 0;
    for (int i = 0; i < n; i++) {
      const q35_attn_job *j = &js[i];
      if (j->npos <= p0) continue;
      const int pe = j->npos < p1 ? j->npos : p1;
      for (int h = 0; h < grp;) {
        if (type != Q35_TYPE_F32) prefetch_slice(&jb, hb, nx, q0, q1, s++, ns);
        const int ht = grp - h < HT ? grp - h : HT;
        const float *qh[HT];
        float *sh[HT];
        for (int u = 0; u < ht; u++) {
          qh[u] = (const float *)j->qs + (size_t)(h + u) * hd;
          sh[u] = j->sc + (size_t)(h + u) * j->sc_stride;
        }
        ATTN_BY_HT(ht, scores_f(j, qh, sh, p0, pe, kf, ks, HT_))
        h += ht;
      }
    }
  }
  for (int i = 0; i < n; i++)
    for (int h = 0; h < grp; h++) softmax(js[i].sc + (size_t)h * js[i].sc_stride, js[i].npos);
  for (int p0 = 0; p0 < npmax; p0 += kb) { /* V */
    const int p1 = npmax - p0 < kb ? npmax : p0 + kb;
    size_t vs;
    const float *vf = rows_f32(&jb, jb.v, p0, p1, buf, &vs, type);
    const char *nx;
    int q0, q1;
    block_ahead(&jb, kb, 1, p0, &nx, &q0, &q1);
    if (type == Q35_TYPE_F32) prefetch_slice(&jb, hb, nx, q0, q1, 0, 1);
    int ns = 0, s = 0;
    for (int i = 0; i < n; i++) ns += js[i].npos > p0 ? (grp + VH - 1) / VH : 0;
    for (int i = 0; i < n; i++) {
      const q35_attn_job *j = &js[i];
      if (j->npos <= p0) continue;
      const int pe = j->npos < p1 ? j->npos : p1;
      for (int h = 0; h < grp;) {
        if (type != Q35_TYPE_F32) prefetch_slice(&jb, hb, nx, q0, q1, s++, ns);
        const int ng = grp - h < VH ? grp - h : VH;
        const float *sh[VH];
        float *o[VH];
        for (int u = 0; u < ng; u++) {
          sh[u] = j->sc + (size_t)(h + u) * j->sc_stride;
          o[u] = j->out + (size_t)(h + u) * j->out_stride;
        }
        ATTN_BY_HT(ng, v_block_f(nc, o, sh, p0, pe, vf, vs, HT_))
        h += ng;
      }
    }
  }
}

A2 static void many_f16(const q35_attn_job *js, int n) { many_body(js, n, Q35_TYPE_F16); }
A2 static void many_f32(const q35_attn_job *js, int n) { many_body(js, n, Q35_TYPE_F32); }
A2 static void many_q8_0(const q35_attn_job *js, int n) { many_body(js, n, Q35_TYPE_Q8_0); }

void q35_attn_avx2_many(const q35_attn_job *js, int n) {
  if (js[0].type == Q35_TYPE_F16) many_f16(js, n);
  else if (js[0].type == Q35_TYPE_F32) many_f32(js, n);
  else many_q8_0(js, n);
}

void q35_attn_avx2(const q35_attn_job *j) {
  if (j->type == Q35_TYPE_F16) attn_f16(j);
  else if (j->type == Q35_TYPE_F32) attn_f32(j);
  else attn_q8_0(j);
}
