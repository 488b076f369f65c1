/* test_constrain_number.c - JSON Schema number and integer bounds (minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum, draft 4's boolean forms, multipleOf beside them) against
 * two independent oracles: the exact decimal value (a digit-string comparison written here) and
 * the value as a double (libc's strtod, correctly rounded like every JSON parser that reads
 * doubles). The policy (docs/CONSTRAIN.md, "Numbers"): under a bound a numeral is accepted iff
 * it has no exponent, is not negative zero, and its value satisfies every bound both exactly
 * and as a double (an integer: no fraction either).
 *
 * The candidates sit where the two readings differ: the exact decimal expansions of the bound's
 * double and its neighbours, the midpoints between them (the rounding boundaries: long double
 * arithmetic, exact with a 64-bit significand, printed exactly by glibc), each of those with a
 * tiny amount (1e-22) added or taken away, the shortest decimals of the three doubles, and
 * integers around the bound, all with both signs. Each state the matcher reaches on a candidate
 * must still lead to a complete number (no dead ends a mask would let a model into). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "constrain/grammar.h"

/* ---- the exact oracle: plain decimal numerals ([-]digits[.digits]) compared as values ---- */

typedef struct {
  int neg;
  const char *ip, *fp; /* digits without leading (ip) / trailing (fp) zeros */
  size_t ni, nf;
} num;

static num parse_num(const char *s) {
  num n = {0};
  n.neg = *s == '-';
  if (n.neg) s++;
  while (*s == '0') s++;
  n.ip = s;
  while (s[n.ni] >= '0' && s[n.ni] <= '9') n.ni++;
  s += n.ni;
  n.fp = *s == '.' ? s + 1 : s;
  n.nf = strlen(n.fp);
  while (n.nf && n.fp[n.nf - 1] == '0') n.nf--;
  if (!n.ni && !n.nf) n.neg = 0; /* -0 is 0 */
  return n;
}

static int cmp_mag(const num *a, const num *b) {
  if (a->ni != b->ni) return a->ni < b->ni ? -1 : 1;
  const int c = strncmp(a->ip, b->ip, a->ni);
  if (c) return c < 0 ? -1 : 1;
  for (size_t i = 0; i < a->nf || i < b->nf; i++) {
    const char x = i < a->nf ? a->fp[i] : '0', y = i < b->nf ? b->fp[i] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

static int cmp_dec(const char *a, const char *b) {
  const num x = parse_num(a), y = parse_num(b);
  if (x.neg != y.neg) return x.neg ? -1 : 1;
  return x.neg ? -cmp_mag(&x, &y) : cmp_mag(&x, &y);
}

/* ---- schemas and the expected verdict ---- */

enum { GE, GT, LE, LT };

typedef struct {
  int n;
  int op[2];
  const char *v[2]; /* the bound as written in the schema (plain decimal) */
  int draft4;       /* exclusive bounds as draft 4 booleans */
  int integer;
  const char *mult; /* multipleOf, or NULL */
} spec;

static int satisfies(const spec *s, const char *t) {
  const num n = parse_num(t);
  if (t[0] == '-' && !n.ni && !n.nf) return 0;                /* no negative zero */
  if (strchr(t, 'e') || strchr(t, 'E')) return 0;              /* no exponent under a bound */
  if (s->integer && strchr(t, '.')) return 0;                   /* an integer has no fraction */
  const double x = strtod(t, NULL);
  for (int k = 0; k < s->n; k++) {
    const int c = cmp_dec(t, s->v[k]);
    const double X = strtod(s->v[k], NULL);
    switch (s->op[k]) {
    case GE: if (!(c >= 0 && x >= X)) return 0; break;
    case GT: if (!(c > 0 && x > X)) return 0; break;
    case LE: if (!(c <= 0 && x <= X)) return 0; break;
    default: if (!(c < 0 && x < X)) return 0; break;
    }
  }
  if (s->mult) { /* 10^-d: at most d fraction digits that are not trailing zeros; an integer k */
    const char *m = s->mult;
    if (strchr(m, '.')) {
      const size_t d = strlen(strchr(m, '.') + 1);
      if (n.nf > d) return 0;
    } else {
      if (n.nf) return 0;
      long long v = 0;
      for (size_t i = 0; i < n.ni; i++) v = v * 10 + (n.ip[i] - '0');
      if (v % atoll(m)) return 0;
    }
  }
  return 1;
}

static void schema_text(const spec *s, char *out, size_t cap) {
  static const char *const kw[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
  int n = snprintf(out, cap, "{\"type\":\"%s\"", s->integer ? "integer" : "number");
  for (int k = 0; k < s->n; k++) {
    const int op = s->op[k];
    if (s->draft4 && (op == GT || op == LT))
      n += snprintf(out + n, cap - (size_t)n, ",\"%s\":%s,\"%s\":true", kw[op - 1], s->v[k], kw[op]);
    else n += snprintf(out + n, cap - (size_t)n, ",\"%s\":%s", kw[op], s->v[k]);
  }
  if (s->mult) n += snprintf(out + n, cap - (size_t)n, ",\"multipleOf\":%s", s->mult);
  snprintf(out + n, cap - (size_t)n, "}");
}

/* ---- candidates ---- */

typedef struct {
  char **s;
  size_t n, cap;
} list;

static void add(list *l, const char *s) {
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->s[i], s)) return;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->s = realloc(l->s, l->cap * sizeof *l->s);
  }
  l->s[l->n++] = strdup(s);
}

