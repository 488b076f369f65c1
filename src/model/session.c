/*
 * session.c - per-sequence state on a loaded model: KV caches of the attention layers, conv and
 * delta-rule state of the DeltaNet layers, the memory budget check, and snapshots of the
 * recurrent state for prefix reuse.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant.h"
#include "model/model.h"

q35_session_params q35_session_default_params(void) {
  q35_session_params p = {4096, Q35_KV_F16, 0};
  return p;
}

/* ---- sessions ---- */

static const char *fmt_bytes(char *b, size_t n, uint64_t x) {
  if (x >= (1ull << 30)) snprintf(b, n, "%.2f GiB", x / 1073741824.0);
  else if (x >= (1ull << 20)) snprintf(b, n, "%.2f MiB", x / 1048576.0);
  else snprintf(b, n, "%llu bytes", (unsigned long long)x);
  return b;
}

uint64_t q35_session_state_bytes(const q35_model *m, const q35_session_params *p, uint64_t *recurrent) {
  const q35_hparams *hp = &m->hp;
  if (recurrent) *recurrent = 0;
  if (p->n_ctx < 1 || (p->kv_type != Q35_KV_F32 && p->kv_type != Q35_KV_F16 && p->kv_type != Q35_KV_Q8_0)) return 0;
  const uint64_t kv_row = q35_row_size(p->kv_type, (int64_t)hp->n_head_kv * hp->head_dim);
  const uint64_t C = 2 * (uint64_t)hp->ssm_n_group * hp->ssm_d_state + (uint64_t)hp->ssm_d_inner;
  const uint64_t rec = ((uint64_t)(hp->conv_kernel - 1) * C + (uint64_t)hp->ssm_dt_rank * hp->ssm_d_state *
                        hp->ssm_d_state) * sizeof(float) * (uint64_t)m->n_gdn_layers;
  if (recurrent) *recurrent = rec;
  return 2 * kv_row * (uint64_t)p->n_ctx * (uint64_t)m->n_attn_layers + rec;
}

q35_session *q35_session_new(q35_model *m, const q35_session_params *params, q35_err *err) {
  q35_session_params dp = q35_session_default_params();
  if (!params) params = &dp;
  const q35_hparams *hp = &m->hp;
  if (params->n_ctx < 1 || params->n_ctx > (1 << 24)) {
    q35_seterr(err, "context size %d is out of range [1, %d]", params->n_ctx, 1 << 24);
    return NULL;
  }
  int kvt = params->kv_type;
  if (kvt != Q35_KV_F32 && kvt != Q35_KV_F16 && kvt != Q35_KV_Q8_0) {
    q35_seterr(err, "KV cache type %d is not supported (f32, f16, q8_0)", kvt);
    return NULL;
  }
  const int64_t kv_width = (int64_t)hp->n_head_kv * hp->head_dim;
  if (kvt == Q35_KV_Q8_0 && hp->head_dim % 32) {
    q35_seterr(err, "KV cache type q8_0 needs the head dimension (%d) to be a multiple of 32", hp->head_dim);
    return NULL;
  }
  const uint64_t need = q35_session_state_bytes(m, params, NULL);
  if (params->mem_budget && need > params->mem_budget) {
    char a[32], b[32];
    q35_seterr(err, "the session needs %s (%llu bytes) of KV/state for n_ctx %d, more than mem_budget (%s, %llu bytes)",
               fmt_bytes(a, sizeof a, need), (unsigned long long)need, params->n_ctx,
               fmt_bytes(b, sizeof b, params->mem_budget), (unsigned long long)params->mem_budget);
    return NULL;
  }
  q35_session *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->model = m;
  s->params = *params;
  s->kv_row_bytes = q35_row_size(kvt, kv_width);
  s->k_cache = calloc((size_t)m->n_attn_layers + 1, sizeof(void *));
  s->v_cache = calloc((size_t)m->n_attn_layers + 1, sizeof(void *));
  s->conv_state = calloc((size_t)m->n_gdn_layers + 1, sizeof(float *));
  s->ssm_state = calloc((size_t)m->n_gdn_layers + 1, sizeof(float *));
  if (!s->k_cache || !s->v_cache || !s->conv_state || !s->ssm_state) goto oom;
  const size_t kv_bytes = s->kv_row_bytes * (size_t)params->n_ctx;
  for (int i = 0; i < m->n_attn_layers; i++) {
    s->k_cache[i] = q35_alloc64(kv_bytes, 0);
    s->v_cache[i] = q35_alloc64(kv_bytes, 0);
    if (!s->k_cache[i] || !s->v_cache[i]) goto oom;
    s->bytes += 2 * kv_bytes;
  }
  const int C = 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  const size_t conv_n = (size_t)(hp->conv_kernel - 1) * C, ssm_n = (size_t)hp->ssm_dt_rank * hp->ssm_d_state *
                                                                      hp->ssm_d_state;
  for (int i = 0; i < m->n_gdn_layers; i++) {
    s->conv_state[i] = q35_alloc64((conv_n + 1) * sizeof(float), 1);
    s->ssm_state[i] = q35_alloc64(ssm_n * sizeof(float), 1);
    if (!s->conv_state[i] || !s->ssm_state[i]) goto oom;
    s->bytes += (conv_n + ssm_n) * sizeof(float);
  }
  if (m->next && m->next->session(m->next, Q35_STAGE_SESSION_NEW, s, err)) { /* the later stages' state */
    q35_session_free(s); /* frees what the later stages made (a stage without it ignores the free) */
    return NULL;
  }
  return s;
oom:
  q35_session_free(s);
  q35_seterr(err, "out of memory allocating the session state (context %d)", params->n_ctx);
  return NULL;
}

