/*
 * hf_plan.c - the tensor-name mapping HF -> GGUF (see hf_internal.h): for every GGUF tensor
 * of the output, the Hugging Face tensors it is built from, checked (present, F32/F16/BF16,
 * the shape config.json implies), with its gather, elementwise op and output type. GGUF names
 * come from format/gguf_names.h; the HF names are spelled here, relative to the language
 * model's prefix ("model.language_model." in the multimodal layout, "model." in the text-only
 * one) and "layers.N.".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "export/hf_internal.h"
#include "export/qwen35_gguf.h"
#include "export/recipe.h"
#include "format/gguf_names.h"
#include "format/tensor_types.h"

static otensor *new_out(plan *p) {
  if (q35_grow((void **)&p->t, &p->cap, (size_t)p->n + 1, sizeof *p->t)) return NULL;
  otensor *t = &p->t[p->n++];
  memset(t, 0, sizeof *t);
  t->type = Q35_TYPE_F32;
  return t;
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *d) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Find a source tensor, check dtype and shape (PyTorch order), mark it used. */
static const st_tensor *need(plan *p, const char *name, int nd, int64_t d0, int64_t d1, int64_t d2) {
  const st_tensor *t = st_find(p->st, name);
  const int64_t want[3] = {d0, d1, d2};
  char ws[96], gs[160];
  shape_str(ws, sizeof ws, nd, want);
  if (!t) {
    q35_seterr(p->err, "%s: tensor '%s' is missing (expected shape %s)", p->dir, name, ws);
    return NULL;
  }
  if (t->dtype == ST_OTHER) {
    q35_seterr(p->err, "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 are supported", t->file, name,
               t->dtype_name);
    return NULL;
  }
  int ok = t->n_dims == nd;
  for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
  if (!ok) {
    shape_str(gs, sizeof gs, t->n_dims, t->shape);
    q35_seterr(p->err, "%s: tensor '%s' has shape %s, expected %s from config.json", t->file, name, gs, ws);
    return NULL;
  }
  p->used[t - st_get(p->st, 0)] = 1;
  return t;
}

static int pick_type(plan *p, const char *name, int type, int64_t ne0, int *out) {
  const int blk = q35_type_block(type);
  if (ne0 % blk == 0) {
    *out = type;
    return 0;
  }
  if (!p->o->fallback)
    return q35_seterr(p->err,
                      "%s: row length %lld is not a multiple of the %s block size %d, so %s cannot represent it; "
                      "choose another type or pass --fallback (k-quants fall back to q5_0/q8_0, then f16, as "
                      "llama-quantize does)", name, (long long)ne0, q35_type_name(type), blk, q35_type_name(type));
  *out = q35_export_fallback_type(type, ne0, 1);
  return 0;
}


/* Was tensor id's type given explicitly (so that it overrides the recipe)? */
static int type_given(const plan *p, q35_gguf_tensor_id id) {
  const unsigned g = p->o->given;
  if (id == Q35_TENSOR_TOKEN_EMBD) return (g & Q35_EXPORT_GIVEN_EMBEDDING) != 0;
  if (id == Q35_TENSOR_OUTPUT) return (g & (Q35_EXPORT_GIVEN_OUTPUT | Q35_EXPORT_GIVEN_LINEAR)) != 0;
  return (g & Q35_EXPORT_GIVEN_LINEAR) != 0;
}

/* With a recipe: the type it gives a tensor llama-quantize quantizes, unless given explicitly. */
static int recipe_type(plan *p, q35_gguf_tensor_id id, const char *name, int n_dims, int64_t ne0, int64_t ne2,
                       int *type) {
  if (p->o->recipe < 0 || type_given(p, id) || !q35_recipe_quantizes(name, n_dims)) return 0;
  const hfcfg *c = &p->cfg;
  const q35_recipe_model m = {.n_layer_all = (int)c->L + (p->mtp_pfx ? 1 : 0), .n_expert = c->moe ? (int)c->E : 0,
                              .n_head = (int)c->nh, .n_head_kv = (int)c->nkv, .tied = c->tied,
                              .has_imatrix = p->o->imatrix != NULL, .n_down_per_layer = c->moe && c->Is > 0 ? 2 : 1};
  const int t = q35_recipe_tensor_type(p->o->recipe, &m, name, n_dims, ne0, ne2, Q35_TYPE_F32, p->err);
  if (t < 0) return -1;
  *type = t;
  return 0;
}

