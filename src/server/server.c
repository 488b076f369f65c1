/*
 * server.c - q35 serve (see server.h): startup, routing and the endpoints.
 *
 * Threads: libmicrohttpd runs one thread per connection. A completion request is parsed,
 * rendered and tokenized in its connection thread (openai_request.c), submitted to the
 * scheduler (sched.h), and then
 *  - non-streamed: the connection thread waits for the job's events, checking every
 *    POLL_MS whether the client is still there (a gone client cancels the job);
 *  - streamed: the SSE writer (sse.c) returns the events as they come.
 * Event processing (logprob entries, reasoning/content split, tool calls; openai_response.c)
 * happens in the connection thread, so the scheduler thread only samples and detokenizes.
 * HTTP plumbing (body limits, responses, timeouts) is http.c.
 */
#include "server/server.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "format/gguf.h"
#include "server/api.h"
#include "server/http.h"
#include "server/openai.h"
#include "server/sched.h"
#include "server/sse.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#define POLL_MS 100               /* a waiting request looks at its client this often */
#define SESSION_PATH_ID_MAX 160   /* longest {id} taken from a /v1/sessions/{id} path, + 1 */

typedef struct srv {
  q35_server_opts o;
  struct MHD_Daemon *d;
  atomic_int ready;               /* the model is loaded: requests are served */
  atomic_int draining;            /* 0 serving; 1 draining: /health 503, requests served;
                                     2 stopping: no new connections, new requests 503 */
  q35_model *model;
  q35_tokenizer *tok;
  srv_sched *sched;
  char *tmpl, *bos, *eos;
  oai_model oai;                  /* what the OpenAI layer sees of the model */
  api_ctx api;                    /* /v1/responses and /v1/messages (api.h) */
  q35_constraint_vocab *cvocab;   /* token byte strings for constrained decoding */
  long created;
  http_config http;               /* keys, CORS, TLS for http.c */
  char **keys;                    /* --api-key values and --api-key-file lines */
  int n_keys;
  char *tls_key, *tls_cert;       /* PEM text of --ssl-key-file / --ssl-cert-file */
} srv;

/* ---- endpoints ---- */

static enum MHD_Result do_completion(srv *S, struct MHD_Connection *c, const json_t *body, int chat) {
  oai_request r;
  oai_error e = {0};
  const char *sid = http_header(c, "session_id");
  if (!sid) sid = http_header(c, "X-Session-Id");
  if (oai_parse_request(&S->oai, body, chat, sid, &r, &e)) {
    if (r.job) srv_job_release(S->sched, r.job);
    oai_request_free(&r);
    return http_send_error_code(c, e.status ? e.status : 400, e.param, e.code, "%s", e.msg);
  }
  char msg[512];
  int st = srv_sched_submit(S->sched, r.job, msg, sizeof msg);
  if (st) {
    srv_job_release(S->sched, r.job);
    oai_request_free(&r);
    return http_send_error(c, (unsigned)st, NULL, "%s", msg);
  }
  oai_choice *ch = oai_choices_new(&r);
  if (!ch) {
    srv_job_cancel(S->sched, r.job);
    srv_job_release(S->sched, r.job);
    oai_request_free(&r);
    return http_send_error(c, 503, NULL, "out of memory");
  }
  if (r.stream) return sse_respond(c, S->sched, &S->oai, S->o.timeout, &r, ch);
  for (;;) {
    int done = 0;
    srv_event *ev = srv_job_take(S->sched, r.job, POLL_MS, &done);
    oai_add_events(&S->oai, &r, ch, ev, NULL);
    srv_events_free(ev);
    if (done) break;
    if (!ev && http_peer_gone(c)) {
      srv_job_cancel(S->sched, r.job);
      oai_choices_free(ch, r.job->n);
      srv_job_release(S->sched, r.job);
      oai_request_free(&r);
      return MHD_NO;
    }
  }
  enum MHD_Result rc;
  http_log_tokens(r.job->n_prompt, r.job->completion_tokens);
  if (r.job->failed) rc = http_send_error(c, (unsigned)r.job->status, NULL, "%s", r.job->errmsg);
  else rc = http_send_json(c, 200, oai_final_response(&S->oai, &r, ch));
  oai_choices_free(ch, r.job->n);
  srv_job_release(S->sched, r.job);
  oai_request_free(&r);
  return rc;
}

