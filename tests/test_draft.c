/*
 * test_draft.c - speculative decoding through the public API (q35.h "Speculative decoding"):
 * rows with n_draft on sessions made with draft_max must emit exactly the tokens, log-probabilities
 * and top alternatives (bit for bit) of one-token-per-step decoding on a session without drafts:
 *   - one row: greedy, seeded sampling with top-k / top-p / min-p, penalties and a logit bias,
 *     drafts 1 to 3, fixed and adaptive draft length, a reduced draft vocabulary;
 *   - several rows in one step: a drafting row beside a plain session, a draft session that does
 *     not draft, and a prompt prefilled in chunks in the same steps;
 *   - the head's state in snapshots: a session restored from a snapshot taken mid-prompt drafts
 *     exactly as the session it was taken from (the same accepted counts every step), and so does
 *     a fresh session fed the prompt in other chunks (the head is chunking invariant);
 *   - head upkeep that starts late (model/mtp.h): the adaptive plan, held to a profile where drafts
 *     never pay, then to one where they always do, keeps a new session cold (its head skips the
 *     prompt but a recent window, no head pass runs: the skipped entries stay zeros), then drafts
 *     after one catch-up pass; and warm -> cold -> warm: the same tokens and log-probabilities as
 *     plain decoding, and snapshots taken while the head is cold (holes and a window pending) or
 *     partly caught up restore to the same drafts step by step;
 *   - q35_session_draft_keep: trimming a step's emitted tokens at random keeps the stream equal;
 *   - bad input: n_draft on a plain session, above draft_max, on a row of two tokens, without
 *     outputs; draft_max without an MTP head or out of range; draft_vocab out of range; keep
 *     without a drafting step or past what it emitted; a refused step moves nothing;
 *   - the adaptive policy (engine/draft_policy.c) on synthetic step times: drafts on a
 *     memory-bound profile at one row, none at four rows where each token adds weights to read,
 *     none on a compute-bound profile or at low acceptance, none before the plain step is timed,
 *     one draft (not every row's) to try a step size not measured yet.
 * The model: q35_tiny_write with an MTP head agreeing with the trunk on ~80 % of tokens, so drafts
 * are accepted, partly accepted and rejected.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/context.h"
#include "export/tiny.h"
#include "model/mtp.h"
#include "q35.h"

#define N_GEN 40
#define MAXD 3

/* 70 tokens: longer than Q35_MTP_PEND_FLUSH, so the head runs over the prompt's pairs in passes
 * that differ with the chunking */
static const int32_t PROMPT[] = {
    5, 17, 33, 2, 91, 7, 60, 11, 250, 3, 42, 199, 8, 77, 140, 6, 31, 400,
    12, 9, 166, 486, 78, 203, 334, 25, 38, 421, 275, 49, 188, 299, 30, 466, 260, 110,
    20, 45, 223, 215, 36, 124, 47, 283, 218, 31, 424, 290, 64, 486, 115, 323, 322, 299,
    486, 32, 296, 300, 204, 26, 114, 24, 286, 440, 69, 149, 215, 74, 277, 61};
#define N_PROMPT ((int32_t)(sizeof PROMPT / sizeof PROMPT[0]))

typedef struct {
  int32_t tok[N_GEN + MAXD + 1];
  float lp[N_GEN + MAXD + 1];
  int32_t top[N_GEN + MAXD + 1][3];
  float toplp[N_GEN + MAXD + 1][3];
  int32_t n;
  long drafted, accepted;
  int32_t emitted[N_GEN]; /* per step */
  int32_t n_steps;
} stream;

static q35_session *new_session(q35_model *m, int32_t draft_max, int32_t vocab) {
  q35_err err;
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 160;
  sp.draft_max = draft_max;
  sp.draft_vocab = vocab;
  q35_session *s = q35_session_new(m, &sp, &err);
  CHECK(s != NULL, "session: %s", err.msg);
  return s;
}

static void put(stream *st, const q35_output *o) {
  st->tok[st->n] = o->token;
  st->lp[st->n] = o->logprob;
  memcpy(st->top[st->n], o->top_ids, sizeof st->top[0]);
  memcpy(st->toplp[st->n], o->top_logprobs, sizeof st->toplp[0]);
  st->n++;
}

static int same_stream(const stream *a, const stream *b, int32_t n) {
  return !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)n) && !memcmp(a->lp, b->lp, sizeof(float) * (size_t)n) &&
         !memcmp(a->top, b->top, sizeof a->top[0] * (size_t)n) &&
         !memcmp(a->toplp, b->toplp, sizeof a->toplp[0] * (size_t)n);
}

/* One generation driver: the state of one sequence decoding with (or without) drafts. */
typedef struct {
  q35_session *s;
  q35_sampling sp;
  int32_t hist[N_PROMPT + N_GEN + MAXD + 2];
  q35_output outs[MAXD + 1];
  q35_row row;
  stream st;
  int32_t fed;   /* prompt tokens fed */
  int32_t chunk; /* prompt chunk per step */
  int32_t nd;    /* drafts per decode step (cycled when < 0: 0, 1, 2, ...) */
  int32_t cur;
} seqgen;

static void seq_init(seqgen *g, q35_session *s, const q35_sampling *sp, int32_t chunk, int32_t nd) {
  memset(g, 0, sizeof *g);
  g->s = s;
  g->sp = *sp;
  g->chunk = chunk;
  g->nd = nd;
  memcpy(g->hist, PROMPT, sizeof PROMPT);
}

