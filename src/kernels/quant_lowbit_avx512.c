/*
 * quant_lowbit_avx512.c - kernels of the Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4 weight types: AVX-512.
 * The 256-bit templates of quant_lowbit_256.inc with VNNI (vpdpbusd / vpdpwssd) and the larger
 * tiles 32 vector registers allow; where the CPU has VBMI (as Q4_0, whose activations they take),
 * IQ4_NL and MXFP4 x Q8_0Z with 512-bit registers and the one-column Q4_1 / Q5_1 with 512-bit
 * integer sums (below; with GFNI too, an instance whose high nibbles take one vgf2p8affineqb).
 * Q2_K / Q3_K: none here; this level runs the AVX2 level's kernels on Q8_KP and repacks their rows
 * at load as AVX2 does (q35_kernels_get, quant.c).
 */
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "base/cpu.h"
#include "kernels/quant_256.inc"
#include "kernels/quant_lowbit_256.inc"

/* Micro-tile shapes R x C (32 vector registers) */
QS_TILE(t_mxfp4, 2, 4)
QS_TILE(t_iq4_nl, 2, 4)
QS_TILE(t_q4_1, 2, 4)
LB_GEMV1(t_q4_1, LB_Q4_1)
QS_TILE(t_q5_1, 2, 4)
LB_GEMV1(t_q5_1, LB_Q5_1)

/*
 * IQ4_NL / MXFP4 x Q8_0Z (act_layout.h): Q4_0's 512-bit kernel (quant_avx512.c, t_q4z) with the
 * code book. One int32 lane per block: per group of 16 blocks, the four groups of four blocks'
 * nibble bytes (four 16-byte loads each) are transposed 4 x 4 by dwords, so lane 4s + k holds
 * block 4k + s, Q8_0Z's lane order. Values u = v + bias (nx_table) go through vpshufb, and
 * the bias comes back through Q8_0Z's offset lane (-8 * sum(y), shifted). Per block and
 * column: acc[lane] = fma(float(exact int32 total), d_w * d_x, acc[lane]); the result is
 * hsum16(acc), groups in order. In a last group of fewer than 16 blocks the missing blocks read
 * as zeros (never past the row) against Q8_0Z's zero padding and add 0 * 0.
 * IQ4_NLR / MXFP4R (RP = 1: the rows repacked at load by q35_z2r_move, as the AVX2 level reads
 * them): half h's V_j sits as 32 bytes at 128h + 32j with 128-bit lane s holding blocks 4k + 2h + s,
 * so this kernel's V[j] (128-bit lane 2h + s) is the two halves' loads side by side, and the 16
 * scales (fp16 d or E8M0 byte) sit after them at byte 256 in lane order 4s + k. Same V[j], same
 * scales, so the same integers and float steps as on the file's blocks (RP = 0): the same bits.
 * A short last group stays plain in the repacked row and goes through the RP = 0 path.
 */
#undef QS_TARGET
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))

/* _mm512_inserti32x4 at lane p, where unrolling makes p a constant: spelled out so the lane is an
 * immediate at every -O level */
#define LZ_INS128(v, t, p)                                                                                        \
  ((p) == 0   ? _mm512_inserti32x4(v, t, 0)                                                                     \
   : (p) == 1 ? _mm512_inserti32x4(v, t, 1)                                                                     \
   : (p) == 2 ? _mm512_inserti32x4(v, t, 2)                                                                     \
              : _mm512_inserti32x4(v, t, 3))

QSF float nz_hsum16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* word / byte permute indices of the weight scales: lane 4s + k <- block 4k + s's scale, which
 * sits at byte WB * s of the group's k-th 64-byte load */
static const int16_t nz_widx[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27}; /* IQ4_NL: word 9s */
static const int8_t nz_bidx[64] = {0, 0, 0, 0, 0, 0, 0, 0, 17, 17, 17, 17, 17, 17, 17, 17,
                                   34, 34, 34, 34, 34, 34, 34, 34, 51, 51, 51, 51, 51, 51, 51, 51}; /* MXFP4: byte 17s */

