/*
 * mtp.h - the MTP (multi-token prediction) head as a draft model, its per-session state, and the
 * per-position state checkpoints that let a speculative verify step roll a session back without
 * a re-run.
 *
 * The head (llama.cpp's graph_mtp for qwen35/qwen35moe), for a pair (h_p, t) where h_p is the
 * trunk's post-output_norm hidden state at position p and t the token after it:
 *   x = eh_proj . concat[enorm(embed(t)), hnorm(h_p)]        (embedding half first)
 *   x += Attn(attn_norm(x));  x += FFN(post_norm(x))          (one full-attention decoder layer,
 *                                                              its KV cache at position p)
 *   g = head_norm(x);  logits = head . g                      (logits for the token after t)
 * A chained draft feeds (g, drafted token) as the next pair: g plays the role of h.
 */
#ifndef Q35_MTP_H
#define Q35_MTP_H

#include <stdint.h>

#include "model/model.h"

/* The head's own KV cache: one attention layer's K and V rows [n_ctx], and its position (the
 * number of pairs it holds: pair (h_p, t) sits at position p). For a session with drafts
 * (q35_session_params.draft_max > 0) it also carries the session's draft state: the pending
 * pairs, whose hidden states are known but not yet run through the head.
 *
 * Invariant of a session s with drafts: mtp->s.pos + n_pend == s->pos. The pending hidden
 * states pend_h[i] are those of trunk positions mtp->s.pos + i; pend_t[i] (i < n_pend - 1) is
 * the token at position mtp->s.pos + i + 1 (fed already); the last pending pair's token is the
 * next token the session is fed. engine/draft.c keeps this in step with the trunk. */
typedef struct q35_mtp_cache {
  q35_session s;       /* k_cache[0] / v_cache[0], params, pos: what the attention layer reads */
  void *k, *v;
  void *kp[1], *vp[1];
  int32_t zpos;        /* entries [zpos, s.pos) are zeros not written yet (q35_mtp_cache_skip): the head writes
                          them before it next runs on the cache, so a session that never drafts never touches
                          them; below zpos the cache holds what an eager skip would have left */
  /* the draft state of a session (NULL / 0 for a bare cache) */
  int32_t draft_max;   /* drafts a row of the session may carry */
  int32_t draft_vocab; /* the head drafts among ids [0, draft_vocab) (n_vocab: all) */
  float *pend_h;       /* [pend_cap][n_embd] */
  int32_t *pend_t;     /* [pend_cap] */
  int32_t n_pend, pend_cap;
  double acc_s, acc_f; /* accepted drafts and rejections (decayed): the acceptance estimate */
  /* the latest verify step, for q35_session_draft_keep: emitted tokens, drafts */
  int32_t last_emitted, last_drafted, last_pos0;
  int32_t idle;        /* decode steps in a row the adaptive policy chose no drafts for (engine/draft.c);
                          starts at Q35_MTP_IDLE_STEPS: a new session is cold until the plan drafts */
} q35_mtp_cache;

/* Pairs the session holds pending at most before a step that does not draft runs them through
 * the head (a warm session, below) or skips all but the newest Q35_MTP_PEND_KEEP (a cold one): a
 * warm session's head work outside its drafts goes PEND_FLUSH tokens at a time, so the head's
 * experts are read once per 32 tokens of every row in the step, not once per token. */
#define Q35_MTP_PEND_FLUSH 32

/* Head upkeep is lazy (engine/draft.c): a session's pending pairs go through the head when it next
 * drafts (the catch-up: one multi-token pass, without logits, over every drafting row's pairs
 * but its last, before the draft passes), and only when more than PEND_FLUSH have gathered does
 * the session choose between keeping and skipping them:
 *   - "warm" (the adaptive plan chose drafts for it within the last IDLE_STEPS decode steps, or
 *     the context drafts every row: q35_context_draft_adapt(ctx, 0)): they run through the head
 *     (a prompt chunk, or a stretch of decode the plan kept off drafting) so later drafts see
 *     the whole context;
 *   - "cold" (a new session, or one the plan has kept off drafting IDLE_STEPS steps in a row: a
 *     large batch, low acceptance, a compute-bound machine): all but the newest PEND_KEEP are
 *     skipped (the head's position moves past them; their KV entries are zeroed, so a draft does
 *     not depend on what an earlier conversation left in the cache) and a step costs no head
 *     pass. When the plan first gives a cold session drafts, the head catches up over the kept
 *     window (up to PEND_FLUSH recent pairs).
 * IDLE_STEPS < PEND_FLUSH: a session that stops drafting turns cold before its pending pairs
 * overflow, so declining to draft never costs a head pass. The bounded window rather than a
 * catch-up over every missed position: the missed hidden states would have to be kept (n_ctx x
 * n_embd floats a session) and running them through the head is the very upkeep being saved;
 * drafts after a skipped stretch are worse, never the output. The count survives a reset or a
 * restore (a server slot's next request starts where the last one left off). */
#define Q35_MTP_IDLE_STEPS 16
#define Q35_MTP_PEND_KEEP 16
/* after a draft at most Q35_DRAFT_MAX + 1 pairs are pending; IDLE_STEPS - 1 steps later still < PEND_FLUSH */
_Static_assert(Q35_DRAFT_MAX + Q35_MTP_IDLE_STEPS - 1 < Q35_MTP_PEND_FLUSH && Q35_MTP_PEND_KEEP < Q35_MTP_PEND_FLUSH,
               "a session the plan stops drafting for turns cold before its pending pairs overflow");

