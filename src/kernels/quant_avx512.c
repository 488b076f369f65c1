/*
 * quant_avx512.c - the AVX-512 level (F, BW, VL, DQ, VNNI; VBMI where the CPU has it) of the
 * weight kernels. Kernels by type:
 *   Q8_0 x Q8_0Y          t_q8y: 512-bit (here)
 *   Q4_0 x Q8_0Z          t_q4z: 512-bit, one int32 lane per block (here; needs VBMI)
 *   Q4_0 x Q8_0X          t_q4x: 512-bit (here; VBMI, with the testing aid Q35_Q4_0_X set);
 *                         without VBMI t_q4_0 (quant_256_q4_0_q5_0_q8_0.inc)
 *   Q4_K, Q6_K x Q8_K     t_q4k5, t_q6k5: 512-bit integer sums (here)
 *   Q5_0, Q5_K, IQ4_XS    t_q5_0, t_q5_k, t_iq4_xs: the 256-bit templates with VNNI (quant_256_*.inc)
 *   F32, F16, BF16        t_f32, t_f16, t_bf16 (quant_256_float.inc)
 *   conversions           quant_256_convert.inc, plus the Q8_0Z quantizer (here)
 * quant.c lays this table over the AVX2 level's when q35_simd_active() is avx512.
 *
 * The 512-bit kernels hold the 16 float lanes of a pair in one register where the 256-bit
 * kernels keep two 256-bit halves (same integers, same fused multiply-adds in the same order,
 * same final sum), so their results are bit-identical to the 256-bit kernels' (Q4_0 x Q8_0X,
 * Q4_0 x Q8_0Z: quant_avx2.c's t_q4z2; the K-quants).
 */
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "kernels/quant_256.inc"
#include "kernels/quant_256_q4_0_q5_0_q8_0.inc"
#include "kernels/quant_256_kquants.inc"
#include "kernels/quant_256_float.inc"
#include "kernels/quant_256_convert.inc"

/* The 256-bit templates this level uses, micro-tile shapes R x C (32 vector registers). */
QS_TILE(t_q4_0, 2, 4)
QS_TILE(t_q5_0, 2, 4)
QS_TILE(t_q5_k, 2, 4)
QS_TILE(t_iq4_xs, 2, 4)
QS_TILE(t_f32, 2, 2)
QS_TILE(t_f16, 2, 2)
QS_TILE(t_bf16, 2, 2)
/* F32 in prefill: QS_T_FLTK's 4 x 4 tile (16 accumulators; quant_avx2.c's t_f32_wide says why) */
QS_TILE(t_f32k, 4, 4)
static QS_TARGET void t_f32_wide(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *o,
                                 size_t ors, size_t ocs) {
  (void)t_f32k_dot; /* vec_dot stays t_f32's */
  /* whole 4-row tiles here; the rows left over (the shared expert's 1-row gate) in t_f32's
   * tiles, whose 1 x 2 keeps 8 FMA chains going where QS_T_FLTK's 1 x C would keep C */
  const int nk = nc <= QS_NARROW ? 0 : nr - nr % 4;
  if (nk) t_f32k_tile(n, w, ws, nk, x, xs, nc, o, ors, ocs);
  if (nk < nr)
    t_f32_tile(n, (const uint8_t *)w + (size_t)nk * ws, ws, nr - nk, x, xs, nc, o + (size_t)nk * ors, ors, ocs);
}

/* two 256-bit halves -> one 512-bit register */
QSF __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
/* Q8_0 x Q8_0Y (layout in act_layout.h): per pair 16 float lanes, block 2g in lanes 0..7 and 2g+1
 * in 8..15; per block and lane acc = fma(float(exact int lane), wd * yd, acc), result hsum16 */
