/*
 * sched.c - continuous batching over q35_step, slots, prefix reuse (see sched.h).
 *
 * Data structures
 *   slot  one q35_session, the tokens it has consumed (its position is n_toks) and up to
 *         MAX_SNAPS snapshots (position + recurrent state). A slot is either idle (only
 *         touched under the mutex) or busy (owned by the scheduler thread).
 *   seq   one choice of one job: prompt + generated history, the position in the prompt,
 *         the streaming detokenizer and the stop-string hold-back buffer.
 * Lists: `queue` (sequences waiting for a slot, FIFO) and `active` (at most `parallel`).
 *
 * The loop: admit queued sequences into free slots (restoring the best prefix state), build
 * one row per active sequence (a prefill chunk or the last sampled token), run the step with
 * the mutex released, then turn each row's token into events. Prefill chunks end exactly at
 * snapshot positions so the state can be saved there.
 *
 * Groups (a model split into N pipeline stages, q35_model_stages): the active sequences are
 * split into N groups whose steps are in flight at once, each on its own context, so that every
 * stage works on another group's step: the loop takes the groups in turn, ends the group's step
 * in flight (q35_context_step_end), turns its tokens into events, admits, and begins the group's
 * next step (q35_context_step_begin), which returns once this process's layers are done. A new
 * sequence joins the group about to step; a group more than one sequence larger than another
 * hands its newest sequences over while none of them is in flight. A sequence is in one group's
 * step at a time and its steps stay in order, and a row's results do not depend on the other
 * rows of its step, so the output is what one step at a time gives. With one stage there is one
 * group: begin and end follow each other, as q35_step.
 */
#define _GNU_SOURCE
#include "server/sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/util.h"
#include "server/stop.h"

#define MAX_SNAPS 4             /* per slot; a 35B-A3B state is ~60 MB */
#define SNAPSHOT_HEADER_BYTES 64 /* a snapshot's bytes beyond the recurrent state (budget estimate) */
#define MAX_CHOICES 64           /* most sequences one job may fork into */
#define DEFAULT_CHUNK 256        /* prefill tokens per step when the options give none */
#define IDLE_WAKE_S 1.0          /* an idle scheduler wakes this often (s) to evict idle sessions */
#define GATHER_WAIT_S 0.002      /* after waking: wait this long (s) for more requests ... */
#define GATHER_ROUNDS 5          /* ... this many times at most */
#define NO_ROWS_HINT_ENV "Q35_TEST_NO_DRAFT_HINT" /* test only: the draft plan gets no rows hint */

typedef struct slot {
  q35_session *sess;
  int32_t *toks;
  int32_t n_toks;
  size_t cap;         /* of toks */
  int32_t snap_pos[MAX_SNAPS];
  q35_snapshot *snap[MAX_SNAPS];
  int n_snaps;
  char *id;           /* named session id, or NULL */
  int busy;
  uint64_t last_used;
  double last_time;   /* q35_now() when last taken or released (idle eviction) */
  struct slot *next;  /* in the named list */
} slot;

typedef struct seq {
  struct seq *next;
  srv_job *job;
  int choice;
  slot *sl;
  int32_t *hist;      /* prompt then generated tokens */
  int32_t n_hist;
  int32_t fed;        /* prompt tokens consumed */
  int32_t n_gen;      /* generated (non-EOG) tokens */
  int32_t n_sampled;
  int32_t limit;      /* max generated tokens */
  int32_t last;
  q35_sampling sp;
  q35_detok *dt;
  q35_buf hold;       /* text held back for stop strings */
  size_t decoded;     /* bytes the detokenizer has produced */
  size_t released;    /* bytes of text sent in events */
  int32_t *snaps_at;  /* prompt positions to snapshot at (ascending) */
  int n_snaps_at, snap_i;
  q35_constraint *con; /* the job's constraint, cloned for this choice (NULL: none) */
  int trig_i;          /* job triggers seen so far; con is active once all are */
  q35_detok *raw;      /* while triggers are pending: the output with control tokens kept */
  q35_buf tail;        /* ... its text since the last trigger */
  q35_sampling sp_wait;        /* while waiting for </think> before a mandatory language: sp with */
  q35_logit_bias *wait_bias;   /* the job's biases plus a ban of the end-of-generation tokens */
  int in_think;        /* job->think_budget: still inside the reasoning */
  int32_t n_think;     /* ... reasoning tokens generated so far */
  int32_t force;       /* >= 0: the next token is this one (the budget's </think>), not sampled */
  q35_output *outs;    /* [draft + 1]: the tokens a decode row emits */
  int grp;             /* the group whose steps it joins (-1: not yet) */
  int in_flight;       /* its row is in the group's step in flight (never dropped then) */
} seq;

/* A group of sequences whose steps are in flight at once with the other groups' (see the top). */
typedef struct grp {
  q35_context *ctx;   /* group 0: the model's default context; others share its threads */
  q35_row *rows;      /* [parallel] */
  seq **row_seq;
  int n;              /* rows of the step begun */
  int busy;           /* a step begun and not yet ended */
  double seconds;     /* in begin and end, this step */
} grp;

struct srv_sched {
  q35_model *model;
  const q35_tokenizer *tok;
  srv_sched_opts o;
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* wakes the scheduler */
  pthread_t thread;
  int stop;
  seq *queue, *active;
  int n_queued, n_active;
  int no_rows_hint; /* Q35_TEST_NO_DRAFT_HINT set: the draft plan gets no rows hint (test only) */
  slot *anon;         /* o.parallel slots */
  slot *named;        /* list */
  int n_named;
  slot *to_free;      /* deleted named slots whose session the scheduler frees */
  uint64_t clock;
  grp *grp;           /* [n_grp] */
  int n_grp;
  uint32_t *cmask;    /* a constraint's token mask (con_dead), words for the model's vocabulary */
  int32_t im_start;
  /* metrics */
  uint64_t m_requests, m_prompt_tokens, m_cached_tokens, m_gen_tokens, m_steps, m_step_rows, m_errors,
      m_rejected, m_cancelled, m_evictions;
  uint64_t m_idle_evictions, m_mem_evictions, m_mem_refused, m_snaps_skipped;
  uint64_t m_starts, m_cache_hits; /* sequences started; those that reused a stored prefix */
  int m_last_rows;                 /* rows in the latest step */
  uint64_t m_draft_tokens, m_draft_accepted, m_draft_rows, m_draft_trims;
  /* memory budget: bytes one new session and one snapshot take */
  uint64_t sess_need, snap_need;
  double m_step_seconds;
};

/* The absolute CLOCK_REALTIME time `seconds` from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(double seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long ns = ts.tv_nsec + (long)(seconds * 1e9);
  ts.tv_sec += ns / 1000000000L;
  ts.tv_nsec = ns % 1000000000L;
  return ts;
}

/* ---- events ---- */

srv_job *srv_job_new(void) {
  srv_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->refs = 1;
  j->n = 1;
  j->n_top_logprobs = -1;
  j->sp = q35_sampling_default();
  pthread_cond_init(&j->cv, NULL);
  return j;
}

