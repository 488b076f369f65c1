/*
 * quant_lowbit.h - the GGML block layouts of the lowbit family (Q2_K, Q3_K, MXFP4, IQ4_NL, Q4_1,
 * Q5_1, and Q8_1, the activation type of Q4_1/Q5_1), byte for byte GGML's (ggml-common.h), with
 * the decoding helpers the reference and SIMD kernels of the family share.
 *
 * Activation types: Q2_K, Q3_K -> Q8_K; Q4_1, Q5_1 -> Q8_1 (Q8_0's values plus s = d * sum(q)
 * as fp16), as ggml-cpu pairs them; MXFP4, IQ4_NL -> Q4_0's (ggml's Q8_0 values in Q8_0X, or Q8_0Z
 * where the level's Q4_0 kernels take it: act_layout.h), whose blocks are Q4_0's nibbles with a
 * code book instead of q - 8.
 */
#ifndef Q35_QUANT_LOWBIT_H
#define Q35_QUANT_LOWBIT_H

#include <stdint.h>
#include <string.h>

#include "kernels/quant_internal.h"

typedef struct __attribute__((packed)) {
  uint8_t scales[QK_K / 16]; /* sub-block j: scale = low nibble, min = high nibble */
  uint8_t qs[QK_K / 4];      /* 2 bits: element 128h + 32s + l at bits 2s of qs[32h + l] */
  uint16_t d;                /* fp16 super-scale of the scales */
  uint16_t dmin;             /* fp16 super-scale of the mins */
} blk_q2_k;

typedef struct __attribute__((packed)) {
  uint8_t hmask[QK_K / 8]; /* element 32k + l (k < 8): bit k of hmask[l]; clear = subtract 4 */
  uint8_t qs[QK_K / 4];    /* low 2 bits, laid out as Q2_K's */
  uint8_t scales[12];      /* 16 6-bit scales, biased by 32 (q3k_scale) */
  uint16_t d;
} blk_q3_k;

typedef struct __attribute__((packed)) {
  uint8_t e;             /* E8M0 scale: 2^(e - 127); values are kvalues_mxfp4 (2x E2M1) * 2^(e-128) */
  uint8_t qs[QK8_0 / 2]; /* element j: low nibble of qs[j]; j + 16: high nibble */
} blk_mxfp4;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint8_t qs[QK8_0 / 2];
} blk_iq4_nl;

typedef struct __attribute__((packed)) {
  uint16_t d, m; /* x = d * q + m */
  uint8_t qs[QK8_0 / 2];
} blk_q4_1;

typedef struct __attribute__((packed)) {
  uint16_t d, m;
  uint8_t qh[4]; /* bit j = 5th bit of element j */
  uint8_t qs[QK8_0 / 2];
} blk_q5_1;

/* Q5_1R (Q35_TYPE_Q5_1R): a Q5_1 block whose qh word is permuted, element e's fifth bit at bit
 * 8 (e % 4) + e / 4 instead of e, so that byte i of the word holds the fifth bits of elements
 * i, 4 + i, ..., 28 + i (bit k: element 4k + i): the AVX2 one-column kernel, whose byte i of
 * dword j holds element 4j + i (16 + 4j + i), gets them with a shift and an and (no shuffle).
 * One row of n elements of Q5_1 at src as Q5_1R at dst, or back (quant_lowbit_ref.c). */
void q35_q5_1r_move(const void *src, void *dst, int64_t n, int back);

typedef struct __attribute__((packed)) {
  uint16_t d, s; /* s = d * sum(qs) (fp16) */
  int8_t qs[QK8_0];
} blk_q8_1;

_Static_assert(sizeof(blk_q2_k) == 84, "q2_K size");
_Static_assert(sizeof(blk_q3_k) == 110, "q3_K size");

