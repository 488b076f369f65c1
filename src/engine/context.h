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
  q35_context *threads_of;       /* NULL, or the context whose pool and scratch this one uses
                                  (q35_context_new_sharing) */
  struct q35_flight *flight;     /* the step begun and not yet ended (step.c; NULL until the first) */
};

/* The pool and forward scratch a context runs on: its own, or those of threads_of. */
static inline q35_fwd_ws *q35_context_ws(q35_context *c) { return c->threads_of ? &c->threads_of->fwd : &c->fwd; }

/* Grow the step buffers to n_rows rows and n_out sampled positions (0, or -1 with err). */
int q35_context_reserve(q35_context *ctx, int32_t n_rows, int32_t n_out, q35_err *err);
/* Grow the sampler workspaces to n (0, or -1 with err). */
int q35_context_reserve_samplers(q35_context *ctx, int n, q35_err *err);
/* Grow the history buffer to n tokens (0, or -1 with err). */
int q35_context_reserve_hist(q35_context *ctx, size_t n, q35_err *err);

#endif
