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

/* name, llama_ftype, default type; rules: 0 when q35 has not got the rules (and quantizers) of
 * the very-low-bit family, whose names are known only to be refused clearly */
static const struct {
  const char *name;
  int ftype, type, rules;
} recipes[] = {
    {"F32", FT_F32, Q35_TYPE_F32, 1},          {"F16", FT_F16, Q35_TYPE_F16, 1},
    {"BF16", FT_BF16, Q35_TYPE_BF16, 1},       {"Q4_0", FT_Q4_0, Q35_TYPE_Q4_0, 1},
    {"Q4_1", FT_Q4_1, Q35_TYPE_Q4_1, 1},       {"Q5_0", FT_Q5_0, Q35_TYPE_Q5_0, 1},
    {"Q5_1", FT_Q5_1, Q35_TYPE_Q5_1, 1},       {"Q8_0", FT_Q8_0, Q35_TYPE_Q8_0, 1},
    {"Q2_K", FT_Q2_K, Q35_TYPE_Q2_K, 1},       {"Q3_K_S", FT_Q3_K_S, Q35_TYPE_Q3_K, 1},
    {"Q3_K_M", FT_Q3_K_M, Q35_TYPE_Q3_K, 1},   {"Q3_K_L", FT_Q3_K_L, Q35_TYPE_Q3_K, 1},
    {"Q4_K_S", FT_Q4_K_S, Q35_TYPE_Q4_K, 1},   {"Q4_K_M", FT_Q4_K_M, Q35_TYPE_Q4_K, 1},
    {"Q5_K_S", FT_Q5_K_S, Q35_TYPE_Q5_K, 1},   {"Q5_K_M", FT_Q5_K_M, Q35_TYPE_Q5_K, 1},
    {"Q6_K", FT_Q6_K, Q35_TYPE_Q6_K, 1},       {"IQ4_NL", FT_IQ4_NL, Q35_TYPE_IQ4_NL, 1},
    {"IQ4_XS", FT_IQ4_XS, Q35_TYPE_IQ4_XS, 1}, {"MXFP4_MOE", FT_MXFP4_MOE, Q35_TYPE_MXFP4, 1},
    {"Q2_K_S", FT_Q2_K_S, Q35_TYPE_Q2_K, 0},   {"IQ2_XXS", FT_IQ2_XXS, Q35_TYPE_IQ2_XXS, 0},
    {"IQ2_XS", FT_IQ2_XS, Q35_TYPE_IQ2_XS, 0}, {"IQ2_S", FT_IQ2_S, Q35_TYPE_IQ2_XS, 0},
    {"IQ2_M", FT_IQ2_M, Q35_TYPE_IQ2_S, 0},    {"IQ3_XXS", FT_IQ3_XXS, Q35_TYPE_IQ3_XXS, 0},
    {"IQ3_XS", FT_IQ3_XS, Q35_TYPE_IQ3_S, 0},  {"IQ3_S", FT_IQ3_S, Q35_TYPE_IQ3_S, 0},
    {"IQ3_M", FT_IQ3_M, Q35_TYPE_IQ3_S, 0},    {"IQ1_S", FT_IQ1_S, Q35_TYPE_IQ1_S, 0},
    {"IQ1_M", FT_IQ1_M, Q35_TYPE_IQ1_M, 0},
};
#define N_RECIPES (int)(sizeof recipes / sizeof recipes[0])

const char *q35_recipe_names(void) {
  return "q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, "
         "iq4_nl, iq4_xs, mxfp4_moe, bf16, f16, f32";
}

int q35_recipe_from_name(const char *name, q35_err *err) {
  for (int r = 0; r < N_RECIPES; r++) {
    if (strcasecmp(recipes[r].name, name)) continue;
    const int t = recipes[r].type;
    if (!recipes[r].rules && !q35_type_quantizable(t))
      return q35_seterr(err, "--qtype %s: q35 has no %s quantizer (q35 reads %s files but cannot write them); "
                             "choose one of %s", name, q35_type_name(t), q35_type_name(t), q35_recipe_names());
    if (!recipes[r].rules)
      return q35_seterr(err, "--qtype %s: q35 does not have this recipe's rules (it needs an importance matrix for "
                             "every low-bit tensor); choose one of %s", name, q35_recipe_names());
    return r;
  }
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
  int gqa, n_expert, has_imatrix;
} rule_ctx;

