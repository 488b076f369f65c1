/*
 * test_stages.c - pipeline stages in one process, without MPI: a model loaded as layer ranges
 * (q35_model_params.layer_begin / layer_end), the residual stream handed from stage to stage with
 * q35_fwd_row.x_out / x_in, gives logits bit-identical to the whole model (reference: the whole
 * model's q35_session_eval), for several splits and prefill chunkings; a stage's sessions hold
 * only its layers' state (the stages' bytes add up to the whole's); the other stages' tensor data
 * is not readable (/proc/self/maps); misuse is refused with a message. The same for the model
 * written as a split GGUF (shards of a few tensors each: a stage maps its tensors from whichever
 * shards hold them and keeps no data of a shard holding none) and read into memory (no_mmap: only
 * the stage's tensors are copied). Steps in flight (q35_context_step_begin / _end on several
 * contexts sharing one's threads) through a two-stage chain whose later stage (an in-process
 * stand-in for dist/pp.c's q35_stage_next) computes only when a step is waited for, in the order
 * sent: the samples of 4 sessions in 2 groups, one constrained by a regex, equal q35_step on the
 * whole model one step at a time. Speculative decoding through two stages (the first binds the
 * MTP head and drafts; the stand-in later stage arms and restores its own checkpoints and returns
 * every position's hidden state, as dist/pp.c does): --draft 0 and 3, greedy and seeded, with a
 * snapshot restored mid-way and with emitted drafts trimmed (q35_session_draft_keep), give the
 * tokens and logprobs of the whole model one token a step; a
 * chain without checkpoint support refuses draft_max. The MPI driver on top of this
 * (src/dist/pp.c) is tested by test_mpi.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "engine/context.h"
#include "export/tiny.h"
#include "format/tensor_types.h"
#include "model/model.h"
#include "model/mtp.h"

enum { NL = 6, NT = 11 };
static const int32_t toks[NT] = {5, 17, 3, 99, 250, 7, 1, 64, 300, 2, 11};

static int g_no_mmap; /* load the stages with no_mmap */

static q35_model *load_range(const char *path, int b, int e, q35_err *err) {
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = 1; /* several models live at once: no spinning workers */
  mp.no_mmap = g_no_mmap;
  mp.layer_begin = b;
  mp.layer_end = e;
  return q35_model_load(path, &mp, err);
}

/* Through stages [bounds[k], bounds[k+1]), prefill in chunks of 1, 6 and 11 tokens: the logits of
 * every position equal ref. */
static void run_stages(const char *path, const int *bounds, int n_st, const float *ref, float *logits, int V, int H,
                       size_t whole_bytes) {
  q35_err err;
  q35_model *m[8];
  q35_session *s[8];
  int ok = 1;
  size_t state_bytes = 0;
  for (int k = 0; k < n_st; k++) {
    m[k] = load_range(path, bounds[k], bounds[k + 1], &err);
    CHECK(m[k] != NULL, "%s", err.msg);
    if (!m[k]) return;
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = 64;
    sp.kv_type = Q35_KV_F32;
    s[k] = q35_session_new(m[k], &sp, &err);
    CHECK(s[k] != NULL, "%s", err.msg);
    state_bytes += q35_session_bytes(s[k]);
  }
  CHECK(state_bytes == whole_bytes, "%d stages' state %zu bytes, whole %zu", n_st, state_bytes, whole_bytes);
  float *xa = malloc(sizeof(float) * NT * H), *xb = malloc(sizeof(float) * NT * H);
  for (int chunk = 1; chunk <= NT && ok; chunk += 5) {
  memset(logits, 0, sizeof(float) * NT * V);
  for (int k = 0; k < n_st; k++) q35_session_reset(s[k]);
  for (int i = 0; i < NT && ok; i += chunk) {
    const int n = NT - i < chunk ? NT - i : chunk;
    for (int k = 0; k < n_st && ok; k++) {
      q35_fwd_row r = {s[k], k ? NULL : toks + i, n, 0, NULL, NULL, k ? xa : NULL, NULL};
      if (k + 1 < n_st) r.x_out = xb;
      else r.n_out = n, r.logits = logits + (size_t)i * V;
      ok = q35_forward(m[k], &m[k]->ctx->fwd, &r, 1, &err) == 0;
      CHECK(ok, "stage %d: %s", k, err.msg);
      float *t = xa;
      xa = xb;
      xb = t;
    }
  }
  CHECK(memcmp(logits, ref, sizeof(float) * NT * V) == 0, "%s%s: stages from %d to %d (%d stages), chunk %d: logits "
        "differ", path, g_no_mmap ? " (no_mmap)" : "", bounds[1], bounds[n_st - 1], n_st, chunk);
  }
  free(xa);
  free(xb);
  for (int k = 0; k < n_st; k++) {
    q35_session_free(s[k]);
    q35_model_free(m[k]);
  }
}

