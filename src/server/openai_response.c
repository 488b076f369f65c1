/*
 * openai_response.c - the scheduler's events -> OpenAI response objects (see openai.h).
 *
 * Chat responses split the text into reasoning_content and content (q35_chat_split_think) and
 * parse tool calls out of the content; streamed chat does the same incrementally
 * (q35_chat_stream), sending "tool_calls" deltas with running indices. A finish of "stop" after
 * tool calls is reported as "tool_calls".
 */
#include "server/openai.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/sse.h"

/* The log-probability reported for a token whose probability underflows to 0 (-inf is not JSON). */
#define LOGPROB_FLOOR -9999.0

static double finite_lp(float x) { return isfinite(x) ? x : LOGPROB_FLOOR; }

static json_t *bytes_array(const char *s, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
  return a;
}

json_t *oai_token_str(const oai_model *M, int32_t id, json_t **bytes) {
  size_t n = 0;
  const char *raw = q35_token_bytes(M->tok, id, &n);
  if (!raw) n = 0;
  size_t ln = 0;
  char *s = q35_utf8_lossy(raw ? raw : "", n, &ln);
  json_t *js = json_stringn(s ? s : "", s ? ln : 0);
  free(s);
  if (bytes) *bytes = bytes_array(raw ? raw : "", n);
  return js;
}

void oai_call_id(char out[40]) {
  static atomic_uint_fast64_t counter;
  const uint64_t n = atomic_fetch_add(&counter, 1) + 1;
  snprintf(out, 40, "call_%08llx%016llx", (unsigned long long)(n & 0xffffffffu), (unsigned long long)q35_random_seed());
}

/* ---- logprobs ---- */

/* Log-probability entry (chat form) for one event. */
static json_t *chat_lp_entry(const oai_model *M, const srv_event *e) {
  json_t *bytes = NULL;
  json_t *tok = oai_token_str(M, e->token, &bytes);
  json_t *top = json_array();
  for (int i = 0; i < e->n_top; i++) {
    json_t *b2 = NULL;
    json_t *t2 = oai_token_str(M, e->top_ids[i], &b2);
    json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", t2, "logprob", finite_lp(e->top_logprobs[i]),
                                         "bytes", b2));
  }
  return json_pack("{s:o,s:f,s:o,s:o}", "token", tok, "logprob", finite_lp(e->logprob), "bytes", bytes,
                   "top_logprobs", top);
}

static json_t *text_lp_new(void) {
  return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* Append the event's entries to a completions-style logprobs object: top_logprobs is keyed by
 * text, so tokens with the same text count once and the n_top most likely distinct texts are
 * kept (the engine reports more alternatives than asked for; they come most likely first). */
static void text_lp_add(const oai_model *M, json_t *lp, const srv_event *e, size_t offset, int n_top) {
  json_array_append_new(json_object_get(lp, "tokens"), oai_token_str(M, e->token, NULL));
  json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(finite_lp(e->logprob)));
  json_t *top = json_object();
  for (int i = 0; i < e->n_top && (int)json_object_size(top) < n_top; i++) {
    json_t *t = oai_token_str(M, e->top_ids[i], NULL);
    if (!json_object_get(top, json_string_value(t)))
      json_object_set_new(top, json_string_value(t), json_real(finite_lp(e->top_logprobs[i])));
    json_decref(t);
  }
  json_array_append_new(json_object_get(lp, "top_logprobs"), top);
  json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

/* ---- objects ---- */

/* usage; with speculation on, two extension fields (README "Server API"): draft_tokens (tokens the
 * MTP head drafted for the request) and draft_accepted_tokens (those the model accepted) */
static json_t *usage_obj(const srv_job *j) {
  json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)j->n_prompt, "completion_tokens",
                        (json_int_t)j->completion_tokens, "total_tokens",
                        (json_int_t)(j->n_prompt + j->completion_tokens), "prompt_tokens_details", "cached_tokens",
                        (json_int_t)j->cached_tokens);
  if (u && j->drafting) {
    json_object_set_new(u, "draft_tokens", json_integer((json_int_t)j->draft_tokens));
    json_object_set_new(u, "draft_accepted_tokens", json_integer((json_int_t)j->draft_accepted));
  }
  return u;
}