/* Add an output tensor with a plain gather from one source. */
static otensor *out_plain(plan *p, q35_gguf_tensor_id id, int il, int type, const st_tensor *src, int n_dims,
                          int64_t ne0, int64_t ne1, int64_t ne2, int op) {
  otensor *t = new_out(p);
  if (!t) {
    q35_seterr(p->err, "out of memory");
    return NULL;
  }
  snprintf(t->name, sizeof t->name, "%s", q35_gguf_tensor(id, il).s);
  if (recipe_type(p, id, t->name, n_dims, ne0, ne2, &type)) return NULL;
  t->n_dims = n_dims;
  t->ne[0] = ne0;
  t->ne[1] = ne1;
  t->ne[2] = ne2;
  t->src = src;
  t->op = op;
  t->gather = G_PLAIN;
  if (type != Q35_TYPE_F32 && pick_type(p, t->name, type, ne0, &t->type)) return NULL;
  return t;
}

/* One layer's mapping: HF tensors are found by suffix ("self_attn.q_proj.weight") under
 * PREFIX + "layers.N.", and the last one found (s) feeds the next output tensor (t). */
typedef struct layer_map {
  plan *p;
  int il;          /* the GGUF layer (blk.il) */
  const char *pfx; /* the HF prefix of "layers.N.": the language model's, or the MTP block's "mtp." */
  int hf_il;       /* N */
  char hf[256];
  const st_tensor *s;
  otensor *t;
} layer_map;

static const char *hf_name(layer_map *l, const char *sfx) {
  snprintf(l->hf, sizeof l->hf, "%slayers.%d.%s", l->pfx, l->hf_il, sfx);
  return l->hf;
}

/* The HF tensor sfx of this layer, with its PyTorch shape (d0, d1, d2). */
static int take(layer_map *l, const char *sfx, int nd, int64_t d0, int64_t d1, int64_t d2) {
  l->s = need(l->p, hf_name(l, sfx), nd, d0, d1, d2);
  return l->s ? 0 : -1;
}

/* The GGUF tensor id of this layer from the last HF tensor taken, GGUF shape {ne0, ne1, ne2}. */
static int emit(layer_map *l, q35_gguf_tensor_id id, int type, int nd, int64_t ne0, int64_t ne1, int64_t ne2,
                int op) {
  l->t = out_plain(l->p, id, l->il, type, l->s, nd, ne0, ne1, ne2, op);
  return l->t ? 0 : -1;
}

static void permute_rows(otensor *t, int64_t start, int64_t block) {
  t->gather = G_ROWPERM, t->perm_start = start, t->perm_block = block;
}

static void permute_cols(otensor *t, int64_t block) { t->gather = G_COLPERM, t->perm_block = block; }

/* embeddings, final norm, output head (absent or skipped when tied) */
static int plan_model_tensors(plan *p) {
  const hfcfg *c = &p->cfg;
  char n1[256];
  const st_tensor *s;
  if (st_find(p->st, "model.language_model.embed_tokens.weight")) p->P = "model.language_model.";
  else if (st_find(p->st, "model.embed_tokens.weight")) p->P = "model.";
  else
    return q35_seterr(p->err, "%s: tensor 'model.language_model.embed_tokens.weight' (or 'model.embed_tokens.weight') "
                              "is missing", p->dir);
  snprintf(n1, sizeof n1, "%sembed_tokens.weight", p->P);
  if (!(s = need(p, n1, 2, c->vocab, c->H, 0))) return -1;
  if (!out_plain(p, Q35_TENSOR_TOKEN_EMBD, 0, p->t_emb, s, 2, c->H, c->vocab, 1, OP_NONE)) return -1;
  snprintf(n1, sizeof n1, "%snorm.weight", p->P);
  if (!(s = need(p, n1, 1, c->H, 0, 0))) return -1;
  if (!out_plain(p, Q35_TENSOR_OUTPUT_NORM, 0, Q35_TYPE_F32, s, 1, c->H, 1, 1, OP_PLUS1)) return -1;
  const char *lm = "lm_head.weight";
  if (!st_find(p->st, lm) && st_find(p->st, "model.language_model.lm_head.weight"))
    lm = "model.language_model.lm_head.weight";
  if (st_find(p->st, lm)) {
    if (!(s = need(p, lm, 2, c->vocab, c->H, 0))) return -1;
    if (!c->tied && !out_plain(p, Q35_TENSOR_OUTPUT, 0, p->t_out, s, 2, c->H, c->vocab, 1, OP_NONE)) return -1;
  }
  return 0;
}

