/*
 * server.c - HTTP front end of q35 serve (see server.h): routing, request validation,
 * OpenAI-shaped responses and server-sent events.
 *
 * Threads: libmicrohttpd runs one thread per connection. A completion request is parsed,
 * rendered and tokenized in its connection thread, submitted to the scheduler, and then
 *  - non-streamed: the connection thread waits for the job's events, checking every 100 ms
 *    whether the client is still there (a gone client cancels the job);
 *  - streamed: the response callback blocks until the next events arrive and returns them as
 *    SSE chunks; a client that disconnects makes MHD free the response, which cancels the
 *    job (and the callback also notices a closed socket while waiting).
 * Event processing (logprob entries, reasoning/content split, tool calls) happens in the
 * connection thread, so the scheduler thread only samples and detokenizes.
 */
#define _GNU_SOURCE
#include "server/server.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "text/chat.h"
#include "format/gguf.h"
#include "server/sched.h"
#include "text/tokenizer.h"
#include "base/util.h"

typedef struct srv {
  q35_server_opts o;
  struct MHD_Daemon *d;
  atomic_int ready;
  q35_model *model;
  q35_tokenizer *tok;
  srv_sched *sched;
  char *tmpl, *bos, *eos;
  char model_id[256];
  char model_stem[256];
  long created;
} srv;

/* ---- small growable buffer ---- */
typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}
static int sb_str(sbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }

/* ---- responses ---- */

static enum MHD_Result send_buf(struct MHD_Connection *c, unsigned status, const char *type, char *body,
                                size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result rc = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (!s) return MHD_NO;
  return send_buf(c, status, "application/json", s, strlen(s));
}

static json_t *error_obj(unsigned status, const char *msg, const char *param) {
  const char *type = status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  const char *code = status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_exceeded"
                     : status == 503 ? "unavailable"
                     : status == 404 ? "not_found"
                     : status == 409 ? "conflict"
                     : status >= 500 ? "internal_error"
                                     : "invalid_value";
  return json_pack("{s:{s:s,s:s,s:s?,s:s}}", "error", "message", msg, "type", type, "param", param, "code", code);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt,
                                  ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt,
                                  ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return send_json(c, status, error_obj(status, msg, param));
}

/* ---- request validation ---- */

typedef struct perr {
  unsigned status;
  const char *param;
  char msg[600];
} perr;

