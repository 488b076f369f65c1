/* http.c - libmicrohttpd plumbing for q35 serve (see http.h). */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/http.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"

#define MAX_CONNECTIONS 512u   /* concurrent client connections (each one a thread) */
#define ERROR_MSG_MAX 768      /* longest error message in a response body */
#define DISCARD_MAX (64ll << 20) /* an oversized body is read and dropped up to this many bytes, so the
                                    client (which sends it all before reading) receives the 413 */
#define LOG_REASON_MAX 240     /* the part of a 4xx message the request log shows */
#define PREFLIGHT_MAX_AGE "600"
#define CORS_ALLOW_HEADERS "Authorization, Content-Type, x-api-key, session_id, X-Session-Id, anthropic-version, " \
                           "anthropic-beta, OpenAI-Organization, OpenAI-Project"

static http_config g_cfg; /* set once by http_start, before any connection */
static atomic_int g_in_flight;  /* requests whose headers have arrived and that have not ended */
static atomic_int g_closing;    /* http_stop_listening ran: every response closes its connection */
static MHD_socket g_listen_fd = MHD_INVALID_SOCKET; /* the quiesced listening socket (closed by http_stop) */

/* What the request log line of this connection's current request says (one thread per
 * connection, so thread-local state is per request). */
static _Thread_local struct {
  unsigned status;
  char reason[LOG_REASON_MAX];
  int32_t prompt, completion;
  int has_tokens;
  int anthropic; /* the path is under /v1/messages: errors take Anthropic's shape */
} tl_log;

void http_log_status(unsigned status, const char *reason) {
  tl_log.status = status;
  const size_t n = reason ? strnlen(reason, sizeof tl_log.reason - 1) : 0; /* the start of a long reason */
  if (n) memcpy(tl_log.reason, reason, n);
  tl_log.reason[n] = 0;
}

void http_log_tokens(int32_t prompt, int32_t completion) {
  tl_log.prompt = prompt;
  tl_log.completion = completion;
  tl_log.has_tokens = 1;
}

/* ---- exposure ---- */

/* Constant-time equality: the time depends on the lengths only, never on where they differ. */
static int ct_equal(const char *a, size_t an, const char *b, size_t bn) {
  volatile unsigned char d = (unsigned char)(an != bn);
  for (size_t i = 0; i < an; i++) d |= (unsigned char)((unsigned char)a[i] ^ (unsigned char)b[bn ? i % bn : 0]);
  return d == 0;
}

int http_auth_ok(struct MHD_Connection *c) {
  if (g_cfg.n_api_keys <= 0) return 1;
  const char *given = NULL;
  const char *auth = http_header(c, "Authorization");
  if (auth && !strncasecmp(auth, "Bearer ", 7)) {
    given = auth + 7;
    while (*given == ' ') given++;
  }
  if (!given) given = http_header(c, "x-api-key");
  if (!given) return 0;
  const size_t gn = strlen(given);
  int ok = 0;
  for (int i = 0; i < g_cfg.n_api_keys; i++) ok |= ct_equal(given, gn, g_cfg.api_keys[i], strlen(g_cfg.api_keys[i]));
  return ok;
}

/* The Access-Control-Allow-Origin value for this request's Origin, or NULL. */
static const char *cors_origin(struct MHD_Connection *c) {
  const char *origin = http_header(c, "Origin");
  if (!origin || g_cfg.n_cors <= 0) return NULL;
  for (int i = 0; i < g_cfg.n_cors; i++) {
    if (!strcmp(g_cfg.cors[i], "*")) return "*";
    if (!strcmp(g_cfg.cors[i], origin)) return origin;
  }
  return NULL;
}