QSI void q8y_group(const int R, const int C, const int FULL, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                   int64_t g, __m512 acc[TRM][TCM]) {
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  __m512i wq[TRM];
  __m512 D[TRM];
  FOR_R {
    const blk_q8_0 *a = (const blk_q8_0 *)(w + (size_t)r * ws) + 2 * g;
    const __m256 d0 = _mm256_set1_ps(h2f(a[0].d));
    if (FULL) {
      pf_span((const char *)a + (size_t)R * ws, 68); /* as in q4x_group */
      wq[r] = _mm512_xor_si512(join256(loadu256(a[0].qs), loadu256(a[1].qs)), bias);
      D[r] = _mm512_castsi512_ps(join256(_mm256_castps_si256(d0), _mm256_castps_si256(_mm256_set1_ps(h2f(a[1].d)))));
    } else {
      wq[r] = _mm512_xor_si512(_mm512_zextsi256_si512(loadu256(a[0].qs)), bias);
      D[r] = _mm512_zextps256_ps512(d0);
    }
  }
  FOR_C {
    const uint8_t *b = x + (size_t)c * xs + (size_t)g * 2 * Q8Y_BLOCK;
    __m512i y, off;
    __m512 yd;
    if (FULL) {
      y = _mm512_loadu_si512(b);
      off = _mm512_loadu_si512(b + 64);
      yd = _mm512_loadu_ps(b + 128);
    } else {
      y = _mm512_zextsi256_si512(loadu256(b));
      off = _mm512_zextsi256_si512(loadu256(b + 32));
      yd = _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)(const void *)(b + 64)));
    }
    FOR_R {
      const __m512i p = _mm512_dpbusd_epi32(off, wq[r], y);
      if (FULL) acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(D[r], yd), acc[r][c]);
      else acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(D[r], yd), acc[r][c], 0x00FF);
    }
  }
}

QSF float hsum16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

QSI void t_q8y(const int R, const int C, TILE_ARGS) {
  const int64_t nb = n / QK8_0;
  __m512 acc[TRM][TCM];
  FOR_R FOR_C acc[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < nb / 2; g++) q8y_group(R, C, 1, w, ws, x, xs, g, acc);
  if (nb % 2) q8y_group(R, C, 0, w, ws, x, xs, nb / 2, acc);
  FOR_R FOR_C OUT(r, c) = hsum16(acc[r][c]);
}
QS_TILE(t_q8y, 4, 8)

/*
 * Q4_K / Q6_K x Q8_K with 512-bit integer sums. the 256-bit templates's kernels accumulate, per block
 * and pair, 8 int32 lanes isum (lane j: bytes 4j..4j+3 of every 32-byte step, each step's
 * maddubs pairs times its sub-block scale through madd), then run the float steps on those 8
 * lanes. Here one 512-bit step covers two of those 32-byte steps side by side (the bytes of
 * the first in lanes 0..7, of the second in 8..15), with the same maddubs pairs and the same
 * int16 scale products; the 8 lanes the float steps see are lanes j + lanes 8 + j, the same
 * exact int32 sums. The float steps are the 256-bit templates's, operation for operation, so the
 * results are bit-identical to the 256-bit kernels' (tests/test_quant_tile.c compares them).
 */
/* Q4_K step k (elements 64k..64k+63): vpshufb indices that make int16 lanes 0..15 scale 2k and
 * 16..31 scale 2k+1 out of q4k_sm8's bytes repeated in every 128-bit lane; the mins, int16
 * lanes 2j, 2j+1 = min j; Q6_K step s (elements 64s..64s+63): vpermw indices, lane l scale
 * 4s + l/8 */
static const int8_t k4_idx[4][64] = {
    {0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128},
    {2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 2, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128, 3, -128},
    {8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 8, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128, 9, -128},
    {10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 10, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128, 11, -128}};
static const int8_t k4_idx_min[32] = {4, -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128, 12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128};
static const int16_t k6_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

QSF __m512i ld_idx(const int16_t *p) { return _mm512_loadu_si512(p); }

/* the 8 lanes the 256-bit templates's kernels hold: lanes j + 8 + j */
QSF __m256i k5_fold(__m512i t) { return _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1)); }

