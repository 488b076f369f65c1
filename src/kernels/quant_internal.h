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
#include <string.h>

#include "kernels/quant.h"
#include "base/util.h"

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

/*
 * Q8_0X (q35-internal activation type for Q4_0 weights): the Q8_0 values of a row, laid out so
 * that the Q4_0 kernels load everything a group of four blocks needs with four plain loads.
 * Blocks go in groups of 4; the last group may hold k = 1..3. A group of k blocks is 64k bytes:
 *   [0, 16k)    yl:  block p's elements 0..15 at 16p (int8)
 *   [16k, 32k)  yh:  its elements 16..31 at 16k + 16p
 *   [32k, 48k)  off: 4 int32 at 32k + 16p; lane j = -8 * (sum of elements 4j..4j+3 and 16+4j..16+4j+3)
 *   [48k, 64k)  d:   the block's scale as a float (exact: it is an fp16 value), 4 times
 * A Q4_0 block's nibbles q give dot(q - 8, y) = dot(q, y) + sum(off): four int32 lanes per block
 * (lane j covers elements 4j..4j+3 and 16+4j..16+4j+3), each exact.
 */
#define Q8X_BLOCK 64
static inline uint8_t *q8x_at(const void *row, int64_t nb, int64_t b, int *k, int *p) {
  const int64_t g = b / 4;
  *p = (int)(b % 4);
  *k = nb - 4 * g >= 4 ? 4 : (int)(nb - 4 * g);
  return (uint8_t *)row + (size_t)g * 4 * Q8X_BLOCK;
}
static inline void q8x_put(void *row, int64_t nb, int64_t b, const blk_q8_0 *q) {
  int k, p;
  uint8_t *o = q8x_at(row, nb, b, &k, &p);
  int32_t off[4];
  for (int j = 0; j < 4; j++) {
    int s = 0;
    for (int i = 0; i < 4; i++) s += q->qs[4 * j + i] + q->qs[16 + 4 * j + i];
    off[j] = -8 * s;
  }
  const float d = q35_fp16_to_fp32(q->d), d4[4] = {d, d, d, d};
  memcpy(o + 16 * p, q->qs, 16);
  memcpy(o + 16 * k + 16 * p, q->qs + 16, 16);
  memcpy(o + 32 * k + 16 * p, off, 16);
  memcpy(o + 48 * k + 16 * p, d4, 16);
}
/*
 * Q8_0Y (q35-internal activation type for Q8_0 weights): Q8_0 values in groups of 2 blocks (the
 * last group may hold k = 1); a group of k blocks is 96k bytes:
 *   [0, 32k)    y:   block p's 32 int8 at 32p
 *   [32k, 64k)  off: 8 int32 at 32k + 32p; lane j = -128 * (sum of elements 4j..4j+3)
 *   [64k, 96k)  d:   the block's scale as a float, 8 times
 * With weights biased to unsigned bytes (w + 128), dot(w + 128, y) + sum(off) = dot(w, y).
 */
#define Q8Y_BLOCK 96
static inline uint8_t *q8y_at(const void *row, int64_t nb, int64_t b, int *k, int *p) {
  const int64_t g = b / 2;
  *p = (int)(b % 2);
  *k = nb - 2 * g >= 2 ? 2 : 1;
  return (uint8_t *)row + (size_t)g * 2 * Q8Y_BLOCK;
}
static inline void q8y_put(void *row, int64_t nb, int64_t b, const blk_q8_0 *q) {
  int k, p;
  uint8_t *o = q8y_at(row, nb, b, &k, &p);
  int32_t off[8];
  for (int j = 0; j < 8; j++) off[j] = -128 * (q->qs[4 * j] + q->qs[4 * j + 1] + q->qs[4 * j + 2] + q->qs[4 * j + 3]);
  const float d = q35_fp16_to_fp32(q->d), d8[8] = {d, d, d, d, d, d, d, d};
  memcpy(o + 32 * p, q->qs, 32);
  memcpy(o + 32 * k + 32 * p, off, 32);
  memcpy(o + 64 * k + 32 * p, d8, 32);
}
static inline void q8y_get(const void *row, int64_t nb, int64_t b, blk_q8_0 *q) {
  int k, p;
  const uint8_t *o = q8y_at(row, nb, b, &k, &p);
  float d;
  memcpy(q->qs, o + 32 * p, 32);
  memcpy(&d, o + 64 * k + 32 * p, 4);
  q->d = q35_fp32_to_fp16(d);
}
static inline void q8x_get(const void *row, int64_t nb, int64_t b, blk_q8_0 *q) {
  int k, p;
  const uint8_t *o = q8x_at(row, nb, b, &k, &p);
  float d;
  memcpy(q->qs, o + 16 * p, 16);
  memcpy(q->qs + 16, o + 16 * k + 16 * p, 16);
  memcpy(&d, o + 48 * k + 16 * p, 4);
  q->d = q35_fp32_to_fp16(d);
}

