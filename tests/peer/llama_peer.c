/*
 * llama_peer - a small driver over the prebuilt llama.cpp library (npm @node-llama-cpp/linux-x64
 * 3.22.1, llama.cpp commit 0ad4a86), the numerical and speed reference q35 is tested against.
 *
 *   llama_peer logits   -m F.gguf --tokens 1,2,3 [--all] [-t N] [--kv f32|f16|q8_0] [--flash 0|1]
 *                       [--batch N] [--load-mode -1|0|1] -o OUT.bin
 *       little-endian float32 logits of the last position (V floats) or, with --all, of every
 *       position (T x V, position major): the format of `q35 logits`.
 *   llama_peer generate -m F.gguf --tokens 1,2,3 -n N [-t N] [--kv ..] [--flash ..] [--batch N]
 *       greedy continuation (argmax over the logits, ties to the lowest id; EOG not special):
 *       prints N ids on one line, space separated.
 *   llama_peer bench    -m F.gguf [-p P] [-n N] [-r RUNS] [-t N] [--load-mode -1|0|1]
 *                       [--kv ..] [--flash ..] [--seed S] [--depth D] [--warmup W] [--json]
 *       prefill of P random tokens, then N greedy decode steps; median tok/s over RUNS.
 *       --depth D first fills the context with D other random tokens (untimed, in batches of
 *       --batch, default max(P, 512)), so the timed prompt and decode run at context D.
 *       --json prints one line {"engine":"llama.cpp","prefill_tok_s":..,"decode_tok_s":..,...}.
 *   llama_peer parallel -m F.gguf --seqs S[,S2,...] [-p P] [-n N] [-r RUNS] [-t N] [--kv ..]
 *                       [--flash ..] [--load-mode ..] [--seed S] [--warmup W] [--json]
 *       S sequences on one context (n_seq_max S): each prefills its own P random tokens, then N
 *       decode steps, each ONE llama_decode of S tokens (one per sequence, greedy argmax per
 *       sequence): the library-level counterpart of S concurrent server streams. Prints the
 *       median aggregate decode tok/s (S * N / decode seconds) over RUNS, one line per count
 *       in the list (the model is loaded once, each count gets a fresh context).
 *
 *   Every command also takes --cpu-variant V[,V2,...] (or the environment variable
 *   Q35_PEER_CPU=V[,V2,...]): load exactly libggml-cpu-V.so (ggml_backend_load) instead of
 *   every variant (ggml_backend_load_all_from_path, which keeps the best-scoring one). A
 *   variant this CPU cannot run (its ggml_backend_score is 0) is skipped with a message and
 *   the next in the list is tried; none runnable: exit 3. The variant used is printed on
 *   stderr and, with --json, as "cpu_variant".
 *
 * Defaults are the strict-parity settings: f32 KV cache, flash attention off.
 * The llama.cpp declarations below are written here from include/llama.h of that commit (the
 * npm package ships no headers); struct layouts are checked at compile time against the
 * offsets documented in docs/peers.md and at run time against known defaults.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef LLAMA_PEER_BACKEND_DIR
#error "LLAMA_PEER_BACKEND_DIR must name the directory holding libggml-cpu-*.so"
#endif

/* ---- llama.cpp / ggml declarations (commit 0ad4a86) ----------------------------------- */

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;
struct llama_model;
struct llama_context;
struct llama_vocab;
typedef struct llama_memory_i *llama_memory_t;

struct llama_model_params {
  void *devices;
  const void *tensor_buft_overrides;
  int32_t n_gpu_layers;
  int32_t split_mode;
  int32_t load_mode; /* -1 auto, 0 read into memory, 1 mmap */
  int32_t lazy_mode;
  int32_t main_gpu;
  const float *tensor_split;
  void *progress_callback;
  void *progress_callback_user_data;
  const void *kv_overrides;
  bool vocab_only;
  bool check_tensors;
  bool use_extra_bufts;
  bool no_host;
  bool no_alloc;
  bool load_mtp;
};
_Static_assert(sizeof(struct llama_model_params) == 0x50, "llama_model_params size");
_Static_assert(offsetof(struct llama_model_params, load_mode) == 0x18, "load_mode offset");
_Static_assert(offsetof(struct llama_model_params, lazy_mode) == 0x1c, "lazy_mode offset");
_Static_assert(offsetof(struct llama_model_params, vocab_only) == 0x48, "vocab_only offset");
_Static_assert(offsetof(struct llama_model_params, load_mtp) == 0x4d, "load_mtp offset");

