/*
 * context.h - the run state of one q35_context (the public overview is in q35.h).
 *
 * Everything a step writes apart from the sessions lives here, so contexts on one model never
 * share mutable state: the thread pool and the forward pass's scratch (fwd), the step's buffers
 * (the logits of the sampled positions, the forward rows, one result per sampled position, the
 * penalty histories of multi-position rows) and one sampler workspace per thread. The buffers
 * grow when a step needs more than any before it and are kept: a step of a size seen before
 * allocates nothing.
 */
#ifndef Q35_CONTEXT_H
#define Q35_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "sample/sampler.h"

/* One sampled position's result, or its error. */
typedef struct q35_step_out {
  q35_sample_result res;
  int rc;
  q35_err err;
} q35_step_out;



/* ---- speculative decoding (draft.c, draft_policy.c) ---- */

/* The adaptive draft length (docs/DESIGN.md "Adaptive draft length"): measured times of the
 * context's steps by tokens per step, and of the head's passes by rows per pass, and the
 * acceptance all its sessions have shown (the prior of a session that has shown little). */
#define Q35_POL_TMAX 64   /* steps of up to this many tokens are timed one by one */
#define Q35_POL_BMAX 64   /* head passes of up to this many rows */
typedef struct q35_draft_policy {
  double fwd[Q35_POL_TMAX + 1];   /* seconds of a step of T tokens (EMA), fwd_n[T] samples */
  uint32_t fwd_n[Q35_POL_TMAX + 1];
  double head[Q35_POL_BMAX + 1];  /* seconds of one head pass over B rows (EMA) */
  uint32_t head_n[Q35_POL_BMAX + 1];
  double acc_s, acc_f;            /* accepted drafts and rejections of all sessions (decayed) */
  uint64_t rounds;                /* steps with rows that could draft (the probe schedule) */
  uint64_t next_probe;            /* the step (of rounds) of the next probe */
  uint32_t probe_every;           /* steps between probes: 32, doubling to 1024 while the plan holds */
  int32_t last_n, last_sum;       /* the previous plan: rows that could draft, drafts chosen */
  int probe_dir;                  /* the next probe's direction (+1 / -1, alternating) */
  /* The bytes model (bench/mtp_bytes.py's; draft.c sets it from the model's tensors at the first
   * step with drafts; all 0: none): the prior for step sizes and head passes not measured yet,
   * scaled by the measured time per byte of the plain step. A step of T tokens reads by_fixed +
   * by_exps * u(T), u(T) = 1 - (1 - exp_frac)^T the share of the routed experts T tokens reach
   * (uniform routing); a head pass over B rows hd_fixed + hd_exps * u(B) + hd_out. */
  double by_fixed;                /* trunk: every non-expert weight, the output matrix */
  double by_exps;                 /* trunk: all routed experts of its layers */
  double hd_fixed;                /* head: eh_proj, its layer's non-expert weights */
  double hd_exps;                 /* head: all routed experts of its layer */
  double hd_out;                  /* head: the output rows of the plan's draft vocabulary (set per plan) */
  double exp_frac;                /* experts a token routes to / experts (0: dense) */
} q35_draft_policy;

/* Times measured: a step of T tokens took `seconds`; a head pass over B rows took `seconds`. */
void q35_draft_policy_step(q35_draft_policy *p, int64_t T, double seconds);
void q35_draft_policy_head(q35_draft_policy *p, int32_t B, double seconds);
/* A verify round of a session drafted nd and the trunk accepted k: the session's counts (*s, *f)
 * and the context's move. */
void q35_draft_policy_round(q35_draft_policy *p, double *s, double *f, int32_t nd, int32_t k);
/* The acceptance estimate of a session with counts (s, f): its own, pulled toward the context's. */
double q35_draft_policy_accept(const q35_draft_policy *p, double s, double f);
/* Whether this step (of n rows that may draft, the plan choosing sum drafts) probes: 0, or +1 / -1
 * (one draft more / fewer than the plan). Probes come every probe_every steps, alternating in
 * direction; the interval starts at 32 and doubles after each probe up to 1024 while the plan
 * for the same number of rows stays the same, and falls back to 32 when it changes (a probe of a
 * choice far from paying costs up to a step, so a steady plan is rechecked rarely). */
int q35_draft_policy_probe(q35_draft_policy *p, int32_t n, int32_t sum);
/* Drafts d[i] in [0, dmax[i]] for n rows that may draft, with acceptance acc[i], in a step of T0
 * tokens (without drafts) that emits n_out0 tokens: the choice with the most tokens per second
 * the measured times predict, built one draft at a time (each row's next draft adds acc^j
 * expected tokens and costs a token more in the step and its share of a head pass). A step time
 * not measured yet is the bytes model's (free without one: so it gets tried), a step of T0
 * tokens not measured yet means no drafts (its time is measured first). probe +1 / -1: one draft more / fewer than the best
 * choice (the times of neighbouring choices stay measured). first[i] (NULL: none): the bytes row
 * i's first draft adds (the catch-up of a cold session, model/mtp.h), priced at the plain step's
 * seconds per byte. */
void q35_draft_policy_plan(const q35_draft_policy *p, int32_t n, const double *acc, const int32_t *dmax, int64_t T0,
                           double n_out0, const double *first, int probe, int32_t *d);
/* The tokens per second the times (and, for sizes not measured, the bytes model) predict for the
 * choice d of the same rows (first: as for the plan); 0 when the plain step is not measured. A probe the plan's own choice
 * beats by more than Q35_POL_PROBE_SLACK is not worth its step (draft.c skips it). */
