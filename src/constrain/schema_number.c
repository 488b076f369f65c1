/*
 * schema_number.c - JSON Schema to GBNF for numbers and integers: the bounds (minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum, and draft 4's boolean exclusive forms) and multipleOf.
 *
 * A bound's value. A number in the schema is read as a double (as jansson, JavaScript and
 * Python's json read it). Its decimal value is the shortest decimal that reads back as that
 * double, which is the number as written whenever it was written with at most 15 significant
 * digits; an integer is its exact integer. |bound| <= 1e17.
 *
 * What a bound accepts. A numeral is accepted when its value satisfies every bound both exactly
 * (as a decimal number) and after rounding to the nearest double (ties to even, as every parser
 * that reads JSON numbers as doubles does), so validators of either kind accept the output. The
 * two differ only next to a bound: "0.50000000000000001" is above 0.5 but reads as the double
 * 0.5, so exclusiveMinimum 0.5 refuses it. Each side's condition is one exact decimal threshold
 * with a strictness: for "x > X as a double" the midpoint m between X and the next double
 * (x > m, or x >= m when that tie rounds up), for "x >= b exactly" b itself, and so on; the
 * tighter threshold wins. Midpoints are dyadic rationals, so their decimal expansions are finite
 * (at most 1,127 fraction digits, next to 0) and are computed exactly here.
 *
 * Numeral forms under a bound: no exponent (the set of exponent forms in a range is not
 * context-free: "0.0005e3" needs the count of zeros to match the exponent), no negative zero;
 * any number of integer and fraction digits otherwise (leading zeros never: JSON has none).
 * An integer has no fraction. Unbounded numbers keep JSON's whole grammar.
 *
 * The grammar of a range. Negative values are "-" then a range of magnitudes. A magnitude range
 * [A, B] splits on the integer part: integer parts strictly between A's and B's take any
 * fraction (the usual digit-range construction over integers: alternatives over the digit count,
 * and for each count a prefix-sharing chain), the integer part of A takes the fractions >= A's
 * fraction and the integer part of B those <= B's. A fraction range is a digit automaton whose
 * state is (position, still equal to the lower bound's digits, still equal to the upper bound's
 * digits), one rule per state; states that cannot reach an accepted end are dropped, so a mask
 * never lets a model into a dead end (an unending run of zeros).
 *
 * multipleOf: an integer k makes the value an integer, so a number schema writes the multiples
 * as integers (with an optional zero fraction): unbounded (or bounded below by 0 or 1) a DFA
 * over the remainder mod k (k <= 1000), bounded on both sides the multiples themselves (at most
 * 1000 of them). k = 10^-s (0.1, 0.01, ...) on a number: at most s fraction digits that are not
 * trailing zeros, with or without bounds (the fraction automaton takes only zeros past s).
 * Others are refused.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/schema.h"

/* ---- exact decimals ---- */

#define DEC_FRAC 1200 /* fraction digits; the midpoints next to 0 have 1,127 */
#define BOUND_MAX 1e17

typedef struct {
  int neg;               /* 1 for a negative value (never for zero) */
  long long ip;          /* integer part (magnitude) */
  char fp[DEC_FRAC + 1]; /* fraction digits, without trailing zeros */
} dec;

static void dec_trim(dec *d) {
  size_t n = strlen(d->fp);
  while (n && d->fp[n - 1] == '0') d->fp[--n] = 0;
  if (!d->ip && !n) d->neg = 0;
}

