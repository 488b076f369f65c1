/*
 * quantize_iq.c - the weight quantizers of the IQ1/IQ2/IQ3 family: floats -> IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M blocks (plain C; every SIMD level uses these). The
 * layouts and grids are in quant_iq_tables.h.
 *
 * The problem. A group of 8 (IQ2, IQ1) or 4 (IQ3) elements is one entry of a fixed grid, a small
 * subset of all combinations of a few levels per element (IQ2: 256-1024 of the 3^8 combinations
 * of {8, 25, 43}; IQ3: 256 or 512 of the 8^4 of {4 .. 62} / {1 .. 15}; IQ1: 2048 of the 3^8 of
 * {-1, 0, 1}), times a sign per element (IQ2/IQ3; some types store 7 of 8 signs, the 8th making
 * their count even) and a sub-block scale S = d * c * (2s + 1) (s a 3- or 4-bit field under the
 * fp16 super-block scale d; IQ1 adds a shift of +-1/8 to the levels). Minimise the weighted
 * squared error sum w * (x - S * g)^2.
 *
 * The method (the one ggml's quantizers use, written from its description; not byte-identical):
 *   1. Signs: the magnitudes |x| are fitted; where only 7 signs are stored and the count of
 *      negatives is odd, the element of least w*x^2 takes the wrong sign (it is fitted as -|x|).
 *   2. A grid entry for a given scale: round each element to its nearest level; when that
 *      combination is on the grid it is the best entry, otherwise the best (weighted) of a list of
 *      grid entries near the combination, precomputed once per grid (the entries within the
 *      nearest 1-3 distance shells of every off-grid combination, in level steps).
 *   3. Per sub-block, a scan of inverse scales mapping the largest magnitude near the top level
 *      (IQ2/IQ3), or an exact search over the ways to split the sorted values into the three IQ1
 *      levels (for each shift sign), then a least-squares scale for the entries chosen and one
 *      more pass at that scale.
 *   4. Unlike ggml (which rounds the sub-block scales once and multiplies d by a fudge factor),
 *      the super-block scale d is chosen among candidates by the exact weighted error its rounded
 *      sub-block scales give (each sub-block's error is a quadratic in its scale for fixed
 *      entries), and every group is then re-chosen at the scale actually stored.
 * The fit uses the grids' true values (8, 25, 43 and 62 are not exactly proportional to
 * 1, 3, 5 and 15).
 *
 * Element weights: with an importance vector qw (llama.cpp's imatrix: mean squared activation
 * per column), qw[i] * sqrt(sigma2 + x[i]^2) as ggml's quantizers, sigma2 the super-block's mean
 * x^2 (twice that for IQ2_S, IQ3 and IQ1); without one, ggml's unweighted forms: x^2 (IQ3,
 * IQ1_M), sigma2/4 + x^2 (IQ2_S), and for the types ggml only quantizes with an importance vector
 * (IQ2_XXS, IQ2_XS, IQ1_S: q35_type_requires_imatrix) the importance form with qw = 1.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_iq_tables.h"

/* ------------------------------ grids and their neighbour lists ------------------------------ */

enum { G_IQ2XXS, G_IQ2XS, G_IQ2S, G_IQ3XXS, G_IQ3S, G_IQ1S, G_COUNT };

typedef struct {
  int ngrid, dim, nlev, kbits, nshell;
  float lev[8];   /* the level values, ascending */
  float thr[7];   /* midpoints between consecutive levels */
  int8_t *val;    /* ngrid x dim grid values */
  float *fval;    /* the same as floats */
  int32_t *map;   /* key -> grid index (>= 0), or -(1 + offset of the key's list in nb) */
  uint16_t *nb;   /* neighbour lists: a count, then grid indices */
} grid_tab;

