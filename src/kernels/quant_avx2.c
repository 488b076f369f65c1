/*
 * quant_avx2.c - the AVX2 level (AVX2 + FMA + F16C) of the weight kernels: the 256-bit templates
 * of quant_256*.inc compiled with maddubs / madd integer dot products. Kernels by type:
 *   Q4_0 x Q8_0Z, Q8_0 x Q8_0Z                 t_q4z2, t_q8z2 (here: one int32 lane per block)
 *   Q4_0R (Q4_0 repacked at load) x Q8_0Z      t_q4r2 (here: t_q4z2 without the transpose)
 *   Q5_0 x Q8_0                                 t_q5_0 (quant_256_q4_0_q5_0_q8_0.inc)
 *   Q4_0 x Q8_0X (testing aid Q35_Q4_0_X)       t_q4_0 (quant_256_q4_0_q5_0_q8_0.inc)
 *   Q5_K, IQ4_XS x Q8_K                         t_q5_k, t_iq4_xs (quant_256_kquants.inc);
 *                                               one column of Q5_K: q4k_row1 (here)
 *   Q6_K, Q6_KR (repacked at load) x Q8_KP      t_q6kp, t_q6kr, k6r_row1 (quant_k6r_avx2.inc); t_q6_k
 *                                               and q6k_row1 stay for the AVX-512 level's Q6_K gemv
 *   Q4_K, Q4_KR (repacked at load) x Q8_KP      t_q4kp, t_q4kr, k4r_row1 (quant_k4r_avx2.inc); t_q4_k
 *                                               and q4k_row1 stay for the AVX-512 level's Q4_K gemv
 *   Q2_K, Q2_KR (repacked at load) x Q8_KP      t_q2kp, t_q2kr, k2r_row1 (quant_k2r_avx2.inc)
 *   Q3_K, Q3_KR (repacked at load) x Q8_KP      t_q3kp, t_q3kr, k3r_row1 (quant_k3r_avx2.inc)
 *   F32, F16, BF16                              t_f32, t_f16, t_bf16 (quant_256_float.inc)
 *   quantize Q8_0, Q8_K, Q8_0X, Q8_0Y, Q8_0Z; dequantize F16, BF16, Q8_0, Q4_0 (quant_256_convert.inc)
 * The plain Q4_0 / Q5_0 / Q4_1 / Q5_1 weight quantizers: quantize_plain_avx2.c. The rest (other
 * weight quantizers, other dequantizers) is the reference's. quant.c selects this level
 * when q35_simd_active() is avx2 and lays the AVX-512 level over it above that.
 */
#define QS_TARGET __attribute__((target("avx2,fma,f16c")))
#define QS_VNNI 0
#include "kernels/quant_256.inc"
#include "kernels/quant_256_q4_0_q5_0_q8_0.inc"
#include "kernels/quant_256_kquants.inc"
#include "kernels/quant_256_float.inc"
#include "kernels/quant_256_convert.inc"
#include "kernels/z2_avx2.h"

/*
 * Q4_0 x Q8_0Z (layout in act_layout.h) on 256-bit vectors: quant_avx512.c's t_q4z arithmetic,
 * one int32 lane per block, with the 16 lanes of a group held as two halves of 8 (lanes 0..7:
 * blocks 4k+s, s = 0, 1; lanes 8..15: s = 2, 3) and the AVX-512 VNNI dot product replaced by
 * exact integer steps. Per half, per row: the nibbles of its 8 blocks go through a 4 x 4 dword
 * transpose inside each 128-bit lane (low lane blocks 4k+2h, high lane 4k+2h+1), which puts
 * bytes 4j..4j+3 of each block in its own lane of V_j, Q8_0Z's lane order. Per pair:
 *   s16 = sum over j of maddubs(V_j & 15, YL_j) + maddubs(V_j >> 4, YH_j)    (int16, exact)
 *   p   = madd(s16, 1) + off                                               (int32, exact)
 *   acc = fma(float(p), d_w * d_x, acc)
 * Each int16 lane sums 8 pairs of products of a nibble (<= 15) and an int8, |sum| <= 8 * 2 * 15
 * * 128 = 30720, so nothing saturates and p is the exact integer vpdpbusd gives there: every lane
 * goes through t_q4z's float steps in its order, and the result hsum8(half 0 + half 1) is t_q4z's
 * hsum16, bit for bit (tests/test_quant_tile.c compares the levels).
 * The halves run as two passes over the row (the second reads it from L1), so a pair keeps one
 * accumulator live at a time; one column and one row (vec_dot, the gemv) run both halves in one
 * pass instead (q4z2_row1). A last group of fewer than 16 blocks is copied into a zeroed buffer
 * first: missing blocks read as zero bytes, as t_q4z's masked loads give them.
 */
#define Z2C 16 /* t_q4z2's largest C (its prefill tile is 1 x 16: see the shapes below) */
/* the fp16 scales (at the start of each block of bs bytes) of blocks b0, b0 + 4, b0 + 8, b0 + 12 */
QSF uint64_t z2_d4(const uint8_t *a, int bs, int b0) {
  uint16_t d[4];
  for (int k = 0; k < 4; k++) memcpy(&d[k], a + bs * (b0 + 4 * k), 2);
  return (uint64_t)d[0] | (uint64_t)d[1] << 16 | (uint64_t)d[2] << 32 | (uint64_t)d[3] << 48;
}

/*
 * Q4_0R: Q4_0 rows repacked at load (q35_repack_row, quant_ref.c) into the order the kernels
 * above read: per whole group of 16 blocks (288 bytes, as the plain group) the V_0..V_3 of half
 * 0 (bytes 0..127), those of half 1 (128..255), then half 0's and half 1's 8 fp16 scales in
 * q4z2_d8's order (256..287); a short last group stays plain. The kernels load V_j and the
 * scales directly (rp = 1) and run the same integer and float steps: the same bits as Q4_0.
 */
/* half h of group q (16 blocks at a, per row; rp: repacked) for every pair */
QSI void q4z2_half(const int rp, const int R, const int C, const uint8_t *const *ga, const uint8_t *x, size_t xs,
                   int64_t q, int h, const int pf, const uint8_t *const *pfa, __m256 acc[TRM][Z2C]) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256i L[TRM][4], H[TRM][4];
  __m256 D[TRM];
  FOR_R {
    const uint8_t *a = ga[r];
    if (pf) pf_span(pfa[r], 16 * sizeof(blk_q4_0));
    __m256i V[4];
    q4z2_v(rp, a, h, V);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
      L[r][j] = _mm256_and_si256(V[j], m4);
      H[r][j] = _mm256_and_si256(_mm256_srli_epi16(V[j], 4), m4);
    }
    D[r] = _mm256_cvtph_ps(rp ? _mm_loadu_si128((const __m128i *)(a + 256 + 16 * h))
                              : _mm_set_epi64x((long long)z2_d4(a, 18, 2 * h + 1), (long long)z2_d4(a, 18, 2 * h)));
  }
  _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) {
    const uint8_t *b = x + (size_t)c * xs + (size_t)q * Q8Z_GROUP + 32 * h;
    const __m256 yd = _mm256_loadu_ps((const float *)(const void *)(b + 576));
    const __m256i off = loadu256(b + 512);
    FOR_R {
      __m256i s16 = _mm256_maddubs_epi16(L[r][0], loadu256(b));
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(H[r][0], loadu256(b + 256)));
      _Pragma("GCC unroll 3") for (int j = 1; j < 4; j++) {
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(L[r][j], loadu256(b + 64 * j)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(H[r][j], loadu256(b + 256 + 64 * j)));
        KQ_PIN(s16);
      }
      const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), off);
      acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(D[r], yd), acc[r][c]);
    }
  }
}

