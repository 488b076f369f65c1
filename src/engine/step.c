/*
 * step.c - the model step with the sampling head inside it (q35_context_step), and evaluation
 * with logits (q35_context_eval).
 *
 * A step checks every row, sizes the context's buffers, runs one forward pass that writes the
 * logits of the sampled positions only (a row with Q35_OUTPUTS_NONE asks for none) into the
 * context's buffer, and samples each of those positions with its row's parameters (sampler.h).
 * The caller never sees the logits: a step goes from tokens to tokens. Positions are sampled on
 * the context's threads (position i by thread i % nth, each with its own workspace); a result
 * depends only on its own logits, parameters and history, so which thread samples it never
 * changes it.
 *
 * Constrained rows (q35_row.constraint): each such row's masks are made while the forward pass
 * runs when a CPU is free (one extra thread), else after it on the pool's threads (one row's
 * positions on one thread, since a constraint is a state of its own), and applied to its
 * logits before sampling; position j of a
 * multi-position row is masked by the state after the row's drafted tokens up to p_j, which
 * are accepted for the mask and rolled back. After sampling, each constraint advances by the
 * samples a verifier accepts (all of a one-position row's one sample). The masks depend only on
 * the row's own tokens, so a row's samples still depend on nothing else.
 *
 * A step is q35_context_step_begin (checks, buffers, the mask thread, the forward pass) then
 * q35_context_step_end (masks, sampling, results). On a pipeline's first stage the forward pass
 * hands the later stages their part without waiting (q35_stage_next.flight), so one thread may
 * begin steps on other contexts before ending this one: steps in flight (docs/DESIGN.md).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "constrain/constrain.h"
#include "engine/context.h"
#include "model/mtp.h"

/* The positions a row samples, as n_outputs encodes them (0: one; Q35_OUTPUTS_NONE: none). */
static int32_t n_outputs(const q35_row *row) {
  return row->n_outputs == Q35_OUTPUTS_NONE ? 0 : row->n_outputs == 0 ? 1 : row->n_outputs;
}

/* Positions row r samples (0 .. n_tokens), after checking its fields. */
static int check_row(const q35_row *row, int32_t r, int32_t n_vocab, int32_t *n_out, q35_err *err) {
  if (!row->session || !row->tokens || row->n_tokens < 1)
    return q35_seterr(err, "row %d: a session and at least one token are required", r);
  const int32_t m = n_outputs(row);
  if (m < 0 || m > row->n_tokens)
    return q35_seterr(err, "row %d: n_outputs %d is out of range [1, n_tokens = %d] (0: one, %d: none)", r,
                      row->n_outputs, row->n_tokens, Q35_OUTPUTS_NONE);
  *n_out = m;
  if (m == 0) return 0;
  if (m > 1 && !row->outputs) return q35_seterr(err, "row %d: n_outputs %d needs an outputs array", r, m);
  if (m > 1 && (row->n_history < 0 || (row->n_history > 0 && !row->history)))
    return q35_seterr(err, "row %d: bad history (n_history %d)", r, row->n_history);
  if (!row->sampling) return q35_seterr(err, "row %d: sampling parameters are required", r);
  if (row->n_top_logprobs > Q35_MAX_TOP_LOGPROBS)
    return q35_seterr(err, "row %d: top logprobs %d is out of range [0, %d]", r, row->n_top_logprobs,
                      Q35_MAX_TOP_LOGPROBS);
  q35_err e2;
  if (q35_sampling_validate(row->sampling, &e2) || q35_sampling_check_vocab(row->sampling, n_vocab, &e2))
    return q35_seterr(err, "row %d: %s", r, e2.msg);
  if (row->constraint && q35_constraint_n_vocab(row->constraint) != n_vocab)
    return q35_seterr(err, "row %d: the constraint's vocabulary has %d tokens, the model %d", r,
                      q35_constraint_n_vocab(row->constraint), n_vocab);
  return 0;
}