void http_add_cors(struct MHD_Connection *c, struct MHD_Response *r) {
  const char *o = cors_origin(c);
  if (!o) return;
  MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
  if (strcmp(o, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

enum MHD_Result http_preflight(struct MHD_Connection *c, const char *url) {
  const char *origin = http_header(c, "Origin");
  if (origin && !cors_origin(c))
    return http_send_error(c, 403, NULL, "origin '%s' is not allowed (q35 serve --cors ORIGIN)", origin);
  struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Allow", "GET, HEAD, POST, DELETE, OPTIONS");
  if (origin) {
    http_add_cors(c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
    const char *want = http_header(c, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", want ? want : CORS_ALLOW_HEADERS);
    MHD_add_response_header(r, "Access-Control-Max-Age", PREFLIGHT_MAX_AGE);
  }
  (void)url;
  http_log_status(204, NULL);
  enum MHD_Result rc = MHD_queue_response(c, 204, r);
  MHD_destroy_response(r);
  return rc;
}

/* ---- responses ---- */

enum MHD_Result http_send_buf(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  if (atomic_load(&g_closing)) MHD_add_response_header(r, "Connection", "close");
  http_add_cors(c, r);
  if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
  if (tl_log.status == 0 || status >= 400) tl_log.status = status;
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
  return http_error_body_code(status, msg, param, NULL);
}

json_t *http_anthropic_error_body(unsigned status, const char *msg) {
  const char *type = status == 400 ? "invalid_request_error"
                     : status == 401 ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", msg);
}

/* The error body in the shape of the API the current request's path belongs to. */
static json_t *error_body(unsigned status, const char *msg, const char *param, const char *code) {
  return tl_log.anthropic ? http_anthropic_error_body(status, msg) : http_error_body_code(status, msg, param, code);
}

json_t *http_error_body_code(unsigned status, const char *msg, const char *param, const char *code_given) {
  const char *type = status == 404 ? "not_found_error"
                     : status == 401 ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  const char *code = code_given ? code_given
                     : status == 401 ? "invalid_api_key"
                     : status == 403 ? "forbidden"
                     : status == 413 ? "request_too_large"
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
  http_log_status(status, msg);
  return http_send_json(c, status, error_body(status, msg, param, NULL));
}

enum MHD_Result http_send_error_code(struct MHD_Connection *c, unsigned status, const char *param, const char *code,
                                     const char *fmt, ...) {
  char msg[ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  http_log_status(status, msg);
  return http_send_json(c, status, error_body(status, msg, param, code));
}

/* ---- requests ---- */

const char *http_header(struct MHD_Connection *c, const char *name) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

const char *http_query(struct MHD_Connection *c, const char *name) {
  const char *v = NULL;
  size_t n = 0;
  if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v, &n) != MHD_YES) return NULL;
  return v ? v : "";
}

typedef struct {
  const char *const *allowed;
  const char *unknown;
} query_scan;

static enum MHD_Result query_key(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
  (void)kind;
  (void)value;
  query_scan *q = cls;
  for (const char *const *a = q->allowed; *a; a++)
    if (!strcmp(key, *a)) return MHD_YES;
  q->unknown = key;
  return MHD_NO;
}

const char *http_query_unknown(struct MHD_Connection *c, const char *const *allowed) {
  query_scan q = {allowed, NULL};
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_key, &q);
  return q.unknown;
}

int http_collect_body(struct MHD_Connection *c, const char *method, const char *url, int64_t max_body,
                      const char *upload, size_t *upload_size, void **con_cls, enum MHD_Result *ret) {
  const int is_post = !strcmp(method, "POST");
  http_request *rq = *con_cls;
  if (!rq) { /* the first call: headers only */
    rq = calloc(1, sizeof *rq);
    *ret = MHD_NO;
    if (!rq) return 1;
    *con_cls = rq;
    atomic_fetch_add(&g_in_flight, 1);
    memset(&tl_log, 0, sizeof tl_log);
    const char *path = !strncmp(url, "/v1/", 4) ? url + 3 : url; /* routes answer with or without /v1 */
    tl_log.anthropic = !strncmp(path, "/messages", 9) && (path[9] == 0 || path[9] == '/');
    rq->t0 = q35_now();
    snprintf(rq->what, sizeof rq->what, "%s %s", method, url);
    const char *cl = http_header(c, "Content-Length");
    const long long cln = cl ? strtoll(cl, NULL, 10) : 0;
    if (is_post && cln > max_body) {
      rq->too_big = 1;
      /* a client waiting for "100 Continue", or a body too large to drain, gets the 413 now;
       * any other client is sending the body and reads the answer after it (drained below) */
      const char *expect = http_header(c, "Expect");
      if (cln > DISCARD_MAX || (expect && !strcasecmp(expect, "100-continue"))) {
        *ret = http_send_error(c, 413, NULL, "the request body (%s bytes) exceeds the limit of %lld bytes", cl,
                               (long long)max_body);
        return 1;
      }
    }
    *ret = MHD_YES;
    return 1;
  }
  if (*upload_size) {
    *ret = MHD_YES;
    if (!rq->too_big) {
      if ((int64_t)(rq->body.n + *upload_size) > max_body) {
        rq->too_big = 1;
        rq->discarded = (int64_t)rq->body.n;
        q35_buf_free(&rq->body);
      } else if (q35_buf_add(&rq->body, upload, *upload_size)) {
        *ret = MHD_NO;
        return 1;
      }
    }
    if (rq->too_big) {
      rq->discarded += (int64_t)*upload_size;
      if (rq->discarded > DISCARD_MAX) { /* stop draining: answer now, MHD closes the connection */
        *upload_size = 0;
        *ret = http_send_error(c, 413, NULL, "the request body exceeds the limit of %lld bytes", (long long)max_body);
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
  http_request *rq = *con_cls;
  if (!rq) return;
  if (g_cfg.verbose && rq->what[0]) {
    char tokens[64] = "";
    if (tl_log.has_tokens) snprintf(tokens, sizeof tokens, " prompt %d completion %d tokens", tl_log.prompt,
                                    tl_log.completion);
    char status[16] = "no response";
    if (tl_log.status) snprintf(status, sizeof status, "%u", tl_log.status);
    fprintf(stderr, "q35 serve: %s -> %s in %.1f ms%s%s%s%s\n", rq->what, status, (q35_now() - rq->t0) * 1e3,
            tokens, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " (connection ended early)" : "",
            tl_log.status >= 400 && tl_log.reason[0] ? ": " : "", tl_log.status >= 400 ? tl_log.reason : "");
  }
  q35_buf_free(&rq->body);
  free(rq);
  *con_cls = NULL;
  atomic_fetch_sub(&g_in_flight, 1);
}

int http_in_flight(void) { return atomic_load(&g_in_flight); }

int http_closing(void) { return atomic_load(&g_closing); }

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

struct MHD_Daemon *http_start(const char *host, int port, unsigned timeout, const http_config *cfg,
                              MHD_AccessHandlerCallback handler, void *cls) {
  g_cfg = *cfg;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  if (getaddrinfo(host, port_s, &hints, &ai) || !ai) {
    fprintf(stderr, "q35 serve: cannot resolve --host %s\n", host);
    return NULL;
  }
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-response is an error return, not a signal */
  /* MHD_USE_ITC: MHD_quiesce_daemon (http_stop_listening) needs it in this threading mode */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  struct MHD_OptionItem tls[] = {{MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)cfg->tls_key},
                                 {MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cfg->tls_cert},
                                 {MHD_OPTION_END, 0, NULL}};
  if (cfg->tls_key && cfg->tls_cert) {
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
      fprintf(stderr, "q35 serve: this libmicrohttpd was built without TLS support (--ssl-key-file)\n");
      freeaddrinfo(ai);
      return NULL;
    }
    flags |= MHD_USE_TLS;
  } else {
    tls[0].option = MHD_OPTION_END;
  }
  struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handler, cls, MHD_OPTION_SOCK_ADDR,
                                          ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, http_request_done, cls,
                                          MHD_OPTION_CONNECTION_LIMIT, MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                                          timeout, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!d) fprintf(stderr, "q35 serve: cannot listen on %s:%d (%s)\n", host, port, strerror(errno));
  return d;
}

void http_stop_listening(struct MHD_Daemon *d) {
  atomic_store(&g_closing, 1);
  if (g_listen_fd != MHD_INVALID_SOCKET) return;
  g_listen_fd = MHD_quiesce_daemon(d);
  /* MHD's threads may still hold the descriptor until MHD_stop_daemon, so it stays open until
   * http_stop; shutting the listening socket down (Linux) makes the kernel refuse new
   * connections now instead of queueing them in the backlog unserved */
  if (g_listen_fd != MHD_INVALID_SOCKET) shutdown(g_listen_fd, SHUT_RDWR);
}

void http_stop(struct MHD_Daemon *d) {
  MHD_stop_daemon(d);
  if (g_listen_fd != MHD_INVALID_SOCKET) close(g_listen_fd);
  g_listen_fd = MHD_INVALID_SOCKET;
}
