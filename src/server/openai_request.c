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
#include "server/api.h"

/* Largest magnitude at which every integer is exact in a double (2^53 is ~9.007e15). */
#define EXACT_INT_LIMIT 9e15

int oai_bad(oai_error *e, const char *param, const char *fmt, ...) {
  e->status = 400;
  e->param = param;
  e->code = NULL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}
#define bad oai_bad

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

/* ---- which fields a request may carry ---- */

enum { F_CHAT = 1, F_TEXT = 2, F_BOTH = 3 };
enum {
  F_IMPL,       /* implemented */
  F_META,       /* accepted, changes nothing in the result (documented in README) */
  F_REFUSE,     /* refused unless null: leaving it out would change the result */
};

/* Every field of the pinned openai package's ChatCompletionCreateParams / CompletionCreateParams,
 * plus the llama-server extensions q35 implements. Anything else is refused by name. */
static const struct field {
  const char *name;
  unsigned char where, kind;
  const char *why; /* F_REFUSE: why */
} FIELDS[] = {
    {"model", F_BOTH, F_IMPL, NULL},
    {"messages", F_CHAT, F_IMPL, NULL},
    {"prompt", F_TEXT, F_IMPL, NULL},
    {"frequency_penalty", F_BOTH, F_IMPL, NULL},
    {"presence_penalty", F_BOTH, F_IMPL, NULL},
    {"logit_bias", F_BOTH, F_IMPL, NULL},
    {"logprobs", F_BOTH, F_IMPL, NULL},
    {"top_logprobs", F_CHAT, F_IMPL, NULL},
    {"max_tokens", F_BOTH, F_IMPL, NULL},
    {"max_completion_tokens", F_CHAT, F_IMPL, NULL},
    {"n", F_BOTH, F_IMPL, NULL},
    {"seed", F_BOTH, F_IMPL, NULL},
    {"stop", F_BOTH, F_IMPL, NULL},
    {"stream", F_BOTH, F_IMPL, NULL},
    {"stream_options", F_BOTH, F_IMPL, NULL},
    {"temperature", F_BOTH, F_IMPL, NULL},
    {"top_p", F_BOTH, F_IMPL, NULL},
    {"tools", F_CHAT, F_IMPL, NULL},
    {"tool_choice", F_CHAT, F_IMPL, NULL},
    {"parallel_tool_calls", F_CHAT, F_IMPL, NULL},
    {"functions", F_CHAT, F_IMPL, NULL},
    {"function_call", F_CHAT, F_IMPL, NULL},
    {"reasoning_effort", F_CHAT, F_IMPL, NULL},
    {"response_format", F_CHAT, F_IMPL, NULL},
    {"store", F_CHAT, F_IMPL, NULL},
    {"modalities", F_CHAT, F_IMPL, NULL},
    {"echo", F_TEXT, F_IMPL, NULL},
    {"suffix", F_TEXT, F_IMPL, NULL},
    {"best_of", F_TEXT, F_IMPL, NULL},
    {"user", F_BOTH, F_META, NULL},
    {"metadata", F_CHAT, F_META, NULL},
    {"service_tier", F_CHAT, F_META, NULL},
    {"safety_identifier", F_CHAT, F_META, NULL},
    {"prompt_cache_key", F_CHAT, F_META, NULL},
    {"prompt_cache_retention", F_CHAT, F_META, NULL},
    {"prompt_cache_options", F_CHAT, F_META, NULL},
    {"prediction", F_CHAT, F_META, NULL}, /* predicted output only changes latency, never the text */
    {"audio", F_CHAT, F_REFUSE, "audio output needs an audio decoder, which this model file does not have"},
    {"web_search_options", F_CHAT, F_REFUSE, "this server has no web search"},
    {"moderation", F_CHAT, F_REFUSE, "this server has no moderation model"},
    {"verbosity", F_CHAT, F_REFUSE, "this model has no verbosity control"},
    /* llama-server extensions */
    {"top_k", F_BOTH, F_IMPL, NULL},
    {"min_p", F_BOTH, F_IMPL, NULL},
    {"repetition_penalty", F_BOTH, F_IMPL, NULL},
    {"chat_template_kwargs", F_CHAT, F_IMPL, NULL},
    {"grammar", F_BOTH, F_IMPL, NULL},
    {"json_schema", F_BOTH, F_IMPL, NULL},
    {"cache_prompt", F_BOTH, F_META, NULL}, /* prefix reuse is always on and changes no output */
};