static enum MHD_Result do_tokenize(srv *S, struct MHD_Connection *c, const json_t *b) {
  const json_t *t = json_object_get(b, "content");
  const char *param = "content";
  if (!t) {
    t = json_object_get(b, "text");
    param = "text";
  }
  if (!t) t = json_object_get(b, "prompt");
  if (!json_is_string(t)) return http_send_error(c, 400, "content", "'content' must be a string");
  int add_special = 0, pieces = 0;
  oai_error e = {0};
  if (oai_get_bool(b, "add_special", &add_special, &e) < 0 || oai_get_bool(b, "with_pieces", &pieces, &e) < 0)
    return http_send_error(c, 400, e.param, "%s", e.msg);
  int32_t *ids = NULL, n = 0;
  if (oai_tokenize(&S->oai, json_string_value(t), json_string_length(t), add_special, &ids, &n, &e, param))
    return http_send_error(c, 400, e.param, "%s", e.msg);
  json_t *arr = json_array();
  for (int32_t i = 0; i < n; i++) {
    if (pieces)
      json_array_append_new(arr, json_pack("{s:I,s:o}", "id", (json_int_t)ids[i], "piece",
                                           oai_token_str(&S->oai, ids[i], NULL)));
    else json_array_append_new(arr, json_integer(ids[i]));
  }
  free(ids);
  return http_send_json(c, 200, json_pack("{s:o,s:I}", "tokens", arr, "count", (json_int_t)n));
}

static enum MHD_Result do_detokenize(srv *S, struct MHD_Connection *c, const json_t *b) {
  const json_t *t = json_object_get(b, "tokens");
  if (!json_is_array(t)) return http_send_error(c, 400, "tokens", "'tokens' must be an array of token ids");
  const size_t n = json_array_size(t);
  int32_t *ids = malloc(sizeof(int32_t) * (n + 1));
  if (!ids) return http_send_error(c, 503, NULL, "out of memory");
  const int32_t V = q35_tokenizer_n_vocab(S->tok);
  for (size_t i = 0; i < n; i++) {
    const json_t *v = json_array_get(t, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
      free(ids);
      return http_send_error(c, 400, "tokens", "'tokens[%zu]' must be a token id in [0, %d)", i, V);
    }
    ids[i] = (int32_t)json_integer_value(v);
  }
  char *out = NULL;
  size_t len = 0;
  q35_err err = {{0}};
  int rc = q35_detokenize(S->tok, ids, n, Q35_DETOK_LOSSY, &out, &len, &err);
  free(ids);
  if (rc) return http_send_error(c, 400, "tokens", "%s", err.msg);
  json_t *o = json_pack("{s:s%}", "content", out, len);
  free(out);
  return http_send_json(c, 200, o);
}

/* The model object in OpenAI's shape (id, object, created, owned_by) with Anthropic's fields
 * (type, display_name, created_at) beside them, so both SDKs read a complete object. */
static json_t *model_obj(srv *S) {
  char at[32];
  const time_t t = (time_t)S->created;
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:{s:I,s:I}}", "id", S->oai.id, "object", "model", "created",
                   (json_int_t)S->created, "owned_by", "q35", "type", "model", "display_name", S->oai.id,
                   "created_at", at, "meta", "n_ctx", (json_int_t)S->o.n_ctx, "n_vocab",
                   (json_int_t)q35_model_n_vocab(S->model));
}

/* GET /v1/models, or GET /v1/models/{id} when id is not NULL (the id or its stem without .gguf).
 * The list carries Anthropic's paging fields too (one model: no more pages). */
static enum MHD_Result do_models(srv *S, struct MHD_Connection *c, const char *id) {
  if (!id)
    return http_send_json(c, 200, json_pack("{s:s,s:[o],s:b,s:s,s:s}", "object", "list", "data", model_obj(S),
                                            "has_more", 0, "first_id", S->oai.id, "last_id", S->oai.id));
  if (strcmp(id, S->oai.id) && strcmp(id, S->oai.stem))
    return http_send_error_code(c, 404, "model", "model_not_found", "model '%s' is not served here; this server has '%s'",
                                id, S->oai.id);
  return http_send_json(c, 200, model_obj(S));
}

