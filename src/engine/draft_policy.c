/*
 * draft_policy.c - how many drafts each row carries (engine/context.h, docs/DESIGN.md "Adaptive
 * draft length"). Pure bookkeeping and arithmetic on measured times: it decides only how many
 * positions a step computes, never which token comes out.
 *
 * A round of a row with d drafts at per-draft acceptance a emits E(d) = 1 + a + ... + a^d tokens
 * (drafts are accepted in order). A step of T tokens takes F(T) (measured: decode steps are
 * bound by streaming the weights, so F grows slowly with T on a memory-bound machine and about
 * linearly on a compute-bound one), and a head pass over B rows H(B). The plan maximizes the
 * step's expected tokens per second, sum E / (F(T0 + sum d) + sum over passes H(rows in pass)),
 * adding one draft at a time where it raises that rate: speculation pays at small batches
 * (F nearly flat, H small against F) and stops paying at large ones (each extra token costs
 * experts nobody else in the step reads), and at low acceptance.
 */
#include <math.h>
#include <string.h>

#include "engine/context.h"

#define EMA_NEW 0.2         /* weight of a new time measurement */
#define SESSION_DECAY 0.9   /* a session's acceptance counts per round (about the last 10 rounds) */
#define CONTEXT_DECAY 0.98  /* the context's (about the last 50 rounds of all sessions) */
#define PRIOR_WEIGHT 2.0    /* rounds' worth of the context's acceptance in a session's estimate */

/* The first sample of a size is provisional: the second one replaces it when lower. The first
 * step of a size often pays one-off costs (the first verify step of a session touches its
 * checkpoint slots and the draft buffers for the first time: at one row F(2) read 2.5x F(1)),
 * and a size the plan then judges too dear is measured again only by a probe. */
static void ema(double *v, uint32_t *n, double x) {
  *v = *n == 0 ? x : *n == 1 ? (x < *v ? x : *v) : (1 - EMA_NEW) * *v + EMA_NEW * x;
  if (*n < UINT32_MAX) (*n)++;
}

void q35_draft_policy_step(q35_draft_policy *p, int64_t T, double seconds) {
  if (T >= 1 && T <= Q35_POL_TMAX && seconds > 0) ema(&p->fwd[T], &p->fwd_n[T], seconds);
}

void q35_draft_policy_head(q35_draft_policy *p, int32_t B, double seconds) {
  if (B >= 1 && B <= Q35_POL_BMAX && seconds > 0) ema(&p->head[B], &p->head_n[B], seconds);
}

void q35_draft_policy_round(q35_draft_policy *p, double *s, double *f, int32_t nd, int32_t k) {
  if (nd < 1) return;
  const double miss = k < nd ? 1.0 : 0.0;
  *s = *s * SESSION_DECAY + k;
  *f = *f * SESSION_DECAY + miss;
  p->acc_s = p->acc_s * CONTEXT_DECAY + k;
  p->acc_f = p->acc_f * CONTEXT_DECAY + miss;
}

double q35_draft_policy_accept(const q35_draft_policy *p, double s, double f) {
  const double prior = (p->acc_s + 1.0) / (p->acc_s + p->acc_f + 2.0); /* Laplace: 0.5 with no data */
  return (s + PRIOR_WEIGHT * prior) / (s + f + PRIOR_WEIGHT);
}

/* The bytes model (context.h): a trunk step of T tokens, a head pass over B rows. */
static double routed(const q35_draft_policy *p, double n) { return p->exp_frac > 0 ? 1 - pow(1 - p->exp_frac, n) : 1; }
static double trunk_bytes(const q35_draft_policy *p, int64_t T) { return p->by_fixed + p->by_exps * routed(p, (double)T); }
static double head_bytes(const q35_draft_policy *p, int32_t B) {
  return p->hd_fixed + p->hd_exps * routed(p, B) + p->hd_out;
}

/* Seconds per byte of the measured step of T tokens (0: no bytes model, or not measured). */
static double sec_per_byte(const q35_draft_policy *p, int64_t T) {
  if (p->by_fixed <= 0 || T < 1 || T > Q35_POL_TMAX || !p->fwd_n[T]) return 0;
  return p->fwd[T] / trunk_bytes(p, T);
}

/* F(T): the measured time of a step of T tokens, interpolated between the nearest measured
 * sizes, extrapolated along the slope of the two largest measured ones below T (when positive);
 * else the bytes model's prior, the nearest measured size scaled by the bytes the two read (at
 * 4 rows an extra token reads the experts it routes to that the 4 others do not: ~7 of 8 new
 * with 256 experts, where at one row the whole step costs about that; *prior = 1); < 0: unknown
 * (no bytes model). */