/* the 16 weight scales of a group as floats in Q8_0Z's lane order, from the four raw loads */
QSF __m512 nz_scales(const int TY, const int RP, const uint8_t *a, const __m512i R0[4]) {
  if (RP && TY == LB_IQ4_NL) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(a + 256)));
  if (TY == LB_IQ4_NL) {
    const __m512i sidx = _mm512_loadu_si512(nz_widx);
    __m512i dw = _mm512_maskz_permutexvar_epi16(0x1111, sidx, R0[0]);
    dw = _mm512_mask_permutexvar_epi16(dw, 0x2222, sidx, R0[1]);
    dw = _mm512_mask_permutexvar_epi16(dw, 0x4444, sidx, R0[2]);
    dw = _mm512_mask_permutexvar_epi16(dw, 0x8888, sidx, R0[3]);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(dw));
  }
  __m512i v;
  if (RP) v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(a + 256)));
  else {
    const __m512i bidx = _mm512_loadu_si512(nz_bidx);
    const __mmask64 m = 0x01010101; /* bytes 8s: word 4s (the low byte of the e's word) */
    __m512i e = _mm512_maskz_permutexvar_epi8(m, bidx, R0[0]);
    e = _mm512_mask_permutexvar_epi8(e, m << 2, bidx, R0[1]);
    e = _mm512_mask_permutexvar_epi8(e, m << 4, bidx, R0[2]);
    e = _mm512_mask_permutexvar_epi8(e, m << 6, bidx, R0[3]);
    v = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(e));
  }
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v); /* e < 2: subnormal */
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(2)), normal, sub));
}

QSI void nz_group(const int TY, const int RP, const int R, const int C, const int FULL, const uint8_t *w, size_t ws,
                  const uint8_t *x, size_t xs, int64_t q, int kb, __m512i table, __m512 acc[TRM][TCM]) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  __m512i L[TRM][4], H[TRM][4];
  __m512 D[TRM];
  FOR_R {
    const uint8_t *a = w + (size_t)r * ws + (size_t)q * 16 * NX_WB(TY);
    if (RP) { /* repacked (full groups only): V[j] from the two halves, the scales as stored */
      _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        const __m512i V = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(a + 32 * j))),
                                             _mm256_loadu_si256((const __m256i *)(const void *)(a + 128 + 32 * j)), 1);
        L[r][j] = _mm512_shuffle_epi8(table, _mm512_and_si512(V, m4));
        H[r][j] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(V, 4), m4));
      }
      D[r] = nz_scales(TY, 1, a, NULL);
      continue;
    }
    __m512i Q[4], R0[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
      const uint8_t *ak = a + 4 * NX_WB(TY) * k;
      const int nk = FULL ? 4 : kb - 4 * k >= 4 ? 4 : kb - 4 * k > 0 ? kb - 4 * k : 0;
      const int nbytes = NX_WB(TY) * nk; /* the 64-byte load stays inside four blocks */
      R0[k] = FULL || nbytes >= 64 ? _mm512_loadu_si512(ak) : _mm512_maskz_loadu_epi8(((__mmask64)1 << nbytes) - 1, ak);
      __m512i v = _mm512_setzero_si512();
      _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) if (p < nk) {
        const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)(ak + NX_WB(TY) * p + NX_QOFF(TY)));
        v = LZ_INS128(v, t, p);
      }
      Q[k] = v;
    }
    const __m512i t0 = _mm512_unpacklo_epi32(Q[0], Q[1]), t1 = _mm512_unpackhi_epi32(Q[0], Q[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(Q[2], Q[3]), t3 = _mm512_unpackhi_epi32(Q[2], Q[3]);
    const __m512i V[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                          _mm512_unpackhi_epi64(t1, t3)};
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
      L[r][j] = _mm512_shuffle_epi8(table, _mm512_and_si512(V[j], m4));
      H[r][j] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(V[j], 4), m4));
    }
    D[r] = nz_scales(TY, 0, a, R0);
  }
  FOR_C {
    const uint8_t *b = x + (size_t)c * xs + (size_t)q * Q8Z_GROUP;
    const __m512 yd = _mm512_loadu_ps(b + 576);
    const __m512i off = _mm512_slli_epi32(_mm512_loadu_si512(b + 512), NX_OFFSHIFT(TY)); /* -bias * sum(y) */
    FOR_R {
      __m512i p = off;
      _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) p = _mm512_dpbusd_epi32(p, L[r][j], _mm512_loadu_si512(b + 64 * j));
      _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
        p = _mm512_dpbusd_epi32(p, H[r][j], _mm512_loadu_si512(b + 256 + 64 * j));
      acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(D[r], yd), acc[r][c]);
    }
  }
}