static grid_tab grids[G_COUNT];
static pthread_once_t grid_once[G_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                            PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

/* grid entry j's byte i, as ggml stores it */
static int grid_byte(int gi, int j, int i) {
  switch (gi) {
    case G_IQ2XXS: return (int8_t)(q35_iq2xxs_grid[j] >> (8 * i));
    case G_IQ2XS: return (int8_t)(q35_iq2xs_grid[j] >> (8 * i));
    case G_IQ2S: return (int8_t)(q35_iq2s_grid[j] >> (8 * i));
    case G_IQ3XXS: return (int8_t)(q35_iq3xxs_grid[j] >> (8 * i));
    case G_IQ3S: return (int8_t)(q35_iq3s_grid[j] >> (8 * i));
    default: return (int8_t)(q35_iq1s_grid[j] >> (8 * i));
  }
}

static int level_of(const grid_tab *g, int v) {
  for (int l = 0; l < g->nlev; l++)
    if ((int)g->lev[l] == v) return l;
  return -1;
}

/* Build grid gi: values, key map, and for every off-grid key whose digits are all levels the
 * grid entries within its nshell nearest distances (squared level steps). Allocation failure
 * leaves map NULL (the quantizers then write zero blocks; it does not happen in practice). */
static void grid_build(int gi) {
  static const struct {
    int ngrid, dim, nlev, nshell;
    float lev[8];
  } spec[G_COUNT] = {
      {256, 8, 3, 2, {8, 25, 43}},
      {512, 8, 3, 2, {8, 25, 43}},
      {1024, 8, 3, 1, {8, 25, 43}},
      {256, 4, 8, 2, {4, 12, 20, 28, 36, 44, 52, 62}},
      {512, 4, 8, 3, {1, 3, 5, 7, 9, 11, 13, 15}},
      {2048, 8, 3, 3, {-1, 0, 1}},
  };
  grid_tab *g = &grids[gi];
  g->ngrid = spec[gi].ngrid, g->dim = spec[gi].dim, g->nlev = spec[gi].nlev, g->nshell = spec[gi].nshell;
  g->kbits = g->nlev <= 4 ? 2 : 3;
  for (int l = 0; l < g->nlev; l++) g->lev[l] = spec[gi].lev[l];
  for (int l = 0; l + 1 < g->nlev; l++) g->thr[l] = 0.5f * (g->lev[l] + g->lev[l + 1]);
  const int nkey = 1 << (g->kbits * g->dim), dim = g->dim;
  int8_t *val = malloc((size_t)g->ngrid * dim), *gl = malloc((size_t)g->ngrid * dim);
  int32_t *map = malloc(sizeof(int32_t) * (size_t)nkey);
  float *fval = malloc(sizeof(float) * (size_t)g->ngrid * dim);
  if (!val || !gl || !map || !fval) goto fail;
  for (int key = 0; key < nkey; key++) map[key] = INT32_MIN; /* not yet known */
  for (int j = 0; j < g->ngrid; j++) {
    int key = 0;
    for (int i = 0; i < dim; i++) {
      val[j * dim + i] = (int8_t)grid_byte(gi, j, i);
      fval[j * dim + i] = (float)val[j * dim + i];
      gl[j * dim + i] = (int8_t)level_of(g, val[j * dim + i]);
      key |= gl[j * dim + i] << (g->kbits * i);
    }
    map[key] = j;
  }
  /* lists: for each off-grid key with valid digits, its nshell smallest distances, then the entries */
  size_t cap = 1 << 16, used = 0;
  uint16_t *nb = malloc(cap * sizeof *nb);
  int *dist = malloc(sizeof(int) * (size_t)g->ngrid);
  if (!nb || !dist) {
    free(nb), free(dist);
    goto fail;
  }
  int8_t kl[8];
  for (int key = 0; key < nkey; key++) {
    int valid = 1;
    for (int i = 0; i < dim; i++) {
      kl[i] = (int8_t)((key >> (g->kbits * i)) & ((1 << g->kbits) - 1));
      valid &= kl[i] < g->nlev;
    }
    if (map[key] >= 0 || !valid) continue; /* on the grid, or unreachable (a digit past the last level) */
    int shell[3] = {1 << 30, 1 << 30, 1 << 30};
    for (int j = 0; j < g->ngrid; j++) {
      int d = 0;
      for (int i = 0; i < dim; i++) d += (gl[j * dim + i] - kl[i]) * (gl[j * dim + i] - kl[i]);
      dist[j] = d;
      /* keep the nshell smallest distinct distances, ascending */
      for (int s = 0; s < g->nshell; s++) {
        if (d == shell[s]) break;
        if (d < shell[s]) {
          for (int t = g->nshell - 1; t > s; t--) shell[t] = shell[t - 1];
          shell[s] = d;
          break;
        }
      }
    }
    const int lim = shell[g->nshell - 1];
    size_t n = 0;
    for (int j = 0; j < g->ngrid; j++) n += dist[j] <= lim;
    if (used + n + 1 > cap) {
      while (used + n + 1 > cap) cap *= 2;
      uint16_t *p = realloc(nb, cap * sizeof *nb);
      if (!p) {
        free(nb), free(dist);
        goto fail;
      }
      nb = p;
    }
    map[key] = -(int32_t)(1 + used);
    nb[used++] = (uint16_t)n;
    for (int j = 0; j < g->ngrid; j++)
      if (dist[j] <= lim) nb[used++] = (uint16_t)j;
  }
  free(dist);
  free(gl);
  g->val = val, g->fval = fval, g->map = map, g->nb = nb;
  return;
fail:
  free(val), free(gl), free(map), free(fval);
}

static void build_iq2xxs(void) { grid_build(G_IQ2XXS); }
static void build_iq2xs(void) { grid_build(G_IQ2XS); }
static void build_iq2s(void) { grid_build(G_IQ2S); }
static void build_iq3xxs(void) { grid_build(G_IQ3XXS); }
static void build_iq3s(void) { grid_build(G_IQ3S); }
static void build_iq1s(void) { grid_build(G_IQ1S); }

static const grid_tab *grid_get(int gi) {
  static void (*const build[G_COUNT])(void) = {build_iq2xxs, build_iq2xs, build_iq2s,
                                               build_iq3xxs, build_iq3s,  build_iq1s};
  pthread_once(&grid_once[gi], build[gi]);
  return grids[gi].map ? &grids[gi] : NULL;
}

/* The key of the elementwise rounding of targets t (in grid units) to the grid's levels. (dim is
 * a constant in each caller below, so the loops unroll.) */
static inline __attribute__((always_inline)) int key_dim(const grid_tab *g, const float *t, const int dim) {
  const int nt = g->nlev - 1;
  int key = 0;
  for (int i = 0; i < dim; i++) {
    int l = 0;
    for (int k = 0; k < nt; k++) l += t[i] > g->thr[k];
    key |= l << (g->kbits * i);
  }
  return key;
}

/* The best (least weighted distance to t) entry of off-grid key `key`'s neighbour list. */
static inline __attribute__((always_inline)) int search_dim(const grid_tab *g, int key, const float *t,
                                                             const float *w, const int dim) {
  const uint16_t *nb = g->nb + (-g->map[key] - 1);
  int best = nb[1];
  float best_e = INFINITY;
  /* four values per vector (GCC vector extensions: the same operations on every machine), the
   * lanes added in a fixed order */
  typedef float f4 __attribute__((vector_size(16)));
  f4 tv[2], wv[2];
  for (int h = 0; h < dim / 4; h++) {
    memcpy(&tv[h], t + 4 * h, sizeof(f4));
    memcpy(&wv[h], w + 4 * h, sizeof(f4));
  }
  for (int j = 1; j <= nb[0]; j++) {
    const float *v = g->fval + (size_t)nb[j] * dim;
    f4 vv, d, acc;
    memcpy(&vv, v, sizeof vv);
    d = tv[0] - vv;
    acc = wv[0] * d * d;
    if (dim == 8) {
      memcpy(&vv, v + 4, sizeof vv);
      d = tv[1] - vv;
      acc += wv[1] * d * d;
    }
    const float e = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if (e < best_e) {
      best_e = e;
      best = nb[j];
    }
  }
  return best;
}

/* The grid entry of least weighted distance to targets t: the elementwise rounding when it is on
 * the grid, else the best of the rounding's neighbour list. */
static int grid_nearest(const grid_tab *g, const float *t, const float *w) {
  if (g->dim == 8) {
    const int key = key_dim(g, t, 8);
    return g->map[key] >= 0 ? g->map[key] : search_dim(g, key, t, w, 8);
  }
  const int key = key_dim(g, t, 4);
  return g->map[key] >= 0 ? g->map[key] : search_dim(g, key, t, w, 4);
}

/* The same, remembering per group the last off-grid key searched and its answer (*ckey, *cidx):
 * the scans of nearby scales meet the same rounding again and again, and its neighbour search
 * (the costly step) is then not repeated. */
static int grid_nearest_cached(const grid_tab *g, const float *t, const float *w, int *ckey, uint16_t *cidx) {
  const int key = g->dim == 8 ? key_dim(g, t, 8) : key_dim(g, t, 4);
  if (g->map[key] >= 0) return g->map[key];
  if (key != *ckey) {
    *ckey = key;
    *cidx = (uint16_t)(g->dim == 8 ? search_dim(g, key, t, w, 8) : search_dim(g, key, t, w, 4));
  }
  return *cidx;
}

/* ------------------------------ the sub-block fit ------------------------------ */

/* What a sub-block's fit leaves for the super-block step: per group the grid entry (and for IQ1
 * the shift sign), and the sums that give its weighted error at any scale S for those entries:
 * err(S) = sxx - 2 S sxg + S^2 sgg. */
typedef struct {
  float sxg, sgg, sxx;
  uint16_t idx[8];
  int8_t dneg[4]; /* IQ1: group's shift is -1/8 */
} sub_fit;

#define MAX_SUB 32

/* The entries of every group of a sub-block (xv, w: n values) at inverse scale id; sums in f.
 * ckey / cidx: a search cache per group (grid_nearest_cached), or NULL. */
static void assign_at(const grid_tab *g, const float *xv, const float *w, int n, float id, sub_fit *f, int *ckey,
                      uint16_t *cidx) {
  const int dim = g->dim;
  float t[8];
  f->sxg = f->sgg = 0;
  for (int k = 0; k < n / dim; k++) {
    const float *x = xv + k * dim, *ww = w + k * dim;
    for (int i = 0; i < dim; i++) t[i] = id * x[i];
    const int j = ckey ? grid_nearest_cached(g, t, ww, &ckey[k], &cidx[k]) : grid_nearest(g, t, ww);
    f->idx[k] = (uint16_t)j;
    const int8_t *v = g->val + (size_t)j * dim;
    for (int i = 0; i < dim; i++) {
      f->sxg += ww[i] * x[i] * (float)v[i];
      f->sgg += ww[i] * (float)v[i] * (float)v[i];
    }
  }
}

static inline float fit_score(const sub_fit *f) { return f->sxg > 0 && f->sgg > 0 ? f->sxg * f->sxg / f->sgg : 0; }

/* IQ2/IQ3 sub-block: scan inverse scales mapping the largest magnitude to lev_top * (lo .. hi),
 * then one pass at the least-squares scale of the best; the best fit in *f. */
static void fit_grid(const grid_tab *g, const float *xv, const float *w, int n, int ncand, float lo, float hi,
                     sub_fit *f) {
  float max = 0, sxx = 0;
  for (int i = 0; i < n; i++) {
    max = fmaxf(max, xv[i]);
    sxx += w[i] * xv[i] * xv[i];
  }
  memset(f, 0, sizeof *f);
  f->sxx = sxx;
  if (!(max > 0) || !isfinite(max)) return; /* zero sub-block: entry 0 (the smallest values), scale field 0 */
  const float top = g->lev[g->nlev - 1];
  int ckey[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  uint16_t cidx[8];
  sub_fit c;
  c.sxx = sxx;
  float best = -1;
  for (int k = 0; k < ncand; k++) {
    const float id = top * (lo + (hi - lo) * (float)k / (float)(ncand - 1)) / max;
    assign_at(g, xv, w, n, id, &c, ckey, cidx);
    const float s = fit_score(&c);
    if (s > best) best = s, *f = c;
  }
  if (f->sxg > 0 && f->sgg > 0) {
    assign_at(g, xv, w, n, f->sgg / f->sxg, &c, NULL, NULL);
    if (fit_score(&c) > best) *f = c;
  }
}

/* ------------------------------ IQ1: the three-level split search ------------------------------ */

typedef struct {
  float x, w;
  int i;
} xw;

/* The split search's vectors: four i2 per vector (SSE2 / NEON width, so no ABI change in the
 * portable build), rows padded to IQ1_NP >= MAX_SUB + 1. */
#define IQ1_NP 36
#define IQ1_VL 4
typedef float iq1_f4 __attribute__((vector_size(16)));
typedef int32_t iq1_i4 __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) iq1_f4 iq1_sel(iq1_i4 m, iq1_f4 a, iq1_f4 b) {
  return (iq1_f4)((m & (iq1_i4)a) | (~m & (iq1_i4)b));
}

/* Scores of splits (i1, i2) for i2 = 4 v .. 4 v + 3: a = (ca - SX[i1]) - SX[i2], b = U[i1] - V[i2],
 * a^2 / b where a, b > 0 and lane l >= lo (the lanes of the vector holding i1 below it), else
 * +0 (the bits masked off; b <= 0 lanes divide harmlessly first). SX past n is padded so that
 * a < 0 there. */
static inline __attribute__((always_inline)) iq1_f4 iq1_scores(float ca, const float *SX, const float *U,
                                                               const float *V, int i1, int v, iq1_i4 lo) {
  iq1_f4 sx, vv;
  memcpy(&sx, SX + IQ1_VL * v, sizeof sx);
  memcpy(&vv, V + IQ1_VL * v, sizeof vv);
  const iq1_f4 a = (ca - SX[i1]) - sx, b = U[i1] - vv, zero = {0};
  const iq1_i4 ok = (a > zero) & (b > zero) & lo;
  return (iq1_f4)(ok & (iq1_i4)((a * a) / b));
}

/* IQ1 sub-block of n values in groups of 8: over every split of the sorted values into the levels
 * -1 / 0 / +1 and every configuration of shift signs (per group for IQ1_M: per_group, else one
 * per sub-block), the assignment of best least-squares score; then mapped to the grid.
 * For a split (i1, i2) of the sorted values and shifts dl_g, with prefix sums SX (w x), SW (w)
 * over the sorted order (SW_g: of group g's elements alone):
 *   sum w x q = sum_g (1 + dl_g) SX_g(n) - SX(i1) - SX(i2)
 *   sum w q^2 = sum_g (1 + dl_g)^2 SW_g(n) + SW(i1) - SW(i2) - 2 sum_g dl_g (SW_g(i1) + SW_g(i2))
 * so each split costs a few operations once the per-configuration sums are made. */
static void fit_iq1(const grid_tab *g, const float *x, const float *w, int n, int per_group, sub_fit *f) {
  const int ng = n / 8, ncfg = per_group ? 1 << ng : 2;
  xw s[MAX_SUB];
  float sxx = 0, amax = 0;
  for (int i = 0; i < n; i++) {
    s[i] = (xw){x[i], w[i], i};
    sxx += w[i] * x[i] * x[i];
    amax = fmaxf(amax, fabsf(x[i]));
  }
  memset(f, 0, sizeof *f);
  f->sxx = sxx;
  if (!(amax > 0) || !isfinite(amax)) return;
  { /* stable sort by x through ranks (branch-free; x is finite here) */
    xw t[MAX_SUB];
    memcpy(t, s, sizeof(xw) * (size_t)n);
    for (int i = 0; i < n; i++) {
      int r = 0;
      for (int j = 0; j < n; j++) r += (t[j].x < t[i].x) | ((t[j].x == t[i].x) & (j < i));
      s[r] = t[i];
    }
  }
  float SX[MAX_SUB + 1], SW[MAX_SUB + 1], SXn[4] = {0}, SWn[4] = {0}, CA[4];
  SX[0] = SW[0] = 0;
  for (int j = 0; j < n; j++) {
    const int gk = s[j].i / 8;
    SX[j + 1] = SX[j] + s[j].w * s[j].x;
    SW[j + 1] = SW[j] + s[j].w;
    SXn[gk] += s[j].w * s[j].x;
    SWn[gk] += s[j].w;
  }
  /* Every (cfg, i1, i2 >= i1) split's score a^2 / b (0 where a or b <= 0), four i2 at a time in
   * GCC vector extensions (the same IEEE operations at every level, so the same choice on every
   * machine). P: prefix sums of dl_g w over the sorted order (sum_g dl_g SW_g). */
  float SXp[IQ1_NP], U[4][IQ1_NP], Vp[4][IQ1_NP];
  for (int i = 0; i < IQ1_NP; i++) SXp[i] = i <= n ? SX[i] : 0x1p100f; /* a < 0 past n */
  for (int cfg = 0; cfg < ncfg; cfg++) {
    float ca = 0, cb = 0, dlg[4];
    for (int k = 0; k < ng; k++) {
      const float dl = ((per_group ? cfg >> k : cfg) & 1) ? -Q35_IQ1S_DELTA : Q35_IQ1S_DELTA;
      dlg[k] = dl;
      ca += (1 + dl) * SXn[k];
      cb += (1 + dl) * (1 + dl) * SWn[k];
    }
    CA[cfg] = ca;
    float p = 0;
    for (int i = 0; i < IQ1_NP; i++) {
      U[cfg][i] = i <= n ? cb + SW[i] - 2 * p : 0;
      Vp[cfg][i] = i <= n ? SW[i] + 2 * p : 0;
      if (i < n) p += dlg[s[i].i / 8] * s[i].w;
    }
  }
  const int nv = n / IQ1_VL + 1; /* vectors of i2 covering 0 .. n */
  /* per lane: the best score and the first (row, vector) reaching it, row = cfg (n + 1) + i1;
   * then the best over lanes, the earliest in (cfg, i1, i2) order on ties */
  iq1_f4 mx = {0};
  iq1_i4 at = {0}, pos = {0};
  static const iq1_i4 first_lanes[IQ1_VL] = {{-1, -1, -1, -1}, {0, -1, -1, -1}, {0, 0, -1, -1}, {0, 0, 0, -1}};
  for (int cfg = 0; cfg < ncfg; cfg++)
    for (int i1 = 0; i1 <= n; i1++)
      for (int v = i1 / IQ1_VL; v < nv; v++) {
        const iq1_f4 sc = iq1_scores(CA[cfg], SXp, U[cfg], Vp[cfg], i1, v,
                                     v == i1 / IQ1_VL ? first_lanes[i1 % IQ1_VL] : first_lanes[0]);
        const iq1_i4 gt = sc > mx, cur = pos + ((cfg * (n + 1) + i1) * nv + v);
        mx = iq1_sel(gt, sc, mx);
        at = (gt & cur) | (~gt & at);
      }
  float best = 0;
  for (int l = 0; l < IQ1_VL; l++) best = mx[l] > best ? mx[l] : best;
  int b1 = -1, b2 = -1, bcfg = 0;
  if (best > 0) {
    int first = INT32_MAX;
    for (int l = 0; l < IQ1_VL; l++)
      if (mx[l] == best && at[l] * IQ1_VL + l < first) first = at[l] * IQ1_VL + l;
    const int row = first / IQ1_VL / nv;
    bcfg = row / (n + 1);
    b1 = row % (n + 1);
    b2 = first / IQ1_VL % nv * IQ1_VL + first % IQ1_VL;
  }
  if (b1 < 0) return;
  int8_t L[MAX_SUB];
  for (int j = 0; j < n; j++) L[s[j].i] = (int8_t)(j < b1 ? -1 : j < b2 ? 0 : 1);
  for (int k = 0; k < ng; k++) f->dneg[k] = (int8_t)(((per_group ? bcfg >> k : bcfg) & 1));
  /* the split's scale (targets for off-grid groups need it) */
  float a = 0, b = 0;
  for (int i = 0; i < n; i++) {
    const float q = (float)L[i] + (f->dneg[i / 8] ? -Q35_IQ1S_DELTA : Q35_IQ1S_DELTA);
    a += w[i] * x[i] * q;
    b += w[i] * q * q;
  }
  const float S = a / b;
  /* map each group to the grid: on-grid combinations directly, else the nearest neighbour */
  float t[8];
  for (int k = 0; k < ng; k++) {
    const float dlt = f->dneg[k] ? -Q35_IQ1S_DELTA : Q35_IQ1S_DELTA;
    int key = 0;
    for (int i = 0; i < 8; i++) key |= (L[8 * k + i] + 1) << (2 * i);
    int j = g->map[key];
    if (j < 0) {
      for (int i = 0; i < 8; i++) t[i] = x[8 * k + i] / S - dlt;
      j = grid_nearest(g, t, w + 8 * k);
    }
    f->idx[k] = (uint16_t)j;
  }
  /* the sums for the entries chosen */
  for (int k = 0; k < ng; k++) {
    const float dlt = f->dneg[k] ? -Q35_IQ1S_DELTA : Q35_IQ1S_DELTA;
    const float *v = g->fval + (size_t)f->idx[k] * 8;
    for (int i = 0; i < 8; i++) {
      const float q = v[i] + dlt;
      f->sxg += w[8 * k + i] * x[8 * k + i] * q;
      f->sgg += w[8 * k + i] * q * q;
    }
  }
}

/* ------------------------------ the super-block scale ------------------------------ */

/* Sub-block scales S_j = d * c * (2 s_j + 1), s_j in [0, smax], d an fp16 value: the d (among
 * candidates around max S_j / (c (2 smax + 1))) and the s_j of least total error for the fitted
 * entries (f[j]); returns d's fp16 bits, the fields in s. */
static uint16_t choose_scales(const sub_fit *f, int nsub, float c, int smax, int *s) {
  float smx = 0;
  for (int j = 0; j < nsub; j++)
    if (f[j].sxg > 0 && f[j].sgg > 0) smx = fmaxf(smx, f[j].sxg / f[j].sgg);
  for (int j = 0; j < nsub; j++) s[j] = 0;
  if (!(smx > 0) || !isfinite(smx)) return 0;
  const float d0 = smx / (c * (float)(2 * smax + 1));
  uint16_t best_h = q35_fp32_to_fp16(d0);
  float best_e = INFINITY;
  int ss[MAX_SUB];
  for (int k = 0; k < 24; k++) {
    const uint16_t dh = q35_fp32_to_fp16(d0 * (0.84f + 0.01f * (float)k));
    const float d = q35_fp16_to_fp32(dh) * c;
    if (!(d > 0)) continue;
    float e = 0;
    for (int j = 0; j < nsub; j++) {
      ss[j] = 0;
      if (!(f[j].sgg > 0)) continue; /* a zero sub-block: field 0 */
      const float S = f[j].sxg / f[j].sgg;
      /* err(q) = sgg (q - S)^2 - sgg S^2: the field whose q = d (2 t + 1) is nearest S */
      int s0 = (int)lrintf((S / d - 1) * 0.5f);
      s0 = s0 < 0 ? 0 : s0 > smax ? smax : s0;
      const float q = d * (float)(2 * s0 + 1);
      ss[j] = s0;
      e += q * q * f[j].sgg - 2 * q * f[j].sxg;
    }
    if (e < best_e) {
      best_e = e;
      best_h = dh;
      memcpy(s, ss, sizeof(int) * (size_t)nsub);
    }
  }
  return best_h;
}

/* ------------------------------ per-type block builders ------------------------------ */

typedef struct {
  int gi;          /* grid */
  int sub;         /* elements per sub-block scale */
  int parity;      /* 7 stored signs per 8 (the 8th even parity) */
  int iq1;         /* IQ1: levels -1/0/1 + shift, no signs */
  float c;         /* S = d * c * (2s + 1) */
  int smax;        /* largest scale field */
  int ncand;       /* inverse scales scanned */
  float lo, hi;    /* their range: the largest magnitude mapped to top * lo .. top * hi */
  int sigma_x2;    /* sigma2 = 2 * mean x^2 (else the mean) */
  int unweighted;  /* without qw: 0 the importance form with qw = 1, 1: x^2, 2: sigma2 / 4 + x^2 */
} iq_spec;

static const iq_spec spec_iq2_xxs = {G_IQ2XXS, 32, 1, 0, 0.125f, 15, 13, 0.80f, 1.20f, 0, 0};
static const iq_spec spec_iq2_xs = {G_IQ2XS, 16, 1, 0, 0.125f, 15, 13, 0.80f, 1.20f, 0, 0};
static const iq_spec spec_iq2_s = {G_IQ2S, 16, 0, 0, 0.125f, 15, 13, 0.80f, 1.20f, 1, 2};
static const iq_spec spec_iq3_xxs = {G_IQ3XXS, 32, 1, 0, 0.25f, 15, 11, 0.85f, 1.15f, 1, 1};
static const iq_spec spec_iq3_s = {G_IQ3S, 32, 0, 0, 1.0f, 15, 11, 0.85f, 1.15f, 1, 1};
static const iq_spec spec_iq1_s = {G_IQ1S, 32, 0, 1, 1.0f, 7, 0, 0, 0, 1, 0};
static const iq_spec spec_iq1_m = {G_IQ1S, 16, 0, 1, 1.0f, 7, 0, 0, 0, 1, 1};

/* Fit one super-block of QK_K values x (importance qw or NULL): per sub-block the fit (f), the
 * sign byte of every 8 (sg: bit i set = element i negative), the scale fields (s); d's bits. */
static uint16_t fit_superblock(const iq_spec *sp, const grid_tab *g, const float *x, const float *qw, sub_fit *f,
                               uint8_t *sg, int *s) {
  float w[QK_K], xv[QK_K];
  float sumx2 = 0;
  for (int i = 0; i < QK_K; i++) sumx2 += x[i] * x[i];
  const float sigma2 = (sp->sigma_x2 ? 2.0f : 1.0f) * sumx2 / QK_K;
  for (int i = 0; i < QK_K; i++) {
    if (qw) w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
    else if (sp->unweighted == 1) w[i] = x[i] * x[i];
    else if (sp->unweighted == 2) w[i] = 0.25f * sigma2 + x[i] * x[i];
    else w[i] = sqrtf(sigma2 + x[i] * x[i]);
  }
  /* signs */
  for (int k = 0; k < QK_K / 8; k++) {
    uint8_t b = 0;
    for (int i = 0; i < 8; i++) {
      const float v = x[8 * k + i];
      if (!sp->iq1 && v < 0) b |= (uint8_t)(1u << i);
      xv[8 * k + i] = sp->iq1 ? v : fabsf(v);
    }
    if (sp->parity && (__builtin_popcount(b) & 1)) {
      int im = 0;
      for (int i = 1; i < 8; i++)
        if (w[8 * k + i] * x[8 * k + i] * x[8 * k + i] < w[8 * k + im] * x[8 * k + im] * x[8 * k + im]) im = i;
      b ^= (uint8_t)(1u << im);
      xv[8 * k + im] = -xv[8 * k + im];
    }
    sg[k] = b;
  }
  const int nsub = QK_K / sp->sub;
  for (int j = 0; j < nsub; j++) {
    const float *xs = xv + j * sp->sub, *ws = w + j * sp->sub;
    if (sp->iq1) fit_iq1(g, xs, ws, sp->sub, sp->sub == 16, &f[j]);
    else fit_grid(g, xs, ws, sp->sub, sp->ncand, sp->lo, sp->hi, &f[j]);
  }
  const uint16_t dh = choose_scales(f, nsub, sp->c, sp->smax, s);
  /* every group again at the scale as stored; kept where the error at that scale is lower */
  const float d = q35_fp16_to_fp32(dh) * sp->c;
  if (d > 0)
    for (int j = 0; j < nsub; j++) {
      const float S = d * (float)(2 * s[j] + 1);
      const float *xs = xv + j * sp->sub, *ws = w + j * sp->sub;
      sub_fit c = f[j];
      if (sp->iq1) {
        float t[8];
        c.sxg = c.sgg = 0;
        for (int k = 0; k < sp->sub / 8; k++) {
          const float dlt = c.dneg[k] ? -Q35_IQ1S_DELTA : Q35_IQ1S_DELTA;
          for (int i = 0; i < 8; i++) t[i] = xs[8 * k + i] / S - dlt;
          c.idx[k] = (uint16_t)grid_nearest(g, t, ws + 8 * k);
          const int8_t *v = g->val + (size_t)c.idx[k] * 8;
          for (int i = 0; i < 8; i++) {
            const float q = (float)v[i] + dlt;
            c.sxg += ws[8 * k + i] * xs[8 * k + i] * q;
            c.sgg += ws[8 * k + i] * q * q;
          }
        }
      } else {
        assign_at(g, xs, ws, sp->sub, 1.0f / S, &c, NULL, NULL);
      }
      if (S * S * c.sgg - 2 * S * c.sxg < S * S * f[j].sgg - 2 * S * f[j].sxg) f[j] = c;
    }
  return dh;
}

static void quant_iq2_xxs_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ2XXS);
  blk_iq2_xxs *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[8];
    uint8_t sg[32];
    int s[8];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    y[ib].d = fit_superblock(&spec_iq2_xxs, g, x, qw, f, sg, s);
    for (int j = 0; j < 8; j++) {
      const uint32_t a0 = f[j].idx[0] | (f[j].idx[1] << 8) | (f[j].idx[2] << 16) | ((uint32_t)f[j].idx[3] << 24);
      uint32_t a1 = (uint32_t)s[j] << 28;
      for (int k = 0; k < 4; k++) a1 |= (uint32_t)(sg[4 * j + k] & 127) << (7 * k);
      memcpy(&y[ib].qs[4 * j], &a0, 4);
      memcpy(&y[ib].qs[4 * j + 2], &a1, 4);
    }
  }
}

