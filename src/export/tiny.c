/*
 * tiny.c - writes random-weight Qwen3.5 GGUF files (see tiny.h).
 *
 * Tensor names, shapes, metadata keys and dtype rules are those of llama.cpp's converter
 * (the model notes, docs/DESIGN.md): norms, conv, ssm_a, ssm_dt.bias, the router and the shared-expert
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

#include "base/buf.h"
#include "base/util.h"
#include "engine/threadpool.h"
#include "export/imatrix.h"
#include "export/qwen35_gguf.h"
#include "export/recipe.h"
#include "format/gguf.h"
#include "format/gguf_names.h"
#include "kernels/quant.h"
#include "text/tokenizer.h"

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
  o.mtp_agree = -1;
  o.recipe = -1;
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

/* The fixed values of every tiny model */
#define TINY_MODEL_NAME "q35 tiny test model"
#define TINY_RMS_EPS 1e-6f
/* the random stream's start: seed * MUL + ADD (an LCG multiplier, so nearby seeds diverge) */
#define TINY_SEED_MUL 0x2545F4914F6CDD1Dull
#define TINY_SEED_ADD 12345

/* INIT_RESID: a matrix writing into the residual stream (attn_output, ssm_out, ffn_down*); the
 * AGREE kinds are those of --mtp-agree (tiny.h) and plain INIT_MATRIX / INIT_OUT without it. */
typedef enum {
  INIT_MATRIX, INIT_NORM, INIT_CONV, INIT_DT, INIT_A, INIT_EMBD, INIT_OUT, INIT_RESID, INIT_EH_PROJ, INIT_MTP_EMBD
} init_kind;

/* --mtp-agree: the trunk predicts pi(x) after x (output row v = OUT_SCALE * embed(pi^-1(v)), every
 * residual-writing matrix scaled by RESID_SCALE so the stream stays close to the embedding); the
 * head sees embed(t) through eh_proj = [I | 0] and so predicts pi(t), except for tokens t outside
 * the agreeing set, whose head embedding (nextn.embed_tokens) is that of another token sigma(t). */
#define AGREE_OUT_SCALE 0.05f
#define AGREE_RESID_SCALE 0.05f
typedef struct {
  int on;
  uint64_t embd_key;   /* token_embd's generator key: its rows are regenerated from it */
  int32_t *pi_inv;     /* [V] */
  int32_t *head_src;   /* [V] the token whose embedding row the head's embedding row u copies */
} tiny_agree;

/* ---- tensors are generated, converted and kept until the file is written ---- */
typedef struct {
  void **bufs;
  size_t n, cap;
  q35_pool *pool; /* generates the rows of a tensor in parallel */
  const q35_imatrix *im; /* importance weights for the quantizers, or NULL */
} keep;

/* A zeroed buffer kept until the file is written; NULL when out of memory. */
static void *keep_add(keep *k, size_t bytes) {
  if (q35_grow((void **)&k->bufs, &k->cap, k->n + 1, sizeof *k->bufs)) return NULL;
  void *p = calloc(1, bytes ? bytes : 1);
  if (p) k->bufs[k->n++] = p;
  return p;
}

typedef struct {
  uint64_t key;     /* seed and tensor number */
  int type;
  int64_t ne0, rows;
  init_kind kind;
  char *data;
  const tiny_agree *ag;
  const char *name;      /* for the importance weights */
  int64_t ne1;           /* rows per matrix (expert) */
  const q35_imatrix *im;
} gen_task;

/* Row u of token_embd (INIT_EMBD with key), regenerated. */
static void embd_row(uint64_t key, int64_t u, int64_t ne0, float *row) {
  rng r = {key ^ ((uint64_t)u * 0xD1B54A32D192ED03ull)};
  rng_next(&r);
  for (int64_t j = 0; j < ne0; j++) row[j] = rng_normal(&r);
}

