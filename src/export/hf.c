/*
 * hf.c - Hugging Face Qwen3.5 checkpoint -> GGUF (see hf.h; rules: docs/qwen35moe.md §3).
 *
 * Plan, then stream. The plan is a list of output tensors; each says how its rows are
 * gathered from the (mmapped) source tensors:
 *   G_PLAIN     row r = source row r
 *   G_ROWPERM   rows >= perm_start are permuted in blocks of perm_block rows by the value-head
 *               reorder (in_proj_qkv V rows, in_proj_z, in_proj_a/b, conv1d V channels)
 *   G_COLPERM   columns permuted in blocks of perm_block by the same reorder (out_proj input
 *               columns; A_log and dt_bias, which are single rows)
 *   G_FUSED     experts from a fused [E, 2I, H] gate_up_proj: row (e, i) = source row
 *               e*2I + fused_off + i (gate rows first, then up)
 *   G_SPLIT     experts from per-expert tensors: row (e, i) = row i of srcs[e]
 * and then an elementwise op (OP_PLUS1 for unit-offset norms, OP_NEGEXP for A_log).
 *
 * Value-head reorder (only changes anything when Hk != Hv, R = Hv / Hk): new head j holds old
 * head (j mod Hk) * R + j / Hk, so llama.cpp's tiled mapping (v head j -> k head j mod Hk)
 * reproduces HF's grouped mapping (old v head h -> k head h / R).
 */
#define _GNU_SOURCE
#include "export/hf.h"

#include <errno.h>
#include <jansson.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "kernels/quant.h"
#include "export/safetensors.h"
#include "text/tokenizer.h"
#include "base/util.h"

q35_export_opts q35_export_default_opts(void) {
  q35_export_opts o;
  memset(&o, 0, sizeof o);
  o.qlinear = Q35_TYPE_BF16;
  o.qembedding = Q35_TYPE_BF16;
  o.qoutput = -1;
  o.progress = 1;
  return o;
}

/* ---------------------------------------------------------------------------------------- */
/* config.json                                                                               */

typedef struct hfcfg {
  int moe;
  int64_t vocab, H, L, nh, nkv, hd, n_rot, ctx, interval, conv_k, dk, dv, Hk, Hv, E, topk, I, Is, F;
  double theta, eps;
  int32_t sections[4];
  int tied;
  char model_type[64];
} hfcfg;

typedef struct cfgctx {
  const char *path;
  json_t *root, *text;
  const char *tprefix; /* "text_config." or "" */
  q35_err *err;
} cfgctx;

/* integer key of text_config; required unless def_ok */
static int cfg_int(cfgctx *c, const char *key, int64_t *out, int required, int64_t def, int64_t lo, int64_t hi) {
  json_t *v = json_object_get(c->text, key);
  if (!v) {
    if (required) return q35_seterr(c->err, "%s: key '%s%s' is missing", c->path, c->tprefix, key);
    *out = def;
    return 0;
  }
  if (!json_is_integer(v))
    return q35_seterr(c->err, "%s: key '%s%s' must be an integer", c->path, c->tprefix, key);
  int64_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return q35_seterr(c->err, "%s: key '%s%s' = %lld is out of range [%lld, %lld]", c->path, c->tprefix, key,
                      (long long)x, (long long)lo, (long long)hi);
  *out = x;
  return 0;
}

static int cfg_num(cfgctx *c, json_t *obj, const char *oname, const char *key, double *out, int *found) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  *found = 0;
  if (!v) return 0;
  if (!json_is_number(v))
    return q35_seterr(c->err, "%s: key '%s%s%s' must be a number", c->path, c->tprefix, oname, key);
  *out = json_number_value(v);
  *found = 1;
  return 0;
}

/* parse_config: the checks of read_config on an already parsed document (path only names it
 * in messages). Takes ownership of root. Separate so the fuzz target can skip the file. */
static int parse_config(const char *path, json_t *root, hfcfg *cfg, q35_err *err);

static int read_config(const char *dir, hfcfg *cfg, q35_err *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  memset(cfg, 0, sizeof *cfg);
  if (access(path, F_OK) != 0) return q35_seterr(err, "%s: missing (a Hugging Face checkpoint needs config.json)", path);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return q35_seterr(err, "%s: malformed JSON: %s (line %d, column %d)", path, je.text, je.line, je.column);
  return parse_config(path, root, cfg, err);
}