static enum MHD_Result do_metrics(srv *S, struct MHD_Connection *c) {
  char *m = srv_sched_metrics(S->sched);
  if (!m) return http_send_error(c, 503, NULL, "out of memory");
  q35_buf b = {0};
  q35_buf_str(&b, m);
  free(m);
  /* the process's side of what a router reads (the scheduler's is above) */
#define G(name, help, val) \
  q35_buf_printf(&b, "# HELP q35_" name " " help "\n# TYPE q35_" name " gauge\nq35_" name " %d\n", val)
  G("ready", "1 when the model is loaded and the server is not draining.",
    atomic_load(&S->ready) && !atomic_load(&S->draining));
  G("draining", "1 after SIGTERM (/health answers 503), 2 once no new connections are taken.",
    atomic_load(&S->draining));
  G("http_requests_in_flight", "HTTP requests being received, computed or streamed.", http_in_flight());
#undef G
  if (S->o.replica_id)
    q35_buf_printf(&b, "# HELP q35_replica_info This replica's --replica-id.\n# TYPE q35_replica_info gauge\n"
                       "q35_replica_info{replica=\"%s\"} 1\n", S->o.replica_id);
  if (b.oom) {
    q35_buf_free(&b);
    return http_send_error(c, 503, NULL, "out of memory");
  }
  size_t n = 0;
  char *out = q35_buf_take(&b, &n);
  return http_send_buf(c, 200, "text/plain; version=0.0.4", out, n);
}