QSI void t_q4k5(const int R, const int C, TILE_ARGS) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i cnt = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  __m256 acc[TRM][TCM];
  FOR_R FOR_C acc[r][c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    __m512i sm[TRM], isum[TRM][TCM];
    __m256i m16[TRM];
    float wd[TRM], wm[TRM];
    FOR_R {
      const blk_q4_k *a = (const blk_q4_k *)(w + (size_t)r * ws) + i;
      pf_span((const uint8_t *)a + (size_t)R * ws, sizeof *a);
      const __m128i s8 = q4k_sm8(a->scales);
      sm[r] = _mm512_broadcast_i32x4(s8);
      m16[r] = _mm256_shuffle_epi8(_mm512_castsi512_si256(sm[r]), _mm256_loadu_si256((const __m256i *)k4_idx_min));
      wd[r] = h2f(a->d);
      wm[r] = h2f(a->dmin);
    }
    FOR_R FOR_C isum[r][c] = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
      __m512i q[TRM], s[TRM];
      FOR_R {
        const blk_q4_k *a = (const blk_q4_k *)(w + (size_t)r * ws) + i;
        const __m512i qb = _mm512_broadcast_i64x4(loadu256(a->qs + 32 * k));
        q[r] = _mm512_and_si512(_mm512_srlv_epi16(qb, cnt), m4);
        s[r] = _mm512_shuffle_epi8(sm[r], _mm512_loadu_si512(k4_idx[k]));
      }
      FOR_C {
        const blk_q8_k *b = (const blk_q8_k *)(x + (size_t)c * xs) + i;
        const __m512i y = _mm512_loadu_si512(b->qs + 64 * k);
        FOR_R isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(q[r], y), s[r]);
      }
    }
    FOR_C {
      const blk_q8_k *b = (const blk_q8_k *)(x + (size_t)c * xs) + i;
      const __m256i bs = loadu256(b->bsums);
      FOR_R {
        const __m256i is = k5_fold(isum[r][c]);
        const __m256i msum = _mm256_madd_epi16(bs, m16[r]);
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wd[r] * b->d), _mm256_cvtepi32_ps(is), acc[r][c]);
        acc[r][c] = _mm256_fnmadd_ps(_mm256_set1_ps(wm[r] * b->d), _mm256_cvtepi32_ps(msum), acc[r][c]);
      }
    }
  }
  FOR_R FOR_C OUT(r, c) = hsum8(acc[r][c]);
}
QS_TILE(t_q4k5, 2, 4)

QSI void t_q6k5(const int R, const int C, TILE_ARGS) {
  const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
  /* the 2 high bits of step 2p's elements to bits 4..5: half 0 << 4 / >> 0, half 1 << 2 / >> 2 */
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  __m256 acc[TRM][TCM];
  FOR_R FOR_C acc[r][c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    __m512i isum[TRM][TCM];
    __m256i sc16[TRM];
    float wd[TRM];
    FOR_R {
      const blk_q6_k *a = (const blk_q6_k *)(w + (size_t)r * ws) + i;
      pf_span((const uint8_t *)a + (size_t)R * ws, sizeof *a);
      sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a->scales));
      wd[r] = h2f(a->d);
    }
    FOR_R FOR_C isum[r][c] = _mm512_setzero_si512();
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      __m512i ql[TRM], qh[TRM];
      FOR_R {
        const blk_q6_k *a = (const blk_q6_k *)(w + (size_t)r * ws) + i;
        ql[r] = _mm512_loadu_si512(a->ql + 64 * h);
        qh[r] = _mm512_broadcast_i64x4(loadu256(a->qh + 32 * h));
      }
      _Pragma("GCC unroll 2") for (int p = 0; p < 2; p++) {
        __m512i q[TRM], s[TRM];
        FOR_R {
          const __m512i l = p ? _mm512_srli_epi16(ql[r], 4) : ql[r];
          const __m512i hb = p ? _mm512_srlv_epi16(qh[r], shr) : _mm512_sllv_epi16(qh[r], shl);
          q[r] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(hb, m30));
          s[r] = _mm512_permutexvar_epi16(ld_idx(k6_idx[2 * h + p]), _mm512_castsi256_si512(sc16[r]));
        }
        FOR_C {
          const blk_q8_k *b = (const blk_q8_k *)(x + (size_t)c * xs) + i;
          const __m512i y = _mm512_loadu_si512(b->qs + 128 * h + 64 * p);
          FOR_R isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(q[r], y), s[r]);
        }
      }
    }
    FOR_C {
      const blk_q8_k *b = (const blk_q8_k *)(x + (size_t)c * xs) + i;
      const __m256i bs = loadu256(b->bsums);
      FOR_R {
        const __m256i corr = _mm256_madd_epi16(bs, sc16[r]);
        const __m256i is = _mm256_sub_epi32(k5_fold(isum[r][c]), _mm256_slli_epi32(corr, 5));
        acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wd[r] * b->d), _mm256_cvtepi32_ps(is), acc[r][c]);
      }
    }
  }
  FOR_R FOR_C OUT(r, c) = hsum8(acc[r][c]);
}
QS_TILE(t_q6k5, 2, 4)