/* The row of the next step (0: done). */
static int seq_row(seqgen *g) {
  q35_row *r = &g->row;
  memset(r, 0, sizeof *r);
  r->session = g->s;
  r->sampling = &g->sp;
  r->history = g->hist;
  r->n_prompt = N_PROMPT;
  r->n_top_logprobs = 3;
  r->outputs = g->outs;
  if (g->st.n >= N_GEN) return 0;
  if (g->fed < N_PROMPT) {
    const int32_t take = N_PROMPT - g->fed < g->chunk ? N_PROMPT - g->fed : g->chunk;
    r->tokens = PROMPT + g->fed;
    r->n_tokens = take;
    if (g->fed + take < N_PROMPT) r->n_outputs = Q35_OUTPUTS_NONE;
    g->fed += take;
  } else {
    r->tokens = &g->cur;
    r->n_tokens = 1;
    int32_t nd = g->nd >= 0 ? g->nd : g->st.n_steps % 3;
    if (nd > N_GEN - g->st.n - 1) nd = N_GEN - g->st.n - 1;
    r->n_draft = nd;
  }
  r->n_history = N_PROMPT + g->st.n;
  g->sp.draw_index = (uint64_t)g->st.n;
  return 1;
}

static void seq_done(seqgen *g) {
  const q35_row *r = &g->row;
  if (r->n_outputs == Q35_OUTPUTS_NONE) return;
  const int32_t n = r->n_emitted > 0 ? r->n_emitted : 1;
  if (r->n_tokens == 1 || g->fed == N_PROMPT) g->st.emitted[g->st.n_steps++ % N_GEN] = n;
  g->st.drafted += r->n_drafted;
  g->st.accepted += r->n_emitted > 0 ? r->n_emitted - 1 : 0;
  for (int32_t j = 0; j < n; j++) {
    q35_output o;
    if (r->n_emitted > 0) o = r->outputs[j];
    else {
      o.token = r->token;
      o.logprob = r->logprob;
      memcpy(o.top_ids, r->top_ids, sizeof o.top_ids);
      memcpy(o.top_logprobs, r->top_logprobs, sizeof o.top_logprobs);
    }
    g->hist[N_PROMPT + g->st.n] = o.token;
    put(&g->st, &o);
  }
  g->cur = g->st.tok[g->st.n - 1];
}

/* Generate on one session alone. */
static void run_one(q35_model *m, q35_session *s, const q35_sampling *sp, int32_t chunk, int32_t nd, stream *out) {
  q35_err err;
  seqgen g;
  seq_init(&g, s, sp, chunk, nd);
  q35_session_reset(s);
  while (seq_row(&g)) {
    if (q35_step(m, &g.row, 1, &err)) {
      CHECK(0, "step: %s", err.msg);
      break;
    }
    seq_done(&g);
  }
  *out = g.st;
}

static q35_sampling sampling(int kind) {
  q35_sampling p = q35_sampling_default();
  static const q35_logit_bias bias[] = {{7, 2.5f}, {91, -1.0f}};
  switch (kind) {
    case 0: p.temperature = 0; break;
    case 1: p.seed = 7, p.temperature = 0.8f; break;
    case 2: p.seed = 11, p.temperature = 1.3f, p.top_k = 5, p.top_p = 0.9f, p.min_p = 0.05f; break;
    default:
      p.seed = 5, p.temperature = 1.0f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.3f;
      p.repetition_penalty = 1.3f, p.logit_bias = bias, p.n_logit_bias = 2;
      break;
  }
  return p;
}

/* Under the sanitizers (Q35_SANITIZE_RUN=1) the single-row sweep takes two samplings and two
 * draft lengths (the rest of the test is unchanged). */
static int lean;

static void test_single(q35_model *m) {
  q35_session *plain = new_session(m, 0, 0), *ds = new_session(m, MAXD, 0), *dv = new_session(m, MAXD, 200);
  long drafted = 0, accepted = 0;
  for (int kind = 0; kind < 4; kind += lean ? 3 : 1) {
    const q35_sampling sp = sampling(kind);
    stream ref, got;
    run_one(m, plain, &sp, 7, 0, &ref);
    CHECK(ref.n == N_GEN && ref.drafted == 0, "reference: %d tokens", ref.n);
    for (int adapt = 0; adapt < 2; adapt++) {
      q35_context_draft_adapt(q35_model_context(m), adapt);
      for (int32_t nd = 1; nd <= MAXD; nd += lean ? 2 : 1) {
        run_one(m, ds, &sp, 7, nd, &got);
        CHECK(got.n >= N_GEN && same_stream(&ref, &got, N_GEN), "sampling %d, adapt %d, --draft %d differs", kind,
              adapt, nd);
        CHECK(adapt || got.drafted > 0, "sampling %d, --draft %d: nothing drafted", kind, nd);
        drafted += got.drafted;
        accepted += got.accepted;
      }
      run_one(m, dv, &sp, 7, 2, &got);
      CHECK(got.n >= N_GEN && same_stream(&ref, &got, N_GEN), "sampling %d, adapt %d, draft vocabulary 200 differs",
            kind, adapt);
    }
  }
  q35_context_draft_adapt(q35_model_context(m), 0);
  CHECK(accepted > 0 && accepted < drafted, "accepted %ld of %ld drafts (need some of each)", accepted, drafted);
  printf("single rows: %ld of %ld drafts accepted\n", accepted, drafted);
  q35_session_free(plain);
  q35_session_free(ds);
  q35_session_free(dv);
}

/* Three sequences stepped together: a drafting one (3 drafts), a plain session, a draft session
 * cycling 0/1/2 drafts whose prompt goes in chunks of 3 (prefill rows beside decode rows). */