static double fwd_time_p(const q35_draft_policy *p, int64_t T, int *prior) {
  if (prior) *prior = 0;
  if (T >= 1 && T <= Q35_POL_TMAX && p->fwd_n[T]) return p->fwd[T];
  int64_t lo = -1, lo2 = -1, hi = -1;
  const int64_t top = T < Q35_POL_TMAX ? T : Q35_POL_TMAX + 1;
  for (int64_t t = top - 1; t >= 1 && lo2 < 0; t--)
    if (p->fwd_n[t]) {
      if (lo < 0) lo = t;
      else lo2 = t;
    }
  for (int64_t t = T + 1; t <= Q35_POL_TMAX && hi < 0; t++)
    if (p->fwd_n[t]) hi = t;
  if (lo > 0 && hi > 0) return p->fwd[lo] + (p->fwd[hi] - p->fwd[lo]) * (double)(T - lo) / (double)(hi - lo);
  if (lo > 0 && lo2 > 0) {
    /* a larger size measured cheaper than a smaller one says nothing about the slope (noise, or
       a one-off cost in the smaller one): unknown, so one draft tries it, not free for all */
    const double slope = (p->fwd[lo] - p->fwd[lo2]) / (double)(lo - lo2);
    if (slope > 0) return p->fwd[lo] + slope * (double)(T - lo);
  }
  const int64_t ref = lo > 0 ? lo : hi;
  if (p->by_fixed <= 0 || ref < 1) return -1;
  if (prior) *prior = 1;
  return p->fwd[ref] * trunk_bytes(p, T) / trunk_bytes(p, ref);
}
static double fwd_time(const q35_draft_policy *p, int64_t T) { return fwd_time_p(p, T, NULL); }

/* H(B): a head pass over B rows (0 for none); that of the nearest measured size where B is not
 * measured (the pass reads the head's weights once for all its rows); when none is, the bytes
 * model's at spb seconds a byte (the plain step's), or 0 without one (a pass not measured yet
 * counts as free, so it gets tried). */
static double head_time(const q35_draft_policy *p, int32_t B, double spb) {
  if (B <= 0) return 0;
  {
    int any = 0;
    for (int32_t i = 1; i <= Q35_POL_BMAX && !any; i++) any = p->head_n[i] != 0;
    if (!any) return spb * head_bytes(p, B);
  }
  if (B > Q35_POL_BMAX) B = Q35_POL_BMAX;
  for (int32_t dlt = 0; dlt < Q35_POL_BMAX; dlt++) {
    if (B - dlt >= 1 && p->head_n[B - dlt]) return p->head[B - dlt];
    if (B + dlt <= Q35_POL_BMAX && p->head_n[B + dlt]) return p->head[B + dlt];
  }
  return 0;
}

/* The extra step time of one more token after T: >= 0, 0 when unknown (tried first). */
static double fwd_delta(const q35_draft_policy *p, int64_t T) {
  const double a = fwd_time(p, T), b = fwd_time(p, T + 1);
  return a < 0 || b < 0 || b < a ? 0 : b - a;
}

#define PROBE_FIRST 32
#define PROBE_MAX Q35_POL_PROBE_MAX

int q35_draft_policy_probe(q35_draft_policy *p, int32_t n, int32_t sum) {
  if (!p->probe_every) {
    p->probe_every = PROBE_FIRST;
    p->next_probe = PROBE_FIRST;
    p->probe_dir = 1;
  }
  if (n == p->last_n && sum != p->last_sum) { /* the plan moved: look around more often again */
    p->probe_every = PROBE_FIRST;
    if (p->next_probe > p->rounds + PROBE_FIRST) p->next_probe = p->rounds + PROBE_FIRST;
  }
  p->last_n = n;
  p->last_sum = sum;
  if (++p->rounds < p->next_probe) return 0;
  const int dir = p->probe_dir;
  p->probe_dir = -dir;
  if (p->probe_every < PROBE_MAX) p->probe_every *= 2;
  p->next_probe = p->rounds + p->probe_every;
  return dir < 0 && sum == 0 ? 1 : dir; /* nothing to take away: look up instead */
}

