/*
 * quant_iq_tables.h - the IQ1/IQ2/IQ3 family's block layouts (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ1_S, IQ1_M: byte for byte GGML's, ggml-common.h) and the lookup tables their
 * decoding needs: the grids (a grid entry is a group of 8 or 4 small values, element j in byte
 * j), the sign table of IQ2_XXS/IQ2_XS/IQ3_XXS (7 stored sign bits, the 8th their parity) and
 * the IQ1 shift constant. Shared by the reference (quant_iq_ref.c) and the SIMD levels.
 *
 * Value formulas (d = the fp16 super-block scale, s = a sub-block's 4-bit / 3-bit scale field):
 *   IQ2_XXS  per 32: 4 grid bytes + a word (4 x 7 sign bits, s in bits 28..31);
 *            x = d * (0.5 + s) / 4 * grid * sign                      (iq2xxs_grid: 256 x 8)
 *   IQ2_XS   per 8: 9-bit index + 7 sign bits in a uint16; scales[ib32]: s for 16 + 16;
 *            x = d * (0.5 + s) / 4 * grid * sign                      (iq2xs_grid: 512 x 8)
 *   IQ2_S    qs[32] low index bytes, qs[32..63] 8 sign bits per 8, qh: 2 high bits per 8;
 *            x = d * (0.5 + s) / 4 * grid * sign                      (iq2s_grid: 1024 x 8)
 *   IQ3_XXS  qs[64] grid bytes (4 values each), then per 32 a word as IQ2_XXS's;
 *            x = d * (0.5 + s) / 2 * grid * sign                      (iq3xxs_grid: 256 x 4)
 *   IQ3_S    qs[64] low index bytes, qh[8] 9th bits, signs[32] 8 bits per 8, scales[4] s per 32
 *            (two per byte); x = d * (1 + 2s) * grid * sign            (iq3s_grid: 512 x 4)
 *   IQ1_S    qs[32] low index bytes, qh[8] words: 3 high bits per 8, s in bits 12..14, delta
 *            sign in bit 15; x = d * (2s + 1) * (grid +- 1/8)          (iq1s_grid: 2048 x 8 of -1/0/1)
 *   IQ1_M    as IQ1_S with 3-bit scales per 16 in scales[8], the delta sign per 8 in qh, and the
 *            fp16 d spread over the top nibbles of the four scale words.
 * The dot products against Q8_K use the odd integer scales (2s + 1) and fold the constant
 * factors (1/8, 1/4, 1/8 IQ1 delta) in at the end, as ggml-cpu does.
 */
#ifndef Q35_QUANT_IQ_TABLES_H
#define Q35_QUANT_IQ_TABLES_H

#include <stdint.h>
#include <string.h>

#include "kernels/quant_blocks.h"

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint16_t qs[QK_K / 8];
} blk_iq2_xxs;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint16_t qs[QK_K / 8];
  uint8_t scales[QK_K / 32];
} blk_iq2_xs;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint8_t qs[QK_K / 4]; /* 32 low index bytes, then 32 sign bytes */
  uint8_t qh[QK_K / 32];
  uint8_t scales[QK_K / 32];
} blk_iq2_s;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint8_t qs[3 * QK_K / 8]; /* 64 grid bytes, then 8 scale-and-sign words */
} blk_iq3_xxs;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint8_t qs[QK_K / 4];
  uint8_t qh[QK_K / 32];
  uint8_t signs[QK_K / 8];
  uint8_t scales[QK_K / 64];
} blk_iq3_s;

typedef struct __attribute__((packed)) {
  uint16_t d;
  uint8_t qs[QK_K / 8];
  uint16_t qh[QK_K / 32];
} blk_iq1_s;

typedef struct __attribute__((packed)) {
  uint8_t qs[QK_K / 8];
  uint8_t qh[QK_K / 16];
  uint8_t scales[QK_K / 32];
} blk_iq1_m;

_Static_assert(sizeof(blk_iq2_xxs) == 66, "iq2_xxs size");
_Static_assert(sizeof(blk_iq2_xs) == 74, "iq2_xs size");
_Static_assert(sizeof(blk_iq2_s) == 82, "iq2_s size");
_Static_assert(sizeof(blk_iq3_xxs) == 98, "iq3_xxs size");
_Static_assert(sizeof(blk_iq3_s) == 110, "iq3_s size");
_Static_assert(sizeof(blk_iq1_s) == 50, "iq1_s size");
_Static_assert(sizeof(blk_iq1_m) == 56, "iq1_m size");

extern const uint64_t q35_iq2xxs_grid[256];
extern const uint64_t q35_iq2xs_grid[512];
extern const uint64_t q35_iq2s_grid[1024];
extern const uint32_t q35_iq3xxs_grid[256];
extern const uint32_t q35_iq3s_grid[512];
extern const uint64_t q35_iq1s_grid[2048];
/* ksigns_iq2xs: the 8 sign bits of a group from its 7 stored ones (bit 7 = their parity) */
extern const uint8_t q35_ksigns_iq2xs[128];
/* the same as 8 bytes each, 0xFF where the element is negative (SIMD sign masks) */
extern const uint64_t q35_ksigns64[128];
/* and as sign operands (0xFF where negative, 0x01 elsewhere: _mm256_sign_epi8's -1 / +1) */
extern const uint64_t q35_ksigns_pm1[128];

/* the 8 + 8 sign bits of two neighbouring groups from their 14 stored ones (bits 0..6: the first
 * group's 7, 7..13: the second's), for AVX-512's masked negation of the IQ2_XXS / IQ3_XXS
 * activations: two loads make a sub-block's 32-bit mask. 32 KiB, built once by
 * q35_iq_tables_init (thread-safe; zero until then). */
extern uint16_t q35_ksigns14[1 << 14];
/* the IQ1 grid as the decode kernels' unsigned 8 (g + 1) per byte (0, 8, 16), 2048 x 8 bytes =
 * 16 KiB, built with q35_ksigns14 */
extern uint64_t q35_iq1s_grid8[2048];
/* and with the delta folded in: entry i = 8 (g + 1) + (delta + 1) of grid entry i & 2047, delta
 * -1 where bit 11 of i is set (IQ1_M's index with its delta bit, as pdep leaves it), 32 KiB */
extern uint64_t q35_iq1s_grid8d[4096];
/* the high index bits of IQ3_S (bit k of a qh byte -> 256 in entry k), for the AVX2 decode: one
 * load and an or per index instead of a shift, a mask and an or (4 KiB) */
extern uint16_t q35_iq3s_hi[256][8];
void q35_iq_tables_init(void);

#define Q35_IQ1S_DELTA 0.125f
#define Q35_IQ1M_DELTA 0.125f

/* little-endian loads of the packed fields */
static inline uint16_t q35_ld16(const void *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static inline uint32_t q35_ld32(const void *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* IQ1_M: the fp16 super-block scale from the top nibbles of the four scale words */
static inline uint16_t q35_iq1m_d(const blk_iq1_m *b) {
  const uint16_t s0 = q35_ld16(b->scales), s1 = q35_ld16(b->scales + 2), s2 = q35_ld16(b->scales + 4),
                 s3 = q35_ld16(b->scales + 6);
  return (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
}

#endif
