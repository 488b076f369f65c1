/*
 * ggml_requant - rewrite a GGUF with tensors requantized by ggml's own quantizer (the prebuilt
 * libggml-base.so in .peer, opened with dlopen): the files the parity tests and the recipe
 * tables compare q35 against are ones whose blocks llama.cpp made.
 *
 *   ggml_requant IN.gguf OUT.gguf [REGEX=TYPE ...] [--tensor-type REGEX=TYPE] [--imatrix F.gguf]
 *                [--default-imatrix ones|synthetic] [-t N] [-v]
 *
 * Each tensor is matched against the rules in order; the first whose POSIX extended regular
 * expression occurs in the tensor name (a search, like llama-quantize's --tensor-type) gives
 * its new type (a GGML type name in either case; `keep` leaves it as it is). A matched tensor
 * is dequantized to f32 with ggml's dequantize_row_* / fp16 / bf16 row converters (when it is
 * not f32 already) and quantized with ggml_quantize_chunk, one 2-D matrix (an expert of a 3-D
 * tensor) at a time. Unmatched tensors and every metadata pair are copied as they are.
 *
 * Importance weights: with --imatrix (llama.cpp's imatrix GGUF: NAME.in_sum2 [n_per_row,
 * n_mat] and NAME.counts [1, n_mat], weights in_sum2 / counts per matrix, an imatrix with one
 * matrix broadcast over a tensor's experts, a zero count giving weights 1) every quantized
 * tensor found there gets its weights, as llama-quantize passes them. A tensor it lacks, or
 * any tensor without --imatrix, gets none unless ggml_quantize_requires_imatrix says the type
 * needs them; then it gets the --default-imatrix vector: `ones` (the default: every column
 * weighted alike) or `synthetic` (a deterministic positive vector, 0.25 .. 4 on a log scale
 * from a hash of the column, to exercise the weighted search paths unevenly).
 *
 * q35's GGUF reader and writer are used in their layout-only mode (any type whose block layout
 * is known, computed by q35 or not). The output is written to OUT.tmp and renamed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/tensor_types.h"

#ifndef LLAMA_PEER_BACKEND_DIR
#error "LLAMA_PEER_BACKEND_DIR must name the directory holding libggml-base.so"
#endif

typedef size_t (*quantize_chunk_fn)(int, const float *, void *, int64_t, int64_t, int64_t,
                                    const float *);
typedef bool (*requires_imatrix_fn)(int);
typedef void (*to_float_fn)(const void *, float *, int64_t);
typedef const struct { const char *type_name; } *(*type_traits_fn)(int);

static struct {
  quantize_chunk_fn quantize_chunk;
  requires_imatrix_fn requires_imatrix;
  type_traits_fn type_traits;
  void *lib;
} gg;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ggml_requant: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void usage(void) {
  fprintf(stderr,
          "usage: ggml_requant IN.gguf OUT.gguf [REGEX=TYPE ...] [--tensor-type REGEX=TYPE]\n"
          "                    [--imatrix F.gguf] [--default-imatrix ones|synthetic] [-t N] [-v]\n"
          "  the first rule whose regex occurs in a tensor's name gives its type (or 'keep');\n"
          "  other tensors are copied as they are\n");
  exit(2);
}

static void *sym(const char *name) {
  void *p = dlsym(gg.lib, name);
  if (!p) die("symbol %s not found in %s/libggml-base.so", name, LLAMA_PEER_BACKEND_DIR);
  return p;
}

static void load_ggml(void) {
  gg.lib = dlopen(LLAMA_PEER_BACKEND_DIR "/libggml-base.so", RTLD_NOW | RTLD_LOCAL);
  if (!gg.lib) die("cannot open the peer library: %s", dlerror());
  gg.quantize_chunk = (quantize_chunk_fn)sym("ggml_quantize_chunk");
  gg.requires_imatrix = (requires_imatrix_fn)sym("ggml_quantize_requires_imatrix");
  gg.type_traits = (type_traits_fn)sym("ggml_get_type_traits");
}

/* ggml and q35 must number the type alike (checked by name: the ids are the file format's). */
static void check_type_id(int type) {
  const char *ours = q35_type_name(type), *theirs = gg.type_traits(type)->type_name;
  if (!ours || !theirs || strcasecmp(ours, theirs))
    die("type id %d is %s in q35 but %s in ggml", type, ours ? ours : "?", theirs ? theirs : "?");
}