/* full-attention layer: q (with its gate, 2x wide), k, v, o and the per-head norms */
static int plan_attention(layer_map *l) {
  const hfcfg *c = &l->p->cfg;
  const int64_t H = c->H, hd = c->hd, nh = c->nh, nkv = c->nkv;
  const int lin = l->p->t_lin, f32 = Q35_TYPE_F32;
  return take(l, "self_attn.q_proj.weight", 2, nh * hd * 2, H, 0) ||
                 emit(l, Q35_TENSOR_ATTN_Q, lin, 2, H, nh * hd * 2, 1, OP_NONE) ||
                 take(l, "self_attn.k_proj.weight", 2, nkv * hd, H, 0) ||
                 emit(l, Q35_TENSOR_ATTN_K, lin, 2, H, nkv * hd, 1, OP_NONE) ||
                 take(l, "self_attn.v_proj.weight", 2, nkv * hd, H, 0) ||
                 emit(l, Q35_TENSOR_ATTN_V, lin, 2, H, nkv * hd, 1, OP_NONE) ||
                 take(l, "self_attn.o_proj.weight", 2, H, nh * hd, 0) ||
                 emit(l, Q35_TENSOR_ATTN_OUTPUT, lin, 2, nh * hd, H, 1, OP_NONE) ||
                 take(l, "self_attn.q_norm.weight", 1, hd, 0, 0) ||
                 emit(l, Q35_TENSOR_ATTN_Q_NORM, f32, 1, hd, 1, 1, OP_PLUS1) ||
                 take(l, "self_attn.k_norm.weight", 1, hd, 0, 0) ||
                 emit(l, Q35_TENSOR_ATTN_K_NORM, f32, 1, hd, 1, 1, OP_PLUS1)
             ? -1
             : 0;
}

/* DeltaNet layer: the value-head reorder applies to every tensor indexed by value head */
static int plan_deltanet(layer_map *l) {
  const hfcfg *c = &l->p->cfg;
  const int64_t H = c->H, Hk = c->Hk, Hv = c->Hv, dk = c->dk, dv = c->dv, C = 2 * Hk * dk + Hv * dv, K = c->conv_k;
  const int lin = l->p->t_lin, f32 = Q35_TYPE_F32;
  if (take(l, "linear_attn.in_proj_qkv.weight", 2, C, H, 0) ||
      emit(l, Q35_TENSOR_ATTN_QKV, lin, 2, H, C, 1, OP_NONE))
    return -1;
  permute_rows(l->t, 2 * Hk * dk, dv);
  if (take(l, "linear_attn.in_proj_z.weight", 2, Hv * dv, H, 0) ||
      emit(l, Q35_TENSOR_ATTN_GATE, lin, 2, H, Hv * dv, 1, OP_NONE))
    return -1;
  permute_rows(l->t, 0, dv);
  if (take(l, "linear_attn.in_proj_b.weight", 2, Hv, H, 0) || emit(l, Q35_TENSOR_SSM_BETA, lin, 2, H, Hv, 1, OP_NONE))
    return -1;
  permute_rows(l->t, 0, 1);
  if (take(l, "linear_attn.in_proj_a.weight", 2, Hv, H, 0) || emit(l, Q35_TENSOR_SSM_ALPHA, lin, 2, H, Hv, 1, OP_NONE))
    return -1;
  permute_rows(l->t, 0, 1);
  /* conv1d [C, 1, K] (or already squeezed [C, K]) -> {K, C}: same bytes */
  const st_tensor *cv = st_find(l->p->st, hf_name(l, "linear_attn.conv1d.weight"));
  if ((cv && cv->n_dims == 2 ? take(l, "linear_attn.conv1d.weight", 2, C, K, 0)
                             : take(l, "linear_attn.conv1d.weight", 3, C, 1, K)) ||
      emit(l, Q35_TENSOR_SSM_CONV1D, f32, 2, K, C, 1, OP_NONE))
    return -1;
  permute_rows(l->t, 2 * Hk * dk, dv);
  if (take(l, "linear_attn.dt_bias", 1, Hv, 0, 0) || emit(l, Q35_TENSOR_SSM_DT_BIAS, f32, 1, Hv, 1, 1, OP_NONE))
    return -1;
  permute_cols(l->t, 1);
  if (take(l, "linear_attn.A_log", 1, Hv, 0, 0) || emit(l, Q35_TENSOR_SSM_A, f32, 1, Hv, 1, 1, OP_NEGEXP)) return -1;
  permute_cols(l->t, 1);
  if (take(l, "linear_attn.norm.weight", 1, dv, 0, 0) || emit(l, Q35_TENSOR_SSM_NORM, f32, 1, dv, 1, 1, OP_NONE) ||
      take(l, "linear_attn.out_proj.weight", 2, H, Hv * dv, 0) ||
      emit(l, Q35_TENSOR_SSM_OUT, lin, 2, Hv * dv, H, 1, OP_NONE))
    return -1;
  permute_cols(l->t, dv);
  return 0;
}

