/*
 * responses.c - POST /v1/responses, the OpenAI Responses API (see api.h).
 *
 * A request's `instructions` + `input` (a string, or items: messages, function_call,
 * function_call_output, reasoning) become the OpenAI chat messages chat completions renders;
 * with `previous_response_id` the stored conversation of that response comes first. The output
 * pieces (api_gen) become output items: a reasoning item (the text inside <think>), a message
 * with one output_text part, and a function_call item per tool call, in that order. Streams
 * send the documented event sequence, every event numbered by sequence_number:
 *   response.created, response.in_progress,
 *   per item: response.output_item.added, [response.content_part.added,
 *   response.output_text.delta... / response.reasoning_text.delta..., response.output_text.done /
 *   response.reasoning_text.done, response.content_part.done] or
 *   [response.function_call_arguments.delta, response.function_call_arguments.done],
 *   response.output_item.done;
 *   then response.completed, response.incomplete (max_output_tokens) or response.failed.
 *
 * The store: the last API_STORE_MAX responses made with store != false (within API_STORE_BYTES),
 * each with its whole conversation (instructions excluded, as the API documents), oldest
 * evicted first; an evicted or unknown id is a 404. Continuing a conversation renders the same
 * prefix again, so the scheduler's prefix reuse (anonymous slots, or the session_id header)
 * skips the part it has computed before. The store is this process's: behind a balancer the ids
 * carry the replica's name (--replica-id) so that a previous_response_id comes back here
 * (deploy/haproxy.cfg).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api.h"
#include "server/http.h"

/* ---- the store ---- */

typedef struct store_ent {
  char id[48];
  json_t *history;   /* the conversation up to and including this response's output */
  json_t *response;  /* the response object */
  size_t bytes;
} store_ent;

struct api_store {
  pthread_mutex_t mu;
  store_ent ent[API_STORE_MAX];
  int n;             /* entries, oldest first */
  size_t bytes;
};

api_store *api_store_new(void) {
  api_store *s = calloc(1, sizeof *s);
  if (s) pthread_mutex_init(&s->mu, NULL);
  return s;
}

static void ent_clear(store_ent *e) {
  json_decref(e->history);
  json_decref(e->response);
  memset(e, 0, sizeof *e);
}

void api_store_free(api_store *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) ent_clear(&s->ent[i]);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void store_drop(api_store *s, int i) {
  s->bytes -= s->ent[i].bytes;
  ent_clear(&s->ent[i]);
  memmove(&s->ent[i], &s->ent[i + 1], sizeof s->ent[0] * (size_t)(s->n - i - 1));
  s->n--;
  memset(&s->ent[s->n], 0, sizeof s->ent[0]);
}

static size_t json_bytes(const json_t *j) {
  char *t = json_dumps(j, JSON_COMPACT);
  size_t n = t ? strlen(t) : 0;
  free(t);
  return n;
}

/* Keep (id, history, response); takes both references. */
static void store_put(api_store *s, const char *id, json_t *history, json_t *response) {
  const size_t bytes = json_bytes(history) + json_bytes(response);
  pthread_mutex_lock(&s->mu);
  while (s->n > 0 && (s->n == API_STORE_MAX || s->bytes + bytes > API_STORE_BYTES)) store_drop(s, 0);
  if (bytes <= API_STORE_BYTES) {
    store_ent *e = &s->ent[s->n++];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->history = history;
    e->response = response;
    e->bytes = bytes;
    s->bytes += bytes;
    history = response = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  json_decref(history);
  json_decref(response);
}

static int store_find(api_store *s, const char *id) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->ent[i].id, id)) return i;
  return -1;
}

/* A deep copy of the stored history or response (which: 0 / 1), or NULL when unknown. */
static json_t *store_get(api_store *s, const char *id, int which) {
  pthread_mutex_lock(&s->mu);
  const int i = store_find(s, id);
  json_t *r = i < 0 ? NULL : json_deep_copy(which ? s->ent[i].response : s->ent[i].history);
  pthread_mutex_unlock(&s->mu);
  return r;
}

enum MHD_Result api_response_get(api_ctx *A, struct MHD_Connection *c, const char *method, const char *id) {
  if (strchr(id, '/') || !*id)
    return http_send_error(c, 404, NULL, "no endpoint %s /v1/responses/%s (this server has GET and DELETE "
                           "/v1/responses/{id})", method, id);
  if (!strcmp(method, "GET")) {
    /* the query of the API's retrieve: stream / starting_after replay a background response,
     * which this server does not run; include adds output this server does not have */
    static const char *const args[] = {"stream", "starting_after", "include", "include[]", "include_obfuscation", NULL};
    const char *u = http_query_unknown(c, args);
    if (u) return http_send_error(c, 400, u, "unknown query parameter '%s'", u);
    const char *st = http_query(c, "stream");
    if ((st && strcmp(st, "false")) || http_query(c, "starting_after"))
      return http_send_error(c, 400, st ? "stream" : "starting_after", "streaming a stored response (stream, "
                             "starting_after) is for background responses, which this server does not run; GET "
                             "/v1/responses/{id} without them returns it whole");
    if (http_query(c, "include") || http_query(c, "include[]"))
      return http_send_error(c, 400, "include", "'include' must be empty: this server has no extra output to include");
    json_t *r = store_get(A->store, id, 1);
    if (!r) return http_send_error(c, 404, NULL, "no stored response '%s'", id);
    return http_send_json(c, 200, r);
  }
  if (strcmp(method, "DELETE")) return http_send_error(c, 405, NULL, "use GET or DELETE /v1/responses/{id}");
  pthread_mutex_lock(&A->store->mu);
  const int i = store_find(A->store, id);
  if (i >= 0) store_drop(A->store, i);
  pthread_mutex_unlock(&A->store->mu);
  if (i < 0) return http_send_error(c, 404, NULL, "no stored response '%s'", id);
  return http_send_json(c, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1));
}