void srv_events_free(srv_event *e) {
  while (e) {
    srv_event *n = e->next;
    free(e->text);
    free(e);
    e = n;
  }
}

static void job_free(srv_job *j) {
  srv_events_free(j->ev_head);
  free(j->prompt);
  for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
  free(j->session_id);
  free(j->logit_bias);
  q35_constraint_free(j->constraint);
  for (int i = 0; i < j->n_trigger; i++) free(j->trigger[i]);
  pthread_cond_destroy(&j->cv);
  free(j);
}

/* with the mutex held */
static void job_unref(srv_job *j) {
  if (--j->refs == 0) job_free(j);
}

void srv_job_release(srv_sched *s, srv_job *j) {
  pthread_mutex_lock(&s->mu);
  job_unref(j);
  pthread_mutex_unlock(&s->mu);
}

static void push_event(srv_job *j, srv_event *e) {
  if (j->ev_tail) j->ev_tail->next = e;
  else j->ev_head = e;
  j->ev_tail = e;
  pthread_cond_broadcast(&j->cv);
}

srv_event *srv_job_take(srv_sched *s, srv_job *j, int timeout_ms, int *done) {
  pthread_mutex_lock(&s->mu);
  if (!j->ev_head && !j->done && timeout_ms > 0) {
    const struct timespec ts = deadline_in(timeout_ms / 1000.0);
    while (!j->ev_head && !j->done)
      if (pthread_cond_timedwait(&j->cv, &s->mu, &ts) == ETIMEDOUT) break;
  }
  srv_event *e = j->ev_head;
  j->ev_head = j->ev_tail = NULL;
  *done = j->done;
  pthread_mutex_unlock(&s->mu);
  return e;
}

/* ---- slots ---- */

static void slot_drop_snaps_above(slot *sl, int32_t pos) {
  int k = 0;
  for (int i = 0; i < sl->n_snaps; i++) {
    if (sl->snap_pos[i] <= pos) {
      sl->snap_pos[k] = sl->snap_pos[i];
      sl->snap[k++] = sl->snap[i];
    } else {
      q35_snapshot_free(sl->snap[i]);
    }
  }
  sl->n_snaps = k;
}

static void slot_clear(slot *sl) {
  slot_drop_snaps_above(sl, -1);
  sl->n_toks = 0;
}

static void slot_destroy(slot *sl) {
  slot_clear(sl);
  if (sl->sess) q35_session_free(sl->sess);
  free(sl->toks);
  free(sl->id);
  sl->sess = NULL;
  sl->toks = NULL;
  sl->id = NULL;
}

static uint64_t slot_bytes(const slot *sl) {
  if (!sl->sess) return 0;
  uint64_t b = q35_session_bytes(sl->sess);
  for (int k = 0; k < sl->n_snaps; k++) b += q35_snapshot_bytes(sl->snap[k]);
  return b;
}

/* Bytes held by every slot's session and snapshots (mutex held or scheduler thread). */
static uint64_t sched_bytes(const srv_sched *s) {
  uint64_t b = 0;
  for (int i = 0; i < s->o.parallel; i++) b += slot_bytes(&s->anon[i]);
  for (const slot *sl = s->named; sl; sl = sl->next) b += slot_bytes(sl);
  return b;
}

/* Free an idle slot's session and snapshots (the slot and its id stay). */
static void slot_release_state(slot *sl) {
  slot_clear(sl);
  if (sl->sess) q35_session_free(sl->sess);
  sl->sess = NULL;
}

static const char *fmt_bytes(char *b, size_t n, uint64_t x) {
  if (x >= (1ull << 30)) snprintf(b, n, "%.2f GiB", x / 1073741824.0);
  else if (x >= (1ull << 20)) snprintf(b, n, "%.2f MiB", x / 1048576.0);
  else snprintf(b, n, "%llu bytes", (unsigned long long)x);
  return b;
}

static int slot_push_toks(slot *sl, const int32_t *t, int32_t n) {
  if (q35_grow((void **)&sl->toks, &sl->cap, (size_t)sl->n_toks + (size_t)n, sizeof *sl->toks)) return -1;
  memcpy(sl->toks + sl->n_toks, t, (size_t)n * sizeof *t);
  sl->n_toks += n;
  return 0;
}

/* The furthest position this slot can resume from for prompt p (0: start over). */
static int32_t slot_usable(const slot *sl, const int32_t *p, int32_t n) {
  int32_t L = 0;
  while (L < sl->n_toks && L < n && sl->toks[L] == p[L]) L++;
  if (sl->n_toks <= L && sl->n_toks < n) return sl->n_toks;
  int32_t best = 0;
  for (int i = 0; i < sl->n_snaps; i++)
    if (sl->snap_pos[i] <= L && sl->snap_pos[i] < n && sl->snap_pos[i] > best) best = sl->snap_pos[i];
  return best;
}

/* Scheduler thread: bring the slot's session to the best reusable state for prompt p.
 * Returns the position reached (tokens reused) or -1 on error. */
static int32_t slot_prepare(srv_sched *s, slot *sl, const int32_t *p, int32_t n, q35_err *err) {
  if (!sl->sess) {
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = s->o.n_ctx;
    sp.kv_type = s->o.kv_type;
    sp.mem_budget = s->o.mem_budget;
    sp.draft_max = s->o.draft;
    sp.draft_vocab = s->o.draft_vocab;
    sl->sess = q35_session_new(s->model, &sp, err);
    if (!sl->sess) return -1;
    sl->n_toks = 0;
  }
  int32_t pos = slot_usable(sl, p, n);
  if (pos > 0 && pos == sl->n_toks && q35_session_pos(sl->sess) == pos) {
    slot_drop_snaps_above(sl, pos);
    return pos;
  }
  for (int i = 0; pos > 0 && i < sl->n_snaps; i++)
    if (sl->snap_pos[i] == pos) {
      if (q35_session_restore(sl->sess, sl->snap[i], err) == 0) {
        sl->n_toks = pos;
        slot_drop_snaps_above(sl, pos);
        return pos;
      }
      break;
    }
  q35_session_reset(sl->sess);
  slot_clear(sl);
  return 0;
}

static void slot_snapshot(srv_sched *s, slot *sl) {
  if (s->o.mem_budget && sl->n_snaps < MAX_SNAPS && sched_bytes(s) + s->snap_need > s->o.mem_budget) {
    s->m_snaps_skipped++; /* prefix reuse only: skipping it changes no output */
    return;
  }
  q35_err err;
  q35_snapshot *sn = q35_session_snapshot(sl->sess, &err);
  if (!sn) return;
  if (sl->n_snaps == MAX_SNAPS) { /* drop the oldest (lowest position) */
    q35_snapshot_free(sl->snap[0]);
    memmove(sl->snap, sl->snap + 1, (MAX_SNAPS - 1) * sizeof sl->snap[0]);
    memmove(sl->snap_pos, sl->snap_pos + 1, (MAX_SNAPS - 1) * sizeof sl->snap_pos[0]);
    sl->n_snaps--;
  }
  sl->snap[sl->n_snaps] = sn;
  sl->snap_pos[sl->n_snaps++] = sl->n_toks;
}