static int mag_cmp(const dec *a, const dec *b) {
  if (a->ip != b->ip) return a->ip < b->ip ? -1 : 1;
  const size_t la = strlen(a->fp), lb = strlen(b->fp);
  for (size_t i = 0; i < la || i < lb; i++) {
    const char x = i < la ? a->fp[i] : '0', y = i < lb ? b->fp[i] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

static int dec_cmp(const dec *a, const dec *b) {
  if (a->neg != b->neg) return a->neg ? -1 : 1;
  return a->neg ? -mag_cmp(a, b) : mag_cmp(a, b);
}

static void dec_from_ll(long long v, dec *d) {
  d->neg = v < 0;
  d->ip = v < 0 ? -v : v;
  d->fp[0] = 0;
}

/* The shortest decimal that reads back as x (|x| <= 1e17). */
static void dec_shortest(double x, dec *d) {
  char buf[48];
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, sizeof buf, "%.*e", p - 1, x);
    if (strtod(buf, NULL) == x) break;
  }
  /* buf: [-]D[.DDD]e[+-]E; the value is 0.DDDD * 10^(E+1) */
  const char *s = buf;
  d->neg = *s == '-';
  if (d->neg) s++;
  char dig[24];
  int nd = 0;
  for (; *s && *s != 'e'; s++)
    if (*s >= '0' && *s <= '9') dig[nd++] = *s;
  const int e = atoi(s + 1);
  d->ip = 0;
  size_t nf = 0;
  if (e < 0) {
    memset(d->fp, '0', (size_t)(-e - 1));
    nf = (size_t)(-e - 1);
  }
  for (int i = 0; i < nd || i <= e; i++) {
    const int v = i < nd ? dig[i] - '0' : 0;
    if (i <= e) d->ip = d->ip * 10 + v;
    else d->fp[nf++] = (char)('0' + v);
  }
  d->fp[nf] = 0;
  dec_trim(d);
}

/* The exact decimal of (-1)^neg * S * 2^K (S < 2^62; S * 2^K < 2^63 when K >= 0; -K <= DEC_FRAC). */
static void dec_dyadic(int neg, uint64_t S, int K, dec *d) {
  d->neg = neg;
  d->fp[0] = 0;
  if (K >= 0) {
    d->ip = (long long)(S << K);
    dec_trim(d);
    return;
  }
  const int k = -K;
  d->ip = k >= 64 ? 0 : (long long)(S >> k);
  uint64_t r = k >= 64 ? S : S & ((UINT64_C(1) << k) - 1);
  /* r / 2^k = r * 5^k / 10^k: the k fraction digits are r * 5^k, in base-1e9 limbs */
  uint32_t limb[DEC_FRAC / 9 + 8];
  int n = 0;
  for (; r; r /= 1000000000u) limb[n++] = (uint32_t)(r % 1000000000u);
  for (int i = 0; i < k; i++) {
    uint64_t carry = 0;
    for (int j = 0; j < n; j++) {
      const uint64_t v = (uint64_t)limb[j] * 5 + carry;
      limb[j] = (uint32_t)(v % 1000000000u);
      carry = v / 1000000000u;
    }
    if (carry) limb[n++] = (uint32_t)carry;
  }
  char tmp[DEC_FRAC + 24];
  int len = 0;
  if (n) len = snprintf(tmp, sizeof tmp, "%u", limb[n - 1]);
  for (int j = n - 2; j >= 0; j--) len += snprintf(tmp + len, sizeof tmp - (size_t)len, "%09u", limb[j]);
  memset(d->fp, '0', (size_t)(k - len)); /* r * 5^k < 10^k: at most k digits */
  memcpy(d->fp + k - len, tmp, (size_t)len);
  d->fp[k] = 0;
  dec_trim(d);
}

/* x = M * 2^E with M an integer (|M| < 2^53). */
static void dyad(double x, int64_t *M, int *E) {
  int e = 0;
  const double f = x == 0 ? 0 : frexp(x, &e);
  *M = (int64_t)ldexp(f, 53);
  *E = e - 53;
}

/* The exact midpoint between a and the next double above it, and whether a tie there rounds up
 * (to the next double: a's significand is odd). */
