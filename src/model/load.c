/*
 * load.c - loading a Qwen3.5 GGUF: hyperparameters from metadata, every tensor bound and
 * shape-checked against them (errors name the tensor). The mapping lives in mapping.c,
 * sessions in session.c.
 *
 * Weights are not copied by default: a q35_tensor points into the read-only map of the file
 * (q35_model_params.no_mmap reads them into anonymous memory at the same addresses instead).
 */
#define _GNU_SOURCE /* mremap */
#include "model/model.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/util.h"
#include "format/gguf_names.h"
#include "kernels/quant.h"

q35_model_params q35_model_default_params(void) {
  q35_model_params p = {0, 0, 0, 0, 0, 0, 0};
  return p;
}


/* ---- hyperparameters ---- */

static int get_u32(const gguf_file *f, const char *arch, q35_gguf_key_id key, uint32_t *out, q35_err *err) {
  return gguf_get_u32(f, q35_gguf_key(key, arch).s, out, err);
}

static int get_u32_or(const gguf_file *f, const char *arch, q35_gguf_key_id key, uint32_t def, uint32_t *out,
                      q35_err *err) {
  return gguf_get_u32_or(f, q35_gguf_key(key, arch).s, def, out, err);
}

/* Defaults of the optional keys (llama.cpp's for this architecture). */
#define DEFAULT_FULL_ATTENTION_INTERVAL 4
#define DEFAULT_ROPE_FREQ_BASE 10000.0f
#define DEFAULT_RMS_EPS 1e-6f
/* Sanity limits on the shapes: far above any real model, low enough that the sizes computed
 * from them cannot overflow. */
#define MAX_LAYERS 4096
#define MAX_EMBD 65536
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 4096
#define MAX_CONV_KERNEL 16
#define MAX_SSM_STATE 1024
#define MAX_SSM_HEADS 4096
#define MAX_EXPERTS 4096
#define MAX_FF (1 << 20)

