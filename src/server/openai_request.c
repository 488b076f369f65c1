/*
 * openai_request.c - a completion request body -> a scheduler job (see openai.h).
 *
 * Every field is checked for type and range before anything is computed, so the scheduler only
 * sees valid jobs: sampling parameters within q35_sampling_validate's ranges, 1..OAI_MAX_N
 * choices, at most SRV_MAX_STOP non-empty stop strings, and a prompt of 1 .. n_ctx-1 tokens
 * with every id in the vocabulary.
 */
#define _GNU_SOURCE
#include "server/openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

/* Largest magnitude at which every integer is exact in a double (2^53 is ~9.007e15). */
#define EXACT_INT_LIMIT 9e15

static int bad(oai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(oai_error *e, const char *param, const char *fmt, ...) {
  e->status = 400;
  e->param = param;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- typed fields: 1 present, 0 absent or null, -1 wrong type / out of range (e filled) ---- */

static int get_number(const json_t *b, const char *k, double lo, double hi, int lo_open, double *out, oai_error *e) {
  const json_t *v = json_object_get(b, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_number(v)) return bad(e, k, "'%s' must be a number", k);
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    return bad(e, k, "'%s' is %g; it must be in %s%g, %g]", k, x, lo_open ? "(" : "[", lo, hi);
  *out = x;
  return 1;
}

static int get_int(const json_t *b, const char *k, int64_t lo, int64_t hi, int64_t *out, oai_error *e) {
  const json_t *v = json_object_get(b, k);
  if (!v || json_is_null(v)) return 0;
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < EXACT_INT_LIMIT) {
    x = (int64_t)json_real_value(v);
  } else {
    return bad(e, k, "'%s' must be an integer", k);
  }
  if (x < lo || x > hi) return bad(e, k, "'%s' is %lld; it must be in [%lld, %lld]", k, (long long)x, (long long)lo,
                                   (long long)hi);
  *out = x;
  return 1;
}

int oai_get_bool(const json_t *b, const char *k, int *out, oai_error *e) {
  const json_t *v = json_object_get(b, k);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_boolean(v)) return bad(e, k, "'%s' must be a boolean", k);
  *out = json_is_true(v);
  return 1;
}

/* A float field into *dst when present. 0 or -1. */
static int get_float(const json_t *b, const char *k, double lo, double hi, int lo_open, float *dst, oai_error *e) {
  double x = 0;
  const int rc = get_number(b, k, lo, hi, lo_open, &x, e);
  if (rc > 0) *dst = (float)x;
  return rc < 0 ? -1 : 0;
}

