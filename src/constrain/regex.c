/*
 * regex.c - a regular expression (the ECMAScript subset JSON Schema's `pattern` uses) written
 * as a GBNF expression.
 *
 * Supported: literals; escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H..} and escaped punctuation;
 * classes [..] and [^..] with ranges and \d \D \w \W \s \S inside; . (any code point but a line
 * terminator, as in ECMAScript); | ; groups ( ), (?: ), (?<name> ); quantifiers * + ? {m} {m,}
 * {m,n}, with a lazy ? after them (same language). ^ at the start and $ at the end are anchors.
 * Refused, naming the offset: backreferences, lookaround, \b \B, ^ or $ elsewhere, possessive
 * quantifiers, unbalanced parentheses.
 *
 * Every class is computed as a set of code-point ranges and printed as a positive GBNF class,
 * so negations inside classes ([^\d], [\W]) need no special case. In JSON-string mode (a
 * schema `pattern` matches the decoded string, the grammar produces the encoded one), each
 * character that JSON must escape (" \ and U+0000..U+001F) becomes its escape: short forms
 * (\" \\ \b \f \n \r \t) or \u00XX.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "constrain/grammar.h"

#define MAX_DEPTH 100

typedef struct {
  uint32_t lo, hi;
} range;

typedef struct {
  range *r;
  size_t n, cap;
} rset;

typedef struct {
  const char *s, *start, *end;
  q35_buf out;
  int json; /* JSON-string mode */
  int depth;
  q35_err *err;
} rx;

static int rx_fail(rx *x, const char *at, const char *what) {
  return q35_seterr(x->err, "regex: offset %d: %s", (int)(at - x->start), what);
}

static int rs_add(rset *s, uint32_t lo, uint32_t hi) {
  if (q35_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) return -1;
  s->r[s->n++] = (range){lo, hi};
  return 0;
}

static int cmp_range(const void *a, const void *b) {
  const range *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void rs_norm(rset *s) {
  if (!s->n) return;
  qsort(s->r, s->n, sizeof *s->r, cmp_range);
  size_t m = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (m && s->r[i].lo <= s->r[m - 1].hi + 1) {
      if (s->r[i].hi > s->r[m - 1].hi) s->r[m - 1].hi = s->r[i].hi;
    } else {
      s->r[m++] = s->r[i];
    }
  }
  s->n = m;
}

static int rs_negate(rset *s) {
  rs_norm(s);
  rset c = {0};
  uint32_t next = 0;
  for (size_t i = 0; i <= s->n; i++) {
    const uint32_t lo = i < s->n ? s->r[i].lo : 0x110000;
    if (lo > next && rs_add(&c, next, lo - 1)) {
      free(c.r);
      return -1;
    }
    if (i < s->n) next = s->r[i].hi + 1;
  }
  free(s->r);
  *s = c;
  return 0;
}

/* The \d \w \s classes (ECMAScript: \s is the WhiteSpace and LineTerminator code points). */
static int rs_shorthand(rset *s, char c) {
  rset t = {0};
  int rc = 0;
  const char lc = (char)(c | 0x20);
  if (lc == 'd') rc = rs_add(&t, '0', '9');
  else if (lc == 'w') rc = rs_add(&t, '0', '9') || rs_add(&t, 'A', 'Z') || rs_add(&t, '_', '_') || rs_add(&t, 'a', 'z');
  else
    rc = rs_add(&t, '\t', '\r') || rs_add(&t, ' ', ' ') || rs_add(&t, 0xA0, 0xA0) || rs_add(&t, 0x1680, 0x1680) ||
         rs_add(&t, 0x2000, 0x200A) || rs_add(&t, 0x2028, 0x2029) || rs_add(&t, 0x202F, 0x202F) ||
         rs_add(&t, 0x205F, 0x205F) || rs_add(&t, 0x3000, 0x3000) || rs_add(&t, 0xFEFF, 0xFEFF);
  if (!rc && c != lc) rc = rs_negate(&t);
  for (size_t i = 0; i < t.n && !rc; i++) rc = rs_add(s, t.r[i].lo, t.r[i].hi);
  free(t.r);
  return rc;
}

static int hexv(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One code point (UTF-8 decoded) at x->s; -1 on invalid UTF-8. */
static int64_t read_cp(rx *x) {
  const unsigned char c = (unsigned char)*x->s++;
  if (c < 0x80) return c;
  const int n = c >= 0xF0 && c < 0xF5 ? 3 : c >= 0xE0 && c < 0xF0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
  if (n < 0 || x->end - x->s < n) return -1;
  uint32_t v = c & (0x3F >> n);
  for (int i = 0; i < n; i++) {
    const unsigned char d = (unsigned char)*x->s++;
    if ((d & 0xC0) != 0x80) return -1;
    v = (v << 6) | (d & 0x3F);
  }
  if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF)) return -1;
  return v;
}

