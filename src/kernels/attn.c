/*
 * attn.c - attention over the KV cache for one (token, KV group) item; see attn.h.
 *
 * Three cache types, one job: F16 (the default cache) has a fast AVX-512 kernel (here), an AVX2
 * one (attn_avx2.c) and its scalar reference; F32 and Q8_0 have the AVX2 kernel, a portable one
 * through q35_vec_dot (whose SIMD level kernels/quant.c picks) and a plain double-precision
 * reference of their own. On aarch64 the NEON kernel (attn_neon.c) takes all three types.
 */
#include "kernels/attn.h"

#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/attn_internal.h"
#include "kernels/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#define Q35_ATTN_X86 1
#include <immintrin.h>
#else
#define Q35_ATTN_X86 0
#endif

/* ----------------------------------- F16 reference ----------------------------------- */

static void attn_f16_ref(const q35_attn_job *j) {
  const int hd = j->hd;
  for (int h = 0; h < j->grp; h++) {
    float *qh = (float *)j->qs + (size_t)h * hd, *s = j->sc + (size_t)h * j->sc_stride, *o = j->out + (size_t)h * j->out_stride;
    for (int i = 0; i < hd; i++) qh[i] = q35_fp16_to_fp32(q35_fp32_to_fp16(j->q[(size_t)h * j->q_stride + i]));
    float mx = -INFINITY;
    for (int p = 0; p < j->npos; p++) {
      const uint16_t *kr = (const uint16_t *)((const char *)j->k + (size_t)p * j->row_bytes);
      double d = 0;
      for (int i = 0; i < hd; i++) d += (double)qh[i] * q35_fp16_to_fp32(kr[i]);
      s[p] = (float)d * j->scale;
      mx = s[p] > mx ? s[p] : mx;
    }
    double sum = 0;
    for (int p = 0; p < j->npos; p++) sum += s[p] = expf(s[p] - mx);
    for (int i = 0; i < hd; i++) {
      double a = 0;
      for (int p = 0; p < j->npos; p++)
        a += (double)s[p] * q35_fp16_to_fp32(((const uint16_t *)((const char *)j->v + (size_t)p * j->row_bytes))[i]);
      o[i] = (float)(a / sum);
    }
  }
}

/* ----------------------------------- AVX-512 ----------------------------------- */
#if Q35_ATTN_X86

#define A5 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* exp(x) for x <= 0 (x - max of the scores): see attn_internal.h */
A5 static inline __m512 exp_neg(__m512 x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(ATTN_EXP_FLOOR)), _mm512_set1_ps(ATTN_LOG2E));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(attn_exp2_taylor[0]);
  for (int k = 1; k <= ATTN_EXP2_DEGREE; k++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(attn_exp2_taylor[k]));
  const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23); /* 2^n: n into the exponent field */
  const __m512 r = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN_EXP_FLOOR), _CMP_GT_OQ), r);
}

enum { GMAX = 8, PBLK = 128, KPF = 16 };

/* heads h0..h0+ng-1 (ng <= GMAX). Inlined into callers with a constant ng so that the per-head
 * accumulators live in registers (with a variable ng, GCC -O2 keeps them on the stack and every
 * FMA becomes a load, an FMA and a store). K rows are prefetched KPF positions ahead and V rows
 * one block ahead. */
A5 static inline __attribute__((always_inline)) void attn_heads_body(const q35_attn_job *j, int h0, const int ng) {
  const int hd = j->hd, np = j->npos, nc = hd / 16;
  const uint16_t *K = j->k, *V = j->v;
  const size_t rs = j->row_bytes / sizeof(uint16_t);
  float *qs = j->qs;
  const float *qh[GMAX];
  float *sh[GMAX];
  for (int h = 0; h < ng; h++) {
    float *q = qs + (size_t)(h0 + h) * hd;
    const float *src = j->q + (size_t)(h0 + h) * j->q_stride;
    for (int c = 0; c < nc; c++) /* round to fp16 and back */
      _mm512_storeu_ps(q + 16 * c, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src + 16 * c), _MM_FROUND_TO_NEAREST_INT)));
    qh[h] = q;
    sh[h] = j->sc + (size_t)(h0 + h) * j->sc_stride;
  }
  /* scores: one pass over K, each key converted once for all heads */
  for (int p = 0; p < np; p++) {
    const uint16_t *kr = K + (size_t)p * rs;
    if (p + KPF < np) /* the row KPF positions ahead, one prefetch per cache line */
      for (int c = 0; c < nc; c += 2) _mm_prefetch((const char *)(kr + (size_t)KPF * rs + 16 * c), _MM_HINT_T0);
    __m512 acc[GMAX] = {0};
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) acc[h] = _mm512_setzero_ps();
    for (int c = 0; c < nc; c++) {
      const __m512 kv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + 16 * c)));
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(qh[h] + 16 * c), kv, acc[h]);
    }
