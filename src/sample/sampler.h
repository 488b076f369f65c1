/*
 * sampler.h - the sampling head (contract: docs/SAMPLING.md).
 *
 * One row of logits in, one token out. Two implementations of the same contract live in this
 * folder and must agree bit for bit:
 *   q35_sample_ref  plain and sort-based (reference.c): easy to check against the contract;
 *   q35_sample      the fast path (sampler.c, top_k.c, top_p.c, kernels_*.c): never sorts the
 *                   vocabulary (SIMD passes, candidate filtering, weighted selection),
 *                   allocation-free per call.
 * They agree exactly because every decision is made with order-independent arithmetic: one
 * shared exp routine (its SIMD twin gives the same bits), weights converted to fixed-point
 * integers and summed exactly, top-p decided by value, and the draw compared in integers.
 * The recipe is written out at the top of sampler.c.
 *
 * Randomness is counter based (rng.c): the uniform of a draw is Philox4x32-10 keyed by the
 * 64-bit seed with the draw index as counter, so a row's token depends only on (logits,
 * params, history, seed, draw index), never on batch neighbours or call order.
 *
 * The kernels run at the one SIMD level of base/cpu.h (q35_simd_active(), Q35_SIMD); every
 * level gives the same bits.
 *
 * A q35_sampler is a workspace for one vocabulary size; it is not thread safe (use one per
 * thread). Rows are independent: sampling B rows is B calls.
 */
#ifndef Q35_SAMPLER_H
#define Q35_SAMPLER_H

#include <stdint.h>

#include "base/cpu.h"
#include "q35.h"

typedef struct q35_sampler q35_sampler;

/* Workspace for rows of up to n_vocab logits (n_vocab >= 1). NULL on bad size or no memory. */
q35_sampler *q35_sampler_new(int32_t n_vocab, q35_err *err);
void q35_sampler_free(q35_sampler *ws);
int32_t q35_sampler_n_vocab(const q35_sampler *ws);

/* 0 if every parameter is in its valid range, else -1 with a message naming the parameter
 * and the range: temperature finite >= 0; top_p in (0, 1]; min_p in [0, 1];
 * presence_penalty and frequency_penalty in [-2, 2]; repetition_penalty finite > 0.
 * top_k, seed and draw_index accept any value. */
int q35_sampling_validate(const q35_sampling *p, q35_err *err);

typedef struct q35_sample_result {
  int32_t token;        /* the sampled token id */
  /* Log-probability of `token` under log_softmax of the row's logits after penalties (the
   * model's distribution: no temperature, no truncation). NAN when n_top < 0 was asked. */
  float logprob;
  int32_t n_top;        /* number of alternatives filled in (min(n_top, n_vocab)) */
  int32_t top_ids[Q35_MAX_TOP_LOGPROBS];    /* highest logits first, ties lowest id first */
  float top_logprobs[Q35_MAX_TOP_LOGPROBS]; /* their log_softmax values, same definition */
} q35_sample_result;

/* Sample one token from one row.
 *   logits     n_vocab floats (finite or -inf; NaN, +inf or all -inf is an error)
 *   history    prompt then generated tokens, for the penalties (may be NULL when n_history
 *              is 0); history[0 .. n_prompt) is the prompt; ids outside [0, n_vocab) are an
 *              error. presence/frequency count history[n_prompt ..], repetition all of it.
 *   n_top      -1: skip log-probabilities (fastest; logprob = NAN); 0: the sampled token's
 *              logprob only; 1 .. Q35_MAX_TOP_LOGPROBS: also that many alternatives.
 * n_vocab must not exceed the workspace's size. Returns 0, or -1 with err filled. */
int q35_sample(q35_sampler *ws, const float *logits, int32_t n_vocab, const q35_sampling *p,
               const int32_t *history, int32_t n_history, int32_t n_prompt, int32_t n_top,
               q35_sample_result *out, q35_err *err);
/* The sort-based reference: same contract, same results bit for bit, slower. */
int q35_sample_ref(q35_sampler *ws, const float *logits, int32_t n_vocab,
                   const q35_sampling *p, const int32_t *history, int32_t n_history,
                   int32_t n_prompt, int32_t n_top, q35_sample_result *out, q35_err *err);

/* Per-row penalty inputs for the batched call (all fields may be 0/NULL). */
typedef struct q35_sample_history {
  const int32_t *tokens;
  int32_t n_tokens;
  int32_t n_prompt;
} q35_sample_history;

/* B rows (row-major logits[b * n_vocab + i]), each with its own parameters p[b] and optional
 * history hist[b] (hist may be NULL). Rows are independent: row b's token is what q35_sample
 * returns for that row alone. On error the message names the row. */
int q35_sample_batch(q35_sampler *ws, const float *logits, int32_t n_rows, int32_t n_vocab,
                     const q35_sampling *p, const q35_sample_history *hist, int32_t n_top,
                     q35_sample_result *out, q35_err *err);

/* The constraint mask hook (mask.c): logits[i] = -inf for every token i whose bit
 * (mask[i / 32] >> (i % 32) & 1) is clear; returns the number of allowed tokens. The step
 * applies it to a constrained row's logits before q35_sample (docs/SAMPLING.md). */
int64_t q35_logits_apply_mask(float *logits, int32_t n_vocab, const uint32_t *mask);

/* ---- building blocks, exposed for the tests ---- */

/* Philox4x32-10 (Salmon et al. 2011): out = F_key(ctr). */
void q35_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The draw's uniform as an integer k in [0, 2^53): u = k / 2^53, from Philox keyed by seed
 * (key = {seed low 32 bits, seed high 32 bits}) with counter {n low, n high, 0, 0};
 * k = ((out[0] << 32) | out[1]) >> 11. */
uint64_t q35_draw_u53(uint64_t seed, uint64_t n);
/* The one exp routine for x <= 0 (returns 0 below -87, 1 at 0); see sample_internal.h. */
float q35_sampler_exp(float x);
/* Its SIMD twin over an array (y[i] = q35_sampler_exp(x[i]) bit for bit), at the level
 * q35_simd_active() names. */
void q35_sampler_exp_array(const float *x, float *y, int32_t n);
/* Testing aid: lower this workspace's SIMD level (never above q35_simd_active(); a workspace
 * starts at that level). */
void q35_sampler_set_simd(q35_sampler *ws, q35_simd level);
/* Testing aids for the one-pass top-p path (keep-all rows with top_p < 1, see top_p.c):
 * mode 1 (the default) uses it, 0 never, 2 with a deliberately misplaced window so that
 * rows take its fallback. Stats: rows that entered it, and of those, rows that fell back. */
void q35_sampler_set_fused(q35_sampler *ws, int mode);
void q35_sampler_fused_stats(const q35_sampler *ws, int64_t *rows, int64_t *fallbacks);

#endif
