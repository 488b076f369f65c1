/*
 * run_at_level - runs a test at one SIMD level, for ctest's per-level variants NAME@LEVEL
 * (tests/CMakeLists.txt):
 *   run_at_level LEVEL PROGRAM [ARGS...]   PROGRAM with Q35_SIMD=LEVEL; exit 77 (the variants'
 *                                          SKIP_RETURN_CODE) without running it when this CPU
 *                                          lacks LEVEL, or when LEVEL is the CPU's best level
 *                                          (the plain NAME test ran there already)
 *   run_at_level --levels                  prints the levels the suite runs on this CPU and the
 *                                          ones it lacks: "avx512 avx2 scalar (this CPU lacks: none)"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"

/* This architecture's levels, best first. */
#if defined(__x86_64__) || defined(__i386__)
static const q35_simd arch_levels[] = {Q35_SIMD_AVX512, Q35_SIMD_AVX2, Q35_SIMD_SCALAR};
#elif defined(__aarch64__)
static const q35_simd arch_levels[] = {Q35_SIMD_NEON, Q35_SIMD_SCALAR};
#else
static const q35_simd arch_levels[] = {Q35_SIMD_SCALAR};
#endif
#define N_LEVELS (sizeof arch_levels / sizeof *arch_levels)

/* exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt) */
#define EXIT_SKIP 77

static void print_levels(void) {
  char run[64] = "", lacks[64] = "";
  for (size_t i = 0; i < N_LEVELS; i++) {
    char *list = q35_simd_supported(arch_levels[i]) ? run : lacks;
    if (*list) strcat(list, " ");
    strcat(list, q35_simd_name(arch_levels[i]));
  }
  printf("%s (this CPU lacks: %s)\n", run, *lacks ? lacks : "none");
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--levels")) {
    print_levels();
    return 0;
  }
  q35_simd level;
  if (argc < 3 || q35_simd_parse(argv[1], &level)) {
    fprintf(stderr, "usage: run_at_level LEVEL PROGRAM [ARGS...] | run_at_level --levels\n");
    return 2;
  }
  if (!q35_simd_supported(level)) {
    printf("skipped: this CPU lacks the %s level\n", argv[1]);
    return EXIT_SKIP;
  }
  if (level == q35_simd_best()) {
    printf("skipped: %s is this CPU's best level, which the plain test runs at\n", argv[1]);
    return EXIT_SKIP;
  }
  setenv("Q35_SIMD", argv[1], 1);
  execvp(argv[2], argv + 2);
  perror(argv[2]);
  return 127;
}
