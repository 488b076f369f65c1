/*
 * sampler.c - the sampling head's public API and the fast path's orchestration: parameters,
 * the workspace, the steps both paths share (input checks, penalties, log-probabilities),
 * q35_sample and q35_sample_batch. The head applies penalties, temperature, top-k, top-p,
 * min-p and a seeded draw, following the contract in docs/SAMPLING.md (which also maps the
 * files of this folder). Two implementations of one contract:
 *
 *   q35_sample_ref  (reference.c) sorts the row and follows the contract text step by step;
 *   q35_sample      never sorts the vocabulary: SIMD passes for the maximum and exp
 *                   (kernels_*.c), a threshold filter for top-k and min-p candidates
 *                   (top_k.c), a weighted selection by value for top-p, per-block sums for
 *                   the draw (top_p.c).
 *
 * They return the same token bit for bit. The recipe that makes that possible:
 *
 *  1. Penalties (shared code): repetition first, as llama.cpp and vLLM order it
 *     (l = l > 0 ? l / r : l * r, once per distinct token of prompt + generated), then
 *     l -= presence + frequency * count over the generated tokens, then l += logit_bias.
 *  2. Greedy at temperature 0: the lowest id holding the maximum.
 *  3. s_i = (l_i - m) / T in fp32 (m = max l). s is monotone in l, so the k-th largest s is
 *     s(k-th largest l): the fast path selects on l among threshold candidates.
 *  4. w_i = q35_sampler_exp(s_i): one polynomial exp built only from fused multiply-adds,
 *     exact products by powers of two and comparisons. Every step is a single correctly
 *     rounded IEEE operation, so the SIMD twins (same operations, lane by lane) give the same
 *     bits as the scalar code. w in [0, 1]; exp(0) = 1 exactly; below -87 it returns 0.
 *  5. Fixed point: W_i = trunc(w_i * 2^61) as a 64-bit integer (exact: a power-of-two scale
 *     and a truncating conversion). Sums of W are exact in unsigned 128-bit integers, so they
 *     do not depend on summation order. A weight with W = 0 (w < 2^-61, relative probability
 *     below 4.4e-19) is never drawn.
 *  6. top-p by value: with T1 = sum W over the top-k survivors and S(v) = sum of W_j over
 *     w_j > v, v* is the smallest survivor value with S(v*) <= top_p * T1. top_p = f * 2^-e
 *     exactly (f a 24-bit integer), so the test is S <= floor(f * T1 / 2^e) in integers.
 *     Survivors keep w >= v*.
 *  7. min-p: keep w >= min_p * w_max (a float product and comparison, same in both paths).
 *  8. Draw: k = 53 bits of Philox4x32-10(key = seed, counter = draw index), u = k / 2^53.
 *     With T2 = sum W over the final survivors, return the first survivor in ascending id
 *     whose running sum R exceeds u * T2, i.e. R > floor(k * T2 / 2^53) (integers; exact).
 *     Since k < 2^53 the last survivor always satisfies it; the code still falls back to it.
 *
 * The fast path only changes which elements are looked at (candidates that provably contain
 * every survivor) and how v* is found (partition passes with exact integer mass tests).
 *
 * Log-probabilities (optional) are log_softmax of the penalized logits, computed by one
 * shared routine, so both paths report the same numbers.
 */
#include "sample/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample_internal.h"

#define VOCAB_MAX (1 << 30)  /* the largest vocabulary a workspace takes */
#define REP_DONE 0x40000000 /* penalties: the flag bit "repetition applied" in a token's count */
#define LSE_CHUNK 256       /* log-sum-exp: elements per exp call (an L1-resident buffer) */

/* ---- parameters ----------------------------------------------------------------------- */

q35_sampling q35_sampling_default(void) {
  q35_sampling p;
  memset(&p, 0, sizeof p);
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  return p;
}

