/*
 * step.c - q35_step: the model step with the sampling head inside it.
 *
 * The forward pass writes each row's last-position logits into a buffer the model keeps;
 * each row is then sampled with its own parameters (sampler.h). The caller never sees the
 * logits: a step goes from tokens to tokens. Rows are sampled on the model's threads (row r by
 * thread r % nth, each with its own workspace); a row's result depends only on its own logits
 * and parameters, so which thread samples it never changes it.
 */
#include <math.h>
#include <stdlib.h>

#include "model/model.h"
#include "sample/sampler.h"
#include "base/util.h"

struct q35_step_out {
  q35_sample_result res;
  int rc;
  q35_err err;
};

void q35_model_free_step(q35_model *m) {
  for (int i = 0; i < m->n_samplers; i++) q35_sampler_free(m->samplers[i]);
  free(m->samplers);
  m->samplers = NULL;
  m->n_samplers = 0;
  free(m->step_logits);
  free(m->step_rows);
  free(m->step_out);
  m->step_logits = NULL;
  m->step_rows = NULL;
  m->step_out = NULL;
  m->step_cap = 0;
}

typedef struct {
  q35_model *m;
  const q35_row *rows;
  int32_t n_rows;
  const float *logits;
} sample_task;

static void sample_run(void *ctx, int ith, int nth) {
  const sample_task *t = ctx;
  q35_model *m = t->m;
  const int V = m->hp.n_vocab;
  for (int32_t r = ith; r < t->n_rows; r += nth) {
    const q35_row *row = &t->rows[r];
    struct q35_step_out *o = &m->step_out[r];
    o->rc = q35_sample(m->samplers[ith], t->logits + (size_t)r * V, V, row->sampling, row->history, row->n_history,
                       row->n_prompt, row->n_top_logprobs, &o->res, &o->err);
  }
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
  /* as many threads as rows, at most the pool's */
  const int nth = n_rows < q35_pool_size(m->pool) ? n_rows : q35_pool_size(m->pool);
  if (m->n_samplers < nth) {
    struct q35_sampler **ss = realloc(m->samplers, (size_t)nth * sizeof *ss);
    if (!ss) return q35_seterr(err, "out of memory (sampling workspaces)");
    m->samplers = ss;
    while (m->n_samplers < nth) {
      ss[m->n_samplers] = q35_sampler_new(V, err);
      if (!ss[m->n_samplers]) return -1;
      m->n_samplers++;
    }
  }
  if (n_rows > m->step_cap) { /* grown rarely; the per-token path allocates nothing */
    free(m->step_logits);
    free(m->step_rows);
    free(m->step_out);
    m->step_logits = q35_alloc64((size_t)n_rows * V * sizeof(float), 0);
    m->step_rows = malloc((size_t)n_rows * sizeof *m->step_rows);
    m->step_out = malloc((size_t)n_rows * sizeof *m->step_out);
    m->step_cap = n_rows;
    if (!m->step_logits || !m->step_rows || !m->step_out) {
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
  if (rc == 0) {
    sample_task st = {m, rows, n_rows, logits};
    if (nth > 1) q35_pool_run(m->pool, sample_run, &st);
    else sample_run(&st, 0, 1);
  }
  for (int32_t r = 0; rc == 0 && r < n_rows; r++) {
    const struct q35_step_out *o = &m->step_out[r];
    if (o->rc) {
      rc = q35_seterr(err, "row %d: %s", r, o->err.msg);
      break;
    }
    rows[r].token = o->res.token;
    rows[r].logprob = o->res.logprob;
    for (int i = 0; i < o->res.n_top && i < Q35_MAX_TOP_LOGPROBS; i++) {
      rows[r].top_ids[i] = o->res.top_ids[i];
      rows[r].top_logprobs[i] = o->res.top_logprobs[i];
    }
  }
  m->t_sample += q35_now() - t0;
  return rc;
}

double q35_model_sample_seconds(const q35_model *m) { return m->t_sample; }
