/*
 * test_context.c - q35_context: run state apart from the weights (q35.h).
 *
 *   - two contexts on one model, each stepped from its own thread at the same time (prefill with
 *     logits through q35_context_eval, seeded decode with penalties and top logprobs through
 *     q35_context_step, a tail with logits), give bit for bit what the same work gives run one
 *     after the other on the default context; repeated so the runs overlap;
 *   - a session belongs to the model: begun on one context and continued on another, it computes
 *     what one context computes;
 *   - thread counts (q35_context_n_threads, q35_model_n_threads) and the sampling-time counters:
 *     each context counts its own steps;
 *   - a context of another model refuses this model's session.
 * Model: a small MoE (q35_tiny_write) with attention and DeltaNet layers. Q35_SANITIZE_RUN=1
 * shrinks the lengths.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "export/tiny.h"
#include "q35.h"
#include "kernels/quant.h"

static int V, NPROMPT, NDEC, NTAIL;

enum { MAXDEC = 64 };

/* One request's work and what it produced. */
typedef struct {
  q35_model *m;
  q35_context *ctx;
  const int32_t *prompt, *tail;
  uint64_t seed;
  float *prefill, *tail_logits; /* [NPROMPT][V], [NTAIL][V] */
  int32_t tok[MAXDEC];
  float lp[MAXDEC];
  int32_t top[MAXDEC][5];
  float top_lp[MAXDEC][5];
  int ok;
  char err[512];
} work;

static void work_init(work *w, q35_model *m, q35_context *ctx, const int32_t *prompt, const int32_t *tail,
                      uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->m = m;
  w->ctx = ctx;
  w->prompt = prompt;
  w->tail = tail;
  w->seed = seed;
  w->prefill = calloc((size_t)NPROMPT * V, sizeof(float));
  w->tail_logits = calloc((size_t)NTAIL * V, sizeof(float));
}

static void work_free(work *w) {
  free(w->prefill);
  free(w->tail_logits);
}

static void *work_run(void *arg) {
  work *w = arg;
  q35_err err = {{0}};
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 256;
  q35_session *s = q35_session_new(w->m, &sp, &err);
  if (!s) goto fail;
  if (q35_context_eval(w->ctx, s, w->prompt, NPROMPT, 5, w->prefill, 1, &err)) goto fail;
  int32_t hist[256];
  memcpy(hist, w->prompt, sizeof(int32_t) * (size_t)NPROMPT);
  q35_sampling smp = q35_sampling_default();
  smp.temperature = 0.9f;
  smp.top_k = 40;
  smp.top_p = 0.95f;
  smp.presence_penalty = 0.3f;
  smp.repetition_penalty = 1.1f;
  smp.seed = w->seed;
  int32_t next = w->prompt[NPROMPT - 1];
  q35_session_reset(s); /* the decode starts from the prompt minus its last token */
  if (q35_context_eval(w->ctx, s, w->prompt, NPROMPT - 1, 0, NULL, 0, &err)) goto fail;
  for (int i = 0; i < NDEC; i++) {
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.tokens = &next;
    row.n_tokens = 1;
    smp.draw_index = (uint64_t)i;
    row.sampling = &smp;
    row.history = hist;
    row.n_history = NPROMPT + i;
    row.n_prompt = NPROMPT;
    row.n_top_logprobs = 5;
    if (q35_context_step(w->ctx, &row, 1, &err)) goto fail;
    w->tok[i] = row.token;
    w->lp[i] = row.logprob;
    memcpy(w->top[i], row.top_ids, sizeof w->top[i]);
    memcpy(w->top_lp[i], row.top_logprobs, sizeof w->top_lp[i]);
    hist[NPROMPT + i] = row.token;
    next = row.token;
  }
  if (q35_context_eval(w->ctx, s, w->tail, NTAIL, 2, w->tail_logits, 1, &err)) goto fail;
  q35_session_free(s);
  w->ok = 1;
  return NULL;
fail:
  snprintf(w->err, sizeof w->err, "%s", err.msg);
  q35_session_free(s);
  return NULL;
}

