/*
 * sched.h - the server's scheduler: one thread owns the model and advances every active
 * request by one q35_step per iteration (continuous batching), with prefix reuse.
 *
 * A job is one HTTP request: a tokenized prompt, sampling parameters and n choices. Each
 * choice becomes a sequence that occupies one slot (a q35_session plus the tokens it holds and
 * snapshots of its recurrent state) while it runs. Sequences that arrive while others decode
 * join the next step; prompts are prefilled in chunks so a long prompt does not stall running
 * decodes; finished or cancelled sequences leave at once.
 *
 * Slots: `parallel` anonymous slots (requests without a session id; a request takes the idle
 * one whose tokens share the longest usable prefix with its prompt) and up to `max_sessions`
 * named slots (the `session_id` header), evicted least recently used when idle.
 *
 * Host limits: a slot's q35_session is created when a sequence first needs it. With a memory
 * budget, the bytes every slot holds (q35_session_state_bytes + snapshots) are counted before
 * each creation; if the new session does not fit, idle sessions are freed (least recently
 * used first); if it still does not fit, the sequence waits while busy sessions may free
 * memory, and fails with 503 when none can. Snapshots that would pass the budget are skipped.
 * Sessions unused for idle_timeout seconds are freed (a named session is forgotten).
 *
 * Prefix reuse: the DeltaNet state cannot be rolled back, so a slot keeps snapshots taken at
 * the start of every <|im_start|> in a prompt (the end of each rendered message, before the
 * assistant reply) and every `snap_every` tokens. A new prompt restores the furthest state
 * whose tokens are a prefix of it (the attention KV cache is append-only, so going back is
 * valid) and prefills only the rest. Output is identical to a cold run because q35_step's
 * results do not depend on chunking or batch neighbours.
 *
 * Speculative decoding (draft > 0, a model with an MTP head): every slot's session keeps the head's
 * state, and each decode row carries up to `draft` drafts (fewer near max_tokens); the context
 * chooses how many pay for the step's size and each session's acceptance (q35.h). A row then
 * emits one or more tokens, handled one by one as if sampled in turn; where one of them changes
 * how the next would be sampled (a trigger starts a constraint, the thinking budget forces
 * </think>), the row keeps the tokens up to it (q35_session_draft_keep) and the rest are sampled
 * again under the new rules. So the output is the output without speculation.
 *
 * Output: the scheduler turns sampled tokens into text (streaming detokenizer, stop strings
 * held back until they can no longer match) and appends events to the job; the HTTP thread
 * takes them with srv_job_take. Thread safety: every function here may be called from any
 * thread; one mutex guards the shared state, the model step runs outside it.
 */
#ifndef Q35_SERVER_SCHED_H
#define Q35_SERVER_SCHED_H

#include <pthread.h>
#include <stdint.h>

#include "q35.h"
#include "text/tokenizer.h"

#define SRV_MAX_STOP 4
#define SRV_MAX_TRIGGERS 2

typedef struct srv_event {
  struct srv_event *next;
  int choice;
  char *text;              /* new text (may be NULL) */
  size_t len;
  int has_token;           /* a sampled (non-EOG) token with its log-probabilities */
  int32_t token;
  float logprob;
  int n_top;
  int32_t top_ids[Q35_MAX_TOP_LOGPROBS];
  float top_logprobs[Q35_MAX_TOP_LOGPROBS];
  const char *finish;      /* "stop", "length" or NULL */
  size_t tok_start;        /* has_token: bytes of decoded text before this token (stop strings not yet cut) */
  size_t text_end;         /* finish: bytes of released text in all */
  int cut;                 /* finish: a stop string cut the text at text_end (tokens from there are not sent) */
} srv_event;

