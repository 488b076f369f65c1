/*
 * hf_config.c - config.json of a Hugging Face Qwen3.5 checkpoint -> hfcfg (see hf_internal.h).
 * The text parameters live under text_config in the multimodal layout, at the top level in the
 * text-only one; every value the GGUF writer later relies on is checked here, with a message
 * naming the file and the key.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "export/hf_internal.h"
#include "export/qwen35_gguf.h"

/* Limits on config values: far above any real model, low enough for every size computed
 * from them to fit. */
#define CFG_BIG ((int64_t)1 << 30) /* vocabulary, FFN widths */
#define CFG_MAX_HIDDEN 65536
#define CFG_MAX_LAYERS 4096
#define CFG_MAX_HEADS 1024
#define CFG_MAX_DIM 4096       /* head dims, DeltaNet heads, the interval, M-RoPE sections */
#define CFG_MAX_CONV_KERNEL 16
#define CFG_MAX_EXPERTS 65536
#define CFG_MAX_CONTEXT ((int64_t)1 << 32)
/* Defaults when a key is absent (Qwen3.5's) */
#define CFG_DEFAULT_CONTEXT 262144
#define CFG_DEFAULT_ROPE_THETA 10000.0
#define CFG_DEFAULT_PARTIAL_ROTARY 0.25
#define CFG_DEFAULT_RMS_EPS 1e-6
#define CFG_DEFAULT_INTERVAL 4
#define CFG_MAX_MROPE_SECTIONS 4

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

int hf_read_config(const char *dir, hfcfg *cfg, q35_err *err) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/config.json", dir);
  memset(cfg, 0, sizeof *cfg);
  if (access(path, F_OK) != 0)
    return q35_seterr(err, "%s: missing (a Hugging Face checkpoint needs config.json)", path);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return q35_seterr(err, "%s: malformed JSON: %s (line %d, column %d)", path, je.text, je.line, je.column);
  return hf_parse_config(path, root, cfg, err);
}

/* The document is an object; its text parameters are text_config's when present. */
static int cfg_text_object(cfgctx *c) {
  if (!json_is_object(c->root)) return q35_seterr(c->err, "%s: not a JSON object", c->path);
  json_t *tc = json_object_get(c->root, "text_config");
  if (tc) {
    if (!json_is_object(tc)) return q35_seterr(c->err, "%s: key 'text_config' is not an object", c->path);
    c->text = tc;
    c->tprefix = "text_config.";
  }
  return 0;
}

/* model type: text_config's if present, else top level; MoE or dense */
static int cfg_model_type(cfgctx *c, hfcfg *cfg) {
  json_t *mt = json_object_get(c->text, "model_type");
  const char *mtk = c->tprefix;
  if (!json_is_string(mt)) {
    mt = json_object_get(c->root, "model_type");
    mtk = "";
  }
  if (!json_is_string(mt))
    return q35_seterr(c->err, "%s: key 'model_type' is missing (expected qwen3_5_moe or qwen3_5)", c->path);
  const char *mts = json_string_value(mt);
  snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mts);
  if (!strcmp(mts, "qwen3_5_moe") || !strcmp(mts, "qwen3_5_moe_text")) cfg->moe = 1;
  else if (!strcmp(mts, "qwen3_5") || !strcmp(mts, "qwen3_5_text")) cfg->moe = 0;
  else
    return q35_seterr(c->err, "%s: key '%smodel_type' = '%s' is not supported (expected qwen3_5_moe, "
                              "qwen3_5_moe_text, qwen3_5 or qwen3_5_text)", c->path, mtk, mts);
  return 0;
}