static int bad(perr *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(perr *e, const char *param, const char *fmt, ...) {
  e->status = 400;
  e->param = param;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

/* 1: present, 0: absent or null, -1: wrong type / out of range (e filled) */
static int get_number(const json_t *b, const char *k, double lo, double hi, int lo_open, double *out, perr *e) {
  const json_t *v = json_object_get(b, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_number(v)) return bad(e, k, "'%s' must be a number", k);
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    return bad(e, k, "'%s' is %g; it must be in %s%g, %g]", k, x, lo_open ? "(" : "[", lo, hi);
  *out = x;
  return 1;
}

static int get_int(const json_t *b, const char *k, int64_t lo, int64_t hi, int64_t *out, perr *e) {
  const json_t *v = json_object_get(b, k);
  if (!v || json_is_null(v)) return 0;
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
    x = (int64_t)json_real_value(v);
  } else {
    return bad(e, k, "'%s' must be an integer", k);
  }
  if (x < lo || x > hi) return bad(e, k, "'%s' is %lld; it must be in [%lld, %lld]", k, (long long)x, (long long)lo,
                                   (long long)hi);
  *out = x;
  return 1;
}

static int get_bool(const json_t *b, const char *k, int *out, perr *e) {
  const json_t *v = json_object_get(b, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_boolean(v)) return bad(e, k, "'%s' must be a boolean", k);
  *out = json_is_true(v);
  return 1;
}

/* A parsed completion request (chat or text). */
typedef struct creq {
  int chat;
  int stream, include_usage;
  int logprobs;         /* chat: logprobs true; completions: logprobs given */
  int top_logprobs;
  json_t *tools;        /* borrowed from the body (or NULL) */
  int parse_tools;
  int in_think;
  uint64_t seed;
  char id[64];
  long created;
  srv_job *job;
} creq;

static const char *hdr(struct MHD_Connection *c, const char *name) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* Ends with "<think>" + optional whitespace: the prompt opens a reasoning block. */
static int ends_in_think(const char *s, size_t n) {
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
  return n >= 7 && !memcmp(s + n - 7, "<think>", 7);
}

static int tokenize_text(srv *S, const char *text, size_t len, int add_bos, int32_t **ids, int32_t *n, perr *e,
                         const char *param) {
  q35_err err = {{0}};
  int32_t *t = NULL, nt = 0;
  if (q35_tokenize(S->tok, text, len, &t, &nt, &err)) return bad(e, param, "%s: %s", param, err.msg);
  const int32_t bos = q35_tokenizer_bos(S->tok);
  if (add_bos && q35_tokenizer_add_bos(S->tok) && bos >= 0) {
    int32_t *u = malloc(sizeof(int32_t) * (size_t)(nt + 1));
    if (!u) {
      free(t);
      return bad(e, param, "out of memory");
    }
    u[0] = bos;
    memcpy(u + 1, t, sizeof(int32_t) * (size_t)nt);
    free(t);
    t = u;
    nt++;
  }
  *ids = t;
  *n = nt;
  return 0;
}

static int parse_request(srv *S, const json_t *b, int chat, struct MHD_Connection *c, creq *r, perr *e) {
  memset(r, 0, sizeof *r);
  r->chat = chat;
  srv_job *j = srv_job_new();
  if (!j) return bad(e, NULL, "out of memory");
  r->job = j;
  double x;
  int64_t k;
  int rc;
  const json_t *v = json_object_get(b, "model");
  if (v && !json_is_null(v)) {
    if (!json_is_string(v)) return bad(e, "model", "'model' must be a string");
    const char *m = json_string_value(v);
    if (strcmp(m, S->model_id) && strcmp(m, S->model_stem))
      return bad(e, "model", "model '%s' is not served here; this server has '%s'", m, S->model_id);
  }
  if ((rc = get_number(b, "temperature", 0, 2, 0, &x, e)) < 0) return -1;
  if (rc) j->sp.temperature = (float)x;
  if ((rc = get_number(b, "top_p", 0, 1, 1, &x, e)) < 0) return -1;
  if (rc) j->sp.top_p = (float)x;
  if ((rc = get_int(b, "top_k", -1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) j->sp.top_k = k;
  if ((rc = get_number(b, "min_p", 0, 1, 0, &x, e)) < 0) return -1;
  if (rc) j->sp.min_p = (float)x;
  if ((rc = get_number(b, "presence_penalty", -2, 2, 0, &x, e)) < 0) return -1;
  if (rc) j->sp.presence_penalty = (float)x;
  if ((rc = get_number(b, "frequency_penalty", -2, 2, 0, &x, e)) < 0) return -1;
  if (rc) j->sp.frequency_penalty = (float)x;
  if ((rc = get_number(b, "repetition_penalty", 0, 2, 1, &x, e)) < 0) return -1;
  if (rc) j->sp.repetition_penalty = (float)x;
  if ((rc = get_int(b, "seed", 0, INT64_MAX, &k, e)) < 0) return -1;
  r->seed = rc ? (uint64_t)k : q35_random_seed();
  j->sp.seed = r->seed;
  if ((rc = get_int(b, "n", 1, 8, &k, e)) < 0) return -1;
  if (rc) j->n = (int)k;
  if ((rc = get_int(b, "max_tokens", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) j->max_tokens = (int32_t)k;
  if ((rc = get_int(b, "max_completion_tokens", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) j->max_tokens = (int32_t)k;
  /* stop */
  v = json_object_get(b, "stop");
  if (v && !json_is_null(v)) {
    if (json_is_string(v)) {
      if (!json_string_length(v)) return bad(e, "stop", "'stop' strings must not be empty");
      j->stop[j->n_stop++] = strdup(json_string_value(v));
    } else if (json_is_array(v)) {
      if (json_array_size(v) > SRV_MAX_STOP) return bad(e, "stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
      for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) return bad(e, "stop", "'stop[%zu]' must be a string", i);
        if (!json_string_length(s)) return bad(e, "stop", "'stop' strings must not be empty");
        j->stop[j->n_stop++] = strdup(json_string_value(s));
      }
    } else {
      return bad(e, "stop", "'stop' must be a string or an array of strings");
    }
  }
  /* logprobs */
  j->n_top_logprobs = -1;
  if (chat) {
    int lp = 0;
    if (get_bool(b, "logprobs", &lp, e) < 0) return -1;
    if ((rc = get_int(b, "top_logprobs", 0, Q35_MAX_TOP_LOGPROBS, &k, e)) < 0) return -1;
    r->logprobs = lp;
    r->top_logprobs = rc ? (int)k : 0;
  } else {
    if ((rc = get_int(b, "logprobs", 0, Q35_MAX_TOP_LOGPROBS, &k, e)) < 0) return -1;
    r->logprobs = rc;
    r->top_logprobs = rc ? (int)k : 0;
  }
  if (r->logprobs) j->n_top_logprobs = r->top_logprobs;
  /* streaming */
  if (get_bool(b, "stream", &r->stream, e) < 0) return -1;
  v = json_object_get(b, "stream_options");
  if (v && !json_is_null(v)) {
    if (!json_is_object(v)) return bad(e, "stream_options", "'stream_options' must be an object");
    const json_t *iu = json_object_get(v, "include_usage");
    if (iu && !json_is_null(iu) && !json_is_boolean(iu))
      return bad(e, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
    r->include_usage = iu && json_is_true(iu);
  }
  /* session */
  const char *sid = hdr(c, "session_id");
  if (!sid) sid = hdr(c, "X-Session-Id");
  if (sid && *sid) {
    if (strlen(sid) > 128) return bad(e, "session_id", "the session id is longer than 128 bytes");
    j->session_id = strdup(sid);
  }
  /* the prompt */
  if (chat) {
    const json_t *msgs = json_object_get(b, "messages");
    if (!msgs) return bad(e, "messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
      return bad(e, "messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
      const json_t *m = json_array_get(msgs, i);
      if (!json_is_object(m)) return bad(e, "messages", "'messages[%zu]' must be an object", i);
      const json_t *role = json_object_get(m, "role");
      if (!json_is_string(role)) return bad(e, "messages", "'messages[%zu].role' must be a string", i);
      const char *rs = json_string_value(role);
      if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool") &&
          strcmp(rs, "developer"))
        return bad(e, "messages", "'messages[%zu].role' is '%s'; it must be system, developer, user, assistant or tool",
                   i, rs);
      const json_t *ct = json_object_get(m, "content");
      if (ct && !json_is_null(ct) && !json_is_string(ct) && !json_is_array(ct))
        return bad(e, "messages", "'messages[%zu].content' must be a string, an array of parts or null", i);
    }
    v = json_object_get(b, "tools");
    if (v && !json_is_null(v)) {
      if (!json_is_array(v)) return bad(e, "tools", "'tools' must be an array");
      for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *t = json_array_get(v, i);
        const json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
          return bad(e, "tools", "'tools[%zu].function.name' must be a string", i);
      }
      if (json_array_size(v)) r->tools = (json_t *)v;
    }
    r->parse_tools = r->tools != NULL;
    v = json_object_get(b, "tool_choice");
    if (json_is_string(v) && !strcmp(json_string_value(v), "none")) r->parse_tools = 0;
    int think = S->o.no_think ? 0 : -1;
    v = json_object_get(b, "chat_template_kwargs");
    if (v && !json_is_null(v)) {
      if (!json_is_object(v)) return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
      const json_t *et = json_object_get(v, "enable_thinking");
      if (et && !json_is_null(et)) {
        if (!json_is_boolean(et))
          return bad(e, "chat_template_kwargs.enable_thinking", "'chat_template_kwargs.enable_thinking' must be a boolean");
        think = json_is_true(et);
      }
    }
    q35_err err = {{0}};
    size_t len = 0;
    char *text = q35_chat_render(S->tmpl, msgs, r->tools, 1, think, S->bos, S->eos, &len, &err);
    if (!text) return bad(e, "messages", "cannot render the messages with the chat template: %s", err.msg);
    r->in_think = ends_in_think(text, len);
    rc = tokenize_text(S, text, len, 1, &j->prompt, &j->n_prompt, e, "messages");
    free(text);
    if (rc) return -1;
  } else {
    const json_t *p = json_object_get(b, "prompt");
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
      if (tokenize_text(S, json_string_value(p), json_string_length(p), 1, &j->prompt, &j->n_prompt, e, "prompt"))
        return -1;
    } else if (json_is_array(p) && json_array_size(p) > 0) {
      const size_t n = json_array_size(p);
      const int32_t V = q35_tokenizer_n_vocab(S->tok);
      j->prompt = malloc(sizeof(int32_t) * n);
      if (!j->prompt) return bad(e, "prompt", "out of memory");
      for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(p, i);
        if (!json_is_integer(t))
          return bad(e, "prompt", "'prompt' must be a string, an array of token ids or an array with one string");
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= V) return bad(e, "prompt", "'prompt[%zu]' token id %lld is out of range [0, %d)", i,
                                          (long long)id, V);
        j->prompt[i] = (int32_t)id;
      }
      j->n_prompt = (int32_t)n;
    } else {
      return bad(e, "prompt", "'prompt' must be a string, an array of token ids or an array with one string");
    }
  }
  if (j->n_prompt < 1) return bad(e, chat ? "messages" : "prompt", "the prompt is empty");
  if (j->n_prompt >= S->o.n_ctx)
    return bad(e, chat ? "messages" : "prompt", "the prompt is %d tokens, longer than the context of %d tokens",
               j->n_prompt, S->o.n_ctx);
  snprintf(r->id, sizeof r->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)q35_random_seed());
  r->created = (long)time(NULL);
  return 0;
}

/* ---- turning events into OpenAI objects ---- */

typedef struct choice_out {
  sbuf text;
  json_t *lp;             /* chat: content array; completions: the logprobs object */
  const char *finish;
  q35_chat_stream *cs;
  int sent_role, n_tool_calls;
  size_t text_off;
} choice_out;

static json_t *bytes_array(const char *s, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
  return a;
}

static double finite_lp(float x) { return isfinite(x) ? x : -9999.0; }

/* The token's text as a JSON-safe string (its raw bytes may be a partial character). */
static json_t *token_str(srv *S, int32_t id, json_t **bytes) {
  size_t n = 0;
  const char *raw = q35_token_bytes(S->tok, id, &n);
  if (!raw) n = 0;
  size_t ln = 0;
  char *s = q35_utf8_lossy(raw ? raw : "", n, &ln);
  json_t *js = json_stringn(s ? s : "", s ? ln : 0);
  free(s);
  if (bytes) *bytes = bytes_array(raw ? raw : "", n);
  return js;
}

/* Log-probability entry (chat form) for one event. */
static json_t *chat_lp_entry(srv *S, const srv_event *e) {
  json_t *bytes = NULL;
  json_t *tok = token_str(S, e->token, &bytes);
  json_t *top = json_array();
  for (int i = 0; i < e->n_top; i++) {
    json_t *b2 = NULL;
    json_t *t2 = token_str(S, e->top_ids[i], &b2);
    json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", t2, "logprob", finite_lp(e->top_logprobs[i]),
                                         "bytes", b2));
  }
  return json_pack("{s:o,s:f,s:o,s:o}", "token", tok, "logprob", finite_lp(e->logprob), "bytes", bytes,
                   "top_logprobs", top);
}

