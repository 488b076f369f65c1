/* sse.c - server-sent events: framing and the streamed response (see sse.h). */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

#include "server/http.h"

#define SSE_BLOCK 16384        /* bytes MHD asks the callback for at most */
#define SSE_POLL_MS 100        /* wait for events this long before checking the client is there */

void sse_event(q35_buf *out, json_t *obj) {
  char *s = json_dumps(obj, JSON_COMPACT);
  json_decref(obj);
  if (!s) return;
  q35_buf_str(out, "data: ");
  q35_buf_str(out, s);
  q35_buf_str(out, "\n\n");
  free(s);
}

void sse_done(q35_buf *out) { q35_buf_str(out, "data: [DONE]\n\n"); }

typedef struct stream {
  srv_sched *sched;
  const oai_model *M;
  int timeout;
  oai_request r;
  oai_choice *ch;
  struct MHD_Connection *c;
  q35_buf out;           /* bytes produced and not yet handed to MHD, from `off` */
  size_t off;
  int ended, error;
} stream;

static void stream_finish(stream *st) {
  srv_job *j = st->r.job;
  http_log_tokens(j->n_prompt, j->completion_tokens);
  if (j->failed) {
    http_log_status((unsigned)j->status, j->errmsg);
    sse_event(&st->out, http_error_body((unsigned)j->status, j->errmsg, NULL));
    st->error = 1;
  } else {
    if (st->r.include_usage) sse_event(&st->out, oai_usage_chunk(st->M, &st->r));
    sse_done(&st->out);
  }
  st->ended = 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream *st = cls;
  for (;;) {
    if (st->off < st->out.n) {
      size_t n = st->out.n - st->off;
      if (n > max) n = max;
      memcpy(buf, st->out.p + st->off, n);
      st->off += n;
      if (st->off == st->out.n) { /* all handed over: reuse the buffer */
        st->off = st->out.n = 0;
        st->out.p[0] = 0;
      }
      return (ssize_t)n;
    }
    if (st->ended) return st->error ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    int done = 0;
    srv_event *e = srv_job_take(st->sched, st->r.job, SSE_POLL_MS, &done);
    if ((e || done) && st->timeout > 0) /* waiting for tokens is not stalling */
      http_timeout_restart(st->c, (unsigned)st->timeout);
    oai_add_events(st->M, &st->r, st->ch, e, &st->out);
    srv_events_free(e);
    if (done) stream_finish(st);
    else if (!e && http_peer_gone(st->c)) {
      srv_job_cancel(st->sched, st->r.job);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

static void stream_free(void *cls) {
  stream *st = cls;
  srv_job_cancel(st->sched, st->r.job); /* no-op when it has finished */
  oai_choices_free(st->ch, st->r.job->n);
  srv_job_release(st->sched, st->r.job);
  oai_request_free(&st->r);
  q35_buf_free(&st->out);
  free(st);
}

enum MHD_Result sse_respond(struct MHD_Connection *c, srv_sched *sched, const oai_model *M, int timeout,
                            const oai_request *r, oai_choice *ch) {
  stream *st = calloc(1, sizeof *st);
  struct MHD_Response *resp = NULL;
  if (st) {
    *st = (stream){.sched = sched, .M = M, .timeout = timeout, .r = *r, .ch = ch, .c = c};
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, stream_read, st, stream_free);
  }
  if (!resp) {
    free(st);
    oai_choices_free(ch, r->job->n);
    srv_job_cancel(sched, r->job);
    srv_job_release(sched, r->job);
    oai_request_free((oai_request *)r);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "text/event-stream");
  MHD_add_response_header(resp, "Cache-Control", "no-cache");
  http_add_cors(c, resp);
  http_log_status(200, NULL);
  enum MHD_Result rc = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp);
  return rc;
}
