/*
 * server.h - q35 serve: an OpenAI-compatible HTTP server over the library.
 *
 * HTTP/1.1 is libmicrohttpd (a thread per connection; streamed responses block in the
 * response callback until the scheduler produces text), JSON is jansson. The rooms:
 *   server.c            startup, routing, the endpoints
 *   http.c              libmicrohttpd plumbing: body limits, responses, timeouts, gone clients
 *   openai_request.c    a request body -> a validated job: sampling, stop strings, logprobs,
 *                       the chat template (chat.h) and tokenization (tokenizer.h)
 *   openai_response.c   events -> OpenAI objects: responses, chunks, logprobs, tool calls
 *   openai_constraint.c response_format / grammar / json_schema / forced tool calls: the one
 *                       place that wires (today: refuses) constrained decoding
 *   sse.c               the server-sent events writer (streamed responses)
 *   sched.c             the scheduler: owns the model, batches every active request into
 *                       shared q35_step calls, slots and prefix reuse (sched.h)
 *   stop.c              stop strings: text held back while it may start one
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models[/{id}], GET /health
 * (503 while loading), POST /tokenize, POST /detokenize, GET /metrics (Prometheus text),
 * DELETE /v1/sessions/{id}, POST /v1/sessions/{id}/reset, OPTIONS (CORS preflights). Errors
 * are OpenAI-style bodies {"error": {"message", "type", "param", "code"}}.
 * The OpenAI Responses API (POST /v1/responses, /v1/responses/input_tokens, GET / DELETE
 * /v1/responses/{id}) and the Anthropic Messages API (POST /v1/messages,
 * /v1/messages/count_tokens, Anthropic-style errors) run on the same engine: api.h.
 *
 * Behind a balancer (deploy/haproxy.cfg, README "Replicas"): /health answers 503 while loading
 * and while draining; SIGTERM or SIGINT drains (--drain-seconds of 503 on /health while requests
 * are still served, then no new connections, then up to --drain-timeout for the requests in flight,
 * then exit 0; a second signal skips what is left); /metrics has the router's gauges.
 *
 * Exposure: API keys (401 without one; /health open, /metrics unless metrics_open), HTTPS
 * (GnuTLS through libmicrohttpd), CORS origins; README.md "Server API" lists every field.
 *
 * Host limits (docs/HARDENING.md): body size (413), queue (429), memory budget for all
 * sessions' KV/state (idle sessions freed for room, else the request waits or gets 503), idle
 * session eviction, and an inactivity timeout for clients (MHD's connection timeout) that is
 * suspended while a completion computes and restarted whenever a stream hands over tokens.
 */
#ifndef Q35_SERVER_H
#define Q35_SERVER_H

#include <stdint.h>

#include "q35.h"

#define Q35_SERVER_REPLICA_ID_MAX 24 /* --replica-id: at most this many of [A-Za-z0-9-] */
#define Q35_SERVER_DRAFT 2           /* --draft default for a file with an MTP head */

typedef struct q35_server_opts {
  const char *model_path;
  /* NULL, or how to load the model (the MPI build's q35 serve: a pipeline's first stage, whose
   * later stages run on the other ranks); NULL: q35_model_load */
  q35_model *(*load)(const char *path, const q35_model_params *mp, void *arg, q35_err *err);
  void *load_arg;
  const char *host;        /* numeric address or "localhost" (default 127.0.0.1) */
  int port;                /* default 8080 */
  int parallel;            /* concurrent sequences (rows per step), default 4 */
  int pp_groups;           /* a pipeline over MPI: groups of sequences whose steps are in flight at
                              once (0: one per rank, the default; 1: one step at a time) */
  int32_t n_ctx;           /* per-session context, default 4096 */
  const char *alias;       /* model id (default: the file's base name) */
  int max_sessions;        /* named sessions, default 8 */
  int max_queue;           /* queued sequences before 429, default 64 */
  int no_think;            /* thinking off by default */
  int n_threads;
  int no_mmap;             /* read the weights into memory instead of mapping the file */
  int no_huge;             /* default page size for the file mapping (--no-huge-pages) */
  int no_repack;           /* keep the weights in the file's layout (--no-repack) */
  int64_t max_body;        /* request body limit in bytes, default 8 MiB */
  q35_kv_type kv_type;
  int32_t chunk;           /* prefill tokens per step, default 256 */
  int32_t snap_every;      /* periodic snapshot interval, default 1024 */
  int verbose;             /* log each request on stderr */
  uint64_t mem_budget;     /* bytes for every session's KV/state + snapshots together; 0 = no limit */
  int idle_timeout;        /* free sessions unused for this many seconds (0 = never), default 600 */
  int timeout;             /* drop a client idle this many seconds while sending its request or not
                              reading its response (0 = never), default 30; never while a
                              request is being computed */
  int drain_seconds;       /* SIGTERM/SIGINT: /health answers 503 and requests are served for this many
                              seconds more, so a balancer marks the replica down (default 0) */
  int drain_timeout;       /* then: no new connections; requests in flight get this many seconds to
                              finish before they are ended with an error (default 30) */
  const char *replica_id;  /* --replica-id NAME: this replica's name behind a balancer (the HAProxy
                              server name); Responses API ids carry it (deploy/haproxy.cfg) */
  int draft;               /* speculative decoding: MTP drafts a decode row may carry; -1 (default):
                              Q35_SERVER_DRAFT when the file has an MTP head, else 0 (off) */
  int32_t draft_vocab;     /* the head drafts among ids [0, draft_vocab) (0, the default: all) */
  int draft_fixed;         /* every decode row drafts `draft` (default: the adaptive policy) */
  q35_sampling sampling;    /* defaults for requests that leave a parameter unset and a model
                               file without general.sampling.* for it (--temp, --top-k, ...) */
  /* exposure */
#define Q35_SERVER_MAX_LIST 64
  const char *api_keys[Q35_SERVER_MAX_LIST]; /* --api-key (repeatable); any key set: requests need one */
  int n_api_keys;
  const char *api_key_file; /* --api-key-file: one key a line (blank lines and # comments skipped) */
  int metrics_open;         /* /metrics without a key */
  const char *ssl_key_file, *ssl_cert_file; /* PEM files: HTTPS */
  const char *cors[Q35_SERVER_MAX_LIST];     /* --cors ORIGIN (repeatable; "*" = any) */
  int n_cors;
} q35_server_opts;

void q35_server_default_opts(q35_server_opts *o);
/* Serve until SIGINT/SIGTERM (then drain, see above). Returns a process exit status (0, or 1 on a runtime error). */
int q35_server_run(const q35_server_opts *o);

#endif