static void test_batch(q35_model *m) {
  q35_err err;
  q35_session *a = new_session(m, MAXD, 0), *b = new_session(m, 0, 0), *c = new_session(m, MAXD, 0);
  q35_session *ref_s = new_session(m, 0, 0);
  const q35_sampling spa = sampling(1), spb = sampling(2), spc = sampling(3);
  stream ra, rb, rc;
  run_one(m, ref_s, &spa, 20, 0, &ra);
  run_one(m, ref_s, &spb, 20, 0, &rb);
  run_one(m, ref_s, &spc, 20, 0, &rc);
  for (int adapt = 0; adapt < 2; adapt++) {
    q35_context_draft_adapt(q35_model_context(m), adapt);
    seqgen g[3];
    q35_session_reset(a);
    q35_session_reset(b);
    q35_session_reset(c);
    seq_init(&g[0], a, &spa, 20, 3);
    seq_init(&g[1], b, &spb, 20, 0);
    seq_init(&g[2], c, &spc, 3, -1);
    for (int it = 0; it < 200; it++) {
      q35_row rows[3];
      seqgen *who[3];
      int n = 0;
      for (int i = 0; i < 3; i++)
        if (seq_row(&g[i])) who[n] = &g[i], rows[n++] = g[i].row;
      if (!n) break;
      if (q35_step(m, rows, n, &err)) {
        CHECK(0, "batch step: %s", err.msg);
        break;
      }
      for (int i = 0; i < n; i++) {
        who[i]->row = rows[i];
        seq_done(who[i]);
      }
    }
    CHECK(same_stream(&ra, &g[0].st, N_GEN), "batch, adapt %d: the drafting row differs", adapt);
    CHECK(same_stream(&rb, &g[1].st, N_GEN), "batch, adapt %d: the plain row differs", adapt);
    CHECK(same_stream(&rc, &g[2].st, N_GEN), "batch, adapt %d: the chunked row differs", adapt);
    CHECK(adapt || (g[0].st.drafted > 0 && g[2].st.drafted > 0), "batch: nothing drafted");
  }
  q35_context_draft_adapt(q35_model_context(m), 0);
  q35_session_free(a);
  q35_session_free(b);
  q35_session_free(c);
  q35_session_free(ref_s);
}

/* Decode N_GEN tokens with 2 drafts from where the session stands (the prompt fed up to its last
 * token, which the first row feeds). */
static void decode_from(q35_model *m, q35_session *s, const q35_sampling *sp, stream *out) {
  q35_err err;
  seqgen g;
  seq_init(&g, s, sp, 1, 2);
  g.fed = N_PROMPT;
  g.cur = PROMPT[N_PROMPT - 1];
  /* the first row: the prompt's last token, sampled without drafts */
  g.row = (q35_row){0};
  while (seq_row(&g)) {
    if (q35_step(m, &g.row, 1, &err)) {
      CHECK(0, "step: %s", err.msg);
      break;
    }
    seq_done(&g);
  }
  *out = g.st;
}

static void test_snapshot(q35_model *m) {
  q35_err err;
  const q35_sampling sp = sampling(1);
  q35_session *s = new_session(m, 2, 0), *f = new_session(m, 2, 0);
  /* the session: 10 prompt tokens, a snapshot, the rest but the last, then decoding */
  CHECK(!q35_session_eval(s, PROMPT, 10, 4, NULL, 0, &err), "eval: %s", err.msg);
  q35_snapshot *snap = q35_session_snapshot(s, &err);
  CHECK(snap != NULL, "snapshot: %s", err.msg);
  CHECK(!q35_session_eval(s, PROMPT + 10, N_PROMPT - 11, 0, NULL, 0, &err), "eval: %s", err.msg);
  stream first, again, fresh;
  decode_from(m, s, &sp, &first);
  /* restored from the snapshot: the same tokens and the same accepted counts step by step */
  CHECK(snap && !q35_session_restore(s, snap, &err), "restore: %s", err.msg);
  CHECK(!q35_session_eval(s, PROMPT + 10, N_PROMPT - 11, 0, NULL, 0, &err), "eval: %s", err.msg);
  decode_from(m, s, &sp, &again);
  CHECK(same_stream(&first, &again, N_GEN), "restored session: tokens differ");
  CHECK(first.n_steps == again.n_steps && !memcmp(first.emitted, again.emitted, sizeof(int32_t) * (size_t)first.n_steps),
        "restored session drafts differently (steps %d vs %d)", first.n_steps, again.n_steps);
  CHECK(first.accepted > 0, "nothing accepted");
  /* a fresh session fed the prompt one token per eval: the same drafts */
  for (int32_t i = 0; i < N_PROMPT - 1; i++) q35_session_eval(f, PROMPT + i, 1, 0, NULL, 0, &err);
  decode_from(m, f, &sp, &fresh);
  CHECK(same_stream(&first, &fresh, N_GEN), "fresh session: tokens differ");
  CHECK(first.n_steps == fresh.n_steps && !memcmp(first.emitted, fresh.emitted, sizeof(int32_t) * (size_t)first.n_steps),
        "a fresh session fed in other chunks drafts differently");
  /* a snapshot of a session without drafts restored into one with drafts: exact, fewer drafts */
  q35_session *p = new_session(m, 0, 0);
  q35_session_eval(p, PROMPT, N_PROMPT - 1, 0, NULL, 0, &err);
  q35_snapshot *ps = q35_session_snapshot(p, &err);
  stream other;
  CHECK(ps && !q35_session_restore(f, ps, &err), "restore across: %s", err.msg);
  decode_from(m, f, &sp, &other);
  CHECK(same_stream(&first, &other, N_GEN), "a snapshot without the head's state: tokens differ");
  q35_snapshot_free(ps);
  q35_snapshot_free(snap);
  q35_session_free(p);
  q35_session_free(s);
  q35_session_free(f);
  printf("snapshots: %ld of %ld drafts accepted, the same every step after a restore\n", first.accepted,
         first.drafted);
}