int oai_tokenize(const oai_model *M, const char *text, size_t len, int add_bos, int32_t **ids, int32_t *n,
                 oai_error *e, const char *param) {
  q35_err err = {{0}};
  int32_t *t = NULL, nt = 0;
  if (q35_tokenize(M->tok, text, len, &t, &nt, &err)) return bad(e, param, "%s: %s", param, err.msg);
  const int32_t bos = q35_tokenizer_bos(M->tok);
  if (add_bos && q35_tokenizer_add_bos(M->tok) && bos >= 0) {
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

/* ---- the pieces of a request ---- */

static int parse_model(const oai_model *M, const json_t *b, oai_error *e) {
  const json_t *v = json_object_get(b, "model");
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) return bad(e, "model", "'model' must be a string");
  const char *m = json_string_value(v);
  if (strcmp(m, M->id) && strcmp(m, M->stem))
    return bad(e, "model", "model '%s' is not served here; this server has '%s'", m, M->id);
  return 0;
}

/* Sampling parameters, seed, n and max_tokens, in the ranges q35_sampling_validate accepts. */
static int parse_sampling(const json_t *b, oai_request *r, oai_error *e) {
  srv_job *j = r->job;
  q35_sampling *sp = &j->sp;
  if (get_float(b, "temperature", 0, 2, 0, &sp->temperature, e) || get_float(b, "top_p", 0, 1, 1, &sp->top_p, e))
    return -1;
  int64_t k = 0;
  int rc;
  if ((rc = get_int(b, "top_k", -1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) sp->top_k = k;
  if (get_float(b, "min_p", 0, 1, 0, &sp->min_p, e) ||
      get_float(b, "presence_penalty", -2, 2, 0, &sp->presence_penalty, e) ||
      get_float(b, "frequency_penalty", -2, 2, 0, &sp->frequency_penalty, e) ||
      get_float(b, "repetition_penalty", 0, 2, 1, &sp->repetition_penalty, e))
    return -1;
  if ((rc = get_int(b, "seed", 0, INT64_MAX, &k, e)) < 0) return -1;
  r->seed = rc ? (uint64_t)k : q35_random_seed();
  sp->seed = r->seed;
  if ((rc = get_int(b, "n", 1, OAI_MAX_N, &k, e)) < 0) return -1;
  if (rc) j->n = (int)k;
  if ((rc = get_int(b, "max_tokens", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) j->max_tokens = (int32_t)k;
  if ((rc = get_int(b, "max_completion_tokens", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) j->max_tokens = (int32_t)k;
  return 0;
}

/* "stop": a string or an array of at most SRV_MAX_STOP strings, none empty. */
static int parse_stop(const json_t *b, srv_job *j, oai_error *e) {
  const json_t *v = json_object_get(b, "stop");
  if (!v || json_is_null(v)) return 0;
  if (json_is_string(v)) {
    if (!json_string_length(v)) return bad(e, "stop", "'stop' strings must not be empty");
    j->stop[j->n_stop++] = strdup(json_string_value(v));
    return 0;
  }
  if (!json_is_array(v)) return bad(e, "stop", "'stop' must be a string or an array of strings");
  if (json_array_size(v) > SRV_MAX_STOP) return bad(e, "stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
  for (size_t i = 0; i < json_array_size(v); i++) {
    const json_t *s = json_array_get(v, i);
    if (!json_is_string(s)) return bad(e, "stop", "'stop[%zu]' must be a string", i);
    if (!json_string_length(s)) return bad(e, "stop", "'stop' strings must not be empty");
    j->stop[j->n_stop++] = strdup(json_string_value(s));
  }
  return 0;
}

/* chat: "logprobs": bool + "top_logprobs": N; completions: "logprobs": N. */
static int parse_logprobs(const json_t *b, oai_request *r, oai_error *e) {
  int64_t k = 0;
  int rc;
  r->job->n_top_logprobs = -1;
  if (r->chat) {
    int lp = 0;
    if (oai_get_bool(b, "logprobs", &lp, e) < 0) return -1;
    if ((rc = get_int(b, "top_logprobs", 0, Q35_MAX_TOP_LOGPROBS, &k, e)) < 0) return -1;
    r->logprobs = lp;
  } else {
    if ((rc = get_int(b, "logprobs", 0, Q35_MAX_TOP_LOGPROBS, &k, e)) < 0) return -1;
    r->logprobs = rc;
  }
  r->top_logprobs = rc ? (int)k : 0;
  if (r->logprobs) r->job->n_top_logprobs = r->top_logprobs;
  return 0;
}

static int parse_stream(const json_t *b, oai_request *r, oai_error *e) {
  if (oai_get_bool(b, "stream", &r->stream, e) < 0) return -1;
  const json_t *v = json_object_get(b, "stream_options");
  if (!v || json_is_null(v)) return 0;
  if (!json_is_object(v)) return bad(e, "stream_options", "'stream_options' must be an object");
  const json_t *iu = json_object_get(v, "include_usage");
  if (iu && !json_is_null(iu) && !json_is_boolean(iu))
    return bad(e, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
  r->include_usage = iu && json_is_true(iu);
  return 0;
}

/* "messages": a non-empty array of objects with a known role and string/array/null content. */
static int check_messages(const json_t *msgs, oai_error *e) {
  if (!msgs) return bad(e, "messages", "'messages' is required");
  if (!json_is_array(msgs) || json_array_size(msgs) == 0) return bad(e, "messages", "'messages' must be a non-empty array");
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
  return 0;
}

/* "tools" (each with a function name) and "tool_choice": "none". */
static int parse_tools(const json_t *b, oai_request *r, oai_error *e) {
  const json_t *v = json_object_get(b, "tools");
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
  return 0;
}

/* enable_thinking from chat_template_kwargs: 0/1, or -1 (the template's default). */
static int parse_think(const oai_model *M, const json_t *b, int *think, oai_error *e) {
  *think = M->no_think ? 0 : -1;
  const json_t *v = json_object_get(b, "chat_template_kwargs");
  if (!v || json_is_null(v)) return 0;
  if (!json_is_object(v)) return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
  const json_t *et = json_object_get(v, "enable_thinking");
  if (!et || json_is_null(et)) return 0;
  if (!json_is_boolean(et))
    return bad(e, "chat_template_kwargs.enable_thinking", "'chat_template_kwargs.enable_thinking' must be a boolean");
  *think = json_is_true(et);
  return 0;
}

/* Ends with "<think>" + optional whitespace: the prompt opens a reasoning block. */
static int ends_in_think(const char *s, size_t n) {
  static const char open[] = "<think>";
  const size_t k = sizeof open - 1;
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
  return n >= k && !memcmp(s + n - k, open, k);
}

/* The chat prompt: messages and tools rendered with the template, then tokenized. */
static int parse_chat_prompt(const oai_model *M, const json_t *b, oai_request *r, oai_error *e) {
  const json_t *msgs = json_object_get(b, "messages");
  int think;
  if (check_messages(msgs, e) || parse_tools(b, r, e) || parse_think(M, b, &think, e)) return -1;
  q35_err err = {{0}};
  size_t len = 0;
  char *text = q35_chat_render(M->tmpl, msgs, r->tools, 1, think, M->bos, M->eos, &len, &err);
  if (!text) return bad(e, "messages", "cannot render the messages with the chat template: %s", err.msg);
  r->in_think = ends_in_think(text, len);
  const int rc = oai_tokenize(M, text, len, 1, &r->job->prompt, &r->job->n_prompt, e, "messages");
  free(text);
  return rc;
}

/* The completions prompt: a string, an array with one string, or an array of token ids. */
static int parse_text_prompt(const oai_model *M, const json_t *b, srv_job *j, oai_error *e) {
  static const char shape[] = "'prompt' must be a string, an array of token ids or an array with one string";
  const json_t *p = json_object_get(b, "prompt");
  if (!p) return bad(e, "prompt", "'prompt' is required");
  if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
  if (json_is_string(p))
    return oai_tokenize(M, json_string_value(p), json_string_length(p), 1, &j->prompt, &j->n_prompt, e, "prompt");
  if (!json_is_array(p) || json_array_size(p) == 0) return bad(e, "prompt", "%s", shape);
  const size_t n = json_array_size(p);
  const int32_t V = q35_tokenizer_n_vocab(M->tok);
  j->prompt = malloc(sizeof(int32_t) * n);
  if (!j->prompt) return bad(e, "prompt", "out of memory");
  for (size_t i = 0; i < n; i++) {
    const json_t *t = json_array_get(p, i);
    if (!json_is_integer(t)) return bad(e, "prompt", "%s", shape);
    json_int_t id = json_integer_value(t);
    if (id < 0 || id >= V)
      return bad(e, "prompt", "'prompt[%zu]' token id %lld is out of range [0, %d)", i, (long long)id, V);
    j->prompt[i] = (int32_t)id;
  }
  j->n_prompt = (int32_t)n;
  return 0;
}

int oai_parse_request(const oai_model *M, const json_t *b, int chat, const char *sid, oai_request *r, oai_error *e) {
  memset(r, 0, sizeof *r);
  r->chat = chat;
  srv_job *j = srv_job_new();
  if (!j) return bad(e, NULL, "out of memory");
  r->job = j;
  if (parse_model(M, b, e) || parse_sampling(b, r, e) || parse_stop(b, j, e) || parse_logprobs(b, r, e) ||
      parse_stream(b, r, e))
    return -1;
  if (sid && *sid) {
    if (strlen(sid) > OAI_MAX_SESSION_ID)
      return bad(e, "session_id", "the session id is longer than %d bytes", OAI_MAX_SESSION_ID);
    j->session_id = strdup(sid);
  }
  if (chat ? parse_chat_prompt(M, b, r, e) : parse_text_prompt(M, b, j, e)) return -1;
  const char *pp = chat ? "messages" : "prompt";
  if (j->n_prompt < 1) return bad(e, pp, "the prompt is empty");
  if (j->n_prompt >= M->n_ctx)
    return bad(e, pp, "the prompt is %d tokens, longer than the context of %d tokens", j->n_prompt, M->n_ctx);
  snprintf(r->id, sizeof r->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)q35_random_seed());
  r->created = (long)time(NULL);
  return 0;
}
