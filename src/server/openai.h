/*
 * openai.h - the OpenAI shape of q35 serve, with no HTTP in it.
 *
 *   openai_request.c   a JSON request body -> a scheduler job (srv_job) plus what the response
 *                      needs (oai_request): validation, sampling parameters, stop strings,
 *                      logprobs, the chat template and tokenization of the prompt.
 *   openai_response.c  the scheduler's events -> OpenAI objects: the complete response, stream
 *                      chunks (handed to the SSE writer, sse.h), logprobs entries, the
 *                      reasoning/content split and tool calls.
 *
 * Refusals are oai_error values (an HTTP status, the offending parameter, a message) that the
 * HTTP layer turns into {"error": {...}} bodies.
 */
#ifndef Q35_SERVER_OPENAI_H
#define Q35_SERVER_OPENAI_H

#include <jansson.h>
#include <stdint.h>

#include "base/buf.h"
#include "server/sched.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#define OAI_MAX_N 8               /* most choices ("n") one request may ask for */
#define OAI_MAX_SESSION_ID 128    /* longest session id (session_id header), bytes */

/* What the OpenAI layer knows of the served model. */
typedef struct oai_model {
  const q35_tokenizer *tok;
  const char *tmpl, *bos, *eos; /* chat template and its bos/eos strings (tmpl NULL: built-in ChatML) */
  char id[256];                 /* the model id in responses and /v1/models */
  char stem[256];               /* the id without ".gguf", also accepted as "model" */
  int32_t n_ctx;                /* per-session context in tokens */
  int no_think;                 /* thinking off unless a request enables it */
} oai_model;

/* A refused request. */
typedef struct oai_error {
  unsigned status;              /* HTTP status (400 unless said otherwise) */
  const char *param;            /* the offending parameter, or NULL */
  char msg[600];
} oai_error;

/* A parsed completion request (chat or text). */
typedef struct oai_request {
  int chat;                     /* /v1/chat/completions (else /v1/completions) */
  int stream, include_usage;
  int logprobs;                 /* chat: logprobs true; completions: logprobs given */
  int top_logprobs;
  json_t *tools;                /* borrowed from the body (or NULL) */
  int parse_tools;              /* look for tool calls in the output */
  int in_think;                 /* the prompt ends inside <think> */
  uint64_t seed;
  char id[64];                  /* "chatcmpl-..." / "cmpl-..." */
  long created;
  srv_job *job;                 /* one reference, the caller's (set even when parsing fails) */
} oai_request;

/* ---- requests (openai_request.c) ---- */

/* Parse and validate a completion request body (a JSON object) for chat or text completions;
 * session_id is the request's session header or NULL. 0, or -1 with e filled. r->job is set
 * whenever it could be allocated, also on failure: the caller releases it. */
int oai_parse_request(const oai_model *M, const json_t *body, int chat, const char *session_id, oai_request *r,
                      oai_error *e);
/* Tokenize text (with the bos token when add_bos and the tokenizer adds one); errors name param. */
int oai_tokenize(const oai_model *M, const char *text, size_t len, int add_bos, int32_t **ids, int32_t *n,
                 oai_error *e, const char *param);
/* An optional boolean field: 1 present, 0 absent or null, -1 wrong type (e filled). */
int oai_get_bool(const json_t *body, const char *key, int *out, oai_error *e);

/* ---- responses (openai_response.c) ---- */

/* What one choice has produced so far. */
typedef struct oai_choice {
  q35_buf text;                 /* non-streamed: the whole text */
  json_t *lp;                   /* chat: content array; completions: the logprobs object */
  const char *finish;
  q35_chat_stream *cs;          /* streamed chat: reasoning/content/tool-call splitter */
  int sent_role, n_tool_calls;
  size_t text_off;              /* bytes of text so far (completions' text_offset) */
} oai_choice;

oai_choice *oai_choices_new(const oai_request *r);
void oai_choices_free(oai_choice *ch, int n);
/* Fold a list of events into the choices. Streamed (sse != NULL): append the stream chunks to
 * sse. Non-streamed: accumulate text and logprobs for oai_final_response. */
void oai_add_events(const oai_model *M, const oai_request *r, oai_choice *ch, const srv_event *e, q35_buf *sse);
/* The complete (non-streamed) response body. */
json_t *oai_final_response(const oai_model *M, const oai_request *r, oai_choice *ch);
/* The last stream chunk with stream_options.include_usage: no choices, the usage. */
json_t *oai_usage_chunk(const oai_model *M, const oai_request *r);
/* The token's text as a JSON string (lossy: its raw bytes may be part of a character); with
 * bytes, also its raw bytes as an array of integers. */
json_t *oai_token_str(const oai_model *M, int32_t id, json_t **bytes);

#endif
