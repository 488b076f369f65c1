/*
 * api_common.c - what the Responses and Messages APIs share (see api.h): routing, the
 * conversation -> prompt step, the generation splitter, the streamed and non-streamed
 * response loops.
 *
 * The splitter: generated text goes through the chat module's reasoning / content / tool-call
 * split, incrementally (q35_chat_stream) for streams and on the whole text otherwise, so both
 * APIs see the same three kinds of pieces in the same order as chat completions would report
 * them. Tool calls get ids that are unique for the server's lifetime ("call_" + 64 random bits)
 * instead of the parser's per-response "call_0", "call_1".
 */
#define _GNU_SOURCE /* memmem */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "server/http.h"

#define API_POLL_MS 100       /* a waiting request looks at its client this often */
#define API_SSE_BLOCK 16384   /* bytes MHD asks the stream callback for at most */
#define API_EXACT_INT 9e15    /* below this magnitude every integer is exact in a double */

/* ---- small helpers ---- */

int api_bad(oai_error *e, const char *param, const char *fmt, ...) {
  e->status = 400;
  e->param = param;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

void api_id(char *out, size_t n, const char *prefix) {
  snprintf(out, n, "%s%016llx", prefix, (unsigned long long)q35_random_seed());
}

static int listed(const char *k, const char *const *list) {
  for (const char *const *a = list; a && *a; a++)
    if (!strcmp(k, *a)) return 1;
  return 0;
}

const char *api_unknown_key(const json_t *o, const char *const *allowed) {
  return api_unknown_key_null(o, allowed, NULL);
}

const char *api_unknown_key_null(const json_t *o, const char *const *allowed, const char *const *null_ok) {
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)o, k, v) {
    if (!listed(k, allowed) && !(json_is_null(v) && listed(k, null_ok))) return k;
  }
  return NULL;
}

int api_number(const json_t *o, const char *k, const char *param, double lo, double hi, int lo_open, double *out,
               oai_error *e) {
  const json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_number(v)) return api_bad(e, param, "'%s' must be a number", param);
  const double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    return api_bad(e, param, "'%s' is %g; it must be in %s%g, %g]", param, x, lo_open ? "(" : "[", lo, hi);
  *out = x;
  return 1;
}

int api_int(const json_t *o, const char *k, const char *param, long long lo, long long hi, long long *out,
            oai_error *e) {
  const json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return 0;
  long long x;
  if (json_is_integer(v)) x = (long long)json_integer_value(v);
  else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
           fabs(json_real_value(v)) < API_EXACT_INT)
    x = (long long)json_real_value(v);
  else return api_bad(e, param, "'%s' must be an integer", param);
  if (x < lo || x > hi) return api_bad(e, param, "'%s' is %lld; it must be in [%lld, %lld]", param, x, lo, hi);
  *out = x;
  return 1;
}

const char *api_session_header(struct MHD_Connection *c) {
  const char *sid = http_header(c, "session_id");
  return sid ? sid : http_header(c, "X-Session-Id");
}

int api_session(const char *sid, srv_job *j, oai_error *e) {
  if (!sid || !*sid) return 0;
  if (strlen(sid) > OAI_MAX_SESSION_ID)
    return api_bad(e, "session_id", "the session id is longer than %d bytes", OAI_MAX_SESSION_ID);
  j->session_id = strdup(sid);
  return j->session_id ? 0 : api_bad(e, NULL, "out of memory");
}

/* ---- the conversation -> the prompt ---- */

void api_conv_free(api_conv *v) {
  json_decref(v->messages);
  json_decref(v->tools);
  free(v->prefill);
  memset(v, 0, sizeof *v);
}

/* Ends with "<think>" + optional whitespace: the prompt opens a reasoning block. */
static int ends_in_think(const char *s, size_t n) {
  static const char open[] = "<think>";
  const size_t k = sizeof open - 1;
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
  return n >= k && !memcmp(s + n - k, open, k);
}

