/* http.c - libmicrohttpd plumbing for q35 serve (see http.h). */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/http.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_CONNECTIONS 512u   /* concurrent client connections (each one a thread) */
#define ERROR_MSG_MAX 768      /* longest error message in a response body */

/* ---- responses ---- */

enum MHD_Result http_send_buf(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result rc = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return rc;
}

enum MHD_Result http_send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (!s) return MHD_NO;
  return http_send_buf(c, status, "application/json", s, strlen(s));
}

json_t *http_error_body(unsigned status, const char *msg, const char *param) {
  const char *type = status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  const char *code = status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_exceeded"
                     : status == 503 ? "unavailable"
                     : status == 404 ? "not_found"
                     : status == 409 ? "conflict"
                     : status >= 500 ? "internal_error"
                                     : "invalid_value";
  return json_pack("{s:{s:s,s:s,s:s?,s:s}}", "error", "message", msg, "type", type, "param", param, "code", code);
}

enum MHD_Result http_send_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...) {
  char msg[ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return http_send_json(c, status, http_error_body(status, msg, param));
}

/* ---- requests ---- */

const char *http_header(struct MHD_Connection *c, const char *name) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

int http_collect_body(struct MHD_Connection *c, int is_post, int64_t max_body, const char *upload,
                      size_t *upload_size, void **con_cls, enum MHD_Result *ret) {
  http_request *rq = *con_cls;
  if (!rq) { /* the first call: headers only */
    rq = calloc(1, sizeof *rq);
    *ret = MHD_NO;
    if (!rq) return 1;
    *con_cls = rq;
    const char *cl = http_header(c, "Content-Length");
    if (is_post && cl && strtoll(cl, NULL, 10) > max_body) {
      rq->too_big = 1;
      *ret = http_send_error(c, 413, NULL, "the request body (%s bytes) exceeds the limit of %lld bytes", cl,
                             (long long)max_body);
      return 1;
    }
    *ret = MHD_YES;
    return 1;
  }
  if (*upload_size) {
    *ret = MHD_YES;
    if (!rq->too_big) {
      if ((int64_t)(rq->body.n + *upload_size) > max_body) {
        rq->too_big = 1;
        q35_buf_free(&rq->body);
      } else if (q35_buf_add(&rq->body, upload, *upload_size)) {
        *ret = MHD_NO;
        return 1;
      }
    }
    *upload_size = 0;
    return 1;
  }
  if (rq->too_big) {
    *ret = http_send_error(c, 413, NULL, "the request body exceeds the limit of %lld bytes", (long long)max_body);
    return 1;
  }
  return 0;
}

void http_request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  http_request *rq = *con_cls;
  if (!rq) return;
  q35_buf_free(&rq->body);
  free(rq);
  *con_cls = NULL;
}

/* ---- connections ---- */

void http_timeout_set(struct MHD_Connection *c, unsigned seconds) {
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

void http_timeout_restart(struct MHD_Connection *c, unsigned seconds) {
  http_timeout_set(c, 0u);
  http_timeout_set(c, seconds);
}

int http_peer_gone(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 0;
  struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
  if (p.revents & POLLIN) {
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return 0;
}

struct MHD_Daemon *http_start(const char *host, int port, unsigned timeout, MHD_AccessHandlerCallback handler,
                              void *cls) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  if (getaddrinfo(host, port_s, &hints, &ai) || !ai) {
    fprintf(stderr, "q35 serve: cannot resolve --host %s\n", host);
    return NULL;
  }
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-response is an error return, not a signal */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handler, cls, MHD_OPTION_SOCK_ADDR,
                                          ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, http_request_done, cls,
                                          MHD_OPTION_CONNECTION_LIMIT, MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                                          timeout, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!d) fprintf(stderr, "q35 serve: cannot listen on %s:%d (%s)\n", host, port, strerror(errno));
  return d;
}
