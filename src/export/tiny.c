/*
 * tiny.c - writes random-weight Qwen3.5 GGUF files (see tiny.h).
 *
 * Tensor names, shapes, metadata keys and dtype rules are those of llama.cpp's converter
 * (docs/qwen35moe.md §3): norms, conv, ssm_a, ssm_dt.bias, the router and the shared-expert
 * gate are F32; everything else uses the requested type, falling back (like llama-quantize)
 * to q5_0 / q8_0 / f16 when a row length is not a multiple of the type's block.
 *
 * The synthetic vocabulary is a valid byte-level BPE: the 256 GPT-2 byte symbols, merges that
 * build letter sequences (with and without the 'Ġ' space marker), then the Qwen control
 * tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <think>, ...) at the end.
 */
#include "export/tiny.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "kernels/quant.h"
#include "engine/threadpool.h"
#include "text/tokenizer.h"
#include "base/util.h"

q35_tiny_opts q35_tiny_default(void) {
  q35_tiny_opts o;
  memset(&o, 0, sizeof o);
  o.moe = 1;
  o.n_layer = 4;
  o.n_embd = 256;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.head_dim = 64;
  o.n_rot = 16;
  o.ssm_k_heads = 4;
  o.ssm_v_heads = 8;
  o.ssm_head_dim = 32;
  o.conv_kernel = 4;
  o.n_expert = 8;
  o.n_expert_used = 2;
  o.n_ff_exp = 64;
  o.n_ff_shexp = 64;
  o.n_ff = 512;
  o.n_vocab = 1024;
  o.interval = 4;
  o.tied = 0;
  o.n_ctx_train = 262144;
  o.rope_theta = 1e7f;
  o.type = Q35_TYPE_F32;
  o.type_down = -1;
  o.type_output = -1;
  o.type_embd = -1;
  o.seed = 1;
  return o;
}