/* one group of a Q4_0 row (16 blocks at a; rp: repacked) against one column's group b, both halves */
QSI void q4z2_g1x(const int rp, const uint8_t *a, const uint8_t *b, __m256 acc[2]) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256 D[2] = {_mm256_cvtph_ps(rp ? _mm_loadu_si128((const __m128i *)(a + 256)) : q4z2_d8(a, 0)),
                       _mm256_cvtph_ps(rp ? _mm_loadu_si128((const __m128i *)(a + 272)) : q4z2_d8(a, 1))};
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    __m256i V[4];
    q4z2_v(rp, a, h, V);
    const uint8_t *bh = b + 32 * h;
    __m256i s16 = _mm256_maddubs_epi16(_mm256_and_si256(V[0], m4), loadu256(bh));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(V[0], 4), m4), loadu256(bh + 256)));
    _Pragma("GCC unroll 3") for (int j = 1; j < 4; j++) {
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(V[j], m4), loadu256(bh + 64 * j)));
      s16 = _mm256_add_epi16(
          s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(V[j], 4), m4), loadu256(bh + 256 + 64 * j)));
    }
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), loadu256(bh + 512));
    const __m256 yd = _mm256_loadu_ps((const float *)(const void *)(bh + 576));
    acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(D[h], yd), acc[h]);
  }
}

QSI void q4z2_g1(const uint8_t *a, const uint8_t *b, __m256 acc[2]) { q4z2_g1x(0, a, b, acc); }
QSI void q4r2_g1(const uint8_t *a, const uint8_t *b, __m256 acc[2]) { q4z2_g1x(1, a, b, acc); }

/* one Q4_0 row (n elements at w; rp: Q4_0R) times one Q8_0Z column x; prefetches the group pfd
 * bytes ahead. A short last group is plain Q4_0 either way. */
QSI float q4z2_row1x(const int rp, int64_t n, const uint8_t *w, size_t pfd, const uint8_t *x) {
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q4_0);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t q = 0; q < ng; q++) {
    const uint8_t *g = w + (size_t)q * gsz;
    pf_span(g + pfd, gsz);
    q4z2_g1x(rp, g, x + (size_t)q * Q8Z_GROUP, acc);
  }
  if (kb) { /* a last group of kb < 16 blocks, zero-padded */
    uint8_t tail[16 * sizeof(blk_q4_0)];
    memset(tail, 0, gsz);
    memcpy(tail, w + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q4_0));
    q4z2_g1(tail, x + (size_t)ng * Q8Z_GROUP, acc);
  }
  return hsum8(_mm256_add_ps(acc[0], acc[1]));
}
QSI float q4z2_row1(int64_t n, const uint8_t *w, size_t pfd, const uint8_t *x) { return q4z2_row1x(0, n, w, pfd, x); }
QSI float q4r2_row1(int64_t n, const uint8_t *w, size_t pfd, const uint8_t *x) { return q4z2_row1x(1, n, w, pfd, x); }

QSI void t_q4z2x(const int rp, const int R, const int C, TILE_ARGS) {
  if (R == 1 && C == 1) {
    OUT(0, 0) = q4z2_row1x(rp, n, w, pf_ahead(1, ws), x);
    return;
  }
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q4_0);
  uint8_t tail[TRM][16 * sizeof(blk_q4_0)]; /* a last group of kb < 16 blocks, zero-padded */
  if (kb) FOR_R {
      memset(tail[r], 0, gsz);
      memcpy(tail[r], w + (size_t)r * ws + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q4_0));
    }
  __m256 acc[2][TRM][Z2C];
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    FOR_R _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) acc[h][r][c] = _mm256_setzero_ps();
    for (int64_t q = 0; q < ng; q++) {
      const uint8_t *ga[TRM], *pfa[TRM];
      /* the same group four tiles ahead, on the first pass (as t_q4z) */
      FOR_R ga[r] = w + (size_t)r * ws + (size_t)q * gsz, pfa[r] = ga[r] + pf_ahead(R, ws);
      q4z2_half(rp, R, C, ga, x, xs, q, h, h == 0, pfa, acc[h]);
    }
    if (kb) {
      const uint8_t *ga[TRM];
      FOR_R ga[r] = tail[r];
      q4z2_half(0, R, C, ga, x, xs, ng, h, 0, ga, acc[h]);
    }
  }
  FOR_R _Pragma("GCC unroll 16") for (int c = 0; c < C; c++) OUT(r, c) = hsum8(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
}
QSI void t_q4z2(const int R, const int C, TILE_ARGS) { t_q4z2x(0, R, C, n, w, ws, x, xs, o, ors, ocs); }
QSI void t_q4r2(const int R, const int C, TILE_ARGS) { t_q4z2x(1, R, C, n, w, ws, x, xs, o, ors, ocs); }

/*
 * Q8_0 x Q8_0Z: the same one-lane-per-block scheme for Q8_0 weights, whose 32 signed bytes meet
 * the activation bytes of Q8_0Z's YL_0..3 (elements 0..15) and YH_0..3 (16..31); the off field is
 * not used. Per half, per row: two 4 x 4 dword transposes per 128-bit lane (elements 0..15 into
 * V_0..3, 16..31 into V_4..7) and their absolute values; per pair:
 *   p   = sum over j of madd(maddubs(|V_j|, sign(Y_j, V_j)), 1)    (int32, exact)
 *   acc = fma(float(p), d_w * d_x, acc)
 * Each maddubs pair is at most 2 * 128 * 127 (the activations come from the Q8_0 quantizer, so
 * |y| <= 127; a weight byte may be -128, whose magnitude 128 vpsignb leaves as the unsigned 128):
 * no saturation. The halves and a short last group go as in t_q4z2. These bits differ from the
 * AVX-512 level's Q8_0 x Q8_0Y (16 float lanes per block pair) in rounding only.
 */
