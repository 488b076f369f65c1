/*
 * quant_neon_tile.h - the NEON tile kernels' loop: a tile of nr weight rows x nc activation
 * columns as calls of a multi-column kernel MC(n, w, xs, k, out), which decodes each weight
 * block once for k <= 4 columns and gives every column the bits of its one-column call (the
 * vec_dot). Columns go in groups of 4, the last group with the rest; k is a constant in each
 * call so that the kernel's per-column accumulators stay in registers.
 */
#ifndef Q35_QUANT_NEON_TILE_H
#define Q35_QUANT_NEON_TILE_H

#define Q35_NEON_TILE(TARGET, TILE, MC)                                                             \
  TARGET static void TILE(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
                          int nc, float *out, size_t ors, size_t ocs) {                            \
    for (int r = 0; r < nr; r++) {                                                                  \
      const void *wr = (const char *)w + (size_t)r * ws;                                            \
      for (int c0 = 0; c0 < nc; c0 += 4) {                                                          \
        const int k = nc - c0 < 4 ? nc - c0 : 4;                                                    \
        const void *xp[4];                                                                          \
        float s[4];                                                                                 \
        for (int j = 0; j < k; j++) xp[j] = (const char *)x + (size_t)(c0 + j) * xs;               \
        switch (k) {                                                                                \
        case 4: MC(n, wr, xp, 4, s); break;                                                         \
        case 3: MC(n, wr, xp, 3, s); break;                                                         \
        case 2: MC(n, wr, xp, 2, s); break;                                                         \
        default: MC(n, wr, xp, 1, s); break;                                                        \
        }                                                                                           \
        for (int j = 0; j < k; j++) out[(size_t)r * ors + (size_t)(c0 + j) * ocs] = s[j];          \
      }                                                                                             \
    }                                                                                               \
  }

#endif