/* Append the event's entries to a completions-style logprobs object. */
static void text_lp_add(srv *S, json_t *lp, const srv_event *e, size_t offset) {
  json_array_append_new(json_object_get(lp, "tokens"), token_str(S, e->token, NULL));
  json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(finite_lp(e->logprob)));
  json_t *top = json_object();
  for (int i = 0; i < e->n_top; i++) {
    json_t *t = token_str(S, e->top_ids[i], NULL);
    json_object_set_new(top, json_string_value(t), json_real(finite_lp(e->top_logprobs[i])));
    json_decref(t);
  }
  json_array_append_new(json_object_get(lp, "top_logprobs"), top);
  json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

static json_t *text_lp_new(void) {
  return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static json_t *usage_obj(const srv_job *j) {
  return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)j->n_prompt, "completion_tokens",
                   (json_int_t)j->completion_tokens, "total_tokens", (json_int_t)(j->n_prompt + j->completion_tokens),
                   "prompt_tokens_details", "cached_tokens", (json_int_t)j->cached_tokens);
}

static json_t *chunk_base(srv *S, const creq *r) {
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:I}", "id", r->id, "object",
                   r->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)r->created, "model",
                   S->model_id, "system_fingerprint", "q35", "seed", (json_int_t)r->seed);
}

