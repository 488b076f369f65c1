/*
 * anthropic.c - POST /v1/messages and /v1/messages/count_tokens, the Anthropic Messages API
 * (see api.h).
 *
 * The request's `system` and `messages` (content blocks: text, tool_use, tool_result,
 * thinking) become the OpenAI chat messages chat completions renders: tool_result blocks become
 * "tool" messages (in their order, before the rest of that user turn), tool_use blocks the
 * assistant's tool_calls, thinking blocks its reasoning_content. A final assistant message is a
 * prefill: its text is appended after the generation prompt and the reply continues it.
 *
 * Output pieces (api_gen) become content blocks: thinking, text, tool_use. Streams send
 *   message_start, ping, per block content_block_start / content_block_delta (thinking_delta,
 *   text_delta, input_json_delta) / content_block_stop, message_delta (stop_reason,
 *   stop_sequence, usage), message_stop;
 * a failure after the stream started is an `error` event. stop_reason: "tool_use" when the
 * reply holds tool calls, "max_tokens", "stop_sequence" (with stop_sequence naming the one that
 * matched) or "end_turn". Errors use Anthropic's shape {"type":"error","error":{"type",
 * "message"}}. The anthropic-version / anthropic-beta headers are accepted and not needed.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/http.h"

#define THINK_MIN_BUDGET 1024   /* Anthropic's smallest thinking budget */
#define THINK_MIN_BUDGET_ENV "Q35_TEST_MIN_THINK_BUDGET" /* test only: a lower smallest budget */

static json_t *err_body(unsigned status, const char *msg) { return http_anthropic_error_body(status, msg); }

enum MHD_Result api_anthropic_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  http_log_status(status, msg); /* the -v request log names the reason */
  return http_send_json(c, status, err_body(status, msg));
}

/* ---- the request ---- */

typedef struct msg_req {
  api_conv v;
  srv_job *j;
  char id[48];
  int stream;
  api_ctx *A;
  oai_constraint con; /* tool_choice any / tool, strict tools (openai_constraint.c) */
} msg_req;

static void req_free(msg_req *q) {
  api_conv_free(&q->v);
  if (q->j) srv_job_release(q->A->sched, q->j);
  free(q);
}

/* Text of a tool_result's content (a string or text blocks). */
static int result_text(const json_t *ct, const char *where, q35_buf *out, oai_error *e) {
  if (!ct || json_is_null(ct)) return 0;
  if (json_is_string(ct)) return q35_buf_add(out, json_string_value(ct), json_string_length(ct));
  if (!json_is_array(ct)) return api_bad(e, "messages", "'%s.content' must be a string or an array of blocks", where);
  for (size_t k = 0; k < json_array_size(ct); k++) {
    const json_t *b = json_array_get(ct, k);
    const char *t = json_string_value(json_object_get(b, "type"));
    if (t && !strcmp(t, "image"))
      return api_bad(e, "messages", "'%s.content[%zu]' is an image: this model file has no vision encoder", where, k);
    static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
    if (!t || strcmp(t, "text") || !json_is_string(json_object_get(b, "text")) || api_unknown_key(b, keys))
      return api_bad(e, "messages", "'%s.content[%zu]' must be a text block {type, text}", where, k);
    q35_buf_str(out, json_string_value(json_object_get(b, "text")));
  }
  return 0;
}