int q35_step_check(q35_context *c, const q35_row *rows, int32_t n_rows, q35_err *err) {
  const q35_model *m = c->model;
  if (n_rows < 1 || !rows) return q35_seterr(err, "a step needs at least one row");
  for (int32_t r = 0; r < n_rows; r++) {
    const q35_row *row = &rows[r];
    int32_t n_out;
    if (check_row(row, r, m->hp.n_vocab, &n_out, err)) return -1;
    const q35_session *s = row->session;
    if (s->model != m) return q35_seterr(err, "row %d: the session belongs to another model", r);
    for (int32_t q = 0; q < r; q++)
      if (rows[q].session == s) return q35_seterr(err, "rows %d and %d name the same session", q, r);
    if ((int64_t)s->pos + row->n_tokens > s->params.n_ctx)
      return q35_seterr(err, "%d tokens at position %d exceed the context limit of %d tokens (the session's n_ctx)",
                        row->n_tokens, s->pos, s->params.n_ctx);
    for (int32_t i = 0; i < row->n_tokens; i++)
      if (row->tokens[i] < 0 || row->tokens[i] >= m->hp.n_vocab)
        return q35_seterr(err, "token id %d is out of range [0, %d)", row->tokens[i], m->hp.n_vocab);
  }
  return 0;
}

/* The penalty history of a row sampled at m > 1 positions: history, then the m - 1 tokens the
 * row consumes after its first sampled position (position j reads the first n_history + j). */
static size_t hist_len(const q35_row *row, int32_t m) { return m > 1 ? (size_t)row->n_history + (size_t)(m - 1) : 0; }

static void hist_fill(int32_t *dst, const q35_row *row, int32_t m) {
  if (row->n_history > 0) memcpy(dst, row->history, (size_t)row->n_history * sizeof *dst);
  memcpy(dst + row->n_history, row->tokens + row->n_tokens - m + 1, (size_t)(m - 1) * sizeof *dst);
}

/* Buffers for the step (before anything runs, so running out of memory moves no session), the
 * forward rows, and which row each sampled position belongs to. Returns the sampled positions. */
static int32_t step_prepare(q35_context *c, const q35_row *rows, int32_t n_rows, q35_err *err) {
  int32_t n_out = 0;
  size_t n_hist = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    int32_t m = 0;
    if (check_row(&rows[r], r, c->model->hp.n_vocab, &m, err)) return -1;
    n_out += m;
    n_hist += hist_len(&rows[r], m);
  }
  const int nth = n_out < q35_pool_size(q35_context_ws(c)->pool) ? n_out : q35_pool_size(q35_context_ws(c)->pool);
  if (q35_context_reserve(c, n_rows, n_out, err) || q35_context_reserve_samplers(c, nth, err) ||
      q35_context_reserve_hist(c, n_hist, err))
    return -1;
  const size_t V = (size_t)c->model->hp.n_vocab;
  int32_t at = 0;
  size_t hat = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    const q35_row *row = &rows[r];
    const int32_t m = n_outputs(row);
    c->fwd_rows[r] = (q35_fwd_row){row->session, row->tokens, row->n_tokens, m, c->logits + (size_t)at * V,
                                   m ? row->hidden : NULL, NULL, NULL};
    c->out_at[r] = at;
    for (int32_t j = 0; j < m; j++) c->item_row[at + j] = r;
    at += m;
    c->hist_at[r] = hat;
    if (m > 1) hist_fill(c->hist + hat, row, m);
    hat += hist_len(row, m);
  }
  return n_out;
}

typedef struct {
  q35_context *c;
  const q35_row *rows;
  int32_t n_out;
} sample_task;

static void sample_run(void *vctx, int ith, int nth) {
  const sample_task *t = vctx;
  q35_context *c = t->c;
  const int V = c->model->hp.n_vocab;
  for (int32_t i = ith; i < t->n_out; i += nth) {
    const int32_t r = c->item_row[i], j = i - c->out_at[r];
    const q35_row *row = &t->rows[r];
    const int multi = row->n_outputs > 1;
    q35_sampling sp = *row->sampling;
    sp.draw_index += (uint64_t)j;
    q35_step_out *o = &c->out[i];
    const int32_t *hist = multi ? c->hist + c->hist_at[r] : row->history;
    const int32_t n_hist = multi ? row->n_history + j : row->n_history;
    o->rc = q35_sample(c->samplers[ith], c->logits + (size_t)i * V, V, &sp, hist, n_hist, row->n_prompt,
                       row->n_top_logprobs, &o->res, &o->err);
  }
}

