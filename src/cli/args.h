/*
 * args.h - command-line helpers shared by the q35 subcommands.
 *
 * Every long flag is accepted in both spellings: arg_is(a, "--top_k") matches "--top_k" and
 * "--top-k" (and "--top_k=5" style is handled by arg_value). Values are parsed strictly: a
 * number with trailing junk, out of range or missing is an error naming the flag.
 */
#ifndef Q35_CLI_ARGS_H
#define Q35_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "q35.h"

/* Does argv[*i] name flag `name` (given with underscores; '-' and '_' are interchangeable
 * after the leading dashes)? If the argument has the form --flag=value, the value is kept
 * for the next arg_value call. */
int arg_is(int argc, char **argv, int *i, const char *name);
/* The flag's value: either the "=value" part or argv[++*i]. Exits with status 2 and a
 * message when it is missing. */
const char *arg_value(int argc, char **argv, int *i);
/* Strict numeric parsing; on error print "q35 CMD: FLAG: ..." to stderr and exit(2). */
int64_t arg_int(const char *flag, const char *v, int64_t lo, int64_t hi);
double arg_double(const char *flag, const char *v);
/* A KV cache type name (f32, f16, q8_0); exits(2) naming --kv otherwise. */
q35_kv_type arg_kv(const char *v);
/* Parse "1,2,3" (or space-separated) into a malloc'ed array; exits(2) on bad input. */
int32_t *arg_ids(const char *flag, const char *v, int32_t *n);
/* A byte size: a number with an optional K/M/G/T suffix (binary, optional "i" and "B": 512M,
 * 4G, 1.5GiB); "0", "off" or "none" = 0 (no limit). Exits(2) naming the flag otherwise. */
uint64_t arg_size(const char *flag, const char *v);
/* MemAvailable from /proc/meminfo in bytes (0 when unknown). */
uint64_t mem_available(void);
/* The default --mem-budget: 3/4 of MemAvailable (0 = no limit when unknown). */
uint64_t mem_budget_default(void);
/* ---- the model and session options every model command shares ---- */

/* Which of the optional shared flags a command takes (model, threads, kv, chunk, no-mmap and
 * no-huge-pages are always taken). */
enum { MODEL_ARG_CTX = 1, MODEL_ARG_MEM_BUDGET = 2 };

#define ARG_MAX_TOKENS (1 << 24) /* upper bound of token-count flags (--ctx, --chunk, -n, ...) */

typedef struct model_args {
  const char *model;        /* -m, --model, --model_path */
  int threads;              /* -t, --threads; 0: all cores */
  int32_t ctx;              /* -c, --ctx: context limit in tokens (0: the command's choice) */
  int32_t chunk;            /* --chunk: prefill tokens per step (0: the command's choice) */
  q35_kv_type kv;           /* --kv f32|f16|q8_0 */
  int no_mmap;              /* --no-mmap: read the weights into memory */
  int no_huge;              /* --no-huge-pages: default page size for the file mapping */
  int no_repack;            /* --no-repack: keep the weights in the file's layout (no load-time repack) */
  uint64_t mem_budget;      /* --mem-budget: KV/state bytes allowed (0: no limit) */
  int mem_budget_set;       /* --mem-budget was given (else model_args_done sets the default) */
  unsigned takes;           /* MODEL_ARG_* */
  const char *pp_split;     /* --pp-split: pipeline stages' layer ranges (the MPI build) */
  double pp_timeout;        /* --pp-timeout: seconds a rank waits inside a command (the MPI build) */
  int pp_timeout_set;
  int pp_micro;             /* --pp-micro: micro-batches per step (the MPI build; -1: one per rank) */
  /* help text: what --ctx, --chunk and --mem-budget mean for this command, with their defaults */
  const char *ctx_help, *chunk_help, *mem_budget_help;
} model_args;

/* Consume argv[*i] (and its value) when it is one of the shared flags: 1, else 0. Bad values
 * exit(2) naming the flag. */
int model_arg(model_args *a, int argc, char **argv, int *i);
/* After parsing: exit(2) "q35 CMD: -m MODEL.gguf is required ..." without a model; the default
 * --mem-budget when the command takes one and it was not given. */
void model_args_done(model_args *a, const char *cmd);
/* The help lines of the shared flags the command takes. */
void model_args_help(FILE *f, const model_args *a);
q35_model_params model_args_model_params(const model_args *a);
q35_session_params model_args_session_params(const model_args *a);
/* q35_model_load with the flags; in the MPI build under mpirun, this rank's pipeline stage
 * (dist/pp.h: ranks above 0 serve their stage inside and never return). */
q35_model *model_args_load(const model_args *a, const q35_model_params *mp, q35_err *err);
/* A pipeline rank above 0 (the MPI build): only the model flags of the command line matter (the
 * prompt, output and sampling flags are rank 0's); serves its stage, never returns. */
int model_args_serve_stage(int argc, char **argv);
/* A hint naming this command's flags for why a session could not be created (the library's
 * message names its parameters, not flags): "" when neither limit explains it. */
const char *model_args_session_hint(const model_args *a, q35_model *m, char *buf, size_t n);

/* ---- sampling flags (run, sample) ---- */

/* Consume argv[*i] when it is a sampling flag (--temperature/--temp, --top_k, --top_p, --min_p,
 * --presence_penalty, --frequency_penalty, --repetition_penalty/--repeat_penalty): 1, else 0.
 * A temperature of -1 means greedy (0). Values are not validated here (q35_sampling_validate). */
int sampling_arg(q35_sampling *p, int argc, char **argv, int *i);

/* Print "q35 CMD: unknown option X (see q35 CMD --help)" and exit(2). */
void arg_unknown(const char *cmd, const char *arg) __attribute__((noreturn));
/* Print "q35: " + formatted message + newline to stderr. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