/* Unknown fields and refused ones: a 400 naming the field. */
static int check_fields(const json_t *b, int chat, oai_error *e) {
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)b, k, v) {
    const struct field *f = NULL;
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0] && !f; i++)
      if (!strcmp(FIELDS[i].name, k)) f = &FIELDS[i];
    if (!f || !(f->where & (chat ? F_CHAT : F_TEXT)))
      return bad(e, k, "unknown field '%s' for %s (q35 refuses what it would otherwise ignore)", k,
                 chat ? "/v1/chat/completions" : "/v1/completions");
    if (f->kind == F_REFUSE && !json_is_null(v)) return bad(e, k, "'%s' is not supported: %s", k, f->why);
    if (f->kind == F_META && !json_is_null(v)) {
      const int want_str = !strcmp(k, "user") || !strcmp(k, "safety_identifier") || !strcmp(k, "prompt_cache_key") ||
                           !strcmp(k, "service_tier") || !strcmp(k, "prompt_cache_retention");
      if (want_str && !json_is_string(v)) return bad(e, k, "'%s' must be a string", k);
      if (!want_str && !strcmp(k, "cache_prompt") && !json_is_boolean(v)) return bad(e, k, "'%s' must be a boolean", k);
      if (!want_str && strcmp(k, "cache_prompt") && !json_is_object(v)) return bad(e, k, "'%s' must be an object", k);
    }
  }
  int store = 0;
  if (oai_get_bool(b, "store", &store, e) < 0) return -1;
  if (store) return bad(e, "store", "'store: true' is not supported: this server keeps no stored completions");
  const json_t *md = json_object_get(b, "metadata"); /* OpenAI's shape: string values */
  const char *mk;
  const json_t *mv;
  json_object_foreach((json_t *)md, mk, mv) {
    if (!json_is_string(mv)) return bad(e, "metadata", "'metadata.%s' must be a string", mk);
  }
  const json_t *pco = json_object_get(b, "prompt_cache_options");
  static const char *const pkeys[] = {"mode", "ttl", NULL};
  const char *pu = json_is_object(pco) ? api_unknown_key(pco, pkeys) : NULL;
  if (pu) return bad(e, "prompt_cache_options", "'prompt_cache_options' has an unknown field '%s'", pu);
  const json_t *pr = json_object_get(b, "prediction"); /* {type: content, content: text}: a latency hint */
  if (pr && !json_is_null(pr)) {
    static const char *const keys[] = {"type", "content", NULL};
    const char *ty = json_string_value(json_object_get(pr, "type"));
    const json_t *pc = json_object_get(pr, "content");
    if (api_unknown_key(pr, keys) || !ty || strcmp(ty, "content") || !(json_is_string(pc) || json_is_array(pc)))
      return bad(e, "prediction", "'prediction' must be {\"type\": \"content\", \"content\": text or text parts}");
  }
  const json_t *mod = json_object_get(b, "modalities");
  if (mod && !json_is_null(mod)) {
    if (!json_is_array(mod)) return bad(e, "modalities", "'modalities' must be an array");
    for (size_t i = 0; i < json_array_size(mod); i++) {
      const char *m = json_string_value(json_array_get(mod, i));
      if (!m || strcmp(m, "text"))
        return bad(e, "modalities", "'modalities' may only hold \"text\": this model file has no audio decoder");
    }
  }
  return 0;
}

