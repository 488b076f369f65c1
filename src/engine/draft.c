/*
 * draft.c - speculative decoding inside the step (q35.h "Speculative decoding", docs/DESIGN.md).
 *
 * A step with rows on sessions that keep the MTP head's state (q35_session_params.draft_max)
 * runs in three parts around the ordinary step (q35_step_core):
 *   1. drafts: for each one-token row with n_draft > 0, the head runs over the session's pending
 *      pairs (hidden state of a position, the token after it; the last pair's token is the row's
 *      token), then chains on its own state; draft j is sampled with the row's parameters and the
 *      draw index the trunk uses at that position (coupled draws). The rows of a pass share it
 *      (one read of the head's weights).
 *   2. the step proper: such a row feeds [token, drafts] with a sample at every position; every
 *      row on a session with drafts also keeps the hidden state of each position it feeds
 *      (q35_session.hidden_all), and the DeltaNet state is checkpointed after each token of a
 *      drafting row (checkpoint.c).
 *   3. acceptance: k = the longest prefix of drafts equal to the trunk's samples; the row emits
 *      the k drafts and the trunk's sample after them; the session rolls back to the position
 *      after the k-th draft (its KV caches need nothing: entries past the position are never
 *      read). The hidden states of the kept positions become the session's pending pairs; rows
 *      that fed tokens without drafting append theirs and run them through the head once
 *      Q35_MTP_PEND_FLUSH have gathered (prompt chunks at once), all such rows in one pass.
 * Exactness does not depend on any of this: every emitted token is the trunk's own sample at its
 * position, from the logits, history and draw index a one-token-per-step decoder has there.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/util.h"
#include "constrain/constrain.h"
#include "engine/context.h"
#include "model/mtp.h"

void q35_context_draft_adapt(q35_context *c, int on) { c->draft_fixed = !on; }
void q35_context_draft_rows(q35_context *c, int32_t rows) { c->draft_rows = rows > 0 ? rows : 0; }
int q35_model_has_mtp(const q35_model *m) { return m->has_mtp; }

void q35_draft_bufs_free(q35_draft_bufs *b) {
  free(b->vrows);
  free(b->nd);
  free(b->pos0);
  free(b->mpos0);
  free(b->np0);
  free(b->at);
  free(b->hat);
  free(b->toks);
  free(b->hid);
  free(b->hrow);
  free(b->ptok);
  free(b->lg);
  free(b->g);
  free(b->hist);
  free(b->mrows);
  free(b->acc);
  free(b->dmax);
  free(b->cand);
  free(b->drafted_con);
  memset(b, 0, sizeof *b);
}

/* Buffers for n rows with `positions` pair tokens in all (0, or -1 with err). */
static int bufs_reserve(q35_context *c, int32_t n, size_t positions, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  const size_t H = (size_t)c->model->hp.n_embd;
  if (n > b->rows_cap) {
    free(b->vrows), free(b->nd), free(b->pos0), free(b->mpos0), free(b->np0), free(b->at), free(b->hat), free(b->toks);
    free(b->mrows), free(b->acc), free(b->dmax), free(b->cand), free(b->g), free(b->drafted_con), free(b->hrow);
    b->vrows = malloc((size_t)n * sizeof *b->vrows);
    b->nd = malloc((size_t)n * sizeof *b->nd);
    b->pos0 = malloc((size_t)n * sizeof *b->pos0);
    b->mpos0 = malloc((size_t)n * sizeof *b->mpos0);
    b->np0 = malloc((size_t)n * sizeof *b->np0);
    b->at = malloc((size_t)n * sizeof *b->at);
    b->hat = malloc((size_t)n * sizeof *b->hat);
    b->toks = malloc((size_t)n * (Q35_DRAFT_MAX + 1) * sizeof *b->toks);
    b->mrows = malloc((size_t)n * sizeof *b->mrows);
    b->acc = malloc((size_t)n * sizeof *b->acc);
    b->dmax = malloc((size_t)n * sizeof *b->dmax);
    b->cand = malloc((size_t)n * sizeof *b->cand);
    b->drafted_con = malloc((size_t)n * sizeof *b->drafted_con);
    b->hrow = malloc((size_t)n * sizeof *b->hrow);
    b->g = q35_alloc64((size_t)n * H * sizeof(float), 1);
    b->rows_cap = n;
    if (!b->vrows || !b->nd || !b->pos0 || !b->mpos0 || !b->np0 || !b->at || !b->hat || !b->toks || !b->mrows ||
        !b->acc || !b->dmax || !b->cand || !b->g || !b->drafted_con || !b->hrow) {
      q35_draft_bufs_free(b);
      return q35_seterr(err, "out of memory (a step of %d rows with drafts)", n);
    }
  }
  if (positions > b->ptok_cap) {
    free(b->ptok);
    b->ptok = malloc(positions * sizeof *b->ptok);
    b->ptok_cap = b->ptok ? positions : 0;
    if (!b->ptok) return q35_seterr(err, "out of memory (pair tokens of %zu positions)", positions);
  }
  return 0;
}

