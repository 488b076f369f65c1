/*
 * threadpool.h - a persistent pool of worker threads for the forward pass.
 *
 * q35_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once on every thread (the caller is
 * thread 0) and returns when all have finished. Work is split statically by ith, so which
 * thread computes which output never changes the arithmetic: results are bit-identical for
 * any thread count as long as each output element is computed by exactly one thread.
 * Workers spin briefly after a task (decode issues many small tasks) and then sleep.
 */
#ifndef Q35_THREADPOOL_H
#define Q35_THREADPOOL_H

typedef struct q35_pool q35_pool;
typedef void (*q35_task_fn)(void *ctx, int ith, int nth);

q35_pool *q35_pool_new(int n_threads);
void q35_pool_free(q35_pool *p);
int q35_pool_size(const q35_pool *p);
void q35_pool_run(q35_pool *p, q35_task_fn fn, void *ctx);

/*
 * Work claiming inside one task, for items whose cost varies per thread (memory streams, a
 * worker that wakes late): q35_claim_init(p, n, grain) before q35_pool_run splits n items into
 * chunks of `grain` and gives thread ith the ith contiguous share, as q35_split would. In the
 * task, thread ith calls q35_claim_next(p, ith, &from, &i0, &i1) until it returns 0 (from starts
 * at 0): it takes its own share from the front in shrinking pieces, then pieces from the back of
 * the other shares. Every item is handed out exactly once, so a result that depends only on the
 * item (as every output of the forward pass does) is the same whichever thread computes it.
 * One claim per pool at a time: init it in the launching thread, use it in that launch only.
 */
void q35_claim_init(q35_pool *p, long n, long grain);
int q35_claim_next(q35_pool *p, int ith, int *from, long *i0, long *i1);

/* The [start, end) part of n items that thread ith of nth takes (contiguous, balanced). */
static inline void q35_split(long n, int ith, int nth, long *start, long *end) {
  long per = n / nth, rem = n % nth;
  *start = ith * per + (ith < rem ? ith : rem);
  *end = *start + per + (ith < rem ? 1 : 0);
}

#endif