/* ---- the request ---- */

typedef struct rsp_req {
  api_conv v;
  srv_job *j;
  json_t *history;   /* the conversation without instructions (what the store keeps) */
  json_t *echo;      /* the request fields the response object repeats */
  char id[48];
  long created;
  int stream, store;
  api_ctx *A;
  oai_constraint con; /* text.format, a forced or strict tool call (openai_constraint.c) */
} rsp_req;

static void req_free(rsp_req *q) {
  api_conv_free(&q->v);
  json_decref(q->history);
  json_decref(q->echo);
  if (q->j) srv_job_release(q->A->sched, q->j);
  free(q);
}

/* The text of a content array (parts with "text"); images, files and audio are refused. */
static int parts_text(const json_t *content, const char *where, q35_buf *out, oai_error *e) {
  if (json_is_string(content)) return q35_buf_add(out, json_string_value(content), json_string_length(content));
  if (!json_is_array(content)) return api_bad(e, "input", "'%s' must be a string or an array of parts", where);
  for (size_t k = 0; k < json_array_size(content); k++) {
    const json_t *p = json_array_get(content, k);
    const char *t = json_string_value(json_object_get(p, "type"));
    if (!t) return api_bad(e, "input", "'%s[%zu].type' must be a string", where, k);
    if (!strcmp(t, "input_image") || !strcmp(t, "input_audio"))
      return api_bad(e, "input", "'%s[%zu]' is an %s part: this model file has no vision/audio encoder", where, k, t);
    if (!strcmp(t, "input_file"))
      return api_bad(e, "input", "'%s[%zu]' is an input_file part: files (PDF pages, images) are not read here; send "
                     "the text as input_text", where, k);
    if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "refusal") && strcmp(t, "text"))
      return api_bad(e, "input", "'%s[%zu].type' is '%s'; this server reads input_text / output_text parts", where,
                     k, t);
    /* an output_text's annotations and logprobs describe an earlier answer, an input_text's
     * prompt_cache_breakpoint is a cache hint (prefix reuse is automatic): not part of the prompt */
    static const char *const tkeys[] = {"type", "text", "annotations", "logprobs", "prompt_cache_breakpoint", NULL};
    static const char *const rkeys[] = {"type", "refusal", NULL};
    const char *u = api_unknown_key(p, strcmp(t, "refusal") ? tkeys : rkeys);
    if (u) return api_bad(e, "input", "'%s[%zu]' has an unknown field '%s'", where, k, u);
    const json_t *tx = json_object_get(p, strcmp(t, "refusal") ? "text" : "refusal");
    if (!json_is_string(tx)) return api_bad(e, "input", "'%s[%zu]' has no text", where, k);
    q35_buf_add(out, json_string_value(tx), json_string_length(tx));
  }
  return 0;
}

/* The last message when it is an assistant turn that may take more (text, tool calls). */
static json_t *open_assistant(json_t *msgs, int want_new) {
  json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
  if (!want_new && last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) return last;
  json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
  json_array_append_new(msgs, m);
  return m;
}

static int item_message(json_t *msgs, const json_t *it, const char *where, char **reasoning, oai_error *e) {
  static const char *const keys[] = {"type", "role", "content", "id", "status", "phase", NULL};
  const char *bad = api_unknown_key(it, keys);
  if (bad) return api_bad(e, "input", "'%s' has an unknown field '%s'", where, bad);
  const char *role = json_string_value(json_object_get(it, "role"));
  if (!role ||
      (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
    return api_bad(e, "input", "'%s.role' must be user, assistant, system or developer", where);
  q35_buf t = {0};
  char w2[128];
  snprintf(w2, sizeof w2, "%s.content", where);
  if (parts_text(json_object_get(it, "content"), w2, &t, e)) {
    q35_buf_free(&t);
    return -1;
  }
  if (!strcmp(role, "assistant")) {
    json_t *m = open_assistant(msgs, 1);
    json_object_set_new(m, "content", json_string(t.p ? t.p : ""));
    if (*reasoning) json_object_set_new(m, "reasoning_content", json_string(*reasoning));
    free(*reasoning);
    *reasoning = NULL;
  } else {
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", strcmp(role, "developer") ? role : "system", "content",
                                          t.p ? t.p : ""));
  }
  q35_buf_free(&t);
  return 0;
}

static int item_call(json_t *msgs, const json_t *it, const char *where, char **reasoning, oai_error *e) {
  static const char *const keys[] = {"type", "id", "call_id", "name", "arguments", "status", "namespace", NULL};
  const char *bad = api_unknown_key(it, keys);
  if (bad) return api_bad(e, "input", "'%s' has an unknown field '%s'", where, bad);
  const json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
               *args = json_object_get(it, "arguments");
  if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args))
    return api_bad(e, "input", "'%s' needs string call_id, name and arguments", where);
  json_t *m = open_assistant(msgs, *reasoning != NULL);
  if (*reasoning) json_object_set_new(m, "reasoning_content", json_string(*reasoning));
  free(*reasoning);
  *reasoning = NULL;
  json_t *calls = json_object_get(m, "tool_calls");
  if (!calls) json_object_set_new(m, "tool_calls", calls = json_array());
  json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function", "name",
                                         name, "arguments", args));
  return 0;
}

static int item_output(json_t *msgs, const json_t *it, const char *where, oai_error *e) {
  static const char *const keys[] = {"type", "id", "call_id", "output", "status", NULL};
  const char *bad = api_unknown_key(it, keys);
  if (bad) return api_bad(e, "input", "'%s' has an unknown field '%s'", where, bad);
  const json_t *cid = json_object_get(it, "call_id");
  if (!json_is_string(cid)) return api_bad(e, "input", "'%s.call_id' must be a string", where);
  q35_buf t = {0};
  char w2[128];
  snprintf(w2, sizeof w2, "%s.output", where);
  if (parts_text(json_object_get(it, "output"), w2, &t, e)) {
    q35_buf_free(&t);
    return -1;
  }
  json_array_append_new(msgs, json_pack("{s:s,s:O,s:s}", "role", "tool", "tool_call_id", cid, "content",
                                        t.p ? t.p : ""));
  q35_buf_free(&t);
  return 0;
}