/* The --mtp-agree rows; 0 when the kind is not one of them (or agreement is off). */
static int agree_row(const gen_task *g, long i, float *row) {
  const tiny_agree *ag = g->ag;
  if (!ag || !ag->on) return 0;
  switch (g->kind) {
    case INIT_OUT:
      embd_row(ag->embd_key, ag->pi_inv[i], g->ne0, row);
      for (int64_t j = 0; j < g->ne0; j++) row[j] *= AGREE_OUT_SCALE;
      return 1;
    case INIT_MTP_EMBD: embd_row(ag->embd_key, ag->head_src[i], g->ne0, row); return 1;
    case INIT_EH_PROJ:
      for (int64_t j = 0; j < g->ne0; j++) row[j] = j == i ? 1.0f : 0.0f;
      return 1;
    default: return 0;
  }
}

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
    const float resid = g->kind == INIT_RESID && g->ag && g->ag->on ? AGREE_RESID_SCALE : 1.0f;
    for (int64_t j = 0; !agree_row(g, i, row) && j < g->ne0; j++) {
      float v;
      switch (g->kind) {
        case INIT_NORM: v = 1.0f + 0.1f * rng_normal(&r); break;
        case INIT_CONV: v = 0.5f * rng_normal(&r); break;
        case INIT_DT: v = 0.5f * rng_normal(&r); break;
        case INIT_A: v = -expf(2.0f * (float)rng_unif(&r)); break;
        case INIT_EMBD: v = rng_normal(&r); break;
        case INIT_OUT: v = 2.0f * mstd * rng_normal(&r); break;
        default: v = resid * mstd * rng_normal(&r); break;
      }
      row[j] = v;
    }
    int bad;
    q35_err ignored;
    const float *qw = q35_imatrix_weights(g->im, g->name, g->ne0, i / g->ne1, &bad, &ignored); /* checked in add */
    if (g->type == Q35_TYPE_F32) memcpy(g->data + (size_t)i * rb, row, rb);
    else q35_quantize_row_imatrix(g->type, row, g->data + (size_t)i * rb, g->ne0, qw);
  }
  free(row);
}

static int add(gguf_writer *w, keep *k, rng *r, const char *name, int type, int n_dims, int64_t ne0, int64_t ne1,
               int64_t ne2, init_kind kind, tiny_agree *ag, int recipe, int dry_run, int *missing) {
  int64_t ne[4] = {ne0, ne1, ne2, 1};
  if (type != Q35_TYPE_F32) type = q35_export_fallback_type(type, ne0, 0);
  gen_task g = {rng_next(r), type, ne0, ne1 * ne2, kind, NULL, ag, name, ne1, type == Q35_TYPE_F32 ? NULL : k->im};
  q35_err e;
  if (type != Q35_TYPE_F32 &&
      q35_imatrix_check(k->im, name, type, q35_recipe_needs_imatrix(recipe, name, type), ne0, ne2, dry_run, missing,
                        &e)) {
    fprintf(stderr, "q35 export: %s\n", e.msg);
    return -1;
  }
  if (dry_run) return printf("%s %s\n", name, q35_type_name(type)) < 0 ? -1 : 0;
  if (kind == INIT_EMBD) ag->embd_key = g.key;
  g.data = keep_add(k, q35_row_size(type, ne0) * (size_t)g.rows);
  if (!g.data) return -1;
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
#define N_CONTROL 3      /* the first three specials are control tokens, the rest user-defined */
#define SPECIAL_IM_END 2 /* <|im_end|>: the end of a turn, the eos */
#define N_BYTES 256      /* byte-level BPE: one symbol per byte value */
#define MAX_WORD 6       /* longest letter string the synthetic merges build */
/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type) */
#define TOKEN_NORMAL 1
#define TOKEN_CONTROL 3
#define TOKEN_USER_DEFINED 4
/* tokenizer.ggml.model / .pre values of a Qwen byte-level BPE */
#define TOKENIZER_MODEL_BPE "gpt2"
#define TOKENIZER_PRE_QWEN35 "qwen35"