struct llama_context_params {
  uint32_t n_ctx;
  uint32_t n_batch;
  uint32_t n_ubatch;
  uint32_t n_seq_max;
  uint32_t n_rs_seq;
  uint32_t n_outputs_max;
  uint32_t n_outputs_max_per_seq;
  int32_t n_threads;
  int32_t n_threads_batch;
  int32_t ctx_type;
  int32_t rope_scaling_type;
  int32_t pooling_type;
  int32_t attention_type;
  int32_t flash_attn_type; /* -1 auto, 0 off, 1 on */
  float rope_freq_base;
  float rope_freq_scale;
  float yarn_ext_factor;
  float yarn_attn_factor;
  float yarn_beta_fast;
  float yarn_beta_slow;
  uint32_t yarn_orig_ctx;
  float defrag_thold;
  void *cb_eval;
  void *cb_eval_user_data;
  int32_t type_k; /* ggml_type: 0 f32, 1 f16, 8 q8_0 */
  int32_t type_v;
  void *abort_callback;
  void *abort_callback_data;
  bool embeddings;
  bool offload_kqv;
  bool no_perf;
  bool op_offload;
  bool swa_full;
  bool kv_unified;
  void *samplers;
  size_t n_samplers;
  struct llama_context *ctx_other;
};
_Static_assert(sizeof(struct llama_context_params) == 0xa0, "llama_context_params size");
_Static_assert(offsetof(struct llama_context_params, n_outputs_max_per_seq) == 0x18, "offset");
_Static_assert(offsetof(struct llama_context_params, n_threads) == 0x1c, "n_threads offset");
_Static_assert(offsetof(struct llama_context_params, n_threads_batch) == 0x20, "offset");
_Static_assert(offsetof(struct llama_context_params, flash_attn_type) == 0x34, "offset");
_Static_assert(offsetof(struct llama_context_params, type_k) == 0x68, "type_k offset");
_Static_assert(offsetof(struct llama_context_params, type_v) == 0x6c, "type_v offset");
_Static_assert(offsetof(struct llama_context_params, embeddings) == 0x80, "offset");
_Static_assert(offsetof(struct llama_context_params, samplers) == 0x88, "samplers offset");

struct llama_batch {
  int32_t n_tokens;
  llama_token *token;
  float *embd;
  llama_pos *pos;
  int32_t *n_seq_id;
  llama_seq_id **seq_id;
  int8_t *logits;
};

typedef void (*ggml_log_callback)(int level, const char *text, void *user_data);

extern void ggml_backend_load_all_from_path(const char *dir_path);
extern void *ggml_backend_load(const char *path); /* ggml_backend_reg_t or NULL */
extern void llama_log_set(ggml_log_callback cb, void *user_data);
extern void llama_backend_init(void);
extern void llama_backend_free(void);
extern struct llama_model_params llama_model_default_params(void);
extern struct llama_context_params llama_context_default_params(void);
extern struct llama_model *llama_model_load_from_file(const char *path,
                                                      struct llama_model_params params);
extern void llama_model_free(struct llama_model *model);
extern struct llama_context *llama_init_from_model(struct llama_model *model,
                                                   struct llama_context_params params);
extern void llama_free(struct llama_context *ctx);
extern const struct llama_vocab *llama_model_get_vocab(const struct llama_model *model);
extern int32_t llama_vocab_n_tokens(const struct llama_vocab *vocab);
extern struct llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
extern void llama_batch_free(struct llama_batch batch);
extern int32_t llama_decode(struct llama_context *ctx, struct llama_batch batch);
extern float *llama_get_logits_ith(struct llama_context *ctx, int32_t i);
extern llama_memory_t llama_get_memory(const struct llama_context *ctx);
extern void llama_memory_clear(llama_memory_t mem, bool data);
extern void llama_synchronize(struct llama_context *ctx);

/* ---- small helpers --------------------------------------------------------------------- */

static int g_verbose = 0;

static void log_cb(int level, const char *text, void *user_data) {
  (void)user_data;
  /* ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 cont */
  if (g_verbose || level == 4) fputs(text, stderr);
}

static void usage(void) {
  fprintf(stderr,
          "usage: llama_peer logits   -m F.gguf --tokens 1,2,3 [--all] [-t N] [--kv f32|f16|q8_0]\n"
          "                           [--flash 0|1] [--batch N] [--load-mode -1|0|1] -o OUT.bin\n"
          "       llama_peer generate -m F.gguf --tokens 1,2,3 -n N [-t N] [--kv ..] [--flash ..]\n"
          "                           [--batch N]\n"
          "       llama_peer bench    -m F.gguf [-p P] [-n N] [-r RUNS] [-t N] [--load-mode ..]\n"
          "                           [--depth D] [--warmup W]\n"
          "                           [--kv ..] [--flash ..] [--seed S] [--json]\n"
          "       llama_peer parallel -m F.gguf --seqs S[,S2..] [-p P] [-n N] [-r RUNS] [-t N]\n"
          "                           [--kv ..] [--flash ..] [--load-mode ..] [--seed S] [--warmup W] [--json]\n"
          "       every command: [--cpu-variant haswell|skylakex|zen4|...[,next,...]] (or Q35_PEER_CPU)\n"
          "common: -v (llama.cpp log on stderr)\n");
}