static void sse_add(sbuf *out, json_t *obj) {
  char *s = json_dumps(obj, JSON_COMPACT);
  json_decref(obj);
  if (!s) return;
  sb_str(out, "data: ");
  sb_str(out, s);
  sb_str(out, "\n\n");
  free(s);
}

/* Process events. Streamed: append SSE chunks to out. Non-streamed: accumulate in ch. */
static void process_events(srv *S, const creq *r, choice_out *ch, srv_event *e, sbuf *out) {
  for (; e; e = e->next) {
    if (e->choice < 0 || e->choice >= r->job->n) continue;
    choice_out *c = &ch[e->choice];
    json_t *lp_entry = NULL;
    if (e->has_token && r->logprobs) {
      if (r->chat) {
        lp_entry = chat_lp_entry(S, e);
      } else {
        if (!c->lp) c->lp = text_lp_new();
        if (!out) text_lp_add(S, c->lp, e, c->text_off);
        else {
          lp_entry = text_lp_new();
          text_lp_add(S, lp_entry, e, c->text_off);
        }
      }
    }
    if (e->text) c->text_off += e->len;
    if (e->finish) c->finish = e->finish;
    if (!out) { /* non-streamed */
      if (e->text) sb_add(&c->text, e->text, e->len);
      if (lp_entry) {
        if (!c->lp) c->lp = json_array();
        json_array_append_new(c->lp, lp_entry);
      }
      continue;
    }
    if (!r->chat) {
      if ((e->text && e->len) || lp_entry || e->finish) {
        json_t *o = chunk_base(S, r);
        json_object_set_new(o, "choices",
                            json_pack("[{s:s%,s:I,s:o,s:s?}]", "text", e->text ? e->text : "", e->text ? e->len : 0,
                                      "index", (json_int_t)e->choice, "logprobs", lp_entry ? lp_entry : json_null(),
                                      "finish_reason", e->finish));
        sse_add(out, o);
      }
      continue;
    }
    q35_chat_delta d = {0};
    q35_err err = {{0}};
    json_t *delta = json_object();
    if (!c->sent_role) {
      json_object_set_new(delta, "role", json_string("assistant"));
      json_object_set_new(delta, "content", json_string(""));
      c->sent_role = 1;
    }
    if (c->cs && (e->text || e->finish)) {
      char *piece = e->text ? e->text : "";
      if (q35_chat_stream_feed(c->cs, piece, e->finish != NULL, &d, &err) == 0) {
        if (d.reasoning && *d.reasoning) json_object_set_new(delta, "reasoning_content", json_string(d.reasoning));
        if (d.content && *d.content) json_object_set_new(delta, "content", json_string(d.content));
        if (d.tool_calls && json_array_size(d.tool_calls)) {
          json_t *tc = json_array();
          for (size_t i = 0; i < json_array_size(d.tool_calls); i++) {
            json_t *t = json_deep_copy(json_array_get(d.tool_calls, i));
            json_object_set_new(t, "index", json_integer(c->n_tool_calls++));
            json_array_append_new(tc, t);
          }
          json_object_set_new(delta, "tool_calls", tc);
        }
      } else if (e->text) { /* a malformed tool call: pass the text through as content */
        json_object_set_new(delta, "content", json_string(piece));
      }
      q35_chat_delta_free(&d);
    }
    const char *finish = e->finish;
    if (finish && !strcmp(finish, "stop") && c->n_tool_calls) finish = "tool_calls";
    if (json_object_size(delta) || lp_entry || finish) {
      json_t *o = chunk_base(S, r);
      json_t *lp = lp_entry ? json_pack("{s:[o]}", "content", lp_entry) : json_null();
      json_object_set_new(o, "choices", json_pack("[{s:I,s:o,s:o,s:s?}]", "index", (json_int_t)e->choice, "delta",
                                                  delta, "logprobs", lp, "finish_reason", finish));
      sse_add(out, o);
    } else {
      json_decref(delta);
    }
  }
}