/* A long double printed exactly, trailing zeros (and a bare point) removed. */
static void exact(long double x, char *out, size_t cap) {
  snprintf(out, cap, "%.1200Lf", x);
  char *p = strchr(out, '.');
  if (!p) return;
  size_t n = strlen(out);
  while (out[n - 1] == '0') out[--n] = 0;
  if (out[n - 1] == '.') out[n - 1] = 0;
}

/* The shortest decimal that reads back as x, written without an exponent. */
static void shortest(double x, char *out, size_t cap) {
  char e[64];
  for (int p = 1; p <= 17; p++) {
    snprintf(e, sizeof e, "%.*e", p - 1, fabs(x));
    if (strtod(e, NULL) == fabs(x)) break;
  }
  char dig[32];
  size_t nd = 0;
  const char *q = e;
  for (; *q != 'e'; q++)
    if (*q != '.') dig[nd++] = *q;
  const int ex = atoi(q + 1); /* the value is d.ddd * 10^ex */
  size_t n = 0;
  if (ex < 0) {
    n += (size_t)snprintf(out, cap, "0.");
    for (int k = 0; k < -ex - 1; k++) out[n++] = '0';
    memcpy(out + n, dig, nd);
    n += nd;
  } else {
    for (int k = 0; k <= ex || k < (int)nd; k++) {
      if (k == ex + 1) out[n++] = '.';
      out[n++] = k < (int)nd ? dig[k] : '0';
    }
  }
  out[n] = 0;
  if (strchr(out, '.')) {
    while (out[n - 1] == '0') out[--n] = 0;
    if (out[n - 1] == '.') out[--n] = 0;
  }
}

/* The magnitude of s (a plain decimal), a tiny bit more and a tiny bit less (a 1 or 9s appended
 * 22 digits past its last digit). */
static void add_around(list *l, const char *s) {
  char buf[1400], t[1500];
  const char *m = s[0] == '-' ? s + 1 : s;
  snprintf(buf, sizeof buf, "%s", m);
  if (strchr(buf, '.')) { /* no trailing zeros, no bare point */
    size_t n = strlen(buf);
    while (buf[n - 1] == '0') buf[--n] = 0;
    if (buf[n - 1] == '.') buf[--n] = 0;
  }
  add(l, buf);
  snprintf(t, sizeof t, "%s%s0000000000000000000001", buf, strchr(buf, '.') ? "" : ".");
  add(l, t);
  if (strchr(buf, '.')) { /* the last fraction digit is not 0: take one off, fill with 9s */
    snprintf(t, sizeof t, "%s", buf);
    t[strlen(t) - 1]--;
    strcat(t, "9999999999999999999999");
    add(l, t);
  } else if (strcmp(buf, "0")) {
    snprintf(t, sizeof t, "%lld.9999999999999999999999", atoll(buf) - 1);
    add(l, t);
  }
}

static void candidates(const char *bound, list *l) {
  const double X = strtod(bound, NULL);
  const double nb[3] = {nextafter(X, -INFINITY), X, nextafter(X, INFINITY)};
  char s[1400];
  add_around(l, bound);
  for (int k = 0; k < 3; k++) {
    exact((long double)nb[k], s, sizeof s);
    add_around(l, s);
    shortest(nb[k], s, sizeof s);
    add_around(l, s);
  }
  if (LDBL_MANT_DIG >= 55) /* the midpoints (exact in long double) */
    for (int k = 0; k < 2; k++) {
      exact(((long double)nb[k] + (long double)nb[k + 1]) / 2, s, sizeof s);
      add_around(l, s);
    }
  const long long i = (long long)X;
  for (long long d = -2; d <= 2; d++) {
    snprintf(s, sizeof s, "%lld", llabs(i + d));
    add(l, s);
  }
  add(l, "0");
  add(l, "0.0");
}