static void usage_error(const char *fmt, const char *a) {
  fprintf(stderr, "llama_peer: ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, "\n");
  usage();
  exit(2);
}

/* "--flag value" or "--flag=value"; '-' and '_' interchangeable after the leading dashes. */
static int flag_is(const char *arg, const char *name, const char **inline_val) {
  *inline_val = NULL;
  size_t i = 0;
  while (arg[i] && name[i]) {
    char a = arg[i], b = name[i];
    if (i >= 2) {
      if (a == '_') a = '-';
      if (b == '_') b = '-';
    }
    if (a != b) return 0;
    i++;
  }
  if (name[i]) return 0;
  if (arg[i] == '\0') return 1;
  if (arg[i] == '=') {
    *inline_val = arg + i + 1;
    return 1;
  }
  return 0;
}

static long parse_long(const char *flag, const char *v, long lo, long hi) {
  if (!v || !*v) usage_error("%s: missing value", flag);
  errno = 0;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < lo || x > hi) {
    fprintf(stderr, "llama_peer: %s: bad value '%s' (expected an integer in [%ld, %ld])\n", flag, v,
            lo, hi);
    exit(2);
  }
  return x;
}

static int32_t *parse_ids(const char *v, int32_t *n_out) {
  size_t cap = 16, n = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  if (!ids) {
    fprintf(stderr, "llama_peer: out of memory\n");
    exit(1);
  }
  const char *p = v;
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    errno = 0;
    char *end = NULL;
    long x = strtol(p, &end, 10);
    if (end == p || errno || x < 0 || x > INT32_MAX ||
        (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n')) {
      fprintf(stderr, "llama_peer: --tokens: bad token id list near '%.20s'\n", p);
      exit(2);
    }
    if (n == cap) {
      cap *= 2;
      int32_t *t = realloc(ids, cap * sizeof *ids);
      if (!t) {
        fprintf(stderr, "llama_peer: out of memory\n");
        exit(1);
      }
      ids = t;
    }
    ids[n++] = (int32_t)x;
    p = end;
  }
  if (n == 0) usage_error("%s: empty token list", "--tokens");
  *n_out = (int32_t)n;
  return ids;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* argmax, ties to the lowest id; NaN never wins. */
static int32_t argmax(const float *x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
  return best;
}

/* ---- options and setup ------------------------------------------------------------------ */

typedef struct {
  const char *model;
  const char *out;
  const char *tokens_arg;
  int all;
  int threads;
  int kv_type; /* ggml type id */
  int flash;
  int flash_set;
  int batch; /* 0: whole prompt in one llama_decode */
  int load_mode;
  int n_gen;
  int n_prompt;
  int depth;
  int runs;
  int warmup;
  uint64_t seed;
  int json;
  int seqs; /* parallel sequences (n_seq_max); 0: 1 */
  const char *seqs_arg;
  const char *cpu_variant; /* NULL: load all, ggml picks the best */
} opts;

static void parse_opts(const char *cmd, int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = ncpu > 0 ? (int)ncpu : 1;
  o->kv_type = 0;
  o->flash = 0;
  o->load_mode = -1;
  o->n_gen = -1;
  o->n_prompt = 128;
  o->runs = 5;
  o->warmup = 1;
  o->seed = 42;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *iv = NULL;
#define VAL() (iv ? iv : (i + 1 < argc ? argv[++i] : NULL))
    if (flag_is(a, "-m", &iv) || flag_is(a, "--model", &iv)) {
      o->model = VAL();
      if (!o->model) usage_error("%s: missing value", a);
    } else if (flag_is(a, "-o", &iv) || flag_is(a, "--output", &iv)) {
      o->out = VAL();
      if (!o->out) usage_error("%s: missing value", a);
    } else if (flag_is(a, "--tokens", &iv)) {
      o->tokens_arg = VAL();
      if (!o->tokens_arg) usage_error("%s: missing value", a);
    } else if (flag_is(a, "--all", &iv)) {
      o->all = 1;
    } else if (flag_is(a, "--json", &iv)) {
      o->json = 1;
    } else if (flag_is(a, "-v", &iv) || flag_is(a, "--verbose", &iv)) {
      g_verbose = 1;
    } else if (flag_is(a, "-t", &iv) || flag_is(a, "--threads", &iv)) {
      o->threads = (int)parse_long("--threads", VAL(), 1, 1024);
    } else if (flag_is(a, "--kv", &iv)) {
      const char *v = VAL();
      if (!v) usage_error("%s: missing value", "--kv");
      if (!strcmp(v, "f32")) o->kv_type = 0;
      else if (!strcmp(v, "f16")) o->kv_type = 1;
      else if (!strcmp(v, "q8_0")) o->kv_type = 8;
      else usage_error("--kv: expected f32, f16 or q8_0, got '%s'", v);
    } else if (flag_is(a, "--flash", &iv)) {
      o->flash = (int)parse_long("--flash", VAL(), -1, 1);
      o->flash_set = 1;
    } else if (flag_is(a, "--batch", &iv) || flag_is(a, "--chunk", &iv)) {
      o->batch = (int)parse_long("--batch", VAL(), 1, 1 << 20);
    } else if (flag_is(a, "--load-mode", &iv)) {
      o->load_mode = (int)parse_long("--load-mode", VAL(), -1, 1);
    } else if (flag_is(a, "-n", &iv) || flag_is(a, "--n-gen", &iv) || flag_is(a, "--decode", &iv)) {
      o->n_gen = (int)parse_long("-n", VAL(), 0, 1 << 20);
    } else if (flag_is(a, "-p", &iv) || flag_is(a, "--prompt", &iv)) {
      o->n_prompt = (int)parse_long("-p", VAL(), 1, 1 << 20);
    } else if (flag_is(a, "-r", &iv) || flag_is(a, "--runs", &iv)) {
      o->runs = (int)parse_long("--runs", VAL(), 1, 1000);
    } else if (flag_is(a, "--depth", &iv)) {
      o->depth = (int)parse_long("--depth", VAL(), 0, 1 << 22);
    } else if (flag_is(a, "--warmup", &iv)) {
      o->warmup = (int)parse_long("--warmup", VAL(), 0, 100);
    } else if (flag_is(a, "--seqs", &iv) || flag_is(a, "--parallel", &iv)) {
      o->seqs_arg = VAL();
      if (!o->seqs_arg) usage_error("%s: missing value", a);
    } else if (flag_is(a, "--cpu-variant", &iv)) {
      o->cpu_variant = VAL();
      if (!o->cpu_variant || !*o->cpu_variant) usage_error("%s: missing value", "--cpu-variant");
    } else if (flag_is(a, "--seed", &iv)) {
      o->seed = (uint64_t)parse_long("--seed", VAL(), 0, INT32_MAX);
    } else if (flag_is(a, "-h", &iv) || flag_is(a, "--help", &iv)) {
      usage();
      exit(0);
    } else {
      fprintf(stderr, "llama_peer %s: unknown option %s\n", cmd, a);
      usage();
      exit(2);
    }
#undef VAL
  }
  if (!o->model) usage_error("%s: -m MODEL is required", cmd);
  if (!o->cpu_variant) {
    const char *e = getenv("Q35_PEER_CPU");
    if (e && *e) o->cpu_variant = e;
  }
  if (o->kv_type == 8 && !o->flash_set) {
    o->flash = 1; /* llama.cpp refuses a quantized V cache without flash attention */
    fprintf(stderr, "llama_peer: --kv q8_0: flash attention on (llama.cpp requires it)\n");
  }
}

