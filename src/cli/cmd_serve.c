/*
 * cmd_serve.c - q35 serve: the OpenAI-compatible HTTP server (src/server/server.h).
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "server/server.h"

static void usage(const model_args *ma) {
  printf(
      "usage: q35 serve -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [options]\n"
      "OpenAI-compatible HTTP server with continuous batching and prefix reuse.\n"
      "Ready when GET /health answers 200 (503 while the model loads).\n"
      "  --host ADDR             listen address (default 127.0.0.1)\n"
      "  --port N                listen port (default 8080)\n"
      "  --parallel N            sequences decoded together in one step (default 4)\n"
      "  --pp-groups N           under mpirun (a -DQ35_MPI=ON build): split the sequences into N groups\n"
      "                          whose steps are in flight at once, so every rank works (default: N =\n"
      "                          ranks; 1 = one step at a time)\n"
      "  --alias NAME            model id in /v1/models (default: the file's base name)\n"
      "  --max-sessions N        named sessions (session_id header) kept, LRU-evicted (default 8)\n"
      "  --max-queue N           sequences waiting for a slot before 429 (default 64)\n"
      "  --no-think              thinking off unless a request enables it\n"
      "  --max-body BYTES        request body limit (default 8388608)\n"
      "  --snap-every N          snapshot the recurrent state every N prompt tokens (default 1024)\n"
      "  --session-idle-timeout S  free sessions unused for S seconds (default 600, 0 = never)\n"
      "  --timeout S             drop clients that stall S seconds sending a request or reading\n"
      "                          a response (default 30, 0 = never); computing never times out\n"
      "  --drain-seconds S       on SIGTERM/SIGINT keep serving S seconds with /health answering 503,\n"
      "                          so a balancer takes this replica out first (default 0)\n"
      "  --drain-timeout S       then, with no new connections, give requests in flight S seconds\n"
      "                          to finish before ending them with an error (default 30); exit 0\n"
      "  --replica-id NAME       this replica's name behind a balancer ([A-Za-z0-9-], at most 24):\n"
      "                          Responses API ids carry it (resp_NAME_...); see deploy/haproxy.cfg\n"
      "  -v, --verbose           log each request on stderr: status, latency, tokens, the 4xx reason\n"
      "  --api-key KEY           require this key (Authorization: Bearer KEY or x-api-key: KEY);\n"
      "                          repeatable; /health stays open\n"
      "  --api-key-file FILE     keys, one a line (# comments and blank lines skipped)\n"
      "  --metrics-open          serve /metrics without a key\n"
      "  --ssl-key-file FILE     HTTPS: the PEM private key (with --ssl-cert-file)\n"
      "  --ssl-cert-file FILE    HTTPS: the PEM certificate chain\n"
      "  --cors ORIGIN           allow browser pages from ORIGIN (repeatable; * = any origin)\n"
      "  --draft N               speculative decoding with the file's MTP head: at most N drafts per\n"
      "                          decode row, as many as the measured acceptance and step times say\n"
      "                          pay (default 2 with an MTP head; 0 = off; under mpirun default 0,\n"
      "                          and N > 0 steps one group); output identical to 0\n"
      "  --draft-vocab K         the head drafts among token ids < K (default 0: all)\n"
      "  --draft-fixed           every decode row drafts N (no adaptation; for tests and measuring)\n"
      "Sampling defaults for requests that leave a parameter unset; the model file's\n"
      "general.sampling.* values (written by q35 export from generation_config.json) come first:\n"
      "  --temp T, --top-k K, --top-p P, --min-p P, --repeat-penalty R,\n"
      "  --presence-penalty X, --frequency-penalty X   (q35 defaults: 1, 0 (all), 1, 0, 1, 0, 0)\n");
  model_args_help(stdout, ma);
  printf("Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses,\n"
         "POST /v1/responses/input_tokens, GET|DELETE /v1/responses/ID, POST /v1/messages,\n"
         "POST /v1/messages/count_tokens, GET /v1/models[/ID], GET /health, GET /metrics,\n"
         "POST /tokenize, POST /detokenize, DELETE /v1/sessions/ID, POST /v1/sessions/ID/reset,\n"
         "OPTIONS (CORS preflight). README.md, \"Server API\", documents every field.\n");
}

/* The value of a repeatable flag that already has n values: not empty, at most Q35_SERVER_MAX_LIST. */
static const char *list_value(int argc, char **argv, int *i, const char *flag, int n) {
  const char *v = arg_value(argc, argv, i);
  if (!*v) die("serve: %s must not be empty", flag);
  if (n >= Q35_SERVER_MAX_LIST) die("serve: at most %d %s values", Q35_SERVER_MAX_LIST, flag);
  return v;
}