/* "logit_bias": {"token id": bias in [-100, 100], ...}, ids in the vocabulary. */
static int parse_logit_bias(const oai_model *M, const json_t *b, srv_job *j, oai_error *e) {
  const json_t *v = json_object_get(b, "logit_bias");
  if (!v || json_is_null(v)) return 0;
  if (!json_is_object(v)) return bad(e, "logit_bias", "'logit_bias' must be an object of token id -> bias");
  const size_t n = json_object_size(v);
  if (n > OAI_MAX_LOGIT_BIAS) return bad(e, "logit_bias", "'logit_bias' holds at most %d entries", OAI_MAX_LOGIT_BIAS);
  if (!n) return 0;
  j->logit_bias = calloc(n, sizeof *j->logit_bias);
  if (!j->logit_bias) return bad(e, "logit_bias", "out of memory");
  const int32_t V = q35_tokenizer_n_vocab(M->tok);
  const char *k;
  const json_t *x;
  int32_t i = 0;
  json_object_foreach((json_t *)v, k, x) {
    char *end = NULL;
    const long long id = strtoll(k, &end, 10);
    if (!*k || *end || id < 0 || id >= V)
      return bad(e, "logit_bias", "'logit_bias' key '%s' is not a token id in [0, %d)", k, V);
    if (!json_is_number(x) || !(json_number_value(x) >= -100 && json_number_value(x) <= 100))
      return bad(e, "logit_bias", "'logit_bias[\"%s\"]' must be a number in [-100, 100]", k);
    j->logit_bias[i].token = (int32_t)id;
    j->logit_bias[i++].bias = (float)json_number_value(x);
  }
  j->sp.logit_bias = j->logit_bias;
  j->sp.n_logit_bias = i;
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
    if ((rc = get_int(b, "logprobs", 0, OAI_MAX_TEXT_LOGPROBS, &k, e)) < 0) return -1;
    r->logprobs = rc;
  }
  r->top_logprobs = rc ? (int)k : 0;
  /* completions key the alternatives by text, and tokens may share one: take the engine's
   * most, so that the N most likely distinct texts can be picked */
  if (r->logprobs) r->job->n_top_logprobs = r->chat || !r->top_logprobs ? r->top_logprobs : Q35_MAX_TOP_LOGPROBS;
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
  /* include_obfuscation pads streamed events against length side channels: accepted, not added */
  static const char *const keys[] = {"include_usage", "include_obfuscation", NULL};
  const char *u = api_unknown_key(v, keys);
  if (u) return bad(e, "stream_options", "'stream_options' has an unknown field '%s'", u);
  const json_t *ob = json_object_get(v, "include_obfuscation");
  if (ob && !json_is_null(ob) && !json_is_boolean(ob))
    return bad(e, "stream_options.include_obfuscation", "'stream_options.include_obfuscation' must be a boolean");
  return 0;
}

/* One content part: text (and an assistant's refusal, rendered as its text) is kept; images,
 * audio and files need encoders this model file does not have. A field a part may not carry is
 * a 400 (prompt_cache_breakpoint is a cache hint: prefix reuse is automatic). */
static int check_part(const json_t *part, size_t i, size_t k, oai_error *e) {
  const char *t = json_is_object(part) ? json_string_value(json_object_get(part, "type")) : NULL;
  if (!t) return bad(e, "messages", "'messages[%zu].content[%zu]' must be an object with a 'type'", i, k);
  if (!strcmp(t, "text") || !strcmp(t, "refusal")) {
    static const char *const tkeys[] = {"type", "text", "prompt_cache_breakpoint", NULL};
    static const char *const rkeys[] = {"type", "refusal", NULL};
    const char *u = api_unknown_key(part, !strcmp(t, "text") ? tkeys : rkeys);
    if (u) return bad(e, "messages", "'messages[%zu].content[%zu]' has an unknown field '%s'", i, k, u);
    if (!json_is_string(json_object_get(part, !strcmp(t, "text") ? "text" : "refusal")))
      return bad(e, "messages", "'messages[%zu].content[%zu].%s' must be a string", i, k, t);
    return 0;
  }
  if (!strcmp(t, "image_url") || !strcmp(t, "image"))
    return bad(e, "messages", "'messages[%zu].content[%zu]' is an image: this model file has no vision encoder", i, k);
  if (!strcmp(t, "input_audio") || !strcmp(t, "audio"))
    return bad(e, "messages", "'messages[%zu].content[%zu]' is audio: this model file has no audio encoder", i, k);
  if (!strcmp(t, "file"))
    return bad(e, "messages", "'messages[%zu].content[%zu]' is a file: this server takes text parts only", i, k);
  return bad(e, "messages", "'messages[%zu].content[%zu].type' is '%s'; it must be text", i, k, t);
}

/* An assistant message's tool_calls: function calls {id, type, function: {name, arguments}}. */
static int check_tool_calls(const json_t *tcs, size_t i, oai_error *e) {
  if (!tcs || json_is_null(tcs)) return 0;
  if (!json_is_array(tcs)) return bad(e, "messages", "'messages[%zu].tool_calls' must be an array", i);
  static const char *const keys[] = {"id", "type", "function", NULL};
  static const char *const fkeys[] = {"name", "arguments", NULL};
  for (size_t k = 0; k < json_array_size(tcs); k++) {
    const json_t *tc = json_array_get(tcs, k);
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (ty && strcmp(ty, "function"))
      return bad(e, "messages", "'messages[%zu].tool_calls[%zu].type' is '%s'; only function calls are supported", i,
                 k, ty);
    const json_t *fn = json_object_get(tc, "function");
    const char *u = json_is_object(tc) ? api_unknown_key(tc, keys) : "(not an object)";
    if (!u && json_is_object(fn)) u = api_unknown_key(fn, fkeys);
    if (u) return bad(e, "messages", "'messages[%zu].tool_calls[%zu]' has an unknown field '%s'", i, k, u);
    if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
      return bad(e, "messages", "'messages[%zu].tool_calls[%zu].function.name' must be a string", i, k);
  }
  return 0;
}

