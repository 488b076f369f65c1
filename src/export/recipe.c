/*
 * recipe.c - llama-quantize's recipes as tables and rules (see recipe.h). The facts (which
 * tensor gets which type, the layer tests, the fallbacks) are those of llama.cpp's
 * llama_tensor_get_type at the peer's commit, restricted to what applies to qwen35moe / qwen35
 * (not Falcon, not a 70B llama); tests/test_recipe_peer.sh holds them equal to llama.cpp's own
 * choices on the same files.
 */
#include "export/recipe.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "format/tensor_types.h"
#include "kernels/quant.h"

/* llama_ftype numbers (llama.h) */
enum {
  FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
  FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17,
  FT_Q6_K = 18, FT_IQ2_XXS = 19, FT_IQ2_XS = 20, FT_Q2_K_S = 21, FT_IQ3_XS = 22, FT_IQ3_XXS = 23, FT_IQ1_S = 24,
  FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ3_M = 27, FT_IQ2_S = 28, FT_IQ2_M = 29, FT_IQ4_XS = 30, FT_IQ1_M = 31,
  FT_BF16 = 32, FT_MXFP4_MOE = 38,
};

/* name, llama_ftype, default type */
static const struct {
  const char *name;
  int ftype, type;
} recipes[] = {
    {"F32", FT_F32, Q35_TYPE_F32},          {"F16", FT_F16, Q35_TYPE_F16},
    {"BF16", FT_BF16, Q35_TYPE_BF16},       {"Q4_0", FT_Q4_0, Q35_TYPE_Q4_0},
    {"Q4_1", FT_Q4_1, Q35_TYPE_Q4_1},       {"Q5_0", FT_Q5_0, Q35_TYPE_Q5_0},
    {"Q5_1", FT_Q5_1, Q35_TYPE_Q5_1},       {"Q8_0", FT_Q8_0, Q35_TYPE_Q8_0},
    {"Q2_K", FT_Q2_K, Q35_TYPE_Q2_K},       {"Q3_K_S", FT_Q3_K_S, Q35_TYPE_Q3_K},
    {"Q3_K_M", FT_Q3_K_M, Q35_TYPE_Q3_K},   {"Q3_K_L", FT_Q3_K_L, Q35_TYPE_Q3_K},
    {"Q4_K_S", FT_Q4_K_S, Q35_TYPE_Q4_K},   {"Q4_K_M", FT_Q4_K_M, Q35_TYPE_Q4_K},
    {"Q5_K_S", FT_Q5_K_S, Q35_TYPE_Q5_K},   {"Q5_K_M", FT_Q5_K_M, Q35_TYPE_Q5_K},
    {"Q6_K", FT_Q6_K, Q35_TYPE_Q6_K},       {"IQ4_NL", FT_IQ4_NL, Q35_TYPE_IQ4_NL},
    {"IQ4_XS", FT_IQ4_XS, Q35_TYPE_IQ4_XS}, {"MXFP4_MOE", FT_MXFP4_MOE, Q35_TYPE_MXFP4},
    {"Q2_K_S", FT_Q2_K_S, Q35_TYPE_Q2_K},   {"IQ2_XXS", FT_IQ2_XXS, Q35_TYPE_IQ2_XXS},
    {"IQ2_XS", FT_IQ2_XS, Q35_TYPE_IQ2_XS}, {"IQ2_S", FT_IQ2_S, Q35_TYPE_IQ2_XS},
    {"IQ2_M", FT_IQ2_M, Q35_TYPE_IQ2_S},    {"IQ3_XXS", FT_IQ3_XXS, Q35_TYPE_IQ3_XXS},
    {"IQ3_XS", FT_IQ3_XS, Q35_TYPE_IQ3_S},  {"IQ3_S", FT_IQ3_S, Q35_TYPE_IQ3_S},
    {"IQ3_M", FT_IQ3_M, Q35_TYPE_IQ3_S},    {"IQ1_S", FT_IQ1_S, Q35_TYPE_IQ1_S},
    {"IQ1_M", FT_IQ1_M, Q35_TYPE_IQ1_M},
};
#define N_RECIPES (int)(sizeof recipes / sizeof recipes[0])

const char *q35_recipe_names(void) {
  return "q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q2_k_s, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, "
         "iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq2_m, iq3_xxs, iq3_xs, iq3_s, iq3_m, iq4_nl, iq4_xs, mxfp4_moe, "
         "bf16, f16, f32";
}

int q35_recipe_from_name(const char *name, q35_err *err) {
  for (int r = 0; r < N_RECIPES; r++)
    if (!strcasecmp(recipes[r].name, name)) return r;
  return q35_seterr(err, "--qtype: unknown recipe '%s' (llama-quantize's names, any case: %s)", name,
                    q35_recipe_names());
}