static void quant_iq2_xs_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ2XS);
  blk_iq2_xs *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[16];
    uint8_t sg[32];
    int s[16];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    y[ib].d = fit_superblock(&spec_iq2_xs, g, x, qw, f, sg, s);
    for (int k = 0; k < 32; k++) y[ib].qs[k] = (uint16_t)(f[k / 2].idx[k % 2] | ((sg[k] & 127) << 9));
    for (int j = 0; j < 8; j++) y[ib].scales[j] = (uint8_t)(s[2 * j] | (s[2 * j + 1] << 4));
  }
}

static void quant_iq2_s_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ2S);
  blk_iq2_s *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[16];
    uint8_t sg[32];
    int s[16];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    y[ib].d = fit_superblock(&spec_iq2_s, g, x, qw, f, sg, s);
    for (int k = 0; k < 32; k++) {
      const int j = f[k / 2].idx[k % 2];
      y[ib].qs[k] = (uint8_t)(j & 255);
      y[ib].qh[k / 4] |= (uint8_t)((j >> 8) << (2 * (k % 4)));
      y[ib].qs[32 + k] = sg[k];
    }
    for (int j = 0; j < 8; j++) y[ib].scales[j] = (uint8_t)(s[2 * j] | (s[2 * j + 1] << 4));
  }
}