/* Whether the page at p cannot be read: no mapping holds it, or only an inaccessible one (what a
 * stage leaves in place of the other stages' tensor data, /proc/self/maps). */
static int page_unmapped(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int readable = 0;
  const unsigned long a = (unsigned long)(uintptr_t)p;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perm[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3 && a >= lo && a < hi) {
      readable = perm[0] == 'r';
      break;
    }
  }
  if (f) fclose(f);
  return !readable;
}

/* Whether the middle of tensor `name` is unreadable. */
static int unmapped(const gguf_file *f, const char *name) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  return page_unmapped((const char *)t->data + t->nbytes / 2);
}

/* Whether a stage of layers [b, e) binds tensor t (its layers', the embedding for the first stage,
 * output_norm and output for the last; the MTP block, with output_norm and output for its head, for
 * the first: it runs the draft step of speculative decoding). */
static int stage_tensor(const gguf_tensor *t, int b, int e) {
  char name[96];
  snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
  int l = -1;
  if (sscanf(name, "blk.%d.", &l) == 1) return (l >= b && l < e) || (l == NL && b == 0);
  return !strcmp(name, "token_embd.weight") ? b == 0 : e == NL || b == 0; /* output_norm, output */
}

/* A stage of layers [b, e) of a split file: the middle of every tensor it binds is mapped and every
 * other tensor's is not (unless that page holds a bound tensor or the header); a shard holding none
 * of its tensors has no page of its data section mapped.
 * Returns the shards that held none (with data past the header's last page). */
static int check_split_stage(const char *path, int b, int e) {
  q35_err err;
  q35_model *m = load_range(path, b, e, &err);
  CHECK(m != NULL, "%s", err.msg);
  if (!m) return 0;
  gguf_file *f = m->gguf;
  const long pg = sysconf(_SC_PAGESIZE);
  int empty = 0;
  for (uint32_t sh = 0; sh < gguf_n_shards(f); sh++) {
    int kept = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
      const gguf_tensor *t = &f->tensors[i];
      if (t->shard != sh) continue;
      const int keep = stage_tensor(t, b, e);
      const uintptr_t mid = ((uintptr_t)t->data + t->nbytes / 2) & ~(uintptr_t)(pg - 1);
      const gguf_file *sf = gguf_shard(f, sh);
      /* a small tensor on a page of a kept one, or of the header, stays mapped with it */
      int shared = mid < (((uintptr_t)sf->map + sf->data_offset + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1));
      for (uint64_t j = 0; j < f->n_tensors && !keep; j++) {
        const gguf_tensor *u = &f->tensors[j];
        const uintptr_t lo = (uintptr_t)u->data & ~(uintptr_t)(pg - 1), hi = (uintptr_t)u->data + u->nbytes;
        shared |= u->shard == sh && stage_tensor(u, b, e) && mid >= lo && mid < hi;
      }
      kept += keep;
      if (!shared)
        CHECK(page_unmapped((const void *)mid) == !keep, "layers [%d, %d): %.*s (shard %u) is %s", b, e,
              (int)t->name.len, t->name.ptr, sh + 1, keep ? "not mapped" : "still mapped");
    }
    const gguf_file *sf = gguf_shard(f, sh);
    const size_t o0 = (sf->data_offset + pg - 1) & ~(size_t)(pg - 1);
    if (kept || o0 >= sf->size) continue; /* (a data section within the header's last page stays) */
    empty++;
    int any = 0;
    for (size_t o = o0; o < sf->size; o += (size_t)pg) any |= !page_unmapped(sf->map + o);
    CHECK(!any, "layers [%d, %d): shard %u holds none of the stage's tensors but has data pages mapped", b, e, sh + 1);
  }
  q35_model_free(m);
  return empty;
}

/* ---- steps in flight through an in-process later stage ----
 * The later stage (layers [split, NL) with the output head) receives forwards in order and computes
 * them only at flight(WAIT) (then every one sent before, as a chain of ranks processes its commands
 * in order); outside a flight it computes at once. It declines sample_next, so rank 0 samples. */
typedef struct {
  q35_session *s0, *s1; /* first stage's session, the later stage's */
} fk_sess;

typedef struct {
  const void *key;
  int n_rows;
  q35_fwd_row rows[8]; /* s: the first stage's session; logits: where the results go */
  int32_t ckpt[8];     /* speculation, as dist/pp.c sends it: checkpoints the row arms (the first
                        * stage's ckpt_n), and where every position's hidden state goes (its hidden_all) */
  float *all[8];
  int32_t pos0[8]; /* the first stage's position before the row: the later stage's must be the same */
  float *x;
} fk_fwd;

