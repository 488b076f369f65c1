#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *pending_value; /* value of a --flag=value argument (CLI parsing only) */

int arg_is(int argc, char **argv, int *i, const char *name) {
  (void)argc;
  const char *a = argv[*i];
  size_t k = 0;
  /* leading dashes must match exactly */
  while (name[k] == '-' && a[k] == '-') k++;
  if (name[k] == '-' || (k > 0 && a[k] == '-')) return 0;
  for (; name[k]; k++) {
    char x = a[k], y = name[k];
    if (x == '-') x = '_';
    if (y == '-') y = '_';
    if (x != y) return 0;
  }
  if (a[k] == '\0') {
    pending_value = NULL;
    return 1;
  }
  if (a[k] == '=' && name[0] == '-' && name[1] == '-') {
    pending_value = a + k + 1;
    return 1;
  }
  return 0;
}

const char *arg_value(int argc, char **argv, int *i) {
  if (pending_value) {
    const char *v = pending_value;
    pending_value = NULL;
    return v;
  }
  if (*i + 1 >= argc) die("option %s needs a value", argv[*i]);
  return argv[++*i];
}

int64_t arg_int(const char *flag, const char *v, int64_t lo, int64_t hi) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0') die("%s: '%s' is not an integer", flag, v);
  if (x < lo || x > hi) die("%s: %lld is out of range [%lld, %lld]", flag, x, (long long)lo, (long long)hi);
  return x;
}

double arg_double(const char *flag, const char *v) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno == ERANGE || end == v || *end != '\0') die("%s: '%s' is not a number", flag, v);
  return x;
}

int32_t *arg_ids(const char *flag, const char *v, int32_t *n) {
  size_t cap = 16, len = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  const char *p = v;
  if (!ids) die("out of memory");
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || end == p || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n'))
      die("%s: bad token id list near '%.20s'", flag, p);
    if (x < 0 || x > INT32_MAX) die("%s: token id %lld out of range", flag, x);
    if (len == cap) {
      cap *= 2;
      ids = realloc(ids, cap * sizeof *ids);
      if (!ids) die("out of memory");
    }
    ids[len++] = (int32_t)x;
    p = end;
  }
  if (len == 0) die("%s: empty token id list", flag);
  *n = (int32_t)len;
  return ids;
}

void arg_unknown(const char *cmd, const char *arg) {
  fprintf(stderr, "q35 %s: unknown option '%s' (see q35 %s --help)\n", cmd, arg, cmd);
  exit(2);
}

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("q35: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

q35_kv_type arg_kv(const char *v) {
  if (!strcmp(v, "f32")) return Q35_KV_F32;
  if (!strcmp(v, "f16")) return Q35_KV_F16;
  if (!strcmp(v, "q8_0")) return Q35_KV_Q8_0;
  die("--kv: '%s' is not f32, f16 or q8_0", v);
}

uint64_t arg_size(const char *flag, const char *v) {
  if (!strcmp(v, "off") || !strcmp(v, "none")) return 0;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno == ERANGE || end == v || !(x >= 0) || v[0] == '-')
    die("%s: '%s' is not a size (e.g. 512M, 4G, 1.5GiB, 0 = no limit)", flag, v);
  double mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = 1024.0; end++; break;
  case 'm': case 'M': mul = 1048576.0; end++; break;
  case 'g': case 'G': mul = 1073741824.0; end++; break;
  case 't': case 'T': mul = 1099511627776.0; end++; break;
  default: break;
  }
  if (mul > 1 && *end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) die("%s: '%s' is not a size (e.g. 512M, 4G, 1.5GiB, 0 = no limit)", flag, v);
  x *= mul;
  if (x >= 18446744073709549568.0) die("%s: '%s' is too large", flag, v);
  return (uint64_t)x;
}

uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

uint64_t mem_budget_default(void) {
  return mem_available() / 4 * 3;
}