QSF __m256i q8z2_ld2(const uint8_t *a, int b0, int part) { /* bytes 16part.. of blocks b0 (low lane), b0 + 1 */
  return _mm256_loadu2_m128i((const __m128i *)(a + 34 * (b0 + 1) + 2 + 16 * part),
                             (const __m128i *)(a + 34 * b0 + 2 + 16 * part));
}

QSI void q8z2_half(const int R, const int C, const uint8_t *const *ga, const uint8_t *x, size_t xs, int64_t q, int h,
                   const int pf, const uint8_t *const *pfa, __m256 acc[TRM][TCM]) {
  __m256i P[TRM][TCM];
  __m256 D[TRM];
  FOR_R FOR_C P[r][c] = _mm256_setzero_si256();
  /* elements 0..15 (part 0) then 16..31: four transposed vectors per row live at a time */
  _Pragma("GCC unroll 2") for (int part = 0; part < 2; part++) {
    __m256i S[TRM][4];
    FOR_R {
      const uint8_t *a = ga[r];
      if (pf && part == 0) pf_span(pfa[r], 16 * sizeof(blk_q8_0));
      const __m256i y0 = q8z2_ld2(a, 2 * h, part), y1 = q8z2_ld2(a, 4 + 2 * h, part),
                    y2 = q8z2_ld2(a, 8 + 2 * h, part), y3 = q8z2_ld2(a, 12 + 2 * h, part);
      const __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
      const __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
      S[r][0] = _mm256_unpacklo_epi64(t0, t2);
      S[r][1] = _mm256_unpackhi_epi64(t0, t2);
      S[r][2] = _mm256_unpacklo_epi64(t1, t3);
      S[r][3] = _mm256_unpackhi_epi64(t1, t3);
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
      __m256i A[TRM];
      FOR_R A[r] = _mm256_sign_epi8(S[r][j], S[r][j]);
      FOR_C {
        const __m256i y = loadu256(x + (size_t)c * xs + (size_t)q * Q8Z_GROUP + 32 * h + 256 * part + 64 * j);
        FOR_R {
          P[r][c] = _mm256_add_epi32(
              P[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(A[r], _mm256_sign_epi8(y, S[r][j])), _mm256_set1_epi16(1)));
          KQ_PIN(P[r][c]); /* a running sum in a register, not 32 products spilled (KQ_PIN) */
        }
      }
    }
  }
  FOR_R D[r] = _mm256_cvtph_ps(_mm_set_epi64x((long long)z2_d4(ga[r], 34, 2 * h + 1), (long long)z2_d4(ga[r], 34, 2 * h)));
  FOR_C {
    const __m256 yd = _mm256_loadu_ps((const float *)(const void *)(x + (size_t)c * xs + (size_t)q * Q8Z_GROUP + 32 * h + 576));
    FOR_R acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[r][c]), _mm256_mul_ps(D[r], yd), acc[r][c]);
  }
}

/* Q8_0 (blocks of 34 bytes): half h's 8 scales. The two 16-byte loads of lane k start 2k bytes
 * before the scales of blocks e = 4k + 2h (low 128-bit lane) and e + 1 (high), so both land in
 * word k; three word blends collect the four pairs and a qword permute puts the high lane's
 * words after the low lane's (z2_d4's order). The loads span bytes 68h .. 68h + 452 of the group. */
QSF __m128i q8z2_d8(const uint8_t *a, int h) {
  __m256i u[4];
  _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
    const uint8_t *e = a + 34 * (4 * k + 2 * h) - 2 * k;
    u[k] = _mm256_loadu2_m128i((const __m128i *)(e + 34), (const __m128i *)e);
  }
  const __m256i r = _mm256_blend_epi16(_mm256_blend_epi16(u[0], u[1], 0x02), _mm256_blend_epi16(u[2], u[3], 0x08), 0x0C);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(r, 0x08));
}

/* one group of a Q8_0 row (16 blocks at a) against one column's group b, both halves: q8z2_half's
 * steps for one pair, with the scales from q8z2_d8 */
QSI void q8z2_g1(const uint8_t *a, const uint8_t *b, __m256 acc[2]) {
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    __m256i P = _mm256_setzero_si256();
    _Pragma("GCC unroll 2") for (int part = 0; part < 2; part++) {
      const __m256i y0 = q8z2_ld2(a, 2 * h, part), y1 = q8z2_ld2(a, 4 + 2 * h, part),
                    y2 = q8z2_ld2(a, 8 + 2 * h, part), y3 = q8z2_ld2(a, 12 + 2 * h, part);
      const __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
      const __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
      const __m256i S[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                            _mm256_unpackhi_epi64(t1, t3)};
      _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        const __m256i y = loadu256(b + 32 * h + 256 * part + 64 * j);
        P = _mm256_add_epi32(P, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(S[j], S[j]), _mm256_sign_epi8(y, S[j])),
                                                  _mm256_set1_epi16(1)));
        KQ_PIN(P);
      }
    }
    const __m256 yd = _mm256_loadu_ps((const float *)(const void *)(b + 32 * h + 576));
    acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P), _mm256_mul_ps(_mm256_cvtph_ps(q8z2_d8(a, h)), yd), acc[h]);
  }
}

/* one Q8_0 row (n elements at w) times one Q8_0Z column x; prefetches the group pfd bytes ahead */
QSI float q8z2_row1(int64_t n, const uint8_t *w, size_t pfd, const uint8_t *x) {
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q8_0);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t q = 0; q < ng; q++) {
    const uint8_t *g = w + (size_t)q * gsz;
    pf_span(g + pfd, gsz);
    q8z2_g1(g, x + (size_t)q * Q8Z_GROUP, acc);
  }
  if (kb) { /* a last group of kb < 16 blocks, zero-padded */
    uint8_t tail[16 * sizeof(blk_q8_0)];
    memset(tail, 0, gsz);
    memcpy(tail, w + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q8_0));
    q8z2_g1(tail, x + (size_t)ng * Q8Z_GROUP, acc);
  }
  return hsum8(_mm256_add_ps(acc[0], acc[1]));
}

/* Two rows (at wa and wb) of Q4_0 (q4z2) or Q8_0 (q8z2) times one column, group by group: each
 * row's steps are T_row1's, so each result has its bits. For rows far apart, so that one core
 * reads two memory streams at once (t_q4z2_gemv, the gemv2 kernels below). */