typedef struct {
  uint64_t id;
  q35_snapshot *sn;
} fk_snap;

typedef struct {
  q35_stage_next ops;
  q35_model *m1;
  fk_sess sess[16];
  int n_sess;
  fk_fwd q[16];
  int n_q;
  const void *key;
  int sent, computed, max_in_flight;
  fk_snap snaps[8];
  int n_snaps;
  uint64_t next_snap;
  int restores; /* CKPT_RESTORE commands */
} fake_next;

static q35_session *fk_find(fake_next *f, const q35_session *s0) {
  for (int i = 0; i < f->n_sess; i++)
    if (f->sess[i].s0 == s0) return f->sess[i].s1;
  return NULL;
}

static void fk_compute(fake_next *f, fk_fwd *w) {
  const int H = q35_model_n_embd(f->m1);
  q35_fwd_row rows[8];
  int64_t t = 0;
  for (int r = 0; r < w->n_rows; r++) {
    rows[r] = w->rows[r];
    rows[r].s = fk_find(f, w->rows[r].s);
    rows[r].tokens = NULL;
    rows[r].x_in = w->x + t * H;
    t += rows[r].n;
    CHECK(rows[r].s->pos == w->pos0[r], "the later stage's session is at position %d, the first stage's at %d",
          rows[r].s->pos, w->pos0[r]);
    q35_err e;
    if (w->ckpt[r] > 0) CHECK(q35_session_ckpt_arm(rows[r].s, w->ckpt[r], &e) == 0, "arm: %s", e.msg);
    else q35_session_ckpt_disarm(rows[r].s);
    rows[r].s->hidden_all = w->all[r];
  }
  q35_err err;
  CHECK(q35_forward(f->m1, &f->m1->ctx->fwd, rows, w->n_rows, &err) == 0, "later stage: %s", err.msg);
  for (int r = 0; r < w->n_rows; r++) rows[r].s->hidden_all = NULL;
  free(w->x);
  f->computed++;
}

static int fk_forward(q35_stage_next *nx, const q35_fwd_row *rows, int n_rows, const float *x, int64_t T,
                      q35_err *err) {
  fake_next *f = (fake_next *)nx;
  const int H = q35_model_n_embd(f->m1);
  if (n_rows > 8 || f->n_q == 16) return q35_seterr(err, "fake: too many");
  fk_fwd *w = &f->q[f->n_q++];
  w->key = f->key;
  w->n_rows = n_rows;
  memcpy(w->rows, rows, sizeof *rows * (size_t)n_rows);
  for (int r = 0; r < n_rows; r++) {
    w->ckpt[r] = rows[r].s->ckpt_n, w->all[r] = rows[r].s->hidden_all;
    w->pos0[r] = rows[r].s->pos - rows[r].n; /* (forward.c has moved it on) */
  }
  w->x = malloc(sizeof(float) * (size_t)T * H);
  memcpy(w->x, x, sizeof(float) * (size_t)T * H);
  f->sent++;
  if (f->sent - f->computed > f->max_in_flight) f->max_in_flight = f->sent - f->computed;
  if (!f->key) { /* not in flight: at once */
    fk_compute(f, w);
    f->n_q--;
  }
  return 0;
}

static int fk_session(q35_stage_next *nx, int op, const q35_session *s, q35_err *err) {
  fake_next *f = (fake_next *)nx;
  if (op == Q35_STAGE_SESSION_NEW) {
    if (f->n_sess == 16) return q35_seterr(err, "fake: too many sessions");
    q35_session_params sp = s->params; /* a later stage holds no head: only checkpoint slots for drafts */
    sp.draft_max = sp.draft_vocab = 0;
    q35_session *s1 = q35_session_new(f->m1, &sp, err);
    if (!s1) return -1;
    if (q35_session_ckpt_reserve(s1, s->params.draft_max, err)) return q35_session_free(s1), -1;
    f->sess[f->n_sess++] = (fk_sess){(q35_session *)s, s1};
  } else {
    for (int i = 0; i < f->n_sess; i++)
      if (f->sess[i].s0 == s) {
        if (op == Q35_STAGE_SESSION_RESET) {
          q35_session_reset(f->sess[i].s1);
        } else {
          q35_session_free(f->sess[i].s1);
          f->sess[i] = f->sess[--f->n_sess];
        }
        break;
      }
  }
  return 0;
}

static int fk_sample(q35_stage_next *nx, const q35_row *rows, int n_rows, struct q35_step_out *out) {
  (void)nx, (void)rows, (void)n_rows, (void)out;
  return -1; /* the first stage samples */
}