static void quant_iq3_xxs_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ3XXS);
  blk_iq3_xxs *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[8];
    uint8_t sg[32];
    int s[8];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    y[ib].d = fit_superblock(&spec_iq3_xxs, g, x, qw, f, sg, s);
    for (int j = 0; j < 8; j++) {
      for (int k = 0; k < 8; k++) y[ib].qs[8 * j + k] = (uint8_t)f[j].idx[k];
      uint32_t a = (uint32_t)s[j] << 28;
      for (int k = 0; k < 4; k++) a |= (uint32_t)(sg[4 * j + k] & 127) << (7 * k);
      memcpy(y[ib].qs + 64 + 4 * j, &a, 4);
    }
  }
}

static void quant_iq3_s_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ3S);
  blk_iq3_s *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[8];
    uint8_t sg[32];
    int s[8];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    y[ib].d = fit_superblock(&spec_iq3_s, g, x, qw, f, sg, s);
    for (int j = 0; j < 8; j++) {
      for (int k = 0; k < 8; k++) {
        const int e = f[j].idx[k];
        y[ib].qs[8 * j + k] = (uint8_t)(e & 255);
        y[ib].qh[j] |= (uint8_t)((e >> 8) << k);
      }
      for (int k = 0; k < 4; k++) y[ib].signs[4 * j + k] = sg[4 * j + k];
    }
    for (int j = 0; j < 4; j++) y[ib].scales[j] = (uint8_t)(s[2 * j] | (s[2 * j + 1] << 4));
  }
}