/* The adaptive plan held to a profile (set before every step, so the times the steps measure do
 * not matter, and no probes): drafts always pay (flat step time, free head) or never do. */
static void force_policy(q35_model *m, int draft) {
  q35_draft_policy *p = &q35_model_context(m)->pol;
  for (int T = 1; T <= Q35_POL_TMAX; T++) p->fwd[T] = draft ? 0.010 : 0.010 * T, p->fwd_n[T] = 1;
  for (int B = 1; B <= Q35_POL_BMAX; B++) p->head[B] = draft ? 1e-9 : 1.0, p->head_n[B] = 1;
  p->probe_every = 1024;
  p->next_probe = p->rounds + 1000;
}

/* Schedules of the plan by tokens generated so far: 0 declines while n < 12 and drafts after; 1
 * drafts while n < 8, declines while n < 30 (past Q35_MTP_IDLE_STEPS: the session turns cold),
 * then drafts again. */
static int sched_drafts(int sched, int32_t n) { return sched == 0 ? n >= 12 : n < 8 || n >= 30; }

/* Whether the head's K and V entries [from, to) are all zeros (skipped, never run through the head). */
static int head_zero(const q35_session *s, int32_t from, int32_t to) {
  const q35_mtp_cache *mc = s->mtp;
  const unsigned char *k = (const unsigned char *)mc->k, *v = (const unsigned char *)mc->v;
  for (size_t i = (size_t)from * mc->s.kv_row_bytes; i < (size_t)to * mc->s.kv_row_bytes; i++)
    if (k[i] || v[i]) return 0;
  return 1;
}

/* Step g to the end under schedule sched; with at_n >= 0 stop when at_n tokens are out (for a
 * snapshot). Checks the head's invariant every step; while the session has never drafted, that
 * the head ran no pass and wrote nothing (its skipped entries are zeros written only when the
 * head next runs: zpos 0); and after its first drafts, that the entries it skipped before them
 * read zeros (the cache may have held another session's). */
static void run_sched(q35_model *m, seqgen *g, int sched, int32_t at_n, int *ever_drafted) {
  q35_err err;
  while ((at_n < 0 || g->st.n < at_n) && seq_row(g)) {
    force_policy(m, g->fed == N_PROMPT && g->row.n_tokens == 1 && sched_drafts(sched, g->st.n));
    const int32_t mpos0 = g->s->mtp->s.pos, never = !*ever_drafted;
    if (q35_step(m, &g->row, 1, &err)) {
      CHECK(0, "step: %s", err.msg);
      break;
    }
    const int32_t n0 = g->st.n;
    seq_done(g);
    const q35_session *s = g->s;
    const q35_mtp_cache *mc = s->mtp;
    CHECK(mc->s.pos + mc->n_pend == q35_session_pos(s) && mc->n_pend >= 1 && mc->n_pend <= Q35_MTP_PEND_FLUSH,
          "schedule %d at %d: head position %d + %d pending != %d", sched, n0, mc->s.pos, mc->n_pend,
          q35_session_pos(s));
    CHECK(g->row.n_drafted == 0 || sched_drafts(sched, n0), "schedule %d: drafted at %d where the plan declines",
          sched, n0);
    if (g->row.n_drafted > 0) *ever_drafted = 1;
    if (!*ever_drafted) CHECK(mc->zpos == 0, "schedule %d at %d: the cold head ran a pass", sched, n0);
    if (never && *ever_drafted)
      CHECK(head_zero(s, 0, mpos0), "schedule %d at %d: entries skipped before the first drafts are not zeros", sched,
            n0);
  }
}