typedef struct srv_job {
  /* inputs: set before srv_sched_submit, read-only afterwards */
  int32_t *prompt;
  int32_t n_prompt;
  int n;                   /* choices; choice i samples with seed + i */
  q35_sampling sp;
  int32_t max_tokens;      /* <= 0: until the context is full */
  char *stop[SRV_MAX_STOP];
  int n_stop;
  int n_top_logprobs;      /* -1: none */
  char *session_id;        /* NULL: anonymous */
  q35_logit_bias *logit_bias; /* what sp.logit_bias points at (owned, freed with the job) */
  q35_constraint *constraint; /* structured output (owned): each choice decodes with a clone of it */
  char *trigger[SRV_MAX_TRIGGERS]; /* lazy activation (owned): the choice's rows carry its constraint
                                      only once its raw output text has shown these strings in turn
                                      (e.g. "</think>", then "<tool_call>"); none: from the start */
  int n_trigger;
  int32_t think_budget;    /* > 0: the prompt ends inside <think>; after this many reasoning tokens
                              without </think>, the choice's next token is think_end (forced) */
  int32_t think_end;       /* the </think> token (with think_budget) */
  /* shared state (guarded by the scheduler's mutex) */
  srv_event *ev_head, *ev_tail;
  int n_finished;          /* choices finished */
  int done;                /* all choices finished (or failed) */
  int cancelled;
  int failed;              /* 1: errmsg holds why; status is the HTTP status to report */
  int status;
  char errmsg[512];
  int32_t cached_tokens;   /* prompt tokens reused (choice 0) */
  int32_t completion_tokens;
  int drafting;            /* the scheduler speculates (usage carries the next two) */
  int64_t draft_tokens;    /* drafts the MTP head made for this job's choices */
  int64_t draft_accepted;  /* ... and the trunk accepted */
  int refs;
  pthread_cond_t cv;
} srv_job;

typedef struct srv_sched_opts {
  int parallel;            /* concurrent sequences (rows per step) */
  int max_sessions;        /* named sessions */
  int max_queue;           /* queued sequences before 429 */
  int32_t n_ctx;
  q35_kv_type kv_type;
  int32_t chunk;           /* prefill tokens per step */
  int32_t snap_every;      /* periodic snapshot interval in tokens */
  uint64_t mem_budget;     /* bytes for all sessions + snapshots (0: no limit) */
  double idle_timeout;     /* seconds; sessions unused this long are freed (<= 0: never) */
  int32_t draft;           /* speculative decoding: at most this many MTP drafts per decode row (0: off) */
  int32_t draft_vocab;     /* the head drafts among ids [0, draft_vocab) (0: all) */
  int draft_fixed;         /* every decode row drafts `draft` (else the context's adaptive policy) */
  int groups;              /* a pipeline (q35_model_stages > 1): groups of sequences whose steps are in
                              flight at once (0: one per stage; 1: one step at a time) */
} srv_sched_opts;

typedef struct srv_sched srv_sched;

srv_sched *srv_sched_new(q35_model *model, const q35_tokenizer *tok, const srv_sched_opts *o, q35_err *err);
void srv_sched_free(srv_sched *s);

/* A new job with one reference held by the caller. */
srv_job *srv_job_new(void);
/* Hand the job to the scheduler. 0, or an HTTP status (429: queue full) with msg filled. */
int srv_sched_submit(srv_sched *s, srv_job *j, char *msg, size_t msgsz);
/* Stop the job's sequences at the next step and free their slots. */
void srv_job_cancel(srv_sched *s, srv_job *j);
/* Wait up to timeout_ms for events; returns the list (caller frees with srv_events_free) or
 * NULL. *done is set when the job has finished and every event has been taken. */
srv_event *srv_job_take(srv_sched *s, srv_job *j, int timeout_ms, int *done);
void srv_events_free(srv_event *e);
/* Drop the caller's reference. */
void srv_job_release(srv_sched *s, srv_job *j);

/* Named sessions: 0, 404 (unknown) or 409 (busy). */
int srv_sched_session_delete(srv_sched *s, const char *id);
int srv_sched_session_reset(srv_sched *s, const char *id);

/* Fail every queued and running job with this status and message (a shutdown past its bound):
 * their streams end with an error event at the next step. */
void srv_sched_fail_all(srv_sched *s, int status, const char *msg);

/* Prometheus text exposition of the counters, appended to a malloc'ed string. */
char *srv_sched_metrics(srv_sched *s);

#endif