static int fk_snapshot(q35_stage_next *nx, int op, const q35_session *s, uint64_t *id, q35_err *err) {
  fake_next *f = (fake_next *)nx;
  if (op == Q35_STAGE_SNAP_SAVE) {
    if (f->n_snaps == 8) return q35_seterr(err, "fake: too many snapshots");
    q35_snapshot *sn = q35_session_snapshot(fk_find(f, s), err);
    if (!sn) return -1;
    f->snaps[f->n_snaps++] = (fk_snap){*id = ++f->next_snap, sn};
    return 0;
  }
  for (int i = 0; i < f->n_snaps; i++)
    if (f->snaps[i].id == *id) {
      if (op == Q35_STAGE_SNAP_RESTORE) return q35_session_restore(fk_find(f, s), f->snaps[i].sn, err);
      q35_snapshot_free(f->snaps[i].sn);
      f->snaps[i] = f->snaps[--f->n_snaps];
      return 0;
    }
  return op == Q35_STAGE_SNAP_RESTORE ? q35_seterr(err, "fake: no snapshot %llu", (unsigned long long)*id) : 0;
}

static void fk_ckpt(q35_stage_next *nx, int op, const q35_session *s, int32_t arg) {
  fake_next *f = (fake_next *)nx;
  CHECK(op == Q35_STAGE_CKPT_RESTORE);
  q35_session_ckpt_restore(fk_find(f, s), arg);
  f->restores++;
}

static int fk_micro(q35_stage_next *nx, int op, q35_err *err) {
  (void)nx, (void)op, (void)err;
  return 0;
}

static int fk_flight(q35_stage_next *nx, int op, const void *key, q35_err *err) {
  fake_next *f = (fake_next *)nx;
  (void)err;
  if (op == Q35_STAGE_FLIGHT_OPEN) {
    f->key = key;
  } else if (op == Q35_STAGE_FLIGHT_CLOSE) {
    f->key = NULL;
  } else { /* everything sent up to key's last forward, in order */
    int last = -1;
    for (int i = 0; i < f->n_q; i++)
      if (f->q[i].key == key) last = i;
    for (int i = 0; i <= last; i++) fk_compute(f, &f->q[i]);
    memmove(f->q, f->q + last + 1, sizeof f->q[0] * (size_t)(f->n_q - last - 1));
    f->n_q -= last + 1;
  }
  return 0;
}

static void fk_close(q35_stage_next *nx) { (void)nx; }

enum { NS = 4, NSTEP = 12 };

/* The prompt of session i and its sampling parameters (session 2 greedy; the others seeded). */
static const int32_t *fl_prompt(int i, int *n) {
  static const int32_t p[NS][6] = {{5, 17, 3, 99, 250, 7}, {1, 64}, {300, 2, 11, 40}, {9, 9, 8}};
  static const int len[NS] = {6, 2, 4, 3};
  *n = len[i];
  return p[i];
}

/* Tokens of NSTEP steps of the NS sessions: on `m` one step at a time (ctx NULL), or in two groups
 * (sessions 0, 1 and 2, 3) whose steps are in flight at once on ctx[0], ctx[1]. Session 3 samples
 * under the regex constraint con (a clone each run). */
static void fl_run(q35_model *m, q35_context **ctx, const q35_constraint *con, int32_t out[NS][NSTEP]) {
  q35_err err;
  q35_session *s[NS];
  q35_sampling sp[NS];
  q35_row rows[NS];
  int32_t last[NS];
  q35_constraint *c = q35_constraint_clone(con);
  memset(rows, 0, sizeof rows);
  for (int i = 0; i < NS; i++) {
    q35_session_params pp = q35_session_default_params();
    pp.n_ctx = 64;
    pp.kv_type = Q35_KV_F32;
    s[i] = q35_session_new(m, &pp, &err);
    CHECK(s[i] != NULL, "%s", err.msg);
    sp[i] = q35_sampling_default();
    sp[i].temperature = i == 2 ? 0.0f : 0.9f;
    sp[i].seed = 100 + (uint64_t)i;
    sp[i].top_k = 40;
    rows[i].session = s[i];
    rows[i].tokens = fl_prompt(i, &rows[i].n_tokens);
    rows[i].sampling = &sp[i];
    rows[i].n_top_logprobs = -1;
    rows[i].constraint = i == 3 ? c : NULL;
  }
  for (int k = 0; k < NSTEP; k++) {
    for (int i = 0; i < NS; i++) sp[i].draw_index = (uint64_t)k;
    if (!ctx) {
      CHECK(q35_step(m, rows, NS, &err) == 0, "step %d: %s", k, err.msg);
    } else {
      CHECK(q35_context_step_begin(ctx[0], rows, 2, &err) == 0, "begin 0, step %d: %s", k, err.msg);
      CHECK(q35_context_step_begin(ctx[1], rows + 2, 2, &err) == 0, "begin 1, step %d: %s", k, err.msg);
      CHECK(q35_context_step_begin(ctx[1], rows + 2, 2, &err) != 0 && strstr(err.msg, "in flight"), "%s", err.msg);
      CHECK(q35_context_step_end(ctx[0], &err) == 0, "end 0, step %d: %s", k, err.msg);
      CHECK(q35_context_step_end(ctx[1], &err) == 0, "end 1, step %d: %s", k, err.msg);
      CHECK(q35_context_step_end(ctx[1], &err) != 0 && strstr(err.msg, "no step in flight"), "%s", err.msg);
    }
    for (int i = 0; i < NS; i++) {
      out[i][k] = last[i] = rows[i].token;
      rows[i].tokens = &last[i];
      rows[i].n_tokens = 1;
    }
  }
  for (int i = 0; i < NS; i++) q35_session_free(s[i]);
  q35_constraint_free(c);
}

