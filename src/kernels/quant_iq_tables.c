/*
 * quant_iq_tables.c - the IQ1/IQ2/IQ3 lookup tables (quant_iq_tables.h): the grids, transcribed
 * from ggml by tools/gen_iq_tables.c into quant_iq_grids.inc, and the sign tables, which follow
 * from their rule (7 stored sign bits, the 8th makes the number of minus signs even).
 */
#include "kernels/quant_iq_tables.h"

#include <pthread.h>

#include "kernels/quant_iq_grids.inc"


#define S8(i) (uint8_t)((i) | ((__builtin_popcount(i) & 1) << 7))
#define S4(i) S8(i), S8((i) + 1), S8((i) + 2), S8((i) + 3)
#define S16(i) S4(i), S4((i) + 4), S4((i) + 8), S4((i) + 12)
const uint8_t q35_ksigns_iq2xs[128] = {S16(0), S16(16), S16(32), S16(48), S16(64), S16(80), S16(96), S16(112)};

/* byte j = 0xFF where bit j of the sign byte is set */
#define B(s, j) ((((uint64_t)(s) >> (j)) & 1) * (0xFFull << (8 * (j))))
#define M8(s) (B(s, 0) | B(s, 1) | B(s, 2) | B(s, 3) | B(s, 4) | B(s, 5) | B(s, 6) | B(s, 7))
#define K8(i) M8(S8(i))
#define K4(i) K8(i), K8((i) + 1), K8((i) + 2), K8((i) + 3)
#define K16(i) K4(i), K4((i) + 4), K4((i) + 8), K4((i) + 12)
const uint64_t q35_ksigns64[128] = {K16(0), K16(16), K16(32), K16(48), K16(64), K16(80), K16(96), K16(112)};

/* the same as sign operands of _mm256_sign_epi8: 0xFF (-1) where negative, 0x01 elsewhere */
#define P8(i) (K8(i) | 0x0101010101010101ull)
#define P4(i) P8(i), P8((i) + 1), P8((i) + 2), P8((i) + 3)
#define P16(i) P4(i), P4((i) + 4), P4((i) + 8), P4((i) + 12)
const uint64_t q35_ksigns_pm1[128] = {P16(0), P16(16), P16(32), P16(48), P16(64), P16(80), P16(96), P16(112)};

uint16_t q35_ksigns14[1 << 14];
static pthread_once_t ksigns14_once = PTHREAD_ONCE_INIT;

uint64_t q35_iq1s_grid8[2048];
uint64_t q35_iq1s_grid8d[4096];
uint16_t q35_iq3s_hi[256][8];

static void ksigns14_build(void) {
  for (unsigned h = 0; h < 256; h++)
    for (unsigned k = 0; k < 8; k++) q35_iq3s_hi[h][k] = (uint16_t)(((h >> k) & 1) << 8);
  for (unsigned s = 0; s < (1u << 14); s++)
    q35_ksigns14[s] = (uint16_t)(q35_ksigns_iq2xs[s & 127] | q35_ksigns_iq2xs[s >> 7] << 8);
  for (unsigned i = 0; i < 2048; i++) {
    uint64_t o = 0;
    for (int j = 0; j < 8; j++) o |= (uint64_t)(8 * ((int8_t)(q35_iq1s_grid[i] >> (8 * j)) + 1)) << (8 * j);
    q35_iq1s_grid8[i] = o;
    q35_iq1s_grid8d[i] = o | 0x0202020202020202ull; /* delta +1 */
    q35_iq1s_grid8d[i | 2048] = o;                  /* delta -1 */
  }
}

void q35_iq_tables_init(void) { pthread_once(&ksigns14_once, ksigns14_build); }
