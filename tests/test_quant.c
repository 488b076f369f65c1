/*
 * test_quant.c - tensor-type kernels against hand computations of GGML's formulas and
 * against float64 arithmetic; every SIMD level this CPU has against the scalar reference.
 *
 *  1. hand-made blocks (raw bytes laid out by hand from GGML's block structs) dequantize
 *     to the values the GGML formula gives, computed here independently;
 *  2. Q8_0 / Q8_K activation quantization: hand-checked round-half-even on exact .5 ties,
 *     and every SIMD level byte-identical to the reference on random and nasty inputs
 *     (zeros, ties, huge, tiny/subnormal, sign ties, NaN-free infinities);
 *  3. per type and length: quantize -> dequantize error bounds (relative to the block's
 *     max |x|), SIMD dequantize == reference exactly, vec_dot SIMD vs reference and vs a
 *     float64 dot of the dequantized rows within a stated tolerance, and independence of
 *     the buffer's alignment.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"
#include "base/util.h"

#include "check.h"


/* ---- deterministic random numbers ---- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * 0x1.0p-53; }
static float rng_gauss(void) {
  double u = rng_unif(), v = rng_unif();
  if (u < 1e-300) u = 1e-300;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

static int near(double got, double want, double tol) { return fabs(got - want) <= tol; }

/* ======================= 1. hand-made blocks ======================= */

