/*
 * quant_blocks.h - the GGML block layouts of every tensor type q35 reads (Q4_0, Q5_0, Q8_0,
 * Q4_K, Q5_K, Q6_K, IQ4_XS, and Q8_K, the K-quants' activation type), byte for byte GGML's
 * (ggml-common.h), with the small decoding helpers the reference and SIMD kernels share.
 *
 * The structs are declared packed so that a block may sit at any address (GGUF rows of 18-byte
 * Q4_0 blocks are only 2-aligned, tests use odd offsets on purpose); SIMD code reads them with
 * unaligned loads.
 */
#ifndef Q35_QUANT_BLOCKS_H
#define Q35_QUANT_BLOCKS_H

#include <stdint.h>

#define QK8_0 32
#define QK_K 256

typedef struct __attribute__((packed)) {
  uint16_t d;           /* fp16 scale */
  uint8_t qs[QK8_0 / 2]; /* element j: low nibble of qs[j]; element j+16: high nibble */
} blk_q4_0;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint8_t qh[4];         /* bit j = 5th bit of element j (little-endian uint32) */
  uint8_t qs[QK8_0 / 2];
} blk_q5_0;

typedef struct __attribute__((packed)) {
  uint16_t d;
  int8_t qs[QK8_0];
} blk_q8_0;

typedef struct __attribute__((packed)) {
  uint16_t d;             /* super-block scale for the 6-bit sub-block scales */
  uint16_t dmin;          /* super-block scale for the 6-bit sub-block mins */
  uint8_t scales[12];     /* 8 scales + 8 mins, 6 bits each (get_scale_min_k4) */
  uint8_t qs[QK_K / 2];   /* 4 chunks of 64: low nibbles = first 32, high = next 32 */
} blk_q4_k;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[QK_K / 8];   /* element 64c+l (l<32): bit 2c of qh[l]; 64c+32+l: bit 2c+1 */
  uint8_t qs[QK_K / 2];
} blk_q5_k;

typedef struct __attribute__((packed)) {
  uint8_t ql[QK_K / 2];   /* low 4 bits */
  uint8_t qh[QK_K / 4];   /* high 2 bits */
  int8_t scales[QK_K / 16];
  uint16_t d;
} blk_q6_k;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint16_t scales_h;      /* high 2 bits of the 8 sub-block scales */
  uint8_t scales_l[QK_K / 64]; /* low 4 bits */
  uint8_t qs[QK_K / 2];   /* per 32: element j low nibble of qs[j], j+16 high nibble */
} blk_iq4_xs;

typedef struct __attribute__((packed)) {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
} blk_q8_k;

_Static_assert(sizeof(blk_q4_0) == 18, "q4_0 size");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0 size");
_Static_assert(sizeof(blk_q8_0) == 34, "q8_0 size");
_Static_assert(sizeof(blk_q4_k) == 144, "q4_K size");
_Static_assert(sizeof(blk_q5_k) == 176, "q5_K size");
_Static_assert(sizeof(blk_q6_k) == 210, "q6_K size");
_Static_assert(sizeof(blk_iq4_xs) == 136, "iq4_xs size");
_Static_assert(sizeof(blk_q8_k) == 292, "q8_K size");

/* The IQ4_NL / IQ4_XS non-linear code book. */
extern const int8_t q35_kvalues_iq4nl[16];

/* get_scale_min_k4: 6-bit scale and min j (0..7) of a Q4_K/Q5_K block. */
static inline void q35_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

#endif