static choice_out *choices_new(const creq *r) {
  choice_out *ch = calloc((size_t)r->job->n, sizeof *ch);
  if (!ch) return NULL;
  if (r->chat && r->stream)
    for (int i = 0; i < r->job->n; i++) ch[i].cs = q35_chat_stream_new(r->in_think, r->parse_tools, r->tools);
  return ch;
}

static void choices_free(choice_out *ch, int n) {
  if (!ch) return;
  for (int i = 0; i < n; i++) {
    free(ch[i].text.p);
    json_decref(ch[i].lp);
    if (ch[i].cs) q35_chat_stream_free(ch[i].cs);
  }
  free(ch);
}

/* The complete (non-streamed) response body. */
static json_t *final_response(srv *S, const creq *r, choice_out *ch) {
  json_t *choices = json_array();
  for (int i = 0; i < r->job->n; i++) {
    choice_out *c = &ch[i];
    const char *text = c->text.p ? c->text.p : "";
    const char *finish = c->finish ? c->finish : "stop";
    if (!r->chat) {
      json_array_append_new(choices, json_pack("{s:s,s:I,s:o,s:s}", "text", text, "index", (json_int_t)i, "logprobs",
                                               c->lp ? json_incref(c->lp) : json_null(), "finish_reason", finish));
      continue;
    }
    char *reasoning = NULL, *content = NULL;
    q35_chat_split_think(text, r->in_think, &reasoning, &content);
    json_t *calls = NULL;
    if (r->parse_tools && content) {
      char *rest = NULL;
      q35_err err = {{0}};
      if (q35_chat_parse_tool_calls(content, r->tools, &rest, &calls, &err) == 0) {
        free(content);
        content = rest;
      } else {
        calls = NULL;
      }
    }
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    const int has_calls = calls && json_array_size(calls) > 0;
    if (has_calls && (!content || !*content)) json_object_set_new(msg, "content", json_null());
    else json_object_set_new(msg, "content", json_string(content ? content : ""));
    if (reasoning && *reasoning) json_object_set_new(msg, "reasoning_content", json_string(reasoning));
    if (has_calls) {
      json_object_set(msg, "tool_calls", calls);
      if (!strcmp(finish, "stop")) finish = "tool_calls";
    }
    json_decref(calls);
    free(reasoning);
    free(content);
    json_t *lp = c->lp ? json_pack("{s:O}", "content", c->lp) : json_null();
    json_array_append_new(choices, json_pack("{s:I,s:o,s:o,s:s}", "index", (json_int_t)i, "message", msg, "logprobs",
                                             lp, "finish_reason", finish));
  }
  json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:I,s:o,s:o}", "id", r->id, "object",
                        r->chat ? "chat.completion" : "text_completion", "created", (json_int_t)r->created, "model",
                        S->model_id, "system_fingerprint", "q35", "seed", (json_int_t)r->seed, "choices", choices,
                        "usage", usage_obj(r->job));
  return o;
}

/* ---- client liveness ---- */