/*
 * Q4_0 x Q8_0X with 512-bit registers (needs VBMI for the byte permutes). A group of four blocks
 * (72 bytes) is two loads; one two-source byte permute gathers the four blocks' 64 nibble bytes,
 * another the four fp16 scales, each repeated 4 times (one per int32 lane of its block). Lanes
 * 0..7 are the 256-bit templates's half 0, lanes 8..15 its half 1: same integers, same fused
 * multiply-adds, same final sum (hsum8(lo + hi)), so the bits equal the 256-bit kernels'.
 */
#undef QS_TARGET
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))

static uint8_t q4x_iq[64], q4x_id[64]; /* permute indices, filled by q35_kernels_avx512 */

QSI void q4x_group(const int R, const int C, const int FULL, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                   int64_t g, int k, __m512 acc[TRM][TCM]) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i iq = _mm512_loadu_si512(q4x_iq), id = _mm512_loadu_si512(q4x_id);
  __m512i L[TRM], H[TRM];
  __m512 D[TRM];
  FOR_R {
    const uint8_t *a = w + (size_t)r * ws + (size_t)g * 4 * sizeof(blk_q4_0);
    __m512i raw0, q;
    if (FULL) {
      /* the same group of the next tile's rows: file-backed weights sit in 4 KiB pages, where
       * the hardware prefetchers stop at every page boundary */
      pf_span((const char *)a + (size_t)R * ws, 72);
      raw0 = _mm512_loadu_si512(a);
      q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(a + 2)));
      q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(a + 20)), 1);
      q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(a + 38)), 2);
      q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(a + 56)), 3);
    } else { /* k <= 3: 18k <= 54 bytes */
      raw0 = _mm512_maskz_loadu_epi8(((__mmask64)1 << (18 * k)) - 1, a);
      const __m512i raw1 = _mm512_maskz_loadu_epi8(((__mmask64)1 << (18 * k - 8)) - 1, a + 8);
      q = _mm512_permutex2var_epi8(raw0, iq, raw1);
    }
    L[r] = _mm512_and_si512(q, m4);
    H[r] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    D[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi8(id, raw0)));
  }
  FOR_C {
    const uint8_t *b = x + (size_t)c * xs + (size_t)g * 4 * Q8X_BLOCK;
    __m512i yl, yh, off;
    __m512 yd;
    if (FULL) {
      yl = _mm512_loadu_si512(b);
      yh = _mm512_loadu_si512(b + 64);
      off = _mm512_loadu_si512(b + 128);
      yd = _mm512_loadu_ps(b + 192);
    } else {
      const __mmask64 m = ((__mmask64)1 << (16 * k)) - 1;
      yl = _mm512_maskz_loadu_epi8(m, b);
      yh = _mm512_maskz_loadu_epi8(m, b + 16 * k);
      off = _mm512_maskz_loadu_epi8(m, b + 32 * k);
      yd = _mm512_castsi512_ps(_mm512_maskz_loadu_epi8(m, b + 48 * k));
    }
    FOR_R {
      const __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(off, L[r], yl), H[r], yh);
      if (FULL) acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(D[r], yd), acc[r][c]);
      else
        acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(D[r], yd), acc[r][c],
                                          (__mmask16)((1u << (4 * k)) - 1));
    }
  }
}

QSI void t_q4x(const int R, const int C, TILE_ARGS) {
  const int64_t nb = n / QK8_0, ng = nb / 4;
  __m512 acc[TRM][TCM];
  FOR_R FOR_C acc[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; g++) q4x_group(R, C, 1, w, ws, x, xs, g, 4, acc);
  if (nb % 4) q4x_group(R, C, 0, w, ws, x, xs, ng, (int)(nb % 4), acc);
  FOR_R FOR_C OUT(r, c) = hsum16(acc[r][c]);
}
QS_TILE(t_q4x, 4, 8)