static int parse_config(const char *path, json_t *root, hfcfg *cfg, q35_err *err) {
  memset(cfg, 0, sizeof *cfg);
  cfgctx c = {path, root, root, "", err};
  int rc = -1;
  if (!json_is_object(root)) {
    q35_seterr(err, "%s: not a JSON object", path);
    goto done;
  }
  json_t *tc = json_object_get(root, "text_config");
  if (tc) {
    if (!json_is_object(tc)) {
      q35_seterr(err, "%s: key 'text_config' is not an object", path);
      goto done;
    }
    c.text = tc;
    c.tprefix = "text_config.";
  }
  /* model type: text_config's if present, else top level */
  json_t *mt = json_object_get(c.text, "model_type");
  const char *mtk = c.tprefix;
  if (!json_is_string(mt)) {
    mt = json_object_get(root, "model_type");
    mtk = "";
  }
  if (!json_is_string(mt)) {
    q35_seterr(err, "%s: key 'model_type' is missing (expected qwen3_5_moe or qwen3_5)", path);
    goto done;
  }
  const char *mts = json_string_value(mt);
  snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mts);
  if (!strcmp(mts, "qwen3_5_moe") || !strcmp(mts, "qwen3_5_moe_text")) cfg->moe = 1;
  else if (!strcmp(mts, "qwen3_5") || !strcmp(mts, "qwen3_5_text")) cfg->moe = 0;
  else {
    q35_seterr(err, "%s: key '%smodel_type' = '%s' is not supported (expected qwen3_5_moe, qwen3_5_moe_text, "
                    "qwen3_5 or qwen3_5_text)", path, mtk, mts);
    goto done;
  }
  const int64_t BIG = (int64_t)1 << 30;
  if (cfg_int(&c, "vocab_size", &cfg->vocab, 1, 0, 1, BIG) || cfg_int(&c, "hidden_size", &cfg->H, 1, 0, 1, 65536) ||
      cfg_int(&c, "num_hidden_layers", &cfg->L, 1, 0, 1, 4096) ||
      cfg_int(&c, "num_attention_heads", &cfg->nh, 1, 0, 1, 1024) ||
      cfg_int(&c, "num_key_value_heads", &cfg->nkv, 1, 0, 1, 1024))
    goto done;
  if (cfg_int(&c, "head_dim", &cfg->hd, 0, cfg->H / cfg->nh, 2, 4096) ||
      cfg_int(&c, "max_position_embeddings", &cfg->ctx, 0, 262144, 1, (int64_t)1 << 32) ||
      cfg_int(&c, "linear_conv_kernel_dim", &cfg->conv_k, 1, 0, 1, 16) ||
      cfg_int(&c, "linear_key_head_dim", &cfg->dk, 1, 0, 1, 4096) ||
      cfg_int(&c, "linear_value_head_dim", &cfg->dv, 1, 0, 1, 4096) ||
      cfg_int(&c, "linear_num_key_heads", &cfg->Hk, 1, 0, 1, 4096) ||
      cfg_int(&c, "linear_num_value_heads", &cfg->Hv, 1, 0, 1, 4096))
    goto done;
  if (cfg->nh % cfg->nkv) {
    q35_seterr(err, "%s: '%snum_attention_heads' (%lld) must be a multiple of '%snum_key_value_heads' (%lld)", path,
               c.tprefix, (long long)cfg->nh, c.tprefix, (long long)cfg->nkv);
    goto done;
  }
  if (cfg->Hv % cfg->Hk) {
    q35_seterr(err, "%s: '%slinear_num_value_heads' (%lld) must be a multiple of '%slinear_num_key_heads' (%lld)",
               path, c.tprefix, (long long)cfg->Hv, c.tprefix, (long long)cfg->Hk);
    goto done;
  }
  if (cfg->moe) {
    if (cfg_int(&c, "num_experts", &cfg->E, 1, 0, 1, 65536) ||
        cfg_int(&c, "num_experts_per_tok", &cfg->topk, 1, 0, 1, 65536) ||
        cfg_int(&c, "moe_intermediate_size", &cfg->I, 1, 0, 1, BIG) ||
        cfg_int(&c, "shared_expert_intermediate_size", &cfg->Is, 0, 0, 0, BIG))
      goto done;
    if (cfg->topk > cfg->E) {
      q35_seterr(err, "%s: '%snum_experts_per_tok' (%lld) exceeds '%snum_experts' (%lld)", path, c.tprefix,
                 (long long)cfg->topk, c.tprefix, (long long)cfg->E);
      goto done;
    }
  } else {
    if (cfg_int(&c, "intermediate_size", &cfg->F, 1, 0, 1, BIG)) goto done;
  }
  /* rope: rope_parameters{rope_theta, partial_rotary_factor, mrope_section, rope_type} or flat keys */
  json_t *rp = json_object_get(c.text, "rope_parameters");
  if (!rp) rp = json_object_get(c.text, "rope_scaling");
  if (rp && !json_is_object(rp) && !json_is_null(rp)) {
    q35_seterr(err, "%s: key '%srope_parameters' is not an object", path, c.tprefix);
    goto done;
  }
  if (!json_is_object(rp)) rp = NULL;
  int found;
  cfg->theta = 10000.0;
  if (cfg_num(&c, rp, "rope_parameters.", "rope_theta", &cfg->theta, &found)) goto done;
  if (!found && cfg_num(&c, c.text, "", "rope_theta", &cfg->theta, &found)) goto done;
  double partial = 0.25; /* Qwen3.5's default */
  if (cfg_num(&c, c.text, "", "partial_rotary_factor", &partial, &found)) goto done;
  if (!found && cfg_num(&c, rp, "rope_parameters.", "partial_rotary_factor", &partial, &found)) goto done;
  if (!(cfg->theta > 0) || !(partial > 0) || partial > 1) {
    q35_seterr(err, "%s: rope_theta must be positive and partial_rotary_factor in (0, 1]", path);
    goto done;
  }
  if (rp) {
    json_t *rt = json_object_get(rp, "rope_type");
    if (!rt) rt = json_object_get(rp, "type");
    if (rt && (!json_is_string(rt) || strcmp(json_string_value(rt), "default"))) {
      q35_seterr(err, "%s: key '%srope_parameters.rope_type' = '%s': only 'default' rope is supported", path,
                 c.tprefix, json_is_string(rt) ? json_string_value(rt) : "(not a string)");
      goto done;
    }
  }
  cfg->n_rot = (int64_t)(cfg->hd * partial);
  if (cfg->n_rot < 2 || cfg->n_rot % 2) {
    q35_seterr(err, "%s: head_dim %lld * partial_rotary_factor %g = %lld rotary dims: must be even and >= 2", path,
               (long long)cfg->hd, partial, (long long)cfg->n_rot);
    goto done;
  }
  {
    const int s = (int)(cfg->n_rot / 2);
    cfg->sections[0] = (s + 2) / 3;
    cfg->sections[1] = (s + 1) / 3;
    cfg->sections[2] = s / 3;
    cfg->sections[3] = 0;
    json_t *ms = rp ? json_object_get(rp, "mrope_section") : NULL;
    if (ms) {
      if (!json_is_array(ms) || json_array_size(ms) < 1 || json_array_size(ms) > 4) {
        q35_seterr(err, "%s: key '%srope_parameters.mrope_section' must be an array of 1 to 4 integers", path,
                   c.tprefix);
        goto done;
      }
      for (int i = 0; i < 4; i++) {
        json_t *e = json_array_get(ms, (size_t)i);
        if (e && (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 4096)) {
          q35_seterr(err, "%s: key '%srope_parameters.mrope_section' must hold non-negative integers", path,
                     c.tprefix);
          goto done;
        }
        cfg->sections[i] = e ? (int32_t)json_integer_value(e) : 0;
      }
    }
  }
  cfg->eps = 1e-6;
  if (cfg_num(&c, c.text, "", "rms_norm_eps", &cfg->eps, &found)) goto done;
  if (!(cfg->eps > 0)) {
    q35_seterr(err, "%s: key '%srms_norm_eps' must be positive", path, c.tprefix);
    goto done;
  }
  /* layer pattern */
  json_t *lt = json_object_get(c.text, "layer_types");
  if (lt) {
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->L) {
      q35_seterr(err, "%s: key '%slayer_types' must be an array of num_hidden_layers (%lld) strings", path, c.tprefix,
                 (long long)cfg->L);
      goto done;
    }
    int64_t first = -1;
    for (int64_t i = 0; i < cfg->L; i++) {
      const char *s = json_string_value(json_array_get(lt, (size_t)i));
      if (!s || (strcmp(s, "full_attention") && strcmp(s, "linear_attention"))) {
        q35_seterr(err, "%s: key '%slayer_types[%lld]' must be \"full_attention\" or \"linear_attention\"", path,
                   c.tprefix, (long long)i);
        goto done;
      }
      if (first < 0 && !strcmp(s, "full_attention")) first = i;
    }
    cfg->interval = first < 0 ? cfg->L + 1 : first + 1;
    for (int64_t i = 0; i < cfg->L; i++) {
      const int full = !strcmp(json_string_value(json_array_get(lt, (size_t)i)), "full_attention");
      if (full != ((i + 1) % cfg->interval == 0)) {
        q35_seterr(err, "%s: key '%slayer_types': layer %lld breaks the periodic pattern (full attention every %lld "
                        "layers) that GGUF's full_attention_interval can express", path, c.tprefix, (long long)i,
                   (long long)cfg->interval);
        goto done;
      }
    }
    int64_t iv;
    if (cfg_int(&c, "full_attention_interval", &iv, 0, cfg->interval, 1, 4096)) goto done;
    if (iv != cfg->interval && first >= 0) {
      q35_seterr(err, "%s: '%sfull_attention_interval' (%lld) contradicts '%slayer_types' (%lld)", path, c.tprefix,
                 (long long)iv, c.tprefix, (long long)cfg->interval);
      goto done;
    }
  } else if (cfg_int(&c, "full_attention_interval", &cfg->interval, 0, 4, 1, 4096)) {
    goto done;
  }
  /* an interval past the last layer (e.g. the default 4 with 2 layers) means no full-attention
   * layer, which L + 1 says too: one value per pattern (found by the hfconfig fuzz target) */
  if (cfg->interval > cfg->L + 1) cfg->interval = cfg->L + 1;
  /* tie_word_embeddings: text_config's, else top level, else false */
  json_t *tw = json_object_get(c.text, "tie_word_embeddings");
  if (!tw) tw = json_object_get(root, "tie_word_embeddings");
  if (tw && !json_is_boolean(tw)) {
    q35_seterr(err, "%s: key 'tie_word_embeddings' must be true or false", path);
    goto done;
  }
  cfg->tied = tw ? json_is_true(tw) : 0;
  rc = 0;
