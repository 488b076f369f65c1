/*
 * grammar_peer - llama.cpp's own grammar sampler (llama_sampler_init_grammar in the prebuilt
 * library, commit 0ad4a86) walked along a token path, the reference for q35's GBNF masks
 * (tests/test_constrain_llama.sh).
 *
 *   grammar_peer -m F.gguf --grammar F.gbnf --tokens 1,2,3
 *
 * For each step i = 0 .. n: the grammar sampler is applied to all tokens (logit 0 each) and
 * the allowed ids (those left above -inf) are printed on one line as ascending ranges
 * "a-b,c,..."; then token i is accepted. The first line lists llama.cpp's end-of-generation
 * ids ("eog a,b,..."). The median time of one apply goes to stderr as
 * {"llama_mask_us_median":X,"steps":N}. Only the vocabulary is loaded (vocab_only).
 * The struct declarations follow llama_peer.c (same commit).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef LLAMA_PEER_BACKEND_DIR
#error "LLAMA_PEER_BACKEND_DIR must name the directory holding libggml-cpu-*.so"
#endif

typedef int32_t llama_token;
struct llama_model;
struct llama_vocab;
struct llama_sampler;

struct llama_model_params {
  void *devices;
  const void *tensor_buft_overrides;
  int32_t n_gpu_layers;
  int32_t split_mode;
  int32_t load_mode;
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
_Static_assert(offsetof(struct llama_model_params, vocab_only) == 0x48, "vocab_only offset");

typedef struct llama_token_data {
  llama_token id;
  float logit;
  float p;
} llama_token_data;

typedef struct llama_token_data_array {
  llama_token_data *data;
  size_t size;
  int64_t selected;
  bool sorted;
} llama_token_data_array;

typedef void (*ggml_log_callback)(int level, const char *text, void *user_data);
extern void ggml_backend_load_all_from_path(const char *dir_path);
extern void llama_log_set(ggml_log_callback cb, void *user_data);
extern void llama_backend_init(void);
extern struct llama_model_params llama_model_default_params(void);
extern struct llama_model *llama_model_load_from_file(const char *path, struct llama_model_params params);
extern void llama_model_free(struct llama_model *model);
extern const struct llama_vocab *llama_model_get_vocab(const struct llama_model *model);
extern int32_t llama_vocab_n_tokens(const struct llama_vocab *vocab);
extern struct llama_sampler *llama_sampler_init_grammar(const struct llama_vocab *vocab, const char *grammar_str,
                                                        const char *grammar_root);
extern void llama_sampler_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p);
extern void llama_sampler_accept(struct llama_sampler *smpl, llama_token id);
extern void llama_sampler_free(struct llama_sampler *smpl);
extern bool llama_vocab_is_eog(const struct llama_vocab *vocab, llama_token token);

static void log_cb(int level, const char *text, void *ud) {
  (void)ud;
  if (level == 4) fputs(text, stderr);
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *model = NULL, *gpath = NULL, *toks = "";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-m")) model = argv[i + 1];
    else if (!strcmp(argv[i], "--grammar")) gpath = argv[i + 1];
    else if (!strcmp(argv[i], "--tokens")) toks = argv[i + 1];
  }
  if (!model || !gpath) {
    fprintf(stderr, "usage: grammar_peer -m F.gguf --grammar F.gbnf --tokens 1,2,3\n");
    return 2;
  }
  char *gtext = read_all(gpath);
  if (!gtext) {
    fprintf(stderr, "grammar_peer: cannot read %s\n", gpath);
    return 1;
  }
  int32_t n = 0, cap = 16, *ids = malloc(sizeof *ids * (size_t)cap);
  for (const char *p = toks; *p;) {
    char *e;
    long v = strtol(p, &e, 10);
    if (e == p) break;
    if (n == cap) ids = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
    ids[n++] = (int32_t)v;
    p = *e ? e + 1 : e;
  }
  llama_log_set(log_cb, NULL);
  ggml_backend_load_all_from_path(LLAMA_PEER_BACKEND_DIR);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  mp.n_gpu_layers = 0;
  struct llama_model *m = llama_model_load_from_file(model, mp);
  if (!m) {
    fprintf(stderr, "grammar_peer: llama.cpp could not load %s\n", model);
    return 1;
  }
  const struct llama_vocab *vocab = llama_model_get_vocab(m);
  const int32_t V = llama_vocab_n_tokens(vocab);
  struct llama_sampler *g = llama_sampler_init_grammar(vocab, gtext, "root");
  if (!g) {
    fprintf(stderr, "grammar_peer: llama.cpp refused the grammar\n");
    return 1;
  }
  printf("eog");
  for (int32_t t = 0, first = 1; t < V; t++)
    if (llama_vocab_is_eog(vocab, t)) {
      printf(first ? " %d" : ",%d", t);
      first = 0;
    }
  printf("\n");
  llama_token_data *d = malloc(sizeof *d * (size_t)V);
  double *us = malloc(sizeof *us * (size_t)(n + 1));
  for (int32_t step = 0; step <= n; step++) {
    for (int32_t t = 0; t < V; t++) d[t] = (llama_token_data){t, 0.0f, 0.0f};
    llama_token_data_array arr = {d, (size_t)V, -1, false};
    const double t0 = now_us();
    llama_sampler_apply(g, &arr);
    us[step] = now_us() - t0;
    int32_t run = -1;
    int first = 1;
    for (int32_t t = 0; t <= V; t++) { /* arr.data stays in id order: apply only sets logits */
      const int ok = t < V && d[t].logit > -1e30f;
      if (ok && run < 0) run = t;
      if (!ok && run >= 0) {
        if (t - 1 == run) printf(first ? "%d" : ",%d", run);
        else printf(first ? "%d-%d" : ",%d-%d", run, t - 1);
        first = 0;
        run = -1;
      }
    }
    printf("\n");
    if (step < n) llama_sampler_accept(g, ids[step]);
  }
  qsort(us, (size_t)n + 1, sizeof *us, cmp_d);
  fprintf(stderr, "{\"llama_mask_us_median\":%.1f,\"steps\":%d}\n", us[(n + 1) / 2], n + 1);
  llama_sampler_free(g);
  llama_model_free(m);
  free(d);
  free(us);
  free(ids);
  free(gtext);
  return 0;
}