/* Per-expert HF tensors "layers.N.mlp.experts.E.<proj>.weight" [d0, d1] gathered into one
 * GGUF tensor (G_SPLIT). `fused` names the fused tensor that was not found (for the message). */
static int plan_split_experts(layer_map *l, const char *proj, q35_gguf_tensor_id id, int64_t d0, int64_t d1,
                              int64_t ne0, int64_t ne1, int first, const char *fused) {
  plan *p = l->p;
  const int64_t E = p->cfg.E;
  char n2[256];
  const st_tensor **srcs = calloc((size_t)E, sizeof *srcs);
  if (!srcs) return q35_seterr(p->err, "out of memory");
  for (int64_t e = 0; e < E; e++) {
    snprintf(n2, sizeof n2, "%slayers.%d.mlp.experts.%lld.%s.weight", l->pfx, l->hf_il, (long long)e, proj);
    if (!(srcs[e] = need(p, n2, 2, d0, d1, 0))) {
      if (e == 0 && first)
        q35_seterr(p->err, "%s: layer %d has neither fused experts ('%s') nor per-expert tensors ('%s' is missing)",
                   p->dir, l->il, fused, n2);
      free(srcs);
      return -1;
    }
  }
  l->s = srcs[0];
  if (emit(l, id, p->t_lin, 3, ne0, ne1, p->cfg.E, OP_NONE)) {
    free(srcs);
    return -1;
  }
  l->t->gather = G_SPLIT, l->t->srcs = srcs;
  return 0;
}

/* The fused expert tensor "mlp.experts.<name>" (or "<name>.weight"), NULL when absent. */
static const char *fused_experts(layer_map *l, const char *name, char *buf, size_t cap) {
  char with_weight[96];
  snprintf(buf, cap, "%s", hf_name(l, name));
  if (st_find(l->p->st, buf)) return buf;
  snprintf(with_weight, sizeof with_weight, "%s.weight", name);
  snprintf(buf, cap, "%s", hf_name(l, with_weight));
  return st_find(l->p->st, buf) ? buf : NULL;
}

/* routed experts: fused [E, 2I, H] gate_up and [E, H, I] down, or per-expert tensors */
static int plan_experts(layer_map *l) {
  plan *p = l->p;
  const int64_t H = p->cfg.H, E = p->cfg.E, I = p->cfg.I;
  char gu[256], dn[256];
  static const q35_gguf_tensor_id gate_up_ids[2] = {Q35_TENSOR_FFN_GATE_EXPS, Q35_TENSOR_FFN_UP_EXPS};
  if (fused_experts(l, "mlp.experts.gate_up_proj", gu, sizeof gu)) {
    if (!(l->s = need(p, gu, 3, E, 2 * I, H))) return -1;
    for (int part = 0; part < 2; part++) {
      if (emit(l, gate_up_ids[part], p->t_lin, 3, H, I, E, OP_NONE)) return -1;
      l->t->gather = G_FUSED, l->t->fused_off = part * I, l->t->fused_rows = 2 * I;
    }
  } else {
    if (plan_split_experts(l, "gate_proj", Q35_TENSOR_FFN_GATE_EXPS, I, H, H, I, 1, gu) ||
        plan_split_experts(l, "up_proj", Q35_TENSOR_FFN_UP_EXPS, I, H, H, I, 0, gu))
      return -1;
  }
  if (fused_experts(l, "mlp.experts.down_proj", dn, sizeof dn)) {
    if (!(l->s = need(p, dn, 3, E, H, I))) return -1;
    return emit(l, Q35_TENSOR_FFN_DOWN_EXPS, p->t_lin, 3, I, H, E, OP_NONE);
  }
  return plan_split_experts(l, "down_proj", Q35_TENSOR_FFN_DOWN_EXPS, H, I, I, H, 0, dn);
}