typedef struct {
  struct llama_model *model;
  struct llama_context *ctx;
  int32_t n_vocab;
  int32_t n_batch;
  struct llama_batch batch;
} peer;

static void check_defaults(const struct llama_model_params *mp,
                           const struct llama_context_params *cp) {
  /* Known defaults at 0ad4a86: a mismatch means the declarations above drifted. */
  int ok = mp->devices == NULL && mp->tensor_buft_overrides == NULL && mp->load_mode == -1 &&
           mp->kv_overrides == NULL && mp->vocab_only == false && mp->no_alloc == false &&
           cp->n_seq_max == 1 && cp->flash_attn_type == -1 && cp->type_k == 1 &&
           cp->type_v == 1 && cp->samplers == NULL && cp->n_samplers == 0 &&
           cp->ctx_other == NULL && cp->cb_eval == NULL && cp->abort_callback == NULL &&
           cp->embeddings == false;
  if (!ok) {
    fprintf(stderr,
            "llama_peer: llama.cpp default parameters do not look like commit 0ad4a86's "
            "(load_mode %d, n_seq_max %u, flash_attn_type %d, type_k %d, type_v %d): "
            "the struct declarations in llama_peer.c do not match this library\n",
            mp->load_mode, cp->n_seq_max, cp->flash_attn_type, cp->type_k, cp->type_v);
    exit(1);
  }
}