int q35_sampling_validate(const q35_sampling *p, q35_err *err) {
  if (!p) return q35_seterr(err, "sampling parameters missing");
  if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
    return q35_seterr(err, "temperature %g is invalid: must be finite and >= 0 (0 = greedy)",
                      (double)p->temperature);
  if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
    return q35_seterr(err, "top_p %g is invalid: must be in (0, 1] (1 = off)", (double)p->top_p);
  if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
    return q35_seterr(err, "min_p %g is invalid: must be in [0, 1] (0 = off)", (double)p->min_p);
  if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
    return q35_seterr(err, "presence_penalty %g is invalid: must be in [-2, 2] (0 = off)",
                      (double)p->presence_penalty);
  if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
    return q35_seterr(err, "frequency_penalty %g is invalid: must be in [-2, 2] (0 = off)",
                      (double)p->frequency_penalty);
  if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
    return q35_seterr(err, "repetition_penalty %g is invalid: must be finite and > 0 (1 = off)",
                      (double)p->repetition_penalty);
  if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
    return q35_seterr(err, "logit_bias: %d entries %s", (int)p->n_logit_bias,
                      p->n_logit_bias < 0 ? "(must be >= 0)" : "but no array");
  for (int32_t i = 0; i < p->n_logit_bias; i++) {
    if (p->logit_bias[i].token < 0)
      return q35_seterr(err, "logit_bias: token id %d is negative", (int)p->logit_bias[i].token);
    if (!isfinite(p->logit_bias[i].bias))
      return q35_seterr(err, "logit_bias: the bias of token %d is not finite",
                        (int)p->logit_bias[i].token);
  }
  return 0;
}

int q35_sampling_check_vocab(const q35_sampling *p, int32_t n_vocab, q35_err *err) {
  for (int32_t i = 0; i < p->n_logit_bias; i++)
    if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
      return q35_seterr(err, "logit_bias: token id %d is out of the vocabulary [0, %d)",
                        (int)p->logit_bias[i].token, (int)n_vocab);
  return 0;
}

/* ---- workspace -------------------------------------------------------------------------- */

q35_sampler *q35_sampler_new(int32_t n_vocab, q35_err *err) {
  if (n_vocab < 1 || n_vocab > VOCAB_MAX) {
    q35_seterr(err, "sampler: vocabulary size %d out of range [1, 2^30]", (int)n_vocab);
    return NULL;
  }
  q35_sampler *ws = calloc(1, sizeof *ws);
  if (!ws) goto oom;
  size_t n = (size_t)n_vocab + SLACK;
  ws->n_vocab = n_vocab;
  ws->simd = q35_simd_active();
  ws->lp = malloc(n * sizeof(float));
  ws->cnt = calloc(n, sizeof(int32_t));
  ws->w = malloc(n * sizeof(float));
  ws->s = malloc(n * sizeof(float));
  ws->tmp = malloc(n * sizeof(float));
  ws->tmp2 = malloc(n * sizeof(float));
  ws->ids = malloc(n * sizeof(int32_t));
  ws->bsum = malloc(((size_t)n_vocab / BLOCK + 2) * sizeof(u128));
  ws->bmax = malloc(((size_t)n_vocab / CHUNK + 2) * sizeof(float));
  ws->bins = malloc(2 * FUSED_NBIN * sizeof(double));
  ws->fused = FUSED_ON;
  ws->pairs = malloc(n * sizeof(vid));
  ws->pairs2 = malloc(n * sizeof(vid));
  if (!ws->lp || !ws->cnt || !ws->w || !ws->s || !ws->tmp || !ws->tmp2 || !ws->ids ||
      !ws->bsum || !ws->bmax || !ws->bins || !ws->pairs || !ws->pairs2)
    goto oom;
  return ws;
oom:
  q35_sampler_free(ws);
  q35_seterr(err, "sampler: out of memory for a vocabulary of %d", (int)n_vocab);
  return NULL;
}

void q35_sampler_free(q35_sampler *ws) {
  if (!ws) return;
  free(ws->lp);
  free(ws->cnt);
  free(ws->w);
  free(ws->s);
  free(ws->tmp);
  free(ws->tmp2);
  free(ws->ids);
  free(ws->bsum);
  free(ws->bmax);
  free(ws->bins);
  free(ws->pairs);
  free(ws->pairs2);
  free(ws);
}

int32_t q35_sampler_n_vocab(const q35_sampler *ws) { return ws->n_vocab; }

void q35_sampler_set_simd(q35_sampler *ws, q35_simd level) {
  q35_simd active = q35_simd_active();
  ws->simd = level < active ? level : active;
}

void q35_sampler_set_fused(q35_sampler *ws, int mode) {
  ws->fused = mode >= FUSED_OFF && mode <= FUSED_MISPLACED ? mode : FUSED_ON;
}

void q35_sampler_fused_stats(const q35_sampler *ws, int64_t *rows, int64_t *fallbacks) {
  if (rows) *rows = ws->n_fused;
  if (fallbacks) *fallbacks = ws->n_fused_miss;
}

/* ---- shared steps ----------------------------------------------------------------------- */

static int penalties_active(const q35_sampling *p) {
  return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
         p->repetition_penalty != 1.0f || p->n_logit_bias > 0;
}

