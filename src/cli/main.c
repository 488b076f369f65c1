/* main.c - the q35 command: a thin front end over libq35; each subcommand in cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"
#include "commands.h"
#ifdef Q35_MPI
#include "args.h"
#include "dist/pp.h"
#endif

/* The command's exit status, after the MPI build's pipeline has stopped. */
static int finish(int rc) {
#ifdef Q35_MPI
  q35_pp_finalize();
#endif
  return rc;
}

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"run", cmd_run, "generate text or token ids from a prompt"},
    {"logits", cmd_logits, "write the logits of a token sequence (parity tool)"},
    {"sample", cmd_sample, "sample token ids from rows of logits in a file"},
    {"tokenize", cmd_tokenize, "text to token ids"},
    {"detokenize", cmd_detokenize, "token ids to text"},
    {"chat-template", cmd_chat_template, "render a chat with the model's template"},
    {"export", cmd_export, "Hugging Face checkpoint to GGUF; --tiny-test makes a test model"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"bench", cmd_bench, "prefill and decode speed"},
    {"schema-check", cmd_schema_check, "check JSON values or strings against a constraint's token masks"},
    {"perplexity", cmd_perplexity, "perplexity over chunks of a text, as llama-perplexity"},
    {"kld", cmd_kld, "KL divergence of a quantized model from its base, as llama-perplexity"},
    {"imatrix", cmd_imatrix, "importance matrix of a model over a text (llama.cpp's imatrix GGUF)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: q35 COMMAND [options]   (q35 COMMAND --help for its options)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
#ifdef Q35_MPI
  q35_pp_init(&argc, &argv);
#endif
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  q35_err err;
  if (q35_cpu_check(&err)) { /* a bad Q35_SIMD is a usage error for every command */
    fprintf(stderr, "q35: %s\n", err.msg);
    return 2;
  }
#ifdef Q35_MPI
  /* the commands a pipeline runs */
  if (q35_pp_ranks() > 1 && strcmp(argv[1], "run") && strcmp(argv[1], "logits") && strcmp(argv[1], "bench") &&
      strcmp(argv[1], "serve")) {
    fprintf(stderr, "q35: '%s' does not run as a pipeline of %d ranks (mpirun -np N runs q35 logits, run, bench and "
            "serve)\n",
            argv[1], q35_pp_ranks());
    return finish(2);
  }
  if (q35_pp_rank() > 0) return finish(model_args_serve_stage(argc - 1, argv + 1)); /* the later stages */
#endif
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return finish(commands[i].fn(argc - 1, argv + 1));
  fprintf(stderr, "q35: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
