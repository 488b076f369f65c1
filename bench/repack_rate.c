/*
 * repack_rate.c - the load-time repack (q35_repack_row, what src/model/load.c runs per row) one
 * thread, per type: MB of the file's weight bytes rewritten per CPU-second, rows of K elements
 * of random bytes (the rewrite moves bits; it does not look at their values beyond table
 * indices), MiB given, best of ROUNDS. At the level Q35_SIMD gives. No timed assertions (not
 * part of ctest).
 * Build (from the repository root, after cmake --build build):
 *   gcc -O2 -std=gnu11 -pthread -Iinclude -Isrc bench/repack_rate.c build/libq35.a \
 *       -ljansson -lpcre2-8 -lutf8proc -lm -o /tmp/repack_rate
 * Run: Q35_SIMD=avx2 /tmp/repack_rate [MiB, default 64] [rounds, default 5] [type names, comma list]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/tensor_types.h"
#include "kernels/quant.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  const double mib = argc > 1 ? atof(argv[1]) : 64;
  const int rounds = argc > 2 ? atoi(argv[2]) : 5;
  const char *list = argc > 3 ? argv[3]
                              : "q4_0,iq4_nl,mxfp4,q5_1,q2_k,q3_k,q4_k,q6_k,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m";
  const int64_t K = 2048;
  char *names = strdup(list);
  for (char *save = NULL, *nm = strtok_r(names, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
    int t = -1;
    for (int i = 0; i < Q35_TYPE_COUNT; i++)
      if (q35_type_name(i) && !strcasecmp(q35_type_name(i), nm)) t = i;
    if (t < 0) {
      fprintf(stderr, "unknown type %s\n", nm);
      return 1;
    }
    const int rt = q35_repack_type(t);
    if (rt == t) {
      printf("%-8s not repacked at this level\n", nm);
      continue;
    }
    const size_t rs = q35_row_size(t, K), ro = q35_row_size(rt, K);
    const size_t rows = (size_t)(mib * 1048576.0 / (double)rs) + 1;
    uint8_t *src = malloc(rs * rows), *dst = malloc(ro * rows);
    if (!src || !dst) return 1;
    srand(1);
    for (size_t i = 0; i < rs * rows; i++) src[i] = (uint8_t)rand();
    memset(dst, 0, ro * rows);
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
      const double t0 = cpu_s();
      for (size_t i = 0; i < rows; i++) q35_repack_row(rt, src + i * rs, dst + i * ro, K);
      const double s = cpu_s() - t0;
      if (s < best) best = s;
    }
    unsigned h = 2166136261u; /* FNV-1a of the output: the same for any level and version */
    for (size_t i = 0; i < ro * rows; i++) h = (h ^ dst[i]) * 16777619u;
    printf("%-8s -> %-9s %8.0f MB/s (file bytes per CPU-s)  fnv %08x\n", nm, q35_type_name(rt),
           (double)(rs * rows) / best / 1e6, h);
    free(src), free(dst);
  }
  free(names);
  return 0;
}