void q35_session_reset(q35_session *s) {
  const q35_hparams *hp = &s->model->hp;
  const int C = 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  for (int i = 0; i < s->model->n_gdn_layers; i++) {
    memset(s->conv_state[i], 0, (size_t)(hp->conv_kernel - 1) * C * sizeof(float));
    memset(s->ssm_state[i], 0, (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state * sizeof(float));
  }
  s->pos = 0;
  if (s->model->next) s->model->next->session(s->model->next, Q35_STAGE_SESSION_RESET, s, NULL);
}

void q35_session_free(q35_session *s) {
  if (!s) return;
  q35_model *m = s->model;
  if (m && m->next) m->next->session(m->next, Q35_STAGE_SESSION_FREE, s, NULL);
  for (int i = 0; m && i < m->n_attn_layers; i++) {
    if (s->k_cache) free(s->k_cache[i]);
    if (s->v_cache) free(s->v_cache[i]);
  }
  for (int i = 0; m && i < m->n_gdn_layers; i++) {
    if (s->conv_state) free(s->conv_state[i]);
    if (s->ssm_state) free(s->ssm_state[i]);
  }
  q35_session_ckpt_free(s);
  free(s->k_cache);
  free(s->v_cache);
  free(s->conv_state);
  free(s->ssm_state);
  free(s);
}

int32_t q35_session_pos(const q35_session *s) { return s->pos; }
int32_t q35_session_n_ctx(const q35_session *s) { return s->params.n_ctx; }
size_t q35_session_bytes(const q35_session *s) { return s->bytes; }

/* ---- snapshots ---- */

struct q35_snapshot {
  const q35_model *model;
  int32_t pos;
  size_t conv_n, ssm_n; /* floats per DeltaNet layer */
  float *data;          /* [n_gdn][conv_n + ssm_n] */
  uint64_t stage_id;    /* a pipeline's first stage: the later stages' parts of it (0: none) */
};

q35_snapshot *q35_session_snapshot(const q35_session *s, q35_err *err) {
  const q35_hparams *hp = &s->model->hp;
  const int C = 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  q35_snapshot *p = calloc(1, sizeof *p);
  if (!p) goto oom;
  p->model = s->model;
  p->pos = s->pos;
  p->conv_n = (size_t)(hp->conv_kernel - 1) * C;
  p->ssm_n = (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state;
  const int n = s->model->n_gdn_layers;
  p->data = malloc((p->conv_n + p->ssm_n) * (size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p->data) goto oom;
  for (int i = 0; i < n; i++) {
    float *d = p->data + (p->conv_n + p->ssm_n) * i;
    memcpy(d, s->conv_state[i], p->conv_n * sizeof(float));
    memcpy(d + p->conv_n, s->ssm_state[i], p->ssm_n * sizeof(float));
  }
  /* a pipeline: every later stage copies its own layers' state under one id */
  if (s->model->next && s->model->next->snapshot(s->model->next, Q35_STAGE_SNAP_SAVE, s, &p->stage_id, err)) {
    q35_snapshot_free(p);
    return NULL;
  }
  return p;
oom:
  q35_snapshot_free(p);
  q35_seterr(err, "out of memory (session snapshot)");
  return NULL;
}

int q35_session_restore(q35_session *s, const q35_snapshot *p, q35_err *err) {
  if (p->model != s->model) return q35_seterr(err, "the snapshot belongs to another model");
  if (p->pos > s->params.n_ctx) return q35_seterr(err, "the snapshot's position %d is past the context", p->pos);
  /* a pipeline: the later stages first; one that fails leaves the stages out of step, so the
   * session is reset on all of them (position 0, consistent) */
  uint64_t id = p->stage_id;
  if (s->model->next && s->model->next->snapshot(s->model->next, Q35_STAGE_SNAP_RESTORE, s, &id, err)) {
    q35_session_reset(s);
    return -1;
  }
  for (int i = 0; i < s->model->n_gdn_layers; i++) {
    const float *d = p->data + (p->conv_n + p->ssm_n) * i;
    memcpy(s->conv_state[i], d, p->conv_n * sizeof(float));
    memcpy(s->ssm_state[i], d + p->conv_n, p->ssm_n * sizeof(float));
  }
  s->pos = p->pos;
  return 0;
}

int32_t q35_snapshot_pos(const q35_snapshot *p) { return p->pos; }
size_t q35_snapshot_bytes(const q35_snapshot *p) {
  return sizeof *p + (p->conv_n + p->ssm_n) * (size_t)p->model->n_gdn_layers * sizeof(float);
}
void q35_snapshot_free(q35_snapshot *p) {
  if (!p) return;
  q35_model *m = (q35_model *)p->model;
  if (p->stage_id && m->next) m->next->snapshot(m->next, Q35_STAGE_SNAP_FREE, NULL, &p->stage_id, NULL);
  free(p->data);
  free(p);
}