/* hid for `positions` hidden states (0, or -1 with err): touched now (zeroed), before the timed
 * part of the step, see touch_reserve. */
static int hid_reserve(q35_context *c, size_t positions, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  if (positions <= b->hid_cap) return 0;
  free(b->hid);
  b->hid = q35_alloc64(positions * (size_t)c->model->hp.n_embd * sizeof(float), 1);
  b->hid_cap = b->hid ? positions : 0;
  return b->hid ? 0 : q35_seterr(err, "out of memory (hidden states of %zu positions)", positions);
}

/* Draft logits for n rows of n_vocab; touched (see touch_reserve): the first K of each row, what
 * the head writes and the draft's sampling reads when drafting over ids [0, K) (--draft-vocab:
 * 128 KiB of a row's 1 MiB at K = 32768; the rest is never read). */
static int lg_reserve(q35_context *c, int32_t n, int32_t K, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  if (n <= b->lg_cap) return 0;
  const size_t V = (size_t)c->model->hp.n_vocab;
  free(b->lg);
  b->lg = q35_alloc64((size_t)n * V * sizeof(float), 0);
  b->lg_cap = b->lg ? n : 0;
  if (!b->lg) return q35_seterr(err, "out of memory (draft logits of %d rows)", n);
  for (int32_t r = 0; r < n; r++) memset(b->lg + (size_t)r * V, 0, (size_t)K * sizeof(float));
  return 0;
}

/* The buffers a step of these rows needs if every row that may draft drafts all it may: the draft
 * logits and the trunk's logits of every verified position, grown (and touched: zeroed) in the
 * first step that drafts, before its timed parts. Else each verify step of a new largest shape
 * would reallocate them, page-faulting on every 4 KiB it writes (~1 MiB of logits a position at
 * the real vocabulary): a one-off cost inside a step the draft plan times, repeated as the steps
 * grow. Not earlier: a server whose plan never drafts (4 streams) never pays for them. */
static int touch_reserve(q35_context *c, const q35_row *rows, int32_t n_rows, q35_err *err) {
  int32_t n_out = 0, n_cand = 0, K = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    const q35_row *row = &rows[r];
    n_out += row->n_outputs == Q35_OUTPUTS_NONE ? 0 : row->n_outputs > 1 ? row->n_outputs : 1;
    if (row->n_draft > 0) {
      n_out += row->n_draft, n_cand++;
      if (row->session->mtp->draft_vocab > K) K = row->session->mtp->draft_vocab;
    }
  }
  if (n_cand && lg_reserve(c, n_cand, K, err)) return -1;
  if (n_cand && n_out > c->out_cap) {
    if (q35_context_reserve(c, n_rows, n_out, err)) return -1;
    memset(c->logits, 0, (size_t)n_out * (size_t)c->model->hp.n_vocab * sizeof(float));
  }
  return 0;
}

/* A row's draft fields (the rest is q35_step_check's). */
static int check_draft(const q35_row *row, int32_t r, q35_err *err) {
  const q35_mtp_cache *mc = row->session->mtp;
  if (row->n_draft == 0) return 0;
  if (row->n_draft < 0 || !mc || row->n_draft > mc->draft_max)
    return q35_seterr(err, "row %d: n_draft %d is out of range [0, %d] (the session's draft_max)", r, row->n_draft,
                      mc ? mc->draft_max : 0);
  if (row->n_tokens != 1 || row->n_outputs != 0 || row->hidden)
    return q35_seterr(err, "row %d: a row with drafts feeds one token, with n_outputs 0 and no hidden buffer", r);
  if (!row->outputs) return q35_seterr(err, "row %d: n_draft %d needs an outputs array (n_draft + 1 entries)", r,
                                       row->n_draft);
  return 0;
}

/* Draft j (0-based) of row r from its head logits lg (the first K ids): the row's parameters at
 * the draw index the trunk uses there; penalties and biases only over the whole vocabulary (a
 * reduced one may not hold the ids they name). */
static int sample_draft(q35_context *c, const q35_row *row, int32_t j, const float *lg, int32_t K, const int32_t *drafts,
                        int32_t *out, q35_err *err) {
  const int full = K == c->model->hp.n_vocab;
  q35_sampling sp = *row->sampling;
  sp.draw_index += (uint64_t)j;
  const int32_t *hist = NULL;
  int32_t n_hist = 0, n_prompt = 0;
  if (!full) {
    sp.presence_penalty = sp.frequency_penalty = 0;
    sp.repetition_penalty = 1;
    sp.logit_bias = NULL;
    sp.n_logit_bias = 0;
  } else if (sp.presence_penalty != 0 || sp.frequency_penalty != 0 || sp.repetition_penalty != 1) {
    q35_draft_bufs *b = &c->dr;
    const size_t need = (size_t)row->n_history + (size_t)j + 1;
    if (q35_grow((void **)&b->hist, &b->hist_cap, need, sizeof *b->hist))
      return q35_seterr(err, "out of memory (draft history)");
    if (row->n_history > 0) memcpy(b->hist, row->history, (size_t)row->n_history * sizeof *b->hist);
    memcpy(b->hist + row->n_history, drafts, (size_t)j * sizeof *b->hist);
    hist = b->hist;
    n_hist = row->n_history + j;
    n_prompt = row->n_prompt;
  }
  q35_sample_result res;
  if (q35_sample(c->samplers[0], lg, K, &sp, hist, n_hist, n_prompt, -1, &res, err)) return -1;
  *out = res.token;
  return 0;
}

