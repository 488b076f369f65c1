/*
 * context.c - q35_context: making and freeing one, and growing its buffers (context.h).
 */
#include "engine/context.h"

#include <stdlib.h>
#include <unistd.h>

#include "base/util.h"

/* Pools are capped at this many threads. */
#define MAX_THREADS 256

q35_context_params q35_context_default_params(void) {
  q35_context_params p = {0};
  return p;
}

q35_context *q35_context_new(q35_model *model, const q35_context_params *params, q35_err *err) {
  q35_context_params dp = q35_context_default_params();
  if (!params) params = &dp;
  int nt = params->n_threads;
  if (nt <= 0) nt = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nt <= 0) nt = 1;
  if (nt > MAX_THREADS) nt = MAX_THREADS;
  q35_context *c = calloc(1, sizeof *c);
  if (!c) {
    q35_seterr(err, "out of memory (context)");
    return NULL;
  }
  c->model = model;
  c->n_cpus = q35_usable_cpus();
  c->fwd.pool = q35_pool_new(nt);
  if (!c->fwd.pool) {
    free(c);
    q35_seterr(err, "cannot start %d threads", nt);
    return NULL;
  }
  return c;
}

q35_context *q35_context_new_sharing(q35_context *ctx, q35_err *err) {
  q35_context *c = calloc(1, sizeof *c);
  if (!c) {
    q35_seterr(err, "out of memory (context)");
    return NULL;
  }
  c->model = ctx->model;
  c->n_cpus = ctx->n_cpus;
  c->threads_of = ctx->threads_of ? ctx->threads_of : ctx;
  return c;
}

static void free_step_buffers(q35_context *c) {
  free(c->logits);
  free(c->masks);
  free(c->out);
  free(c->item_row);
  free(c->fwd_rows);
  free(c->out_at);
  free(c->hist_at);
  c->logits = NULL;
  c->out = NULL;
  c->item_row = NULL;
  c->fwd_rows = NULL;
  c->out_at = NULL;
  c->hist_at = NULL;
  c->out_cap = c->row_cap = 0;
}

void q35_context_free(q35_context *c) {
  if (!c) return;
  if (c->fwd.pool) q35_pool_free(c->fwd.pool);
  free(c->fwd.scratch);
  free(c->fwd.mtp_cat);
  free(c->flight);
  for (int i = 0; i < c->n_samplers; i++) q35_sampler_free(c->samplers[i]);
  free(c->samplers);
  free_step_buffers(c);
  free(c->hist);
  q35_draft_bufs_free(&c->dr);
  free(c);
}

q35_context *q35_model_context(q35_model *m) { return m->ctx; }
int32_t q35_model_n_threads(const q35_model *m) { return q35_context_n_threads(m->ctx); }
double q35_model_sample_seconds(const q35_model *m) { return q35_context_sample_seconds(m->ctx); }
int32_t q35_context_n_threads(const q35_context *c) {
  return q35_pool_size(c->threads_of ? c->threads_of->fwd.pool : c->fwd.pool);
}
double q35_context_sample_seconds(const q35_context *c) { return c->t_sample; }

int q35_context_reserve(q35_context *c, int32_t n_rows, int32_t n_out, q35_err *err) {
  if (n_rows > c->row_cap) {
    free(c->fwd_rows);
    free(c->out_at);
    free(c->hist_at);
    c->fwd_rows = malloc((size_t)n_rows * sizeof *c->fwd_rows);
    c->out_at = malloc((size_t)n_rows * sizeof *c->out_at);
    c->hist_at = malloc((size_t)n_rows * sizeof *c->hist_at);
    c->row_cap = n_rows;
    if (!c->fwd_rows || !c->out_at || !c->hist_at) {
      free_step_buffers(c);
      return q35_seterr(err, "out of memory (a step of %d rows)", n_rows);
    }
  }
  if (n_out > c->out_cap) {
    const size_t V = (size_t)c->model->hp.n_vocab;
    free(c->logits);
    free(c->out);
    free(c->item_row);
    /* 2 MiB pages from two rows on: a verify step's rows are first touched inside it */
    c->logits = q35_alloc_huge_from((size_t)n_out * V * sizeof(float), (size_t)2 << 20);
    c->out = malloc((size_t)n_out * sizeof *c->out);
    c->item_row = malloc((size_t)n_out * sizeof *c->item_row);
    c->out_cap = n_out;
    if (!c->logits || !c->out || !c->item_row) {
      free_step_buffers(c);
      return q35_seterr(err, "out of memory (logits of %d positions)", n_out);
    }
  }
  return 0;
}

int q35_context_reserve_samplers(q35_context *c, int n, q35_err *err) {
  if (c->n_samplers >= n) return 0;
  q35_sampler **ss = realloc(c->samplers, (size_t)n * sizeof *ss);
  if (!ss) return q35_seterr(err, "out of memory (sampling workspaces)");
  c->samplers = ss;
  while (c->n_samplers < n) {
    ss[c->n_samplers] = q35_sampler_new(c->model->hp.n_vocab, err);
    if (!ss[c->n_samplers]) return -1;
    c->n_samplers++;
  }
  return 0;
}

int q35_context_reserve_hist(q35_context *c, size_t n, q35_err *err) {
  if (n <= c->hist_cap) return 0;
  int32_t *h = realloc(c->hist, n * sizeof *h);
  if (!h) return q35_seterr(err, "out of memory (penalty histories of %zu tokens)", n);
  c->hist = h;
  c->hist_cap = n;
  return 0;
}