static int write_synthetic_vocab(gguf_writer *w, int V, q35_err *err) {
  if (V < N_BYTES + N_SPECIAL + 1)
    return q35_seterr(err, "--vocab must be at least %d for the synthetic vocabulary", N_BYTES + N_SPECIAL + 1);
  char **tok = calloc((size_t)V, sizeof *tok);
  char **merges = calloc((size_t)V, sizeof *merges);
  int32_t *types = calloc((size_t)V, sizeof *types);
  int n = 0, nm = 0;
  for (int b = 0; b < N_BYTES; b++) {
    char s[4];
    byte_symbol(b, s);
    tok[n] = strdup(s);
    types[n++] = TOKEN_NORMAL;
  }
  const int n_plain = V - N_SPECIAL;
  const char *sp = "\xc4\xa0"; /* 'Ġ' (space) */
  /* by length L = 1, 2, ...: every letter string s of length L as "Ġ"+s (merge "Ġ"+s[:-1] s[-1])
   * and, for L >= 2, s itself (merge s[:-1] s[-1]); each merge's parts exist already */
  for (int L = 1; L <= MAX_WORD && n < n_plain; L++) {
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
        types[n++] = TOKEN_NORMAL;
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
      types[n++] = i < N_CONTROL ? TOKEN_CONTROL : TOKEN_USER_DEFINED; /* as in Qwen's files */
    }
#define KEY(id) q35_gguf_key(Q35_KEY_##id, NULL).s
    gguf_set_str(w, KEY(TOKENIZER_MODEL), TOKENIZER_MODEL_BPE);
    gguf_set_str(w, KEY(TOKENIZER_PRE), TOKENIZER_PRE_QWEN35);
    gguf_set_arr_str(w, KEY(TOKENIZER_TOKENS), (const char *const *)tok, (uint64_t)n);
    gguf_set_arr_i32(w, KEY(TOKENIZER_TOKEN_TYPE), types, (uint64_t)n);
    gguf_set_arr_str(w, KEY(TOKENIZER_MERGES), (const char *const *)merges, (uint64_t)nm);
    gguf_set_u32(w, KEY(TOKENIZER_EOS_ID), (uint32_t)(first_special + SPECIAL_IM_END));
    gguf_set_u32(w, KEY(TOKENIZER_PAD_ID), (uint32_t)first_special);
    gguf_set_u32(w, KEY(TOKENIZER_BOS_ID), (uint32_t)first_special);
    gguf_set_bool(w, KEY(TOKENIZER_ADD_BOS), 0);
#undef KEY
  }
  for (int i = 0; i < n; i++) free(tok[i]);
  for (int i = 0; i < nm; i++) free(merges[i]);
  free(tok);
  free(merges);
  free(types);
  return rc;
}

static const char *check_opts(const q35_tiny_opts *o) {
  if (o->n_layer < 1 || o->n_layer > Q35_TINY_MAX_LAYERS) return "--layers must be in [1, 256]";
  if (o->n_embd < 1 || o->n_embd > Q35_TINY_MAX_EMBD) return "--embd must be in [1, 16384]";
  if (o->n_head < 1 || o->n_head_kv < 1 || o->n_head % o->n_head_kv) return "--heads must be a multiple of --kv-heads";
  if (o->head_dim < 2 || o->n_rot < 2 || o->n_rot > o->head_dim || o->n_rot % 2)
    return "--rot must be even and <= --head-dim";
  if (o->ssm_k_heads < 1 || o->ssm_v_heads % o->ssm_k_heads) return "--ssm-v-heads must be a multiple of --ssm-k-heads";
  if (o->ssm_head_dim < 1 || o->conv_kernel < 1) return "--ssm-head-dim and --conv-kernel must be positive";
  if (o->moe && (o->n_expert < 1 || o->n_expert_used < 1 || o->n_expert_used > o->n_expert || o->n_ff_exp < 1))
    return "--experts-used must be in [1, --experts] and --ff positive";
  if (!o->moe && o->n_ff < 1) return "--ff must be positive";
  if (o->interval < 1) return "--interval must be >= 1";
  if (o->mtp_agree >= 0 && (o->mtp_agree > 1 || o->tied))
    return "--mtp-agree must be in [0, 1] and needs an untied output matrix (no --tied)";
  if (o->mtp_agree_vocab < 0 || (o->mtp_agree_vocab > 0 && (o->mtp_agree < 0 || o->mtp_agree_vocab > o->n_vocab)))
    return "--mtp-agree-vocab K needs --mtp-agree and K in [1, the vocabulary size]";
  if (!q35_type_supported(o->type) || !q35_type_quantizable(o->type))
    return "--type is not a supported weight type (or q35 cannot quantize to it yet)";
  return NULL;
}