/* MoE feed-forward: router, routed experts, shared expert and its gate */
static int plan_moe(layer_map *l) {
  plan *p = l->p;
  const hfcfg *c = &p->cfg;
  const int64_t H = c->H, Is = c->Is;
  const int lin = p->t_lin, f32 = Q35_TYPE_F32;
  if (take(l, "mlp.gate.weight", 2, c->E, H, 0) || emit(l, Q35_TENSOR_FFN_GATE_INP, f32, 2, H, c->E, 1, OP_NONE) ||
      plan_experts(l))
    return -1;
  if (!(Is > 0 || st_find(p->st, hf_name(l, "mlp.shared_expert.gate_proj.weight")))) return 0;
  if (Is <= 0)
    return q35_seterr(p->err, "%s/config.json: shared expert tensors exist but "
                              "'shared_expert_intermediate_size' is missing or 0", p->dir);
  if (take(l, "mlp.shared_expert.gate_proj.weight", 2, Is, H, 0) ||
      emit(l, Q35_TENSOR_FFN_GATE_SHEXP, lin, 2, H, Is, 1, OP_NONE) ||
      take(l, "mlp.shared_expert.up_proj.weight", 2, Is, H, 0) ||
      emit(l, Q35_TENSOR_FFN_UP_SHEXP, lin, 2, H, Is, 1, OP_NONE) ||
      take(l, "mlp.shared_expert.down_proj.weight", 2, H, Is, 0) ||
      emit(l, Q35_TENSOR_FFN_DOWN_SHEXP, lin, 2, Is, H, 1, OP_NONE))
    return -1;
  const st_tensor *sg = st_find(p->st, hf_name(l, "mlp.shared_expert_gate.weight"));
  if (sg && sg->n_dims == 1 ? take(l, "mlp.shared_expert_gate.weight", 1, H, 0, 0)
                            : take(l, "mlp.shared_expert_gate.weight", 2, 1, H, 0))
    return -1;
  return emit(l, Q35_TENSOR_FFN_GATE_INP_SHEXP, f32, 1, H, 1, 1, OP_NONE);
}

/* dense feed-forward */
static int plan_dense_ffn(layer_map *l) {
  const int64_t H = l->p->cfg.H, F = l->p->cfg.F;
  const int lin = l->p->t_lin;
  return take(l, "mlp.gate_proj.weight", 2, F, H, 0) || emit(l, Q35_TENSOR_FFN_GATE, lin, 2, H, F, 1, OP_NONE) ||
                 take(l, "mlp.up_proj.weight", 2, F, H, 0) || emit(l, Q35_TENSOR_FFN_UP, lin, 2, H, F, 1, OP_NONE) ||
                 take(l, "mlp.down_proj.weight", 2, H, F, 0) || emit(l, Q35_TENSOR_FFN_DOWN, lin, 2, F, H, 1, OP_NONE)
             ? -1
             : 0;
}

/* One decoder layer: trunk layer il, or (mtp) the MTP block's layer (HF mtp.layers.0, GGUF blk.L) */
static int plan_layer(plan *p, int il, int mtp) {
  const hfcfg *c = &p->cfg;
  const int is_attn = mtp || (il + 1) % c->interval == 0;
  layer_map l = {.p = p, .il = il, .pfx = mtp ? p->mtp_pfx : p->P, .hf_il = mtp ? 0 : il};
  if (take(&l, "input_layernorm.weight", 1, c->H, 0, 0) ||
      emit(&l, Q35_TENSOR_ATTN_NORM, Q35_TYPE_F32, 1, c->H, 1, 1, OP_PLUS1) ||
      take(&l, "post_attention_layernorm.weight", 1, c->H, 0, 0) ||
      emit(&l, Q35_TENSOR_POST_ATTN_NORM, Q35_TYPE_F32, 1, c->H, 1, 1, OP_PLUS1))
    return -1;
  if (is_attn ? plan_attention(&l) : plan_deltanet(&l)) return -1;
  return c->moe ? plan_moe(&l) : plan_dense_ffn(&l);
}