#define Z2_ROW2(T, BLK, TT)                                                                                           \
  QSI void T##_row2(int64_t n, const uint8_t *wa, const uint8_t *wb, size_t pfd, const uint8_t *x, float *oa,      \
                    float *ob) {                                                                                    \
    const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;                                                       \
    const size_t gsz = 16 * sizeof(BLK);                                                                            \
    __m256 aa[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, ab[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  \
    for (int64_t q = 0; q < ng; q++) {                                                                              \
      const uint8_t *ga = wa + (size_t)q * gsz, *gb = wb + (size_t)q * gsz;                                         \
      pf_span(ga + pfd, gsz);                                                                                       \
      pf_span(gb + pfd, gsz);                                                                                       \
      T##_g1(ga, x + (size_t)q * Q8Z_GROUP, aa);                                                                    \
      T##_g1(gb, x + (size_t)q * Q8Z_GROUP, ab);                                                                    \
    }                                                                                                               \
    if (kb) { /* a last group of kb < 16 blocks, zero-padded */                                                     \
      uint8_t tail[16 * sizeof(BLK)];                                                                               \
      memset(tail, 0, gsz);                                                                                         \
      memcpy(tail, wa + (size_t)ng * gsz, (size_t)kb * sizeof(BLK));                                                \
      TT##_g1(tail, x + (size_t)ng * Q8Z_GROUP, aa);                                                                \
      memcpy(tail, wb + (size_t)ng * gsz, (size_t)kb * sizeof(BLK));                                                \
      TT##_g1(tail, x + (size_t)ng * Q8Z_GROUP, ab);                                                                \
    }                                                                                                               \
    *oa = hsum8(_mm256_add_ps(aa[0], aa[1]));                                                                       \
    *ob = hsum8(_mm256_add_ps(ab[0], ab[1]));                                                                       \
  }
Z2_ROW2(q4z2, blk_q4_0, q4z2)
Z2_ROW2(q4r2, blk_q4_0, q4z2) /* a short last group of a Q4_0R row is plain */
Z2_ROW2(q8z2, blk_q8_0, q8z2)
#undef Z2_ROW2

QSI void t_q8z2(const int R, const int C, TILE_ARGS) {
  if (R == 1 && C == 1) {
    OUT(0, 0) = q8z2_row1(n, w, pf_ahead(1, ws), x);
    return;
  }
  const int64_t nb = n / QK8_0, ng = nb / 16, kb = nb % 16;
  const size_t gsz = 16 * sizeof(blk_q8_0);
  uint8_t tail[TRM][16 * sizeof(blk_q8_0)]; /* a last group of kb < 16 blocks, zero-padded */
  if (kb) FOR_R {
      memset(tail[r], 0, gsz);
      memcpy(tail[r], w + (size_t)r * ws + (size_t)ng * gsz, (size_t)kb * sizeof(blk_q8_0));
    }
  __m256 acc[2][TRM][TCM];
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    FOR_R FOR_C acc[h][r][c] = _mm256_setzero_ps();
    for (int64_t q = 0; q < ng; q++) {
      const uint8_t *ga[TRM], *pfa[TRM];
      FOR_R ga[r] = w + (size_t)r * ws + (size_t)q * gsz, pfa[r] = ga[r] + pf_ahead(R, ws);
      q8z2_half(R, C, ga, x, xs, q, h, h == 0, pfa, acc[h]);
    }
    if (kb) {
      const uint8_t *ga[TRM];
      FOR_R ga[r] = tail[r];
      q8z2_half(R, C, ga, x, xs, ng, h, 0, ga, acc[h]);
    }
  }
  FOR_R FOR_C OUT(r, c) = hsum8(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
}

/* Micro-tile shapes R x C (16 vector registers). The K-quants run one weight row by 8 columns:
 * with their integer accumulators pinned (KQ_PIN in quant_256_kquants.inc) a step needs 8 sums,
 * 2 decoded weight vectors and 2 scale vectors live, and the decoding is shared by 8 columns
 * (512 x 2048 x 16 in cache, tile_bench: Q4_K 57 -> 79 GMAC/s, 1 x 4 -> 1 x 8; docs/PERF.md).
 * Q8_0 likewise: with P pinned, 1 x 8 holds 8 sums, 4 transposed weight vectors and |V_j|
 * (tile_bench 512 x 2048 x 16: 52 -> 67 GMAC/s from 1 x 6 unpinned). */
QS_TILE(t_q4_0, 2, 2)
QS_TILE(t_q4z2, 1, 8)
QS_TILE(t_q4r2, 1, 8)
QS_TILE(t_q8z2, 1, 8)
QS_TILE(t_q5_0, 2, 2)
QS_TILE(t_q4_k, 1, 8)
QS_TILE(t_q5_k, 1, 8)
QS_TILE(t_q6_k, 1, 8)
QS_TILE(t_iq4_xs, 2, 2)
QS_TILE(t_f32, 1, 2)
QS_TILE(t_f16, 1, 2)
QS_TILE(t_bf16, 1, 2)
/* F32 (the MoE router's matrix) in prefill: QS_T_FLTK's loop order, whose 3 x 4 tile holds 12
 * accumulators, 3 weight vectors and an activation vector (7 loads for 12 FMAs; 2 x 6 loaded
 * each activation twice and was slower), against 1 x 2 for QS_T_FLT (8 = 4 x 2 accumulators, 3
 * loads for 2 FMAs); same bits. Decode products (at most QS_NARROW columns) keep t_f32's one-row
 * tiles: QS_T_FLTK's 1 x 1 runs one FMA chain at a time. */
QS_TILE(t_f32k, 3, 4)
static QS_TARGET void t_f32_wide(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *o,
                                 size_t ors, size_t ocs) {
  (void)t_f32k_dot; /* vec_dot stays t_f32's */
  /* whole 3-row tiles here; the rows left over (the shared expert's 1-row gate) in t_f32's
   * tiles, whose 1 x 2 keeps 8 FMA chains going where QS_T_FLTK's 1 x C would keep C */
  const int nk = nc <= QS_NARROW ? 0 : nr - nr % 3;
  if (nk) t_f32k_tile(n, w, ws, nk, x, xs, nc, o, ors, ocs);
  if (nk < nr)
    t_f32_tile(n, (const uint8_t *)w + (size_t)nk * ws, ws, nr - nk, x, xs, nc, o + (size_t)nk * ors, ors, ocs);
}

/*
 * Prefill drivers of the one-row tiles t_q4z2 (1 x 16), t_q8z2 and the K-quants' (1 x 8): cache
 * panels (ROW1_XPANEL bytes of columns, QS_WPANEL of rows), and per row the columns in tiles of
 * TC and one tile of the k < TC left over. QS_TILE's driver splits a leftover into 4 + 2 + 1 columns,
 * and every piece decodes the row again, while a 512-token prompt gives a 256-expert layer's
 * experts 16 columns on average (8 experts per token): the leftovers are a large share there.
 * Q4_0 steps by 16 columns: the 8 transposed nibble vectors of a row's half group (4 x 4 dword
 * transposes, masks, shifts: ~30 vector instructions) serve 16 columns instead of 8, while the
 * accumulators live on the stack already at 1 x 8 (one load and one store per pair and group).
 * Q8_0 and the K-quants stay at 8 (their 8 integer sums are pinned in registers). Every pair's
 * arithmetic is the template's, so each output still equals the type's vec_dot bit for bit. Products of at most
 * QS_NARROW columns (decode) keep QS_TILE's one-row path (T_tile).
 */
/* Column panels of about ROW1_XPANEL bytes of activations (at least one tile): a one-row tile
 * reads its columns' activations once per weight row (320 bytes per pair and 8 blocks against 18
 * bytes of weights per block), so they have to come from L1. QS_XPANEL's 192 KiB panels stream
 * them from L2 for every row, and the tiles fell from ~85 GMAC/s at 16 columns to ~60 at 256
 * (Q4_0, 512 x 2048, tile_bench; docs/PERF.md, issue 15 session 8). 24 KiB leaves room in a
 * 32 KiB (Haswell) or 48 KiB (Zen 5) L1 for the weight row and the accumulators. */
#define ROW1_XPANEL (24 * 1024)
typedef void (*row1_fn)(TILE_ARGS);
QSI void row1_tile(const int TC, const row1_fn *fk, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                   size_t xs, int nc, float *o, size_t ors, size_t ocs) {
  const size_t xrow = xs ? xs : 1, wrow = ws ? ws : 1;
  int cp = (int)(ROW1_XPANEL / xrow), rp = (int)(QS_WPANEL / wrow);
  cp = cp < TC ? TC : cp - cp % TC;
  rp = rp < 1 ? 1 : rp;
  for (int r0 = 0; r0 < nr; r0 += rp) {
    const int r1 = nr - r0 < rp ? nr : r0 + rp;
    for (int c0 = 0; c0 < nc; c0 += cp) {
      const int c1 = nc - c0 < cp ? nc : c0 + cp;
      for (int r = r0; r < r1; r++) {
        int c = c0;
        for (; c + TC <= c1; c += TC) fk[TC](n, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs, &OUT(r, c), ors, ocs);
        if (c < c1) fk[c1 - c](n, w + (size_t)r * ws, ws, x + (size_t)c * xs, xs, &OUT(r, c), ors, ocs);
      }
    }
  }
}

#define ROW1(T, C) \
  static QS_TARGET void T##_1x##C(TILE_ARGS) { T(1, C, n, w, ws, x, xs, o, ors, ocs); }
ROW1(t_q4z2, 9)
ROW1(t_q4z2, 10)
ROW1(t_q4z2, 11)
ROW1(t_q4z2, 12)
ROW1(t_q4z2, 13)
ROW1(t_q4z2, 14)
ROW1(t_q4z2, 15)
ROW1(t_q4z2, 16)
ROW1(t_q4r2, 9)
ROW1(t_q4r2, 10)
ROW1(t_q4r2, 11)
ROW1(t_q4r2, 12)
ROW1(t_q4r2, 13)
ROW1(t_q4r2, 14)
ROW1(t_q4r2, 15)
ROW1(t_q4r2, 16)
#undef ROW1

static QS_TARGET void t_q4z2_wide(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *o,
                                  size_t ors, size_t ocs) {
  static const row1_fn fk[17] = {NULL,          t_q4z2_11,     t_q4z2_12,     t_q4z2_13,     t_q4z2_14,     t_q4z2_15,
                                 t_q4z2_16,     t_q4z2_17,     t_q4z2_18,     t_q4z2_1x9,    t_q4z2_1x10,   t_q4z2_1x11,
                                 t_q4z2_1x12,   t_q4z2_1x13,   t_q4z2_1x14,   t_q4z2_1x15,   t_q4z2_1x16};
  if (nc <= QS_NARROW) t_q4z2_tile(n, w, ws, nr, x, xs, nc, o, ors, ocs);
  else row1_tile(16, fk, n, w, ws, nr, x, xs, nc, o, ors, ocs);
}
static QS_TARGET void t_q4r2_wide(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *o,
                                  size_t ors, size_t ocs) {
  static const row1_fn fk[17] = {NULL,          t_q4r2_11,     t_q4r2_12,     t_q4r2_13,     t_q4r2_14,     t_q4r2_15,
                                 t_q4r2_16,     t_q4r2_17,     t_q4r2_18,     t_q4r2_1x9,    t_q4r2_1x10,   t_q4r2_1x11,
                                 t_q4r2_1x12,   t_q4r2_1x13,   t_q4r2_1x14,   t_q4r2_1x15,   t_q4r2_1x16};
  if (nc <= QS_NARROW) t_q4r2_tile(n, w, ws, nr, x, xs, nc, o, ors, ocs);
  else row1_tile(16, fk, n, w, ws, nr, x, xs, nc, o, ors, ocs);
}

/*
 * The gemv (one column) of Q4_K / Q5_K and Q6_K: one row against one Q8_K column per call of
 * q4k_row1 / q6k_row1, rows looped in one function, with the integer and float steps of t_q4_k / t_q5_k /
 * t_q6_k (quant_256_kquants.inc) for C = R = 1, so every int32 lane of a block's isum and msum
 * is the same integer and every float step the same operation in the same order: the same bits
 * as vec_dot, the tiles and the AVX-512 level (tests/test_quant_tile.c). Fewer instructions per
 * super-block than the template's 1 x 1 instance:
 * - the scales: the 16 bytes from q4k_sm8's unpack done on a 128-bit broadcast load (no
 *   separate broadcast); Q6_K's 16 int8 scales widened once per block, each half's 8 by one
 *   qword permute (the template widens and broadcasts them per half and again for the bsums);
 * - the float step: d and dmin (Q6_K: d) converted from one broadcast load, multiplied by d_x in
 *   all lanes (the same float product d_w * d_x as the template's broadcasts), and each product
 *   spread over the lanes with one in-lane permute (the template: two scalar conversions, two
 *   broadcasts from registers and two multiplies per block);
 * - the prefetch: the rows are contiguous, so the same offset pfd ahead of each block is one line
 *   per 64 bytes it covers (the template's pf_span adds a prefetch of its last byte, and
 *   vec_dot's ws = 0 made it prefetch the block being read);
 * - no call, stack frame and setup per row.
 */
static inline __attribute__((always_inline)) QS_TARGET void kq_pf(const uint8_t *p, const int bytes) {
#ifndef Q35_NO_PREFETCH
  /* consecutive blocks: lines p .. p + bytes rounded up, whose union over the blocks covers the row */
  _Pragma("GCC unroll 4") for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
#else
  (void)p, (void)bytes;
#endif
}

/* a Q4_K / Q5_K block's 16 scale/min bytes (q4k_sm8's: sc0..3 mn0..3 sc4..7 mn4..7) in both
 * 128-bit lanes, unpacked with scalar integer operations from the little-endian words u0 u1 u2
 * at s: sc0..3 = u0 & 0x3f.., mn0..3 = u1 & 0x3f.., sc4..7 = (u2 & 0x0f..) | ((u0 >> 2) &
 * 0x30..), mn4..7 = ((u2 >> 4) & 0x0f..) | ((u1 >> 2) & 0x30..), two of them per 64-bit
 * operation (u2 | u2 << 28 holds u2 in the low word and u2 >> 4 in the high one, up to bits the
 * 0x0f mask drops). The same bytes as q4k_sm8; this loop is bound by the vector ALU operations per
 * block, and the integer ALUs are idle (docs/PERF.md, issue 15 session 18): 7 vector operations
 * become 3 (a move, an insert, a lane broadcast). */
QSF __m256i q4k_sm8x2(const uint8_t *s) {
  uint64_t v;
  uint32_t u2;
  memcpy(&v, s, 8);
  memcpy(&u2, s + 8, 4);
  const uint64_t lo = v & 0x3f3f3f3f3f3f3f3full;
  const uint64_t hi = ((u2 | (uint64_t)u2 << 28) & 0x0f0f0f0f0f0f0f0full) | ((v >> 2) & 0x3030303030303030ull);
  const __m128i x = _mm_insert_epi64(_mm_cvtsi64_si128((long long)lo), (long long)hi, 1);
  return _mm256_broadcastsi128_si256(x);
}

/* acc plus one Q4_K (HAS_QH 0) or Q5_K (1) block at a times the Q8_K block b */
QSI __m256 q4k_blk(const int HAS_QH, const uint8_t *a, const blk_q8_k *b, __m256 acc) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i sm = q4k_sm8x2(a + 4);
  const uint8_t *qs = HAS_QH ? ((const blk_q5_k *)(const void *)a)->qs : ((const blk_q4_k *)(const void *)a)->qs;
  __m256i qh = _mm256_setzero_si256();
  if (HAS_QH) qh = loadu256(((const blk_q5_k *)(const void *)a)->qh);
  __m256i isum = _mm256_setzero_si256();
  _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
    /* the 32 weight bytes loaded once, into a register (KQ_PIN): GCC otherwise loads them twice,
     * once for the low nibbles' vpand and once for the high nibbles' shift */
    __m256i q = loadu256(qs + 32 * k);
    KQ_PIN(q);
    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (HAS_QH) {
      const __m256i one = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4));
    }
    isum = madd_acc(isum, _mm256_maddubs_epi16(lo, loadu256(b->qs + 64 * k)),
                    _mm256_shuffle_epi8(sm, ld_idx32(k4s_sc[2 * k])));
    KQ_PIN(isum);
    isum = madd_acc(isum, _mm256_maddubs_epi16(hi, loadu256(b->qs + 64 * k + 32)),
                    _mm256_shuffle_epi8(sm, ld_idx32(k4s_sc[2 * k + 1])));
    KQ_PIN(isum);
  }
  const __m256i msum = _mm256_madd_epi16(loadu256(b->bsums), _mm256_shuffle_epi8(sm, ld_idx32(k4s_mn)));
  /* d, dmin (fp16 at a) in every lane pair, times d_x: lanes d_w d_x, dmin_w d_x, ... */
  const __m128i dm = _mm_castps_si128(_mm_broadcast_ss((const float *)(const void *)a));
  const __m256 p = _mm256_mul_ps(_mm256_cvtph_ps(dm), _mm256_set1_ps(b->d));
  acc = _mm256_fmadd_ps(_mm256_permute_ps(p, 0x00), _mm256_cvtepi32_ps(isum), acc);
  acc = _mm256_fnmadd_ps(_mm256_permute_ps(p, 0x55), _mm256_cvtepi32_ps(msum), acc);
  return acc;
}