/* general.* and the architecture's block */
static void write_hparams(gguf_writer *w, const q35_tiny_opts *o, int t_lin, int t_down) {
  gguf_set_str(w, q35_gguf_key(Q35_KEY_GENERAL_ARCHITECTURE, NULL).s, q35_export_arch(o->moe));
  gguf_set_str(w, q35_gguf_key(Q35_KEY_GENERAL_NAME, NULL).s, TINY_MODEL_NAME);
  gguf_set_u32(w, q35_gguf_key(Q35_KEY_GENERAL_FILE_TYPE, NULL).s, (uint32_t)q35_gguf_file_type(t_lin, t_down));
  q35_export_hparams h = {
      .moe = o->moe, .n_layer = o->n_layer, .n_ctx_train = o->n_ctx_train, .n_embd = o->n_embd, .n_ff = o->n_ff,
      .n_head = o->n_head, .n_head_kv = o->n_head_kv, .head_dim = o->head_dim, .n_rot = o->n_rot,
      .rope_theta = o->rope_theta, .rms_eps = TINY_RMS_EPS,
      .n_expert = o->n_expert, .n_expert_used = o->n_expert_used, .n_ff_exp = o->n_ff_exp,
      .n_ff_shexp = o->n_ff_shexp, .conv_kernel = o->conv_kernel, .ssm_state = o->ssm_head_dim,
      .ssm_k_heads = o->ssm_k_heads, .ssm_v_heads = o->ssm_v_heads, .ssm_inner = o->ssm_v_heads * o->ssm_head_dim,
      .interval = o->interval, .n_nextn = o->mtp ? 1 : 0};
  q35_export_rope_sections(o->n_rot, h.rope_sections);
  q35_export_write_hparams(w, &h);
}

/* The tokenizer block: a real tokenizer (e.g. Qwen3's tokenizer.json), its vocabulary padded
 * to *V or *V raised to the tokenizer's size, or the synthetic vocabulary of *V tokens. */
static int write_vocab(gguf_writer *w, const q35_tiny_opts *o, int *V, q35_err *err) {
  if (!o->tokenizer_json) return write_synthetic_vocab(w, *V, err);
  q35_tokenizer *t = q35_tokenizer_from_json(o->tokenizer_json, o->tokenizer_config, err);
  if (!t) return -1;
  const int32_t nt = q35_tokenizer_n_vocab(t);
  if (*V < nt) *V = nt; /* the embedding and output get the tokenizer's size */
  int wrc = q35_tokenizer_write_gguf_padded(t, w, NULL, *V > nt ? *V : 0);
  q35_tokenizer_free(t);
  if (wrc) return q35_seterr(err, "tiny model: cannot write the tokenizer block");
  return 0;
}

/* What adding tensors needs: the writer, the kept buffers, the random stream, the types. */
typedef struct tiny_ctx {
  gguf_writer *w;
  keep k;
  rng r;
  const q35_tiny_opts *o;
  int V, t_lin, t_down, t_out, t_embd;
  q35_gguf_name name; /* the tensor being added (for the error message) */
  tiny_agree ag;
  q35_recipe_model rm; /* what the recipe's rules look at (o->recipe >= 0) */
  int missing_imatrix;  /* dry run: a tensor needs importance weights it has not got */
} tiny_ctx;

/* Was tensor id's type given explicitly (so that it overrides the recipe)? */
static int type_given(const tiny_ctx *c, q35_gguf_tensor_id id) {
  const q35_tiny_opts *o = c->o;
  switch (id) {
    case Q35_TENSOR_TOKEN_EMBD: return o->type_embd >= 0;
    case Q35_TENSOR_OUTPUT: return o->type_output >= 0;
    case Q35_TENSOR_FFN_DOWN_EXPS:
    case Q35_TENSOR_FFN_DOWN_SHEXP:
    case Q35_TENSOR_FFN_DOWN:
    case Q35_TENSOR_ATTN_V: return o->type_down >= 0;
    default: return o->type_set;
  }
}