static to_float_fn dequantizer(int type) {
  if (type == Q35_TYPE_F16) return (to_float_fn)sym("ggml_fp16_to_fp32_row");
  if (type == Q35_TYPE_BF16) return (to_float_fn)sym("ggml_bf16_to_fp32_row");
  char name[64];
  snprintf(name, sizeof name, "dequantize_row_%s", q35_type_name(type));
  return (to_float_fn)sym(name);
}

/* ---- rules ---- */
typedef struct {
  regex_t re;
  char *text;
  int type; /* -1 = keep */
} rule;

static void parse_rule(rule *r, const char *arg) {
  const char *eq = strrchr(arg, '=');
  if (!eq || eq == arg || !eq[1]) die("rule '%s': expected REGEX=TYPE", arg);
  r->text = strndup(arg, (size_t)(eq - arg));
  if (!r->text) die("out of memory");
  int rc = regcomp(&r->re, r->text, REG_EXTENDED | REG_NOSUB);
  if (rc) {
    char msg[256];
    regerror(rc, &r->re, msg, sizeof msg);
    die("rule '%s': bad regular expression: %s", arg, msg);
  }
  if (!strcasecmp(eq + 1, "keep")) {
    r->type = -1;
    return;
  }
  r->type = q35_type_from_name(eq + 1);
  if (r->type < 0 || !q35_type_layout_known(r->type) || r->type == Q35_TYPE_Q8_K)
    die("rule '%s': unknown or unsupported target type '%s'", arg, eq + 1);
}

/* ---- importance weights ---- */
static const gguf_file *imat;

/* Weights for matrix m of tensor `name` (n per row, n_mat matrices), or NULL if the imatrix
 * has no entry. Dies on an entry of the wrong shape. */
static float *imatrix_for(const char *name, int64_t n, int64_t n_mat, int64_t m, float *buf) {
  if (!imat) return NULL;
  char key[160];
  snprintf(key, sizeof key, "%s.in_sum2", name);
  const gguf_tensor *s2 = gguf_find_tensor(imat, key);
  snprintf(key, sizeof key, "%s.counts", name);
  const gguf_tensor *ct = gguf_find_tensor(imat, key);
  if (!s2 && !ct) return NULL;
  if (!s2 || !ct || s2->type != Q35_TYPE_F32 || ct->type != Q35_TYPE_F32)
    die("imatrix %s: entry '%s' needs f32 in_sum2 and counts", imat->path, name);
  int64_t nm = s2->ne[1] * s2->ne[2] * s2->ne[3];
  if (s2->ne[0] != n || ct->ne[0] != 1 || ct->ne[1] * ct->ne[2] * ct->ne[3] != nm ||
      (nm != 1 && nm != n_mat))
    die("imatrix %s: entry '%s' has shape [%lld, %lld], the tensor needs [%lld, %lld]", imat->path,
        name, (long long)s2->ne[0], (long long)nm, (long long)n, (long long)n_mat);
  int64_t mm = nm == 1 ? 0 : m;
  const float *v = (const float *)s2->data + mm * n;
  float c;
  memcpy(&c, (const float *)ct->data + mm, 4);
  for (int64_t j = 0; j < n; j++) {
    float x;
    memcpy(&x, v + j, 4);
    buf[j] = c > 0 ? x / c : 1.0f;
  }
  return buf;
}

static int default_synthetic;

