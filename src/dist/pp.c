/*
 * pp.c - pipeline parallelism over MPI: a model split into N stages of contiguous layers, one per
 * rank (pp.h; docs/DESIGN.md "Pipeline parallelism").
 *
 * Messages go down the chain, rank r to r + 1, each as a fixed header (TAG_HDR) and, when it has
 * one, a payload (TAG_DATA, in pieces of at most PIECE bytes: MPI counts are ints). The last rank
 * answers rank 0 directly (TAG_REPLY):
 *   SESSION_NEW  id, n_ctx, kv_type, mem_budget, draft_max (checkpoint slots for speculation);
 *                each stage makes its state, or forwards the first failure; the last rank
 *                replies with the status (rank 0 waits for it)
 *   SESSION_FREE / SESSION_RESET  id (no reply)
 *   FORWARD      rows (id, n, n_out, hidden wanted, checkpoints to arm) + the residual stream
 *                [T][n_embd] after the sender's layers (+ for a step, each row's sampling
 *                parameters and penalty history);
 *                the last rank runs its layers and the output head and replies, when rows want
 *                outputs, the logits of their n_out positions or, for a step, the samples (token,
 *                logprob, alternatives: a few hundred bytes, not n_vocab floats), then the hidden
 *                states asked for (the n_out positions', then every position's for the rows of
 *                sessions that draft: the MTP head on rank 0 reads them)
 *   CKPT_RESTORE id, slot: each stage restores its session's checkpoint (a speculative rollback;
 *                no reply)
 *   QUIT         every rank frees its model and exits
 * A session's id is rank 0's q35_session pointer (unique while it lives). MPI's ordering (one
 * sender, one receiver, one tag) keeps the chain's commands in order, so rank 0 sends a step on
 * without waiting when it wants no outputs (prefill chunks overlap across stages).
 *
 * Errors: the communicator returns errors instead of aborting inside MPI; a failed call prints
 * what failed with MPI's message and aborts the job (mpirun then stops every rank), and a rank
 * killed outright makes mpirun end the job too. Either way the job ends, never hangs.
 */
#include "dist/pp.h"

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "engine/context.h"
#include "model/model.h"
#include "model/mtp.h"
#include "sample/sampler.h"

enum { TAG_HDR = 1, TAG_DATA = 2, TAG_REPLY = 3, TAG_READY = 4 };
enum { OP_SESSION_NEW = 1, OP_SESSION_FREE, OP_SESSION_RESET, OP_FORWARD, OP_QUIT, OP_SNAP_SAVE, OP_SNAP_RESTORE,
       OP_SNAP_FREE, OP_CKPT_RESTORE };
#define PIECE ((size_t)1 << 30)
#define MAX_RANKS 1024

typedef struct {
  int32_t op, n_rows;
  int64_t T;           /* FORWARD: tokens of the step; CKPT_RESTORE: the slot */
  uint64_t id;         /* SESSION_*, SNAP_SAVE / RESTORE: the session */
  uint64_t snap;       /* SNAP_SAVE / RESTORE: the snapshot (SNAP_FREE: n_rows ids in the payload) */
  int32_t n_ctx, kv_type;
  int32_t draft_max, pad; /* SESSION_NEW: checkpoint slots each stage reserves (speculation) */
  uint64_t mem_budget;
  uint64_t payload;    /* bytes following in TAG_DATA pieces */
  uint64_t samp_bytes; /* FORWARD: the sampling section at the payload's end (0: reply logits) */
  int32_t failed;      /* SESSION_NEW: a stage could not make its state (msg says why) */
  char msg[sizeof(((q35_err *)0)->msg)];
} pp_hdr;

/* hidden: ROW_HIDDEN (the n_out positions' hidden states), ROW_ALL (every position's: the first
 * stage's q35_session.hidden_all, the MTP head's input); ckpt: the stage arms that many
 * checkpoints of its session for this row (a verify row of speculation; 0: disarmed) */
enum { ROW_HIDDEN = 1, ROW_ALL = 2 };
typedef struct {
  uint64_t id;
  int32_t n, n_out, hidden, ckpt;
} pp_row;

typedef struct {
  uint64_t id;
  q35_session *s;
} pp_sess;

typedef struct {
  uint64_t id;
  q35_snapshot *sn;
} pp_snap;

/* A step's row in the sampling section: then n_bias q35_logit_bias, then n_hist token ids (the
 * row's history; with m > 1 outputs, followed by the m - 1 drafted tokens, as step.c assembles) */
typedef struct {
  q35_sampling sp; /* logit_bias NULL here */
  int32_t m, n_bias, n_history, n_hist, n_prompt, n_top;
} pp_samp;

typedef struct {
  q35_stage_next ops; /* first: rank 0's model->next points here */
  int rank, size, open;
  int begin[MAX_RANKS], end[MAX_RANKS];
  MPI_Comm comm;
  q35_model *m;
  char *buf, *buf2, *buf3; /* message payloads, grown on demand */
  size_t cap, cap2, cap3;
  pp_sess *sess;    /* ranks above 0: the sessions of this stage */
  size_t n_sess, cap_sess;
  pp_snap *snaps;   /* ranks above 0: this stage's parts of rank 0's snapshots */
  size_t n_snaps, cap_snaps;
  /* rank 0: snapshot ids, and the released ones not yet told to the chain (q35_snapshot_free may
   * run on any thread; only the thread that steps calls MPI, so the release waits for its next
   * command) */
  uint64_t next_snap;
  pthread_mutex_t free_mu;
  uint64_t *freed;
  size_t n_freed, cap_freed;
  double timeout; /* seconds a rank waits inside a command for its peer (0: forever) */
  int micro;      /* micro-batches of a step (-1: one per rank; 0, 1: none) */
  /* rank 0: the step whose forward pass comes next samples on the last rank */
  const q35_row *step_rows;
  int step_n_rows;
  q35_step_out *step_out;
  /* rank 0 between micro(BEGIN) and micro(END): how far into the step's rows and results the
   * groups have come; between flight(OPEN) and flight(CLOSE): the stepping context (the key) */
  int micro_on, step_at;
  size_t out_at;
  const void *flight_key;
  /* rank 0: the forwards sent whose results are still to come (of a micro-batched forward, key
   * NULL, until micro(END); of steps in flight, under their key until flight(WAIT)) */
  struct pending {
    const void *key;
    const q35_fwd_row *rows;
    int n_rows, sampled;
    q35_step_out *out;
    char *buf;
    size_t cap, lb, hb;
    MPI_Request rq;
  } *pend;
  int n_pend, cap_pend;
  struct spare {
    char *buf;
    size_t cap;
  } *spare; /* reply buffers of collected forwards, reused (a step of a size seen before allocates nothing) */
  int n_spare;
  q35_sampler *sampler; /* the last rank's */
} pp;