/* Add tensor id of layer il (ignored for whole-model tensors), random rows of `kind`. */
static int tensor(tiny_ctx *c, q35_gguf_tensor_id id, int il, int type, int n_dims, int64_t ne0, int64_t ne1,
                  int64_t ne2, init_kind kind) {
  c->name = q35_gguf_tensor(id, il);
  if (c->o->recipe >= 0 && !type_given(c, id) && q35_recipe_quantizes(c->name.s, n_dims)) {
    q35_err e;
    type = q35_recipe_tensor_type(c->o->recipe, &c->rm, c->name.s, n_dims, ne0, ne2, type, &e);
    if (type < 0) {
      fprintf(stderr, "q35 export: %s\n", e.msg);
      return -1;
    }
  }
  return add(c->w, &c->k, &c->r, c->name.s, type, n_dims, ne0, ne1, ne2, kind, &c->ag, c->o->recipe, c->o->dry_run,
             &c->missing_imatrix);
}

static int add_attention(tiny_ctx *c, int il) {
  const q35_tiny_opts *o = c->o;
  const int H = o->n_embd, hd = o->head_dim, nh = o->n_head, nkv = o->n_head_kv, f32 = Q35_TYPE_F32;
  return tensor(c, Q35_TENSOR_ATTN_Q, il, c->t_lin, 2, H, nh * hd * 2, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_ATTN_K, il, c->t_lin, 2, H, nkv * hd, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_ATTN_V, il, c->t_down, 2, H, nkv * hd, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_ATTN_OUTPUT, il, c->t_lin, 2, nh * hd, H, 1, INIT_RESID) ||
         tensor(c, Q35_TENSOR_ATTN_Q_NORM, il, f32, 1, hd, 1, 1, INIT_NORM) ||
         tensor(c, Q35_TENSOR_ATTN_K_NORM, il, f32, 1, hd, 1, 1, INIT_NORM);
}

static int add_deltanet(tiny_ctx *c, int il) {
  const q35_tiny_opts *o = c->o;
  const int H = o->n_embd, Hk = o->ssm_k_heads, Hv = o->ssm_v_heads, dk = o->ssm_head_dim, f32 = Q35_TYPE_F32;
  const int C = 2 * Hk * dk + Hv * dk;
  return tensor(c, Q35_TENSOR_ATTN_QKV, il, c->t_lin, 2, H, C, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_ATTN_GATE, il, c->t_lin, 2, H, Hv * dk, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_SSM_BETA, il, c->t_lin, 2, H, Hv, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_SSM_ALPHA, il, c->t_lin, 2, H, Hv, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_SSM_CONV1D, il, f32, 2, o->conv_kernel, C, 1, INIT_CONV) ||
         tensor(c, Q35_TENSOR_SSM_DT_BIAS, il, f32, 1, Hv, 1, 1, INIT_DT) ||
         tensor(c, Q35_TENSOR_SSM_A, il, f32, 1, Hv, 1, 1, INIT_A) ||
         tensor(c, Q35_TENSOR_SSM_NORM, il, f32, 1, dk, 1, 1, INIT_NORM) ||
         tensor(c, Q35_TENSOR_SSM_OUT, il, c->t_lin, 2, Hv * dk, H, 1, INIT_RESID);
}

static int add_moe(tiny_ctx *c, int il) {
  const q35_tiny_opts *o = c->o;
  const int H = o->n_embd, E = o->n_expert, I = o->n_ff_exp, Is = o->n_ff_shexp;
  if (tensor(c, Q35_TENSOR_FFN_GATE_INP, il, Q35_TYPE_F32, 2, H, E, 1, INIT_MATRIX)) return -1;
  if (o->merged_gate_up) {
    if (tensor(c, Q35_TENSOR_FFN_GATE_UP_EXPS, il, c->t_lin, 3, H, 2 * I, E, INIT_MATRIX)) return -1;
  } else if (tensor(c, Q35_TENSOR_FFN_GATE_EXPS, il, c->t_lin, 3, H, I, E, INIT_MATRIX) ||
             tensor(c, Q35_TENSOR_FFN_UP_EXPS, il, c->t_lin, 3, H, I, E, INIT_MATRIX)) {
    return -1;
  }
  if (tensor(c, Q35_TENSOR_FFN_DOWN_EXPS, il, c->t_down, 3, I, H, E, INIT_RESID)) return -1;
  if (Is <= 0) return 0;
  return tensor(c, Q35_TENSOR_FFN_GATE_SHEXP, il, c->t_lin, 2, H, Is, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_FFN_UP_SHEXP, il, c->t_lin, 2, H, Is, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_FFN_DOWN_SHEXP, il, c->t_down, 2, Is, H, 1, INIT_RESID) ||
         tensor(c, Q35_TENSOR_FFN_GATE_INP_SHEXP, il, Q35_TYPE_F32, 1, H, 1, 1, INIT_MATRIX);
}

