/*
 * sampler_fuzz.c - libFuzzer target for the sampling head (sampler.h): parameters, logits
 * (NaN, +-inf, ties, huge/tiny values), penalty history (ids in and out of range).
 *
 * Input layout (short inputs are padded with zeros):
 *   byte 0       mode: bits 0-1 SIMD level (0, 1 scalar, 2 AVX2, 3 AVX-512; never above
 *                q35_simd_active()), bit 2 logits as raw
 *                float32 (else int8 / 8 with -128 = -inf), bit 3 ids may leave the vocabulary
 *   bytes 1..7   temperature, top_p, min_p, presence, frequency, repetition, top_k: each a byte;
 *                values with the top bit set are read as raw float32 from the stream instead
 *                of picked from a table of edge values
 *   then         n_vocab (1..512), n_top (-1..20), n_history, n_prompt, seed, draw index,
 *                history ids, logits
 * Properties: q35_sampling_validate agrees with the ranges written out here (docs/SAMPLING.md);
 * q35_sample (fast path, at the chosen SIMD level) and q35_sample_ref agree on the return code
 * and bit for bit on the result; a sampled token is in range and never has a -inf logit; each
 * row of q35_sample_batch equals the single-row call; valid input is refused only when the
 * penalties overflow a logit or leave every logit at -inf.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"

#define VMAX 512

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "sampler_fuzz: property failed: %s\n", what);
    abort();
  }
}

typedef struct rd {
  const uint8_t *p;
  size_t n, i;
} rd;

static uint8_t u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static uint32_t u32(rd *r) {
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) v |= (uint32_t)u8(r) << (8 * k);
  return v;
}
static float f32(rd *r) {
  uint32_t u = u32(r);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static const float edge[16] = {0.0f, 1.0f, 0.5f, -1.0f, NAN, INFINITY, -INFINITY, 2.0f,
                               1e-30f, 0.999f, 1.0001f, 1e30f, 0.1f, 1e-7f, -0.0f, 1.5f};
static float param(rd *r, uint8_t b) { return (b & 0x80) ? f32(r) : edge[b & 15]; }

static int same_f(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void same_result(const q35_sample_result *a, const q35_sample_result *b, const char *what) {
  check(a->token == b->token, what);
  check(same_f(a->logprob, b->logprob) || (isnan(a->logprob) && isnan(b->logprob)), what);
  check(a->n_top == b->n_top, what);
  for (int i = 0; i < a->n_top; i++)
    check(a->top_ids[i] == b->top_ids[i] && same_f(a->top_logprobs[i], b->top_logprobs[i]), what);
}

static q35_sampler *ws;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ws) {
    q35_err e = {{0}};
    ws = q35_sampler_new(VMAX, &e);
    check(ws != NULL, "q35_sampler_new");
  }
  rd r = {data, size, 0};
  const uint8_t mode = u8(&r);
  uint8_t pb[7];
  for (int k = 0; k < 7; k++) pb[k] = u8(&r);
  q35_sampling p = q35_sampling_default();
  p.temperature = param(&r, pb[0]);
  p.top_p = param(&r, pb[1]);
  p.min_p = param(&r, pb[2]);
  p.presence_penalty = param(&r, pb[3]);
  p.frequency_penalty = param(&r, pb[4]);
  p.repetition_penalty = param(&r, pb[5]);
  static const int64_t ks[8] = {0, 1, 2, 40, -1, INT64_MAX, INT64_MIN, 100000};
  p.top_k = (pb[6] & 0x80) ? (int64_t)(int32_t)u32(&r) : ks[pb[6] & 7];
  const int32_t V = 1 + (int32_t)((u8(&r) | (u8(&r) << 8)) % VMAX);
  const int32_t n_top = (int32_t)(u8(&r) % 22) - 1;
  const int32_t n_hist = u8(&r) % 64;
  int32_t n_prompt = u8(&r) % 66;
  p.seed = (uint64_t)u32(&r) | ((uint64_t)u32(&r) << 32);
  p.draw_index = u32(&r);
  int32_t *hist = malloc(sizeof(int32_t) * (size_t)(n_hist ? n_hist : 1));
  int hist_ok = 1;
  for (int32_t i = 0; i < n_hist; i++) {
    uint32_t x = u8(&r) | (u8(&r) << 8);
    hist[i] = (mode & 8) ? (int32_t)x - 2 : (int32_t)(x % (uint32_t)V);
    if (hist[i] < 0 || hist[i] >= V) hist_ok = 0;
  }
  float *logits = malloc(sizeof(float) * (size_t)V);
  int any_finite = 0, bad_logit = 0;
  for (int32_t i = 0; i < V; i++) {
    float x;
    if (mode & 4) {
      x = f32(&r);
    } else {
      int8_t b = (int8_t)u8(&r);
      x = b == -128 ? -INFINITY : (float)b / 8.0f;
    }
    logits[i] = x;
    if (isnan(x) || x == INFINITY) bad_logit = 1;
    if (isfinite(x)) any_finite = 1;
  }
  /* the documented ranges */
  const int valid = isfinite(p.temperature) && p.temperature >= 0 && p.top_p > 0 && p.top_p <= 1 &&
                    p.min_p >= 0 && p.min_p <= 1 && p.presence_penalty >= -2 && p.presence_penalty <= 2 &&
                    p.frequency_penalty >= -2 && p.frequency_penalty <= 2 && isfinite(p.repetition_penalty) &&
                    p.repetition_penalty > 0;
  q35_err err = {{0}};
  const int vrc = q35_sampling_validate(&p, &err);
  check((vrc == 0) == valid, "q35_sampling_validate agrees with the documented ranges");
  if (vrc) check(err.msg[0] != 0, "validate error has a message");

  static const q35_simd levels[4] = {Q35_SIMD_SCALAR, Q35_SIMD_SCALAR, Q35_SIMD_AVX2, Q35_SIMD_AVX512};
  q35_sampler_set_simd(ws, levels[mode & 3]);
  q35_sample_result a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  q35_err ea = {{0}}, eb = {{0}};
  const int ra = q35_sample(ws, logits, V, &p, hist, n_hist, n_prompt, n_top, &a, &ea);
  const int rb = q35_sample_ref(ws, logits, V, &p, hist, n_hist, n_prompt, n_top, &b, &eb);
  check(ra == rb, "fast and reference agree on success");
  if (ra == 0) {
    check(valid && !bad_logit && any_finite && hist_ok, "success only on valid input");
    check(a.token >= 0 && a.token < V, "token in range");
    check(logits[a.token] != -INFINITY, "a -inf logit is never sampled");
    check(n_top < 0 ? isnan(a.logprob) : !isnan(a.logprob), "logprob present exactly when asked");
    check(a.n_top == (n_top > 0 ? (n_top < V ? n_top : V) : 0), "n_top = min(n_top, n_vocab)");
    same_result(&a, &b, "fast == reference bit for bit");
    /* batch of two rows: this one and the same logits with the next seed */
    float *l2 = malloc(sizeof(float) * 2 * (size_t)V);
    memcpy(l2, logits, sizeof(float) * (size_t)V);
    memcpy(l2 + V, logits, sizeof(float) * (size_t)V);
    q35_sampling p2[2] = {p, p};
    p2[1].seed++;
    q35_sample_history h2[2] = {{hist, n_hist, n_prompt}, {NULL, 0, 0}};
    q35_sample_result o2[2];
    q35_err e2 = {{0}};
    int rc2 = q35_sample_batch(ws, l2, 2, V, p2, h2, n_top, o2, &e2);
    if (rc2 == 0) {
      same_result(&o2[0], &a, "batch row 0 == single call");
      q35_sample_result c;
      check(q35_sample(ws, logits, V, &p2[1], NULL, 0, 0, n_top, &c, &e2) == 0, "row 1 alone samples");
      same_result(&o2[1], &c, "batch row 1 == single call");
    }
    free(l2);
  } else {
    check(ea.msg[0] != 0 && eb.msg[0] != 0, "sampling error has a message");
    /* penalties may push a huge finite logit to +-inf: refused as an overflow, by design; and
     * when they push every finite logit to -inf the row is all -inf, an error by the contract
     * (docs/SAMPLING.md). The penalized logits are recomputed here from the documented formula. */
    int all_ninf = 0;
    if (valid && !bad_logit && any_finite && hist_ok && n_prompt <= n_hist) {
      float *pl = malloc(sizeof(float) * (size_t)V);
      int32_t *cnt = calloc((size_t)V, sizeof(int32_t));
      unsigned char *seen = calloc((size_t)V, 1);
      memcpy(pl, logits, sizeof(float) * (size_t)V);
      for (int32_t i = 0; i < n_hist; i++) seen[hist[i]] = 1;
      for (int32_t i = n_prompt; i < n_hist; i++) cnt[hist[i]]++;
      all_ninf = 1;
      for (int32_t t = 0; t < V; t++) {
        if (seen[t] && p.repetition_penalty != 1.0f)
          pl[t] = pl[t] > 0.0f ? pl[t] / p.repetition_penalty : pl[t] * p.repetition_penalty;
        if (cnt[t]) pl[t] = pl[t] - (p.presence_penalty + p.frequency_penalty * (float)cnt[t]);
        if (pl[t] != -INFINITY) all_ninf = 0;
      }
      free(pl);
      free(cnt);
      free(seen);
    }
    if (valid && !bad_logit && any_finite && hist_ok && n_prompt <= n_hist && !strstr(ea.msg, "overflow") &&
        !(all_ninf && strstr(ea.msg, "-inf")))
      fprintf(stderr, "sampler_fuzz: refused (V=%d n_hist=%d n_prompt=%d temp=%g top_p=%g min_p=%g rep=%g): %s\n",
              V, n_hist, n_prompt, p.temperature, p.top_p, p.min_p, p.repetition_penalty, ea.msg),
          check(0, "valid input refused");
  }
  free(logits);
  free(hist);
  return 0;
}