/* ---- sequences ---- */

static void seq_free(seq *q) {
  if (!q) return;
  free(q->hist);
  if (q->dt) q35_detok_free(q->dt);
  q35_buf_free(&q->hold);
  free(q->snaps_at);
  q35_constraint_free(q->con);
  free(q->wait_bias);
  if (q->raw) q35_detok_free(q->raw);
  q35_buf_free(&q->tail);
  free(q->outs);
  free(q);
}

/* Finish a sequence (mutex held): release its slot, count it, maybe complete the job. */
static void seq_finish(srv_sched *s, seq *q) {
  srv_job *j = q->job;
  if (q->sl) {
    q->sl->busy = 0;
    q->sl->last_used = ++s->clock;
    q->sl->last_time = q35_now();
  }
  j->completion_tokens += q->n_gen;
  s->m_gen_tokens += (uint64_t)q->n_gen;
  if (++j->n_finished == j->n) {
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
  }
  job_unref(j);
  seq_free(q);
}

static void job_fail(srv_job *j, int status, const char *msg) {
  if (j->failed) return;
  j->failed = 1;
  j->status = status;
  snprintf(j->errmsg, sizeof j->errmsg, "%s", msg);
  pthread_cond_broadcast(&j->cv);
}

/* Append generated text to the hold-back buffer; a NUL byte (a token of the byte 0x00) becomes
 * U+FFFD, since the responses carry text as C strings (README "Server API": generated text).
 * Returns the bytes appended. */
static size_t hold_append(seq *q, const char *t, size_t n) {
  size_t out = 0;
  for (size_t i = 0; i < n;) {
    size_t k = i;
    while (k < n && t[k]) k++;
    if (k > i && q35_buf_add(&q->hold, t + i, k - i) == 0) out += k - i;
    if (k < n && q35_buf_add(&q->hold, "\xEF\xBF\xBD", 3) == 0) out += 3;
    i = k + 1;
  }
  return out;
}

/* Release the held text that can no longer start a stop string (stop.h). */
static int hold_release(seq *q, int final, char **out, size_t *out_len) {
  return stop_release(&q->hold, (const char *const *)q->job->stop, q->job->n_stop, final, out, out_len);
}

static srv_event *event_new(seq *q) {
  srv_event *e = calloc(1, sizeof *e);
  if (e) e->choice = q->choice;
  return e;
}

/* Lazy activation: watch the raw output for the job's next trigger string. */
static void seq_watch_triggers(seq *q, int32_t token) {
  const srv_job *j = q->job;
  if (!q->con || q->trig_i >= j->n_trigger) return;
  const char *piece = NULL;
  size_t plen = 0;
  q35_err err;
  if (q35_detok_feed(q->raw, token, &piece, &plen, &err) || !plen) return;
  if (q35_buf_add(&q->tail, piece, plen)) return;
  while (q->trig_i < j->n_trigger) {
    const char *t = j->trigger[q->trig_i];
    const size_t tl = strlen(t);
    const char *hit = strstr(q->tail.p, t);
    /* keep what follows a match (the next trigger may be in it), else the last tl - 1 bytes */
    const size_t keep = hit ? q->tail.n - (size_t)(hit - q->tail.p) - tl : q->tail.n < tl ? q->tail.n : tl - 1;
    memmove(q->tail.p, q->tail.p + q->tail.n - keep, keep + 1);
    q->tail.n = keep;
    if (!hit) return;
    q->trig_i++;
  }
}

/* Thinking budget: count the reasoning tokens; at the budget, without </think> yet, the next
 * token is forced to be </think> (the row feeds the last token and samples nothing). */
static void seq_count_think(seq *q, int32_t token) {
  const srv_job *j = q->job;
  if (!q->in_think) return;
  if (token == j->think_end) {
    q->in_think = 0;
  } else if (++q->n_think >= j->think_budget && !(q->con && q->trig_i >= j->n_trigger)) {
    q->force = j->think_end; /* (an active constraint decides the tokens itself) */
  }
}

/* A constraint that allows no token here would fail the whole step (and every row in it), so
 * its sequence fails alone first (mutex held). The mask is cached by the constraint, so the
 * step's own mask costs nothing more. 1: failed. */
static int con_dead(srv_sched *s, seq *q) {
  q35_err err = {{0}};
  if (q35_constraint_mask(q->con, s->cmask, &err)) {
    job_fail(q->job, 500, "constraint: out of memory computing a mask");
    return 1;
  }
  const int32_t words = (q35_model_n_vocab(s->model) + 31) / 32;
  for (int32_t i = 0; i < words; i++)
    if (s->cmask[i]) return 0;
  job_fail(q->job, 500, "the constraint allows no token here: its language has no continuation in this vocabulary");
  return 1;
}

/* How the sequence's next token is sampled: forced, under its constraint, with the end of the
 * turn banned (seq_wait_bias). A decode row's emitted tokens after one that changes this were
 * sampled under the old rules and are not kept. */
static int seq_regime(const seq *q) {
  const srv_job *j = q->job;
  return (q->force >= 0) | (q->con && q->trig_i >= j->n_trigger) << 1 | (q->wait_bias && q->trig_i < j->n_trigger) << 2;
}

/* Handle one token a row produced (mutex held): sampled, or forced (then o holds the forced token
 * with log-probability 0 as its one alternative). Returns 1 when the sequence ended. */
static int seq_on_token(srv_sched *s, seq *q, const q35_output *o, int forced) {
  srv_event *e = event_new(q);
  if (!e) {
    job_fail(q->job, 500, "out of memory");
    return 1;
  }
  q->n_sampled++;
  const char *finish = NULL;
  const char *piece = NULL;
  size_t plen = 0;
  int flush = 0;
  if (q35_tokenizer_is_eog(s->tok, o->token)) {
    finish = "stop";
    flush = 1;
  } else {
    q->hist[q->n_hist++] = o->token;
    seq_watch_triggers(q, o->token);
    seq_count_think(q, o->token);
    q->n_gen++;
    q->last = o->token;
    e->has_token = 1;
    e->token = o->token;
    e->logprob = o->logprob;
    e->n_top = q->job->n_top_logprobs > 0 ? q->job->n_top_logprobs : 0;
    if (forced && e->n_top) e->n_top = 1; /* forced: the one alternative */
    for (int i = 0; i < e->n_top; i++) {
      e->top_ids[i] = o->top_ids[i];
      e->top_logprobs[i] = o->top_logprobs[i];
    }
    e->tok_start = q->decoded;
    q35_err err;
    if (q35_detok_feed(q->dt, o->token, &piece, &plen, &err) == 0 && plen) q->decoded += hold_append(q, piece, plen);
    if (q->n_gen >= q->limit) {
      finish = "length";
      flush = 1;
    }
  }
  if (flush) {
    q35_detok_flush(q->dt, &piece, &plen);
    if (plen) q->decoded += hold_append(q, piece, plen);
  }
  if (hold_release(q, flush, &e->text, &e->len)) finish = "stop";
  q->released += e->len;
  e->finish = finish;
  e->text_end = q->released;
  e->cut = finish && q->released < q->decoded;
  push_event(q->job, e);
  return finish != NULL;
}