int sample_check_inputs(const q35_sampler *ws, const float *logits, int32_t n_vocab,
                        const q35_sampling *p, const int32_t *history, int32_t n_history,
                        int32_t n_prompt, int32_t n_top, q35_sample_result *out, q35_err *err) {
  if (!ws || !logits || !out) return q35_seterr(err, "sample: missing workspace, logits or output");
  if (n_vocab < 1 || n_vocab > ws->n_vocab)
    return q35_seterr(err, "sample: n_vocab %d out of range [1, %d] (the workspace's size)",
                      (int)n_vocab, (int)ws->n_vocab);
  if (q35_sampling_validate(p, err) || q35_sampling_check_vocab(p, n_vocab, err)) return -1;
  if (n_history < 0 || (n_history > 0 && !history))
    return q35_seterr(err, "sample: bad history (n_history %d)", (int)n_history);
  if (n_prompt < 0 || n_prompt > n_history)
    return q35_seterr(err, "sample: n_prompt %d out of range [0, n_history = %d]", (int)n_prompt,
                      (int)n_history);
  for (int32_t i = 0; i < n_history; i++)
    if (history[i] < 0 || history[i] >= n_vocab)
      return q35_seterr(err, "sample: history token %d (at %d) out of range [0, %d)",
                        (int)history[i], (int)i, (int)n_vocab);
  if (n_top < -1 || n_top > Q35_MAX_TOP_LOGPROBS)
    return q35_seterr(err, "sample: n_top %d out of range [-1, %d]", (int)n_top,
                      Q35_MAX_TOP_LOGPROBS);
  return 0;
}

/* Penalties into ws->lp (a copy of the row). */
void sample_apply_penalties(q35_sampler *ws, const float *logits, int32_t n_vocab,
                            const q35_sampling *p, const int32_t *history, int32_t n_history,
                            int32_t n_prompt) {
  float *lp = ws->lp;
  int32_t *cnt = ws->cnt;
  memcpy(lp, logits, (size_t)n_vocab * sizeof(float));
  for (int32_t i = n_prompt; i < n_history; i++) cnt[history[i]]++;
  if (p->repetition_penalty != 1.0f) {
    float r = p->repetition_penalty;
    for (int32_t i = 0; i < n_history; i++) {
      int32_t t = history[i];
      if (cnt[t] & REP_DONE) continue;
      cnt[t] |= REP_DONE;
      lp[t] = lp[t] > 0.0f ? lp[t] / r : lp[t] * r;
    }
  }
  if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
    for (int32_t i = n_prompt; i < n_history; i++) {
      int32_t t = history[i];
      int32_t c = cnt[t] & ~REP_DONE;
      if (c == 0) continue; /* already applied (counts are zeroed below as we go) */
      float d = p->presence_penalty + p->frequency_penalty * (float)c;
      lp[t] = lp[t] - d;
      cnt[t] &= REP_DONE;
    }
  }
  for (int32_t i = 0; i < n_history; i++) cnt[history[i]] = 0;
  /* logit bias: after the penalties, before temperature and the filters (-inf stays -inf) */
  for (int32_t i = 0; i < p->n_logit_bias; i++) lp[p->logit_bias[i].token] += p->logit_bias[i].bias;
}

int sample_row_error(q35_err *err, const float *l, int32_t bad, int penalized) {
  float x = l[bad];
  if (penalized)
    return q35_seterr(err, "logits: entry %d is %s after repetition_penalty (overflow)",
                      (int)bad, x != x ? "NaN" : "+inf");
  return q35_seterr(err, "logits: entry %d is %s (logits must be finite or -inf)", (int)bad,
                    x != x ? "NaN" : "+inf");
}

/* log(sum exp(l)) of a row with maximum m: m + log(sum exp(l - m)) with the shared exp, in
 * double. Shared by both paths, so their log-probabilities agree exactly. The sum runs in eight
 * double lanes (element i in lane i % 8), combined pairwise at the end: a fixed order, and
 * eight independent add chains instead of one. */
double sample_row_lse(const q35_sampler *ws, const float *l, int32_t n, float m) {
  float buf[LSE_CHUNK], ex[LSE_CHUNK];
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int32_t i = 0; i < n; i += LSE_CHUNK) {
    int32_t c = n - i < LSE_CHUNK ? n - i : LSE_CHUNK;
    for (int32_t j = 0; j < c; j++) buf[j] = l[i + j] - m;
    k_exp_array(ws->simd, buf, ex, c);
    int32_t j = 0;
    for (; j + 8 <= c; j += 8)
      for (int q = 0; q < 8; q++) acc[q] += (double)ex[j + q];
    for (; j < c; j++) acc[j % 8] += (double)ex[j]; /* i is a multiple of 8: lane (i + j) % 8 */
  }
  const double sum =
      ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  return (double)m + log(sum);
}