q35_mtp_cache *q35_mtp_cache_new(q35_model *m, int32_t n_ctx, int kv_type, q35_err *err);
void q35_mtp_cache_free(q35_mtp_cache *c);
int32_t q35_mtp_cache_pos(const q35_mtp_cache *c);
/* Forget the entries at and after pos (pos <= the current position). */
void q35_mtp_cache_truncate(q35_mtp_cache *c, int32_t pos);
/* Move the position n pairs on without running the head over them: their K/V entries become zeros
 * (a key of zeros scores 0 and its value adds nothing, the same for every session, whatever the
 * cache held before); at most up to n_ctx. The zeros are written when the head next runs on the
 * cache (zpos), not here: a cold session that never drafts costs no cache pages. */
void q35_mtp_cache_skip(q35_mtp_cache *c, int32_t n);
/* Set the position without running the head: back (the entries past it are forgotten), or on
 * over entries the cache holds already (they stay as they are; a restored snapshot's, or pairs a
 * failed pass leaves out). */
void q35_mtp_cache_set_pos(q35_mtp_cache *c, int32_t pos);
/* Bytes of the head's KV cache for a context of n_ctx (what q35_mtp_cache_new allocates). */
uint64_t q35_mtp_cache_bytes(const q35_model *m, int32_t n_ctx, int kv_type);

/* Run the head over n pairs (hidden[i] = h of cache position pos + i, n_embd floats each;
 * tokens[i] = the token after it), storing their K/V at pos .. pos + n - 1. Writes the logits of
 * the first n_head_vocab tokens (0: all n_vocab; a draft over the most frequent ids reads only
 * those rows of the output matrix) and the head-normed hidden state g (n_embd floats, may be
 * NULL) of the last pair. 0, or -1 with err (nothing moved). */
int q35_mtp_forward(const q35_model *m, q35_fwd_ws *ws, q35_mtp_cache *c, const int32_t *tokens, const float *hidden,
                    int32_t n, int32_t n_head_vocab, float *logits, float *g_out, q35_err *err);

/* One row of a head pass over several caches at once: n pairs (tokens, hidden) into cache c; with
 * logits != NULL the logits of the first n_head_vocab ids of its last pair (and g into g_out, may
 * be NULL), with logits NULL only the cache entries (no output matrix). */
typedef struct q35_mtp_row {
  q35_mtp_cache *c;
  const int32_t *tokens;
  const float *hidden;
  int32_t n;
  float *logits;
  float *g_out;
} q35_mtp_row;

/* One pass of the head over n_rows rows (distinct caches); the rows that want logits share
 * n_head_vocab (0: all) and one pass over those rows of the output matrix. Each row's numbers
 * are those of a pass over that row alone (the trunk's layer code keeps the invariance
 * contract). 0, or -1 with err (nothing moved). */
int q35_mtp_forward_rows(const q35_model *m, q35_fwd_ws *ws, q35_mtp_row *rows, int n_rows, int32_t n_head_vocab,
                         q35_err *err);

/* ---- per-position checkpoints of a session's recurrent state (checkpoint.c) ----
 * Arm a session before a forward pass of up to n_max + 1 tokens: the DeltaNet layers then save
 * their conv state after each of the first n_max tokens, and what rebuilds their recurrent state
 * after each (the state before the pass and those tokens' recurrence inputs). Rolling back to position
 * pos (start < pos <= the session's position, start = the position when armed) restores the
 * state after token pos - start - 1 of that pass; the KV caches need nothing (entries past pos
 * are never read and are overwritten). Either call disarms; the slots keep their contents until
 * the next arm, so q35_session_ckpt_restore can go back further (below). */
int q35_session_ckpt_arm(q35_session *s, int32_t n_max, q35_err *err);
int q35_session_ckpt_rollback(q35_session *s, int32_t pos, q35_err *err);
void q35_session_ckpt_disarm(q35_session *s);
/* After a rollback: the state after token i (i < the n_max of the last arm) of the last armed
 * pass into the session, at position start + i + 1. */
void q35_session_ckpt_restore(q35_session *s, int32_t i);
/* q35_session_ckpt_rollback / _restore with the delta-rule replay (checkpoint.c) split over a
 * pool's threads (NULL: this thread; the bits are the same either way). The pool must be idle:
 * the stepping context's, after its step. */
int q35_session_ckpt_rollback_on(q35_session *s, int32_t pos, q35_pool *pool, q35_err *err);
void q35_session_ckpt_restore_on(q35_session *s, int32_t i, q35_pool *pool);
/* Touch (zero) the pages of checkpoint slots [0, n) not touched yet (and of the spare recurrent
 * state, at the first touch), before an armed pass of n drafts: that pass would otherwise
 * page-fault on every page it writes for the first time (the spare: 2 MiB a DeltaNet layer on
 * the 35B shapes), a one-off cost inside the verify step the draft plan times (engine/draft.c
 * does it outside the timed part); slots no draft reaches are never faulted in. Their contents
 * are never read before an armed pass writes them. */
void q35_session_ckpt_touch(q35_session *s, int32_t n);
/* Allocate n checkpoint slots now (a session with drafts sizes them at creation). */
int q35_session_ckpt_reserve(q35_session *s, int32_t n, q35_err *err);

#endif
