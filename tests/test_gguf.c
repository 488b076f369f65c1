/*
 * test_gguf.c - GGUF reader/writer: round trip, byte layout against the spec, corrupt input,
 * and (when the prebuilt llama.cpp is installed in .peer/) cross-reading with ggml's gguf.
 *
 * References: the byte layout is checked against a file assembled here by hand from the
 * format description (not with the writer), and against ggml's own gguf reader and writer
 * (libggml-base.so from the llama.cpp peer), loaded with dlopen so the test still runs
 * without it. Every corruption case checks that the error names the field or tensor.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"
#include "check.h"
#include "export/tiny.h"
#include "format/gguf.h"
#include "format/gguf_names.h"
#include "kernels/quant.h"

static char tmpdir[256];

static char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static uint8_t *read_file(const char *p, size_t *n) { return (uint8_t *)q35_read_file(p, n, NULL); }

static void write_bytes(const char *p, const void *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (!f) {
    perror(p);
    exit(1);
  }
  fwrite(b, 1, n, f);
  fclose(f);
}

static void fill(uint8_t *p, size_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    p[i] = (uint8_t)s;
  }
}

/* ---- the round-trip file ---------------------------------------------------------------- */

typedef struct {
  const char *name;
  int type;
  uint32_t n_dims;
  int64_t ne[4];
} tdesc;

/* The last tensor's size is a multiple of 32, so the file has no trailing padding and every
 * shorter prefix is invalid. */
static const tdesc tensors[] = {
    {"token_embd.weight", Q35_TYPE_Q8_0, 2, {64, 3, 1, 1}},
    {"blk.0.ffn_up.weight", Q35_TYPE_Q4_K, 2, {256, 2, 1, 1}},
    {"blk.0.attn_norm.weight", Q35_TYPE_F32, 1, {7, 1, 1, 1}},
    {"blk.0.attn_q.weight", Q35_TYPE_F16, 3, {3, 5, 2, 1}},
    {"blk.0.attn_k.weight", Q35_TYPE_BF16, 4, {2, 1, 1, 3}},
    {"blk.0.ffn_gate_exps.weight", Q35_TYPE_Q5_0, 3, {32, 1, 2, 1}},
    {"blk.0.ffn_down_exps.weight", Q35_TYPE_Q6_K, 1, {256, 1, 1, 1}},
    {"blk.0.ssm_out.weight", Q35_TYPE_Q5_K, 2, {256, 1, 1, 1}},
    {"blk.0.ssm_alpha.weight", Q35_TYPE_IQ4_XS, 1, {256, 1, 1, 1}},
    {"dup.aaa", Q35_TYPE_Q4_0, 1, {32, 1, 1, 1}},
    {"dup.bbb", Q35_TYPE_Q4_0, 1, {32, 1, 1, 1}},
    {"output.weight", Q35_TYPE_F32, 2, {8, 4, 1, 1}},
};
#define NT ((int)(sizeof tensors / sizeof tensors[0]))