static json_t *chunk_base(const oai_model *M, const oai_request *r) {
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:I}", "id", r->id, "object",
                   r->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)r->created, "model",
                   M->id, "system_fingerprint", "q35", "seed", (json_int_t)r->seed);
}

json_t *oai_usage_chunk(const oai_model *M, const oai_request *r) {
  json_t *o = chunk_base(M, r);
  json_object_set_new(o, "choices", json_array());
  json_object_set_new(o, "usage", usage_obj(r->job));
  return o;
}

oai_choice *oai_choices_new(const oai_request *r) {
  oai_choice *ch = calloc((size_t)r->job->n, sizeof *ch);
  if (!ch) return NULL;
  if (r->chat && r->stream)
    for (int i = 0; i < r->job->n; i++) ch[i].cs = q35_chat_stream_new(r->in_think, r->parse_tools, r->tools);
  if (r->echo && !r->stream)
    for (int i = 0; i < r->job->n; i++) q35_buf_add(&ch[i].text, r->echo, r->echo_len);
  return ch;
}

void oai_choices_free(oai_choice *ch, int n) {
  if (!ch) return;
  for (int i = 0; i < n; i++) {
    q35_buf_free(&ch[i].text);
    json_decref(ch[i].lp);
    if (ch[i].cs) q35_chat_stream_free(ch[i].cs);
    for (int k = 0; k < ch[i].n_pend; k++) json_decref(ch[i].pend[k].entry);
    free(ch[i].pend);
  }
  free(ch);
}

/* ---- entries held until their token's text is released ---- */

static void pend_push(oai_choice *c, json_t *entry, size_t start) {
  if (c->n_pend == c->cap_pend) {
    const int cap = c->cap_pend ? 2 * c->cap_pend : 16;
    oai_lp_pending *p = realloc(c->pend, sizeof *p * (size_t)cap);
    if (!p) {
      json_decref(entry);
      return;
    }
    c->pend = p;
    c->cap_pend = cap;
  }
  c->pend[c->n_pend++] = (oai_lp_pending){entry, start};
}

/* Merge one entry into *dst: chat, an array of content entries; completions, a logprobs
 * object whose arrays are extended. Takes entry. */
static void lp_merge(int chat, json_t **dst, json_t *entry) {
  if (chat) {
    if (!*dst) *dst = json_array();
    json_array_append_new(*dst, entry);
    return;
  }
  if (!*dst) *dst = text_lp_new();
  static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
  for (int k = 0; k < 4; k++) json_array_extend(json_object_get(*dst, keys[k]), json_object_get(entry, keys[k]));
  json_decref(entry);
}

/* The entries whose token starts before `released` bytes of text (all of them with `all`),
 * merged; with `drop`, the others are dropped (a stop string cut the text there). */
static json_t *pend_release(int chat, oai_choice *c, size_t released, int all, int drop) {
  json_t *out = NULL;
  int k = 0;
  while (k < c->n_pend && (all || c->pend[k].start < released)) lp_merge(chat, &out, c->pend[k++].entry);
  int left = 0;
  for (int i = k; i < c->n_pend; i++) {
    if (drop) json_decref(c->pend[i].entry);
    else c->pend[left++] = c->pend[i];
  }
  c->n_pend = left;
  return out;
}

/* ---- events ---- */

/* Streamed completions: one text_completion chunk for the event. */
static void text_chunk(const oai_model *M, const oai_request *r, const srv_event *e, json_t *lp_entry, q35_buf *sse) {
  if (!((e->text && e->len) || lp_entry || e->finish)) return;
  json_t *o = chunk_base(M, r);
  json_object_set_new(o, "choices",
                      json_pack("[{s:s%,s:I,s:o,s:s?}]", "text", e->text ? e->text : "", e->text ? e->len : 0, "index",
                                (json_int_t)e->choice, "logprobs", lp_entry ? lp_entry : json_null(), "finish_reason",
                                e->finish));
  sse_event(sse, o);
}