/* The tokens a sampling row emitted (mutex held), in order: one, or with drafts the accepted
 * drafts and the trunk's token after them. The row fed its token and every emitted token but the
 * last; where the sequence's sampling changes after token i (seq_regime) and more follow, the
 * session keeps the first i + 1 (q35_session_draft_keep) and the slot's tokens follow it. Returns
 * 1 when the sequence ended. */
static int seq_on_emitted(srv_sched *s, seq *q, const q35_row *r) {
  const int multi = r->outputs && r->n_emitted > 0; /* a decode row's outputs[] (prefill rows have none) */
  const int32_t n = multi ? r->n_emitted : 1;
  q35_output one;
  if (!multi) {
    one.token = r->token;
    one.logprob = r->logprob;
    memcpy(one.top_ids, r->top_ids, sizeof one.top_ids);
    memcpy(one.top_logprobs, r->top_logprobs, sizeof one.top_logprobs);
  }
  const q35_output *outs = multi ? r->outputs : &one;
  if (r->n_drafted > 0) {
    q->job->draft_tokens += r->n_drafted;
    q->job->draft_accepted += n - 1;
    s->m_draft_tokens += (uint64_t)r->n_drafted;
    s->m_draft_accepted += (uint64_t)(n - 1);
    s->m_draft_rows++;
  }
  const int regime = seq_regime(q);
  int32_t kept = n, ended = 0;
  for (int32_t i = 0; i < n && !ended; i++) {
    ended = seq_on_token(s, q, &outs[i], 0);
    if (!ended && i + 1 < n && seq_regime(q) != regime) {
      q35_err err;
      if (q35_session_draft_keep(q->sl->sess, i + 1, &err) == 0) {
        if (r->constraint) q35_constraint_rollback(r->constraint, n - (i + 1), &err);
        kept = i + 1;
        s->m_draft_trims++;
        break;
      }
    }
  }
  /* the session consumed the emitted tokens before the last one kept (all of them when the
   * sequence ended: the slot's tokens follow the session) */
  for (int32_t i = 0; i + 1 < (ended ? n : kept); i++) slot_push_toks(q->sl, &outs[i].token, 1);
  return ended;
}

/* ---- admission ---- */

/* Memory budget: make room for a new session in slot `for_sl` by freeing idle sessions, least
 * recently used first. 1: it fits; 0: it does not fit now but busy sessions may free memory
 * later; -1: it cannot fit (msg filled). Mutex held, scheduler thread. */
static int make_room(srv_sched *s, const slot *for_sl, char *msg, size_t msgsz) {
  if (!s->o.mem_budget || for_sl->sess) return 1;
  for (;;) {
    const uint64_t used = sched_bytes(s);
    if (used + s->sess_need <= s->o.mem_budget) return 1;
    slot *victim = NULL;
    for (int i = 0; i < s->o.parallel; i++) {
      slot *c = &s->anon[i];
      if (c != for_sl && !c->busy && c->sess && (!victim || c->last_used < victim->last_used)) victim = c;
    }
    for (slot *c = s->named; c; c = c->next)
      if (c != for_sl && !c->busy && c->sess && (!victim || c->last_used < victim->last_used)) victim = c;
    if (!victim) {
      int busy = 0;
      for (int i = 0; i < s->o.parallel; i++) busy |= s->anon[i].busy && s->anon[i].sess;
      for (slot *c = s->named; c; c = c->next) busy |= c->busy && c->sess;
      if (busy) return 0;
      char a[32], b[32], c[32];
      snprintf(msg, msgsz,
               "not enough memory for a session: it needs %s of KV/state for a context of %d tokens, %s is in "
               "use, the memory budget is %s (--mem-budget); lower --ctx or raise --mem-budget",
               fmt_bytes(a, sizeof a, s->sess_need), s->o.n_ctx, fmt_bytes(b, sizeof b, used),
               fmt_bytes(c, sizeof c, s->o.mem_budget));
      return -1;
    }
    slot_release_state(victim);
    s->m_mem_evictions++;
  }
}

/* Free the sessions unused for idle_timeout seconds (mutex held, scheduler thread). */
static void evict_idle(srv_sched *s) {
  if (s->o.idle_timeout <= 0) return;
  const double now = q35_now();
  for (int i = 0; i < s->o.parallel; i++) {
    slot *sl = &s->anon[i];
    if (!sl->busy && sl->sess && now - sl->last_time >= s->o.idle_timeout) {
      slot_release_state(sl);
      s->m_idle_evictions++;
    }
  }
  for (slot **pp = &s->named; *pp;) {
    slot *sl = *pp;
    if (!sl->busy && now - sl->last_time >= s->o.idle_timeout) {
      *pp = sl->next;
      s->n_named--;
      if (sl->sess) s->m_idle_evictions++;
      slot_destroy(sl);
      free(sl);
    } else {
      pp = &sl->next;
    }
  }
}

static slot *find_named(srv_sched *s, const char *id) {
  for (slot *sl = s->named; sl; sl = sl->next)
    if (!strcmp(sl->id, id)) return sl;
  return NULL;
}

/* A slot for q, or NULL to keep it queued (mutex held). */
static slot *pick_slot(srv_sched *s, seq *q) {
  const srv_job *j = q->job;
  if (j->session_id && q->choice == 0 && s->o.max_sessions > 0) {
    slot *sl = find_named(s, j->session_id);
    if (sl) return sl->busy ? NULL : sl;
    if (s->n_named >= s->o.max_sessions) { /* evict the least recently used idle one */
      slot *victim = NULL;
      for (slot *c = s->named; c; c = c->next)
        if (!c->busy && (!victim || c->last_used < victim->last_used)) victim = c;
      if (!victim) return NULL;
      free(victim->id);
      victim->id = strdup(j->session_id);
      if (victim->sess) q35_session_reset(victim->sess);
      slot_clear(victim);
      s->m_evictions++;
      return victim->id ? victim : NULL;
    }
    sl = calloc(1, sizeof *sl);
    if (!sl) return NULL;
    sl->id = strdup(j->session_id);
    if (!sl->id) {
      free(sl);
      return NULL;
    }
    sl->last_time = q35_now();
    sl->next = s->named;
    s->named = sl;
    s->n_named++;
    return sl;
  }
  slot *best = NULL;
  int32_t best_pos = -1;
  for (int i = 0; i < s->o.parallel; i++) {
    slot *sl = &s->anon[i];
    if (sl->busy) continue;
    int32_t pos = slot_usable(sl, j->prompt, j->n_prompt);
    if (pos > best_pos || (pos == best_pos && sl->last_used < best->last_used)) {
      best = sl;
      best_pos = pos;
    }
  }
  return best;
}

