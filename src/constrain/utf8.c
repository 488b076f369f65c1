/*
 * utf8.c - code-point ranges as UTF-8 byte-range sequences.
 *
 * A code-point range splits into pieces whose encodings have one length and differ only in
 * whole trailing continuation bytes; each piece is then a sequence of byte ranges (one per
 * byte of the encoding), and every code point in the piece, and only those, matches it. The
 * splitting rule is the one UTF-8 regex engines use: first at the length boundaries
 * (0x7F, 0x7FF, 0xFFFF), then, for i trailing bytes, where lo and hi differ above those bytes
 * but lo does not start (or hi does not end) a full block of 2^(6i) code points. Surrogates
 * (U+D800..U+DFFF) are not valid UTF-8 and are left out.
 */
#include "constrain/grammar.h"

int cn_utf8_encode(uint32_t cp, uint8_t *o) {
  if (cp < 0x80) {
    o[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (uint8_t)(0xC0 | (cp >> 6));
    o[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (uint8_t)(0xE0 | (cp >> 12));
    o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (uint8_t)(0xF0 | (cp >> 18));
  o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

void cn_utf8_ranges(uint32_t lo, uint32_t hi, void (*emit)(const uint8_t *, const uint8_t *, int, void *), void *ctx) {
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) cn_utf8_ranges(lo, 0xD7FF, emit, ctx);
    if (hi > 0xDFFF) cn_utf8_ranges(0xE000, hi, emit, ctx);
    return;
  }
  static const uint32_t max_len[3] = {0x7F, 0x7FF, 0xFFFF};
  for (int i = 0; i < 3; i++)
    if (lo <= max_len[i] && hi > max_len[i]) {
      cn_utf8_ranges(lo, max_len[i], emit, ctx);
      cn_utf8_ranges(max_len[i] + 1, hi, emit, ctx);
      return;
    }
  uint8_t a[4], b[4];
  const int n = cn_utf8_encode(lo, a);
  for (int i = 1; i < n; i++) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        cn_utf8_ranges(lo, lo | m, emit, ctx);
        cn_utf8_ranges((lo | m) + 1, hi, emit, ctx);
        return;
      }
      if ((hi & m) != m) {
        cn_utf8_ranges(lo, (hi & ~m) - 1, emit, ctx);
        cn_utf8_ranges(hi & ~m, hi, emit, ctx);
        return;
      }
    }
  }
  cn_utf8_encode(hi, b);
  emit(a, b, n, ctx);
}