QSI void nz_t(const int TY, const int RP, const int R, const int C, TILE_ARGS) {
  const __m512i table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(nx_table(TY)));
  const int64_t nb = n / QK8_0, ng = nb / 16;
  __m512 acc[TRM][TCM];
  FOR_R FOR_C acc[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; g++) nz_group(TY, RP, R, C, 1, w, ws, x, xs, g, 16, table, acc);
  if (nb % 16) nz_group(TY, 0, R, C, 0, w, ws, x, xs, ng, (int)(nb % 16), table, acc);
  FOR_R FOR_C OUT(r, c) = nz_hsum16(acc[r][c]);
}
QSI void t_mxfp4z(const int R, const int C, TILE_ARGS) { nz_t(LB_MXFP4, 0, R, C, n, w, ws, x, xs, o, ors, ocs); }
QSI void t_iq4_nlz(const int R, const int C, TILE_ARGS) { nz_t(LB_IQ4_NL, 0, R, C, n, w, ws, x, xs, o, ors, ocs); }
QSI void t_mxfp4r(const int R, const int C, TILE_ARGS) { nz_t(LB_MXFP4, 1, R, C, n, w, ws, x, xs, o, ors, ocs); }
QSI void t_iq4_nlr(const int R, const int C, TILE_ARGS) { nz_t(LB_IQ4_NL, 1, R, C, n, w, ws, x, xs, o, ors, ocs); }

/*
 * Q4_1 / Q5_1 x Q8_1, the one-column gemv with 512-bit integer sums (VBMI level, as t_q4z): the
 * activation is transposed once per call into a private copy in Q8_0Z's lane order (per group of
 * 16 blocks, 8 vectors: vector j / 4 + j of dword lane 4p + k = bytes 4j .. 4j + 3 / 16 + 4j .. of
 * block 4k + p), and each row's 16 blocks are transposed the same way (per four blocks two 64-byte
 * loads and one vpermt2d, then a 4 x 4 dword transpose), so vpdpbusd leaves each block's exact
 * int32 total in its own lane: 8 vpdpbusd per 16 blocks and no horizontal reduction. The totals
 * are put back in block order (one vpermd) and the float steps are lb_group's, group of 8 after
 * group of 8, on the same values (d and m converted from the same fp16 bits, the activation's
 * from xsc): the same bits as vec_dot and the tile. Q5_1's fifth bits: per block the 32-bit qh in
 * its lane, vpmultishiftqb moves bit 4j + i (16 + 4j + i) to bit 4 of byte i. Blocks after the
 * last full group of 16 go through lb_group as before.
 */
#define LZ_WB(TY) ((TY) == LB_Q4_1 ? 20 : 24)

/* the activation's 16 blocks from b (Q8_1, 36 bytes each) into yt[0..7] (above) */
QSF void lz_xgroup(const uint8_t *b, __m512i *yt) {
  _Pragma("GCC unroll 2") for (int hh = 0; hh < 2; hh++) {
    __m512i Q[4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
      __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(b + 36 * (4 * k) + 4 + 16 * hh)));
      _Pragma("GCC unroll 3") for (int p = 1; p < 4; p++)
        v = LZ_INS128(v, _mm_loadu_si128((const __m128i *)(const void *)(b + 36 * (4 * k + p) + 4 + 16 * hh)), p);
      Q[k] = v;
    }
    const __m512i t0 = _mm512_unpacklo_epi32(Q[0], Q[1]), t1 = _mm512_unpackhi_epi32(Q[0], Q[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(Q[2], Q[3]), t3 = _mm512_unpackhi_epi32(Q[2], Q[3]);
    yt[4 * hh + 0] = _mm512_unpacklo_epi64(t0, t2);
    yt[4 * hh + 1] = _mm512_unpackhi_epi64(t0, t2);
    yt[4 * hh + 2] = _mm512_unpacklo_epi64(t1, t3);
    yt[4 * hh + 3] = _mm512_unpackhi_epi64(t1, t3);
  }
}