const char *q35_recipe_name(int r) { return r >= 0 && r < N_RECIPES ? recipes[r].name : NULL; }
int q35_recipe_ftype(int r) { return r >= 0 && r < N_RECIPES ? recipes[r].ftype : -1; }

/* ---- llama's tensor categories (by substring, in its order) ---- */
typedef enum { C_TOKEN_EMBD, C_ATTN_Q, C_ATTN_V, C_ATTN_K, C_ATTN_QKV, C_ATTN_OUTPUT, C_FFN_UP, C_FFN_GATE,
               C_FFN_DOWN, C_OUTPUT, C_OTHER } category;

static category categorize(const char *name) {
  if (!strcmp(name, "output.weight")) return C_OUTPUT;
  if (!strcmp(name, "token_embd.weight")) return C_TOKEN_EMBD;
  static const struct {
    const char *sub;
    category c;
  } subs[] = {{"attn_qkv.weight", C_ATTN_QKV}, {"attn_v.weight", C_ATTN_V},       {"attn_k.weight", C_ATTN_K},
              {"attn_q.weight", C_ATTN_Q},     {"attn_output.weight", C_ATTN_OUTPUT}, {"ffn_up", C_FFN_UP},
              {"ffn_gate", C_FFN_GATE},        {"ffn_down", C_FFN_DOWN}};
  for (size_t i = 0; i < sizeof subs / sizeof *subs; i++)
    if (strstr(name, subs[i].sub)) return subs[i].c;
  return C_OTHER;
}

int q35_recipe_quantizes(const char *name, int n_dims) {
  const size_t n = strlen(name);
  if (n_dims < 2 || n < 6 || strcmp(name + n - 6, "weight")) return 0;
  return !strstr(name, "_norm.weight") && !strstr(name, "ffn_gate_inp.weight") && !strstr(name, "ssm_conv1d");
}

/* llama's use_more_bits: the first and last eighth of the layers and every third in between */
static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* What a rule sees of the tensor and the model. */
typedef struct {
  int ft, il, n; /* recipe ftype; the tensor's layer (blk.il) and n_layer_all */
  int i_down;    /* the ffn_down tensor's place among all of them, in llama's order (see below) */
  int gqa, n_expert, has_imatrix;
} rule_ctx;

/* The very-low-bit recipes, which share one set of rules in llama (and need an importance matrix) */
static int very_low(int ft) {
  return ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ1_M;
}

/* their rules: small tensors raised to Q2_K / IQ3_S / Q4_K, the first eighth of ffn_down too */
static int type_very_low(const rule_ctx *c, category cat, int t) {
  const int s = c->ft == FT_IQ2_S || c->ft == FT_IQ2_M; /* the IQ2_S / IQ2_M recipes raise to IQ3_S */
  switch (cat) {
    case C_ATTN_V:
    case C_ATTN_QKV:
      if (c->gqa >= 4 || c->n_expert >= 4) return Q35_TYPE_Q4_K;
      return s ? Q35_TYPE_IQ3_S : Q35_TYPE_Q2_K;
    case C_ATTN_K: return c->n_expert == 8 ? Q35_TYPE_Q4_K : t;
    case C_FFN_DOWN: return c->i_down < c->n / 8 ? (s ? Q35_TYPE_IQ3_S : Q35_TYPE_Q2_K) : t;
    case C_ATTN_OUTPUT:
      if (c->n_expert == 8) return Q35_TYPE_Q5_K;
      if (c->ft == FT_IQ1_S || c->ft == FT_IQ1_M) return Q35_TYPE_IQ2_XXS;
      return s ? Q35_TYPE_IQ3_S : t;
    default: return t;
  }
}

static int type_attn_v(const rule_ctx *c, int t) {
  switch (c->ft) {
    case FT_Q2_K: t = c->gqa >= 4 ? Q35_TYPE_Q4_K : Q35_TYPE_Q3_K; break;
    case FT_Q2_K_S: if (c->gqa >= 4) t = Q35_TYPE_Q4_K; break;
    case FT_IQ3_XXS: t = c->gqa >= 4 ? Q35_TYPE_Q4_K : !c->has_imatrix ? Q35_TYPE_IQ3_S : Q35_TYPE_IQ3_XXS; break;
    case FT_IQ3_XS:
    case FT_IQ3_S: if (c->gqa >= 4) t = Q35_TYPE_Q4_K; break;
    case FT_IQ3_M: t = Q35_TYPE_Q4_K; break;
    case FT_Q3_K_M: t = c->il < 2 ? Q35_TYPE_Q5_K : Q35_TYPE_Q4_K; break;
    case FT_Q3_K_L: t = Q35_TYPE_Q5_K; break;
    case FT_IQ4_NL:
    case FT_IQ4_XS: if (c->gqa >= 4) t = Q35_TYPE_Q5_K; break;
    case FT_Q4_K_M:
    case FT_Q5_K_M: if (use_more_bits(c->il, c->n)) t = Q35_TYPE_Q6_K; break;
    case FT_Q4_K_S: if (c->il < 4) t = Q35_TYPE_Q5_K; break;
    default: break;
  }
  return c->n_expert == 8 ? Q35_TYPE_Q8_0 : t; /* llama's bump for 8-expert models */
}

