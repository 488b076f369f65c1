/*
 * step.c - q35_step: the model step with the sampling head inside it.
 *
 * The forward pass writes each row's last-position logits into a buffer the model keeps;
 * each row is then sampled with its own parameters (sampler.h). The caller never sees the
 * logits: a step goes from tokens to tokens.
 */
#include <math.h>
#include <stdlib.h>

#include "model.h"
#include "sampler.h"
#include "util.h"

void q35_model_free_step(q35_model *m) {
  if (m->sampler) q35_sampler_free(m->sampler);
  m->sampler = NULL;
  free(m->step_logits);
  free(m->step_rows);
  m->step_logits = NULL;
  m->step_rows = NULL;
  m->step_cap = 0;
}

int q35_step(q35_model *m, q35_row *rows, int32_t n_rows, q35_err *err) {
  if (n_rows < 1 || !rows) return q35_seterr(err, "a step needs at least one row");
  const int V = m->hp.n_vocab;
  for (int32_t r = 0; r < n_rows; r++) {
    if (!rows[r].session || !rows[r].tokens || rows[r].n_tokens < 1)
      return q35_seterr(err, "row %d: a session and at least one token are required", r);
    if (!rows[r].sampling) return q35_seterr(err, "row %d: sampling parameters are required", r);
    if (rows[r].n_top_logprobs > Q35_MAX_TOP_LOGPROBS)
      return q35_seterr(err, "row %d: top logprobs %d is out of range [0, %d]", r, rows[r].n_top_logprobs,
                        Q35_MAX_TOP_LOGPROBS);
    q35_err e2;
    if (q35_sampling_validate(rows[r].sampling, &e2)) return q35_seterr(err, "row %d: %s", r, e2.msg);
  }
  if (!m->sampler) {
    m->sampler = q35_sampler_new(V, err);
    if (!m->sampler) return -1;
  }
  if (n_rows > m->step_cap) { /* grown rarely; the per-token path allocates nothing */
    free(m->step_logits);
    free(m->step_rows);
    m->step_logits = q35_alloc64((size_t)n_rows * V * sizeof(float), 0);
    m->step_rows = malloc((size_t)n_rows * sizeof *m->step_rows);
    m->step_cap = n_rows;
    if (!m->step_logits || !m->step_rows) {
      q35_model_free_step(m);
      return q35_seterr(err, "out of memory (logits of %d rows)", n_rows);
    }
  }
  float *logits = m->step_logits;
  q35_fwd_row *fr = m->step_rows;
  for (int32_t r = 0; r < n_rows; r++)
    fr[r] = (q35_fwd_row){rows[r].session, rows[r].tokens, rows[r].n_tokens, 1, logits + (size_t)r * V};
  int rc = q35_forward(m, fr, n_rows, err);
  const double t0 = q35_now();
  for (int32_t r = 0; rc == 0 && r < n_rows; r++) {
    q35_sample_result res;
    q35_err e2;
    if (q35_sample(m->sampler, logits + (size_t)r * V, V, rows[r].sampling, rows[r].history, rows[r].n_history,
                   rows[r].n_prompt, rows[r].n_top_logprobs, &res, &e2)) {
      rc = q35_seterr(err, "row %d: %s", r, e2.msg);
      break;
    }
    rows[r].token = res.token;
    rows[r].logprob = res.logprob;
    for (int i = 0; i < res.n_top && i < Q35_MAX_TOP_LOGPROBS; i++) {
      rows[r].top_ids[i] = res.top_ids[i];
      rows[r].top_logprobs[i] = res.top_logprobs[i];
    }
  }
  m->t_sample += q35_now() - t0;
  return rc;
}

double q35_model_sample_seconds(const q35_model *m) { return m->t_sample; }