static void peer_ctx_open(peer *p, const opts *o, int32_t n_ctx_need, int32_t n_batch);

/* ---- CPU variant ---------------------------------------------------------------------- */

static char g_cpu_variant[64] = "?"; /* the libggml-cpu-<variant>.so in use */

/* ggml_backend_score() of DIR/libggml-cpu-<name>.so: 0 = this CPU cannot run it, -1 = the
 * file is missing or not a ggml backend. The library is opened privately and closed again. */
static int variant_score(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", LLAMA_PEER_BACKEND_DIR, name);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  int (*score)(void) = NULL;
  *(void **)&score = dlsym(h, "ggml_backend_score");
  int s = score ? score() : -1;
  dlclose(h);
  return s;
}

static int variant_name_ok(const char *s, size_t n) {
  if (n == 0 || n >= sizeof g_cpu_variant) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return 0;
  return 1;
}

/* The name of the variant ggml_backend_load_all_from_path keeps: the highest score. */
static void best_variant(void) {
  DIR *d = opendir(LLAMA_PEER_BACKEND_DIR);
  if (!d) return;
  int best = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    if (strncmp(n, "libggml-cpu-", 12) != 0 || len < 16 || strcmp(n + len - 3, ".so") != 0) continue;
    char name[64];
    size_t k = len - 15;
    if (!variant_name_ok(n + 12, k)) continue;
    memcpy(name, n + 12, k);
    name[k] = '\0';
    int s = variant_score(name);
    if (s > best) {
      best = s;
      memcpy(g_cpu_variant, name, k + 1);
    }
  }
  closedir(d);
}

/* Loads the CPU backend: every variant (spec NULL) or the first runnable one of the comma
 * list spec. Exits 2 on a malformed name or a missing file, 3 when none of them can run. */
static void load_cpu_backend(const char *spec) {
  if (!spec) {
    ggml_backend_load_all_from_path(LLAMA_PEER_BACKEND_DIR);
    best_variant();
    fprintf(stderr, "llama_peer: CPU variant %s (best of all; --cpu-variant picks one)\n",
            g_cpu_variant);
    return;
  }
  for (const char *p = spec; *p;) {
    size_t n = strcspn(p, ",");
    char name[64];
    if (!variant_name_ok(p, n)) {
      fprintf(stderr, "llama_peer: --cpu-variant: bad variant name '%.*s' (expected e.g. haswell, "
              "skylakex, zen4: libggml-cpu-NAME.so in %s)\n", (int)n, p, LLAMA_PEER_BACKEND_DIR);
      exit(2);
    }
    memcpy(name, p, n);
    name[n] = '\0';
    p += n + (p[n] == ',');
    int s = variant_score(name);
    if (s < 0) {
      fprintf(stderr, "llama_peer: --cpu-variant: no loadable libggml-cpu-%s.so in %s\n", name,
              LLAMA_PEER_BACKEND_DIR);
      exit(2);
    }
    if (s == 0) {
      fprintf(stderr, "llama_peer: CPU variant %s cannot run on this CPU; skipped\n", name);
      continue;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", LLAMA_PEER_BACKEND_DIR, name);
    if (!ggml_backend_load(path)) {
      fprintf(stderr, "llama_peer: ggml_backend_load(%s) failed\n", path);
      exit(1);
    }
    memcpy(g_cpu_variant, name, n + 1);
    fprintf(stderr, "llama_peer: CPU variant %s\n", g_cpu_variant);
    return;
  }
  fprintf(stderr, "llama_peer: --cpu-variant %s: none of these variants can run on this CPU\n", spec);
  exit(3);
}

static void peer_open(peer *p, const opts *o, int32_t n_ctx_need, int32_t n_batch) {
  memset(p, 0, sizeof *p);
  llama_log_set(log_cb, NULL);
  load_cpu_backend(o->cpu_variant);
  llama_backend_init();

  struct llama_model_params mp = llama_model_default_params();
  struct llama_context_params cp = llama_context_default_params();
  check_defaults(&mp, &cp);

  mp.n_gpu_layers = 0;
  mp.load_mode = o->load_mode;
  p->model = llama_model_load_from_file(o->model, mp);
  if (!p->model) {
    fprintf(stderr, "llama_peer: llama.cpp could not load '%s' (run with -v for its log)\n",
            o->model);
    exit(1);
  }
  p->n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(p->model));
  peer_ctx_open(p, o, n_ctx_need, n_batch);
}

