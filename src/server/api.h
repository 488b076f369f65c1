/*
 * api.h - the two non-chat-completions APIs of q35 serve on the same engine:
 *
 *   responses.c   POST /v1/responses (OpenAI Responses API), POST /v1/responses/input_tokens,
 *                 GET / DELETE /v1/responses/{id}; the bounded store behind previous_response_id
 *   anthropic.c   POST /v1/messages (Anthropic Messages API), POST /v1/messages/count_tokens
 *   api_common.c  what both share: routing, the conversion target (an OpenAI-style messages +
 *                 tools array rendered by the chat template into a scheduler job), the
 *                 generation splitter (reasoning / text / tool calls, whole or streamed), the
 *                 streamed SSE response and the non-streamed wait loop.
 *
 * Both APIs convert their request into the internal form chat completions uses (messages in the
 * OpenAI chat shape, tools as {"type":"function","function":{...}}, the thinking toggle, a
 * srv_job with sampling parameters), so batching, prefix reuse, sessions (the session_id /
 * X-Session-Id header) and the memory limits are exactly those of /v1/chat/completions. They
 * differ only in how requests are read and how the output is written.
 */
#ifndef Q35_SERVER_API_H
#define Q35_SERVER_API_H

#include <jansson.h>
#include <microhttpd.h>

#include "base/buf.h"
#include "server/openai.h"
#include "server/sched.h"

#define API_STORE_MAX 128               /* responses kept for previous_response_id */
#define API_STORE_BYTES (64u << 20)     /* ... and at most this many bytes of them */

typedef struct api_store api_store;

/* What the handlers need from the server. */
typedef struct api_ctx {
  srv_sched *sched;
  const oai_model *M;
  int timeout;            /* client inactivity timeout (s), 0 = none */
  api_store *store;       /* responses kept for previous_response_id */
  const char *replica;    /* --replica-id or NULL: response ids are resp_<replica>_<hex> */
} api_ctx;

api_store *api_store_new(void);
void api_store_free(api_store *s);

/* Route the request if it is one of these APIs' paths (path without "/v1"): 1 with *ret set,
 * else 0. raw is the request body. */
int api_handle(api_ctx *A, struct MHD_Connection *c, const char *method, const char *path, const q35_buf *raw,
               enum MHD_Result *ret);
/* Whether path (without "/v1") belongs to these APIs. */
int api_known_path(const char *path);

/* ---- shared (api_common.c) ---- */

/* The converted request: the internal chat conversation plus what the output side needs. */
typedef struct api_conv {
  json_t *messages;       /* OpenAI chat messages (owned) */
  json_t *tools;          /* OpenAI chat tools (owned) or NULL */
  int parse_tools;        /* look for tool calls in the output */
  int think;              /* 1 / 0 / -1 (the template's default) */
  char *prefill;          /* text the assistant turn starts with (Anthropic), or NULL */
  int in_think;           /* the prompt ends inside <think> */
  int max_calls;          /* at most this many tool calls (0: any) */
  int count_only;         /* a token count (count_tokens, input_tokens): a prompt past the context is counted */
} api_conv;

void api_conv_free(api_conv *v);
/* Render v with the chat template and tokenize it into j->prompt (checked against the
 * context unless v->count_only). 0, or -1 with e filled (param names the field to blame). */