/* ---- deterministic random numbers: splitmix64 keyed by (seed, tensor, row) ---- */
typedef struct {
  uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double rng_unif(rng *r) { return ((rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* Approximately standard normal: the sum of four 16-bit uniforms, centred and scaled
 * (Irwin-Hall; plenty for random test weights, and one generator call per value). */
static float rng_normal(rng *r) {
  const uint64_t x = rng_next(r);
  const int sum = (int)(x & 0xffff) + (int)((x >> 16) & 0xffff) + (int)((x >> 32) & 0xffff) + (int)(x >> 48);
  return (float)(sum - 131070) * (float)(1.0 / 37837.2); /* sd of the sum: 65536 * sqrt(4 / 12) */
}

typedef enum { INIT_MATRIX, INIT_NORM, INIT_CONV, INIT_DT, INIT_A, INIT_EMBD, INIT_OUT } init_kind;

/* ---- tensors are generated, converted and kept until the file is written ---- */
typedef struct {
  void **bufs;
  int n, cap;
  q35_pool *pool; /* generates the rows of a tensor in parallel */
} keep;

static void *keep_add(keep *k, size_t bytes) {
  if (k->n == k->cap) {
    k->cap = k->cap ? 2 * k->cap : 64;
    k->bufs = realloc(k->bufs, (size_t)k->cap * sizeof(void *));
  }
  void *p = calloc(1, bytes ? bytes : 1);
  k->bufs[k->n++] = p;
  return p;
}

static int fallback_type(int type, int64_t ne0) {
  if (ne0 % q35_type_block(type) == 0) return type;
  int t = (type == Q35_TYPE_Q4_K || type == Q35_TYPE_IQ4_XS || type == Q35_TYPE_Q4_0) ? Q35_TYPE_Q5_0 : Q35_TYPE_Q8_0;
  if (ne0 % 32 == 0) return t;
  return Q35_TYPE_F16;
}

typedef struct {
  uint64_t key;     /* seed and tensor number */
  int type;
  int64_t ne0, rows;
  init_kind kind;
  char *data;
} gen_task;

static void gen_rows(void *ctx, int ith, int nth) {
  const gen_task *g = ctx;
  long r0, r1;
  q35_split(g->rows, ith, nth, &r0, &r1);
  const size_t rb = q35_row_size(g->type, g->ne0);
  const float mstd = 1.0f / sqrtf((float)g->ne0);
  float *row = malloc((size_t)g->ne0 * sizeof(float));
  for (long i = r0; i < r1; i++) {
    rng r = {g->key ^ ((uint64_t)i * 0xD1B54A32D192ED03ull)};
    rng_next(&r);
    for (int64_t j = 0; j < g->ne0; j++) {
      float v;
      switch (g->kind) {
        case INIT_NORM: v = 1.0f + 0.1f * rng_normal(&r); break;
        case INIT_CONV: v = 0.5f * rng_normal(&r); break;
        case INIT_DT: v = 0.5f * rng_normal(&r); break;
        case INIT_A: v = -expf(2.0f * (float)rng_unif(&r)); break;
        case INIT_EMBD: v = rng_normal(&r); break;
        case INIT_OUT: v = 2.0f * mstd * rng_normal(&r); break;
        default: v = mstd * rng_normal(&r); break;
      }
      row[j] = v;
    }
    if (g->type == Q35_TYPE_F32) memcpy(g->data + (size_t)i * rb, row, rb);
    else q35_quantize_row(g->type, row, g->data + (size_t)i * rb, g->ne0);
  }
  free(row);
}

static int add(gguf_writer *w, keep *k, rng *r, const char *name, int type, int n_dims, int64_t ne0, int64_t ne1,
               int64_t ne2, init_kind kind) {
  int64_t ne[4] = {ne0, ne1, ne2, 1};
  if (type != Q35_TYPE_F32) type = fallback_type(type, ne0);
  gen_task g = {rng_next(r), type, ne0, ne1 * ne2, kind, NULL};
  g.data = keep_add(k, q35_row_size(type, ne0) * (size_t)g.rows);
  q35_pool_run(k->pool, gen_rows, &g);
  return gguf_add_tensor(w, name, type, (uint32_t)n_dims, ne, g.data) < 0 ? -1 : 0;
}

/* GPT-2 byte <-> unicode symbol map: printable bytes map to themselves, the rest to U+0100+ */
static void byte_symbol(int b, char out[4]) {
  int cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = b;
  } else {
    int n = 0;
    for (int x = 0; x < b; x++)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
  }
}

static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                                       "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"};
#define N_SPECIAL (int)(sizeof specials / sizeof specials[0])

static int write_synthetic_vocab(gguf_writer *w, int V, q35_err *err) {
  if (V < 256 + N_SPECIAL + 1) return q35_seterr(err, "--vocab must be at least %d for the synthetic vocabulary",
                                                 256 + N_SPECIAL + 1);
  char **tok = calloc((size_t)V, sizeof *tok);
  char **merges = calloc((size_t)V, sizeof *merges);
  int32_t *types = calloc((size_t)V, sizeof *types);
  int n = 0, nm = 0;
  for (int b = 0; b < 256; b++) {
    char s[4];
    byte_symbol(b, s);
    tok[n] = strdup(s);
    types[n++] = 1;
  }
  const int n_plain = V - N_SPECIAL;
  const char *sp = "\xc4\xa0"; /* 'Ġ' (space) */
  /* by length L = 1, 2, ...: every letter string s of length L as "Ġ"+s (merge "Ġ"+s[:-1] s[-1])
   * and, for L >= 2, s itself (merge s[:-1] s[-1]); each merge's parts exist already */
  for (int L = 1; L <= 6 && n < n_plain; L++) {
    long count = 1;
    for (int j = 0; j < L; j++) count *= 26;
    for (int spaced = 1; spaced >= (L >= 2 ? 0 : 1) && n < n_plain; spaced--)
      for (long idx = 0; idx < count && n < n_plain; idx++) {
        char letters[8], t[16], mg[32];
        long v = idx;
        for (int j = L - 1; j >= 0; j--, v /= 26) letters[j] = (char)('a' + v % 26);
        letters[L] = 0;
        snprintf(t, sizeof t, "%s%s", spaced ? sp : "", letters);
        snprintf(mg, sizeof mg, "%s%.*s %c", spaced ? sp : "", L - 1, letters, letters[L - 1]);
        tok[n] = strdup(t);
        types[n++] = 1;
        merges[nm++] = strdup(mg);
      }
  }
  int rc = 0;
  if (n < n_plain) {
    rc = q35_seterr(err, "--vocab %d is larger than the synthetic vocabulary can fill (%d)", V, n + N_SPECIAL);
  } else {
    int first_special = n;
    for (int i = 0; i < N_SPECIAL; i++) {
      tok[n] = strdup(specials[i]);
      types[n++] = i < 3 ? 3 : 4; /* control / user-defined, as in Qwen's files */
    }
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(w, "tokenizer.ggml.pre", "qwen35");
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n);
    gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n);
    gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, (uint64_t)nm);
    gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(first_special + 2));
    gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)first_special);
    gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)first_special);
    gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
  }
  for (int i = 0; i < n; i++) free(tok[i]);
  for (int i = 0; i < nm; i++) free(merges[i]);
  free(tok);
  free(merges);
  free(types);
  return rc;
}