done:
  json_decref(root);
  return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* plan                                                                                      */

enum { G_PLAIN, G_ROWPERM, G_COLPERM, G_FUSED, G_SPLIT };
enum { OP_NONE, OP_PLUS1, OP_NEGEXP };

typedef struct otensor {
  char name[96];
  int n_dims;
  int64_t ne[3];
  int type;
  int gather, op;
  const st_tensor *src;
  const st_tensor **srcs; /* G_SPLIT: E entries */
  int64_t perm_start, perm_block;
  int64_t fused_off, fused_rows;
  int index; /* in the writer */
} otensor;

typedef struct plan {
  const char *dir;
  st_set *st;
  unsigned char *used; /* per source tensor */
  const char *P;       /* language-model prefix: "model.language_model." or "model." */
  hfcfg cfg;
  otensor *t;
  int n, cap;
  q35_err *err;
  const q35_export_opts *o;
  int t_lin, t_emb, t_out;
} plan;

static otensor *new_out(plan *p) {
  if (p->n == p->cap) {
    int nc = p->cap ? 2 * p->cap : 128;
    otensor *nt = realloc(p->t, (size_t)nc * sizeof *nt);
    if (!nt) return NULL;
    p->t = nt;
    p->cap = nc;
  }
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
  int t = (type == Q35_TYPE_Q4_K || type == Q35_TYPE_IQ4_XS || type == Q35_TYPE_Q4_0 || type == Q35_TYPE_Q5_K)
              ? Q35_TYPE_Q5_0
              : Q35_TYPE_Q8_0;
  *out = ne0 % 32 == 0 ? t : Q35_TYPE_F16;
  return 0;
}

#define LN(buf, fmt, ...) (snprintf(buf, sizeof buf, "%s" fmt, p->P, __VA_ARGS__), buf)