/*
 * Q4_0 x Q8_0Z (layout in act_layout.h): one int32 lane per block, so a block's 32 products
 * end in one exact integer and the float work (convert, scale, accumulate) is done once per block
 * instead of once per four lanes: per group of 16 blocks and activation column, eight vpdpbusd
 * and one convert / multiply / fused multiply-add on 16 lanes.
 * Weights: each group of four Q4_0 blocks (72 bytes) gives its 64 nibble bytes with one two-source
 * byte permute (slot s = block 4k+s, dword j = bytes 4j..4j+3); a 4 x 4 dword transpose of the
 * four groups gives V_j with lane 4s+k = bytes 4j..4j+3 of block 4k+s, i.e. Q8_0Z's lane order.
 * Per block and column: acc[lane] = fma(float(off + sum of 32 products), d_w * d_x, acc[lane]);
 * the result is hsum16(acc), groups in order. In a last group of fewer than 16 blocks the
 * missing blocks read as zero bytes (masked loads, never past the row) and add 0 * 0. Every tile
 * shape runs this arithmetic per pair, so tiles equal vec_dot bit for bit. Against the Q8_0X
 * kernels (four float lanes per block) the sums differ in rounding only; Q35_Q4_0_X=1 in the
 * environment selects those (a testing aid).
 */
static const int16_t q4z_sidx[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27}; /* word 9s: block s's d */

QSI void q4z_group(const int R, const int C, const int FULL, const uint8_t *const wr[TRM], size_t pfd, const uint8_t *x,
                   size_t xs, int64_t q, int kb, __m512 acc[TRM][TCM]) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i iq = _mm512_loadu_si512(q4x_iq), sidx = _mm512_loadu_si512(q4z_sidx);
  __m512i L[TRM][4], H[TRM][4];
  __m512 D[TRM];
  FOR_R {
    const uint8_t *a = wr[r] + (size_t)q * 16 * sizeof(blk_q4_0);
    /* the same group four tiles ahead, at least QS_PF_MIN bytes (pfd = pf_ahead, computed once a
     * tile: its division in here cost a divide per group; one tile ahead is too close for this
     * kernel's pace) */
    if (FULL) pf_span((const char *)a + pfd, 16 * sizeof(blk_q4_0));
    __m512i Q[4], R0[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
      if (FULL) { /* one 64-byte load and four 16-byte ones: from memory this streams faster than
                   * two overlapping 64-byte loads and a permute */
        const uint8_t *ak = a + 72 * k;
        R0[k] = _mm512_loadu_si512(ak);
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(ak + 2)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(ak + 20)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(ak + 38)), 2);
        Q[k] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(ak + 56)), 3);
      } else { /* blocks 4k.. of the kb present: 18 nk bytes, never read past them */
        const int nk = kb - 4 * k >= 4 ? 4 : kb - 4 * k > 0 ? kb - 4 * k : 0;
        if (nk == 0) {
          R0[k] = Q[k] = _mm512_setzero_si512();
          continue;
        }
        const int nbytes = 18 * nk; /* 18..72 */
        R0[k] = _mm512_maskz_loadu_epi8(nbytes >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << nbytes) - 1, a + 72 * k);
        const __m512i raw1 =
            _mm512_maskz_loadu_epi8(nbytes - 8 >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (nbytes - 8)) - 1, a + 72 * k + 8);
        Q[k] = _mm512_permutex2var_epi8(R0[k], iq, raw1);
      }
    }
    const __m512i t0 = _mm512_unpacklo_epi32(Q[0], Q[1]), t1 = _mm512_unpackhi_epi32(Q[0], Q[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(Q[2], Q[3]), t3 = _mm512_unpackhi_epi32(Q[2], Q[3]);
    const __m512i V[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                          _mm512_unpackhi_epi64(t1, t3)};
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
      L[r][j] = _mm512_and_si512(V[j], m4);
      H[r][j] = _mm512_and_si512(_mm512_srli_epi16(V[j], 4), m4);
    }
    __m512i dw = _mm512_maskz_permutexvar_epi16(0x1111, sidx, R0[0]);
    dw = _mm512_mask_permutexvar_epi16(dw, 0x2222, sidx, R0[1]);
    dw = _mm512_mask_permutexvar_epi16(dw, 0x4444, sidx, R0[2]);
    dw = _mm512_mask_permutexvar_epi16(dw, 0x8888, sidx, R0[3]);
    D[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(dw));
  }
  FOR_C {
    /* two chains of four per row (low and high nibbles), joined by one add: the int32 sums wrap
     * exactly, so this is the same integer as one chain of eight, at half its latency. Each of
     * the column's ten vectors is loaded once for all R rows: with every product reading its
     * own copy, a 2 x C tile issued twice the loads, and the load ports (not the multiplies)
     * bound the multi-column products. */
    const uint8_t *b = x + (size_t)c * xs + (size_t)q * Q8Z_GROUP;
    __m512i off = _mm512_loadu_si512(b + 512);
    if (R > 1) __asm__("" : "+v"(off));
    __m512i p[TRM], ph[TRM];
    FOR_R {
      p[r] = off;
      ph[r] = _mm512_setzero_si512();
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
      __m512i yl = _mm512_loadu_si512(b + 64 * j), yh = _mm512_loadu_si512(b + 256 + 64 * j);
      if (R > 1) /* in registers: the compiler would fold each load into every row's vpdpbusd */
        __asm__("" : "+v"(yl), "+v"(yh));
      FOR_R {
        p[r] = _mm512_dpbusd_epi32(p[r], L[r][j], yl);
        ph[r] = _mm512_dpbusd_epi32(ph[r], H[r][j], yh);
      }
    }
    const __m512 yd = _mm512_loadu_ps(b + 576);
    FOR_R acc[r][c] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p[r], ph[r])), _mm512_mul_ps(D[r], yd), acc[r][c]);
  }
}