/* The MTP block as llama.cpp's converter (_Qwen35MtpMixin) writes it: mtp.layers.0.* -> blk.L.*,
 * mtp.fc -> nextn.eh_proj, mtp.pre_fc_norm_embedding / _hidden -> nextn.enorm / hnorm, mtp.norm ->
 * nextn.shared_head_norm. The renamed norms end in "norm.weight", so its Qwen3Next rule adds 1 to
 * them as to every other RMSNorm (HF's Qwen3.5 norms are 1 + w). */
static int plan_mtp(plan *p) {
  const hfcfg *c = &p->cfg;
  const int il = (int)c->L;
  if (plan_layer(p, il, 1)) return -1;
  static const struct {
    const char *hf;
    q35_gguf_tensor_id id;
  } norms[] = {{"pre_fc_norm_embedding.weight", Q35_TENSOR_NEXTN_ENORM},
               {"pre_fc_norm_hidden.weight", Q35_TENSOR_NEXTN_HNORM},
               {"norm.weight", Q35_TENSOR_NEXTN_SHARED_HEAD_NORM}};
  char n1[256];
  const st_tensor *s;
  snprintf(n1, sizeof n1, "%sfc.weight", p->mtp_pfx);
  if (!(s = need(p, n1, 2, c->H, 2 * c->H, 0)) ||
      !out_plain(p, Q35_TENSOR_NEXTN_EH_PROJ, il, p->t_lin, s, 2, 2 * c->H, c->H, 1, OP_NONE))
    return -1;
  for (size_t i = 0; i < sizeof norms / sizeof *norms; i++) {
    snprintf(n1, sizeof n1, "%s%s", p->mtp_pfx, norms[i].hf);
    if (!(s = need(p, n1, 1, c->H, 0, 0)) || !out_plain(p, norms[i].id, il, Q35_TYPE_F32, s, 1, c->H, 1, 1, OP_PLUS1))
      return -1;
  }
  return 0;
}

/* every source tensor must be used or skipped on purpose */
static int plan_check_unused(plan *p) {
  const hfcfg *c = &p->cfg;
  static const char *const skipped_prefixes[] = {"model.visual.", "visual.", "mtp.", "model.mtp."};
  const size_t n_skipped = p->mtp_pfx ? 2 : 4; /* mtp.* is skipped only when the head is not exported */
  for (size_t i = 0; i < st_count(p->st); i++) {
    if (p->used[i]) continue;
    const st_tensor *u = st_get(p->st, i);
    const char *nm = u->name;
    int skip = strstr(nm, "rotary_emb.inv_freq") != NULL;
    for (size_t k = 0; k < n_skipped; k++)
      skip |= !strncmp(nm, skipped_prefixes[k], strlen(skipped_prefixes[k]));
    if (skip) continue;
    if ((!strcmp(nm, "lm_head.weight") || !strcmp(nm, "model.language_model.lm_head.weight")) && c->tied) continue;
    return q35_seterr(p->err, "%s: unexpected tensor '%s' (not part of a %s model with this config.json: "
                              "%lld layers, full attention every %lld)", u->file, nm, c->model_type,
                      (long long)c->L, (long long)c->interval);
  }
  return 0;
}

int hf_build_plan(plan *p) {
  /* the MTP head: when config.json declares one, its tensors are there, and --no-mtp is not given
   * (known before the trunk is planned: the recipes count its layer) */
  p->mtp_pfx = NULL;
  if (p->cfg.n_mtp > 0 && !p->o->no_mtp) {
    if (st_find(p->st, "mtp.fc.weight")) p->mtp_pfx = "mtp.";
    else if (st_find(p->st, "model.mtp.fc.weight")) p->mtp_pfx = "model.mtp.";
    if (p->mtp_pfx && p->cfg.n_mtp > 1)
      return q35_seterr(p->err, "%s/config.json: mtp_num_hidden_layers = %lld; only one MTP block is supported (as "
                                "in llama.cpp); pass --no-mtp to drop it", p->dir, (long long)p->cfg.n_mtp);
  }
  if (plan_model_tensors(p)) return -1;
  for (int64_t il = 0; il < p->cfg.L; il++)
    if (plan_layer(p, (int)il, 0)) return -1;
  if (p->mtp_pfx && plan_mtp(p)) return -1;
  return plan_check_unused(p);
}

void hf_plan_free(plan *p) {
  for (int i = 0; i < p->n; i++) free(p->t[i].srcs);
  free(p->t);
  p->t = NULL;
  p->n = 0;
}