/* Add an output tensor with a plain gather from one source. */
static otensor *out_plain(plan *p, const char *gname, int type, const st_tensor *src, int n_dims, int64_t ne0,
                          int64_t ne1, int64_t ne2, int op) {
  otensor *t = new_out(p);
  if (!t) {
    q35_seterr(p->err, "out of memory");
    return NULL;
  }
  snprintf(t->name, sizeof t->name, "%s", gname);
  t->n_dims = n_dims;
  t->ne[0] = ne0;
  t->ne[1] = ne1;
  t->ne[2] = ne2;
  t->src = src;
  t->op = op;
  t->gather = G_PLAIN;
  if (type != Q35_TYPE_F32 && pick_type(p, gname, type, ne0, &t->type)) return NULL;
  return t;
}

static int build_plan(plan *p) {
  const hfcfg *c = &p->cfg;
  const int64_t H = c->H, hd = c->hd, nh = c->nh, nkv = c->nkv;
  const int64_t Hk = c->Hk, Hv = c->Hv, dk = c->dk, dv = c->dv, C = 2 * Hk * dk + Hv * dv, K = c->conv_k;
  char n1[256], n2[256], gn[96];
  const st_tensor *s;
  otensor *t;

  /* prefix of the language model */
  if (st_find(p->st, "model.language_model.embed_tokens.weight")) p->P = "model.language_model.";
  else if (st_find(p->st, "model.embed_tokens.weight")) p->P = "model.";
  else
    return q35_seterr(p->err, "%s: tensor 'model.language_model.embed_tokens.weight' (or 'model.embed_tokens.weight') "
                              "is missing", p->dir);

  if (!(s = need(p, LN(n1, "%s", "embed_tokens.weight"), 2, c->vocab, H, 0))) return -1;
  if (!out_plain(p, "token_embd.weight", p->t_emb, s, 2, H, c->vocab, 1, OP_NONE)) return -1;
  if (!(s = need(p, LN(n1, "%s", "norm.weight"), 1, H, 0, 0))) return -1;
  if (!out_plain(p, "output_norm.weight", Q35_TYPE_F32, s, 1, H, 1, 1, OP_PLUS1)) return -1;
  const char *lm = "lm_head.weight";
  if (!st_find(p->st, lm) && st_find(p->st, "model.language_model.lm_head.weight"))
    lm = "model.language_model.lm_head.weight";
  if (st_find(p->st, lm)) {
    if (!(s = need(p, lm, 2, c->vocab, H, 0))) return -1;
    if (!c->tied && !out_plain(p, "output.weight", p->t_out, s, 2, H, c->vocab, 1, OP_NONE)) return -1;
  }

  for (int64_t il = 0; il < c->L; il++) {
    const int is_attn = (il + 1) % c->interval == 0;
#define G(sfx) (snprintf(gn, sizeof gn, "blk.%lld.%s", (long long)il, sfx), gn)
#define HF(sfx) (snprintf(n1, sizeof n1, "%slayers.%lld.%s", p->P, (long long)il, sfx), n1)
#define NEED(sfx, nd, a, b, cc)                           \
  do {                                                    \
    if (!(s = need(p, HF(sfx), nd, a, b, cc))) return -1; \
  } while (0)
#define PLAIN(gsfx, type, nd, a, b, cc, op)                                     \
  do {                                                                          \
    if (!(t = out_plain(p, G(gsfx), type, s, nd, a, b, cc, op))) return -1;     \
  } while (0)
    NEED("input_layernorm.weight", 1, H, 0, 0);
    PLAIN("attn_norm.weight", Q35_TYPE_F32, 1, H, 1, 1, OP_PLUS1);
    NEED("post_attention_layernorm.weight", 1, H, 0, 0);
    PLAIN("post_attention_norm.weight", Q35_TYPE_F32, 1, H, 1, 1, OP_PLUS1);
    if (is_attn) {
      NEED("self_attn.q_proj.weight", 2, nh * hd * 2, H, 0);
      PLAIN("attn_q.weight", p->t_lin, 2, H, nh * hd * 2, 1, OP_NONE);
      NEED("self_attn.k_proj.weight", 2, nkv * hd, H, 0);
      PLAIN("attn_k.weight", p->t_lin, 2, H, nkv * hd, 1, OP_NONE);
      NEED("self_attn.v_proj.weight", 2, nkv * hd, H, 0);
      PLAIN("attn_v.weight", p->t_lin, 2, H, nkv * hd, 1, OP_NONE);
      NEED("self_attn.o_proj.weight", 2, H, nh * hd, 0);
      PLAIN("attn_output.weight", p->t_lin, 2, nh * hd, H, 1, OP_NONE);
      NEED("self_attn.q_norm.weight", 1, hd, 0, 0);
      PLAIN("attn_q_norm.weight", Q35_TYPE_F32, 1, hd, 1, 1, OP_PLUS1);
      NEED("self_attn.k_norm.weight", 1, hd, 0, 0);
      PLAIN("attn_k_norm.weight", Q35_TYPE_F32, 1, hd, 1, 1, OP_PLUS1);
    } else {
      NEED("linear_attn.in_proj_qkv.weight", 2, C, H, 0);
      PLAIN("attn_qkv.weight", p->t_lin, 2, H, C, 1, OP_NONE);
      t->gather = G_ROWPERM, t->perm_start = 2 * Hk * dk, t->perm_block = dv;
      NEED("linear_attn.in_proj_z.weight", 2, Hv * dv, H, 0);
      PLAIN("attn_gate.weight", p->t_lin, 2, H, Hv * dv, 1, OP_NONE);
      t->gather = G_ROWPERM, t->perm_start = 0, t->perm_block = dv;
      NEED("linear_attn.in_proj_b.weight", 2, Hv, H, 0);
      PLAIN("ssm_beta.weight", p->t_lin, 2, H, Hv, 1, OP_NONE);
      t->gather = G_ROWPERM, t->perm_start = 0, t->perm_block = 1;
      NEED("linear_attn.in_proj_a.weight", 2, Hv, H, 0);
      PLAIN("ssm_alpha.weight", p->t_lin, 2, H, Hv, 1, OP_NONE);
      t->gather = G_ROWPERM, t->perm_start = 0, t->perm_block = 1;
      /* conv1d [C, 1, K] (or already squeezed [C, K]) -> {K, C}: same bytes */
      {
        const st_tensor *cv = st_find(p->st, HF("linear_attn.conv1d.weight"));
        if (cv && cv->n_dims == 2) NEED("linear_attn.conv1d.weight", 2, C, K, 0);
        else NEED("linear_attn.conv1d.weight", 3, C, 1, K);
      }
      PLAIN("ssm_conv1d.weight", Q35_TYPE_F32, 2, K, C, 1, OP_NONE);
      t->gather = G_ROWPERM, t->perm_start = 2 * Hk * dk, t->perm_block = dv;
      NEED("linear_attn.dt_bias", 1, Hv, 0, 0);
      PLAIN("ssm_dt.bias", Q35_TYPE_F32, 1, Hv, 1, 1, OP_NONE);
      t->gather = G_COLPERM, t->perm_block = 1;
      NEED("linear_attn.A_log", 1, Hv, 0, 0);
      PLAIN("ssm_a", Q35_TYPE_F32, 1, Hv, 1, 1, OP_NEGEXP);
      t->gather = G_COLPERM, t->perm_block = 1;
      NEED("linear_attn.norm.weight", 1, dv, 0, 0);
      PLAIN("ssm_norm.weight", Q35_TYPE_F32, 1, dv, 1, 1, OP_NONE);
      NEED("linear_attn.out_proj.weight", 2, H, Hv * dv, 0);
      PLAIN("ssm_out.weight", p->t_lin, 2, Hv * dv, H, 1, OP_NONE);
      t->gather = G_COLPERM, t->perm_block = dv;
    }
    if (c->moe) {
      const int64_t E = c->E, I = c->I;
      NEED("mlp.gate.weight", 2, E, H, 0);
      PLAIN("ffn_gate_inp.weight", Q35_TYPE_F32, 2, H, E, 1, OP_NONE);
      /* experts: fused [E, 2I, H] / [E, H, I] or per-expert */
      const char *gu = HF("mlp.experts.gate_up_proj");
      if (!st_find(p->st, gu)) gu = HF("mlp.experts.gate_up_proj.weight");
      if (st_find(p->st, gu)) {
        snprintf(n2, sizeof n2, "%s", gu);
        if (!(s = need(p, n2, 3, E, 2 * I, H))) return -1;
        for (int part = 0; part < 2; part++) {
          PLAIN(part ? "ffn_up_exps.weight" : "ffn_gate_exps.weight", p->t_lin, 3, H, I, E, OP_NONE);
          t->gather = G_FUSED, t->fused_off = part * I, t->fused_rows = 2 * I;
        }
      } else {
        static const char *const hfp[2] = {"gate_proj", "up_proj"};
        for (int part = 0; part < 2; part++) {
          const st_tensor **srcs = calloc((size_t)E, sizeof *srcs);
          if (!srcs) return q35_seterr(p->err, "out of memory");
          for (int64_t e = 0; e < E && srcs; e++) {
            snprintf(n2, sizeof n2, "%slayers.%lld.mlp.experts.%lld.%s.weight", p->P, (long long)il, (long long)e,
                     hfp[part]);
            if (!(srcs[e] = need(p, n2, 2, I, H, 0))) {
              if (e == 0 && part == 0)
                q35_seterr(p->err, "%s: layer %lld has neither fused experts ('%s') nor per-expert tensors ('%s' "
                                   "is missing)", p->dir, (long long)il, gu, n2);
              free(srcs);
              return -1;
            }
          }
          s = srcs[0];
          PLAIN(part ? "ffn_up_exps.weight" : "ffn_gate_exps.weight", p->t_lin, 3, H, I, E, OP_NONE);
          t->gather = G_SPLIT, t->srcs = srcs;
        }
      }
      const char *dn = HF("mlp.experts.down_proj");
      if (!st_find(p->st, dn)) dn = HF("mlp.experts.down_proj.weight");
      if (st_find(p->st, dn)) {
        snprintf(n2, sizeof n2, "%s", dn);
        if (!(s = need(p, n2, 3, E, H, I))) return -1;
        PLAIN("ffn_down_exps.weight", p->t_lin, 3, I, H, E, OP_NONE);
      } else {
        const st_tensor **srcs = calloc((size_t)E, sizeof *srcs);
        if (!srcs) return q35_seterr(p->err, "out of memory");
        for (int64_t e = 0; e < E; e++) {
          snprintf(n2, sizeof n2, "%slayers.%lld.mlp.experts.%lld.down_proj.weight", p->P, (long long)il,
                   (long long)e);
          if (!(srcs[e] = need(p, n2, 2, H, I, 0))) {
            free(srcs);
            return -1;
          }
        }
        s = srcs[0];
        PLAIN("ffn_down_exps.weight", p->t_lin, 3, I, H, E, OP_NONE);
        t->gather = G_SPLIT, t->srcs = srcs;
      }
      const int has_shexp = c->Is > 0 || st_find(p->st, HF("mlp.shared_expert.gate_proj.weight"));
      if (has_shexp) {
        const int64_t Is = c->Is;
        if (Is <= 0)
          return q35_seterr(p->err, "%s/config.json: shared expert tensors exist but "
                                    "'shared_expert_intermediate_size' is missing or 0", p->dir);
        NEED("mlp.shared_expert.gate_proj.weight", 2, Is, H, 0);
        PLAIN("ffn_gate_shexp.weight", p->t_lin, 2, H, Is, 1, OP_NONE);
        NEED("mlp.shared_expert.up_proj.weight", 2, Is, H, 0);
        PLAIN("ffn_up_shexp.weight", p->t_lin, 2, H, Is, 1, OP_NONE);
        NEED("mlp.shared_expert.down_proj.weight", 2, H, Is, 0);
        PLAIN("ffn_down_shexp.weight", p->t_lin, 2, Is, H, 1, OP_NONE);
        const st_tensor *sg = st_find(p->st, HF("mlp.shared_expert_gate.weight"));
        if (sg && sg->n_dims == 1) NEED("mlp.shared_expert_gate.weight", 1, H, 0, 0);
        else NEED("mlp.shared_expert_gate.weight", 2, 1, H, 0);
        PLAIN("ffn_gate_inp_shexp.weight", Q35_TYPE_F32, 1, H, 1, 1, OP_NONE);
      }
    } else {
      NEED("mlp.gate_proj.weight", 2, c->F, H, 0);
      PLAIN("ffn_gate.weight", p->t_lin, 2, H, c->F, 1, OP_NONE);
      NEED("mlp.up_proj.weight", 2, c->F, H, 0);
      PLAIN("ffn_up.weight", p->t_lin, 2, H, c->F, 1, OP_NONE);
      NEED("mlp.down_proj.weight", 2, H, c->F, 0);
      PLAIN("ffn_down.weight", p->t_lin, 2, c->F, H, 1, OP_NONE);
    }
#undef G
#undef HF
#undef NEED
#undef PLAIN
  }
  /* every source tensor must be used or skipped on purpose */
  for (size_t i = 0; i < st_count(p->st); i++) {
    if (p->used[i]) continue;
    const st_tensor *u = st_get(p->st, i);
    const char *nm = u->name;
    if (!strncmp(nm, "model.visual.", 13) || !strncmp(nm, "visual.", 7) || !strncmp(nm, "mtp.", 4) ||
        !strncmp(nm, "model.mtp.", 10) || strstr(nm, "rotary_emb.inv_freq"))
      continue;
    if ((!strcmp(nm, "lm_head.weight") || !strcmp(nm, "model.language_model.lm_head.weight")) && c->tied) continue;
    return q35_seterr(p->err, "%s: unexpected tensor '%s' (not part of a %s model with this config.json: "
                              "%lld layers, full attention every %lld)", u->file, nm, c->model_type,
                      (long long)c->L, (long long)c->interval);
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* conversion                                                                                */

static inline int64_t vperm(int64_t j, int64_t Hk, int64_t R) { return (j % Hk) * R + j / Hk; }

/* Produce output row r of t into row (t->ne[0] floats); tmp: scratch of the same size. */
static void get_row(const plan *p, const otensor *t, int64_t r, float *row, float *tmp) {
  const int64_t n = t->ne[0], Hk = p->cfg.Hk, R = p->cfg.Hv / p->cfg.Hk;
  switch (t->gather) {
    case G_PLAIN: st_read_f32(t->src, r * n, n, row); break;
    case G_ROWPERM: {
      int64_t sr = r;
      if (r >= t->perm_start) {
        const int64_t k = r - t->perm_start, j = k / t->perm_block, w = k % t->perm_block;
        sr = t->perm_start + vperm(j, Hk, R) * t->perm_block + w;
      }
      st_read_f32(t->src, sr * n, n, row);
      break;
    }
    case G_COLPERM: {
      st_read_f32(t->src, r * n, n, tmp);
      const int64_t b = t->perm_block;
      for (int64_t c = 0; c < n; c++) row[c] = tmp[vperm(c / b, Hk, R) * b + c % b];
      break;
    }
    case G_FUSED: {
      const int64_t I = t->ne[1], e = r / I, i = r % I;
      st_read_f32(t->src, (e * t->fused_rows + t->fused_off + i) * n, n, row);
      break;
    }
    case G_SPLIT: {
      const int64_t I = t->ne[1], e = r / I, i = r % I;
      st_read_f32(t->srcs[e], i * n, n, row);
      break;
    }
  }
  if (t->op == OP_PLUS1)
    for (int64_t c = 0; c < n; c++) row[c] += 1.0f;
  else if (t->op == OP_NEGEXP)
    for (int64_t c = 0; c < n; c++) row[c] = -expf(row[c]);
}

typedef struct conv_job {
  const plan *p;
  const otensor *t;
  void *buf;
  float *row, *tmp;
  int64_t r0, r1, bad_row;
} conv_job;

/* Convert rows [r0, r1) of a tensor into its slot of the output buffer. */
static void *conv_worker(void *arg) {
  conv_job *j = arg;
  const otensor *t = j->t;
  const size_t rb = q35_row_size(t->type, t->ne[0]);
  for (int64_t r = j->r0; r < j->r1; r++) {
    get_row(j->p, t, r, j->row, j->tmp);
    for (int64_t c = 0; c < t->ne[0]; c++)
      if (!isfinite(j->row[c])) {
        j->bad_row = r;
        return NULL;
      }
    q35_quantize_row(t->type, j->row, (char *)j->buf + (size_t)r * rb, t->ne[0]);
  }
  return NULL;
}

static uint64_t rss_anon(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "RssAnon:", 8)) {
      kb = strtoull(line + 8, NULL, 10);
      break;
    }
  fclose(f);
  return kb * 1024;
}