static void default_imatrix(float *buf, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    if (!default_synthetic) {
      buf[j] = 1.0f;
      continue;
    }
    uint64_t h = (uint64_t)j * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    double u = (double)(h >> 11) * 0x1.0p-53; /* [0, 1) */
    buf[j] = (float)exp2(4.0 * u - 2.0);     /* 0.25 .. 4 */
  }
}

/* ---- quantizing one matrix on several threads ---- */
typedef struct {
  int type;
  const float *src;
  uint8_t *dst;
  int64_t row0, rows, n;
  const float *w;
  size_t row_bytes, done;
} job;

static void *run_job(void *p) {
  job *j = p;
  j->done = gg.quantize_chunk(j->type, j->src, j->dst, j->row0 * j->n, j->rows, j->n, j->w);
  return NULL;
}

static void quantize_matrix(int type, const float *src, uint8_t *dst, int64_t rows, int64_t n,
                            const float *w, int threads) {
  size_t row_bytes = q35_row_size(type, n);
  if (threads > rows) threads = (int)rows;
  job jobs[64];
  pthread_t th[64];
  int64_t per = (rows + threads - 1) / threads, r0 = 0;
  int nj = 0;
  for (; r0 < rows; nj++, r0 += per) {
    int64_t k = rows - r0 < per ? rows - r0 : per;
    /* ggml_quantize_chunk takes `start` in elements of src (a row boundary) and writes the
     * rows from there at their place in dst: both are the matrix's base */
    jobs[nj] = (job){type, src, dst, r0, k, n, w, row_bytes, 0};
  }
  for (int i = 1; i < nj; i++)
    if (pthread_create(&th[i], NULL, run_job, &jobs[i])) die("cannot start a thread");
  run_job(&jobs[0]);
  for (int i = 1; i < nj; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < nj; i++)
    if (jobs[i].done != (size_t)jobs[i].rows * row_bytes)
      die("ggml_quantize_chunk(%s) wrote %zu bytes, expected %zu", q35_type_name(type),
          jobs[i].done, (size_t)jobs[i].rows * row_bytes);
}