/* block permutation of the transposed lanes (an involution): lane 4p + k <-> block 4k + p */
static const int32_t lz_tidx[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
/* vpermt2d indices (16 + i: the second load) per type: the 16 qs bytes of block p in 128-bit lane p */
static const int32_t lz_qidx[2][16] = {{1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14, 28, 29, 30, 31},  /* Q4_1: B = A + 16 */
                                       {2, 3, 4, 5, 8, 9, 10, 11, 14, 15, 24, 25, 28, 29, 30, 31}}; /* Q5_1: B = A + 32 */
/* Q4_1: the d, m word of block p is dword 5p of the first load, into lane 4k + p */
static const int32_t lz_sidx4[16] = {0, 5, 10, 15, 0, 5, 10, 15, 0, 5, 10, 15, 0, 5, 10, 15};
/* Q5_1: lanes 0..3 the d, m words, 4..7 the qh words of blocks 0..3 (block 3's in B) */
static const int32_t lz_ridx5[16] = {0, 6, 12, 26, 1, 7, 13, 27, 0, 0, 0, 0, 0, 0, 0, 0};
/* Q5_1: two such registers R0, R1 -> d, m of R0 then R1, qh of R0 then R1 */
static const int32_t lz_xidx5[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
/* Q5_1: from X01 (qh of blocks 0..7 in lanes 8..15) and X23 (8..15), the qh of block 4k + p into
 * lane 4p + k (the transposed lanes) by one vpermt2d */
static const int32_t lz_hidx5[16] = {8, 12, 24, 28, 9, 13, 25, 29, 10, 14, 26, 30, 11, 15, 27, 31};

/* one vpermw splits the d, m dwords of 16 blocks into their d words (low half) and m words (high
 * half): one op where two vpmovdw and a shift were (docs/PERF.md, session 13) */
static const int16_t lz_didx[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                    1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

/* the low (h = 0) or high 8 lanes */
QSF __m256 lz_half(__m512 v, int h) {
  return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
}

/* the row kernel (quant_lowbit_lz.inc): lz_row here, lz_row_gf with GFNI below */
#define LZ_ROW lz_row
#define LZ_GFNI 0
#include "kernels/quant_lowbit_lz.inc"
#undef LZ_ROW
#undef LZ_GFNI

/* rows of at least LZ_MINR and at most LB_XSC_MAX blocks; else LB_GEMV1's path. Two memory streams:
 * per block of rows about 2 LZ_PAIR_BYTES long, rows r and r + half are read together, group by
 * group, where the two are LZ_TWO_BYTES or more apart. At 2 threads this paid with the two rows
 * ~0.75-1.5 MiB apart and lost with them 192 KiB, 3 MiB or 64 MiB apart (docs/PERF.md, session 14
 * "Two memory streams"), hence the blocks and no gemv2 instance (its two bases lie tensors apart).
 * Each row's float steps are the one-row ones in the same order: the same bits. Each group
 * prefetches the same group pf_ahead(1, ws) bytes (4 rows) ahead, as Q4_0's kernel does: without it
 * Q5_1 streamed at 2 threads well below Q4_0 (docs/PERF.md, session 15). */
#define LZ_MINR 4
#define LZ_TWO_BYTES ((size_t)128 << 10)
#define LZ_PAIR_BYTES ((size_t)1 << 20)
#define LZ_GEMV(T, TY, ROW, Z)                                                                               \
  /* np row pairs (row r of wa and of wb, group by group), then ns single rows of wc */                     \
  static QS_TARGET void T##_lz##Z(int64_t n, const uint8_t *x, const uint8_t *wa, const uint8_t *wb, int np,  \
                                  const uint8_t *wc, int ns, size_t ws, float *oa, float *ob, float *oc,      \
                                  size_t ors) {                                                              \
    const int64_t nb = n / QK8_0, nb16 = nb / 16;                                                            \
    float xsc[2 * LB_XSC_MAX + 16];                                                                          \
    __m512i yt[LB_XSC_MAX / 2]; /* 8 vectors per 16 blocks */                                                \
    for (int64_t g = 0; g < nb; g += 8) {                                                                    \
      __m256 d, s;                                                                                           \
      lb_xscales(x, g, nb - g < 8 ? (int)(nb - g) : 8, &d, &s);                                              \
      _mm256_storeu_ps(xsc + 2 * g, d);                                                                      \
      _mm256_storeu_ps(xsc + 2 * g + 8, s);                                                                  \
    }                                                                                                        \
    for (int64_t q = 0; q < nb16; q++) lz_xgroup(x + (size_t)q * 16 * 36, yt + 8 * q);                       \
    const size_t pfd = pf_ahead(1, ws); /* as Q4_0's: each group 4 rows (>= QS_PF_MIN bytes) ahead */       \
    for (int i = 0; i < np + ns; i++) {                                                                      \
      const int two = i < np;                                                                                \
      const uint8_t *ab[2] = {two ? wa + (size_t)i * ws : wc + (size_t)(i - np) * ws,                        \
                              two ? wb + (size_t)i * ws : NULL};                                             \
      __m256 acc[2][TRM][TCM];                                                                               \
      acc[0][0][0] = acc[1][0][0] = _mm256_setzero_ps();                                                     \
      if (two) {                                                                                             \
        for (int64_t q = 0; q < nb16; q++) {                                                                 \
          const size_t off = (size_t)q * 16 * LZ_WB(TY);                                                     \
          ROW(TY, 1, ab[0] + off, yt + 8 * q, xsc + 32 * q, pfd, &acc[0][0][0]);                             \
          ROW(TY, 1, ab[1] + off, yt + 8 * q, xsc + 32 * q, pfd, &acc[1][0][0]);                             \
        }                                                                                                    \
      } else {                                                                                               \
        ROW(TY, nb16, ab[0], yt, xsc, pfd, &acc[0][0][0]);                                                   \
      }                                                                                                      \
      for (int k = 0; k <= two; k++) {                                                                       \
        int64_t g = 16 * nb16;                                                                               \
        for (; g + 8 <= nb; g += 8) lb_group(TY, 1, 1, 1, ab[k], 0, x, 0, g, 8, xsc, acc[k]);                \
        if (g < nb) lb_group(TY, 1, 1, 0, ab[k], 0, x, 0, g, (int)(nb - g), xsc, acc[k]);                    \
      }                                                                                                      \
      if (two) {                                                                                             \
        oa[(size_t)i * ors] = hsum8(acc[0][0][0]);                                                           \
        ob[(size_t)i * ors] = hsum8(acc[1][0][0]);                                                           \
      } else {                                                                                               \
        oc[(size_t)(i - np) * ors] = hsum8(acc[0][0][0]);                                                    \
      }                                                                                                      \
    }                                                                                                        \
  }                                                                                                          \
  static QS_TARGET void T##_gemv##Z(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs, \
                                  int nc, float *o, size_t ors, size_t ocs) {                                \
    const int64_t nb = n / QK8_0, nb16 = nb / 16;                                                            \
    if (nb > LB_XSC_MAX || nr < LZ_MINR || nb16 == 0) {                                                      \
      T##_gemv(n, wv, ws, nr, xv, xs, nc, o, ors, ocs);                                                      \
      return;                                                                                                \
    }                                                                                                        \
    const uint8_t *w = wv;                                                                                   \
    const int blk = 2 * (int)((LZ_PAIR_BYTES + ws - 1) / ws); /* rows r, r + blk / 2 ~LZ_PAIR_BYTES apart */ \
    for (int r = 0; r < nr; r += blk) {                                                                      \
      const int m = nr - r < blk ? nr - r : blk, h = m / 2;                                                  \
      const uint8_t *wr = w + (size_t)r * ws;                                                                \
      float *orr = o + (size_t)r * ors;                                                                      \
      if ((size_t)h * ws >= LZ_TWO_BYTES)                                                                    \
        T##_lz##Z(n, xv, wr, wr + (size_t)h * ws, h, wr + (size_t)(2 * h) * ws, m - 2 * h, ws, orr,          \
                  orr + (size_t)h * ors, orr + (size_t)(2 * h) * ors, ors);                                  \
      else                                                                                                   \
        T##_lz##Z(n, xv, NULL, NULL, 0, wr, m, ws, NULL, NULL, orr, ors);                                    \
    }                                                                                                        \
  }
