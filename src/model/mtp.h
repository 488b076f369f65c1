/*
 * mtp.h - the MTP (multi-token prediction) head as a draft model, and the per-position state
 * checkpoints that let a speculative verify step roll a session back without a re-run.
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

/* The head's own KV cache: one attention layer's K and V rows [n_ctx], and its position. */
typedef struct q35_mtp_cache q35_mtp_cache;

q35_mtp_cache *q35_mtp_cache_new(q35_model *m, int32_t n_ctx, int kv_type, q35_err *err);
void q35_mtp_cache_free(q35_mtp_cache *c);
int32_t q35_mtp_cache_pos(const q35_mtp_cache *c);
/* Forget the entries at and after pos (pos <= the current position). */
void q35_mtp_cache_truncate(q35_mtp_cache *c, int32_t pos);

/* Run the head over n pairs (hidden[i] = h of cache position pos + i, n_embd floats each;
 * tokens[i] = the token after it), storing their K/V at pos .. pos + n - 1. Writes the logits of
 * the first n_head_vocab tokens (0: all n_vocab; a draft over the most frequent ids reads only
 * those rows of the output matrix) and the head-normed hidden state g (n_embd floats, may be
 * NULL) of the last pair. 0, or -1 with err (nothing moved). */
int q35_mtp_forward(const q35_model *m, q35_fwd_ws *ws, q35_mtp_cache *c, const int32_t *tokens, const float *hidden,
                    int32_t n, int32_t n_head_vocab, float *logits, float *g_out, q35_err *err);

/* ---- per-position checkpoints of a session's recurrent state (checkpoint.c) ----
 * Arm a session before a forward pass of up to n_max + 1 tokens: the DeltaNet layers then save
 * their conv and recurrent state after each of the first n_max tokens. Rolling back to position
 * pos (start < pos <= the session's position, start = the position when armed) restores the
 * state after token pos - start - 1 of that pass; the KV caches need nothing (entries past pos
 * are never read and are overwritten). Either call disarms. */
int q35_session_ckpt_arm(q35_session *s, int32_t n_max, q35_err *err);
int q35_session_ckpt_rollback(q35_session *s, int32_t pos, q35_err *err);
void q35_session_ckpt_disarm(q35_session *s);

#endif
