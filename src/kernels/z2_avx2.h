/*
 * z2_avx2.h - the weight loads shared by the AVX2 kernels that take one int32 lane per block
 * against Q8_0Z (act_layout.h): Q4_0 / Q4_0R (t_q4z2 / t_q4r2, quant_avx2.c) and IQ4_NL / IQ4_NLR /
 * MXFP4 / MXFP4R (nz2_t, quant_lowbit_nz2.inc). Their blocks are a scale then 16 nibble bytes:
 * bs = 18 bytes (fp16 d: Q4_0, IQ4_NL) or 17 (an E8M0 byte: MXFP4). A group of 16 blocks runs as
 * two halves of 8 lanes (lanes 0..7: blocks 4k + s, s = 0, 1; lanes 8..15: s = 2, 3). Per half h
 * the nibbles of its 8 blocks go through a 4 x 4 dword transpose inside each 128-bit lane (low lane
 * blocks 4k + 2h, high lane 4k + 2h + 1), which puts bytes 4j..4j+3 of each block in its own lane
 * of V_j, Q8_0Z's lane order. The repacked layouts (q35_z2r_move, quant_ref.c) store V_0..V_3 of
 * half 0 (bytes 0..127 of a whole group) and half 1 (128..255), then the 16 scales in z2_d8's lane
 * order, so that the kernels load them as they are. Included after quant_256.inc (QSF, QSI,
 * loadu256). z2_v and z2_d8 are forced inline: as calls, the vectors would pass through memory.
 */
#ifndef Q35_KERNELS_Z2_AVX2_H
#define Q35_KERNELS_Z2_AVX2_H

/* the nibbles of blocks b0 (low 128-bit lane) and b0 + 1 (high) of the group at a */
QSF __m256i z2_ld2(const int bs, const uint8_t *a, int b0) {
  return _mm256_loadu2_m128i((const __m128i *)(const void *)(a + bs * (b0 + 1) + bs - 16),
                             (const __m128i *)(const void *)(a + bs * b0 + bs - 16));
}

/* V_0..V_3 of half h of the group at a: transposed (rp = 0) or as stored (rp = 1, repacked) */
QSI void z2_v(const int rp, const int bs, const uint8_t *a, int h, __m256i V[4]) {
  if (rp) {
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) V[j] = loadu256(a + 128 * h + 32 * j);
    return;
  }
  const __m256i y0 = z2_ld2(bs, a, 2 * h), y1 = z2_ld2(bs, a, 4 + 2 * h), y2 = z2_ld2(bs, a, 8 + 2 * h),
                y3 = z2_ld2(bs, a, 12 + 2 * h);
  const __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
  const __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
  V[0] = _mm256_unpacklo_epi64(t0, t2);
  V[1] = _mm256_unpackhi_epi64(t0, t2);
  V[2] = _mm256_unpacklo_epi64(t1, t3);
  V[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Blocks of 18 bytes with an fp16 d first (Q4_0, IQ4_NL): half h's 8 scales (lane 4s + k: block
 * 4k + 2h + s) with four 32-byte loads. The load for lane k starts 2k bytes before block
 * e = 4k + 2h's scale, so d_e lands in word k of the low 128-bit lane and d_(e + 1), 18 bytes on,
 * in word k + 1 of the high lane; three byte blends collect the four loads, a byte shuffle moves
 * the high lane's words 1..4 to 0..3, and a qword permute puts them after the low lane's. The loads
 * span bytes 36h .. 36h + 278 of the group. */
QSI __m128i z2_d8(const uint8_t *a, int h) {
  const __m256i m1 = _mm256_setr_epi16(0, -1, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0);
  const __m256i m2 = _mm256_setr_epi16(0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0);
  const __m256i m3 = _mm256_setr_epi16(0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0);
  const __m256i m23 = _mm256_or_si256(m2, m3);
  const uint8_t *e = a + 36 * h;
  const __m256i p01 = _mm256_blendv_epi8(loadu256(e), loadu256(e + 72 - 2), m1);
  const __m256i p23 = _mm256_blendv_epi8(loadu256(e + 144 - 4), loadu256(e + 216 - 6), m3);
  const __m256i r = _mm256_blendv_epi8(p01, p23, m23);
  const __m256i sh = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 4, 5, 6, 7, 8, 9, -1,
                                      -1, -1, -1, -1, -1, -1, -1);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, sh), 0x08));
}

/* Q4_0's instances (quant_avx2.c) */
QSI void q4z2_v(const int rp, const uint8_t *a, int h, __m256i V[4]) { z2_v(rp, 18, a, h, V); }
QSI __m128i q4z2_d8(const uint8_t *a, int h) { return z2_d8(a, h); }

#endif
