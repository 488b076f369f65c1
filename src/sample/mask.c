/*
 * mask.c - the constraint mask hook of the sampling head: tokens a row's constraint refuses
 * get -inf logits before anything else of the contract runs (docs/SAMPLING.md, "Constraints").
 * The mask is one bit per token; whole words of allowed tokens are skipped, whole words of
 * refused ones written at once, so a mask costs a pass over V / 32 words plus the mixed ones.
 */
#include <math.h>

#include "sample/sampler.h"

int64_t q35_logits_apply_mask(float *logits, int32_t n_vocab, const uint32_t *mask) {
  int64_t allowed = 0;
  for (int32_t w = 0; w * 32 < n_vocab; w++) {
    const uint32_t m = mask[w];
    const int32_t base = w * 32, n = n_vocab - base < 32 ? n_vocab - base : 32;
    if (m == 0xFFFFFFFFu && n == 32) {
      allowed += 32;
      continue;
    }
    for (int32_t i = 0; i < n; i++) {
      if (m >> i & 1) allowed++;
      else logits[base + i] = -INFINITY;
    }
  }
  return allowed;
}