LZ_GEMV(t_q4_1, LB_Q4_1, lz_row, z)
LZ_GEMV(t_q5_1, LB_Q5_1, lz_row, z)

/* with GFNI: the high nibbles by one vgf2p8affineqb (quant_lowbit_lz.inc); same bytes, same bits */
#undef QS_TARGET
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,fma,f16c")))
#define LZ_ROW lz_row_gf
#define LZ_GFNI 1
#include "kernels/quant_lowbit_lz.inc"
#undef LZ_ROW
#undef LZ_GFNI
LZ_GEMV(t_q4_1, LB_Q4_1, lz_row_gf, zg)
LZ_GEMV(t_q5_1, LB_Q5_1, lz_row_gf, zg)
#undef QS_TARGET
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))

/* as t_q4z: one-row tiles up to 8 columns */
#undef QS_NARROW
#define QS_NARROW 8
QS_TILE(t_mxfp4z, 2, 4)
QS_TILE(t_iq4_nlz, 2, 4)
QS_TILE(t_mxfp4r, 2, 4)
QS_TILE(t_iq4_nlr, 2, 4)
#undef QS_NARROW
#define QS_NARROW 4

/* The one-column gemv of IQ4_NLR / MXFP4R: nz_t's 1 x 1 on the repacked rows, row by row, each
 * group prefetched pf_ahead(1, ws) bytes ahead (as the AVX2 level's nz2 gemv); the same calls of
 * nz_group as t_mxfp4r / t_iq4_nlr with R = C = 1, so the same bits */