static void quant_iq1_s_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ1S);
  blk_iq1_s *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[8];
    uint8_t sg[32];
    int s[8];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    y[ib].d = fit_superblock(&spec_iq1_s, g, x, qw, f, sg, s);
    for (int j = 0; j < 8; j++) {
      uint16_t h = (uint16_t)((s[j] << 12) | (f[j].dneg[0] ? 0x8000 : 0));
      for (int k = 0; k < 4; k++) {
        y[ib].qs[4 * j + k] = (uint8_t)(f[j].idx[k] & 255);
        h |= (uint16_t)((f[j].idx[k] >> 8) << (3 * k));
      }
      y[ib].qh[j] = h;
    }
  }
}

static void quant_iq1_m_w(const float *x, void *dst, int64_t n, const float *qw) {
  const grid_tab *g = grid_get(G_IQ1S);
  blk_iq1_m *y = dst;
  for (int64_t ib = 0; ib < n / QK_K; ib++, x += QK_K, qw = qw ? qw + QK_K : NULL) {
    sub_fit f[16];
    uint8_t sg[32];
    int s[16];
    memset(&y[ib], 0, sizeof y[ib]);
    if (!g) continue;
    const uint16_t dh = fit_superblock(&spec_iq1_m, g, x, qw, f, sg, s);
    uint16_t sc[4] = {0, 0, 0, 0};
    for (int t = 0; t < 16; t++) {
      sc[t / 4] |= (uint16_t)(s[t] << (3 * (t % 4)));
      for (int k = 0; k < 2; k++) {
        const int gk = 2 * t + k, e = f[t].idx[k];
        y[ib].qs[gk] = (uint8_t)(e & 255);
        y[ib].qh[t] |= (uint8_t)((((e >> 8) & 7) | (f[t].dneg[k] ? 8 : 0)) << (4 * k));
      }
    }
    sc[0] |= (uint16_t)((dh & 0x000f) << 12);
    sc[1] |= (uint16_t)((dh & 0x00f0) << 8);
    sc[2] |= (uint16_t)((dh & 0x0f00) << 4);
    sc[3] |= (uint16_t)(dh & 0xf000);
    memcpy(y[ib].scales, sc, 8);
  }
}