/* Q3_KR (Q35_TYPE_Q3_KR): a Q3_K block repacked at load for the AVX2 kernels on Q8_KP activations
 * (q35_repack_row), 110 bytes: d at 0; at Q3KR_SCALES (2) the 16 scales as 6-bit two's complement
 * f_j = sc_j & 63 (sc_j = q3k_scale, -32..31), byte j < 8 = f_j << 2 | (f_{8+j} & 3), byte 8 + j
 * (j < 4) = f_{8+j} >> 2 | (f_{12+j} >> 2) << 4 (int8 4 sc_j in order after 6 scalar
 * operations); at Q3KR_PLANES (14) three planes P0, P1, P2 of 32 bytes of whole 3-bit values u_m
 * = q + 4 for Q8_KP's register m, byte b (element 32j + 16h + 2m + t for b = 4j + 2h + t;
 * tensor_types.h): P0[b] = u_0 | u_1 << 3 | (u_6 & 3) << 6, P1[b] = u_2 | u_3 << 3 | (u_7 & 3) << 6,
 * P2[b] = u_4 | u_5 << 3 | (u_6 >> 2) << 6 | (u_7 >> 2) << 7. int16 lane l of every register
 * then belongs to sub-block l, Q3_K's scale granularity (quant_k3r_avx2.inc). Every bit of the
 * Q3_K block has one place: the move is a bijection. */
#define Q3KR_BLOCK 110
#define Q3KR_SCALES 2
#define Q3KR_PLANES 14
/* one row of n elements (a multiple of 256): Q3_K at src as Q3_KR at dst, or back (quant_lowbit_ref.c) */
void q35_q3_kr_move(const void *src, void *dst, int64_t n, int back);
/* Q2_KR (Q35_TYPE_Q2_KR): a Q2_K block repacked at load for the AVX2 kernels on Q8_KP activations
 * (q35_repack_row), 84 bytes: scales, d and dmin as Q2_K's; qs as two 32-byte loads k = 0, 1 whose
 * byte b holds at bits 2f, 2f + 1 the value for Q8_KP's register m = 4k + f, byte b (element 32j +
 * 16h + 2m + t for b = 4j + 2h + t; tensor_types.h). int16 lane l of every register then belongs
 * to sub-block l, Q2_K's scale granularity (quant_k2r_avx2.inc). */
void q35_q2_kr_move(const void *src, void *dst, int64_t n, int back);
/* quant_avx2.c: q35_repack_row's Q2_KR rewrite on 256-bit vectors (the same bytes; AVX2 CPUs only) */
void q35_repack_q2_kr_avx2(const void *src, void *dst, int64_t n);
/* likewise Q3_KR's (quant_k3r_avx2.inc) */
void q35_repack_q3_kr_avx2(const void *src, void *dst, int64_t n);
_Static_assert(sizeof(blk_mxfp4) == 17, "mxfp4 size");
_Static_assert(sizeof(blk_iq4_nl) == 18, "iq4_nl size");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1 size");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1 size");
_Static_assert(sizeof(blk_q8_1) == 36, "q8_1 size");

/* MXFP4's code book: the E2M1 values doubled (so they are integers; the scale is halved). */
extern const int8_t q35_kvalues_mxfp4[16];

/* q35_e8m0_half(e) for every byte e, as float bit patterns (a table for the SIMD kernels) */
extern const uint32_t q35_e8m0_half_bits[256];

/* The E8M0 scale e as a float, halved (2^(e - 128)), exactly as ggml's GGML_E8M0_TO_FP32_HALF:
 * e < 2 gives the subnormals 2^-128 and 2^-127. */
static inline float q35_e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Q3_K's sub-block scale j (0..15), unbiased (-32..31): low 4 bits from scales[j % 8] (j < 8:
 * low nibble, else high), high 2 bits from scales[8 + j % 4] bits 2*(j / 4). */
static inline int q3k_scale(const uint8_t *sc, int j) {
  const int lo = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
  const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

/* quantize_lowbit.c: the family's weight quantizers into quantize[] (called by the reference
 * table; every level uses them). */
void q35_kernels_lowbit_quantizers(q35_kernels *k);
/* The importance-weighted quantizer of a family type (qw: n importance values, one per column,
 * NULL = unweighted as quantize[]): 0, or -1 if `type` is not the family's. */
int q35_lowbit_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw);

#endif