/* A reasoning item: its text is kept for the assistant turn that follows. */
static int item_reasoning(const json_t *it, const char *where, char **reasoning, oai_error *e) {
  static const char *const keys[] = {"type", "id", "summary", "content", "encrypted_content", "status", NULL};
  const char *bad = api_unknown_key(it, keys);
  if (bad) return api_bad(e, "input", "'%s' has an unknown field '%s'", where, bad);
  const json_t *enc = json_object_get(it, "encrypted_content");
  if (enc && !json_is_null(enc))
    return api_bad(e, "input", "'%s.encrypted_content': this server neither makes nor reads encrypted reasoning",
                   where);
  const json_t *parts = json_object_get(it, "content");
  if (!json_is_array(parts) || !json_array_size(parts)) parts = json_object_get(it, "summary");
  q35_buf t = {0};
  for (size_t k = 0; json_is_array(parts) && k < json_array_size(parts); k++) {
    const json_t *tx = json_object_get(json_array_get(parts, k), "text");
    if (!json_is_string(tx)) {
      q35_buf_free(&t);
      return api_bad(e, "input", "'%s' parts need a text", where);
    }
    if (t.n) q35_buf_str(&t, "\n\n");
    q35_buf_add(&t, json_string_value(tx), json_string_length(tx));
  }
  free(*reasoning);
  *reasoning = strdup(t.p ? t.p : "");
  q35_buf_free(&t);
  return 0;
}

/* input (a string or items) appended to msgs as chat messages. */
static int add_input(json_t *msgs, const json_t *input, oai_error *e) {
  if (json_is_string(input)) {
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
    return 0;
  }
  if (!json_is_array(input)) return api_bad(e, "input", "'input' must be a string or an array of items");
  char *reasoning = NULL;
  int rc = 0;
  for (size_t i = 0; i < json_array_size(input) && !rc; i++) {
    const json_t *it = json_array_get(input, i);
    char where[48];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(it)) {
      rc = api_bad(e, "input", "'%s' must be an object", where);
      break;
    }
    const json_t *ty = json_object_get(it, "type");
    const char *t = ty ? json_string_value(ty) : "message";
    if (!t) rc = api_bad(e, "input", "'%s.type' must be a string", where);
    else if (!strcmp(t, "message")) rc = item_message(msgs, it, where, &reasoning, e);
    else if (!strcmp(t, "function_call")) rc = item_call(msgs, it, where, &reasoning, e);
    else if (!strcmp(t, "function_call_output")) rc = item_output(msgs, it, where, e);
    else if (!strcmp(t, "reasoning")) rc = item_reasoning(it, where, &reasoning, e);
    else
      rc = api_bad(e, "input", "'%s.type' is '%s'; this server reads message, function_call, function_call_output "
                   "and reasoning items", where, t);
  }
  free(reasoning);
  return rc;
}

/* tools (function tools only) -> chat tools; tool_choice none / auto. */
static int parse_tools(const json_t *b, rsp_req *q, oai_error *e) {
  const json_t *tools = json_object_get(b, "tools");
  if (tools && !json_is_null(tools) && !json_is_array(tools)) return api_bad(e, "tools", "'tools' must be an array");
  json_t *out = json_array();
  for (size_t i = 0; tools && i < json_array_size(tools); i++) {
    const json_t *t = json_array_get(tools, i);
    const char *ty = json_string_value(json_object_get(t, "type"));
    if (!ty) return json_decref(out), api_bad(e, "tools", "'tools[%zu].type' must be a string", i);
    if (strcmp(ty, "function"))
      return json_decref(out), api_bad(e, "tools", "'tools[%zu]' is the built-in tool '%s', which this server does not "
                                       "have; only function tools are available", i, ty);
    static const char *const keys[] = {"type", "name", "description", "parameters", "strict", NULL};
    const char *bad = api_unknown_key(t, keys);
    if (bad) return json_decref(out), api_bad(e, "tools", "'tools[%zu]' has an unknown field '%s'", i, bad);
    const json_t *st = json_object_get(t, "strict");
    if (st && !json_is_null(st) && !json_is_boolean(st))
      return json_decref(out), api_bad(e, "tools", "'tools[%zu].strict' must be a boolean", i);
    if (json_is_true(st)) q->con.strict_tools = 1;
    const json_t *name = json_object_get(t, "name");
    if (!json_is_string(name)) return json_decref(out), api_bad(e, "tools", "'tools[%zu].name' must be a string", i);
    json_t *fn = json_pack("{s:O}", "name", name);
    const json_t *d = json_object_get(t, "description"), *p = json_object_get(t, "parameters");
    if (json_is_string(d)) json_object_set(fn, "description", (json_t *)d);
    if (json_is_object(p)) json_object_set(fn, "parameters", (json_t *)p);
    if (json_is_true(st)) json_object_set_new(fn, "strict", json_true());
    json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
  }
  const json_t *tc = json_object_get(b, "tool_choice");
  int none = 0;
  if (tc && !json_is_null(tc)) {
    const char *s = json_string_value(tc);
    const char *ty = json_string_value(json_object_get(tc, "type"));
    const char *nm = json_string_value(json_object_get(tc, "name"));
    static const char *const keys[] = {"type", "name", NULL};
    const char *u = s ? NULL : api_unknown_key(tc, keys);
    if (u && ty && !strcmp(ty, "function"))
      return json_decref(out), api_bad(e, "tool_choice", "'tool_choice' has an unknown field '%s'", u);
    if (s && !strcmp(s, "none")) none = 1;
    else if (s && !strcmp(s, "required")) q->con.tool_choice = OAI_TOOLS_REQUIRED;
    else if (!s && ty && !strcmp(ty, "function") && nm) {
      q->con.tool_choice = OAI_TOOLS_NAMED;
      q->con.tool_name = nm;
    } else if (!s || strcmp(s, "auto")) {
      json_decref(out);
      return api_bad(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                     "\"function\", \"name\"} (allowed_tools and built-in tool choices are not available here)");
    }
  }
  int found = q->con.tool_choice != OAI_TOOLS_NAMED;
  for (size_t i = 0; !found && i < json_array_size(out); i++)
    found = !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(out, i), "function"), "name")),
                    q->con.tool_name);
  if (!found || (q->con.tool_choice == OAI_TOOLS_REQUIRED && !json_array_size(out))) {
    json_decref(out);
    return api_bad(e, "tool_choice", found ? "'tool_choice' required needs tools"
                                           : "'tool_choice' names a function that is not in 'tools'");
  }
  if (none || !json_array_size(out)) json_decref(out);
  else q->v.tools = out;
  if (none) q->con.strict_tools = 0;
  q->con.tools = q->v.tools;
  q->v.parse_tools = q->v.tools != NULL;
  return 0;
}