/* vocabulary, widths, heads, DeltaNet and expert sizes */
static int cfg_sizes(cfgctx *c, hfcfg *cfg) {
  const char *path = c->path, *tp = c->tprefix;
  if (cfg_int(c, "vocab_size", &cfg->vocab, 1, 0, 1, CFG_BIG) ||
      cfg_int(c, "hidden_size", &cfg->H, 1, 0, 1, CFG_MAX_HIDDEN) ||
      cfg_int(c, "num_hidden_layers", &cfg->L, 1, 0, 1, CFG_MAX_LAYERS) ||
      cfg_int(c, "num_attention_heads", &cfg->nh, 1, 0, 1, CFG_MAX_HEADS) ||
      cfg_int(c, "num_key_value_heads", &cfg->nkv, 1, 0, 1, CFG_MAX_HEADS) ||
      cfg_int(c, "mtp_num_hidden_layers", &cfg->n_mtp, 0, 0, 0, CFG_MAX_LAYERS))
    return -1;
  if (cfg_int(c, "head_dim", &cfg->hd, 0, cfg->H / cfg->nh, 2, CFG_MAX_DIM) ||
      cfg_int(c, "max_position_embeddings", &cfg->ctx, 0, CFG_DEFAULT_CONTEXT, 1, CFG_MAX_CONTEXT) ||
      cfg_int(c, "linear_conv_kernel_dim", &cfg->conv_k, 1, 0, 1, CFG_MAX_CONV_KERNEL) ||
      cfg_int(c, "linear_key_head_dim", &cfg->dk, 1, 0, 1, CFG_MAX_DIM) ||
      cfg_int(c, "linear_value_head_dim", &cfg->dv, 1, 0, 1, CFG_MAX_DIM) ||
      cfg_int(c, "linear_num_key_heads", &cfg->Hk, 1, 0, 1, CFG_MAX_DIM) ||
      cfg_int(c, "linear_num_value_heads", &cfg->Hv, 1, 0, 1, CFG_MAX_DIM))
    return -1;
  if (cfg->nh % cfg->nkv)
    return q35_seterr(c->err, "%s: '%snum_attention_heads' (%lld) must be a multiple of '%snum_key_value_heads' "
                              "(%lld)", path, tp, (long long)cfg->nh, tp, (long long)cfg->nkv);
  if (cfg->Hv % cfg->Hk)
    return q35_seterr(c->err, "%s: '%slinear_num_value_heads' (%lld) must be a multiple of '%slinear_num_key_heads' "
                              "(%lld)", path, tp, (long long)cfg->Hv, tp, (long long)cfg->Hk);
  if (!cfg->moe) return cfg_int(c, "intermediate_size", &cfg->F, 1, 0, 1, CFG_BIG);
  if (cfg_int(c, "num_experts", &cfg->E, 1, 0, 1, CFG_MAX_EXPERTS) ||
      cfg_int(c, "num_experts_per_tok", &cfg->topk, 1, 0, 1, CFG_MAX_EXPERTS) ||
      cfg_int(c, "moe_intermediate_size", &cfg->I, 1, 0, 1, CFG_BIG) ||
      cfg_int(c, "shared_expert_intermediate_size", &cfg->Is, 0, 0, 0, CFG_BIG))
    return -1;
  if (cfg->topk > cfg->E)
    return q35_seterr(c->err, "%s: '%snum_experts_per_tok' (%lld) exceeds '%snum_experts' (%lld)", path, tp,
                      (long long)cfg->topk, tp, (long long)cfg->E);
  return 0;
}

/* M-RoPE sections: the default split of n_rot / 2 in three, or rope_parameters.mrope_section */
static int cfg_mrope_sections(cfgctx *c, json_t *rp, hfcfg *cfg) {
  q35_export_rope_sections((int)cfg->n_rot, cfg->sections);
  json_t *ms = rp ? json_object_get(rp, "mrope_section") : NULL;
  if (!ms) return 0;
  if (!json_is_array(ms) || json_array_size(ms) < 1 || json_array_size(ms) > CFG_MAX_MROPE_SECTIONS)
    return q35_seterr(c->err, "%s: key '%srope_parameters.mrope_section' must be an array of 1 to 4 integers",
                      c->path, c->tprefix);
  for (int i = 0; i < CFG_MAX_MROPE_SECTIONS; i++) {
    json_t *e = json_array_get(ms, (size_t)i);
    if (e && (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > CFG_MAX_DIM))
      return q35_seterr(c->err, "%s: key '%srope_parameters.mrope_section' must hold non-negative integers",
                        c->path, c->tprefix);
    cfg->sections[i] = e ? (int32_t)json_integer_value(e) : 0;
  }
  return 0;
}

/* rope: rope_parameters{rope_theta, partial_rotary_factor, mrope_section, rope_type} or flat
 * keys; then the norm epsilon */
