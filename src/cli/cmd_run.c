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

static void usage(void) {
  printf(
      "usage: q35 run -m MODEL.gguf (-p TEXT | --prompt_file F | --tokens 1,2,3 | stdin) [options]\n"
      "Generates a continuation, streaming text to stdout (or ids with --print-ids).\n"
      "  -m, --model, --model_path FILE   the GGUF model\n"
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
      "  -t, --threads N                  default: all cores\n"
      "  --ctx N                          context limit (default 4096)\n"
      "  --kv f16|f32|q8_0                KV cache type (default f16)\n"
      "  --chunk N                        prefill chunk size (default 512)\n"
      "  --no-mmap                        read the weights into memory instead of mapping the file\n"
      "  --no-huge-pages                  map the file in the kernel's default pages (default: 2 MiB)\n"
      "  --mem-budget SIZE                memory for the KV cache + recurrent state (e.g. 512M, 4G;\n"
      "                                   0 = no limit; default 3/4 of MemAvailable); refused up front\n"
      "  --warmup N --num_iters M         benchmark mode: N untimed + M timed runs (default 0 / 1)\n"
      "  --no-stats                       no statistics on stderr\n"
      "Long flags accept '-' or '_' (e.g. --top-k / --top_k).\n");
}

int cmd_run(int argc, char **argv) {
  run_opts o;
  run_opts_default(&o);
  int budget_set = 0;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage();
      return 0;
    } else if (arg_is(argc, argv, &i, "-m") || arg_is(argc, argv, &i, "--model") ||
               arg_is(argc, argv, &i, "--model_path")) {
      o.model = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--tokens")) {
      o.tokens_s = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "-p") || arg_is(argc, argv, &i, "--prompt")) {
      o.prompt = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--prompt_file")) {
      o.prompt_file = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--tokenizer_path") || arg_is(argc, argv, &i, "--tokenizer")) {
      o.tokenizer_path = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "--chat")) {
      o.chat = 1;
    } else if (arg_is(argc, argv, &i, "--no_think")) {
      o.no_think = 1;
    } else if (arg_is(argc, argv, &i, "--system")) {
      o.system = arg_value(argc, argv, &i);
    } else if (arg_is(argc, argv, &i, "-n") || arg_is(argc, argv, &i, "--max_new_tokens") ||
               arg_is(argc, argv, &i, "--n_predict")) {
      o.n_new = (int)arg_int("--max_new_tokens", arg_value(argc, argv, &i), 0, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--print_ids")) {
      o.print_ids = 1;
    } else if (arg_is(argc, argv, &i, "--temperature") || arg_is(argc, argv, &i, "--temp")) {
      double t = arg_double("--temperature", arg_value(argc, argv, &i));
      o.sp.temperature = t == -1.0 ? 0.0f : (float)t;
    } else if (arg_is(argc, argv, &i, "--top_k")) {
      o.sp.top_k = arg_int("--top_k", arg_value(argc, argv, &i), INT64_MIN, INT64_MAX);
    } else if (arg_is(argc, argv, &i, "--top_p")) {
      o.sp.top_p = (float)arg_double("--top_p", arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--min_p")) {
      o.sp.min_p = (float)arg_double("--min_p", arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--presence_penalty")) {
      o.sp.presence_penalty = (float)arg_double("--presence_penalty", arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--frequency_penalty")) {
      o.sp.frequency_penalty = (float)arg_double("--frequency_penalty", arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--repetition_penalty") || arg_is(argc, argv, &i, "--repeat_penalty")) {
      o.sp.repetition_penalty = (float)arg_double("--repetition_penalty", arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--seed")) {
      o.seed = arg_int("--seed", arg_value(argc, argv, &i), -1, INT64_MAX);
    } else if (arg_is(argc, argv, &i, "-t") || arg_is(argc, argv, &i, "--threads")) {
      o.threads = (int)arg_int("--threads", arg_value(argc, argv, &i), 1, 256);
    } else if (arg_is(argc, argv, &i, "--ctx") || arg_is(argc, argv, &i, "-c")) {
      o.ctx = (int)arg_int("--ctx", arg_value(argc, argv, &i), 1, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--chunk")) {
      o.chunk = (int)arg_int("--chunk", arg_value(argc, argv, &i), 1, 1 << 24);
    } else if (arg_is(argc, argv, &i, "--kv")) {
      o.kv = arg_kv(arg_value(argc, argv, &i));
    } else if (arg_is(argc, argv, &i, "--no_mmap")) {
      o.no_mmap = 1;
    } else if (arg_is(argc, argv, &i, "--no_huge_pages")) {
      o.no_huge = 1;
    } else if (arg_is(argc, argv, &i, "--mem_budget")) {
      o.mem_budget = arg_size("--mem-budget", arg_value(argc, argv, &i));
      budget_set = 1;
    } else if (arg_is(argc, argv, &i, "--warmup")) {
      o.warmup = (int)arg_int("--warmup", arg_value(argc, argv, &i), 0, 1000);
    } else if (arg_is(argc, argv, &i, "--num_iters")) {
      o.iters = (int)arg_int("--num_iters", arg_value(argc, argv, &i), 1, 1000);
    } else if (arg_is(argc, argv, &i, "--no_stats")) {
      o.stats = 0;
    } else {
      arg_unknown("run", argv[i]);
    }
  }
  if (!o.model) die("run: -m MODEL.gguf is required (see q35 run --help)");
  if (!budget_set) o.mem_budget = mem_budget_default();
  q35_err err = {{0}};
  q35_sampling chk = o.sp;
  if (q35_sampling_validate(&chk, &err)) die("run: %s", err.msg);
  return run_main(&o);
}