/* DELETE /v1/sessions/{id} and POST /v1/sessions/{id}/reset; rest is the path after "/sessions/". */
static enum MHD_Result do_session(srv *S, struct MHD_Connection *c, const char *method, const char *url,
                                  const char *rest) {
  char id[SESSION_PATH_ID_MAX];
  const char *slash = strchr(rest, '/');
  size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
  if (n == 0 || n >= sizeof id) return http_send_error(c, 404, NULL, "no endpoint %s %s", method, url);
  memcpy(id, rest, n);
  id[n] = 0;
  int st;
  if (!slash && !strcmp(method, "DELETE")) st = srv_sched_session_delete(S->sched, id);
  else if (slash && !strcmp(slash, "/reset") && !strcmp(method, "POST")) st = srv_sched_session_reset(S->sched, id);
  else return http_send_error(c, 404, NULL, "no endpoint %s %s", method, url);
  if (st == 404) return http_send_error(c, 404, NULL, "no session '%s'", id);
  if (st == 409) return http_send_error(c, 409, NULL, "session '%s' is busy with a request", id);
  return http_send_json(c, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object", "session", slash ? "reset" : "deleted", 1));
}

/* The POST endpoints with a JSON body: completions, tokenize, detokenize. */
static enum MHD_Result do_post(srv *S, struct MHD_Connection *c, const char *path, const q35_buf *raw) {
  json_error_t je;
  json_t *body = json_loadb(raw->p ? raw->p : "", raw->n, 0, &je);
  if (!body)
    return http_send_error(c, 400, NULL, "malformed JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
  enum MHD_Result rc;
  const int compute = json_is_object(body) && (!strcmp(path, "/chat/completions") || !strcmp(path, "/completions"));
  /* no client timeout while the request computes */
  if (compute && S->o.timeout > 0) http_timeout_set(c, 0u);
  if (!json_is_object(body)) rc = http_send_error(c, 400, NULL, "the request body must be a JSON object");
  else if (!strcmp(path, "/chat/completions")) rc = do_completion(S, c, body, 1);
  else if (!strcmp(path, "/completions")) rc = do_completion(S, c, body, 0);
  else if (!strcmp(path, "/tokenize")) rc = do_tokenize(S, c, body);
  else rc = do_detokenize(S, c, body);
  /* from 0 back to --timeout restarts the inactivity clock now, so a computation longer than
   * the timeout does not get its response dropped */
  if (compute && S->o.timeout > 0) http_timeout_set(c, (unsigned)S->o.timeout);
  json_decref(body);
  return rc;
}

/* ---- routing ---- */

static int known_path(const char *path) {
  static const char *const exact[] = {"/models", "/chat/completions", "/completions", "/tokenize", "/detokenize",
                                      "/metrics"};
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
    if (!strcmp(path, exact[i])) return 1;
  return !strncmp(path, "/sessions/", 10) || !strncmp(path, "/models/", 8);
}

/* 401 (in Anthropic's shape under /v1/messages: http_send_error picks it). */
static enum MHD_Result send_unauthorized(struct MHD_Connection *c) {
  return http_send_error(c, 401, NULL, "%s",
                         "a valid API key is required: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)version;
  srv *S = cls;
  const int is_post = !strcmp(method, "POST");
  enum MHD_Result ret;
  if (http_collect_body(c, method, url, S->o.max_body, upload, upload_size, con_cls, &ret)) return ret;
  /* CORS preflights carry no credentials; routes that need no model */
  if (!strcmp(method, "OPTIONS")) return http_preflight(c, url);
  if (!strcmp(url, "/health")) {
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return http_send_error(c, 405, NULL, "use GET /health");
    if (!atomic_load(&S->ready)) return http_send_json(c, 503, http_error_body(503, "the model is loading", NULL));
    if (atomic_load(&S->draining))
      return http_send_json(c, 503, http_error_body(503, "the server is draining (shutting down)", NULL));
    return http_send_json(c, 200, json_pack("{s:s}", "status", "ok"));
  }
  const char *path = url;
  if (!strncmp(path, "/v1/", 4)) path += 3;
  const int metrics = !strcmp(path, "/metrics");
  if (!(metrics && S->o.metrics_open) && !http_auth_ok(c)) return send_unauthorized(c);
  if (!known_path(path) && !api_known_path(path))
    return http_send_error(c, 404, NULL, "no endpoint %s %s", method, url);
  if (!atomic_load(&S->ready)) return http_send_error(c, 503, NULL, "the model is loading");
  /* stopping: a request on a connection opened before goes elsewhere (the balancer retries a 503) */
  if (atomic_load(&S->draining) == 2) return http_send_error(c, 503, NULL, "the server is shutting down");
  if (api_handle(&S->api, c, method, path, &((http_request *)*con_cls)->body, &ret)) return ret;
  if (!strcmp(path, "/models") || metrics || !strncmp(path, "/models/", 8)) {
    if (strcmp(method, "GET")) return http_send_error(c, 405, NULL, "use GET %s", url);
    if (metrics) return do_metrics(S, c);
    return do_models(S, c, path[7] == '/' ? path + 8 : NULL);
  }
  if (!strncmp(path, "/sessions/", 10)) return do_session(S, c, method, url, path + 10);
  if (!is_post) return http_send_error(c, 405, NULL, "use POST %s", url);
  return do_post(S, c, path, &((http_request *)*con_cls)->body);
}

/* ---- startup ---- */

void q35_server_default_opts(q35_server_opts *o) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 8080;
  o->parallel = 4;
  o->n_ctx = 4096;
  o->max_sessions = 8;
  o->max_queue = 64;
  o->max_body = 8 << 20;
  o->kv_type = Q35_KV_F16;
  o->chunk = 256;
  o->snap_every = 1024;
  o->idle_timeout = 600;
  o->timeout = 30;
  o->drain_timeout = 30;
  o->sampling = q35_sampling_default();
  o->draft = -1;
}

static volatile sig_atomic_t g_stop; /* signals seen, up to 2 (the one process-wide state) */
static void on_signal(int sig) {
  (void)sig;
  if (g_stop < 2) g_stop = g_stop + 1;
}

static void sleep_poll(void) {
  struct timespec ts = {0, POLL_MS * 1000000L};
  nanosleep(&ts, NULL);
}

/* After the first signal: drain (README "Replicas"). A second signal skips what is left. */
static void drain(srv *S) {
  const q35_server_opts *o = &S->o;
  atomic_store(&S->draining, 1);
  if (o->drain_seconds > 0) {
    fprintf(stderr, "q35 serve: draining: /health answers 503; serving %d s more (a second signal stops now)\n",
            o->drain_seconds);
    const double t0 = q35_now();
    while (g_stop < 2 && q35_now() - t0 < o->drain_seconds) sleep_poll();
  }
  atomic_store(&S->draining, 2);
  http_stop_listening(S->d);
  int n = http_in_flight();
  if (n > 0 && g_stop < 2) {
    fprintf(stderr, "q35 serve: no new connections; waiting up to %d s for %d request%s in flight\n",
            o->drain_timeout, n, n == 1 ? "" : "s");
    const double t0 = q35_now();
    while (g_stop < 2 && http_in_flight() > 0 && q35_now() - t0 < o->drain_timeout) sleep_poll();
  }
  if ((n = http_in_flight()) > 0) { /* past the bound: streams end with an error event */
    fprintf(stderr, "q35 serve: ending %d request%s still in flight\n", n, n == 1 ? "" : "s");
    srv_sched_fail_all(S->sched, 503, "the server is shutting down");
    const double t0 = q35_now();
    while (http_in_flight() > 0 && q35_now() - t0 < 2.0) sleep_poll();
  }
}

/* The model id (--alias, else the file's base name) and its stem without ".gguf". */
static void set_model_id(srv *S, const q35_server_opts *o) {
  const char *base = strrchr(o->model_path, '/');
  base = base ? base + 1 : o->model_path;
  snprintf(S->oai.id, sizeof S->oai.id, "%s", o->alias ? o->alias : base);
  snprintf(S->oai.stem, sizeof S->oai.stem, "%s", S->oai.id);
  size_t sl = strlen(S->oai.stem);
  if (!o->alias && sl > 5 && !strcmp(S->oai.stem + sl - 5, ".gguf")) S->oai.stem[sl - 5] = 0;
}

/* The model card's recommended sampling (general.sampling.*, as gguf-py names them) over the
 * server's defaults; a value out of range or a key q35 cannot honour is reported on stderr. */
static void model_card_sampling(const gguf_file *gf, q35_sampling *sp) {
  static const char *const unsupported[] = {"general.sampling.sequence", "general.sampling.xtc_probability",
                                            "general.sampling.xtc_threshold", "general.sampling.penalty_last_n",
                                            "general.sampling.mirostat", "general.sampling.mirostat_tau",
                                            "general.sampling.mirostat_eta"};
  static const struct { const char *key; int what; } K[] = {
      {"general.sampling.temp", 0}, {"general.sampling.top_k", 1}, {"general.sampling.top_p", 2},
      {"general.sampling.min_p", 3}, {"general.sampling.penalty_repeat", 4}};
  char used[256] = "";
  for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
    const gguf_kv *kv = gguf_find(gf, K[i].key);
    if (!kv) continue;
    double x;
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64) x = kv->v.f;
    else if (kv->type == GGUF_I8 || kv->type == GGUF_I16 || kv->type == GGUF_I32 || kv->type == GGUF_I64) x = (double)kv->v.i;
    else if (kv->type == GGUF_U8 || kv->type == GGUF_U16 || kv->type == GGUF_U32 || kv->type == GGUF_U64) x = (double)kv->v.u;
    else {
      fprintf(stderr, "q35 serve: %s is not a number; not used\n", K[i].key);
      continue;
    }
    q35_sampling t = *sp;
    if (K[i].what == 0) t.temperature = (float)x;
    else if (K[i].what == 1) t.top_k = (int64_t)x;
    else if (K[i].what == 2) t.top_p = (float)x;
    else if (K[i].what == 3) t.min_p = (float)x;
    else t.repetition_penalty = (float)x;
    q35_err e = {{0}};
    if (q35_sampling_validate(&t, &e) || (K[i].what == 0 && x > 2)) {
      fprintf(stderr, "q35 serve: %s = %g is out of range; not used (%s)\n", K[i].key, x, e.msg[0] ? e.msg : "temp > 2");
      continue;
    }
    *sp = t;
    const size_t n = strlen(used);
    snprintf(used + n, sizeof used - n, "%s%s %g", n ? ", " : "", K[i].key + 17, x);
  }
  if (used[0]) fprintf(stderr, "q35 serve: sampling defaults from the model file: %s\n", used);
  for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
    if (gguf_find(gf, unsupported[i]))
      fprintf(stderr, "q35 serve: %s is in the model file but q35 has no such sampler; not applied\n", unsupported[i]);
}