/* A (new) context and batch on p's model. */
static void peer_ctx_open(peer *p, const opts *o, int32_t n_ctx_need, int32_t n_batch) {
  struct llama_context_params cp = llama_context_default_params();
  if (n_batch < 1) n_batch = 1;
  int32_t n_ctx = n_ctx_need < 1 ? 1 : n_ctx_need;
  n_ctx = (n_ctx + 255) / 256 * 256;
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_batch;
  cp.n_ubatch = (uint32_t)n_batch;
  cp.n_seq_max = o->seqs > 1 ? (uint32_t)o->seqs : 1;
  cp.n_threads = o->threads;
  cp.n_threads_batch = o->threads;
  cp.flash_attn_type = o->flash;
  cp.type_k = o->kv_type;
  cp.type_v = o->kv_type;
  cp.no_perf = true;
  p->ctx = llama_init_from_model(p->model, cp);
  if (!p->ctx) {
    fprintf(stderr, "llama_peer: llama.cpp could not create a context (run with -v)\n");
    exit(1);
  }
  p->n_batch = n_batch;
  p->batch = llama_batch_init(n_batch, 0, 1);
}

static void peer_close(peer *p) {
  llama_batch_free(p->batch);
  llama_free(p->ctx);
  llama_model_free(p->model);
  llama_backend_free();
}

static void check_ids(const peer *p, const int32_t *ids, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= p->n_vocab) {
      fprintf(stderr, "llama_peer: --tokens: id %d at index %d is outside the vocabulary [0, %d)\n",
              ids[i], i, p->n_vocab);
      exit(2);
    }
}

/* Feed tokens at positions pos0.. in batches of n_batch. For every position whose logits are
 * wanted (all, or only the very last of the call), on_logits(row_index, logits) is called. */
typedef void (*logits_fn)(void *ud, int32_t idx, const float *logits, int32_t n_vocab);

static void peer_eval(peer *p, const int32_t *ids, int32_t n, int32_t pos0, int all,
                      logits_fn fn, void *ud) {
  for (int32_t s = 0; s < n; s += p->n_batch) {
    int32_t m = n - s < p->n_batch ? n - s : p->n_batch;
    struct llama_batch *b = &p->batch;
    b->n_tokens = m;
    for (int32_t i = 0; i < m; i++) {
      b->token[i] = ids[s + i];
      b->pos[i] = pos0 + s + i;
      b->n_seq_id[i] = 1;
      b->seq_id[i][0] = 0;
      b->logits[i] = (int8_t)((all || s + i == n - 1) && fn != NULL);
    }
    int32_t rc = llama_decode(p->ctx, *b);
    if (rc != 0) {
      fprintf(stderr, "llama_peer: llama_decode failed (%d) at position %d\n", rc, pos0 + s);
      exit(1);
    }
    if (!fn) continue;
    for (int32_t i = 0; i < m; i++) {
      if (!b->logits[i]) continue;
      const float *l = llama_get_logits_ith(p->ctx, i);
      if (!l) {
        fprintf(stderr, "llama_peer: no logits for batch row %d\n", i);
        exit(1);
      }
      fn(ud, s + i, l, p->n_vocab);
    }
  }
}

/* ---- logits ----------------------------------------------------------------------------- */

typedef struct {
  FILE *f;
  const char *path;
} write_ctx;

static void write_logits(void *ud, int32_t idx, const float *logits, int32_t n_vocab) {
  (void)idx;
  write_ctx *w = ud;
  if (fwrite(logits, sizeof(float), (size_t)n_vocab, w->f) != (size_t)n_vocab) {
    fprintf(stderr, "llama_peer: write error on '%s'\n", w->path);
    exit(1);
  }
}

static int cmd_logits(int argc, char **argv) {
  opts o;
  parse_opts("logits", argc, argv, &o);
  if (!o.tokens_arg) usage_error("%s: --tokens is required", "logits");
  if (!o.out) usage_error("%s: -o OUT.bin is required", "logits");
  int32_t n = 0;
  int32_t *ids = parse_ids(o.tokens_arg, &n);
  peer p;
  peer_open(&p, &o, n, o.batch > 0 ? o.batch : n);
  check_ids(&p, ids, n);
  write_ctx w = {fopen(o.out, "wb"), o.out};
  if (!w.f) {
    fprintf(stderr, "llama_peer: cannot open '%s' for writing: %s\n", o.out, strerror(errno));
    return 1;
  }
  peer_eval(&p, ids, n, 0, o.all, write_logits, &w);
  if (fclose(w.f) != 0) {
    fprintf(stderr, "llama_peer: write error on '%s'\n", o.out);
    return 1;
  }
  peer_close(&p);
  free(ids);
  return 0;
}

/* ---- generate --------------------------------------------------------------------------- */

static void take_argmax(void *ud, int32_t idx, const float *logits, int32_t n_vocab) {
  (void)idx;
  *(int32_t *)ud = argmax(logits, n_vocab);
}