static void midpoint(double a, dec *m, int *tie_up) {
  const double b = nextafter(a, INFINITY);
  int64_t Ma, Mb;
  int Ea, Eb;
  dyad(a, &Ma, &Ea);
  dyad(b, &Mb, &Eb);
  if (!Ma) Ea = Eb;
  if (!Mb) Eb = Ea;
  const int E0 = Ea < Eb ? Ea : Eb;
  const int64_t S = Ma * ((int64_t)1 << (Ea - E0)) + Mb * ((int64_t)1 << (Eb - E0));
  dec_dyadic(S < 0, (uint64_t)(S < 0 ? -S : S), E0 - 1, m);
  uint64_t bits;
  memcpy(&bits, &a, sizeof bits);
  *tie_up = (int)(bits & 1);
}

/* ---- bounds ---- */

/* One side's threshold: x >= v (x > v when strict) for a lower bound, x <= v (<) for an upper. */
typedef struct {
  int set, strict;
  dec v;
} dbound;

static void tighter(dbound *a, const dbound *b, int upper) {
  if (!b->set) return;
  if (!a->set) {
    *a = *b;
    return;
  }
  const int c = dec_cmp(&b->v, &a->v);
  if (upper ? c < 0 : c > 0) *a = *b;
  else if (c == 0 && b->strict) a->strict = 1;
}

/* The threshold of "x >= j" (lower, inclusive), "x > j", "x <= j" or "x < j", exactly and as
 * doubles: the tighter of the two. */
static void bound_of(json_t *j, int upper, int strict, dbound *out) {
  const double X = json_number_value(j) + 0.0; /* no negative zero */
  out->set = 1;
  out->strict = strict;
  if (json_is_integer(j)) dec_from_ll(json_integer_value(j), &out->v);
  else dec_shortest(X, &out->v);
  /* as doubles: x >= X from the midpoint below X, x > X from the one above, and so on */
  dbound *db = malloc(sizeof *db);
  if (!db) return; /* the exact threshold alone (never reached: a few KB) */
  int tie_up;
  midpoint(upper == strict ? nextafter(X, -INFINITY) : X, &db->v, &tie_up);
  db->set = 1;
  db->strict = upper ? tie_up : !tie_up;
  tighter(out, db, upper);
  free(db);
}

/* The lower (upper) threshold of schema s into *out; 0 or -1. */
static int read_bound(sc *c, json_t *s, int upper, dbound *out) {
  const char *kw = upper ? "maximum" : "minimum", *ex = upper ? "exclusiveMaximum" : "exclusiveMinimum";
  json_t *in = json_object_get(s, kw), *e = json_object_get(s, ex);
  out->set = 0;
  if (in && !json_is_number(in)) return sc_fail(c, "%s must be a number", kw);
  if (e && !json_is_number(e) && !json_is_boolean(e))
    return sc_fail(c, "%s must be a number (or, in draft 4, a boolean)", ex);
  if (json_is_boolean(e) && !in) return sc_fail(c, "%s as a boolean (draft 4) needs %s beside it", ex, kw);
  if ((in && fabs(json_number_value(in)) > BOUND_MAX) || (json_is_number(e) && fabs(json_number_value(e)) > BOUND_MAX))
    return sc_fail(c, "%s beyond 1e17 is not supported", in && fabs(json_number_value(in)) > BOUND_MAX ? kw : ex);
  dbound *b = malloc(sizeof *b);
  if (!b) return sc_fail(c, "out of memory");
  if (in) {
    bound_of(in, upper, json_is_true(e), b);
    tighter(out, b, upper);
  }
  if (json_is_number(e)) {
    bound_of(e, upper, 1, b);
    tighter(out, b, upper);
  }
  free(b);
  return 0;
}

/* The least integer satisfying a lower threshold, or the greatest satisfying an upper one. */
static long long int_bound(const dbound *b, int upper) {
  const long long v = b->v.neg ? -b->v.ip : b->v.ip; /* toward zero */
  if (!b->v.fp[0]) return upper ? v - b->strict : v + b->strict;
  return upper ? (b->v.neg ? v - 1 : v) : (b->v.neg ? v : v + 1);
}

/* ---- integer ranges ---- */

