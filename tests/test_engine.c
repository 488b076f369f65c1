/*
 * test_engine.c - the library's session API end to end on generated models (q35_tiny_write):
 *   - isolation: two sessions' prefills and decodes, interleaved (alternate calls) and batched
 *     (both rows in one q35_step), equal each session's solo run bit for bit (logits from
 *     q35_session_eval, tokens / logprobs / top logprobs from q35_step with seeded sampling);
 *   - batch invariance: a row's token, logprob and top logprobs in steps of 1, 2 and 5 rows (other
 *     neighbours, other row positions, neighbours prefilling several tokens) are identical;
 *   - snapshots: prefill A, snapshot, continue with B; restore, continue with C == cold A+C;
 *   - reset: same logits as a fresh session;
 *   - context limit: an error naming the limit, the session unchanged and usable afterwards;
 *   - bad inputs: token ids out of range, invalid sampling parameters (each named), a session
 *     named by two rows; none of them moves a session;
 *   - q35_session_bytes (> 0, grows with n_ctx), q35_session_pos throughout.
 * Models: a MoE f32 model and a dense q8_0 one (Q8_0 activation quantization in the matmuls),
 * both with several attention layers. Q35_SANITIZE_RUN=1 shrinks the lengths.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "export/tiny.h"
#include "kernels/quant.h"
#include "model/forward_internal.h"
#include "model/model.h"
#include "q35.h"

static const char *cur_model = "";

/* Checks of a bug that is fixed: q35_session_eval with chunk < n must validate the whole input
 * before the first chunk runs, so a context overflow or a bad id in a later chunk leaves the
 * session where it was. They fail by default; Q35_TEST_PENDING=0 turns them into PENDING notes. */
