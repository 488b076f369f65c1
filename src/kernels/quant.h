/*
 * quant.h - tensor element types (GGML's numbering and block layouts) and their kernels.
 *
 * Types: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, IQ4_XS, plus Q8_K (activation
 * type only). Block layouts are byte-identical to GGML's, so GGUF tensors are used in place.
 *
 * Matrix-vector products follow ggml-cpu: each weight type has a "vec_dot type" into which
 * the activation row is converted first (Q4_0/Q5_0/Q8_0 -> Q8_0, K-quants and IQ4_XS -> Q8_K,
 * F16 -> F16, BF16 -> BF16, F32 -> F32); the dot product then runs on the weight blocks and
 * the converted activation blocks (integer dot products for the quantized types). Q4_0 takes
 * Q8_0X and Q8_0 takes Q8_0Y: the same Q8_0 values (byte-identical quantization), laid out so
 * the kernels need no shuffles of the activation (act_layout.h). At the AVX2 level (Q4_0 and
 * Q8_0) and where the AVX-512 VBMI kernels run (Q4_0), they take Q8_0Z instead (one int32 lane
 * per block: q35_vec_dot_type says which; the _ref entry points accept it and read the same Q8_0
 * values).
 *
 * Every kernel has a plain scalar reference twin (suffix _ref, quant_ref.c) and SIMD paths
 * (quant_avx2.c, quant_avx512.c) run at the level base/cpu.h chose (q35_simd_active(): the
 * CPU's best, lowered by Q35_SIMD); tests hold them equal.
 */
#ifndef Q35_QUANT_H
#define Q35_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "format/tensor_types.h"

/* The activation type the dot product of weight `type` wants (see above). */
int q35_vec_dot_type(int type);

/* The weight layout the active level's products read fastest for weights of `type`: `type`
 * itself, or Q35_TYPE_Q4_0R for Q4_0 at the AVX2 level (IQ4_NLR, MXFP4R, ... likewise; unless env
 * Q35_REPACK=0). A loader may rewrite a product weight's rows with q35_repack_row into it; every
 * kernel entry point here (dot products, tiles, dequantize) takes the repacked type, with the
 * plain type's results bit for bit. */
int q35_repack_type(int type);
/* The file's type of a repacked layout (Q35_TYPE_Q4_0 for Q35_TYPE_Q4_0R); any other type itself. */
int q35_unrepack_type(int type);
/* One row of n elements of q35_unrepack_type(type) at src rewritten as `type` (a repacked layout)
 * at dst (src != dst; q35_row_size(type, n) bytes, the same as the file type's except the larger
 * IQ2_XXSR's / IQ3_XXSR's / IQ2_XSR's / IQ2_SR's),
 * or back (q35_unrepack_row). Any other type is copied as it is. */
void q35_repack_row(int type, const void *src, void *dst, int64_t n);
/* q35_repack_row's reference twin: the scalar moves (the same bytes at every level) */
void q35_repack_row_ref(int type, const void *src, void *dst, int64_t n);
void q35_unrepack_row(int type, const void *src, void *dst, int64_t n);

/* Dequantize n elements (a multiple of the block size) of `type` to float. */
void q35_dequantize_row(int type, const void *src, float *dst, int64_t n);
void q35_dequantize_row_ref(int type, const void *src, float *dst, int64_t n);

/* Quantize n floats to `type` (any type above, including Q8_K). For Q8_0 and Q8_K this is
 * exactly ggml-cpu's activation quantization on x86 (round to nearest even), so dot products
 * match llama.cpp. For weight types it is a good-quality quantizer (not necessarily
 * byte-identical to llama-quantize). */
void q35_quantize_row(int type, const float *src, void *dst, int64_t n);
void q35_quantize_row_ref(int type, const float *src, void *dst, int64_t n);

/* Can q35_quantize_row write `type` (a weight quantizer exists)? */
int q35_type_quantizable(int type);

/* The importance-weighted form of a weight quantizer: qw holds n importance values, one per
 * column (llama.cpp's imatrix: the mean squared activation that met the column); NULL quantizes
 * as q35_quantize_row. Returns 0, or -1 (nothing written) when `type` has no weighted form. */
int q35_quantize_row_weighted(int type, const float *src, void *dst, int64_t n, const float *qw);
/* Does `type` need an importance vector (ggml_quantize_requires_imatrix: IQ2_XXS, IQ2_XS,
 * IQ1_S)? q35_quantize_row still writes them (with unit importance); exporters refuse them as
 * targets without --imatrix, as llama.cpp does. */
int q35_type_requires_imatrix(int type);

/* Dot product of n elements: a weight row of `type` with an activation row already converted
 * to q35_vec_dot_type(type). */
float q35_vec_dot(int type, int64_t n, const void *w, const void *x);
float q35_vec_dot_ref(int type, int64_t n, const void *w, const void *x);

/* Tile product: out[r*out_stride + c] = q35_vec_dot(type, n, w + r*w_stride, x + c*x_stride) for
 * r < nr, c < nc (strides in bytes for w and x, in floats for out). Bit-identical to calling
 * q35_vec_dot for each pair (same SIMD level): the kernels keep every pair's float accumulation
 * order and only share loads and weight decoding between pairs (register blocking), so results
 * do not depend on nr, nc, strides or where a pair sits in the tile. */
void q35_vec_dot_tile(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                      size_t x_stride, int nc, float *out, size_t out_stride);
/* The reference twin: loops over q35_vec_dot_ref. */
void q35_vec_dot_tile_ref(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                          size_t x_stride, int nc, float *out, size_t out_stride);
/* out[r] = q35_vec_dot(type, n, w + r*w_stride, x) for r < nr, bit for bit: one activation row
 * against many weight rows (decode), through whichever kernel is fastest for that. */
void q35_vec_dot_rows(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x, float *out);
/* Two row ranges of one shape at once (e.g. an expert's gate and up blocks): oa[r*out_stride] =
 * q35_vec_dot(type, n, wa + r*w_stride, x) and ob[r*out_stride] likewise from wb, r < nr, bit for
 * bit; the kernels that have it read the two ranges as two memory streams. */
void q35_vec_dot_rows2(int type, int64_t n, const void *wa, const void *wb, size_t w_stride, int nr, const void *x,
                       float *oa, float *ob, size_t out_stride);
/* Whether q35_vec_dot_rows2 of type has such a kernel at the active level (else it runs the two
 * ranges one after the other). */
int q35_vec_dot_has_rows2(int type);
/* As q35_vec_dot_tile with a general output layout: out[r*out_rs + c*out_cs] (in floats). E.g.
 * token-major Y[t][row] (row stride ldy): out = &Y[0][row0], out_rs = 1, out_cs = ldy. */
void q35_vec_dot_tile_ex(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                         size_t x_stride, int nc, float *out, size_t out_rs, size_t out_cs);


#endif