/* Tokenizer, chat template, weights and the scheduler. 0, or -1 with err filled. */
static int load_model(srv *S, const q35_server_opts *o, q35_err *err) {
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = o->n_threads;
  mp.no_mmap = o->no_mmap;
  mp.no_huge = o->no_huge;
  mp.no_repack = o->no_repack;
  mp.progress = 1; /* "loading ..." / "loaded ... in N s" (and a 2 MiB-page re-read) on stderr */
  gguf_file *gf = gguf_open(o->model_path, err);
  if (gf) {
    S->oai.defaults = o->sampling;
    model_card_sampling(gf, &S->oai.defaults);
    S->tok = q35_tokenizer_from_gguf(gf, err);
    if (S->tok && q35_chat_template_from_gguf(gf, &S->tmpl, &S->bos, &S->eos, err)) {
      q35_tokenizer_free(S->tok);
      S->tok = NULL;
    }
    gguf_close(gf);
  }
  if (S->tok) S->model = o->load ? o->load(o->model_path, &mp, o->load_arg, err) : q35_model_load(o->model_path, &mp, err);
  srv_sched_opts so = {.parallel = o->parallel,
                       .max_sessions = o->max_sessions,
                       .max_queue = o->max_queue,
                       .n_ctx = o->n_ctx,
                       .kv_type = o->kv_type,
                       .chunk = o->chunk,
                       .snap_every = o->snap_every,
                       .mem_budget = o->mem_budget,
                       .idle_timeout = o->idle_timeout,
                       /* the default: speculation with a head, outside a pipeline (there it would step
                          one group, without the stages' steps in flight: --draft N asks for it) */
                       .draft = o->draft >= 0                                                       ? o->draft
                                : S->model && q35_model_has_mtp(S->model) && q35_model_stages(S->model) < 2 ? Q35_SERVER_DRAFT
                                                                                                             : 0,
                       .draft_vocab = o->draft_vocab,
                       .draft_fixed = o->draft_fixed,
                       .groups = o->pp_groups};
  if (S->model) S->sched = srv_sched_new(S->model, S->tok, &so, err);
  if (!S->sched) return -1;
  S->oai.tok = S->tok;
  S->oai.tmpl = S->tmpl;
  S->oai.bos = S->bos;
  S->oai.eos = S->eos;
  S->oai.n_ctx = o->n_ctx;
  if (S->model && !(S->cvocab = q35_constraint_vocab_from_model(S->model, err))) return -1;
  S->oai.cvocab = S->cvocab;
  S->oai.no_think = o->no_think;
  S->api = (api_ctx){
      .sched = S->sched, .M = &S->oai, .timeout = o->timeout, .store = api_store_new(), .replica = o->replica_id};
  if (!S->api.store) return q35_seterr(err, "out of memory");
  return 0;
}