static int pending_strict;
static int pending_seen;
#define PENDING_CHECK(c, ...)                                                                       \
  do {                                                                                              \
    if (!(c)) {                                                                                     \
      fprintf(stderr, "%s [%s] %s:%d: %s: ", pending_strict ? "FAIL" : "PENDING (known bug)",      \
              cur_model, __FILE__, __LINE__, #c);                                                   \
      fprintf(stderr, __VA_ARGS__);                                                                 \
      fprintf(stderr, "\n");                                                                        \
      if (pending_strict) failures++;                                                               \
      else pending_seen++;                                                                          \
    }                                                                                               \
  } while (0)

static int V;        /* vocabulary of the current model */
static int NPROMPT;  /* prompt length for the isolation test */
static int NDEC;     /* decode steps */

static uint64_t rng_state = 88172645463325252ull;
static int32_t rnd_tok(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (int32_t)(rng_state % (uint64_t)V);
}
static int32_t *rnd_toks(int n) {
  int32_t *t = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  for (int i = 0; i < n; i++) t[i] = rnd_tok();
  return t;
}

static q35_session *new_session(q35_model *m, int n_ctx) {
  q35_err err = {{0}};
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = n_ctx;
  q35_session *s = q35_session_new(m, &sp, &err);
  if (!s) {
    fprintf(stderr, "FAIL [%s] q35_session_new: %s\n", cur_model, err.msg);
    exit(1);
  }
  return s;
}

static void must_eval(q35_session *s, const int32_t *t, int n, int chunk, float *logits, int all) {
  q35_err err = {{0}};
  if (q35_session_eval(s, t, n, chunk, logits, all, &err)) {
    fprintf(stderr, "FAIL [%s] q35_session_eval(n=%d): %s\n", cur_model, n, err.msg);
    exit(1);
  }
}

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static q35_sampling sampling_for(uint64_t seed) {
  q35_sampling p = q35_sampling_default();
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.01f;
  p.presence_penalty = 0.3f;
  p.repetition_penalty = 1.1f;
  p.seed = seed;
  return p;
}

/* One request's decode: the tokens sampled, their logprobs and top-5 alternatives. */
typedef struct {
  int32_t tok[256];
  float lp[256];
  int32_t top_ids[256][5];
  float top_lp[256][5];
} trace;

static void record(trace *tr, int i, const q35_row *r) {
  tr->tok[i] = r->token;
  tr->lp[i] = r->logprob;
  memcpy(tr->top_ids[i], r->top_ids, sizeof tr->top_ids[i]);
  memcpy(tr->top_lp[i], r->top_logprobs, sizeof tr->top_lp[i]);
}

static int same_trace(const trace *a, const trace *b, int n) {
  for (int i = 0; i < n; i++)
    if (a->tok[i] != b->tok[i] || memcmp(&a->lp[i], &b->lp[i], sizeof(float)) ||
        memcmp(a->top_ids[i], b->top_ids[i], sizeof a->top_ids[i]) ||
        memcmp(a->top_lp[i], b->top_lp[i], sizeof a->top_lp[i]))
      return 0;
  return 1;
}

/* A request in flight: prompt, history (prompt + generated) for penalties, sampling. */
typedef struct {
  q35_session *s;
  const int32_t *prompt;
  int n_prompt;
  int32_t hist[1024];
  int n_gen;
  q35_sampling sp;
  int32_t next; /* the token this request feeds in its next decode step */
} req;

static void req_init(req *r, q35_session *s, const int32_t *prompt, int n_prompt, uint64_t seed) {
  memset(r, 0, sizeof *r);
  r->s = s;
  r->prompt = prompt;
  r->n_prompt = n_prompt;
  memcpy(r->hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
  r->sp = sampling_for(seed);
  r->next = prompt[n_prompt - 1];
}

static void req_row(req *r, q35_row *row) {
  memset(row, 0, sizeof *row);
  row->session = r->s;
  row->tokens = &r->next;
  row->n_tokens = 1;
  r->sp.draw_index = (uint64_t)r->n_gen;
  row->sampling = &r->sp;
  row->history = r->hist;
  row->n_history = r->n_prompt + r->n_gen;
  row->n_prompt = r->n_prompt;
  row->n_top_logprobs = 5;
}

static void req_done(req *r, const q35_row *row, trace *tr) {
  record(tr, r->n_gen, row);
  r->hist[r->n_prompt + r->n_gen] = row->token;
  r->next = row->token;
  r->n_gen++;
}

static void must_step(q35_model *m, q35_row *rows, int n) {
  q35_err err = {{0}};
  if (q35_step(m, rows, n, &err)) {
    fprintf(stderr, "FAIL [%s] q35_step(%d rows): %s\n", cur_model, n, err.msg);
    exit(1);
  }
}

/* ---- 1. isolation: interleaved and batched == solo ---------------------------------------- */

typedef struct {
  float *prefill;  /* all-position logits of prompt[0 .. n-1) */
  trace dec;       /* decode */
  float *tail;     /* all-position logits of the tail after decoding */
} solo_result;

static void solo(q35_model *m, const int32_t *prompt, int n, uint64_t seed, const int32_t *tail, int n_tail,
                 solo_result *out) {
  q35_session *s = new_session(m, 512);
  out->prefill = malloc(sizeof(float) * (size_t)(n - 1) * V);
  out->tail = malloc(sizeof(float) * (size_t)n_tail * V);
  must_eval(s, prompt, n - 1, 0, out->prefill, 1);
  CHECK(q35_session_pos(s) == n - 1);
  req r;
  req_init(&r, s, prompt, n, seed);
  for (int i = 0; i < NDEC; i++) {
    q35_row row;
    req_row(&r, &row);
    must_step(m, &row, 1);
    req_done(&r, &row, &out->dec);
  }
  CHECK(q35_session_pos(s) == n + NDEC - 1);
  /* the last sampled token has not been fed; the tail follows it */
  must_eval(s, tail, n_tail, 0, out->tail, 1);
  q35_session_free(s);
}

static void test_isolation(q35_model *m) {
  const int na = NPROMPT, nb = NPROMPT * 2 / 3 + 1, nt = 5;
  int32_t *pa = rnd_toks(na), *pb = rnd_toks(nb), *tail_a = rnd_toks(nt), *tail_b = rnd_toks(nt);
  solo_result ra, rb;
  solo(m, pa, na, 1234, tail_a, nt, &ra);
  solo(m, pb, nb, 98765, tail_b, nt, &rb);
  /* the two requests differ (else the test proves nothing) */
  CHECK(memcmp(ra.dec.tok, rb.dec.tok, sizeof(int32_t) * (size_t)NDEC) != 0);

  for (int mode = 0; mode < 2; mode++) { /* 0: alternate calls, 1: batched steps */
    q35_session *a = new_session(m, 512), *b = new_session(m, 512);
    float *la = malloc(sizeof(float) * (size_t)na * V), *lb = malloc(sizeof(float) * (size_t)nb * V);
    /* prefills in chunks of 3 (A) and 2 (B), alternating */
    int da = 0, db = 0;
    while (da < na - 1 || db < nb - 1) {
      if (da < na - 1) {
        int c = na - 1 - da < 3 ? na - 1 - da : 3;
        must_eval(a, pa + da, c, 0, la + (size_t)da * V, 1);
        da += c;
      }
      if (db < nb - 1) {
        int c = nb - 1 - db < 2 ? nb - 1 - db : 2;
        must_eval(b, pb + db, c, 0, lb + (size_t)db * V, 1);
        db += c;
      }
    }
    CHECK(same_floats(la, ra.prefill, (size_t)(na - 1) * V), "mode %d: A's prefill logits differ from solo", mode);
    CHECK(same_floats(lb, rb.prefill, (size_t)(nb - 1) * V), "mode %d: B's prefill logits differ from solo", mode);
    req qa, qb;
    req_init(&qa, a, pa, na, 1234);
    req_init(&qb, b, pb, nb, 98765);
    trace ta, tb;
    for (int i = 0; i < NDEC; i++) {
      q35_row rows[2];
      if (mode == 0) {
        req_row(&qb, &rows[0]); /* B first this time */
        must_step(m, rows, 1);
        req_done(&qb, &rows[0], &tb);
        req_row(&qa, &rows[0]);
        must_step(m, rows, 1);
        req_done(&qa, &rows[0], &ta);
      } else {
        int swap = i & 1; /* row order alternates */
        req_row(&qa, &rows[swap]);
        req_row(&qb, &rows[1 - swap]);
        must_step(m, rows, 2);
        req_done(&qa, &rows[swap], &ta);
        req_done(&qb, &rows[1 - swap], &tb);
      }
    }
    CHECK(same_trace(&ta, &ra.dec, NDEC), "mode %d: A's sampled tokens/logprobs differ from solo", mode);
    CHECK(same_trace(&tb, &rb.dec, NDEC), "mode %d: B's sampled tokens/logprobs differ from solo", mode);
    CHECK(q35_session_pos(a) == na + NDEC - 1 && q35_session_pos(b) == nb + NDEC - 1);
    /* tails, B then A */
    must_eval(b, tail_b, nt, 0, lb, 1);
    must_eval(a, tail_a, nt, 2, la, 1);
    CHECK(same_floats(la, ra.tail, (size_t)nt * V), "mode %d: A's logits after decoding differ from solo", mode);
    CHECK(same_floats(lb, rb.tail, (size_t)nt * V), "mode %d: B's logits after decoding differ from solo", mode);
    free(la);
    free(lb);
    q35_session_free(a);
    q35_session_free(b);
  }
  /* the step's greedy token is the argmax of q35_session_eval's logits */
  {
    q35_session *s = new_session(m, 512);
    float *l = malloc(sizeof(float) * (size_t)V);
    must_eval(s, pa, na, 0, l, 0);
    int best = 0;
    for (int i = 1; i < V; i++)
      if (l[i] > l[best]) best = i;
    q35_session_reset(s);
    must_eval(s, pa, na - 1, 0, NULL, 0);
    q35_sampling g = q35_sampling_default();
    g.temperature = 0;
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.tokens = pa + na - 1;
    row.n_tokens = 1;
    row.sampling = &g;
    row.n_top_logprobs = -1;
    must_step(m, &row, 1);
    CHECK(row.token == best, "greedy step token %d, argmax of eval logits %d", row.token, best);
    free(l);
    q35_session_free(s);
  }
  printf("[%s] isolation: 2 sessions, prompts %d/%d, %d decode steps, alternate and batched == solo\n", cur_model,
         na, nb, NDEC);
  free(ra.prefill);
  free(ra.tail);
  free(rb.prefill);
  free(rb.tail);
  free(pa);
  free(pb);
  free(tail_a);
  free(tail_b);
}

/* ---- 2. batch invariance ------------------------------------------------------------------ */

#define NS 5
static void test_batch_invariance(q35_model *m) {
  /* 5 sessions with their own prompts; the target row is session 0's next token. The state is
   * rebuilt before every configuration (reset + prefill), so every run starts equal. */
  int plen[NS] = {NPROMPT, 3, NPROMPT / 2 + 2, 1, 7};
  int32_t *prompts[NS], *next_in[NS];
  int n_in[NS] = {1, 4, 1, 6, 2}; /* tokens each row consumes in the step; the target: 1, later 4 */
  for (int k = 0; k < NS; k++) {
    prompts[k] = rnd_toks(plen[k]);
    next_in[k] = rnd_toks(6);
  }
  q35_session *ss[NS];
  for (int k = 0; k < NS; k++) ss[k] = new_session(m, 256);
  q35_sampling sps[NS];
  for (int k = 0; k < NS; k++) {
    sps[k] = sampling_for(500 + (uint64_t)k);
    sps[k].draw_index = 3;
  }
  sps[2].temperature = 0; /* a greedy neighbour */
  sps[3].top_k = 0;
  /* configurations: {number of rows, position of the target, neighbour sessions} */
  struct {
    int n, at, nb[4];
  } cfg[] = {
      {1, 0, {0}},          {2, 0, {1}},          {2, 1, {2}},          {2, 1, {3}},
      {5, 0, {1, 2, 3, 4}}, {5, 2, {4, 3, 1, 2}}, {5, 4, {3, 1, 4, 2}},
  };
  const int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
  for (int target_n = 1; target_n <= 4; target_n += 3) {
    q35_row ref;
    memset(&ref, 0, sizeof ref);
    for (int c = 0; c < ncfg; c++) {
      for (int k = 0; k < NS; k++) {
        q35_session_reset(ss[k]);
        must_eval(ss[k], prompts[k], plen[k], 0, NULL, 0);
      }
      q35_row rows[NS];
      memset(rows, 0, sizeof rows);
      int j = 0;
      for (int r = 0; r < cfg[c].n; r++) {
        int k = r == cfg[c].at ? 0 : cfg[c].nb[j++];
        rows[r].session = ss[k];
        rows[r].tokens = next_in[k];
        rows[r].n_tokens = k == 0 ? target_n : n_in[k];
        rows[r].sampling = &sps[k];
        rows[r].history = prompts[k];
        rows[r].n_history = plen[k];
        rows[r].n_prompt = plen[k];
        rows[r].n_top_logprobs = k == 1 ? -1 : 5;
      }
      must_step(m, rows, cfg[c].n);
      const q35_row *t = &rows[cfg[c].at];
      CHECK(q35_session_pos(ss[0]) == plen[0] + target_n);
      if (c == 0) {
        ref = *t;
        continue;
      }
      CHECK(t->token == ref.token && !memcmp(&t->logprob, &ref.logprob, sizeof(float)) &&
                 !memcmp(t->top_ids, ref.top_ids, sizeof(int32_t) * 5) &&
                 !memcmp(t->top_logprobs, ref.top_logprobs, sizeof(float) * 5),
             "target consuming %d token(s), step of %d rows at row %d: token %d logprob %.9g vs alone %d %.9g",
             target_n, cfg[c].n, cfg[c].at, t->token, t->logprob, ref.token, ref.logprob);
    }
  }
  /* logits, not just tokens: the target's logits after a batched step equal a solo eval */
  {
    float *l1 = malloc(sizeof(float) * (size_t)V), *l2 = malloc(sizeof(float) * (size_t)V);
    for (int k = 0; k < NS; k++) {
      q35_session_reset(ss[k]);
      must_eval(ss[k], prompts[k], plen[k], 0, NULL, 0);
    }
    q35_row rows[NS];
    memset(rows, 0, sizeof rows);
    for (int k = 0; k < NS; k++) {
      rows[k].session = ss[(k + 3) % NS];
      rows[k].tokens = next_in[(k + 3) % NS];
      rows[k].n_tokens = n_in[(k + 3) % NS];
      rows[k].sampling = &sps[(k + 3) % NS];
      rows[k].n_top_logprobs = -1;
    }
    must_step(m, rows, NS);
    int32_t probe = 7 % V;
    must_eval(ss[0], &probe, 1, 0, l1, 0);
    q35_session_reset(ss[0]);
    must_eval(ss[0], prompts[0], plen[0], 0, NULL, 0);
    must_eval(ss[0], next_in[0], n_in[0], 0, NULL, 0);
    must_eval(ss[0], &probe, 1, 0, l2, 0);
    CHECK(same_floats(l1, l2, (size_t)V), "state after a 5-row step differs from a solo eval");
    free(l1);
    free(l2);
  }
  printf("[%s] batch invariance: %d configurations x 2 target lengths, identical token/logprob/top-5\n", cur_model,
         ncfg);
  for (int k = 0; k < NS; k++) {
    q35_session_free(ss[k]);
    free(prompts[k]);
    free(next_in[k]);
  }
}

/* ---- 3. snapshot / restore, reset ---------------------------------------------------------- */

static void test_snapshot_reset(q35_model *m) {
  q35_err err = {{0}};
  const int na = NPROMPT, nb = 9, nc = 6;
  int32_t *ta = rnd_toks(na), *tb = rnd_toks(nb), *tc = rnd_toks(nc);
  int32_t *ac = malloc(sizeof(int32_t) * (size_t)(na + nc));
  memcpy(ac, ta, sizeof(int32_t) * (size_t)na);
  memcpy(ac + na, tc, sizeof(int32_t) * (size_t)nc);
  float *cold = malloc(sizeof(float) * (size_t)(na + nc) * V), *warm = malloc(sizeof(float) * (size_t)nc * V);
  float *lb = malloc(sizeof(float) * (size_t)nb * V);

  q35_session *c = new_session(m, 128);
  must_eval(c, ac, na + nc, 0, cold, 1);

  q35_session *s = new_session(m, 128);
  must_eval(s, ta, na, 4, NULL, 0);
  q35_snapshot *snap = q35_session_snapshot(s, &err);
  CHECK(snap != NULL, "%s", err.msg);
  if (!snap) exit(1);
  CHECK(q35_snapshot_pos(snap) == na);
  CHECK(q35_snapshot_bytes(snap) > 0);
  must_eval(s, tb, nb, 0, lb, 1);
  CHECK(q35_session_pos(s) == na + nb);
  CHECK(!same_floats(lb, cold + (size_t)na * V, (size_t)V), "B and C gave the same logits (test proves nothing)");
  CHECK(q35_session_restore(s, snap, &err) == 0, "%s", err.msg);
  CHECK(q35_session_pos(s) == na);
  must_eval(s, tc, nc, 0, warm, 1);
  CHECK(same_floats(warm, cold + (size_t)na * V, (size_t)nc * V), "restore + C differs from a cold A+C");
  /* the snapshot can be restored again (it is not consumed), also through q35_step */
  CHECK(q35_session_restore(s, snap, &err) == 0, "%s", err.msg);
  {
    q35_sampling g = q35_sampling_default();
    g.temperature = 0;
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.tokens = tc;
    row.n_tokens = nc;
    row.sampling = &g;
    row.n_top_logprobs = 0;
    must_step(m, &row, 1);
    const float *last = cold + (size_t)(na + nc - 1) * V;
    int best = 0;
    for (int i = 1; i < V; i++)
      if (last[i] > last[best]) best = i;
    CHECK(row.token == best, "restore + step: greedy %d, cold argmax %d", row.token, best);
    CHECK(q35_session_pos(s) == na + nc);
  }
  /* a snapshot of another model's session is refused (the other model: a second load) */
  q35_snapshot_free(snap);

  /* reset: the same prompt gives the same logits as a fresh session */
  q35_session_reset(s);
  CHECK(q35_session_pos(s) == 0);
  float *again = malloc(sizeof(float) * (size_t)(na + nc) * V);
  must_eval(s, ac, na + nc, 5, again, 1);
  CHECK(same_floats(again, cold, (size_t)(na + nc) * V), "after reset the logits differ from a fresh session");
  /* reset of a session that decoded with q35_step too */
  q35_session_reset(s);
  must_eval(s, ac, na + nc, 0, again, 1);
  CHECK(same_floats(again, cold, (size_t)(na + nc) * V), "second reset differs");
  printf("[%s] snapshot/restore (A=%d, B=%d, C=%d) == cold run; reset == fresh session\n", cur_model, na, nb, nc);
  free(again);
  q35_session_free(s);
  q35_session_free(c);
  free(ta);
  free(tb);
  free(tc);
  free(ac);
  free(cold);
  free(warm);
  free(lb);
}

/* ---- 4. context limit, bad inputs, bytes/pos ----------------------------------------------- */

static int has(const char *msg, const char *what) { return strstr(msg, what) != NULL; }

static void test_limits_and_errors(q35_model *m) {
  q35_err err = {{0}};
  const int n_ctx = 16;
  int32_t *t = rnd_toks(n_ctx + 4);
  float *ref = malloc(sizeof(float) * (size_t)n_ctx * V), *l = malloc(sizeof(float) * (size_t)n_ctx * V);
  q35_session *c = new_session(m, n_ctx);
  must_eval(c, t, n_ctx, 0, ref, 1); /* exactly n_ctx fits */
  CHECK(q35_session_pos(c) == n_ctx);
  /* one more token: refused */
  memset(&err, 0, sizeof err);
  CHECK(q35_session_eval(c, t + n_ctx, 1, 0, NULL, 0, &err) == -1);
  CHECK(has(err.msg, "16") && has(err.msg, "context"), "message: '%s'", err.msg);
  CHECK(q35_session_pos(c) == n_ctx);

  q35_session *s = new_session(m, n_ctx);
  must_eval(s, t, 10, 0, l, 1);
  /* 7 more would reach 17 > 16: refused, in one chunk, in chunks and through q35_step */
  float *scratch = malloc(sizeof(float) * (size_t)8 * V);
  for (int chunk = 0; chunk <= 3; chunk += 3) {
    memset(&err, 0, sizeof err);
    CHECK(q35_session_eval(s, t + 10, 7, chunk, scratch, 1, &err) == -1);
    CHECK(has(err.msg, "16"), "chunk %d: message '%s' does not name the limit", chunk, err.msg);
    if (chunk == 0)
      CHECK(q35_session_pos(s) == 10, "after a refused eval the position is %d, expected 10", q35_session_pos(s));
    else
      PENDING_CHECK(q35_session_pos(s) == 10, "chunk %d: after a refused eval the position is %d, expected 10",
                    chunk, q35_session_pos(s));
    if (q35_session_pos(s) != 10) { /* recover for the rest of the test */
      q35_session_reset(s);
      must_eval(s, t, 10, 0, NULL, 0);
    }
  }
  {
    q35_sampling g = q35_sampling_default();
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.tokens = t + 10;
    row.n_tokens = 7;
    row.sampling = &g;
    row.n_top_logprobs = -1;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, &row, 1, &err) == -1);
    CHECK(has(err.msg, "16"), "step: message '%s' does not name the limit", err.msg);
    CHECK(q35_session_pos(s) == 10);
  }
  /* the session is unchanged: continuing gives the cold run's logits */
  must_eval(s, t + 10, 6, 0, l + (size_t)10 * V, 1);
  CHECK(same_floats(l, ref, (size_t)n_ctx * V), "after refused feeds the session's logits differ from a cold run");
  CHECK(q35_session_pos(s) == n_ctx);

  /* bad token ids: eval and step, first and later positions, the message names the id */
  q35_session_reset(s);
  must_eval(s, t, 4, 0, NULL, 0);
  int32_t bad_ids[] = {-1, V, V + 1000, INT32_MIN};
  for (size_t k = 0; k < sizeof bad_ids / sizeof bad_ids[0]; k++) {
    int32_t in[3] = {t[4], t[5], bad_ids[k]};
    char want[32];
    snprintf(want, sizeof want, "%d", bad_ids[k]);
    for (int chunk = 0; chunk <= 1; chunk++) {
      memset(&err, 0, sizeof err);
      CHECK(q35_session_eval(s, in, 3, chunk, NULL, 0, &err) == -1);
      CHECK(has(err.msg, want) && has(err.msg, "range"), "eval chunk %d: id %d: message '%s'", chunk, bad_ids[k],
             err.msg);
      if (chunk == 0)
        CHECK(q35_session_pos(s) == 4, "a refused bad id moved the session to %d", q35_session_pos(s));
      else
        PENDING_CHECK(q35_session_pos(s) == 4, "eval chunk %d: a refused bad id moved the session to %d", chunk,
                      q35_session_pos(s));
      if (q35_session_pos(s) != 4) {
        q35_session_reset(s);
        must_eval(s, t, 4, 0, NULL, 0);
      }
    }
    q35_sampling g = q35_sampling_default();
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.tokens = in;
    row.n_tokens = 3;
    row.sampling = &g;
    row.n_top_logprobs = -1;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, &row, 1, &err) == -1);
    CHECK(has(err.msg, want), "step: id %d: message '%s'", bad_ids[k], err.msg);
    CHECK(q35_session_pos(s) == 4);
  }
  /* invalid sampling parameters: q35_sampling_validate and q35_step name the parameter */
  struct {
    const char *name;
    q35_sampling p;
  } badp[16];
  int nbad = 0;
  const float nanf_ = nanf("");