static void test_late_start(q35_model *m) {
  q35_err err;
  const q35_sampling sp = sampling(1);
  q35_session *plain = new_session(m, 0, 0), *s = NULL;
  stream ref;
  run_one(m, plain, &sp, 20, 0, &ref);
  q35_context_draft_adapt(q35_model_context(m), 1);
  for (int sched = 0; sched < 2; sched++) {
    seqgen g, at_cold, at_warm;
    q35_session_free(s);
    s = new_session(m, 2, 0); /* new: cold (a reset one keeps its idle count) */
    { /* what another session may have left in the head's cache: the skipped entries must read zeros anyway */
      const size_t bytes = (size_t)s->mtp->s.params.n_ctx * s->mtp->s.kv_row_bytes;
      memset(s->mtp->k, 0x5a, bytes);
      memset(s->mtp->v, 0x5a, bytes);
    }
    seq_init(&g, s, &sp, 20, 2);
    int drafted = 0, idle_cold = 0, idle_warm = 0;
    /* schedule 0: a snapshot while cold (n = 6: the prompt skipped but its last 16, no head pass
       yet) and one after the catch-up (n = 20) */
    q35_snapshot *cold = NULL, *warm = NULL;
    if (sched == 0) {
      run_sched(m, &g, sched, 6, &drafted);
      CHECK(s->mtp->s.pos > 0 && s->mtp->idle >= Q35_MTP_IDLE_STEPS && !drafted,
            "a new session declined by the plan is not cold (head position %d, idle %d)", s->mtp->s.pos,
            s->mtp->idle);
      cold = q35_session_snapshot(s, &err);
      at_cold = g;
      idle_cold = s->mtp->idle;
      run_sched(m, &g, sched, 20, &drafted);
      CHECK(drafted && s->mtp->idle == 0, "schedule 0: no drafts after the plan turned (idle %d)", s->mtp->idle);
      warm = q35_session_snapshot(s, &err);
      at_warm = g;
      idle_warm = s->mtp->idle;
      CHECK(cold && warm, "snapshot: %s", err.msg);
    }
    if (sched == 1) { /* warm -> cold: 22 steps declined */
      run_sched(m, &g, sched, 30, &drafted);
      CHECK(drafted && s->mtp->idle >= Q35_MTP_IDLE_STEPS, "schedule 1: not cold after the declined stretch (idle %d)",
            s->mtp->idle);
    }
    run_sched(m, &g, sched, -1, &drafted);
    CHECK(same_stream(&ref, &g.st, N_GEN), "schedule %d: late head upkeep changed the tokens", sched);
    CHECK(g.st.accepted > 0, "schedule %d: nothing accepted after the late start", sched);
    if (sched == 1)
      CHECK(s->mtp->idle == 0 && g.st.drafted > 0, "schedule 1: no drafts after the cold stretch");
    printf("late head upkeep, schedule %d: %ld of %ld drafts accepted, tokens as plain decoding\n", sched,
           g.st.accepted, g.st.drafted);
    /* restored while cold / warm: the same tokens and the same emitted counts step by step */
    for (int w = 0; w < 2 && cold && warm; w++) {
      seqgen h = w ? at_warm : at_cold;
      const int32_t step0 = h.st.n_steps;
      CHECK(!q35_session_restore(s, w ? warm : cold, &err), "restore: %s", err.msg);
      /* the plan's recent choices for the session are not the snapshot's (they follow the load,
         model/mtp.h): set back here so the restored run replays the original step by step */
      s->mtp->idle = w ? idle_warm : idle_cold;
      int d2 = 1; /* (the cold run's head entries were written after the snapshot: not checked zero) */
      run_sched(m, &h, sched, -1, &d2);
      CHECK(same_stream(&ref, &h.st, N_GEN), "restored %s: tokens differ", w ? "warm" : "cold");
      CHECK(h.st.n_steps == g.st.n_steps &&
                !memcmp(h.st.emitted + step0, g.st.emitted + step0, sizeof(int32_t) * (size_t)(g.st.n_steps - step0)),
            "restored %s: drafts differ from the run the snapshot was taken in", w ? "warm" : "cold");
    }
    q35_snapshot_free(cold);
    q35_snapshot_free(warm);
  }
  /* the head's state absent: a plain session's snapshot (prompt fed) restored into a cold session */
  q35_session *p2 = new_session(m, 0, 0);
  CHECK(!q35_session_eval(p2, PROMPT, N_PROMPT - 1, 0, NULL, 0, &err), "eval: %s", err.msg);
  q35_snapshot *ps = q35_session_snapshot(p2, &err);
  CHECK(ps && !q35_session_restore(s, ps, &err), "restore across: %s", err.msg);
  seqgen g;
  seq_init(&g, s, &sp, 1, 2);
  g.fed = N_PROMPT;
  g.cur = PROMPT[N_PROMPT - 1];
  int drafted = 1;
  run_sched(m, &g, 0, -1, &drafted);
  CHECK(same_stream(&ref, &g.st, N_GEN), "a snapshot without the head's state, then a late start: tokens differ");
  q35_snapshot_free(ps);
  q35_session_free(p2);
  q35_context_draft_adapt(q35_model_context(m), 0);
  q35_session_free(plain);
  q35_session_free(s);
}

static void test_keep(q35_model *m) {
  q35_err err;
  const q35_sampling sp = sampling(2);
  q35_session *plain = new_session(m, 0, 0), *s = new_session(m, MAXD, 0);
  stream ref;
  run_one(m, plain, &sp, 20, 0, &ref);
  seqgen g;
  seq_init(&g, s, &sp, 20, MAXD);
  uint32_t rng = 12345;
  int trims = 0;
  while (seq_row(&g)) {
    if (q35_step(m, &g.row, 1, &err)) {
      CHECK(0, "step: %s", err.msg);
      break;
    }
    if (g.row.n_emitted > 1) {
      rng = rng * 1103515245u + 12345u;
      const int32_t keep = 1 + (int32_t)((rng >> 16) % (uint32_t)g.row.n_emitted);
      CHECK(q35_session_draft_keep(s, g.row.n_emitted + 1, &err) != 0, "keep past the emitted tokens accepted");
      CHECK(!q35_session_draft_keep(s, keep, &err), "keep %d: %s", keep, err.msg);
      trims += keep < g.row.n_emitted;
      g.row.n_emitted = keep;
      g.row.token = g.row.outputs[keep - 1].token;
    }
    seq_done(&g);
  }
  CHECK(trims > 0, "no step was trimmed");
  CHECK(same_stream(&ref, &g.st, N_GEN), "trimmed steps: the stream differs");
  CHECK(q35_session_draft_keep(plain, 1, &err) != 0, "keep on a session without drafts accepted");
  q35_session_free(plain);
  q35_session_free(s);
}

