/*
 * cmd_serve.c - q35 serve: the OpenAI-compatible HTTP server (src/server/server.h).
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "server/server.h"

static void usage(void) {
  printf(
      "usage: q35 serve -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [options]\n"
      "OpenAI-compatible HTTP server with continuous batching and prefix reuse.\n"
      "Ready when GET /health answers 200 (503 while the model loads).\n"
      "  -m, --model FILE        the GGUF model\n"
      "  --host ADDR             listen address (default 127.0.0.1)\n"
      "  --port N                listen port (default 8080)\n"
      "  --parallel N            sequences decoded together in one step (default 4)\n"
      "  --ctx N                 context limit per session in tokens (default 4096)\n"
      "  --alias NAME            model id in /v1/models (default: the file's base name)\n"
      "  --max-sessions N        named sessions (session_id header) kept, LRU-evicted (default 8)\n"
      "  --max-queue N           sequences waiting for a slot before 429 (default 64)\n"
      "  --no-think              thinking off unless a request enables it\n"
      "  -t, --threads N         forward-pass threads (default: all cores)\n"
      "  --max-body BYTES        request body limit (default 8388608)\n"
      "  --kv f16|f32|q8_0       KV cache type (default f16)\n"
      "  --chunk N               prefill tokens per step (default 256)\n"
      "  --snap-every N          snapshot the recurrent state every N prompt tokens (default 1024)\n"
      "  --no-mmap               read the weights into memory instead of mapping the file\n"
      "  --no-huge-pages         map the file in the kernel's default pages (default: 2 MiB pages)\n"
      "  --mem-budget SIZE       memory for all sessions' KV cache + recurrent state + snapshots\n"
      "                          (e.g. 512M, 4G; 0 = no limit; default 3/4 of MemAvailable)\n"
      "  --session-idle-timeout S  free sessions unused for S seconds (default 600, 0 = never)\n"
      "  --timeout S             drop clients that stall S seconds sending a request or reading\n"
      "                          a response (default 30, 0 = never); computing never times out\n"
      "  -v, --verbose           log requests on stderr\n"
      "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n"
      "POST /tokenize, POST /detokenize, GET /metrics, DELETE /v1/sessions/ID,\n"
      "POST /v1/sessions/ID/reset.\n");
}

int cmd_serve(int argc, char **argv) {
  q35_server_opts o;
  q35_server_default_opts(&o);
  int budget_set = 0;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage();
      return 0;
    } else if (arg_is(argc, argv, &i, "-m") || arg_is(argc, argv, &i, "--model")) {
      o.model_path = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--host")) {
      o.host = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--port")) {
      o.port = (int)arg_int("--port", arg_value(argc, argv, &i), 0, 65535);
    } else if (arg_is(argc, argv, &i, "--parallel") || arg_is(argc, argv, &i, "-np")) {
      o.parallel = (int)arg_int("--parallel", arg_value(argc, argv, &i), 1, 256);
    } else if (arg_is(argc, argv, &i, "--ctx") || arg_is(argc, argv, &i, "-c")) {
      o.n_ctx = (int32_t)arg_int("--ctx", arg_value(argc, argv, &i), 2, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--alias")) {
      o.alias = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--max_sessions")) {
      o.max_sessions = (int)arg_int("--max-sessions", arg_value(argc, argv, &i), 0, 1 << 16);
    } else if (arg_is(argc, argv, &i, "--max_queue")) {
      o.max_queue = (int)arg_int("--max-queue", arg_value(argc, argv, &i), 0, 1 << 20);
    } else if (arg_is(argc, argv, &i, "--no_think")) {
      o.no_think = 1;
    } else if (arg_is(argc, argv, &i, "-t") || arg_is(argc, argv, &i, "--threads")) {
      o.n_threads = (int)arg_int("--threads", arg_value(argc, argv, &i), 0, 1024);
    } else if (arg_is(argc, argv, &i, "--max_body")) {
      o.max_body = arg_int("--max-body", arg_value(argc, argv, &i), 1, (int64_t)1 << 40);
    } else if (arg_is(argc, argv, &i, "--kv")) {
      const char *v = arg_value(argc, argv, &i);
      if (!strcmp(v, "f16")) o.kv_type = Q35_KV_F16;
      else if (!strcmp(v, "f32")) o.kv_type = Q35_KV_F32;
      else if (!strcmp(v, "q8_0")) o.kv_type = Q35_KV_Q8_0;
      else {
        fprintf(stderr, "q35 serve: --kv must be f16, f32 or q8_0, not '%s'\n", v);
        return 2;
      }
    } else if (arg_is(argc, argv, &i, "--chunk")) {
      o.chunk = (int32_t)arg_int("--chunk", arg_value(argc, argv, &i), 1, 1 << 20);
    } else if (arg_is(argc, argv, &i, "--snap_every")) {
      o.snap_every = (int32_t)arg_int("--snap-every", arg_value(argc, argv, &i), 0, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--no_mmap")) {
      o.no_mmap = 1;
    } else if (arg_is(argc, argv, &i, "--no_huge_pages")) {
      o.no_huge = 1;
    } else if (arg_is(argc, argv, &i, "--mem_budget")) {
      o.mem_budget = arg_size("--mem-budget", arg_value(argc, argv, &i));
      budget_set = 1;
    } else if (arg_is(argc, argv, &i, "--session_idle_timeout")) {
      o.idle_timeout = (int)arg_int("--session-idle-timeout", arg_value(argc, argv, &i), 0, 1 << 30);
    } else if (arg_is(argc, argv, &i, "--timeout")) {
      o.timeout = (int)arg_int("--timeout", arg_value(argc, argv, &i), 0, 1 << 20);
    } else if (arg_is(argc, argv, &i, "-v") || arg_is(argc, argv, &i, "--verbose")) {
      o.verbose = 1;
    } else {
      arg_unknown("serve", argv[i]);
    }
  }
  if (!o.model_path) {
    fprintf(stderr, "q35 serve: -m MODEL.gguf is required (see q35 serve --help)\n");
    return 2;
  }
  if (!budget_set) o.mem_budget = mem_budget_default();
  return q35_server_run(&o);
}