static int parse_reasoning(const oai_model *M, const json_t *b, rsp_req *q, oai_error *e) {
  q->v.think = M->no_think ? 0 : -1;
  const json_t *r = json_object_get(b, "reasoning");
  if (!r || json_is_null(r)) return 0;
  if (!json_is_object(r)) return api_bad(e, "reasoning", "'reasoning' must be an object");
  static const char *const keys[] = {"effort", "summary", "generate_summary", NULL};
  const char *bad = api_unknown_key(r, keys);
  if (bad) return api_bad(e, "reasoning", "'reasoning' has an unknown field '%s'", bad);
  const json_t *ef = json_object_get(r, "effort");
  if (ef && !json_is_null(ef)) {
    const char *s = json_string_value(ef);
    if (s && (!strcmp(s, "none") || !strcmp(s, "minimal"))) q->v.think = 0;
    else if (s && (!strcmp(s, "low") || !strcmp(s, "medium") || !strcmp(s, "high") || !strcmp(s, "xhigh")))
      q->v.think = 1;
    else return api_bad(e, "reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium, high or xhigh");
  }
  return 0;
}

/* text.format: text, json_object, or json_schema {name, schema, strict?, description?}. */
static int parse_text(const json_t *b, rsp_req *q, oai_error *e) {
  const json_t *t = json_object_get(b, "text");
  if (!t || json_is_null(t)) return 0;
  if (!json_is_object(t)) return api_bad(e, "text", "'text' must be an object");
  static const char *const keys[] = {"format", "verbosity", NULL};
  const char *bad = api_unknown_key(t, keys);
  if (bad) return api_bad(e, "text", "'text' has an unknown field '%s'", bad);
  const json_t *f = json_object_get(t, "format");
  const char *ty = json_string_value(json_object_get(f, "type"));
  if (f && !json_is_null(f) && !ty) return api_bad(e, "text.format", "'text.format' must be an object with a type");
  if (ty && !strcmp(ty, "json_object")) {
    q->con.kind = OAI_CONSTRAINT_JSON_OBJECT;
    q->con.param = "text.format";
  } else if (ty && !strcmp(ty, "json_schema")) {
    static const char *const fkeys[] = {"type", "name", "schema", "strict", "description", NULL};
    const char *fb = api_unknown_key(f, fkeys);
    if (fb) return api_bad(e, "text.format", "'text.format' has an unknown field '%s'", fb);
    const json_t *sc = json_object_get(f, "schema");
    if (!json_is_string(json_object_get(f, "name")) || !(json_is_object(sc) || json_is_boolean(sc)))
      return api_bad(e, "text.format", "'text.format' json_schema needs a 'name' and a 'schema' object");
    q->con.kind = OAI_CONSTRAINT_JSON_SCHEMA;
    q->con.param = "text.format";
    q->con.schema = sc;
    q->con.schema_strict = json_is_true(json_object_get(f, "strict"));
  } else if (ty && strcmp(ty, "text")) {
    return api_bad(e, "text.format", "'text.format.type' is '%s'; it must be text, json_object or json_schema", ty);
  }
  const json_t *vb = json_object_get(t, "verbosity");
  if (vb && !json_is_null(vb) && (!json_is_string(vb) || strcmp(json_string_value(vb), "medium")))
    return api_bad(e, "text.verbosity", "'text.verbosity' other than medium is not available on this server");
  return 0;
}

