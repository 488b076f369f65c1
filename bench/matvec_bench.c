/*
 * matvec_bench.c - the output-matrix product of a batched decode step: a 248,320 x 2048 Q4_0
 * weight matrix (the 35B-A3B output matrix's shape) times 1, 2, 4 and 8 activation columns,
 * at 1 and 2 threads, through q35_vec_dot_tile_ex (the path the forward pass takes), in ms and
 * GB/s of weights streamed. Not part of ctest (no timed assertions anywhere).
 *
 * Build (after cmake --build build):
 *   cc -O2 -Iinclude -Isrc bench/matvec_bench.c build/libq35.a -o build/matvec_bench \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: build/matvec_bench [ROWS, default 248320] [ROWS PER CALL, default 64]
 *   env REP=N repeats each pass N times (a small ROWS with REP=400 measures the kernel in cache);
 *   env TYPE=q8_0 (q6_K, q4_K, ...) another weight type (default q4_0);
 *   env K=512 another row length (default 2048; 512 is an expert's down projection);
 *   env PAIR=D the MoE experts' decode order (src/model/ffn.c): rows in segments of 2D, each call
 *   of ROWS PER CALL rows at r in a segment's first half paired with the rows at r + D, as one
 *   q35_vec_dot_rows2 (one column; two tile calls for more): two memory streams per thread.
 *   PAIR=512 is an expert's gate and up (I = 512), K=512 PAIR=1024 its down halves (H = 2048).
 *   env COLS=123 the column counts to run, one digit each (default 1, 2, 4, 8: COLS=1248);
 *   env THREADS=1 one thread only (default 1 and 2);
 *   env REPACK=1 the rows rewritten into the layout the loader gives them at the active level
 *   (q35_repack_type: Q4_0 -> Q4_0R at AVX2, so the kernel a model's decode runs there), where
 *   that layout has the file type's row size; the first line names the type measured.
 * Each line gives the best wall time of 7 passes and the best CPU time of the slowest thread
 * (the figure to compare on a shared, busy machine).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/tensor_types.h"
#include "kernels/quant.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
  int type;
  int64_t n;
  const uint8_t *w;
  size_t ws;
  int r0, r1;
  const uint8_t *x;
  size_t xs;
  int nc;
  float *o;
  size_t ocs;
  int chunk, rep, pair;
  double cpu; /* this thread's CPU seconds */
} job;

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *run(void *p) {
  job *j = p;
  const double c0 = cpu_now();
  for (int q = 0; q < j->rep; q++)
    for (int r = j->r0; r < j->r1; r += j->chunk) {
      const int D = j->pair;
      if (D && (r - j->r0) % (2 * D) >= D) { /* a segment's second half: done with its first */
        r += D - j->chunk;
        continue;
      }
      const int nr = j->r1 - r < j->chunk ? j->r1 - r : j->chunk;
      if (D && j->nc == 1)
        q35_vec_dot_rows2(j->type, j->n, j->w + (size_t)r * j->ws, j->w + (size_t)(r + D) * j->ws, j->ws, nr, j->x,
                          j->o + r, j->o + r + D, 1);
      else {
        q35_vec_dot_tile_ex(j->type, j->n, j->w + (size_t)r * j->ws, j->ws, nr, j->x, j->xs, j->nc, j->o + r, 1, j->ocs);
        if (D)
          q35_vec_dot_tile_ex(j->type, j->n, j->w + (size_t)(r + D) * j->ws, j->ws, nr, j->x, j->xs, j->nc, j->o + r + D, 1,
                              j->ocs);
      }
    }
  j->cpu = cpu_now() - c0;
  return NULL;
}