int api_conv_prompt(const oai_model *M, api_conv *v, srv_job *j, oai_error *e, const char *param) {
  q35_err err = {{0}};
  size_t len = 0;
  char *text = q35_chat_render(M->tmpl, v->messages, v->tools, 1, v->think, M->bos, M->eos, &len, &err);
  if (!text) return api_bad(e, param, "cannot render the conversation with the chat template: %s", err.msg);
  v->in_think = ends_in_think(text, len);
  if (v->prefill && *v->prefill) {
    const size_t pl = strlen(v->prefill);
    char *t2 = realloc(text, len + pl + 1);
    if (!t2) {
      free(text);
      return api_bad(e, NULL, "out of memory");
    }
    text = t2;
    memcpy(text + len, v->prefill, pl + 1);
    len += pl;
    if (strstr(v->prefill, "</think>")) v->in_think = 0;
  }
  const int rc = oai_tokenize(M, text, len, 1, &j->prompt, &j->n_prompt, e, param);
  free(text);
  if (rc) return -1;
  if (j->n_prompt < 1) return api_bad(e, param, "the prompt is empty");
  if (j->n_prompt >= M->n_ctx && !v->count_only) { /* Anthropic's wording ("prompt is too long"), OpenAI's code */
    api_bad(e, param, "prompt is too long: %d tokens > %d maximum (the context is %d tokens and at least one must "
            "be left to generate)", j->n_prompt, M->n_ctx - 1, M->n_ctx);
    e->code = "context_length_exceeded";
    return -1;
  }
  return 0;
}

/* ---- the generation splitter ---- */

int api_gen_init(api_gen *g, const api_conv *v, int stream) {
  memset(g, 0, sizeof *g);
  g->v = v;
  if (stream && !(g->cs = q35_chat_stream_new(v->in_think, v->parse_tools, v->tools))) return -1;
  return 0;
}

void api_gen_free(api_gen *g) {
  if (g->cs) q35_chat_stream_free(g->cs);
  q35_buf_free(&g->text);
  free(g->toks);
  memset(g, 0, sizeof *g);
}

/* Pass one parsed tool call on with a fresh id (unless the call limit is reached). */
static void call_out(api_gen *g, const json_t *call, api_piece_fn fn, void *cls) {
  if (g->v->max_calls > 0 && g->n_calls >= g->v->max_calls) return;
  json_t *c = json_deep_copy(call);
  if (!c) return;
  char id[40];
  api_id(id, sizeof id, "call_");
  json_object_set_new(c, "id", json_string(id));
  g->n_calls++;
  fn(cls, API_CALL, NULL, c);
  json_decref(c);
}

void api_gen_feed(api_gen *g, const srv_event *e, api_piece_fn fn, void *cls) {
  for (; e; e = e->next) {
    if (e->choice != 0) continue;
    if (e->has_token && !q35_grow((void **)&g->toks, &g->cap, g->n_toks + 1, sizeof *g->toks))
      g->toks[g->n_toks++] = e->token;
    if (e->text && e->len) q35_buf_add(&g->text, e->text, e->len);
    if (e->finish) {
      g->finish = e->finish;
      /* the end-of-turn token has no has_token; a stop string ends on a sampled token */
      g->by_stop_string = !strcmp(e->finish, "stop") && e->has_token;
    }
    if (!g->cs || !(e->text || e->finish)) continue;
    q35_chat_delta d = {0};
    q35_err err = {{0}};
    if (q35_chat_stream_feed(g->cs, e->text ? e->text : "", e->finish != NULL, &d, &err) == 0) {
      if (d.reasoning && *d.reasoning) fn(cls, API_REASONING, d.reasoning, NULL);
      if (d.content && *d.content) fn(cls, API_TEXT, d.content, NULL);
      for (size_t i = 0; d.tool_calls && i < json_array_size(d.tool_calls); i++)
        call_out(g, json_array_get(d.tool_calls, i), fn, cls);
    } else if (e->text && e->len) { /* a malformed tool call: the text passes as text */
      fn(cls, API_TEXT, e->text, NULL);
    }
    q35_chat_delta_free(&d);
  }
}

