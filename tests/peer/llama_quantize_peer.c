/*
 * llama_quantize_peer - llama.cpp's own quantizer (llama_model_quantize of the prebuilt libllama,
 * the engine behind llama-quantize) on one file, so tests can compare q35's export recipes
 * (q35 export --qtype) with the per-tensor types llama.cpp picks for the same model.
 *
 *   llama_quantize_peer IN.gguf OUT.gguf FTYPE [--imatrix F.gguf] [-t N] [--dry-run]
 *
 * --dry-run: llama_model_quantize's dry run (the types chosen, nothing quantized or written); the
 * tensors' names and the types they get are taken from its log lines ("[ i/ n] NAME - [shape],
 * type = T, size = ... (NEW)" when converted, "... size = ..." when kept) and printed on stdout,
 * one "NAME TYPE" line each (the output of q35 export --dry-run).
 *
 * FTYPE is a llama_ftype number (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15, ...). With --imatrix, the
 * imatrix GGUF (NAME.in_sum2 [n_per_row, n_mat], NAME.counts [1, n_mat]) is read with ggml's
 * own GGUF reader (libggml-base: gguf_init_from_file, not q35's) and handed over as
 * llama_model_imatrix_data entries NAME -> in_sum2 / counts per matrix (a zero count gives
 * weights 1), as llama-quantize's loader prepares them.
 *
 * llama_model_quantize_params is declared here as llama.h of ggml-org/llama.cpp declares it
 * around the peer's commit 0ad4a86 (56 bytes on x86-64); the layout is checked at run time
 * against llama_model_quantize_default_params(): the bytes it writes and their defaults.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct llama_model_imatrix_data {
  const char *name;
  const float *data;
  size_t size;
};

typedef struct llama_model_quantize_params {
  int32_t nthread;
  int32_t ftype;                /* enum llama_ftype */
  int32_t output_tensor_type;   /* enum ggml_type, GGML_TYPE_COUNT: the recipe's */
  int32_t token_embedding_type; /* the same */
  bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
  const struct llama_model_imatrix_data *imatrix;
  const void *kv_overrides;
  const void *tt_overrides;
  const int32_t *prune_layers;
} llama_model_quantize_params;

_Static_assert(sizeof(llama_model_quantize_params) == 56, "llama_model_quantize_params layout");
_Static_assert(offsetof(llama_model_quantize_params, imatrix) == 24, "imatrix offset");
_Static_assert(sizeof(struct llama_model_imatrix_data) == 24, "llama_model_imatrix_data layout");

/* a buffer wider than the struct, so the bytes the library writes can be seen */
typedef struct {
  unsigned char b[128];
} wide_params;

wide_params llama_model_quantize_default_params(void);
uint32_t llama_model_quantize(const char *fname_inp, const char *fname_out, const llama_model_quantize_params *params);
void llama_backend_init(void);
typedef void (*ggml_log_callback)(int level, const char *text, void *user_data);
void llama_log_set(ggml_log_callback cb, void *user_data);

/* ggml's GGUF reader (libggml-base) */
struct gguf_context;
struct gguf_init_params {
  bool no_alloc;
  void **ctx;
};
struct gguf_context *gguf_init_from_file(const char *fname, struct gguf_init_params params);
void gguf_free(struct gguf_context *ctx);
int64_t gguf_get_n_tensors(const struct gguf_context *ctx);
const char *gguf_get_tensor_name(const struct gguf_context *ctx, int64_t id);
size_t gguf_get_tensor_offset(const struct gguf_context *ctx, int64_t id);
int gguf_get_tensor_type(const struct gguf_context *ctx, int64_t id);
size_t gguf_get_tensor_size(const struct gguf_context *ctx, int64_t id);
size_t gguf_get_data_offset(const struct gguf_context *ctx);
int64_t gguf_find_tensor(const struct gguf_context *ctx, const char *name);

static void die(const char *msg, const char *arg) {
  fprintf(stderr, "llama_quantize_peer: %s%s\n", msg, arg ? arg : "");
  exit(1);
}

/* The defaults llama.h documents, at the offsets the struct above gives them; and nothing
 * written past its 56 bytes. */
static void check_layout(void) {
  wide_params w;
  memset(&w, 0xAB, sizeof w);
  w = llama_model_quantize_default_params();
  llama_model_quantize_params p;
  memcpy(&p, w.b, sizeof p);
  int ok = p.nthread == 0 && p.ftype == 7 /* Q8_0 */ && p.output_tensor_type == p.token_embedding_type &&
           p.output_tensor_type >= 39 && !p.allow_requantize && p.quantize_output_tensor && !p.only_copy &&
           !p.pure && !p.keep_split && !p.dry_run && !p.imatrix && !p.kv_overrides && !p.tt_overrides &&
           !p.prune_layers;
  /* the sret buffer beyond the struct keeps whatever the caller had there: our fill or the
   * zeroes of the returned temporary, never a value the library set */
  if (!ok) die("llama_model_quantize_default_params() does not match the declared layout", NULL);
}

