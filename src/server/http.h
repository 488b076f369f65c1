/*
 * http.h - the HTTP plumbing of q35 serve over libmicrohttpd: starting the daemon, collecting a
 * request body under the size limit, queueing responses (JSON, plain buffers, OpenAI-style
 * error bodies), the client inactivity timeout and noticing a client that went away.
 *
 * libmicrohttpd runs one thread per connection; every function here is called from the
 * connection's thread.
 */
#ifndef Q35_SERVER_HTTP_H
#define Q35_SERVER_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>

#include "base/buf.h"

/* ---- exposure: API keys, CORS, TLS, request log (set once by http_start) ---- */

typedef struct http_config {
  const char *const *api_keys;  /* accepted keys (Authorization: Bearer K or x-api-key: K); none: open */
  int n_api_keys;
  const char *const *cors;      /* allowed Origin values ("*": any); none: no CORS headers */
  int n_cors;
  const char *tls_key, *tls_cert; /* PEM text (both or neither): HTTPS */
  int verbose;                  /* one line per request on stderr (status, latency, tokens, 4xx reason) */
} http_config;

/* 1 when no keys are configured or the request carries one of them, compared in constant time
 * (an API's own 401 shape is the caller's; OpenAI's is http_send_error(c, 401, ...)). */
int http_auth_ok(struct MHD_Connection *c);
/* The CORS headers for this request's Origin when it is allowed (every response gets them). */
void http_add_cors(struct MHD_Connection *c, struct MHD_Response *r);
/* An OPTIONS request: the preflight answer (204 with the CORS headers, or 403 for an origin
 * not allowed). */
enum MHD_Result http_preflight(struct MHD_Connection *c, const char *url);
/* Token counts for the request log line of the current request (this connection's thread). */
void http_log_tokens(int32_t prompt, int32_t completion);
/* The status (and for an error, its reason) for the request log line. */
void http_log_status(unsigned status, const char *reason);

/* ---- responses ---- */

/* Queue a response of `len` bytes of `body` (malloc'ed; this takes it). */
enum MHD_Result http_send_buf(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len);
/* Queue j (which this takes) as an application/json response. */
enum MHD_Result http_send_json(struct MHD_Connection *c, unsigned status, json_t *j);
/* An OpenAI-style error body {"error": {"message", "type", "param", "code"}}; type and code
 * follow from the status. */
json_t *http_error_body(unsigned status, const char *msg, const char *param);
/* The same with an explicit code (NULL: the status's default), e.g. "context_length_exceeded". */
json_t *http_error_body_code(unsigned status, const char *msg, const char *param, const char *code);
/* Anthropic's error body {"type": "error", "error": {"type", "message"}}; type follows from the status. */
json_t *http_anthropic_error_body(unsigned status, const char *msg);
/* Queue an error response: OpenAI's shape, or Anthropic's when the request's path is under
 * /v1/messages (so every error there, 401, 404, 405, 413, 429 and 503 included, reads as the
 * Anthropic SDK expects). */
enum MHD_Result http_send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
enum MHD_Result http_send_error_code(struct MHD_Connection *c, unsigned status, const char *param, const char *code,
                                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- requests ---- */

/* A request header's value, or NULL. */
const char *http_header(struct MHD_Connection *c, const char *name);
/* A query-string argument's value (NULL when absent; "" for a bare key). */
const char *http_query(struct MHD_Connection *c, const char *name);
/* The first query-string argument whose key is not in the NULL-terminated list, or NULL. */
const char *http_query_unknown(struct MHD_Connection *c, const char *const *allowed);

/* The per-request state MHD keeps in *con_cls between calls of the access handler. */
typedef struct http_request {
  q35_buf body;
  int too_big;   /* the body passed the limit: it is dropped and the answer is 413 */
  int64_t discarded; /* bytes of an oversized body read and dropped */
  double t0;     /* when the headers arrived (request log) */
  char what[200]; /* "METHOD URL" (request log) */
} http_request;

/* Collect the request body across the access handler's calls. 1: the handler returns *ret now
 * (more body to come, a 413 queued, or out of memory); 0: the whole request is here, its body
 * in ((http_request *)*con_cls)->body. */
int http_collect_body(struct MHD_Connection *c, const char *method, const char *url, int64_t max_body,
                      const char *upload, size_t *upload_size, void **con_cls, enum MHD_Result *ret);
/* MHD's request-completed callback: frees the http_request. */
void http_request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

/* ---- connections ---- */

/* The client inactivity timeout in seconds for this connection; 0 suspends it. */
void http_timeout_set(struct MHD_Connection *c, unsigned seconds);
/* Restart the inactivity clock now (going through 0 resets it; MHD 0.9.75 connection.c). */
void http_timeout_restart(struct MHD_Connection *c, unsigned seconds);
/* Has the client closed its end? (a non-blocking look at the socket) */
int http_peer_gone(struct MHD_Connection *c);

/* Listen on host:port (a numeric address or a name that resolves) with one thread per
 * connection; timeout: client inactivity timeout in seconds (0 = none). NULL with a message
 * on stderr (prefixed "q35 serve: ") when it cannot. */
struct MHD_Daemon *http_start(const char *host, int port, unsigned timeout, const http_config *cfg,
                              MHD_AccessHandlerCallback handler, void *cls);

/* Requests in flight: their headers have arrived and they have not ended (a stream counts until
 * its last byte or its client is gone). */
int http_in_flight(void);
/* Stop accepting connections (draining, server.c): connections already open stay served, and
 * every response from now on carries "Connection: close". */
void http_stop_listening(struct MHD_Daemon *d);
/* Whether http_stop_listening has run. */
int http_closing(void);
/* Stop the daemon (closing every connection) and the listening socket. */
void http_stop(struct MHD_Daemon *d);

#endif