#define BAD(field, val, nm)                         \
  do {                                             \
    badp[nbad].p = q35_sampling_default();         \
    badp[nbad].p.field = val;                      \
    badp[nbad].name = nm;                          \
    nbad++;                                        \
  } while (0)
  BAD(temperature, -0.5f, "temperature");
  BAD(temperature, nanf_, "temperature");
  BAD(temperature, INFINITY, "temperature");
  BAD(top_p, 0.0f, "top_p");
  BAD(top_p, 1.5f, "top_p");
  BAD(top_p, nanf_, "top_p");
  BAD(min_p, -0.1f, "min_p");
  BAD(min_p, 1.5f, "min_p");
  BAD(presence_penalty, 2.5f, "presence");
  BAD(frequency_penalty, -3.0f, "frequency");
  BAD(repetition_penalty, 0.0f, "repetition");
  BAD(repetition_penalty, -1.0f, "repetition");
#undef BAD
  for (int k = 0; k < nbad; k++) {
    memset(&err, 0, sizeof err);
    CHECK(q35_sampling_validate(&badp[k].p, &err) == -1, "%s: validate accepted it", badp[k].name);
    CHECK(has(err.msg, badp[k].name), "validate %s: message '%s'", badp[k].name, err.msg);
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.tokens = t + 4;
    row.n_tokens = 1;
    row.sampling = &badp[k].p;
    row.n_top_logprobs = -1;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, &row, 1, &err) == -1, "%s: step accepted it", badp[k].name);
    CHECK(has(err.msg, badp[k].name), "step %s: message '%s'", badp[k].name, err.msg);
    CHECK(q35_session_pos(s) == 4);
  }
  {
    q35_sampling ok = q35_sampling_default();
    CHECK(q35_sampling_validate(&ok, &err) == 0);
    ok.temperature = 0;
    ok.top_k = -5;
    ok.top_p = 1;
    ok.min_p = 1;
    ok.presence_penalty = -2;
    ok.frequency_penalty = 2;
    ok.repetition_penalty = 0.01f;
    CHECK(q35_sampling_validate(&ok, &err) == 0, "boundary values refused: %s", err.msg);
  }
  /* a row's error in a batch moves no session: row 1 bad, row 0 fine */
  {
    q35_session *o = new_session(m, 64);
    must_eval(o, t, 3, 0, NULL, 0);
    q35_sampling g = q35_sampling_default(), bad = q35_sampling_default();
    bad.top_p = 2;
    q35_row rows[2];
    memset(rows, 0, sizeof rows);
    rows[0].session = o;
    rows[0].tokens = t + 3;
    rows[0].n_tokens = 1;
    rows[0].sampling = &g;
    rows[0].n_top_logprobs = -1;
    rows[1] = rows[0];
    rows[1].session = s;
    rows[1].sampling = &bad;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, rows, 2, &err) == -1);
    CHECK(has(err.msg, "top_p") && has(err.msg, "row 1"), "message '%s'", err.msg);
    CHECK(q35_session_pos(o) == 3 && q35_session_pos(s) == 4);
    /* a bad token in row 1 */
    int32_t badtok = V;
    rows[1].sampling = &g;
    rows[1].tokens = &badtok;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, rows, 2, &err) == -1);
    CHECK(q35_session_pos(o) == 3 && q35_session_pos(s) == 4);
    /* the same session named twice */
    rows[1] = rows[0];
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, rows, 2, &err) == -1);
    CHECK(has(err.msg, "same session"), "message '%s'", err.msg);
    CHECK(q35_session_pos(o) == 3);
    /* no rows, a row without tokens */
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, rows, 0, &err) == -1 && err.msg[0]);
    rows[0].n_tokens = 0;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, rows, 1, &err) == -1 && err.msg[0]);
    rows[0].n_tokens = 1;
    rows[0].n_top_logprobs = Q35_MAX_TOP_LOGPROBS + 1;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, rows, 1, &err) == -1 && err.msg[0]);
    CHECK(q35_session_pos(o) == 3);
    /* eval of nothing */
    memset(&err, 0, sizeof err);
    CHECK(q35_session_eval(o, t, 0, 0, NULL, 0, &err) == -1 && err.msg[0]);
    /* and o still works: it continues like a cold run */
    float *lo = malloc(sizeof(float) * (size_t)V);
    must_eval(o, t + 3, 7, 0, lo, 0);
    CHECK(same_floats(lo, ref + (size_t)9 * V, (size_t)V), "a session after refused steps differs from a cold run");
    CHECK(q35_session_pos(o) == 10);
    free(lo);
    q35_session_free(o);
  }
  /* bad session parameters */
  {
    q35_session_params sp = q35_session_default_params();
    CHECK(sp.n_ctx > 0);
    sp.n_ctx = 0;
    memset(&err, 0, sizeof err);
    CHECK(q35_session_new(m, &sp, &err) == NULL && has(err.msg, "context"));
    sp.n_ctx = 16;
    sp.kv_type = (q35_kv_type)5;
    memset(&err, 0, sizeof err);
    CHECK(q35_session_new(m, &sp, &err) == NULL && err.msg[0]);
  }
  /* bytes: > 0, grows with n_ctx; pos */
  {
    q35_session *s1 = new_session(m, 64), *s2 = new_session(m, 256);
    CHECK(q35_session_bytes(s1) > 0);
    CHECK(q35_session_bytes(s2) > q35_session_bytes(s1), "bytes %zu (ctx 256) vs %zu (ctx 64)",
           q35_session_bytes(s2), q35_session_bytes(s1));
    CHECK(q35_session_n_ctx(s1) == 64 && q35_session_n_ctx(s2) == 256);
    CHECK(q35_session_pos(s1) == 0);
    size_t b0 = q35_session_bytes(s1);
    must_eval(s1, t, 5, 2, NULL, 0);
    CHECK(q35_session_pos(s1) == 5);
    CHECK(q35_session_bytes(s1) == b0); /* allocated up front */
    q35_session_free(s1);
    q35_session_free(s2);
  }
  printf("[%s] context limit, bad ids, %d bad sampling parameters, duplicate sessions, bytes/pos\n", cur_model, nbad);
  q35_session_free(s);
  q35_session_free(c);
  free(t);
  free(ref);
  free(l);
  free(scratch);
}