/* One content block of messages[i] into the user text / assistant parts. */
static int add_block(json_t *msgs, json_t *asst, const json_t *b, const char *where, q35_buf *text,
                     q35_buf *reasoning, oai_error *e) {
  const char *t = json_string_value(json_object_get(b, "type"));
  if (!t) return api_bad(e, "messages", "'%s.type' must be a string", where);
  /* the fields each block may carry; cache_control and a text's citations (of an earlier
   * answer) are metadata: prefix reuse is automatic, citations do not enter the prompt */
  static const char *const k_text[] = {"type", "text", "cache_control", "citations", NULL};
  static const char *const k_result[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
  static const char *const k_use[] = {"type", "id", "name", "input", "cache_control", "caller", NULL};
  static const char *const k_think[] = {"type", "thinking", "signature", NULL};
  const char *const *keys = !strcmp(t, "text") ? k_text : !strcmp(t, "tool_result") ? k_result
                            : !strcmp(t, "tool_use") ? k_use : !strcmp(t, "thinking") ? k_think : NULL;
  const char *u = keys ? api_unknown_key(b, keys) : NULL;
  if (u) return api_bad(e, "messages", "'%s' (a %s block) has an unknown or unsupported field '%s'", where, t, u);
  const json_t *caller = json_object_get(b, "caller");
  const char *ct = json_string_value(json_object_get(caller, "type"));
  if (caller && !json_is_null(caller) && (!ct || strcmp(ct, "direct")))
    return api_bad(e, "messages", "'%s.caller' must be {\"type\": \"direct\"}: this server runs no server tools",
                   where);
  if (!strcmp(t, "text")) {
    const json_t *tx = json_object_get(b, "text");
    if (!json_is_string(tx)) return api_bad(e, "messages", "'%s.text' must be a string", where);
    return q35_buf_add(text, json_string_value(tx), json_string_length(tx));
  }
  if (!strcmp(t, "image"))
    return api_bad(e, "messages", "'%s' is an image block: this model file has no vision encoder", where);
  if (!strcmp(t, "document"))
    return api_bad(e, "messages", "'%s' is a document block: documents (PDF pages, or text with citations) are not "
                   "read here; send the text in a text block", where);
  if (!strcmp(t, "tool_result") && !asst) {
    const json_t *id = json_object_get(b, "tool_use_id");
    if (!json_is_string(id)) return api_bad(e, "messages", "'%s.tool_use_id' must be a string", where);
    q35_buf r = {0};
    if (json_is_true(json_object_get(b, "is_error"))) q35_buf_str(&r, "Error: ");
    if (result_text(json_object_get(b, "content"), where, &r, e)) {
      q35_buf_free(&r);
      return -1;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:O,s:s}", "role", "tool", "tool_call_id", id, "content",
                                          r.p ? r.p : ""));
    q35_buf_free(&r);
    return 0;
  }
  if (!strcmp(t, "tool_use") && asst) {
    const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
    if (!json_is_string(id) || !json_is_string(name) || !json_is_object(in))
      return api_bad(e, "messages", "'%s' needs a string id and name and an object input", where);
    char *args = json_dumps(in, JSON_COMPACT);
    json_t *calls = json_object_get(asst, "tool_calls");
    if (!calls) json_object_set_new(asst, "tool_calls", calls = json_array());
    json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name",
                                           name, "arguments", args ? args : "{}"));
    free(args);
    return 0;
  }
  if (!strcmp(t, "thinking") && asst) {
    const json_t *th = json_object_get(b, "thinking");
    if (!json_is_string(th)) return api_bad(e, "messages", "'%s.thinking' must be a string", where);
    return q35_buf_add(reasoning, json_string_value(th), json_string_length(th));
  }
  return api_bad(e, "messages", "'%s' is a '%s' block, which a%s turn cannot hold here (user: text, tool_result; "
                 "assistant: text, thinking, tool_use)", where, t, asst ? "n assistant" : " user");
}

/* messages[i] -> chat messages; the last one, when it is the assistant's, is the prefill. */
static int add_message(msg_req *q, const json_t *m, size_t i, int last, oai_error *e) {
  char where[48];
  snprintf(where, sizeof where, "messages[%zu]", i);
  const char *role = json_string_value(json_object_get(m, "role"));
  if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
    return api_bad(e, "messages", "'%s.role' must be user or assistant", where);
  const int asst = !strcmp(role, "assistant");
  static const char *const mkeys[] = {"role", "content", NULL};
  const char *u = api_unknown_key(m, mkeys);
  if (u) return api_bad(e, "messages", "'%s' has an unknown field '%s'", where, u);
  const json_t *ct = json_object_get(m, "content");
  json_t *am = asst ? json_pack("{s:s}", "role", "assistant") : NULL;
  q35_buf text = {0}, reasoning = {0};
  int rc = 0;
  if (json_is_string(ct)) q35_buf_add(&text, json_string_value(ct), json_string_length(ct));
  else if (!json_is_array(ct))
    rc = api_bad(e, "messages", "'%s.content' must be a string or an array of blocks", where);
  for (size_t k = 0; !rc && json_is_array(ct) && k < json_array_size(ct); k++) {
    char w2[96];
    snprintf(w2, sizeof w2, "%s.content[%zu]", where, k);
    rc = add_block(q->v.messages, am, json_array_get(ct, k), w2, &text, &reasoning, e);
  }
  if (!rc && asst && last && !json_object_get(am, "tool_calls")) {
    q->v.prefill = strdup(text.p ? text.p : ""); /* the reply continues this text */
  } else if (!rc && asst) {
    json_object_set_new(am, "content", json_string(text.p ? text.p : ""));
    if (reasoning.n) json_object_set_new(am, "reasoning_content", json_string(reasoning.p));
    json_array_append(q->v.messages, am);
  } else if (!rc && text.n) {
    json_array_append_new(q->v.messages, json_pack("{s:s,s:s}", "role", "user", "content", text.p));
  }
  json_decref(am);
  q35_buf_free(&text);
  q35_buf_free(&reasoning);
  return rc;
}