typedef struct {
  struct llama_model_imatrix_data *e;
  float **bufs;
  int n;
} imatrix_set;

static void *read_at(FILE *f, size_t off, size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p || fseek(f, (long)off, SEEK_SET) || fread(p, 1, n, f) != n) die("cannot read the imatrix file", NULL);
  return p;
}

/* NAME.in_sum2 / NAME.counts -> NAME: weights per matrix (sum / count, 1 where count is 0) */
static imatrix_set load_imatrix(const char *path) {
  struct gguf_init_params ip = {true, NULL};
  struct gguf_context *g = gguf_init_from_file(path, ip);
  if (!g) die("ggml cannot open the imatrix file ", path);
  FILE *f = fopen(path, "rb");
  if (!f) die("cannot open ", path);
  const int64_t nt = gguf_get_n_tensors(g);
  imatrix_set s = {calloc((size_t)nt + 1, sizeof *s.e), calloc((size_t)nt + 1, sizeof(float *)), 0};
  const size_t base = gguf_get_data_offset(g);
  for (int64_t i = 0; i < nt; i++) {
    const char *nm = gguf_get_tensor_name(g, i);
    const size_t L = strlen(nm);
    if (L < 8 || strcmp(nm + L - 8, ".in_sum2")) continue;
    char cname[512];
    snprintf(cname, sizeof cname, "%.*s.counts", (int)(L - 8), nm);
    const int64_t ic = gguf_find_tensor(g, cname);
    if (ic < 0 || gguf_get_tensor_type(g, i) != 0 || gguf_get_tensor_type(g, ic) != 0)
      die("imatrix: missing or non-f32 counts for ", nm);
    const size_t ns = gguf_get_tensor_size(g, i) / 4, nc = gguf_get_tensor_size(g, ic) / 4;
    if (!nc || ns % nc) die("imatrix: sums not a whole number of matrices for ", nm);
    float *sum = read_at(f, base + gguf_get_tensor_offset(g, i), ns * 4);
    float *cnt = read_at(f, base + gguf_get_tensor_offset(g, ic), nc * 4);
    const size_t per = ns / nc;
    for (size_t j = 0; j < ns; j++) sum[j] = cnt[j / per] > 0 ? sum[j] / cnt[j / per] : 1.0f;
    free(cnt);
    char *name = malloc(L - 7);
    memcpy(name, nm, L - 8);
    name[L - 8] = 0;
    s.e[s.n] = (struct llama_model_imatrix_data){name, sum, ns};
    s.bufs[s.n++] = sum;
  }
  s.e[s.n] = (struct llama_model_imatrix_data){NULL, NULL, 0};
  fclose(f);
  gguf_free(g);
  if (!s.n) die("imatrix: no NAME.in_sum2 tensors in ", path);
  return s;
}

/* --dry-run: a log line is complete at its newline; tensor lines give "NAME TYPE" on stdout */
static char logline[4096];
static size_t loglen;

static void dry_run_line(const char *l) {
  const char *rb = strstr(l, "] "), *dash = rb ? strstr(rb, " - [") : NULL, *ty = dash ? strstr(dash, "type = ") : NULL;
  if (l[0] != '[' || !rb || !dash || !ty) return;
  const char *nm = rb + 2;
  while (*nm == ' ') nm++;
  int nl = (int)(dash - nm);
  while (nl > 0 && nm[nl - 1] == ' ') nl--;
  char cur[32] = "", now[32] = "";
  if (sscanf(ty + 7, " %31[^, ]", cur) != 1) return;
  const char *op = strrchr(l, '(');
  if (op && sscanf(op + 1, "%31[^)]", now) == 1) printf("%.*s %s\n", nl, nm, now);
  else printf("%.*s %s\n", nl, nm, cur);
}

static void dry_run_log(int level, const char *text, void *user) {
  (void)level, (void)user;
  for (; *text; text++) {
    if (*text == '\n') {
      logline[loglen] = 0;
      dry_run_line(logline);
      loglen = 0;
    } else if (loglen + 1 < sizeof logline) {
      logline[loglen++] = *text;
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: llama_quantize_peer IN.gguf OUT.gguf FTYPE [--imatrix F.gguf] [-t N] [--dry-run]\n");
    return 2;
  }
  llama_backend_init();
  check_layout();
  wide_params w = llama_model_quantize_default_params();
  llama_model_quantize_params p;
  memcpy(&p, w.b, sizeof p);
  p.ftype = atoi(argv[3]);
  p.nthread = 1;
  imatrix_set im = {0};
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "--imatrix") && i + 1 < argc) {
      im = load_imatrix(argv[++i]);
      p.imatrix = im.e;
    } else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
      p.nthread = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--dry-run")) {
      p.dry_run = true;
      llama_log_set(dry_run_log, NULL);
    } else {
      die("unknown argument ", argv[i]);
    }
  }
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  for (int i = 0; i < im.n; i++) {
    free((void *)im.e[i].name);
    free(im.bufs[i]);
  }
  free(im.e);
  free(im.bufs);
  if (rc) die("llama_model_quantize failed", NULL);
  return 0;
}
