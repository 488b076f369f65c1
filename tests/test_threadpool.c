/*
 * test_threadpool.c - the pool and its work claims (threadpool.h).
 *
 *  - q35_pool_run calls the task once per thread with (ith, nth) = (0..n-1, n);
 *  - q35_claim_next hands out every item of [0, n) exactly once, in pieces inside [0, n),
 *    for many (threads, n, grain), also when one thread is slowed down so the others must take
 *    pieces from the back of its share (checked: some pieces were stolen), and across many
 *    launches in a row (the claim is re-initialised per launch);
 *  - the reference twin: q35_split's static partition covers [0, n) exactly once as well.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine/threadpool.h"

enum { MAXN = 100000, MAXT = 8 };

typedef struct {
  q35_pool *p;
  long n, grain;
  atomic_int *seen;        /* per item: times handed out */
  atomic_int calls[MAXT];  /* per ith: task calls */
  atomic_int bad_nth;
  atomic_long stolen;      /* items a thread got outside its static share */
  int slow;                /* this thread sleeps before claiming (-1: none) */
  int nth;
} ctx_t;

static void task(void *vctx, int ith, int nth) {
  ctx_t *c = vctx;
  if (nth != c->nth) atomic_fetch_add(&c->bad_nth, 1);
  atomic_fetch_add(&c->calls[ith], 1);
  if (ith == c->slow) {
    struct timespec ts = {0, 2000000}; /* 2 ms: the others run out and steal */
    nanosleep(&ts, NULL);
  }
  const long chunks = (c->n + c->grain - 1) / c->grain;
  long s0, s1;
  q35_split(chunks, ith, nth, &s0, &s1);
  s0 *= c->grain;
  s1 = s1 * c->grain < c->n ? s1 * c->grain : c->n;
  long i0, i1;
  int from = 0;
  while (q35_claim_next(c->p, ith, &from, &i0, &i1)) {
    if (i0 < 0 || i1 > c->n || i0 >= i1) {
      atomic_fetch_add(&c->bad_nth, 1000);
      continue;
    }
    for (long i = i0; i < i1; i++) {
      atomic_fetch_add(&c->seen[i], 1);
      if (i < s0 || i >= s1) atomic_fetch_add(&c->stolen, 1);
      if (ith == c->slow) { /* slow all the way through */
        volatile int spin = 0;
        for (int k = 0; k < 200; k++) spin += k;
      }
    }
  }
}

static void one(q35_pool *p, int nth, long n, long grain, int slow, long *stolen) {
  ctx_t *c = calloc(1, sizeof *c);
  c->seen = calloc((size_t)(n > 0 ? n : 1), sizeof *c->seen);
  c->p = p;
  c->n = n;
  c->grain = grain;
  c->slow = slow;
  c->nth = nth;
  q35_claim_init(p, n, grain);
  q35_pool_run(p, task, c);
  long bad = 0;
  for (long i = 0; i < n; i++) bad += atomic_load(&c->seen[i]) != 1;
  CHECK(bad == 0, "threads %d n %ld grain %ld slow %d: %ld items not handed out exactly once", nth, n, grain, slow, bad);
  CHECK(atomic_load(&c->bad_nth) == 0, "threads %d n %ld grain %ld: bad nth or piece", nth, n, grain);
  for (int t = 0; t < nth; t++) CHECK(atomic_load(&c->calls[t]) == 1, "threads %d: thread %d called %d times", nth, t, atomic_load(&c->calls[t]));
  *stolen += atomic_load(&c->stolen);
  free(c->seen);
  free(c);
}

int main(void) {
  /* the static partition (reference) */
  for (int nth = 1; nth <= MAXT; nth++)
    for (long n = 0; n < 50; n++) {
      long next = 0;
      for (int t = 0; t < nth; t++) {
        long a, b;
        q35_split(n, t, nth, &a, &b);
        CHECK(a == next && b >= a, "q35_split n %ld nth %d thread %d: [%ld, %ld) after %ld", n, nth, t, a, b, next);
        next = b;
      }
      CHECK(next == n, "q35_split n %ld nth %d covers %ld", n, nth, next);
    }
  long cases = 0, stolen_slow = 0, stolen_plain = 0;
  static const long ns[] = {0, 1, 2, 3, 15, 16, 17, 100, 1023, 4096, 12345, MAXN};
  static const long grains[] = {1, 3, 16, 64};
  for (int nth = 1; nth <= 4; nth++) {
    q35_pool *p = q35_pool_new(nth);
    CHECK(p && q35_pool_size(p) == nth, "pool of %d", nth);
    if (!p) continue;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
      for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
        one(p, nth, ns[a], grains[g], -1, &stolen_plain);
        one(p, nth, ns[a], grains[g], nth > 1 ? (int)((a + g) % (size_t)nth) : -1, &stolen_slow);
        cases += 2;
      }
    for (int rep = 0; rep < 300; rep++, cases++) one(p, nth, 1 + rep * 37 % 2000, 1 + rep % 17, -1, &stolen_plain);
    q35_pool_free(p);
  }
  CHECK(stolen_slow > 0, "a slowed thread's share was never taken from the back (stealing untested)");
  printf("%ld launches; items taken from another thread's share: %ld with a slowed thread, %ld without\n", cases,
         stolen_slow, stolen_plain);
  return check_done("test_threadpool");
}