static void test_flight(const char *path, q35_model *whole) {
  q35_err err;
  q35_constraint_vocab *v = q35_constraint_vocab_from_model(whole, &err);
  CHECK(v != NULL, "%s", err.msg);
  if (!v) return;
  const char *re = "[a-m]+( [a-m]+)*";
  q35_constraint *con = q35_constraint_new(v, Q35_CONSTRAINT_REGEX, re, strlen(re), NULL, &err);
  CHECK(con != NULL, "%s", err.msg);
  int32_t ref[NS][NSTEP], got[NS][NSTEP];
  fl_run(whole, NULL, con, ref);
  CHECK(q35_model_stages(whole) == 1);
  const int split = 2;
  q35_model *m0 = load_range(path, 0, split, &err), *m1 = load_range(path, split, NL, &err);
  CHECK(m0 && m1, "%s", err.msg);
  if (m0 && m1) {
    static fake_next f;
    memset(&f, 0, sizeof f);
    f.ops = (q35_stage_next){.forward = fk_forward, .session = fk_session, .sample_next = fk_sample,
                             .snapshot = fk_snapshot, .n_micro = 0, .micro = fk_micro, .flight = fk_flight,
                             .ckpt = fk_ckpt, .n_stages = 2, .close = fk_close};
    f.m1 = m1;
    m0->next = &f.ops;
    CHECK(q35_model_stages(m0) == 2);
    q35_context *ctx[2] = {q35_model_context(m0), q35_context_new_sharing(q35_model_context(m0), &err)};
    CHECK(ctx[1] != NULL && q35_context_n_threads(ctx[1]) == q35_context_n_threads(ctx[0]), "%s", err.msg);
    fl_run(m0, ctx, con, got);
    CHECK(memcmp(ref, got, sizeof ref) == 0, "samples of steps in flight differ from one step at a time");
    CHECK(f.max_in_flight == 2 && f.computed == 2 * NSTEP, "in flight at most %d, %d forwards computed",
          f.max_in_flight, f.computed);
    q35_constraint *c = q35_constraint_clone(con); /* session 3 sampled within the regex */
    int ok = 1;
    for (int i = 0; i < NSTEP && ok; i++) ok = q35_constraint_accept(c, got[3][i], &err) == 0;
    CHECK(ok, "session 3's token %d is outside the regex: %s", got[3][0], err.msg);
    q35_constraint_free(c);
    q35_context_free(ctx[1]);
    m0->next = NULL;
  }
  q35_model_free(m0);
  q35_model_free(m1);
  q35_constraint_free(con);
  q35_constraint_vocab_free(v);
}

enum { SP_PROMPT = 7, SP_GEN = 40 };
static const int32_t sp_prompt[SP_PROMPT] = {5, 17, 3, 99, 250, 7, 1};

/* SP_GEN tokens (and their logprobs) after sp_prompt on one session of m with draft_max dmax, n_draft
 * nd a step (temperature 0: greedy; else seeded). snap_at > 0: a snapshot once snap_at tokens are
 * out; after the last one the session restores it and generates the rest again, which must repeat
 * the first run bit for bit. With g_trim, every third step that emitted drafts keeps one token
 * fewer (q35_session_draft_keep: a restore on every stage; the next step samples the dropped
 * position again, so the tokens stay the reference's), counted in g_trims. Returns the drafts
 * accepted; *drafted: the drafts fed. */