static int parse_system(const json_t *b, json_t *msgs, oai_error *e) {
  const json_t *s = json_object_get(b, "system");
  if (!s || json_is_null(s)) return 0;
  q35_buf t = {0};
  if (json_is_string(s)) q35_buf_str(&t, json_string_value(s));
  else if (json_is_array(s)) {
    for (size_t k = 0; k < json_array_size(s); k++) {
      const json_t *bl = json_array_get(s, k);
      const char *ty = json_string_value(json_object_get(bl, "type"));
      static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
      if (!ty || strcmp(ty, "text") || !json_is_string(json_object_get(bl, "text")) || api_unknown_key(bl, keys)) {
        q35_buf_free(&t);
        return api_bad(e, "system", "'system[%zu]' must be a text block", k);
      }
      if (t.n) q35_buf_str(&t, "\n\n");
      q35_buf_str(&t, json_string_value(json_object_get(bl, "text")));
    }
  } else {
    return api_bad(e, "system", "'system' must be a string or an array of text blocks");
  }
  json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", t.p ? t.p : ""));
  q35_buf_free(&t);
  return 0;
}

static int parse_tools(const json_t *b, msg_req *q, oai_error *e) {
  const json_t *tools = json_object_get(b, "tools");
  if (tools && !json_is_null(tools) && !json_is_array(tools)) return api_bad(e, "tools", "'tools' must be an array");
  json_t *out = json_array();
  for (size_t i = 0; tools && i < json_array_size(tools); i++) {
    const json_t *t = json_array_get(tools, i);
    const char *ty = json_string_value(json_object_get(t, "type"));
    if (ty && strcmp(ty, "custom"))
      return json_decref(out), api_bad(e, "tools", "'tools[%zu]' is the server tool '%s', which this server does not "
                                       "have; only client tools (name, description, input_schema) are available",
                                       i, ty);
    /* cache_control and eager_input_streaming (how the input is streamed) change no output;
     * defer_loading, allowed_callers other than direct and input_examples would: refused */
    static const char *const keys[] = {"type", "name", "description", "input_schema", "strict", "cache_control",
                                       "eager_input_streaming", "defer_loading", "allowed_callers", NULL};
    const char *u = api_unknown_key(t, keys);
    if (u)
      return json_decref(out), api_bad(e, "tools", "'tools[%zu]' has an unknown or unsupported field '%s'%s", i, u,
                                       strcmp(u, "input_examples") ? "" : " (the chat template has no place for them)");
    if (json_is_true(json_object_get(t, "defer_loading")))
      return json_decref(out), api_bad(e, "tools", "'tools[%zu].defer_loading': true needs a tool search tool, which "
                                       "this server does not have", i);
    const json_t *ac = json_object_get(t, "allowed_callers");
    for (size_t k = 0; ac && !json_is_null(ac) && k < (json_is_array(ac) ? json_array_size(ac) : 1); k++) {
      const char *c = json_string_value(json_array_get(ac, k));
      if (!c || strcmp(c, "direct"))
        return json_decref(out), api_bad(e, "tools", "'tools[%zu].allowed_callers' may only hold \"direct\": this "
                                         "server runs no code execution", i);
    }
    const json_t *st = json_object_get(t, "strict");
    if (st && !json_is_null(st) && !json_is_boolean(st))
      return json_decref(out), api_bad(e, "tools", "'tools[%zu].strict' must be a boolean", i);
    if (json_is_true(st)) q->con.strict_tools = 1;
    const json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
    if (!json_is_string(name) || !json_is_object(schema))
      return json_decref(out), api_bad(e, "tools", "'tools[%zu]' needs a string name and an object input_schema", i);
    json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
    if (json_is_true(st)) json_object_set_new(fn, "strict", json_true());
    if (json_is_string(json_object_get(t, "description")))
      json_object_set(fn, "description", json_object_get(t, "description"));
    json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
  }
  const json_t *tc = json_object_get(b, "tool_choice");
  int none = 0;
  if (tc && !json_is_null(tc)) {
    const char *ty = json_string_value(json_object_get(tc, "type"));
    const char *nm = json_string_value(json_object_get(tc, "name"));
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    const char *u = api_unknown_key(tc, keys);
    if (u) return json_decref(out), api_bad(e, "tool_choice", "'tool_choice' has an unknown field '%s'", u);
    if (ty && !strcmp(ty, "none")) none = 1;
    else if (ty && !strcmp(ty, "any")) q->con.tool_choice = OAI_TOOLS_REQUIRED;
    else if (ty && !strcmp(ty, "tool") && nm) {
      q->con.tool_choice = OAI_TOOLS_NAMED;
      q->con.tool_name = nm;
    } else if (!ty || strcmp(ty, "auto")) {
      json_decref(out);
      return api_bad(e, "tool_choice", "'tool_choice.type' must be auto, any, tool (with a name) or none");
    }
    int found = q->con.tool_choice != OAI_TOOLS_NAMED;
    for (size_t i = 0; !found && i < json_array_size(out); i++)
      found = !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(out, i), "function"), "name")),
                      nm);
    if (!found || (q->con.tool_choice == OAI_TOOLS_REQUIRED && !json_array_size(out))) {
      json_decref(out);
      return api_bad(e, "tool_choice", found ? "'tool_choice' any needs tools" : "'tool_choice' names a tool that is "
                                                                                "not in 'tools'");
    }
    if (json_is_true(json_object_get(tc, "disable_parallel_tool_use"))) q->v.max_calls = 1;
  }
  if (none || !json_array_size(out)) json_decref(out);
  else q->v.tools = out;
  if (none) q->con.strict_tools = 0;
  q->con.tools = q->v.tools;
  q->v.parse_tools = q->v.tools != NULL;
  return 0;
}

