/*
 * quant_internal.h - what the weight-kernel files share: the block layouts (quant_blocks.h), the
 * activation layouts (act_layout.h) and the kernel table, one per SIMD level, that quant.c
 * dispatches through.
 *
 *   quant.c             public entry points, the dispatch table, levels overlaid on each other
 *   quant_ref.c         the scalar reference level: dequantize, activation quantizers, vec_dot
 *   quantize_weights.c  the weight quantizers (floats -> Q4_0 ... IQ4_XS), the same at every level
 *   act_layout.c        Q8_0X / Q8_0Y / Q8_0Z rows: scalar pack and unpack
 *   quant_avx2.c        the AVX2 level        } both built from the 256-bit kernel templates
 *   quant_avx512.c      the AVX-512 level     } in quant_256*.inc, plus 512-bit kernels here
 *   quant_neon.c        the aarch64 NEON level (dotprod / i8mm variants chosen at run time)
 */
#ifndef Q35_QUANT_INTERNAL_H
#define Q35_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu.h"
#include "base/util.h"
#include "kernels/act_layout.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

/* Kernel signatures (n is a multiple of the type's block size). */
typedef float (*q35_vec_dot_fn)(int64_t n, const void *w, const void *x);
typedef void (*q35_quantize_fn)(const float *src, void *dst, int64_t n);
typedef void (*q35_dequantize_fn)(const void *src, float *dst, int64_t n);
/* out[r*ors + c*ocs] = vec_dot(n, w + r*ws, x + c*xs) for r < nr, c < nc, bit-identical to the
 * same level's vec_dot for every pair. */
typedef void (*q35_tile_fn)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,
                            float *out, size_t ors, size_t ocs);

/* Two row ranges of one shape against one activation column: oa[r*ors] = vec_dot(n, wa + r*ws, x)
 * and ob[r*ors] = vec_dot(n, wb + r*ws, x) for r < nr, bit-identical to the table's vec_dot. The
 * kernel reads the two ranges together: one core streams more from two ranges far apart than from
 * one (docs/PERF.md, issue 15 session 13). */
typedef void (*q35_gemv2_fn)(int64_t n, const void *wa, const void *wb, size_t ws, int nr, const void *x, float *oa,
                             float *ob, size_t ors);

/* Kernel table: one entry per type id, NULL where the level has no special kernel (the
 * dispatcher falls back to the previous level, finally the reference). */
typedef struct {
  q35_vec_dot_fn vec_dot[Q35_TYPE_COUNT];
  q35_quantize_fn quantize[Q35_TYPE_COUNT];
  q35_dequantize_fn dequantize[Q35_TYPE_COUNT];
  q35_tile_fn tile[Q35_TYPE_COUNT]; /* NULL: loop over this table's vec_dot (see q35_tile_run) */
  int q4_0_act; /* the activation type this table's Q4_0 kernels take (0: unset, Q8_0X) */
  int q8_0_act; /* the activation type this table's Q8_0 kernels take (0: unset, Q8_0Y) */
  int nl_act;   /* ... its IQ4_NL and MXFP4 kernels take (0: unset, Q8_0X) */
  int q4_k_act;  /* ... its Q4_K kernels take (0: unset, Q8_K; AVX2: Q8_KP) */
  int q4_kr_act; /* ... its Q4_KR kernels take (0: unset, Q8_K, the reference's) */
  int q6_k_act;  /* ... its Q6_K kernels take (0: unset, Q8_K; AVX2: Q8_KP) */
  int q6_kr_act; /* ... its Q6_KR kernels take (0: unset, Q8_K, the reference's) */
  int q2_k_act;  /* ... its Q2_K kernels take (0: unset, Q8_K; AVX2: Q8_KP) */
  int q2_kr_act; /* ... its Q2_KR kernels take (0: unset, Q8_K, the reference's) */
  int q3_k_act;  /* ... its Q3_K kernels take (0: unset, Q8_K; AVX2: Q8_KP) */
  int q3_kr_act; /* ... its Q3_KR kernels take (0: unset, Q8_K, the reference's) */
  /* repack[t]: the layout weights of type t are rewritten into at load where this table's kernels
   * for it beat those for t (Q35_TYPE_Q4_0R for Q4_0 at AVX2); 0: t stays as the file has it */
  int repack[Q35_TYPE_COUNT];
  q35_tile_fn gemv[Q35_TYPE_COUNT]; /* one activation column (nc = 1) where a tile kernel beats a loop
                                     * of vec_dot calls: the AVX-512 Q4_0 x Q8_0Z one, whose one-row
                                     * tiles prefetch the rows ahead (vec_dot has no row stride) */
  q35_gemv2_fn gemv2[Q35_TYPE_COUNT]; /* two row ranges at once (NULL: two gemv calls) */
} q35_kernels;