/* ------------------------------ entry points ------------------------------ */

static void quant_iq2_xxs(const float *x, void *dst, int64_t n) { quant_iq2_xxs_w(x, dst, n, NULL); }
static void quant_iq2_xs(const float *x, void *dst, int64_t n) { quant_iq2_xs_w(x, dst, n, NULL); }
static void quant_iq2_s(const float *x, void *dst, int64_t n) { quant_iq2_s_w(x, dst, n, NULL); }
static void quant_iq3_xxs(const float *x, void *dst, int64_t n) { quant_iq3_xxs_w(x, dst, n, NULL); }
static void quant_iq3_s(const float *x, void *dst, int64_t n) { quant_iq3_s_w(x, dst, n, NULL); }
static void quant_iq1_s(const float *x, void *dst, int64_t n) { quant_iq1_s_w(x, dst, n, NULL); }
static void quant_iq1_m(const float *x, void *dst, int64_t n) { quant_iq1_m_w(x, dst, n, NULL); }

int q35_iq_quantize_weighted(int type, const float *src, void *dst, int64_t n, const float *qw) {
  switch (type) {
    case Q35_TYPE_IQ2_XXS: quant_iq2_xxs_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ2_XS: quant_iq2_xs_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ2_S: quant_iq2_s_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ3_XXS: quant_iq3_xxs_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ3_S: quant_iq3_s_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ1_S: quant_iq1_s_w(src, dst, n, qw); return 0;
    case Q35_TYPE_IQ1_M: quant_iq1_m_w(src, dst, n, qw); return 0;
    default: return -1;
  }
}

void q35_kernels_iq_quantizers(q35_kernels *k) {
  k->quantize[Q35_TYPE_IQ2_XXS] = quant_iq2_xxs;
  k->quantize[Q35_TYPE_IQ2_XS] = quant_iq2_xs;
  k->quantize[Q35_TYPE_IQ2_S] = quant_iq2_s;
  k->quantize[Q35_TYPE_IQ3_XXS] = quant_iq3_xxs;
  k->quantize[Q35_TYPE_IQ3_S] = quant_iq3_s;
  k->quantize[Q35_TYPE_IQ1_S] = quant_iq1_s;
  k->quantize[Q35_TYPE_IQ1_M] = quant_iq1_m;
}