#pragma GCC unroll 8
    for (int h = 0; h < ng; h++) sh[h][p] = _mm512_reduce_add_ps(acc[h]) * j->scale;
  }
  /* softmax weights, normalized */
  for (int h = 0; h < ng; h++) {
    float *s = sh[h];
    __m512 m = _mm512_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 16 <= np; p += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + p));
    float mx = _mm512_reduce_max_ps(m);
    for (; p < np; p++) mx = s[p] > mx ? s[p] : mx;
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (p = 0; p < np; p += 16) {
      const __mmask16 k = np - p >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (np - p)) - 1);
      const __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + p), vm));
      _mm512_mask_storeu_ps(s + p, k, e);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (p = 0; p < np; p += 16) {
      const __mmask16 k = np - p >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (np - p)) - 1);
      _mm512_mask_storeu_ps(s + p, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + p), inv));
    }
  }
  /* out_h = sum_p w[h][p] V[p]: 32 dims x all heads in registers, positions in blocks of PBLK */
  for (int h = 0; h < ng; h++) memset(j->out + (size_t)(h0 + h) * j->out_stride, 0, sizeof(float) * (size_t)hd);
  for (int p0 = 0; p0 < np; p0 += PBLK) {
    const int p1 = np - p0 < PBLK ? np : p0 + PBLK;
    for (int c = 0; c + 2 <= nc; c += 2) {
      __m512 a0[GMAX] = {0}, a1[GMAX] = {0};
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) {
        float *o = j->out + (size_t)(h0 + h) * j->out_stride + 16 * c;
        a0[h] = _mm512_loadu_ps(o);
        a1[h] = _mm512_loadu_ps(o + 16);
      }
      for (int p = p0; p < p1; p++) {
        const uint16_t *vr = V + (size_t)p * rs + 16 * c;
        if (p + PBLK < np) _mm_prefetch((const char *)(vr + (size_t)PBLK * rs), _MM_HINT_T0); /* next block */
        const __m512 v0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)vr));
        const __m512 v1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16)));
#pragma GCC unroll 8
        for (int h = 0; h < ng; h++) {
          const __m512 w = _mm512_set1_ps(sh[h][p]);
          a0[h] = _mm512_fmadd_ps(w, v0, a0[h]);
          a1[h] = _mm512_fmadd_ps(w, v1, a1[h]);
        }
      }
#pragma GCC unroll 8
      for (int h = 0; h < ng; h++) {
        float *o = j->out + (size_t)(h0 + h) * j->out_stride + 16 * c;
        _mm512_storeu_ps(o, a0[h]);
        _mm512_storeu_ps(o + 16, a1[h]);
      }
    }
    if (nc % 2) { /* a last 16-dim chunk */
      const int c = nc - 1;
      for (int h = 0; h < ng; h++) {
        float *o = j->out + (size_t)(h0 + h) * j->out_stride + 16 * c;
        __m512 a = _mm512_loadu_ps(o);
        for (int p = p0; p < p1; p++)
          a = _mm512_fmadd_ps(_mm512_set1_ps(sh[h][p]),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(V + (size_t)p * rs + 16 * c))), a);
        _mm512_storeu_ps(o, a);
      }
    }
  }
}

A5 static void attn_heads8(const q35_attn_job *j, int h0) { attn_heads_body(j, h0, 8); }
A5 static void attn_heads4(const q35_attn_job *j, int h0) { attn_heads_body(j, h0, 4); }
A5 static void attn_heads_n(const q35_attn_job *j, int h0, int ng) { attn_heads_body(j, h0, ng); }