static int type_attn_v(const rule_ctx *c, int t) {
  switch (c->ft) {
    case FT_Q2_K: t = c->gqa >= 4 ? Q35_TYPE_Q4_K : Q35_TYPE_Q3_K; break;
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
    case FT_Q3_K_M: return i < n / 16 ? Q35_TYPE_Q5_K : Q35_TYPE_Q4_K;
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
      case FT_Q2_K: case FT_Q3_K_S: case FT_Q3_K_M: case FT_IQ4_NL: case FT_Q4_K_S: case FT_Q4_K_M: case FT_IQ4_XS:
        return Q35_TYPE_Q5_K;
      default: return t;
    }
  }
  switch (c->ft) {
    case FT_Q2_K: return Q35_TYPE_Q3_K;
    case FT_Q3_K_M: return Q35_TYPE_Q4_K;
    case FT_Q3_K_L: return Q35_TYPE_Q5_K;
    default: return t;
  }
}

/* llama_tensor_get_type_impl for the recipes above; t is the recipe's default type */
static int rule_type(const rule_ctx *c, category cat, int tied, int64_t ne0, int64_t ne2, int t) {
  if (cat == C_OUTPUT || (tied && cat == C_TOKEN_EMBD)) {
    if (c->ft == FT_MXFP4_MOE || ne0 % q35_type_block(t)) return Q35_TYPE_Q8_0;
    return t == Q35_TYPE_Q8_0 ? t : Q35_TYPE_Q6_K;
  }
  if (c->ft == FT_MXFP4_MOE) return ne2 > 1 ? Q35_TYPE_MXFP4 : Q35_TYPE_Q8_0; /* experts MXFP4, the rest Q8_0 */
  switch (cat) {
    case C_ATTN_V:
    case C_ATTN_QKV: return type_attn_v(c, t); /* llama's attn_v category holds attn_qkv */
    case C_ATTN_K: return c->n_expert == 8 ? Q35_TYPE_Q8_0 : t;
    case C_FFN_DOWN: return type_ffn_down(c, t);
    case C_ATTN_OUTPUT: return type_attn_output(c, t);
    default: return t;
  }
}

/* llama's fallback for a row length the type's block does not divide: a type of 32-blocks, and
 * f16 when that does not fit either */
static int fallback(int t, int64_t ne0) {
  if (ne0 % q35_type_block(t) == 0) return t;
  int f;
  switch (t) {
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

int q35_recipe_tensor_type(int r, const q35_recipe_model *m, const char *name, int n_dims, int64_t ne0, int64_t ne2,
                           int src_type, q35_err *err) {
  if (r < 0 || r >= N_RECIPES || !recipes[r].rules) return q35_seterr(err, "recipe %d is not available", r);
  if (!q35_recipe_quantizes(name, n_dims)) return src_type;
  const int t = recipes[r].type;
  if (t == Q35_TYPE_F32 || t == Q35_TYPE_F16 || t == Q35_TYPE_BF16) return t; /* not quantized: no rules */
  rule_ctx c = {.ft = recipes[r].ftype, .il = 0, .n = m->n_layer_all, .n_expert = m->n_expert,
                .gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0, .has_imatrix = m->has_imatrix};
  const category cat = categorize(name);
  if ((cat == C_FFN_DOWN || cat == C_ATTN_V || cat == C_ATTN_QKV) && sscanf(name, "blk.%d.", &c.il) != 1)
    return q35_seterr(err, "%s: a layer tensor without a layer number", name);
  return fallback(rule_type(&c, cat, m->tied, ne0, ne2, t), ne0);
}