/* ---- constraints ---- */

typedef struct {
  q35_context *c;
  const q35_row *rows;
  int32_t n_rows;
  int store;    /* masks into c->masks (made while the forward pass runs), not onto the logits */
  size_t words; /* one mask's words */
  atomic_int failed;
  q35_err err;
} mask_task;

static void mask_fail(mask_task *t, const char *fmt, int32_t r, const char *msg) {
  int expect = 0;
  if (atomic_compare_exchange_strong(&t->failed, &expect, 1)) q35_seterr(&t->err, fmt, r, msg);
}

/* Row r's masks onto its logits (or, with t->store, into the context's mask buffer at the row's
 * first sampled position): position j after accepting the drafts tokens[p_0 + 1 .. p_j]. */
static void mask_row(mask_task *t, int32_t r) {
  const q35_row *row = &t->rows[r];
  q35_context *c = t->c;
  const int32_t m = c->fwd_rows[r].n_out, V = c->model->hp.n_vocab, p0 = row->n_tokens - m;
  int32_t drafted = 0, j = 0;
  for (; j < m; j++) {
    q35_err e;
    if (j > 0) { /* positions after a refused draft, or after an end of generation, are past what a verifier
                    emits: unmasked */
      if (q35_constraint_is_finished(row->constraint) ||
          q35_constraint_accept(row->constraint, row->tokens[p0 + j], &e))
        break;
      drafted++;
      if (q35_constraint_is_finished(row->constraint)) break;
    }
    const uint32_t *mask = q35_constraint_mask_ref(row->constraint);
    if (!mask) {
      mask_fail(t, "row %d: %s", r, "constraint: out of memory computing a mask");
      break;
    }
    if (t->store) {
      memcpy(c->masks + (size_t)(c->out_at[r] + j) * t->words, mask, t->words * sizeof *mask);
      continue;
    }
    if (q35_logits_apply_mask(c->logits + (size_t)(c->out_at[r] + j) * (size_t)V, V, mask) == 0) {
      mask_fail(t, "row %d: %s", r, "the constraint allows no token here (its language has no continuation in this vocabulary)");
      break;
    }
  }
  if (t->store) /* the unmasked positions: a mask allowing every token */
    for (; j < m; j++) memset(c->masks + (size_t)(c->out_at[r] + j) * t->words, 0xff, t->words * sizeof *c->masks);
  q35_err e;
  if (drafted) q35_constraint_rollback(row->constraint, drafted, &e);
}

static void mask_run(void *vctx, int ith, int nth) {
  mask_task *t = vctx;
  int32_t k = 0;
  for (int32_t r = 0; r < t->n_rows; r++) {
    if (!t->rows[r].constraint || t->c->fwd_rows[r].n_out == 0) continue;
    if (k++ % nth == ith) mask_row(t, r);
  }
}

static int apply_masks(q35_context *c, const q35_row *rows, int32_t n_rows, q35_err *err) {
  int32_t n = 0;
  for (int32_t r = 0; r < n_rows; r++) n += rows[r].constraint && c->fwd_rows[r].n_out > 0;
  if (!n) return 0;
  mask_task t = {.c = c, .rows = rows, .n_rows = n_rows};
  atomic_init(&t.failed, 0);
  if (n > 1 && q35_pool_size(q35_context_ws(c)->pool) > 1) q35_pool_run(q35_context_ws(c)->pool, mask_run, &t);
  else mask_run(&t, 0, 1);
  if (atomic_load(&t.failed)) {
    *err = t.err;
    return -1;
  }
  return 0;
}