#define NZ_GEMV(T, TY)                                                                                         \
  static QS_TARGET void T##_gemvz(int64_t n, const void *wv, size_t ws, int nr, const void *xv, size_t xs,   \
                                  int nc, float *o, size_t ors, size_t ocs) {                                \
    if (nc != 1) {                                                                                           \
      T##_tile(n, wv, ws, nr, xv, xs, nc, o, ors, ocs);                                                      \
      return;                                                                                                \
    }                                                                                                        \
    const uint8_t *w = wv, *x = xv;                                                                          \
    const size_t pfd = pf_ahead(1, ws), gsz = 16 * (size_t)NX_WB(TY);                                        \
    const __m512i table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(nx_table(TY)));                      \
    const int64_t nb = n / QK8_0, ng = nb / 16;                                                              \
    for (int r = 0; r < nr; r++) {                                                                           \
      const uint8_t *wr = w + (size_t)r * ws;                                                                \
      __m512 acc[TRM][TCM];                                                                                  \
      acc[0][0] = _mm512_setzero_ps();                                                                       \
      for (int64_t g = 0; g < ng; g++) {                                                                     \
        pf_span(wr + (size_t)g * gsz + pfd, gsz);                                                            \
        nz_group(TY, 1, 1, 1, 1, wr, 0, x, 0, g, 16, table, acc);                                            \
      }                                                                                                      \
      if (nb % 16) nz_group(TY, 0, 1, 1, 0, wr, 0, x, 0, ng, (int)(nb % 16), table, acc);                   \
      o[(size_t)r * ors] = nz_hsum16(acc[0][0]);                                                             \
    }                                                                                                        \
  }
NZ_GEMV(t_mxfp4r, LB_MXFP4)
NZ_GEMV(t_iq4_nlr, LB_IQ4_NL)

void q35_kernels_lowbit_avx512(q35_kernels *k) {
  LB_SET1(k, Q35_TYPE_Q4_1, t_q4_1);
  LB_SET1(k, Q35_TYPE_Q5_1, t_q5_1);
  if (q35_cpu_has(Q35_CPU_AVX512_VBMI)) { /* the one-column Q4_1 / Q5_1 with 512-bit sums (above) */
    const int gf = q35_cpu_has(Q35_CPU_GFNI);
    k->gemv[Q35_TYPE_Q4_1] = gf ? t_q4_1_gemvzg : t_q4_1_gemvz;
    k->gemv[Q35_TYPE_Q5_1] = gf ? t_q5_1_gemvzg : t_q5_1_gemvz;
  }
  /* IQ4_NL and MXFP4 take Q8_0Z where Q4_0 does (q35_kernels_avx512 with VBMI), else Q8_0X */
  if (k->q4_0_act == Q35_TYPE_Q8_0Z) {
    LB_SET(k, Q35_TYPE_MXFP4, t_mxfp4z);
    LB_SET(k, Q35_TYPE_IQ4_NL, t_iq4_nlz);
    k->nl_act = Q35_TYPE_Q8_0Z;
    /* the rows repacked at load (q35_kernels_get): this level's tiles and one-column gemv on
     * IQ4_NLR / MXFP4R; vec_dot and gemv2 stay the AVX2 level's R kernels (same bits: its nz2
     * kernels compute nz_t's integers and float steps; test_quant_tile's z2r_twin) */
    k->tile[Q35_TYPE_MXFP4R] = t_mxfp4r_tile;
    k->tile[Q35_TYPE_IQ4_NLR] = t_iq4_nlr_tile;
    k->gemv[Q35_TYPE_MXFP4R] = t_mxfp4r_gemvz;
    k->gemv[Q35_TYPE_IQ4_NLR] = t_iq4_nlr_gemvz;
    (void)t_mxfp4r_dot, (void)t_iq4_nlr_dot; /* the vec_dot entries stay the AVX2 level's */
  } else {
    LB_SET(k, Q35_TYPE_MXFP4, t_mxfp4);
    LB_SET(k, Q35_TYPE_IQ4_NL, t_iq4_nl);
    k->nl_act = Q35_TYPE_Q8_0X;
  }
}
