/* run_text.h - the runner behind q35 run (cmd_run.c parses flags into run_opts). */
#ifndef Q35_CLI_RUN_TEXT_H
#define Q35_CLI_RUN_TEXT_H

#include <stdint.h>

#include "args.h"
#include "q35.h"

typedef struct run_opts {
  model_args ma;  /* model, threads, ctx, chunk, kv, mmap, huge pages, memory budget */
  const char *tokens_s, *prompt, *prompt_file, *tokenizer_path, *system;
  int chat, no_think, print_ids, stats;
  int n_new, warmup, iters;
  int64_t seed;   /* -1: random */
  q35_sampling sp;
  /* structured output: at most one of these (--json-schema FILE, --grammar FILE, --regex RE) */
  const char *json_schema, *grammar, *regex;
  int json_ws;                    /* --json-ws N: whitespace bytes allowed between JSON tokens */
  q35_constraint *constraint;     /* compiled from the above by run_main; each generation clones it */
  int draft;                      /* --draft N: tokens the MTP head drafts per step (0: off) */
  int draft_vocab;                /* --draft-vocab K: the head drafts among token ids < K (0: all) */
  int draft_adapt;                /* --draft-adapt: the context chooses 0 .. draft drafts a step */
} run_opts;

void run_opts_default(run_opts *o);
int run_main(const run_opts *o);

#endif
