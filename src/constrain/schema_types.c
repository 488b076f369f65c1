/*
 * schema_types.c - JSON Schema to GBNF for strings (lengths, pattern, formats), numbers and
 * integers (bounds as digit-range grammars, multipleOf) and arrays (items, prefixItems, counts,
 * contains).
 *
 * Integer bounds: [lo, hi] becomes alternatives over the digit count, and each same-length
 * range [a, b] a prefix-sharing chain (the usual digit-range construction): a first digit equal
 * to a's with the rest >= a's tail, first digits strictly between with any tail, or b's first
 * digit with the rest <= b's tail. Negative values are "-" then a range of magnitudes. Number
 * (non-integer) bounds are supported where they are 0 (a sign rule); others are refused.
 *
 * Formats: date (months with their day counts, February up to 29), time (hh:mm:ss, optional
 * fraction, Z or an offset), date-time, uuid, email (ajv-formats' grammar), uri (RFC 3986 with a
 * registered-name host), uri-template (RFC 6570, ajv-formats' check); others are refused.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/grammar.h"
#include "constrain/schema.h"

int cn_regex_to_gbnf_json(const char *re, size_t len, char **out, q35_err *err);

/* ---- strings ---- */

int sc_gen_string(sc *c, json_t *s, char *name) {
  json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
  json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
  if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)) || json_integer_value(mn) < 0 ||
      json_integer_value(mx) < 0)
    return sc_fail(c, "minLength / maxLength must be non-negative integers");
  if (pat && !json_is_string(pat)) return sc_fail(c, "pattern must be a string");
  if (fmt && !json_is_string(fmt)) return sc_fail(c, "format must be a string");
  if ((pat || fmt) && (mn || mx)) return sc_fail(c, "minLength / maxLength together with pattern or format is not supported");
  if (pat && fmt) return sc_fail(c, "pattern together with format is not supported");
  if (json_integer_value(mn) > 100000 || json_integer_value(mx) > 100000)
    return sc_fail(c, "minLength / maxLength above 100000 is not supported");
  q35_buf b = {0};
  if (pat) {
    char *expr;
    q35_err e2;
    const char *re = json_string_value(pat);
    if (cn_regex_to_gbnf_json(re, json_string_length(pat), &expr, &e2)) return sc_fail(c, "pattern: %s", e2.msg);
    q35_buf_printf(&b, "\"\\\"\" %s \"\\\"\"", expr);
    free(expr);
  } else if (fmt) {
    const char *f = json_string_value(fmt);
    static const char date[] = /* months with their day counts; February 29 in leap years only */
        "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
        " | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" )"
        " | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"
        " | ( [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( \"0\" [48] | [2468] [048] | [13579] [26] ) \"00\""
        " | \"0000\" ) \"-02-29\"";
    static const char time[] = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]+ )?"
                               " ( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
    static const char uuid[] = "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}";
    static const char atom[] = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+";
    static const char label[] = "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?";
    /* uri: RFC 3986 with a registered-name host (no IP literal), a subset of ajv-formats' uri */
#define PCT "\"%\" hex hex"
#define PCHAR "( [a-zA-Z0-9._~!$&'()*+,;=:@-] | " PCT " )"
    static const char uri[] =
        "[a-zA-Z] [a-zA-Z0-9+.-]* \":\" ( \"//\" ( ( [a-zA-Z0-9._~!$&'()*+,;=:-] | " PCT " )* \"@\" )?"
        " ( [a-zA-Z0-9._~!$&'()*+,;=-] | " PCT " )* ( \":\" [0-9]* )? ( \"/\" " PCHAR "* )*"
        " | \"/\" ( " PCHAR "+ ( \"/\" " PCHAR "* )* )? | " PCHAR "+ ( \"/\" " PCHAR "* )* )"
        " ( \"?\" ( " PCHAR " | [/?] )* )? ( \"#\" ( " PCHAR " | [/?] )* )?";
    /* uri-template: RFC 6570 level 4 as ajv-formats checks it: literals, %XX, {op var,var:N,var*} */
    static const char uri_template[] =
        "( [^\\x00-\\x20\"'<>%\\\\^`{|}] | " PCT " | \"{\" [+#./;?&=,!@|]? ut-var ( \",\" ut-var )* \"}\" )*";
