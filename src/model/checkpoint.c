/*
 * checkpoint.c - per-position checkpoints of a session's DeltaNet state (model/mtp.h).
 *
 * A speculative verify step feeds [last accepted token, draft_1 .. draft_N] in one forward pass.
 * When the trunk rejects draft_k, the session must continue from the state after draft_{k-1}:
 * the attention layers need only the position moved back (KV entries past it are never read),
 * but the conv and delta-rule states have advanced through every token.
 *
 * The conv state is small: while a session is armed the DeltaNet layer copies it after each
 * token into a slot (deltanet_layer.c), and a rollback copies slot k back.
 *
 * The delta-rule state is not saved per token (2 MiB a layer and token at the 35B-A3B's shape:
 * writing it to memory and reading it back cost the armed pass most of its recurrence time).
 * Each DeltaNet layer has a second state buffer, the spare: an armed pass reads a head's state
 * from the live buffer, runs the row's tokens on it in the spare's head region (in cache after
 * the first token), and the layer then swaps live and spare. So after the pass the live buffer
 * holds the state after the last token and the spare the state before the pass, untouched. The
 * pass also saves the recurrence's inputs of tokens 0 .. ckpt_n - 1 (per token: the conv row it
 * reads, q and k of every key head and v of every value head, and each value head's beta and
 * decay). A rollback to the state after token k replays: per head, the spare's state through
 * tokens 0 .. k on the same arguments (q35_delta_steps, whose bits are those of q35_delta_step
 * token by token, in place or not: kernels/deltanet.h), into the live buffer. The state bits are therefore exactly
 * those of a pass that stopped there, so what follows is bit-identical to decoding without
 * speculation; the spare and the saved inputs stay as they are until the next armed pass, so a
 * later restore can go back further.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/deltanet.h"
#include "model/mtp.h"

static size_t conv_floats(const q35_hparams *hp) {
  return (size_t)(hp->conv_kernel - 1) * (size_t)(2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner);
}
static size_t ssm_floats(const q35_hparams *hp) {
  return (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state;
}
/* a slot of saved recurrence inputs: the conv row (channels), then beta and decay of each value head */
static size_t in_floats(const q35_hparams *hp) {
  return (size_t)(2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner) + 2 * (size_t)hp->ssm_dt_rank;
}

void q35_session_ckpt_free(q35_session *s) {
  const int n = s->model ? s->model->n_gdn_layers : 0;
  for (int i = 0; i < n; i++)
    if (s->ckpt_spare) free(s->ckpt_spare[i]);
  if (s->ckpt_conv) free(s->ckpt_conv[0]); /* the block of every layer's conv and input slots */
  free(s->ckpt_conv);
  free(s->ckpt_in);
  free(s->ckpt_spare);
  s->ckpt_conv = s->ckpt_in = s->ckpt_spare = NULL;
  s->ckpt_cap = s->ckpt_n = s->ckpt_last = 0;
}

/* A layer's spare delta-rule state (2 MiB at the 35B-A3B's shape) comes 2 MiB aligned and
 * advised MADV_HUGEPAGE, so its first touch takes one page fault instead of 512. */
#define CKPT_HUGE_FROM ((size_t)2 << 20)