double q35_draft_policy_rate(const q35_draft_policy *p, int32_t n, const double *acc, const int32_t *d, int64_t T0,
                             double n_out0, const double *first);
/* The rows a step is about to grow to (q35_context_draft_rows): rows in dmax[] marked cold[i]
 * (sessions not drafting lately: their first drafts pay a catch-up, model/mtp.h) keep drafts only
 * where the plan of the grown step, `rows` one-token rows emitting a token each, would give them
 * drafts too; else their dmax[i] becomes 0. A grown step whose plain time is not measured yet
 * plans none (q35_draft_policy_plan), so a cold session does not start drafting in the steps
 * before a batch forms. The other rows, and every row when rows < 1, keep dmax. */
void q35_draft_policy_hold_cold(const q35_draft_policy *p, int32_t n, const double *acc, int32_t *dmax, const int *cold,
                                int32_t rows, const double *first);
#define Q35_POL_PROBE_SLACK 0.05
#define Q35_POL_PROBE_MAX 1024 /* the longest interval between probes (steps) */

/* The buffers of a step with drafts (draft.c): grown on demand, kept. */
typedef struct q35_draft_bufs {
  q35_row *vrows;        /* the rows as the trunk runs them: [token, drafts] */
  int32_t *nd, *pos0, *mpos0, *np0; /* per row: drafts, position, head position, pending before */
  size_t *at;            /* per row: where its pair tokens start (ptok) */
  size_t *hat;           /* per row: where its region of hid starts (hid_layout: only rows that need one) */
  int32_t rows_cap;
  int32_t *toks;         /* per row [Q35_DRAFT_MAX + 1]: token, drafts */
  float *hid;            /* hidden states: per row its region of hat[] */
  float **hrow;          /* per row: where its pending and new hidden states are (its region of hid,
                            or, for a row that does not draft and fits, its session's pend_h) */
  int32_t *ptok;         /* pair tokens: per row its region of at[] */
  size_t hid_cap, ptok_cap; /* (positions) */
  float *lg;             /* draft logits [rows][n_vocab] */
  float *g;              /* the head's state per row [rows][n_embd] */
  int32_t lg_cap;        /* (rows) */
  int32_t *hist;         /* a row's penalty history and its drafts */
  size_t hist_cap;
  struct q35_mtp_row *mrows;
  double *acc;
  int32_t *dmax, *cand;
  int32_t *drafted_con;  /* per row: drafts its constraint accepted while drafting (rolled back) */
} q35_draft_bufs;

struct q35_context {
  q35_model *model;
  q35_fwd_ws fwd;                /* pool + forward scratch */
  struct q35_sampler **samplers; /* sampling workspaces, one per pool thread (made on demand) */
  int n_samplers;
  /* per sampled position of a step: [out_cap] */
  float *logits;                 /* [out_cap][n_vocab] */
  q35_step_out *out;
  int32_t *item_row;             /* the row of each sampled position */
  int32_t out_cap;
  /* per row: [row_cap] */
  q35_fwd_row *fwd_rows;
  int32_t *out_at;               /* the row's first sampled position (index into the above) */
  size_t *hist_at;               /* where the row's assembled history starts in hist */
  int32_t row_cap;
  int32_t *hist;                 /* histories of rows sampled at several positions */
  size_t hist_cap;
  double t_sample;               /* seconds in the sampling head */
  uint32_t *masks;               /* constrained positions' masks made during the forward pass */
  size_t masks_cap;              /* (words) */
  int n_cpus;                    /* CPUs this process may run on (the overlap needs a spare one) */
  int draft_fixed;               /* q35_context_draft_adapt(ctx, 0): every row drafts its n_draft */
  int32_t draft_rows;            /* q35_context_draft_rows: rows the caller's steps are about to carry (0: none) */
  q35_draft_policy pol;
  q35_draft_bufs dr;
  q35_context *threads_of;       /* NULL, or the context whose pool and scratch this one uses
                                  (q35_context_new_sharing) */
  struct q35_flight *flight;     /* the step begun and not yet ended (step.c; NULL until the first) */
};

/* The pool and forward scratch a context runs on: its own, or those of threads_of. */
static inline q35_fwd_ws *q35_context_ws(q35_context *c) { return c->threads_of ? &c->threads_of->fwd : &c->fwd; }

/* q35_context_step for a step with rows on sessions with drafts (draft.c). */
int q35_draft_step(q35_context *ctx, q35_row *rows, int32_t n_rows, q35_err *err);
/* q35_forward of one eval chunk on a session with drafts: the head keeps up (draft.c). */
int q35_draft_eval(q35_context *ctx, q35_fwd_row *row, q35_err *err);
void q35_draft_bufs_free(q35_draft_bufs *b);

/* step.c: the step of rows without drafts (every check, the forward pass, masks, sampling):
 * q35_context_step_begin then _end. */
int q35_step_core(q35_context *ctx, q35_row *rows, int32_t n_rows, q35_err *err);
/* step.c: every row's fields checked as q35_step_core checks them, without running anything. */
int q35_step_check(q35_context *ctx, const q35_row *rows, int32_t n_rows, q35_err *err);

/* Grow the step buffers to n_rows rows and n_out sampled positions (0, or -1 with err). */
int q35_context_reserve(q35_context *ctx, int32_t n_rows, int32_t n_out, q35_err *err);
/* Grow the sampler workspaces to n (0, or -1 with err). */
int q35_context_reserve_samplers(q35_context *ctx, int n, q35_err *err);
/* Grow the history buffer to n tokens (0, or -1 with err). */
int q35_context_reserve_hist(q35_context *ctx, size_t n, q35_err *err);

#endif