/* Sampling, limits and the metadata-only fields; the response repeats them (q->echo). */
static int parse_settings(const oai_model *M, const json_t *b, rsp_req *q, oai_error *e) {
  q35_sampling *sp = &q->j->sp;
  *sp = M->defaults; /* what the request leaves unset: the model card's defaults */
  double x;
  long long k;
  int rc;
  if ((rc = api_number(b, "temperature", "temperature", 0, 2, 0, &x, e)) < 0) return -1;
  if (rc) sp->temperature = (float)x;
  if ((rc = api_number(b, "top_p", "top_p", 0, 1, 1, &x, e)) < 0) return -1;
  if (rc) sp->top_p = (float)x;
  if ((rc = api_int(b, "top_k", "top_k", -1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) sp->top_k = (int32_t)k;
  if ((rc = api_int(b, "seed", "seed", 0, INT64_MAX, &k, e)) < 0) return -1;
  sp->seed = rc ? (uint64_t)k : q35_random_seed();
  if ((rc = api_int(b, "max_output_tokens", "max_output_tokens", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) q->j->max_tokens = (int32_t)k;
  if ((rc = api_int(b, "max_tool_calls", "max_tool_calls", 1, INT32_MAX, &k, e)) < 0) return -1;
  if (rc) q->v.max_calls = (int)k;
  if (json_is_false(json_object_get(b, "parallel_tool_calls"))) q->v.max_calls = 1;
  static const char *const bools[] = {"stream", "store", "parallel_tool_calls", "background", NULL};
  for (const char *const *p = bools; *p; p++) {
    const json_t *v = json_object_get(b, *p);
    if (v && !json_is_null(v) && !json_is_boolean(v)) return api_bad(e, *p, "'%s' must be a boolean", *p);
  }
  q->stream = json_is_true(json_object_get(b, "stream"));
  q->store = !json_is_false(json_object_get(b, "store"));
  if (json_is_true(json_object_get(b, "background")))
    return api_bad(e, "background", "'background': true is not available; this server answers in the request");
  const json_t *md = json_object_get(b, "metadata");
  if (md && !json_is_null(md)) {
    if (!json_is_object(md) || json_object_size(md) > 16)
      return api_bad(e, "metadata", "'metadata' must be an object of at most 16 string values");
    const char *mk;
    const json_t *mv;
    json_object_foreach((json_t *)md, mk, mv) if (!json_is_string(mv) || strlen(mk) > 64 ||
                                                   json_string_length(mv) > 512)
        return api_bad(e, "metadata", "'metadata.%s' must be a string of at most 512 characters (keys at most 64)", mk);
  }
  static const char *const strs[] = {"user",         "safety_identifier",    "prompt_cache_key",
                                     "instructions", "previous_response_id", "prompt_cache_retention", NULL};
  for (const char *const *p = strs; *p; p++) {
    const json_t *v = json_object_get(b, *p);
    if (v && !json_is_null(v) && !json_is_string(v)) return api_bad(e, *p, "'%s' must be a string", *p);
  }
  const json_t *pco = json_object_get(b, "prompt_cache_options"); /* cache hints: prefix reuse is automatic */
  static const char *const pkeys[] = {"mode", "ttl", NULL};
  if (pco && !json_is_null(pco) && (!json_is_object(pco) || api_unknown_key(pco, pkeys)))
    return api_bad(e, "prompt_cache_options", "'prompt_cache_options' must be an object {mode, ttl}");
  const json_t *tr = json_object_get(b, "truncation");
  if (tr && !json_is_null(tr) && (!json_is_string(tr) || strcmp(json_string_value(tr), "disabled")))
    return api_bad(e, "truncation", "'truncation' must be \"disabled\": this server never drops input items");
  const json_t *st = json_object_get(b, "service_tier");
  if (st && !json_is_null(st) && !json_is_string(st))
    return api_bad(e, "service_tier", "'service_tier' must be a string");
  const json_t *inc = json_object_get(b, "include");
  if (inc && !json_is_null(inc) && (!json_is_array(inc) || json_array_size(inc)))
    return api_bad(e, "include", "'include' must be empty: this server has no extra output to include");
  const json_t *tl = json_object_get(b, "top_logprobs");
  if (tl && !json_is_null(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
    return api_bad(e, "top_logprobs", "'top_logprobs' is not available on /v1/responses; use /v1/chat/completions");
  const json_t *so = json_object_get(b, "stream_options");
  if (so && !json_is_null(so)) {
    static const char *const sok[] = {"include_obfuscation", NULL};
    if (!json_is_object(so) || api_unknown_key(so, sok))
      return api_bad(e, "stream_options", "'stream_options' may only hold include_obfuscation");
  }
  const json_t *rs = json_object_get(b, "reasoning");
  q->echo = json_pack("{s:O?,s:O?,s:s,s:b,s:O?,s:{s:O?,s:O?},s:b,s:f,s:{s:{s:s},s:s},s:O?,s:f,s:s,s:O?,s:O?,s:s,s:b}",
                      "instructions", json_object_get(b, "instructions"), "max_output_tokens",
                      json_object_get(b, "max_output_tokens"), "model", M->id, "parallel_tool_calls",
                      !json_is_false(json_object_get(b, "parallel_tool_calls")), "previous_response_id",
                      json_object_get(b, "previous_response_id"), "reasoning", "effort",
                      json_object_get(rs, "effort"), "summary", json_object_get(rs, "summary"), "store", q->store,
                      "temperature", (double)sp->temperature, "text", "format", "type", "text", "verbosity", "medium",
                      "tool_choice", json_object_get(b, "tool_choice"), "top_p", (double)sp->top_p, "truncation",
                      "disabled", "user", json_object_get(b, "user"), "metadata", md && !json_is_null(md) ? md : NULL,
                      "service_tier", "default", "background", 0);
  if (!q->echo) return api_bad(e, NULL, "out of memory");
  if (json_is_null(json_object_get(q->echo, "tool_choice")))
    json_object_set_new(q->echo, "tool_choice", json_string("auto"));
  if (json_is_null(json_object_get(q->echo, "metadata"))) json_object_set_new(q->echo, "metadata", json_object());
  const json_t *tools = json_object_get(b, "tools");
  json_object_set_new(q->echo, "tools", json_is_array(tools) ? json_incref((json_t *)tools) : json_array());
  return 0;
}

static const char *const rsp_keys[] = {
    "model", "input", "instructions", "tools", "tool_choice", "reasoning", "max_output_tokens", "temperature", "top_p",
    "top_k", "seed", "text", "stream", "stream_options", "previous_response_id", "store", "metadata", "user",
    "parallel_tool_calls", "max_tool_calls", "truncation", "service_tier", "include", "background",
    "prompt_cache_key", "safety_identifier", "top_logprobs", "prompt_cache_retention", "prompt_cache_options", NULL};

/* The whole request: fields, conversation, prompt. 0, or -1 with e filled (404 for an unknown
 * previous_response_id). */
static int parse_request(api_ctx *A, const char *sid, const json_t *b, int count, rsp_req *q, oai_error *e) {
  const oai_model *M = A->M;
  /* refused below when given; null is the same as absent (the API declares them nullable) */
  static const char *const null_ok[] = {"conversation", "prompt", "context_management", "moderation", NULL};
  const char *bad = api_unknown_key_null(b, rsp_keys, null_ok);
  if (bad) {
    if (!strcmp(bad, "conversation"))
      return api_bad(e, bad, "'conversation' is not available: this server keeps responses, not conversations; use "
                     "previous_response_id");
    if (!strcmp(bad, "prompt")) return api_bad(e, bad, "'prompt' (stored prompt templates) is not available here");
    return api_bad(e, bad, "unknown field '%s'", bad);
  }
  const json_t *model = json_object_get(b, "model");
  if (model && !json_is_null(model) &&
      (!json_is_string(model) ||
       (strcmp(json_string_value(model), M->id) && strcmp(json_string_value(model), M->stem))))
    return api_bad(e, "model", "model '%s' is not served here; this server has '%s'",
                   json_is_string(model) ? json_string_value(model) : "?", M->id);
  if (!(q->j = srv_job_new())) return api_bad(e, NULL, "out of memory");
  if (parse_settings(M, b, q, e) || parse_tools(b, q, e) || parse_reasoning(M, b, q, e) || parse_text(b, q, e) ||
      api_session(sid, q->j, e))
    return -1;
  const char *prev = json_string_value(json_object_get(b, "previous_response_id"));
  q->history = prev ? store_get(A->store, prev, 0) : json_array();
  if (!q->history) {
    api_bad(e, "previous_response_id", "previous response '%s' is not stored here (unknown, made with store: false, "
            "or evicted: this server keeps the last %d)", prev, API_STORE_MAX);
    e->status = 404;
    return -1;
  }
  const json_t *input = json_object_get(b, "input");
  if (!input) return api_bad(e, "input", "'input' is required");
  if (add_input(q->history, input, e)) return -1;
  const char *ins = json_string_value(json_object_get(b, "instructions"));
  q->v.messages = json_deep_copy(q->history);
  if (ins) { /* the system message: instructions, then a leading system / developer message of the input */
    json_t *first = json_array_get(q->v.messages, 0);
    const char *sys = first && !strcmp(json_string_value(json_object_get(first, "role")), "system")
                          ? json_string_value(json_object_get(first, "content"))
                          : NULL;
    q35_buf t = {0};
    q35_buf_str(&t, ins);
    if (sys && *sys) {
      q35_buf_str(&t, "\n\n");
      q35_buf_str(&t, sys);
    }
    if (sys) json_array_remove(q->v.messages, 0);
    json_array_insert_new(q->v.messages, 0, json_pack("{s:s,s:s}", "role", "system", "content", t.p ? t.p : ""));
    q35_buf_free(&t);
  }
  const json_t *fmt = json_object_get(json_object_get(b, "text"), "format");
  if (json_is_object(fmt)) json_object_set_new(json_object_get(q->echo, "text"), "format", json_deep_copy(fmt));
  q->v.count_only = count;
  if (api_conv_prompt(M, &q->v, q->j, e, "input") ||
      oai_constraint_build(M, &q->con, q->v.in_think, q->v.max_calls, q->j, e))
    return -1;
  if (A->replica) { /* the balancer routes previous_response_id back here by this name */
    char pre[sizeof q->id];
    snprintf(pre, sizeof pre, "resp_%s_", A->replica);
    api_id(q->id, sizeof q->id, pre);
  } else {
    api_id(q->id, sizeof q->id, "resp_");
  }
  q->created = (long)time(NULL);
  return 0;
}

/* ---- output items ---- */

static json_t *text_part(const char *text) {
  return json_pack("{s:s,s:s,s:[],s:[]}", "type", "output_text", "text", text, "annotations", "logprobs");
}

static json_t *reasoning_part(const char *text) {
  return json_pack("{s:s,s:s}", "type", "reasoning_text", "text", text);
}

static json_t *new_item(api_piece_kind kind, const json_t *call) {
  char id[40];
  if (kind == API_REASONING) {
    api_id(id, sizeof id, "rs_");
    return json_pack("{s:s,s:s,s:[],s:[],s:s}", "id", id, "type", "reasoning", "summary", "content", "status",
                     "in_progress");
  }
  if (kind == API_TEXT) {
    api_id(id, sizeof id, "msg_");
    return json_pack("{s:s,s:s,s:s,s:s,s:[]}", "id", id, "type", "message", "status", "in_progress", "role",
                     "assistant", "content");
  }
  api_id(id, sizeof id, "fc_");
  const json_t *fn = json_object_get(call, "function");
  return json_pack("{s:s,s:s,s:s,s:s,s:O,s:O}", "id", id, "type", "function_call", "status", "in_progress", "arguments",
                   "", "call_id", json_object_get(call, "id"), "name", json_object_get(fn, "name"));
}

/* Non-streamed: one piece -> one finished item. */
static void collect_piece(void *cls, api_piece_kind kind, const char *text, const json_t *call) {
  json_t *out = cls;
  json_t *it = new_item(kind, call);
  if (kind == API_REASONING) json_array_append_new(json_object_get(it, "content"), reasoning_part(text));
  else if (kind == API_TEXT) json_array_append_new(json_object_get(it, "content"), text_part(text));
  else json_object_set(it, "arguments", json_object_get(json_object_get(call, "function"), "arguments"));
  json_object_set_new(it, "status", json_string("completed"));
  json_array_append_new(out, it);
}

/* The output items as the assistant turn of the stored conversation. */
static json_t *output_message(const json_t *output) {
  json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
  q35_buf text = {0}, reasoning = {0};
  json_t *calls = json_array();
  size_t i;
  json_t *it;
  json_array_foreach((json_t *)output, i, it) {
    const char *ty = json_string_value(json_object_get(it, "type"));
    const json_t *part = json_array_get(json_object_get(it, "content"), 0);
    const char *tx = json_string_value(json_object_get(part, "text"));
    if (!strcmp(ty, "reasoning") && tx) q35_buf_str(&reasoning, tx);
    else if (!strcmp(ty, "message") && tx) q35_buf_str(&text, tx);
    else if (!strcmp(ty, "function_call"))
      json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"), "type",
                                             "function", "function", "name", json_object_get(it, "name"),
                                             "arguments", json_object_get(it, "arguments")));
  }
  json_object_set_new(m, "content", json_string(text.p ? text.p : ""));
  if (reasoning.n) json_object_set_new(m, "reasoning_content", json_string(reasoning.p));
  if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
  json_decref(calls);
  q35_buf_free(&text);
  q35_buf_free(&reasoning);
  return m;
}

/* Generated tokens up to and including the end of the reasoning. */
static int32_t reasoning_tokens(const rsp_req *q, const api_gen *g, const json_t *output) {
  const json_t *first = json_array_get(output, 0);
  if (!first || strcmp(json_string_value(json_object_get(first, "type")), "reasoning")) return 0;
  int32_t *ids = NULL, n = 0;
  oai_error e = {0};
  int32_t r = (int32_t)g->n_toks;
  if (oai_tokenize(q->A->M, "</think>", 8, 0, &ids, &n, &e, "x") == 0 && n == 1)
    for (size_t i = 0; i < g->n_toks; i++)
      if (g->toks[i] == ids[0]) {
        r = (int32_t)i + 1;
        break;
      }
  free(ids);
  return r;
}

/* The response object: status, output, usage and the repeated request fields. */
static json_t *response_obj(const rsp_req *q, const api_gen *g, const char *status, json_t *output) {
  json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n,s:o}", "id", q->id, "object", "response", "created_at",
                        (json_int_t)q->created, "status", status, "error", "incomplete_details", "output", output);
  json_object_update(o, q->echo);
  if (!strcmp(status, "incomplete"))
    json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
  if (!strcmp(status, "in_progress")) {
    json_object_set_new(o, "usage", json_null());
    return o;
  }
  const srv_job *j = q->j;
  json_object_set_new(o, "usage", json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)j->n_prompt,
                                            "input_tokens_details", "cached_tokens", (json_int_t)j->cached_tokens,
                                            "output_tokens", (json_int_t)j->completion_tokens, "output_tokens_details",
                                            "reasoning_tokens", (json_int_t)reasoning_tokens(q, g, output),
                                            "total_tokens", (json_int_t)(j->n_prompt + j->completion_tokens)));
  return o;
}