/* An escape after '\' (x->s past the backslash). Code point >= 0, or -2 when it was a
 * shorthand class added to cls (NULL: not allowed here), or -1 on error. */
static int64_t read_escape(rx *x, rset *cls) {
  const char *at = x->s - 1;
  if (x->s >= x->end) return rx_fail(x, at, "trailing backslash");
  const char c = *x->s++;
  switch (c) {
  case 'n': return '\n';
  case 'r': return '\r';
  case 't': return '\t';
  case 'f': return '\f';
  case 'v': return '\v';
  case '0': return 0;
  case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
    if (!cls) return rx_fail(x, at, "class escape here");
    return rs_shorthand(cls, c) ? -1 : -2;
  case 'x': case 'u': {
    uint32_t v = 0;
    if (c == 'u' && x->s < x->end && *x->s == '{') {
      x->s++;
      int n = 0;
      while (x->s < x->end && hexv((unsigned char)*x->s) >= 0 && n < 7) v = v * 16 + (uint32_t)hexv((unsigned char)*x->s++), n++;
      if (!n || x->s >= x->end || *x->s != '}' || v > 0x10FFFF) return rx_fail(x, at, "bad \\u{...} escape");
      x->s++;
      return v;
    }
    const int n = c == 'x' ? 2 : 4;
    for (int i = 0; i < n; i++) {
      const int h = x->s < x->end ? hexv((unsigned char)*x->s) : -1;
      if (h < 0) return rx_fail(x, at, "bad hex escape");
      v = v * 16 + (uint32_t)h;
      x->s++;
    }
    return v;
  }
  case 'b': case 'B': return rx_fail(x, at, "word boundaries (\\b, \\B) are not supported");
  case 'c': return rx_fail(x, at, "control escapes (\\cX) are not supported");
  case 'p': case 'P': return rx_fail(x, at, "Unicode property escapes (\\p, \\P) are not supported");
  case 'k': return rx_fail(x, at, "named backreferences are not supported");
  default:
    if (c >= '1' && c <= '9') return rx_fail(x, at, "backreferences are not supported");
    if ((unsigned char)c < 0x80 && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return (unsigned char)c;
    return rx_fail(x, at, "unknown escape");
  }
}

/* ---- printing ---- */

static void put_cp_escaped(q35_buf *o, uint32_t cp) { q35_buf_printf(o, "\\U%08X", (unsigned)cp); }

/* A set as a GBNF expression; in JSON mode the characters JSON escapes become alternatives. */
static void put_set(rx *x, rset *s) {
  rs_norm(s);
  q35_buf *o = &x->out;
  rset plain = {0};
  uint8_t special[0x60] = {0};
  int n_special = 0;
  static const range keep[3] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}; /* what JSON writes as is */
  for (size_t i = 0; i < s->n; i++) {
    const uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
    if (!x->json) {
      rs_add(&plain, lo, hi);
      continue;
    }
    for (int k = 0; k < 3; k++) {
      const uint32_t a = lo > keep[k].lo ? lo : keep[k].lo, b = hi < keep[k].hi ? hi : keep[k].hi;
      if (a <= b) rs_add(&plain, a, b);
    }
    for (uint32_t c = lo; c <= hi && c < 0x60; c++)
      if (c < 0x20 || c == '"' || c == '\\') special[c] = 1, n_special++;
  }
  if (n_special) q35_buf_char(o, '(');
  if (plain.n) {
    q35_buf_char(o, '[');
    for (size_t i = 0; i < plain.n; i++) {
      put_cp_escaped(o, plain.r[i].lo);
      if (plain.r[i].hi != plain.r[i].lo) {
        q35_buf_char(o, '-');
        put_cp_escaped(o, plain.r[i].hi);
      }
    }
    q35_buf_char(o, ']');
  } else if (!n_special) {
    q35_buf_str(o, "[^\\U00000000-\\U0010FFFF]"); /* the empty set */
  }
  static const char short_esc[0x20] = {[8] = 'b', [9] = 't', [10] = 'n', [12] = 'f', [13] = 'r'};
  int first = !plain.n;
  for (uint32_t c = 0; c < 0x60; c++) {
    if (!special[c]) continue;
    q35_buf_str(o, first ? " " : " | ");
    first = 0;
    if (c == '"') q35_buf_str(o, "\"\\\\\\\"\"");
    else if (c == '\\') q35_buf_str(o, "\"\\\\\\\\\"");
    else if (short_esc[c]) q35_buf_printf(o, "\"\\\\%c\"", short_esc[c]);
    else q35_buf_printf(o, "\"\\\\u00\" [%x%X] [%x%X]", (unsigned)(c >> 4), (unsigned)(c >> 4), c & 15u, c & 15u);
  }
  if (n_special) q35_buf_char(o, ')');
  free(plain.r);
}

