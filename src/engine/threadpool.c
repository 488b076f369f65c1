#include "engine/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* one thread's share of a claim: [front, back) in chunks, packed front | back << 32 */
typedef struct {
  _Alignas(64) atomic_uint_least64_t fb;
} share;

struct q35_pool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;       /* bumped for each task */
  atomic_int pending;    /* workers still running the current task */
  atomic_int quit;
  q35_task_fn fn;
  void *ctx;
  share *shares;         /* n of them, for q35_claim_* */
  long claim_n, claim_grain;
};

typedef struct {
  q35_pool *p;
  int ith;
} worker_arg;

static void *worker(void *arg) {
  worker_arg *wa = arg;
  q35_pool *p = wa->p;
  int ith = wa->ith;
  free(wa);
  unsigned seen = 0;
  for (;;) {
    /* spin a while for the next task, then sleep */
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && spins < 20000) {
      if (++spins % 64 == 0) sched_yield(); /* share the core when the machine is busy */
      else cpu_relax();
    }
    if (g == seen) {
      pthread_mutex_lock(&p->mu);
      while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->quit)) return NULL;
    seen = g;
    p->fn(p->ctx, ith, p->n);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
  }
}

q35_pool *q35_pool_new(int n_threads) {
  if (n_threads < 1) n_threads = 1;
  q35_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->threads = calloc((size_t)n_threads, sizeof *p->threads);
  p->shares = aligned_alloc(64, sizeof(share) * (size_t)n_threads);
  if (!p->threads || !p->shares) {
    free(p->threads);
    free(p->shares);
    free(p);
    return NULL;
  }
  for (int i = 1; i < n_threads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    wa->p = p;
    wa->ith = i;
    if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
      free(wa);
      p->n = i; /* run with the threads we got */
      break;
    }
  }
  return p;
}

void q35_pool_free(q35_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->quit, 1);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->threads);
  free(p->shares);
  free(p);
}

int q35_pool_size(const q35_pool *p) { return p->n; }

void q35_pool_run(q35_pool *p, q35_task_fn fn, void *ctx) {
  if (p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  fn(ctx, 0, p->n);
  for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
    if (spins % 64 == 63) sched_yield();
    else cpu_relax();
  }
}

void q35_claim_init(q35_pool *p, long n, long grain) {
  if (grain < 1) grain = 1;
  const long chunks = (n + grain - 1) / grain;
  p->claim_n = n;
  p->claim_grain = grain;
  for (int i = 0; i < p->n; i++) {
    long c0, c1;
    q35_split(chunks, i, p->n, &c0, &c1);
    atomic_store_explicit(&p->shares[i].fb, (uint64_t)c0 | (uint64_t)c1 << 32, memory_order_relaxed);
  }
  /* published to the workers by q35_pool_run's release of the task */
}

/* Take a piece of share s: from the front (owner) or the back (anyone else); a quarter of what
 * is left, at least one chunk. */
static int take(share *s, int front, long *c0, long *c1) {
  uint64_t v = atomic_load_explicit(&s->fb, memory_order_relaxed);
  for (;;) {
    const uint64_t f = v & 0xffffffffu, b = v >> 32;
    if (f >= b) return 0;
    uint64_t k = (b - f) / 4;
    if (k < 1) k = 1;
    const uint64_t nv = front ? (f + k) | b << 32 : f | (b - k) << 32;
    if (atomic_compare_exchange_weak_explicit(&s->fb, &v, nv, memory_order_relaxed, memory_order_relaxed)) {
      *c0 = (long)(front ? f : b - k);
      *c1 = (long)(front ? f + k : b);
      return 1;
    }
  }
}

int q35_claim_next(q35_pool *p, int ith, int *from, long *i0, long *i1) {
  const int nth = p->n;
  if (ith < 0 || ith >= nth) return 0; /* a task run inline (nth 1) owns everything: see below */
  long c0, c1;
  while (*from < nth) {
    const int s = (ith + *from) % nth;
    if (take(&p->shares[s], *from == 0, &c0, &c1)) {
      *i0 = c0 * p->claim_grain;
      *i1 = c1 * p->claim_grain < p->claim_n ? c1 * p->claim_grain : p->claim_n;
      return 1;
    }
    ++*from;
  }
  return 0;
}