void api_gen_final(api_gen *g, api_piece_fn fn, void *cls) {
  char *reasoning = NULL, *content = NULL;
  q35_chat_split_think(g->text.p ? g->text.p : "", g->v->in_think, &reasoning, &content);
  json_t *calls = NULL;
  if (g->v->parse_tools && content) {
    char *rest = NULL;
    q35_err err = {{0}};
    if (q35_chat_parse_tool_calls(content, g->v->tools, &rest, &calls, &err) == 0) {
      free(content);
      content = rest;
    } else {
      calls = NULL; /* malformed: everything stays text */
    }
  }
  if (reasoning && *reasoning) fn(cls, API_REASONING, reasoning, NULL);
  if (content && *content) fn(cls, API_TEXT, content, NULL);
  for (size_t i = 0; calls && i < json_array_size(calls); i++) call_out(g, json_array_get(calls, i), fn, cls);
  json_decref(calls);
  free(reasoning);
  free(content);
}

int api_gen_stop_index(const api_gen *g, const oai_model *M, const srv_job *j) {
  if (!g->by_stop_string || j->n_stop == 0) return -1;
  /* the whole text the tokens make, stop string included: the earliest match is the one that
   * ended it (the scheduler cuts at the earliest match too) */
  char *all = NULL;
  size_t n = 0;
  q35_err err = {{0}};
  if (q35_detokenize(M->tok, g->toks, g->n_toks, Q35_DETOK_LOSSY, &all, &n, &err)) return -1;
  int best = -1;
  size_t at = n + 1;
  for (int k = 0; k < j->n_stop; k++) {
    const char *m = memmem(all, n, j->stop[k], strlen(j->stop[k]));
    if (m && (size_t)(m - all) < at) {
      at = (size_t)(m - all);
      best = k;
    }
  }
  free(all);
  return best;
}

/* ---- non-streamed: waiting for the job ---- */

static void no_piece(void *cls, api_piece_kind kind, const char *text, const json_t *call) {
  (void)cls, (void)kind, (void)text, (void)call;
}

int api_wait(srv_sched *s, struct MHD_Connection *c, srv_job *j, api_gen *g) {
  for (;;) {
    int done = 0;
    srv_event *ev = srv_job_take(s, j, API_POLL_MS, &done);
    api_gen_feed(g, ev, no_piece, NULL);
    srv_events_free(ev);
    if (done) return 0;
    if (!ev && http_peer_gone(c)) {
      srv_job_cancel(s, j);
      return -1;
    }
  }
}

/* ---- streamed responses ---- */

void api_sse(q35_buf *out, const char *name, json_t *obj) {
  char *s = json_dumps(obj, JSON_COMPACT);
  json_decref(obj);
  if (!s) return;
  if (name) {
    q35_buf_str(out, "event: ");
    q35_buf_str(out, name);
    q35_buf_str(out, "\n");
  }
  q35_buf_str(out, "data: ");
  q35_buf_str(out, s);
  q35_buf_str(out, "\n\n");
  free(s);
}