/* ---- 5. step outputs: none, several positions, the hidden state --------------------------- */

static int same_output(const q35_output *a, const q35_row *b) {
  return a->token == b->token && !memcmp(&a->logprob, &b->logprob, sizeof(float)) &&
         !memcmp(a->top_ids, b->top_ids, sizeof(int32_t) * 5) && !memcmp(a->top_logprobs, b->top_logprobs, sizeof(float) * 5);
}

/* Logits from a hidden state by a plain loop over the output matrix: the hidden state converted
 * as the product converts it (F32 as is; Q8_0 weights read Q8_0 activations), each row
 * dequantized, the dot in double. mag[v] receives sum |w_i h_i| (the scale of the rounding). */
static void plain_logits(const q35_model *m, const float *h, float *out, double *mag) {
  const int H = m->hp.n_embd, V = m->hp.n_vocab;
  const q35_tensor *w = &m->output;
  float *hq = malloc(sizeof(float) * (size_t)H), *row = malloc(sizeof(float) * (size_t)H);
  if (q35_vec_dot_type(w->type) == Q35_TYPE_F32) {
    memcpy(hq, h, sizeof(float) * (size_t)H);
  } else { /* Q8_0's activation layouts hold the Q8_0 values */
    void *qb = malloc(q35_row_size(Q35_TYPE_Q8_0, H));
    q35_quantize_row(Q35_TYPE_Q8_0, h, qb, H);
    q35_dequantize_row(Q35_TYPE_Q8_0, qb, hq, H);
    free(qb);
  }
  for (int v = 0; v < V; v++) {
    q35_dequantize_row(w->type, (const char *)w->data + (size_t)v * w->nb1, row, H);
    double d = 0, a = 0;
    for (int i = 0; i < H; i++) {
      d += (double)row[i] * hq[i];
      a += fabs((double)row[i] * hq[i]);
    }
    out[v] = (float)d;
    mag[v] = a;
  }
  free(hq);
  free(row);
}