static int peer_gone(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 0;
  struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
  if (p.revents & POLLIN) {
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return 0;
}

/* ---- streaming ---- */

typedef struct stream {
  srv *S;
  creq r;
  choice_out *ch;
  struct MHD_Connection *c;
  sbuf out;
  size_t off;
  int ended, error;
} stream;

static void stream_finish(stream *st) {
  srv_job *j = st->r.job;
  if (j->failed) {
    json_t *err = error_obj((unsigned)j->status, j->errmsg, NULL);
    sse_add(&st->out, err);
    st->error = 1;
  } else {
    if (st->r.include_usage) {
      json_t *o = chunk_base(st->S, &st->r);
      json_object_set_new(o, "choices", json_array());
      json_object_set_new(o, "usage", usage_obj(j));
      sse_add(&st->out, o);
    }
    sb_str(&st->out, "data: [DONE]\n\n");
  }
  st->ended = 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream *st = cls;
  for (;;) {
    if (st->off < st->out.len) {
      size_t n = st->out.len - st->off;
      if (n > max) n = max;
      memcpy(buf, st->out.p + st->off, n);
      st->off += n;
      if (st->off == st->out.len) st->off = st->out.len = 0;
      return (ssize_t)n;
    }
    if (st->ended) return st->error ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    int done = 0;
    srv_event *e = srv_job_take(st->S->sched, st->r.job, 100, &done);
    if ((e || done) && st->S->o.timeout > 0) { /* restart the inactivity clock: waiting for tokens is not stalling */
      MHD_set_connection_option(st->c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
      MHD_set_connection_option(st->c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)st->S->o.timeout);
    }
    process_events(st->S, &st->r, st->ch, e, &st->out);
    srv_events_free(e);
    if (done) stream_finish(st);
    else if (!e && peer_gone(st->c)) {
      srv_job_cancel(st->S->sched, st->r.job);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

static void stream_free(void *cls) {
  stream *st = cls;
  srv_job_cancel(st->S->sched, st->r.job); /* no-op when it has finished */
  choices_free(st->ch, st->r.job->n);
  srv_job_release(st->S->sched, st->r.job);
  free(st->out.p);
  free(st);
}

/* ---- endpoints ---- */

static enum MHD_Result do_completion(srv *S, struct MHD_Connection *c, const json_t *body, int chat) {
  creq r;
  perr e = {0};
  if (parse_request(S, body, chat, c, &r, &e)) {
    if (r.job) srv_job_release(S->sched, r.job);
    return send_error(c, e.status ? e.status : 400, e.param, "%s", e.msg);
  }
  char msg[512];
  int st = srv_sched_submit(S->sched, r.job, msg, sizeof msg);
  if (st) {
    srv_job_release(S->sched, r.job);
    return send_error(c, (unsigned)st, NULL, "%s", msg);
  }
  choice_out *ch = choices_new(&r);
  if (!ch) {
    srv_job_cancel(S->sched, r.job);
    srv_job_release(S->sched, r.job);
    return send_error(c, 503, NULL, "out of memory");
  }
  if (r.stream) {
    stream *sm = calloc(1, sizeof *sm);
    struct MHD_Response *resp = NULL;
    if (sm) {
      sm->S = S;
      sm->r = r;
      sm->ch = ch;
      sm->c = c;
      resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sm, stream_free);
    }
    if (!resp) {
      free(sm);
      choices_free(ch, r.job->n);
      srv_job_cancel(S->sched, r.job);
      srv_job_release(S->sched, r.job);
      return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return rc;
  }
  for (;;) {
    int done = 0;
    srv_event *ev = srv_job_take(S->sched, r.job, 100, &done);
    process_events(S, &r, ch, ev, NULL);
    srv_events_free(ev);
    if (done) break;
    if (!ev && peer_gone(c)) {
      srv_job_cancel(S->sched, r.job);
      choices_free(ch, r.job->n);
      srv_job_release(S->sched, r.job);
      return MHD_NO;
    }
  }
  enum MHD_Result rc;
  if (r.job->failed) rc = send_error(c, (unsigned)r.job->status, NULL, "%s", r.job->errmsg);
  else rc = send_json(c, 200, final_response(S, &r, ch));
  choices_free(ch, r.job->n);
  srv_job_release(S->sched, r.job);
  return rc;
}

static enum MHD_Result do_tokenize(srv *S, struct MHD_Connection *c, const json_t *b) {
  const json_t *t = json_object_get(b, "content");
  const char *param = "content";
  if (!t) {
    t = json_object_get(b, "text");
    param = "text";
  }
  if (!t) t = json_object_get(b, "prompt");
  if (!json_is_string(t)) return send_error(c, 400, "content", "'content' must be a string");
  int add_special = 0, pieces = 0;
  perr e = {0};
  if (get_bool(b, "add_special", &add_special, &e) < 0 || get_bool(b, "with_pieces", &pieces, &e) < 0)
    return send_error(c, 400, e.param, "%s", e.msg);
  int32_t *ids = NULL, n = 0;
  if (tokenize_text(S, json_string_value(t), json_string_length(t), add_special, &ids, &n, &e, param))
    return send_error(c, 400, e.param, "%s", e.msg);
  json_t *arr = json_array();
  for (int32_t i = 0; i < n; i++) {
    if (pieces) json_array_append_new(arr, json_pack("{s:I,s:o}", "id", (json_int_t)ids[i], "piece",
                                                     token_str(S, ids[i], NULL)));
    else json_array_append_new(arr, json_integer(ids[i]));
  }
  free(ids);
  return send_json(c, 200, json_pack("{s:o,s:I}", "tokens", arr, "count", (json_int_t)n));
}

static enum MHD_Result do_detokenize(srv *S, struct MHD_Connection *c, const json_t *b) {
  const json_t *t = json_object_get(b, "tokens");
  if (!json_is_array(t)) return send_error(c, 400, "tokens", "'tokens' must be an array of token ids");
  const size_t n = json_array_size(t);
  int32_t *ids = malloc(sizeof(int32_t) * (n + 1));
  if (!ids) return send_error(c, 503, NULL, "out of memory");
  const int32_t V = q35_tokenizer_n_vocab(S->tok);
  for (size_t i = 0; i < n; i++) {
    const json_t *v = json_array_get(t, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
      free(ids);
      return send_error(c, 400, "tokens", "'tokens[%zu]' must be a token id in [0, %d)", i, V);
    }
    ids[i] = (int32_t)json_integer_value(v);
  }
  char *out = NULL;
  size_t len = 0;
  q35_err err = {{0}};
  int rc = q35_detokenize(S->tok, ids, n, Q35_DETOK_LOSSY, &out, &len, &err);
  free(ids);
  if (rc) return send_error(c, 400, "tokens", "%s", err.msg);
  json_t *o = json_pack("{s:s%}", "content", out, len);
  free(out);
  return send_json(c, 200, o);
}

static enum MHD_Result do_models(srv *S, struct MHD_Connection *c) {
  return send_json(c, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:{s:I,s:I}}]}", "object", "list", "data", "id",
                                     S->model_id, "object", "model", "created", (json_int_t)S->created, "owned_by",
                                     "q35", "meta", "n_ctx", (json_int_t)S->o.n_ctx, "n_vocab",
                                     (json_int_t)q35_model_n_vocab(S->model)));
}

