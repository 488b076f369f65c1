/*
 * tensor_types.h - GGML's tensor element types as GGUF files number them: names, block sizes,
 * bytes per block, plus q35's internal activation layouts (ids 40-42) and repacked weight layouts
 * (43, 46), never in a file.
 * The kernels for each type live in kernels/ (quant.h).
 */
#ifndef Q35_TENSOR_TYPES_H
#define Q35_TENSOR_TYPES_H

#include <stddef.h>
#include <stdint.h>

enum q35_type {
  Q35_TYPE_F32 = 0,
  Q35_TYPE_F16 = 1,
  Q35_TYPE_Q4_0 = 2,
  Q35_TYPE_Q4_1 = 3,
  Q35_TYPE_Q5_0 = 6,
  Q35_TYPE_Q5_1 = 7,
  Q35_TYPE_Q8_0 = 8,
  Q35_TYPE_Q8_1 = 9, /* activation type of Q4_1 / Q5_1 only */
  Q35_TYPE_Q2_K = 10,
  Q35_TYPE_Q3_K = 11,
  Q35_TYPE_Q4_K = 12,
  Q35_TYPE_Q5_K = 13,
  Q35_TYPE_Q6_K = 14,
  Q35_TYPE_Q8_K = 15,
  Q35_TYPE_IQ2_XXS = 16,
  Q35_TYPE_IQ2_XS = 17,
  Q35_TYPE_IQ3_XXS = 18,
  Q35_TYPE_IQ1_S = 19,
  Q35_TYPE_IQ4_NL = 20,
  Q35_TYPE_IQ3_S = 21,
  Q35_TYPE_IQ2_S = 22,
  Q35_TYPE_IQ4_XS = 23,
  Q35_TYPE_IQ1_M = 29,
  Q35_TYPE_BF16 = 30,
  Q35_TYPE_MXFP4 = 39,
  /* q35-internal activation type, never in a file: Q8_0 values laid out for the Q4_0 kernels
   * (see kernels/act_layout.h). GGML's ids end below 40. */
  Q35_TYPE_Q8_0X = 40,
  Q35_TYPE_Q8_0Y = 41, /* the same for Q8_0 weights */
  Q35_TYPE_Q8_0Z = 42, /* Q4_0's activation type at AVX2 and AVX-512 VBMI, Q8_0's at AVX2 */
  /* q35-internal weight layout, never in a file: Q4_0 rows repacked at load for the AVX2 kernels
   * (q35_repack_row, kernels/quant.h); same block count and bytes per row as Q4_0 */
  Q35_TYPE_Q4_0R = 43,
  /* Q4_K rows repacked at load for the AVX2 kernels (q35_repack_row): each block's 128 qs bytes
   * permuted so that a sub-block's products sum in int16 (kernels/quant_avx2.c); Q4_K's sizes */
  Q35_TYPE_Q4_KR = 44,
  /* Q8_K with each block's qs bytes permuted the same way: Q4_K's and Q4_KR's activation type at
   * AVX2 (Q8_K's sizes, d and bsums) */
  Q35_TYPE_Q8_KP = 45,
  /* likewise Q3_K rows repacked at load for the AVX2 kernels (kernels/quant_lowbit.h); same bytes
   * per block as Q3_K */
  Q35_TYPE_Q3_KR = 46,
  /* Q6_K rows repacked at load for the AVX2 kernels (q35_repack_row): each block's 192 ql / qh
   * bytes rearranged so that the 6-bit values come out in Q8_KP's order (kernels/quant_k6r_avx2.inc);
   * Q6_K's sizes, scales and d */
  Q35_TYPE_Q6_KR = 47,
  /* likewise Q2_K rows repacked at load for the AVX2 kernels on Q8_KP (kernels/quant_lowbit.h);
   * same bytes per block as Q2_K */
  Q35_TYPE_Q2_KR = 48,
  /* IQ4_NL and MXFP4 rows repacked at load for the AVX2 kernels (q35_repack_row) as Q4_0R is (the
   * same nibble block after a scale of 2 or 1 bytes); IQ4_NL's / MXFP4's sizes */
  Q35_TYPE_IQ4_NLR = 49,
  Q35_TYPE_MXFP4R = 50,
  /* Q5_1 rows repacked at load for the AVX2 kernels (q35_repack_row): each block's 32 qh bits
   * permuted so that element e's fifth bit sits at bit 8 (e % 4) + e / 4 (kernels/quant_lowbit.h);
   * Q5_1's sizes, d, m and nibbles */
  Q35_TYPE_Q5_1R = 51,
  /* IQ2_XXS rows rewritten at load for the AVX2 kernels (q35_repack_row) into whole 3-bit values:
   * per super-block the fp16 d, the eight 4-bit scales, two planes of 2-bit magnitude codes and a
   * plane of sign bits (kernels/quant_internal.h); 102 bytes per 256 elements where IQ2_XXS has 66
   * (the only repacked layout larger than its file type: the loader moves it to its own memory) */
  Q35_TYPE_IQ2_XXSR = 52,
  /* likewise IQ3_XXS rows as 4-bit codes (3-bit magnitude code and the sign), 134 bytes per 256
   * elements where IQ3_XXS has 98 */
  Q35_TYPE_IQ3_XXSR = 53,
  /* likewise IQ3_S rows as 4-bit codes (3-bit magnitude code and the sign) in IQ3_XXSR's layout,
   * 134 bytes per 256 elements where IQ3_S has 110 */
  Q35_TYPE_IQ3_SR = 56,
  /* likewise IQ2_XS / IQ2_S rows as IQ2_XXSR's 3-bit values with their sixteen 4-bit scales (one
   * layout for both, kernels/quant_internal.h): 106 bytes per 256 elements where IQ2_XS has 74,
   * IQ2_S 82 */
  Q35_TYPE_IQ2_XSR = 54,
  Q35_TYPE_IQ2_SR = 55,
  /* IQ1_S rows rewritten at load for the AVX2 kernels (q35_repack_row) into whole 2-bit grid codes
   * (g + 1 per element; kernels/quant_internal.h): 74 bytes per 256 elements where IQ1_S has 50 */
  Q35_TYPE_IQ1_SR = 57,
  /* likewise IQ1_M rows (2-bit grid codes, the delta signs per 8 and the scales per 16 as nibbles):
   * 82 bytes per 256 elements where IQ1_M has 56 */
  Q35_TYPE_IQ1_MR = 58,
  Q35_TYPE_COUNT = 59, /* upper bound of the type ids above */
};

/* GGML's name for any GGML type id ("q4_K", "iq2_xxs", ...), or NULL for an unknown id. */
const char *q35_type_name(int type);
/* Is this a type q35 computes with (the list above; Q8_K, Q8_0X, Q8_0Y and Q8_0Z excluded as weight types)? */
int q35_type_supported(int type);
/* Does a GGUF file spell this type with a known layout (block size and bytes per block), whether
 * or not q35 computes with it? (The internal activation types are never in a file.) The
 * layout-only paths (gguf_open_ex with GGUF_OPEN_ANY_LAYOUT, gguf_writer_allow_any_layout) take
 * these. */
int q35_type_layout_known(int type);
/* Elements per block (1 for F32/F16/BF16, 32 for Q*_0, 256 for K-quants/IQ4_XS). 0 if unknown. */
int q35_type_block(int type);
/* Bytes per block. 0 if unknown. */
size_t q35_type_size(int type);
/* Bytes of a row of n elements (n must be a multiple of the block size). */
size_t q35_row_size(int type, int64_t n);
/* Parse a name ("q4_0", "Q4_K", "f16", "bf16", ...); -1 if unknown. */
int q35_type_from_name(const char *name);

#endif