static int seq_start(srv_sched *s, seq *q, slot *sl) {
  srv_job *j = q->job;
  q35_err err = {{0}};
  int32_t pos = slot_prepare(s, sl, j->prompt, j->n_prompt, &err);
  if (pos < 0) {
    job_fail(j, 503, err.msg);
    return -1;
  }
  q->sl = sl;
  sl->busy = 1;
  sl->last_used = ++s->clock;
  sl->last_time = q35_now();
  q->fed = pos;
  if (q->choice == 0) j->cached_tokens = pos;
  s->m_cached_tokens += (uint64_t)pos;
  s->m_starts++;
  s->m_cache_hits += pos > 0;
  /* snapshot points after pos: every <|im_start|> and every snap_every tokens */
  int32_t n = 0;
  for (int32_t i = pos + 1; i < j->n_prompt; i++)
    if ((s->im_start >= 0 && j->prompt[i] == s->im_start) || (s->o.snap_every > 0 && i % s->o.snap_every == 0)) n++;
  q->snaps_at = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!q->snaps_at) {
    job_fail(j, 500, "out of memory");
    return -1;
  }
  for (int32_t i = pos + 1; i < j->n_prompt; i++)
    if ((s->im_start >= 0 && j->prompt[i] == s->im_start) || (s->o.snap_every > 0 && i % s->o.snap_every == 0))
      q->snaps_at[q->n_snaps_at++] = i;
  return 0;
}

/* A language that must be produced after the reasoning (one trigger, "</think>"): the turn may
 * not end inside the reasoning, which would answer with nothing of the language. The rows sample
 * with the job's biases plus a ban (WAIT_BAN) of every end-of-generation token until then. */
#define WAIT_BAN (-1e9f)
static int seq_wait_bias(srv_sched *s, seq *q) {
  const srv_job *j = q->job;
  if (j->n_trigger != 1 || strcmp(j->trigger[0], "</think>")) return 0;
  const int32_t nb = j->sp.n_logit_bias, nv = q35_tokenizer_n_vocab(s->tok);
  int32_t n_eog = 0;
  for (int32_t t = 0; t < nv; t++) n_eog += q35_tokenizer_is_eog(s->tok, t) != 0;
  q->wait_bias = malloc(sizeof *q->wait_bias * (size_t)(nb + n_eog + 1));
  if (!q->wait_bias) return -1;
  if (nb) memcpy(q->wait_bias, j->sp.logit_bias, sizeof *q->wait_bias * (size_t)nb);
  int32_t k = nb;
  for (int32_t t = 0; t < nv; t++)
    if (q35_tokenizer_is_eog(s->tok, t)) q->wait_bias[k++] = (q35_logit_bias){.token = t, .bias = WAIT_BAN};
  q->sp_wait = q->sp;
  q->sp_wait.logit_bias = q->wait_bias;
  q->sp_wait.n_logit_bias = k;
  return 0;
}

static seq *seq_new(srv_sched *s, srv_job *j, int choice) {
  seq *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->job = j;
  q->choice = choice;
  q->sp = j->sp;
  q->sp.seed = j->sp.seed + (uint64_t)choice;
  q->in_think = j->think_budget > 0;
  q->force = -1;
  q->grp = -1;
  q->limit = s->o.n_ctx - j->n_prompt;
  if (j->max_tokens > 0 && j->max_tokens < q->limit) q->limit = j->max_tokens;
  q->hist = malloc(sizeof(int32_t) * (size_t)(j->n_prompt + q->limit + 1));
  q->outs = calloc((size_t)s->o.draft + 1, sizeof *q->outs);
  q->dt = q35_detok_new(s->tok, Q35_DETOK_SKIP_SPECIAL);
  int con_ok = 1;
  if (j->constraint) {
    q->con = q35_constraint_clone(j->constraint);
    if (j->n_trigger) q->raw = q35_detok_new(s->tok, 0);
    con_ok = q->con && (!j->n_trigger || q->raw) && seq_wait_bias(s, q) == 0;
  }
  if (!q->hist || !q->outs || !q->dt || !con_ok) {
    seq_free(q);
    return NULL;
  }
  memcpy(q->hist, j->prompt, sizeof(int32_t) * (size_t)j->n_prompt);
  q->n_hist = j->n_prompt;
  return q;
}

int srv_sched_submit(srv_sched *s, srv_job *j, char *msg, size_t msgsz) {
  if (j->n_prompt < 1) {
    snprintf(msg, msgsz, "the prompt is empty");
    return 400;
  }
  if (j->n_prompt >= s->o.n_ctx) {
    snprintf(msg, msgsz, "the prompt is %d tokens, which does not fit the context of %d tokens", j->n_prompt,
             s->o.n_ctx);
    return 400;
  }
  seq *qs[MAX_CHOICES];
  if (j->n < 1 || j->n > MAX_CHOICES) {
    snprintf(msg, msgsz, "n must be in [1, %d]", MAX_CHOICES);
    return 400;
  }
  pthread_mutex_lock(&s->mu);
  if (s->n_queued + j->n > s->o.max_queue + (s->o.parallel - s->n_active)) {
    s->m_rejected++;
    pthread_mutex_unlock(&s->mu);
    snprintf(msg, msgsz, "too many requests: %d queued (limit %d); retry later", s->n_queued, s->o.max_queue);
    return 429;
  }
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < j->n; i++) {
    qs[i] = seq_new(s, j, i);
    if (!qs[i]) {
      for (int k = 0; k < i; k++) seq_free(qs[k]);
      snprintf(msg, msgsz, "out of memory");
      return 503;
    }
  }
  pthread_mutex_lock(&s->mu);
  seq **tail = &s->queue;
  while (*tail) tail = &(*tail)->next;
  for (int i = 0; i < j->n; i++) {
    *tail = qs[i];
    tail = &qs[i]->next;
    j->refs++;
  }
  s->n_queued += j->n;
  j->drafting = s->o.draft > 0;
  s->m_requests++;
  s->m_prompt_tokens += (uint64_t)j->n_prompt;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

