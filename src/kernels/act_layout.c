/*
 * act_layout.c - Q8_0X / Q8_0Y / Q8_0Z activation rows (layouts in act_layout.h): the reference
 * level's quantizers into each layout (q35_quantize_q8_0_block_ref block by block), their
 * dequantizers, and the repacking from one layout into another.
 */
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"

void q35_act_dequantize(int type, const void *src, float *y, int64_t n) {
  const int64_t nb = n / QK8_0;
  for (int64_t i = 0; i < nb; i++) {
    blk_q8_0 b;
    q35_act_get(type, src, nb, i, &b);
    const float d = q35_fp16_to_fp32(b.d);
    for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = (float)b.qs[j] * d;
  }
}

void q35_act_convert(int from, const void *src, size_t src_stride, int to, void *dst, size_t dst_stride, int64_t n,
                     int nc) {
  if (from == Q35_TYPE_Q8_KP || to == Q35_TYPE_Q8_KP) { /* Q8_KP <-> Q8_K (or itself), block by block */
    for (int c = 0; c < nc; c++)
      for (int64_t i = 0; i < n / QK_K; i++) {
        const blk_q8_k *s = (const blk_q8_k *)(const void *)((const uint8_t *)src + (size_t)c * src_stride) + i;
        blk_q8_k *d = (blk_q8_k *)(void *)((uint8_t *)dst + (size_t)c * dst_stride) + i;
        if (from == to) *d = *s;
        else q35_q8_kp_move(s, d, from == Q35_TYPE_Q8_KP);
      }
    return;
  }
  const int64_t nb = n / QK8_0;
  for (int c = 0; c < nc; c++) {
    const uint8_t *s = (const uint8_t *)src + (size_t)c * src_stride;
    uint8_t *d = (uint8_t *)dst + (size_t)c * dst_stride;
    if (to == Q35_TYPE_Q8_0Z) memset(d, 0, q35_row_size(Q35_TYPE_Q8_0Z, n));
    for (int64_t i = 0; i < nb; i++) {
      blk_q8_0 b;
      q35_act_get(from, s, nb, i, &b);
      q35_act_put(to, d, nb, i, &b);
    }
  }
}

#define ACT_REF(T, type)                                                                                       \
  static void quant_##T(const float *x, void *dst, int64_t n) {                                                \
    q35_act_quantize(type, x, dst, n, q35_quantize_q8_0_block_ref);                                            \
  }                                                                                                            \
  static void dequant_##T(const void *src, float *y, int64_t n) { q35_act_dequantize(type, src, y, n); }
ACT_REF(q8_0x, Q35_TYPE_Q8_0X)
ACT_REF(q8_0y, Q35_TYPE_Q8_0Y)
ACT_REF(q8_0z, Q35_TYPE_Q8_0Z)
#undef ACT_REF

void q35_kernels_act_layouts(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q8_0X] = quant_q8_0x;
  k->dequantize[Q35_TYPE_Q8_0X] = dequant_q8_0x;
  k->quantize[Q35_TYPE_Q8_0Y] = quant_q8_0y;
  k->dequantize[Q35_TYPE_Q8_0Y] = dequant_q8_0y;
  k->quantize[Q35_TYPE_Q8_0Z] = quant_q8_0z;
  k->dequantize[Q35_TYPE_Q8_0Z] = dequant_q8_0z;
}