static pp g_pp = {.rank = 0, .size = 1, .free_mu = PTHREAD_MUTEX_INITIALIZER, .timeout = 60, .micro = -1};
static int g_inited;

/* ---- MPI calls, checked ---- */

static void die_mpi(int rc, const char *what, int peer) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  fprintf(stderr, "q35 pipeline: rank %d: %s rank %d failed: %s (a rank died or the network failed); ending the job\n",
          g_pp.rank, what, peer, s);
  MPI_Abort(MPI_COMM_WORLD, 3);
  exit(3);
}

static void die_rank(const char *msg) {
  fprintf(stderr, "q35 pipeline: rank %d: %s; ending the job\n", g_pp.rank, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Wait for a send or a receive: polling, then sleeping between polls once it has not come for a
 * while (a rank waits for the others most of a step; MPI_Recv's busy poll would take a core from
 * the ranks that share this host). The sleep adds at most POLL_SLEEP_US to a message's latency.
 * A bounded wait (inside a command: the peer is computing or sending its part) ends the job once
 * it has lasted --pp-timeout seconds: a rank that is stopped or hung (alive, so MPI sees no
 * failure) must not hang the job. Only a rank above 0 waiting for rank 0's next command waits
 * without bound (an idle server). */
#define POLL_SPINS 2000
#define POLL_SLEEP_US 50
#define SEND_SPIN_S 2e-3
static double g_wait_cpu, g_wait_wall; /* this thread's CPU and wall seconds inside wait_req */

static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int wait_req_(MPI_Request *rq, int bounded, const char *what, int peer);

/* (the CPU a rank spends polling and spinning in sends, printed at the end: what the pipeline
 * costs beyond the layers' own work, docs/PERF.md) */
static int wait_req(MPI_Request *rq, int bounded, const char *what, int peer) {
  const double c0 = thread_cpu_s(), w0 = q35_now();
  const int rc = wait_req_(rq, bounded, what, peer);
  g_wait_cpu += thread_cpu_s() - c0;
  g_wait_wall += q35_now() - w0;
  return rc;
}

static int wait_req_(MPI_Request *rq, int bounded, const char *what, int peer) {
  struct timespec t0 = {0, 0};
  int timing = 0;
  /* a send spins (as MPI_Send would) for up to SEND_SPIN_S: it completes as soon as a waiting
   * receiver takes it, and a sender that sleeps between polls adds a wake-up to each step of the
   * rendezvous a message above the eager limit takes (N = 2 decode at 55-80% of one process on
   * the loaded VM). A receiver still busy with an earlier step (steps in flight) takes it only
   * when that step is done: past SEND_SPIN_S the send polls with sleeps, as a receive does,
   * instead of burning its core for a whole stage time. */
  const int send = !strcmp(what, "sending to");
  const double start = send ? q35_now() : 0;
  int spin = send;
  for (long i = 0;; i++) {
    int done = 0;
    const int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    if (i < POLL_SPINS || (spin && i % POLL_SPINS)) continue;
    if (spin && q35_now() - start > SEND_SPIN_S) spin = 0;
    if (!spin) {
      const struct timespec ts = {0, POLL_SLEEP_US * 1000L};
      nanosleep(&ts, NULL);
    }
    if (!bounded || g_pp.timeout <= 0) continue;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!timing) t0 = now, timing = 1;
    if ((double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) * 1e-9 > g_pp.timeout) {
      fprintf(stderr, "q35 pipeline: rank %d: %s rank %d: no progress for %g s (--pp-timeout): rank %d is stopped, "
              "hung or far slower than expected; ending the job\n", g_pp.rank, what, peer, g_pp.timeout, peer);
      MPI_Abort(MPI_COMM_WORLD, 4);
      exit(4);
    }
  }
}

static void send_bytes(const void *p, size_t n, int to, int tag) {
  const char *c = p;
  do {
    const size_t k = n < PIECE ? n : PIECE;
    MPI_Request rq;
    int rc = MPI_Isend(c, (int)k, MPI_BYTE, to, tag, g_pp.comm, &rq);
    if (rc == MPI_SUCCESS) rc = wait_req(&rq, 1, "sending to", to);
    if (rc != MPI_SUCCESS) die_mpi(rc, "sending to", to);
    c += k;
    n -= k;
  } while (n);
}

static void recv_wait(void *p, size_t n, int from, int tag, int bounded) {
  char *c = p;
  do {
    const size_t k = n < PIECE ? n : PIECE;
    MPI_Request rq;
    int rc = MPI_Irecv(c, (int)k, MPI_BYTE, from, tag, g_pp.comm, &rq);
    if (rc == MPI_SUCCESS) rc = wait_req(&rq, bounded, "waiting for", from);
    if (rc != MPI_SUCCESS) die_mpi(rc, "receiving from", from);
    c += k;
    n -= k;
  } while (n);
}

static void recv_bytes(void *p, size_t n, int from, int tag) { recv_wait(p, n, from, tag, 1); }

static char *grow(char **b, size_t *cap, size_t n) {
  if (n > *cap) {
    free(*b);
    *b = q35_alloc64(n ? n : 1, 0);
    *cap = *b ? n : 0;
    if (!*b) die_rank("out of memory for a pipeline message");
  }
  return *b;
}

static void send_raw(const pp_hdr *h, const void *payload) {
  send_bytes(h, sizeof *h, g_pp.rank + 1, TAG_HDR);
  if (h->payload) send_bytes(payload, h->payload, g_pp.rank + 1, TAG_DATA);
}

/* rank 0: the snapshots released since the last command, down the chain first */
static void flush_freed(pp *p) {
  pthread_mutex_lock(&p->free_mu);
  const size_t n = p->n_freed;
  uint64_t *ids = n ? malloc(n * sizeof *ids) : NULL;
  if (ids) memcpy(ids, p->freed, n * sizeof *ids);
  if (ids) p->n_freed = 0;
  pthread_mutex_unlock(&p->free_mu);
  if (!ids) return; /* nothing released, or no memory now: the next command tries again */
  pp_hdr h;
  memset(&h, 0, sizeof h);
  h.op = OP_SNAP_FREE;
  h.n_rows = (int32_t)n;
  h.payload = n * sizeof *ids;
  send_raw(&h, ids);
  free(ids);
}

/* A header, then its payload (if any), to the next rank. */
static void send_cmd(pp_hdr *h, const void *payload) {
  if (g_pp.rank == 0) flush_freed(&g_pp);
  send_raw(h, payload);
}

/* ---- rank 0: the later stages behind q35_model.next ---- */

static size_t fwd_payload(int n_rows, int64_t T, int H) {
  return (size_t)n_rows * sizeof(pp_row) + (size_t)T * H * sizeof(float);
}

static int32_t row_outputs(const q35_row *row) {
  return row->n_outputs == Q35_OUTPUTS_NONE ? 0 : row->n_outputs == 0 ? 1 : row->n_outputs;
}

/* The sampling section of a step's rows, written at b (NULL: only its size). */
static size_t samp_write(const q35_row *rows, int n_rows, char *b) {
  size_t at = 0;
  for (int r = 0; r < n_rows; r++) {
    const q35_row *row = &rows[r];
    const int32_t m = row_outputs(row), nb = m ? row->sampling->n_logit_bias : 0;
    const int32_t nh = m ? (row->n_history > 0 ? row->n_history : 0) : 0, nd = m > 1 ? m - 1 : 0;
    if (b) {
      pp_samp ps;
      memset(&ps, 0, sizeof ps);
      if (m) ps.sp = *row->sampling;
      ps.sp.logit_bias = NULL;
      ps.m = m, ps.n_bias = nb, ps.n_history = nh, ps.n_hist = nh + nd, ps.n_prompt = row->n_prompt;
      ps.n_top = row->n_top_logprobs;
      memcpy(b + at, &ps, sizeof ps);
      if (nb) memcpy(b + at + sizeof ps, row->sampling->logit_bias, (size_t)nb * sizeof(q35_logit_bias));
      int32_t *h = (int32_t *)(b + at + sizeof ps + (size_t)nb * sizeof(q35_logit_bias));
      if (nh) memcpy(h, row->history, (size_t)nh * sizeof *h);
      if (nd) memcpy(h + nh, row->tokens + row->n_tokens - m + 1, (size_t)nd * sizeof *h);
    }
    at += sizeof(pp_samp) + (size_t)nb * sizeof(q35_logit_bias) + (size_t)(nh + nd) * sizeof(int32_t);
    at = (at + 7) & ~(size_t)7;
  }
  return at;
}

static int next_sample(q35_stage_next *nx, const q35_row *rows, int n_rows, q35_step_out *out) {
  pp *p = (pp *)nx;
  p->step_rows = rows;
  p->step_n_rows = n_rows;
  p->step_out = out;
  p->step_at = 0;
  p->out_at = 0;
  return 0;
}

/* A reply (the results, then the hidden states asked for) into the rows of its forward. */
static void scatter_reply(pp *p, const q35_fwd_row *rows, int n_rows, q35_step_out *out, const char *rb, size_t lb) {
  const int H = p->m->hp.n_embd, V = p->m->hp.n_vocab;
  if (out) memcpy(out, rb, lb);
  const float *lg = (const float *)rb, *hd = (const float *)(rb + lb);
  for (int r = 0; r < n_rows; r++) {
    const size_t k = (size_t)rows[r].n_out;
    if (!k) continue;
    if (!out) memcpy(rows[r].logits, lg, k * V * sizeof(float));
    lg += k * V;
    if (rows[r].hidden) {
      memcpy(rows[r].hidden, hd, k * H * sizeof(float));
      hd += k * H;
    }
  }
  for (int r = 0; r < n_rows; r++) /* then every position's, for the sessions that keep them */
    if (rows[r].s->hidden_all) {
      memcpy(rows[r].s->hidden_all, hd, (size_t)rows[r].n * H * sizeof(float));
      hd += (size_t)rows[r].n * H;
    }
}

/* The results of every forward sent under key. Each reply's receive was posted right after its
 * command was sent, and the last rank replies in command order, so MPI (one sender, one tag:
 * receives match in the order posted) gives each receive its own reply whatever order they are
 * waited in; the others stay pending. */
static void collect_pending(pp *p, const void *key) {
  int k = 0;
  for (int i = 0; i < p->n_pend; i++) {
    struct pending *g = &p->pend[i];
    if (g->key != key) {
      p->pend[k++] = *g;
      continue;
    }
    const int rc = wait_req(&g->rq, 1, "waiting for", p->size - 1);
    if (rc != MPI_SUCCESS) die_mpi(rc, "receiving from", p->size - 1);
    scatter_reply(p, g->rows, g->n_rows, g->sampled ? g->out : NULL, g->buf, g->lb);
    p->spare[p->n_spare++] = (struct spare){g->buf, g->cap}; /* (room: one per pending entry) */
  }
  p->n_pend = k;
}

static int next_micro(q35_stage_next *nx, int op, q35_err *err) {
  pp *p = (pp *)nx;
  (void)err;
  if (op == Q35_STAGE_MICRO_BEGIN) {
    p->micro_on = 1;
    return 0;
  }
  p->micro_on = 0;
  if (p->flight_key) return 0; /* a step in flight: its results come at flight(WAIT) */
  collect_pending(p, NULL);
  p->step_rows = NULL;
  return 0;
}

static int next_flight(q35_stage_next *nx, int op, const void *key, q35_err *err) {
  pp *p = (pp *)nx;
  (void)err;
  if (op == Q35_STAGE_FLIGHT_OPEN) {
    p->flight_key = key;
  } else if (op == Q35_STAGE_FLIGHT_CLOSE) {
    p->flight_key = NULL;
    p->step_rows = NULL;
  } else {
    collect_pending(p, key);
  }
  return 0;
}

static int next_forward(q35_stage_next *nx, const q35_fwd_row *rows, int n_rows, const float *x, int64_t T,
                        q35_err *err) {
  pp *p = (pp *)nx;
  const int H = p->m->hp.n_embd, V = p->m->hp.n_vocab;
  const q35_row *srows = p->step_rows;
  q35_step_out *sout = p->step_out;
  if (p->micro_on && srows) { /* a group of the step's rows: the next ones, and their results' place */
    if (p->step_at + n_rows > p->step_n_rows) return q35_seterr(err, "pipeline: the step's rows do not match");
    srows += p->step_at;
    sout += p->out_at;
    p->step_at += n_rows;
    for (int r = 0; r < n_rows; r++) p->out_at += (size_t)rows[r].n_out;
  } else {
    p->step_rows = NULL;
    if (srows && p->step_n_rows != n_rows) return q35_seterr(err, "pipeline: the step's rows do not match");
  }
  pp_hdr h;
  memset(&h, 0, sizeof h);
  h.op = OP_FORWARD;
  h.n_rows = n_rows;
  h.T = T;
  h.samp_bytes = srows ? samp_write(srows, n_rows, NULL) : 0;
  h.payload = fwd_payload(n_rows, T, H) + h.samp_bytes;
  char *b = grow(&p->buf, &p->cap, h.payload);
  if (srows) samp_write(srows, n_rows, b + fwd_payload(n_rows, T, H));
  size_t n_logits = 0, n_hidden = 0;
  for (int r = 0; r < n_rows; r++) {
    const q35_session *s = rows[r].s;
    const pp_row pr = {(uint64_t)(uintptr_t)s, rows[r].n, rows[r].n_out,
                       (rows[r].hidden ? ROW_HIDDEN : 0) | (s->hidden_all ? ROW_ALL : 0), s->ckpt_n};
    memcpy(b + r * sizeof pr, &pr, sizeof pr);
    n_logits += (size_t)rows[r].n_out;
    n_hidden += (rows[r].hidden ? (size_t)rows[r].n_out : 0) + (s->hidden_all ? (size_t)rows[r].n : 0);
  }
  memcpy(b + (size_t)n_rows * sizeof(pp_row), x, (size_t)T * H * sizeof(float));
  send_cmd(&h, b);
  if (!n_logits && !n_hidden) return 0; /* nothing comes back: the next step may go down the chain at once */
  const size_t lb = n_logits * (srows ? sizeof(q35_step_out) : V * sizeof(float)), hb = n_hidden * H * sizeof(float);
  if ((p->micro_on || p->flight_key) && lb + hb <= PIECE) {
    /* a micro-batch or a step in flight: its results are awaited at micro(END) or flight(WAIT) */
    if (p->n_pend + p->n_spare == p->cap_pend) {
      const int c = p->cap_pend ? 2 * p->cap_pend : 8;
      struct pending *np = realloc(p->pend, (size_t)c * sizeof *np);
      struct spare *ns = realloc(p->spare, (size_t)c * sizeof *ns);
      if (np) p->pend = np;
      if (ns) p->spare = ns;
      if (!np || !ns) die_rank("out of memory for a pipeline message");
      p->cap_pend = c;
    }
    /* the largest spare buffer, grown if it is too small */
    struct spare sb = {NULL, 0};
    if (p->n_spare) {
      int best = 0;
      for (int i = 1; i < p->n_spare; i++)
        if (p->spare[i].cap > p->spare[best].cap) best = i;
      sb = p->spare[best];
      p->spare[best] = p->spare[--p->n_spare];
    }
    if (sb.cap < lb + hb) {
      free(sb.buf);
      sb = (struct spare){malloc(lb + hb), lb + hb};
      if (!sb.buf) die_rank("out of memory for a pipeline message");
    }
    struct pending *g = &p->pend[p->n_pend];
    *g = (struct pending){p->flight_key, rows, n_rows, srows != NULL, sout, sb.buf, sb.cap, lb, hb, MPI_REQUEST_NULL};
    const int rc = MPI_Irecv(g->buf, (int)(lb + hb), MPI_BYTE, p->size - 1, TAG_REPLY, p->comm, &g->rq);
    if (rc != MPI_SUCCESS) die_mpi(rc, "receiving from", p->size - 1);
    p->n_pend++;
    return 0;
  }
  collect_pending(p, p->flight_key); /* (the earlier groups of this step first) */
  char *rb = grow(&p->buf2, &p->cap2, lb + hb);
  recv_bytes(rb, lb + hb, p->size - 1, TAG_REPLY);
  scatter_reply(p, rows, n_rows, srows ? sout : NULL, rb, lb);
  return 0;
}

static int next_session(q35_stage_next *nx, int op, const q35_session *s, q35_err *err) {
  pp *p = (pp *)nx;
  if (!p->open) return 0;
  pp_hdr h;
  memset(&h, 0, sizeof h);
  h.op = op == Q35_STAGE_SESSION_NEW ? OP_SESSION_NEW : op == Q35_STAGE_SESSION_FREE ? OP_SESSION_FREE
                                                                                     : OP_SESSION_RESET;
  h.id = (uint64_t)(uintptr_t)s;
  h.n_ctx = s->params.n_ctx;
  h.kv_type = (int32_t)s->params.kv_type;
  h.draft_max = s->params.draft_max;
  h.mem_budget = s->params.mem_budget;
  send_cmd(&h, NULL);
  if (h.op != OP_SESSION_NEW) return 0;
  recv_bytes(&h, sizeof h, p->size - 1, TAG_REPLY);
  if (h.failed) return q35_seterr(err, "%s", h.msg);
  return 0;
}

static int next_snapshot(q35_stage_next *nx, int op, const q35_session *s, uint64_t *id, q35_err *err) {
  pp *p = (pp *)nx;
  if (op == Q35_STAGE_SNAP_FREE) {
    pthread_mutex_lock(&p->free_mu);
    if (p->open && *id) {
      if (p->n_freed == p->cap_freed) {
        const size_t c = p->cap_freed ? 2 * p->cap_freed : 64;
        uint64_t *nf = realloc(p->freed, c * sizeof *nf);
        if (nf) p->freed = nf, p->cap_freed = c;
      }
      if (p->n_freed < p->cap_freed) p->freed[p->n_freed++] = *id; /* (else: held until QUIT) */
    }
    pthread_mutex_unlock(&p->free_mu);
    return 0;
  }
  if (!p->open) return q35_seterr(err, "pipeline: the later stages have stopped");
  pp_hdr h;
  memset(&h, 0, sizeof h);
  h.id = (uint64_t)(uintptr_t)s;
  if (op == Q35_STAGE_SNAP_SAVE) {
    /* no reply: a stage that cannot copy (out of memory) holds no part, and a restore of it fails */
    h.op = OP_SNAP_SAVE;
    h.snap = *id = ++p->next_snap;
    send_cmd(&h, NULL);
    return 0;
  }
  h.op = OP_SNAP_RESTORE;
  h.snap = *id;
  send_cmd(&h, NULL);
  recv_bytes(&h, sizeof h, p->size - 1, TAG_REPLY);
  if (h.failed) return q35_seterr(err, "%s", h.msg);
  return 0;
}

static void next_ckpt(q35_stage_next *nx, int op, const q35_session *s, int32_t arg) {
  pp *p = (pp *)nx;
  (void)op; /* (CKPT_RESTORE, the only one) */
  if (!p->open) return;
  pp_hdr h;
  memset(&h, 0, sizeof h);
  h.op = OP_CKPT_RESTORE;
  h.id = (uint64_t)(uintptr_t)s;
  h.T = arg;
  send_cmd(&h, NULL); /* no reply: the chain keeps the order of commands */
}

static void quit_chain(pp *p) {
  if (!p->open) return;
  pp_hdr h;
  memset(&h, 0, sizeof h);
  h.op = OP_QUIT;
  send_cmd(&h, NULL);
  pthread_mutex_lock(&p->free_mu);
  p->open = 0; /* the later stages free every snapshot part with QUIT */
  free(p->freed);
  p->freed = NULL;
  for (int i = 0; i < p->n_pend; i++) free(p->pend[i].buf); /* (none: every step has ended) */
  for (int i = 0; i < p->n_spare; i++) free(p->spare[i].buf);
  free(p->pend);
  free(p->spare);
  p->pend = NULL;
  p->spare = NULL;
  p->cap_pend = p->n_pend = p->n_spare = 0;
  p->n_freed = p->cap_freed = 0;
  pthread_mutex_unlock(&p->free_mu);
}

static void next_close(q35_stage_next *nx) {
  pp *p = (pp *)nx;
  quit_chain(p);
  p->m = NULL;
}

/* ---- ranks above 0: serving a stage ---- */

static q35_session *find_session(pp *p, uint64_t id, size_t *at) {
  for (size_t i = 0; i < p->n_sess; i++)
    if (p->sess[i].id == id) {
      if (at) *at = i;
      return p->sess[i].s;
    }
  return NULL;
}

static void serve_session_new(pp *p, pp_hdr *h) {
  if (!h->failed) {
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = h->n_ctx;
    sp.kv_type = (q35_kv_type)h->kv_type;
    sp.mem_budget = h->mem_budget;
    q35_err e;
    q35_session *s = q35_session_new(p->m, &sp, &e);
    if (s && h->draft_max > 0 && q35_session_ckpt_reserve(s, h->draft_max, &e)) { /* speculation's slots */
      q35_session_free(s);
      s = NULL;
    }
    if (s && p->n_sess == p->cap_sess) {
      const size_t c = p->cap_sess ? 2 * p->cap_sess : 16;
      pp_sess *ns = realloc(p->sess, c * sizeof *ns);
      if (!ns) {
        q35_session_free(s);
        s = NULL;
        snprintf(e.msg, sizeof e.msg, "out of memory");
      } else {
        p->sess = ns;
        p->cap_sess = c;
      }
    }
    if (s) {
      p->sess[p->n_sess++] = (pp_sess){h->id, s};
    } else {
      h->failed = 1;
      snprintf(h->msg, sizeof h->msg, "pipeline rank %d (layers [%d, %d)): %.400s", p->rank, p->m->layer_begin,
               p->m->layer_end, e.msg);
    }
  }
  if (p->rank + 1 < p->size) send_cmd(h, NULL);
  else send_bytes(h, sizeof *h, 0, TAG_REPLY);
}

static void serve_session_op(pp *p, const pp_hdr *h) {
  size_t at;
  q35_session *s = find_session(p, h->id, &at);
  if (s && h->op == OP_SESSION_FREE) {
    q35_session_free(s);
    p->sess[at] = p->sess[--p->n_sess];
  } else if (s) {
    q35_session_reset(s);
  }
}

static void serve_snap(pp *p, pp_hdr *h) {
  if (h->op == OP_SNAP_FREE) {
    if (h->n_rows < 1 || h->payload != (uint64_t)h->n_rows * sizeof(uint64_t)) die_rank("malformed snapshot release");
    uint64_t *ids = (uint64_t *)grow(&p->buf, &p->cap, h->payload);
    recv_bytes(ids, h->payload, p->rank - 1, TAG_DATA);
    if (p->rank + 1 < p->size) send_cmd(h, ids);
    for (int32_t k = 0; k < h->n_rows; k++)
      for (size_t i = 0; i < p->n_snaps; i++)
        if (p->snaps[i].id == ids[k]) {
          q35_snapshot_free(p->snaps[i].sn);
          p->snaps[i] = p->snaps[--p->n_snaps];
          break;
        }
    return;
  }
  q35_session *s = find_session(p, h->id, NULL);
  if (h->op == OP_SNAP_SAVE) {
    if (p->rank + 1 < p->size) send_cmd(h, NULL);
    q35_err e;
    q35_snapshot *sn = s ? q35_session_snapshot(s, &e) : NULL;
    if (sn && p->n_snaps == p->cap_snaps) {
      const size_t c = p->cap_snaps ? 2 * p->cap_snaps : 16;
      pp_snap *ns = realloc(p->snaps, c * sizeof *ns);
      if (ns) p->snaps = ns, p->cap_snaps = c;
    }
    if (sn && p->n_snaps < p->cap_snaps) p->snaps[p->n_snaps++] = (pp_snap){h->snap, sn};
    else q35_snapshot_free(sn); /* out of memory: a restore of this snapshot fails, and rank 0 starts over */
    return;
  }
  /* SNAP_RESTORE: the first failure travels on to the last rank, which replies */
  if (!h->failed) {
    const q35_snapshot *sn = NULL;
    for (size_t i = 0; i < p->n_snaps && !sn; i++)
      if (p->snaps[i].id == h->snap) sn = p->snaps[i].sn;
    q35_err e;
    if (!s || !sn) {
      h->failed = 1;
      snprintf(h->msg, sizeof h->msg, "pipeline rank %d holds no %s %llu (out of memory when it was taken?)", p->rank,
               s ? "snapshot" : "session of snapshot", (unsigned long long)h->snap);
    } else if (q35_session_restore(s, sn, &e)) {
      h->failed = 1;
      snprintf(h->msg, sizeof h->msg, "pipeline rank %d (layers [%d, %d)): %.400s", p->rank, p->m->layer_begin,
               p->m->layer_end, e.msg);
    }
  }
  if (p->rank + 1 < p->size) send_cmd(h, NULL);
  else send_bytes(h, sizeof *h, 0, TAG_REPLY);
}

/* The last rank of a step: sample every output position as step.c would (draw index + j; the
 * history of position j is the row's history and its first j drafted tokens) and reply the
 * results, then the hidden states. */
static void sample_reply(pp *p, const pp_row *pr, int n_rows, const char *samp, size_t samp_bytes,
                         const float *logits, const float *hidden, size_t n_hidden_floats) {
  const int V = p->m->hp.n_vocab;
  size_t n_out = 0;
  for (int r = 0; r < n_rows; r++) n_out += (size_t)pr[r].n_out;
  q35_err e;
  if (!p->sampler && !(p->sampler = q35_sampler_new(V, &e))) die_rank(e.msg);
  q35_step_out *res = (q35_step_out *)grow(&p->buf3, &p->cap3, n_out * sizeof *res + n_hidden_floats * sizeof(float));
  size_t at = 0, i = 0;
  for (int r = 0; r < n_rows; r++) {
    pp_samp ps;
    if (at + sizeof ps > samp_bytes) die_rank("malformed sampling section");
    memcpy(&ps, samp + at, sizeof ps);
    const size_t len = sizeof ps + (size_t)ps.n_bias * sizeof(q35_logit_bias) + (size_t)ps.n_hist * sizeof(int32_t);
    if (ps.m != pr[r].n_out || ps.n_bias < 0 || ps.n_hist < ps.n_history || ps.n_history < 0 || at + len > samp_bytes)
      die_rank("malformed sampling section");
    ps.sp.logit_bias = ps.n_bias ? (const q35_logit_bias *)(samp + at + sizeof ps) : NULL;
    const int32_t *hist = (const int32_t *)(samp + at + sizeof ps + (size_t)ps.n_bias * sizeof(q35_logit_bias));
    for (int32_t j = 0; j < ps.m; j++, i++) {
      q35_sampling sp = ps.sp;
      sp.draw_index += (uint64_t)j;
      const int32_t nh = ps.m > 1 ? ps.n_history + j : ps.n_history;
      memset(&res[i], 0, sizeof res[i]);
      res[i].rc = q35_sample(p->sampler, logits + i * V, V, &sp, nh ? hist : NULL, nh, ps.n_prompt, ps.n_top,
                             &res[i].res, &res[i].err);
    }
    at = (at + len + 7) & ~(size_t)7;
  }
  memcpy(res + n_out, hidden, n_hidden_floats * sizeof(float));
  send_bytes(res, n_out * sizeof *res + n_hidden_floats * sizeof(float), 0, TAG_REPLY);
}

static void serve_forward(pp *p, pp_hdr *h) {
  const int H = p->m->hp.n_embd, V = p->m->hp.n_vocab, last = p->rank + 1 == p->size;
  const int n_rows = h->n_rows;
  if (n_rows < 1 || n_rows > (1 << 16) || h->T < 1 || h->payload != fwd_payload(n_rows, h->T, H) + h->samp_bytes)
    die_rank("malformed forward message");
  char *in = grow(&p->buf, &p->cap, h->payload);
  recv_bytes(in, h->payload, p->rank - 1, TAG_DATA);
  const pp_row *pr = (const pp_row *)in;
  const float *x = (const float *)(in + (size_t)n_rows * sizeof(pp_row));
  size_t n_logits = 0, n_hidden = 0, n_all = 0;
  for (int r = 0; r < n_rows; r++) {
    if (pr[r].n < 1 || pr[r].n_out < 0 || pr[r].n_out > pr[r].n || pr[r].ckpt < 0 || pr[r].ckpt > Q35_DRAFT_MAX + 1)
      die_rank("malformed forward message (a row)");
    n_logits += (size_t)pr[r].n_out;
    n_hidden += pr[r].hidden & ROW_HIDDEN ? (size_t)pr[r].n_out : 0;
    n_all += pr[r].hidden & ROW_ALL ? (size_t)pr[r].n : 0;
  }
  /* out: the next rank's message (same rows, this stage's residual stream, the same sampling
   * section), or the logits (then the hidden states) of the reply */
  const size_t out_bytes = last ? (n_logits * V + (n_hidden + n_all) * H) * sizeof(float) : h->payload;
  char *out = grow(&p->buf2, &p->cap2, out_bytes);
  const char *samp = in + fwd_payload(n_rows, h->T, H);
  q35_fwd_row rows[n_rows];
  int64_t t = 0;
  float *lg = (float *)out, *hd = (float *)out + n_logits * V, *ha = hd + n_hidden * H;
  for (int r = 0; r < n_rows; r++) {
    q35_session *s = find_session(p, pr[r].id, NULL);
    if (!s) die_rank("a forward message names a session this stage does not hold");
    /* a verify row checkpoints this stage's state as the first stage's (a rollback restores it) */
    q35_err ce;
    if (pr[r].ckpt > 0 ? q35_session_ckpt_arm(s, pr[r].ckpt, &ce) : (q35_session_ckpt_disarm(s), 0)) die_rank(ce.msg);
    if (last && pr[r].hidden & ROW_ALL) {
      s->hidden_all = ha;
      ha += (size_t)pr[r].n * H;
    }
    rows[r] = (q35_fwd_row){s, NULL, pr[r].n, pr[r].n_out, NULL, NULL, x + t * H, NULL};
    if (last && pr[r].n_out) {
      rows[r].logits = lg;
      lg += (size_t)pr[r].n_out * V;
      if (pr[r].hidden & ROW_HIDDEN) {
        rows[r].hidden = hd;
        hd += (size_t)pr[r].n_out * H;
      }
    } else if (!last) {
      rows[r].x_out = (float *)(out + (size_t)n_rows * sizeof(pp_row)) + t * H;
    }
    t += pr[r].n;
  }
  if (t != h->T) die_rank("malformed forward message (row lengths)");
  q35_err e;
  const int frc = q35_forward(p->m, &p->m->ctx->fwd, rows, n_rows, &e);
  for (int r = 0; r < n_rows; r++) rows[r].s->hidden_all = NULL;
  if (frc) {
    char msg[sizeof e.msg + 32];
    snprintf(msg, sizeof msg, "forward pass failed: %s", e.msg);
    die_rank(msg);
  }
  if (!last) {
    memcpy(out, in, (size_t)n_rows * sizeof(pp_row));
    memcpy(out + fwd_payload(n_rows, h->T, H), samp, h->samp_bytes);
    send_cmd(h, out);
  } else if (h->samp_bytes && n_logits) {
    sample_reply(p, pr, n_rows, samp, h->samp_bytes, (const float *)out, (const float *)out + n_logits * V,
                 (n_hidden + n_all) * H);
  } else if (out_bytes) {
    send_bytes(out, out_bytes, 0, TAG_REPLY);
  }
}

/* Commands from rank - 1 until QUIT. */
static void serve_stage(pp *p) {
  for (;;) {
    pp_hdr h;
    recv_wait(&h, sizeof h, p->rank - 1, TAG_HDR, 0); /* the next command: rank 0 may be idle */
    if (h.op == OP_QUIT) {
      if (p->rank + 1 < p->size) send_cmd(&h, NULL);
      return;
    } else if (h.op == OP_SESSION_NEW) {
      serve_session_new(p, &h);
    } else if (h.op == OP_SESSION_FREE || h.op == OP_SESSION_RESET) {
      if (p->rank + 1 < p->size) send_cmd(&h, NULL);
      serve_session_op(p, &h);
    } else if (h.op == OP_FORWARD) {
      serve_forward(p, &h);
    } else if (h.op == OP_SNAP_SAVE || h.op == OP_SNAP_RESTORE || h.op == OP_SNAP_FREE) {
      serve_snap(p, &h);
    } else if (h.op == OP_CKPT_RESTORE) {
      if (p->rank + 1 < p->size) send_cmd(&h, NULL);
      q35_session *s = find_session(p, h.id, NULL);
      if (s) q35_session_ckpt_restore(s, (int32_t)h.T);
    } else {
      die_rank("unknown pipeline message");
    }
  }
}

/* ---- the split ---- */

/* "0:2,2:4": one range per rank, contiguous, from 0 to n_layer. */
static int parse_split(pp *p, const char *s, int n_layer, q35_err *err) {
  int k = 0, at = 0;
  const char *c = s;
  while (*c) {
    char *e1, *e2;
    const long a = strtol(c, &e1, 10);
    if (e1 == c || *e1 != ':') break;
    const long b = strtol(e1 + 1, &e2, 10);
    if (e2 == e1 + 1 || (*e2 && *e2 != ',')) break;
    if (k == p->size)
      return q35_seterr(err, "--pp-split '%s' has more ranges than the %d ranks of the job", s, p->size);
    if (a != at || b <= a || b > n_layer)
      return q35_seterr(err, "--pp-split '%s': range %d must be %d:E with %d < E <= %d (the ranges are contiguous "
                        "and cover layers 0 to %d)", s, k, at, at, n_layer, n_layer);
    p->begin[k] = (int)a;
    p->end[k++] = (int)b;
    at = (int)b;
    c = *e2 ? e2 + 1 : e2;
    if (!*c) {
      if (k != p->size)
        return q35_seterr(err, "--pp-split '%s' has %d ranges for the %d ranks of the job", s, k, p->size);
      if (at != n_layer) return q35_seterr(err, "--pp-split '%s' ends at layer %d, the model has %d", s, at, n_layer);
      return 0;
    }
  }
  return q35_seterr(err, "--pp-split '%s': expected ranges BEGIN:END separated by commas, e.g. 0:2,2:4", s);
}

/* Ranges of about equal bytes: rank 0's cost includes the embedding, the last rank's the output
 * head; boundary k goes where the running total comes closest to k/N of the whole, each rank
 * keeping at least one layer. */
static void split_by_bytes(pp *p, int n_layer, const uint64_t *lb, uint64_t embd, uint64_t out) {
  double total = (double)embd + (double)out, run = (double)embd;
  for (int l = 0; l < n_layer; l++) total += (double)lb[l];
  int at = 0;
  for (int k = 0; k < p->size; k++) {
    p->begin[k] = at;
    if (k == p->size - 1) {
      p->end[k] = n_layer;
      break;
    }
    const double goal = total * (k + 1) / p->size;
    int e = at + 1;
    run += (double)lb[at];
    while (e < n_layer - (p->size - 1 - k) && run + (double)lb[e] / 2 < goal) run += (double)lb[e++];
    p->end[k] = e;
    at = e;
  }
}

static void print_split(const pp *p, const uint64_t *lb, uint64_t embd, uint64_t out) {
  fprintf(stderr, "pipeline: %d ranks:", p->size);
  for (int k = 0; k < p->size; k++) {
    uint64_t b = (k == 0 ? embd : 0) + (k == p->size - 1 ? out : 0);
    for (int l = p->begin[k]; l < p->end[k]; l++) b += lb[l];
    fprintf(stderr, " rank %d layers [%d, %d) %.1f MiB%s", k, p->begin[k], p->end[k], b / 1048576.0,
            k + 1 < p->size ? ";" : "\n");
  }
}

/* ---- the entry points ---- */

void q35_pp_init(int *argc, char ***argv) {
  int provided = 0;
  /* one thread at a time calls MPI: the main thread, or under serve the scheduler's thread (which
   * alone steps, makes and frees sessions) and, after it has ended, the main thread again */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "q35: MPI_Init_thread failed\n");
    exit(1);
  }
  g_inited = 1;
  MPI_Comm_dup(MPI_COMM_WORLD, &g_pp.comm);
  MPI_Comm_set_errhandler(g_pp.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g_pp.comm, &g_pp.rank);
  MPI_Comm_size(g_pp.comm, &g_pp.size);
  if (provided < MPI_THREAD_SERIALIZED) die_rank("the MPI library does not provide MPI_THREAD_SERIALIZED");
  if (g_pp.size > MAX_RANKS) die_rank("too many ranks");
  g_pp.open = g_pp.rank == 0 && g_pp.size > 1; /* rank 0 sends QUIT once, whatever happens */
}