/* The R x C block sums of rows wr[0..R-1], which may lie anywhere (a tile's rows, or two rows far
 * apart read as two memory streams), group by group; pfd = the prefetch distance per row. */
QSI void q4z_acc(const int R, const int C, const size_t pfd, int64_t n, const uint8_t *const wr[TRM], const uint8_t *x,
                 size_t xs, __m512 acc[TRM][TCM]) {
  const int64_t nb = n / QK8_0, ng = nb / 16;
  FOR_R FOR_C acc[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; g++) q4z_group(R, C, 1, wr, pfd, x, xs, g, 16, acc);
  if (nb % 16) q4z_group(R, C, 0, wr, pfd, x, xs, ng, (int)(nb % 16), acc);
}

QSI void t_q4z_pf(const int R, const int C, const size_t pfd, TILE_ARGS) { /* pfd = pf_ahead(R, ws) */
  const uint8_t *wr[TRM] = {0};
  FOR_R wr[r] = w + (size_t)r * ws;
  __m512 acc[TRM][TCM];
  q4z_acc(R, C, pfd, n, wr, x, xs, acc);
  FOR_R FOR_C OUT(r, c) = hsum16(acc[r][c]);
}

/* hsum16(a) and hsum16(b) in one pass: the same additions of the same lane pairs in the same
 * order (halves of 256, of 128, the high pair, then lanes 0 + 1), two accumulators side by
 * side in one register, so the bits are hsum16's with half its operations. */
QSF void hsum16x2(__m512 a, __m512 b, float *oa, float *ob) {
  /* 128-bit lanes: a0+a2, a1+a3, b0+b2, b1+b3 (hsum16's lo256 + hi256) */
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  /* lanes 0 and 2: hsum8's lo128 + hi128 of a and of b */
  const __m512 t = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0xB1));
  const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, 0xEE)); /* + movehl */
  const __m512 v = _mm512_add_ps(u, _mm512_movehdup_ps(u));      /* + movehdup, lane 0 */
  *oa = _mm512_cvtss_f32(v);
  *ob = _mm_cvtss_f32(_mm512_extractf32x4_ps(v, 2));
}