static int add_dense_ffn(tiny_ctx *c, int il) {
  const int H = c->o->n_embd, F = c->o->n_ff;
  return tensor(c, Q35_TENSOR_FFN_GATE, il, c->t_lin, 2, H, F, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_FFN_UP, il, c->t_lin, 2, H, F, 1, INIT_MATRIX) ||
         tensor(c, Q35_TENSOR_FFN_DOWN, il, c->t_down, 2, F, H, 1, INIT_RESID);
}

/* The MTP block after the trunk (after every trunk tensor, so the trunk's random weights are
 * those of the same file without it): a full-attention layer with the trunk's FFN kind, then
 * eh_proj {2H, H} (input concat[enorm(embed), hnorm(h)]) and the three norms. */
static int add_mtp(tiny_ctx *c, int il) {
  const q35_tiny_opts *o = c->o;
  const int H = o->n_embd, f32 = Q35_TYPE_F32;
  return tensor(c, Q35_TENSOR_ATTN_NORM, il, f32, 1, H, 1, 1, INIT_NORM) ||
         tensor(c, Q35_TENSOR_POST_ATTN_NORM, il, f32, 1, H, 1, 1, INIT_NORM) || add_attention(c, il) ||
         (o->moe ? add_moe(c, il) : add_dense_ffn(c, il)) ||
         tensor(c, Q35_TENSOR_NEXTN_EH_PROJ, il, c->t_lin, 2, 2 * H, H, 1, INIT_EH_PROJ) ||
         tensor(c, Q35_TENSOR_NEXTN_ENORM, il, f32, 1, H, 1, 1, INIT_NORM) ||
         tensor(c, Q35_TENSOR_NEXTN_HNORM, il, f32, 1, H, 1, 1, INIT_NORM) ||
         tensor(c, Q35_TENSOR_NEXTN_SHARED_HEAD_NORM, il, f32, 1, H, 1, 1, INIT_NORM) ||
         (c->ag.on && tensor(c, Q35_TENSOR_NEXTN_EMBED_TOKENS, il, c->t_embd, 2, H, c->V, 1, INIT_MTP_EMBD));
}

/* --mtp-agree RATE: a random permutation pi, and the head's embedding source of every token (itself
 * with probability RATE, else another token). */
static int agree_init(tiny_ctx *c) {
  const int V = c->V;
  tiny_agree *ag = &c->ag;
  ag->pi_inv = malloc(sizeof(int32_t) * (size_t)V);
  ag->head_src = malloc(sizeof(int32_t) * (size_t)V);
  if (!ag->pi_inv || !ag->head_src) return -1;
  rng r = {c->o->seed * TINY_SEED_MUL + 777};
  for (int i = 0; i < V; i++) ag->pi_inv[i] = i;
  const int K = c->o->mtp_agree_vocab > 0 && c->o->mtp_agree_vocab < V ? c->o->mtp_agree_vocab : 0;
  for (int i = V - 1; i > 0; i--) { /* Fisher-Yates (within [0, K) and [K, V) with mtp_agree_vocab) */
    const int lo = K && i >= K ? K : 0;
    if (i == lo) continue;
    const int j = lo + (int)(rng_next(&r) % (uint64_t)(i - lo + 1));
    const int32_t t = ag->pi_inv[i];
    ag->pi_inv[i] = ag->pi_inv[j];
    ag->pi_inv[j] = t;
  }
  for (int u = 0; u < V; u++) {
    const int agree = rng_unif(&r) < c->o->mtp_agree;
    const int32_t other = (int32_t)((u + 1 + (int64_t)(rng_next(&r) % (uint64_t)(V > 1 ? V - 1 : 1))) % V);
    ag->head_src[u] = agree || V < 2 ? u : other;
  }
  ag->on = 1;
  return 0;
}