int main(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *imat_path = NULL;
  rule rules[64];
  int n_rules = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), verbose = 0;
  if (threads < 1) threads = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
    if (!strcmp(a, "--imatrix")) {
      if (++i >= argc) usage();
      imat_path = argv[i];
    } else if (!strcmp(a, "--default-imatrix") || !strcmp(a, "--default_imatrix")) {
      if (++i >= argc) usage();
      if (!strcmp(argv[i], "ones")) default_synthetic = 0;
      else if (!strcmp(argv[i], "synthetic")) default_synthetic = 1;
      else die("--default-imatrix: expected ones or synthetic, got '%s'", argv[i]);
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      if (++i >= argc) usage();
      threads = atoi(argv[i]);
      if (threads < 1 || threads > 64) die("-t: expected 1..64");
    } else if (!strcmp(a, "-v")) {
      verbose = 1;
    } else if (!strcmp(a, "--tensor-type") || !strcmp(a, "--tensor_type")) {
      if (++i >= argc) usage();
      if (n_rules == 64) die("too many rules");
      parse_rule(&rules[n_rules++], argv[i]);
    } else if (a[0] == '-' && a[1]) {
      die("unknown option '%s'", a);
    } else if (!in) {
      in = a;
    } else if (!out) {
      out = a;
    } else {
      if (n_rules == 64) die("too many rules");
      parse_rule(&rules[n_rules++], a);
    }
  }
  if (!in || !out) usage();
  load_ggml();

  q35_err err = {0};
  gguf_file *f = gguf_open_ex(in, GGUF_OPEN_ANY_LAYOUT, &err);
  if (!f) die("%s", err.msg);
  gguf_file *im = NULL;
  if (imat_path) {
    im = gguf_open_ex(imat_path, GGUF_OPEN_ANY_LAYOUT, &err);
    if (!im) die("%s", err.msg);
    imat = im;
  }

  gguf_writer *w = gguf_writer_new();
  if (!w) die("out of memory");
  gguf_writer_allow_any_layout(w);
  for (uint64_t i = 0; i < f->n_kv; i++) gguf_set_kv_from(w, &f->kv[i]);
  int *target = calloc((size_t)f->n_tensors + 1, sizeof *target);
  if (!target) die("out of memory");
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    const gguf_tensor *t = &f->tensors[i];
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
    target[i] = t->type;
    for (int r = 0; r < n_rules; r++)
      if (!regexec(&rules[r].re, name, 0, NULL, 0)) {
        if (rules[r].type >= 0) target[i] = rules[r].type;
        break;
      }
    if (target[i] != t->type) {
      check_type_id(t->type);
      check_type_id(target[i]);
      if (t->ne[0] % q35_type_block(target[i]))
        die("%s: tensor '%s' has rows of %lld, not a multiple of the %s block size %d", in, name,
            (long long)t->ne[0], q35_type_name(target[i]), q35_type_block(target[i]));
    }
    if (gguf_add_tensor(w, name, target[i], t->n_dims, t->ne, NULL) < 0) break;
  }
  if (gguf_writer_begin(w, out, &err)) die("%s", err.msg);

  size_t n_req = 0;
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    const gguf_tensor *t = &f->tensors[i];
    if (target[i] == t->type) {
      if (gguf_writer_write_tensor(w, (int)i, t->data, &err)) die("%s", err.msg);
      continue;
    }
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
    int64_t n = t->ne[0], rows = t->ne[1], n_mat = t->ne[2] * t->ne[3];
    size_t src_row = q35_row_size(t->type, n), dst_row = q35_row_size(target[i], n);
    float *mat = malloc((size_t)(n * rows) * sizeof *mat), *wbuf = malloc((size_t)n * sizeof *wbuf);
    uint8_t *dst = malloc(dst_row * (size_t)(rows * n_mat));
    if (!mat || !wbuf || !dst) die("out of memory for tensor '%s'", name);
    to_float_fn deq = t->type == Q35_TYPE_F32 ? NULL : dequantizer(t->type);
    int needs = gg.requires_imatrix(target[i]), used_file = 0;
    for (int64_t m = 0; m < n_mat; m++) {
      const uint8_t *s = (const uint8_t *)t->data + (size_t)(m * rows) * src_row;
      if (deq) deq(s, mat, n * rows);
      else memcpy(mat, s, (size_t)(n * rows) * sizeof *mat);
      const float *wv = imatrix_for(name, n, n_mat, m, wbuf);
      if (wv) used_file = 1;
      else if (needs) default_imatrix(wbuf, n), wv = wbuf;
      quantize_matrix(target[i], mat, dst + (size_t)(m * rows) * dst_row, rows, n, wv, threads);
    }
    if (verbose)
      fprintf(stderr, "ggml_requant: %s %s -> %s%s\n", name, q35_type_name(t->type),
              q35_type_name(target[i]),
              used_file ? " (imatrix)" : needs ? (default_synthetic ? " (synthetic weights)"
                                                                    : " (weights 1)") : "");
    if (gguf_writer_write_tensor(w, (int)i, dst, &err)) die("%s", err.msg);
    free(mat);
    free(wbuf);
    free(dst);
    n_req++;
  }
  if (gguf_writer_finish(w, &err)) die("%s", err.msg);
  fprintf(stderr, "ggml_requant: %s: %zu of %llu tensors requantized by ggml\n", out, n_req,
          (unsigned long long)f->n_tensors);
  gguf_writer_free(w);
  free(target);
  for (int r = 0; r < n_rules; r++) {
    regfree(&rules[r].re);
    free(rules[r].text);
  }
  gguf_close(im);
  gguf_close(f);
  return 0;
}