/* Digits of the same length n: a <= x <= b, as a GBNF expression. */
static void same_len(q35_buf *o, const char *a, const char *b, int n) {
  if (n == 0) {
    q35_buf_str(o, "\"\"");
    return;
  }
  if (a[0] == b[0]) {
    q35_buf_printf(o, "\"%c\" ", a[0]);
    same_len(o, a + 1, b + 1, n - 1);
    return;
  }
  int full = 1; /* a = 00..0, b = 99..9: any digits (without this the two branches below
                 * would each recurse into the same range: 2^n in size) */
  for (int i = 0; i < n && full; i++) full = a[i] == '0' && b[i] == '9';
  if (full) {
    q35_buf_printf(o, "[0-9]{%d}", n);
    return;
  }
  char nines[24], zeros[24];
  memset(nines, '9', (size_t)n);
  memset(zeros, '0', (size_t)n);
  q35_buf_str(o, "( ");
  q35_buf_printf(o, "\"%c\" ( ", a[0]);
  same_len(o, a + 1, nines, n - 1);
  q35_buf_str(o, " )");
  if (a[0] + 1 <= b[0] - 1) q35_buf_printf(o, " | [%c-%c] [0-9]{%d}", a[0] + 1, b[0] - 1, n - 1);
  q35_buf_printf(o, " | \"%c\" ( ", b[0]);
  same_len(o, zeros, b + 1, n - 1);
  q35_buf_str(o, " ) )");
}

/* 0 <= lo <= x <= hi (hi < 0: unbounded), without leading zeros. */
static void uint_range(q35_buf *o, long long lo, long long hi) {
  char a[24], b[24];
  const int la = snprintf(a, sizeof a, "%lld", lo);
  const int lb = hi < 0 ? la : snprintf(b, sizeof b, "%lld", hi);
  q35_buf_str(o, "( ");
  for (int len = la; len <= lb; len++) {
    char x[24], y[24];
    if (len == la) memcpy(x, a, (size_t)la + 1);
    else {
      x[0] = '1';
      memset(x + 1, '0', (size_t)len - 1);
      x[len] = 0;
    }
    if (hi >= 0 && len == lb) memcpy(y, b, (size_t)lb + 1);
    else {
      memset(y, '9', (size_t)len);
      y[len] = 0;
    }
    if (len > la) q35_buf_str(o, " | ");
    same_len(o, x, y, len);
  }
  if (hi < 0) q35_buf_printf(o, " | [1-9] [0-9]{%d,}", la);
  q35_buf_str(o, " )");
}

#define NO_BOUND LLONG_MIN

/* lo <= x <= hi over the integers (NO_BOUND: unbounded on that side), no negative zero. */
static void int_range(q35_buf *o, long long lo, long long hi) {
  int alts = 0;
  q35_buf_str(o, "( ");
  if (lo == NO_BOUND || lo < 0) { /* negatives: -m with max(1, -hi) <= m <= -lo */
    const long long mlo = hi != NO_BOUND && hi < 0 ? -hi : 1, mhi = lo == NO_BOUND ? -1 : -lo;
    q35_buf_str(o, "\"-\" ");
    uint_range(o, mlo, mhi);
    alts++;
  }
  if (hi == NO_BOUND || hi >= 0) {
    if (alts++) q35_buf_str(o, " | ");
    uint_range(o, lo == NO_BOUND || lo < 0 ? 0 : lo, hi == NO_BOUND ? -1 : hi);
  }
  q35_buf_str(o, " )");
}

/* ---- fraction ranges ---- */

/* The digit automaton of the fraction digits D (after the point; none = value 0) with
 * ra <= 0.D <= rb (either side absent, or strict). State (i, lt, ut): i digits read, lt: all
 * equal to ra's so far, ut: to rb's; at i = n (past every bound digit) the state stays. */