/* ---- masks made while the forward pass runs ----
 * A constrained position's mask depends only on its row's constraint state and drafts, both
 * known before the forward pass, so when the pool leaves a CPU free (pool threads < usable
 * CPUs) one extra thread makes every mask of the step into c->masks while the pool runs the
 * forward pass; after it, the stored masks are applied. Otherwise (every CPU busy with the
 * forward pass) the masks are made after it on the pool's threads (apply_masks). The masks are
 * the same either way, so the samples are too. */

static void *mask_thread(void *vt) {
  mask_task *t = vt;
  mask_run(t, 0, 1);
  return NULL;
}

/* Start the mask thread if the step has constrained positions and a CPU is free: 1 started,
 * 0 not (the masks are made after the forward pass), -1 on error. */
static int masks_start(q35_context *c, const q35_row *rows, int32_t n_rows, int32_t n_out, mask_task *t,
                       pthread_t *th, q35_err *err) {
  int32_t n = 0;
  for (int32_t r = 0; r < n_rows; r++) n += rows[r].constraint && c->fwd_rows[r].n_out > 0;
  if (!n || q35_pool_size(q35_context_ws(c)->pool) >= c->n_cpus) return 0;
  const size_t words = ((size_t)c->model->hp.n_vocab + 31) / 32;
  if (q35_grow((void **)&c->masks, &c->masks_cap, (size_t)n_out * words, sizeof *c->masks))
    return q35_seterr(err, "out of memory for the step's token masks");
  *t = (mask_task){.c = c, .rows = rows, .n_rows = n_rows, .store = 1, .words = words};
  atomic_init(&t->failed, 0);
  return pthread_create(th, NULL, mask_thread, t) == 0; /* no thread: the masks come after the pass */
}

/* Join the mask thread and apply the stored masks to the logits. */
static int masks_finish(q35_context *c, const q35_row *rows, int32_t n_rows, mask_task *t, pthread_t th, q35_err *err) {
  pthread_join(th, NULL);
  if (atomic_load(&t->failed)) {
    *err = t->err;
    return -1;
  }
  const int32_t V = c->model->hp.n_vocab;
  for (int32_t r = 0; r < n_rows; r++) {
    if (!rows[r].constraint) continue;
    for (int32_t j = 0; j < c->fwd_rows[r].n_out; j++) {
      const size_t i = (size_t)(c->out_at[r] + j);
      if (q35_logits_apply_mask(c->logits + i * (size_t)V, V, c->masks + i * t->words) == 0)
        return q35_seterr(err, "row %d: the constraint allows no token here (its language has no continuation in this "
                               "vocabulary)", r);
    }
  }
  return 0;
}

/* Advance each constraint by the samples a verifier accepts: the first, then each next one
 * while the previous sample equals the row's draft at that position, up to an end of generation
 * (nothing follows it in the language). */
static int advance_constraints(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  for (int32_t r = 0; r < n_rows; r++) {
    q35_row *row = &rows[r];
    const int32_t m = c->fwd_rows[r].n_out, p0 = row->n_tokens - m;
    if (!row->constraint || m == 0) continue;
    for (int32_t j = 0; j < m; j++) {
      const int32_t tok = c->out[c->out_at[r] + j].res.token;
      q35_err e;
      if (j > 0 && q35_constraint_is_finished(row->constraint)) break;
      if (q35_constraint_accept(row->constraint, tok, &e)) return q35_seterr(err, "row %d: %s", r, e.msg);
      if (j + 1 < m && tok != row->tokens[p0 + j + 1]) break;
    }
  }
  return 0;
}

static void put_result(const q35_sample_result *res, int32_t *token, float *logprob, int32_t *top_ids,
                       float *top_logprobs) {
  *token = res->token;
  *logprob = res->logprob;
  for (int i = 0; i < res->n_top && i < Q35_MAX_TOP_LOGPROBS; i++) {
    top_ids[i] = res->top_ids[i];
    top_logprobs[i] = res->top_logprobs[i];
  }
}