/* "messages": a non-empty array of objects with a known role, string/array/null content and
 * only the fields that role may carry; *legacy is set when a message uses the legacy function
 * role or function_call, *refusal when an assistant turn carries a refusal (rendered as text).
 * `name` is accepted and not rendered: Qwen3.5's template has no speaker names (nor tool names
 * on results, which some clients send). */
static int check_messages(const json_t *msgs, int *legacy, int *refusal, oai_error *e) {
  static const char *const k_plain[] = {"role", "content", "name", NULL};
  /* annotations: the citations of an answer replayed as it came back (not rendered) */
  static const char *const k_asst[] = {"role",  "content",           "name",        "tool_calls", "function_call",
                                       "refusal", "reasoning_content", "annotations", "audio",      NULL};
  static const char *const k_tool[] = {"role", "content", "tool_call_id", "name", NULL};
  if (!msgs) return bad(e, "messages", "'messages' is required");
  if (!json_is_array(msgs) || json_array_size(msgs) == 0) return bad(e, "messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < json_array_size(msgs); i++) {
    const json_t *m = json_array_get(msgs, i);
    if (!json_is_object(m)) return bad(e, "messages", "'messages[%zu]' must be an object", i);
    const json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) return bad(e, "messages", "'messages[%zu].role' must be a string", i);
    const char *rs = json_string_value(role);
    if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool") &&
        strcmp(rs, "developer") && strcmp(rs, "function"))
      return bad(e, "messages",
                 "'messages[%zu].role' is '%s'; it must be system, developer, user, assistant, tool or function", i, rs);
    const int asst = !strcmp(rs, "assistant");
    const char *u = api_unknown_key(m, asst ? k_asst : !strcmp(rs, "tool") ? k_tool : k_plain);
    if (u) return bad(e, "messages", "'messages[%zu]' (role %s) has an unknown field '%s'", i, rs, u);
    const json_t *nm = json_object_get(m, "name");
    if (nm && !json_is_null(nm) && !json_is_string(nm))
      return bad(e, "messages", "'messages[%zu].name' must be a string", i);
    if (!strcmp(rs, "function") || json_object_get(m, "function_call")) *legacy = 1;
    const json_t *ct = json_object_get(m, "content");
    if (ct && !json_is_null(ct) && !json_is_string(ct) && !json_is_array(ct))
      return bad(e, "messages", "'messages[%zu].content' must be a string, an array of parts or null", i);
    for (size_t k = 0; json_is_array(ct) && k < json_array_size(ct); k++) {
      if (check_part(json_array_get(ct, k), i, k, e)) return -1;
      if (!strcmp(json_string_value(json_object_get(json_array_get(ct, k), "type")), "refusal")) *refusal = 1;
    }
    if (json_object_get(m, "audio") && !json_is_null(json_object_get(m, "audio")))
      return bad(e, "messages", "'messages[%zu].audio' is not supported: this model file has no audio encoder", i);
    const json_t *rf = json_object_get(m, "refusal");
    if (rf && !json_is_null(rf)) {
      if (!json_is_string(rf)) return bad(e, "messages", "'messages[%zu].refusal' must be a string", i);
      *refusal = 1;
    }
    const json_t *rc = json_object_get(m, "reasoning_content");
    if (rc && !json_is_null(rc) && !json_is_string(rc))
      return bad(e, "messages", "'messages[%zu].reasoning_content' must be a string", i);
    const json_t *fc = json_object_get(m, "function_call");
    if (fc && !json_is_null(fc)) {
      static const char *const fkeys[] = {"name", "arguments", NULL};
      u = json_is_object(fc) ? api_unknown_key(fc, fkeys) : NULL;
      if (u) return bad(e, "messages", "'messages[%zu].function_call' has an unknown field '%s'", i, u);
      if (!json_is_object(fc) || !json_is_string(json_object_get(fc, "name")))
        return bad(e, "messages", "'messages[%zu].function_call' must be an object with a string name", i);
    }
    if (check_tool_calls(json_object_get(m, "tool_calls"), i, e)) return -1;
  }
  return 0;
}