void srv_job_cancel(srv_sched *s, srv_job *j) {
  pthread_mutex_lock(&s->mu);
  if (!j->done && !j->cancelled) {
    j->cancelled = 1;
    s->m_cancelled++;
  }
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* ---- the loop ---- */

static void admit(srv_sched *s) {
  seq **pp = &s->queue;
  while (*pp) {
    seq *q = *pp;
    if (q->job->cancelled || q->job->failed) {
      *pp = q->next;
      s->n_queued--;
      seq_finish(s, q);
      continue;
    }
    if (s->n_active >= s->o.parallel) break;
    slot *sl = pick_slot(s, q);
    if (!sl) {
      pp = &q->next;
      continue;
    }
    char msg[400];
    const int room = make_room(s, sl, msg, sizeof msg);
    if (room == 0) { /* wait for a busy session to finish */
      pp = &q->next;
      continue;
    }
    *pp = q->next;
    s->n_queued--;
    if (room < 0) {
      s->m_mem_refused++;
      job_fail(q->job, 503, msg);
      seq_finish(s, q);
      continue;
    }
    if (seq_start(s, q, sl)) {
      seq_finish(s, q);
      continue;
    }
    q->next = s->active;
    s->active = q;
    s->n_active++;
  }
}

static void free_deleted(srv_sched *s) {
  while (s->to_free) {
    slot *sl = s->to_free;
    s->to_free = sl->next;
    slot_destroy(sl);
    free(sl);
  }
}

/* Drop the active sequences whose job was cancelled or failed (mutex held), except those in a
 * step in flight (their rows, slot and session stay in use until it ends). */
static void drop_stopped(srv_sched *s) {
  for (seq **pp = &s->active; *pp;) {
    seq *q = *pp;
    if ((q->job->cancelled || q->job->failed) && !q->in_flight) {
      *pp = q->next;
      s->n_active--;
      seq_finish(s, q);
    } else {
      pp = &q->next;
    }
  }
}

/* Nothing active (mutex held): sleep until a request arrives, waking at most every
 * IDLE_WAKE_S (or half the idle timeout) to evict idle sessions. Requests sent together (a
 * client's n concurrent streams) arrive a few ms apart: once woken, wait while they keep coming
 * (GATHER_WAIT_S each, GATHER_ROUNDS times at most) so they share the first step instead of
 * queueing behind a one-row prefill step. */
static void wait_for_work(srv_sched *s) {
  if (s->o.idle_timeout > 0) {
    const double w = s->o.idle_timeout / 2 < IDLE_WAKE_S ? s->o.idle_timeout / 2 : IDLE_WAKE_S;
    struct timespec ts = deadline_in(w);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  } else {
    pthread_cond_wait(&s->cv, &s->mu);
  }
  for (int k = 0; k < GATHER_ROUNDS && s->queue && !s->stop; k++) {
    const int nq = s->n_queued;
    struct timespec ts = deadline_in(GATHER_WAIT_S);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (s->n_queued <= nq) break;
  }
}

/* Group g takes the new sequences; then, while it has more than one sequence more than the smallest
 * other group, it hands its newest over to that group (none of g's is in flight: its step ended). */
static void group_balance(srv_sched *s, int g) {
  if (s->n_grp == 1) {
    for (seq *q = s->active; q; q = q->next) q->grp = 0;
    return;
  }
  int cnt[s->n_grp];
  memset(cnt, 0, sizeof cnt);
  for (seq *q = s->active; q; q = q->next) {
    if (q->grp < 0) q->grp = g;
    cnt[q->grp]++;
  }
  for (;;) {
    int h = -1;
    for (int k = 0; k < s->n_grp; k++)
      if (k != g && (h < 0 || cnt[k] < cnt[h])) h = k;
    if (cnt[g] <= cnt[h] + 1) return;
    seq *q = s->active;
    while (q->grp != g) q = q->next; /* (the active list is newest first) */
    q->grp = h;
    cnt[g]--;
    cnt[h]++;
  }
}

/* Turn the tokens of group G's step into events (mutex held); rc, err: the step's outcome. */
static void group_results(srv_sched *s, grp *G, int rc, const q35_err *err) {
  const int n = G->n;
  s->m_steps++;
  s->m_step_rows += (uint64_t)n;
  s->m_last_rows = n;
  s->m_step_seconds += G->seconds;
  for (int i = 0; i < n; i++) {
    seq *q = G->row_seq[i];
    q35_row *r = &G->rows[i];
    int ended = 0;
    q->in_flight = 0;
    if (rc) {
      job_fail(q->job, 500, err->msg);
      q35_session_reset(q->sl->sess);
      slot_clear(q->sl);
      ended = 1;
    } else {
      slot_push_toks(q->sl, r->tokens, r->n_tokens);
      if (q->fed < q->job->n_prompt) {
        q->fed += r->n_tokens;
        if (q->snap_i < q->n_snaps_at && q->snaps_at[q->snap_i] == q->fed) slot_snapshot(s, q->sl);
        if (q->fed < q->job->n_prompt) continue;
      }
      if (r->n_outputs == Q35_OUTPUTS_NONE) { /* forced (see seq_count_think) */
        q35_output o = {.token = q->force, .logprob = 0.0f};
        o.top_ids[0] = q->force;
        q->force = -1;
        ended = seq_on_token(s, q, &o, 1);
      } else {
        ended = seq_on_emitted(s, q, r);
      }
    }
    if (ended) {
      for (seq **pp = &s->active; *pp; pp = &(*pp)->next)
        if (*pp == q) {
          *pp = q->next;
          break;
        }
      s->n_active--;
      seq_finish(s, q);
    }
  }
  if (rc) s->m_errors++;
  G->n = 0;
}

/* End group G's step in flight, if any, and turn its tokens into events (mutex held; released
 * while waiting). */
static void group_end(srv_sched *s, grp *G) {
  if (!G->busy) return;
  pthread_mutex_unlock(&s->mu);
  q35_err err = {{0}};
  const double t0 = q35_now();
  const int rc = q35_context_step_end(G->ctx, &err);
  const double dt = q35_now() - t0;
  pthread_mutex_lock(&s->mu);
  G->busy = 0;
  G->seconds += dt;
  group_results(s, G, rc, &err);
}

/* Build one row per active sequence of group g (decode rows always, prefill rows within the
 * budget) and begin its step (mutex held; released while this process computes its part). */
static void group_begin(srv_sched *s, int g) {
  grp *G = &s->grp[g];
  group_balance(s, g);
  int n = 0;
  int32_t budget = s->o.chunk;
  for (seq *q = s->active; q; q = q->next) {
    if (q->grp != g) continue;
    q35_row *r = &G->rows[n];
    memset(r, 0, sizeof *r);
    r->session = q->sl->sess;
    r->n_top_logprobs = -1;
    if (q->fed < q->job->n_prompt) {
      if (budget <= 0) continue;
      int32_t take = q->job->n_prompt - q->fed;
      if (take > budget) take = budget;
      while (q->snap_i < q->n_snaps_at && q->snaps_at[q->snap_i] <= q->fed) q->snap_i++;
      if (q->snap_i < q->n_snaps_at && q->snaps_at[q->snap_i] - q->fed < take) take = q->snaps_at[q->snap_i] - q->fed;
      budget -= take;
      r->tokens = q->job->prompt + q->fed;
      r->n_tokens = take;
      if (q->fed + take < q->job->n_prompt) {
        r->n_outputs = Q35_OUTPUTS_NONE; /* a chunk before the last: consume it, no logits */
      } else {
        r->sampling = &q->sp;
        r->n_top_logprobs = q->job->n_top_logprobs;
      }
    } else {
      r->tokens = &q->last;
      r->n_tokens = 1;
      r->sampling = &q->sp;
      r->n_top_logprobs = q->job->n_top_logprobs;
      if (q->force >= 0) { /* the budget's </think>: consume the last token, sample nothing */
        r->sampling = NULL;
        r->n_top_logprobs = -1;
        r->n_outputs = Q35_OUTPUTS_NONE;
      } else if (s->o.draft > 0) { /* drafts, none past max_tokens */
        const int32_t room = q->limit - q->n_gen - 1;
        r->n_draft = s->o.draft < room ? s->o.draft : room > 0 ? room : 0;
        r->outputs = q->outs;
      }
    }
    if (r->sampling == &q->sp) {
      q->sp.draw_index = (uint64_t)q->n_sampled;
      r->history = q->hist;
      r->n_history = q->n_hist;
      if (q->con && q->trig_i >= q->job->n_trigger) r->constraint = q->con;
      if (q->wait_bias && q->trig_i < q->job->n_trigger) {
        q->sp_wait.draw_index = q->sp.draw_index;
        r->sampling = &q->sp_wait;
      }
      r->n_prompt = q->job->n_prompt;
    }
    if (r->constraint && con_dead(s, q)) continue; /* failed: drop_stopped removes it */
    G->row_seq[n++] = q;
  }
  if (!n) return;
  if (s->o.draft > 0) {
    /* the decode rows about to be: the group's sequences (prefilling ones too), and the queued
       ones a free slot takes */
    int rows = 0;
    for (seq *q = s->active; q; q = q->next) rows += q->grp == g;
    const int room = s->o.parallel - s->n_active;
    rows += s->n_queued < room ? s->n_queued : room;
    q35_context_draft_rows(G->ctx, s->no_rows_hint ? 0 : rows);
  }
  G->n = n;
  for (int i = 0; i < n; i++) G->row_seq[i]->in_flight = 1;
  pthread_mutex_unlock(&s->mu);
  q35_err err = {{0}};
  const double t0 = q35_now();
  /* with drafts (one group, also in a pipeline) the step verifies and rolls back within one call */
  const int whole = s->o.draft > 0;
  const int rc = whole ? q35_context_step(G->ctx, G->rows, n, &err) : q35_context_step_begin(G->ctx, G->rows, n, &err);
  const double dt = q35_now() - t0;
  pthread_mutex_lock(&s->mu);
  G->seconds = dt;
  if (rc || whole) group_results(s, G, rc, &err); /* done, or refused: nothing in flight */
  else G->busy = 1;
}

static void *sched_main(void *arg) {
  srv_sched *s = arg;
  pthread_mutex_lock(&s->mu);
  int g = 0;
  while (!s->stop) {
    group_end(s, &s->grp[g]);
    free_deleted(s);
    evict_idle(s);
    admit(s);
    drop_stopped(s);
    int busy = 0;
    for (int k = 0; k < s->n_grp; k++) busy |= s->grp[k].busy;
    if (!s->active && !busy) {
      wait_for_work(s);
      g = 0;
      continue;
    }
    group_begin(s, g);
    g = (g + 1) % s->n_grp;
  }
  for (int k = 0; k < s->n_grp; k++) group_end(s, &s->grp[(g + k) % s->n_grp]); /* in the order begun */
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static void sched_free_groups(srv_sched *s) {
  for (int k = 0; s->grp && k < s->n_grp; k++) {
    if (k && s->grp[k].ctx) q35_context_free(s->grp[k].ctx);
    free(s->grp[k].rows);
    free(s->grp[k].row_seq);
  }
  free(s->grp);
  s->grp = NULL;
}

srv_sched *srv_sched_new(q35_model *model, const q35_tokenizer *tok, const srv_sched_opts *o, q35_err *err) {
  srv_sched *s = calloc(1, sizeof *s);
  if (!s) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  s->model = model;
  s->tok = tok;
  s->o = *o;
  if (s->o.parallel < 1) s->o.parallel = 1;
  if (s->o.chunk < 1) s->o.chunk = DEFAULT_CHUNK;
  s->im_start = q35_tokenizer_im_start(tok);
  if (s->o.draft > 0 && !q35_model_has_mtp(model)) {
    q35_seterr(err, "--draft %d needs a model file with an MTP head (this one has none; --draft 0 turns it off)",
               s->o.draft);
    free(s);
    return NULL;
  }
  if (s->o.draft > 0 && q35_model_stages(model) > 1 && s->o.groups > 1) {
    q35_seterr(err, "--draft %d with --pp-groups %d: speculation steps one group (a draft step verifies and rolls back "
               "within one call, no steps in flight); --pp-groups 1 or --draft 0", s->o.draft, s->o.groups);
    free(s);
    return NULL;
  }
  if (s->o.draft_vocab < 0 || s->o.draft_vocab > q35_model_n_vocab(model) || (s->o.draft_vocab && !s->o.draft)) {
    q35_seterr(err, "--draft-vocab %d must be in [0, %d] (the model's vocabulary) and needs --draft N > 0",
               s->o.draft_vocab, q35_model_n_vocab(model));
    free(s);
    return NULL;
  }
  q35_context_draft_adapt(q35_model_context(model), !s->o.draft_fixed);
  {
    const char *v = getenv(NO_ROWS_HINT_ENV);
    s->no_rows_hint = v && *v && strcmp(v, "0") != 0;
  }
  {
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = s->o.n_ctx;
    sp.kv_type = s->o.kv_type;
    sp.draft_max = s->o.draft;
    sp.draft_vocab = s->o.draft_vocab;
    uint64_t rec = 0;
    s->sess_need = q35_session_state_bytes(model, &sp, &rec);
    s->snap_need = rec + SNAPSHOT_HEADER_BYTES;
    if (s->o.mem_budget && s->sess_need > s->o.mem_budget) {
      char a[32], b[32];
      q35_seterr(err, "a session needs %s of KV/state for --ctx %d, the memory budget is %s; lower --ctx or raise "
                 "--mem-budget", fmt_bytes(a, sizeof a, s->sess_need), s->o.n_ctx,
                 fmt_bytes(b, sizeof b, s->o.mem_budget));
      free(s);
      return NULL;
    }
  }
  /* one group per pipeline stage unless the options say otherwise (1 without a pipeline, and with
   * drafts: a draft step is one q35_context_step) */
  s->n_grp = q35_model_stages(model) < 2 || s->o.draft > 0 ? 1 : s->o.groups > 0 ? s->o.groups : q35_model_stages(model);
  s->anon = calloc((size_t)s->o.parallel, sizeof *s->anon);
  s->grp = calloc((size_t)s->n_grp, sizeof *s->grp);
  s->cmask = calloc(((size_t)q35_model_n_vocab(model) + 31) / 32, sizeof *s->cmask);
  int ok = s->anon && s->grp && s->cmask;
  for (int k = 0; ok && k < s->n_grp; k++) {
    grp *G = &s->grp[k];
    G->ctx = k ? q35_context_new_sharing(q35_model_context(model), err) : q35_model_context(model);
    G->rows = calloc((size_t)s->o.parallel, sizeof *G->rows);
    G->row_seq = calloc((size_t)s->o.parallel, sizeof *G->row_seq);
    ok = G->ctx && G->rows && G->row_seq;
  }
  if (ok) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, sched_main, s) == 0) return s;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    q35_seterr(err, "cannot start the scheduler thread");
  } else {
    q35_seterr(err, "out of memory");
  }
  sched_free_groups(s);
  free(s->anon);
  free(s->cmask);
  free(s);
  return NULL;
}