typedef struct conn {
  sbuf body;
  int too_big;
} conn;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)version;
  srv *S = cls;
  conn *cn = *con_cls;
  const int is_post = !strcmp(method, "POST");
  if (!cn) {
    cn = calloc(1, sizeof *cn);
    if (!cn) return MHD_NO;
    *con_cls = cn;
    const char *cl = hdr(c, "Content-Length");
    if (is_post && cl && strtoll(cl, NULL, 10) > S->o.max_body) {
      cn->too_big = 1;
      return send_error(c, 413, NULL, "the request body (%s bytes) exceeds the limit of %lld bytes", cl,
                        (long long)S->o.max_body);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    if (!cn->too_big) {
      if ((int64_t)(cn->body.len + *upload_size) > S->o.max_body) {
        cn->too_big = 1;
        free(cn->body.p);
        memset(&cn->body, 0, sizeof cn->body);
      } else if (sb_add(&cn->body, upload, *upload_size)) {
        return MHD_NO;
      }
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (cn->too_big)
    return send_error(c, 413, NULL, "the request body exceeds the limit of %lld bytes", (long long)S->o.max_body);
  if (S->o.verbose) fprintf(stderr, "q35 serve: %s %s\n", method, url);
  /* routes that need no model */
  if (!strcmp(url, "/health")) {
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return send_error(c, 405, NULL, "use GET /health");
    if (!atomic_load(&S->ready)) return send_json(c, 503, error_obj(503, "the model is loading", NULL));
    return send_json(c, 200, json_pack("{s:s}", "status", "ok"));
  }
  const char *path = url;
  if (!strncmp(path, "/v1/", 4)) path += 3;
  const int known = !strcmp(path, "/models") || !strcmp(path, "/chat/completions") || !strcmp(path, "/completions") ||
                    !strcmp(path, "/tokenize") || !strcmp(path, "/detokenize") || !strcmp(path, "/metrics") ||
                    !strncmp(path, "/sessions/", 10);
  if (!known) return send_error(c, 404, NULL, "no endpoint %s %s", method, url);
  if (!atomic_load(&S->ready)) return send_error(c, 503, NULL, "the model is loading");
  if (!strcmp(path, "/models")) {
    if (strcmp(method, "GET")) return send_error(c, 405, NULL, "use GET %s", url);
    return do_models(S, c);
  }
  if (!strcmp(path, "/metrics")) {
    if (strcmp(method, "GET")) return send_error(c, 405, NULL, "use GET %s", url);
    char *m = srv_sched_metrics(S->sched);
    if (!m) return send_error(c, 503, NULL, "out of memory");
    return send_buf(c, 200, "text/plain; version=0.0.4", m, strlen(m));
  }
  if (!strncmp(path, "/sessions/", 10)) {
    char id[160];
    const char *rest = path + 10;
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (n == 0 || n >= sizeof id) return send_error(c, 404, NULL, "no endpoint %s %s", method, url);
    memcpy(id, rest, n);
    id[n] = 0;
    int st;
    if (!slash && !strcmp(method, "DELETE")) st = srv_sched_session_delete(S->sched, id);
    else if (slash && !strcmp(slash, "/reset") && is_post) st = srv_sched_session_reset(S->sched, id);
    else return send_error(c, 404, NULL, "no endpoint %s %s", method, url);
    if (st == 404) return send_error(c, 404, NULL, "no session '%s'", id);
    if (st == 409) return send_error(c, 409, NULL, "session '%s' is busy with a request", id);
    return send_json(c, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "session", slash ? "reset" : "deleted", 1));
  }
  if (!is_post) return send_error(c, 405, NULL, "use POST %s", url);
  json_error_t je;
  json_t *body = json_loadb(cn->body.p ? cn->body.p : "", cn->body.len, 0, &je);
  if (!body) return send_error(c, 400, NULL, "malformed JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
  enum MHD_Result rc;
  const int compute = json_is_object(body) && (!strcmp(path, "/chat/completions") || !strcmp(path, "/completions"));
  if (compute && S->o.timeout > 0) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  if (!json_is_object(body)) rc = send_error(c, 400, NULL, "the request body must be a JSON object");
  else if (!strcmp(path, "/chat/completions")) rc = do_completion(S, c, body, 1);
  else if (!strcmp(path, "/completions")) rc = do_completion(S, c, body, 0);
  else if (!strcmp(path, "/tokenize")) rc = do_tokenize(S, c, body);
  else rc = do_detokenize(S, c, body);
  /* from 0 back to --timeout restarts the inactivity clock now (MHD 0.9.75 connection.c), so a
   * computation longer than the timeout does not get its response dropped */
  if (compute && S->o.timeout > 0) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)S->o.timeout);
  json_decref(body);
  return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  conn *cn = *con_cls;
  if (!cn) return;
  free(cn->body.p);
  free(cn);
  *con_cls = NULL;
}