/* An assistant's refusal as its text: refusal parts become text parts, a `refusal` string
 * follows the content (the template renders content only). In place, on a copy. */
static void map_refusals(json_t *msgs) {
  for (size_t i = 0; i < json_array_size(msgs); i++) {
    json_t *m = json_array_get(msgs, i);
    json_t *ct = json_object_get(m, "content");
    for (size_t k = 0; json_is_array(ct) && k < json_array_size(ct); k++) {
      json_t *p = json_array_get(ct, k);
      if (!strcmp(json_string_value(json_object_get(p, "type")), "refusal"))
        json_array_set_new(ct, k, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(p, "refusal")));
    }
    const char *rf = json_string_value(json_object_get(m, "refusal"));
    if (rf && *rf) {
      q35_buf t = {0};
      if (json_is_string(ct)) q35_buf_str(&t, json_string_value(ct));
      for (size_t k = 0; json_is_array(ct) && k < json_array_size(ct); k++)
        q35_buf_str(&t, json_string_value(json_object_get(json_array_get(ct, k), "text")));
      q35_buf_str(&t, rf);
      json_object_set_new(m, "content", json_string(t.p ? t.p : ""));
      q35_buf_free(&t);
    }
    json_object_del(m, "refusal");
  }
}

/* The legacy function messages as tool messages: role "function" -> "tool" (the name kept),
 * an assistant's function_call -> one tool call. A new array (the caller decrefs it). */
static json_t *map_legacy_messages(const json_t *msgs) {
  json_t *out = json_deep_copy(msgs);
  for (size_t i = 0; out && i < json_array_size(out); i++) {
    json_t *m = json_array_get(out, i);
    if (!strcmp(json_string_value(json_object_get(m, "role")), "function"))
      json_object_set_new(m, "role", json_string("tool"));
    json_t *fc = json_object_get(m, "function_call");
    if (json_is_object(fc)) {
      char id[40];
      oai_call_id(id);
      json_object_set_new(m, "tool_calls", json_pack("[{s:s,s:s,s:O}]", "id", id, "type", "function", "function", fc));
      json_object_del(m, "function_call");
    }
  }
  return out;
}

/* A function definition {name, description?, parameters?, strict?}; param names the field. */
static int check_function(const json_t *fn, const char *param, size_t i, oai_constraint *c, oai_error *e) {
  if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
    return bad(e, param, "'%s[%zu]%s.name' must be a string", param, i, strcmp(param, "tools") ? "" : ".function");
  static const char *const keys[] = {"name", "description", "parameters", "strict", NULL};
  const char *u = api_unknown_key(fn, keys);
  if (u)
    return bad(e, param, "'%s[%zu]%s' has an unknown field '%s'", param, i, strcmp(param, "tools") ? "" : ".function",
               u);
  const json_t *st = json_object_get(fn, "strict");
  if (st && !json_is_null(st) && !json_is_boolean(st))
    return bad(e, param, "'%s[%zu].function.strict' must be a boolean", param, i);
  if (json_is_true(st)) c->strict_tools = 1;
  return 0;
}

/* Does the tools array define function `name`? */
static int has_function(const json_t *tools, const char *name) {
  for (size_t i = 0; tools && i < json_array_size(tools); i++) {
    const json_t *fn = json_object_get(json_array_get(tools, i), "function");
    if (!strcmp(json_string_value(json_object_get(fn, "name")), name)) return 1;
  }
  return 0;
}