/* The sampled positions' results into their rows. */
static int step_results(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  for (int32_t r = 0; r < n_rows; r++) {
    q35_row *row = &rows[r];
    const int32_t m = c->fwd_rows[r].n_out;
    if (m == 0) {
      row->token = -1;
      row->logprob = NAN;
      continue;
    }
    const q35_step_out *o = &c->out[c->out_at[r]];
    for (int32_t j = 0; j < m; j++) {
      if (o[j].rc) {
        if (m == 1) return q35_seterr(err, "row %d: %s", r, o[j].err.msg);
        return q35_seterr(err, "row %d, output %d: %s", r, j, o[j].err.msg);
      }
      if (row->outputs) {
        q35_output *d = &row->outputs[j];
        put_result(&o[j].res, &d->token, &d->logprob, d->top_ids, d->top_logprobs);
      }
    }
    put_result(&o[m - 1].res, &row->token, &row->logprob, row->top_ids, row->top_logprobs);
  }
  return 0;
}

/* A step between q35_context_step_begin and _end. */
struct q35_flight {
  int open;
  q35_row *rows;
  int32_t n_rows, n_out;
  int remote;  /* the last stage samples (no constraints) */
  int overlap; /* the mask thread runs */
  mask_task mt;
  pthread_t mth;
};

static int step_begin(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  if (c->flight && c->flight->open)
    return q35_seterr(err, "this context has a step in flight (q35_context_step_end it first)");
  if (n_rows < 1 || !rows) return q35_seterr(err, "a step needs at least one row");
  if (!c->flight && !(c->flight = calloc(1, sizeof *c->flight))) return q35_seterr(err, "out of memory");
  struct q35_flight *fl = c->flight;
  const int32_t n_out = step_prepare(c, rows, n_rows, err);
  if (n_out < 0) return -1;
  /* a pipeline's first stage: the last stage samples (without constraints, whose masks live here)
   * and returns the results instead of logits */
  q35_stage_next *nx = c->model->next;
  int remote = 0;
  if (nx) {
    int constrained = 0;
    for (int32_t r = 0; r < n_rows; r++) constrained |= rows[r].constraint != NULL;
    remote = !constrained && nx->sample_next(nx, rows, n_rows, c->out) == 0;
  }
  const int overlap = remote ? 0 : masks_start(c, rows, n_rows, n_out, &fl->mt, &fl->mth, err);
  if (overlap < 0) return -1;
  /* the later stages' results come back at q35_context_step_end */
  if (nx) nx->flight(nx, Q35_STAGE_FLIGHT_OPEN, c, NULL);
  const int frc = q35_forward(c->model, q35_context_ws(c), c->fwd_rows, n_rows, err);
  if (nx) {
    nx->flight(nx, Q35_STAGE_FLIGHT_CLOSE, c, NULL);
    q35_err e2;
    if (frc) nx->flight(nx, Q35_STAGE_FLIGHT_WAIT, c, &e2); /* whatever went down the chain comes back */
  }
  if (frc && remote) nx->sample_next(nx, NULL, 0, NULL);
  if (frc && overlap) pthread_join(fl->mth, NULL);
  if (frc) return -1;
  fl->open = 1; /* (fl->mt belongs to the mask thread until end joins it) */
  fl->rows = rows;
  fl->n_rows = n_rows;
  fl->n_out = n_out;
  fl->remote = remote;
  fl->overlap = overlap;
  return 0;
}

/* Steps in flight take no drafts: a draft step verifies and rolls back within one call. */
int q35_context_step_begin(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  if (n_rows < 1 || !rows) return q35_seterr(err, "a step needs at least one row");
  for (int32_t r = 0; r < n_rows; r++) {
    if (rows[r].n_draft || (rows[r].session && rows[r].session->mtp))
      return q35_seterr(err, "row %d: a step in flight (q35_context_step_begin) takes no rows with drafts or on "
                             "sessions with draft_max (q35_context_step does)", r);
    rows[r].n_emitted = rows[r].n_drafted = 0;
  }
  return step_begin(c, rows, n_rows, err);
}

int q35_step_core(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  if (step_begin(c, rows, n_rows, err)) return -1;
  return q35_context_step_end(c, err);
}