static int ckpt_grow(q35_session *s, int32_t n, q35_err *err) {
  const q35_hparams *hp = &s->model->hp;
  const int L = s->model->n_gdn_layers;
  q35_session_ckpt_free(s);
  s->ckpt_conv = calloc((size_t)L + 1, sizeof(float *));
  s->ckpt_in = calloc((size_t)L + 1, sizeof(float *));
  s->ckpt_spare = calloc((size_t)L + 1, sizeof(float *));
  int ok = s->ckpt_conv && s->ckpt_in && s->ckpt_spare;
  /* not touched yet: a session whose rows never draft (a server at 4 streams, where the plan
     declines) never pays for their pages; q35_session_ckpt_touch does before the first verify */
  /* every layer's conv and input slots in one block, from 512 KiB whole 2 MiB pages: the touch
     then faults once where it faulted each 4 KiB of N x 128 KiB a layer at the 35B shapes */
  const size_t cl = (conv_floats(hp) * (size_t)n + 15) & ~(size_t)15;
  const size_t lay = cl + ((in_floats(hp) * (size_t)n + 16) & ~(size_t)15);
  size_t blk = lay * (size_t)L * sizeof(float);
  if (blk >= ((size_t)512 << 10)) blk = (blk + CKPT_HUGE_FROM - 1) & ~(CKPT_HUGE_FROM - 1);
  float *block = NULL;
  if (ok && L > 0) ok = (block = q35_alloc_huge_from(blk, CKPT_HUGE_FROM)) != NULL;
  for (int i = 0; ok && i < L; i++) {
    s->ckpt_conv[i] = block + (size_t)i * lay;
    s->ckpt_in[i] = s->ckpt_conv[i] + cl;
    s->ckpt_spare[i] = q35_alloc_huge_from(ssm_floats(hp) * sizeof(float), CKPT_HUGE_FROM);
    ok = s->ckpt_spare[i] != NULL;
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
  const size_t cn = conv_floats(hp), in = in_floats(hp), i0 = (size_t)s->ckpt_touched, k = (size_t)n - i0;
  for (int l = 0; l < s->model->n_gdn_layers; l++) {
    memset(s->ckpt_conv[l] + i0 * cn, 0, k * cn * sizeof(float));
    memset(s->ckpt_in[l] + i0 * in, 0, k * in * sizeof(float));
    if (i0 == 0) memset(s->ckpt_spare[l], 0, ssm_floats(hp) * sizeof(float)); /* the first armed pass writes it */
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

#define REPLAY_DV_MAX 1024 /* load.c's MAX_SSM_STATE */
#define REPLAY_BLOCK 16    /* tokens a q35_delta_steps call (deltanet_layer.c's RECUR_BLOCK) */

typedef struct {
  q35_session *s;
  int32_t i;
} replay_task;

/* The delta-rule state after token i of the last armed pass: per (layer, value head), the spare's
 * state (before the pass) through tokens 0 .. i from the saved inputs, into the live buffer; the
 * arguments are the pass's (deltanet_layer.c's gdn_recur runs q35_delta_steps too), so are the bits. */
static void replay(void *vctx, int ith, int nth) {
  const replay_task *t = vctx;
  q35_session *s = t->s;
  const q35_hparams *hp = &s->model->hp;
  const int Hk = hp->ssm_n_group, Hv = hp->ssm_dt_rank, dk = hp->ssm_d_state, dv = hp->ssm_d_state;
  const size_t C = (size_t)(2 * Hk * dk + Hv * dv), in = in_floats(hp), hs = (size_t)dv * dk;
  float o[REPLAY_DV_MAX]; /* the head's outputs: the pass used them, the replay does not */
  long i0, i1;
  q35_split((long)s->model->n_gdn_layers * Hv, ith, nth, &i0, &i1);
  for (long it = i0; it < i1; it++) {
    const int l = (int)(it / Hv), hv = (int)(it % Hv), hk = hv % Hk;
    const float *Sin = s->ckpt_spare[l] + (size_t)hv * hs;
    float *Sout = s->ssm_state[l] + (size_t)hv * hs;
    /* tokens 0 .. i in blocks of REPLAY_BLOCK, each one q35_delta_steps call (the same bits as its
       tokens' q35_delta_step calls, with the head's rows kept in L1 across the block's tokens);
       the outputs all go to o (ldo 0) */
    for (int32_t j0 = 0; j0 <= t->i; j0 += REPLAY_BLOCK) {
      const int nb = t->i + 1 - j0 < REPLAY_BLOCK ? (int)(t->i + 1 - j0) : REPLAY_BLOCK;
      const float *x = s->ckpt_in[l] + (size_t)j0 * in;
      float beta[REPLAY_BLOCK], decay[REPLAY_BLOCK];
      for (int b = 0; b < nb; b++) {
        beta[b] = x[(size_t)b * in + C + (size_t)hv];
        decay[b] = x[(size_t)b * in + C + (size_t)Hv + (size_t)hv];
      }
      q35_delta_steps(Sin, Sout, dv, dk, nb, x + (size_t)hk * dk, x + (size_t)(Hk + hk) * dk,
                      x + 2 * (size_t)Hk * dk + (size_t)hv * dv, in, beta, decay, o, 0);
      Sin = Sout;
    }
  }
}

void q35_session_ckpt_restore_on(q35_session *s, int32_t i, q35_pool *pool) {
  if (i < 0 || i >= s->ckpt_last) return;
  ckpt_next(s, Q35_STAGE_CKPT_RESTORE, i);
  const q35_hparams *hp = &s->model->hp;
  const size_t cn = conv_floats(hp);
  for (int l = 0; l < s->model->n_gdn_layers; l++)
    memcpy(s->conv_state[l], s->ckpt_conv[l] + (size_t)i * cn, cn * sizeof(float));
  replay_task t = {s, i};
  if (pool && s->model->n_gdn_layers > 0) q35_pool_run(pool, replay, &t);
  else replay(&t, 0, 1);
  s->pos = s->ckpt_pos0 + i + 1;
}

void q35_session_ckpt_restore(q35_session *s, int32_t i) { q35_session_ckpt_restore_on(s, i, NULL); }

void q35_session_ckpt_disarm(q35_session *s) { s->ckpt_n = 0; }

int q35_session_ckpt_rollback_on(q35_session *s, int32_t pos, q35_pool *pool, q35_err *err) {
  const int32_t k = pos - s->ckpt_pos0 - 1; /* the slot: state after token k of the armed pass */
  if (s->ckpt_n < 1) return q35_seterr(err, "rollback: the session has no checkpoints armed");
  if (pos > s->pos || k < 0 || (k >= s->ckpt_n && pos != s->pos)) {
    s->ckpt_n = 0;
    return q35_seterr(err, "rollback to position %d: outside the checkpointed positions (%d .. %d)", pos,
                      s->ckpt_pos0 + 1, s->ckpt_pos0 + s->ckpt_n);
  }
  s->ckpt_n = 0;
  if (pos < s->pos) q35_session_ckpt_restore_on(s, k, pool); /* (the later stages too) */
  return 0;
}

int q35_session_ckpt_rollback(q35_session *s, int32_t pos, q35_err *err) {
  return q35_session_ckpt_rollback_on(s, pos, NULL, err);
}