/* tool_choice / function_call -> r->constraint.tool_choice (and tool_name). */
static int parse_tool_choice(const json_t *v, const char *param, oai_request *r, oai_error *e) {
  oai_constraint *c = &r->constraint;
  if (!v || json_is_null(v)) return 0;
  const int legacy = !strcmp(param, "function_call");
  if (json_is_string(v)) {
    const char *t = json_string_value(v);
    if (!strcmp(t, "none")) c->tool_choice = OAI_TOOLS_NONE;
    else if (!strcmp(t, "auto")) c->tool_choice = OAI_TOOLS_AUTO;
    else if (!strcmp(t, "required") && !legacy) c->tool_choice = OAI_TOOLS_REQUIRED;
    else
      return bad(e, param, "'%s' is '%s'; it must be none, auto%s or an object naming a function", param, t,
                 legacy ? "" : ", required");
  } else if (json_is_object(v)) {
    const json_t *fn = legacy ? v : json_object_get(v, "function");
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!legacy && (!type || strcmp(type, "function")))
      return bad(e, param, "'%s.type' is '%s'; only {\"type\": \"function\", \"function\": {\"name\": ...}} is supported",
                 param, type ? type : "(missing)");
    static const char *const okeys[] = {"type", "function", NULL}, *const nkeys[] = {"name", NULL};
    const char *u = legacy ? NULL : api_unknown_key(v, okeys);
    if (!u && json_is_object(fn)) u = api_unknown_key(fn, nkeys);
    if (u) return bad(e, param, "'%s' has an unknown field '%s'", param, u);
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name) return bad(e, param, "'%s' must name a function: %s", param, legacy ? "{\"name\": ...}" :
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    if (!has_function(r->tools, name)) return bad(e, param, "'%s' names function '%s', which is not in the tools", param, name);
    c->tool_choice = OAI_TOOLS_NAMED;
    c->tool_name = name;
  } else {
    return bad(e, param, "'%s' must be a string or an object", param);
  }
  if (c->tool_choice >= OAI_TOOLS_REQUIRED && !r->tools)
    return bad(e, param, "'%s' forces a tool call but the request has no tools", param);
  return 0;
}

/* "tools" (functions with a name), the legacy "functions" mapped onto them, "tool_choice" /
 * "function_call" and "parallel_tool_calls". tool_choice none leaves the tools out of the
 * prompt and the output unparsed. */
static int parse_tools(const json_t *b, oai_request *r, oai_error *e) {
  oai_constraint *c = &r->constraint;
  const json_t *v = json_object_get(b, "tools");
  const json_t *fns = json_object_get(b, "functions");
  if (v && !json_is_null(v) && fns && !json_is_null(fns))
    return bad(e, "functions", "give either 'tools' or the legacy 'functions', not both");
  if (v && !json_is_null(v)) {
    if (!json_is_array(v)) return bad(e, "tools", "'tools' must be an array");
    for (size_t i = 0; i < json_array_size(v); i++) {
      const json_t *t = json_array_get(v, i);
      const char *type = json_is_object(t) ? json_string_value(json_object_get(t, "type")) : NULL;
      if (type && strcmp(type, "function"))
        return bad(e, "tools", "'tools[%zu].type' is '%s'; only function tools are supported", i, type);
      static const char *const tkeys[] = {"type", "function", NULL};
      const char *u = json_is_object(t) ? api_unknown_key(t, tkeys) : NULL;
      if (u) return bad(e, "tools", "'tools[%zu]' has an unknown field '%s'", i, u);
      if (check_function(json_is_object(t) ? json_object_get(t, "function") : NULL, "tools", i, c, e)) return -1;
    }
    if (json_array_size(v)) r->tools = (json_t *)v;
  } else if (fns && !json_is_null(fns)) {
    if (!json_is_array(fns)) return bad(e, "functions", "'functions' must be an array");
    r->tools_owned = json_array();
    for (size_t i = 0; i < json_array_size(fns); i++) {
      if (check_function(json_array_get(fns, i), "functions", i, c, e)) return -1;
      json_array_append_new(r->tools_owned, json_pack("{s:s,s:O}", "type", "function", "function", json_array_get(fns, i)));
    }
    r->legacy_functions = 1;
    if (json_array_size(fns)) r->tools = r->tools_owned;
  }
  const json_t *tc = json_object_get(b, "tool_choice"), *fc = json_object_get(b, "function_call");
  if (tc && !json_is_null(tc) && fc && !json_is_null(fc))
    return bad(e, "function_call", "give either 'tool_choice' or the legacy 'function_call', not both");
  if (fc && !json_is_null(fc)) r->legacy_functions = 1;
  if (parse_tool_choice(tc, "tool_choice", r, e) || parse_tool_choice(fc, "function_call", r, e)) return -1;
  int par = 1;
  if (oai_get_bool(b, "parallel_tool_calls", &par, e) < 0) return -1;
  r->max_tool_calls = par ? 0 : 1;
  if (r->legacy_functions) r->max_tool_calls = 1; /* function_call answers hold one call */
  if (c->tool_choice == OAI_TOOLS_NONE) {
    r->tools = NULL;
    c->strict_tools = 0;
  }
  if (!r->tools) c->strict_tools = 0;
  c->tools = r->tools;
  r->parse_tools = r->tools != NULL;
  return 0;
}