/* The finished response (completed or incomplete): stored when asked, returned. */
static json_t *finish_response(rsp_req *q, const api_gen *g, json_t *output) {
  const int incomplete = g->finish && !strcmp(g->finish, "length");
  json_t *last = json_array_get(output, json_array_size(output) - 1);
  if (incomplete && last) json_object_set_new(last, "status", json_string("incomplete"));
  json_t *o = response_obj(q, g, incomplete ? "incomplete" : "completed", output);
  if (q->store) {
    json_t *h = json_deep_copy(q->history);
    json_array_append_new(h, output_message(json_object_get(o, "output")));
    store_put(q->A->store, q->id, h, json_deep_copy(o));
  }
  return o;
}

/* ---- streaming ---- */

typedef struct rsp_stream {
  rsp_req *q;
  api_gen g;
  json_t *output;          /* finished items, then the open one */
  json_t *open;            /* the open reasoning / message item (borrowed from output), or NULL */
  api_piece_kind open_kind;
  q35_buf acc;             /* the open item's text */
  q35_buf *out;
  int seq;
} rsp_stream;

static void emit(rsp_stream *st, const char *type, json_t *ev) {
  json_object_set_new(ev, "type", json_string(type));
  json_object_set_new(ev, "sequence_number", json_integer(st->seq++));
  api_sse(st->out, type, ev);
}

