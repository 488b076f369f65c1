/*
 * attn_ab.c - A/B of two versions of kernels/attn_avx2.c's q35_attn_avx2_many in one process:
 * both are called alternately on the same cache (8 query heads of 256 dims, 2 KV heads a row,
 * JOBS jobs at consecutive positions ending at npos, F16 cache or TYPE=f32|q8_0), so both see the
 * same machine state; prints per-job thread CPU time (min, 25 % quantile, mean) of each and the
 * old / new ratios, and how many jobs' outputs differ between the two (bits). Not part of ctest.
 *
 * Build (after cmake --build build; OLD_SRC: the other version's attn_avx2.c, e.g. from
 * `git show main:src/kernels/attn_avx2.c > /tmp/old_attn_avx2.c`):
 *   F="-O2 -Iinclude -Isrc"
 *   cc $F -c OLD_SRC -Dq35_attn_avx2_many=old_many -Dq35_attn_avx2=old_avx2 -o /tmp/old.o
 *   cc $F -c src/kernels/attn_avx2.c -Dq35_attn_avx2_many=new_many -Dq35_attn_avx2=new_avx2 -o /tmp/new.o
 *   cc $F bench/attn_ab.c /tmp/old.o /tmp/new.o build/libq35.a -o build/attn_ab \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -pthread
 * Run: build/attn_ab [NPOS [REPS [JOBS]]]   (default 8192 21 8)
 *   env FLUSH_MB=N writes N MiB between calls (more than the L3: K and V come from memory, as
 *   in a prefill where the weights pass through the caches between attention calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "kernels/attn.h"
#include "kernels/quant.h"

void old_many(const q35_attn_job *js, int n);
void new_many(const q35_attn_job *js, int n);

enum { HD = 256, GRP = 8, NKV = 2, JMAX = 16, RMAX = 64 };

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static char *flush_buf;
static size_t flush_bytes;
static void flush(int r) {
  if (!flush_buf) return;
  memset(flush_buf, r & 255, flush_bytes);
  __asm__ volatile("" ::"r"(flush_buf) : "memory");
}

int main(int argc, char **argv) {
  const int npos = argc > 1 ? atoi(argv[1]) : 8192;
  int rep = argc > 2 ? atoi(argv[2]) : 21, nj = argc > 3 ? atoi(argv[3]) : 8;
  rep = rep < 1 ? 1 : rep > RMAX ? RMAX : rep;
  nj = nj < 1 ? 1 : nj > JMAX ? JMAX : nj;
  if (npos < nj) return fprintf(stderr, "attn_ab: npos below the job count\n"), 1;
  const char *tn = getenv("TYPE") ? getenv("TYPE") : "f16";
  const int type = !strcmp(tn, "f32") ? Q35_TYPE_F32 : !strcmp(tn, "q8_0") ? Q35_TYPE_Q8_0 : Q35_TYPE_F16;
  flush_bytes = (size_t)(getenv("FLUSH_MB") ? atoi(getenv("FLUSH_MB")) : 0) << 20;
  flush_buf = flush_bytes ? malloc(flush_bytes) : NULL;
  const size_t rb = q35_row_size(type, NKV * HD);
  char *k = q35_alloc64(rb * (size_t)npos, 0), *v = q35_alloc64(rb * (size_t)npos, 0);
  float kr[NKV * HD], vr[NKV * HD];
  uint64_t s = 88172645463325252ull;
  for (int p = 0; p < npos; p++) {
    for (int i = 0; i < NKV * HD; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      kr[i] = (float)(int)(s % 2001 - 1000) / 1000.0f;
      vr[i] = (float)(int)(s >> 32 & 1023) / 512.0f - 1.0f;
    }
    q35_quantize_row(type, kr, k + (size_t)p * rb, NKV * HD);
    q35_quantize_row(type, vr, v + (size_t)p * rb, NKV * HD);
  }
  q35_attn_job jo[JMAX], jn[JMAX];
  for (int i = 0; i < nj; i++) {
    float *q = malloc(sizeof(float) * HD * GRP);
    for (int t = 0; t < HD * GRP; t++) q[t] = (float)(((t + 7 * i) * 37) % 101 - 50) / 25.0f;
    const q35_attn_job j = {HD, GRP, npos - nj + 1 + i, type, k, v, rb, q, HD, 0.0625f, NULL, (size_t)npos, NULL, NULL, HD};
    jo[i] = jn[i] = j;
    jo[i].sc = malloc(sizeof(float) * (size_t)npos * GRP), jn[i].sc = malloc(sizeof(float) * (size_t)npos * GRP);
    jo[i].qs = malloc(sizeof(float) * HD * GRP), jn[i].qs = malloc(sizeof(float) * HD * GRP);
    jo[i].out = malloc(sizeof(float) * HD * GRP), jn[i].out = malloc(sizeof(float) * HD * GRP);
  }
  double to[RMAX], tw[RMAX], so = 0, sw = 0;
  for (int r = 0; r < rep; r++) { /* old first on even reps, new first on odd ones */
    for (int h = 0; h < 2; h++) {
      const int isnew = (r + h) & 1;
      flush(r);
      const double t0 = cpu_s();
      if (isnew) new_many(jn, nj);
      else old_many(jo, nj);
      (isnew ? tw : to)[r] = cpu_s() - t0;
    }
    so += to[r], sw += tw[r];
  }
  int diff = 0;
  for (int i = 0; i < nj; i++) diff += memcmp(jo[i].out, jn[i].out, sizeof(float) * HD * GRP) != 0;
  qsort(to, (size_t)rep, sizeof to[0], cmpd);
  qsort(tw, (size_t)rep, sizeof tw[0], cmpd);
  const double f = 1e3 / nj;
  printf("%s npos %d jobs %d: old min %.3f q25 %.3f mean %.3f | new min %.3f q25 %.3f mean %.3f ms/job | "
         "old/new q25 %.3f mean %.3f | outputs differing: %d\n",
         tn, npos, nj, to[0] * f, to[rep / 4] * f, so / rep * f, tw[0] * f, tw[rep / 4] * f, sw / rep * f,
         to[rep / 4] / tw[rep / 4], so / sw, diff);
  return 0;
}
