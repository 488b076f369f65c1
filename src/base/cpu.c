/*
 * cpu.c - CPU feature detection and the SIMD level (see cpu.h). Detected once under
 * pthread_once; read-only afterwards, so pool threads may ask at any time.
 */
#include "base/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#if defined(__x86_64__) || defined(__i386__)
#define Q35_CPU_X86 1
#include <cpuid.h>
#else
#define Q35_CPU_X86 0
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static const char *const level_names[] = {"scalar", "avx2", "avx512", "neon"};

static struct {
  q35_simd best, active;
  int features[Q35_CPU_FEATURE_COUNT];
  int env_bad;       /* Q35_SIMD was set to something unusable */
  char env[32];      /* its value (truncated), for the error */
  int q4_0_x;
} g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

/* Does a CPU whose best level is `best` run `level`? (detect() uses it inside the once, so it
 * must not call once() itself.) */
static int runs(q35_simd best, q35_simd level) {
  if (level == Q35_SIMD_SCALAR) return 1;
  if (level == Q35_SIMD_NEON) return best == Q35_SIMD_NEON;
  return best != Q35_SIMD_NEON && level <= best;
}

#if Q35_CPU_X86
/* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c",
 * and the fuzz build compiles this file with clang. */
static int cpuid_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
}
#endif

#if defined(__aarch64__)
/* dotprod / i8mm at run time: the kernel's hwcaps on Linux, sysctl on macOS (0 elsewhere). */
static int arm_feature(q35_cpu_feature f) {
#if defined(__linux__)
  enum { HWCAP_DOTPROD_BIT = 20, HWCAP2_I8MM_BIT = 13 }; /* asm/hwcap.h: HWCAP_ASIMDDP, HWCAP2_I8MM */
  if (f == Q35_CPU_DOTPROD) return (int)((getauxval(AT_HWCAP) >> HWCAP_DOTPROD_BIT) & 1);
  return (int)((getauxval(AT_HWCAP2) >> HWCAP2_I8MM_BIT) & 1);
#elif defined(__APPLE__)
  int v = 0;
  size_t len = sizeof v;
  const char *name = f == Q35_CPU_DOTPROD ? "hw.optional.arm.FEAT_DotProd" : "hw.optional.arm.FEAT_I8MM";
  return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v;
#else
  (void)f;
  return 0;
#endif
}
#endif

static void detect(void) {
  q35_simd best = Q35_SIMD_SCALAR;
#if Q35_CPU_X86
  __builtin_cpu_init();
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_f16c();
  const int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512vnni") &&
                     __builtin_cpu_supports("bmi2"); /* pext / pdep in the IQ decode kernels (every AVX-512 part has BMI2) */
  if (avx512) best = Q35_SIMD_AVX512;
  else if (avx2) best = Q35_SIMD_AVX2;
  g_cpu.features[Q35_CPU_AVX512_VBMI] = avx512 && __builtin_cpu_supports("avx512vbmi");
  g_cpu.features[Q35_CPU_AVX512_BF16] = avx512 && __builtin_cpu_supports("avx512bf16");
  g_cpu.features[Q35_CPU_GFNI] = avx512 && __builtin_cpu_supports("gfni");
#elif defined(__aarch64__)
  best = Q35_SIMD_NEON; /* Advanced SIMD is mandatory on aarch64 */
  g_cpu.features[Q35_CPU_DOTPROD] = arm_feature(Q35_CPU_DOTPROD);
  g_cpu.features[Q35_CPU_I8MM] = arm_feature(Q35_CPU_I8MM);
#endif
  g_cpu.best = best;
  g_cpu.active = best;
  const char *env = getenv("Q35_SIMD");
  if (env && *env) {
    q35_simd want;
    snprintf(g_cpu.env, sizeof g_cpu.env, "%s", env);
    if (q35_simd_parse(env, &want) || !runs(best, want)) g_cpu.env_bad = 1;
    else g_cpu.active = want;
  }
  const char *x = getenv("Q35_Q4_0_X");
  g_cpu.q4_0_x = x && *x;
}

static void once(void) { pthread_once(&g_cpu_once, detect); }

q35_simd q35_simd_active(void) {
  once();
  return g_cpu.active;
}

q35_simd q35_simd_best(void) {
  once();
  return g_cpu.best;
}

int q35_simd_supported(q35_simd level) {
  once();
  return runs(g_cpu.best, level);
}

const char *q35_simd_name(q35_simd level) {
  return (unsigned)level < sizeof level_names / sizeof *level_names ? level_names[level] : "unknown";
}

int q35_simd_parse(const char *name, q35_simd *out) {
  for (unsigned i = 0; i < sizeof level_names / sizeof *level_names; i++)
    if (!strcmp(name, level_names[i])) {
      *out = (q35_simd)i;
      return 0;
    }
  return -1;
}

int q35_cpu_has(q35_cpu_feature f) {
  once();
  if ((unsigned)f >= Q35_CPU_FEATURE_COUNT) return 0;
  if (f == Q35_CPU_DOTPROD || f == Q35_CPU_I8MM) return g_cpu.active == Q35_SIMD_NEON && g_cpu.features[f];
  if (g_cpu.active < Q35_SIMD_AVX512 || g_cpu.active == Q35_SIMD_NEON) return 0; /* AVX-512 features */
  return g_cpu.features[f];
}

const char *q35_simd_desc(void) {
  once();
  switch (g_cpu.active) {
  case Q35_SIMD_NEON:
    /* the kernels take the i8mm tiles only with dotprod (quant_neon.c) */
    if (!q35_cpu_has(Q35_CPU_DOTPROD)) return "neon";
    return q35_cpu_has(Q35_CPU_I8MM) ? "neon+dotprod+i8mm" : "neon+dotprod";
  default: return q35_simd_name(g_cpu.active);
  }
}

int q35_cpu_check(q35_err *err) {
  once();
  if (!g_cpu.env_bad) return 0;
  q35_simd want;
  if (q35_simd_parse(g_cpu.env, &want))
    return q35_seterr(err, "Q35_SIMD=%s is not a SIMD level (scalar, avx2, avx512, neon)", g_cpu.env);
  const int want_arm = want == Q35_SIMD_NEON, here_arm = !Q35_CPU_X86;
  if (want != Q35_SIMD_SCALAR && want_arm != here_arm)
    return q35_seterr(err, "Q35_SIMD=%s: %s is an %s level; this is not an %s CPU (best level here: %s)", g_cpu.env,
                      q35_simd_name(want), want_arm ? "aarch64" : "x86-64", want_arm ? "aarch64" : "x86-64",
                      q35_simd_name(g_cpu.best));
  return q35_seterr(err, "Q35_SIMD=%s: this CPU does not support the %s level (best here: %s)", g_cpu.env,
                    q35_simd_name(want), q35_simd_name(g_cpu.best));
}

int q35_cpu_q4_0_x(void) {
  once();
  return g_cpu.q4_0_x;
}
