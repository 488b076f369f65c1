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
#define OAI_MAX_TEXT_LOGPROBS 5   /* completions' logprobs: at most 5 alternatives (OpenAI's limit) */
#define OAI_MAX_LOGIT_BIAS 1024   /* logit_bias entries per request */

/* What the OpenAI layer knows of the served model. */
typedef struct oai_model {
  const q35_tokenizer *tok;
  const char *tmpl, *bos, *eos; /* chat template and its bos/eos strings (tmpl NULL: built-in ChatML) */
  char id[256];                 /* the model id in responses and /v1/models */
  char stem[256];               /* the id without ".gguf", also accepted as "model" */
  int32_t n_ctx;                /* per-session context in tokens */
  int no_think;                 /* thinking off unless a request enables it */
  const q35_constraint_vocab *cvocab; /* the vocabulary constraints compile against (NULL: none) */
  q35_sampling defaults;        /* for parameters a request leaves unset: the model file's
                                   general.sampling.*, else the server's flags, else q35's */
} oai_model;

/* A refused request. */
typedef struct oai_error {
  unsigned status;              /* HTTP status (400 unless said otherwise) */
  const char *param;            /* the offending parameter, or NULL */
  const char *code;             /* the error code, or NULL for the status's default */
  char msg[600];
} oai_error;

/* tool_choice, after the legacy function_call is mapped onto it. */
typedef enum { OAI_TOOLS_AUTO = 0, OAI_TOOLS_NONE, OAI_TOOLS_REQUIRED, OAI_TOOLS_NAMED } oai_tool_choice;

/* What a request asks the decoder to be constrained to (openai_constraint.c). */
typedef enum {
  OAI_CONSTRAINT_NONE = 0,
  OAI_CONSTRAINT_JSON_OBJECT,   /* response_format {type: json_object} */
  OAI_CONSTRAINT_JSON_SCHEMA,   /* response_format {type: json_schema}, llama-server's json_schema */
  OAI_CONSTRAINT_GRAMMAR,       /* llama-server's grammar (GBNF) */
} oai_constraint_kind;

typedef struct oai_constraint {
  oai_constraint_kind kind;
  const char *param;            /* the field that asked for it (for errors) */
  const json_t *schema;         /* JSON_SCHEMA: the schema (borrowed from the body) */
  int schema_strict;            /* JSON_SCHEMA: response_format.json_schema.strict */
  const char *grammar;          /* GRAMMAR: the GBNF text (borrowed) */
  oai_tool_choice tool_choice;  /* REQUIRED / NAMED force a call */
  const char *tool_name;        /* NAMED: the function (borrowed) */
  const json_t *tools;          /* the request's tools (borrowed; NULL when none) */
  int strict_tools;             /* some tools[].function.strict is true */
} oai_constraint;

/* A parsed completion request (chat or text). */
typedef struct oai_request {
  int chat;                     /* /v1/chat/completions (else /v1/completions) */
  int stream, include_usage;
  int logprobs;                 /* chat: logprobs true; completions: logprobs given */
  int top_logprobs;
  json_t *tools;                /* borrowed from the body (or NULL) */
  int parse_tools;              /* look for tool calls in the output */
  int max_tool_calls;           /* parallel_tool_calls: false -> 1; 0 = no limit */
  int legacy_functions;         /* the request used functions/function_call: answer with function_call */
  json_t *tools_owned;          /* tools built from legacy functions (r->tools points here) */
  char *echo;                   /* completions echo: the prompt text (malloc'ed) */
  size_t echo_len;
  oai_constraint constraint;
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
/* Free what the request owns besides its job (tools_owned, echo). */
void oai_request_free(oai_request *r);
/* Fill a 400 (the message printf-style); returns -1. */
int oai_bad(oai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- constrained decoding (openai_constraint.c) ---- */

/* Read response_format and llama-server's grammar / json_schema into r->constraint (checking
 * their shape); 0, or -1 with e filled. */
int oai_parse_constraint(const oai_model *M, const json_t *body, oai_request *r, oai_error *e);
/* Compile constraint c (the request's language, a forced tool call, strict tools; the tools in
 * the chat shape) into j->constraint and j's lazy-activation triggers. in_think: the prompt ends
 * inside <think>; max_calls: 1 when parallel tool calls are off. 0 (also when nothing is
 * constrained), or -1 with e filled (a 400 naming the field and the compile error). */
int oai_constraint_build(const oai_model *M, const oai_constraint *c, int in_think, int max_calls, srv_job *j,
                         oai_error *e);
/* oai_constraint_build of r->constraint into r->job. 0, or -1 with e filled. */
int oai_apply_constraint(const oai_model *M, oai_request *r, oai_error *e);
/* Tokenize text (with the bos token when add_bos and the tokenizer adds one); errors name param. */
int oai_tokenize(const oai_model *M, const char *text, size_t len, int add_bos, int32_t **ids, int32_t *n,
                 oai_error *e, const char *param);
/* An optional boolean field: 1 present, 0 absent or null, -1 wrong type (e filled). */
int oai_get_bool(const json_t *body, const char *key, int *out, oai_error *e);

/* ---- responses (openai_response.c) ---- */

/* A log-probability entry waiting for its token's text to be released (stop strings). */
typedef struct oai_lp_pending {
  json_t *entry;                /* chat: one content entry; completions: a one-token logprobs object */
  size_t start;                 /* the token's first byte in the decoded text */
} oai_lp_pending;

/* What one choice has produced so far. */
typedef struct oai_choice {
  q35_buf text;                 /* non-streamed: the whole text */
  json_t *lp;                   /* chat: content array; completions: the logprobs object */
  const char *finish;
  q35_chat_stream *cs;          /* streamed chat: reasoning/content/tool-call splitter */
  int sent_role, n_tool_calls, sent_echo;
  size_t text_off;              /* bytes of generated text released so far */
  oai_lp_pending *pend;         /* entries whose token's text is not released yet */
  int n_pend, cap_pend;
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
/* A tool-call id unique for the server's lifetime: "call_" + a counter and random hex. */
void oai_call_id(char out[40]);

#endif