/* The process's CPU seconds (every thread). */
static double process_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static long peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

q35_model *q35_pp_load(const char *path, const q35_model_params *mp0, const char *split, q35_err *err) {
  pp *p = &g_pp;
  int n_layer = 0;
  uint64_t *lb = NULL, embd = 0, out = 0;
  if (q35_model_plan(path, &n_layer, &lb, &embd, &out, err)) {
    if (p->size == 1) return NULL;
    die_rank(err->msg);
  }
  if (split ? parse_split(p, split, n_layer, err) : 0) {
    free(lb);
    if (p->size == 1) return NULL;
    die_rank(err->msg);
  }
  if (p->size > n_layer) {
    free(lb);
    q35_seterr(err, "%d ranks for a model of %d layers: at most one rank per layer", p->size, n_layer);
    die_rank(err->msg);
  }
  if (p->size == 1) {
    free(lb);
    return q35_model_load(path, mp0, err);
  }
  if (!split) split_by_bytes(p, n_layer, lb, embd, out);
  if (p->rank == 0) print_split(p, lb, embd, out);
  free(lb);
  q35_model_params mp = *mp0;
  mp.layer_begin = p->begin[p->rank];
  mp.layer_end = p->end[p->rank];
  if (p->rank) mp.progress = 0;
  q35_model *m = q35_model_load(path, &mp, err);
  if (!m) die_rank(err->msg);
  p->m = m;
  /* every stage loaded before rank 0 goes on (its commands' waits are bounded by --pp-timeout, a
   * load is not: a large stage takes minutes to read; a failed load ends the job) */
  int32_t ready = 1;
  if (p->rank == 0) {
    for (int r = 1; r < p->size; r++) recv_wait(&ready, sizeof ready, r, TAG_READY, 0);
    if (p->micro < 0) p->micro = p->size;
    p->ops = (q35_stage_next){.forward = next_forward, .session = next_session, .sample_next = next_sample,
                              .snapshot = next_snapshot, .n_micro = p->micro, .micro = next_micro,
                              .flight = next_flight, .ckpt = next_ckpt, .n_stages = p->size, .close = next_close};
    m->next = &p->ops;
    return m;
  }
  send_bytes(&ready, sizeof ready, 0, TAG_READY);
  serve_stage(p);
  fprintf(stderr, "pipeline: rank %d (layers [%d, %d)) done: peak resident memory %.1f MiB; CPU %.2f s, of it "
          "%.2f s in MPI waits (%.2f s of wall time)\n", p->rank, m->layer_begin, m->layer_end, peak_rss_kb() / 1024.0,
          process_cpu_s(), g_wait_cpu, g_wait_wall);
  for (size_t i = 0; i < p->n_snaps; i++) q35_snapshot_free(p->snaps[i].sn);
  free(p->snaps);
  for (size_t i = 0; i < p->n_sess; i++) q35_session_free(p->sess[i].s);
  q35_sampler_free(p->sampler);
  q35_model_free(m);
  free(p->sess);
  MPI_Comm_free(&p->comm);
  MPI_Finalize();
  exit(0);
}

void q35_pp_set_timeout(double seconds) { g_pp.timeout = seconds; }
void q35_pp_set_micro(int n) { g_pp.micro = n; }

int q35_pp_ranks(void) { return g_pp.size; }
int q35_pp_rank(void) { return g_pp.rank; }

void q35_pp_finalize(void) {
  if (!g_inited) return;
  if (g_pp.rank == 0 && g_pp.size > 1) {
    quit_chain(&g_pp);
    if (g_pp.end[0] > 0) /* a model was loaded */
      fprintf(stderr, "pipeline: rank 0 (layers [%d, %d)) done: peak resident memory %.1f MiB; CPU %.2f s, of it "
              "%.2f s in MPI waits (%.2f s of wall time)\n", g_pp.begin[0], g_pp.end[0], peak_rss_kb() / 1024.0,
              process_cpu_s(), g_wait_cpu, g_wait_wall);
  }
  MPI_Comm_free(&g_pp.comm);
  MPI_Finalize();
  g_inited = 0;
}
