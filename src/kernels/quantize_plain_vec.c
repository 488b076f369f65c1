/*
 * quantize_plain_vec.c - the plain (unweighted) Q4_0, Q5_0, Q4_1, Q5_1, Q3_K weight quantizers in
 * portable C on GCC's generic 4-float vectors (SSE2 on the x86-64 baseline, NEON on aarch64), for
 * the levels without their own twins: the scalar level (a CPU without AVX2) and NEON. The AVX2
 * and AVX-512 levels replace them with quantize_plain_avx2.c's.
 *
 * The reference twins are quant_q4_0 / quant_q5_0 (quantize_weights.c) and quant_q4_1 /
 * quant_q5_1 / quant_q3_k (quantize_lowbit.c): the fits of quantize_fit.h (q35_fit_sym_plain,
 * q35_fit_aff_plain) and the levels at the stored scale. Here four blocks (Q3_K: four sub-blocks
 * of 16) are fitted at once, block b in lane b, as quantize_plain_avx2.c does with eight, and two
 * (Q3_K: four) such groups take turns, so that the latencies between one group's passes overlap
 * the other's work. The blocks are transposed into columns (column i lane b: element i of block
 * b), each lane runs the glue's operations in the glue's order (its sums: element i into partial
 * sum i % 8 in index order, folded as q35_fold8; its branches as masks, a finished lane kept
 * instead of leaving the loop), and the levels are rounded from the same columns (Q4_1 / Q5_1: each
 * block along the vector instead, see pv_pass_aff1 below: no columns to build). Every block is
 * the reference's, byte for byte (tests/test_quantize_plain.c compares them at every level). No
 * float contraction: the reference multiplies and adds separately. The byte packing assumes a
 * little-endian machine.
 */
#pragma GCC optimize("fp-contract=off")
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"
#include "kernels/quantize_fit.h"

typedef float pv_f4 __attribute__((vector_size(16)));
typedef int32_t pv_i4 __attribute__((vector_size(16)));
typedef uint32_t pv_u4 __attribute__((vector_size(16)));

#define PVF static inline __attribute__((always_inline))
#define PV_UNROLL_(n) _Pragma(#n)
#define PV_UNROLL(n) PV_UNROLL_(GCC unroll n)

PVF pv_f4 pv_set1(float v) { return (pv_f4){v, v, v, v}; }