static size_t tdesc_bytes(const tdesc *t) {
  return q35_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static const char *const strs[] = {"a", "", "bc", "\xe6\x97\xa5\xe6\x9c\xac", "Ġthe"};
static const int32_t ai32[] = {1, -2, 3, 2147483647, -2147483647 - 1};
static const float af32[] = {0.5f, -1.25f, 3.0e38f};
static const uint8_t au8[] = {0, 1, 255};
static const uint8_t abool[] = {1, 0, 1, 1};
static const uint64_t au64[] = {0, 18446744073709551615ull};
static const double af64[] = {3.141592653589793, -0.0};
static const int16_t ai16[] = {-32768, 32767, 0};

static void set_all_metadata(gguf_writer *w) {
  gguf_set_str(w, "general.architecture", "qwen35moe");
  gguf_set_u8(w, "t.u8", 200);
  gguf_set_i8(w, "t.i8", -100);
  gguf_set_u16(w, "t.u16", 60000);
  gguf_set_i16(w, "t.i16", -30000);
  gguf_set_u32(w, "t.u32", 4000000000u);
  gguf_set_i32(w, "t.i32", -2000000000);
  gguf_set_f32(w, "t.f32", 1.5f);
  gguf_set_bool(w, "t.bool", 1);
  gguf_set_str(w, "t.str", "h\xc3\xa9llo world");
  gguf_set_u64(w, "t.u64", 9223372036854775813ull);
  gguf_set_i64(w, "t.i64", -4611686018427387904ll);
  gguf_set_f64(w, "t.f64", 2.718281828459045);
  gguf_set_arr_i32(w, "t.arr_i32", ai32, 5);
  gguf_set_arr_f32(w, "t.arr_f32", af32, 3);
  gguf_set_arr_str(w, "t.arr_str", strs, 5);
  gguf_set_arr(w, "t.arr_u8", GGUF_U8, au8, 3);
  gguf_set_arr(w, "t.arr_bool", GGUF_BOOL, abool, 4);
  gguf_set_arr(w, "t.arr_u64", GGUF_U64, au64, 2);
  gguf_set_arr(w, "t.arr_f64", GGUF_F64, af64, 2);
  gguf_set_arr(w, "t.arr_i16", GGUF_I16, ai16, 3);
  gguf_set_arr_i32(w, "t.arr_empty", NULL, 0);
  gguf_set_arr_str(w, "t.arr_str_empty", NULL, 0);
  gguf_set_str(w, "t.replaced", "first");
  gguf_set_u32(w, "t.replaced", 77); /* replaces the string, keeps the position */
}
#define N_META 24

static uint8_t *tensor_data[NT];

static gguf_writer *make_writer(int with_data) {
  gguf_writer *w = gguf_writer_new();
  set_all_metadata(w);
  for (int i = 0; i < NT; i++) {
    int idx = gguf_add_tensor(w, tensors[i].name, tensors[i].type, tensors[i].n_dims,
                              tensors[i].ne, with_data ? tensor_data[i] : NULL);
    CHECK(idx == i, "add_tensor %s returned %d", tensors[i].name, idx);
  }
  return w;
}

static void check_contents(const gguf_file *f, const char *what) {
  q35_err err = {{0}};
  CHECK(f->version == 3, "%s: version %u", what, f->version);
  CHECK(f->n_kv == N_META, "%s: n_kv %llu", what, (unsigned long long)f->n_kv);
  CHECK(f->n_tensors == NT, "%s: n_tensors %llu", what, (unsigned long long)f->n_tensors);
  CHECK(f->alignment == 32, "%s: alignment %zu", what, f->alignment);
  CHECK(f->data_offset % 32 == 0, "%s: data offset %zu", what, f->data_offset);
  /* insertion order */
  static const char *const order[] = {"general.architecture", "t.u8", "t.i8", "t.u16", "t.i16",
                                      "t.u32", "t.i32", "t.f32", "t.bool", "t.str", "t.u64",
                                      "t.i64", "t.f64", "t.arr_i32", "t.arr_f32", "t.arr_str",
                                      "t.arr_u8", "t.arr_bool", "t.arr_u64", "t.arr_f64",
                                      "t.arr_i16", "t.arr_empty", "t.arr_str_empty",
                                      "t.replaced"};
  for (int i = 0; i < N_META && (uint64_t)i < f->n_kv; i++)
    CHECK(gguf_str_eq(f->kv[i].key, order[i]), "%s: key %d is '%.*s', expected %s", what, i,
          (int)f->kv[i].key.len, f->kv[i].key.ptr, order[i]);

  const gguf_kv *kv;
#define SCALAR(key, ty, field, val)                                                      \
  kv = gguf_find(f, key);                                                                \
  CHECK(kv && kv->type == ty && kv->v.field == (val), "%s: %s", what, key)
  SCALAR("t.u8", GGUF_U8, u, 200);
  SCALAR("t.i8", GGUF_I8, i, -100);
  SCALAR("t.u16", GGUF_U16, u, 60000);
  SCALAR("t.i16", GGUF_I16, i, -30000);
  SCALAR("t.u32", GGUF_U32, u, 4000000000u);
  SCALAR("t.i32", GGUF_I32, i, -2000000000);
  SCALAR("t.f32", GGUF_F32, f, 1.5);
  SCALAR("t.bool", GGUF_BOOL, u, 1);
  SCALAR("t.u64", GGUF_U64, u, 9223372036854775813ull);
  SCALAR("t.i64", GGUF_I64, i, -4611686018427387904ll);
  SCALAR("t.f64", GGUF_F64, f, 2.718281828459045);
  SCALAR("t.replaced", GGUF_U32, u, 77);
  kv = gguf_find(f, "t.str");
  CHECK(kv && kv->type == GGUF_STRING && gguf_str_eq(kv->v.s, "h\xc3\xa9llo world"), "%s: t.str",
        what);
  CHECK(!gguf_find(f, "t.missing") && !gguf_find(f, "t.u") && !gguf_find(f, ""),
        "%s: find of absent keys", what);

  kv = gguf_find(f, "t.arr_i32");
  CHECK(kv && kv->type == GGUF_ARRAY && kv->arr_type == GGUF_I32 && kv->arr_n == 5, "%s: arr_i32",
        what);
  for (int i = 0; kv && i < 5; i++)
    CHECK(gguf_arr_int(kv, (uint64_t)i) == ai32[i], "%s: arr_i32[%d]", what, i);
  CHECK(gguf_arr_int(kv, 5) == 0, "%s: out-of-range element", what);
  kv = gguf_find(f, "t.arr_f32");
  CHECK(kv && kv->arr_type == GGUF_F32 && kv->arr_n == 3, "%s: arr_f32", what);
  for (int i = 0; kv && i < 3; i++)
    CHECK(gguf_arr_f32(kv, (uint64_t)i) == af32[i], "%s: arr_f32[%d]", what, i);
  kv = gguf_find(f, "t.arr_str");
  CHECK(kv && kv->arr_type == GGUF_STRING && kv->arr_n == 5 && kv->arr_str, "%s: arr_str", what);
  for (int i = 0; kv && kv->arr_str && i < 5; i++)
    CHECK(gguf_str_eq(kv->arr_str[i], strs[i]), "%s: arr_str[%d]", what, i);
  kv = gguf_find(f, "t.arr_u8");
  CHECK(kv && kv->arr_type == GGUF_U8 && kv->arr_n == 3 && gguf_arr_int(kv, 2) == 255,
        "%s: arr_u8", what);
  kv = gguf_find(f, "t.arr_bool");
  CHECK(kv && kv->arr_type == GGUF_BOOL && kv->arr_n == 4 && gguf_arr_int(kv, 1) == 0 &&
            gguf_arr_int(kv, 3) == 1, "%s: arr_bool", what);
  kv = gguf_find(f, "t.arr_u64");
  CHECK(kv && kv->arr_type == GGUF_U64 && kv->arr_n == 2 &&
            (uint64_t)gguf_arr_int(kv, 1) == 18446744073709551615ull, "%s: arr_u64", what);
  kv = gguf_find(f, "t.arr_f64");
  CHECK(kv && kv->arr_type == GGUF_F64 && kv->arr_n == 2 &&
            gguf_arr_f32(kv, 0) == (float)3.141592653589793, "%s: arr_f64", what);
  kv = gguf_find(f, "t.arr_i16");
  CHECK(kv && kv->arr_type == GGUF_I16 && gguf_arr_int(kv, 0) == -32768 &&
            gguf_arr_int(kv, 1) == 32767, "%s: arr_i16", what);
  kv = gguf_find(f, "t.arr_empty");
  CHECK(kv && kv->arr_type == GGUF_I32 && kv->arr_n == 0, "%s: arr_empty", what);
  kv = gguf_find(f, "t.arr_str_empty");
  CHECK(kv && kv->arr_type == GGUF_STRING && kv->arr_n == 0, "%s: arr_str_empty", what);

  /* typed getters */
  uint32_t u;
  float fl;
  int b;
  gguf_str s;
  CHECK(gguf_get_u32(f, "t.u8", &u, &err) == 0 && u == 200, "get_u32(u8): %s", err.msg);
  CHECK(gguf_get_u32(f, "t.u32", &u, &err) == 0 && u == 4000000000u, "get_u32: %s", err.msg);
  CHECK(gguf_get_u32(f, "t.i32", &u, &err) == -1 && strstr(err.msg, "t.i32") &&
            strstr(err.msg, "out of range"), "get_u32(negative): %s", err.msg);
  CHECK(gguf_get_u32(f, "t.u64", &u, &err) == -1 && strstr(err.msg, "t.u64"), "get_u32(u64): %s",
        err.msg);
  CHECK(gguf_get_u32(f, "t.str", &u, &err) == -1 && strstr(err.msg, "t.str") &&
            strstr(err.msg, "string"), "get_u32(str): %s", err.msg);
  CHECK(gguf_get_u32(f, "t.nope", &u, &err) == -1 && strstr(err.msg, "t.nope") &&
            strstr(err.msg, "missing"), "get_u32(missing): %s", err.msg);
  CHECK(gguf_get_u32_or(f, "t.nope", 42, &u, &err) == 0 && u == 42, "get_u32_or default");
  CHECK(gguf_get_u32_or(f, "t.u16", 42, &u, &err) == 0 && u == 60000, "get_u32_or present");
  CHECK(gguf_get_u32_or(f, "t.f32", 42, &u, &err) == -1 && strstr(err.msg, "t.f32"),
        "get_u32_or wrong type: %s", err.msg);
  CHECK(gguf_get_f32(f, "t.f32", &fl, &err) == 0 && fl == 1.5f, "get_f32");
  CHECK(gguf_get_f32(f, "t.f64", &fl, &err) == 0 && fl == (float)2.718281828459045, "get_f32(f64)");
  CHECK(gguf_get_f32(f, "t.u8", &fl, &err) == -1 && strstr(err.msg, "t.u8"), "get_f32(u8): %s",
        err.msg);
  CHECK(gguf_get_f32_or(f, "t.nope", 0.25f, &fl, &err) == 0 && fl == 0.25f, "get_f32_or");
  CHECK(gguf_get_bool(f, "t.bool", &b, &err) == 0 && b == 1, "get_bool");
  CHECK(gguf_get_bool(f, "t.u8", &b, &err) == -1 && strstr(err.msg, "t.u8"), "get_bool(u8)");
  CHECK(gguf_get_str(f, "general.architecture", &s, &err) == 0 && gguf_str_eq(s, "qwen35moe"),
        "get_str");
  CHECK(gguf_get_str(f, "t.u8", &s, &err) == -1 && strstr(err.msg, "t.u8"), "get_str(u8)");

  const gguf_kv *a = NULL;
  CHECK(gguf_get_arr(f, "t.arr_i16", GGUF_ANY_INT, &a, &err) == 0 && a && a->arr_n == 3,
        "get_arr(any int): %s", err.msg);
  CHECK(gguf_get_arr(f, "t.arr_str", GGUF_STRING, &a, &err) == 0 && a->arr_n == 5,
        "get_arr(string): %s", err.msg);
  CHECK(gguf_get_arr(f, "t.arr_f64", GGUF_F32, &a, &err) == 0 && a->arr_n == 2,
        "get_arr(f32 from f64): %s", err.msg);
  CHECK(gguf_get_arr(f, "t.arr_str", GGUF_ANY_INT, &a, &err) == -1 &&
            strstr(err.msg, "'t.arr_str' is an array of string, expected an array of integers"),
        "get_arr(wrong element type): %s", err.msg);
  CHECK(gguf_get_arr(f, "t.u8", GGUF_U8, &a, &err) == -1 && strstr(err.msg, "'t.u8'") &&
            strstr(err.msg, "expected an array"), "get_arr(scalar): %s", err.msg);
  CHECK(gguf_get_arr(f, "t.none", GGUF_U8, &a, &err) == -1 && strstr(err.msg, "missing key"),
        "get_arr(missing): %s", err.msg);

  /* tensors */
  for (int i = 0; i < NT && (uint64_t)i < f->n_tensors; i++) {
    const gguf_tensor *t = gguf_find_tensor(f, tensors[i].name);
    CHECK(t == &f->tensors[i], "%s: find_tensor %s", what, tensors[i].name);
    if (!t) continue;
    CHECK(t->type == tensors[i].type && t->n_dims == tensors[i].n_dims, "%s: %s type/dims", what,
          tensors[i].name);
    for (int d = 0; d < 4; d++)
      CHECK(t->ne[d] == tensors[i].ne[d], "%s: %s ne[%d] = %lld", what, tensors[i].name, d,
            (long long)t->ne[d]);
    CHECK(t->nbytes == tdesc_bytes(&tensors[i]), "%s: %s nbytes %zu", what, tensors[i].name,
          t->nbytes);
    CHECK(t->offset % 32 == 0, "%s: %s offset %llu", what, tensors[i].name,
          (unsigned long long)t->offset);
    CHECK((const uint8_t *)t->data == f->map + f->data_offset + t->offset, "%s: %s data pointer",
          what, tensors[i].name);
    CHECK(memcmp(t->data, tensor_data[i], t->nbytes) == 0, "%s: %s data bytes", what,
          tensors[i].name);
    if (i > 0) /* declaration order, packed with minimal padding */
      CHECK(t->offset == (f->tensors[i - 1].offset + f->tensors[i - 1].nbytes + 31) / 32 * 32,
            "%s: %s offset %llu not packed", what, tensors[i].name, (unsigned long long)t->offset);
  }
  CHECK(!gguf_find_tensor(f, "nope.weight"), "%s: find absent tensor", what);
  /* file ends exactly at the end of the last tensor (its size is a multiple of 32) */
  const gguf_tensor *last = &f->tensors[NT - 1];
  CHECK(f->data_offset + last->offset + last->nbytes == f->size, "%s: file size %zu", what, f->size);
}

/* ---- a file assembled by hand from the format description -------------------------------- */

typedef struct {
  uint8_t b[512];
  size_t n;
} hb;
static void h_le(hb *h, uint64_t v, int n) {
  for (int i = 0; i < n; i++) h->b[h->n++] = (uint8_t)(v >> (8 * i));
}
static void h_str(hb *h, const char *s) {
  h_le(h, strlen(s), 8);
  memcpy(h->b + h->n, s, strlen(s));
  h->n += strlen(s);
}

static void test_spec_bytes(void) {
  hb h = {{0}, 0};
  memcpy(h.b, "GGUF", 4);
  h.n = 4;
  h_le(&h, 3, 4);  /* version */
  h_le(&h, 2, 8);  /* n_tensors */
  h_le(&h, 3, 8);  /* n_kv */
  h_str(&h, "general.architecture");
  h_le(&h, 8, 4);
  h_str(&h, "qwen35");
  h_str(&h, "a.n");
  h_le(&h, 4, 4);
  h_le(&h, 7, 4);
  h_str(&h, "a.arr");
  h_le(&h, 9, 4);
  h_le(&h, 8, 4);
  h_le(&h, 2, 8);
  h_str(&h, "x");
  h_str(&h, "yz");
  h_str(&h, "w");
  h_le(&h, 1, 4);
  h_le(&h, 3, 8);
  h_le(&h, 0, 4); /* f32 */
  h_le(&h, 0, 8);
  h_str(&h, "v");
  h_le(&h, 2, 4);
  h_le(&h, 2, 8);
  h_le(&h, 1, 8);
  h_le(&h, 1, 4); /* f16 */
  h_le(&h, 32, 8);
  while (h.n % 32) h.b[h.n++] = 0;
  size_t data_start = h.n;
  float w3[3] = {1.0f, -2.0f, 0.5f};
  uint16_t v2[2] = {0x3c00, 0xc000};
  memcpy(h.b + h.n, w3, 12);
  h.n += 12;
  while (h.n % 32) h.b[h.n++] = 0;
  memcpy(h.b + h.n, v2, 4);
  h.n += 4;
  while (h.n % 32) h.b[h.n++] = 0;

  /* the writer must produce exactly these bytes */
  gguf_writer *w = gguf_writer_new();
  gguf_set_str(w, "general.architecture", "qwen35");
  gguf_set_u32(w, "a.n", 7);
  const char *arr[] = {"x", "yz"};
  gguf_set_arr_str(w, "a.arr", arr, 2);
  gguf_add_tensor(w, "w", Q35_TYPE_F32, 1, (int64_t[]){3}, w3);
  gguf_add_tensor(w, "v", Q35_TYPE_F16, 2, (int64_t[]){2, 1}, v2);
  q35_err err = {{0}};
  int rc = gguf_writer_save(w, tpath("spec.gguf"), &err);
  CHECK(rc == 0, "save spec.gguf: %s", err.msg);
  gguf_writer_free(w);
  size_t n = 0;
  uint8_t *got = read_file(tpath("spec.gguf"), &n);
  CHECK(got && n == h.n && memcmp(got, h.b, n) == 0, "writer bytes differ from the spec layout "
        "(%zu vs %zu bytes)", n, h.n);
  free(got);

  /* and the reader must parse them */
  gguf_file *f = gguf_open_mem(h.b, h.n, "spec", &err);
  CHECK(f, "open spec bytes: %s", err.msg);
  if (f) {
    CHECK(f->data_offset == data_start, "spec data offset %zu", f->data_offset);
    const gguf_tensor *t = gguf_find_tensor(f, "v");
    CHECK(t && t->offset == 32 && t->nbytes == 4 && t->ne[1] == 1 && t->n_dims == 2, "spec v");
    const gguf_kv *kv = gguf_find(f, "a.arr");
    CHECK(kv && kv->arr_n == 2 && gguf_str_eq(kv->arr_str[1], "yz"), "spec a.arr");
    gguf_close(f);
  }
  /* version 2 is accepted too */
  h.b[4] = 2;
  f = gguf_open_mem(h.b, h.n, "spec-v2", &err);
  CHECK(f && f->version == 2, "open v2: %s", err.msg);
  gguf_close(f);
}

/* ---- corruption ----------------------------------------------------------------------- */

static uint8_t *img;
static size_t img_n;

static size_t find_bytes(const uint8_t *hay, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 24; i + k <= n; i++)
    if (!memcmp(hay + i, needle, k) && i >= 8 && hay[i - 8] == k) return i;
  return 0;
}