typedef struct {
  const char *ra, *rb; /* NULL: no bound on that side */
  size_t la, lb, n;
  int sa, sb, fmax; /* strictness; at most fmax significant fraction digits (-1: any) */
  unsigned char *prod, *reach;
  char base[SC_NAME];
} fdp;

#define FST(i, lt, ut) ((i) * 4 + (lt) * 2 + (ut))

static int fdig(const char *r, size_t len, size_t i) { return i < len ? r[i] - '0' : 0; }

static int f_accept_empty(const fdp *f, size_t i, int lt, int ut) {
  return (!lt || (i >= f->la && !f->sa)) && (!ut || i < f->lb || !f->sb);
}

/* The digits d in [*lo, *hi] that may follow state (i, lt, ut). */
static void f_digits(const fdp *f, size_t i, int lt, int ut, int *lo, int *hi) {
  *lo = lt ? fdig(f->ra, f->la, i) : 0;
  *hi = ut ? fdig(f->rb, f->lb, i) : 9;
  if (f->fmax >= 0 && i >= (size_t)f->fmax) *hi = 0;
}

static size_t f_next(const fdp *f, size_t i, int lt, int ut, int d) {
  const size_t j = i + 1 < f->n ? i + 1 : f->n;
  return FST(j, lt && d == fdig(f->ra, f->la, i), ut && d == fdig(f->rb, f->lb, i));
}

/* The reference to a state: a rule name, or the inline language of a free state. */
static void f_ref(const fdp *f, size_t st, q35_buf *o) {
  const size_t i = st / 4;
  if (st % 4) q35_buf_printf(o, "%s-%zu-%zu", f->base, i, st % 4);
  else if (f->fmax < 0) q35_buf_str(o, "[0-9]*");
  else if (i >= (size_t)f->fmax) q35_buf_str(o, "\"0\"*");
  else q35_buf_printf(o, "[0-9]{0,%zu} \"0\"*", (size_t)f->fmax - i);
}

/* The non-empty continuations of a state: its digit alternatives; the number written. */
static int f_alts(const fdp *f, size_t st, q35_buf *o, int alts) {
  const size_t i = st / 4;
  int lo, hi;
  f_digits(f, i, st >> 1 & 1, st & 1, &lo, &hi);
  for (int d = lo; d <= hi;) {
    const size_t nx = f_next(f, i, st >> 1 & 1, st & 1, d);
    int e = d;
    while (e + 1 <= hi && f_next(f, i, st >> 1 & 1, st & 1, e + 1) == nx) e++;
    if (f->prod[nx]) {
      if (alts++) q35_buf_str(o, " | ");
      if (e == d) q35_buf_printf(o, "\"%d\" ", d);
      else q35_buf_printf(o, "[%d-%d] ", d, e);
      f_ref(f, nx, o);
    }
    d = e + 1;
  }
  return alts;
}

static void f_mark(fdp *f, size_t st) {
  if (f->reach[st] || !f->prod[st] || st % 4 == 0) return;
  f->reach[st] = 1;
  int lo, hi;
  f_digits(f, st / 4, st >> 1 & 1, st & 1, &lo, &hi);
  for (int d = lo; d <= hi; d++) f_mark(f, f_next(f, st / 4, st >> 1 & 1, st & 1, d));
}

/* The optional fraction part (with its point) whose digits satisfy the bounds, appended to o;
 * 0, or 1 when no fraction satisfies them (nothing appended). */