/* one Q4_K (HAS_QH 0) or Q5_K (1) row of nb blocks at w times the Q8_K column x */
QSI float q4k_row1(const int HAS_QH, int64_t nb, const uint8_t *w, size_t pfd, const uint8_t *x) {
  const size_t bsz = HAS_QH ? sizeof(blk_q5_k) : sizeof(blk_q4_k);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t *a = w + (size_t)i * bsz;
    kq_pf(a + pfd, (int)bsz);
    acc = q4k_blk(HAS_QH, a, (const blk_q8_k *)(const void *)x + i, acc);
  }
  return hsum8(acc);
}

/* two such rows (at wa and wb) block by block, each with q4k_row1's steps and bits: two memory
 * streams for one core (the gemv2 kernels) */
QSI void q4k_row2(const int HAS_QH, int64_t nb, const uint8_t *wa, const uint8_t *wb, size_t pfd, const uint8_t *x,
                  float *oa, float *ob) {
  const size_t bsz = HAS_QH ? sizeof(blk_q5_k) : sizeof(blk_q4_k);
  __m256 aa = _mm256_setzero_ps(), ab = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t *a = wa + (size_t)i * bsz, *b = wb + (size_t)i * bsz;
    const blk_q8_k *y = (const blk_q8_k *)(const void *)x + i;
    kq_pf(a + pfd, (int)bsz);
    kq_pf(b + pfd, (int)bsz);
    aa = q4k_blk(HAS_QH, a, y, aa);
    ab = q4k_blk(HAS_QH, b, y, ab);
  }
  *oa = hsum8(aa);
  *ob = hsum8(ab);
}