static void test_errors(q35_model *m, q35_model *nomtp) {
  q35_err err;
  q35_session *plain = new_session(m, 0, 0), *s = new_session(m, 2, 0);
  const q35_sampling sp = sampling(0);
  q35_output outs[4];
  const int32_t two[] = {5, 6};
  q35_row r = {0};
  r.sampling = &sp;
  r.n_top_logprobs = -1;
  r.tokens = two;
  r.n_tokens = 1;
  r.outputs = outs;
  r.n_draft = 1;
  r.session = plain;
  CHECK(q35_step(m, &r, 1, &err) != 0 && strstr(err.msg, "draft_max"), "n_draft on a plain session: %s", err.msg);
  r.session = s;
  CHECK(!q35_session_eval(s, PROMPT, 5, 0, NULL, 0, &err), "eval: %s", err.msg);
  const int32_t pos = q35_session_pos(s);
  r.n_draft = 3;
  CHECK(q35_step(m, &r, 1, &err) != 0 && strstr(err.msg, "n_draft"), "n_draft above draft_max: %s", err.msg);
  r.n_draft = 1;
  r.n_tokens = 2;
  CHECK(q35_step(m, &r, 1, &err) != 0 && strstr(err.msg, "one token"), "n_draft on two tokens: %s", err.msg);
  r.n_tokens = 1;
  r.outputs = NULL;
  CHECK(q35_step(m, &r, 1, &err) != 0 && strstr(err.msg, "outputs"), "n_draft without outputs: %s", err.msg);
  r.outputs = outs;
  r.n_draft = -2;
  CHECK(q35_step(m, &r, 1, &err) != 0, "n_draft -2 accepted");
  CHECK(q35_session_pos(s) == pos, "a refused step moved the session (%d -> %d)", pos, q35_session_pos(s));
  CHECK(q35_session_draft_keep(s, 1, &err) != 0, "keep without a drafting step accepted");
  q35_session_params p = q35_session_default_params();
  p.draft_max = 2;
  CHECK(q35_session_new(nomtp, &p, &err) == NULL && strstr(err.msg, "MTP"), "draft_max without a head: %s", err.msg);
  CHECK(!q35_model_has_mtp(nomtp) && q35_model_has_mtp(m), "q35_model_has_mtp");
  p.draft_max = Q35_DRAFT_MAX + 1;
  CHECK(q35_session_new(m, &p, &err) == NULL && strstr(err.msg, "draft_max"), "draft_max 17: %s", err.msg);
  p.draft_max = 2;
  p.draft_vocab = q35_model_n_vocab(m) + 1;
  CHECK(q35_session_new(m, &p, &err) == NULL && strstr(err.msg, "draft_vocab"), "draft_vocab: %s", err.msg);
  p.draft_max = 0;
  p.draft_vocab = 10;
  CHECK(q35_session_new(m, &p, &err) == NULL, "draft_vocab without draft_max accepted");
  /* the state a session with drafts holds is counted */
  p = q35_session_default_params();
  const uint64_t b0 = q35_session_state_bytes(m, &p, NULL);
  p.draft_max = 2;
  CHECK(q35_session_state_bytes(m, &p, NULL) > b0, "the head's state is not counted");
  q35_session_free(plain);
  q35_session_free(s);
}