#undef PCHAR
#undef PCT
    q35_buf_str(&b, "\"\\\"\" ");
    if (!strcmp(f, "date")) q35_buf_printf(&b, "( %s )", date);
    else if (!strcmp(f, "time")) q35_buf_printf(&b, "( %s )", time);
    else if (!strcmp(f, "date-time")) q35_buf_printf(&b, "( %s ) [tT ] ( %s )", date, time);
    else if (!strcmp(f, "uuid")) q35_buf_printf(&b, "( %s )", uuid);
    else if (!strcmp(f, "email")) q35_buf_printf(&b, "%s ( \".\" %s )* \"@\" ( %s \".\" )+ %s", atom, atom, label, label);
    else if (!strcmp(f, "uri")) q35_buf_str(&b, uri);
    else if (!strcmp(f, "uri-template")) q35_buf_str(&b, uri_template);
    else {
      q35_buf_free(&b);
      return sc_fail(c, "format \"%s\" is not supported (date, time, date-time, uuid, email, uri, uri-template are)", f);
    }
    q35_buf_str(&b, " \"\\\"\"");
  } else if (mn || mx) {
    const long long lo = mn ? json_integer_value(mn) : 0;
    if (mx) q35_buf_printf(&b, "\"\\\"\" char{%lld,%lld} \"\\\"\"", lo, (long long)json_integer_value(mx));
    else q35_buf_printf(&b, "\"\\\"\" char{%lld,} \"\\\"\"", lo);
    if (mx && json_integer_value(mx) < lo) {
      q35_buf_free(&b);
      q35_buf_str(&b, "nothing");
    }
  } else {
    snprintf(name, SC_NAME, "string");
    return 0;
  }
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
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

/* lo <= x <= hi over the integers (NO_BOUND: unbounded on that side). */
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

/* A bound keyword (draft 6+ exclusive* numbers, or draft 4 booleans beside minimum/maximum):
 * *v, *excl and *set. Integer schemas take any bound; number schemas integer-valued ones. */
static int bound(sc *c, json_t *s, const char *kw, const char *ex, int integer, int upper, long long *v, int *excl, int *set) {
  json_t *in = json_object_get(s, kw), *e = json_object_get(s, ex);
  double x;
  *excl = *set = 0;
  *v = 0;
  if (e && json_is_number(e) && (!in || json_is_number(in))) { /* exclusive as a number (maybe with the inclusive too) */
    const double xe = json_number_value(e);
    if (in && (upper ? json_number_value(in) < xe : json_number_value(in) > xe)) {
      x = json_number_value(in);
    } else {
      x = xe;
      *excl = 1;
    }
  } else if (in) {
    if (!json_is_number(in)) return sc_fail(c, "%s must be a number", kw);
    x = json_number_value(in);
    *excl = json_is_true(e);
  } else {
    return 0;
  }
  if (fabs(x) > 1e17) return sc_fail(c, "%s beyond 1e17 is not supported", kw);
  if (!integer && x != floor(x))
    return sc_fail(c, "%s (%g) on a number is not supported (numbers take integer-valued bounds)", *excl ? ex : kw, x);
  *set = 1;
  if (integer) { /* as an inclusive integer bound */
    double r = upper ? floor(x) : ceil(x);
    if (*excl && r == x) r += upper ? -1 : 1;
    *v = (long long)r;
    *excl = 0;
  } else {
    *v = (long long)x;
  }
  return 0;
}

#define FRAC_ANY "( \".\" [0-9]+ )?"
#define FRAC_ZERO "( \".\" \"0\"+ )?"
#define FRAC_NONZERO "\".\" [0-9]* [1-9] [0-9]*"

/* Magnitudes y = m.g (no exponent) with A <= y <= B (B < 0: unbounded), either end exclusive:
 * m strictly between A and B with any fraction, m = A (a nonzero fraction when exclusive),
 * m = B with a zero fraction (when inclusive). */
static void mag_range(q35_buf *o, long long A, int a_excl, long long B, int b_excl) {
  int alts = 0;
  q35_buf_str(o, "( ");
  if (B < 0 || B - 1 >= A + 1) {
    uint_range(o, A + 1, B < 0 ? -1 : B - 1);
    q35_buf_str(o, " " FRAC_ANY);
    alts++;
  }
  if (B >= 0 && B == A) {
    if (!a_excl && !b_excl) q35_buf_printf(o, "%s\"%lld\" " FRAC_ZERO, alts++ ? " | " : "", A);
  } else {
    q35_buf_printf(o, "%s\"%lld\" %s", alts++ ? " | " : "", A, a_excl ? FRAC_NONZERO : FRAC_ANY);
    if (B >= 0 && !b_excl) q35_buf_printf(o, " | \"%lld\" " FRAC_ZERO, B);
  }
  if (!alts) q35_buf_str(o, "nothing");
  q35_buf_str(o, " )");
}