/* The tile product through a table: its tile kernel, or a loop over its vec_dot. */
void q35_tile_run(const q35_kernels *k, int type, int64_t n, const void *w, size_t ws, int nr, const void *x,
                  size_t xs, int nc, float *out, size_t ors, size_t ocs);

/* The activation type a table's vec_dot / tile kernels take for weights of `type`. */
int q35_kernels_vec_dot_type(const q35_kernels *k, int type);

/* The table for a level, complete (each level's entries over the lower levels', down to the
 * reference): -1 if this CPU lacks the level or Q35_SIMD lowers the active level below it. */
int q35_kernels_get(q35_simd level, q35_kernels *out);

/* Each file's entries (NULL where it has none). */
void q35_kernels_ref(q35_kernels *k);              /* quant_ref.c: the whole reference level */
void q35_kernels_weight_quantizers(q35_kernels *k); /* quantize_weights.c: quantize[] of the weight types */
/* quantize_weights.c: the importance-weighted form of its types (qw NULL = unweighted): 0, or -1
 * if `type` is not one of them */
int q35_weights_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw);
void q35_kernels_act_layouts(q35_kernels *k);      /* act_layout.c: Q8_0X/Y/Z quantize[], dequantize[] */
void q35_kernels_avx2(q35_kernels *k);             /* quant_avx2.c: AVX2 + FMA + F16C */
void q35_kernels_avx512(q35_kernels *k);           /* quant_avx512.c: AVX-512 F/BW/VL/DQ/VNNI (+ VBMI) */
/* quant_avx2.c: the 256-bit Q4_K / Q5_K / Q6_K x Q8_K one-column products (gemv, gemv2), for the
 * AVX-512 level, whose K-quant vec_dot gives their bits (tests/test_quant_tile.c); the AVX2 level
 * keeps them for Q5_K and runs Q4_K and Q6_K on Q8_KP (quant_k4r_avx2.inc, quant_k6r_avx2.inc) */
void q35_kernels_avx2_kquant_gemv(q35_kernels *k);
void q35_kernels_neon(q35_kernels *k);             /* quant_neon.c: aarch64 NEON (+ dotprod, i8mm) */
/* The type families added after the first round, each level in its own file (each called at the
 * end of the level's function above):
 *   lowbit: Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, MXFP4   (quant_lowbit_{ref,avx2,avx512,neon}.c)
 *   iq:     IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M   (quant_iq_{ref,avx2,avx512,neon}.c) */
void q35_kernels_lowbit_ref(q35_kernels *k);
void q35_kernels_lowbit_avx2(q35_kernels *k);
void q35_kernels_lowbit_avx512(q35_kernels *k);
void q35_kernels_lowbit_neon(q35_kernels *k);
void q35_kernels_iq_ref(q35_kernels *k);
void q35_kernels_iq_avx2(q35_kernels *k);
void q35_kernels_iq_avx512(q35_kernels *k);
void q35_kernels_iq_neon(q35_kernels *k);
/* quantize_plain_avx2.c: the plain (unweighted) Q4_0 / Q5_0 / Q4_1 / Q5_1 weight quantizers on
 * 256-bit vectors (called by the AVX2 level; the AVX-512 level keeps them) */
void q35_kernels_quantize_plain_avx2(q35_kernels *k);
/* the same file: Q4_1 / Q5_1 with sixteen blocks per 512-bit fit (called by the AVX-512 level) */
void q35_kernels_quantize_plain_avx512(q35_kernels *k);
/* quantize_plain_vec.c: the plain Q4_0 / Q5_0 / Q4_1 / Q5_1 / Q3_K weight quantizers on portable
 * 4-float vectors, over every level's table (q35_kernels_get; not the reference's, q35_kernels_ref) */