static int same_work(const work *a, const work *b) {
  return !memcmp(a->prefill, b->prefill, sizeof(float) * (size_t)NPROMPT * V) &&
         !memcmp(a->tail_logits, b->tail_logits, sizeof(float) * (size_t)NTAIL * V) &&
         !memcmp(a->tok, b->tok, sizeof a->tok) && !memcmp(a->lp, b->lp, sizeof a->lp) &&
         !memcmp(a->top, b->top, sizeof a->top) && !memcmp(a->top_lp, b->top_lp, sizeof a->top_lp);
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static int32_t rnd_tok(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (int32_t)(rs % (uint64_t)V);
}

/* Two contexts stepped from two threads at once == the same work one after the other. */
static void test_concurrent(q35_model *m) {
  q35_err err = {{0}};
  int32_t pa[128], pb[128], ta[16], tb[16];
  for (int i = 0; i < NPROMPT; i++) pa[i] = rnd_tok(), pb[i] = rnd_tok();
  for (int i = 0; i < NTAIL; i++) ta[i] = rnd_tok(), tb[i] = rnd_tok();
  q35_context *dflt = q35_model_context(m);
  CHECK(dflt != NULL);
  work ra, rb;
  work_init(&ra, m, dflt, pa, ta, 31);
  work_init(&rb, m, dflt, pb, tb, 32);
  work_run(&ra);
  work_run(&rb);
  CHECK(ra.ok && rb.ok, "sequential runs: %s %s", ra.err, rb.err);
  CHECK(memcmp(ra.tok, rb.tok, sizeof ra.tok) != 0, "the two requests sample the same tokens (the test proves nothing)");
  q35_context_params cp = q35_context_default_params();
  cp.n_threads = 2;
  q35_context *c1 = q35_context_new(m, &cp, &err);
  cp.n_threads = 1; /* another thread count: the invariance holds across them */
  q35_context *c2 = c1 ? q35_context_new(m, &cp, &err) : NULL;
  CHECK(c1 && c2, "q35_context_new: %s", err.msg);
  if (!c1 || !c2) exit(1);
  CHECK(q35_context_n_threads(c1) == 2 && q35_context_n_threads(c2) == 1);
  CHECK(q35_context_sample_seconds(c1) == 0 && q35_context_sample_seconds(c2) == 0);
  const double dflt_t = q35_model_sample_seconds(m);
  CHECK(dflt_t > 0, "the default context counted no sampling time");
  const int rounds = 3;
  for (int round = 0; round < rounds; round++) {
    work wa, wb;
    work_init(&wa, m, round % 2 ? c2 : c1, pa, ta, 31);
    work_init(&wb, m, round % 2 ? c1 : c2, pb, tb, 32);
    pthread_t th[2];
    CHECK(pthread_create(&th[0], NULL, work_run, &wa) == 0);
    CHECK(pthread_create(&th[1], NULL, work_run, &wb) == 0);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    CHECK(wa.ok && wb.ok, "round %d: %s %s", round, wa.err, wb.err);
    CHECK(same_work(&wa, &ra), "round %d: request A on its own context in its own thread differs from sequential", round);
    CHECK(same_work(&wb, &rb), "round %d: request B on its own context in its own thread differs from sequential", round);
    work_free(&wa);
    work_free(&wb);
  }
  CHECK(q35_context_sample_seconds(c1) > 0 && q35_context_sample_seconds(c2) > 0);
  CHECK(q35_model_sample_seconds(m) == dflt_t, "steps on other contexts were counted by the default context");
  printf("two contexts (2 and 1 threads) in two threads at once, %d rounds: prompts %d, %d decode steps, tails %d == "
         "sequential on the default context\n", rounds, NPROMPT, NDEC, NTAIL);

  /* a session begun on one context continues on another */
  {
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = 256;
    q35_session *s = q35_session_new(m, &sp, &err);
    float *l = malloc(sizeof(float) * (size_t)NTAIL * V);
    CHECK(s && q35_context_eval(c1, s, pa, 7, 0, NULL, 0, &err) == 0, "%s", err.msg);
    CHECK(q35_context_eval(c2, s, pa + 7, NPROMPT - 7, 3, ra.prefill, 1, &err) == 0, "%s", err.msg);
    CHECK(q35_context_eval(dflt, s, ta, NTAIL, 0, l, 1, &err) == 0, "%s", err.msg);
    q35_session *s2 = q35_session_new(m, &sp, &err);
    float *l2 = malloc(sizeof(float) * (size_t)(NPROMPT + NTAIL) * V);
    int32_t all[256];
    memcpy(all, pa, sizeof(int32_t) * (size_t)NPROMPT);
    memcpy(all + NPROMPT, ta, sizeof(int32_t) * (size_t)NTAIL);
    CHECK(q35_session_eval(s2, all, NPROMPT + NTAIL, 0, l2, 1, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(ra.prefill, l2 + (size_t)7 * V, sizeof(float) * (size_t)(NPROMPT - 7) * V) &&
              !memcmp(l, l2 + (size_t)NPROMPT * V, sizeof(float) * (size_t)NTAIL * V),
          "a session moved between contexts differs from one context's run");
    free(l);
    free(l2);
    q35_session_free(s);
    q35_session_free(s2);
    printf("a session stepped on three contexts in turn == one context\n");
  }
  q35_context_free(c1);
  q35_context_free(c2);
  work_free(&ra);
  work_free(&rb);
}

int main(void) {
  const char *sv = getenv("Q35_SANITIZE_RUN");
  const int san = sv && strcmp(sv, "0") != 0;
  NPROMPT = san ? 10 : 24;
  NDEC = san ? 8 : 32;
  NTAIL = 5;
  char dir[] = "/tmp/q35_test_context_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/moe.gguf", dir);
  q35_tiny_opts o = q35_tiny_default();
  o.moe = 1;
  o.n_layer = 4;
  o.interval = 2;
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
  o.type = Q35_TYPE_Q8_0;
  o.seed = 13;
  q35_err err = {{0}};
  if (q35_tiny_write(&o, path, &err)) {
    fprintf(stderr, "FAIL q35_tiny_write: %s\n", err.msg);
    return 1;
  }
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = 3;
  q35_model *m = q35_model_load(path, &mp, &err);
  if (!m) {
    fprintf(stderr, "FAIL q35_model_load: %s\n", err.msg);
    return 1;
  }
  V = q35_model_n_vocab(m);
  CHECK(q35_model_n_threads(m) == 3 && q35_context_n_threads(q35_model_context(m)) == 3);
  test_concurrent(m);
  /* a context of another model refuses this model's session */
  {
    q35_model *m2 = q35_model_load(path, &mp, &err);
    CHECK(m2 != NULL, "%s", err.msg);
    if (m2) {
      q35_context *c = q35_context_new(m2, NULL, &err);
      CHECK(c != NULL, "%s", err.msg);
      q35_session *s = q35_session_new(m, NULL, &err);
      const int32_t t = 1;
      memset(&err, 0, sizeof err);
      CHECK(c && s && q35_context_eval(c, s, &t, 1, 0, NULL, 0, &err) == -1 && err.msg[0], "'%s'", err.msg);
      q35_sampling g = q35_sampling_default();
      q35_row row;
      memset(&row, 0, sizeof row);
      row.session = s;
      row.tokens = &t;
      row.n_tokens = 1;
      row.sampling = &g;
      memset(&err, 0, sizeof err);
      CHECK(c && q35_context_step(c, &row, 1, &err) == -1 && strstr(err.msg, "another model"), "'%s'", err.msg);
      CHECK(q35_session_pos(s) == 0);
      q35_session_free(s);
      q35_context_free(c);
      q35_model_free(m2);
    }
  }
  q35_model_free(m);
  unlink(path);
  rmdir(dir);
  return check_done("test_context");
}