/* Rows wa and wb against C columns at once, interleaved group by group: oa[c*ocs], ob[c*ocs].
 * Each row's arithmetic is the 1 x C tile's, so both equal vec_dot bit for bit. */
QSI void t_q4z_two(const int C, const size_t pfd, int64_t n, const uint8_t *wa, const uint8_t *wb, const uint8_t *x,
                   size_t xs, float *oa, float *ob, size_t ocs) {
  const uint8_t *wr[TRM] = {wa, wb};
  __m512 acc[TRM][TCM];
  q4z_acc(2, C, pfd, n, wr, x, xs, acc);
  FOR_C hsum16x2(acc[0][c], acc[1][c], &oa[(size_t)c * ocs], &ob[(size_t)c * ocs]);
}
QSI void t_q4z(const int R, const int C, TILE_ARGS) { t_q4z_pf(R, C, pf_ahead(R, ws), n, w, ws, x, xs, o, ors, ocs); }
/* one-row tiles up to 8 columns: for this kernel a 1 x 8 tile streams a large matrix faster than
 * 2 x 4 tiles (QS_NARROW, quant_256.inc) */
#undef QS_NARROW
#define QS_NARROW 8
QS_TILE(t_q4z, 2, 4)
#undef QS_NARROW
#define QS_NARROW 4

/* Products of 1..3 columns (a decode step, a verify step of one or two drafts): all rows in one
 * call with the 1 x C tile inlined in the row loop, so its constants (byte and word permutes,
 * masks, the prefetch distance) are set up once a call instead of once a row, which for short rows
 * (an expert's down projection: one group of 16 blocks a row) was a large part of the row's work.
 * When the call's two halves are Q4Z_TWO_BYTES or more apart, rows r and r + nr/2 run together
 * (t_q4z_two): one core streams more from two ranges far apart than from one (its hardware
 * prefetchers run one stream each; docs/PERF.md, issue 15 session 13 and issue 19 session 14);
 * closer together they read no faster. Each output is still the 1 x C tile's, i.e. vec_dot's,
 * value. */
#define Q4Z_TWO_BYTES ((size_t)128 << 10)
QSI void q4z_rows_c(const int C, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, float *o,
                    size_t ors, size_t ocs) {
  const size_t pfd = pf_ahead(1, ws);
  const int h = nr / 2;
  int r = 0;
  if ((size_t)h * ws >= Q4Z_TWO_BYTES) {
    for (; r < h; r++)
      t_q4z_two(C, pfd, n, w + (size_t)r * ws, w + (size_t)(r + h) * ws, x, xs, &OUT(r, 0), &OUT(r + h, 0), ocs);
    r = 2 * h;
  } else if (C > 1) /* adjacent rows in pairs: each activation vector loaded once for both */
    for (; r + 1 < nr; r += 2)
      t_q4z_two(C, pfd, n, w + (size_t)r * ws, w + (size_t)(r + 1) * ws, x, xs, &OUT(r, 0), &OUT(r + 1, 0), ocs);
  for (; r < nr; r++) t_q4z_pf(1, C, pfd, n, w + (size_t)r * ws, ws, x, xs, &OUT(r, 0), ors, ocs);
}

static QS_TARGET void t_q4z_rows(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, int nc,
                                 float *o, size_t ors, size_t ocs) {
  switch (nc) {
  case 1: q4z_rows_c(1, n, wv, ws, nr, xv, xs, o, ors, ocs); return;
  case 2: q4z_rows_c(2, n, wv, ws, nr, xv, xs, o, ors, ocs); return;
  case 3: q4z_rows_c(3, n, wv, ws, nr, xv, xs, o, ors, ocs); return;
  default: t_q4z_tile(n, wv, ws, nr, xv, xs, nc, o, ors, ocs);
  }
}

/* The gemv2 entry (two row ranges, one column): row r of wa with row r of wb, as two streams when
 * the ranges are Q4Z_TWO_BYTES or more apart (either way round); else each range by itself. */