static int file_type_of(int t, int down) {
  switch (t) {
    case Q35_TYPE_F32: return 0;
    case Q35_TYPE_F16: return 1;
    case Q35_TYPE_Q4_0: return 2;
    case Q35_TYPE_Q8_0: return 7;
    case Q35_TYPE_Q5_0: return 8;
    case Q35_TYPE_Q4_K: return down == Q35_TYPE_Q6_K ? 15 : 14;
    case Q35_TYPE_Q5_K: return down == Q35_TYPE_Q6_K ? 17 : 16;
    case Q35_TYPE_Q6_K: return 18;
    case Q35_TYPE_IQ4_XS: return 30;
    case Q35_TYPE_BF16: return 32;
    default: return 0;
  }
}

int q35_tiny_write(const q35_tiny_opts *o, const char *path, q35_err *err) {
  const char *bad = NULL;
  if (o->n_layer < 1 || o->n_layer > 256) bad = "--layers must be in [1, 256]";
  else if (o->n_embd < 1 || o->n_embd > 16384) bad = "--embd must be in [1, 16384]";
  else if (o->n_head < 1 || o->n_head_kv < 1 || o->n_head % o->n_head_kv) bad = "--heads must be a multiple of --kv-heads";
  else if (o->head_dim < 2 || o->n_rot < 2 || o->n_rot > o->head_dim || o->n_rot % 2) bad = "--rot must be even and <= --head-dim";
  else if (o->ssm_k_heads < 1 || o->ssm_v_heads % o->ssm_k_heads) bad = "--ssm-v-heads must be a multiple of --ssm-k-heads";
  else if (o->ssm_head_dim < 1 || o->conv_kernel < 1) bad = "--ssm-head-dim and --conv-kernel must be positive";
  else if (o->moe && (o->n_expert < 1 || o->n_expert_used < 1 || o->n_expert_used > o->n_expert || o->n_ff_exp < 1))
    bad = "--experts-used must be in [1, --experts] and --ff positive";
  else if (!o->moe && o->n_ff < 1) bad = "--ff must be positive";
  else if (o->interval < 1) bad = "--interval must be >= 1";
  else if (!q35_type_supported(o->type)) bad = "--type is not a supported weight type";
  if (bad) return q35_seterr(err, "tiny model: %s", bad);

  const char *arch = o->moe ? "qwen35moe" : "qwen35";
  int V = o->n_vocab;
  gguf_writer *w = gguf_writer_new();
  keep k = {0};
  k.pool = q35_pool_new((int)sysconf(_SC_NPROCESSORS_ONLN));
  rng r = {o->seed * 0x2545F4914F6CDD1Dull + 12345};
  char key[128], name[128];
  int rc = -1;
  const int H = o->n_embd, hd = o->head_dim, nh = o->n_head, nkv = o->n_head_kv;
  const int Hk = o->ssm_k_heads, Hv = o->ssm_v_heads, dk = o->ssm_head_dim, C = 2 * Hk * dk + Hv * dk;
  const int t_lin = o->type, t_down = o->type_down >= 0 ? o->type_down : o->type;
  const int t_out = o->type_output >= 0 ? o->type_output : o->type;
  const int t_embd = o->type_embd >= 0 ? o->type_embd : o->type;

  gguf_set_str(w, "general.architecture", arch);
  gguf_set_str(w, "general.name", "q35 tiny test model");
  gguf_set_u32(w, "general.file_type", (uint32_t)file_type_of(t_lin, t_down));
#define KU32(k_, v_)                                   \
  do {                                                 \
    snprintf(key, sizeof key, "%s.%s", arch, k_);      \
    gguf_set_u32(w, key, (uint32_t)(v_));              \
  } while (0)
  KU32("block_count", o->n_layer);
  KU32("context_length", o->n_ctx_train);
  KU32("embedding_length", H);
  if (!o->moe) KU32("feed_forward_length", o->n_ff);
  KU32("attention.head_count", nh);
  KU32("attention.head_count_kv", nkv);
  KU32("attention.key_length", hd);
  KU32("attention.value_length", hd);
  KU32("rope.dimension_count", o->n_rot);
  {
    const int s = o->n_rot / 2;
    int32_t sec[4] = {(s + 2) / 3, (s + 1) / 3, s / 3, 0};
    snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
    gguf_set_arr_i32(w, key, sec, 4);
  }
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  gguf_set_f32(w, key, o->rope_theta);
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  gguf_set_f32(w, key, 1e-6f);
  if (o->moe) {
    KU32("expert_count", o->n_expert);
    KU32("expert_used_count", o->n_expert_used);
    KU32("expert_feed_forward_length", o->n_ff_exp);
    KU32("expert_shared_feed_forward_length", o->n_ff_shexp);
  }
  KU32("ssm.conv_kernel", o->conv_kernel);
  KU32("ssm.state_size", dk);
  KU32("ssm.group_count", Hk);
  KU32("ssm.time_step_rank", Hv);
  KU32("ssm.inner_size", Hv * dk);
  KU32("full_attention_interval", o->interval);
#undef KU32
  if (o->tokenizer_json) {
    /* a real tokenizer (e.g. Qwen3's tokenizer.json): the vocabulary is padded to --vocab, or
     * --vocab is raised to the tokenizer's size */
    q35_tokenizer *t = q35_tokenizer_from_json(o->tokenizer_json, o->tokenizer_config, err);
    if (!t) goto done;
    const int32_t nt = q35_tokenizer_n_vocab(t);
    if (V < nt) V = nt; /* the embedding and output get the tokenizer's size */
    int wrc = q35_tokenizer_write_gguf_padded(t, w, NULL, V > nt ? V : 0);
    q35_tokenizer_free(t);
    if (wrc) {
      rc = q35_seterr(err, "tiny model: cannot write the tokenizer block");
      goto done;
    }
  } else if (write_synthetic_vocab(w, V, err)) {
    goto done;
  }

#define T2(nm_, ty_, a_, b_, kind_) \
  if (add(w, &k, &r, nm_, ty_, 2, a_, b_, 1, kind_)) goto tensor_fail
#define T1(nm_, a_, kind_) \
  if (add(w, &k, &r, nm_, Q35_TYPE_F32, 1, a_, 1, 1, kind_)) goto tensor_fail
  T2("token_embd.weight", t_embd, H, V, INIT_EMBD);
  T1("output_norm.weight", H, INIT_NORM);
  if (!o->tied) T2("output.weight", t_out, H, V, INIT_OUT);
  for (int il = 0; il < o->n_layer; il++) {
    const int is_attn = (il + 1) % o->interval == 0;
#define N(s_) (snprintf(name, sizeof name, "blk.%d.%s", il, s_), name)
    T1(N("attn_norm.weight"), H, INIT_NORM);
    T1(N("post_attention_norm.weight"), H, INIT_NORM);
    if (is_attn) {
      T2(N("attn_q.weight"), t_lin, H, nh * hd * 2, INIT_MATRIX);
      T2(N("attn_k.weight"), t_lin, H, nkv * hd, INIT_MATRIX);
      T2(N("attn_v.weight"), t_down, H, nkv * hd, INIT_MATRIX);
      T2(N("attn_output.weight"), t_lin, nh * hd, H, INIT_MATRIX);
      T1(N("attn_q_norm.weight"), hd, INIT_NORM);
      T1(N("attn_k_norm.weight"), hd, INIT_NORM);
    } else {
      T2(N("attn_qkv.weight"), t_lin, H, C, INIT_MATRIX);
      T2(N("attn_gate.weight"), t_lin, H, Hv * dk, INIT_MATRIX);
      T2(N("ssm_beta.weight"), t_lin, H, Hv, INIT_MATRIX);
      T2(N("ssm_alpha.weight"), t_lin, H, Hv, INIT_MATRIX);
      if (add(w, &k, &r, N("ssm_conv1d.weight"), Q35_TYPE_F32, 2, o->conv_kernel, C, 1, INIT_CONV)) goto tensor_fail;
      T1(N("ssm_dt.bias"), Hv, INIT_DT);
      T1(N("ssm_a"), Hv, INIT_A);
      T1(N("ssm_norm.weight"), dk, INIT_NORM);
      T2(N("ssm_out.weight"), t_lin, Hv * dk, H, INIT_MATRIX);
    }
    if (o->moe) {
      const int E = o->n_expert, I = o->n_ff_exp;
      if (add(w, &k, &r, N("ffn_gate_inp.weight"), Q35_TYPE_F32, 2, H, E, 1, INIT_MATRIX)) goto tensor_fail;
      if (o->merged_gate_up) {
        if (add(w, &k, &r, N("ffn_gate_up_exps.weight"), t_lin, 3, H, 2 * I, E, INIT_MATRIX)) goto tensor_fail;
      } else {
        if (add(w, &k, &r, N("ffn_gate_exps.weight"), t_lin, 3, H, I, E, INIT_MATRIX)) goto tensor_fail;
        if (add(w, &k, &r, N("ffn_up_exps.weight"), t_lin, 3, H, I, E, INIT_MATRIX)) goto tensor_fail;
      }
      if (add(w, &k, &r, N("ffn_down_exps.weight"), t_down, 3, I, H, E, INIT_MATRIX)) goto tensor_fail;
      if (o->n_ff_shexp > 0) {
        T2(N("ffn_gate_shexp.weight"), t_lin, H, o->n_ff_shexp, INIT_MATRIX);
        T2(N("ffn_up_shexp.weight"), t_lin, H, o->n_ff_shexp, INIT_MATRIX);
        T2(N("ffn_down_shexp.weight"), t_down, o->n_ff_shexp, H, INIT_MATRIX);
        T1(N("ffn_gate_inp_shexp.weight"), H, INIT_MATRIX);
      }
    } else {
      T2(N("ffn_gate.weight"), t_lin, H, o->n_ff, INIT_MATRIX);
      T2(N("ffn_up.weight"), t_lin, H, o->n_ff, INIT_MATRIX);
      T2(N("ffn_down.weight"), t_down, o->n_ff, H, INIT_MATRIX);
    }
#undef N
  }
#undef T1
#undef T2
  rc = gguf_writer_save(w, path, err);
  goto done;
tensor_fail:
  rc = q35_seterr(err, "tiny model: could not add tensor '%s'", name);
done:
  for (int i = 0; i < k.n; i++) free(k.bufs[i]);
  free(k.bufs);
  gguf_writer_free(w);
  q35_pool_free(k.pool);
  return rc;
}