static int type_ffn_down(const rule_ctx *c, int t) {
  const int i = c->il, n = c->n;
  switch (c->ft) {
    case FT_Q2_K: return Q35_TYPE_Q3_K;
    case FT_Q2_K_S: return i < n / 8 ? Q35_TYPE_Q4_K : t;
    case FT_IQ3_XXS: return c->has_imatrix ? t : i < n / 8 ? Q35_TYPE_Q4_K : Q35_TYPE_Q3_K;
    case FT_Q3_K_M: return i < n / 16 ? Q35_TYPE_Q5_K : Q35_TYPE_Q4_K;
    case FT_IQ3_M: return i < n / 8 || (c->n_expert == 8 && use_more_bits(i, n)) ? Q35_TYPE_Q4_K : t;
    case FT_Q3_K_L: return Q35_TYPE_Q5_K;
    case FT_Q4_K_M: return use_more_bits(i, n) ? Q35_TYPE_Q6_K : t;
    case FT_IQ4_NL:
    case FT_IQ4_XS: return i < n / 8 && !c->has_imatrix ? Q35_TYPE_Q5_K : t;
    case FT_Q5_K_M: return use_more_bits(i, n) ? Q35_TYPE_Q6_K : t;
    case FT_Q4_K_S: return i < n / 8 ? Q35_TYPE_Q5_K : t;
    case FT_Q4_0: return c->has_imatrix && i < n / 8 ? Q35_TYPE_Q4_1 : t;
    case FT_Q5_0: return c->has_imatrix && i < n / 8 ? Q35_TYPE_Q5_1 : t;
    default: return t;
  }
}

static int type_attn_output(const rule_ctx *c, int t) {
  if (c->n_expert == 8) {
    switch (c->ft) {
      case FT_Q2_K: case FT_IQ3_XS: case FT_IQ3_XXS: case FT_Q3_K_S: case FT_Q3_K_M: case FT_IQ4_NL: case FT_Q4_K_S:
      case FT_Q4_K_M: case FT_IQ3_S: case FT_IQ3_M: case FT_IQ4_XS:
        return Q35_TYPE_Q5_K;
      default: return t;
    }
  }
  switch (c->ft) {
    case FT_Q2_K: return Q35_TYPE_Q3_K;
    case FT_IQ3_XXS: return Q35_TYPE_IQ3_S;
    case FT_Q3_K_M: return Q35_TYPE_Q4_K;
    case FT_Q3_K_L: return Q35_TYPE_Q5_K;
    case FT_IQ3_M: return Q35_TYPE_Q4_K;
    default: return t;
  }
}

/* llama's token_embd type (an untied embedding) for the IQ recipes */
static int type_token_embd(const rule_ctx *c, int t) {
  switch (c->ft) {
    case FT_IQ2_XXS: case FT_IQ2_XS: case FT_IQ1_S: case FT_IQ1_M: return Q35_TYPE_Q2_K;
    case FT_IQ2_S: case FT_IQ2_M: case FT_IQ3_XXS: return Q35_TYPE_IQ3_S;
    default: return t;
  }
}