static int frac_range(sc *c, const char *ra, int sa, const char *rb, int sb, int fmax, q35_buf *o) {
  fdp f = {ra, rb, ra ? strlen(ra) : 0, rb ? strlen(rb) : 0, 0, sa, sb, fmax, NULL, NULL, {0}};
  f.n = f.la > f.lb ? f.la : f.lb;
  if (fmax >= 0 && (size_t)fmax > f.n) f.n = (size_t)fmax;
  const size_t ns = (f.n + 1) * 4;
  f.prod = calloc(ns, 1);
  f.reach = calloc(ns, 1);
  if (!f.prod || !f.reach) {
    free(f.prod);
    free(f.reach);
    return sc_fail(c, "out of memory"), 0;
  }
  /* productive states, backwards: at i = n the states only loop (digit 0) or fall to free
   * (flag subsets), so the order 0, 1, 2, 3 sees every target first */
  for (size_t i = f.n + 1; i-- > 0;)
    for (int fl = 0; fl < 4; fl++) {
      const int lt = fl >> 1, ut = fl & 1;
      if ((lt && !ra) || (ut && !rb)) continue;
      int p = f_accept_empty(&f, i, lt, ut), lo, hi;
      f_digits(&f, i, lt, ut, &lo, &hi);
      for (int d = lo; d <= hi && !p; d++) {
        const size_t nx = f_next(&f, i, lt, ut, d);
        if (nx != FST(i, lt, ut)) p = f.prod[nx];
      }
      f.prod[FST(i, lt, ut)] = (unsigned char)p;
    }
  const size_t start = FST(0, ra != NULL, rb != NULL);
  int empty_ok = f_accept_empty(&f, 0, ra != NULL, rb != NULL), rc = 0;
  sc_new_name(c, f.base);
  q35_buf alts = {0};
  const int n_alts = f_alts(&f, start, &alts, 0);
  if (!n_alts && !empty_ok) {
    rc = 1;
  } else if (!n_alts) {
    q35_buf_str(o, "\"\"");
  } else {
    q35_buf_printf(o, "( \".\" ( %s ) )%s", alts.p, empty_ok ? "?" : "");
    int lo, hi;
    f_digits(&f, 0, ra != NULL, rb != NULL, &lo, &hi);
    for (int d = lo; d <= hi; d++) f_mark(&f, f_next(&f, 0, ra != NULL, rb != NULL, d));
    for (size_t st = 0; st < ns; st++) {
      if (!f.reach[st]) continue;
      q35_buf r = {0};
      const int e = f_accept_empty(&f, st / 4, st >> 1 & 1, st & 1);
      if (e) q35_buf_str(&r, "\"\"");
      f_alts(&f, st, &r, e);
      char nm[SC_NAME + 48];
      snprintf(nm, sizeof nm, "%s-%zu-%zu", f.base, st / 4, st % 4);
      sc_put_rule(c, nm, &r);
    }
  }
  q35_buf_free(&alts);
  free(f.prod);
  free(f.reach);
  return rc;
}

/* Any fraction with at most fmax significant digits (-1: any). */
static void frac_any(q35_buf *o, int fmax) {
  if (fmax < 0) q35_buf_str(o, "( \".\" [0-9]+ )?");
  else if (fmax == 0) q35_buf_str(o, "( \".\" \"0\"+ )?");
  else q35_buf_printf(o, "( \".\" [0-9]{1,%d} \"0\"* )?", fmax);
}

/* Magnitudes y (no sign, no exponent) with A <= y <= B (B NULL: unbounded; either strict) as
 * alternatives appended to o; the number written. */
static int mag_range(sc *c, const dec *A, int sa, const dec *B, int sb, int fmax, q35_buf *o, int alts) {
  if (B && (mag_cmp(A, B) > 0 || (mag_cmp(A, B) == 0 && (sa || sb)))) return alts;
  if (!B || A->ip + 1 <= B->ip - 1) { /* integer parts strictly between */
    q35_buf_str(o, alts++ ? " | " : "");
    uint_range(o, A->ip + 1, B ? B->ip - 1 : -1);
    q35_buf_str(o, " ");
    frac_any(o, fmax);
  }
  const int same = B && A->ip == B->ip;
  q35_buf f = {0};
  if (!frac_range(c, A->fp, sa, same ? B->fp : NULL, sb, fmax, &f)) {
    q35_buf_printf(o, "%s\"%lld\" %s", alts++ ? " | " : "", A->ip, f.p ? f.p : "");
  }
  q35_buf_free(&f);
  if (B && !same && !frac_range(c, NULL, 0, B->fp, sb, fmax, &f))
    q35_buf_printf(o, "%s\"%lld\" %s", alts++ ? " | " : "", B->ip, f.p ? f.p : "");
  q35_buf_free(&f);
  return alts;
}