void q35_kernels_quantize_plain_vec(q35_kernels *k);
/* quantize_iq.c: quantize[] of the IQ family (called by the reference table; every level uses them) */
void q35_kernels_iq_quantizers(q35_kernels *k);
/* The importance-weighted quantizer of an IQ-family type (qw: n importance values, NULL = as
 * quantize[]): 0, or -1 if `type` is not the family's. */
int q35_iq_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw);
/* The activation type each family's kernels take for weights of `type` (-1: not the family's). */
int q35_lowbit_vec_dot_type(const q35_kernels *k, int type);
int q35_iq_vec_dot_type(const q35_kernels *k, int type);

/* Scalar helpers the SIMD files share with the reference for exactness at edge cases. */
void q35_quantize_q8_0_block_ref(const float *x, blk_q8_0 *y);
void q35_quantize_q8_k_block_ref(const float *x, blk_q8_k *y);
/* One Q8_K block into Q8_KP's permuted qs (back = 0) or back (quant_ref.c; tensor_types.h). */
void q35_q8_kp_move(const blk_q8_k *src, blk_q8_k *dst, int back);
/* one row of n elements: Q4_0 / IQ4_NL (bs = 18) or MXFP4 (bs = 17) blocks at src as Q4_0R /
 * IQ4_NLR / MXFP4R at dst, or back (quant_ref.c) */
void q35_z2r_move(const void *src, void *dst, int64_t n, int back, int bs);
/* IQ2_XXSR (Q35_TYPE_IQ2_XXSR): an IQ2_XXS super-block as whole 3-bit values, 102 bytes:
 *   d (fp16, bytes 0..1) | the eight 4-bit scales, sub-block j in nibble j & 1 of byte 2 + j / 2 |
 *   M0, M1 (32 bytes each at 6 and 38): element e of sub-block j is the 2-bit field j % 4 of byte e
 *   of M(j / 4), its grid magnitude's code (0x08, 0x19, 0x2B -> 0, 1, 2: the magnitude >> 4) |
 *   S (32 bytes at 70): bit j of byte e is the sign of element e of sub-block j (the stored 7 and
 *   the parity's 8th).
 * The same values, so an AVX2 kernel on it sums the very integers of IQ2_XXS's (quant_iq_256.inc).
 * One row of n elements (a multiple of 256) of IQ2_XXS at src as IQ2_XXSR at dst, or back
 * (quant_iq_ref.c); dst holds q35_row_size of its type. */
#define Q35_IQ2_XXSR_BYTES 102
void q35_iq2_xxsr_move(const void *src, void *dst, int64_t n, int back);
/* IQ3_XXSR (Q35_TYPE_IQ3_XXSR): an IQ3_XXS super-block as 4-bit codes, 134 bytes: d | the eight
 * 4-bit scales as IQ2_XXSR's | 4 x 32 bytes: byte e of 32-byte plane k holds element e of sub-block
 * 2k in its low nibble and of sub-block 2k + 1 in its high nibble, each the grid magnitude's code
 * (4, 12, ..., 52, 62 -> 0..7: the magnitude >> 3) plus 8 for a negative sign. (quant_iq_ref.c) */
#define Q35_IQ3_XXSR_BYTES 134
void q35_iq3_xxsr_move(const void *src, void *dst, int64_t n, int back);
/* IQ3_SR (Q35_TYPE_IQ3_SR): an IQ3_S super-block in IQ3_XXSR's layout, 134 bytes: d | IQ3_S's four
 * scale bytes as they are (already that order) | the 4 x 32-byte planes of 4-bit codes, each the
 * grid magnitude's code (1, 3, ..., 15 -> 0..7: the magnitude >> 1) plus 8 for a negative sign.
 * (quant_iq_ref.c) */