int main(int argc, char **argv) {
  int type = getenv("TYPE") ? q35_type_from_name(getenv("TYPE")) : Q35_TYPE_Q4_0;
  const int64_t n = getenv("K") ? atoll(getenv("K")) : 2048;
  if (type < 0 || !q35_type_quantizable(type)) {
    fprintf(stderr, "matvec_bench: TYPE=%s is not a weight type q35 quantizes\n", getenv("TYPE"));
    return 2;
  }
  const int rows = argc > 1 ? atoi(argv[1]) : 248320, chunk = argc > 2 ? atoi(argv[2]) : 64;
  const int rep = getenv("REP") ? atoi(getenv("REP")) : 1, pair = getenv("PAIR") ? atoi(getenv("PAIR")) : 0;
  if (rows < 64 || chunk < 1 || rep < 1 || pair < 0 || (pair && (pair % chunk || rows % (4 * pair)))) {
    fprintf(stderr, "PAIR=D needs ROWS a multiple of 4D and D of ROWS PER CALL\n");
    fprintf(stderr, "usage: matvec_bench [ROWS >= 64] [ROWS PER CALL >= 1]   (env REP >= 1)\n");
    return 2;
  }
  const size_t ws = q35_row_size(type, n);
  uint8_t *w = aligned_alloc(64, (ws * (size_t)rows + 63) / 64 * 64);
  float *f = malloc(sizeof(float) * (size_t)n);
  srand(1);
  for (int r = 0; r < rows; r++) { /* 64 random rows, repeated */
    if (r < 64) {
      for (int64_t i = 0; i < n; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
      q35_quantize_row(type, f, w + (size_t)r * ws, n);
    } else {
      memcpy(w + (size_t)r * ws, w + (size_t)(r % 64) * ws, ws);
    }
  }
  if (getenv("REPACK") && atoi(getenv("REPACK"))) { /* the loader's layout at this level (q35_repack_type) */
    const int rt = q35_repack_type(type);
    if (rt != type && q35_row_size(rt, n) == ws) {
      uint8_t *tmp = malloc(ws);
      for (int r = 0; r < rows; r++) {
        memcpy(tmp, w + (size_t)r * ws, ws);
        q35_repack_row(rt, tmp, w + (size_t)r * ws, n);
      }
      free(tmp);
      type = rt;
    }
  }
  const int vt = q35_vec_dot_type(type);
  const size_t xs = (q35_row_size(vt, n) + 63) / 64 * 64;
  uint8_t *x = aligned_alloc(64, xs * 8);
  for (int c = 0; c < 8; c++) {
    for (int64_t i = 0; i < n; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    q35_quantize_row(vt, f, x + (size_t)c * xs, n);
  }
  const size_t ocs = (size_t)rows;
  float *o = aligned_alloc(64, (sizeof(float) * ocs * 8 + 63) / 64 * 64);
  printf("%s %d x %lld, activations %s, %d rows per call, %d pass(es), pair distance %d rows\n", q35_type_name(type), rows,
         (long long)n, q35_type_name(vt), chunk, rep, pair);
  const int maxt = getenv("THREADS") ? atoi(getenv("THREADS")) : 2;
  int cols[8] = {1, 2, 4, 8}, ncols = 4;
  if (getenv("COLS")) { /* e.g. COLS=123: one digit per column count, 1..8 */
    ncols = 0;
    for (const char *s = getenv("COLS"); *s && ncols < 8; s++)
      if (*s >= '1' && *s <= '8') cols[ncols++] = *s - '0';
  }
  for (int nt = 1; nt <= maxt && nt <= 2; nt++)
    for (int ci = 0; ci < ncols; ci++) {
      const int nc = cols[ci];
      double best = 1e30, best_cpu = 1e30;
      for (int k = 0; k < 7; k++) {
        pthread_t th[2];
        job J[2];
        const double t = now();
        for (int i = 0; i < nt; i++) {
          J[i] = (job){type, n, w, ws, (int)((int64_t)rows * i / nt), (int)((int64_t)rows * (i + 1) / nt), x, xs, nc, o, ocs,
                       chunk, rep, pair, 0};
          pthread_create(&th[i], NULL, run, &J[i]);
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
        const double dt = now() - t;
        if (dt < best) best = dt;
        double slow = 0; /* the slowest thread's CPU time: what the pass costs while scheduled */
        for (int i = 0; i < nt; i++) slow = J[i].cpu > slow ? J[i].cpu : slow;
        if (slow < best_cpu) best_cpu = slow;
      }
      printf("threads %d columns %d: %.2f ms  %.1f GB/s  (per CPU-second of the slowest thread: %.2f ms  %.1f GB/s)\n",
             nt, nc, best * 1e3, (double)ws * rows * rep / best / 1e9, best_cpu * 1e3,
             (double)ws * rows * rep / best_cpu / 1e9);
    }
  free(w);
  free(f);
  free(x);
  free(o);
  return 0;
}