static void put_cp(rx *x, uint32_t cp) {
  rset s = {0};
  if (rs_add(&s, cp, cp)) {
    x->out.oom = 1;
    return;
  }
  put_set(x, &s);
  free(s.r);
}

/* ---- parsing ---- */

static int parse_alt(rx *x);

static int parse_class(rx *x) {
  const char *at = x->s++;
  int negate = 0;
  if (x->s < x->end && *x->s == '^') {
    negate = 1;
    x->s++;
  }
  rset s = {0};
  while (x->s < x->end && *x->s != ']') {
    int64_t lo;
    if (*x->s == '\\') {
      x->s++;
      lo = read_escape(x, &s);
    } else {
      lo = read_cp(x);
      if (lo < 0) rx_fail(x, at, "invalid UTF-8");
    }
    if (lo == -1) goto fail;
    if (lo == -2) continue;
    int64_t hi = lo;
    if (x->s + 1 < x->end && *x->s == '-' && x->s[1] != ']') {
      x->s++;
      if (*x->s == '\\') {
        x->s++;
        hi = read_escape(x, NULL);
      } else {
        hi = read_cp(x);
        if (hi < 0) rx_fail(x, at, "invalid UTF-8");
      }
      if (hi < 0) goto fail;
      if (hi < lo) {
        rx_fail(x, at, "class range out of order");
        goto fail;
      }
    }
    if (rs_add(&s, (uint32_t)lo, (uint32_t)hi)) goto fail;
  }
  if (x->s >= x->end) {
    rx_fail(x, at, "unterminated character class");
    goto fail;
  }
  x->s++;
  if (negate && rs_negate(&s)) goto fail;
  put_set(x, &s);
  free(s.r);
  return 0;
fail:
  free(s.r);
  return -1;
}

static int parse_int(rx *x, long *v) {
  if (x->s >= x->end || *x->s < '0' || *x->s > '9') return -1;
  *v = 0;
  while (x->s < x->end && *x->s >= '0' && *x->s <= '9') {
    *v = *v * 10 + (*x->s++ - '0');
    if (*v > 100000) return -1;
  }
  return 0;
}

/* A quantifier after an atom, copied to the output; 0 when there was none. */
static int parse_quant(rx *x) {
  if (x->s >= x->end) return 0;
  const char *at = x->s;
  const char c = *x->s;
  if (c == '*' || c == '+' || c == '?') {
    x->s++;
    q35_buf_char(&x->out, c);
  } else if (c == '{') {
    x->s++;
    long m, n = -2;
    if (parse_int(x, &m)) {
      x->s = at; /* not a quantifier: a literal '{' (ECMAScript's Annex B) */
      return 0;
    }
    if (x->s < x->end && *x->s == ',') {
      x->s++;
      n = -1;
      if (x->s < x->end && *x->s != '}' && parse_int(x, &n)) return rx_fail(x, at, "bad {m,n} quantifier");
    }
    if (x->s >= x->end || *x->s != '}') {
      x->s = at;
      return 0;
    }
    x->s++;
    if (n >= 0 && n < m) return rx_fail(x, at, "quantifier {m,n} with n < m");
    if (n == -2) q35_buf_printf(&x->out, "{%ld}", m);
    else if (n == -1) q35_buf_printf(&x->out, "{%ld,}", m);
    else q35_buf_printf(&x->out, "{%ld,%ld}", m, n);
  } else {
    return 0;
  }
  if (x->s < x->end && *x->s == '?') x->s++; /* lazy: the same language */
  else if (x->s < x->end && *x->s == '+') return rx_fail(x, x->s, "possessive quantifiers are not supported");
  if (x->s < x->end && (*x->s == '*' || *x->s == '+' || *x->s == '{')) return rx_fail(x, x->s, "nothing to repeat");
  return 0;
}

