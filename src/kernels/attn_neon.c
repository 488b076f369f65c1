/*
 * attn_neon.c - the aarch64 NEON attention kernels for F16, F32 and Q8_0 KV caches; see attn.h.
 *
 * The algorithm of the AVX2 kernel (attn_avx2.c) on 128-bit vectors: the group's queries are
 * brought to the cache's dot type once (as floats); one pass over K converts each key once (a
 * Q8_0 block: its scale times its int8 values) and scores it against every head of the group
 * (per-head accumulators in registers); softmax with the shared vector exp polynomial
 * (attn_internal.h); then V accumulates into registers over blocks of positions, several heads
 * at once. A row is read in 8-element chunks (two float32x4), so a Q8_0 block is four chunks.
 * The head count of a pass and the cache type are compile-time constants (the body is inlined
 * per count and type). Needs a head dim that is a multiple of 8 (attn.c takes another path
 * otherwise). Every sum runs in a fixed order: the result depends only on the job's inputs.
 */
#include "kernels/attn_internal.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant.h"

typedef struct {
  float32x4_t lo, hi;
} f8; /* one 8-element chunk */

/* exp(x) for x <= 0 (x - max of the scores): see attn_internal.h */
static inline float32x4_t exp_neg(float32x4_t x) {
  const float32x4_t lo = vdupq_n_f32(ATTN_EXP_FLOOR);
  const float32x4_t t = vmulq_f32(vmaxq_f32(x, lo), vdupq_n_f32(ATTN_LOG2E));
  const float32x4_t n = vrndnq_f32(t);
  const float32x4_t f = vsubq_f32(t, n);
  float32x4_t p = vdupq_n_f32(attn_exp2_taylor[0]);
  for (int k = 1; k <= ATTN_EXP2_DEGREE; k++) p = vfmaq_f32(vdupq_n_f32(attn_exp2_taylor[k]), p, f);
  const int32x4_t e = vshlq_n_s32(vcvtnq_s32_f32(n), 23); /* 2^n: n into the exponent field */
  const float32x4_t r = vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), e));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(r), vcgtq_f32(x, lo)));
}

/* Q8_0 cache rows: blocks of Q8_BLOCK int8 values after their fp16 scale (Q8_SCALE_BYTES). */
enum { Q8_BLOCK = 32, Q8_SCALE_BYTES = 2, Q8_BLOCK_BYTES = Q8_SCALE_BYTES + Q8_BLOCK, Q8_CHUNKS = Q8_BLOCK / 8 };

/* Most heads in one pass, positions per V block, chunks per V pass for at most VWIDE_HEADS
 * heads (accumulators: heads x chunks x 2 <= 16 of the 32 vector registers). */
enum { GMAX = 8, PBLK = 128, VWIDE_HEADS = 4 };

/* Chunk c of a cache row as 8 floats. For Q8_0, c's block scale times its int8 values. */
static inline __attribute__((always_inline)) f8 ld_chunk(const char *row, int c, const int type) {
  f8 r;
  if (type == Q35_TYPE_F16) {
    const uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)(row + 16 * (size_t)c));
    r.lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
    r.hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
  } else if (type == Q35_TYPE_F32) {
    r.lo = vld1q_f32((const float *)(const void *)(row + 32 * (size_t)c));
    r.hi = vld1q_f32((const float *)(const void *)(row + 32 * (size_t)c + 16));
  } else {
    const char *b = row + (size_t)(c / Q8_CHUNKS) * Q8_BLOCK_BYTES;
    uint16_t d;
    memcpy(&d, b, sizeof d);
    const int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)(b + Q8_SCALE_BYTES + 8 * (c % Q8_CHUNKS))));
    const float s = q35_fp16_to_fp32(d);
    r.lo = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), s);
    r.hi = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(q)), s);
  }
  return r;
}