PVF pv_f4 pv_load(const float *p) {
  pv_f4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* m ? a : b, lane-wise (m: a comparison's 0 / -1) */
PVF pv_f4 pv_sel(pv_i4 m, pv_f4 a, pv_f4 b) { return (pv_f4)(((pv_i4)a & m) | ((pv_i4)b & ~m)); }

/* a > b ? a : b and a < b ? a : b lane-wise (SSE's maxps / minps are exactly these) */
PVF pv_f4 pv_max(pv_f4 a, pv_f4 b) {
#if defined(__SSE2__)
  return (pv_f4)_mm_max_ps((__m128)a, (__m128)b);
#else
  return pv_sel(a > b, a, b);
#endif
}

PVF pv_f4 pv_min(pv_f4 a, pv_f4 b) {
#if defined(__SSE2__)
  return (pv_f4)_mm_min_ps((__m128)a, (__m128)b);
#else
  return pv_sel(a < b, a, b);
#endif
}

/* lanes of |v| < inf (false for NaN) */
PVF pv_i4 pv_isfinite(pv_f4 v) { return (pv_f4)((pv_i4)v & 0x7fffffff) < pv_set1(__builtin_inff()); }

PVF int pv_any(pv_i4 m) { return (m[0] | m[1] | m[2] | m[3]) != 0; }

/* q35_round_clampf lane-wise: the magic-number pair, then the clamp with NaN to lo. The pair
 * never gives -0 (x - x is +0), so !(r >= lo) ? lo : r is r > lo ? r : lo (the same value where
 * r == lo), and the result is never NaN, so c > hi ? hi : c is c < hi ? c : hi. */
PVF pv_f4 pv_round(pv_f4 v) {
  const pv_f4 m = pv_set1(12582912.0f);
  return (v + m) - m;
}

PVF pv_f4 pv_round_clamp(pv_f4 v, pv_f4 lo, pv_f4 hi) { return pv_min(pv_max(pv_round(v), lo), hi); }

/* q35_round_clampf(v, lo, hi) as integers, for integer lo and hi: rounding commutes with a clamp
 * at integers (NaN still to lo), so on SSE2 the clamp first and one conversion under the default
 * rounding (to nearest even, as the magic-number pair) */
PVF pv_i4 pv_level(pv_f4 v, pv_f4 lo, pv_f4 hi) {
#if defined(__SSE2__)
  return (pv_i4)_mm_cvtps_epi32((__m128)pv_min(pv_max(v, lo), hi));
#else
  return __builtin_convertvector(pv_round_clamp(v, lo, hi), pv_i4);
#endif
}

/* q35_fold8 lane-wise */
PVF pv_f4 pv_fold8(const pv_f4 *s) {
  const pv_f4 h0 = s[0] + s[4], h1 = s[1] + s[5], h2 = s[2] + s[6], h3 = s[3] + s[7];
  return (h0 + h2) + (h1 + h3);
}

/* 4x4 transpose of r[0..4) into c[0..4) (c[i] lane b = r[b] lane i) */
PVF void pv_transpose4(const pv_f4 *r, pv_f4 *c) {
#define PV_SHUF(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
  const pv_f4 t0 = PV_SHUF(r[0], r[1], 0, 4, 1, 5), t1 = PV_SHUF(r[0], r[1], 2, 6, 3, 7);
  const pv_f4 t2 = PV_SHUF(r[2], r[3], 0, 4, 1, 5), t3 = PV_SHUF(r[2], r[3], 2, 6, 3, 7);
  c[0] = PV_SHUF(t0, t2, 0, 1, 4, 5);
  c[1] = PV_SHUF(t0, t2, 2, 3, 6, 7);
  c[2] = PV_SHUF(t1, t3, 0, 1, 4, 5);
  c[3] = PV_SHUF(t1, t3, 2, 3, 6, 7);
#undef PV_SHUF
}

/* blocks x[0..4) (n = 16 or 32 floats each, n apart) into columns c[0..n) */
PVF void pv_columns(const float *x, int n, pv_f4 *c) {
  PV_UNROLL(8) for (int g = 0; g < n; g += 4) {
    const pv_f4 r[4] = {pv_load(x + g), pv_load(x + n + g), pv_load(x + 2 * n + g), pv_load(x + 3 * n + g)};
    pv_transpose4(r, c + g);
  }
}

/* q35_plain_pass_sym lane-wise: the partial sums k (elements k, k + 8, ... in order); lower: clamp
 * at lo (else only at hi) */
PVF void pv_pass_sym(const pv_f4 *c, int n, pv_f4 t, pv_f4 lo, pv_f4 hi, int lower, pv_f4 *axl, pv_f4 *all) {
  PV_UNROLL(8) for (int k = 0; k < 8; k++) {
    pv_f4 sxl = pv_set1(0.0f), sll = sxl;
    PV_UNROLL(4) for (int i = k; i < n; i += 8) {
      const pv_f4 l = lower ? pv_round_clamp(t * c[i], lo, hi) : pv_min(pv_round(t * c[i]), hi);
      sxl = sxl + c[i] * l;
      sll = sll + l * l;
    }
    axl[k] = sxl, all[k] = sll;
  }
}

/* q35_fit_sym_plain of G groups of four blocks (group h: blocks x + 4 n h .. in columns c[h][0..n)),
 * lane-wise: the scales d[h] (+0 for a zero block). The groups take turns, pass and glue, so that
 * one group's glue (fold, divisions: a chain of latencies) overlaps the next group's pass. */
PVF void pv_fit_sym(const pv_f4 (*c)[32], const float *x, int G, int n, float lo, float hi, int iters, pv_f4 *d) {
  const pv_f4 zero = pv_set1(0.0f), lov = pv_set1(lo), hiv = pv_set1(hi);
  pv_f4 t[4];
  pv_i4 inf_in[4], is0[4], live[4];
  int lower0 = 0;
  for (int h = 0; h < G; h++) {
    pv_f4 mx = zero, mn = zero;
    PV_UNROLL(32) for (int i = 0; i < n; i++) { /* q35_plain_ext_sym, NaN skipped by max / min as 0 would be */
      mx = pv_max(c[h][i], mx);
      mn = pv_min(c[h][i], mn);
    }
    inf_in[h] = ~pv_isfinite(mx) | ~pv_isfinite(mn); /* +-inf counts as 0: done below */
    mx = mx + zero;
    mn = mn + zero;
    const pv_f4 max = pv_sel(-mn >= mx, mn, mx);
    is0[h] = max == zero;
    d[h] = max / lov, t[h] = lov / max;
    live[h] = ~is0[h];
    lower0 |= pv_any(live[h] & ~pv_isfinite(t[h]));
  }
  /* the first pass, at t = lo / max with t finite, rounds no element below lo (|t x| <= |t max|,
   * which rounds to |lo|); a NaN element (mapped to hi instead of lo there) makes the sums NaN
   * either way, so the lane ends as the reference's does */
  for (int it = 0; it <= iters; it++)
    for (int h = 0; h < G; h++) {
      pv_f4 axl[8], all[8];
      if (it == 0 && !lower0) pv_pass_sym(c[h], n, t[h], lov, hiv, 0, axl, all);
      else pv_pass_sym(c[h], n, t[h], lov, hiv, 1, axl, all);
      const pv_f4 sxl = pv_fold8(axl), sll = pv_fold8(all);
      const pv_f4 dn = sxl / sll, tn = sll / sxl;
      const pv_i4 ok = live[h] & (sll > zero) & (dn != zero) & pv_isfinite(dn) & pv_isfinite(tn);
      d[h] = pv_sel(ok, dn, d[h]);
      t[h] = pv_sel(ok, tn, t[h]);
      live[h] = ok;
    }
  for (int h = 0; h < G; h++) {
    d[h] = pv_sel(is0[h], zero, d[h]);
    if (pv_any(inf_in[h])) /* rare: the reference's own fit for these blocks */
      for (int b = 0; b < 4; b++)
        if (inf_in[h][b]) d[h][b] = q35_fit_sym_plain(x + n * (4 * h + b), n, (int)lo, (int)hi, iters);
  }
}

/* Q4_1 / Q5_1: the affine fit and the levels with each block along the vector (element 4 j + k
 * of a block in lane k of its vector j), so that no columns are built: the reference's partial sum
 * i % 8 is lane i % 4 of an accumulator for the even vectors j and of one for the odd ones, and
 * their sum is q35_fold8's first step. Four blocks' such sums are then transposed into one vector
 * per step (lane b: block b), where the fold ends and the glue runs lane-wise as in pv_fit_sym.
 * The extremes skip no non-finite value: a block holding one (its sum is not finite) takes the
 * reference's own fit. */

#define PV_AG 2 /* groups of four blocks per call (four measured no faster) */

/* q35_plain_pass_aff of one block at (t, b) broadcast: the fold's first step of its three sums */
PVF void pv_pass_aff1(const float *x, pv_f4 t, pv_f4 b, pv_f4 nmax, int clamp, pv_f4 *hl, pv_f4 *hll, pv_f4 *hxl) {
  const pv_f4 zero = pv_set1(0.0f);
#if defined(__SSE2__)
  /* the levels as integers (pv_level's clamp, then one conversion), sum l and sum l^2 in integers:
   * exact as the float sums are (small integers), so the same values in any order; pmaddwd of a
   * level 0..31 with itself is its square (the upper halves are 0) */
  __m128i il = _mm_setzero_si128(), ill = il;
  pv_f4 sxl0 = zero, sxl1 = zero;
  PV_UNROLL(4) for (int j = 0; j < 8; j += 2) {
    const pv_f4 v0 = pv_load(x + 4 * j), u0 = t * (v0 - b), v1 = pv_load(x + 4 * j + 4), u1 = t * (v1 - b);
    const __m128i l0 = clamp ? (__m128i)pv_level(u0, zero, nmax) : _mm_cvtps_epi32((__m128)u0);
    const __m128i l1 = clamp ? (__m128i)pv_level(u1, zero, nmax) : _mm_cvtps_epi32((__m128)u1);
    const __m128i p = _mm_packs_epi32(l0, l1); /* eight levels 0..31 as int16 */
    il = _mm_add_epi16(il, p);
    ill = _mm_add_epi32(ill, _mm_madd_epi16(p, p));
    sxl0 = sxl0 + v0 * (pv_f4)_mm_cvtepi32_ps(l0);
    sxl1 = sxl1 + v1 * (pv_f4)_mm_cvtepi32_ps(l1);
  }
  il = _mm_madd_epi16(il, _mm_set1_epi16(1));
  *hl = (pv_f4)_mm_cvtepi32_ps(il), *hll = (pv_f4)_mm_cvtepi32_ps(ill), *hxl = sxl0 + sxl1;
#else
  pv_f4 sl[2] = {zero, zero}, sll[2] = {zero, zero}, sxl[2] = {zero, zero};
  PV_UNROLL(8) for (int j = 0; j < 8; j++) {
    const pv_f4 v = pv_load(x + 4 * j), u = t * (v - b);
    const pv_f4 l = clamp ? pv_round_clamp(u, zero, nmax) : pv_round(u);
    sl[j & 1] = sl[j & 1] + l;
    sll[j & 1] = sll[j & 1] + l * l;
    sxl[j & 1] = sxl[j & 1] + v * l;
  }
  *hl = sl[0] + sl[1], *hll = sll[0] + sll[1], *hxl = sxl[0] + sxl[1];
#endif
}

/* q35_fit_aff_plain of blocks x[0..4 PV_AG) (32 floats each), lane-wise per group of four: scales
 * a[g], offsets b[g] (lane b: block 4 g + b); the groups take turns, pass and glue */
PVF void pv_fit_aff_g(const float *x, float nmax, int iters, pv_f4 *a, pv_f4 *b) {
  const pv_f4 zero = pv_set1(0.0f), inf = pv_set1(__builtin_inff()), nmv = pv_set1(nmax);
  const pv_f4 sw = pv_set1(32.0f), eps_sw = pv_set1(1e-5f) * sw;
  pv_f4 t[PV_AG], swx[PV_AG];
  pv_i4 live[PV_AG];
  int clamp0 = 0;
  for (int h = 0; h < PV_AG; h++) {
    pv_f4 mnq[4], mxq[4], sq[4], M[4], X[4], S[4];
    for (int k = 0; k < 4; k++) { /* q35_plain_ext_aff per block; a non-finite value: below */
      const float *xb = x + 32 * (4 * h + k);
      pv_f4 mn = inf, mx = -inf, sx[2] = {zero, zero};
      PV_UNROLL(8) for (int j = 0; j < 8; j++) {
        const pv_f4 v = pv_load(xb + 4 * j);
        mn = pv_min(mn, v); /* NaN: propagates or not, the lane takes the reference's fit anyway */
        mx = pv_max(mx, v);
        sx[j & 1] = sx[j & 1] + v;
      }
      mnq[k] = mn, mxq[k] = mx, sq[k] = sx[0] + sx[1];
    }
    pv_transpose4(mnq, M);
    pv_transpose4(mxq, X);
    pv_transpose4(sq, S);
    pv_f4 mn = pv_min(pv_min(M[0], M[1]), pv_min(M[2], M[3])) + zero;
    pv_f4 mx = pv_max(pv_max(X[0], X[1]), pv_max(X[2], X[3])) + zero;
    swx[h] = (S[0] + S[2]) + (S[1] + S[3]);
    const pv_i4 none = mn > mx;
    mn = pv_sel(none, zero, mn);
    mx = pv_sel(none, zero, mx);
    const pv_f4 range = mx - mn;
    live[h] = (mx > mn) & pv_isfinite(range);
    a[h] = pv_sel(live[h], range / nmv, zero), b[h] = mn, t[h] = nmv / range;
    live[h] &= pv_isfinite(swx[h]);
    clamp0 |= pv_any(live[h] & ~pv_isfinite(t[h]));
  }
  /* the first pass, at the start (t = nmax / range > 0 finite, b = min, every value finite),
   * rounds every element into [0, nmax] (0 <= t (x - min) <= t range, which rounds to nmax): no
   * clamps needed where every live lane's t is finite */
  for (int it = 0; it <= iters; it++)
    for (int h = 0; h < PV_AG; h++) {
      pv_f4 hl[4], hll[4], hxl[4], L[4], LL[4], XL[4];
      for (int k = 0; k < 4; k++) {
        const pv_f4 tk = pv_set1(t[h][k]), bk = pv_set1(b[h][k]);
        const float *xb = x + 32 * (4 * h + k);
        if (it == 0 && !clamp0) pv_pass_aff1(xb, tk, bk, nmv, 0, &hl[k], &hll[k], &hxl[k]);
        else pv_pass_aff1(xb, tk, bk, nmv, 1, &hl[k], &hll[k], &hxl[k]);
      }
      pv_transpose4(hl, L);
      pv_transpose4(hll, LL);
      pv_transpose4(hxl, XL);
      const pv_f4 sl = (L[0] + L[2]) + (L[1] + L[3]), sll = (LL[0] + LL[2]) + (LL[1] + LL[3]);
      const pv_f4 sxl = (XL[0] + XL[2]) + (XL[1] + XL[3]);
      const pv_f4 det = sw * sll - sl * sl;
      const pv_f4 na = sw * sxl - sl * swx[h], an = na / det, bn = (sll * swx[h] - sl * sxl) / det, tn = det / na;
      pv_i4 ok = live[h] & (det > eps_sw * sll) & (an > zero);
      ok &= pv_isfinite(an) & pv_isfinite(bn) & pv_isfinite(tn);
      a[h] = pv_sel(ok, an, a[h]);
      b[h] = pv_sel(ok, bn, b[h]);
      t[h] = pv_sel(ok, tn, t[h]);
      live[h] = ok;
    }
  for (int h = 0; h < PV_AG; h++) {
    const pv_i4 odd = ~pv_isfinite(swx[h]); /* a non-finite value (or an overflowing sum) */
    if (pv_any(odd)) /* rare: the reference's own fit (its extremes skip +-inf) for these blocks */
      for (int k = 0; k < 4; k++)
        if (odd[k]) q35_fit_aff_plain(x + 32 * (4 * h + k), 32, (int)nmax, iters, &a[h][k], &b[h][k]);
  }
}

/* the scales as stored: fp16 bits h[b], and the inverse of the stored value (the reference's
 * d != 0 ? 1 / d : 0, or d > 0 for the affine types) */
PVF pv_f4 pv_store_scales(pv_f4 v, uint16_t *h, int pos, pv_f4 *stored) {
  const pv_u4 x = (pv_u4)v, ax = x & 0x7fffffffu;
  const pv_i4 normal = ((pv_i4)ax >= 0x38800000) & ((pv_i4)ax < 0x477ff000);
  if (normal[0] & normal[1] & normal[2] & normal[3]) {
    /* q35_fp32_to_fp16's normal case: round to nearest even on bit 13; the stored value is the
     * rounded float with those 13 bits cleared */
    const pv_u4 r = ax + 0xfffu + ((ax >> 13) & 1);
    const pv_u4 hv = ((x >> 16) & 0x8000u) | ((r - 0x38000000u) >> 13);
    const pv_f4 fv = (pv_f4)((x & 0x80000000u) | (r & ~0x1fffu));
    for (int b = 0; b < 4; b++) h[b] = (uint16_t)hv[b];
    if (stored) *stored = fv;
    const pv_f4 zero = pv_set1(0.0f), id = pv_set1(1.0f) / fv;
    return pos ? pv_sel(fv > zero, id, zero) : id;
  }
  float f[4], id[4];
  for (int b = 0; b < 4; b++) {
    h[b] = q35_fp32_to_fp16(v[b]);
    f[b] = q35_fp16_to_fp32(h[b]);
    id[b] = (pos ? f[b] > 0 : f[b] != 0) ? 1.0f / f[b] : 0;
  }
  if (stored) *stored = pv_load(f);
  return pv_load(id);
}

/* 16 bytes per lane: q[j] lane b holds byte j of block b (0..255) -> out[b][0..16) */
PVF void pv_store_bytes16(const pv_i4 *q, uint8_t *out, size_t stride) {
  pv_f4 w[4], t[4];
  PV_UNROLL(4) for (int g = 0; g < 4; g++) { /* bytes 4 g .. 4 g + 3, little-endian */
    const pv_u4 u0 = (pv_u4)q[4 * g], u1 = (pv_u4)q[4 * g + 1], u2 = (pv_u4)q[4 * g + 2], u3 = (pv_u4)q[4 * g + 3];
    w[g] = (pv_f4)(u0 | (u1 << 8) | (u2 << 16) | (u3 << 24));
  }
  pv_transpose4(w, t);
  for (int b = 0; b < 4; b++) memcpy(out + stride * (size_t)b, &t[b], 16);
}

/* Q4_0 / Q5_0 (hbit: the fifth bit to qh) on eight blocks x[0..256): two groups of four */
PVF void pv_quant8_sym(const float *x, uint8_t *y, size_t bs, int lo, int hi, int hbit) {
  pv_f4 c[2][32], s1[2];
  pv_columns(x, 32, c[0]);
  pv_columns(x + 128, 32, c[1]);
  pv_fit_sym((const pv_f4(*)[32])c, x, 2, 32, (float)lo, (float)hi, Q35_PLAIN_ITERS_SYM, s1);
  for (int h = 0; h < 2; h++, x += 128, y += 4 * bs) {
    uint16_t dh[4];
    pv_i4 L[32];
    const pv_f4 id = pv_store_scales(s1[h], dh, 0, NULL);
    const pv_i4 none = id == pv_set1(0.0f); /* q35_plain_levels_sym: all -lo */
    const pv_f4 lov = pv_set1((float)lo);
    PV_UNROLL(32) for (int j = 0; j < 32; j++) L[j] = pv_level(c[h][j] * id, lov, pv_set1((float)hi)) - lo;
    if (pv_any(none))
      PV_UNROLL(32) for (int j = 0; j < 32; j++) L[j] = (L[j] & ~none) | (none & -lo);
    pv_i4 q[16];
    PV_UNROLL(16) for (int j = 0; j < 16; j++) q[j] = (L[j] & 0xF) | ((L[j + 16] & 0xF) << 4);
    /* the block layouts: d (fp16), [qh (4 bytes)], qs (16 bytes) */
    pv_store_bytes16(q, y + 2 + (hbit ? 4 : 0), bs);
    pv_u4 qh = {0, 0, 0, 0};
    if (hbit)
      PV_UNROLL(32) for (int j = 0; j < 32; j++) qh |= (pv_u4)((L[j] >> 4) & 1) << j;
    for (int b = 0; b < 4; b++) {
      uint8_t *yb = y + bs * (size_t)b;
      memcpy(yb, &dh[b], 2);
      if (hbit) memcpy(yb + 2, &qh[b], 4);
    }
  }
}

/* q35_plain_levels_aff of one block at the stored inverse scale id > 0 and min m (broadcast),
 * packed: the nibbles to qs[0..16), with hbit the fifth bits to *qh */
PVF void pv_levels_aff1(const float *x, pv_f4 id, pv_f4 m, float nmax, int hbit, uint8_t *qs, uint32_t *qh) {
  pv_i4 L[8];
#if defined(__SSE2__)
  /* the clamp at nmax, then the conversion; the packs below saturate what is below 0 (NaN and
   * the out-of-range values convert to INT32_MIN: min_ps keeps a NaN second operand) to 0 */
  PV_UNROLL(8) for (int j = 0; j < 8; j++)
    L[j] = (pv_i4)_mm_cvtps_epi32(_mm_min_ps(_mm_set1_ps(nmax), (__m128)((pv_load(x + 4 * j) - m) * id)));
#else
  PV_UNROLL(8) for (int j = 0; j < 8; j++) L[j] = pv_level((pv_load(x + 4 * j) - m) * id, pv_set1(0.0f), pv_set1(nmax));
#endif
#if defined(__SSE2__)
  const __m128i lo = _mm_packus_epi16(_mm_packs_epi32((__m128i)L[0], (__m128i)L[1]), _mm_packs_epi32((__m128i)L[2], (__m128i)L[3]));
  const __m128i hi = _mm_packus_epi16(_mm_packs_epi32((__m128i)L[4], (__m128i)L[5]), _mm_packs_epi32((__m128i)L[6], (__m128i)L[7]));
  if (hbit) { /* levels 0..31: bit 4 of each byte moved to its top bit */
    const __m128i m4 = _mm_set1_epi8(0xF);
    _mm_storeu_si128((__m128i *)qs, _mm_or_si128(_mm_and_si128(lo, m4), _mm_slli_epi16(_mm_and_si128(hi, m4), 4)));
    *qh = (uint32_t)_mm_movemask_epi8(_mm_slli_epi16(lo, 3)) | (uint32_t)_mm_movemask_epi8(_mm_slli_epi16(hi, 3)) << 16;
  } else { /* levels 0..15: the shift stays within each byte */
    _mm_storeu_si128((__m128i *)qs, _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
  }
#else
  uint8_t b[32];
  for (int j = 0; j < 32; j++) b[j] = (uint8_t)L[j / 4][j % 4];
  for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((b[j] & 0xF) | (b[j + 16] & 0xF) << 4);
  if (hbit) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)((b[j] >> 4) & 1) << j;
    *qh = h;
  }
#endif
}

/* Q4_1 / Q5_1 (hbit: the fifth bit to qh) on 4 PV_AG blocks at x */
PVF void pv_quant_aff_g(const float *x, uint8_t *y, size_t bs, int nmax, int hbit) {
  pv_f4 a[PV_AG], b[PV_AG];
  pv_fit_aff_g(x, (float)nmax, Q35_PLAIN_ITERS_AFF, a, b);
  for (int h = 0; h < PV_AG; h++) {
    uint16_t dh[4], mh[4];
    pv_f4 m;
    const pv_f4 id = pv_store_scales(a[h], dh, 1, NULL);
    (void)pv_store_scales(b[h], mh, 0, &m);
    for (int k = 0; k < 4; k++) {
      const int q = 4 * h + k;
      /* the block layout: d (fp16), m (fp16), [qh (4 bytes)], qs (16 bytes) */
      uint8_t *yb = y + bs * (size_t)q, *qs = yb + 4 + (hbit ? 4 : 0);
      uint32_t qh = 0;
      memcpy(yb, &dh[k], 2);
      memcpy(yb + 2, &mh[k], 2);
      if (id[k] > 0) pv_levels_aff1(x + 32 * q, pv_set1(id[k]), pv_set1(m[k]), (float)nmax, hbit, qs, &qh);
      else memset(qs, 0, 16); /* q35_plain_levels_aff: all 0 */
      if (hbit) memcpy(yb + 4, &qh, 4);
    }
  }
}

/* a row of nb blocks of 32, eight (Q4_1 / Q5_1: 4 PV_AG) at a time; the last ones padded with zero
 * blocks */
PVF void pv_quant_row(const float *x, void *dst, int64_t n, size_t bs, int lo, int hi, int aff, int hbit) {
  uint8_t *y = dst;
  const int64_t nb = n / 32, step = aff ? 4 * PV_AG : 8;
  int64_t i = 0;
  for (; i + step <= nb; i += step)
    if (aff) pv_quant_aff_g(x + 32 * i, y + bs * (size_t)i, bs, hi, hbit);
    else pv_quant8_sym(x + 32 * i, y + bs * (size_t)i, bs, lo, hi, hbit);
  if (i < nb) {
    float xp[32 * 4 * PV_AG] = {0};
    uint8_t yp[4 * PV_AG * 24];
    memcpy(xp, x + 32 * i, sizeof(float) * 32 * (size_t)(nb - i));
    if (aff) pv_quant_aff_g(xp, yp, bs, hi, hbit);
    else pv_quant8_sym(xp, yp, bs, lo, hi, hbit);
    memcpy(y + bs * (size_t)i, yp, bs * (size_t)(nb - i));
  }
}

static void quant_q4_0_vec(const float *x, void *dst, int64_t n) {
  pv_quant_row(x, dst, n, sizeof(blk_q4_0), -8, 7, 0, 0);
}
static void quant_q5_0_vec(const float *x, void *dst, int64_t n) {
  pv_quant_row(x, dst, n, sizeof(blk_q5_0), -16, 15, 0, 1);
}
static void quant_q4_1_vec(const float *x, void *dst, int64_t n) {
  pv_quant_row(x, dst, n, sizeof(blk_q4_1), 0, 15, 1, 0);
}
static void quant_q5_1_vec(const float *x, void *dst, int64_t n) {
  pv_quant_row(x, dst, n, sizeof(blk_q5_1), 0, 31, 1, 1);
}

/* Q3_K (quant_q3_k_w without an importance vector): the sub-block fits (all sixteen, four groups
 * taking turns), the +-1 scale search and the levels four sub-blocks at a time (sub-block 4 g + b in
 * lane b), the packing on 64-bit words. */
static void quant_q3_k_vec(const float *x, void *dst, int64_t n) {
  blk_q3_k *y = dst;
  const pv_f4 zero = pv_set1(0.0f), lo = pv_set1(-4.0f), hi = pv_set1(3.0f);
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    pv_f4 c[4][32], sg[4];
    float s[16];
    for (int g = 0; g < 4; g++) pv_columns(x + 64 * g, 16, c[g]);
    pv_fit_sym((const pv_f4(*)[32])c, x, 4, 16, -4.0f, 3.0f, Q35_PLAIN_ITERS_SYM, sg);
    memcpy(s, sg, sizeof s);
    const float smax = q35_signed_absmax(s, 16);
    y[i].d = q35_fp32_to_fp16(smax / -32.f);
    const float d = q35_fp16_to_fp32(y[i].d);
    memset(y[i].scales, 0, sizeof y[i].scales);
    uint8_t L[QK_K];
    for (int g = 0; g < 4; g++) {
      int sc[4], sc0[4];
      for (int b = 0; b < 4; b++)
        sc[b] = sc0[b] = d != 0 ? q35_clampi(q35_nearest_int(s[4 * g + b] / d), -32, 31) : 0;
      if (d != 0) {
        pv_f4 best = pv_set1(__builtin_inff());
        for (int o = -1; o <= 1; o++) {
          float dsf[4];
          int ok[4];
          for (int b = 0; b < 4; b++) {
            const int cand = sc0[b] + o;
            ok[b] = cand >= -32 && cand <= 31;
            dsf[b] = d * (float)cand;
          }
          const pv_f4 ds = pv_load(dsf), ids = pv_sel(ds != zero, pv_set1(1.0f) / ds, zero);
          pv_f4 acc[4];
          PV_UNROLL(4) for (int k = 0; k < 4; k++) { /* element l into sum l % 4, in order of l */
            pv_f4 a = zero;
            PV_UNROLL(4) for (int l = k; l < 16; l += 4) {
              const pv_f4 e = c[g][l] - ds * pv_round_clamp(c[g][l] * ids, lo, hi);
              a = a + e * e;
            }
            acc[k] = a;
          }
          const pv_f4 err = (acc[0] + acc[1]) + (acc[2] + acc[3]);
          const pv_i4 better = err < best;
          for (int b = 0; b < 4; b++)
            if (ok[b] && better[b]) {
              best[b] = err[b];
              sc[b] = sc0[b] + o;
            }
        }
      }
      float idf[4];
      for (int b = 0; b < 4; b++) {
        const int j = 4 * g + b, u = sc[b] + 32;
        y[i].scales[j % 8] |= (uint8_t)((u & 0xF) << (j < 8 ? 0 : 4));
        y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        const float ds = d * (float)sc[b];
        idf[b] = ds != 0 ? 1.0f / ds : 0;
      }
      const pv_f4 ids = pv_load(idf);
      const pv_i4 none = ids == zero;
      pv_i4 q[16];
      PV_UNROLL(16) for (int l = 0; l < 16; l++)
        q[l] = (pv_level(c[g][l] * ids, lo, hi) & ~none) + 4;
      pv_store_bytes16(q, L + 64 * g, 16);
    }
    /* element e' = 128 h + 32 sh + e: 2 bits at qs[32 h + e] << 2 sh, the third at hmask[e] bit 4 h + sh */
    for (int e = 0; e < 32; e += 8) {
      uint64_t hm = 0;
      for (int h = 0; h < 2; h++) {
        uint64_t qs = 0;
        for (int sh = 0; sh < 4; sh++) {
          uint64_t v;
          memcpy(&v, L + 128 * h + 32 * sh + e, 8);
          qs |= (v & 0x0303030303030303ull) << (2 * sh);
          hm |= ((v >> 2) & 0x0101010101010101ull) << (4 * h + sh);
        }
        memcpy(y[i].qs + 32 * h + e, &qs, 8);
      }
      memcpy(y[i].hmask + e, &hm, 8);
    }
  }
}

void q35_kernels_quantize_plain_vec(q35_kernels *k) {
  k->quantize[Q35_TYPE_Q3_K] = quant_q3_k_vec;
  k->quantize[Q35_TYPE_Q4_0] = quant_q4_0_vec;
  k->quantize[Q35_TYPE_Q5_0] = quant_q5_0_vec;
  k->quantize[Q35_TYPE_Q4_1] = quant_q4_1_vec;
  k->quantize[Q35_TYPE_Q5_1] = quant_q5_1_vec;
}