/* Consume-only rows: no sample (token -1), the session advances exactly as an eval would. */
static void test_outputs_none(q35_model *m) {
  const int np = NPROMPT;
  int32_t *p = rnd_toks(np + 1);
  q35_session *a = new_session(m, 128), *b = new_session(m, 128), *o = new_session(m, 128);
  must_eval(b, p, np, 0, NULL, 0);
  must_eval(o, p, 3, 0, NULL, 0);
  q35_sampling sp = sampling_for(77);
  q35_row rows[2];
  memset(rows, 0, sizeof rows);
  rows[0].session = a; /* consume only: no sampling parameters needed */
  rows[0].tokens = p;
  rows[0].n_tokens = np;
  rows[0].n_outputs = Q35_OUTPUTS_NONE;
  rows[0].token = 12345;
  rows[1].session = o; /* a sampling neighbour in the same step */
  rows[1].tokens = p + 3;
  rows[1].n_tokens = 1;
  rows[1].sampling = &sp;
  rows[1].n_top_logprobs = 5;
  must_step(m, rows, 2);
  CHECK(rows[0].token == -1 && isnan(rows[0].logprob), "consume-only row: token %d", rows[0].token);
  CHECK(q35_session_pos(a) == np && q35_session_pos(o) == 4);
  q35_row alone;
  memset(&alone, 0, sizeof alone);
  q35_session_reset(o);
  must_eval(o, p, 3, 0, NULL, 0);
  alone = rows[1];
  must_step(m, &alone, 1);
  CHECK(alone.token == rows[1].token && !memcmp(&alone.logprob, &rows[1].logprob, sizeof(float)),
        "a neighbour of a consume-only row sampled %d, alone %d", rows[1].token, alone.token);
  /* the consume-only session continues like the evaluated one */
  float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
  must_eval(a, p + np, 1, 0, la, 0);
  must_eval(b, p + np, 1, 0, lb, 0);
  CHECK(same_floats(la, lb, (size_t)V), "a consume-only step left other state than an eval");
  printf("[%s] consume-only rows: no sample, same state as an eval, neighbours unchanged\n", cur_model);
  free(la);
  free(lb);
  free(p);
  q35_session_free(a);
  q35_session_free(b);
  q35_session_free(o);
}

