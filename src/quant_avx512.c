/*
 * quant_avx512.c - the AVX-512 (F, BW, VL, VNNI) kernels. quant_simd.inc compiled with
 * VNNI (vpdpbusd / vpdpwssd on 256-bit vectors: no int16 saturation anywhere), plus
 * 512-bit decode (1 x 1) kernels for Q8_0 and Q4_0.
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


static QS_TARGET float dot_q4_0_512(int64_t n, const void *w, const void *x) {
  const blk_q4_0 *a = w;
  const blk_q8_0 *b = x;
  const int64_t nb = n / QK8_0;
  __m512 acc = _mm512_setzero_ps();
  const __m512i k8 = _mm512_set1_epi8(8);
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    const __m512i u = nibbles64(a[i].qs, a[i + 1].qs);
    const __m512i y = join256(loadu256(b[i].qs), loadu256(b[i + 1].qs));
    const __m512i yk = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k8, y));
    const __m512i p = _mm512_dpbusd_epi32(yk, u, y);
    acc = _mm512_fmadd_ps(scale2(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), _mm512_cvtepi32_ps(p), acc);
  }
  __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  if (i < nb) {
    const __m256i y = loadu256(b[i].qs);
    lo = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)),
                         _mm256_cvtepi32_ps(dot_u_off(q4_0_u(&a[i]), y, ysum_k(y, 8))), lo);
  }
  return hsum8(_mm256_add_ps(lo, hi));
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

void q35_kernels_avx512(q35_kernels *k) {
  qs_fill_256(k);
  k->vec_dot[Q35_TYPE_Q4_0] = dot_q4_0_512;
  k->vec_dot[Q35_TYPE_Q8_0] = dot_q8_0_512;
}