static int parse_atom(rx *x) {
  const char *at = x->s;
  const char c = *x->s;
  if (c == '(') {
    x->s++;
    if (x->end - x->s >= 2 && x->s[0] == '?') {
      if (x->s[1] == ':') {
        x->s += 2;
      } else if (x->s[1] == '<' && x->end - x->s >= 3 && x->s[2] != '=' && x->s[2] != '!') {
        while (x->s < x->end && *x->s != '>') x->s++;
        if (x->s >= x->end) return rx_fail(x, at, "unterminated group name");
        x->s++;
      } else {
        return rx_fail(x, at, "lookaround and other (?...) groups are not supported");
      }
    }
    if (++x->depth > MAX_DEPTH) return rx_fail(x, at, "groups nested too deeply");
    q35_buf_char(&x->out, '(');
    if (parse_alt(x)) return -1;
    if (x->s >= x->end || *x->s != ')') return rx_fail(x, at, "unclosed (");
    x->s++;
    x->depth--;
    q35_buf_char(&x->out, ')');
    return 0;
  }
  if (c == '[') return parse_class(x);
  if (c == '.') {
    x->s++;
    rset s = {0};
    int rc = rs_add(&s, '\n', '\n') || rs_add(&s, '\r', '\r') || rs_add(&s, 0x2028, 0x2029) || rs_negate(&s);
    if (!rc) put_set(x, &s);
    free(s.r);
    return rc;
  }
  if (c == '\\') {
    x->s++;
    rset s = {0};
    const int64_t cp = read_escape(x, &s);
    if (cp == -2) put_set(x, &s);
    else if (cp >= 0) put_cp(x, (uint32_t)cp);
    free(s.r);
    return cp == -1 ? -1 : 0;
  }
  if (c == '*' || c == '+' || c == '?') return rx_fail(x, at, "nothing to repeat");
  if (c == '^' || c == '$') return rx_fail(x, at, "anchors (^, $) are supported only at the start and the end");
  if (c == ')') return rx_fail(x, at, "unmatched )");
  const int64_t cp = read_cp(x);
  if (cp < 0) return rx_fail(x, at, "invalid UTF-8");
  put_cp(x, (uint32_t)cp);
  return 0;
}

/* A sequence: atoms with quantifiers, up to | or ) or the end (a trailing $ when at top). */
static int parse_seq(rx *x) {
  q35_buf_str(&x->out, "(\"\"");
  while (x->s < x->end && *x->s != '|' && *x->s != ')') {
    if (*x->s == '$' && x->s + 1 == x->end && x->depth == 0) break;
    q35_buf_char(&x->out, ' ');
    if (parse_atom(x) || parse_quant(x)) return -1;
  }
  q35_buf_char(&x->out, ')');
  return 0;
}

static int parse_alt(rx *x) {
  q35_buf_char(&x->out, '(');
  if (parse_seq(x)) return -1;
  while (x->s < x->end && *x->s == '|') {
    x->s++;
    q35_buf_str(&x->out, " | ");
    if (parse_seq(x)) return -1;
  }
  q35_buf_char(&x->out, ')');
  return 0;
}

static int regex_gbnf(const char *re, size_t len, int search, int json, char **out, q35_err *err) {
  rx x = {re, re, re + len, {0}, json, 0, err};
  int anchored_start = 0, anchored_end = 0;
  if (x.s < x.end && *x.s == '^') {
    anchored_start = 1;
    x.s++;
  }
  if (len > (size_t)(x.s - re) && re[len - 1] == '$' && (len < 2 || re[len - 2] != '\\')) anchored_end = 1;
  const char *any = json ? NULL : "[\\U00000000-\\U0010FFFF]*";
  if (search && !anchored_start) {
    if (json) {
      rset all = {0};
      if (rs_add(&all, 0, 0x10FFFF)) return q35_seterr(err, "regex: out of memory");
      q35_buf_char(&x.out, '(');
      put_set(&x, &all);
      q35_buf_str(&x.out, ")* ");
      free(all.r);
    } else {
      q35_buf_str(&x.out, any);
      q35_buf_char(&x.out, ' ');
    }
  }
  if (parse_alt(&x)) {
    q35_buf_free(&x.out);
    return -1;
  }
  if (x.s < x.end && *x.s == ')') {
    q35_buf_free(&x.out);
    return rx_fail(&x, x.s, "unmatched )");
  }
  if (search && !anchored_end) {
    if (json) {
      rset all = {0};
      if (rs_add(&all, 0, 0x10FFFF)) return q35_seterr(err, "regex: out of memory");
      q35_buf_str(&x.out, " (");
      put_set(&x, &all);
      q35_buf_str(&x.out, ")*");
      free(all.r);
    } else {
      q35_buf_char(&x.out, ' ');
      q35_buf_str(&x.out, any);
    }
  }
  if (x.out.oom) {
    q35_buf_free(&x.out);
    return q35_seterr(err, "regex: out of memory");
  }
  *out = q35_buf_take(&x.out, NULL);
  return 0;
}

int cn_regex_to_gbnf(const char *re, size_t len, int search, char **out, q35_err *err) {
  return regex_gbnf(re, len, search, 0, out, err);
}

/* JSON-string mode, for schema.c: the expression matches the ENCODED string content. */
int cn_regex_to_gbnf_json(const char *re, size_t len, char **out, q35_err *err);
int cn_regex_to_gbnf_json(const char *re, size_t len, char **out, q35_err *err) {
  return regex_gbnf(re, len, 1, 1, out, err);
}
