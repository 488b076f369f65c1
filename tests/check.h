/*
 * check.h - the assertion helpers every C test shares.
 *
 *   CHECK(cond);                      counts a check; on failure prints file:line and the condition
 *   CHECK(cond, "fmt %d", x);         ... followed by a message
 *   check_context = "model A";        optional prefix for failure lines (e.g. the model under test)
 *   return check_done("test_name");   prints "test_name: N checks, M failed", returns the exit code
 *
 * A test keeps counting after a failure (so one run shows every broken case) but prints only the
 * first CHECK_MAX_PRINTED failures.
 */
#ifndef Q35_TESTS_CHECK_H
#define Q35_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CHECK_MAX_PRINTED 50

static int failures, checks;
static const char *check_context;

__attribute__((format(printf, 4, 5), unused)) static void check_failed(const char *file, int line, const char *cond,
                                                                        const char *fmt, ...) {
  if (failures++ >= CHECK_MAX_PRINTED) return;
  fprintf(stderr, "FAIL %s%s%s%s:%d: %s", check_context ? "[" : "", check_context ? check_context : "",
          check_context ? "] " : "", file, line, cond);
  if (strcmp(fmt, ": ")) { /* the caller gave a message: fmt is ": " followed by it */
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  fputc('\n', stderr);
}

/* `": " __VA_ARGS__` pastes the caller's format behind ": " (and is just ": " without one). */
#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    checks++;                                                               \
    if (!(cond)) check_failed(__FILE__, __LINE__, #cond, ": " __VA_ARGS__); \
  } while (0)

__attribute__((unused)) static int check_done(const char *name) {
  printf("%s: %d checks, %d failed\n", name, checks, failures);
  return failures ? 1 : 0;
}

#endif