/* The delta of a streamed chat event: reasoning, content and tool calls as the splitter sees them. */
static void chat_delta_fill(const oai_request *r, oai_choice *c, const srv_event *e, json_t *delta) {
  q35_chat_delta d = {0};
  q35_err err = {{0}};
  char *piece = e->text ? e->text : "";
  if (q35_chat_stream_feed(c->cs, piece, e->finish != NULL, &d, &err) == 0) {
    if (d.reasoning && *d.reasoning) json_object_set_new(delta, "reasoning_content", json_string(d.reasoning));
    if (d.content && *d.content) json_object_set_new(delta, "content", json_string(d.content));
    if (d.tool_calls && json_array_size(d.tool_calls)) {
      json_t *tc = json_array();
      for (size_t i = 0; i < json_array_size(d.tool_calls); i++) {
        if (r->max_tool_calls && c->n_tool_calls >= r->max_tool_calls) break; /* parallel_tool_calls: false */
        json_t *t = json_deep_copy(json_array_get(d.tool_calls, i));
        if (r->legacy_functions) { /* the legacy answer: delta.function_call {name, arguments} */
          json_object_set(delta, "function_call", json_object_get(t, "function"));
          json_decref(t);
          c->n_tool_calls++;
          continue;
        }
        char id[40];
        oai_call_id(id);
        json_object_set_new(t, "id", json_string(id));
        json_object_set_new(t, "index", json_integer(c->n_tool_calls++));
        json_array_append_new(tc, t);
      }
      if (json_array_size(tc)) json_object_set_new(delta, "tool_calls", tc);
      else json_decref(tc);
    }
  } else if (e->text) { /* a malformed tool call: pass the text through as content */
    json_object_set_new(delta, "content", json_string(piece));
  }
  q35_chat_delta_free(&d);
}

/* Streamed chat: one chat.completion.chunk for the event (the first carries the role). */
static void chat_chunk(const oai_model *M, const oai_request *r, oai_choice *c, const srv_event *e, json_t *lp_entry,
                       q35_buf *sse) {
  json_t *delta = json_object();
  if (!c->sent_role) {
    json_object_set_new(delta, "role", json_string("assistant"));
    json_object_set_new(delta, "content", json_string(""));
    c->sent_role = 1;
  }
  if (c->cs && (e->text || e->finish)) chat_delta_fill(r, c, e, delta);
  const char *finish = e->finish;
  if (finish && !strcmp(finish, "stop") && c->n_tool_calls) finish = r->legacy_functions ? "function_call" : "tool_calls";
  if (!json_object_size(delta) && !lp_entry && !finish) {
    json_decref(delta);
    return;
  }
  json_t *o = chunk_base(M, r);
  json_t *lp = lp_entry ? json_pack("{s:o}", "content", lp_entry) : json_null();
  json_object_set_new(o, "choices", json_pack("[{s:I,s:o,s:o,s:s?}]", "index", (json_int_t)e->choice, "delta", delta,
                                              "logprobs", lp, "finish_reason", finish));
  sse_event(sse, o);
}