/* A constrained row's draft j over the constraint's state after drafts 1 .. j (accepted here and
 * rolled back after the drafts; counted in drafted_con): the tokens the language forbids get -inf
 * (so the head drafts within the language, as the trunk samples). 0: no draft here (the previous
 * draft leaves the language, or nothing may follow). */
static int constrain_draft(q35_context *c, const q35_row *row, int32_t r, int32_t j, const int32_t *tk, float *lg,
                           int32_t K) {
  q35_err e;
  if (j > 0) {
    if (q35_constraint_accept(row->constraint, tk[j], &e)) return 0;
    c->dr.drafted_con[r]++;
  }
  const uint32_t *mask = q35_constraint_mask_ref(row->constraint);
  return mask && q35_logits_apply_mask(lg, K, mask) > 0;
}

/* The clock of the plan's measured times (F, H): with one thread, the calling thread's CPU time
 * (the whole step runs on it, q35_pool_run; on a shared machine the time the thread waited for a
 * core is noise the plan would read as the cost of its choice, and single measurements of
 * neighbouring sizes then come out in any order), else the wall clock (a step of several
 * threads ends when the last one does). On an idle machine the two agree. */
static double pol_clock(const q35_context *c) {
  if (q35_context_n_threads(c) != 1) return q35_now();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Part 1: drafts for the rows with nd[r] > 0 into toks[r][1 ..]. The head's cache ends at each
 * session's position (the chained pairs used the head's own state, not the trunk's, and go). */
static int make_drafts(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  const q35_model *m = c->model;
  const size_t H = (size_t)m->hp.n_embd, V = (size_t)m->hp.n_vocab;
  int32_t n_d = 0, max_nd = 0, max_k = 0;
  for (int32_t r = 0; r < n_rows; r++)
    if (b->nd[r] > 0) {
      n_d++;
      if (b->nd[r] > max_nd) max_nd = b->nd[r];
      if (rows[r].session->mtp->draft_vocab > max_k) max_k = rows[r].session->mtp->draft_vocab;
    }
  if (lg_reserve(c, n_d, max_k, err) || q35_context_reserve_samplers(c, 1, err)) return -1;
  memset(b->drafted_con, 0, (size_t)n_rows * sizeof *b->drafted_con);
  /* The catch-up: rows holding more pending pairs than a session drafting every step does (the
   * plan kept it off drafting a while, or it is cold: model/mtp.h) run all but the last through
   * the head first, all such rows in one pass without logits, so the draft passes below (and
   * H(B), which the plan prices every later draft with) are those of steady drafting. The cache
   * entries do not depend on the split (the head is chunking invariant). */
  int32_t nc = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    q35_mtp_cache *mc = rows[r].session->mtp;
    if (b->nd[r] > 0 && mc->n_pend > mc->draft_max + 1)
      b->mrows[nc++] = (q35_mtp_row){mc, mc->pend_t, mc->pend_h, mc->n_pend - 1, NULL, NULL};
  }
  if (nc && q35_mtp_forward_rows(m, q35_context_ws(c), b->mrows, nc, 1, err)) return -1;
  for (int32_t r = 0; r < n_rows && nc; r++) {
    q35_mtp_cache *mc = rows[r].session->mtp;
    if (b->nd[r] <= 0 || mc->n_pend <= mc->draft_max + 1) continue;
    memmove(mc->pend_h, mc->pend_h + (size_t)(mc->n_pend - 1) * H, H * sizeof(float));
    mc->n_pend = 1;
    b->mpos0[r] = mc->s.pos; /* a step that fails after this keeps the caught-up head */
    b->np0[r] = 1;
  }
  /* groups of rows drafting over the same vocabulary share passes */
  for (int32_t r0 = 0; r0 < n_rows; r0++) {
    if (b->nd[r0] <= 0) continue;
    const int32_t K = rows[r0].session->mtp->draft_vocab;
    int first = 1;
    for (int32_t q = 0; q < r0; q++)
      if (b->nd[q] > 0 && rows[q].session->mtp->draft_vocab == K) first = 0;
    if (!first) continue; /* done with r0's group */
    for (int32_t j = 0; j < max_nd; j++) {
      int32_t nr = 0;
      for (int32_t r = r0; r < n_rows; r++) {
        q35_mtp_cache *mc = rows[r].session->mtp;
        if (b->nd[r] <= j || mc->draft_vocab != K) continue;
        int32_t *tk = b->toks + (size_t)r * (Q35_DRAFT_MAX + 1);
        q35_mtp_row *mr = &b->mrows[nr];
        mr->c = mc;
        mr->logits = b->lg + (size_t)nr * V;
        mr->g_out = b->g + (size_t)r * H;
        if (j == 0) { /* the pending pairs: the last one's token is the row's */
          int32_t *pt = b->ptok + b->at[r];
          memcpy(pt, mc->pend_t, (size_t)(mc->n_pend - 1) * sizeof *pt);
          pt[mc->n_pend - 1] = tk[0];
          mr->tokens = pt;
          mr->hidden = mc->pend_h;
          mr->n = mc->n_pend;
        } else { /* chained: (g, the draft before) */
          mr->tokens = &tk[j];
          mr->hidden = b->g + (size_t)r * H;
          mr->n = 1;
        }
        nr++;
      }
      if (!nr) break;
      const double t0 = pol_clock(c);
      if (q35_mtp_forward_rows(m, q35_context_ws(c), b->mrows, nr, K == (int32_t)V ? 0 : K, err)) return -1;
      int32_t i = 0;
      for (int32_t r = r0; r < n_rows; r++) {
        if (b->nd[r] <= j || rows[r].session->mtp->draft_vocab != K) continue;
        int32_t *tk = b->toks + (size_t)r * (Q35_DRAFT_MAX + 1);
        float *lg = b->lg + (size_t)i++ * V;
        if (rows[r].constraint && !constrain_draft(c, &rows[r], r, j, tk, lg, K)) {
          b->nd[r] = j; /* the language ends the drafts here */
          continue;
        }
        if (sample_draft(c, &rows[r], j, lg, K, tk + 1, &tk[j + 1], err)) return -1;
      }
      q35_draft_policy_head(&c->pol, nr, pol_clock(c) - t0);
    }
  }
  for (int32_t r = 0; r < n_rows; r++) {
    q35_err e;
    if (rows[r].constraint && b->drafted_con[r] > 0) q35_constraint_rollback(rows[r].constraint, b->drafted_con[r], &e);
    q35_mtp_cache *mc = rows[r].session->mtp;
    if (!mc) continue;
    if (b->nd[r] > 0) { /* the pending pairs are in the head's cache now */
      q35_mtp_cache_set_pos(mc, b->mpos0[r] + b->np0[r]);
      mc->n_pend = 0;
    } else { /* no drafts after all (a constraint ended them): as before (its entries get rewritten) */
      q35_mtp_cache_set_pos(mc, b->mpos0[r]);
      mc->n_pend = b->np0[r];
    }
  }
  return 0;
}