/* A number between the thresholds, without an exponent: the non-negative part, then "-" and
 * the magnitudes of the negative part (above 0: no negative zero). */
static void number_range(sc *c, const dbound *lo, const dbound *hi, int fmax, q35_buf *o) {
  dec *zero = calloc(1, sizeof *zero), *m1 = calloc(1, sizeof *m1), *m2 = calloc(1, sizeof *m2);
  if (!zero || !m1 || !m2) {
    sc_fail(c, "out of memory");
  } else {
    int alts = 0;
    q35_buf_str(o, "( ");
    if (!hi->set || !hi->v.neg) { /* x >= 0 */
      const int from_lo = lo->set && !lo->v.neg;
      alts = mag_range(c, from_lo ? &lo->v : zero, from_lo && lo->strict, hi->set ? &hi->v : NULL, hi->strict, fmax, o, alts);
    }
    if (!lo->set || lo->v.neg) { /* x < 0: -y with max(0, -hi) <= y <= -lo, y > 0 */
      q35_buf neg = {0};
      const int to_hi = hi->set && hi->v.neg;
      *m1 = to_hi ? hi->v : *zero;
      m1->neg = 0;
      if (lo->set) {
        *m2 = lo->v;
        m2->neg = 0;
      }
      if (mag_range(c, m1, to_hi ? hi->strict : 1, lo->set ? m2 : NULL, lo->strict, fmax, &neg, 0))
        q35_buf_printf(o, "%s\"-\" ( %s )", alts++ ? " | " : "", neg.p);
      q35_buf_free(&neg);
    }
    if (!alts) q35_buf_str(o, "nothing");
    q35_buf_str(o, " )");
  }
  free(zero);
  free(m1);
  free(m2);
}

/* ---- multipleOf ---- */
#define MULT_MAX 1000

/* Non-negative multiples of k (without 0 unless zero) in decimal without leading zeros, as an
 * expression into o. */
static void uint_multiples(sc *c, long long k, int zero, q35_buf *o) {
  char base[SC_NAME], nm[SC_NAME + 24];
  sc_new_name(c, base);
  for (long long r = 0; r < k; r++) {
    q35_buf b = {0};
    int alts = 0, done[10] = {0};
    if (r == 0) q35_buf_str(&b, alts++ ? " | \"\"" : "\"\"");
    for (int d = 0; d < 10; d++) {
      if (done[d]) continue;
      const long long t = (10 * r + d) % k;
      q35_buf_str(&b, alts++ ? " | [" : "[");
      for (int e = d; e < 10; e++)
        if (!done[e] && (10 * r + e) % k == t) {
          q35_buf_char(&b, (char)('0' + e));
          done[e] = 1;
        }
      q35_buf_printf(&b, "] %s-%lld", base, t);
    }
    snprintf(nm, sizeof nm, "%s-%lld", base, r);
    sc_put_rule(c, nm, &b);
  }
  q35_buf_str(o, zero ? "( \"0\" | " : "( ");
  for (int d = 1; d < 10; d++) q35_buf_printf(o, "%s\"%d\" %s-%lld", d > 1 ? " | " : "", d, base, d % k);
  q35_buf_str(o, " )");
}

/* The bounds of s: 0 or -1. */
static int read_bounds(sc *c, json_t *s, dbound **lo, dbound **hi) {
  *lo = malloc(sizeof **lo);
  *hi = malloc(sizeof **hi);
  if (!*lo || !*hi) return sc_fail(c, "out of memory");
  return read_bound(c, s, 0, *lo) || read_bound(c, s, 1, *hi) ? -1 : 0;
}

