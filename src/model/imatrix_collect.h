/*
 * imatrix_collect.h - computing an importance matrix (q35 imatrix): the model runs over a token
 * sequence in chunks (each chunk from an empty state), and for every weight matrix-multiplied on
 * the way the sum of squared activations per input column is accumulated, per expert for the
 * 3-D expert tensors, with the number of activation rows each matrix saw. The result is written
 * in llama.cpp's imatrix GGUF format (export/imatrix.h): NAME.in_sum2 {n_per_row, n_mat},
 * NAME.counts {1, n_mat}, imatrix.datasets / chunk_count / chunk_size.
 */
#ifndef Q35_MODEL_IMATRIX_COLLECT_H
#define Q35_MODEL_IMATRIX_COLLECT_H

#include <stdint.h>

#include "q35.h"

/* Run `model` over tokens[0..n) in chunks of chunk_size (a last partial chunk is dropped, as
 * llama-imatrix does; at least one whole chunk is needed), write OUT. dataset names the text. */
int q35_imatrix_compute(q35_model *model, const int32_t *tokens, int64_t n, int32_t chunk_size,
                        const char *dataset, const char *out, q35_err *err);

#endif