A5 static void attn_avx512(const q35_attn_job *j) {
  for (int h0 = 0; h0 < j->grp;) {
    const int left = j->grp - h0;
    if (left >= 8) attn_heads8(j, h0), h0 += 8;
    else if (left >= 4) attn_heads4(j, h0), h0 += 4;
    else attn_heads_n(j, h0, left), h0 += left;
  }
}

#endif /* Q35_ATTN_X86 */

/* ----------------------------------- F32 / Q8_0 ----------------------------------- */

/* Scores: the query converted to the cache's dot type (as ggml does for a q8_0 cache), one
 * q35_vec_dot per stored key; softmax with the sum in double; V (converted row by row for Q8_0)
 * accumulated position by position. */
static void attn_dot(const q35_attn_job *j) {
  const int hd = j->hd, grp = j->grp, np = j->npos, etype = j->type;
  const int qtype = q35_vec_dot_type(etype);
  const size_t qrb = q35_row_size(qtype, hd);
  const char *K = j->k, *V = j->v;
  char *qq = j->qs;
  float vrow[Q35_ATTN_MAX_HEAD_DIM];
  for (int h = 0; h < grp; h++) {
    if (etype == Q35_TYPE_F32) memcpy(qq + (size_t)h * qrb, j->q + (size_t)h * j->q_stride, qrb);
    else q35_quantize_row(qtype, j->q + (size_t)h * j->q_stride, qq + (size_t)h * qrb, hd);
  }
  for (int p = 0; p < np; p++) {
    const char *kr = K + (size_t)p * j->row_bytes;
    for (int h = 0; h < grp; h++) j->sc[(size_t)h * j->sc_stride + p] = q35_vec_dot(etype, hd, kr, qq + (size_t)h * qrb) * j->scale;
  }
  for (int h = 0; h < grp; h++) {
    float *sh = j->sc + (size_t)h * j->sc_stride;
    float mx = -INFINITY;
    for (int p = 0; p < np; p++) mx = sh[p] > mx ? sh[p] : mx;
    double sum = 0.0;
    for (int p = 0; p < np; p++) {
      sh[p] = expf(sh[p] - mx);
      sum += sh[p];
    }
    const float inv = (float)(1.0 / sum);
    for (int p = 0; p < np; p++) sh[p] *= inv;
    memset(j->out + (size_t)h * j->out_stride, 0, (size_t)hd * sizeof(float));
  }
  for (int p = 0; p < np; p++) {
    const float *vr;
    if (etype == Q35_TYPE_F32) {
      vr = (const float *)(const void *)(V + (size_t)p * j->row_bytes);
    } else {
      q35_dequantize_row(etype, V + (size_t)p * j->row_bytes, vrow, hd);
      vr = vrow;
    }
    for (int h = 0; h < grp; h++) {
      const float w = j->sc[(size_t)h * j->sc_stride + p];
      float *a = j->out + (size_t)h * j->out_stride;
      for (int i = 0; i < hd; i++) a[i] += w * vr[i];
    }
  }
}

/* The reference of attn_dot: the same query conversion, then every product and sum in double on
 * dequantized keys and values. */