static int file_type_of(int t) {
  switch (t) {
    case Q35_TYPE_F32: return 0;
    case Q35_TYPE_F16: return 1;
    case Q35_TYPE_Q4_0: return 2;
    case Q35_TYPE_Q8_0: return 7;
    case Q35_TYPE_Q5_0: return 8;
    case Q35_TYPE_Q4_K: return 15; /* Q4_K_M: q4_k with q6_k output */
    case Q35_TYPE_Q5_K: return 17;
    case Q35_TYPE_Q6_K: return 18;
    case Q35_TYPE_IQ4_XS: return 30;
    case Q35_TYPE_BF16: return 32;
    default: return 0;
  }
}

static void progress(const q35_export_opts *o, int tty, int i, int n, uint64_t done, uint64_t total, const char *name,
                     int *last_pct) {
  if (!o->progress) return;
  const double mib = 1.0 / (1024.0 * 1024.0);
  const int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
  if (tty) {
    char bar[31];
    const int fill = pct * 30 / 100;
    for (int k = 0; k < 30; k++) bar[k] = k < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r[%s] %3d%%  tensor %d/%d  %.1f/%.1f MiB  %-40.40s", bar, pct, i, n, done * mib, total * mib,
            name);
    if (i == n) fputc('\n', stderr);
  } else if (pct >= *last_pct + 10 || i == n) {
    fprintf(stderr, "q35 export: %3d%%  tensor %d/%d  %.1f/%.1f MiB\n", pct, i, n, done * mib, total * mib);
    *last_pct = pct;
  }
  fflush(stderr);
}