/* Bytes of a tensor (0 when absent). */
static double tbytes(const q35_tensor *t) {
  if (!t->data) return 0;
  return (double)t->nb2 * (double)(t->ne[2] > 1 ? t->ne[2] : 1) * (double)(t->ne[3] > 1 ? t->ne[3] : 1);
}

/* A layer's bytes: the routed experts into *exps, the rest into *dense. */
static void layer_bytes(const q35_layer *L, double *dense, double *exps) {
  const q35_tensor *ex[] = {&L->gate_exps, &L->up_exps, &L->gate_up_exps, &L->down_exps};
  const q35_tensor *de[] = {&L->attn_norm, &L->post_norm,  &L->wq,         &L->wk,         &L->wv,        &L->wo,
                            &L->q_norm,    &L->k_norm,     &L->wqkv,       &L->wz,         &L->wbeta,     &L->walpha,
                            &L->conv,      &L->dt_bias,    &L->ssm_a,      &L->ssm_norm,   &L->ssm_out,   &L->router,
                            &L->gate_shexp, &L->up_shexp,  &L->down_shexp, &L->shexp_gate, &L->ffn_gate,  &L->ffn_up,
                            &L->ffn_down};
  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) *exps += tbytes(ex[i]);
  for (size_t i = 0; i < sizeof de / sizeof de[0]; i++) *dense += tbytes(de[i]);
}

/* The policy's bytes model from the model's tensors (once: the weights do not change). */
static void pol_bytes(q35_context *c) {
  q35_draft_policy *p = &c->pol;
  const q35_model *m = c->model;
  if (p->by_fixed > 0) return;
  double dense = tbytes(&m->output) + tbytes(&m->output_norm), exps = 0, hd = 0, he = 0;
  for (int il = m->layer_begin; il < m->layer_end; il++) layer_bytes(&m->layers[il], &dense, &exps);
  layer_bytes(&m->mtp.layer, &hd, &he);
  hd += tbytes(&m->mtp.eh_proj) + tbytes(&m->mtp.enorm) + tbytes(&m->mtp.hnorm) + tbytes(&m->mtp.head_norm);
  p->exp_frac = m->hp.is_moe && m->hp.n_expert > 0 ? (double)m->hp.n_expert_used / m->hp.n_expert : 0;
  if (p->exp_frac <= 0) dense += exps, hd += he, exps = he = 0; /* (dense FFN: every token reads it all) */
  p->by_exps = exps;
  p->hd_fixed = hd;
  p->hd_exps = he;
  p->by_fixed = dense;
}