/* ---- the matcher ---- */

/* 1 when some string over '-', '.', '0'-'9' leads from state s to a complete state (a
 * breadth-first search; memo: per state 1 live, -1 dead, 0 unknown). */
typedef struct {
  signed char *memo;
  int32_t *stamp, *queue, gen;
  size_t cap;
} livecheck;

static void lc_fit(livecheck *lc, int32_t s) {
  if ((size_t)s < lc->cap) return;
  const size_t nc = (size_t)s * 2 + 1024;
  lc->memo = realloc(lc->memo, nc);
  lc->stamp = realloc(lc->stamp, nc * sizeof *lc->stamp);
  lc->queue = realloc(lc->queue, nc * sizeof *lc->queue);
  memset(lc->memo + lc->cap, 0, nc - lc->cap);
  memset(lc->stamp + lc->cap, 0, (nc - lc->cap) * sizeof *lc->stamp);
  lc->cap = nc;
}

static int live(cn_matcher *m, int32_t s, livecheck *lc) {
  lc_fit(lc, s);
  if (lc->memo[s]) return lc->memo[s] > 0;
  const int32_t gen = ++lc->gen;
  int32_t nq = 0;
  int found = 0;
  lc->queue[nq++] = s;
  lc->stamp[s] = gen;
  for (int32_t h = 0; h < nq && !found; h++) {
    const int32_t st = lc->queue[h];
    if (cn_complete(m, st) || lc->memo[st] == 1) found = 1;
    static const char bytes[] = "-.0123456789";
    for (const char *b = bytes; *b && !found; b++) {
      const int32_t nx = cn_step(m, st, (uint8_t)*b);
      if (nx < 0) continue;
      lc_fit(lc, nx);
      if (lc->stamp[nx] == gen) continue;
      lc->stamp[nx] = gen;
      lc->queue[nq++] = nx;
    }
  }
  lc->memo[s] = (signed char)(found ? 1 : -1);
  return found;
}

static int n_cases;

static void run_spec(const spec *s) {
  const clock_t t0 = clock();
  char text[4096];
  schema_text(s, text, sizeof text);
  q35_err err;
  char *gbnf = NULL;
  cn_grammar *g = NULL;
  list l = {0};
  for (int k = 0; k < s->n; k++) candidates(s->v[k], &l);
  const size_t n_pos = l.n; /* both signs */
  for (size_t k = 0; k < n_pos; k++) {
    char neg[1600];
    snprintf(neg, sizeof neg, "-%s", l.s[k]);
    add(&l, neg);
  }
  add(&l, "5e-1");
  add(&l, "1E2");
  if (cn_schema_to_gbnf(text, strlen(text), 0, 0, &gbnf, &err) || !(g = cn_gbnf_compile(gbnf, strlen(gbnf), &err))) {
    /* refused as empty: then no candidate may satisfy the bounds either */
    const int empty = gbnf && strstr(err.msg, "matches no string");
    size_t fits = 0;
    for (size_t i = 0; i < l.n; i++) fits += (size_t)satisfies(s, l.s[i]);
    CHECK(empty && fits == 0, "%s: %s (%zu candidates satisfy it)", text, err.msg, fits);
    for (size_t i = 0; i < l.n; i++) free(l.s[i]);
    free(l.s);
    free(gbnf);
    return;
  }
  cn_matcher *m = cn_matcher_new(g, &err);
  livecheck lc = {0};
  for (size_t i = 0; i < l.n; i++) {
    const char *t = l.s[i];
    int32_t st = cn_start(m);
    int dead_end = 0;
    for (const char *p = t; *p && st >= 0; p++) {
      st = cn_step(m, st, (uint8_t)*p);
      if (st >= 0 && !live(m, st, &lc)) dead_end = 1;
    }
    const int got = st >= 0 && cn_complete(m, st), want = satisfies(s, t);
    CHECK(got == want, "%s: \"%.80s%s\" (%zu chars) %s, should be %s", text, t, strlen(t) > 80 ? "..." : "", strlen(t),
          got ? "accepted" : "refused", want ? "accepted" : "refused");
    CHECK(!dead_end, "%s: \"%.80s\" reaches a state with no complete number after it", text, t);
    n_cases++;
  }
  for (size_t i = 0; i < l.n; i++) free(l.s[i]);
  free(l.s);
  if (getenv("NUM_VERBOSE"))
    fprintf(stderr, "%.3f s %s: %zu candidates, %d states, grammar %zu bytes\n", (double)(clock() - t0) / CLOCKS_PER_SEC,
            text, l.n, (int)cn_n_states(m), strlen(gbnf));
  free(lc.memo);
  free(lc.stamp);
  free(lc.queue);
  cn_matcher_free(m);
  cn_grammar_free(g);
  free(gbnf);
}

