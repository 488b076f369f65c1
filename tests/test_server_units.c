/*
 * test_server_units.c - the OpenAI response layer of q35 serve without HTTP or a model: tool
 * calls parsed out of a fixed model text get ids "call_" + 24 hex digits, unique across calls and
 * responses (never call_0, call_1, ... per response); parallel_tool_calls: false keeps the first
 * call; legacy functions answer with function_call and finish_reason "function_call"; the
 * streamed chunks carry the same kind of ids.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "server/openai.h"

static const char TEXT[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";

static int id_ok(const char *id) {
  if (!id || strncmp(id, "call_", 5) || strlen(id) != 29) return 0;
  for (const char *p = id + 5; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
  return 1;
}

static void job_done(srv_job *j) { /* what the scheduler's release does, without a scheduler */
  srv_events_free(j->ev_head);
  pthread_cond_destroy(&j->cv);
  free(j);
}

/* The final response for TEXT under the request's tool settings. */
static json_t *respond(const oai_model *M, oai_request *r) {
  oai_choice *ch = oai_choices_new(r);
  q35_buf_add(&ch[0].text, TEXT, sizeof TEXT - 1);
  ch[0].finish = "stop";
  json_t *o = oai_final_response(M, r, ch);
  oai_choices_free(ch, r->job->n);
  return o;
}

int main(void) {
  oai_model M = {0};
  strcpy(M.id, "m");
  json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                             "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]",
                             0, NULL);
  oai_request r = {.chat = 1, .parse_tools = 1, .tools = tools};
  r.job = srv_job_new();
  /* ids: call_ + 24 hex, all distinct over two responses */
  char seen[4][40];
  int n_seen = 0;
  for (int rep = 0; rep < 2; rep++) {
    json_t *o = respond(&M, &r);
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    json_t *calls = json_object_get(msg, "tool_calls");
    CHECK(json_array_size(calls) == 2, "two tool calls, got %zu", json_array_size(calls));
    for (size_t i = 0; i < json_array_size(calls); i++) {
      const char *id = json_string_value(json_object_get(json_array_get(calls, i), "id"));
      CHECK(id_ok(id), "tool-call id '%s' is not call_ + 24 hex digits", id ? id : "(none)");
      for (int k = 0; id && k < n_seen; k++) CHECK(strcmp(seen[k], id), "tool-call id %s repeated", id);
      if (id && n_seen < 4) strcpy(seen[n_seen++], id);
    }
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "finish_reason")),
                  "tool_calls"),
          "finish_reason tool_calls");
    json_decref(o);
  }
  /* parallel_tool_calls: false -> the first call only */
  r.max_tool_calls = 1;
  json_t *o = respond(&M, &r);
  json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
  json_t *calls = json_object_get(msg, "tool_calls");
  CHECK(json_array_size(calls) == 1, "parallel_tool_calls false: %zu calls", json_array_size(calls));
  const char *args = json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
  CHECK(args && strstr(args, "Paris"), "the first call is kept: %s", args ? args : "(none)");
  json_decref(o);
  /* legacy functions: message.function_call, finish_reason function_call */
  r.legacy_functions = 1;
  o = respond(&M, &r);
  json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
  msg = json_object_get(c0, "message");
  json_t *fc = json_object_get(msg, "function_call");
  CHECK(fc && !strcmp(json_string_value(json_object_get(fc, "name")), "get_weather"), "legacy function_call");
  CHECK(!json_object_get(msg, "tool_calls"), "legacy answer has no tool_calls");
  CHECK(!strcmp(json_string_value(json_object_get(c0, "finish_reason")), "function_call"), "finish function_call");
  json_decref(o);
  /* streamed: the tool_calls deltas carry fresh ids too */
  r.legacy_functions = 0;
  r.max_tool_calls = 0;
  r.stream = 1;
  oai_choice *ch = oai_choices_new(&r);
  srv_event e = {.choice = 0, .text = (char *)TEXT, .len = sizeof TEXT - 1, .finish = "stop"};
  q35_buf sse = {0};
  oai_add_events(&M, &r, ch, &e, &sse);
  int ids = 0;
  for (const char *p = sse.p; p && (p = strstr(p, "\"id\": \"call_")) != NULL; p++) ids++;
  for (const char *p = sse.p; p && (p = strstr(p, "\"id\":\"call_")) != NULL; p++) {
    char id[40] = {0};
    memcpy(id, p + 6, 29);
    CHECK(id_ok(id), "streamed id '%s'", id);
    ids++;
  }
  CHECK(ids == 2, "two streamed tool calls with ids, got %d in %s", ids, sse.p ? sse.p : "");
  CHECK(!sse.p || !strstr(sse.p, "call_0\""), "no per-response counter ids");
  q35_buf_free(&sse);
  oai_choices_free(ch, 1);
  job_done(r.job);
  json_decref(tools);
  return check_done("test_server_units");
}