/* Every tensor, in llama.cpp's order (the random stream follows it). */
static int add_tensors(tiny_ctx *c) {
  const q35_tiny_opts *o = c->o;
  const int H = o->n_embd;
  if (tensor(c, Q35_TENSOR_TOKEN_EMBD, 0, c->t_embd, 2, H, c->V, 1, INIT_EMBD) ||
      tensor(c, Q35_TENSOR_OUTPUT_NORM, 0, Q35_TYPE_F32, 1, H, 1, 1, INIT_NORM) ||
      (!o->tied && tensor(c, Q35_TENSOR_OUTPUT, 0, c->t_out, 2, H, c->V, 1, INIT_OUT)))
    return -1;
  for (int il = 0; il < o->n_layer; il++) {
    const int is_attn = (il + 1) % o->interval == 0;
    if (tensor(c, Q35_TENSOR_ATTN_NORM, il, Q35_TYPE_F32, 1, H, 1, 1, INIT_NORM) ||
        tensor(c, Q35_TENSOR_POST_ATTN_NORM, il, Q35_TYPE_F32, 1, H, 1, 1, INIT_NORM) ||
        (is_attn ? add_attention(c, il) : add_deltanet(c, il)) || (o->moe ? add_moe(c, il) : add_dense_ffn(c, il)))
      return -1;
  }
  return o->mtp ? add_mtp(c, o->n_layer) : 0;
}

int q35_tiny_write(const q35_tiny_opts *o, const char *path, q35_err *err) {
  const char *bad = check_opts(o);
  if (bad) return q35_seterr(err, "tiny model: %s", bad);
  tiny_ctx c = {.o = o, .V = o->n_vocab};
  c.w = gguf_writer_new();
  c.k.pool = q35_pool_new((int)sysconf(_SC_NPROCESSORS_ONLN));
  c.r.s = o->seed * TINY_SEED_MUL + TINY_SEED_ADD;
  c.t_lin = o->type;
  c.t_down = o->type_down >= 0 ? o->type_down : o->type;
  c.t_out = o->type_output >= 0 ? o->type_output : o->type;
  c.t_embd = o->type_embd >= 0 ? o->type_embd : o->type;
  c.k.im = o->imatrix;
  c.rm = (q35_recipe_model){.n_layer_all = o->n_layer + (o->mtp ? 1 : 0), .n_expert = o->moe ? o->n_expert : 0,
                            .n_head = o->n_head, .n_head_kv = o->n_head_kv, .tied = o->tied,
                            .has_imatrix = o->imatrix != NULL, .n_down_per_layer = o->moe && o->n_ff_shexp > 0 ? 2 : 1};
  int rc = -1;
  if (!c.w || !c.k.pool) {
    rc = q35_seterr(err, "tiny model: out of memory");
  } else {
    write_hparams(c.w, o, c.t_lin, c.t_down);
    if (o->recipe >= 0)
      gguf_set_u32(c.w, q35_gguf_key(Q35_KEY_GENERAL_FILE_TYPE, NULL).s, (uint32_t)q35_recipe_ftype(o->recipe));
    if (write_vocab(c.w, o, &c.V, err) == 0) {
      if (o->mtp_agree >= 0 && agree_init(&c)) rc = q35_seterr(err, "tiny model: out of memory");
      else if (add_tensors(&c)) rc = q35_seterr(err, "tiny model: could not add tensor '%s'", c.name.s);
      else if (o->dry_run) {
        rc = 0;
        if (c.missing_imatrix)
          fprintf(stderr, "q35 export: dry run: writing this file needs importance weights (--imatrix FILE) for some "
                          "tensors\n");
      }
      else {
        gguf_writer_set_split(c.w, &o->split);
        rc = gguf_writer_save(c.w, path, err);
      }
    }
  }
  free(c.ag.pi_inv);
  free(c.ag.head_src);
  for (size_t i = 0; i < c.k.n; i++) free(c.k.bufs[i]);
  free(c.k.bufs);
  gguf_writer_free(c.w);
  q35_pool_free(c.k.pool);
  return rc;
}
