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

/* ---- responses ---- */

/* Queue a response of `len` bytes of `body` (malloc'ed; this takes it). */
enum MHD_Result http_send_buf(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len);
/* Queue j (which this takes) as an application/json response. */
enum MHD_Result http_send_json(struct MHD_Connection *c, unsigned status, json_t *j);
/* An OpenAI-style error body {"error": {"message", "type", "param", "code"}}; type and code
 * follow from the status. */
json_t *http_error_body(unsigned status, const char *msg, const char *param);
enum MHD_Result http_send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- requests ---- */

/* A request header's value, or NULL. */
const char *http_header(struct MHD_Connection *c, const char *name);

/* The per-request state MHD keeps in *con_cls between calls of the access handler. */
typedef struct http_request {
  q35_buf body;
  int too_big;   /* the body passed the limit: it is dropped and the answer is 413 */
} http_request;

/* Collect the request body across the access handler's calls. 1: the handler returns *ret now
 * (more body to come, a 413 queued, or out of memory); 0: the whole request is here, its body
 * in ((http_request *)*con_cls)->body. */
int http_collect_body(struct MHD_Connection *c, int is_post, int64_t max_body, const char *upload,
                      size_t *upload_size, void **con_cls, enum MHD_Result *ret);
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
struct MHD_Daemon *http_start(const char *host, int port, unsigned timeout, MHD_AccessHandlerCallback handler,
                              void *cls);

#endif