/* How many sessions the memory budget holds at once (a line on stderr). */
static void report_budget(const srv *S, const q35_server_opts *o) {
  if (!o->mem_budget) return;
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = o->n_ctx;
  sp.kv_type = o->kv_type;
  const uint64_t need = q35_session_state_bytes(S->model, &sp, NULL);
  const uint64_t most = (uint64_t)o->parallel + (uint64_t)o->max_sessions;
  const double MiB = 1048576.0;
  fprintf(stderr, "q35 serve: memory budget %.1f MiB: a session needs %.1f MiB, %llu of %llu sessions fit at once%s\n",
          o->mem_budget / MiB, need / MiB, (unsigned long long)(need ? o->mem_budget / need : most),
          (unsigned long long)most, need && o->mem_budget / need < most ? " (idle ones are freed to make room)" : "");
}

/* A whole file as a NUL-terminated string (NULL with a message on stderr). */
static char *read_text_file(const char *path, const char *flag) {
  FILE *f = fopen(path, "rb");
  q35_buf b = {0};
  char chunk[4096];
  size_t n;
  if (!f) {
    fprintf(stderr, "q35 serve: %s %s: cannot open it\n", flag, path);
    return NULL;
  }
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    if (q35_buf_add(&b, chunk, n)) break;
  const int bad = ferror(f) || (!feof(f));
  fclose(f);
  if (bad || !b.p) {
    fprintf(stderr, "q35 serve: %s %s: cannot read it%s\n", flag, path, b.p ? "" : " (empty)");
    q35_buf_free(&b);
    return NULL;
  }
  return b.p;
}