int api_conv_prompt(const oai_model *M, api_conv *v, srv_job *j, oai_error *e, const char *param);
/* The request's session header (session_id, else X-Session-Id), or NULL. */
const char *api_session_header(struct MHD_Connection *c);
/* The session id sid (NULL or "": anonymous) into j. 0 or -1 with e filled. */
int api_session(const char *sid, srv_job *j, oai_error *e);
/* A fresh id "<prefix><16 hex digits>". */
void api_id(char *out, size_t n, const char *prefix);
/* e filled with a 400 naming param; returns -1. */
int api_bad(oai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The first key of object o that is not in the NULL-terminated list allowed, or NULL. */
const char *api_unknown_key(const json_t *o, const char *const *allowed);
/* The same, except that a key of null_ok (NULL-terminated, or NULL) whose value is null counts as
 * absent: a field the API declares nullable that this server refuses, sent as null ("not given",
 * as clients that write every field send it). */
const char *api_unknown_key_null(const json_t *o, const char *const *allowed, const char *const *null_ok);
/* An optional number in [lo, hi] (lo excluded when lo_open): 1 set, 0 absent/null, -1 bad. */
int api_number(const json_t *o, const char *k, const char *param, double lo, double hi, int lo_open, double *out,
               oai_error *e);
int api_int(const json_t *o, const char *k, const char *param, long long lo, long long hi, long long *out,
            oai_error *e);

/* What generation produced, split as it arrives. */
typedef enum { API_REASONING, API_TEXT, API_CALL } api_piece_kind;
typedef void (*api_piece_fn)(void *cls, api_piece_kind kind, const char *text, const json_t *call);

typedef struct api_gen {
  const api_conv *v;
  q35_chat_stream *cs;    /* streamed: the incremental splitter; NULL when not streamed */
  q35_buf text;           /* every released byte */
  int32_t *toks;          /* generated token ids (to tell which stop string ended it) */
  size_t n_toks, cap;
  const char *finish;     /* "stop" / "length" once finished */
  int by_stop_string;     /* the finish came from a stop string (not the end-of-turn token) */
  int n_calls;            /* tool calls passed on so far */
} api_gen;

int api_gen_init(api_gen *g, const api_conv *v, int stream);
void api_gen_free(api_gen *g);
/* Fold events into g; when streamed, call fn for each new piece as the splitter releases it
 * (tool calls get fresh "call_..." ids, and at most v->max_calls are passed on). */
void api_gen_feed(api_gen *g, const srv_event *e, api_piece_fn fn, void *cls);
/* Non-streamed: the whole output split (the same pieces, in output order: reasoning, text,
 * then the calls). */
void api_gen_final(api_gen *g, api_piece_fn fn, void *cls);
/* Which of j's stop strings ended the output, or -1. */
int api_gen_stop_index(const api_gen *g, const oai_model *M, const srv_job *j);

/* Non-streamed: wait for the job, folding its events into g. 0 when done, -1 when the client
 * went away (the job is cancelled). */
int api_wait(srv_sched *s, struct MHD_Connection *c, srv_job *j, api_gen *g);

/* The streamed response: on_start writes the opening events, on_events turns events into SSE
 * text, on_end writes the end (the job is done or failed), release frees cls (and gets called
 * exactly once, also on failure). The job reference passes to the stream. */
typedef struct api_stream_ops {
  void (*on_start)(void *cls, q35_buf *out);
  void (*on_events)(void *cls, const srv_event *e, q35_buf *out);
  void (*on_end)(void *cls, q35_buf *out);
  void (*release)(void *cls);
} api_stream_ops;
enum MHD_Result api_stream(api_ctx *A, struct MHD_Connection *c, srv_job *j, const api_stream_ops *ops, void *cls);
/* Append "event: <name>\ndata: <obj>\n\n" (obj taken); name NULL: only the data line. */
void api_sse(q35_buf *out, const char *name, json_t *obj);

/* ---- the endpoints ---- */

enum MHD_Result api_responses(api_ctx *A, struct MHD_Connection *c, const json_t *body, int count_only);
/* The request parsers alone (no HTTP; for the fuzz target): a body -> a job ready for the
 * scheduler (*job, the caller's), or -1 with e filled (a 4xx). sid: the session header or NULL. */
int api_responses_parse(api_ctx *A, const json_t *body, const char *sid, srv_job **job, oai_error *e);
int api_messages_parse(api_ctx *A, const json_t *body, int count_only, const char *sid, srv_job **job, oai_error *e);
enum MHD_Result api_response_get(api_ctx *A, struct MHD_Connection *c, const char *method, const char *id);
enum MHD_Result api_messages(api_ctx *A, struct MHD_Connection *c, const json_t *body, int count_only);
/* Anthropic's error body {"type":"error","error":{"type", "message"}} as a response. */
enum MHD_Result api_anthropic_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
