/*
 * cmd_run.c - q35 run: generate from a prompt.
 *
 * Prompt as token ids (--tokens) or text (-p/--prompt, --prompt_file, stdin). With
 * --print-ids exactly N generated ids are printed on one line (no stop at end-of-generation
 * tokens); otherwise text is streamed to stdout and generation stops at an EOG token.
 * Statistics go to stderr, ending with one JSON line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "q35.h"
#include "run_text.h"
#include "base/util.h"

static void usage(const run_opts *o) {
  printf(
      "usage: q35 run -m MODEL.gguf (-p TEXT | --prompt_file F | --tokens 1,2,3 | stdin) [options]\n"
      "Generates a continuation, streaming text to stdout (or ids with --print-ids).\n"
      "  -p, --prompt TEXT                raw completion prompt (no chat template)\n"
      "  --prompt_file FILE               prompt from a file ('-' = stdin)\n"
      "  --tokens 1,2,3                   prompt as token ids\n"
      "  --chat                           interactive multi-turn chat through the model's template\n"
      "  --no-think                       chat with thinking off\n"
      "  --system TEXT                    system prompt for --chat\n"
      "  --tokenizer_path FILE            use this tokenizer.json instead of the GGUF's vocabulary\n"
      "  -n, --max_new_tokens N           tokens to generate (default 256)\n"
      "  --print-ids                      print generated ids on one line (exactly N, no EOG stop)\n"
      "  --temperature T                  default 0.8; 0 = greedy (-1 is accepted as 0)\n"
      "  --top_k K                        default 0 (off)\n"
      "  --top_p P                        default 1.0 (off)\n"
      "  --min_p M                        default 0 (off)\n"
      "  --presence_penalty X             default 0     --frequency_penalty X  default 0\n"
      "  --repetition_penalty X           default 1 (off)\n"
      "  --seed S                         default -1 (random; the seed used is printed on stderr)\n"
      "  --json-schema FILE               constrain the output to this JSON Schema (docs/CONSTRAIN.md;\n"
      "                                   with --chat and thinking, from after </think>)\n"
      "  --grammar FILE                   constrain the output to this GBNF grammar\n"
      "  --regex RE                       constrain the output to this regular expression\n"
      "  --json-ws N                      JSON whitespace allowed between tokens (default 0: compact)\n"
      "  --draft N                        speculative decoding: the MTP head drafts up to N tokens a step,\n"
      "                                   one step verifies them; output identical to --draft 0 (default 0)\n"
      "  --draft-vocab K                  the head drafts among token ids < K only (reads K rows of the\n"
      "                                   output matrix per draft; default 0: all)\n"
      "  --draft-adapt                    with --draft N: draft 0 .. N tokens a step, as the measured\n"
      "                                   acceptance and step times say pays (default: always N)\n"
      "  --warmup N --num_iters M         benchmark mode: N untimed + M timed runs (default 0 / 1)\n"
      "  --no-stats                       no statistics on stderr\n");
  model_args_help(stdout, &o->ma);
  printf("Long flags accept '-' or '_' (e.g. --top-k / --top_k).\n");
}

/* The flags of q35 run other than the shared model/session and sampling ones: 1 if consumed. */
static int run_arg(run_opts *o, int argc, char **argv, int *i) {
  if (arg_is(argc, argv, i, "--tokens")) {
    o->tokens_s = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "-p") || arg_is(argc, argv, i, "--prompt")) {
    o->prompt = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--prompt_file")) {
    o->prompt_file = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--tokenizer_path") || arg_is(argc, argv, i, "--tokenizer")) {
    o->tokenizer_path = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--chat")) {
    o->chat = 1;
  } else if (arg_is(argc, argv, i, "--no_think")) {
    o->no_think = 1;
  } else if (arg_is(argc, argv, i, "--system")) {
    o->system = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "-n") || arg_is(argc, argv, i, "--max_new_tokens") ||
             arg_is(argc, argv, i, "--n_predict")) {
    o->n_new = (int)arg_int("--max_new_tokens", arg_value(argc, argv, i), 0, ARG_MAX_TOKENS);
  } else if (arg_is(argc, argv, i, "--print_ids")) {
    o->print_ids = 1;
  } else if (arg_is(argc, argv, i, "--seed")) {
    o->seed = arg_int("--seed", arg_value(argc, argv, i), -1, INT64_MAX);
  } else if (arg_is(argc, argv, i, "--warmup")) {
    o->warmup = (int)arg_int("--warmup", arg_value(argc, argv, i), 0, 1000);
  } else if (arg_is(argc, argv, i, "--num_iters")) {
    o->iters = (int)arg_int("--num_iters", arg_value(argc, argv, i), 1, 1000);
  } else if (arg_is(argc, argv, i, "--json_schema")) {
    o->json_schema = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--grammar")) {
    o->grammar = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--regex")) {
    o->regex = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--json_ws")) {
    o->json_ws = (int)arg_int("--json_ws", arg_value(argc, argv, i), 0, 64);
  } else if (arg_is(argc, argv, i, "--draft")) {
    o->draft = (int)arg_int("--draft", arg_value(argc, argv, i), 0, 16);
  } else if (arg_is(argc, argv, i, "--draft_adapt")) {
    o->draft_adapt = 1;
  } else if (arg_is(argc, argv, i, "--draft_vocab")) {
    o->draft_vocab = (int)arg_int("--draft-vocab", arg_value(argc, argv, i), 0, INT32_MAX);
  } else if (arg_is(argc, argv, i, "--no_stats")) {
    o->stats = 0;
  } else {
    return 0;
  }
  return 1;
}

int cmd_run(int argc, char **argv) {
  run_opts o;
  run_opts_default(&o);
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(&o);
      return 0;
    }
    if (!model_arg(&o.ma, argc, argv, &i) && !sampling_arg(&o.sp, argc, argv, &i) && !run_arg(&o, argc, argv, &i))
      arg_unknown("run", argv[i]);
  }
  model_args_done(&o.ma, "run");
  q35_err err = {{0}};
  q35_sampling chk = o.sp;
  if (q35_sampling_validate(&chk, &err)) die("run: %s", err.msg);
  if (!!o.json_schema + !!o.grammar + !!o.regex > 1) die("run: give at most one of --json-schema, --grammar, --regex");
  return run_main(&o);
}
