/* cmd_logits.c - q35 logits: the parity tool. Writes little-endian float32 logits of the last
 * position (or of every position with --all) for a token sequence. KV cache f32 by default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "q35.h"

#define DEFAULT_MIN_CTX 4096 /* --ctx default: this, or the number of tokens when more */

static void usage(const model_args *ma) {
  printf(
      "usage: q35 logits -m MODEL.gguf --tokens 1,2,3 -o OUT.bin [options]\n"
      "Writes float32 logits (little-endian): the last position's n_vocab values, or with --all\n"
      "every position's (T x n_vocab, position major).\n"
      "  --all             every position\n");
  model_args_help(stdout, ma);
}

int cmd_logits(int argc, char **argv) {
  const char *out = NULL, *tokens_s = NULL;
  int all = 0;
  model_args ma = {.takes = MODEL_ARG_CTX,
                   .kv = Q35_KV_F32,
                   .ctx_help = "context limit (default: max(4096, number of tokens))",
                   .chunk_help = "prefill in chunks of N tokens (default: one chunk)"};
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(&ma);
      return 0;
    } else if (model_arg(&ma, argc, argv, &i)) {
      continue;
    } else if (arg_is(argc, argv, &i, "--tokens")) {
      tokens_s = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "-o") || arg_is(argc, argv, &i, "--output")) {
      out = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--all")) {
      all = 1;
    } else {
      arg_unknown("logits", argv[i]);
    }
  }
  if (!ma.model || !tokens_s || !out)
    die("logits: -m MODEL, --tokens and -o OUT are required (see q35 logits --help)");
  model_args_done(&ma, "logits");
  const int chunk = ma.chunk;
  int32_t n;
  int32_t *tokens = arg_ids("--tokens", tokens_s, &n);
  q35_err err = {{0}};
  const q35_model_params mp = model_args_model_params(&ma);
  q35_model *m = model_args_load(&ma, &mp, &err);
  if (!m) {
    fprintf(stderr, "q35 logits: %s\n", err.msg);
    free(tokens);
    return 1;
  }
  if (!ma.ctx) ma.ctx = n > DEFAULT_MIN_CTX ? n : DEFAULT_MIN_CTX;
  const q35_session_params sp = model_args_session_params(&ma);
  q35_session *s = q35_session_new(m, &sp, &err);
  const int V = q35_model_n_vocab(m);
  float *logits = s ? malloc((size_t)(all ? n : 1) * V * sizeof(float)) : NULL;
  int rc = 1;
  if (!s || !logits) {
    fprintf(stderr, "q35 logits: %s\n", s ? "out of memory" : err.msg);
  } else if (q35_session_eval(s, tokens, n, chunk, logits, all, &err)) {
    fprintf(stderr, "q35 logits: %s%s\n", err.msg, n > sp.n_ctx ? " (raise --ctx)" : "");
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