static int gen_multiple(sc *c, json_t *s, int integer, json_t *mo, dbound *dlo, dbound *dhi, char *name) {
  if (!json_is_number(mo) || json_number_value(mo) <= 0) return sc_fail(c, "multipleOf must be a number above 0");
  const double kv = json_number_value(mo);
  const int lo_set = dlo->set, hi_set = dhi->set;
  const long long lo = lo_set ? int_bound(dlo, 0) : 0, hi = hi_set ? int_bound(dhi, 1) : 0;
  q35_buf b = {0};
  if (kv != floor(kv)) {
    int digits = 0;
    for (int sdig = 1; sdig <= 9 && !digits; sdig++)
      if (fabs(kv * pow(10, sdig) - 1) < 1e-9) digits = sdig;
    if (!digits) return sc_fail(c, "multipleOf %g is not supported (integers and 0.1, 0.01, ... are)", kv);
    if (integer) return sc_gen_number_plain(c, s, 1, name); /* every integer is a multiple of 10^-s */
    if (lo_set || hi_set) number_range(c, dlo, dhi, digits, &b);
    else q35_buf_printf(&b, "\"-\"? uint ( \".\" [0-9]{1,%d} \"0\"* )?", digits);
  } else {
    if (kv > 1e15) return sc_fail(c, "multipleOf beyond 1e15 is not supported");
    const long long k = (long long)kv;
    const char *frac = integer ? "" : " ( \".\" \"0\"+ )?";
    if (lo_set && hi_set) {
      long long first = lo >= 0 ? (lo + k - 1) / k : -((-lo) / k), last = hi >= 0 ? hi / k : -((-hi + k - 1) / k);
      if (last - first + 1 > MULT_MAX)
        return sc_fail(c, "multipleOf %lld with bounds holding over %d multiples is not supported", k, MULT_MAX);
      int alts = 0;
      q35_buf_str(&b, "( ");
      for (long long m = first; m <= last; m++) q35_buf_printf(&b, "%s\"%lld\"", alts++ ? " | " : "", m * k);
      q35_buf_printf(&b, "%s )%s", alts ? "" : "nothing", frac);
    } else {
      if (hi_set || (lo_set && lo != 0 && lo != 1))
        return sc_fail(c, "multipleOf %lld with a one-sided bound other than minimum 0 or 1 is not supported", k);
      if (k > MULT_MAX) return sc_fail(c, "multipleOf %lld without bounds is not supported (at most %d)", k, MULT_MAX);
      q35_buf_str(&b, lo_set ? "" : "\"-\"? ");
      uint_multiples(c, k, !(lo_set && lo == 1), &b);
      q35_buf_str(&b, frac);
    }
  }
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
}

int sc_gen_number(sc *c, json_t *s, int integer, char *name) {
  json_t *mo = json_object_get(s, "multipleOf");
  if (!mo) return sc_gen_number_plain(c, s, integer, name);
  dbound *lo, *hi;
  const int rc = read_bounds(c, s, &lo, &hi) ? -1 : gen_multiple(c, s, integer, mo, lo, hi, name);
  free(lo);
  free(hi);
  return rc;
}

int sc_gen_number_plain(sc *c, json_t *s, int integer, char *name) {
  dbound *lo, *hi;
  int rc = read_bounds(c, s, &lo, &hi);
  if (!rc && !lo->set && !hi->set) {
    snprintf(name, SC_NAME, integer ? "integer" : "number");
  } else if (!rc) {
    q35_buf b = {0};
    if (!integer) {
      number_range(c, lo, hi, -1, &b);
    } else {
      const long long l = lo->set ? int_bound(lo, 0) : NO_BOUND, h = hi->set ? int_bound(hi, 1) : NO_BOUND;
      if (lo->set && hi->set && l > h) q35_buf_str(&b, "nothing");
      else int_range(&b, l, h);
    }
    sc_new_name(c, name);
    sc_put_rule(c, name, &b);
  }
  free(lo);
  free(hi);
  return c->failed ? -1 : rc;
}
