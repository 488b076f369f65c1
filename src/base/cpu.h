/*
 * cpu.h - the one place that knows what the CPU can do and which SIMD level q35 runs at.
 *
 * Every kernel family (weight dot products and tiles, conversions, attention, the delta rule,
 * the sampling head) asks q35_simd_active() and nothing else. The level is detected once; the
 * environment variable Q35_SIMD=scalar|avx2|avx512 (|neon on ARM) lowers it for every family
 * at once, so tests and benchmarks exercise each level on one machine. An unknown value, or a
 * level this CPU lacks, is an error that q35_cpu_check reports (the library's entry points and
 * the CLI call it; the kernels then run at the detected level, never at a guessed one).
 */
#ifndef Q35_CPU_H
#define Q35_CPU_H

#include "q35.h"

/* Levels in increasing order within one architecture: x86-64 has scalar < avx2 < avx512, aarch64
 * scalar < neon. A kernel family takes the highest level it has that is <= the active one. */
typedef enum q35_simd {
  Q35_SIMD_SCALAR = 0,
  Q35_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
  Q35_SIMD_AVX512 = 2, /* AVX-512 F/BW/VL/DQ/VNNI on top of the AVX2 level */
  Q35_SIMD_NEON = 3,   /* aarch64 Advanced SIMD (dotprod / i8mm: features inside the level) */
} q35_simd;

/* Features kernels may branch on inside a level (each implies its level is supported). */
typedef enum q35_cpu_feature {
  Q35_CPU_AVX512_VBMI, /* vpermb: the Q8_0Z Q4_0 kernels */
  Q35_CPU_AVX512_BF16,
  Q35_CPU_DOTPROD, /* aarch64 SDOT/UDOT (FEAT_DotProd): the NEON integer dot products */
  Q35_CPU_I8MM,    /* aarch64 SMMLA (FEAT_I8MM): the NEON 2 x 2 tiles */
  Q35_CPU_GFNI,    /* x86 vgf2p8affineqb at the AVX-512 level: the Q2_K / Q3_K field extraction */
  Q35_CPU_FEATURE_COUNT,
} q35_cpu_feature;

/* The level every kernel runs at: the best the CPU supports, lowered by Q35_SIMD. */
q35_simd q35_simd_active(void);
/* The best level this CPU supports. */
q35_simd q35_simd_best(void);
/* Does this CPU run the level? */
int q35_simd_supported(q35_simd level);
/* "scalar", "avx2", "avx512", "neon". */
const char *q35_simd_name(q35_simd level);
/* Parse a level name; -1 for an unknown name. */
int q35_simd_parse(const char *name, q35_simd *out);
/* Has the CPU this feature (and is the active level at least the one the feature belongs to)? */
int q35_cpu_has(q35_cpu_feature f);
/* The active level for reports (q35 bench --json "simd"): the level's name, on aarch64 with the
 * features the NEON kernels use: "neon", "neon+dotprod", "neon+dotprod+i8mm" (a static string). */
const char *q35_simd_desc(void);
/* 0, or -1 with a message naming the value when Q35_SIMD is unknown or names a level this CPU
 * lacks. */
int q35_cpu_check(q35_err *err);
/* Testing aid Q35_Q4_0_X (set: Q4_0 keeps the Q8_0X kernels where VBMI would pick Q8_0Z), read
 * once with the rest. */
int q35_cpu_q4_0_x(void);

#endif
