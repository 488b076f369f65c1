/*
 * checkpoint.c - per-position checkpoints of a session's DeltaNet state (model/mtp.h).
 *
 * A speculative verify step feeds [last accepted token, draft_1 .. draft_N] in one forward pass.
 * When the trunk rejects draft_k, the session must continue from the state after draft_{k-1}:
 * the attention layers need only the position moved back (KV entries past it are never read),
 * but the conv and delta-rule states have advanced through every token. So while a session is
 * armed the DeltaNet layer keeps both states after each token in a slot (deltanet_layer.c: the
 * conv state copied there, the delta-rule state written there by the step itself), and a
 * rollback copies slot k back: the state bits are exactly those of a pass that stopped there, so
 * what follows is bit-identical to decoding without speculation.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/mtp.h"

static size_t conv_floats(const q35_hparams *hp) {
  return (size_t)(hp->conv_kernel - 1) * (size_t)(2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner);
}
static size_t ssm_floats(const q35_hparams *hp) {
  return (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state;
}

void q35_session_ckpt_free(q35_session *s) {
  const int n = s->model ? s->model->n_gdn_layers : 0;
  for (int i = 0; i < n; i++)
    if (s->ckpt_ssm) free(s->ckpt_ssm[i]);
  if (s->ckpt_conv) free(s->ckpt_conv[0]); /* the block of every layer's conv slots */
  free(s->ckpt_conv);
  free(s->ckpt_ssm);
  s->ckpt_conv = s->ckpt_ssm = NULL;
  s->ckpt_cap = s->ckpt_n = s->ckpt_last = 0;
}

/* A layer's delta-rule slots (2 MiB a position at the 35B-A3B's shape) come 2 MiB aligned and
 * advised MADV_HUGEPAGE, so q35_session_ckpt_touch takes one page fault per 2 MiB instead of 512
 * (the touch runs inside the first drafting step; its 4 KiB faults were most of its cost). */
#define CKPT_HUGE_FROM ((size_t)2 << 20)

static int ckpt_grow(q35_session *s, int32_t n, q35_err *err) {
  const q35_hparams *hp = &s->model->hp;
  const int L = s->model->n_gdn_layers;
  q35_session_ckpt_free(s);
  s->ckpt_conv = calloc((size_t)L + 1, sizeof(float *));
  s->ckpt_ssm = calloc((size_t)L + 1, sizeof(float *));
  int ok = s->ckpt_conv && s->ckpt_ssm;
  /* not touched yet: a session whose rows never draft (a server at 4 streams, where the plan
     declines) never pays for their pages; q35_session_ckpt_touch does before the first verify */
  /* every layer's conv slots in one block, from 512 KiB whole 2 MiB pages: the touch then faults
     once where it faulted each 4 KiB of N x 96 KiB a layer at the 35B shapes */
  const size_t lay = (conv_floats(hp) * (size_t)n + 16) & ~(size_t)15;
  size_t blk = lay * (size_t)L * sizeof(float);
  if (blk >= ((size_t)512 << 10)) blk = (blk + CKPT_HUGE_FROM - 1) & ~(CKPT_HUGE_FROM - 1);
  float *block = NULL;
  if (ok && L > 0) ok = (block = q35_alloc_huge_from(blk, CKPT_HUGE_FROM)) != NULL;
  for (int i = 0; ok && i < L; i++) {
    s->ckpt_conv[i] = block + (size_t)i * lay;
    s->ckpt_ssm[i] = q35_alloc_huge_from(ssm_floats(hp) * (size_t)n * sizeof(float), CKPT_HUGE_FROM);
    ok = s->ckpt_ssm[i] != NULL;
  }
  if (!ok) {
    q35_session_ckpt_free(s);
    return q35_seterr(err, "out of memory (state checkpoints for %d positions)", n);
  }
  s->ckpt_cap = n;
  s->ckpt_touched = 0;
  return 0;
}

void q35_session_ckpt_touch(q35_session *s, int32_t n) {
  if (n > s->ckpt_cap) n = s->ckpt_cap;
  if (n <= s->ckpt_touched) return;
  const q35_hparams *hp = &s->model->hp;
  const size_t cn = conv_floats(hp), sn = ssm_floats(hp), i0 = (size_t)s->ckpt_touched, k = (size_t)n - i0;
  for (int l = 0; l < s->model->n_gdn_layers; l++) {
    memset(s->ckpt_conv[l] + i0 * cn, 0, k * cn * sizeof(float));
    memset(s->ckpt_ssm[l] + i0 * sn, 0, k * sn * sizeof(float));
  }
  s->ckpt_touched = n;
}

int q35_session_ckpt_reserve(q35_session *s, int32_t n, q35_err *err) {
  return n > s->ckpt_cap ? ckpt_grow(s, n, err) : 0;
}

int q35_session_ckpt_arm(q35_session *s, int32_t n_max, q35_err *err) {
  if (n_max < 1) return q35_seterr(err, "checkpoints: %d positions", n_max);
  if (n_max > s->ckpt_cap && ckpt_grow(s, n_max, err)) return -1;
  s->ckpt_n = s->ckpt_last = n_max;
  s->ckpt_pos0 = s->pos;
  return 0;
}

/* A pipeline's first stage: the later stages do the same to their layers' state. */
static void ckpt_next(q35_session *s, int op, int32_t arg) {
  q35_stage_next *nx = s->model->next;
  if (nx && nx->ckpt) nx->ckpt(nx, op, s, arg);
}

void q35_session_ckpt_restore(q35_session *s, int32_t i) {
  if (i < 0 || i >= s->ckpt_last) return;
  ckpt_next(s, Q35_STAGE_CKPT_RESTORE, i);
  const q35_hparams *hp = &s->model->hp;
  const size_t cn = conv_floats(hp), sn = ssm_floats(hp);
  for (int l = 0; l < s->model->n_gdn_layers; l++) {
    memcpy(s->conv_state[l], s->ckpt_conv[l] + (size_t)i * cn, cn * sizeof(float));
    memcpy(s->ssm_state[l], s->ckpt_ssm[l] + (size_t)i * sn, sn * sizeof(float));
  }
  s->pos = s->ckpt_pos0 + i + 1;
}

void q35_session_ckpt_disarm(q35_session *s) { s->ckpt_n = 0; }

int q35_session_ckpt_rollback(q35_session *s, int32_t pos, q35_err *err) {
  const int32_t k = pos - s->ckpt_pos0 - 1; /* the slot: state after token k of the armed pass */
  if (s->ckpt_n < 1) return q35_seterr(err, "rollback: the session has no checkpoints armed");
  if (pos > s->pos || k < 0 || (k >= s->ckpt_n && pos != s->pos)) {
    s->ckpt_n = 0;
    return q35_seterr(err, "rollback to position %d: outside the checkpointed positions (%d .. %d)", pos,
                      s->ckpt_pos0 + 1, s->ckpt_pos0 + s->ckpt_n);
  }
  s->ckpt_n = 0;
  if (pos < s->pos) q35_session_ckpt_restore(s, k); /* (the later stages too) */
  return 0;
}
