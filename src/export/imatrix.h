/*
 * imatrix.h - importance matrices in llama.cpp's imatrix GGUF format (what llama-imatrix writes
 * and llama-quantize --imatrix reads), for q35 export --imatrix FILE.
 *
 * Format (tools/imatrix/imatrix.cpp of llama.cpp): for every matrix-multiplied weight NAME,
 * an F32 tensor NAME.in_sum2 of shape {n_per_row, n_mat} holding, per input column j of matrix
 * m (m: the expert of a 3-D expert tensor, else 0), the sum over the activations x that met it
 * of x_j^2; and an F32 tensor NAME.counts {1, n_mat}: how many activation rows matrix m saw.
 * Keys: imatrix.datasets (string array), imatrix.chunk_count, imatrix.chunk_size (u32).
 * The importance weights of matrix m are in_sum2[., m] / counts[m] (1 where a matrix saw
 * nothing), as llama-quantize prepares them; an imatrix with one matrix serves every expert.
 */
#ifndef Q35_EXPORT_IMATRIX_H
#define Q35_EXPORT_IMATRIX_H

#include <stdint.h>

#include "q35.h"

typedef struct q35_imatrix q35_imatrix;

q35_imatrix *q35_imatrix_load(const char *path, q35_err *err);
void q35_imatrix_free(q35_imatrix *im);
/* How many weights (NAME entries) it has. */
int q35_imatrix_count(const q35_imatrix *im);
/* One line on stderr: what was read, and which quantizers take the weights. */
void q35_imatrix_report(const q35_imatrix *im, const char *path);
/* Weights of matrix `mat` of tensor `name` (n_per_row of them), or NULL when the imatrix has no
 * entry for it. *bad = 1 (and a message in err) when it has one of another row length. */
const float *q35_imatrix_weights(const q35_imatrix *im, const char *name, int64_t n_per_row, int64_t mat,
                                 int *bad, q35_err *err);
/* Check tensor `name` (quantized to `type`, n_mat matrices of rows of n_per_row) against im
 * (NULL: no imatrix): 0, or -1 with a message naming the tensor when im's entry for it has
 * another size, or when the tensor needs importance weights (need: its type's quantizer or the
 * recipe's rule, q35_recipe_needs_imatrix) and there are none for it; with dry_run that last case
 * is not an error: it only sets *missing (when missing is not NULL). */
int q35_imatrix_check(const q35_imatrix *im, const char *name, int type, int need, int64_t n_per_row, int64_t n_mat,
                      int dry_run, int *missing, q35_err *err);
/* Does q35 have an importance-weighted quantizer for `type`? (Every weight type but Q8_0, MXFP4
 * and the float types, which quantize as without an imatrix, as in ggml.) */
int q35_imatrix_type_weighted(int type);
/* Quantize a row with weights qw (NULL: unweighted) where the type has a weighted quantizer. */
void q35_quantize_row_imatrix(int type, const float *src, void *dst, int64_t n, const float *qw);

#endif