static int g_trim, g_trims;
static int gen(q35_model *m, int32_t dmax, int32_t nd, float temp, int snap_at, int32_t *tok, float *lp, int *drafted) {
  q35_err err;
  q35_session_params ps = q35_session_default_params();
  ps.n_ctx = 64;
  ps.kv_type = Q35_KV_F32;
  ps.draft_max = dmax;
  q35_session *s = q35_session_new(m, &ps, &err);
  CHECK(s != NULL, "%s", err.msg);
  if (!s) return 0;
  q35_sampling sp = q35_sampling_default();
  sp.temperature = temp;
  sp.seed = 42;
  sp.top_k = 40;
  int32_t hist[SP_PROMPT + SP_GEN], cur = 0;
  memcpy(hist, sp_prompt, sizeof sp_prompt);
  q35_output outs[Q35_DRAFT_MAX + 1];
  q35_snapshot *sn = NULL;
  int n = 0, n_snap = 0, pass = 0, accepted = 0, ok = 1;
  *drafted = 0;
  while (ok) {
    if (n >= SP_GEN) {
      if (!sn || pass) break;
      ok = q35_session_restore(s, sn, &err) == 0;
      CHECK(ok, "restore: %s", err.msg);
      pass = 1, n = n_snap, cur = tok[n - 1];
      continue;
    }
    q35_row row;
    memset(&row, 0, sizeof row);
    row.session = s;
    row.sampling = &sp;
    row.history = hist;
    row.n_history = SP_PROMPT + n;
    row.n_prompt = SP_PROMPT;
    row.n_top_logprobs = -1;
    if (n == 0) {
      row.tokens = sp_prompt, row.n_tokens = SP_PROMPT;
    } else {
      row.tokens = &cur, row.n_tokens = 1, row.outputs = outs;
      row.n_draft = nd < SP_GEN - n - 1 ? nd : SP_GEN - n - 1;
    }
    sp.draw_index = (uint64_t)n;
    ok = q35_step(m, &row, 1, &err) == 0;
    CHECK(ok, "step at %d: %s", n, err.msg);
    int k = row.n_emitted > 0 ? row.n_emitted : 1;
    if (g_trim && !pass && row.n_emitted > 1 && g_trims++ % 3 == 0) {
      ok = q35_session_draft_keep(s, --k, &err) == 0;
      CHECK(ok, "draft keep %d: %s", k, err.msg);
    }
    for (int j = 0; ok && j < k; j++, n++) {
      const int use = row.n_emitted > 0 && row.outputs;
      const int32_t t = use ? row.outputs[j].token : row.token;
      const float l = use ? row.outputs[j].logprob : row.logprob;
      if (pass) ok = t == tok[n] && memcmp(&l, &lp[n], sizeof l) == 0;
      CHECK(ok, "after the restore, token %d: %d (%g), the first run %d (%g)", n, t, l, tok[n], lp[n]);
      tok[n] = t, lp[n] = l;
      hist[SP_PROMPT + n] = cur = t;
    }
    if (!pass) *drafted += row.n_drafted, accepted += k - 1;
    if (snap_at && !sn && n >= snap_at) {
      sn = q35_session_snapshot(s, &err);
      CHECK(sn != NULL, "snapshot: %s", err.msg);
      n_snap = n;
    }
  }
  CHECK(!snap_at || pass, "no restore ran");
  q35_snapshot_free(sn);
  q35_session_free(s);
  return accepted;
}

/* Speculative decoding through two stages (the first drafts with the MTP head; the later one
 * returns every position's hidden state and checkpoints and restores its own layers' state as the
 * first's): the tokens and logprobs of --draft 3 and of a drafting session with --draft 0 equal the
 * whole model's one token a step, greedy and seeded, and a snapshot restored mid-way repeats them. */
