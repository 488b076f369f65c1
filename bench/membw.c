/*
 * membw - memory read bandwidth of this machine, the roofline bench/run.sh divides decode by.
 *
 *   membw [-t THREADS] [-s MIB] [-r REPS] [--json]
 *
 * Each of THREADS threads owns one slice of a buffer of MIB MiB (default 1024, far larger than
 * any cache), touches it once (first-touch placement), then all threads read their slices
 * together REPS times (default 7), summing 64-bit words with several independent accumulators
 * (vectorised by the compiler). The timed interval of a repetition runs from a barrier before
 * the first thread starts to the last thread's finish. Reports the median and the best GB/s
 * (10^9 bytes per second) over the repetitions, and the median of bytes / CPU seconds of the
 * slowest thread (what the reads achieve while scheduled; on a shared, busy machine the wall
 * figure also counts time the threads were not running).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  const uint64_t *p;
  size_t n; /* words */
  int reps;
  int id;
  pthread_barrier_t *bar;
  double *t_start; /* per repetition, written by thread 0 */
  double *t_end;   /* per thread and repetition */
  double *t_cpu;   /* per thread and repetition: this thread's CPU time for the read */
  volatile uint64_t sink;
} job;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

__attribute__((noinline)) static uint64_t read_words(const uint64_t *p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 += p[i + 0];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  for (; i < n; i++) a0 += p[i];
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

static void *worker(void *arg) {
  job *j = arg;
  uint64_t *w = (uint64_t *)j->p;
  for (size_t i = 0; i < j->n; i++) w[i] = i * 0x9E3779B97F4A7C15ull + (uint64_t)j->id;
  uint64_t s = 0;
  for (int r = 0; r < j->reps + 1; r++) { /* repetition 0 is an untimed warm-up */
    pthread_barrier_wait(j->bar);
    if (j->id == 0) j->t_start[r] = now_s();
    const double c0 = cpu_s();
    s += read_words(j->p, j->n);
    j->t_cpu[r] = cpu_s() - c0;
    j->t_end[r] = now_s();
    pthread_barrier_wait(j->bar);
  }
  j->sink = s;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = 1, reps = 7, json = 0;
  long mib = 1024;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) mib = atol(argv[++i]);
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: membw [-t THREADS] [-s MIB] [-r REPS] [--json]\n");
      return 0;
    } else {
      fprintf(stderr, "membw: unknown or incomplete option '%s'\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || reps < 1 || reps > 1000 || mib < 1 || mib > (1L << 20)) {
    fprintf(stderr, "membw: -t must be 1..256, -r 1..1000, -s 1..1048576\n");
    return 2;
  }
  const size_t bytes = (size_t)mib << 20;
  const size_t words = bytes / 8;
  uint64_t *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, bytes)) {
    fprintf(stderr, "membw: cannot allocate %ld MiB\n", mib);
    return 1;
  }
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  job *jobs = calloc((size_t)threads, sizeof *jobs);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  double *t_start = calloc((size_t)reps + 1, sizeof(double));
  double *t_end = calloc((size_t)threads * ((size_t)reps + 1), sizeof(double));
  double *t_cpu = calloc((size_t)threads * ((size_t)reps + 1), sizeof(double));
  const size_t per = (words / (size_t)threads) & ~(size_t)7;
  for (int t = 0; t < threads; t++) {
    jobs[t].p = buf + (size_t)t * per;
    jobs[t].n = per;
    jobs[t].reps = reps;
    jobs[t].id = t;
    jobs[t].bar = &bar;
    jobs[t].t_start = t_start;
    jobs[t].t_end = t_end + (size_t)t * ((size_t)reps + 1);
    jobs[t].t_cpu = t_cpu + (size_t)t * ((size_t)reps + 1);
    if (pthread_create(&tid[t], NULL, worker, &jobs[t])) {
      fprintf(stderr, "membw: cannot start thread %d\n", t);
      return 1;
    }
  }
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  double *gbs = calloc((size_t)reps, sizeof(double)), *cgbs = calloc((size_t)reps, sizeof(double));
  const double total = (double)per * 8.0 * threads;
  for (int r = 1; r <= reps; r++) {
    double end = 0, cpu = 0;
    for (int t = 0; t < threads; t++) {
      if (jobs[t].t_end[r] > end) end = jobs[t].t_end[r];
      if (jobs[t].t_cpu[r] > cpu) cpu = jobs[t].t_cpu[r];
    }
    gbs[r - 1] = total / (end - t_start[r]) / 1e9;
    cgbs[r - 1] = total / cpu / 1e9;
  }
  qsort(gbs, (size_t)reps, sizeof(double), cmp_double);
  qsort(cgbs, (size_t)reps, sizeof(double), cmp_double);
  const double med = reps % 2 ? gbs[reps / 2] : 0.5 * (gbs[reps / 2 - 1] + gbs[reps / 2]);
  const double cmed = reps % 2 ? cgbs[reps / 2] : 0.5 * (cgbs[reps / 2 - 1] + cgbs[reps / 2]);
  const double best = gbs[reps - 1];
  if (json)
    printf("{\"threads\": %d, \"mib\": %ld, \"reps\": %d, \"median_gb_s\": %.3f, \"best_gb_s\": %.3f, "
           "\"cpu_median_gb_s\": %.3f}\n",
           threads, mib, reps, med, best, cmed);
  else
    printf("membw: %d thread(s), %ld MiB: median %.2f GB/s, best %.2f GB/s over %d reps "
           "(per CPU-second of the slowest thread: %.2f GB/s)\n",
           threads, mib, med, best, reps, cmed);
  free(gbs);
  free(cgbs);
  free(t_cpu);
  free(t_start);
  free(t_end);
  free(jobs);
  free(tid);
  free(buf);
  return 0;
}