/*
 * Q8_0Z (q35-internal activation type for Q4_0 weights where the AVX-512 VBMI kernels run): the
 * Q8_0 values of a row in groups of 16 blocks, 640 bytes per group (the last group padded with
 * zeros). Block b = 16q + 4k + s of group q sits in int32 lane L = 4s + k:
 *   [64i, 64i + 64)        YL_i: lane L = the block's elements 4i..4i+3 (i = 0..3)
 *   [256 + 64i, ...)       YH_i: lane L = its elements 16+4i..16+4i+3
 *   [512, 576)             off:  lane L = -8 * (sum of the block's 32 elements)
 *   [576, 640)             d:    lane L = the block's scale as a float
 * A Q4_0 block's nibbles (byte j: element j low, j+16 high) give dot(q - 8, y) in ONE lane:
 * off + the eight lane products; that lane order is what a 4 x 4 dword transpose of four
 * groups of four Q4_0 blocks produces (quant_avx512.c).
 */
#define Q8Z_GROUP 640
static inline uint8_t *q8z_at(const void *row, int64_t b, int *lane) {
  const int bb = (int)(b % 16);
  *lane = 4 * (bb % 4) + bb / 4;
  return (uint8_t *)row + (size_t)(b / 16) * Q8Z_GROUP;
}
static inline void q8z_put(void *row, int64_t b, const blk_q8_0 *q) {
  int L;
  uint8_t *o = q8z_at(row, b, &L);
  int s = 0;
  for (int i = 0; i < 32; i++) s += q->qs[i];
  const int32_t off = -8 * s;
  const float d = q35_fp16_to_fp32(q->d);
  for (int i = 0; i < 4; i++) {
    memcpy(o + 64 * i + 4 * L, q->qs + 4 * i, 4);
    memcpy(o + 256 + 64 * i + 4 * L, q->qs + 16 + 4 * i, 4);
  }
  memcpy(o + 512 + 4 * L, &off, 4);
  memcpy(o + 576 + 4 * L, &d, 4);
}
static inline void q8z_get(const void *row, int64_t b, blk_q8_0 *q) {
  int L;
  const uint8_t *o = q8z_at(row, b, &L);
  float d;
  for (int i = 0; i < 4; i++) {
    memcpy(q->qs + 4 * i, o + 64 * i + 4 * L, 4);
    memcpy(q->qs + 16 + 4 * i, o + 256 + 64 * i + 4 * L, 4);
  }
  memcpy(&d, o + 576 + 4 * L, 4);
  q->d = q35_fp32_to_fp16(d);
}

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
  int q4_0_act; /* the activation type this table's Q4_0 kernels take (0: unset, Q8_0X) */
  q35_tile_fn gemv[Q35_TYPE_COUNT]; /* one activation column (nc = 1) where a tile kernel beats a loop
                                     * of vec_dot calls: the AVX-512 Q4_0 x Q8_0Z one, whose one-row
                                     * tiles prefetch the rows ahead (vec_dot has no row stride) */
} q35_kernels;

/* The tile product through a table: its tile kernel, or a loop over its vec_dot. */
void q35_tile_run(const q35_kernels *k, int type, int64_t n, const void *w, size_t ws, int nr, const void *x,
                  size_t xs, int nc, float *out, size_t ors, size_t ocs);

/* The activation type a table's vec_dot / tile kernels take for weights of `type`. */
int q35_kernels_vec_dot_type(const q35_kernels *k, int type);

/* The table for a level (0 scalar, 1 avx2, 2 avx512): -1 if this CPU lacks it. */
int q35_kernels_get(int level, q35_kernels *out);

void q35_kernels_avx2(q35_kernels *k);   /* fills the AVX2+FMA+F16C entries */
void q35_kernels_avx512(q35_kernels *k); /* fills the AVX-512 (F/BW/VL/VNNI) entries */

/* Scalar helpers the SIMD files share with the reference for exactness at edge cases. */
void q35_quantize_q8_0_block_ref(const float *x, blk_q8_0 *y);
void q35_quantize_q8_k_block_ref(const float *x, blk_q8_k *y);

#endif