/* acc plus one Q6_K block at a times the Q8_K block b (t_q6_k's AVX2 steps) */
QSI __m256 q6k_blk(const blk_q6_k *a, const blk_q8_k *b, __m256 acc) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
  /* the 16 scales as int16 (0..7 low lane, 8..15 high); half h's 8 in both lanes */
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a->scales));
  __m256i isum = _mm256_setzero_si256();
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m256i ql0 = loadu256(a->ql + 64 * h), ql1 = loadu256(a->ql + 64 * h + 32), qh = loadu256(a->qh + 32 * h);
    const __m256i s8 = h ? _mm256_permute4x64_epi64(sc16, 0xEE) : _mm256_permute4x64_epi64(sc16, 0x44);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
      const __m256i l = k & 1 ? ql1 : ql0;
      const __m256i lq = k & 2 ? _mm256_srli_epi16(l, 4) : l;
      const __m256i hs = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2)
                       : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
      const __m256i q = _mm256_or_si256(_mm256_and_si256(lq, m4), _mm256_and_si256(hs, m30));
      isum = madd_acc(isum, _mm256_maddubs_epi16(q, loadu256(b->qs + 128 * h + 32 * k)),
                      _mm256_shuffle_epi8(s8, ld_idx32(k6s_pair[k])));
      KQ_PIN(isum);
    }
  }
  /* 32 sum sc bsum as t_q6_k (the scales times 32 fit int16, a pair stays below 2^28) */
  const __m256i is = _mm256_sub_epi32(isum, _mm256_madd_epi16(loadu256(b->bsums), _mm256_slli_epi16(sc16, 5)));
  uint16_t d;
  memcpy(&d, &a->d, 2);
  const __m256 p = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)d)), _mm256_set1_ps(b->d));
  acc = _mm256_fmadd_ps(p, _mm256_cvtepi32_ps(is), acc);
  return acc;
}