int q35_context_step_end(q35_context *c, q35_err *err) {
  struct q35_flight *fl = c->flight;
  if (!fl || !fl->open) return q35_seterr(err, "no step in flight on this context (q35_context_step_begin)");
  fl->open = 0;
  q35_row *rows = fl->rows;
  const int32_t n_rows = fl->n_rows, n_out = fl->n_out;
  const int remote = fl->remote;
  q35_stage_next *nx = c->model->next;
  const int frc = nx ? nx->flight(nx, Q35_STAGE_FLIGHT_WAIT, c, err) : 0;
  const double t0 = q35_now();
  if (fl->overlap) {
    q35_err merr;
    const int mrc = masks_finish(c, rows, n_rows, &fl->mt, fl->mth, &merr);
    if (frc) return -1;
    if (mrc) {
      *err = merr;
      return -1;
    }
  } else if (frc || (!remote && apply_masks(c, rows, n_rows, err))) {
    return -1;
  }
  const int nth = n_out < q35_pool_size(q35_context_ws(c)->pool) ? n_out : q35_pool_size(q35_context_ws(c)->pool);
  sample_task st = {c, rows, n_out};
  if (!remote && nth > 1) q35_pool_run(q35_context_ws(c)->pool, sample_run, &st);
  else if (!remote && nth == 1) sample_run(&st, 0, 1);
  int rc = step_results(c, rows, n_rows, err);
  if (rc == 0) rc = advance_constraints(c, rows, n_rows, err);
  c->t_sample += q35_now() - t0;
  return rc;
}

int q35_context_step(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  if (n_rows < 1 || !rows) return q35_seterr(err, "a step needs at least one row");
  for (int32_t r = 0; r < n_rows; r++)
    if (rows[r].session && rows[r].session->mtp) return q35_draft_step(c, rows, n_rows, err); /* draft.c */
  for (int32_t r = 0; r < n_rows; r++) {
    if (rows[r].n_draft) return q35_seterr(err, "row %d: n_draft %d needs a session made with draft_max >= %d", r,
                                           rows[r].n_draft, rows[r].n_draft);
    rows[r].n_emitted = rows[r].n_drafted = 0;
  }
  return q35_step_core(c, rows, n_rows, err);
}

int32_t q35_model_stages(const q35_model *m) { return m->next ? m->next->n_stages : 1; }

int q35_step(q35_model *m, q35_row *rows, int32_t n_rows, q35_err *err) {
  return q35_context_step(m->ctx, rows, n_rows, err);
}

/* ---- evaluation with logits ---- */

int q35_context_eval(q35_context *c, q35_session *s, const int32_t *tokens, int32_t n, int32_t chunk, float *logits,
                     int all, q35_err *err) {
  if (n < 1) return q35_seterr(err, "no tokens to evaluate");
  if (chunk <= 0 || chunk > n) chunk = n;
  const int V = s->model->hp.n_vocab;
  /* validate everything before the first chunk runs, so a refused call leaves the session as it was */
  if ((int64_t)s->pos + n > s->params.n_ctx)
    return q35_seterr(err, "%d tokens at position %d exceed the context limit of %d tokens (the session's n_ctx)",
                      n, s->pos, s->params.n_ctx);
  for (int32_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V) return q35_seterr(err, "token id %d is out of range [0, %d)", tokens[i], V);
  for (int32_t i = 0; i < n; i += chunk) {
    const int32_t len = n - i < chunk ? n - i : chunk;
    q35_fwd_row r = {s, tokens + i, len, 0, NULL, NULL, NULL, NULL};
    if (logits && all) {
      r.n_out = len;
      r.logits = logits + (size_t)i * V;
    } else if (logits && i + len == n) {
      r.n_out = 1;
      r.logits = logits;
    }
    if (s->mtp ? q35_draft_eval(c, &r, err) : q35_forward(c->model, q35_context_ws(c), &r, 1, err)) return -1;
  }
  return 0;
}

int q35_session_eval(q35_session *s, const int32_t *tokens, int32_t n, int32_t chunk, float *logits, int all,
                     q35_err *err) {
  return q35_context_eval(s->model->ctx, s, tokens, n, chunk, logits, all, err);
}