enum { MULTI_K = 6 }; /* tokens of the verification row */

/* Samples at the last n_out of MULTI_K positions, alone (neighbour 0) or beside another row,
 * against the same tokens fed one step at a time: bit-identical tokens, logprobs, top logprobs
 * and hidden states; the hidden states times the output matrix give the eval's logits. */
static void multi_case(q35_model *m, int n_out, int neighbour, const int32_t *p, int np, const int32_t *x) {
  const int H = q35_model_n_embd(m), p0 = MULTI_K - n_out;
  /* history as of the first sampled position: the prompt, then x[0 .. p0] */
  int32_t hist[256];
  memcpy(hist, p, sizeof(int32_t) * (size_t)np);
  memcpy(hist + np, x, sizeof(int32_t) * (size_t)(p0 + 1));
  const int nh = np + p0 + 1;
  q35_sampling sp = sampling_for(4242);
  sp.frequency_penalty = 0.4f; /* every penalty reads the history */
  sp.draw_index = 9;
  q35_session *a = new_session(m, 128), *b = new_session(m, 128), *nb = new_session(m, 128);
  must_eval(a, p, np, 0, NULL, 0);
  must_eval(b, p, np, 0, NULL, 0);
  must_eval(nb, p, 2, 0, NULL, 0);
  q35_output outs[MULTI_K];
  float *hid = malloc(sizeof(float) * (size_t)n_out * H), *hseq = malloc(sizeof(float) * (size_t)n_out * H);
  q35_row rows[2];
  memset(rows, 0, sizeof rows);
  q35_row *r = &rows[neighbour];
  r->session = a;
  r->tokens = x;
  r->n_tokens = MULTI_K;
  r->sampling = &sp;
  r->history = hist;
  r->n_history = nh;
  r->n_prompt = np;
  r->n_top_logprobs = 5;
  r->n_outputs = n_out;
  r->outputs = outs;
  r->hidden = hid;
  if (neighbour) {
    q35_sampling g = sampling_for(5);
    rows[0].session = nb;
    rows[0].tokens = p + 2;
    rows[0].n_tokens = 3;
    rows[0].sampling = &g;
    rows[0].n_top_logprobs = -1;
    must_step(m, rows, 2);
  } else {
    must_step(m, rows, 1);
  }
  CHECK(q35_session_pos(a) == np + MULTI_K);
  /* the same tokens one step at a time */
  q35_sampling sq = sp;
  for (int j = 0; j < n_out; j++) {
    q35_row s1;
    memset(&s1, 0, sizeof s1);
    s1.session = b;
    s1.tokens = j == 0 ? x : x + p0 + j;
    s1.n_tokens = j == 0 ? p0 + 1 : 1;
    sq.draw_index = sp.draw_index + (uint64_t)j;
    s1.sampling = &sq;
    memcpy(hist + np + p0 + 1, x + p0 + 1, sizeof(int32_t) * (size_t)j); /* + the tokens after p0 */
    s1.history = hist;
    s1.n_history = nh + j;
    s1.n_prompt = np;
    s1.n_top_logprobs = 5;
    s1.hidden = hseq + (size_t)j * H;
    must_step(m, &s1, 1);
    CHECK(same_output(&outs[j], &s1), "%d outputs%s: position %d sampled %d (%.9g), one per step %d (%.9g)", n_out,
          neighbour ? " beside a row" : "", j, outs[j].token, outs[j].logprob, s1.token, s1.logprob);
    if (j == n_out - 1)
      CHECK(r->token == s1.token && !memcmp(&r->logprob, &s1.logprob, sizeof(float)), "the row's own fields != last");
  }
  CHECK(same_floats(hid, hseq, (size_t)n_out * H), "%d outputs: hidden states differ from one per step", n_out);
  /* hidden x output matrix = the logits of an eval of the same tokens */
  q35_session *c = new_session(m, 128);
  int32_t all[256];
  memcpy(all, p, sizeof(int32_t) * (size_t)np);
  memcpy(all + np, x, sizeof(int32_t) * MULTI_K);
  float *lg = malloc(sizeof(float) * (size_t)(np + MULTI_K) * V), *pl = malloc(sizeof(float) * (size_t)V);
  double *mag = malloc(sizeof(double) * (size_t)V);
  must_eval(c, all, np + MULTI_K, 0, lg, 1);
  double worst = 0;
  for (int j = 0; j < n_out; j++) {
    plain_logits(m, hid + (size_t)j * H, pl, mag);
    const float *ref = lg + (size_t)(np + p0 + j) * V;
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs((double)pl[v] - ref[v]) / (mag[v] + 1e-30));
  }
  CHECK(worst < 1e-5, "%d outputs: |W hidden - logits| / sum|w h| = %.3g", n_out, worst);
  free(lg);
  free(pl);
  free(mag);
  free(hid);
  free(hseq);
  q35_session_free(a);
  q35_session_free(b);
  q35_session_free(c);
  q35_session_free(nb);
}