static void test_policy(void) {
  q35_draft_policy p;
  memset(&p, 0, sizeof p);
  double acc[4] = {0.8, 0.8, 0.8, 0.8};
  int32_t dmax[4] = {3, 3, 3, 3}, d[4];
  q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, d);
  CHECK(d[0] == 0, "no times measured: %d drafts", d[0]);
  /* memory-bound, MoE-like: every token of a step adds weights to read (2 ms), a step 10 ms */
  for (int T = 1; T <= Q35_POL_TMAX; T++) q35_draft_policy_step(&p, T, 0.010 + 0.002 * T);
  for (int B = 1; B <= 8; B++) q35_draft_policy_head(&p, B, 0.003);
  q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, d);
  CHECK(d[0] >= 1, "one row, memory-bound, acceptance 0.8: %d drafts", d[0]);
  q35_draft_policy_plan(&p, 4, acc, dmax, 4, 4, NULL, 0, d);
  CHECK(d[0] + d[1] + d[2] + d[3] == 0, "four rows: %d %d %d %d drafts", d[0], d[1], d[2], d[3]);
  double low = 0.1;
  q35_draft_policy_plan(&p, 1, &low, dmax, 1, 1, NULL, 0, d);
  CHECK(d[0] == 0, "acceptance 0.1: %d drafts", d[0]);
  q35_draft_policy_plan(&p, 4, acc, dmax, 4, 4, NULL, 1, d);
  CHECK(d[0] + d[1] + d[2] + d[3] == 1, "probe +1 at four rows: %d drafts", d[0] + d[1] + d[2] + d[3]);
  q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, -1, d);
  int32_t d1;
  q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, &d1);
  CHECK(d[0] == d1 - 1, "probe -1: %d vs %d", d[0], d1);
  /* compute-bound: a step costs 5 ms per token */
  memset(&p, 0, sizeof p);
  for (int T = 1; T <= Q35_POL_TMAX; T++) q35_draft_policy_step(&p, T, 0.005 * T);
  q35_draft_policy_head(&p, 1, 0.002);
  q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, d);
  CHECK(d[0] == 0, "compute-bound: %d drafts", d[0]);
  /* only the plain step measured: the next size counts as free and gets tried */
  memset(&p, 0, sizeof p);
  q35_draft_policy_step(&p, 1, 0.01);
  q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, d);
  CHECK(d[0] >= 1, "untried sizes are tried: %d drafts", d[0]);
  /* at four rows likewise, but one draft tries the next size, not every row's drafts */
  memset(&p, 0, sizeof p);
  q35_draft_policy_step(&p, 4, 0.04);
  q35_draft_policy_plan(&p, 4, acc, dmax, 4, 4, NULL, 0, d);
  CHECK(d[0] + d[1] + d[2] + d[3] == 1, "an untried size at four rows: %d drafts", d[0] + d[1] + d[2] + d[3]);
  /* three rows between measured sizes 2 and 4: the plain step of 3 is measured before any draft */
  q35_draft_policy_step(&p, 2, 0.02);
  q35_draft_policy_plan(&p, 3, acc, dmax, 3, 3, NULL, 0, d);
  CHECK(d[0] + d[1] + d[2] == 0, "a plain step size only interpolated: %d drafts", d[0] + d[1] + d[2]);
  /* the bytes model as the prior for sizes not measured (the 4-layer 35B-shaped file's profile:
     256 experts of 1.77 MB in 4 layers, 8 used; the head one such layer, 32k output rows), the
     measured steps at 20 GB/s: at four rows an extra token reads ~7 new experts a layer and a
     head pass, 22 % of the step, for 0.5 expected tokens of 4 (12.5 %): no draft, where an
     untried size used to count as free (above: one draft) */
  {
    const double fix = 350e6, exps = 4 * 256 * 1.77e6, fr = 8.0 / 256, hf = 25e6, he = 256 * 1.77e6, ho = 37e6;
    const double spb = 1 / 20e9;
    /* the test's own model of the bytes: the union of the experts T tokens reach at uniform routing */
    double B[8];
    for (int T = 1; T < 8; T++) B[T] = fix + exps * (1 - pow(1 - fr, T));
    const double H1 = hf + he * fr + ho;
    memset(&p, 0, sizeof p);
    p.by_fixed = fix, p.by_exps = exps, p.exp_frac = fr, p.hd_fixed = hf, p.hd_exps = he, p.hd_out = ho;
    q35_draft_policy_step(&p, 4, spb * B[4]);
    double half[4] = {0.5, 0.5, 0.5, 0.5}, ones[4] = {1, 1, 1, 1};
    q35_draft_policy_plan(&p, 4, half, dmax, 4, 4, NULL, 0, d);
    CHECK(d[0] + d[1] + d[2] + d[3] == 0, "bytes prior, four rows at acceptance 0.5: %d drafts",
          d[0] + d[1] + d[2] + d[3]);
    const int32_t none[4] = {0, 0, 0, 0}, one[4] = {1, 0, 0, 0};
    const double r0 = q35_draft_policy_rate(&p, 4, half, none, 4, 4, NULL);
    const double r1 = q35_draft_policy_rate(&p, 4, ones, one, 4, 4, NULL);
    const double want1 = 5 / (spb * B[4] * B[5] / B[4] + spb * H1);
    CHECK(fabs(r0 - 4 / (spb * B[4])) < 1e-9 * r0, "rate without drafts: %.6g vs %.6g", r0, 4 / (spb * B[4]));
    CHECK(fabs(r1 - want1) < 1e-9 * want1, "rate of one draft from the prior: %.6g vs %.6g", r1, want1);
    /* a cold session's catch-up (first[]) is priced: with 400 MB of it (~100 % of a step) a draft
       at one row stops paying */
    memset(&p, 0, sizeof p);
    p.by_fixed = fix, p.by_exps = exps, p.exp_frac = fr, p.hd_fixed = hf, p.hd_exps = he, p.hd_out = ho;
    q35_draft_policy_step(&p, 1, spb * B[1]);
    q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, d);
    CHECK(d[0] >= 1, "bytes prior, one row at acceptance 0.8: %d drafts", d[0]);
    const double cu = 400e6;
    q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, &cu, 0, d);
    CHECK(d[0] == 0, "a catch-up of a step's bytes, one row at acceptance 0.8: %d drafts", d[0]);
    const double r1c = q35_draft_policy_rate(&p, 1, ones, one, 1, 1, &cu);
    const double want1c = 2 / (spb * B[2] + spb * H1 + spb * cu);
    CHECK(fabs(r1c - want1c) < 1e-9 * want1c, "rate with a catch-up: %.6g vs %.6g", r1c, want1c);
    /* the size a probe re-measures, sampled once at 2.1x the plain step (a one-off first verify
       step): the probe's check prices it by the prior, not by that sample; the plan (which does
       use it) drafts nothing; a second sample, measured, counts */
    q35_draft_policy_head(&p, 1, spb * H1);
    q35_draft_policy_step(&p, 2, 2.1 * spb * B[1]);
    q35_draft_policy_plan(&p, 1, acc, dmax, 1, 1, NULL, 0, d);
    CHECK(d[0] == 0, "one-off F(2) of 2.1 F(1): the plan drafts %d", d[0]);
    const double r1p = q35_draft_policy_rate(&p, 1, ones, one, 1, 1, NULL), want1p = 2 / (spb * B[2] + spb * H1);
    CHECK(fabs(r1p - want1p) < 1e-9 * want1p, "rate over a provisional F(2) from the prior: %.6g vs %.6g", r1p, want1p);
    q35_draft_policy_step(&p, 2, 1.9 * spb * B[1]);
    const double r1m = q35_draft_policy_rate(&p, 1, ones, one, 1, 1, NULL), want1m = 2 / (1.9 * spb * B[1] + spb * H1);
    CHECK(fabs(r1m - want1m) < 1e-9 * want1m, "rate over a twice-measured F(2): %.6g vs %.6g", r1m, want1m);
  }
  /* the rows hint (q35_context_draft_rows): one row now, four about to be */
  {
    int32_t dm[4] = {3, 3, 3, 3};
    const int cold[4] = {1, 0, 1, 1}, warm[4] = {0, 0, 0, 0};
    /* only the one-row step measured: the step of four is not, so a cold row does not start */
    memset(&p, 0, sizeof p);
    q35_draft_policy_step(&p, 1, 0.01);
    q35_draft_policy_plan(&p, 1, acc, dm, 1, 1, NULL, 0, d);
    CHECK(d[0] >= 1, "hint: one row drafts without it: %d drafts", d[0]);
    q35_draft_policy_hold_cold(&p, 1, acc, dm, cold, 0, NULL);
    CHECK(dm[0] == 3, "hint: none (0) leaves dmax: %d", dm[0]);
    q35_draft_policy_hold_cold(&p, 1, acc, dm, warm, 4, NULL);
    CHECK(dm[0] == 3, "hint: a warm row keeps dmax: %d", dm[0]);
    q35_draft_policy_hold_cold(&p, 1, acc, dm, cold, 4, NULL);
    q35_draft_policy_plan(&p, 1, acc, dm, 1, 1, NULL, 0, d);
    CHECK(dm[0] == 0 && d[0] == 0, "hint: a cold row before three more join: dmax %d, %d drafts", dm[0], d[0]);
    /* measured and flat (a step of four barely dearer than one, a cheap head pass): drafts pay
       at four rows too, so the cold rows keep theirs; with the steep profile they do not */
    memset(&p, 0, sizeof p);
    for (int T = 1; T <= Q35_POL_TMAX; T++) q35_draft_policy_step(&p, T, 0.010 + 0.0001 * T);
    for (int B = 1; B <= 8; B++) q35_draft_policy_head(&p, B, 0.001);
    for (int i = 0; i < 4; i++) dm[i] = 3;
    q35_draft_policy_hold_cold(&p, 2, acc, dm, cold, 4, NULL);
    CHECK(dm[0] == 3 && dm[1] == 3, "hint: drafts pay at the grown size: dmax %d %d", dm[0], dm[1]);
    memset(&p, 0, sizeof p);
    for (int T = 1; T <= Q35_POL_TMAX; T++) q35_draft_policy_step(&p, T, 0.010 + 0.002 * T);
    for (int B = 1; B <= 8; B++) q35_draft_policy_head(&p, B, 0.003);
    q35_draft_policy_plan(&p, 2, acc, dm, 2, 2, NULL, 0, d);
    CHECK(d[0] >= 1, "hint: two rows draft without it: %d drafts", d[0]);
    q35_draft_policy_hold_cold(&p, 2, acc, dm, cold, 4, NULL);
    CHECK(dm[0] == 0 && dm[1] == 3, "hint: the cold row of two stops, the warm one keeps: dmax %d %d", dm[0], dm[1]);
  }
  /* the probe schedule: every 32 steps, then 64, 128, ... while the plan holds; back to 32 when it moves */
  memset(&p, 0, sizeof p);
  int probes[8], np = 0;
  for (int i = 1; i <= 500 && np < 8; i++)
    if (q35_draft_policy_probe(&p, 2, 0)) probes[np++] = i;
  CHECK(np >= 3 && probes[0] == 32 && probes[1] == 96 && probes[2] == 224, "probes at %d %d %d", probes[0], probes[1],
        probes[2]);
  int moved = 0;
  q35_draft_policy_probe(&p, 2, 3); /* the plan changed */
  for (int i = 1; i <= 40 && !moved; i++) moved = q35_draft_policy_probe(&p, 2, 3) ? i : 0;
  CHECK(moved > 0 && moved <= 32, "after the plan moved, the next probe came %d steps later", moved);
  /* acceptance estimates: a session's counts pulled toward the context's */
  double s = 0, f = 0;
  for (int i = 0; i < 20; i++) q35_draft_policy_round(&p, &s, &f, 2, 2);
  CHECK(q35_draft_policy_accept(&p, s, f) > 0.85, "all accepted: %.3f", q35_draft_policy_accept(&p, s, f));
  for (int i = 0; i < 20; i++) q35_draft_policy_round(&p, &s, &f, 2, 0);
  CHECK(q35_draft_policy_accept(&p, s, f) < 0.3, "none accepted: %.3f", q35_draft_policy_accept(&p, s, f));
}