static json_t *ev_at(rsp_stream *st, const json_t *item) {
  return json_pack("{s:O,s:I,s:i}", "item_id", json_object_get(item, "id"), "output_index",
                   (json_int_t)(json_array_size(st->output) - 1), "content_index", 0);
}

static void close_open(rsp_stream *st) {
  if (!st->open) return;
  const int r = st->open_kind == API_REASONING;
  const char *text = st->acc.p ? st->acc.p : "";
  json_t *ev = ev_at(st, st->open);
  json_object_set_new(ev, "text", json_string(text));
  if (!r) json_object_set_new(ev, "logprobs", json_array());
  emit(st, r ? "response.reasoning_text.done" : "response.output_text.done", ev);
  json_t *part = r ? reasoning_part(text) : text_part(text);
  ev = ev_at(st, st->open);
  json_object_set(ev, "part", part);
  emit(st, "response.content_part.done", ev);
  json_array_append_new(json_object_get(st->open, "content"), part);
  json_object_set_new(st->open, "status", json_string("completed"));
  emit(st, "response.output_item.done",
       json_pack("{s:I,s:O}", "output_index", (json_int_t)(json_array_size(st->output) - 1), "item", st->open));
  st->open = NULL;
  st->acc.n = 0;
}

static void stream_call(rsp_stream *st, const json_t *call) {
  json_t *it = new_item(API_CALL, call);
  json_array_append_new(st->output, it);
  const json_t *args = json_object_get(json_object_get(call, "function"), "arguments");
  const json_int_t oi = (json_int_t)(json_array_size(st->output) - 1);
  emit(st, "response.output_item.added", json_pack("{s:I,s:O}", "output_index", oi, "item", it));
  emit(st, "response.function_call_arguments.delta",
       json_pack("{s:O,s:I,s:O}", "item_id", json_object_get(it, "id"), "output_index", oi, "delta", args));
  emit(st, "response.function_call_arguments.done",
       json_pack("{s:O,s:I,s:O,s:O}", "item_id", json_object_get(it, "id"), "output_index", oi, "arguments", args,
                 "name", json_object_get(it, "name")));
  json_object_set(it, "arguments", (json_t *)args);
  json_object_set_new(it, "status", json_string("completed"));
  emit(st, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", oi, "item", it));
}

static void stream_piece(void *cls, api_piece_kind kind, const char *text, const json_t *call) {
  rsp_stream *st = cls;
  if (kind == API_CALL) {
    close_open(st);
    stream_call(st, call);
    return;
  }
  if (!st->open || st->open_kind != kind) {
    close_open(st);
    st->open = new_item(kind, NULL);
    st->open_kind = kind;
    json_array_append_new(st->output, st->open);
    emit(st, "response.output_item.added", json_pack("{s:I,s:O}", "output_index",
                                                     (json_int_t)(json_array_size(st->output) - 1), "item", st->open));
    json_t *ev = ev_at(st, st->open);
    json_object_set_new(ev, "part", kind == API_REASONING ? reasoning_part("") : text_part(""));
    emit(st, "response.content_part.added", ev);
  }
  q35_buf_str(&st->acc, text);
  json_t *ev = ev_at(st, st->open);
  json_object_set_new(ev, "delta", json_string(text));
  if (kind == API_TEXT) json_object_set_new(ev, "logprobs", json_array());
  emit(st, kind == API_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta", ev);
}

static void st_start(void *cls, q35_buf *out) {
  rsp_stream *st = cls;
  st->out = out;
  emit(st, "response.created",
       json_pack("{s:o}", "response", response_obj(st->q, &st->g, "in_progress", json_array())));
  emit(st, "response.in_progress",
       json_pack("{s:o}", "response", response_obj(st->q, &st->g, "in_progress", json_array())));
}

static void st_events(void *cls, const srv_event *e, q35_buf *out) {
  rsp_stream *st = cls;
  st->out = out;
  api_gen_feed(&st->g, e, stream_piece, st);
}

static void st_end(void *cls, q35_buf *out) {
  rsp_stream *st = cls;
  st->out = out;
  close_open(st);
  if (st->q->j->failed) {
    json_t *o = response_obj(st->q, &st->g, "failed", json_incref(st->output));
    json_object_set_new(o, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", st->q->j->errmsg));
    emit(st, "response.failed", json_pack("{s:o}", "response", o));
    return;
  }
  json_t *o = finish_response(st->q, &st->g, json_incref(st->output));
  const char *status = json_string_value(json_object_get(o, "status"));
  emit(st, strcmp(status, "completed") ? "response.incomplete" : "response.completed",
       json_pack("{s:o}", "response", o));
}

static void st_release(void *cls) {
  rsp_stream *st = cls;
  api_gen_free(&st->g);
  json_decref(st->output);
  q35_buf_free(&st->acc);
  st->q->j = NULL; /* api_stream releases the job */
  req_free(st->q);
  free(st);
}

static const api_stream_ops rsp_ops = {st_start, st_events, st_end, st_release};

/* ---- the endpoint ---- */

static enum MHD_Result send_err(struct MHD_Connection *c, const oai_error *e) {
  json_t *b = http_error_body_code(e->status ? e->status : 400, e->msg, e->param, e->code);
  http_log_status(e->status ? e->status : 400, e->msg);
  if (e->status == 404 && e->param && !strcmp(e->param, "previous_response_id"))
    json_object_set_new(json_object_get(b, "error"), "code", json_string("previous_response_not_found"));
  return http_send_json(c, e->status ? e->status : 400, b);
}

int api_responses_parse(api_ctx *A, const json_t *body, const char *sid, srv_job **job, oai_error *e) {
  *job = NULL;
  rsp_req *q = calloc(1, sizeof *q);
  if (!q) return api_bad(e, NULL, "out of memory");
  q->A = A;
  const int rc = parse_request(A, sid, body, 0, q, e);
  *job = q->j;
  q->j = NULL;
  req_free(q);
  return rc;
}

enum MHD_Result api_responses(api_ctx *A, struct MHD_Connection *c, const json_t *body, int count_only) {
  rsp_req *q = calloc(1, sizeof *q);
  if (!q) return http_send_error(c, 503, NULL, "out of memory");
  q->A = A;
  oai_error e = {0};
  if (parse_request(A, api_session_header(c), body, count_only, q, &e)) {
    req_free(q);
    return send_err(c, &e);
  }
  if (count_only) {
    json_t *o = json_pack("{s:s,s:I}", "object", "response.input_tokens", "input_tokens", (json_int_t)q->j->n_prompt);
    req_free(q);
    return http_send_json(c, 200, o);
  }
  char msg[512];
  const int st = srv_sched_submit(A->sched, q->j, msg, sizeof msg);
  if (st) {
    req_free(q);
    return http_send_error(c, (unsigned)st, NULL, "%s", msg);
  }
  if (q->stream) {
    rsp_stream *s = calloc(1, sizeof *s);
    if (!s || api_gen_init(&s->g, &q->v, 1) || !(s->output = json_array())) {
      if (s) api_gen_free(&s->g);
      free(s);
      srv_job_cancel(A->sched, q->j);
      req_free(q);
      return http_send_error(c, 503, NULL, "out of memory");
    }
    s->q = q;
    return api_stream(A, c, q->j, &rsp_ops, s);
  }
  api_gen g;
  enum MHD_Result rc = MHD_NO;
  if (api_gen_init(&g, &q->v, 0) == 0 && api_wait(A->sched, c, q->j, &g) == 0) {
    if (q->j->failed) {
      rc = http_send_error(c, (unsigned)q->j->status, NULL, "%s", q->j->errmsg);
    } else {
      json_t *output = json_array();
      api_gen_final(&g, collect_piece, output);
      http_log_tokens(q->j->n_prompt, q->j->completion_tokens);
      rc = http_send_json(c, 200, finish_response(q, &g, output));
    }
  }
  api_gen_free(&g);
  req_free(q);
  return rc;
}