/* A number between the bounds (without an exponent): the non-negative part, then "-" and the
 * magnitudes of the negative part. */
static void number_range(q35_buf *o, long long lo, int lo_x, int lo_set, long long hi, int hi_x, int hi_set) {
  int alts = 0;
  q35_buf_str(o, "( ");
  if (!hi_set || hi > 0 || (hi == 0 && !hi_x)) {
    const int from_lo = lo_set && lo >= 0;
    mag_range(o, from_lo ? lo : 0, from_lo ? lo_x : 0, hi_set ? hi : -1, hi_set ? hi_x : 0);
    alts++;
  }
  if (!lo_set || lo < 0) {
    const int to_hi = hi_set && hi < 0;
    q35_buf_str(o, alts++ ? " | \"-\" " : "\"-\" ");
    mag_range(o, to_hi ? -hi : 0, to_hi ? hi_x : 1, lo_set ? -lo : -1, lo_set ? lo_x : 0);
  }
  if (!alts) q35_buf_str(o, "nothing");
  q35_buf_str(o, " )");
}

/* ---- multipleOf ----
 * An integer k: the multiples are integers, so a number schema writes them as integers (with an
 * optional zero fraction). Unbounded (or bounded below by 0): a DFA over the remainder mod k
 * (k <= 1000); bounded on both sides: the multiples themselves (at most 1000 of them). k = 10^-s
 * (0.1, 0.01, ...) on a number: at most s significant fraction digits. Others are refused. */
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

