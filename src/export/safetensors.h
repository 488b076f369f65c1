/*
 * safetensors.h - read-only, validated access to Hugging Face safetensors checkpoints.
 *
 * A checkpoint directory holds either one `model.safetensors` or shards listed by
 * `model.safetensors.index.json` (its "weight_map" names the shard of every tensor). Each
 * file is mmapped read-only; its header (8-byte little-endian length, then a JSON object
 * name -> {dtype, shape, data_offsets}) is validated before anything is used: the header
 * length against the file size, every tensor's offsets inside the data section, and (for the
 * dtypes whose element size is known) that the byte range matches the shape. Errors name the
 * file and the tensor or key involved. Tensor data stays in the map (no copies), so reading a
 * checkpoint costs no anonymous memory beyond the headers.
 */
#ifndef Q35_EXPORT_SAFETENSORS_H
#define Q35_EXPORT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "q35.h"

enum st_dtype { ST_OTHER = 0, ST_F32, ST_F16, ST_BF16 };

#define ST_MAX_DIMS 8

typedef struct st_tensor {
  char *name;
  char dtype_name[16]; /* as in the header ("BF16", "I64", ...) */
  int dtype;           /* enum st_dtype; ST_OTHER for anything we do not convert */
  int n_dims;
  int64_t shape[ST_MAX_DIMS]; /* PyTorch order: shape[0] slowest */
  int64_t n_elem;
  const uint8_t *data;
  size_t nbytes;
  const char *file;    /* path of the file holding it */
} st_tensor;

typedef struct st_set st_set;

/* Open DIR/model.safetensors.index.json (and every shard it names) or DIR/model.safetensors. */
st_set *st_open_dir(const char *dir, q35_err *err);
/* Open one file (tests). */
st_set *st_open_file(const char *path, q35_err *err);
void st_close(st_set *s);

size_t st_count(const st_set *s);
const st_tensor *st_get(const st_set *s, size_t i);
const st_tensor *st_find(const st_set *s, const char *name);
/* Total bytes of tensor data in the set. */
uint64_t st_total_bytes(const st_set *s);

/* Convert elements [off, off + n) (flat index) of a F32/F16/BF16 tensor to float. */
void st_read_f32(const st_tensor *t, int64_t off, int64_t n, float *dst);

#endif