static int cmd_generate(int argc, char **argv) {
  opts o;
  parse_opts("generate", argc, argv, &o);
  if (!o.tokens_arg) usage_error("%s: --tokens is required", "generate");
  if (o.n_gen < 0) usage_error("%s: -n N is required", "generate");
  int32_t n = 0;
  int32_t *ids = parse_ids(o.tokens_arg, &n);
  peer p;
  peer_open(&p, &o, n + o.n_gen, o.batch > 0 ? o.batch : n);
  check_ids(&p, ids, n);
  int32_t next = -1;
  peer_eval(&p, ids, n, 0, 0, take_argmax, &next);
  for (int32_t k = 0; k < o.n_gen; k++) {
    printf(k ? " %d" : "%d", next);
    if (k + 1 < o.n_gen) {
      int32_t t = next;
      peer_eval(&p, &t, 1, n + k, 0, take_argmax, &next);
    }
  }
  printf("\n");
  fflush(stdout);
  peer_close(&p);
  free(ids);
  return 0;
}

/* ---- bench ------------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int cmd_bench(int argc, char **argv) {
  opts o;
  parse_opts("bench", argc, argv, &o);
  if (o.n_gen < 0) o.n_gen = 32;
  int32_t P = o.n_prompt, N = o.n_gen, D = o.depth;
  peer p;
  double tl = now_s();
  peer_open(&p, &o, D + P + N + 1, o.batch > 0 ? o.batch : (D > 0 && P < 512 ? 512 : P));
  const double load_s = now_s() - tl;
  int32_t *ids = malloc((size_t)(P + D) * sizeof *ids);
  double *pre = malloc((size_t)o.runs * sizeof *pre), *dec = malloc((size_t)o.runs * sizeof *dec);
  if (!ids || !pre || !dec) {
    fprintf(stderr, "llama_peer: out of memory\n");
    return 1;
  }
  uint64_t st = o.seed;
  for (int32_t i = 0; i < P + D; i++) ids[i] = (int32_t)(splitmix64(&st) % (uint64_t)p.n_vocab);
  for (int r = -o.warmup; r < o.runs; r++) {
    llama_memory_clear(llama_get_memory(p.ctx), true);
    if (D > 0) peer_eval(&p, ids + P, D, 0, 0, NULL, NULL);
    llama_synchronize(p.ctx);
    int32_t next = -1;
    double t0 = now_s();
    peer_eval(&p, ids, P, D, 0, take_argmax, &next);
    llama_synchronize(p.ctx);
    double t1 = now_s();
    for (int32_t k = 0; k < N; k++) {
      int32_t t = next;
      peer_eval(&p, &t, 1, D + P + k, 0, take_argmax, &next);
    }
    llama_synchronize(p.ctx);
    double t2 = now_s();
    if (r >= 0) {
      pre[r] = (double)P / (t1 - t0);
      dec[r] = N > 0 ? (double)N / (t2 - t1) : 0.0;
    }
  }
  double mp = median(pre, o.runs), md = median(dec, o.runs);
  if (o.json)
    printf("{\"engine\":\"llama.cpp\",\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,"
           "\"prompt\":%d,\"decode\":%d,\"runs\":%d,\"threads\":%d,\"load_mode\":%d,"
           "\"depth\":%d,\"load_s\":%.4f,\"cpu_variant\":\"%s\"}\n",
           mp, md, P, N, o.runs, o.threads, o.load_mode, D, load_s, g_cpu_variant);
  else
    printf("llama.cpp: prefill %d tokens %.2f tok/s, decode %d tokens %.2f tok/s "
           "(median of %d, %d threads)\n",
           P, mp, N, md, o.runs, o.threads);
  fflush(stdout);
  free(ids);
  free(pre);
  free(dec);
  peer_close(&p);
  return 0;
}

/* ---- parallel --------------------------------------------------------------------------- */