static void test_spec(const char *dir, int agree) {
  char path[512];
  snprintf(path, sizeof path, "%s/mtp.gguf", dir);
  q35_tiny_opts o = q35_tiny_default();
  o.n_layer = NL;
  o.interval = 2;
  o.n_embd = 128;
  o.n_vocab = 512;
  o.mtp = 1;
  /* agree: a head agreeing with the trunk on about 70% of tokens (drafts accepted, partly accepted
   * and rejected), whose trunk maps each token to the next whatever the state (so a stage state
   * left wrong shows only as positions out of step, checked in fk_compute); else random weights
   * (nearly every draft rejected: a rollback after the first token, and a stage whose state kept a
   * rejected draft changes the tokens) */
  o.mtp_agree = agree ? 0.7f : -1.0f;
  o.seed = 9;
  q35_err err;
  CHECK(q35_tiny_write(&o, path, &err) == 0, "%s", err.msg);
  q35_model *whole = load_range(path, 0, 0, &err);
  const int split = 3;
  q35_model *m0 = load_range(path, 0, split, &err), *m1 = load_range(path, split, NL, &err);
  CHECK(whole && m0 && m1, "%s", err.msg);
  if (whole && m0 && m1) {
    CHECK(m0->has_mtp && !m1->has_mtp && !m0->output.data, "the first stage binds the head only");
    static fake_next f;
    memset(&f, 0, sizeof f);
    f.ops = (q35_stage_next){.forward = fk_forward, .session = fk_session, .sample_next = fk_sample,
                             .snapshot = fk_snapshot, .n_micro = 0, .micro = fk_micro, .flight = fk_flight,
                             .ckpt = NULL, .n_stages = 2, .close = fk_close};
    f.m1 = m1;
    m0->next = &f.ops;
    q35_session_params ps = q35_session_default_params();
    ps.n_ctx = 64;
    ps.draft_max = 2;
    CHECK(q35_session_new(m0, &ps, &err) == NULL && strstr(err.msg, "not available"), "%s", err.msg);
    f.ops.ckpt = fk_ckpt;
    q35_context_draft_adapt(q35_model_context(m0), 0); /* n_draft drafts every step (not the measured policy's) */
    for (int kind = 0; kind < 2; kind++) {
      const float temp = kind ? 0.8f : 0.0f;
      int32_t rt[SP_GEN], gt[SP_GEN];
      float rl[SP_GEN], gl[SP_GEN];
      int drafted = 0;
      gen(whole, 0, 0, temp, 0, rt, rl, &drafted);
      for (int nd = 0; nd <= 3; nd += 3) {
        memset(gt, 0, sizeof gt);
        const int acc = gen(m0, 3, nd, temp, 15, gt, gl, &drafted);
        CHECK(memcmp(rt, gt, sizeof rt) == 0 && memcmp(rl, gl, sizeof rl) == 0,
              "two stages, temperature %g, --draft %d: tokens or logprobs differ from the whole model's", temp, nd);
        if (nd) CHECK((acc > 0 || !agree) && acc < drafted && f.restores > 0, "temperature %g: %d of %d drafts "
                      "accepted, %d restores on the later stage", temp, acc, drafted, f.restores);
        else CHECK(drafted == 0);
        if (!nd || !agree) continue;
        /* emitted drafts trimmed (q35_session_draft_keep), as the server does at a stop sequence */
        memset(gt, 0, sizeof gt);
        g_trim = 1, g_trims = 0;
        const int r0 = f.restores;
        gen(m0, 3, nd, temp, 0, gt, gl, &drafted);
        g_trim = 0;
        CHECK(g_trims > 3 && f.restores > r0, "temperature %g: %d steps emitted drafts", temp, g_trims);
        CHECK(memcmp(rt, gt, sizeof rt) == 0 && memcmp(rl, gl, sizeof rl) == 0,
              "two stages, temperature %g, --draft %d, drafts trimmed: tokens or logprobs differ", temp, nd);
      }
    }
    CHECK(f.n_sess == 0 && f.n_snaps == 0, "%d sessions, %d snapshots left on the later stage", f.n_sess, f.n_snaps);
    m0->next = NULL;
  }
  q35_model_free(whole);
  q35_model_free(m0);
  q35_model_free(m1);
  unlink(path);
}