/* The smallest budget_tokens: Anthropic's, or (tests only, to make a short reasoning exceed it)
 * the integer in [1, 1024] in $Q35_TEST_MIN_THINK_BUDGET, read once. */
static long long min_budget = THINK_MIN_BUDGET;
static pthread_once_t min_budget_once = PTHREAD_ONCE_INIT;
static void min_budget_read(void) {
  const char *v = getenv(THINK_MIN_BUDGET_ENV);
  char *end = NULL;
  const long long t = v && *v ? strtoll(v, &end, 10) : 0;
  if (end && !*end && t >= 1 && t <= THINK_MIN_BUDGET) min_budget = t;
}
static long long think_min_budget(void) {
  pthread_once(&min_budget_once, min_budget_read);
  return min_budget;
}

/* The </think> token, or -1 when the vocabulary has no single one. */
static int32_t think_end_id(const oai_model *M) {
  q35_err err = {{0}};
  int32_t *t = NULL, n = 0;
  if (q35_tokenize(M->tok, "</think>", 8, &t, &n, &err)) return -1;
  const int32_t id = n == 1 ? t[0] : -1;
  free(t);
  return id;
}

/* thinking: {type: enabled, budget_tokens} sets j->think_budget (kept once the prompt is known
 * to open a reasoning block); the scheduler cuts the reasoning there with </think>. */
static int parse_thinking(const oai_model *M, const json_t *b, msg_req *q, long long max_tokens, oai_error *e) {
  q->v.think = M->no_think ? 0 : -1;
  const json_t *t = json_object_get(b, "thinking");
  if (!t || json_is_null(t)) return 0;
  const char *ty = json_string_value(json_object_get(t, "type"));
  static const char *const keys[] = {"type", "budget_tokens", "display", NULL};
  const char *u = api_unknown_key(t, keys);
  if (u || (ty && strcmp(ty, "enabled") && json_object_get(t, "budget_tokens")))
    return api_bad(e, "thinking", "'thinking' has an unknown field '%s'", u ? u : "budget_tokens");
  /* display: summarized (the default; q35 returns the reasoning itself, its own summary) or omitted
   * (thinking blocks with empty text), which q35 does not do */
  const json_t *disp = json_object_get(t, "display");
  if (disp && !json_is_null(disp) && (!json_is_string(disp) || strcmp(json_string_value(disp), "summarized")))
    return api_bad(e, "thinking.display", "'thinking.display' must be \"summarized\" (omitted is not available here)");
  if (ty && !strcmp(ty, "disabled")) q->v.think = 0;
  else if (ty && !strcmp(ty, "adaptive")) q->v.think = 1;
  else if (ty && !strcmp(ty, "enabled")) {
    long long budget = 0;
    const long long min = think_min_budget();
    if (api_int(t, "budget_tokens", "thinking.budget_tokens", min, INT32_MAX, &budget, e) <= 0)
      return api_bad(e, "thinking.budget_tokens", "'thinking.budget_tokens' must be an integer >= %lld", min);
    if (max_tokens > 0 && budget >= max_tokens)
      return api_bad(e, "thinking.budget_tokens", "'thinking.budget_tokens' must be less than max_tokens");
    q->v.think = 1;
    q->j->think_budget = (int32_t)budget;
    if ((q->j->think_end = think_end_id(M)) < 0)
      return api_bad(e, "thinking.budget_tokens",
                     "'thinking.budget_tokens' needs a single </think> token, which this model's vocabulary lacks");
  } else {
    return api_bad(e, "thinking", "'thinking.type' must be enabled, disabled or adaptive");
  }
  return 0;
}

