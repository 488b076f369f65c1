/*
 * mtp_peer - llama.cpp's MTP head (graph_mtp, commit 0ad4a86) on the inputs q35's head got, for
 * tests/test_mtp_parity.sh:
 *
 *   mtp_peer -m F.gguf IN.bin OUT.bin
 *
 * IN.bin is what `test_mtp_ckpt --dump` writes (pairs (h_p, t), the calls); OUT.bin receives,
 * per call, the V logits llama.cpp's head gives for the call's last pair: a context of type MTP
 * (ctx_type 1) decodes each call's pairs as one batch carrying both the tokens and the hidden
 * states (batch.embd), at positions 0, 1, ... in its own KV cache (f32, flash attention off).
 * The declarations are written here from include/llama.h at that commit; layouts as llama_peer.c
 * checks them (docs/peers.md).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;
struct llama_model;
struct llama_context;
struct llama_vocab;

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
extern void llama_log_set(ggml_log_callback cb, void *user_data);
extern void llama_backend_init(void);
extern struct llama_model_params llama_model_default_params(void);
extern struct llama_context_params llama_context_default_params(void);
extern struct llama_model *llama_model_load_from_file(const char *path, struct llama_model_params params);
extern void llama_model_free(struct llama_model *model);
extern struct llama_context *llama_init_from_model(struct llama_model *model, struct llama_context_params params);
extern void llama_free(struct llama_context *ctx);
extern struct llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
extern void llama_batch_free(struct llama_batch batch);
extern int32_t llama_decode(struct llama_context *ctx, struct llama_batch batch);
extern float *llama_get_logits_ith(struct llama_context *ctx, int32_t i);

enum { CTX_TYPE_MTP = 1, GGML_F32 = 0 };

static int g_verbose;
static void log_cb(int level, const char *text, void *ud) {
  (void)ud;
  if (g_verbose || level == 4) fputs(text, stderr);
}

static void *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(*n ? *n : 1);
  if (p && fread(p, 1, *n, f) != *n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[argc - 1], "-v")) g_verbose = 1, argc--;
  if (argc != 5 || strcmp(argv[1], "-m")) {
    fprintf(stderr, "usage: mtp_peer -m F.gguf IN.bin OUT.bin [-v]\n");
    return 2;
  }
  size_t nb = 0;
  char *in = read_all(argv[3], &nb);
  if (!in || nb < 16) return fprintf(stderr, "mtp_peer: cannot read %s\n", argv[3]), 2;
  int32_t hdr[4];
  memcpy(hdr, in, 16);
  const int32_t n = hdr[0], H = hdr[1], V = hdr[2], n_calls = hdr[3];
  const int32_t *toks = (const int32_t *)(in + 16);
  const float *hid = (const float *)(in + 16 + 4 * (size_t)n);
  const char *calls = in + 16 + 4 * (size_t)n + 4 * (size_t)n * H;

  llama_log_set(log_cb, NULL);
  ggml_backend_load_all_from_path(LLAMA_PEER_BACKEND_DIR);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mtp = true;
  struct llama_model *model = llama_model_load_from_file(argv[2], mp);
  if (!model) return fprintf(stderr, "mtp_peer: llama.cpp could not load %s (-v for its log)\n", argv[2]), 1;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 64;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.flash_attn_type = 0;
  cp.type_k = cp.type_v = GGML_F32;
  cp.no_perf = true;
  cp.ctx_type = CTX_TYPE_MTP;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) return fprintf(stderr, "mtp_peer: no MTP context (-v for llama.cpp's log)\n"), 1;
  FILE *out = fopen(argv[4], "wb");
  if (!out) return fprintf(stderr, "mtp_peer: cannot write %s\n", argv[4]), 2;
  struct llama_batch b = llama_batch_init(64, H, 1);
  llama_token *tok_buf = malloc(sizeof(llama_token) * 64);
  int32_t done = 0;
  for (int c = 0; c < n_calls; c++) {
    int32_t end;
    memcpy(&end, calls + (size_t)c * (4 + 4 * (size_t)V), 4);
    const int32_t cnt = end - done;
    b.n_tokens = cnt;
    b.token = tok_buf;
    for (int32_t i = 0; i < cnt; i++) {
      b.token[i] = toks[done + i];
      memcpy(b.embd + (size_t)i * H, hid + (size_t)(done + i) * H, sizeof(float) * (size_t)H);
      b.pos[i] = done + i;
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = i == cnt - 1;
    }
    if (llama_decode(ctx, b) != 0) return fprintf(stderr, "mtp_peer: llama_decode failed at call %d\n", c), 1;
    const float *lg = llama_get_logits_ith(ctx, cnt - 1);
    if (!lg) return fprintf(stderr, "mtp_peer: no logits at call %d\n", c), 1;
    fwrite(&end, 4, 1, out);
    fwrite(lg, sizeof(float), (size_t)V, out);
    done = end;
  }
  fclose(out);
  b.token = NULL;
  free(tok_buf);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  free(in);
  return 0;
}