void srv_sched_free(srv_sched *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  while (s->active) {
    seq *q = s->active;
    s->active = q->next;
    job_fail(q->job, 503, "the server is shutting down");
    seq_finish(s, q);
  }
  while (s->queue) {
    seq *q = s->queue;
    s->queue = q->next;
    job_fail(q->job, 503, "the server is shutting down");
    seq_finish(s, q);
  }
  free_deleted(s);
  for (int i = 0; i < s->o.parallel; i++) slot_destroy(&s->anon[i]);
  while (s->named) {
    slot *sl = s->named;
    s->named = sl->next;
    slot_destroy(sl);
    free(sl);
  }
  free(s->anon);
  sched_free_groups(s);
  free(s->cmask);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

void srv_sched_fail_all(srv_sched *s, int status, const char *msg) {
  pthread_mutex_lock(&s->mu);
  for (seq *q = s->active; q; q = q->next) job_fail(q->job, status, msg);
  for (seq *q = s->queue; q; q = q->next) job_fail(q->job, status, msg);
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* ---- named sessions ---- */

int srv_sched_session_delete(srv_sched *s, const char *id) {
  pthread_mutex_lock(&s->mu);
  int rc = 404;
  for (slot **pp = &s->named; *pp; pp = &(*pp)->next) {
    slot *sl = *pp;
    if (strcmp(sl->id, id)) continue;
    if (sl->busy) {
      rc = 409;
      break;
    }
    *pp = sl->next;
    s->n_named--;
    sl->next = s->to_free;
    s->to_free = sl;
    pthread_cond_signal(&s->cv);
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int srv_sched_session_reset(srv_sched *s, const char *id) {
  pthread_mutex_lock(&s->mu);
  slot *sl = find_named(s, id);
  int rc = !sl ? 404 : sl->busy ? 409 : 0;
  if (rc == 0) slot_clear(sl); /* with no tokens the next request starts from a reset session */
  pthread_mutex_unlock(&s->mu);
  return rc;
}

char *srv_sched_metrics(srv_sched *s) {
  pthread_mutex_lock(&s->mu);
  const size_t bytes = (size_t)sched_bytes(s);
  int n_sess = 0;
  for (int i = 0; i < s->o.parallel; i++) n_sess += s->anon[i].sess != NULL;
  for (const slot *sl = s->named; sl; sl = sl->next) n_sess += sl->sess != NULL;
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (f) {
#define M(name, type, help, fmt, val) \
  fprintf(f, "# HELP q35_" name " " help "\n# TYPE q35_" name " " type "\nq35_" name " " fmt "\n", val)
    M("requests_total", "counter", "Requests accepted by the scheduler.", "%llu", (unsigned long long)s->m_requests);
    M("requests_rejected_total", "counter", "Requests refused because the queue was full.", "%llu",
      (unsigned long long)s->m_rejected);
    M("requests_cancelled_total", "counter", "Requests cancelled (client gone).", "%llu",
      (unsigned long long)s->m_cancelled);
    M("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", "%llu",
      (unsigned long long)s->m_prompt_tokens);
    M("prompt_tokens_reused_total", "counter", "Prompt tokens served from a stored state (not prefilled).",
      "%llu", (unsigned long long)s->m_cached_tokens);
    M("generated_tokens_total", "counter", "Generated tokens.", "%llu", (unsigned long long)s->m_gen_tokens);
    M("steps_total", "counter", "Model steps.", "%llu", (unsigned long long)s->m_steps);
    M("step_rows_total", "counter", "Rows over all model steps.", "%llu", (unsigned long long)s->m_step_rows);
    M("step_seconds_total", "counter", "Seconds spent in model steps.", "%.6f", s->m_step_seconds);
    M("step_errors_total", "counter", "Failed model steps.", "%llu", (unsigned long long)s->m_errors);
    M("session_evictions_total", "counter", "Named sessions evicted (LRU).", "%llu",
      (unsigned long long)s->m_evictions);
    M("session_idle_evictions_total", "counter", "Sessions freed after --session-idle-timeout unused.", "%llu",
      (unsigned long long)s->m_idle_evictions);
    M("session_memory_evictions_total", "counter", "Idle sessions freed to fit a new one in --mem-budget.", "%llu",
      (unsigned long long)s->m_mem_evictions);
    M("requests_memory_refused_total", "counter", "Sequences refused (503): a session does not fit --mem-budget.",
      "%llu", (unsigned long long)s->m_mem_refused);
    M("snapshots_skipped_total", "counter", "Snapshots skipped to stay within --mem-budget.", "%llu",
      (unsigned long long)s->m_snaps_skipped);
    M("requests_active", "gauge", "Sequences being generated.", "%d", s->n_active);
    M("requests_queued", "gauge", "Sequences waiting for a slot.", "%d", s->n_queued);
    M("sessions_active", "gauge", "Sessions holding state (anonymous and named).", "%d", n_sess);
    M("sessions_named", "gauge", "Named sessions.", "%d", s->n_named);
    M("session_bytes", "gauge", "Bytes held by session states and snapshots.", "%zu", bytes);
    M("memory_budget_bytes", "gauge", "--mem-budget for session states and snapshots (0: no limit).", "%llu",
      (unsigned long long)s->o.mem_budget);
    M("session_need_bytes", "gauge", "KV/state bytes one new session allocates.", "%llu",
      (unsigned long long)s->sess_need);
    /* for a router (deploy/haproxy.cfg, docs/DESIGN.md "Replicas"): capacity, load, cache locality */
    M("prefix_cache_lookups_total", "counter", "Sequences started (each looks for a stored prefix).", "%llu",
      (unsigned long long)s->m_starts);
    M("prefix_cache_hits_total", "counter", "Sequences started from a stored prefix (cached_tokens > 0).", "%llu",
      (unsigned long long)s->m_cache_hits);
    M("step_rows", "gauge", "Rows in the latest model step.", "%d", s->m_last_rows);
    M("step_groups", "gauge", "Groups of sequences whose steps are in flight at once (pipeline stages).", "%d",
      s->n_grp);
    M("slots_parallel", "gauge", "Rows one step takes at most (--parallel).", "%d", s->o.parallel);
    M("sessions_max", "gauge", "Named sessions kept at most (--max-sessions).", "%d", s->o.max_sessions);
    /* speculative decoding with the MTP head (--draft) */
    M("draft_max", "gauge", "Drafts a decode row may carry (--draft; 0: no speculation).", "%d", s->o.draft);
    M("draft_tokens_total", "counter", "Tokens the MTP head drafted.", "%llu", (unsigned long long)s->m_draft_tokens);
    M("draft_accepted_tokens_total", "counter", "Drafted tokens the model accepted (emitted without a step of "
      "their own).", "%llu", (unsigned long long)s->m_draft_accepted);
    M("draft_rows_total", "counter", "Decode rows that carried drafts.", "%llu", (unsigned long long)s->m_draft_rows);
    M("draft_trims_total", "counter", "Decode rows whose emitted tokens were cut where the sampling rules "
      "changed (a constraint's trigger, the thinking budget).", "%llu", (unsigned long long)s->m_draft_trims);
    M("draft_acceptance", "gauge", "Accepted drafts over drafted tokens since the start (0 before any).", "%.6f",
      s->m_draft_tokens ? (double)s->m_draft_accepted / (double)s->m_draft_tokens : 0.0);
#undef M
    fclose(f);
  }
  pthread_mutex_unlock(&s->mu);
  return out;
}