/* ---- main ---- */

void q35_server_default_opts(q35_server_opts *o) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 8080;
  o->parallel = 4;
  o->n_ctx = 4096;
  o->max_sessions = 8;
  o->max_queue = 64;
  o->max_body = 8 << 20;
  o->kv_type = Q35_KV_F16;
  o->chunk = 256;
  o->snap_every = 1024;
  o->idle_timeout = 600;
  o->timeout = 30;
}

static volatile sig_atomic_t g_stop; /* set by the signal handler (the one process-wide flag) */
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

int q35_server_run(const q35_server_opts *o) {
  srv *S = calloc(1, sizeof *S);
  if (!S) return 1;
  S->o = *o;
  S->created = (long)time(NULL);
  const char *base = strrchr(o->model_path, '/');
  base = base ? base + 1 : o->model_path;
  snprintf(S->model_id, sizeof S->model_id, "%s", o->alias ? o->alias : base);
  snprintf(S->model_stem, sizeof S->model_stem, "%s", S->model_id);
  size_t sl = strlen(S->model_stem);
  if (!o->alias && sl > 5 && !strcmp(S->model_stem + sl - 5, ".gguf")) S->model_stem[sl - 5] = 0;

  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  if (getaddrinfo(o->host, port, &hints, &ai) || !ai) {
    fprintf(stderr, "q35 serve: cannot resolve --host %s\n", o->host);
    free(S);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  S->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, S, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, S, MHD_OPTION_CONNECTION_LIMIT, 512u,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->timeout > 0 ? o->timeout : 0),
                          MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!S->d) {
    fprintf(stderr, "q35 serve: cannot listen on %s:%d (%s)\n", o->host, o->port, strerror(errno));
    free(S);
    return 1;
  }
  fprintf(stderr, "q35 serve: listening on http://%s:%d (loading %s)\n", o->host, o->port, o->model_path);

  int rc = 1;
  q35_err err = {{0}};
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = o->n_threads;
  mp.no_mmap = o->no_mmap;
  mp.no_huge = o->no_huge;
  mp.progress = 1; /* "loading ..." / "loaded ... in N s" (and a 2 MiB-page re-read) on stderr */
  gguf_file *gf = gguf_open(o->model_path, &err);
  if (gf) {
    S->tok = q35_tokenizer_from_gguf(gf, &err);
    if (S->tok && q35_chat_template_from_gguf(gf, &S->tmpl, &S->bos, &S->eos, &err)) {
      q35_tokenizer_free(S->tok);
      S->tok = NULL;
    }
    gguf_close(gf);
  }
  if (S->tok) S->model = q35_model_load(o->model_path, &mp, &err);
  srv_sched_opts so = {.parallel = o->parallel,
                       .max_sessions = o->max_sessions,
                       .max_queue = o->max_queue,
                       .n_ctx = o->n_ctx,
                       .kv_type = o->kv_type,
                       .chunk = o->chunk,
                       .snap_every = o->snap_every,
                       .mem_budget = o->mem_budget,
                       .idle_timeout = o->idle_timeout};
  if (S->model) S->sched = srv_sched_new(S->model, S->tok, &so, &err);
  if (!S->sched) {
    fprintf(stderr, "q35 serve: %s\n", err.msg);
    goto done;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  atomic_store(&S->ready, 1);
  fprintf(stderr, "q35 serve: ready: model '%s' (%s), %d parallel, context %d\n", S->model_id,
          q35_model_desc(S->model), o->parallel, o->n_ctx);
  {
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = o->n_ctx;
    sp.kv_type = o->kv_type;
    const uint64_t need = q35_session_state_bytes(S->model, &sp, NULL);
    const uint64_t most = (uint64_t)o->parallel + (uint64_t)o->max_sessions;
    if (o->mem_budget)
      fprintf(stderr, "q35 serve: memory budget %.1f MiB: a session needs %.1f MiB, %llu of %llu sessions fit at once%s\n",
              o->mem_budget / 1048576.0, need / 1048576.0,
              (unsigned long long)(need ? o->mem_budget / need : most), (unsigned long long)most,
              need && o->mem_budget / need < most ? " (idle ones are freed to make room)" : "");
  }
  while (!g_stop) {
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "q35 serve: shutting down\n");
  rc = 0;
done:
  MHD_stop_daemon(S->d);
  srv_sched_free(S->sched);
  if (S->model) q35_model_free(S->model);
  if (S->tok) q35_tokenizer_free(S->tok);
  free(S->tmpl);
  free(S->bos);
  free(S->eos);
  free(S);
  return rc;
}
