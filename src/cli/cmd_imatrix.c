/* cmd_imatrix.c - q35 imatrix: an importance matrix (llama.cpp's imatrix GGUF) of a model over a
 * text, for q35 export --imatrix (and llama-quantize --imatrix). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "base/buf.h"
#include "commands.h"
#include "format/gguf.h"
#include "model/imatrix_collect.h"
#include "q35.h"
#include "text/tokenizer.h"

#define DEFAULT_CHUNK 512

static void usage(void) {
  printf("usage: q35 imatrix -m MODEL.gguf (-f TEXT.txt | --tokens 1,2,3) [-o imatrix.gguf] [--chunk N] [-t N]\n"
         "Runs the model over the text in chunks of N tokens (default %d; each from an empty state; a last\n"
         "partial chunk is dropped) and writes, for every weight multiplied on the way, the sum of squared\n"
         "activations per input column (per expert for expert tensors) and the rows counted, in llama.cpp's\n"
         "imatrix GGUF format (NAME.in_sum2, NAME.counts; default output imatrix.gguf).\n",
         DEFAULT_CHUNK);
}

/* The text's token ids, with the model file's tokenizer. */
static int32_t *tokenize_file(const char *model, const char *path, int32_t *n) {
  q35_err err = {{0}};
  size_t len;
  char *text = q35_read_file(path, &len, &err);
  if (!text) die("imatrix: %s", err.msg);
  gguf_file *f = gguf_open(model, &err);
  q35_tokenizer *t = f ? q35_tokenizer_from_gguf(f, &err) : NULL;
  int32_t *ids = NULL;
  if (!t || q35_tokenize(t, text, len, &ids, n, &err)) die("imatrix: %s", err.msg);
  q35_tokenizer_free(t);
  gguf_close(f);
  free(text);
  return ids;
}

int cmd_imatrix(int argc, char **argv) {
  const char *model = NULL, *text = NULL, *tokens_s = NULL, *out = "imatrix.gguf";
  int chunk = DEFAULT_CHUNK, threads = 0;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage();
      return 0;
    } else if (arg_is(argc, argv, &i, "-m") || arg_is(argc, argv, &i, "--model")) {
      model = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "-f") || arg_is(argc, argv, &i, "--file")) {
      text = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--tokens")) {
      tokens_s = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "-o") || arg_is(argc, argv, &i, "--output")) {
      out = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--chunk")) {
      chunk = (int)arg_int("--chunk", arg_value(argc, argv, &i), 1, 1 << 20);
    } else if (arg_is(argc, argv, &i, "-t") || arg_is(argc, argv, &i, "--threads")) {
      threads = (int)arg_int("--threads", arg_value(argc, argv, &i), 1, 1024);
    } else {
      arg_unknown("imatrix", argv[i]);
    }
  }
  if (!model || (!text == !tokens_s)) die("imatrix: -m MODEL and one of -f TEXT or --tokens are required");
  int32_t n;
  int32_t *tokens = text ? tokenize_file(model, text, &n) : arg_ids("--tokens", tokens_s, &n);
  q35_err err = {{0}};
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = threads;
  q35_model *m = q35_model_load(model, &mp, &err);
  int rc = m ? q35_imatrix_compute(m, tokens, n, chunk, text ? text : "tokens", out, &err) : -1;
  if (rc) fprintf(stderr, "q35 imatrix: %s\n", err.msg);
  else fprintf(stderr, "q35 imatrix: wrote %s (%d tokens, %d chunks of %d)\n", out, n, n / chunk, chunk);
  q35_model_free(m);
  free(tokens);
  return rc ? 1 : 0;
}