/* --api-key values and --api-key-file lines into S->keys; TLS files into S->tls_*. 0 or -1. */
static int load_exposure(srv *S, const q35_server_opts *o) {
  char *file = o->api_key_file ? read_text_file(o->api_key_file, "--api-key-file") : NULL;
  if (o->api_key_file && !file) return -1;
  size_t most = (size_t)o->n_api_keys + 1;
  for (const char *p = file; p && *p; p++) most += *p == '\n';
  S->keys = calloc(most, sizeof *S->keys);
  if (!S->keys) return -1;
  for (int i = 0; i < o->n_api_keys; i++) S->keys[S->n_keys++] = strdup(o->api_keys[i]);
  for (char *line = file, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    else next = line + strlen(line);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = 0;
    while (*line == ' ' || *line == '\t') line++;
    if (*line && *line != '#') S->keys[S->n_keys++] = strdup(line);
  }
  free(file);
  if (o->api_key_file && S->n_keys == o->n_api_keys) {
    fprintf(stderr, "q35 serve: --api-key-file %s holds no key\n", o->api_key_file);
    return -1;
  }
  if (!o->ssl_key_file != !o->ssl_cert_file) {
    fprintf(stderr, "q35 serve: HTTPS needs both --ssl-key-file and --ssl-cert-file\n");
    return -1;
  }
  if (o->ssl_key_file) {
    S->tls_key = read_text_file(o->ssl_key_file, "--ssl-key-file");
    S->tls_cert = S->tls_key ? read_text_file(o->ssl_cert_file, "--ssl-cert-file") : NULL;
    if (!S->tls_cert) return -1;
  }
  S->http = (http_config){.api_keys = (const char *const *)S->keys,
                          .n_api_keys = S->n_keys,
                          .cors = o->cors,
                          .n_cors = o->n_cors,
                          .tls_key = S->tls_key,
                          .tls_cert = S->tls_cert,
                          .verbose = o->verbose};
  return 0;
}

static void srv_free(srv *S) {
  for (int i = 0; i < S->n_keys; i++) free(S->keys[i]);
  free(S->keys);
  free(S->tls_key);
  free(S->tls_cert);
  free(S);
}

int q35_server_run(const q35_server_opts *o) {
  srv *S = calloc(1, sizeof *S);
  if (!S) return 1;
  S->o = *o;
  S->created = (long)time(NULL);
  set_model_id(S, o);
  if (load_exposure(S, o)) {
    srv_free(S);
    return 1;
  }
  /* listen first: /health answers 503 while the model loads */
  S->d = http_start(o->host, o->port, (unsigned)(o->timeout > 0 ? o->timeout : 0), &S->http, on_request, S);
  if (!S->d) {
    srv_free(S);
    return 1;
  }
  fprintf(stderr, "q35 serve: listening on %s://%s:%d (loading %s)%s\n", S->tls_key ? "https" : "http", o->host,
          o->port, o->model_path, S->n_keys ? "; API key required" : "");
  int rc = 1;
  q35_err err = {{0}};
  if (load_model(S, o, &err)) {
    fprintf(stderr, "q35 serve: %s\n", err.msg);
    goto done;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  atomic_store(&S->ready, 1);
  fprintf(stderr, "q35 serve: ready: model '%s' (%s), %d parallel, context %d%s%s\n", S->oai.id,
          q35_model_desc(S->model), o->parallel, o->n_ctx, o->replica_id ? ", replica " : "",
          o->replica_id ? o->replica_id : "");
  report_budget(S, o);
  while (!g_stop) sleep_poll();
  drain(S);
  fprintf(stderr, "q35 serve: shutting down\n");
  rc = 0;
done:
  http_stop(S->d);
  srv_sched_free(S->sched);
  api_store_free(S->api.store);
  q35_constraint_vocab_free(S->cvocab);
  if (S->model) q35_model_free(S->model);
  if (S->tok) q35_tokenizer_free(S->tok);
  free(S->tmpl);
  free(S->bos);
  free(S->eos);
  srv_free(S);
  return rc;
}