/* Bounds written plainly (a schema's number is read as a double; written with at most 15
 * significant digits, or as the shortest decimal of its double, it is its own value). */
static const char *const bounds[] = {
    "0.5", "2.75", "-1.25", "0.1", "0.3", "0.30000000000000004", "0.0000001", "0", "-0.0", "123.456", "7.0", "100",
    "-2.5", "0.000000000000000000000000000000012345", "100000000000000000", "-100000000000000000",
    "9007199254740993", "-9007199254740993", "99999999999999999", "4.35", "1.7976931348623157", "0.9999999999999999",
};

static void test_bounds(void) {
  const size_t nb = sizeof bounds / sizeof *bounds;
  for (size_t b = 0; b < nb; b++)
    for (int op = GE; op <= LT; op++)
      for (int integer = 0; integer < 2; integer++) {
        spec s = {1, {op, 0}, {bounds[b], NULL}, 0, integer, NULL};
        run_spec(&s);
        if (op == GT || op == LT) {
          s.draft4 = 1;
          run_spec(&s);
        }
      }
  /* two-sided ranges, including empty and one-point ones */
  static const struct {
    int op0;
    const char *v0;
    int op1;
    const char *v1;
  } ranges[] = {
      {GE, "0.1", LE, "0.3"},        {GT, "0.5", LT, "0.5000000000000001"}, {GT, "-0.5", LT, "0.5"},
      {GE, "2.75", LE, "2.75"},      {GT, "2.75", LE, "2.75"},              {GE, "-3.5", LT, "12"},
      {GT, "-7.25", LE, "-2.125"},   {GE, "0", LE, "0"},                    {GT, "0", LT, "0.0000001"},
      {GE, "1.5", LE, "1.25"},       {GT, "99.99", LT, "100.01"},           {GE, "-0.0000000001", LE, "0.0000000001"},
  };
  for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
    for (int integer = 0; integer < 2; integer++)
      for (int d4 = 0; d4 < 2; d4++) {
        spec s = {2, {ranges[r].op0, ranges[r].op1}, {ranges[r].v0, ranges[r].v1}, d4, integer, NULL};
        run_spec(&s);
      }
  /* multipleOf beside fractional bounds */
  static const struct {
    const char *mult, *lo, *hi;
    int integer;
  } mults[] = {
      {"0.01", "0.5", "2.75", 0}, {"0.1", "-1.25", "0.3", 0}, {"5", "0.5", "22.5", 0},
      {"5", "0.5", "22.5", 1},    {"0.001", "0", "0.0125", 0},
  };
  for (size_t k = 0; k < sizeof mults / sizeof *mults; k++) {
    spec s = {2, {GE, LT}, {mults[k].lo, mults[k].hi}, 0, mults[k].integer, mults[k].mult};
    run_spec(&s);
  }
}

/* Refusals name the problem. */
static void test_refused(void) {
  static const struct {
    const char *schema, *msg;
  } bad[] = {
      {"{\"type\":\"number\",\"minimum\":1e18}", "beyond 1e17"},
      {"{\"type\":\"number\",\"exclusiveMinimum\":true}", "needs minimum"},
      {"{\"type\":\"number\",\"maximum\":\"3\"}", "maximum must be a number"},
      {"{\"type\":\"number\",\"exclusiveMaximum\":[1]}", "exclusiveMaximum must be a number"},
      {"{\"type\":\"number\",\"multipleOf\":0.5,\"minimum\":0}", "multipleOf 0.5"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    q35_err err;
    char *g = NULL;
    const int rc = cn_schema_to_gbnf(bad[i].schema, strlen(bad[i].schema), 0, 0, &g, &err);
    CHECK(rc == -1 && strstr(err.msg, bad[i].msg), "%s: %s", bad[i].schema, rc ? err.msg : "accepted");
    free(g);
  }
}

int main(void) {
  test_bounds();
  test_refused();
  fprintf(stderr, "%d numerals checked\n", n_cases);
  return check_done("test_constrain_number");
}