/* one Q6_K row of nb blocks at w times the Q8_K column x */
QSI float q6k_row1(int64_t nb, const uint8_t *w, size_t pfd, const uint8_t *x) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const blk_q6_k *a = (const blk_q6_k *)(const void *)w + i;
    kq_pf((const uint8_t *)a + pfd, (int)sizeof *a);
    acc = q6k_blk(a, (const blk_q8_k *)(const void *)x + i, acc);
  }
  return hsum8(acc);
}

/* two Q6_K rows (at wa and wb) block by block, each with q6k_row1's steps and bits */
QSI void q6k_row2(int64_t nb, const uint8_t *wa, const uint8_t *wb, size_t pfd, const uint8_t *x, float *oa,
                  float *ob) {
  __m256 aa = _mm256_setzero_ps(), ab = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; i++) {
    const blk_q6_k *a = (const blk_q6_k *)(const void *)wa + i, *b = (const blk_q6_k *)(const void *)wb + i;
    const blk_q8_k *y = (const blk_q8_k *)(const void *)x + i;
    kq_pf((const uint8_t *)a + pfd, (int)sizeof *a);
    kq_pf((const uint8_t *)b + pfd, (int)sizeof *b);
    aa = q6k_blk(a, y, aa);
    ab = q6k_blk(b, y, ab);
  }
  *oa = hsum8(aa);
  *ob = hsum8(ab);
}

/* The gemv (one column) of Q4_0, Q8_0, Q4_K, Q5_K and Q6_K: T_row1 row by row without a call per
 * row (vec_dot's bits), except that a call of many rows takes rows r and r + h (h = nr / 2)
 * together (T_row2: each row with T_row1's steps and bits) once the two are TWO_STREAM_BYTES or
 * more apart. One core streaming one sequential range reads less than it can from two ranges far
 * apart (the hardware prefetchers run one stream each; docs/PERF.md, session 13); rows closer
 * together than that read no faster and, a few KB apart, slower. */
#define TWO_STREAM_BYTES ((size_t)128 << 10)
#define GEMV(T, ROW1, ROW2)                                                                                         \
  static QS_TARGET void T##_gemv(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, int nc,    \
                                 float *o, size_t ors, size_t ocs) {                                                \
    if (nc != 1) {                                                                                                  \
      T##_tile(n, wv, ws, nr, xv, xs, nc, o, ors, ocs);                                                             \
      return;                                                                                                       \
    }                                                                                                               \
    const uint8_t *w = wv;                                                                                          \
    const size_t pfd = pf_ahead(1, ws);                                                                             \
    const int h = nr / 2;                                                                                           \
    int r = 0;                                                                                                      \
    if ((size_t)h * ws >= TWO_STREAM_BYTES) {                                                                       \
      for (; r < h; r++) ROW2;                                                                                      \
      r = 2 * h;                                                                                                    \
    }                                                                                                               \
    for (; r < nr; r++) o[(size_t)r * ors] = ROW1;                                                                  \
  }
#define GEMV_ROW1 w + (size_t)r * ws, pfd, xv
#define GEMV_ROW2 w + (size_t)r * ws, w + (size_t)(r + h) * ws, pfd, xv, &o[(size_t)r * ors], &o[(size_t)(r + h) * ors]
GEMV(t_q4z2, q4z2_row1(n, GEMV_ROW1), q4z2_row2(n, GEMV_ROW2))
GEMV(t_q4r2, q4r2_row1(n, GEMV_ROW1), q4r2_row2(n, GEMV_ROW2))
GEMV(t_q8z2, q8z2_row1(n, GEMV_ROW1), q8z2_row2(n, GEMV_ROW2))
GEMV(t_q4_k, q4k_row1(0, n / QK_K, GEMV_ROW1), q4k_row2(0, n / QK_K, GEMV_ROW2))
GEMV(t_q5_k, q4k_row1(1, n / QK_K, GEMV_ROW1), q4k_row2(1, n / QK_K, GEMV_ROW2))
GEMV(t_q6_k, q6k_row1(n / QK_K, GEMV_ROW1), q6k_row2(n / QK_K, GEMV_ROW2))
#undef GEMV_ROW2
#undef GEMV_ROW1
#undef GEMV

/* The gemv2 kernels (q35_gemv2_fn): rows r of the two ranges at wa and wb together, each row with
 * its gemv's steps and bits; the caller picks ranges far apart (two memory streams per core). */
#define GEMV2(T, ROW2)                                                                                              \
  static QS_TARGET void T##_gemv2(int64_t n, const void *wav, const void *wbv, size_t ws, int nr, const void *xv,  \
                                  float *oa, float *ob, size_t ors) {                                               \
    const uint8_t *wa = wav, *wb = wbv;                                                                             \
    const size_t pfd = pf_ahead(1, ws);                                                                             \
    for (int r = 0; r < nr; r++) ROW2;                                                                              \
  }
#define GEMV2_ARGS wa + (size_t)r * ws, wb + (size_t)r * ws, pfd, xv, &oa[(size_t)r * ors], &ob[(size_t)r * ors]
GEMV2(t_q4z2, q4z2_row2(n, GEMV2_ARGS))
GEMV2(t_q4r2, q4r2_row2(n, GEMV2_ARGS))
GEMV2(t_q8z2, q8z2_row2(n, GEMV2_ARGS))
GEMV2(t_q4_k, q4k_row2(0, n / QK_K, GEMV2_ARGS))
GEMV2(t_q5_k, q4k_row2(1, n / QK_K, GEMV2_ARGS))
GEMV2(t_q6_k, q6k_row2(n / QK_K, GEMV2_ARGS))
#undef GEMV2_ARGS
#undef GEMV2