/* The fast path's alternatives: one scan keeping the best n_top (value desc, id asc) in an
 * insertion-sorted list; scanning ids in ascending order, an equal value never displaces an
 * earlier id. */
static void fill_logprobs(const q35_sampler *ws, const float *l, int32_t n, float m, int32_t tok,
                          int32_t n_top, q35_sample_result *out) {
  out->n_top = 0;
  if (n_top < 0) {
    out->logprob = NAN;
    return;
  }
  double lse = sample_row_lse(ws, l, n, m);
  out->logprob = (float)((double)l[tok] - lse);
  if (n_top > n) n_top = n;
  int32_t k = 0;
  for (int32_t i = 0; i < n && n_top > 0; i++) {
    float x = l[i];
    if (k == n_top && !(x > l[out->top_ids[k - 1]])) continue;
    int32_t j = k < n_top ? k++ : k - 1;
    while (j > 0 && x > l[out->top_ids[j - 1]]) {
      out->top_ids[j] = out->top_ids[j - 1];
      j--;
    }
    out->top_ids[j] = i;
  }
  out->n_top = k;
  for (int32_t j = 0; j < k; j++) out->top_logprobs[j] = (float)((double)l[out->top_ids[j]] - lse);
}

/* ---- the fast path ---------------------------------------------------------------------- */

/* The fast path: the maximum scan (with the chunk maxima when the one-pass top-p will run),
 * then by row kind: greedy, top-k candidates, min-p candidates, or keep-all (one-pass top-p,
 * else the full row). */
int q35_sample(q35_sampler *ws, const float *logits, int32_t n_vocab, const q35_sampling *p,
               const int32_t *history, int32_t n_history, int32_t n_prompt, int32_t n_top,
               q35_sample_result *out, q35_err *err) {
  if (sample_check_inputs(ws, logits, n_vocab, p, history, n_history, n_prompt, n_top, out, err))
    return -1;
  const int32_t V = n_vocab;
  const float *l = logits;
  int32_t bad;
  int penalized = 0;
  if ((n_history > 0 || p->n_logit_bias > 0) && penalties_active(p)) {
    (void)k_scan(ws, logits, V, &bad);
    if (bad >= 0) return sample_row_error(err, logits, bad, 0);
    sample_apply_penalties(ws, logits, V, p, history, n_history, n_prompt);
    l = ws->lp;
    penalized = 1;
  }
  /* top-k clipped to the row: K == V keeps all */
  const int32_t K = (p->top_k <= 0 || p->top_k >= V) ? V : (int32_t)p->top_k;
  const int fused = ws->fused != FUSED_OFF && p->temperature != 0.0f && K == V && p->top_p < 1.0f &&
                    V >= FUSED_MIN;
  float m = fused ? k_scan_chunks(ws, l, V, ws->bmax, &bad) : k_scan(ws, l, V, &bad);
  if (bad >= 0) return sample_row_error(err, l, bad, penalized);
  if (m == -INFINITY) return q35_seterr(err, "logits: all %d entries are -inf", (int)V);
  const float T = p->temperature;
  int32_t tok;
  if (T == 0.0f) {
    tok = k_find_eq(ws, l, V, m); /* greedy: the lowest id holding the maximum */
  } else if (K < V) {
    tok = sample_top_k(ws, l, V, m, p, K);
  } else if (p->top_p == 1.0f && p->min_p > 0.0f) {
    tok = sample_min_p_only(ws, l, V, m, p);
  } else {
    tok = fused ? sample_topp_fused(ws, l, V, m, p, ws->bmax) : -1;
    if (tok < 0) tok = sample_full(ws, l, V, m, p);
  }
  out->token = tok;
  fill_logprobs(ws, l, V, m, tok, n_top, out);
  return 0;
}

int q35_sample_batch(q35_sampler *ws, const float *logits, int32_t n_rows, int32_t n_vocab,
                     const q35_sampling *p, const q35_sample_history *hist, int32_t n_top,
                     q35_sample_result *out, q35_err *err) {
  if (n_rows < 0) return q35_seterr(err, "sample: n_rows %d < 0", (int)n_rows);
  for (int32_t b = 0; b < n_rows; b++) {
    const q35_sample_history *h = hist ? &hist[b] : NULL;
    q35_err e;
    if (q35_sample(ws, logits + (size_t)b * (size_t)n_vocab, n_vocab, &p[b], h ? h->tokens : NULL,
                   h ? h->n_tokens : 0, h ? h->n_prompt : 0, n_top, &out[b], &e))
      return q35_seterr(err, "row %d: %s", (int)b, e.msg);
  }
  return 0;
}