/* Scores of heads h0..h0+ng-1 at every position: sh[h][p] = dot(q_h, K[p]) * scale. */
static inline __attribute__((always_inline)) void scores(const q35_attn_job *j, const float *const *qh,
                                                         float *const *sh, const int ng, const int type) {
  const int hd = j->hd, np = j->npos, nc = hd / 8;
  const char *K = j->k;
  const size_t rb = j->row_bytes;
  for (int p = 0; p < np; p++) {
    const char *kr = K + (size_t)p * rb;
    float32x4_t a0[GMAX], a1[GMAX];
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) a0[h] = a1[h] = vdupq_n_f32(0);
    for (int c = 0; c < nc; c++) {
      const f8 kv = ld_chunk(kr, c, type);
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) {
        a0[h] = vfmaq_f32(a0[h], vld1q_f32(qh[h] + 8 * c), kv.lo);
        a1[h] = vfmaq_f32(a1[h], vld1q_f32(qh[h] + 8 * c + 4), kv.hi);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) sh[h][p] = vaddvq_f32(vaddq_f32(a0[h], a1[h])) * j->scale;
  }
}

/* s[0..np) <- softmax(s), normalized */
static void softmax(float *s, int np) {
  float32x4_t m = vdupq_n_f32(-INFINITY);
  int p = 0;
  for (; p + 4 <= np; p += 4) m = vmaxq_f32(m, vld1q_f32(s + p));
  float mx = vmaxvq_f32(m);
  for (; p < np; p++) mx = s[p] > mx ? s[p] : mx;
  const float32x4_t vm = vdupq_n_f32(mx);
  float32x4_t sum = vdupq_n_f32(0);
  for (p = 0; p + 4 <= np; p += 4) {
    const float32x4_t e = exp_neg(vsubq_f32(vld1q_f32(s + p), vm));
    vst1q_f32(s + p, e);
    sum = vaddq_f32(sum, e);
  }
  if (p < np) { /* the last 1..3 positions in one vector (the other lanes: exp(-inf) = 0) */
    float t[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    memcpy(t, s + p, sizeof(float) * (size_t)(np - p));
    const float32x4_t e = exp_neg(vsubq_f32(vld1q_f32(t), vm));
    vst1q_f32(t, e);
    memcpy(s + p, t, sizeof(float) * (size_t)(np - p));
    sum = vaddq_f32(sum, e);
  }
  const float inv = 1.0f / vaddvq_f32(sum);
  for (p = 0; p + 4 <= np; p += 4) vst1q_f32(s + p, vmulq_n_f32(vld1q_f32(s + p), inv));
  for (; p < np; p++) s[p] *= inv;
}

/* out[h][8c .. 8(c+nv)) += sum over p in [p0, p1) of w[h][p] V[p][same dims], for ng heads:
 * ng x nv chunk accumulators in registers. */
static inline __attribute__((always_inline)) void v_pass(const q35_attn_job *j, int h0, const float *const *sh, int c,
                                                         int p0, int p1, const int ng, const int nv, const int type) {
  const char *V = j->v;
  const size_t rb = j->row_bytes;
  f8 a[GMAX][2];
#pragma GCC unroll 8
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 2
    for (int u = 0; u < nv; u++) {
      const float *o = j->out + (size_t)(h0 + h) * j->out_stride + 8 * (c + u);
      a[h][u].lo = vld1q_f32(o);
      a[h][u].hi = vld1q_f32(o + 4);
    }
  for (int p = p0; p < p1; p++) {
    const char *vr = V + (size_t)p * rb;
    f8 v[2];
#pragma GCC unroll 2
    for (int u = 0; u < nv; u++) v[u] = ld_chunk(vr, c + u, type);
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) {
      const float w = sh[h][p];
#pragma GCC unroll 2
      for (int u = 0; u < nv; u++) {
        a[h][u].lo = vfmaq_n_f32(a[h][u].lo, v[u].lo, w);
        a[h][u].hi = vfmaq_n_f32(a[h][u].hi, v[u].hi, w);
      }
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < ng; h++)
#pragma GCC unroll 2
    for (int u = 0; u < nv; u++) {
      float *o = j->out + (size_t)(h0 + h) * j->out_stride + 8 * (c + u);
      vst1q_f32(o, a[h][u].lo);
      vst1q_f32(o + 4, a[h][u].hi);
    }
}

/* The group's queries in the cache's dot type, as floats: rounded to fp16 (F16), quantized to
 * Q8_0 and back (Q8_0, as ggml does), as they are (F32). */
static void queries(const q35_attn_job *j, int h0, int ng, int type) {
  const int hd = j->hd;
  uint8_t q8[Q35_ATTN_MAX_HEAD_DIM / Q8_BLOCK * Q8_BLOCK_BYTES];
  for (int h = h0; h < h0 + ng; h++) {
    float *q = (float *)j->qs + (size_t)h * hd;
    const float *src = j->q + (size_t)h * j->q_stride;
    if (type == Q35_TYPE_F16) {
      for (int i = 0; i < hd; i += 4) vst1q_f32(q + i, vcvt_f32_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    } else if (type == Q35_TYPE_Q8_0) {
      q35_quantize_row(Q35_TYPE_Q8_0, src, q8, hd);
      q35_dequantize_row(Q35_TYPE_Q8_0, q8, q, hd);
    } else {
      memcpy(q, src, sizeof(float) * (size_t)hd);
    }
  }
}

/* heads h0..h0+ng-1 (ng <= GMAX) of a `type` cache, inlined with a constant ng and type */
static inline __attribute__((always_inline)) void heads_body(const q35_attn_job *j, int h0, const int ng, const int type) {
  const int hd = j->hd, np = j->npos, nc = hd / 8;
  const int nv = ng <= VWIDE_HEADS ? 2 : 1; /* 8-dim chunks per V pass */
  const float *qh[GMAX];
  float *sh[GMAX];
  queries(j, h0, ng, type);
  for (int h = 0; h < ng; h++) {
    qh[h] = (const float *)j->qs + (size_t)(h0 + h) * hd;
    sh[h] = j->sc + (size_t)(h0 + h) * j->sc_stride;
  }
  scores(j, qh, sh, ng, type);
  for (int h = 0; h < ng; h++) softmax(sh[h], np);
  for (int h = 0; h < ng; h++) memset(j->out + (size_t)(h0 + h) * j->out_stride, 0, sizeof(float) * (size_t)hd);
  for (int p0 = 0; p0 < np; p0 += PBLK) {
    const int p1 = np - p0 < PBLK ? np : p0 + PBLK;
    int c = 0;
    for (; c + nv <= nc; c += nv) v_pass(j, h0, (const float *const *)sh, c, p0, p1, ng, nv, type);
    if (c < nc) v_pass(j, h0, (const float *const *)sh, c, p0, p1, ng, 1, type); /* a last 8-dim chunk */
  }
}

/* One kernel per cache type: passes of 8, 4, 2 and 1 heads over the group. */
#define ATTN_KERNEL(name, type)                                                              \
  static void name##8(const q35_attn_job *j, int h0) { heads_body(j, h0, 8, type); }         \
  static void name##4(const q35_attn_job *j, int h0) { heads_body(j, h0, 4, type); }         \
  static void name##2(const q35_attn_job *j, int h0) { heads_body(j, h0, 2, type); }         \
  static void name##1(const q35_attn_job *j, int h0) { heads_body(j, h0, 1, type); }         \
  static void name(const q35_attn_job *j) {                                                  \
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

void q35_attn_neon(const q35_attn_job *j) {
  if (j->type == Q35_TYPE_F16) attn_f16(j);
  else if (j->type == Q35_TYPE_F32) attn_f32(j);
  else attn_q8_0(j);
}

#endif /* __aarch64__ */
