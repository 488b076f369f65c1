/*
 * quant_internal.h - GGML block layouts and the kernel table shared by quant.c (reference
 * kernels, weight quantizers, dispatch) and quant_avx2.c / quant_avx512.c (SIMD kernels).
 *
 * The structs are byte-for-byte GGML's (ggml-common.h). They are declared packed so that a
 * block may sit at any address (GGUF rows of 18-byte Q4_0 blocks are only 2-aligned, tests
 * use odd offsets on purpose); SIMD code reads them with unaligned loads.
 */
#ifndef Q35_QUANT_INTERNAL_H
#define Q35_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

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

/* Kernel signatures (n is a multiple of the type's block size). */
typedef float (*q35_vec_dot_fn)(int64_t n, const void *w, const void *x);
typedef void (*q35_quantize_fn)(const float *src, void *dst, int64_t n);
typedef void (*q35_dequantize_fn)(const void *src, float *dst, int64_t n);
/* out[r*ors + c*ocs] = vec_dot(n, w + r*ws, x + c*xs) for r < nr, c < nc, bit-identical to the
 * same level's vec_dot for every pair. */
typedef void (*q35_tile_fn)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,
                            float *out, size_t ors, size_t ocs);

/* Kernel table: one entry per type id, NULL where the level has no special kernel (the
 * dispatcher falls back to the previous level, finally the reference). */
typedef struct {
  q35_vec_dot_fn vec_dot[Q35_TYPE_COUNT];
  q35_quantize_fn quantize[Q35_TYPE_COUNT];
  q35_dequantize_fn dequantize[Q35_TYPE_COUNT];
  q35_tile_fn tile[Q35_TYPE_COUNT]; /* NULL: loop over this table's vec_dot (see q35_tile_run) */
} q35_kernels;

/* The tile product through a table: its tile kernel, or a loop over its vec_dot. */
void q35_tile_run(const q35_kernels *k, int type, int64_t n, const void *w, size_t ws, int nr, const void *x,
                  size_t xs, int nc, float *out, size_t ors, size_t ocs);

/* The table for a level (0 scalar, 1 avx2, 2 avx512): -1 if this CPU lacks it. */
int q35_kernels_get(int level, q35_kernels *out);

void q35_kernels_avx2(q35_kernels *k);   /* fills the AVX2+FMA+F16C entries */
void q35_kernels_avx512(q35_kernels *k); /* fills the AVX-512 (F/BW/VL/VNNI) entries */

/* Scalar helpers the SIMD files share with the reference for exactness at edge cases. */
void q35_quantize_q8_0_block_ref(const float *x, blk_q8_0 *y);
void q35_quantize_q8_k_block_ref(const float *x, blk_q8_k *y);

#endif