static void test_hand_blocks(void) {
  float y[256];

  { /* F16 / BF16 */
    uint8_t b[8];
    put16(b, 0x3C00); put16(b + 2, 0xC000); put16(b + 4, 0x0001); put16(b + 6, 0x7BFF);
    q35_dequantize_row_ref(Q35_TYPE_F16, b, y, 4);
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0x1p-24f && y[3] == 65504.0f, "f16 dequant");
    put16(b, 0x3F80); put16(b + 2, 0xC040); put16(b + 4, 0x0001); put16(b + 6, 0x7F7F);
    q35_dequantize_row_ref(Q35_TYPE_BF16, b, y, 4);
    CHECK(y[0] == 1.0f && y[1] == -3.0f && y[2] == 0x1p-133f && y[3] == 0x1.FEp127f, "bf16 dequant");
    /* RNE conversions: 1 + 2^-11 is a tie between 1 and 1+2^-10 -> even (1.0) */
    float src[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, -1.0f - 3 * 0x1p-8f};
    uint8_t o[8];
    q35_quantize_row_ref(Q35_TYPE_F16, src, o, 2);
    CHECK(o[0] == 0x00 && o[1] == 0x3C && o[2] == 0x02 && o[3] == 0x3C, "f16 RNE");
    q35_quantize_row_ref(Q35_TYPE_BF16, src + 2, o, 2);
    /* bf16 has 7 mantissa bits: 1+2^-8 is a tie -> 1.0 (0x3F80); -(1+3*2^-8) tie -> -(1+2^-6) */
    CHECK(o[0] == 0x80 && o[1] == 0x3F && o[2] == 0x82 && o[3] == 0xBF, "bf16 RNE %02x%02x %02x%02x", o[1], o[0], o[3], o[2]);
  }

  { /* Q4_0: d (fp16) | qs[16]; element j = low nibble of qs[j] - 8, j+16 = high nibble - 8 */
    uint8_t b[18];
    put16(b, 0x3800); /* 0.5 */
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    q35_dequantize_row_ref(Q35_TYPE_Q4_0, b, y, 32);
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= y[j] == (j - 8) * 0.5f && y[j + 16] == (7 - j) * 0.5f;
    CHECK(ok, "q4_0 hand block");
  }

  { /* Q5_0: d | qh[4] (bit j = 5th bit of element j) | qs[16] */
    uint8_t b[22];
    put16(b, 0x3C00);
    const uint32_t qh = 0x80010005u; /* elements 0, 2, 16, 31 */
    b[2] = (uint8_t)qh; b[3] = (uint8_t)(qh >> 8); b[4] = (uint8_t)(qh >> 16); b[5] = (uint8_t)(qh >> 24);
    for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | ((j ^ 5) << 4));
    q35_dequantize_row_ref(Q35_TYPE_Q5_0, b, y, 32);
    int ok = 1;
    for (int j = 0; j < 32; j++) {
      int lo = j < 16 ? j : ((j - 16) ^ 5);
      int v = lo + (((qh >> j) & 1) ? 16 : 0) - 16;
      ok &= y[j] == (float)v;
    }
    CHECK(ok, "q5_0 hand block");
  }

  { /* Q8_0: d | int8 qs[32] */
    uint8_t b[34];
    put16(b, 0x4000); /* 2.0 */
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j * 7 - 100);
    q35_dequantize_row_ref(Q35_TYPE_Q8_0, b, y, 32);
    int ok = 1;
    for (int j = 0; j < 32; j++) ok &= y[j] == 2.0f * (j * 7 - 100);
    CHECK(ok, "q8_0 hand block");
  }

  /* K-quant 6-bit scales/mins, packed as GGML's get_scale_min_k4 reads them */
  const int sc[8] = {1, 2, 3, 4, 17, 33, 50, 63}, mn[8] = {5, 6, 7, 8, 20, 40, 60, 1};
  uint8_t packed[12];
  for (int j = 0; j < 4; j++) {
    packed[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
    packed[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }

  { /* Q4_K: d | dmin | scales[12] | qs[128]; chunk c of 64: low nibbles then high nibbles */
    uint8_t b[144];
    put16(b, 0x3C00);     /* d = 1 */
    put16(b + 2, 0x3800); /* dmin = 0.5 */
    memcpy(b + 4, packed, 12);
    for (int i = 0; i < 128; i++) b[16 + i] = (uint8_t)(i * 37 + 11);
    q35_dequantize_row_ref(Q35_TYPE_Q4_K, b, y, 256);
    int ok = 1;
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        const uint8_t q = b[16 + 32 * c + l];
        ok &= near(y[64 * c + l], 1.0 * sc[2 * c] * (q & 0xF) - 0.5 * mn[2 * c], 1e-6);
        ok &= near(y[64 * c + 32 + l], 1.0 * sc[2 * c + 1] * (q >> 4) - 0.5 * mn[2 * c + 1], 1e-6);
      }
    CHECK(ok, "q4_K hand block");
  }

  { /* Q5_K: d | dmin | scales[12] | qh[32] | qs[128]; 5th bit of 64c+l: qh[l] bit 2c, 64c+32+l: bit 2c+1 */
    uint8_t b[176];
    put16(b, 0x4000);     /* d = 2 */
    put16(b + 2, 0x3400); /* dmin = 0.25 */
    memcpy(b + 4, packed, 12);
    for (int l = 0; l < 32; l++) b[16 + l] = (uint8_t)(l * 29 + 3);
    for (int i = 0; i < 128; i++) b[48 + i] = (uint8_t)(i * 53 + 7);
    q35_dequantize_row_ref(Q35_TYPE_Q5_K, b, y, 256);
    int ok = 1;
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        const uint8_t q = b[48 + 32 * c + l], h = b[16 + l];
        const int v0 = (q & 0xF) | (((h >> (2 * c)) & 1) << 4), v1 = (q >> 4) | (((h >> (2 * c + 1)) & 1) << 4);
        ok &= near(y[64 * c + l], 2.0 * sc[2 * c] * v0 - 0.25 * mn[2 * c], 1e-5);
        ok &= near(y[64 * c + 32 + l], 2.0 * sc[2 * c + 1] * v1 - 0.25 * mn[2 * c + 1], 1e-5);
      }
    CHECK(ok, "q5_K hand block");
  }

  { /* Q6_K: ql[128] | qh[64] | int8 scales[16] | d; element e in half h=e/128, r=e%128:
       low 4 bits: ql[64h + (r%64)] (nibble r/64), high 2 bits: qh[32h + r%32] >> 2*(r/32);
       value (q - 32) * scales[e/16] * d */
    uint8_t b[210];
    for (int i = 0; i < 128; i++) b[i] = (uint8_t)(i * 41 + 5);
    for (int i = 0; i < 64; i++) b[128 + i] = (uint8_t)(i * 97 + 13);
    for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(int8_t)(i * 17 - 128);
    put16(b + 208, 0x3400); /* 0.25 */
    q35_dequantize_row_ref(Q35_TYPE_Q6_K, b, y, 256);
    int ok = 1;
    for (int e = 0; e < 256; e++) {
      const int h = e / 128, r = e % 128;
      const int lo = (b[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
      const int hi = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
      const int s = (int8_t)b[192 + e / 16];
      ok &= near(y[e], 0.25 * s * ((lo | (hi << 4)) - 32), 1e-5);
    }
    CHECK(ok, "q6_K hand block");
  }

  { /* IQ4_XS: d | scales_h (u16) | scales_l[4] | qs[128]; sub-block ib: scale = (low 4 bits
       from scales_l[ib/2] nibble ib%2) | (2 bits of scales_h at 2ib) << 4, minus 32 */
    static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    uint8_t b[136];
    put16(b, 0x3000); /* 0.125 */
    const int ls[8] = {0, 63, 32, 31, 33, 17, 48, 5};
    uint16_t sh = 0;
    for (int ib = 0; ib < 8; ib++) sh |= (uint16_t)((ls[ib] >> 4) << (2 * ib));
    put16(b + 2, sh);
    for (int i = 0; i < 4; i++) b[4 + i] = (uint8_t)((ls[2 * i] & 0xF) | ((ls[2 * i + 1] & 0xF) << 4));
    for (int i = 0; i < 128; i++) b[8 + i] = (uint8_t)(i * 59 + 1);
    q35_dequantize_row_ref(Q35_TYPE_IQ4_XS, b, y, 256);
    int ok = 1;
    for (int ib = 0; ib < 8; ib++)
      for (int j = 0; j < 16; j++) {
        const uint8_t q = b[8 + 16 * ib + j];
        ok &= near(y[32 * ib + j], 0.125 * (ls[ib] - 32) * kv[q & 0xF], 1e-6);
        ok &= near(y[32 * ib + 16 + j], 0.125 * (ls[ib] - 32) * kv[q >> 4], 1e-6);
      }
    CHECK(ok, "iq4_xs hand block");
  }

  { /* Q8_K: float d | int8 qs[256] | int16 bsums[16] */
    uint8_t b[292];
    const float d = 0.75f;
    memcpy(b, &d, 4);
    for (int i = 0; i < 256; i++) b[4 + i] = (uint8_t)(int8_t)(i - 128);
    memset(b + 260, 0, 32);
    q35_dequantize_row_ref(Q35_TYPE_Q8_K, b, y, 256);
    int ok = 1;
    for (int i = 0; i < 256; i++) ok &= y[i] == 0.75f * (i - 128);
    CHECK(ok, "q8_K hand block");
  }

  { /* vec_dot on hand blocks against the hand-dequantized float64 dot: Q4_0 x Q8_0 */
    uint8_t w[18], x[34];
    put16(w, 0x3800);
    for (int j = 0; j < 16; j++) w[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    put16(x, 0x3C00);
    for (int j = 0; j < 32; j++) x[2 + j] = (uint8_t)(int8_t)(j - 16);
    double want = 0;
    for (int j = 0; j < 16; j++) want += (j - 8) * 0.5 * (j - 16) + (7 - j) * 0.5 * (j);
    uint8_t xx[Q8Z_GROUP];
    memset(xx, 0, sizeof xx);
    if (q35_vec_dot_type(Q35_TYPE_Q4_0) == Q35_TYPE_Q8_0Z) /* Q4_0 takes its Q8_0Z or Q8_0X form */
      q8z_put(xx, 0, (const blk_q8_0 *)(const void *)x);
    else
      q8x_put(xx, 1, 0, (const blk_q8_0 *)(const void *)x);
    CHECK(q35_vec_dot_ref(Q35_TYPE_Q4_0, 32, w, xx) == (float)want, "q4_0 hand vec_dot");
    CHECK(q35_vec_dot(Q35_TYPE_Q4_0, 32, w, xx) == (float)want, "q4_0 hand vec_dot (dispatched)");
  }
}

/* ======================= 2. activation quantizers ======================= */

static void test_act_hand(void) {
  /* Q8_0: amax 127 -> id = 1 exactly, so x.5 values are exact ties: round half to even */
  float x[256];
  memset(x, 0, sizeof x);
  const float ties[8] = {2.5f, 3.5f, -0.5f, 0.5f, 1.5f, -2.5f, 126.5f, -126.5f};
  const int want[8] = {2, 4, 0, 0, 2, -2, 126, -126};
  x[0] = 127.0f;
  for (int i = 0; i < 8; i++) x[1 + i] = ties[i];
  blk_q8_0 q0;
  q35_quantize_row_ref(Q35_TYPE_Q8_0, x, &q0, 32);
  int ok = q0.qs[0] == 127 && q35_fp16_to_fp32(q0.d) == q35_fp16_to_fp32(q35_fp32_to_fp16(1.0f));
  for (int i = 0; i < 8; i++) ok &= q0.qs[1 + i] == want[i];
  CHECK(ok, "q8_0 round-half-even on ties");

  /* Q8_K: signed max -127 -> iscale = 1; ties round to even; d = 1/iscale */
  x[0] = -127.0f;
  blk_q8_k qk;
  q35_quantize_row_ref(Q35_TYPE_Q8_K, x, &qk, 256);
  ok = qk.qs[0] == -127 && qk.d == 1.0f;
  for (int i = 0; i < 8; i++) ok &= qk.qs[1 + i] == want[i];
  int bs = 0;
  for (int i = 0; i < 16; i++) bs += qk.qs[i];
  ok &= qk.bsums[0] == bs;
  CHECK(ok, "q8_K round-half-even on ties / bsums");
  /* positive max: iscale = -1, values negate, d = -1 */
  x[0] = 127.0f;
  q35_quantize_row_ref(Q35_TYPE_Q8_K, x, &qk, 256);
  ok = qk.qs[0] == -127 && qk.d == -1.0f;
  for (int i = 0; i < 8; i++) ok &= qk.qs[1 + i] == -want[i];
  CHECK(ok, "q8_K positive max sign convention");
}

/* Blocks of assorted nasty content, nb blocks of `blk` floats. */
static void fill_nasty(float *x, int nb, int blk) {
  for (int b = 0; b < nb; b++) {
    float *p = x + (size_t)b * blk;
    const int kind = b % 10;
    const float scale = kind == 3 ? 3e37f : kind == 4 ? 1e-39f : kind == 5 ? 1e-30f : 1.0f;
    for (int i = 0; i < blk; i++) {
      switch (kind) {
      case 0: p[i] = 0.0f; break;
      case 1: p[i] = (float)((int)(rng_u64() % 255) - 127) + 0.5f; p[0] = 127.0f; break;
      case 2: p[i] = 0.25f; break;
      case 6: p[i] = i == blk / 2 ? -1.0f : 0.0f; break;
      case 7: p[i] = (i % 2 ? 1.0f : -1.0f) * (float)(rng_u64() % 3); break; /* sign ties of max */
      case 8: p[i] = (float)(int)(rng_u64() % 255) - 127.0f; break;
      default: p[i] = rng_gauss() * scale; break;
      }
    }
    if (kind == 1) p[0] = 127.0f;
    if (kind == 9) p[blk - 1] = -1e-45f; /* denormal */
  }
}

static void test_act_simd(int level, const q35_kernels *k, const q35_kernels *ref) {
  const int n = 4096 + 256;
  float *x = malloc(sizeof(float) * n);
  uint8_t *a = malloc(q35_row_size(Q35_TYPE_Q8_0Y, n) + 64), *b = malloc(q35_row_size(Q35_TYPE_Q8_0Y, n) + 64);
  const int types[5] = {Q35_TYPE_Q8_0, Q35_TYPE_Q8_K, Q35_TYPE_Q8_0X, Q35_TYPE_Q8_0Y, Q35_TYPE_Q8_0Z};
  for (int rep = 0; rep < 6; rep++) {
    if (rep < 3) {
      const int blk = rep == 1 ? 256 : 32;
      fill_nasty(x, n / blk, blk);
    }
    else for (int i = 0; i < n; i++) x[i] = rng_gauss() * (rep == 3 ? 1.0f : rep == 4 ? 1e-3f : 50.0f);
    for (int t = 0; t < 5; t++) {
      const size_t rs = q35_row_size(types[t], n);
      memset(a, 0xAA, rs);
      memset(b, 0x55, rs);
      ref->quantize[types[t]](x, a, n);
      k->quantize[types[t]](x, b + 1, n); /* odd destination address on purpose */
      CHECK(!memcmp(a, b + 1, rs), "level %d %s quantize differs from reference (rep %d)", level,
            q35_type_name(types[t]), rep);
    }
  }
  free(x);
  free(a);
  free(b);
}

/* Q8_0X (the Q4_0 activation layout, act_layout.h) built here from its description and the
 * Q8_0 bytes: groups of 4 blocks (last one k = nb % 4), per group yl | yh | off | d sub-arrays of
 * 16k bytes each. Every level's quantizer must produce exactly these bytes, and dequantize
 * Q8_0X must give Q8_0's floats. */
static void test_q8x_layout(int level, const q35_kernels *k) {
  static const int nbs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 65};
  for (size_t c = 0; c < sizeof nbs / sizeof nbs[0]; c++) {
    const int nb = nbs[c], n = 32 * nb;
    float *x = malloc(sizeof(float) * n), *d0 = malloc(sizeof(float) * n), *d1 = malloc(sizeof(float) * n);
    uint8_t *q = malloc(34 * (size_t)nb), *want = malloc(64 * (size_t)nb), *got = malloc(64 * (size_t)nb + 1);
    for (int i = 0; i < n; i++) x[i] = rng_gauss() * (i % 97 == 0 ? 9.0f : 1.0f);
    q35_quantize_row_ref(Q35_TYPE_Q8_0, x, q, n);
    for (int b = 0; b < nb; b++) {
      const int g = b / 4, p = b % 4, kk = nb - 4 * g < 4 ? nb - 4 * g : 4;
      uint8_t *o = want + 256 * g;
      const uint8_t *blk = q + 34 * b;
      uint16_t h;
      memcpy(&h, blk, 2);
      for (int j = 0; j < 16; j++) {
        o[16 * p + j] = blk[2 + j];
        o[16 * kk + 16 * p + j] = blk[2 + 16 + j];
      }
      for (int l = 0; l < 4; l++) {
        int32_t s = 0;
        for (int i = 0; i < 4; i++) s += (int8_t)blk[2 + 4 * l + i] + (int8_t)blk[2 + 16 + 4 * l + i];
        s *= -8;
        memcpy(o + 32 * kk + 16 * p + 4 * l, &s, 4);
        const float d = q35_fp16_to_fp32(h);
        memcpy(o + 48 * kk + 16 * p + 4 * l, &d, 4);
      }
    }
    memset(got, 0xCD, 64 * (size_t)nb + 1);
    k->quantize[Q35_TYPE_Q8_0X](x, got + 1, n);
    CHECK(!memcmp(want, got + 1, 64 * (size_t)nb), "level %d q8_0x layout (nb=%d)", level, nb);
    q35_dequantize_row_ref(Q35_TYPE_Q8_0, q, d0, n);
    k->dequantize[Q35_TYPE_Q8_0X](got + 1, d1, n);
    CHECK(!memcmp(d0, d1, sizeof(float) * n), "level %d q8_0x dequantize != q8_0's (nb=%d)", level, nb);
    /* Q8_0Y: groups of 2 blocks (last k = nb % 2), y | off | d sub-arrays of 32k bytes */
    uint8_t *wy = malloc(96 * (size_t)nb), *gy = malloc(96 * (size_t)nb + 1);
    for (int b = 0; b < nb; b++) {
      const int g = b / 2, p = b % 2, kk = nb - 2 * g < 2 ? nb - 2 * g : 2;
      uint8_t *o = wy + 192 * g;
      const uint8_t *blk = q + 34 * b;
      uint16_t h;
      memcpy(&h, blk, 2);
      memcpy(o + 32 * p, blk + 2, 32);
      for (int l = 0; l < 8; l++) {
        int32_t s = 0;
        for (int i = 0; i < 4; i++) s += (int8_t)blk[2 + 4 * l + i];
        s *= -128;
        memcpy(o + 32 * kk + 32 * p + 4 * l, &s, 4);
        const float d = q35_fp16_to_fp32(h);
        memcpy(o + 64 * kk + 32 * p + 4 * l, &d, 4);
      }
    }
    memset(gy, 0xCD, 96 * (size_t)nb + 1);
    k->quantize[Q35_TYPE_Q8_0Y](x, gy + 1, n);
    CHECK(!memcmp(wy, gy + 1, 96 * (size_t)nb), "level %d q8_0y layout (nb=%d)", level, nb);
    k->dequantize[Q35_TYPE_Q8_0Y](gy + 1, d1, n);
    CHECK(!memcmp(d0, d1, sizeof(float) * n), "level %d q8_0y dequantize != q8_0's (nb=%d)", level, nb);
    free(wy); free(gy);
    free(x); free(d0); free(d1); free(q); free(want); free(got);
  }
}

/* Q8_0 blocks full of -128 (possible in a GGUF; our activation quantizer makes them only
 * for subnormal blocks): the reference is exact; VNNI (avx512) must be too. The AVX2 path
 * saturates -128*-128 pairs as ggml's AVX2 kernel does, so it is not held to this. */
static void test_q8_extremes(int level, const q35_kernels *k, const q35_kernels *ref) {
  blk_q8_0 a[2], b[2];
  for (int i = 0; i < 2; i++) {
    a[i].d = b[i].d = 0x3C00;
    for (int j = 0; j < 32; j++) {
      a[i].qs[j] = (int8_t)(i == 0 ? -128 : (j % 2 ? 127 : -128));
      b[i].qs[j] = (int8_t)(i == 0 ? -128 : (j % 3 ? -128 : 127));
    }
  }
  /* Q8_0 weights take the activation in its Q8_0Y layout */
  uint8_t y1[Q8Y_BLOCK], y2[2 * Q8Y_BLOCK];
  q8y_put(y1, 1, 0, &b[0]);
  q8y_put(y2, 2, 0, &b[0]);
  q8y_put(y2, 2, 1, &b[1]);
  float want = 32.0f * 16384.0f;
  CHECK(ref->vec_dot[Q35_TYPE_Q8_0](32, a, y1) == want, "q8_0 ref -128 x -128");
  double w2 = 0;
  for (int j = 0; j < 32; j++) w2 += (double)a[1].qs[j] * b[1].qs[j];
  CHECK(ref->vec_dot[Q35_TYPE_Q8_0](64, a, y2) == (float)(want + w2), "q8_0 ref extremes");
  if (level == 2)
    CHECK(k->vec_dot[Q35_TYPE_Q8_0](64, a, y2) == (float)(want + w2), "avx512 q8_0 extremes: %g vs %g",
          k->vec_dot[Q35_TYPE_Q8_0](64, a, y2), want + w2);
}

/* ======================= 3. round trips and dot products ======================= */

typedef struct {
  int type;
  double max_err; /* max |x - deq| / max|x| over the (super-)block */
  double rms_err; /* rms(x - deq) / rms(x) over the row */
} type_case;

static const type_case cases[] = {
    {Q35_TYPE_F32, 0, 0},        {Q35_TYPE_F16, 1e-3, 5e-4},    {Q35_TYPE_BF16, 8e-3, 4e-3},
    {Q35_TYPE_Q8_0, 0.006, 0.012}, {Q35_TYPE_Q4_0, 0.13, 0.17},  {Q35_TYPE_Q5_0, 0.065, 0.085},
    {Q35_TYPE_Q4_K, 0.13, 0.11}, {Q35_TYPE_Q5_K, 0.065, 0.055}, {Q35_TYPE_Q6_K, 0.035, 0.03},
    {Q35_TYPE_IQ4_XS, 0.13, 0.11},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static double worst_simd_rel, worst_f64_rel;

static void test_types(int level, const q35_kernels *k, const q35_kernels *ref) {
  const int lens[4] = {256, 512, 2048, 4096 + 256};
  for (int c = 0; c < NCASES; c++) {
    const int t = cases[c].type, blk = q35_type_block(t) < 32 ? 32 : q35_type_block(t);
    /* each table takes its own activation layout (Q4_0: Q8_0X, or Q8_0Z with AVX-512 VBMI) of the
     * same Q8_0 values */
    const int vt = q35_kernels_vec_dot_type(ref, t), vk = q35_kernels_vec_dot_type(k, t);
    for (int li = 0; li < 4; li++) {
      const int n = lens[li];
      float *w = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
      float *dw = malloc(sizeof(float) * n), *dw2 = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
      const size_t ws = q35_row_size(t, n), xs = q35_row_size(vt, n), xks = q35_row_size(vk, n);
      uint8_t *qw = malloc(ws + 64), *qx = malloc(xs + 64), *qxk = malloc(xks + 64);
      /* weights: gaussian with a per-block scale spread and occasional outliers */
      for (int i = 0; i < n; i += blk) {
        const float s = (float)exp(rng_gauss() * 1.0) * 0.02f;
        for (int j = 0; j < blk; j++) w[i + j] = rng_gauss() * s * (rng_u64() % 64 == 0 ? 4.0f : 1.0f);
      }
      for (int i = 0; i < n; i++) x[i] = rng_gauss() * (i % 97 == 0 ? 20.0f : 1.0f);

      ref->quantize[t](w, qw, n);
      ref->dequantize[t](qw, dw, n);
      k->dequantize[t](qw, dw2, n);
      CHECK(!memcmp(dw, dw2, sizeof(float) * n), "level %d %s dequantize != reference (n=%d)", level,
            q35_type_name(t), n);

      /* error bounds */
      double se = 0, sx = 0, worst = 0;
      for (int i = 0; i < n; i += blk) {
        double m = 0, e = 0;
        for (int j = 0; j < blk; j++) {
          m = fmax(m, fabs(w[i + j]));
          e = fmax(e, fabs((double)w[i + j] - dw[i + j]));
          se += ((double)w[i + j] - dw[i + j]) * ((double)w[i + j] - dw[i + j]);
          sx += (double)w[i + j] * w[i + j];
        }
        if (m > 0) worst = fmax(worst, e / m);
      }
      const double rms = sqrt(se / sx);
      CHECK(worst <= cases[c].max_err, "%s round trip: max err %.4g of block max > %.4g (n=%d)",
            q35_type_name(t), worst, cases[c].max_err, n);
      CHECK(rms <= cases[c].rms_err, "%s round trip: rms err %.4g > %.4g (n=%d)", q35_type_name(t), rms,
            cases[c].rms_err, n);
      if (level == 0 && n == 4096 + 256)
        printf("  %-7s round trip: max err/block max %.4f, rms rel %.4f\n", q35_type_name(t), worst, rms);

      /* dot products: activation converted with the reference quantizer */
      ref->quantize[vt](x, qx, n);
      ref->dequantize[vt](qx, dx, n);
      double f64 = 0, mag = 0;
      for (int i = 0; i < n; i++) {
        f64 += (double)dw[i] * dx[i];
        mag += fabs((double)dw[i] * dx[i]);
      }
      ref->quantize[vk](x, qxk, n);
      const float r = ref->vec_dot[t](n, qw, qx), s = k->vec_dot[t](n, qw, qxk);
      const double tol = 1e-5 * mag + 1e-30;
      CHECK(near(r, f64, tol), "%s ref vec_dot %.9g vs f64 %.9g (n=%d)", q35_type_name(t), r, f64, n);
      CHECK(near(s, r, tol), "level %d %s vec_dot %.9g vs ref %.9g (n=%d)", level, q35_type_name(t), s, r, n);
      if (mag > 0) {
        worst_simd_rel = fmax(worst_simd_rel, fabs((double)s - r) / mag);
        worst_f64_rel = fmax(worst_f64_rel, fabs((double)r - f64) / mag);
      }
      /* the result must not depend on the buffers' addresses */
      memmove(qw + 1, qw, ws);
      memmove(qxk + 3, qxk, xks);
      const float s2 = k->vec_dot[t](n, qw + 1, qxk + 3);
      CHECK(memcmp(&s, &s2, 4) == 0, "level %d %s vec_dot depends on alignment", level, q35_type_name(t));

      free(w); free(x); free(dw); free(dw2); free(dx); free(qw); free(qx); free(qxk);
    }
  }
}

/* SIMD dequantize == reference bit for bit on every fp16 / bf16 bit pattern (NaNs, infinities,
 * subnormals included) and on Q8_0 / Q4_0 blocks of arbitrary bytes (any scale, -128 values),
 * at odd addresses and lengths that leave a tail. */
static void test_dequant_exact(int level, const q35_kernels *k, const q35_kernels *ref) {
  const int n = 65536 + 5;
  uint8_t *src = malloc(2 * (size_t)n + 1);
  float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
  for (int i = 0; i < n; i++) put16(src + 1 + 2 * i, (uint16_t)(i * 40503u));
  const int ht[2] = {Q35_TYPE_F16, Q35_TYPE_BF16};
  for (int t = 0; t < 2; t++) {
    memset(a, 0, sizeof(float) * n);
    memset(b, 0xAB, sizeof(float) * n);
    ref->dequantize[ht[t]](src + 1, a, n);
    k->dequantize[ht[t]](src + 1, b, n);
    CHECK(!memcmp(a, b, sizeof(float) * n), "level %d %s dequantize != reference on all bit patterns", level,
          q35_type_name(ht[t]));
  }
  const int qt[2] = {Q35_TYPE_Q8_0, Q35_TYPE_Q4_0};
  for (int t = 0; t < 2; t++) {
    const int m = 32 * 300;
    uint32_t st = 12345u + (uint32_t)t; /* own stream: leaves the shared one to the other tests */
    for (size_t i = 0; i < 2 * (size_t)n + 1; i++) src[i] = (uint8_t)((st = st * 1664525u + 1013904223u) >> 24);
    ref->dequantize[qt[t]](src + 1, a, m);
    k->dequantize[qt[t]](src + 1, b, m);
    CHECK(!memcmp(a, b, sizeof(float) * m), "level %d %s dequantize != reference on random bytes", level,
          q35_type_name(qt[t]));
  }
  free(src);
  free(a);
  free(b);
}

static void test_public_api(void) {
  const q35_simd lvl = q35_simd_active();
  CHECK(lvl == Q35_SIMD_SCALAR || lvl == Q35_SIMD_AVX2 || lvl == Q35_SIMD_AVX512 || lvl == Q35_SIMD_NEON,
        "simd level %s", q35_simd_name(lvl));
  CHECK((q35_vec_dot_type(Q35_TYPE_Q4_0) == Q35_TYPE_Q8_0X ||
         (q35_vec_dot_type(Q35_TYPE_Q4_0) == Q35_TYPE_Q8_0Z && (lvl == Q35_SIMD_AVX512 || lvl == Q35_SIMD_AVX2))) &&
            (q35_vec_dot_type(Q35_TYPE_Q8_0) == Q35_TYPE_Q8_0Y ||
             (q35_vec_dot_type(Q35_TYPE_Q8_0) == Q35_TYPE_Q8_0Z && lvl == Q35_SIMD_AVX2)) &&
            q35_vec_dot_type(Q35_TYPE_Q5_0) == Q35_TYPE_Q8_0 &&
            (q35_vec_dot_type(Q35_TYPE_Q4_K) == Q35_TYPE_Q8_K ||
             (q35_vec_dot_type(Q35_TYPE_Q4_K) == Q35_TYPE_Q8_KP && lvl == Q35_SIMD_AVX2)) && q35_vec_dot_type(Q35_TYPE_IQ4_XS) == Q35_TYPE_Q8_K &&
            (q35_vec_dot_type(Q35_TYPE_Q6_K) == Q35_TYPE_Q8_K ||
             (q35_vec_dot_type(Q35_TYPE_Q6_K) == Q35_TYPE_Q8_KP && lvl == Q35_SIMD_AVX2)) &&
            q35_vec_dot_type(Q35_TYPE_BF16) == Q35_TYPE_BF16 &&
            q35_vec_dot_type(Q35_TYPE_F16) == Q35_TYPE_F16 && q35_vec_dot_type(Q35_TYPE_F32) == Q35_TYPE_F32,
        "vec_dot types");
  /* the public entry points use the chosen level's table */
  const int n = 512;
  float x[512], w[512];
  for (int i = 0; i < n; i++) { x[i] = rng_gauss(); w[i] = rng_gauss(); }
  uint8_t qw[1024], qx[1024], qx2[1024];
  q35_quantize_row(Q35_TYPE_Q4_K, w, qw, n);
  q35_quantize_row(Q35_TYPE_Q8_K, x, qx, n);
  q35_quantize_row_ref(Q35_TYPE_Q8_K, x, qx2, n);
  CHECK(!memcmp(qx, qx2, q35_row_size(Q35_TYPE_Q8_K, n)), "public q8_K quantize != ref");
  const float a = q35_vec_dot(Q35_TYPE_Q4_K, n, qw, qx), b = q35_vec_dot_ref(Q35_TYPE_Q4_K, n, qw, qx);
  CHECK(fabsf(a - b) <= 1e-4f * fabsf(b) + 1e-6f, "public vec_dot %g vs ref %g", a, b);
  CHECK(isnan(q35_vec_dot(34 /* tq1_0 */, 256, qw, qx)), "unsupported type gives NaN");
}

int main(void) {
  test_hand_blocks();
  test_act_hand();
  test_public_api();
  q35_kernels ref;
  q35_kernels_get(Q35_SIMD_SCALAR, &ref);
  for (q35_simd level = Q35_SIMD_SCALAR; level <= Q35_SIMD_NEON; level++) {
    q35_kernels k;
    if (q35_kernels_get(level, &k) != 0) {
      printf("level %s: not available (this CPU or Q35_SIMD), skipped\n", q35_simd_name(level));
      continue;
    }
    const int before = failures;
    test_act_simd(level, &k, &ref);
    test_q8x_layout(level, &k);
    test_q8_extremes(level, &k, &ref);
    test_dequant_exact(level, &k, &ref);
    test_types(level, &k, &ref);
    printf("level %s: %s\n", q35_simd_name(level), failures == before ? "ok" : "FAILED");
  }
  printf("worst |vec_dot simd - ref| / sum|w*x|: %.3g; worst |ref - f64| / sum|w*x|: %.3g\n", worst_simd_rel,
         worst_f64_rel);
  printf("dispatch level: %s\n", q35_simd_desc());
  return check_done("test_quant");
}