#define Q35_IQ3_SR_BYTES 134
void q35_iq3_sr_move(const void *src, void *dst, int64_t n, int back);
/* IQ2_XSR / IQ2_SR (Q35_TYPE_IQ2_XSR / Q35_TYPE_IQ2_SR): an IQ2_XS / IQ2_S super-block (the same
 * three grid magnitudes as IQ2_XXS's, a 4-bit scale per 16 elements) in IQ2_XXSR's planes, 106 bytes:
 *   d (fp16, bytes 0..1) | the eight scale bytes as the file's (byte j: sub-block j's elements 0..15
 *   in the low nibble, 16..31 in the high) | M0, M1 (32 bytes each at 10 and 42) and S (32 bytes at
 *   74) as IQ2_XXSR's (IQ2_XS's 8th sign its parity, IQ2_S's stored).
 * One row of n elements (a multiple of 256) of IQ2_XS (type IQ2_XSR) or IQ2_S (IQ2_SR) at src in
 * this layout at dst, or back (quant_iq_ref.c). */
#define Q35_IQ2_XSR_BYTES 106
void q35_iq2_xsr_move(int type, const void *src, void *dst, int64_t n, int back);
/* IQ1_SR (Q35_TYPE_IQ1_SR): an IQ1_S super-block as whole 2-bit grid codes, 74 bytes:
 *   d (fp16, bytes 0..1) | 8 bytes at 2: byte j = the high byte of IQ1_S's qh[j] with its index bits
 *   cleared (sub-block j's 3-bit scale in bits 4..6, its delta sign in bit 7) | M0, M1 (32 bytes each
 *   at 10 and 42): element e of sub-block j is the 2-bit field j % 4 of byte e of M(j / 4), its grid
 *   value plus one (-1, 0, 1 -> 0, 1, 2).
 * The same values, so an AVX2 kernel on it sums the very integers of IQ1_S's (quant_iq_256.inc).
 * One row of n elements (a multiple of 256) of IQ1_S at src as IQ1_SR at dst, or back (quant_iq_ref.c). */
#define Q35_IQ1_SR_BYTES 74
void q35_iq1_sr_move(const void *src, void *dst, int64_t n, int back);
/* IQ1_MR (Q35_TYPE_IQ1_MR): an IQ1_M super-block likewise, 82 bytes:
 *   d (fp16, bytes 0..1: IQ1_M's, gathered from its scale words) | 8 bytes at 2: byte j holds the
 *   3-bit scales of elements 32 j .. + 15 (low nibble) and 32 j + 16 .. + 31 (high nibble) | 8 bytes
 *   at 10: byte j = sub-block j's four delta signs (bit 4 + g: elements 8 g .. 8 g + 7 of the 32, set
 *   where the delta is negative), low nibble zero | M0, M1 (32 bytes each at 18 and 50) as IQ1_SR's.
 * (quant_iq_ref.c) */
#define Q35_IQ1_MR_BYTES 82
void q35_iq1_mr_move(const void *src, void *dst, int64_t n, int back);
/* quant_avx2.c: q35_repack_row's Q4_KR rewrite on 256-bit vectors (the same bytes; AVX2 CPUs only) */
void q35_repack_q4_kr_avx2(const void *src, void *dst, int64_t n);
/* quant_avx2.c: q35_repack_row's Q6_KR rewrite likewise (quant_k6r_avx2.inc) */
void q35_repack_q6_kr_avx2(const void *src, void *dst, int64_t n);
/* quant_avx2.c: q35_z2r_move's forward move (Q4_0R, IQ4_NLR: bs 18; MXFP4R: 17) likewise */
void q35_repack_z2r_avx2(const void *src, void *dst, int64_t n, int bs);
/* iq_repack_avx2.c: q35_iq2_xxsr_move's / q35_iq3_xxsr_move's forward moves likewise */
void q35_repack_iq2_xxsr_avx2(const void *src, void *dst, int64_t n);
void q35_repack_iq3_xxsr_avx2(const void *src, void *dst, int64_t n);
/* iq_repack_avx2.c: q35_iq3_sr_move's, q35_iq2_xsr_move's (IQ2_XSR, IQ2_SR), q35_iq1_sr_move's and
 * q35_iq1_mr_move's forward moves likewise */
void q35_repack_iq3_sr_avx2(const void *src, void *dst, int64_t n);
void q35_repack_iq2_xsr_avx2(int type, const void *src, void *dst, int64_t n);
void q35_repack_iq1_sr_avx2(const void *src, void *dst, int64_t n);
void q35_repack_iq1_mr_avx2(const void *src, void *dst, int64_t n);

#endif
