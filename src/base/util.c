#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/util.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int q35_seterr(q35_err *e, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

void *q35_alloc64(size_t n, int zero) {
  if (n > SIZE_MAX - 63) return NULL;
  const size_t r = (n + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, r ? r : 64);
  if (p && zero) memset(p, 0, r ? r : 64);
  return p;
}

void *q35_alloc_huge(size_t n) { return q35_alloc_huge_from(n, Q35_HUGE_ALLOC_MIN); }

void *q35_alloc_huge_from(size_t n, size_t min_bytes) {
  const size_t huge = (size_t)2 << 20;
  if (n < min_bytes || n < huge || n > SIZE_MAX - huge) return q35_alloc64(n, 0);
  const size_t r = (n + huge - 1) & ~(huge - 1);
  void *p = aligned_alloc(huge, r);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, r, MADV_HUGEPAGE); /* advice only: 4 KiB pages where it is refused */
#endif
  return p;
}

int q35_usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

double q35_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
