/*
 * attn.h - the core of one attention item over an F16 KV cache: the query heads of one KV group
 * against positions 0..npos-1 (scores, softmax, weighted sum of V). The caller applies the output
 * gate and does everything before (norms, RoPE, cache stores).
 *
 * Semantics (both implementations): each query is rounded to fp16 first (as ggml does for an
 * f16 cache), s[h][p] = dot(q_h, K[p]) * scale, w = softmax over p, out_h = sum_p w[h][p] V[p].
 * q35_attn_f16 is the fast path (AVX-512: keys converted once per row and shared by the group's
 * heads, a vector exp, V accumulated in registers over blocks of positions); q35_attn_f16_ref
 * is its plain scalar twin (double accumulation). tests/test_attn.c holds them together. The
 * fast path is deterministic and independent of batching and threads: an item's result depends
 * only on its inputs.
 */
#ifndef Q35_ATTN_H
#define Q35_ATTN_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int hd;            /* head dim */
  int grp;           /* query heads in the group */
  int npos;          /* positions 0..npos-1 (>= 1) */
  const uint16_t *k; /* K[p] = k + p * row_stride (fp16 elements) */
  const uint16_t *v; /* V[p] likewise */
  size_t row_stride; /* in elements */
  const float *q;    /* query head h at q + h * q_stride */
  size_t q_stride;
  float scale;
  float *sc;         /* scratch: scores of head h at sc + h * sc_stride (sc_stride >= npos) */
  size_t sc_stride;
  float *qs;         /* scratch: grp * hd floats */
  float *out;        /* head h's result at out + h * out_stride (hd floats) */
  size_t out_stride;
} q35_attn_job;

void q35_attn_f16(const q35_attn_job *j);
void q35_attn_f16_ref(const q35_attn_job *j);
/* "avx512" or "scalar": which one q35_attn_f16 runs (Q35_SIMD caps it like the quant kernels) */
const char *q35_attn_level(void);

#endif