/* llama_tensor_get_type_impl for the recipes above; t is the recipe's default type */
static int rule_type(const rule_ctx *c, category cat, int tied, int64_t ne0, int64_t ne2, int t) {
  if (cat == C_OUTPUT || (tied && cat == C_TOKEN_EMBD)) {
    if (c->ft == FT_MXFP4_MOE || ne0 % q35_type_block(t)) return Q35_TYPE_Q8_0;
    if (very_low(c->ft) || c->ft == FT_IQ3_XXS) return Q35_TYPE_Q5_K;
    return t == Q35_TYPE_Q8_0 ? t : Q35_TYPE_Q6_K;
  }
  if (c->ft == FT_MXFP4_MOE) return ne2 > 1 ? Q35_TYPE_MXFP4 : Q35_TYPE_Q8_0; /* experts MXFP4, the rest Q8_0 */
  if (cat == C_TOKEN_EMBD) return type_token_embd(c, t);
  if (very_low(c->ft)) return type_very_low(c, cat, t);
  switch (cat) {
    case C_ATTN_V:
    case C_ATTN_QKV: return type_attn_v(c, t); /* llama's attn_v category holds attn_qkv */
    case C_ATTN_K:
      if (c->n_expert == 8) return Q35_TYPE_Q8_0;
      return c->ft == FT_IQ3_XS ? Q35_TYPE_IQ3_XXS : c->ft == FT_IQ3_XXS ? Q35_TYPE_IQ2_S : t;
    case C_ATTN_Q: return c->ft == FT_IQ3_XS ? Q35_TYPE_IQ3_XXS : c->ft == FT_IQ3_XXS ? Q35_TYPE_IQ2_S : t;
    case C_FFN_DOWN: return type_ffn_down(c, t);
    case C_ATTN_OUTPUT: return type_attn_output(c, t);
    case C_FFN_GATE:
    case C_FFN_UP: return c->ft == FT_IQ3_XS && c->il >= c->n / 8 && c->il < 7 * c->n / 8 ? Q35_TYPE_IQ3_XXS : t;
    default: return t;
  }
}

/* llama's fallback for a row length the type's block does not divide: a type of 32-blocks, and
 * f16 when that does not fit either */
static int fallback(int t, int64_t ne0) {
  if (ne0 % q35_type_block(t) == 0) return t;
  int f;
  switch (t) {
    case Q35_TYPE_IQ1_S: case Q35_TYPE_IQ1_M: case Q35_TYPE_IQ2_XXS: case Q35_TYPE_IQ2_XS: case Q35_TYPE_IQ2_S:
    case Q35_TYPE_IQ3_XXS: case Q35_TYPE_IQ3_S:
    case Q35_TYPE_IQ4_XS: f = Q35_TYPE_IQ4_NL; break;
    case Q35_TYPE_Q2_K:
    case Q35_TYPE_Q3_K: f = Q35_TYPE_Q4_0; break;
    case Q35_TYPE_Q4_K: f = Q35_TYPE_Q5_0; break;
    case Q35_TYPE_Q5_K: f = Q35_TYPE_Q5_1; break;
    case Q35_TYPE_Q6_K: f = Q35_TYPE_Q8_0; break;
    default: f = t; break; /* no smaller block: straight to f16 */
  }
  return ne0 % q35_type_block(f) ? Q35_TYPE_F16 : f;
}

int q35_recipe_needs_imatrix(int r, const char *name, int type) {
  if (q35_type_requires_imatrix(type)) return 1; /* ggml's quantizer has no unweighted form */
  if (r < 0 || r >= N_RECIPES || !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) return 0;
  switch (type) {
    case Q35_TYPE_IQ3_XXS: case Q35_TYPE_IQ2_S: case Q35_TYPE_IQ1_M: return 1;
    case Q35_TYPE_Q2_K: return recipes[r].ftype == FT_Q2_K_S;
    default: return 0;
  }
}

int q35_recipe_tensor_type(int r, const q35_recipe_model *m, const char *name, int n_dims, int64_t ne0, int64_t ne2,
                           int src_type, q35_err *err) {
  if (r < 0 || r >= N_RECIPES) return q35_seterr(err, "recipe %d is not available", r);
  if (!q35_recipe_quantizes(name, n_dims)) return src_type;
  const int t = recipes[r].type;
  if (t == Q35_TYPE_F32 || t == Q35_TYPE_F16 || t == Q35_TYPE_BF16) return t; /* not quantized: no rules */
  rule_ctx c = {.ft = recipes[r].ftype, .il = 0, .n = m->n_layer_all, .n_expert = m->n_expert,
                .gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0, .has_imatrix = m->has_imatrix};
  const category cat = categorize(name);
  if ((cat == C_FFN_DOWN || cat == C_ATTN_V || cat == C_ATTN_QKV || cat == C_FFN_GATE || cat == C_FFN_UP) &&
      sscanf(name, "blk.%d.", &c.il) != 1)
    return q35_seterr(err, "%s: a layer tensor without a layer number", name);
  /* llama counts the ffn_down tensors in its order (by layer, then by name): a layer's
   * ffn_down_exps before its ffn_down_shexp */
  c.i_down = c.il * (m->n_down_per_layer > 0 ? m->n_down_per_layer : 1) + (strstr(name, "ffn_down_shexp") ? 1 : 0);
  return fallback(rule_type(&c, cat, m->tied, ne0, ne2, t), ne0);
}