int main(void) {
  lean = getenv("Q35_SANITIZE_RUN") && !strcmp(getenv("Q35_SANITIZE_RUN"), "1");
  char path[] = "/tmp/q35_draft_XXXXXX", path2[] = "/tmp/q35_draft_XXXXXX";
  const int fd = mkstemp(path), fd2 = mkstemp(path2);
  if (fd < 0 || fd2 < 0) return 1;
  close(fd);
  close(fd2);
  q35_tiny_opts o = q35_tiny_default();
  o.n_layer = 4;
  o.interval = 2;
  o.n_embd = 128;
  o.n_vocab = 512;
  o.head_dim = 32;
  o.ssm_head_dim = 16;
  o.mtp = 1;
  o.mtp_agree = 0.8f;
  q35_err err;
  q35_model *m = NULL, *nomtp = NULL;
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = 2;
  if (q35_tiny_write(&o, path, &err) || !(m = q35_model_load(path, &mp, &err))) {
    fprintf(stderr, "FAIL model: %s\n", err.msg);
    return 1;
  }
  o.mtp = 0;
  o.mtp_agree = -1;
  if (q35_tiny_write(&o, path2, &err) || !(nomtp = q35_model_load(path2, &mp, &err))) {
    fprintf(stderr, "FAIL model: %s\n", err.msg);
    return 1;
  }
  unlink(path);
  unlink(path2);
  test_single(m);
  test_batch(m);
  test_snapshot(m);
  test_late_start(m);
  test_keep(m);
  test_errors(m, nomtp);
  test_policy();
  q35_model_free(m);
  q35_model_free(nomtp);
  return check_done("test_draft");
}
