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
#include "model/mtp.h"

q35_session_params q35_session_default_params(void) {
  q35_session_params p = {4096, Q35_KV_F16, 0, 0, 0};
  return p;
}

/* ---- sessions ---- */

static const char *fmt_bytes(char *b, size_t n, uint64_t x) {
  if (x >= (1ull << 30)) snprintf(b, n, "%.2f GiB", x / 1073741824.0);
  else if (x >= (1ull << 20)) snprintf(b, n, "%.2f MiB", x / 1048576.0);
  else snprintf(b, n, "%llu bytes", (unsigned long long)x);
  return b;
}

/* Pending hidden states a session with drafts holds at most (model/mtp.h), and room for the
 * next decode token's: a decode row's states always go straight after the pending ones
 * (engine/draft.c), never through the step's own buffer. */
static int32_t pend_cap(int32_t draft_max) {
  return draft_max + 1 > Q35_MTP_PEND_FLUSH ? draft_max + 1 : Q35_MTP_PEND_FLUSH + 1;
}

/* Bytes of the DeltaNet conv + recurrent state of every layer (one snapshot's). */
static uint64_t rec_bytes(const q35_model *m) {
  const q35_hparams *hp = &m->hp;
  const uint64_t C = 2 * (uint64_t)hp->ssm_n_group * hp->ssm_d_state + (uint64_t)hp->ssm_d_inner;
  return ((uint64_t)(hp->conv_kernel - 1) * C + (uint64_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state) *
         sizeof(float) * (uint64_t)m->n_gdn_layers;
}

/* Bytes of a session's checkpoints for draft_max drafts (checkpoint.c): per DeltaNet layer a conv
 * state and the recurrence's inputs (conv row, beta and decay of each value head) per draft, and
 * one spare recurrent state. */
static uint64_t ckpt_bytes(const q35_model *m, int32_t draft_max) {
  const q35_hparams *hp = &m->hp;
  const uint64_t C = 2 * (uint64_t)hp->ssm_n_group * hp->ssm_d_state + (uint64_t)hp->ssm_d_inner;
  const uint64_t slot = (uint64_t)(hp->conv_kernel - 1) * C + C + 2 * (uint64_t)hp->ssm_dt_rank;
  return ((uint64_t)draft_max * slot + (uint64_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state) *
         sizeof(float) * (uint64_t)m->n_gdn_layers;
}

/* Bytes of a session's pending hidden states and their tokens. */
static uint64_t pend_bytes(const q35_model *m, int32_t draft_max) {
  return (uint64_t)pend_cap(draft_max) * ((uint64_t)m->hp.n_embd * sizeof(float) + sizeof(int32_t));
}

uint64_t q35_session_state_bytes(const q35_model *m, const q35_session_params *p, uint64_t *recurrent) {
  const q35_hparams *hp = &m->hp;
  if (recurrent) *recurrent = 0;
  if (p->n_ctx < 1 || (p->kv_type != Q35_KV_F32 && p->kv_type != Q35_KV_F16 && p->kv_type != Q35_KV_Q8_0)) return 0;
  if (p->draft_max < 0 || p->draft_max > Q35_DRAFT_MAX) return 0;
  const uint64_t kv_row = q35_row_size(p->kv_type, (int64_t)hp->n_head_kv * hp->head_dim);
  const uint64_t rec = rec_bytes(m);
  uint64_t draft = 0; /* the head's KV cache, pending states, the checkpoints */
  if (p->draft_max > 0)
    draft = q35_mtp_cache_bytes(m, p->n_ctx, p->kv_type) + pend_bytes(m, p->draft_max) + ckpt_bytes(m, p->draft_max);
  if (recurrent) *recurrent = rec + (p->draft_max > 0 ? pend_bytes(m, p->draft_max) : 0);
  return 2 * kv_row * (uint64_t)p->n_ctx * (uint64_t)m->n_attn_layers + rec + draft;
}

/* The draft state of a new session (params->draft_max > 0). */
static int draft_state_new(q35_session *s, q35_err *err) {
  q35_model *m = s->model;
  const q35_session_params *p = &s->params;
  if (!(s->mtp = q35_mtp_cache_new(m, p->n_ctx, p->kv_type, err))) return -1;
  q35_mtp_cache *c = s->mtp;
  c->draft_max = p->draft_max;
  c->draft_vocab = p->draft_vocab > 0 ? p->draft_vocab : m->hp.n_vocab;
  c->pend_cap = pend_cap(p->draft_max);
  c->idle = Q35_MTP_IDLE_STEPS; /* cold until the plan first drafts for it (model/mtp.h) */
  /* not touched here: a slot's pages are faulted in when a hidden state is first kept there, so
     a session pays only for the slots it reaches (no state is read before it is written) */
  c->pend_h = q35_alloc64((size_t)c->pend_cap * (size_t)m->hp.n_embd * sizeof(float), 0);
  c->pend_t = malloc((size_t)c->pend_cap * sizeof(int32_t));
  if (!c->pend_h || !c->pend_t) return q35_seterr(err, "out of memory (the MTP head's pending states)");
  if (q35_session_ckpt_reserve(s, p->draft_max, err)) return -1;
  s->bytes += c->s.bytes + (size_t)pend_bytes(m, p->draft_max) + (size_t)ckpt_bytes(m, p->draft_max);
  return 0;
}

/* The head's state back to an empty session's (position 0, nothing pending). */
static void draft_state_reset(q35_session *s) {
  if (!s->mtp) return;
  q35_mtp_cache_set_pos(s->mtp, 0);
  s->mtp->n_pend = 0;
  s->mtp->last_emitted = 0; /* (idle stays: the plan's recent choices for this session's steps) */
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
  if (params->draft_max < 0 || params->draft_max > Q35_DRAFT_MAX) {
    q35_seterr(err, "draft_max %d is out of range [0, %d]", params->draft_max, Q35_DRAFT_MAX);
    return NULL;
  }
  if (params->draft_max > 0 && m->next && !m->next->ckpt) {
    q35_seterr(err, "draft_max %d: speculative decoding is not available in this pipeline", params->draft_max);
    return NULL;
  }
  if (params->draft_max > 0 && !m->has_mtp) {
    q35_seterr(err, "draft_max %d needs a model file with an MTP head (this one has none)", params->draft_max);
    return NULL;
  }
  if (params->draft_vocab < 0 || params->draft_vocab > hp->n_vocab || (params->draft_vocab && !params->draft_max)) {
    q35_seterr(err, "draft_vocab %d is out of range [0, %d] (and needs draft_max > 0)", params->draft_vocab,
               hp->n_vocab);
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
  if (params->draft_max > 0 && draft_state_new(s, err)) {
    q35_session_free(s);
    return NULL;
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
  s->ckpt_last = 0;
  draft_state_reset(s);
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
  q35_mtp_cache_free(s->mtp);
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
  /* a session with drafts: the MTP head's position and pending pairs (model/mtp.h) */
  int has_mtp;
  int32_t mtp_pos, n_pend;
  float *pend_h;        /* [n_pend][n_embd] */
  int32_t *pend_t;      /* [n_pend] */
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
  if (s->mtp) { /* the head's KV entries below its position stay in the session (append-only) */
    const q35_mtp_cache *c = s->mtp;
    const size_t H = (size_t)s->model->hp.n_embd, np = (size_t)c->n_pend;
    p->has_mtp = 1;
    p->mtp_pos = c->s.pos;
    p->n_pend = c->n_pend;
    p->pend_h = malloc((np ? np : 1) * H * sizeof(float));
    p->pend_t = malloc((np ? np : 1) * sizeof(int32_t));
    if (!p->pend_h || !p->pend_t) goto oom;
    memcpy(p->pend_h, c->pend_h, np * H * sizeof(float));
    memcpy(p->pend_t, c->pend_t, np * sizeof(int32_t));
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
  s->ckpt_last = 0;
  if (s->mtp) {
    q35_mtp_cache *c = s->mtp;
    c->last_emitted = 0;
    if (p->has_mtp && p->n_pend <= c->pend_cap && p->mtp_pos <= c->s.params.n_ctx) {
      q35_mtp_cache_set_pos(c, p->mtp_pos);
      c->n_pend = p->n_pend;
      memcpy(c->pend_h, p->pend_h, (size_t)p->n_pend * (size_t)s->model->hp.n_embd * sizeof(float));
      memcpy(c->pend_t, p->pend_t, (size_t)p->n_pend * sizeof(int32_t));
    } else { /* a snapshot without the head's state: the head skips the prefix (drafts get worse, outputs
                do not change) */
      q35_mtp_cache_set_pos(c, p->pos);
      c->n_pend = 0;
    }
  }
  return 0;
}

int32_t q35_snapshot_pos(const q35_snapshot *p) { return p->pos; }
size_t q35_snapshot_bytes(const q35_snapshot *p) {
  return sizeof *p + (p->conv_n + p->ssm_n) * (size_t)p->model->n_gdn_layers * sizeof(float) +
         (size_t)p->n_pend * ((size_t)p->model->hp.n_embd * sizeof(float) + sizeof(int32_t));
}
void q35_snapshot_free(q35_snapshot *p) {
  if (!p) return;
  q35_model *m = (q35_model *)p->model;
  if (p->stage_id && m->next) m->next->snapshot(m->next, Q35_STAGE_SNAP_FREE, NULL, &p->stage_id, NULL);
  free(p->data);
  free(p->pend_h);
  free(p->pend_t);
  free(p);
}