/* Offset just past a key's bytes (where its value type is). */
static size_t key_end(const char *key) {
  size_t p = find_bytes(img, img_n, key);
  if (!p) {
    fprintf(stderr, "FAIL: key %s not found in the image\n", key);
    exit(1);
  }
  return p + strlen(key);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Patch a copy of the image (n bytes at off), open it, expect failure mentioning all needles. */
static void expect_fail(const char *label, size_t off, uint64_t v, int n, const char *need1,
                        const char *need2) {
  uint8_t *c = malloc(img_n);
  memcpy(c, img, img_n);
  put_le(c + off, v, n);
  q35_err err = {{0}};
  gguf_file *f = gguf_open_mem(c, img_n, "corrupt.gguf", &err);
  CHECK(!f, "%s: corrupt file was accepted", label);
  gguf_close(f);
  CHECK(strstr(err.msg, "corrupt.gguf") != NULL, "%s: error lacks the file name: %s", label,
        err.msg);
  CHECK(!need1 || strstr(err.msg, need1), "%s: error lacks '%s': %s", label, need1, err.msg);
  CHECK(!need2 || strstr(err.msg, need2), "%s: error lacks '%s': %s", label, need2, err.msg);
  free(c);
}

static void test_truncation(void) {
  int bad = 0;
  for (size_t len = 0; len <= img_n; len++) {
    uint8_t *c = malloc(len ? len : 1); /* exact size: ASan catches any over-read */
    memcpy(c, img, len);
    q35_err err = {{0}};
    gguf_file *f = gguf_open_mem(c, len, "trunc.gguf", &err);
    if (len < img_n) {
      if (f || !strstr(err.msg, "trunc.gguf")) {
        if (bad++ < 5)
          CHECK(0, "truncated at %zu of %zu bytes: %s", len, img_n, f ? "accepted" : err.msg);
      }
    } else {
      CHECK(f != NULL, "full file rejected: %s", err.msg);
    }
    gguf_close(f);
    free(c);
  }
  checks++;
  if (bad) failures++, fprintf(stderr, "FAIL: %d truncated prefixes misbehaved\n", bad);
}

static size_t tensor_info(const char *name) {
  size_t p = find_bytes(img, img_n, name);
  if (!p) {
    fprintf(stderr, "FAIL: tensor %s not found in the image\n", name);
    exit(1);
  }
  return p + strlen(name); /* n_dims */
}

static void test_corruption(void) {
  expect_fail("magic", 0, 'X', 1, "not a GGUF file", NULL);
  expect_fail("version 4", 4, 4, 4, "version 4", NULL);
  expect_fail("version 1", 4, 1, 4, "version 1", NULL);
  expect_fail("big-endian version", 4, 0x03000000u, 4, "version", "big-endian");
  expect_fail("n_tensors huge", 8, 1ull << 60, 8, "n_tensors", NULL);
  expect_fail("n_kv huge", 16, 1ull << 60, 8, "n_kv", NULL);
  expect_fail("n_kv all ones", 16, ~0ull, 8, "n_kv", NULL);
  expect_fail("n_kv one more", 16, N_META + 1, 8, NULL, NULL);
  expect_fail("first key length huge", 24, 1ull << 62, 8, "metadata pair #0", "length");
  size_t e = key_end("t.str");
  expect_fail("string length huge", e + 4, 1ull << 40, 8, "'t.str'", "length");
  expect_fail("string length all ones", e + 4, ~0ull, 8, "'t.str'", "length");
  e = key_end("t.u32");
  expect_fail("value type 99", e, 99, 4, "'t.u32'", "unknown value type 99");
  e = key_end("t.arr_i32");
  expect_fail("array count huge", e + 8, 1ull << 61, 8, "'t.arr_i32'", "count");
  expect_fail("array count all ones", e + 8, ~0ull, 8, "'t.arr_i32'", "count");
  expect_fail("array count +1000", e + 8, 1000, 8, "'t.arr_i32'", NULL);
  expect_fail("nested array", e + 4, GGUF_ARRAY, 4, "'t.arr_i32'", "array of arrays");
  expect_fail("array element type 13", e + 4, 13, 4, "'t.arr_i32'", "unknown element type 13");
  e = key_end("t.arr_str");
  expect_fail("string array count huge", e + 8, 1ull << 59, 8, "'t.arr_str'", "count");
  expect_fail("string array element length huge", e + 16, 1ull << 50, 8, "'t.arr_str'",
              "string element 0");
  /* duplicate key: "t.i8" -> "t.u8" */
  e = key_end("t.i8");
  expect_fail("duplicate key", e - 2, 'u', 1, "duplicate metadata key 't.u8'", NULL);
  /* duplicate tensor name: "dup.bbb" -> "dup.aaa" */
  size_t p = tensor_info("dup.bbb");
  {
    uint8_t *save = malloc(img_n);
    memcpy(save, img, img_n);
    memcpy(img + p - 3, "aaa", 3);
    expect_fail("duplicate tensor", 0, 'G', 1, "duplicate tensor name 'dup.aaa'", NULL);
    memcpy(img, save, img_n);
    free(save);
  }

  const char *up = "blk.0.ffn_up.weight"; /* q4_K [256, 2] */
  p = tensor_info(up);
  expect_fail("n_dims 5", p, 5, 4, "'blk.0.ffn_up.weight'", "n_dims = 5");
  expect_fail("n_dims 0", p, 0, 4, "'blk.0.ffn_up.weight'", "n_dims = 0");
  expect_fail("ne 0", p + 4 + 8, 0, 8, "'blk.0.ffn_up.weight'", "ne[1] = 0");
  expect_fail("ne > INT64_MAX", p + 4, 1ull << 63, 8, "'blk.0.ffn_up.weight'", "ne[0]");
  expect_fail("ne overflow", p + 4 + 8, 1ull << 62, 8, "'blk.0.ffn_up.weight'", "overflow");
  expect_fail("ne[0] not a block multiple", p + 4, 128, 8, "'blk.0.ffn_up.weight'",
              "multiple of the q4_K block size 256");
  expect_fail("tensor bigger than the file", p + 4 + 8, 1ull << 40, 8, "'blk.0.ffn_up.weight'",
              "past the end");
  size_t tt = p + 4 + 2 * 8;
  expect_fail("type 77", tt, 77, 4, "'blk.0.ffn_up.weight'", "unknown tensor type id 77");
  expect_fail("type tq1_0", tt, 34, 4,
              "tensor 'blk.0.ffn_up.weight' has type tq1_0, which q35 does not support (supported: "
              "f32, f16", NULL);
  expect_fail("type q8_K", tt, 15, 4, "has type q8_K, which q35 does not support", NULL);
  uint64_t off = 0;
  for (int i = 0; i < 8; i++) off |= (uint64_t)img[tt + 4 + i] << (8 * i);
  CHECK(off != 0 && off % 32 == 0, "ffn_up offset %llu", (unsigned long long)off);
  expect_fail("misaligned offset", tt + 4, off + 1, 8, "'blk.0.ffn_up.weight'", "alignment");
  expect_fail("offset past end", tt + 4, off + img_n, 8, "'blk.0.ffn_up.weight'", "past the end");
  expect_fail("offset huge", tt + 4, ~0ull << 5, 8, "'blk.0.ffn_up.weight'", "past the end");
  expect_fail("overlap", tt + 4, 0, 8, "overlaps", "'blk.0.ffn_up.weight'");

  /* byte-size overflow with a count that fits: f32 [2^62] */
  p = tensor_info("blk.0.attn_norm.weight");
  expect_fail("byte size overflow", p + 4, 1ull << 62, 8, "'blk.0.attn_norm.weight'",
              "byte size that overflows");
  /* tensor name length past the end */
  p = find_bytes(img, img_n, "token_embd.weight");
  expect_fail("tensor name length huge", p - 8, 1ull << 45, 8, "tensor #0", "length");
}

/* A file with general.alignment = 64, then a bad alignment. */
static void test_alignment(void) {
  gguf_writer *w = gguf_writer_new();
  gguf_set_u32(w, "general.alignment", 64);
  uint8_t d[40];
  fill(d, sizeof d, 9);
  gguf_add_tensor(w, "a", Q35_TYPE_F32, 1, (int64_t[]){3}, d);
  gguf_add_tensor(w, "b", Q35_TYPE_F32, 1, (int64_t[]){10}, d);
  q35_err err = {{0}};
  CHECK(gguf_writer_save(w, tpath("align.gguf"), &err) == 0, "save align: %s", err.msg);
  gguf_writer_free(w);
  gguf_file *f = gguf_open(tpath("align.gguf"), &err);
  CHECK(f && f->alignment == 64 && f->data_offset % 64 == 0 && f->tensors[1].offset == 64,
        "alignment 64: %s", f ? "wrong layout" : err.msg);
  gguf_close(f);

  free(img);
  img = read_file(tpath("align.gguf"), &img_n);
  size_t e = key_end("general.alignment");
  expect_fail("alignment 48", e + 4, 48, 4, "general.alignment", "power of two");
  expect_fail("alignment 0", e + 4, 0, 4, "general.alignment", "power of two");
  expect_fail("alignment as f32", e, GGUF_F32, 4, "general.alignment", "f32");
  /* alignment 32 makes b's offset 64 still aligned, but the file is valid; 128 misaligns it */
  expect_fail("alignment 128", e + 4, 128, 4, "'b'", "alignment");

  w = gguf_writer_new();
  gguf_set_u32(w, "general.alignment", 24);
  CHECK(gguf_writer_save(w, tpath("badalign.gguf"), &err) == -1 &&
            strstr(err.msg, "general.alignment"), "writer accepted alignment 24: %s", err.msg);
  CHECK(!file_exists(tpath("badalign.gguf")) && !file_exists(tpath("badalign.gguf.tmp")),
        "bad alignment left a file");
  gguf_writer_free(w);
}

/* Split output and input (format/gguf_split.c): every tensor back with its data from its shard,
 * the metadata in the first shard only, general.alignment carried into every shard when not 32,
 * a failed streamed write leaving no file. The end-to-end tests are in test_split.sh. */
static void check_split_set(const char *prefix, uint32_t n_expect, uint32_t per_shard, size_t align,
                            const char *what) {
  q35_err err = {{0}};
  char *first = gguf_split_path(prefix, 0, n_expect);
  gguf_file *f = gguf_open(first, &err);
  CHECK(f && gguf_n_shards(f) == n_expect && f->n_tensors == NT, "%s: %s", what, f ? "wrong shard/tensor count" : err.msg);
  for (int i = 0; f && i < NT; i++) {
    const gguf_tensor *t = gguf_find_tensor(f, tensors[i].name);
    CHECK(t && t->shard == (uint32_t)i / per_shard && t->nbytes == tdesc_bytes(&tensors[i]) &&
              !memcmp(t->data, tensor_data[i], t->nbytes),
          "%s: tensor %s", what, tensors[i].name);
    const gguf_file *s = t ? gguf_shard(f, t->shard) : NULL;
    CHECK(s && (const uint8_t *)t->data == s->map + s->data_offset + t->offset, "%s: %s not in its shard", what,
          tensors[i].name);
  }
  CHECK(f && gguf_find(f, "general.architecture") && gguf_find(f, "t.arr_str"), "%s: metadata", what);
  gguf_close(f);
  gguf_file *one = gguf_open_ex(first, GGUF_OPEN_ONE_SHARD, &err);
  CHECK(one && gguf_n_shards(one) == 1 && one->n_tensors == per_shard, "%s: one shard alone: %s", what,
        one ? "wrong count" : err.msg);
  gguf_close(one);
  for (uint32_t k = 1; k < n_expect; k++) {
    char *p = gguf_split_path(prefix, k, n_expect);
    gguf_file *s = gguf_open(p, &err);
    CHECK(!s && strstr(err.msg, "open the first shard") && strstr(err.msg, first), "%s: shard %u opened alone: %s",
          what, k + 1, err.msg);
    gguf_close(s);
    s = gguf_open_ex(p, GGUF_OPEN_ONE_SHARD, &err);
    CHECK(s && !gguf_find(s, "general.architecture") && s->alignment == align && s->n_kv == 3u + (align != 32),
          "%s: shard %u: metadata beyond split.* (general.alignment %zu)", what, k + 1, s ? s->alignment : 0);
    gguf_close(s);
    free(p);
  }
  free(first);
}

static void test_split(void) {
  q35_err err = {{0}};
  char prefix[600];
  uint32_t n = 0;
  /* by tensor count, saved in one go */
  gguf_writer *w = make_writer(1);
  gguf_split_opts so = {.max_tensors = 3, .n_shards_out = &n};
  gguf_writer_set_split(w, &so);
  CHECK(gguf_writer_save(w, tpath("sp.gguf"), &err) == 0 && n == (NT + 2) / 3, "split save: %s (%u)", err.msg, n);
  gguf_writer_free(w);
  snprintf(prefix, sizeof prefix, "%s", tpath("sp"));
  CHECK(!file_exists(tpath("sp.gguf")), "split save also wrote sp.gguf");
  check_split_set(prefix, (NT + 2) / 3, 3, 32, "max_tensors 3");
  /* by size (each tensor here is <= 544 bytes padded: one per shard at 100 bytes), streamed, alignment 64 */
  w = make_writer(0);
  gguf_set_u32(w, "general.alignment", 64);
  gguf_split_opts sb = {.max_bytes = 100};
  gguf_writer_set_split(w, &sb);
  CHECK(gguf_writer_begin(w, tpath("sb"), &err) == 0, "split begin: %s", err.msg);
  for (int i = 0; i < NT; i++)
    CHECK(gguf_writer_write_tensor(w, i, tensor_data[i], &err) == 0, "split write %d: %s", i, err.msg);
  CHECK(gguf_writer_finish(w, &err) == 0, "split finish: %s", err.msg);
  gguf_writer_free(w);
  snprintf(prefix, sizeof prefix, "%s", tpath("sb"));
  check_split_set(prefix, NT, 1, 64, "max_bytes 100, alignment 64");
  /* a streamed split write that fails midway leaves nothing */
  w = make_writer(0);
  gguf_writer_set_split(w, &so);
  CHECK(gguf_writer_begin(w, tpath("sf.gguf"), &err) == 0, "begin: %s", err.msg);
  for (int i = 0; i < 5; i++) gguf_writer_write_tensor(w, i, tensor_data[i], &err);
  CHECK(gguf_writer_write_tensor(w, 7, tensor_data[7], &err) == -1, "out-of-order write accepted");
  gguf_writer_free(w);
  for (uint32_t k = 0; k < (NT + 2) / 3; k++) {
    char *p = gguf_split_path(tpath("sf"), k, (NT + 2) / 3);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(!file_exists(p) && !file_exists(tmp), "failed split write left %s", p);
    free(p);
  }
  /* split.* keys set by hand (a split file's metadata copied) are not written into an unsplit file */
  w = make_writer(1);
  gguf_set_u16(w, "split.count", 3);
  gguf_set_u16(w, "split.no", 1);
  CHECK(gguf_writer_save(w, tpath("nosplit.gguf"), &err) == 0, "save: %s", err.msg);
  gguf_writer_free(w);
  gguf_file *f = gguf_open(tpath("nosplit.gguf"), &err);
  CHECK(f && !gguf_find(f, "split.count") && !gguf_find(f, "split.no") && f->n_kv == N_META,
        "hand-set split keys written: %s", f ? "present" : err.msg);
  gguf_close(f);
  char *pre = gguf_split_prefix("/a/b-00002-of-00010.gguf", 1, 10);
  CHECK(pre && !strcmp(pre, "/a/b"), "gguf_split_prefix");
  free(pre);
  CHECK(!gguf_split_prefix("/a/b-00002-of-00010.gguf", 0, 10) && !gguf_split_prefix("-00001-of-00001.gguf", 0, 1),
        "gguf_split_prefix accepted a wrong suffix / an empty prefix");
}

/* ---- files on disk, writer failure paths ------------------------------------------------ */

static void test_files(void) {
  q35_err err = {{0}};
  gguf_file *f = gguf_open(tpath("does-not-exist.gguf"), &err);
  CHECK(!f && strstr(err.msg, "does-not-exist.gguf") && strstr(err.msg, "cannot open"),
        "missing file: %s", err.msg);
  write_bytes(tpath("empty.gguf"), "", 0);
  f = gguf_open(tpath("empty.gguf"), &err);
  CHECK(!f && strstr(err.msg, "empty.gguf"), "empty file: %s", err.msg);
  f = gguf_open(tmpdir, &err);
  CHECK(!f && strstr(err.msg, "not a regular file"), "directory: %s", err.msg);
  write_bytes(tpath("short.gguf"), img, img_n / 2);
  f = gguf_open(tpath("short.gguf"), &err);
  CHECK(!f && strstr(err.msg, "short.gguf"), "half file: %s", err.msg);
  write_bytes(tpath("short.gguf"), img, img_n - 1);
  f = gguf_open(tpath("short.gguf"), &err);
  CHECK(!f && strstr(err.msg, "output.weight") && strstr(err.msg, "past the end"),
        "file missing its last byte: %s", err.msg);
}

static void test_writer_errors(void) {
  q35_err err = {{0}};
  uint8_t d[64] = {0};
  /* invalid declarations are sticky */
  gguf_writer *w = gguf_writer_new();
  CHECK(gguf_add_tensor(w, "bad", Q35_TYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, d) == -1,
        "n_dims 5 accepted");
  CHECK(gguf_writer_save(w, tpath("bad.gguf"), &err) == -1 && strstr(err.msg, "'bad'"),
        "save after bad tensor: %s", err.msg);
  CHECK(!file_exists(tpath("bad.gguf")) && !file_exists(tpath("bad.gguf.tmp")), "left a file");
  gguf_writer_free(w);

  w = gguf_writer_new();
  CHECK(gguf_add_tensor(w, "tq1", 34, 1, (int64_t[]){256}, d) == -1, "tq1_0 accepted");
  CHECK(gguf_add_tensor(w, "q8", Q35_TYPE_Q8_0, 1, (int64_t[]){33}, d) == -1,
        "q8_0 ne[0]=33 accepted");
  CHECK(gguf_add_tensor(w, "z", Q35_TYPE_F32, 2, (int64_t[]){4, 0}, d) == -1, "ne 0 accepted");
  CHECK(gguf_add_tensor(w, "blk.0.a_name_that_is_far_too_long_for_llama_cpp_to_accept.weight",
                        Q35_TYPE_F32, 1, (int64_t[]){4}, d) == -1, "64-byte name accepted");
  gguf_writer_free(w);

  w = gguf_writer_new();
  CHECK(gguf_add_tensor(w, "x", Q35_TYPE_F32, 1, (int64_t[]){4}, d) == 0, "x");
  CHECK(gguf_add_tensor(w, "x", Q35_TYPE_F32, 1, (int64_t[]){4}, d) == -1, "duplicate accepted");
  CHECK(gguf_writer_save(w, tpath("dup.gguf"), &err) == -1 && strstr(err.msg, "duplicate"),
        "save with duplicate: %s", err.msg);
  gguf_writer_free(w);

  /* save with a tensor lacking data */
  w = gguf_writer_new();
  gguf_add_tensor(w, "nodata", Q35_TYPE_F32, 1, (int64_t[]){4}, NULL);
  CHECK(gguf_writer_save(w, tpath("nodata.gguf"), &err) == -1 && strstr(err.msg, "'nodata'"),
        "save without data: %s", err.msg);
  CHECK(!file_exists(tpath("nodata.gguf")) && !file_exists(tpath("nodata.gguf.tmp")),
        "left a file");

  /* streaming: abort removes the temp file and leaves no output */
  CHECK(gguf_writer_begin(w, tpath("s.gguf"), &err) == 0, "begin: %s", err.msg);
  CHECK(file_exists(tpath("s.gguf.tmp")) && !file_exists(tpath("s.gguf")), "tmp during write");
  gguf_writer_abort(w);
  CHECK(!file_exists(tpath("s.gguf.tmp")) && !file_exists(tpath("s.gguf")), "abort left a file");
  /* finish before every tensor was written */
  CHECK(gguf_writer_begin(w, tpath("s.gguf"), &err) == 0, "begin: %s", err.msg);
  CHECK(gguf_writer_finish(w, &err) == -1 && strstr(err.msg, "'nodata'"), "early finish: %s",
        err.msg);
  CHECK(!file_exists(tpath("s.gguf.tmp")) && !file_exists(tpath("s.gguf")),
        "early finish left a file");
  /* out of order */
  CHECK(gguf_writer_begin(w, tpath("s.gguf"), &err) == 0, "begin: %s", err.msg);
  CHECK(gguf_writer_write_tensor(w, 1, d, &err) == -1 && strstr(err.msg, "order"),
        "out of order: %s", err.msg);
  CHECK(!file_exists(tpath("s.gguf.tmp")), "out-of-order left a file");
  CHECK(gguf_writer_write_tensor(w, 0, d, &err) == -1, "write without begin");
  /* free during a write removes the temp file */
  CHECK(gguf_writer_begin(w, tpath("s.gguf"), &err) == 0, "begin: %s", err.msg);
  gguf_writer_free(w);
  CHECK(!file_exists(tpath("s.gguf.tmp")), "free left a temp file");

  /* the rename fails (the destination is a directory): error, no temp file left */
  w = gguf_writer_new();
  mkdir(tpath("isdir.gguf"), 0755);
  CHECK(gguf_writer_save(w, tpath("isdir.gguf"), &err) == -1 && strstr(err.msg, "rename"),
        "rename onto a directory: %s", err.msg);
  CHECK(!file_exists(tpath("isdir.gguf.tmp")), "failed rename left the temp file");
  gguf_writer_free(w);

  /* unwritable destination */
  w = gguf_writer_new();
  CHECK(gguf_writer_save(w, tpath("no/such/dir/x.gguf"), &err) == -1 &&
            strstr(err.msg, "no/such/dir/x.gguf.tmp"), "bad dir: %s", err.msg);
  /* a metadata-only file is valid */
  gguf_set_str(w, "general.name", "meta only");
  CHECK(gguf_writer_save(w, tpath("meta.gguf"), &err) == 0, "meta only: %s", err.msg);
  gguf_writer_free(w);
  gguf_file *f = gguf_open(tpath("meta.gguf"), &err);
  CHECK(f && f->n_tensors == 0 && f->n_kv == 1, "meta only read: %s", err.msg);
  gguf_close(f);
}

/* Carry every pair of an open file over to a new writer (gguf_set_kv_from). */
static void test_copy_kv(void) {
  q35_err err = {{0}};
  gguf_file *src = gguf_open(tpath("rt.gguf"), &err);
  CHECK(src, "open rt.gguf: %s", err.msg);
  if (!src) return;
  gguf_writer *w = gguf_writer_new();
  for (uint64_t i = 0; i < src->n_kv; i++) gguf_set_kv_from(w, &src->kv[i]);
  for (int i = 0; i < NT; i++)
    gguf_add_tensor(w, tensors[i].name, tensors[i].type, tensors[i].n_dims, tensors[i].ne,
                    src->tensors[i].data);
  CHECK(gguf_writer_save(w, tpath("copy.gguf"), &err) == 0, "save copy: %s", err.msg);
  gguf_writer_free(w);
  gguf_close(src);
  size_t a, b;
  uint8_t *x = read_file(tpath("rt.gguf"), &a), *y = read_file(tpath("copy.gguf"), &b);
  CHECK(x && y && a == b && memcmp(x, y, a) == 0, "copied file differs from the original");
  free(x);
  free(y);
}

/* A vocabulary-sized string array. */
static void test_big_vocab(void) {
  enum { NV = 248320 };
  char **toks = malloc(NV * sizeof *toks);
  char *pool = malloc(NV * 16);
  for (int i = 0; i < NV; i++) {
    toks[i] = pool + 16 * i;
    snprintf(toks[i], 16, "tok%d", i);
  }
  gguf_writer *w = gguf_writer_new();
  gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NV);
  q35_err err = {{0}};
  CHECK(gguf_writer_save(w, tpath("vocab.gguf"), &err) == 0, "save vocab: %s", err.msg);
  gguf_writer_free(w);
  gguf_file *f = gguf_open(tpath("vocab.gguf"), &err);
  CHECK(f, "open vocab: %s", err.msg);
  if (f) {
    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.tokens");
    CHECK(kv && kv->arr_n == NV, "vocab size");
    int bad = 0;
    for (int i = 0; kv && i < NV; i++) bad += !gguf_str_eq(kv->arr_str[i], toks[i]);
    CHECK(bad == 0, "%d vocab entries differ", bad);
    gguf_close(f);
  }
  free(pool);
  free(toks);
}