/* T_wide for a 1 x 8 template T (QS_TILE instance): 8-column tiles and one leftover tile */
#define WIDE8(T)                                                                                                      \
  static QS_TARGET void T##_wide(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,      \
                                 float *o, size_t ors, size_t ocs) {                                                  \
    static const row1_fn fk[9] = {NULL, T##_11, T##_12, T##_13, T##_14, T##_15, T##_16, T##_17, T##_18};             \
    if (nc <= QS_NARROW) T##_tile(n, w, ws, nr, x, xs, nc, o, ors, ocs);                                              \
    else row1_tile(8, fk, n, w, ws, nr, x, xs, nc, o, ors, ocs);                                                      \
  }
WIDE8(t_q8z2)
WIDE8(t_q4_k)
WIDE8(t_q5_k)
WIDE8(t_q6_k)
#undef WIDE8

/* q35_repack_row's Q4_0R / IQ4_NLR / MXFP4R rewrite (q35_z2r_move's forward move, bs 18 or 17
 * bytes per block): per whole group the kernels' own transpose z2_v and, for the fp16 scales,
 * z2_d8, stored; MXFP4's one-byte scales and a short last group as the scalar move has them */
QS_TARGET void q35_repack_z2r_avx2(const void *srcv, void *dstv, int64_t n, int bs) {
  const uint8_t *src = srcv;
  uint8_t *dst = dstv;
  const size_t b16 = 16 * (size_t)bs;
  const int64_t nb = n / QK8_0, ng = nb / 16;
  for (int64_t q = 0; q < ng; q++) {
    const uint8_t *g = src + (size_t)q * b16;
    uint8_t *o = dst + (size_t)q * b16;
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      __m256i V[4];
      z2_v(0, bs, g, h, V);
      _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) _mm256_storeu_si256((__m256i *)(void *)(o + 128 * h + 32 * j), V[j]);
    }
    if (bs == 18) {
      _mm_storeu_si128((__m128i *)(void *)(o + 256), z2_d8(g, 0));
      _mm_storeu_si128((__m128i *)(void *)(o + 272), z2_d8(g, 1));
    } else
      for (int h = 0; h < 2; h++)
        for (int s = 0; s < 2; s++)
          for (int k = 0; k < 4; k++) o[256 + 8 * h + 4 * s + k] = g[(size_t)(4 * k + 2 * h + s) * (size_t)bs];
  }
  const size_t done = (size_t)ng * b16;
  memcpy(dst + done, src + done, (size_t)(nb % 16) * (size_t)bs);
}

#include "kernels/quant_k4r_avx2.inc"
#include "kernels/quant_k6r_avx2.inc"
#include "kernels/quant_k2r_avx2.inc"
#include "kernels/quant_k3r_avx2.inc"
#undef KR_ENTRIES

/* Q8_KP (tensor_types.h): the Q8_K quantizer's blocks, each permuted (q35_q8_kp_move) */
static QS_TARGET void quant_q8_kp_256(const float *x, void *dst, int64_t n) {
  quant_q8_k_256(x, dst, n);
  blk_q8_k *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const blk_q8_k b = y[i];
    q35_q8_kp_move(&b, &y[i], 0);
  }
}

void q35_kernels_avx2_kquant_gemv(q35_kernels *k) {
  k->gemv[Q35_TYPE_Q4_K] = t_q4_k_gemv; /* one column: q4k_row2 / q6k_row2 on rows far apart, with the prefetch */
  k->gemv[Q35_TYPE_Q5_K] = t_q5_k_gemv;
  k->gemv[Q35_TYPE_Q6_K] = t_q6_k_gemv;
  k->gemv2[Q35_TYPE_Q4_K] = t_q4_k_gemv2; /* two row ranges at once: q4k_row2 / q6k_row2 */
  k->gemv2[Q35_TYPE_Q5_K] = t_q5_k_gemv2;
  k->gemv2[Q35_TYPE_Q6_K] = t_q6_k_gemv2;
}

void q35_kernels_avx2(q35_kernels *k) {
  QS_SET(k, Q35_TYPE_Q8_0, t_q8z2);
  k->tile[Q35_TYPE_Q8_0] = t_q8z2_wide;
  k->gemv[Q35_TYPE_Q8_0] = t_q8z2_gemv; /* two rows far apart at once, with the prefetch */
  k->gemv2[Q35_TYPE_Q8_0] = t_q8z2_gemv2;
  k->q8_0_act = Q35_TYPE_Q8_0Z;
  if (q35_cpu_q4_0_x()) { /* testing aid: the Q8_0X kernels (four lanes per block) */
    QS_SET(k, Q35_TYPE_Q4_0, t_q4_0);
    k->q4_0_act = Q35_TYPE_Q8_0X;
  } else {
    QS_SET(k, Q35_TYPE_Q4_0, t_q4z2);
    k->tile[Q35_TYPE_Q4_0] = t_q4z2_wide;
    k->gemv[Q35_TYPE_Q4_0] = t_q4z2_gemv; /* two rows far apart at once, with the prefetch */
    k->gemv2[Q35_TYPE_Q4_0] = t_q4z2_gemv2;
    k->q4_0_act = Q35_TYPE_Q8_0Z;
    /* Q4_0R: the same kernels on rows repacked at load (q35_repack_type says when) */
    QS_SET(k, Q35_TYPE_Q4_0R, t_q4r2);
    k->tile[Q35_TYPE_Q4_0R] = t_q4r2_wide;
    k->gemv[Q35_TYPE_Q4_0R] = t_q4r2_gemv;
    k->gemv2[Q35_TYPE_Q4_0R] = t_q4r2_gemv2;
    k->repack[Q35_TYPE_Q4_0] = Q35_TYPE_Q4_0R;
  }
  QS_SET(k, Q35_TYPE_Q5_0, t_q5_0);
  QS_SET(k, Q35_TYPE_Q4_K, t_q4_k);
  QS_SET(k, Q35_TYPE_Q5_K, t_q5_k);
  QS_SET(k, Q35_TYPE_Q6_K, t_q6_k);
  k->tile[Q35_TYPE_Q4_K] = t_q4_k_wide;
  k->tile[Q35_TYPE_Q5_K] = t_q5_k_wide;
  k->tile[Q35_TYPE_Q6_K] = t_q6_k_wide;
  q35_kernels_avx2_kquant_gemv(k);
  /* Q4_K here: the Q8_KP kernels (quant_k4r_avx2.inc) over t_q4_k's above, which the AVX-512
   * level's Q4_K gemv keeps (q35_kernels_avx2_kquant_gemv); Q4_K rows repacked at load as Q4_KR */
  k4r_set(k);
  /* Q6_K likewise on Q8_KP (quant_k6r_avx2.inc), its rows repacked at load as Q6_KR; the AVX-512
   * level's Q6_K gemv keeps t_q6_k's on Q8_K */
  k6r_set(k);
  k->quantize[Q35_TYPE_Q8_KP] = quant_q8_kp_256;
  QS_SET(k, Q35_TYPE_IQ4_XS, t_iq4_xs);
  QS_SET(k, Q35_TYPE_F32, t_f32);
  k->tile[Q35_TYPE_F32] = t_f32_wide;
  QS_SET(k, Q35_TYPE_F16, t_f16);
  QS_SET(k, Q35_TYPE_BF16, t_bf16);
  qs_fill_convert(k);
  q35_kernels_lowbit_avx2(k);
  k2r_set(k); /* Q2_K / Q2_KR on Q8_KP (quant_k2r_avx2.inc), over the lowbit table's */
  k3r_set(k); /* Q3_K / Q3_KR likewise (quant_k3r_avx2.inc) */
  q35_kernels_iq_avx2(k);
  q35_kernels_quantize_plain_avx2(k);
}