typedef struct api_stream_st {
  api_ctx *A;
  srv_job *j;
  const api_stream_ops *ops;
  void *cls;
  struct MHD_Connection *c;
  q35_buf out;       /* produced, not yet handed to MHD, from off */
  size_t off;
  int ended;
} api_stream_st;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  api_stream_st *st = cls;
  for (;;) {
    if (st->off < st->out.n) {
      size_t n = st->out.n - st->off;
      if (n > max) n = max;
      memcpy(buf, st->out.p + st->off, n);
      st->off += n;
      if (st->off == st->out.n) st->off = st->out.n = 0;
      return (ssize_t)n;
    }
    if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
    int done = 0;
    srv_event *e = srv_job_take(st->A->sched, st->j, API_POLL_MS, &done);
    if ((e || done) && st->A->timeout > 0) http_timeout_restart(st->c, (unsigned)st->A->timeout);
    if (e) st->ops->on_events(st->cls, e, &st->out);
    srv_events_free(e);
    if (done) {
      st->ops->on_end(st->cls, &st->out);
      st->ended = 1;
      http_log_tokens(st->j->n_prompt, st->j->completion_tokens); /* the -v request log */
    } else if (!e && http_peer_gone(st->c)) {
      srv_job_cancel(st->A->sched, st->j);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

static void stream_free(void *cls) {
  api_stream_st *st = cls;
  srv_job_cancel(st->A->sched, st->j); /* a no-op once it has finished */
  st->ops->release(st->cls);
  srv_job_release(st->A->sched, st->j);
  q35_buf_free(&st->out);
  free(st);
}

enum MHD_Result api_stream(api_ctx *A, struct MHD_Connection *c, srv_job *j, const api_stream_ops *ops, void *cls) {
  api_stream_st *st = calloc(1, sizeof *st);
  struct MHD_Response *resp = NULL;
  if (st) {
    *st = (api_stream_st){.A = A, .j = j, .ops = ops, .cls = cls, .c = c};
    ops->on_start(cls, &st->out);
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, API_SSE_BLOCK, stream_read, st, stream_free);
  }
  if (!resp) {
    if (st) q35_buf_free(&st->out);
    free(st);
    ops->release(cls);
    srv_job_cancel(A->sched, j);
    srv_job_release(A->sched, j);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "text/event-stream");
  MHD_add_response_header(resp, "Cache-Control", "no-cache");
  http_add_cors(c, resp);
  enum MHD_Result rc = MHD_queue_response(c, 200, resp);
  http_log_status(200, NULL);
  MHD_destroy_response(resp);
  return rc;
}

/* ---- routing ---- */

int api_known_path(const char *path) {
  return !strcmp(path, "/responses") || !strncmp(path, "/responses/", 11) || !strcmp(path, "/messages") ||
         !strcmp(path, "/messages/count_tokens");
}

int api_handle(api_ctx *A, struct MHD_Connection *c, const char *method, const char *path, const q35_buf *raw,
               enum MHD_Result *ret) {
  if (!api_known_path(path)) return 0;
  const int anthropic = !strncmp(path, "/messages", 9);
  const int post = !strcmp(method, "POST");
  if (!strncmp(path, "/responses/", 11) && strcmp(path, "/responses/input_tokens")) {
    *ret = api_response_get(A, c, method, path + 11);
    return 1;
  }
  if (!post) {
    *ret = anthropic ? api_anthropic_error(c, 405, "use POST /v1%s", path)
                     : http_send_error(c, 405, NULL, "use POST /v1%s", path);
    return 1;
  }
  json_error_t je;
  json_t *body = json_loadb(raw->p ? raw->p : "", raw->n, 0, &je);
  if (!json_is_object(body)) {
    if (body) snprintf(je.text, sizeof je.text, "%s", "the request body must be a JSON object");
    *ret = anthropic ? api_anthropic_error(c, 400, "malformed JSON body: %s", je.text)
                     : http_send_error(c, 400, NULL, "malformed JSON body: %s", je.text);
    json_decref(body);
    return 1;
  }
  const int count = !strcmp(path, "/messages/count_tokens") || !strcmp(path, "/responses/input_tokens");
  if (!count && A->timeout > 0) http_timeout_set(c, 0u); /* no client timeout while computing */
  *ret = anthropic ? api_messages(A, c, body, count) : api_responses(A, c, body, count);
  if (!count && A->timeout > 0) http_timeout_set(c, (unsigned)A->timeout);
  json_decref(body);
  return 1;
}