static QS_TARGET void t_q4z_gemv2(int64_t n, const void *wav, const void *wbv, size_t ws, int nr, const void *x,
                                  float *oa, float *ob, size_t ors) {
  const uint8_t *wa = wav, *wb = wbv;
  const uintptr_t ua = (uintptr_t)wa, ub = (uintptr_t)wb;
  if ((ua > ub ? ua - ub : ub - ua) < Q4Z_TWO_BYTES) {
    q4z_rows_c(1, n, wa, ws, nr, x, 0, oa, ors, 0);
    q4z_rows_c(1, n, wb, ws, nr, x, 0, ob, ors, 0);
    return;
  }
  const size_t pfd = pf_ahead(1, ws);
  for (int r = 0; r < nr; r++)
    t_q4z_two(1, pfd, n, wa + (size_t)r * ws, wb + (size_t)r * ws, x, 0, &oa[(size_t)r * ors], &ob[(size_t)r * ors], 0);
}

static QS_TARGET void quant_q8_0z_512(const float *x, void *dst, int64_t n) {
  q35_act_quantize(Q35_TYPE_Q8_0Z, x, dst, n, q8_0_block_256);
}

void q35_kernels_avx512(q35_kernels *k) {
  QS_SET(k, Q35_TYPE_Q8_0, t_q8y);
  k->q8_0_act = Q35_TYPE_Q8_0Y; /* over the AVX2 level's Q8_0Z kernel */
  QS_SET(k, Q35_TYPE_Q4_0, t_q4_0);
  k->q4_0_act = Q35_TYPE_Q8_0X; /* over the AVX2 level's Q8_0Z kernel; VBMI takes Q8_0Z again below */
  QS_SET(k, Q35_TYPE_Q5_0, t_q5_0);
  QS_SET(k, Q35_TYPE_Q4_K, t_q4k5);
  k->q4_k_act = Q35_TYPE_Q8_K; /* over the AVX2 level's Q8_KP kernels (its Q4_KR ones stay, on Q8_KP) */
  QS_SET(k, Q35_TYPE_Q5_K, t_q5_k);
  QS_SET(k, Q35_TYPE_Q6_K, t_q6k5);
  k->q6_k_act = Q35_TYPE_Q8_K; /* likewise over the AVX2 level's Q8_KP kernels (its Q6_KR ones stay) */
  /* one column (decode): the AVX2 level's products (the same bits), which read rows far apart
   * as two memory streams; the 512-bit vec_dot row by row reads one, without a useful prefetch */
  q35_kernels_avx2_kquant_gemv(k);
  QS_SET(k, Q35_TYPE_IQ4_XS, t_iq4_xs);
  QS_SET(k, Q35_TYPE_F32, t_f32);
  k->tile[Q35_TYPE_F32] = t_f32_wide;
  QS_SET(k, Q35_TYPE_F16, t_f16);
  QS_SET(k, Q35_TYPE_BF16, t_bf16);
  qs_fill_convert(k);
  if (q35_cpu_has(Q35_CPU_AVX512_VBMI)) {
    for (int i = 0; i < 64; i++) {
      const int p = i / 16, src = 18 * p + 2 + i % 16; /* nibble byte i%16 of block p */
      q4x_iq[i] = (uint8_t)(src < 64 ? src : 64 + src - 8);
      const int m = (i / 2) % 16; /* fp16 word m: block m/4's scale */
      q4x_id[i] = (uint8_t)(18 * (m / 4) + i % 2);
    }
    if (q35_cpu_q4_0_x()) { /* testing aid: the Q8_0X kernels (four lanes per block) */
      QS_SET(k, Q35_TYPE_Q4_0, t_q4x);
    } else {
      QS_SET(k, Q35_TYPE_Q4_0, t_q4z);
      k->tile[Q35_TYPE_Q4_0] = t_q4z_rows;
      k->gemv[Q35_TYPE_Q4_0] = t_q4z_rows; /* one row at a time with the prefetch (vec_dot has no stride) */
      k->gemv2[Q35_TYPE_Q4_0] = t_q4z_gemv2;
      k->quantize[Q35_TYPE_Q8_0Z] = quant_q8_0z_512;
      k->q4_0_act = Q35_TYPE_Q8_0Z;
    }
  }
  q35_kernels_lowbit_avx512(k);
  q35_kernels_iq_avx512(k);
  q35_kernels_quantize_plain_avx512(k);
}
