/*
 * sse.h - the server-sent events writer of q35 serve: "data: <json>\n\n" framing and the
 * streamed HTTP response that drains a job's events as they are produced.
 *
 * The response callback (run by libmicrohttpd in the connection thread) blocks until the
 * scheduler hands over events, turns them into stream chunks (openai.h) and returns them; it
 * ends with "data: [DONE]" (after a usage chunk when asked for), or with an error chunk when
 * the job failed. A client that disconnects makes MHD free the response, which cancels the job;
 * the callback also notices a closed socket while it waits.
 */
#ifndef Q35_SERVER_SSE_H
#define Q35_SERVER_SSE_H

#include <jansson.h>
#include <microhttpd.h>

#include "base/buf.h"
#include "server/openai.h"
#include "server/sched.h"

/* Append one event carrying obj (which this takes). */
void sse_event(q35_buf *out, json_t *obj);
/* Append the end-of-stream marker. */
void sse_done(q35_buf *out);

/* Queue the streamed (text/event-stream) response of request r on connection c. It takes r's job
 * reference and ch whatever the outcome. timeout: the server's client inactivity timeout in
 * seconds (0 = none), restarted whenever tokens are handed over. */
enum MHD_Result sse_respond(struct MHD_Connection *c, srv_sched *sched, const oai_model *M, int timeout,
                            const oai_request *r, oai_choice *ch);

#endif