static int cfg_rope(cfgctx *c, hfcfg *cfg) {
  const char *path = c->path, *tp = c->tprefix;
  json_t *rp = json_object_get(c->text, "rope_parameters");
  if (!rp) rp = json_object_get(c->text, "rope_scaling");
  if (rp && !json_is_object(rp) && !json_is_null(rp))
    return q35_seterr(c->err, "%s: key '%srope_parameters' is not an object", path, tp);
  if (!json_is_object(rp)) rp = NULL;
  int found;
  cfg->theta = CFG_DEFAULT_ROPE_THETA;
  if (cfg_num(c, rp, "rope_parameters.", "rope_theta", &cfg->theta, &found)) return -1;
  if (!found && cfg_num(c, c->text, "", "rope_theta", &cfg->theta, &found)) return -1;
  double partial = CFG_DEFAULT_PARTIAL_ROTARY;
  if (cfg_num(c, c->text, "", "partial_rotary_factor", &partial, &found)) return -1;
  if (!found && cfg_num(c, rp, "rope_parameters.", "partial_rotary_factor", &partial, &found)) return -1;
  if (!(cfg->theta > 0) || !(partial > 0) || partial > 1)
    return q35_seterr(c->err, "%s: rope_theta must be positive and partial_rotary_factor in (0, 1]", path);
  if (rp) {
    json_t *rt = json_object_get(rp, "rope_type");
    if (!rt) rt = json_object_get(rp, "type");
    if (rt && (!json_is_string(rt) || strcmp(json_string_value(rt), "default")))
      return q35_seterr(c->err, "%s: key '%srope_parameters.rope_type' = '%s': only 'default' rope is supported",
                        path, tp, json_is_string(rt) ? json_string_value(rt) : "(not a string)");
  }
  cfg->n_rot = (int64_t)(cfg->hd * partial);
  if (cfg->n_rot < 2 || cfg->n_rot % 2)
    return q35_seterr(c->err, "%s: head_dim %lld * partial_rotary_factor %g = %lld rotary dims: must be even and "
                              ">= 2", path, (long long)cfg->hd, partial, (long long)cfg->n_rot);
  if (cfg_mrope_sections(c, rp, cfg)) return -1;
  cfg->eps = CFG_DEFAULT_RMS_EPS;
  if (cfg_num(c, c->text, "", "rms_norm_eps", &cfg->eps, &found)) return -1;
  if (!(cfg->eps > 0)) return q35_seterr(c->err, "%s: key '%srms_norm_eps' must be positive", path, tp);
  return 0;
}

/* layer pattern: layer_types (periodic, as GGUF's full_attention_interval says) or the interval */
static int cfg_layer_pattern(cfgctx *c, hfcfg *cfg) {
  const char *path = c->path, *tp = c->tprefix;
  json_t *lt = json_object_get(c->text, "layer_types");
  if (!lt) {
    if (cfg_int(c, "full_attention_interval", &cfg->interval, 0, CFG_DEFAULT_INTERVAL, 1, CFG_MAX_DIM)) return -1;
  } else {
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->L)
      return q35_seterr(c->err, "%s: key '%slayer_types' must be an array of num_hidden_layers (%lld) strings", path,
                        tp, (long long)cfg->L);
    int64_t first = -1;
    for (int64_t i = 0; i < cfg->L; i++) {
      const char *s = json_string_value(json_array_get(lt, (size_t)i));
      if (!s || (strcmp(s, "full_attention") && strcmp(s, "linear_attention")))
        return q35_seterr(c->err, "%s: key '%slayer_types[%lld]' must be \"full_attention\" or \"linear_attention\"",
                          path, tp, (long long)i);
      if (first < 0 && !strcmp(s, "full_attention")) first = i;
    }
    cfg->interval = first < 0 ? cfg->L + 1 : first + 1;
    for (int64_t i = 0; i < cfg->L; i++) {
      const int full = !strcmp(json_string_value(json_array_get(lt, (size_t)i)), "full_attention");
      if (full != ((i + 1) % cfg->interval == 0))
        return q35_seterr(c->err, "%s: key '%slayer_types': layer %lld breaks the periodic pattern (full attention "
                                  "every %lld layers) that GGUF's full_attention_interval can express", path, tp,
                          (long long)i, (long long)cfg->interval);
    }
    int64_t iv;
    if (cfg_int(c, "full_attention_interval", &iv, 0, cfg->interval, 1, CFG_MAX_DIM)) return -1;
    if (iv != cfg->interval && first >= 0)
      return q35_seterr(c->err, "%s: '%sfull_attention_interval' (%lld) contradicts '%slayer_types' (%lld)", path,
                        tp, (long long)iv, tp, (long long)cfg->interval);
  }
  /* an interval past the last layer (e.g. the default 4 with 2 layers) means no full-attention
   * layer, which L + 1 says too: one value per pattern */
  if (cfg->interval > cfg->L + 1) cfg->interval = cfg->L + 1;
  return 0;
}

/* tie_word_embeddings: text_config's, else top level, else false */
static int cfg_tied(cfgctx *c, hfcfg *cfg) {
  json_t *tw = json_object_get(c->text, "tie_word_embeddings");
  if (!tw) tw = json_object_get(c->root, "tie_word_embeddings");
  if (tw && !json_is_boolean(tw))
    return q35_seterr(c->err, "%s: key 'tie_word_embeddings' must be true or false", c->path);
  cfg->tied = tw ? json_is_true(tw) : 0;
  return 0;
}

int hf_parse_config(const char *path, json_t *root, hfcfg *cfg, q35_err *err) {
  memset(cfg, 0, sizeof *cfg);
  cfgctx c = {path, root, root, "", err};
  const int rc = cfg_text_object(&c) || cfg_model_type(&c, cfg) || cfg_sizes(&c, cfg) || cfg_rope(&c, cfg) ||
                         cfg_layer_pattern(&c, cfg) || cfg_tied(&c, cfg)
                     ? -1
                     : 0;
  json_decref(root);
  return rc;
}