/* The bytes a cold session's first draft adds: the catch-up over its pending pairs but the last
 * (model/mtp.h), without the output rows; 0 when it has none to catch up. */
static double catchup_bytes(const q35_draft_policy *p, const q35_mtp_cache *mc) {
  if (mc->n_pend <= mc->draft_max + 1) return 0;
  const double u = p->exp_frac > 0 ? 1 - pow(1 - p->exp_frac, mc->n_pend - 1) : 1;
  return p->hd_fixed + p->hd_exps * u;
}

/* How many drafts each row carries (b->nd). */
static void plan(q35_context *c, const q35_row *rows, int32_t n_rows) {
  q35_draft_bufs *b = &c->dr;
  int64_t T0 = 0;
  double n_out0 = 0;
  int32_t n = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    const q35_row *row = &rows[r];
    const q35_session *s = row->session;
    T0 += row->n_tokens;
    n_out0 += row->n_outputs == Q35_OUTPUTS_NONE ? 0 : row->n_outputs > 1 ? row->n_outputs : 1;
    b->nd[r] = 0;
    if (row->n_draft <= 0 || s->mtp->n_pend < 1) continue; /* no hidden state to draft from yet */
    int32_t room = s->params.n_ctx - s->pos - 1;
    int32_t dm = row->n_draft < room ? row->n_draft : room;
    if (dm <= 0) continue;
    if (c->draft_fixed) {
      b->nd[r] = dm;
      continue;
    }
    b->cand[n] = r;
    b->dmax[n] = dm;
    b->acc[n] = q35_draft_policy_accept(&c->pol, s->mtp->acc_s, s->mtp->acc_f);
    n++;
  }
  if (n == 0) return;
  pol_bytes(c);
  {
    const q35_mtp_cache *mc = rows[b->cand[0]].session->mtp;
    c->pol.hd_out = (double)c->model->mtp.head.nb1 * (double)mc->draft_vocab;
  }
  /* a cold session's catch-up, in the plan spread over the steps a session that starts drafting
     stays warm (it is paid once), in a probe's check whole (a probe drafts once) */
  double first[n], first1[n];
  int cold[n];
  for (int32_t i = 0; i < n; i++) {
    const q35_mtp_cache *mc = rows[b->cand[i]].session->mtp;
    first1[i] = catchup_bytes(&c->pol, mc);
    first[i] = first1[i] / Q35_MTP_IDLE_STEPS;
    cold[i] = mc->idle >= Q35_MTP_IDLE_STEPS;
  }
  /* rows about to join (the caller's hint: sequences still prefilling, requests queued): while
     this step has fewer one-token rows, a cold session starts drafting only if it would in a step
     of that many (its catch-up and first head pass, and the head weights' first touch in a fresh
     process, would be paid for a step or two) */
  {
    int32_t n_dec = 0;
    for (int32_t r = 0; r < n_rows; r++) n_dec += rows[r].n_tokens == 1;
    if (c->draft_rows > n_dec) q35_draft_policy_hold_cold(&c->pol, n, b->acc, b->dmax, cold, c->draft_rows, first);
  }
  int32_t d[n], d0[n];
  q35_draft_policy_plan(&c->pol, n, b->acc, b->dmax, T0, n_out0, first, 0, d0);
  int32_t sum = 0;
  for (int32_t i = 0; i < n; i++) sum += d0[i];
  int probe = q35_draft_policy_probe(&c->pol, n, sum);
  if (probe) q35_draft_policy_plan(&c->pol, n, b->acc, b->dmax, T0, n_out0, first, probe, d);
  /* a probe the model and the times say loses more than the slack, even if every draft of it
     were accepted, is skipped (at 4 rows of a 256-expert MoE one probe draft with its cold
     catch-up costs ~40 % of a step); the rare ones at the longest interval still go */
  if (probe > 0 && c->pol.probe_every < Q35_POL_PROBE_MAX) {
    double one[n];
    for (int32_t i = 0; i < n; i++) one[i] = 1;
    const double r0 = q35_draft_policy_rate(&c->pol, n, b->acc, d0, T0, n_out0, first);
    const double r1 = q35_draft_policy_rate(&c->pol, n, one, d, T0, n_out0, first1);
    if (r0 > 0 && r1 < r0 * (1 - Q35_POL_PROBE_SLACK)) probe = 0;
  }
  for (int32_t i = 0; i < n; i++) {
    q35_mtp_cache *mc = rows[b->cand[i]].session->mtp;
    b->nd[b->cand[i]] = probe ? d[i] : d0[i];
    mc->idle = d0[i] > 0 ? 0 : mc->idle + 1; /* steps the plan itself chose no drafts for this session */
  }
}