/* The flags of q35 serve other than the shared model/session ones: 1 if consumed. */
static int serve_arg(q35_server_opts *o, int argc, char **argv, int *i) {
  if (arg_is(argc, argv, i, "--host")) {
    o->host = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--port")) {
    o->port = (int)arg_int("--port", arg_value(argc, argv, i), 0, 65535);
  } else if (arg_is(argc, argv, i, "--parallel") || arg_is(argc, argv, i, "-np")) {
    o->parallel = (int)arg_int("--parallel", arg_value(argc, argv, i), 1, 256);
  } else if (arg_is(argc, argv, i, "--pp_groups")) {
    o->pp_groups = (int)arg_int("--pp-groups", arg_value(argc, argv, i), 1, 64);
#ifndef Q35_MPI
    die("serve: --pp-groups needs a build with MPI (cmake -DQ35_MPI=ON) run under mpirun");
#endif
  } else if (arg_is(argc, argv, i, "--alias")) {
    o->alias = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--max_sessions")) {
    o->max_sessions = (int)arg_int("--max-sessions", arg_value(argc, argv, i), 0, 1 << 16);
  } else if (arg_is(argc, argv, i, "--max_queue")) {
    o->max_queue = (int)arg_int("--max-queue", arg_value(argc, argv, i), 0, 1 << 20);
  } else if (arg_is(argc, argv, i, "--no_think")) {
    o->no_think = 1;
  } else if (arg_is(argc, argv, i, "--max_body")) {
    o->max_body = arg_int("--max-body", arg_value(argc, argv, i), 1, (int64_t)1 << 40);
  } else if (arg_is(argc, argv, i, "--snap_every")) {
    o->snap_every = (int32_t)arg_int("--snap-every", arg_value(argc, argv, i), 0, ARG_MAX_TOKENS);
  } else if (arg_is(argc, argv, i, "--session_idle_timeout")) {
    o->idle_timeout = (int)arg_int("--session-idle-timeout", arg_value(argc, argv, i), 0, 1 << 30);
  } else if (arg_is(argc, argv, i, "--timeout")) {
    o->timeout = (int)arg_int("--timeout", arg_value(argc, argv, i), 0, 1 << 20);
  } else if (arg_is(argc, argv, i, "--drain_seconds")) {
    o->drain_seconds = (int)arg_int("--drain-seconds", arg_value(argc, argv, i), 0, 1 << 20);
  } else if (arg_is(argc, argv, i, "--drain_timeout")) {
    o->drain_timeout = (int)arg_int("--drain-timeout", arg_value(argc, argv, i), 0, 1 << 20);
  } else if (arg_is(argc, argv, i, "--replica_id")) {
    const char *v = arg_value(argc, argv, i);
    const size_t n = strlen(v);
    if (n == 0 || n > Q35_SERVER_REPLICA_ID_MAX || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                              "0123456789-") != n)
      die("serve: --replica-id '%s' must be 1 to %d letters, digits or '-'", v, Q35_SERVER_REPLICA_ID_MAX);
    o->replica_id = v;
  } else if (arg_is(argc, argv, i, "-v") || arg_is(argc, argv, i, "--verbose")) {
    o->verbose = 1;
  } else if (arg_is(argc, argv, i, "--api_key")) {
    const char *v = list_value(argc, argv, i, "--api-key", o->n_api_keys);
    o->api_keys[o->n_api_keys++] = v;
  } else if (arg_is(argc, argv, i, "--cors")) {
    const char *v = list_value(argc, argv, i, "--cors", o->n_cors);
    o->cors[o->n_cors++] = v;
  } else if (sampling_arg(&o->sampling, argc, argv, i)) {
    /* --temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty, --frequency-penalty */
  } else if (arg_is(argc, argv, i, "--draft")) {
    o->draft = (int)arg_int("--draft", arg_value(argc, argv, i), 0, Q35_DRAFT_MAX);
  } else if (arg_is(argc, argv, i, "--draft_vocab")) {
    o->draft_vocab = (int32_t)arg_int("--draft-vocab", arg_value(argc, argv, i), 0, INT32_MAX);
  } else if (arg_is(argc, argv, i, "--draft_fixed")) {
    o->draft_fixed = 1;
  } else if (arg_is(argc, argv, i, "--api_key_file")) {
    o->api_key_file = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--metrics_open")) {
    o->metrics_open = 1;
  } else if (arg_is(argc, argv, i, "--ssl_key_file")) {
    o->ssl_key_file = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--ssl_cert_file")) {
    o->ssl_cert_file = arg_value(argc, argv, i);
  } else {
    return 0;
  }
  return 1;
}

/* The model as the other commands load it (model_args_load: under mpirun, the pipeline's first
 * stage; --pp-split, --pp-timeout). */
static q35_model *serve_load(const char *path, const q35_model_params *mp, void *arg, q35_err *err) {
  (void)path;
  return model_args_load((const model_args *)arg, mp, err);
}

int cmd_serve(int argc, char **argv) {
  q35_server_opts o;
  q35_server_default_opts(&o);
  model_args ma = {.takes = MODEL_ARG_CTX | MODEL_ARG_MEM_BUDGET,
                   .ctx = o.n_ctx,
                   .chunk = o.chunk,
                   .kv = o.kv_type,
                   .ctx_help = "context limit per session in tokens (default 4096)",
                   .chunk_help = "prefill tokens per step (default 256)",
                   .mem_budget_help = "memory for all sessions' KV cache + recurrent state + snapshots\n"
                                      "                                   (e.g. 512M, 4G; 0 = no limit; default 3/4 of "
                                      "MemAvailable)"};
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(&ma);
      return 0;
    }
    if (!model_arg(&ma, argc, argv, &i) && !serve_arg(&o, argc, argv, &i)) arg_unknown("serve", argv[i]);
  }
  model_args_done(&ma, "serve");
  q35_err err = {{0}};
  if (q35_sampling_validate(&o.sampling, &err) || o.sampling.temperature > 2.0f)
    die("serve: sampling defaults: %s", err.msg[0] ? err.msg : "--temp must be in [0, 2]");
  o.model_path = ma.model;
  o.n_threads = ma.threads;
  o.n_ctx = ma.ctx;
  o.chunk = ma.chunk;
  o.kv_type = ma.kv;
  o.no_mmap = ma.no_mmap;
  o.no_huge = ma.no_huge;
  o.no_repack = ma.no_repack;
  o.mem_budget = ma.mem_budget;
  o.load = serve_load;
  o.load_arg = &ma;
  return q35_server_run(&o);
}
