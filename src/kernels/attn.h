/*
 * attn.h - the core of one attention item: the query heads of one KV group against cache
 * positions 0..npos-1 (scores, softmax, weighted sum of V), for a KV cache of F32, F16 or Q8_0
 * elements. The caller applies the output gate and does everything before (norms, RoPE, cache
 * stores).
 *
 * Semantics: each query is first brought to the cache's dot type (rounded to fp16 for an F16
 * cache, quantized to Q8_0 for a Q8_0 cache, as ggml does; left as is for F32),
 * s[h][p] = dot(q_h, K[p]) * scale, w = softmax over p, out_h = sum_p w[h][p] V[p].
 *
 *   q35_attn      the fast path: keys are converted once per row (at the AVX2 level once per
 *                 tile of 4 heads x 3 keys) and shared by the group's heads, exp is a vector polynomial and V accumulates in registers over blocks of
 *                 positions. F16: with AVX-512 (q35_simd_active() == Q35_SIMD_AVX512, head dim a
 *                 multiple of 16) on 512-bit vectors; with AVX2 + FMA + F16C (the AVX2 level, or
 *                 AVX-512 with a head dim that is a multiple of 8 only) on 256-bit vectors;
 *                 otherwise the F16 reference below. F32 / Q8_0: the 256-bit kernel at the AVX2
 *                 and AVX-512 levels (head dim a multiple of 8); otherwise one q35_vec_dot per
 *                 stored key, softmax with the sum in double, V accumulated position by position.
 *   q35_attn_ref  the plain scalar twin of every type (double accumulation). tests/test_attn.c holds
 *                 them together within a tolerance.
 * q35_attn is deterministic and independent of batching and threads: an item's result depends
 * only on its inputs (not on where its scratch and output buffers sit), and a head's result only
 * on its own query (a group of one gives the bits the head gets in its group).
 */
#ifndef Q35_ATTN_H
#define Q35_ATTN_H

#include <stddef.h>
#include <stdint.h>

/* The largest head dimension the kernels take (one head's V row is converted on the stack);
 * the model loader refuses larger ones. */
#define Q35_ATTN_MAX_HEAD_DIM 4096

typedef struct {
  int hd;            /* head dim (<= Q35_ATTN_MAX_HEAD_DIM; a multiple of 32 for Q8_0) */
  int grp;           /* query heads in the group */
  int npos;          /* positions 0..npos-1 (>= 1) */
  int type;          /* cache element type: Q35_TYPE_F32, Q35_TYPE_F16 or Q35_TYPE_Q8_0 */
  const void *k;     /* K[p] = (const char *)k + p * row_bytes: hd elements of `type` */
  const void *v;     /* V[p] likewise */
  size_t row_bytes;
  const float *q;    /* query head h at q + h * q_stride */
  size_t q_stride;
  float scale;
  float *sc;         /* scratch: scores of head h at sc + h * sc_stride (sc_stride >= npos) */
  size_t sc_stride;
  void *qs;          /* scratch: grp * hd floats (the queries in the cache's dot type) */
  float *out;        /* head h's result at out + h * out_stride (hd floats) */
  size_t out_stride;
} q35_attn_job;

void q35_attn(const q35_attn_job *j);
/* q35_attn on each of js[0..n), with the same bits: jobs that share hd, grp, type, k, v and
 * row_bytes (the query heads of one KV head at several positions of one sequence, a prefill's
 * consecutive tokens) share the key and value conversions at the AVX2 kernel's level (a block of
 * cache rows converted once for all of them); otherwise, or at another level, one call each. */
void q35_attn_many(const q35_attn_job *js, int n);
void q35_attn_ref(const q35_attn_job *j);
/* "avx512", "avx2", "neon" or "scalar": which path q35_attn takes for an F16 cache with a head
 * dim that is a multiple of 16 (Q35_SIMD lowers it). */
const char *q35_attn_level(void);

#endif