/* Sampling: the request's, else the model card's defaults (oai_model.defaults). */
static int parse_sampling(const oai_model *M, const json_t *b, msg_req *q, oai_error *e) {
  q35_sampling *sp = &q->j->sp;
  *sp = M->defaults;
  double x;
  long long k;
  int rc;
  if ((rc = api_number(b, "temperature", "temperature", 0, 1, 0, &x, e)) < 0) return -1;
  if (rc) sp->temperature = (float)x;
  if ((rc = api_number(b, "top_p", "top_p", 0, 1, 1, &x, e)) < 0) return -1;
  if (rc) sp->top_p = (float)x;
  if ((rc = api_int(b, "top_k", "top_k", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) sp->top_k = (int32_t)k;
  sp->seed = q35_random_seed();
  const json_t *ss = json_object_get(b, "stop_sequences");
  if (ss && !json_is_null(ss)) {
    if (!json_is_array(ss) || json_array_size(ss) > SRV_MAX_STOP)
      return api_bad(e, "stop_sequences", "'stop_sequences' must be an array of at most %d strings", SRV_MAX_STOP);
    for (size_t i = 0; i < json_array_size(ss); i++) {
      const json_t *s = json_array_get(ss, i);
      if (!json_is_string(s) || !json_string_length(s))
        return api_bad(e, "stop_sequences", "'stop_sequences[%zu]' must be a non-empty string", i);
      q->j->stop[q->j->n_stop++] = strdup(json_string_value(s));
    }
  }
  const json_t *st = json_object_get(b, "stream");
  if (st && !json_is_null(st) && !json_is_boolean(st)) return api_bad(e, "stream", "'stream' must be a boolean");
  q->stream = json_is_true(st);
  const json_t *md = json_object_get(b, "metadata");
  if (md && !json_is_null(md)) {
    static const char *const mk[] = {"user_id", NULL};
    const json_t *u = json_object_get(md, "user_id");
    if (!json_is_object(md) || api_unknown_key(md, mk) || (u && !json_is_null(u) && !json_is_string(u)))
      return api_bad(e, "metadata", "'metadata' may only hold a string user_id");
  }
  const json_t *tier = json_object_get(b, "service_tier");
  if (tier && !json_is_null(tier) && !json_is_string(tier))
    return api_bad(e, "service_tier", "'service_tier' must be a string");
  return 0;
}

static const char *const create_keys[] = {"model", "max_tokens", "messages", "system", "metadata", "stop_sequences",
                                          "stream", "temperature", "top_p", "top_k", "tools", "tool_choice",
                                          "thinking", "service_tier", "cache_control", "output_config", NULL};
static const char *const count_keys[] = {"model", "messages", "system", "tools", "tool_choice", "thinking",
                                         "cache_control", "output_config", NULL};

/* output_config: format {type: json_schema, schema} constrains the answer text to the schema
 * (the reasoning stays free); effort other than high (the API's default) is refused: q35 has
 * no token-spending control besides thinking.budget_tokens. */
static int parse_output_config(const json_t *b, msg_req *q, oai_error *e) {
  const json_t *oc = json_object_get(b, "output_config");
  if (!oc || json_is_null(oc)) return 0;
  static const char *const keys[] = {"effort", "format", NULL}, *const fkeys[] = {"type", "schema", NULL};
  const char *u = json_is_object(oc) ? api_unknown_key(oc, keys) : "(not an object)";
  if (u) return api_bad(e, "output_config", "'output_config' has an unknown field '%s'", u);
  const json_t *ef = json_object_get(oc, "effort");
  if (ef && !json_is_null(ef) && (!json_is_string(ef) || strcmp(json_string_value(ef), "high")))
    return api_bad(e, "output_config.effort", "'output_config.effort' other than high is not available here (use "
                   "thinking.budget_tokens)");
  const json_t *f = json_object_get(oc, "format");
  if (!f || json_is_null(f)) return 0;
  const char *ty = json_string_value(json_object_get(f, "type"));
  const json_t *sc = json_object_get(f, "schema");
  if (!json_is_object(f) || api_unknown_key(f, fkeys) || !ty || strcmp(ty, "json_schema") || !json_is_object(sc))
    return api_bad(e, "output_config.format", "'output_config.format' must be {\"type\": \"json_schema\", "
                   "\"schema\": {...}}");
  q->con.kind = OAI_CONSTRAINT_JSON_SCHEMA;
  q->con.param = "output_config.format";
  q->con.schema = sc;
  q->con.schema_strict = 1;
  return 0;
}

static int parse_request(api_ctx *A, const char *sid, const json_t *b, int count, msg_req *q, oai_error *e) {
  const oai_model *M = A->M;
  /* refused when given; null is the same as absent (the API declares them nullable) */
  static const char *const null_ok[] = {"container", "diagnostics", "inference_geo", "speed", "thread", NULL};
  const char *bad = api_unknown_key_null(b, count ? count_keys : create_keys, null_ok);
  if (bad && !strcmp(bad, "thread")) { /* the beta's server-held conversations; the SDK reads this rejection */
    api_bad(e, bad, "'thread' (server-held message threads) is not available on this server: send the whole "
            "conversation each turn (the SDK's tool runner: pass thread: false, or unsupportedRequestBehavior: "
            "'continue_unthreaded')");
    e->code = "thread_unsupported_request";
    return -1;
  }
  if (bad) return api_bad(e, bad, "unknown or unsupported field '%s'", bad);
  const json_t *cc = json_object_get(b, "cache_control"); /* a cache hint: prefix reuse is automatic */
  static const char *const cck[] = {"type", "ttl", NULL};
  if (cc && !json_is_null(cc) &&
      (!json_is_object(cc) || api_unknown_key(cc, cck) || !json_is_string(json_object_get(cc, "type")) ||
       strcmp(json_string_value(json_object_get(cc, "type")), "ephemeral")))
    return api_bad(e, "cache_control", "'cache_control' must be {\"type\": \"ephemeral\", \"ttl\"?}");
  const json_t *model = json_object_get(b, "model");
  if (!json_is_string(model)) return api_bad(e, "model", "'model' is required (a string)");
  if (strcmp(json_string_value(model), M->id) && strcmp(json_string_value(model), M->stem))
    return api_bad(e, "model", "model '%s' is not served here; this server has '%s'", json_string_value(model), M->id);
  if (!(q->j = srv_job_new())) return api_bad(e, NULL, "out of memory");
  long long max_tokens = 0;
  if (!count) {
    if (api_int(b, "max_tokens", "max_tokens", 1, INT32_MAX, &max_tokens, e) <= 0)
      return api_bad(e, "max_tokens", "'max_tokens' is required (an integer >= 1)");
    q->j->max_tokens = (int32_t)max_tokens;
    if (parse_sampling(M, b, q, e)) return -1;
  }
  q->v.messages = json_array();
  if (parse_system(b, q->v.messages, e) || parse_tools(b, q, e) || parse_output_config(b, q, e) ||
      parse_thinking(M, b, q, max_tokens, e) || api_session(sid, q->j, e))
    return -1;
  const json_t *msgs = json_object_get(b, "messages");
  if (!json_is_array(msgs) || !json_array_size(msgs))
    return api_bad(e, "messages", "'messages' is required (a non-empty array)");
  for (size_t i = 0; i < json_array_size(msgs); i++)
    if (add_message(q, json_array_get(msgs, i), i, i + 1 == json_array_size(msgs), e)) return -1;
  q->v.count_only = count;
  if (api_conv_prompt(M, &q->v, q->j, e, "messages")) return -1;
  if (!q->v.in_think) q->j->think_budget = 0; /* no reasoning block to cut */
  if (!count && oai_constraint_build(M, &q->con, q->v.in_think, q->v.max_calls, q->j, e)) return -1;
  api_id(q->id, sizeof q->id, "msg_");
  return 0;
}

/* ---- output ---- */

/* A tool call as a tool_use block (input parsed back from the arguments JSON). */
static json_t *tool_use_block(const json_t *call, int with_input) {
  const json_t *fn = json_object_get(call, "function");
  const char *cid = json_string_value(json_object_get(call, "id"));
  char id[48];
  snprintf(id, sizeof id, "toolu_%s", cid && !strncmp(cid, "call_", 5) ? cid + 5 : "0");
  json_t *in = with_input ? json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL) : NULL;
  if (!json_is_object(in)) {
    json_decref(in);
    in = json_object();
  }
  return json_pack("{s:s,s:s,s:O,s:o}", "type", "tool_use", "id", id, "name", json_object_get(fn, "name"), "input", in);
}

static void collect_piece(void *cls, api_piece_kind kind, const char *text, const json_t *call) {
  json_t *content = cls;
  if (kind == API_REASONING)
    json_array_append_new(content, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", text, "signature", ""));
  else if (kind == API_TEXT) json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text", text));
  else json_array_append_new(content, tool_use_block(call, 1));
}

static json_t *usage_obj(const srv_job *j, int with_output) {
  json_t *u = json_pack("{s:I,s:i,s:I,s:s}", "input_tokens", (json_int_t)(j->n_prompt - j->cached_tokens),
                        "cache_creation_input_tokens", 0, "cache_read_input_tokens", (json_int_t)j->cached_tokens,
                        "service_tier", "standard");
  json_object_set_new(u, "output_tokens", json_integer(with_output ? j->completion_tokens : 0));
  return u;
}

/* stop_reason and stop_sequence of the finished generation. */
static const char *stop_reason(const msg_req *q, const api_gen *g, const char **seq) {
  *seq = NULL;
  const int si = api_gen_stop_index(g, q->A->M, q->j);
  if (si >= 0) {
    *seq = q->j->stop[si];
    return "stop_sequence";
  }
  if (g->finish && !strcmp(g->finish, "length")) /* max_tokens, or the context filled up first */
    return q->j->completion_tokens < q->j->max_tokens ? "model_context_window_exceeded" : "max_tokens";
  return g->n_calls ? "tool_use" : "end_turn";
}

/* ---- streaming ---- */

typedef struct msg_stream {
  msg_req *q;
  api_gen g;
  int n_blocks;          /* blocks started */
  int open;              /* the open text / thinking block's index, or -1 */
  api_piece_kind open_kind;
  q35_buf *out;
} msg_stream;

static void emit(msg_stream *st, const char *type, json_t *ev) {
  json_object_set_new(ev, "type", json_string(type));
  api_sse(st->out, type, ev);
}

static void close_block(msg_stream *st) {
  if (st->open < 0) return;
  emit(st, "content_block_stop", json_pack("{s:i}", "index", st->open));
  st->open = -1;
}

static void stream_piece(void *cls, api_piece_kind kind, const char *text, const json_t *call) {
  msg_stream *st = cls;
  if (kind == API_CALL) {
    close_block(st);
    const int ix = st->n_blocks++;
    emit(st, "content_block_start", json_pack("{s:i,s:o}", "index", ix, "content_block", tool_use_block(call, 0)));
    emit(st, "content_block_delta",
         json_pack("{s:i,s:{s:s,s:O}}", "index", ix, "delta", "type", "input_json_delta", "partial_json",
                   json_object_get(json_object_get(call, "function"), "arguments")));
    emit(st, "content_block_stop", json_pack("{s:i}", "index", ix));
    return;
  }
  const int r = kind == API_REASONING;
  if (st->open < 0 || st->open_kind != kind) {
    close_block(st);
    st->open = st->n_blocks++;
    st->open_kind = kind;
    json_t *blk = r ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "")
                    : json_pack("{s:s,s:s}", "type", "text", "text", "");
    emit(st, "content_block_start", json_pack("{s:i,s:o}", "index", st->open, "content_block", blk));
  }
  emit(st, "content_block_delta", json_pack("{s:i,s:{s:s,s:s}}", "index", st->open, "delta", "type",
                                            r ? "thinking_delta" : "text_delta", r ? "thinking" : "text", text));
}

static void st_start(void *cls, q35_buf *out) {
  msg_stream *st = cls;
  st->out = out;
  const msg_req *q = st->q;
  emit(st, "message_start",
       json_pack("{s:{s:s,s:s,s:s,s:[],s:s,s:n,s:n,s:o}}", "message", "id", q->id, "type", "message", "role",
                 "assistant", "content", "model", q->A->M->id, "stop_reason", "stop_sequence", "usage",
                 usage_obj(q->j, 0)));
  emit(st, "ping", json_object());
}

static void st_events(void *cls, const srv_event *e, q35_buf *out) {
  msg_stream *st = cls;
  st->out = out;
  api_gen_feed(&st->g, e, stream_piece, st);
}

static void st_end(void *cls, q35_buf *out) {
  msg_stream *st = cls;
  st->out = out;
  close_block(st);
  const srv_job *j = st->q->j;
  if (j->failed) {
    api_sse(out, "error", err_body((unsigned)j->status, j->errmsg));
    return;
  }
  const char *seq = NULL;
  const char *why = stop_reason(st->q, &st->g, &seq);
  emit(st, "message_delta", json_pack("{s:{s:s,s:s?},s:o}", "delta", "stop_reason", why, "stop_sequence", seq, "usage",
                                      usage_obj(j, 1)));
  emit(st, "message_stop", json_object());
}

static void st_release(void *cls) {
  msg_stream *st = cls;
  api_gen_free(&st->g);
  st->q->j = NULL; /* api_stream releases the job */
  req_free(st->q);
  free(st);
}

static const api_stream_ops msg_ops = {st_start, st_events, st_end, st_release};

/* ---- the endpoint ---- */

int api_messages_parse(api_ctx *A, const json_t *body, int count_only, const char *sid, srv_job **job, oai_error *e) {
  *job = NULL;
  msg_req *q = calloc(1, sizeof *q);
  if (!q) return api_bad(e, NULL, "out of memory");
  q->A = A;
  const int rc = parse_request(A, sid, body, count_only, q, e);
  *job = q->j;
  q->j = NULL;
  req_free(q);
  return rc;
}

enum MHD_Result api_messages(api_ctx *A, struct MHD_Connection *c, const json_t *body, int count_only) {
  msg_req *q = calloc(1, sizeof *q);
  if (!q) return api_anthropic_error(c, 503, "out of memory");
  q->A = A;
  oai_error e = {0};
  if (parse_request(A, api_session_header(c), body, count_only, q, &e)) {
    req_free(q);
    if (e.code && !strcmp(e.code, "thread_unsupported_request")) { /* error.details as the SDK's threads read it */
      json_t *o = http_anthropic_error_body(400, e.msg);
      json_object_set_new(json_object_get(o, "error"), "details",
                          json_pack("{s:s,s:[s]}", "error_code", e.code, "unsupported", "thread"));
      http_log_status(400, e.msg);
      return http_send_json(c, 400, o);
    }
    return api_anthropic_error(c, e.status ? e.status : 400, "%s", e.msg);
  }
  if (count_only) {
    json_t *o = json_pack("{s:I}", "input_tokens", (json_int_t)q->j->n_prompt);
    req_free(q);
    return http_send_json(c, 200, o);
  }
  char msg[512];
  const int st = srv_sched_submit(A->sched, q->j, msg, sizeof msg);
  if (st) {
    req_free(q);
    return api_anthropic_error(c, (unsigned)st, "%s", msg);
  }
  if (q->stream) {
    msg_stream *s = calloc(1, sizeof *s);
    if (!s || api_gen_init(&s->g, &q->v, 1)) {
      free(s);
      srv_job_cancel(A->sched, q->j);
      req_free(q);
      return api_anthropic_error(c, 503, "out of memory");
    }
    s->q = q;
    s->open = -1;
    return api_stream(A, c, q->j, &msg_ops, s);
  }
  api_gen g;
  enum MHD_Result rc = MHD_NO;
  if (api_gen_init(&g, &q->v, 0) == 0 && api_wait(A->sched, c, q->j, &g) == 0) {
    if (q->j->failed) {
      rc = api_anthropic_error(c, (unsigned)q->j->status, "%s", q->j->errmsg);
    } else {
      json_t *content = json_array();
      api_gen_final(&g, collect_piece, content);
      const char *seq = NULL;
      const char *why = stop_reason(q, &g, &seq);
      http_log_tokens(q->j->n_prompt, q->j->completion_tokens);
      rc = http_send_json(c, 200, json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:s?,s:o}", "id", q->id, "type", "message",
                                            "role", "assistant", "model", A->M->id, "content", content, "stop_reason",
                                            why, "stop_sequence", seq, "usage", usage_obj(q->j, 1)));
    }
  }
  api_gen_free(&g);
  req_free(q);
  return rc;
}