static int gen_multiple(sc *c, json_t *s, int integer, json_t *mo, char *name) {
  if (!json_is_number(mo) || json_number_value(mo) <= 0) return sc_fail(c, "multipleOf must be a number above 0");
  const double kv = json_number_value(mo);
  long long lo, hi;
  int lo_x, hi_x, lo_set, hi_set;
  if (bound(c, s, "minimum", "exclusiveMinimum", 1, 0, &lo, &lo_x, &lo_set) ||
      bound(c, s, "maximum", "exclusiveMaximum", 1, 1, &hi, &hi_x, &hi_set))
    return -1;
  q35_buf b = {0};
  if (kv != floor(kv)) {
    int digits = 0;
    for (int sdig = 1; sdig <= 9 && !digits; sdig++)
      if (fabs(kv * pow(10, sdig) - 1) < 1e-9) digits = sdig;
    if (!digits) return sc_fail(c, "multipleOf %g is not supported (integers and 0.1, 0.01, ... are)", kv);
    if (integer) return sc_gen_number_plain(c, s, 1, name); /* every integer is a multiple of 10^-s */
    if (lo_set || hi_set) return sc_fail(c, "multipleOf %g together with bounds is not supported", kv);
    q35_buf_printf(&b, "\"-\"? uint ( \".\" [0-9]{1,%d} \"0\"* )?", digits);
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
  if (mo) return gen_multiple(c, s, integer, mo, name);
  return sc_gen_number_plain(c, s, integer, name);
}

int sc_gen_number_plain(sc *c, json_t *s, int integer, char *name) {
  long long lo, hi;
  int lo_x, hi_x, lo_set, hi_set;
  if (bound(c, s, "minimum", "exclusiveMinimum", integer, 0, &lo, &lo_x, &lo_set) ||
      bound(c, s, "maximum", "exclusiveMaximum", integer, 1, &hi, &hi_x, &hi_set))
    return -1;
  if (!lo_set && !hi_set) {
    snprintf(name, SC_NAME, integer ? "integer" : "number");
    return 0;
  }
  q35_buf b = {0};
  if (lo_set && hi_set && (lo > hi || (lo == hi && (lo_x || hi_x)))) q35_buf_str(&b, "nothing");
  else if (!integer) number_range(&b, lo, lo_x, lo_set, hi, hi_x, hi_set);
  else int_range(&b, lo_set ? lo : NO_BOUND, hi_set ? hi : NO_BOUND);
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
}

/* ---- arrays ---- */

/* contains: an array of items (rest) with at least one element matching both rest and cont. */
static int gen_contains(sc *c, json_t *tuple, json_t *mn, json_t *mx, json_t *rest, json_t *cont, char *name) {
  if (tuple || mn || mx) return sc_fail(c, "contains together with a tuple or minItems / maxItems is not supported");
  char rn[SC_NAME] = "value", cn[SC_NAME];
  if (rest && sc_gen(c, rest, rn)) return -1;
  json_t *both = rest && !json_is_true(rest) ? json_pack("{s:[O,O]}", "allOf", rest, cont) : json_incref(cont);
  if (!both) return sc_fail(c, "out of memory");
  const int rc = sc_gen(c, both, cn);
  json_decref(both);
  if (rc) return -1;
  q35_buf b = {0};
  q35_buf_printf(&b, "\"[\" ws ( %s ws \",\" ws )* %s ws ( \",\" ws %s ws )* \"]\"", rn, cn, rn);
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
}

int sc_gen_array(sc *c, json_t *s, char *name) {
  json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
  json_t *addi = json_object_get(s, "additionalItems");
  json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
  if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)) || json_integer_value(mn) < 0 ||
      json_integer_value(mx) < 0)
    return sc_fail(c, "minItems / maxItems must be non-negative integers");
  if (json_integer_value(mn) > 10000 || json_integer_value(mx) > 10000)
    return sc_fail(c, "minItems / maxItems above 10000 is not supported");
  json_t *tuple = NULL, *rest = items;
  if (json_is_array(items)) { /* draft 4-7 tuple form */
    if (prefix) return sc_fail(c, "items as an array together with prefixItems");
    tuple = items;
    rest = addi;
  } else if (prefix) {
    if (!json_is_array(prefix)) return sc_fail(c, "prefixItems must be an array");
    tuple = prefix;
  }
  json_t *cont = json_object_get(s, "contains");
  if (cont) return gen_contains(c, tuple, mn, mx, rest, cont, name);
  /* additionalItems without a tuple has no effect in every draft that has it */
  const long long k = tuple ? (long long)json_array_size(tuple) : 0;
  const long long lo = json_integer_value(mn), hi = mx ? json_integer_value(mx) : -1;
  char *tn = calloc((size_t)k + 1, SC_NAME);
  if (!tn) return sc_fail(c, "out of memory");
  char rn[SC_NAME] = "value";
  int rc = 0;
  for (long long i = 0; i < k && !rc; i++) rc = sc_gen(c, json_array_get(tuple, (size_t)i), tn + i * SC_NAME);
  if (!rc && rest && sc_gen(c, rest, rn)) rc = -1;
  if (rc) {
    free(tn);
    return -1;
  }
  const int rest_none = !strcmp(rn, "nothing");
  /* positions 0 .. k-1 from the tuple (each past lo optional), then the rest repeated */
  q35_buf b = {0};
  const long long n_fixed = hi >= 0 && hi < k ? hi : k;
  int open = 0;
  q35_buf_str(&b, "\"[\" ws ");
  if (lo > n_fixed && (rest_none || (hi >= 0 && lo > hi))) {
    q35_buf_str(&b, "nothing");
  } else {
    for (long long i = 0; i < n_fixed; i++) {
      if (i >= lo) {
        q35_buf_str(&b, "( ");
        open++;
      }
      q35_buf_printf(&b, "%s%s ws ", i ? "\",\" ws " : "", tn + i * SC_NAME);
    }
    if (!rest_none && (hi < 0 || hi > k)) {
      const long long rmin = lo > k ? lo - k : 0, rmax = hi < 0 ? -1 : hi - k;
      if (k == 0) { /* the first element has no comma before it */
        q35_buf_printf(&b, "( %s ws ( \",\" ws %s ws )", rn, rn);
        if (rmax < 0) q35_buf_printf(&b, "{%lld,} )", rmin > 0 ? rmin - 1 : 0);
        else q35_buf_printf(&b, "{%lld,%lld} )", rmin > 0 ? rmin - 1 : 0, rmax - 1);
        if (rmin == 0) q35_buf_str(&b, "?");
      } else {
        q35_buf_printf(&b, "( \",\" ws %s ws )", rn);
        if (rmax < 0) q35_buf_printf(&b, "{%lld,}", rmin);
        else q35_buf_printf(&b, "{%lld,%lld}", rmin, rmax);
      }
    }
    for (; open > 0; open--) q35_buf_str(&b, " )?");
  }
  q35_buf_str(&b, " \"]\"");
  free(tn);
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
}