void oai_add_events(const oai_model *M, const oai_request *r, oai_choice *ch, const srv_event *e, q35_buf *sse) {
  for (; e; e = e->next) {
    if (e->choice < 0 || e->choice >= r->job->n) continue;
    oai_choice *c = &ch[e->choice];
    if (sse && !r->chat && r->echo && !c->sent_echo) { /* echo: the prompt first */
      json_t *o = chunk_base(M, r);
      json_object_set_new(o, "choices", json_pack("[{s:s%,s:I,s:n,s:n}]", "text", r->echo, r->echo_len, "index",
                                                  (json_int_t)e->choice, "logprobs", "finish_reason"));
      sse_event(sse, o);
      c->sent_echo = 1;
    }
    if (e->has_token && r->logprobs) {
      json_t *entry;
      if (r->chat) {
        entry = chat_lp_entry(M, e);
      } else {
        entry = text_lp_new();
        text_lp_add(M, entry, e, r->echo_len + e->tok_start, r->top_logprobs);
      }
      pend_push(c, entry, e->tok_start);
    }
    if (e->text) c->text_off += e->len;
    if (e->finish) c->finish = e->finish;
    /* entries go out with their token's text: a stop string cuts both */
    json_t *lp_entry = pend_release(r->chat, c, c->text_off, e->finish && !e->cut, e->finish != NULL);
    if (!sse) { /* non-streamed */
      if (e->text) q35_buf_add(&c->text, e->text, e->len);
      if (lp_entry) {
        if (r->chat) {
          if (!c->lp) c->lp = json_array();
          json_array_extend(c->lp, lp_entry);
          json_decref(lp_entry);
        } else {
          lp_merge(0, &c->lp, lp_entry);
        }
      }
    } else if (!r->chat) {
      text_chunk(M, r, e, lp_entry, sse);
    } else {
      chat_chunk(M, r, c, e, lp_entry, sse);
    }
  }
}

/* ---- the complete response ---- */

/* The assistant message of a non-streamed chat choice; *finish becomes "tool_calls" when it
 * holds tool calls and generation stopped normally. */
static json_t *chat_message(const oai_request *r, const char *text, const char **finish) {
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
  if (has_calls && r->max_tool_calls) /* parallel_tool_calls: false (and legacy function_call): the first */
    while (json_array_size(calls) > (size_t)r->max_tool_calls) json_array_remove(calls, json_array_size(calls) - 1);
  for (size_t i = 0; has_calls && i < json_array_size(calls); i++) {
    char id[40];
    oai_call_id(id);
    json_object_set_new(json_array_get(calls, i), "id", json_string(id));
  }
  if (has_calls && (!content || !*content)) json_object_set_new(msg, "content", json_null());
  else json_object_set_new(msg, "content", json_string(content ? content : ""));
  if (reasoning && *reasoning) json_object_set_new(msg, "reasoning_content", json_string(reasoning));
  if (has_calls && r->legacy_functions) {
    json_object_set(msg, "function_call", json_object_get(json_array_get(calls, 0), "function"));
    if (!strcmp(*finish, "stop")) *finish = "function_call";
  } else if (has_calls) {
    json_object_set(msg, "tool_calls", calls);
    if (!strcmp(*finish, "stop")) *finish = "tool_calls";
  }
  json_decref(calls);
  free(reasoning);
  free(content);
  return msg;
}

json_t *oai_final_response(const oai_model *M, const oai_request *r, oai_choice *ch) {
  json_t *choices = json_array();
  for (int i = 0; i < r->job->n; i++) {
    oai_choice *c = &ch[i];
    const char *text = c->text.p ? c->text.p : "";
    const char *finish = c->finish ? c->finish : "stop";
    if (!r->chat) {
      json_array_append_new(choices, json_pack("{s:s,s:I,s:o,s:s}", "text", text, "index", (json_int_t)i, "logprobs",
                                               c->lp ? json_incref(c->lp) : json_null(), "finish_reason", finish));
      continue;
    }
    json_t *msg = chat_message(r, text, &finish);
    json_t *lp = c->lp ? json_pack("{s:O}", "content", c->lp) : json_null();
    json_array_append_new(choices, json_pack("{s:I,s:o,s:o,s:s}", "index", (json_int_t)i, "message", msg, "logprobs",
                                             lp, "finish_reason", finish));
  }
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:I,s:o,s:o}", "id", r->id, "object",
                   r->chat ? "chat.completion" : "text_completion", "created", (json_int_t)r->created, "model", M->id,
                   "system_fingerprint", "q35", "seed", (json_int_t)r->seed, "choices", choices, "usage",
                   usage_obj(r->job));
}