void q35_draft_policy_plan(const q35_draft_policy *p, int32_t n, const double *acc, const int32_t *dmax, int64_t T0,
                           double n_out0, const double *first, int probe, int32_t *d) {
  for (int32_t i = 0; i < n; i++) d[i] = 0;
  double t = fwd_time(p, T0);
  /* the step without drafts is measured first: itself, not interpolated between neighbours (at
     3 rows left of 4, F(3) between a 1-row F(2) and F(4) made one draft look free every step,
     and F(3) never got measured) */
  if (n < 1 || t <= 0 || (T0 <= Q35_POL_TMAX && !p->fwd_n[T0])) return;
  int32_t in_pass[Q35_DRAFT_MAX + 2] = {0}; /* rows in head pass j (the pass making draft j) */
  double N = n_out0 > 0 ? n_out0 : 1;
  int64_t T = T0;
  const double spb = sec_per_byte(p, T0);
  for (;;) {
    /* a step size not measured yet counts as the bytes model says (free without one), so one
       draft gets it tried and measured where the model says it may pay; one unmeasured size per
       step (not every draft of every row: at 4 rows the first such step would carry 4 x dmax
       drafts, each a head pass and a verified token that rarely pays there) */
    int unknown = 0;
    if (fwd_time_p(p, T + 1, &unknown) < 0) unknown = 1;
    int32_t best = -1;
    double best_rate = N / t, bN = 0, bt = 0;
    for (int32_t i = 0; i < n; i++) {
      if (d[i] >= dmax[i] || d[i] >= Q35_DRAFT_MAX) continue;
      const int32_t j = d[i] + 1;
      const double dN = pow(acc[i], j);
      const double dt = fwd_delta(p, T) + head_time(p, in_pass[j] + 1, spb) - head_time(p, in_pass[j], spb) +
                        (j == 1 && first ? spb * first[i] : 0);
      const double rate = (N + dN) / (t + dt);
      if (rate > best_rate * (1 + 1e-9)) {
        best = i;
        best_rate = rate;
        bN = dN;
        bt = dt;
      }
    }
    if (best < 0) break;
    in_pass[++d[best]]++;
    T++;
    N += bN;
    t += bt;
    if (unknown) break;
  }
  if (probe > 0) { /* one draft more: on the row most likely to use it */
    int32_t b = -1;
    for (int32_t i = 0; i < n; i++)
      if (d[i] < dmax[i] && (b < 0 || acc[i] > acc[b])) b = i;
    if (b >= 0) d[b]++;
  } else if (probe < 0) { /* one fewer: on the row least likely to use it */
    int32_t b = -1;
    for (int32_t i = 0; i < n; i++)
      if (d[i] > 0 && (b < 0 || acc[i] < acc[b])) b = i;
    if (b >= 0) d[b]--;
  }
}

double q35_draft_policy_rate(const q35_draft_policy *p, int32_t n, const double *acc, const int32_t *d, int64_t T0,
                             double n_out0, const double *first) {
  const double t0 = fwd_time(p, T0);
  if (t0 <= 0 || (T0 <= Q35_POL_TMAX && !p->fwd_n[T0])) return 0;
  const double spb = sec_per_byte(p, T0);
  int32_t in_pass[Q35_DRAFT_MAX + 2] = {0};
  double N = n_out0 > 0 ? n_out0 : 1, extra = 0;
  int64_t T = T0;
  for (int32_t i = 0; i < n; i++) {
    double a = 1;
    for (int32_t j = 1; j <= d[i] && j <= Q35_DRAFT_MAX; j++) {
      a *= acc[i];
      N += a;
      in_pass[j]++;
    }
    T += d[i];
    if (d[i] > 0 && first) extra += spb * first[i];
  }
  /* a size measured once holds a provisional sample (ema: often a one-off, e.g. the first verify
     step at one row read 2.0x the plain step, the steady ratio 1.3x): the bytes model's prior
     instead, else a probe meant to re-measure it is vetoed by the very sample it would replace
     (a one-stream server whose first draft missed then never drafted again) */
  double t = T != T0 && T <= Q35_POL_TMAX && p->fwd_n[T] == 1 && p->by_fixed > 0
                 ? t0 * trunk_bytes(p, T) / trunk_bytes(p, T0)
                 : fwd_time(p, T);
  if (t < t0) t = t0; /* unknown (no bytes model), or measured cheaper: no dearer than the plain step */
  for (int32_t j = 1; j <= Q35_DRAFT_MAX; j++) t += head_time(p, in_pass[j], spb);
  return N / (t + extra);
}

void q35_draft_policy_hold_cold(const q35_draft_policy *p, int32_t n, const double *acc, int32_t *dmax, const int *cold,
                                int32_t rows, const double *first) {
  if (rows < 1 || n < 1) return;
  int any = 0;
  for (int32_t i = 0; i < n && !any; i++) any = cold[i] && dmax[i] > 0;
  if (!any) return;
  int32_t dg[n];
  q35_draft_policy_plan(p, n, acc, dmax, rows, rows, first, 0, dg);
  for (int32_t i = 0; i < n; i++)
    if (cold[i] && dg[i] == 0) dmax[i] = 0;
}