static void test_outputs_multi(q35_model *m) {
  const int np = NPROMPT / 2 + 1;
  int32_t *p = rnd_toks(np), *x = rnd_toks(MULTI_K);
  x[3] = x[1]; /* a repeated token: the penalties see the row's own tokens */
  static const int outs[] = {1, 2, MULTI_K};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
    for (int nbr = 0; nbr < 2; nbr++) multi_case(m, outs[i], nbr, p, np, x);
  /* three rows of MULTI_K samples each in one step: 18 positions, more than one joint pass over
   * the output matrix takes, so a row's positions straddle two passes; each row == alone */
  {
    enum { NR = 3 };
    const int H = q35_model_n_embd(m);
    q35_session *ss[NR], *solo = new_session(m, 128);
    q35_sampling sps[NR];
    q35_output outs[NR][MULTI_K], o1[MULTI_K];
    float *hid = malloc(sizeof(float) * NR * MULTI_K * (size_t)H), *h1 = malloc(sizeof(float) * MULTI_K * (size_t)H);
    q35_row rows[NR];
    memset(rows, 0, sizeof rows);
    for (int k = 0; k < NR; k++) {
      ss[k] = new_session(m, 128);
      must_eval(ss[k], p, np - k, 0, NULL, 0);
      sps[k] = sampling_for(900 + (uint64_t)k);
      rows[k].session = ss[k];
      rows[k].tokens = x;
      rows[k].n_tokens = MULTI_K;
      rows[k].sampling = &sps[k];
      rows[k].history = p;
      rows[k].n_history = np - k;
      rows[k].n_prompt = np - k;
      rows[k].n_top_logprobs = 5;
      rows[k].n_outputs = MULTI_K;
      rows[k].outputs = outs[k];
      rows[k].hidden = hid + (size_t)k * MULTI_K * H;
    }
    must_step(m, rows, NR);
    for (int k = 0; k < NR; k++) {
      q35_session_reset(solo);
      must_eval(solo, p, np - k, 0, NULL, 0);
      q35_row r1 = rows[k];
      r1.session = solo;
      r1.outputs = o1;
      r1.hidden = h1;
      must_step(m, &r1, 1);
      int same = 1;
      for (int j = 0; j < MULTI_K; j++) /* token, logprob and the 5 alternatives asked for */
        same &= o1[j].token == outs[k][j].token && !memcmp(&o1[j].logprob, &outs[k][j].logprob, sizeof(float)) &&
                !memcmp(o1[j].top_ids, outs[k][j].top_ids, sizeof(int32_t) * 5) &&
                !memcmp(o1[j].top_logprobs, outs[k][j].top_logprobs, sizeof(float) * 5);
      CHECK(same, "row %d of 3 (6 samples each) differs from the row alone", k);
      CHECK(same_floats(h1, hid + (size_t)k * MULTI_K * H, (size_t)MULTI_K * H), "row %d: hidden states differ", k);
    }
    for (int k = 0; k < NR; k++) q35_session_free(ss[k]);
    q35_session_free(solo);
    free(hid);
    free(h1);
  }
  /* bad n_outputs: refused before anything runs */
  q35_err err = {{0}};
  q35_session *s = new_session(m, 64);
  q35_sampling g = q35_sampling_default();
  q35_output o[MULTI_K + 1];
  q35_row row;
  memset(&row, 0, sizeof row);
  row.session = s;
  row.tokens = x;
  row.n_tokens = 3;
  row.sampling = &g;
  row.n_top_logprobs = -1;
  const int32_t bad[] = {4, -2, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    row.n_outputs = bad[i];
    row.outputs = o;
    memset(&err, 0, sizeof err);
    CHECK(q35_step(m, &row, 1, &err) == -1 && has(err.msg, "n_outputs"), "n_outputs %d: '%s'", bad[i], err.msg);
  }
  row.n_outputs = 2; /* several outputs need the array */
  row.outputs = NULL;
  memset(&err, 0, sizeof err);
  CHECK(q35_step(m, &row, 1, &err) == -1 && has(err.msg, "outputs"), "no outputs array: '%s'", err.msg);
  row.n_outputs = 1; /* one output: a sampling row needs its parameters */
  row.sampling = NULL;
  memset(&err, 0, sizeof err);
  CHECK(q35_step(m, &row, 1, &err) == -1 && has(err.msg, "sampling"), "no sampling: '%s'", err.msg);
  CHECK(q35_session_pos(s) == 0);
  printf("[%s] samples at 1, 2 and %d of %d positions (alone and beside a row) == one per step; 3 such rows in one "
         "step == alone; hidden state x output matrix == logits\n", cur_model, MULTI_K, MULTI_K);
  q35_session_free(s);
  free(p);
  free(x);
}

/* ---- driver -------------------------------------------------------------------------------- */

