/*
 * act_layout.h - the q35-internal activation layouts Q8_0X, Q8_0Y and Q8_0Z: the Q8_0 values of
 * an activation row (byte-identical quantization to Q8_0), rearranged so that the SIMD dot
 * products of Q4_0 (Q8_0X, Q8_0Z) and Q8_0 (Q8_0Y, Q8_0Z) weights need no shuffles of the activation.
 * Each layout has a put (one Q8_0 block into its places) and a get (read it back); a row is
 * packed by q35_act_quantize (every level's quantizer, with its own Q8_0 block function) and
 * unpacked by q35_act_dequantize / q35_act_convert (act_layout.c).
 */
#ifndef Q35_ACT_LAYOUT_H
#define Q35_ACT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

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
/*
 * Q8_0Z (q35-internal activation type for Q4_0, IQ4_NL and MXFP4 weights at the AVX2 level and
 * where the AVX-512 VBMI kernels run, and for Q8_0 weights at the AVX2 level, which read YL_i
 * and YH_i as the block's elements 4i..4i+3 and 16+4i..16+4i+3 and leave off unused): the
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

/* Store block b of a row of nb blocks in layout `type` (Q35_TYPE_Q8_0X, _Q8_0Y or _Q8_0Z). */
static inline void q35_act_put(int type, void *row, int64_t nb, int64_t b, const blk_q8_0 *q) {
  if (type == Q35_TYPE_Q8_0X) q8x_put(row, nb, b, q);
  else if (type == Q35_TYPE_Q8_0Y) q8y_put(row, nb, b, q);
  else q8z_put(row, b, q);
}

/* Read block b back from layout `type`. */
static inline void q35_act_get(int type, const void *row, int64_t nb, int64_t b, blk_q8_0 *q) {
  if (type == Q35_TYPE_Q8_0X) q8x_get(row, nb, b, q);
  else if (type == Q35_TYPE_Q8_0Y) q8y_get(row, nb, b, q);
  else q8z_get(row, b, q);
}

/* Quantize one block of 32 floats to Q8_0. */
typedef void (*q35_q8_0_block_fn)(const float *x, blk_q8_0 *y);

/* Quantize n floats (a multiple of 32) block by block with `quantize_block` into layout `type`
 * (a Q8_0Z row's padding is zeroed). Always inlined, so in each level's quantizer `type` and the
 * block function are constants and nothing is called through a pointer. */
static inline __attribute__((always_inline)) void q35_act_quantize(int type, const float *x, void *dst, int64_t n,
                                                                   q35_q8_0_block_fn quantize_block) {
  const int64_t nb = n / QK8_0;
  if (type == Q35_TYPE_Q8_0Z) memset(dst, 0, q35_row_size(Q35_TYPE_Q8_0Z, n));
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    quantize_block(x + i * QK8_0, &b);
    q35_act_put(type, dst, nb, i, &b);
  }
}

/* n floats back from a row in layout `type` (Q8_0's dequantization of each block). */
void q35_act_dequantize(int type, const void *src, float *y, int64_t n);

/* Repack nc rows of n elements from layout `from` (row stride src_stride bytes) into layout `to`
 * (row stride dst_stride): the same Q8_0 blocks in the other layout's places; or Q8_K blocks
 * between Q8_KP and Q8_K (tensor_types.h). */
void q35_act_convert(int from, const void *src, size_t src_stride, int to, void *dst, size_t dst_stride, int64_t n,
                     int nc);

#endif
