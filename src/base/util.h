/*
 * util.h - small shared pieces: error reporting, half-precision conversion, timing.
 *
 * Errors: every fallible function returns 0 on success or -1 on failure and fills a
 * q35_err (a fixed buffer, no allocation) with a message a user can act on. Messages name
 * the file, tensor, key or parameter involved.
 */
#ifndef Q35_UTIL_H
#define Q35_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "q35.h"

/* q35_err is defined in the public header (q35.h). */
int q35_seterr(q35_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Wall clock in seconds (CLOCK_MONOTONIC). */
double q35_now(void);

/* CPUs this process may run on (its affinity mask; at least 1). */
int q35_usable_cpus(void);

/* n bytes aligned to 64 (a cache line, one 512-bit vector), zeroed when zero is set; release
 * with free(). Every buffer the SIMD kernels stream through comes from here, so no 512-bit load
 * of an activation row straddles two cache lines (malloc aligns to 16). NULL when out of
 * memory. */
void *q35_alloc64(size_t n, int zero);

/* q35_alloc64 for large scratch that is written before it is read (the forward pass's buffers):
 * from Q35_HUGE_ALLOC_MIN bytes on, the block is 2 MiB aligned and advised MADV_HUGEPAGE (where
 * the system has it), so its first touch takes one fault per 2 MiB instead of one per 4 KiB page
 * (an 8k-token prefill first-touches ~2 GB of scratch: ~500k faults of 4 KiB otherwise). Not
 * zeroed; release with free(). NULL when out of memory. */
#define Q35_HUGE_ALLOC_MIN ((size_t)8 << 20)
void *q35_alloc_huge(size_t n);
/* the same from min_bytes on (at least 2 MiB): blocks a few 2 MiB pages long whose first touch
 * falls inside a timed step (the speculative rounds' state slots and logits rows) */
void *q35_alloc_huge_from(size_t n, size_t min_bytes);

/* ---- IEEE half and bfloat16 <-> float, exact (round to nearest even) ---- */
static inline float q35_fp16_to_fp32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400));
      man &= 0x3ff;
      bits = sign | ((uint32_t)(112 - e) << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t q35_fp32_to_fp16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
    return (uint16_t)(sign | 0x7c00);
  if (ax < 0x38800000u) { /* result is subnormal or zero */
    if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to 0 */
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1); /* round to nearest even on bit 13 */
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float q35_bf16_to_fp32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t q35_fp32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

#endif