/* ---- cross-check with ggml's gguf (llama.cpp peer), when installed ------------------------ */

struct ggml_gguf_init_params {
  bool no_alloc;
  void **ctx;
};

static void test_peer(void) {
  const char *src = getenv("Q35_SRC");
  char lib[1024];
  snprintf(lib, sizeof lib, "%s/.peer/llama/bins/linux-x64/libggml-base.so", src ? src : ".");
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "note: llama.cpp peer not found (%s); skipping the ggml cross-check\n", lib);
    return;
  }
#define SYM(ret, name, ...)                          \
  ret(*name)(__VA_ARGS__);                           \
  *(void **)&name = dlsym(h, #name);                 \
  if (!name) {                                       \
    CHECK(0, "peer lacks symbol %s", #name);         \
    dlclose(h);                                      \
    return;                                          \
  }
  SYM(void *, gguf_init_from_file, const char *, struct ggml_gguf_init_params)
  SYM(void *, gguf_init_empty, void)
  SYM(void, gguf_free, void *)
  SYM(int64_t, gguf_get_n_kv, const void *)
  SYM(int64_t, gguf_get_n_tensors, const void *)
  SYM(int64_t, gguf_find_key, const void *, const char *)
  SYM(const char *, gguf_get_key, const void *, int64_t)
  SYM(int, gguf_get_kv_type, const void *, int64_t)
  SYM(int, gguf_get_arr_type, const void *, int64_t)
  SYM(size_t, gguf_get_arr_n, const void *, int64_t)
  SYM(const char *, gguf_get_arr_str, const void *, int64_t, size_t)
  SYM(const void *, gguf_get_arr_data, const void *, int64_t)
  SYM(uint32_t, gguf_get_val_u32, const void *, int64_t)
  SYM(int64_t, gguf_get_val_i64, const void *, int64_t)
  SYM(double, gguf_get_val_f64, const void *, int64_t)
  SYM(const char *, gguf_get_val_str, const void *, int64_t)
  SYM(int64_t, gguf_find_tensor, const void *, const char *)
  SYM(size_t, gguf_get_tensor_offset, const void *, int64_t)
  SYM(int, gguf_get_tensor_type, const void *, int64_t)
  SYM(size_t, gguf_get_tensor_size, const void *, int64_t)
  SYM(size_t, gguf_get_data_offset, const void *)
  SYM(void, gguf_set_val_u32, void *, const char *, uint32_t)
  SYM(void, gguf_set_val_i8, void *, const char *, int8_t)
  SYM(void, gguf_set_val_f64, void *, const char *, double)
  SYM(void, gguf_set_val_bool, void *, const char *, bool)
  SYM(void, gguf_set_val_str, void *, const char *, const char *)
  SYM(void, gguf_set_arr_str, void *, const char *, const char **, size_t)
  SYM(void, gguf_set_arr_data, void *, const char *, int, const void *, size_t)
  SYM(bool, gguf_write_to_file, const void *, const char *, bool)

  /* ggml reads our file */
  void *g = gguf_init_from_file(tpath("rt.gguf"), (struct ggml_gguf_init_params){true, NULL});
  CHECK(g, "ggml's gguf could not read our file");
  gguf_file *f = NULL;
  q35_err err = {{0}};
  if (g) {
    f = gguf_open(tpath("rt.gguf"), &err);
    CHECK(gguf_get_n_kv(g) == N_META && gguf_get_n_tensors(g) == NT, "ggml counts %lld %lld",
          (long long)gguf_get_n_kv(g), (long long)gguf_get_n_tensors(g));
    CHECK(f && gguf_get_data_offset(g) == f->data_offset, "ggml data offset %zu",
          gguf_get_data_offset(g));
    for (int64_t i = 0; i < gguf_get_n_kv(g) && i < N_META; i++)
      CHECK(f && gguf_str_eq(f->kv[i].key, gguf_get_key(g, i)) &&
                gguf_get_kv_type(g, i) == f->kv[i].type, "ggml key %lld '%s'", (long long)i,
            gguf_get_key(g, i));
    int64_t k = gguf_find_key(g, "t.u32");
    CHECK(k >= 0 && gguf_get_val_u32(g, k) == 4000000000u, "ggml t.u32");
    k = gguf_find_key(g, "t.i64");
    CHECK(k >= 0 && gguf_get_val_i64(g, k) == -4611686018427387904ll, "ggml t.i64");
    k = gguf_find_key(g, "t.f64");
    CHECK(k >= 0 && gguf_get_val_f64(g, k) == 2.718281828459045, "ggml t.f64");
    k = gguf_find_key(g, "t.str");
    CHECK(k >= 0 && !strcmp(gguf_get_val_str(g, k), "h\xc3\xa9llo world"), "ggml t.str");
    k = gguf_find_key(g, "t.arr_str");
    CHECK(k >= 0 && gguf_get_arr_type(g, k) == GGUF_STRING && gguf_get_arr_n(g, k) == 5,
          "ggml t.arr_str");
    for (size_t i = 0; k >= 0 && i < 5; i++)
      CHECK(!strcmp(gguf_get_arr_str(g, k, i), strs[i]), "ggml t.arr_str[%zu]", i);
    k = gguf_find_key(g, "t.arr_i32");
    CHECK(k >= 0 && gguf_get_arr_n(g, k) == 5 &&
              !memcmp(gguf_get_arr_data(g, k), ai32, sizeof ai32), "ggml t.arr_i32");
    for (int i = 0; i < NT; i++) {
      int64_t t = gguf_find_tensor(g, tensors[i].name);
      CHECK(t >= 0 && f && gguf_get_tensor_offset(g, t) == f->tensors[i].offset &&
                gguf_get_tensor_type(g, t) == tensors[i].type &&
                gguf_get_tensor_size(g, t) == tdesc_bytes(&tensors[i]),
            "ggml tensor %s", tensors[i].name);
    }
    gguf_close(f);
    gguf_free(g);
  }

  /* we read ggml's file */
  g = gguf_init_empty();
  gguf_set_val_u32(g, "p.u32", 123456);
  gguf_set_val_i8(g, "p.i8", -5);
  gguf_set_val_f64(g, "p.f64", -1.5e300);
  gguf_set_val_bool(g, "p.bool", true);
  gguf_set_val_str(g, "p.str", "ggml");
  const char *ss[] = {"<|im_start|>", "", "Ġhello"};
  gguf_set_arr_str(g, "p.arr_str", ss, 3);
  float fa[] = {1.0f, 2.5f};
  gguf_set_arr_data(g, "p.arr_f32", GGUF_F32, fa, 2);
  CHECK(gguf_write_to_file(g, tpath("ggml.gguf"), false), "ggml write failed");
  gguf_free(g);
  f = gguf_open(tpath("ggml.gguf"), &err);
  CHECK(f, "reading ggml's file: %s", err.msg);
  if (f) {
    uint32_t u = 0;
    float fl = 0;
    int b = 0;
    gguf_str s = {0};
    CHECK(f->n_kv == 7 && f->n_tensors == 0, "ggml file counts");
    CHECK(gguf_get_u32(f, "p.u32", &u, &err) == 0 && u == 123456, "p.u32");
    CHECK(gguf_find(f, "p.i8") && gguf_find(f, "p.i8")->v.i == -5, "p.i8");
    CHECK(gguf_find(f, "p.f64") && gguf_find(f, "p.f64")->v.f == -1.5e300, "p.f64");
    CHECK(gguf_get_bool(f, "p.bool", &b, &err) == 0 && b == 1, "p.bool");
    CHECK(gguf_get_str(f, "p.str", &s, &err) == 0 && gguf_str_eq(s, "ggml"), "p.str");
    const gguf_kv *kv = gguf_find(f, "p.arr_str");
    CHECK(kv && kv->arr_n == 3 && gguf_str_eq(kv->arr_str[0], ss[0]) &&
              gguf_str_eq(kv->arr_str[1], "") && gguf_str_eq(kv->arr_str[2], ss[2]), "p.arr_str");
    kv = gguf_find(f, "p.arr_f32");
    CHECK(kv && kv->arr_n == 2 && gguf_arr_f32(kv, 1) == 2.5f, "p.arr_f32");
    (void)fl;
    gguf_close(f);
  }
  dlclose(h);
}

/* The name table: spellings unique and well formed, names formatted, every name within
 * llama.cpp's limit, and the test-model writer's files spelled from it. */
static int count_of(const char *s, const char *sub) {
  int n = 0;
  for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
  return n;
}

static void test_names(void) {
  for (int i = 0; i < Q35_KEY_COUNT; i++) {
    const char *k = q35_gguf_key_spelling((q35_gguf_key_id)i);
    CHECK(k && *k, "key %d has no spelling", i);
    if (!k) continue;
    for (int j = 0; j < i; j++) CHECK(strcmp(k, q35_gguf_key_spelling((q35_gguf_key_id)j)), "key '%s' twice", k);
    if (q35_gguf_key_is_arch((q35_gguf_key_id)i))
      CHECK(!strncmp(k, "%s.", 3) && count_of(k, "%") == 1, "architecture key '%s'", k);
    else
      CHECK((!strncmp(k, "general.", 8) || !strncmp(k, "tokenizer.", 10) || !strncmp(k, "split.", 6)) &&
                !strchr(k, '%'), "key '%s'", k);
  }
  for (int i = 0; i < Q35_TENSOR_COUNT; i++) {
    const char *t = q35_gguf_tensor_spelling((q35_gguf_tensor_id)i);
    CHECK(t && *t, "tensor %d has no spelling", i);
    if (!t) continue;
    for (int j = 0; j < i; j++)
      CHECK(strcmp(t, q35_gguf_tensor_spelling((q35_gguf_tensor_id)j)), "tensor '%s' twice", t);
    if (q35_gguf_tensor_is_layer((q35_gguf_tensor_id)i))
      CHECK(!strncmp(t, "blk.%d.", 7) && count_of(t, "%") == 1, "layer tensor '%s'", t);
    else
      CHECK(!strchr(t, '%'), "model tensor '%s'", t);
    CHECK(strlen(q35_gguf_tensor((q35_gguf_tensor_id)i, 99999).s) < 64, "'%s' at layer 99999 exceeds 63 bytes", t);
  }
  CHECK(!q35_gguf_key_spelling(Q35_KEY_COUNT) && !q35_gguf_tensor_spelling(Q35_TENSOR_COUNT), "ids out of range");
  CHECK(!strcmp(q35_gguf_key(Q35_KEY_BLOCK_COUNT, "qwen35moe").s, "qwen35moe.block_count"), "arch key");
  CHECK(!strcmp(q35_gguf_key(Q35_KEY_RMS_EPS, Q35_GGUF_ARCH_DENSE).s, "qwen35.attention.layer_norm_rms_epsilon"),
        "arch key (dense)");
  CHECK(!strcmp(q35_gguf_key(Q35_KEY_GENERAL_ALIGNMENT, "qwen35").s, "general.alignment"), "general key");
  CHECK(!strcmp(q35_gguf_key(Q35_KEY_TOKENIZER_TOKENS, NULL).s, "tokenizer.ggml.tokens"), "tokenizer key");
  CHECK(!strcmp(q35_gguf_tensor(Q35_TENSOR_ATTN_Q, 3).s, "blk.3.attn_q.weight"), "layer tensor");
  CHECK(!strcmp(q35_gguf_tensor(Q35_TENSOR_SSM_A, 0).s, "blk.0.ssm_a"), "ssm_a");
  CHECK(!strcmp(q35_gguf_tensor(Q35_TENSOR_TOKEN_EMBD, 7).s, "token_embd.weight"), "model tensor");
  CHECK(q35_gguf_file_type(Q35_TYPE_Q4_K, Q35_TYPE_Q6_K) == Q35_FTYPE_MOSTLY_Q4_K_M &&
            q35_gguf_file_type(Q35_TYPE_Q4_K, Q35_TYPE_Q4_K) == Q35_FTYPE_MOSTLY_Q4_K_S &&
            q35_gguf_file_type(Q35_TYPE_F32, -1) == 0 && q35_gguf_file_type(Q35_TYPE_BF16, -1) == 32,
        "general.file_type values");

  /* every tensor and key of tiny models is one of the table's names */
  for (int variant = 0; variant < 2; variant++) {
    q35_tiny_opts o = q35_tiny_default();
    o.n_layer = 4;
    o.n_embd = 64;
    o.n_vocab = 512;
    if (variant) o.moe = 0, o.tied = 1, o.interval = 2;
    else o.merged_gate_up = 0;
    q35_err err = {{0}};
    CHECK(q35_tiny_write(&o, tpath("names.gguf"), &err) == 0, "tiny model: %s", err.msg);
    gguf_file *f = gguf_open(tpath("names.gguf"), &err);
    CHECK(f, "open tiny model: %s", err.msg);
    if (!f) continue;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
      int found = 0;
      for (int id = 0; id < Q35_TENSOR_COUNT && !found; id++)
        for (int il = 0; il < o.n_layer && !found; il++)
          found = gguf_str_eq(f->tensors[i].name, q35_gguf_tensor((q35_gguf_tensor_id)id, il).s);
      CHECK(found, "tiny model tensor '%.*s' is not in the name table", (int)f->tensors[i].name.len,
            f->tensors[i].name.ptr);
    }
    const char *arch = o.moe ? Q35_GGUF_ARCH_MOE : Q35_GGUF_ARCH_DENSE;
    for (uint64_t i = 0; i < f->n_kv; i++) {
      int found = 0;
      for (int id = 0; id < Q35_KEY_COUNT && !found; id++)
        found = gguf_str_eq(f->kv[i].key, q35_gguf_key((q35_gguf_key_id)id, arch).s);
      CHECK(found, "tiny model key '%.*s' is not in the name table", (int)f->kv[i].key.len, f->kv[i].key.ptr);
    }
    gguf_close(f);
  }
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/q35_test_gguf_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  for (int i = 0; i < NT; i++) {
    tensor_data[i] = malloc(tdesc_bytes(&tensors[i]));
    fill(tensor_data[i], tdesc_bytes(&tensors[i]), (uint32_t)i + 1);
  }

  /* write in one go, and again streamed; both must be byte-identical */
  q35_err err = {{0}};
  gguf_writer *w = make_writer(1);
  CHECK(gguf_writer_save(w, tpath("rt.gguf"), &err) == 0, "save: %s", err.msg);
  CHECK(!file_exists(tpath("rt.gguf.tmp")), "temp file left after save");
  gguf_writer_free(w);
  w = make_writer(0);
  CHECK(gguf_writer_begin(w, tpath("stream.gguf"), &err) == 0, "begin: %s", err.msg);
  for (int i = 0; i < NT; i++)
    CHECK(gguf_writer_write_tensor(w, i, tensor_data[i], &err) == 0, "write %d: %s", i, err.msg);
  CHECK(gguf_writer_finish(w, &err) == 0, "finish: %s", err.msg);
  CHECK(!file_exists(tpath("stream.gguf.tmp")), "temp file left after finish");
  gguf_writer_free(w);

  img = read_file(tpath("rt.gguf"), &img_n);
  size_t sn = 0;
  uint8_t *simg = read_file(tpath("stream.gguf"), &sn);
  CHECK(img && simg && sn == img_n && !memcmp(img, simg, sn), "streamed file differs");
  free(simg);
  if (!img) return 1;

  gguf_file *f = gguf_open(tpath("rt.gguf"), &err);
  CHECK(f, "open: %s", err.msg);
  if (f) {
    check_contents(f, "gguf_open");
    gguf_close(f);
  }
  f = gguf_open_mem(img, img_n, "rt-mem", &err);
  CHECK(f, "open_mem: %s", err.msg);
  if (f) {
    CHECK(!f->owns_map, "open_mem must not own the buffer");
    check_contents(f, "gguf_open_mem");
    gguf_close(f);
  }

  test_spec_bytes();
  test_truncation();
  test_corruption();
  test_files();
  test_writer_errors();
  test_copy_kv();
  test_big_vocab();
  test_peer();
  test_split();
  test_alignment(); /* replaces img */
  test_names();

  for (int i = 0; i < NT; i++) free(tensor_data[i]);
  free(img);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (getenv("Q35_KEEP_TMP")) /* keeps the files (e.g. to refresh fuzz/corpus/gguf) */
    fprintf(stderr, "note: files kept in %s\n", tmpdir);
  else if (system(cmd) != 0)
    fprintf(stderr, "note: could not remove %s\n", tmpdir);
  return check_done("test_gguf");
}