static void attn_dot_ref(const q35_attn_job *j) {
  const int hd = j->hd, np = j->npos, etype = j->type;
  /* the query rounds through the cache's own block type (F16, or Q8_0 blocks: whatever layout the
   * level's weight kernels take their Q8_0 activations in, the values are the same) */
  const int qtype = etype;
  const char *K = j->k, *V = j->v;
  float qh[Q35_ATTN_MAX_HEAD_DIM], row[Q35_ATTN_MAX_HEAD_DIM];
  for (int h = 0; h < j->grp; h++) {
    const float *q = j->q + (size_t)h * j->q_stride;
    if (etype == Q35_TYPE_F32) {
      memcpy(qh, q, (size_t)hd * sizeof(float));
    } else { /* the kernel's query rounding: to the dot type and back */
      q35_quantize_row_ref(qtype, q, j->qs, hd);
      q35_dequantize_row_ref(qtype, j->qs, qh, hd);
    }
    float *s = j->sc + (size_t)h * j->sc_stride, *o = j->out + (size_t)h * j->out_stride;
    double mx = -INFINITY, sum = 0;
    for (int p = 0; p < np; p++) {
      q35_dequantize_row_ref(etype, K + (size_t)p * j->row_bytes, row, hd);
      double d = 0;
      for (int i = 0; i < hd; i++) d += (double)qh[i] * row[i];
      s[p] = (float)(d * j->scale);
      mx = s[p] > mx ? s[p] : mx;
    }
    for (int p = 0; p < np; p++) sum += s[p] = (float)exp(s[p] - mx);
    double acc[Q35_ATTN_MAX_HEAD_DIM];
    for (int i = 0; i < hd; i++) acc[i] = 0;
    for (int p = 0; p < np; p++) {
      q35_dequantize_row_ref(etype, V + (size_t)p * j->row_bytes, row, hd);
      for (int i = 0; i < hd; i++) acc[i] += (double)s[p] * row[i];
    }
    for (int i = 0; i < hd; i++) o[i] = (float)(acc[i] / sum);
  }
}

/* ----------------------------------- dispatch ----------------------------------- */

/* The SIMD level of the F16 kernel q35_attn takes for head dim hd (the reference where the
 * level's kernel cannot take hd). */
static q35_simd f16_level(int hd) {
  const q35_simd l = q35_simd_active();
  if (l == Q35_SIMD_AVX512 && hd % 16 == 0) return Q35_SIMD_AVX512;
  if ((l == Q35_SIMD_AVX512 || l == Q35_SIMD_AVX2) && hd % 8 == 0) return Q35_SIMD_AVX2;
  if (l == Q35_SIMD_NEON && hd % 8 == 0) return Q35_SIMD_NEON;
  return Q35_SIMD_SCALAR;
}

const char *q35_attn_level(void) { return q35_simd_name(f16_level(16)); }

void q35_attn(const q35_attn_job *j) {
#if Q35_ATTN_X86
  if (j->type != Q35_TYPE_F16) {
    const q35_simd l = q35_simd_active();
    if ((l == Q35_SIMD_AVX2 || l == Q35_SIMD_AVX512) && j->hd % 8 == 0) q35_attn_avx2(j);
    else attn_dot(j);
    return;
  }
  switch (f16_level(j->hd)) {
  case Q35_SIMD_AVX512: attn_avx512(j); break;
  case Q35_SIMD_AVX2: q35_attn_avx2(j); break;
  default: attn_f16_ref(j); break;
  }
#else
  if (q35_simd_active() == Q35_SIMD_NEON && j->hd % 8 == 0) q35_attn_neon(j);
  else if (j->type != Q35_TYPE_F16) attn_dot(j);
  else attn_f16_ref(j);
#endif
}

#if Q35_ATTN_X86
/* whether js[0..n) share what q35_attn_avx2_many needs shared */
static int jobs_share(const q35_attn_job *js, int n) {
  for (int i = 1; i < n; i++)
    if (js[i].hd != js[0].hd || js[i].grp != js[0].grp || js[i].type != js[0].type || js[i].k != js[0].k ||
        js[i].v != js[0].v || js[i].row_bytes != js[0].row_bytes)
      return 0;
  return 1;
}
#endif

void q35_attn_many(const q35_attn_job *js, int n) {
#if Q35_ATTN_X86
  if (n > 1 && js[0].hd % 8 == 0 && jobs_share(js, n)) {
    const q35_simd l = q35_simd_active();
    const int avx2 = js[0].type == Q35_TYPE_F16 ? f16_level(js[0].hd) == Q35_SIMD_AVX2
                                                 : l == Q35_SIMD_AVX2 || l == Q35_SIMD_AVX512;
    if (avx2) {
      q35_attn_avx2_many(js, n);
      return;
    }
  }
#endif
  for (int i = 0; i < n; i++) q35_attn(&js[i]);
}

void q35_attn_ref(const q35_attn_job *j) {
  if (j->type == Q35_TYPE_F16) attn_f16_ref(j);
  else attn_dot_ref(j);
}
