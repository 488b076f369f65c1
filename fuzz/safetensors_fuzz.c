/*
 * safetensors_fuzz.c - libFuzzer target for the safetensors reader (src/export/safetensors.h):
 * the 8-byte header length, the JSON header (dtype, shape, data_offsets) and the data section.
 * The input is the whole file; it is written to a memfd and opened through /proc/self/fd, so
 * the reader's own open/fstat/mmap path runs.
 * Properties: a file is either opened or refused with a message naming it; for every tensor
 * of an opened file, the data lies inside the file, a F32/F16/BF16 tensor's byte size is
 * exactly n_elem * element size (computed here without overflow), and st_read_f32 of all of
 * its elements stays in bounds (ASan); st_find finds every tensor by name.
 */
// needs: src/export/safetensors.c
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "export/safetensors.h"

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "safetensors_fuzz: property failed: %s\n", what);
    abort();
  }
}

static int fd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fd < 0) {
    fd = memfd_create("st_fuzz", 0);
    check(fd >= 0, "memfd_create");
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  check(ftruncate(fd, 0) == 0, "ftruncate");
  check(pwrite(fd, data, size, 0) == (ssize_t)size, "pwrite");
  q35_err err = {{0}};
  st_set *s = st_open_file(path, &err);
  if (!s) {
    check(err.msg[0] != 0, "refusal has a message");
    return 0;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < st_count(s); i++) {
    const st_tensor *t = st_get(s, i);
    check(t && t->name && t->n_dims >= 0 && t->n_dims <= ST_MAX_DIMS, "tensor header");
    check(t->nbytes <= size, "tensor bytes inside the file");
    total += t->nbytes;
    unsigned __int128 n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= (unsigned __int128)(uint64_t)t->shape[d];
    check(n == (unsigned __int128)(uint64_t)t->n_elem, "n_elem is the product of the shape");
    size_t es = t->dtype == ST_F32 ? 4 : (t->dtype == ST_F16 || t->dtype == ST_BF16) ? 2 : 0;
    if (es) {
      check(n * es == t->nbytes, "F32/F16/BF16 byte size == n_elem * element size");
      if (t->n_elem > 0 && t->n_elem <= 4096) {
        float *dst = malloc(sizeof(float) * (size_t)t->n_elem);
        st_read_f32(t, 0, t->n_elem, dst);
        free(dst);
      }
    }
    check(st_find(s, t->name) != NULL, "st_find finds every tensor");
  }
  check(st_total_bytes(s) == total, "st_total_bytes is the sum");
  st_close(s);
  return 0;
}