static int load_template_file(const char *dir, char **out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  while (b) {
    size_t k = fread(b + n, 1, cap - n - 1, f);
    n += k;
    if (k == 0) break;
    if (n + 1 == cap) {
      char *nb = realloc(b, cap *= 2);
      if (!nb) {
        free(b);
        b = NULL;
      } else {
        b = nb;
      }
    }
  }
  fclose(f);
  if (!b) return -1;
  b[n] = 0;
  *out = b;
  return 0;
}

int q35_export_hf(const q35_export_opts *o, q35_export_stats *st, q35_err *err) {
  q35_export_stats dummy;
  if (!st) st = &dummy;
  memset(st, 0, sizeof *st);
  if (!o->model_dir || !o->out) return q35_seterr(err, "export: the model directory and the output path are required");
  const int types_ok[] = {o->qlinear, o->qembedding, o->qoutput < 0 ? o->qlinear : o->qoutput};
  for (int i = 0; i < 3; i++)
    if (!q35_type_supported(types_ok[i]) || types_ok[i] == Q35_TYPE_Q8_K)
      return q35_seterr(err, "export: type %d is not a supported weight type", types_ok[i]);

  plan p;
  memset(&p, 0, sizeof p);
  p.dir = o->model_dir;
  p.err = err;
  p.o = o;
  p.t_lin = o->qlinear;
  p.t_emb = o->qembedding;
  p.t_out = o->qoutput >= 0 ? o->qoutput : (o->qlinear == Q35_TYPE_Q4_K ? Q35_TYPE_Q6_K : o->qlinear);
  q35_tokenizer *tok = NULL;
  gguf_writer *w = NULL;
  char *tmpl = NULL;
  void *buf = NULL;
  float *row = NULL, *tmp = NULL;
  int rc = -1;

  /* 1. read and validate everything */
  if (read_config(o->model_dir, &p.cfg, err)) goto done;
  p.st = st_open_dir(o->model_dir, err);
  if (!p.st) goto done;
  p.used = calloc(st_count(p.st) + 1, 1);
  if (!p.used) {
    q35_seterr(err, "out of memory");
    goto done;
  }
  if (build_plan(&p)) goto done;
  {
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", o->model_dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", o->model_dir);
    if (access(tj, F_OK) != 0) {
      q35_seterr(err, "%s: missing (the tokenizer is needed for the GGUF's tokenizer block)", tj);
      goto done;
    }
    tok = q35_tokenizer_from_json(tj, access(tc, F_OK) == 0 ? tc : NULL, err);
    if (!tok) goto done;
    if (q35_tokenizer_n_vocab(tok) > p.cfg.vocab) {
      q35_seterr(err, "%s: the tokenizer has %d tokens but config.json's vocab_size is %lld", tj,
                 q35_tokenizer_n_vocab(tok), (long long)p.cfg.vocab);
      goto done;
    }
    if (!q35_tokenizer_chat_template(tok) && load_template_file(o->model_dir, &tmpl)) {
      q35_seterr(err, "out of memory");
      goto done;
    }
  }

  /* 2. metadata and tensor declarations */
  w = gguf_writer_new();
  if (!w) {
    q35_seterr(err, "out of memory");
    goto done;
  }
  {
    const hfcfg *c = &p.cfg;
    const char *arch = c->moe ? "qwen35moe" : "qwen35";
    char key[128];
    gguf_set_str(w, "general.architecture", arch);
    {
      const char *base = strrchr(o->model_dir, '/');
      base = base && base[1] ? base + 1 : o->model_dir;
      gguf_set_str(w, "general.name", base);
    }
    gguf_set_u32(w, "general.file_type", (uint32_t)file_type_of(p.t_lin));
    gguf_set_u32(w, "general.quantization_version", 2);
#define KU32(k_, v_)                              \
  do {                                            \
    snprintf(key, sizeof key, "%s.%s", arch, k_); \
    gguf_set_u32(w, key, (uint32_t)(v_));         \
  } while (0)
    KU32("block_count", c->L);
    KU32("context_length", c->ctx);
    KU32("embedding_length", c->H);
    if (!c->moe) KU32("feed_forward_length", c->F);
    KU32("attention.head_count", c->nh);
    KU32("attention.head_count_kv", c->nkv);
    KU32("attention.key_length", c->hd);
    KU32("attention.value_length", c->hd);
    KU32("rope.dimension_count", c->n_rot);
    snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
    gguf_set_arr_i32(w, key, c->sections, 4);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    gguf_set_f32(w, key, (float)c->theta);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_set_f32(w, key, (float)c->eps);
    if (c->moe) {
      KU32("expert_count", c->E);
      KU32("expert_used_count", c->topk);
      KU32("expert_feed_forward_length", c->I);
      KU32("expert_shared_feed_forward_length", c->Is);
    }
    KU32("ssm.conv_kernel", c->conv_k);
    KU32("ssm.state_size", c->dk);
    KU32("ssm.group_count", c->Hk);
    KU32("ssm.time_step_rank", c->Hv);
    KU32("ssm.inner_size", c->Hv * c->dv);
    KU32("full_attention_interval", c->interval);
#undef KU32
    if (q35_tokenizer_write_gguf_padded(tok, w, NULL, (int32_t)c->vocab)) {
      q35_seterr(err, "%s/tokenizer.json: cannot write the tokenizer block", o->model_dir);
      goto done;
    }
    if (tmpl) gguf_set_str(w, "tokenizer.chat_template", tmpl);
  }
  q35_tokenizer_free(tok);
  tok = NULL;
  free(tmpl);
  tmpl = NULL;
  malloc_trim(0);

  size_t maxbuf = 0;
  int64_t maxrow = 1;
  for (int i = 0; i < p.n; i++) {
    otensor *t = &p.t[i];
    int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], 1};
    t->index = gguf_add_tensor(w, t->name, t->type, (uint32_t)t->n_dims, ne, NULL);
    if (t->index < 0) {
      q35_seterr(err, "%s: cannot declare tensor '%s'", o->out, t->name);
      goto done;
    }
    const size_t nb = q35_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
    if (nb > maxbuf) maxbuf = nb;
    if (t->ne[0] > maxrow) maxrow = t->ne[0];
    st->bytes_out += nb;
    st->bytes_in += (uint64_t)t->src->nbytes / (t->gather == G_FUSED ? 2 : 1) *
                    (t->gather == G_SPLIT ? (uint64_t)t->ne[2] : 1);
    if (t->src->nbytes > st->largest_in) st->largest_in = t->src->nbytes;
  }
  st->largest_out = maxbuf;
  st->n_tensors = p.n;
  int nthreads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nthreads < 1) nthreads = 1;
  if (nthreads > 16) nthreads = 16;
  conv_job jobs[16];
  buf = malloc(maxbuf ? maxbuf : 1);
  row = malloc((size_t)maxrow * sizeof(float) * (size_t)nthreads);
  tmp = malloc((size_t)maxrow * sizeof(float) * (size_t)nthreads);
  for (int k = 0; k < nthreads && row && tmp; k++) {
    jobs[k].row = row + (size_t)k * (size_t)maxrow;
    jobs[k].tmp = tmp + (size_t)k * (size_t)maxrow;
  }
  if (!buf || !row || !tmp) {
    q35_seterr(err, "out of memory (the largest output tensor needs %zu bytes)", maxbuf);
    goto done;
  }

  /* 3. stream */
  if (gguf_writer_begin(w, o->out, err)) goto done;
  if (o->stats) st->rss_anon_start = st->rss_anon_peak = rss_anon();
  {
    const int tty = isatty(2);
    int last_pct = -100;
    uint64_t done_b = 0;
    for (int i = 0; i < p.n; i++) {
      const otensor *t = &p.t[i];
      const int64_t rows = t->ne[1] * t->ne[2];
      const size_t rb = q35_row_size(t->type, t->ne[0]);
      /* rows are independent: split them over the threads */
      int nth = rows * t->ne[0] >= (1 << 16) ? nthreads : 1;
      if (nth > rows) nth = (int)rows;
      pthread_t tid[64];
      int started = 0;
      for (int k = 0; k < nth; k++) {
        conv_job *j = &jobs[k];
        j->p = &p;
        j->t = t;
        j->buf = buf;
        j->r0 = rows * k / nth;
        j->r1 = rows * (k + 1) / nth;
        j->bad_row = -1;
        if (k > 0 && pthread_create(&tid[k], NULL, conv_worker, j) == 0) started |= 1 << k;
        else if (k > 0) conv_worker(j); /* could not start a thread: do it here */
      }
      conv_worker(&jobs[0]);
      int64_t bad = -1;
      for (int k = 0; k < nth; k++) {
        if (started & (1 << k)) pthread_join(tid[k], NULL);
        if (jobs[k].bad_row >= 0 && bad < 0) bad = jobs[k].bad_row;
      }
      if (bad >= 0) {
        q35_seterr(err, "%s: tensor '%s' (for '%s') holds a non-finite value at row %lld", t->src->file,
                   t->src->name, t->name, (long long)bad);
        goto done;
      }
      if (o->stats) {
        uint64_t ra = rss_anon();
        if (ra > st->rss_anon_peak) st->rss_anon_peak = ra;
      }
      if (gguf_writer_write_tensor(w, t->index, buf, err)) goto done;
      done_b += rb * (uint64_t)rows;
      progress(o, tty, i + 1, p.n, done_b, st->bytes_out, t->name, &last_pct);
    }
  }
  if (gguf_writer_finish(w, err)) goto done;
  rc = 0;
done:
  if (w) gguf_writer_abort(w);
  gguf_writer_free(w);
  for (int i = 0; i < p.n; i++) free(p.t[i].srcs);
  free(p.t);
  free(p.used);
  st_close(p.st);
  q35_tokenizer_free(tok);
  free(tmpl);
  free(buf);
  free(row);
  free(tmp);
  return rc;
}