static int load_hparams(q35_model *m, q35_err *err) {
  const gguf_file *f = m->gguf;
  q35_hparams *hp = &m->hp;
  gguf_str archs;
  if (gguf_get_str(f, q35_gguf_key(Q35_KEY_GENERAL_ARCHITECTURE, NULL).s, &archs, err)) return -1;
  if (gguf_str_eq(archs, Q35_GGUF_ARCH_MOE)) {
    hp->is_moe = 1;
  } else if (gguf_str_eq(archs, Q35_GGUF_ARCH_DENSE)) {
    hp->is_moe = 0;
  } else {
    return q35_seterr(err, "%s: architecture '%.*s' is not supported (q35 runs %s and %s)", f->path,
                      (int)(archs.len > 64 ? 64 : archs.len), archs.ptr, Q35_GGUF_ARCH_MOE, Q35_GGUF_ARCH_DENSE);
  }
  const char *arch = hp->is_moe ? Q35_GGUF_ARCH_MOE : Q35_GGUF_ARCH_DENSE;
  uint32_t v, nextn = 0;
#define REQ(field, key)                                            \
  do {                                                             \
    if (get_u32(f, arch, Q35_KEY_##key, &v, err)) return -1;       \
    hp->field = (int)v;                                            \
  } while (0)
#define OPT(field, key, def)                                         \
  do {                                                               \
    if (get_u32_or(f, arch, Q35_KEY_##key, def, &v, err)) return -1; \
    hp->field = (int)v;                                              \
  } while (0)
  REQ(n_layer_all, BLOCK_COUNT);
  REQ(n_embd, EMBEDDING_LENGTH);
  REQ(n_head, HEAD_COUNT);
  REQ(n_head_kv, HEAD_COUNT_KV);
  REQ(head_dim, KEY_LENGTH);
  OPT(n_rot, ROPE_DIMENSION_COUNT, (uint32_t)hp->head_dim);
  OPT(interval, FULL_ATTENTION_INTERVAL, DEFAULT_FULL_ATTENTION_INTERVAL);
  REQ(conv_kernel, SSM_CONV_KERNEL);
  REQ(ssm_d_state, SSM_STATE_SIZE);
  REQ(ssm_n_group, SSM_GROUP_COUNT);
  REQ(ssm_dt_rank, SSM_TIME_STEP_RANK);
  REQ(ssm_d_inner, SSM_INNER_SIZE);
  OPT(n_ctx_train, CONTEXT_LENGTH, 0);
  if (hp->is_moe) {
    REQ(n_expert, EXPERT_COUNT);
    REQ(n_expert_used, EXPERT_USED_COUNT);
    REQ(n_ff_exp, EXPERT_FF_LENGTH);
    OPT(n_ff_shexp, EXPERT_SHARED_FF_LENGTH, 0);
  } else {
    REQ(n_ff, FEED_FORWARD_LENGTH);
  }
#undef REQ
#undef OPT
  if (get_u32_or(f, arch, Q35_KEY_NEXTN_PREDICT_LAYERS, 0, &nextn, err)) return -1;
  uint32_t vlen;
  if (get_u32_or(f, arch, Q35_KEY_VALUE_LENGTH, (uint32_t)hp->head_dim, &vlen, err)) return -1;
  if (gguf_get_f32_or(f, q35_gguf_key(Q35_KEY_ROPE_FREQ_BASE, arch).s, DEFAULT_ROPE_FREQ_BASE, &hp->rope_theta, err))
    return -1;
  if (gguf_get_f32_or(f, q35_gguf_key(Q35_KEY_RMS_EPS, arch).s, DEFAULT_RMS_EPS, &hp->eps, err)) return -1;

  /* sanity of the shapes before anything is sized from them */
  const char *bad = NULL;
  if ((int)nextn >= hp->n_layer_all) bad = "nextn_predict_layers must be below block_count";
  hp->n_layer = hp->n_layer_all - (int)nextn;
  if (hp->n_layer < 1 || hp->n_layer > MAX_LAYERS) bad = "block_count out of range";
  else if (hp->n_embd < 1 || hp->n_embd > MAX_EMBD) bad = "embedding_length out of range";
  else if (hp->n_head < 1 || hp->n_head > MAX_HEADS || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv)
    bad = "attention.head_count must be a positive multiple of attention.head_count_kv";
  else if (hp->head_dim < 2 || hp->head_dim > MAX_HEAD_DIM || (int)vlen != hp->head_dim)
    bad = "attention.key_length and value_length must be equal and in [2, 4096]";
  else if (hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
    bad = "rope.dimension_count must be even and at most the head dimension";
  else if (hp->interval < 1) bad = "full_attention_interval must be >= 1";
  else if (hp->conv_kernel < 1 || hp->conv_kernel > MAX_CONV_KERNEL) bad = "ssm.conv_kernel out of range";
  else if (hp->ssm_d_state < 1 || hp->ssm_d_state > MAX_SSM_STATE || hp->ssm_n_group < 1 || hp->ssm_dt_rank < 1 ||
           hp->ssm_dt_rank > MAX_SSM_HEADS || hp->ssm_dt_rank % hp->ssm_n_group)
    bad = "ssm.time_step_rank must be a positive multiple of ssm.group_count";
  else if (hp->ssm_d_inner != hp->ssm_dt_rank * hp->ssm_d_state)
    bad = "ssm.inner_size must equal ssm.time_step_rank * ssm.state_size (value head dim = key head dim)";
  else if (hp->is_moe && (hp->n_expert < 1 || hp->n_expert > MAX_EXPERTS || hp->n_expert_used < 1 ||
                          hp->n_expert_used > hp->n_expert || hp->n_ff_exp < 1 || hp->n_ff_shexp < 0))
    bad = "expert_count / expert_used_count / expert_feed_forward_length out of range";
  else if (!hp->is_moe && (hp->n_ff < 1 || hp->n_ff > MAX_FF)) bad = "feed_forward_length out of range";
  else if (!(hp->rope_theta > 0) || !(hp->eps > 0) || !isfinite(hp->rope_theta) || !isfinite(hp->eps))
    bad = "rope.freq_base and layer_norm_rms_epsilon must be positive";
  if (bad) return q35_seterr(err, "%s: bad hyperparameters: %s", f->path, bad);
  return 0;
}

/* ---- tensors ---- */

static int bind(q35_model *m, q35_tensor *t, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                int optional, int need_f32, q35_err *err) {
  const gguf_tensor *g = gguf_find_tensor(m->gguf, name);
  memset(t, 0, sizeof *t);
  if (!g) {
    if (optional) return 0;
    return q35_seterr(err, "%s: tensor '%s' is missing", m->gguf->path, name);
  }
  int64_t want[4] = {ne0, ne1, ne2, 1};
  int64_t got_ne1 = g->ne[1], got_ne2 = g->ne[2];
  int ok = g->ne[0] == want[0] && got_ne1 == want[1] && got_ne2 == want[2] && g->ne[3] == 1;
  if (!ok) {
    char ws[96];
    if (n_dims == 1) snprintf(ws, sizeof ws, "{%lld}", (long long)ne0);
    else if (n_dims == 2) snprintf(ws, sizeof ws, "{%lld, %lld}", (long long)ne0, (long long)ne1);
    else snprintf(ws, sizeof ws, "{%lld, %lld, %lld}", (long long)ne0, (long long)ne1, (long long)ne2);
    return q35_seterr(err, "%s: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected %s from the metadata",
                      m->gguf->path, name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                      (long long)g->ne[3], ws);
  }
  if (need_f32 && g->type != Q35_TYPE_F32)
    return q35_seterr(err, "%s: tensor '%s' has type %s; q35 needs f32 for it (as llama.cpp's converter writes it)",
                      m->gguf->path, name, q35_type_name(g->type));
  if (!q35_type_supported(g->type))
    return q35_seterr(err, "%s: tensor '%s' has unsupported type %d", m->gguf->path, name, g->type);
  if (g->ne[0] % q35_type_block(g->type))
    return q35_seterr(err, "%s: tensor '%s': row length %lld is not a multiple of the %s block size %d",
                      m->gguf->path, name, (long long)g->ne[0], q35_type_name(g->type), q35_type_block(g->type));
  t->data = g->data;
  t->type = g->type;
  for (int i = 0; i < 4; i++) t->ne[i] = g->ne[i];
  t->nb1 = q35_row_size(g->type, g->ne[0]);
  t->nb2 = t->nb1 * (size_t)g->ne[1];
  return 0;
}

/* The nextn tensors of the first MTP block (its attention layer is bound with the trunk's). */
static int load_mtp(q35_model *m, q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd, V = hp->n_vocab, il = hp->n_layer;
  q35_mtp *t = &m->mtp;
#define N(field, id, nd, a, b, opt, f32)                                                                  \
  do {                                                                                                  \
    if (bind(m, &t->field, q35_gguf_tensor(Q35_TENSOR_##id, il).s, nd, a, b, 1, opt, f32, err)) return -1; \
  } while (0)
  N(eh_proj, NEXTN_EH_PROJ, 2, 2 * H, H, 0, 0);
  N(enorm, NEXTN_ENORM, 1, H, 1, 0, 1);
  N(hnorm, NEXTN_HNORM, 1, H, 1, 0, 1);
  N(head_norm, NEXTN_SHARED_HEAD_NORM, 1, H, 1, 1, 1);
  N(embd, NEXTN_EMBED_TOKENS, 2, H, V, 1, 0);
  N(head, NEXTN_SHARED_HEAD_HEAD, 2, H, V, 1, 0);
#undef N
  /* a pipeline's first stage drafts (the head runs where the draft step does, dist/pp.c) without
   * the trunk's output head: it binds output_norm and output for the head only (m->output stays
   * unset: the trunk's logits come from the last stage) */
  if (!t->head_norm.data && !m->output_norm.data &&
      bind(m, &t->head_norm, q35_gguf_tensor(Q35_TENSOR_OUTPUT_NORM, 0).s, 1, H, 1, 1, 0, 1, err))
    return -1;
  if (!t->head.data && !m->output.data &&
      bind(m, &t->head, q35_gguf_tensor(Q35_TENSOR_OUTPUT, 0).s, 2, H, V, 1, 1, 0, err))
    return -1;
  if (!t->head_norm.data) t->head_norm = m->output_norm;
  if (!t->embd.data) t->embd = m->tok_embd;
  if (!t->head.data) t->head = m->output.data ? m->output : m->tok_embd; /* (tied) */
  m->has_mtp = 1;
  return 0;
}

/* A pipeline stage binds the embedding when it runs layer 0 (or the output is tied to it), and the
 * output head when it runs the last layer. */
static int load_ends(q35_model *m, q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd, V = hp->n_vocab;
  const int first = m->layer_begin == 0, last = m->layer_end == hp->n_layer;
  const int tied = !gguf_find_tensor(m->gguf, q35_gguf_tensor(Q35_TENSOR_OUTPUT, 0).s);
  if ((first || (last && tied)) &&
      bind(m, &m->tok_embd, q35_gguf_tensor(Q35_TENSOR_TOKEN_EMBD, 0).s, 2, H, V, 1, 0, 0, err))
    return -1;
  if (!last) return 0;
  if (bind(m, &m->output_norm, q35_gguf_tensor(Q35_TENSOR_OUTPUT_NORM, 0).s, 1, H, 1, 1, 0, 1, err)) return -1;
  if (bind(m, &m->output, q35_gguf_tensor(Q35_TENSOR_OUTPUT, 0).s, 2, H, V, 1, 1, 0, err)) return -1;
  if (!m->output.data) m->output = m->tok_embd; /* tied */
  return 0;
}

static int load_tensors(q35_model *m, q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd;
  if (load_ends(m, err)) return -1;
  const int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
  const int Hk = hp->ssm_n_group, Hv = hp->ssm_dt_rank, dk = hp->ssm_d_state, dv = hp->ssm_d_state;
  const int C = 2 * Hk * dk + Hv * dv;
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers) return q35_seterr(err, "out of memory");
  /* B(field, TENSOR, n_dims, ne0, ne1, ne2, optional, f32 only) binds layer il's tensor */
#define B(field, id, nd, a, b, c, opt, f32)                                                               \
  do {                                                                                                  \
    if (bind(m, &L->field, q35_gguf_tensor(Q35_TENSOR_##id, il).s, nd, a, b, c, opt, f32, err)) return -1; \
  } while (0)
  /* the MTP block: the whole model's, or a pipeline's first stage's (it runs the draft step) */
  const int mtp = m->layer_begin == 0 && hp->n_layer_all > hp->n_layer;
  for (int il = 0; il < hp->n_layer + mtp; il++) {
    const int is_mtp = il == hp->n_layer; /* the first MTP block: attention + FFN (+ nextn below) */
    if (!is_mtp && (il < m->layer_begin || il >= m->layer_end)) continue; /* another stage's layer */
    q35_layer *L = is_mtp ? &m->mtp.layer : &m->layers[il];
    L->is_attn = is_mtp || (il + 1) % hp->interval == 0;
    L->attn_index = is_mtp ? 0 : L->is_attn ? m->n_attn_layers++ : m->n_gdn_layers++;
    B(attn_norm, ATTN_NORM, 1, H, 1, 1, 0, 1);
    B(post_norm, POST_ATTN_NORM, 1, H, 1, 1, 0, 1);
    if (L->is_attn) {
      B(wq, ATTN_Q, 2, H, nh * hd * 2, 1, 0, 0);
      B(wk, ATTN_K, 2, H, nkv * hd, 1, 0, 0);
      B(wv, ATTN_V, 2, H, nkv * hd, 1, 0, 0);
      B(wo, ATTN_OUTPUT, 2, nh * hd, H, 1, 0, 0);
      B(q_norm, ATTN_Q_NORM, 1, hd, 1, 1, 0, 1);
      B(k_norm, ATTN_K_NORM, 1, hd, 1, 1, 0, 1);
    } else {
      B(wqkv, ATTN_QKV, 2, H, C, 1, 0, 0);
      B(wz, ATTN_GATE, 2, H, Hv * dv, 1, 0, 0);
      B(wbeta, SSM_BETA, 2, H, Hv, 1, 0, 0);
      B(walpha, SSM_ALPHA, 2, H, Hv, 1, 0, 0);
      B(conv, SSM_CONV1D, 2, hp->conv_kernel, C, 1, 0, 1);
      B(dt_bias, SSM_DT_BIAS, 1, Hv, 1, 1, 0, 1);
      B(ssm_a, SSM_A, 1, Hv, 1, 1, 0, 1);
      B(ssm_norm, SSM_NORM, 1, dv, 1, 1, 0, 1);
      B(ssm_out, SSM_OUT, 2, Hv * dv, H, 1, 0, 0);
    }
    if (hp->is_moe) {
      const int E = hp->n_expert, I = hp->n_ff_exp, Is = hp->n_ff_shexp;
      B(router, FFN_GATE_INP, 2, H, E, 1, 0, 0);
      B(gate_up_exps, FFN_GATE_UP_EXPS, 3, H, 2 * I, E, 1, 0);
      if (!L->gate_up_exps.data) {
        B(gate_exps, FFN_GATE_EXPS, 3, H, I, E, 0, 0);
        B(up_exps, FFN_UP_EXPS, 3, H, I, E, 0, 0);
        if (L->gate_exps.type != L->up_exps.type)
          return q35_seterr(err, "%s: blk.%d: ffn_gate_exps and ffn_up_exps must have the same type",
                            m->gguf->path, il);
      }
      B(down_exps, FFN_DOWN_EXPS, 3, I, H, E, 0, 0);
      if (Is > 0) {
        B(gate_shexp, FFN_GATE_SHEXP, 2, H, Is, 1, 0, 0);
        B(up_shexp, FFN_UP_SHEXP, 2, H, Is, 1, 0, 0);
        B(down_shexp, FFN_DOWN_SHEXP, 2, Is, H, 1, 0, 0);
        B(shexp_gate, FFN_GATE_INP_SHEXP, 1, H, 1, 1, 1, 0);
      }
    } else {
      B(ffn_gate, FFN_GATE, 2, H, hp->n_ff, 1, 0, 0);
      B(ffn_up, FFN_UP, 2, H, hp->n_ff, 1, 0, 0);
      B(ffn_down, FFN_DOWN, 2, hp->n_ff, H, 1, 0, 0);
    }
  }
#undef B
  return mtp ? load_mtp(m, err) : 0;
}

/* The trunk layer a tensor name belongs to ("blk.N."), or -1. */
static int tensor_layer(gguf_str name) {
  if (name.len < 5 || memcmp(name.ptr, "blk.", 4)) return -1;
  int l = 0;
  size_t i = 4;
  for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && l < MAX_LAYERS * 16; i++)
    l = l * 10 + (name.ptr[i] - '0');
  return i > 4 && i < name.len && name.ptr[i] == '.' ? l : -1;
}

static int cmp_size(const void *a, const void *b) {
  const size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/* A stage keeps the data of its own tensors mapped: its layers', the embedding and output head it
 * bound, and any tensor outside the blocks that q35 does not know (kept, to be safe). Each shard of a
 * split file is its own mapping: a shard keeps the ranges of the kept tensors it holds, and a shard
 * holding none of them keeps only its header. With copy (no_mmap) only the kept ranges are read
 * into memory. Returns the bytes mapped with 2 MiB entries (-1: unknown), or -2 with err. */
static long long map_stage(q35_model *m, int huge, int copy, q35_err *err) {
  gguf_file *f = m->gguf;
  const uint8_t *embd = m->tok_embd.data, *out = m->output.data, *onorm = m->output_norm.data;
  size_t *rng = malloc(2 * (f->n_tensors + 1) * sizeof *rng);
  size_t *off = malloc((f->n_tensors + 1) * sizeof *off), *len = malloc((f->n_tensors + 1) * sizeof *len);
  long long pmd = 0;
  if (!rng || !off || !len) {
    free(rng), free(off), free(len);
    return q35_seterr(err, "out of memory"), -2;
  }
  for (uint32_t sh = 0; sh < gguf_n_shards(f) && pmd != -2; sh++) {
    gguf_file *sf = gguf_shard(f, sh);
    size_t n = 0, k = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
      const gguf_tensor *t = &f->tensors[i];
      if (t->shard != sh) continue;
      const int l = tensor_layer(t->name);
      int keep = l >= 0 ? l >= m->layer_begin && l < m->layer_end : 1;
      if (l == m->hp.n_layer) keep = m->has_mtp; /* the first stage's MTP block */
      if (gguf_str_eq(t->name, "token_embd.weight")) keep = t->data == (const void *)embd;
      else if (gguf_str_eq(t->name, "output.weight")) keep = t->data == (const void *)out || t->data == m->mtp.head.data;
      else if (gguf_str_eq(t->name, "output_norm.weight"))
        keep = t->data == (const void *)onorm || t->data == m->mtp.head_norm.data;
      if (!keep || !t->nbytes) continue;
      rng[2 * n] = (size_t)((const uint8_t *)t->data - sf->map);
      rng[2 * n + 1] = t->nbytes;
      n++;
    }
    qsort(rng, n, 2 * sizeof *rng, cmp_size); /* pairs, by offset */
    for (size_t i = 0; i < n; i++) { /* merge touching ranges */
      if (k && off[k - 1] + len[k - 1] >= rng[2 * i]) {
        const size_t e = rng[2 * i] + rng[2 * i + 1];
        if (e > off[k - 1] + len[k - 1]) len[k - 1] = e - off[k - 1];
        continue;
      }
      off[k] = rng[2 * i];
      len[k++] = rng[2 * i + 1];
    }
    const long long p = q35_map_keep(sf, off, len, k, huge, copy, err);
    pmd = p == -2 ? -2 : pmd < 0 || p < 0 ? -1 : pmd + p;
  }
  free(rng), free(off), free(len);
  return pmd;
}

/* ---- load-time repack (q35_repack_type) ---- */

/* The model's product weights: every tensor the forward pass only multiplies with (the trunk
 * layers' projections and FFN weights, the output head, the MTP block's eh_proj and head). Not
 * the embeddings, which are read row by row (get_rows): a head tied to one stays as it is. */
static size_t product_weights(q35_model *m, q35_tensor **out) {
  size_t n = 0;
  for (int l = m->layer_begin; l < m->layer_end; l++) {
    q35_layer *L = &m->layers[l];
    q35_tensor *ts[] = {&L->wq,        &L->wk,        &L->wv,           &L->wo,        &L->wqkv,
                        &L->wz,        &L->wbeta,     &L->walpha,       &L->ssm_out,   &L->gate_exps,
                        &L->up_exps,   &L->gate_up_exps, &L->down_exps, &L->gate_shexp, &L->up_shexp,
                        &L->down_shexp, &L->ffn_gate, &L->ffn_up,       &L->ffn_down};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) out[n++] = ts[i];
  }
  out[n++] = &m->output;
  if (m->has_mtp) out[n++] = &m->mtp.eh_proj, out[n++] = &m->mtp.head;
  return n;
}

/* One tensor's rows rewritten into layout rt (q35_repack_row), src's rows ss bytes apart, dst's
 * ds: split into nth contiguous parts, one per thread (the caller takes the first). Each row's
 * bytes depend on that row only, so the result is the same for any nth. */
typedef struct {
  int rt;
  int64_t n, rows;
  const uint8_t *src;
  uint8_t *dst;
  size_t ss, ds;
  int nth, ith;
} rows_part;

static void *rows_part_run(void *arg) {
  const rows_part *p = arg;
  const int64_t per = p->rows / p->nth, rem = p->rows % p->nth;
  const int64_t r0 = p->ith * per + (p->ith < rem ? p->ith : rem), r1 = r0 + per + (p->ith < rem ? 1 : 0);
  for (int64_t r = r0; r < r1; r++) q35_repack_row(p->rt, p->src + (size_t)r * p->ss, p->dst + (size_t)r * p->ds, p->n);
  return NULL;
}

#define REPACK_MAX_THREADS 64
static void repack_rows(int rt, const uint8_t *src, size_t ss, uint8_t *dst, size_t ds, int64_t rows, int64_t n,
                        int nth) {
  /* small tensors (norm-sized projections) on the calling thread: a thread's start costs more */
  const int64_t per_thread = ((int64_t)4 << 20) / (int64_t)(ss ? ss : 1) + 1;
  if (nth > rows / per_thread) nth = (int)(rows / per_thread);
  if (nth > REPACK_MAX_THREADS) nth = REPACK_MAX_THREADS;
  if (nth < 1) nth = 1;
  rows_part part[REPACK_MAX_THREADS];
  pthread_t tid[REPACK_MAX_THREADS];
  int started[REPACK_MAX_THREADS] = {0};
  for (int i = 0; i < nth; i++) part[i] = (rows_part){rt, n, rows, src, dst, ss, ds, nth, i};
  for (int i = 1; i < nth; i++) started[i] = pthread_create(&tid[i], NULL, rows_part_run, &part[i]) == 0;
  rows_part_run(&part[0]);
  for (int i = 1; i < nth; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    else rows_part_run(&part[i]); /* no thread for it: its rows here */
  }
}

typedef struct {
  q35_tensor **t; /* the tensors to repack (the same data bound n times) */
  size_t n;
  int type; /* the layout they are rewritten into (q35_repack_type of their type) */
  int nth;  /* threads to rewrite with */
} repack_job;

static void repack_range(void *arg, uint8_t *copy, const uint8_t *orig) {
  const repack_job *j = arg;
  for (size_t i = 0; i < j->n; i++) {
    const q35_tensor *t = j->t[i];
    if (i && t->data == j->t[i - 1]->data) continue; /* the same tensor bound twice */
    const uint8_t *src = t->data;
    repack_rows(j->type, src, t->nb1, copy + (src - orig), t->nb1, t->ne[1] * t->ne[2] * t->ne[3], t->ne[0], j->nth);
  }
}

/* MemAvailable from /proc/meminfo in bytes; -1 where unknown */
static long long mem_available(void) {
  FILE *fp = fopen("/proc/meminfo", "r");
  if (!fp) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, fp))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(fp);
  return kb < 0 ? -1 : kb * 1024;
}

static int cmp_tensor_addr(const void *a, const void *b) {
  const uintptr_t x = (uintptr_t)(*(q35_tensor *const *)a)->data, y = (uintptr_t)(*(q35_tensor *const *)b)->data;
  return x < y ? -1 : x > y;
}

static size_t tensor_bytes(const q35_tensor *t) { return t->nb1 * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]); }
/* the bytes of t's rows in the layout rt */
static size_t tensor_bytes_as(const q35_tensor *t, int rt) {
  return q35_row_size(rt, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* A repacked layout larger than the file's (IQ2_XXSR, IQ3_XXSR, IQ3_SR, IQ2_XSR, IQ2_SR, IQ1_SR, IQ1_MR) cannot
 * be rewritten in place: the tensors ts[0 .. n) (one data, bound n times) get rows in layout rt in an anonymous
 * mapping of their own
 * (2 MiB pages advised while written, as q35_map_rewrite's), recorded in m for q35_model_free; the
 * file pages they leave are dropped (whole pages only: a neighbour may share the ends). 0, or -1
 * with err. */
static int repack_grow(q35_model *m, gguf_file *sf, q35_tensor **ts, size_t n, int rt, int drop, int huge, int nth,
                       q35_err *err) {
  const q35_tensor *t = ts[0];
  const size_t rs = q35_row_size(rt, t->ne[0]), size = tensor_bytes_as(t, rt), old = tensor_bytes(t);
  const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
  void **g = realloc(m->grown, sizeof *g * (m->n_grown + 1));
  if (g) m->grown = g;
  size_t *gs = g ? realloc(m->grown_size, sizeof *gs * (m->n_grown + 1)) : NULL;
  if (gs) m->grown_size = gs;
  if (!g || !gs) return q35_seterr(err, "out of memory");
  uint8_t *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) return q35_seterr(err, "%s: cannot allocate %.2f GiB to repack weights into", sf->path,
                                         (double)size / (1u << 30));
#ifdef MADV_HUGEPAGE
  if (huge) madvise(a, size, MADV_HUGEPAGE);
#endif
  const uint8_t *src = t->data;
  repack_rows(rt, src, t->nb1, a, rs, rows, t->ne[0], nth);
#ifdef MADV_NOHUGEPAGE
  if (huge) madvise(a, size, MADV_NOHUGEPAGE);
#endif
  if (mprotect(a, size, PROT_READ) != 0) {
    munmap(a, size);
    return q35_seterr(err, "%s: cannot protect the repacked weights", sf->path);
  }
  m->grown[m->n_grown] = a, m->grown_size[m->n_grown++] = size;
  for (size_t q = 0; q < n; q++)
    ts[q]->data = a, ts[q]->nb1 = rs, ts[q]->nb2 = rs * (size_t)ts[q]->ne[1], ts[q]->type = rt;
  /* the file's pages of it: out of this process (nothing reads them now) and, with the file
   * mapping, out of the page cache */
  const size_t page = sysconf(_SC_PAGESIZE) > 0 ? (size_t)sysconf(_SC_PAGESIZE) : 4096;
  const size_t o = (size_t)(src - sf->map), lo = (o + page - 1) & ~(page - 1), hi = (o + old) & ~(page - 1);
  if (hi > lo) {
    madvise((uint8_t *)(uintptr_t)sf->map + lo, hi - lo, MADV_DONTNEED);
    if (drop) {
      const int fd = open(sf->path, O_RDONLY);
      if (fd >= 0) {
        posix_fadvise(fd, (off_t)lo, (off_t)(hi - lo), POSIX_FADV_DONTNEED);
        close(fd);
      }
    }
  }
  return 0;
}

/* Rewrite the product weights whose type q35_repack_type repacks (Q4_0 at the AVX2 level, ...)
 * in their place, in anonymous memory (q35_map_rewrite; with the file mapping, its pages of them
 * are dropped from the page cache), and give their tensors the repacked type. Not where the
 * rewritten bytes would not fit in the memory available; a failed rewrite stops the repack with a
 * note (the tensors rewritten so far keep the repacked type). 0, or -1 with err when out of memory. */
/* CPU seconds of the process so far (every thread's) */
static double cpu_seconds(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static int repack_weights(q35_model *m, const q35_model_params *params, q35_err *err) {
  if (params->no_repack) return 0;
  const double t0 = q35_now(), c0 = cpu_seconds();
  q35_tensor **ts = malloc(sizeof *ts * (size_t)(19 * (m->layer_end - m->layer_begin) + 3));
  if (!ts) return q35_seterr(err, "out of memory");
  size_t n = product_weights(m, ts), k = 0;
  const uint8_t *e1 = m->tok_embd.data, *e2 = m->mtp.embd.data;
  for (size_t i = 0; i < n; i++)
    if (ts[i]->data && q35_repack_type(ts[i]->type) != ts[i]->type && ts[i]->data != (const void *)e1 &&
        ts[i]->data != (const void *)e2)
      ts[k++] = ts[i];
  qsort(ts, k, sizeof *ts, cmp_tensor_addr);
  size_t total = 0;
  for (size_t i = 0; i < k; i++)
    if (!i || ts[i]->data != ts[i - 1]->data) total += tensor_bytes_as(ts[i], q35_repack_type(ts[i]->type));
  /* the rewritten weights are anonymous memory that cannot be reclaimed (the file pages they
   * replace are dropped): where they would not fit in what the system has available, keep the
   * file's layout, which the page cache can page in and out */
  const long long avail = params->no_mmap ? -1 : mem_available(); /* no_mmap: already anonymous */
  if (total && avail > 0 && (double)total > 0.9 * (double)avail) {
    fprintf(stderr, "q35: not repacking %.2f GB of weights: %.2f GB of memory available (--no-repack to silence)\n",
            (double)total / 1e9, (double)avail / 1e9);
    free(ts);
    return 0;
  }
  const size_t page = sysconf(_SC_PAGESIZE) > 0 ? (size_t)sysconf(_SC_PAGESIZE) : 4096;
  /* the rows of each tensor over the default context's threads (n_threads; <= 0: every online CPU) */
  int nth = params->n_threads > 0 ? params->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nth < 1) nth = 1;
  size_t bytes = 0, by_type[Q35_TYPE_COUNT] = {0};
  int rc = 0;
  for (size_t i = 0; i < k && !rc;) {
    /* the shard holding it */
    gguf_file *sf = NULL;
    for (uint32_t s = 0; s < gguf_n_shards(m->gguf) && !sf; s++) {
      gguf_file *g = gguf_shard(m->gguf, s);
      if ((const uint8_t *)ts[i]->data >= g->map && (const uint8_t *)ts[i]->data < g->map + g->size) sf = g;
    }
    if (!sf) {
      rc = q35_seterr(err, "a tensor outside the file mapping");
      break;
    }
    /* one tensor (and any binding of the same data) at a time, so the extra memory is one tensor's;
     * a page it shares with the one before is copied from there, already rewritten */
    const size_t o = (size_t)((const uint8_t *)ts[i]->data - sf->map), lo = o & ~(page - 1);
    const size_t hi = (o + tensor_bytes(ts[i]) + page - 1) & ~(page - 1);
    size_t j = i + 1;
    while (j < k && ts[j]->data == ts[i]->data) j++;
    const int ft = ts[i]->type, rt = q35_repack_type(ft);
    const size_t tb = tensor_bytes(ts[i]);
    if (q35_row_size(rt, ts[i]->ne[0]) != ts[i]->nb1) { /* a larger layout: memory of its own */
      rc = repack_grow(m, sf, ts + i, j - i, rt, !params->no_mmap, !params->no_mmap && !params->no_huge, nth, err);
      if (!rc) bytes += tb, by_type[ft] += tb;
      i = j;
      continue;
    }
    repack_job job = {ts + i, j - i, rt, nth};
    /* the rewrite writes every byte of the tensor's rows (tests/test_quant_tile.c): only the
     * neighbours' bytes in its first and last page are copied */
    rc = q35_map_rewrite(sf, lo, hi, o, o + tb, !params->no_mmap, !params->no_mmap && !params->no_huge, repack_range,
                         &job, err);
    for (size_t q = i; q < j && !rc; q++) {
      if (q == i || ts[q]->data != ts[q - 1]->data) bytes += tb, by_type[ft] += tb;
      ts[q]->type = rt;
    }
    i = j;
  }
  free(ts);
  m->repacked_bytes = (long long)bytes;
  if (rc) /* an optimisation only: the tensors rewritten so far keep their type, the rest stay plain */
    fprintf(stderr, "q35: repacking the weights stopped (%s); the rest keep the file's layout\n", err->msg);
  else if (params->progress && bytes) {
    fprintf(stderr, "repacked %.2f GB of weights in %.2f s (%.2f CPU-s, %d threads):", (double)bytes / 1e9, q35_now() - t0,
            cpu_seconds() - c0, nth);
    for (int t = 0; t < Q35_TYPE_COUNT; t++)
      if (by_type[t]) fprintf(stderr, " %.2f GB %s as %s", (double)by_type[t] / 1e9, q35_type_name(t),
                              q35_type_name(q35_repack_type(t)));
    fprintf(stderr, "\n");
  }
  return 0;
}

int q35_model_plan(const char *path, int *n_layer, uint64_t **layer_bytes, uint64_t *embd_bytes,
                   uint64_t *out_bytes, q35_err *err) {
  q35_model m;
  memset(&m, 0, sizeof m);
  m.gguf = gguf_open(path, err);
  if (!m.gguf) return -1;
  int rc = load_hparams(&m, err);
  uint64_t *lb = rc ? NULL : calloc((size_t)m.hp.n_layer, sizeof *lb);
  if (!rc && !lb) rc = q35_seterr(err, "out of memory");
  *embd_bytes = *out_bytes = 0;
  for (uint64_t i = 0; !rc && i < m.gguf->n_tensors; i++) {
    const gguf_tensor *t = &m.gguf->tensors[i];
    const int l = tensor_layer(t->name);
    if (l >= 0 && l < m.hp.n_layer) lb[l] += t->nbytes;
    else if (gguf_str_eq(t->name, "token_embd.weight")) *embd_bytes += t->nbytes;
    else if (gguf_str_eq(t->name, "output.weight") || gguf_str_eq(t->name, "output_norm.weight"))
      *out_bytes += t->nbytes;
  }
  gguf_close(m.gguf);
  if (rc) {
    free(lb);
    return -1;
  }
  *n_layer = m.hp.n_layer;
  *layer_bytes = lb;
  return 0;
}

/* the file's type of a weight whose type the load may have repacked */
static int file_type(int type) { return q35_unrepack_type(type); }

q35_model *q35_model_load(const char *path, const q35_model_params *params, q35_err *err) {
  q35_model_params dp = q35_model_default_params();
  if (!params) params = &dp;
  if (q35_cpu_check(err)) return NULL; /* Q35_SIMD names a level this CPU cannot run */
  double t0 = q35_now();
  q35_model *m = calloc(1, sizeof *m);
  if (!m) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  if (params->progress) fprintf(stderr, "loading %s ...\n", path);
  m->gguf = gguf_open(path, err);
  if (!m->gguf) goto fail;
  if (load_hparams(m, err)) goto fail;
  m->layer_begin = params->layer_begin;
  m->layer_end = params->layer_end;
  if (m->layer_begin == 0 && m->layer_end == 0) m->layer_end = m->hp.n_layer;
  if (m->layer_begin < 0 || m->layer_begin >= m->layer_end || m->layer_end > m->hp.n_layer) {
    q35_seterr(err, "%s: layer range [%d, %d) is not within the model's %d layers", path, params->layer_begin,
               params->layer_end, m->hp.n_layer);
    goto fail;
  }
  const int stage = m->layer_begin > 0 || m->layer_end < m->hp.n_layer;
  /* a split file: every shard is mapped (and read into memory with no_mmap) on its own; a
   * pipeline stage reads only its own tensors (map_stage below) */
  for (uint32_t k = 0; params->no_mmap && !stage && k < gguf_n_shards(m->gguf); k++) {
    gguf_file *s = gguf_shard(m->gguf, k);
    if (q35_map_into_memory(s, s->path, err)) goto fail;
  }
  {
    const gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) {
      q35_seterr(err, "%s: tensor 'token_embd.weight' is missing", path);
      goto fail;
    }
    m->hp.n_vocab = (int)te->ne[1];
    const gguf_kv *tok = gguf_find(m->gguf, "tokenizer.ggml.tokens");
    if (tok && tok->type == GGUF_ARRAY && tok->arr_n != (uint64_t)te->ne[1]) {
      q35_seterr(err, "%s: the vocabulary has %llu tokens but token_embd.weight has %lld rows", path,
                 (unsigned long long)tok->arr_n, (long long)te->ne[1]);
      goto fail;
    }
  }
  if (load_tensors(m, err)) goto fail;
  if (stage) {
    m->huge_bytes = map_stage(m, !params->no_mmap && !params->no_huge, params->no_mmap, err);
    if (m->huge_bytes == -2) goto fail;
  } else {
    for (uint32_t k = 0; !params->no_mmap && k < gguf_n_shards(m->gguf); k++) {
      const long long pmd = q35_map_prefault(gguf_shard(m->gguf, k), !params->no_huge, params->progress);
      m->huge_bytes = k == 0 ? pmd : m->huge_bytes < 0 || pmd < 0 ? -1 : m->huge_bytes + pmd; /* -1: unknown */
    }
  }
  if (repack_weights(m, params, err)) goto fail; /* before the context: it may look at the types */
  const q35_context_params cp = {params->n_threads};
  m->ctx = q35_context_new(m, &cp, err); /* the default context: its threads start now */
  if (!m->ctx) goto fail;
  const q35_layer *L0 = &m->layers[m->layer_begin];
  snprintf(m->desc, sizeof m->desc, "%s: %d layers (%d attention, %d DeltaNet)%s, embd %d, vocab %d%s, %s FFN weights",
           m->hp.is_moe ? "qwen35moe" : "qwen35", m->layer_end - m->layer_begin, m->n_attn_layers, m->n_gdn_layers,
           m->has_mtp ? " + MTP head" : "", m->hp.n_embd,
           m->hp.n_vocab, m->output.data && m->output.data == m->tok_embd.data ? ", tied output" : "",
           q35_type_name(file_type(m->hp.is_moe ? L0->down_exps.type : L0->ffn_down.type)));
  if (m->layer_end - m->layer_begin < m->hp.n_layer) {
    const size_t l = strlen(m->desc);
    snprintf(m->desc + l, sizeof m->desc - l, ", pipeline stage: layers [%d, %d) of %d", m->layer_begin,
             m->layer_end, m->hp.n_layer);
  }
  if (params->progress) fprintf(stderr, "loaded %s in %.2f s\n", m->desc, q35_now() - t0);
  return m;
fail:
  q35_model_free(m);
  return NULL;
}

void q35_model_free(q35_model *m) {
  if (!m) return;
  if (m->next) m->next->close(m->next);
  q35_context_free(m->ctx);
  for (size_t i = 0; i < m->n_grown; i++) munmap(m->grown[i], m->grown_size[i]);
  free(m->grown), free(m->grown_size);
  free(m->layers);
  gguf_close(m->gguf);
  free(m);
}

int32_t q35_model_n_vocab(const q35_model *m) { return m->hp.n_vocab; }
int32_t q35_model_n_embd(const q35_model *m) { return m->hp.n_embd; }
const char *q35_model_desc(const q35_model *m) { return m->desc; }
long long q35_model_huge_bytes(const q35_model *m) { return m->huge_bytes; }
long long q35_model_repacked_bytes(const q35_model *m) { return m->repacked_bytes; }