/* Part 3 for rows that fed tokens without drafting: the pairs whose tokens are now known. A row
 * of n tokens at positions P .. P + n - 1 had its hidden states written after the session's
 * pending ones (region at[r]: pending, then the n new); the pair tokens are the pending tokens,
 * then the row's tokens (without the first when nothing was pending: position 0 has no pair
 * before it). With Q35_MTP_PEND_FLUSH pairs or more they go through the head now (all such rows
 * in one pass), the last position staying pending; else they wait. */
static void keep_pending(q35_context *c, q35_row *rows, const int32_t *is, int32_t n_is) {
  q35_draft_bufs *b = &c->dr;
  const q35_model *m = c->model;
  const size_t H = (size_t)m->hp.n_embd;
  int32_t nf = 0;
  for (int32_t i = 0; i < n_is; i++) {
    const int32_t r = is[i];
    const q35_row *row = &b->vrows[r];
    q35_mtp_cache *mc = row->session->mtp;
    const int32_t np0 = b->np0[r], n = row->n_tokens, pairs = np0 + n - 1;
    float *hid = b->hrow[r]; /* (may be mc->pend_h itself: memmove) */
    int32_t *pt = b->ptok + b->at[r];
    if (np0 > 0) memcpy(pt, mc->pend_t, (size_t)(np0 - 1) * sizeof *pt);
    memcpy(pt + (np0 > 0 ? np0 - 1 : 0), row->tokens + (np0 > 0 ? 0 : 1), (size_t)(np0 > 0 ? n : n - 1) * sizeof *pt);
    if (pairs >= Q35_MTP_PEND_FLUSH && !c->draft_fixed && mc->idle >= Q35_MTP_IDLE_STEPS) {
      /* a cold session (model/mtp.h): the head skips all but the newest PEND_KEEP positions (zeroed
         entries; drafts after them may be worse, outputs do not change), and the step costs no head
         pass; the pass that makes its next drafts catches up over the kept ones */
      const int32_t keep = Q35_MTP_PEND_KEEP, skip = pairs + 1 - keep;
      q35_mtp_cache_skip(mc, skip);
      memmove(mc->pend_h, hid + (size_t)skip * H, (size_t)keep * H * sizeof(float));
      memcpy(mc->pend_t, pt + skip, (size_t)(keep - 1) * sizeof *pt);
      mc->n_pend = keep;
      continue;
    }
    if (pairs >= Q35_MTP_PEND_FLUSH) {
      b->mrows[nf++] = (q35_mtp_row){mc, pt, hid, pairs, NULL, NULL};
      continue;
    }
    if (hid != mc->pend_h) memcpy(mc->pend_h + (size_t)np0 * H, hid + (size_t)np0 * H, (size_t)n * H * sizeof(float));
    if (pairs > 0) memcpy(mc->pend_t, pt, (size_t)pairs * sizeof *pt);
    mc->n_pend = np0 + n;
  }
  if (!nf) return;
  q35_err e;
  const int rc = q35_mtp_forward_rows(m, q35_context_ws(c), b->mrows, nf, 1, &e);
  for (int32_t i = 0; i < nf; i++) {
    q35_mtp_cache *mc = b->mrows[i].c;
    const q35_session *s = NULL;
    for (int32_t q = 0; q < n_is && !s; q++)
      if (rows[is[q]].session->mtp == mc) s = rows[is[q]].session;
    if (rc) { /* out of memory: the head skips these pairs (drafts get worse, outputs do not change) */
      q35_mtp_cache_set_pos(mc, s->pos);
      mc->n_pend = 0;
      continue;
    }
    memmove(mc->pend_h, b->mrows[i].hidden + (size_t)b->mrows[i].n * H, H * sizeof(float));
    mc->n_pend = 1;
  }
}

/* Whether row r (not drafting, n tokens) keeps its pending and new hidden states right after the
 * pending ones in the session's pend_h (they fit: a decode row, nothing to copy, the pending pairs
 * stay where they are), not in a region of b->hid (a prompt chunk: keep_pending takes what it
 * keeps from there). */
static int pend_fits(const q35_draft_bufs *b, const q35_mtp_cache *mc, int32_t r, int32_t n) {
  return b->np0[r] + n <= mc->pend_cap;
}

/* Where row r (not drafting, n tokens) keeps its pending and new hidden states (pend_fits): pend_h,
 * or its region of b->hid with the pending ones copied in first. */
static float *pend_region(q35_draft_bufs *b, q35_mtp_cache *mc, int32_t r, int32_t n) {
  const size_t H = (size_t)mc->s.model->hp.n_embd;
  if (pend_fits(b, mc, r, n)) return mc->pend_h;
  float *hid = b->hid + b->hat[r] * H;
  memcpy(hid, mc->pend_h, (size_t)b->np0[r] * H * sizeof(float));
  return hid;
}