static int cmd_parallel(int argc, char **argv) {
  opts o;
  parse_opts("parallel", argc, argv, &o);
  if (o.n_gen < 0) o.n_gen = 32;
  int32_t n_list = 0;
  int32_t *list = o.seqs_arg ? parse_ids(o.seqs_arg, &n_list) : NULL;
  if (!list) {
    list = malloc(sizeof *list);
    if (!list) return 1;
    list[0] = 1;
    n_list = 1;
  }
  int32_t smax = 1;
  for (int32_t k = 0; k < n_list; k++) {
    if (list[k] < 1 || list[k] > 256) usage_error("%s: each sequence count must be in [1, 256]", "--seqs");
    if (list[k] > smax) smax = list[k];
  }
  const int32_t P = o.n_prompt, N = o.n_gen;
  if (N < 1) usage_error("%s: -n must be at least 1", "parallel");
  /* the attention cache is split evenly between the sequences (not unified) */
  const int32_t per_seq = (P + N + 1 + 255) / 256 * 256;
  int32_t *ids = malloc((size_t)smax * (size_t)P * sizeof *ids);
  int32_t *next = malloc((size_t)smax * sizeof *next);
  double *dec = malloc((size_t)o.runs * sizeof *dec);
  if (!ids || !next || !dec) {
    fprintf(stderr, "llama_peer: out of memory\n");
    return 1;
  }
  peer p;
  double load_s = 0;
  for (int32_t li = 0; li < n_list; li++) {
    const int32_t S = list[li];
    o.seqs = S;
    if (li == 0) {
      const double tl = now_s();
      peer_open(&p, &o, S * per_seq, P > S ? P : S);
      load_s = now_s() - tl;
      uint64_t st = o.seed;
      for (int32_t i = 0; i < smax * P; i++) ids[i] = (int32_t)(splitmix64(&st) % (uint64_t)p.n_vocab);
    } else { /* a fresh context for this sequence count on the loaded model */
      llama_batch_free(p.batch);
      llama_free(p.ctx);
      peer_ctx_open(&p, &o, S * per_seq, P > S ? P : S);
    }
    struct llama_batch *b = &p.batch;
    for (int r = -o.warmup; r < o.runs; r++) {
      llama_memory_clear(llama_get_memory(p.ctx), true);
      for (int32_t s = 0; s < S; s++) { /* prefill: one sequence per llama_decode */
        b->n_tokens = P;
        for (int32_t i = 0; i < P; i++) {
          b->token[i] = ids[s * P + i];
          b->pos[i] = i;
          b->n_seq_id[i] = 1;
          b->seq_id[i][0] = s;
          b->logits[i] = (int8_t)(i == P - 1);
        }
        if (llama_decode(p.ctx, *b) != 0) {
          fprintf(stderr, "llama_peer: llama_decode failed (prefill of sequence %d)\n", s);
          return 1;
        }
        const float *l = llama_get_logits_ith(p.ctx, P - 1);
        if (!l) {
          fprintf(stderr, "llama_peer: no logits for sequence %d\n", s);
          return 1;
        }
        next[s] = argmax(l, p.n_vocab);
      }
      llama_synchronize(p.ctx);
      const double t0 = now_s();
      for (int32_t k = 0; k < N; k++) { /* decode: every sequence's token in one llama_decode */
        b->n_tokens = S;
        for (int32_t s = 0; s < S; s++) {
          b->token[s] = next[s];
          b->pos[s] = P + k;
          b->n_seq_id[s] = 1;
          b->seq_id[s][0] = s;
          b->logits[s] = 1;
        }
        if (llama_decode(p.ctx, *b) != 0) {
          fprintf(stderr, "llama_peer: llama_decode failed (decode step %d of %d sequences)\n", k, S);
          return 1;
        }
        for (int32_t s = 0; s < S; s++) {
          const float *l = llama_get_logits_ith(p.ctx, s);
          if (!l) {
            fprintf(stderr, "llama_peer: no logits for sequence %d\n", s);
            return 1;
          }
          next[s] = argmax(l, p.n_vocab);
        }
      }
      llama_synchronize(p.ctx);
      if (r >= 0) dec[r] = (double)S * N / (now_s() - t0);
    }
    const double md = median(dec, o.runs);
    if (o.json)
      printf("{\"engine\":\"llama.cpp\",\"mode\":\"parallel\",\"seqs\":%d,\"decode_tok_s\":%.3f,"
             "\"prompt\":%d,\"decode\":%d,\"runs\":%d,\"threads\":%d,\"load_mode\":%d,\"load_s\":%.4f,"
             "\"cpu_variant\":\"%s\"}\n",
             S, md, P, N, o.runs, o.threads, o.load_mode, load_s, g_cpu_variant);
    else
      printf("llama.cpp: %d sequences, decode %d steps: %.2f tok/s aggregate (median of %d, %d threads)\n", S,
             N, md, o.runs, o.threads);
    fflush(stdout);
  }
  free(list);
  free(ids);
  free(next);
  free(dec);
  peer_close(&p);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "logits")) return cmd_logits(argc, argv);
  if (!strcmp(cmd, "generate")) return cmd_generate(argc, argv);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc, argv);
  if (!strcmp(cmd, "parallel")) return cmd_parallel(argc, argv);
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
    usage();
    return 0;
  }
  fprintf(stderr, "llama_peer: unknown command '%s'\n", cmd);
  usage();
  return 2;
}
