/*
 * gguf_fuzz.c - libFuzzer target for the GGUF reader (gguf_open_mem) and the writer's
 * metadata copy (gguf_set_kv_from). Not built by CMake; see fuzz/build_gguf_fuzz.sh:
 *
 *   bash fuzz/build_gguf_fuzz.sh && build-fuzz/gguf_fuzz -max_total_time=60 fuzz/corpus/gguf
 *
 * The input is copied into an exact-size heap buffer so ASan flags any read past its end.
 * On a successful parse every accessor is exercised and the reader's invariants are checked
 * (tensor data inside the buffer, aligned offsets, lookups find every entry).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "kernels/quant.h"

static void check(int cond) {
  if (!cond) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  if (size) memcpy(buf, data, size);
  q35_err err;
  err.msg[0] = 0;
  gguf_file *f = gguf_open_mem(buf, size, "fuzz.gguf", &err);
  if (!f) {
    check(err.msg[0] != 0 && strncmp(err.msg, "fuzz.gguf", 9) == 0);
    free(buf);
    return 0;
  }
  volatile unsigned sink = 0;
  char key[256];
  gguf_writer *w = gguf_writer_new();
  for (uint64_t i = 0; i < f->n_kv; i++) {
    const gguf_kv *kv = &f->kv[i];
    size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
    memcpy(key, kv->key.ptr, n);
    key[n] = 0;
    if (n == kv->key.len && !memchr(key, 0, n)) {
      const gguf_kv *k2 = gguf_find(f, key);
      check(k2 != NULL && gguf_str_eq(k2->key, key));
      uint32_t u;
      float fl;
      int b;
      gguf_str s;
      gguf_get_u32(f, key, &u, &err);
      gguf_get_f32(f, key, &fl, &err);
      gguf_get_bool(f, key, &b, &err);
      if (gguf_get_str(f, key, &s, &err) == 0 && s.len) sink += (unsigned char)s.ptr[s.len - 1];
    }
    if (kv->type == GGUF_ARRAY) {
      for (uint64_t j = 0; j < kv->arr_n && j < 4096; j++) {
        float x = gguf_arr_f32(kv, j);
        sink += (unsigned)gguf_arr_int(kv, j) + (x > 0.0f);
        if (kv->arr_type == GGUF_STRING && kv->arr_str[j].len)
          sink += (unsigned char)kv->arr_str[j].ptr[kv->arr_str[j].len - 1];
      }
    }
    gguf_set_kv_from(w, kv);
  }
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    const gguf_tensor *t = &f->tensors[i];
    check(t->n_dims >= 1 && t->n_dims <= 4 && q35_type_supported(t->type));
    check(t->offset % f->alignment == 0);
    check((const uint8_t *)t->data >= buf && t->nbytes <= size &&
          (const uint8_t *)t->data - buf <= (ptrdiff_t)(size - t->nbytes));
    sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    size_t n = t->name.len < sizeof key - 1 ? (size_t)t->name.len : sizeof key - 1;
    memcpy(key, t->name.ptr, n);
    key[n] = 0;
    if (n == t->name.len && !memchr(key, 0, n)) check(gguf_find_tensor(f, key) == t);
  }
  (void)sink;
  gguf_writer_free(w);
  gguf_close(f);
  free(buf);
  return 0;
}
