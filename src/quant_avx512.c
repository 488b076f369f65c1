/*
 * quant_avx512.c - the AVX-512 (F, BW, VL, VNNI) kernels. quant_simd.inc compiled with
 * VNNI (vpdpbusd / vpdpwssd on 256-bit vectors: no int16 saturation anywhere), plus
 * a 512-bit decode (1 x 1) kernel for Q8_0 and, where the CPU has AVX512-VBMI, 512-bit Q4_0 tiles.
 *
 * The 512-bit kernels hold two consecutive blocks in one register: the low 256 bits carry the
 * even block, the high 256 bits the odd one, so the low half of the accumulator is exactly
 * quant_simd.inc's even accumulator a0 and the high half its odd accumulator a1 (same lane
 * sums, same fused multiply-adds in the same order, a lone last block into the low half).
 * Results are therefore bit-identical to the tile kernels, which stay 256-bit.
 */
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "quant_simd.inc"

/* two 256-bit halves -> one 512-bit register */
QSF __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
QSF __m512 scale2(float s0, float s1) {
  return _mm512_castsi512_ps(join256(_mm256_castps_si256(_mm256_set1_ps(s0)), _mm256_castps_si256(_mm256_set1_ps(s1))));
}
/* nibbles32 of two blocks' qs: [lo(q0), hi(q0), lo(q1), hi(q1)] as 128-bit lanes */
QSF __m512i nibbles64(const uint8_t *q0, const uint8_t *q1) {
  const __m256i t = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)q1), _mm_loadu_si128((const __m128i *)q0));
  const __m512i z = join256(t, _mm256_srli_epi16(t, 4)); /* lanes: q0, q1, q0>>4, q1>>4 */
  return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0xF));
}


static QS_TARGET float dot_q8_0_512(int64_t n, const void *w, const void *x) {
  const blk_q8_0 *a = w, *b = x;
  const int64_t nb = n / QK8_0;
  __m512 acc = _mm512_setzero_ps();
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    const __m512i wq = _mm512_xor_si512(join256(loadu256(a[i].qs), loadu256(a[i + 1].qs)), bias);
    const __m512i y = join256(loadu256(b[i].qs), loadu256(b[i + 1].qs));
    const __m512i yf = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, y));
    const __m512i p = _mm512_dpbusd_epi32(yf, wq, y);
    acc = _mm512_fmadd_ps(scale2(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), _mm512_cvtepi32_ps(p), acc);
  }
  __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  if (i < nb) {
    const __m256i y = loadu256(b[i].qs);
    lo = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)),
                         _mm256_cvtepi32_ps(q8_pair(q8_wform(loadu256(a[i].qs)), y, q8_yform(y))), lo);
  }
  return hsum8(_mm256_add_ps(lo, hi));
}

/*
 * Q4_0 x Q8_0X with 512-bit registers (needs VBMI for the byte permutes). A group of four blocks
 * (72 bytes) is two loads; one two-source byte permute gathers the four blocks' 64 nibble bytes,
 * another the four fp16 scales, each repeated 4 times (one per int32 lane of its block). Lanes
 * 0..7 are quant_simd.inc's half 0, lanes 8..15 its half 1: same integers, same fused
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
    __m512i raw0, raw1;
    if (FULL) {
      raw0 = _mm512_loadu_si512(a);
      raw1 = _mm512_loadu_si512(a + 8);
    } else { /* k <= 3: 18k <= 54 bytes */
      raw0 = _mm512_maskz_loadu_epi8(((__mmask64)1 << (18 * k)) - 1, a);
      raw1 = _mm512_maskz_loadu_epi8(((__mmask64)1 << (18 * k - 8)) - 1, a + 8);
    }
    const __m512i q = _mm512_permutex2var_epi8(raw0, iq, raw1);
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
  FOR_R FOR_C OUT(r, c) = hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][c]),
                                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][c]), 1))));
}
QS_TILE(t_q4x, 2, 4)

void q35_kernels_avx512(q35_kernels *k) {
  qs_fill_256(k);
  k->vec_dot[Q35_TYPE_Q8_0] = dot_q8_0_512;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vbmi")) {
    for (int i = 0; i < 64; i++) {
      const int p = i / 16, src = 18 * p + 2 + i % 16; /* nibble byte i%16 of block p */
      q4x_iq[i] = (uint8_t)(src < 64 ? src : 64 + src - 8);
      const int m = (i / 2) % 16; /* fp16 word m: block m/4's scale */
      q4x_id[i] = (uint8_t)(18 * (m / 4) + i % 2);
    }
    k->vec_dot[Q35_TYPE_Q4_0] = t_q4x_dot;
    k->tile[Q35_TYPE_Q4_0] = t_q4x_tile;
    k->gemv[Q35_TYPE_Q4_0] = t_q4x_tile;
  }
}
