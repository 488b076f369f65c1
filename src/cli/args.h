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
/* Print "q35 CMD: unknown option X (see q35 CMD --help)" and exit(2). */
void arg_unknown(const char *cmd, const char *arg) __attribute__((noreturn));
/* Print "q35: " + formatted message + newline to stderr. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