/* The pair-token regions of the rows on sessions with drafts (b->at), and the total. */
static size_t layout(q35_context *c, const q35_row *rows, int32_t n_rows) {
  q35_draft_bufs *b = &c->dr;
  size_t at = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    const q35_mtp_cache *mc = rows[r].session->mtp;
    b->at[r] = at;
    if (mc) at += (size_t)mc->n_pend + (size_t)rows[r].n_tokens + (size_t)mc->draft_max + 1;
  }
  return at;
}

/* The hidden-state regions (b->hat) once the drafts are planned (b->nd, b->np0), grown in hid: a
 * drafting row's verified positions, a row whose pending and new states do not fit its pend_h
 * (pend_fits); none for the rest. A step where nothing drafts and only decode rows run (a server
 * whose plan declines) needs no hid: its hidden states go straight to the sessions' pend_h. */
static int hid_layout(q35_context *c, const q35_row *rows, int32_t n_rows, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  size_t at = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    const q35_mtp_cache *mc = rows[r].session->mtp;
    b->hat[r] = at;
    if (!mc) continue;
    if (b->nd[r] > 0) at += (size_t)b->nd[r] + 1;
    else if (!pend_fits(b, mc, r, rows[r].n_tokens)) at += (size_t)b->np0[r] + (size_t)rows[r].n_tokens;
  }
  return hid_reserve(c, at, err);
}

int q35_draft_step(q35_context *c, q35_row *rows, int32_t n_rows, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  const size_t H = (size_t)c->model->hp.n_embd;
  if (q35_step_check(c, rows, n_rows, err)) return -1;
  for (int32_t r = 0; r < n_rows; r++)
    if (check_draft(&rows[r], r, err)) return -1;
  if (bufs_reserve(c, n_rows, 0, err) || bufs_reserve(c, n_rows, layout(c, rows, n_rows), err)) return -1;
  for (int32_t r = 0; r < n_rows; r++) {
    q35_session *s = rows[r].session;
    b->pos0[r] = s->pos;
    if (s->mtp) {
      b->mpos0[r] = s->mtp->s.pos;
      b->np0[r] = s->mtp->n_pend;
      s->mtp->last_emitted = 0;
    }
    b->toks[(size_t)r * (Q35_DRAFT_MAX + 1)] = rows[r].tokens[0];
  }
  plan(c, rows, n_rows);
  int any = 0;
  for (int32_t r = 0; r < n_rows; r++) any |= b->nd[r] > 0;
  if (hid_layout(c, rows, n_rows, err)) return -1;
  if (any && (touch_reserve(c, rows, n_rows, err) || make_drafts(c, rows, n_rows, err))) {
    for (int32_t r = 0; r < n_rows; r++)
      if (rows[r].session->mtp) {
        q35_mtp_cache_set_pos(rows[r].session->mtp, b->mpos0[r]);
        rows[r].session->mtp->n_pend = b->np0[r];
      }
    return -1;
  }
  /* the rows as the trunk runs them, with their hidden states kept */
  for (int32_t r = 0; r < n_rows; r++) {
    q35_row *v = &b->vrows[r];
    *v = rows[r];
    v->n_draft = 0;
    q35_session *s = rows[r].session;
    if (!s->mtp) continue;
    if (b->nd[r] > 0) {
      float *hid = b->hid + b->hat[r] * H;
      v->tokens = b->toks + (size_t)r * (Q35_DRAFT_MAX + 1);
      v->n_tokens = b->nd[r] + 1;
      v->n_outputs = b->nd[r] + 1;
      s->hidden_all = hid;
      q35_session_ckpt_touch(s, b->nd[r]); /* (once a slot: outside the timed step) */
      q35_session_ckpt_arm(s, b->nd[r], err); /* slots allocated with the session: cannot fail */
    } else {
      b->hrow[r] = pend_region(b, s->mtp, r, v->n_tokens);
      s->hidden_all = b->hrow[r] + (size_t)b->np0[r] * H;
    }
  }
  const double t0 = pol_clock(c);
  const int rc = q35_step_core(c, b->vrows, n_rows, err);
  const double dt = pol_clock(c) - t0;
  int64_t T = 0;
  int64_t n_out = 0;
  for (int32_t r = 0; r < n_rows; r++) {
    q35_session *s = rows[r].session;
    const q35_row *v = &b->vrows[r];
    T += v->n_tokens;
    n_out += v->n_outputs == Q35_OUTPUTS_NONE ? 0 : v->n_outputs > 1 ? v->n_outputs : 1;
    s->hidden_all = NULL;
    if (rc && s->mtp) { /* the head's state back in step with the trunk's position */
      q35_session_ckpt_disarm(s);
      if (s->pos != b->pos0[r] && b->nd[r] > 0) q35_session_ckpt_restore_on(s, 0, q35_context_ws(c)->pool); /* as a one-token step: no drafts fed */
      if (s->pos == b->pos0[r]) q35_mtp_cache_set_pos(s->mtp, b->mpos0[r]), s->mtp->n_pend = b->np0[r];
      else q35_mtp_cache_set_pos(s->mtp, s->pos), s->mtp->n_pend = 0;
    }
  }
  if (rc) return -1;
  /* F(T) is the time of a step whose every token is sampled (decode and verify rows), what a draft
     adds to; a step with prompt tokens samples only their last, so it would make the sizes a
     verify step reaches (T0 + drafts) look cheap (at 4 streams the prompts' steps set F(5 ..)
     and the plan drafted where drafts lose) */
  if (n_out == T) q35_draft_policy_step(&c->pol, T, dt);
  int32_t n_is = 0;
  int32_t is[n_rows];
  for (int32_t r = 0; r < n_rows; r++) {
    q35_row *row = &rows[r];
    const q35_row *v = &b->vrows[r];
    q35_session *s = row->session;
    const int32_t nd = b->nd[r], m = v->n_outputs == Q35_OUTPUTS_NONE ? 0 : v->n_outputs > 1 ? v->n_outputs : 1;
    row->n_drafted = nd;
    if (nd == 0) {
      row->token = v->token;
      row->logprob = v->logprob;
      memcpy(row->top_ids, v->top_ids, sizeof row->top_ids);
      memcpy(row->top_logprobs, v->top_logprobs, sizeof row->top_logprobs);
      row->n_emitted = m;
      if (row->outputs && m == 1 && v->n_outputs <= 1) {
        q35_output *o = &row->outputs[0];
        o->token = v->token;
        o->logprob = v->logprob;
        memcpy(o->top_ids, v->top_ids, sizeof o->top_ids);
        memcpy(o->top_logprobs, v->top_logprobs, sizeof o->top_logprobs);
      }
      if (s->mtp) is[n_is++] = r;
      continue;
    }
    const int32_t *tk = v->tokens;
    int32_t k = 0;
    while (k < nd && row->outputs[k].token == tk[k + 1]) k++;
    q35_session_ckpt_rollback_on(s, b->pos0[r] + k + 1, q35_context_ws(c)->pool, err); /* inside the armed pass: cannot fail */
    q35_mtp_cache *mc = s->mtp;
    memcpy(mc->pend_h, b->hid + b->hat[r] * H, (size_t)(k + 1) * H * sizeof(float));
    memcpy(mc->pend_t, tk + 1, (size_t)k * sizeof *tk);
    mc->n_pend = k + 1;
    mc->last_emitted = k + 1;
    mc->last_drafted = nd;
    mc->last_pos0 = b->pos0[r];
    q35_draft_policy_round(&c->pol, &mc->acc_s, &mc->acc_f, nd, k);
    const q35_output *o = &row->outputs[k];
    row->n_emitted = k + 1;
    row->token = o->token;
    row->logprob = o->logprob;
    memcpy(row->top_ids, o->top_ids, sizeof row->top_ids);
    memcpy(row->top_logprobs, o->top_logprobs, sizeof row->top_logprobs);
  }
  keep_pending(c, rows, is, n_is);
  return 0;
}