static void run_model(const char *name, const q35_tiny_opts *o, const char *dir) {
  cur_model = name;
  check_context = name;
  char path[512];
  snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
  q35_err err = {{0}};
  if (q35_tiny_write(o, path, &err)) {
    fprintf(stderr, "FAIL [%s] q35_tiny_write: %s\n", name, err.msg);
    exit(1);
  }
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = 2;
  q35_model *m = q35_model_load(path, &mp, &err);
  if (!m) {
    fprintf(stderr, "FAIL [%s] q35_model_load: %s\n", name, err.msg);
    exit(1);
  }
  V = q35_model_n_vocab(m);
  CHECK(V == o->n_vocab);
  test_isolation(m);
  test_batch_invariance(m);
  test_snapshot_reset(m);
  test_limits_and_errors(m);
  test_outputs_none(m);
  test_outputs_multi(m);
  /* a snapshot from one model is refused by another model's session */
  {
    q35_model *m2 = q35_model_load(path, &mp, &err);
    CHECK(m2 != NULL, "%s", err.msg);
    if (m2) {
      q35_session *a = new_session(m, 32), *b = new_session(m2, 32);
      int32_t tk = 1;
      must_eval(a, &tk, 1, 0, NULL, 0);
      q35_snapshot *sn = q35_session_snapshot(a, &err);
      memset(&err, 0, sizeof err);
      CHECK(sn && q35_session_restore(b, sn, &err) == -1 && err.msg[0]);
      CHECK(q35_session_pos(b) == 0);
      /* a session of another model in a step */
      q35_sampling g = q35_sampling_default();
      q35_row row;
      memset(&row, 0, sizeof row);
      row.session = b;
      row.tokens = &tk;
      row.n_tokens = 1;
      row.sampling = &g;
      row.n_top_logprobs = -1;
      memset(&err, 0, sizeof err);
      CHECK(q35_step(m, &row, 1, &err) == -1 && err.msg[0]);
      CHECK(q35_session_pos(b) == 0);
      q35_snapshot_free(sn);
      q35_session_free(a);
      q35_session_free(b);
      q35_model_free(m2);
    }
  }
  q35_model_free(m);
  unlink(path);
}

/* q35_matmul at a decode step (T = 1) with several threads claims a matrix's rows as pairs (i,
 * i + N/2), each piece one q35_vec_dot_rows2, once the halves are 128 KiB apart
 * (src/model/matmul.c): every output must still be its row's q35_vec_dot, bit for bit, the odd
 * last row included, alone (q35_matmul_f) and beside a product too short to pair
 * (q35_matmul_same), at 1, 2 and 3 threads. */
static float pair_rnd(uint64_t *s) { /* uniform in [-1, 1], its own state: rnd_tok's is the models' */
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (float)(int)(*s % 2001) / 1000.0f - 1.0f;
}
static void test_matmul_pairs(void) {
  const int64_t K = 2048;
  uint64_t rs = 12345;
  const int types[2] = {Q35_TYPE_Q4_0, Q35_TYPE_Q8_0}, N[2] = {301, 40};
  float *f = malloc(sizeof(float) * (size_t)K);
  for (int ti = 0; ti < 2; ti++) {
    const int type = types[ti], vt = q35_vec_dot_type(type);
    const size_t ws = q35_row_size(type, K);
    uint8_t *w[2];
    float *y[2], *ref[2];
    for (int m = 0; m < 2; m++) {
      w[m] = malloc(ws * (size_t)N[m]);
      y[m] = malloc(sizeof(float) * (size_t)N[m]);
      ref[m] = malloc(sizeof(float) * (size_t)N[m]);
      for (int r = 0; r < N[m]; r++) {
        for (int64_t i = 0; i < K; i++) f[i] = pair_rnd(&rs);
        q35_quantize_row(type, f, w[m] + (size_t)r * ws, K);
      }
    }
    for (int64_t i = 0; i < K; i++) f[i] = 2.0f * pair_rnd(&rs);
    char *xq = malloc(q35_row_size(vt, K)), *buf = malloc(q35_row_size(vt, K));
    q35_quantize_row(vt, f, xq, K);
    for (int m = 0; m < 2; m++)
      for (int r = 0; r < N[m]; r++) ref[m][r] = q35_vec_dot(type, K, w[m] + (size_t)r * ws, xq);
    const q35_tensor t[2] = {{w[0], type, {K, N[0], 1, 1}, ws, ws * (size_t)N[0]},
                             {w[1], type, {K, N[1], 1, 1}, ws, ws * (size_t)N[1]}};
    for (int nth = 1; nth <= 3; nth++) {
      q35_pool *pool = q35_pool_new(nth);
      memset(y[0], 0xff, sizeof(float) * (size_t)N[0]);
      q35_matmul_f(pool, &t[0], f, K, 1, y[0], N[0], buf);
      CHECK(!memcmp(y[0], ref[0], sizeof(float) * (size_t)N[0]), "q35_matmul_f type %d, %d threads", type, nth);
      const q35_tensor *tp[2] = {&t[0], &t[1]};
      float *yp[2] = {y[0], y[1]};
      const int64_t ld[2] = {N[0], N[1]};
      q35_act xa = Q35_ACT_NONE;
      for (int m = 0; m < 2; m++) memset(y[m], 0xff, sizeof(float) * (size_t)N[m]);
      q35_matmul_same(pool, tp, yp, ld, 2, &xa, f, K, 1, buf);
      for (int m = 0; m < 2; m++)
        CHECK(!memcmp(y[m], ref[m], sizeof(float) * (size_t)N[m]), "q35_matmul_same type %d, product %d, %d threads",
              type, m, nth);
      q35_pool_free(pool);
    }
    for (int m = 0; m < 2; m++) free(w[m]), free(y[m]), free(ref[m]);
    free(xq);
    free(buf);
  }
  free(f);
}

int main(void) {
  const char *sv = getenv("Q35_SANITIZE_RUN");
  const int san = sv && strcmp(sv, "0") != 0;
  const char *pv = getenv("Q35_TEST_PENDING");
  pending_strict = !(pv && strcmp(pv, "0") == 0); /* the bugs are fixed: strict unless Q35_TEST_PENDING=0 */
  NPROMPT = san ? 12 : 24;
  NDEC = san ? 8 : 24;
  test_matmul_pairs();
  char dir[] = "/tmp/q35_test_engine_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  q35_tiny_opts o = q35_tiny_default();
  o.moe = 1;
  o.n_layer = 4;
  o.interval = 2; /* layers 1 and 3 are attention */
  o.n_embd = 128;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.head_dim = 32;
  o.n_rot = 16;
  o.ssm_k_heads = 2;
  o.ssm_v_heads = 4;
  o.ssm_head_dim = 32;
  o.n_expert = 8;
  o.n_expert_used = 2;
  o.n_ff_exp = 64;
  o.n_ff_shexp = 64;
  o.n_vocab = 512;
  o.type = Q35_TYPE_F32;
  o.seed = 11;
  run_model("moe_f32", &o, dir);

  q35_tiny_opts d = o;
  d.moe = 0;
  d.n_layer = 3;
  d.interval = 3;
  d.n_ff = 128;
  d.n_vocab = 384;
  d.tied = 1;
  d.type = Q35_TYPE_Q8_0;
  d.seed = 12;
  run_model("dense_q8_0", &d, dir);
  rmdir(dir);
  if (pending_seen) printf("test_engine: %d check(s) of a known bug pending (Q35_TEST_PENDING=1 makes them fail)\n",
                          pending_seen);
  if (!failures) printf("test_engine: all passed\n");
  return check_done("test_engine");
}