int main(void) {
  char dir[] = "/tmp/q35_test_stages_XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  char path[512];
  snprintf(path, sizeof path, "%s/moe.gguf", dir);
  q35_tiny_opts o = q35_tiny_default();
  o.n_layer = NL;
  o.interval = 2; /* attention and DeltaNet layers in every stage of two */
  o.n_embd = 128;
  o.n_vocab = 512;
  o.type = Q35_TYPE_Q8_0;
  o.mtp = 1; /* only the first stage binds the MTP block */
  o.seed = 5;
  q35_err err;
  if (q35_tiny_write(&o, path, &err)) return fprintf(stderr, "FAIL q35_tiny_write: %s\n", err.msg), 1;
  q35_model *whole = load_range(path, 0, 0, &err);
  if (!whole) return fprintf(stderr, "FAIL load: %s\n", err.msg), 1;
  const int V = q35_model_n_vocab(whole), H = q35_model_n_embd(whole);
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 64;
  sp.kv_type = Q35_KV_F32;
  q35_session *ws = q35_session_new(whole, &sp, &err);
  float *ref = malloc(sizeof(float) * NT * V), *got = malloc(sizeof(float) * NT * V);
  CHECK(q35_session_eval(ws, toks, NT, 0, ref, 1, &err) == 0, "%s", err.msg);
  const size_t whole_bytes = q35_session_bytes(ws);

  const int splits[][5] = {{3, 0, 3, 6}, {4, 0, 2, 4, 6}, {3, 0, 5, 6}, {3, 0, 1, 6}};
  for (size_t t = 0; t < sizeof splits / sizeof splits[0]; t++)
    run_stages(path, splits[t] + 1, splits[t][0] - 1, ref, got, V, H, whole_bytes);

  /* a middle stage: its own tensors only, the others' data unmapped, misuse refused */
  q35_model *mid = load_range(path, 2, 4, &err);
  CHECK(mid != NULL, "%s", err.msg);
  if (mid) {
    CHECK(!mid->tok_embd.data && !mid->output.data && !mid->has_mtp && !mid->layers[0].attn_norm.data);
    CHECK(mid->n_attn_layers == 1 && mid->n_gdn_layers == 1, "%d attention, %d DeltaNet", mid->n_attn_layers,
          mid->n_gdn_layers);
    CHECK(unmapped(mid->gguf, "blk.0.ffn_down_exps.weight"), "blk.0 is still mapped");
    CHECK(unmapped(mid->gguf, "token_embd.weight"), "token_embd is still mapped");
    CHECK(!unmapped(mid->gguf, "blk.2.ffn_down_exps.weight"), "blk.2 is not mapped");
    q35_session *s = q35_session_new(mid, &sp, &err);
    float x[4 * 128] = {0};
    q35_fwd_row r = {s, toks, 2, 0, NULL, NULL, NULL, NULL};
    CHECK(q35_forward(mid, &mid->ctx->fwd, &r, 1, &err) != 0 && strstr(err.msg, "takes hidden states"), "%s",
          err.msg);
    r = (q35_fwd_row){s, NULL, 2, 1, got, NULL, x, NULL};
    CHECK(q35_forward(mid, &mid->ctx->fwd, &r, 1, &err) != 0 && strstr(err.msg, "has no output head"), "%s", err.msg);
    CHECK(q35_session_pos(s) == 0);
    r.x_out = x + 2 * 128;
    CHECK(q35_forward(mid, &mid->ctx->fwd, &r, 1, &err) == 0, "%s", err.msg);
    CHECK(q35_session_pos(s) == 2);
    q35_session_free(s);
    q35_model_free(mid);
  }
  q35_fwd_row r = {ws, NULL, 1, 0, NULL, NULL, got, NULL};
  CHECK(q35_forward(whole, &whole->ctx->fwd, &r, 1, &err) != 0 && strstr(err.msg, "takes tokens"), "%s", err.msg);
  CHECK(load_range(path, 4, 7, &err) == NULL && strstr(err.msg, "layer range [4, 7)"), "%s", err.msg);
  CHECK(load_range(path, 3, 3, &err) == NULL && strstr(err.msg, "not within"), "%s", err.msg);

  test_flight(path, whole);
  test_spec(dir, 1);
  test_spec(dir, 0);

  /* the same model as a split GGUF (shards of at most 7 tensors), and read into memory */
  char spath[512], sbase[512];
  snprintf(sbase, sizeof sbase, "%s/split.gguf", dir);
  uint32_t n_shards = 0;
  o.split = (gguf_split_opts){0, 7, &n_shards};
  if (q35_tiny_write(&o, sbase, &err)) return fprintf(stderr, "FAIL q35_tiny_write (split): %s\n", err.msg), 1;
  CHECK(n_shards > 4, "%u shards", n_shards);
  snprintf(spath, sizeof spath, "%s/split-00001-of-%05u.gguf", dir, n_shards);
  for (size_t t = 0; t < sizeof splits / sizeof splits[0]; t++)
    run_stages(spath, splits[t] + 1, splits[t][0] - 1, ref, got, V, H, whole_bytes);
  int empty = 0;
  for (int b = 0; b < NL; b += 2) empty += check_split_stage(spath, b, b + 2);
  CHECK(empty >= 3, "only %d (stage, shard) pairs with none of the stage's tensors", empty);
  g_no_mmap = 1;
  run_stages(spath, splits[1] + 1, splits[1][0] - 1, ref, got, V, H, whole_bytes);
  run_stages(path, splits[0] + 1, splits[0][0] - 1, ref, got, V, H, whole_bytes);
  check_split_stage(spath, 2, 4);
  g_no_mmap = 0;

  q35_session_free(ws);
  q35_model_free(whole);
  free(ref);
  free(got);
  unlink(path);
  for (uint32_t k = 0; k < n_shards; k++) {
    snprintf(spath, sizeof spath, "%s/split-%05u-of-%05u.gguf", dir, k + 1, n_shards);
    unlink(spath);
  }
  rmdir(dir);
  return check_done("test_stages");
}
