/* cmd_logits.c - q35 logits: the parity tool. Writes little-endian float32 logits of the last
 * position (or of every position with --all) for a token sequence. KV cache f32 by default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "q35.h"

static void usage(void) {
  printf(
      "usage: q35 logits -m MODEL.gguf --tokens 1,2,3 -o OUT.bin [options]\n"
      "Writes float32 logits (little-endian): the last position's n_vocab values, or with --all\n"
      "every position's (T x n_vocab, position major).\n"
      "  --all             every position\n"
      "  -t, --threads N   worker threads (default: all cores)\n"
      "  --chunk N         prefill in chunks of N tokens (default: one chunk)\n"
      "  --kv TYPE         KV cache type: f32 (default here), f16, q8_0\n"
      "  --no-mmap         read the weights into memory instead of mapping the file\n"
      "  --no-huge-pages   map the file in the kernel's default pages (default: 2 MiB pages)\n"
      "  --ctx N           context limit (default: max(4096, number of tokens))\n");
}

int cmd_logits(int argc, char **argv) {
  const char *model = NULL, *out = NULL, *tokens_s = NULL;
  int all = 0, threads = 0, chunk = 0, ctx = 0, no_mmap = 0, no_huge = 0;
  q35_kv_type kv = Q35_KV_F32;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage();
      return 0;
    } else if (arg_is(argc, argv, &i, "-m") || arg_is(argc, argv, &i, "--model") ||
               arg_is(argc, argv, &i, "--model_path")) {
      model = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--tokens")) {
      tokens_s = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "-o") || arg_is(argc, argv, &i, "--output")) {
      out = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--all")) {
      all = 1;
    } else if (arg_is(argc, argv, &i, "-t") || arg_is(argc, argv, &i, "--threads")) {
      threads = (int)arg_int("--threads", arg_value(argc, argv, &i), 1, 256);
    } else if (arg_is(argc, argv, &i, "--chunk")) {
      chunk = (int)arg_int("--chunk", arg_value(argc, argv, &i), 1, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--ctx")) {
      ctx = (int)arg_int("--ctx", arg_value(argc, argv, &i), 1, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--kv")) {
      kv = arg_kv(arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--no_mmap")) {
      no_mmap = 1;
    } else if (arg_is(argc, argv, &i, "--no_huge_pages")) {
      no_huge = 1;
    } else {
      arg_unknown("logits", argv[i]);
    }
  }
  if (!model || !tokens_s || !out) die("logits: -m MODEL, --tokens and -o OUT are required (see q35 logits --help)");
  int32_t n;
  int32_t *tokens = arg_ids("--tokens", tokens_s, &n);
  q35_err err = {{0}};
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = threads;
  mp.no_mmap = no_mmap;
  mp.no_huge = no_huge;
  q35_model *m = q35_model_load(model, &mp, &err);
  if (!m) {
    fprintf(stderr, "q35 logits: %s\n", err.msg);
    free(tokens);
    return 1;
  }
  q35_session_params sp = q35_session_default_params();
  sp.kv_type = kv;
  sp.n_ctx = ctx ? ctx : (n > 4096 ? n : 4096);
  q35_session *s = q35_session_new(m, &sp, &err);
  const int V = q35_model_n_vocab(m);
  float *logits = s ? malloc((size_t)(all ? n : 1) * V * sizeof(float)) : NULL;
  int rc = 1;
  if (!s || !logits) {
    fprintf(stderr, "q35 logits: %s\n", s ? "out of memory" : err.msg);
  } else if (q35_session_eval(s, tokens, n, chunk, logits, all, &err)) {
    fprintf(stderr, "q35 logits: %s\n", err.msg);
  } else {
    FILE *f = fopen(out, "wb");
    size_t cnt = (size_t)(all ? n : 1) * V;
    if (!f || fwrite(logits, sizeof(float), cnt, f) != cnt || fclose(f) != 0) {
      fprintf(stderr, "q35 logits: cannot write %s\n", out);
    } else {
      rc = 0;
    }
  }
  free(logits);
  free(tokens);
  q35_session_free(s);
  q35_model_free(m);
  return rc;
}