/* reasoning_effort -> the thinking toggle: none / minimal turn thinking off, low .. xhigh on. */
static int parse_effort(const json_t *b, int *think, oai_error *e) {
  const json_t *v = json_object_get(b, "reasoning_effort");
  if (!v || json_is_null(v)) return 0;
  static const char *const on[] = {"low", "medium", "high", "xhigh"};
  const char *t = json_string_value(v);
  if (!t) return bad(e, "reasoning_effort", "'reasoning_effort' must be a string");
  int want = -1;
  if (!strcmp(t, "none") || !strcmp(t, "minimal")) want = 0;
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
    if (!strcmp(t, on[i])) want = 1;
  if (want < 0)
    return bad(e, "reasoning_effort", "'reasoning_effort' is '%s'; it must be none, minimal, low, medium, high or xhigh",
               t);
  *think = want;
  return 0;
}

/* enable_thinking from chat_template_kwargs: 0/1, or -1 (the template's default). */
static int parse_think(const oai_model *M, const json_t *b, int *think, oai_error *e) {
  *think = M->no_think ? 0 : -1;
  int effort = -1;
  if (parse_effort(b, &effort, e)) return -1;
  if (effort >= 0) *think = effort;
  const json_t *v = json_object_get(b, "chat_template_kwargs");
  if (!v || json_is_null(v)) return 0;
  if (!json_is_object(v)) return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
  static const char *const keys[] = {"enable_thinking", NULL};
  const char *u = api_unknown_key(v, keys);
  if (u)
    return bad(e, "chat_template_kwargs", "'chat_template_kwargs.%s' is not supported: only enable_thinking is passed "
               "to the template", u);
  const json_t *et = json_object_get(v, "enable_thinking");
  if (!et || json_is_null(et)) return 0;
  if (!json_is_boolean(et))
    return bad(e, "chat_template_kwargs.enable_thinking", "'chat_template_kwargs.enable_thinking' must be a boolean");
  if (effort >= 0 && effort != json_is_true(et))
    return bad(e, "reasoning_effort", "'reasoning_effort' and 'chat_template_kwargs.enable_thinking' disagree");
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
  int think, legacy = 0, refusal = 0;
  if (check_messages(msgs, &legacy, &refusal, e) || parse_tools(b, r, e) || parse_think(M, b, &think, e)) return -1;
  q35_err err = {{0}};
  size_t len = 0;
  json_t *mapped = legacy ? map_legacy_messages(msgs) : refusal ? json_deep_copy(msgs) : NULL;
  if (mapped && refusal) map_refusals(mapped);
  char *text = q35_chat_render(M->tmpl, mapped ? mapped : msgs, r->tools, 1, think, M->bos, M->eos, &len, &err);
  json_decref(mapped);
  if (!text) return bad(e, "messages", "cannot render the messages with the chat template: %s", err.msg);
  r->in_think = ends_in_think(text, len);
  const int rc = oai_tokenize(M, text, len, 1, &r->job->prompt, &r->job->n_prompt, e, "messages");
  free(text);
  return rc;
}

/* The id of a single-token special string (a FIM marker), or -1 when the vocabulary has none. */
static int32_t special_id(const oai_model *M, const char *text) {
  q35_err err = {{0}};
  int32_t *t = NULL, n = 0;
  if (q35_tokenize(M->tok, text, strlen(text), &t, &n, &err)) return -1;
  const int32_t id = n == 1 ? t[0] : -1;
  free(t);
  return id;
}

/* "suffix": fill in the middle. The prompt becomes <|fim_prefix|>prompt<|fim_suffix|>suffix
 * <|fim_middle|> (Qwen's FIM format) when the vocabulary has those tokens; else a 400. */
static int fim_prompt(const oai_model *M, const json_t *p, const json_t *suffix, srv_job *j, oai_error *e) {
  static const char *const mark[3] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"};
  for (int i = 0; i < 3; i++)
    if (special_id(M, mark[i]) < 0)
      return bad(e, "suffix", "'suffix' (fill in the middle) needs the %s token, which this model's vocabulary lacks",
                 mark[i]);
  if (!json_is_string(p)) return bad(e, "suffix", "'suffix' needs a text 'prompt'");
  q35_buf t = {0};
  q35_buf_add(&t, mark[0], strlen(mark[0]));
  q35_buf_add(&t, json_string_value(p), json_string_length(p));
  q35_buf_add(&t, mark[1], strlen(mark[1]));
  q35_buf_add(&t, json_string_value(suffix), json_string_length(suffix));
  const int rc = q35_buf_add(&t, mark[2], strlen(mark[2]));
  if (rc) {
    q35_buf_free(&t);
    return bad(e, "suffix", "out of memory");
  }
  const int tr = oai_tokenize(M, t.p, t.n, 1, &j->prompt, &j->n_prompt, e, "prompt");
  q35_buf_free(&t);
  return tr;
}