int q35_draft_eval(q35_context *c, q35_fwd_row *fr, q35_err *err) {
  q35_draft_bufs *b = &c->dr;
  q35_session *s = fr->s;
  const size_t H = (size_t)c->model->hp.n_embd;
  q35_row row = {0};
  row.session = s;
  row.tokens = fr->tokens;
  row.n_tokens = fr->n;
  if (bufs_reserve(c, 1, 0, err) || bufs_reserve(c, 1, layout(c, &row, 1), err)) return -1;
  b->np0[0] = s->mtp->n_pend;
  b->nd[0] = 0;
  if (hid_layout(c, &row, 1, err)) return -1;
  s->mtp->last_emitted = 0;
  b->hrow[0] = pend_region(b, s->mtp, 0, fr->n);
  s->hidden_all = b->hrow[0] + (size_t)b->np0[0] * H;
  const int rc = q35_forward(c->model, q35_context_ws(c), fr, 1, err);
  s->hidden_all = NULL;
  if (rc) return -1;
  b->vrows[0] = row;
  const int32_t is[1] = {0};
  keep_pending(c, &row, is, 1);
  return 0;
}

int q35_session_draft_keep(q35_session *s, int32_t n, q35_err *err) {
  q35_mtp_cache *mc = s->mtp;
  if (!mc || mc->last_emitted < 1)
    return q35_seterr(err, "draft keep: the session's last step emitted no drafted tokens");
  const int32_t m = mc->last_emitted;
  if (n < 1 || n > m) return q35_seterr(err, "draft keep: %d tokens, the last step emitted %d", n, m);
  if (n == m) return 0;
  q35_session_ckpt_restore(s, n - 1); /* the state after the row's token and n - 1 emitted ones */
  mc->n_pend = n;
  mc->last_emitted = n;
  return 0;
}
