/*
 * rng.c - the randomness of the sampling head. Counter based and stateless: the uniform of a
 * draw is Philox4x32-10 keyed by the request's 64-bit seed with the draw index as counter, so
 * a token depends only on (seed, draw index) and its row, never on batch neighbours, threads,
 * chunking or call order. Unseeded requests get a seed from OS entropy, below 2^53 so that a
 * JSON client can echo it exactly.
 */
#include <fcntl.h>
#include <sys/random.h> /* getrandom (Linux), getentropy (macOS) */
#include <time.h>
#include <unistd.h>

#include "sample/sample_internal.h"

#define PHILOX_ROUNDS 10
#define PHILOX_M0 0xD2511F53u /* round multipliers */
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* key schedule: Weyl constants (golden ratio, sqrt(3) - 1) */
#define PHILOX_W1 0xBB67AE85u
#define DRAW_DROP 11          /* 64 - 53: the draw keeps 53 random bits */
#define SEED_MIX 0x9E3779B97F4A7C15ull /* 2^64 / golden ratio: spreads the clock fallback */

void q35_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    if (r > 0) { /* key schedule: bump by the Weyl constants between rounds */
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint64_t q35_draw_u53(uint64_t seed, uint64_t n) {
  uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), 0, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  q35_philox4x32_10(ctr, key, out);
  return ((((uint64_t)out[0]) << 32) | out[1]) >> DRAW_DROP;
}

uint64_t q35_random_seed(void) {
  uint64_t x = 0;
#if defined(__linux__)
  ssize_t got = getrandom(&x, sizeof x, 0);
#else
  ssize_t got = getentropy(&x, sizeof x) == 0 ? (ssize_t)sizeof x : -1;
#endif
  if (got != (ssize_t)sizeof x) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &x, sizeof x) != (ssize_t)sizeof x) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      x ^= (uint64_t)ts.tv_nsec * SEED_MIX ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
    }
    if (fd >= 0) close(fd);
  }
  return x >> DRAW_DROP; /* below 2^53: exact in a JSON number */
}