/* "echo": the response text starts with the prompt (its text, or the ids decoded). */
static int echo_prompt(const oai_model *M, const json_t *p, oai_request *r, oai_error *e) {
  if (json_is_string(p)) {
    r->echo = q35_strndup(json_string_value(p), json_string_length(p));
    r->echo_len = json_string_length(p);
    return r->echo ? 0 : bad(e, "echo", "out of memory");
  }
  q35_err err = {{0}};
  const srv_job *j = r->job;
  const int32_t skip = j->n_prompt > 0 && q35_tokenizer_add_bos(M->tok) && j->prompt[0] == q35_tokenizer_bos(M->tok);
  if (q35_detokenize(M->tok, j->prompt + skip, (size_t)(j->n_prompt - skip), Q35_DETOK_LOSSY, &r->echo, &r->echo_len,
                     &err))
    return bad(e, "echo", "%s", err.msg);
  return 0;
}

/* echo, suffix and best_of of /v1/completions (after the prompt is parsed). */
static int parse_text_extras(const oai_model *M, const json_t *b, oai_request *r, oai_error *e) {
  int echo = 0;
  int64_t best = 0;
  int rc;
  if (oai_get_bool(b, "echo", &echo, e) < 0 || (rc = get_int(b, "best_of", 1, OAI_MAX_N, &best, e)) < 0) return -1;
  if (rc && best != r->job->n)
    return bad(e, "best_of", "'best_of' %lld > n = %d is not supported: q35 returns every choice it generates "
               "(ask for n choices and pick by their logprobs)", (long long)best, r->job->n);
  if (echo && r->logprobs)
    return bad(e, "echo", "'echo' with 'logprobs' is not supported: it needs the prompt tokens' log-probabilities, "
               "which this server does not compute");
  const json_t *p = json_object_get(b, "prompt");
  if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
  const json_t *suffix = json_object_get(b, "suffix");
  if (suffix && !json_is_null(suffix) && !json_is_string(suffix)) return bad(e, "suffix", "'suffix' must be a string");
  if (json_is_string(suffix) && json_string_length(suffix)) {
    free(r->job->prompt);
    r->job->prompt = NULL;
    if (fim_prompt(M, p, suffix, r->job, e)) return -1;
  }
  return echo ? echo_prompt(M, p, r, e) : 0;
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

void oai_request_free(oai_request *r) {
  json_decref(r->tools_owned);
  free(r->echo);
  r->tools_owned = NULL;
  r->echo = NULL;
}

int oai_parse_request(const oai_model *M, const json_t *b, int chat, const char *sid, oai_request *r, oai_error *e) {
  memset(r, 0, sizeof *r);
  r->chat = chat;
  srv_job *j = srv_job_new();
  if (!j) return bad(e, NULL, "out of memory");
  r->job = j;
  j->sp = M->defaults;
  if (check_fields(b, chat, e) || parse_model(M, b, e) || parse_sampling(b, r, e) || parse_stop(b, j, e) ||
      parse_logprobs(b, r, e) || parse_stream(b, r, e) || parse_logit_bias(M, b, j, e))
    return -1;
  if (sid && *sid) {
    if (strlen(sid) > OAI_MAX_SESSION_ID)
      return bad(e, "session_id", "the session id is longer than %d bytes", OAI_MAX_SESSION_ID);
    j->session_id = strdup(sid);
  }
  if (chat ? parse_chat_prompt(M, b, r, e) : parse_text_prompt(M, b, j, e) || parse_text_extras(M, b, r, e)) return -1;
  if (oai_parse_constraint(M, b, r, e) || oai_apply_constraint(M, r, e)) return -1;
  const char *pp = chat ? "messages" : "prompt";
  if (j->n_prompt < 1) return bad(e, pp, "the prompt is empty");
  if (j->n_prompt >= M->n_ctx) {
    bad(e, pp, "the prompt is %d tokens; this model's context is %d tokens, and at least one must be left to generate",
        j->n_prompt, M->n_ctx);
    e->code = "context_length_exceeded";
    return -1;
  }
  snprintf(r->id, sizeof r->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)q35_random_seed());
  r->created = (long)time(NULL);
  return 0;
}
