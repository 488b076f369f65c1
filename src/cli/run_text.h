/* run_text.h - the runner behind q35 run (cmd_run.c parses flags into run_opts). */
#ifndef Q35_CLI_RUN_TEXT_H
#define Q35_CLI_RUN_TEXT_H

#include <stdint.h>

#include "q35.h"

typedef struct run_opts {
  const char *model, *tokens_s, *prompt, *prompt_file, *tokenizer_path, *system;
  int chat, no_think, print_ids, stats;
  int n_new, threads, ctx, chunk, warmup, iters;
  q35_kv_type kv;
  int64_t seed;   /* -1: random */
  uint64_t mem_budget; /* KV/state bytes allowed for the session (0: no limit) */
  int no_mmap;         /* read the weights into memory (--no-mmap) */
  int no_huge;         /* default page size for the file mapping (--no-huge-pages) */
  q35_sampling sp;
} run_opts;

void run_opts_default(run_opts *o);
int run_main(const run_opts *o);

#endif
