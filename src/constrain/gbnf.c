/*
 * gbnf.c - llama.cpp's GBNF grammar syntax compiled into the byte-level grammar (grammar.h).
 *
 * Syntax (as llama.cpp's grammar parser reads it):
 *   rule     name ::= alternatives        names: letters, digits, '-' and '_'
 *   alts     seq ('|' seq)*               a '|' may start a continuation line
 *   seq      item*                        a newline ends a rule, except inside ( )
 *   item     "literal" | [class] | [^class] | . | name | ( alts )  then quantifiers
 *   quant    * | + | ? | {m} | {m,} | {m,n}
 *   comment  # to the end of the line
 * Escapes in literals and classes: \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (and any other
 * punctuation escaped stands for itself). Literals and classes are code points (the text is
 * UTF-8); `.` is any code point. llama.cpp's token references (<name>, <[id]>) are refused.
 *
 * Quantifiers become right-recursive rules: X* is R ::= X R | "", X? is R ::= X | "",
 * X{m,n} is m copies of X then a chain of n - m nested optionals. A quantified item of more
 * than one element is first wrapped into a rule of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "constrain/grammar.h"

#define MAX_CODE (8 << 20) /* elements: a bound on what a grammar (or its repetitions) may expand to */
#define MAX_DEPTH 200      /* nesting of groups */

typedef struct {
  cn_elem *e;
  int32_t n, cap;
} evec;

typedef struct {
  evec *alts;
  int32_t n, cap;
  int defined;
  int32_t chain; /* k for Q_k of a bounded repetition's optional chain, else 0 */
  char *name;
} brule;

typedef struct {
  const char *s, *end, *start;
  brule *rules;
  int32_t n_rules, cap_rules;
  uint64_t (*cls)[4];
  int32_t n_cls, cap_cls;
  int32_t *cls_hash; /* open addressing over class bits, cap_hash slots (-1 empty) */
  int32_t cap_hash;
  size_t n_elems;
  int depth;
  q35_err *err;
  int failed;
} builder;

static void *grow(void *p, int32_t *cap, int32_t need, size_t size) {
  if (need <= *cap) return p;
  int32_t c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  void *q = realloc(p, (size_t)c * size);
  if (!q) return NULL;
  *cap = c;
  return q;
}

static int fail_at(builder *b, const char *at, const char *fmt, const char *what) {
  if (b->failed) return -1;
  b->failed = 1;
  int line = 1, col = 1;
  for (const char *p = b->start; p < at && p < b->end; p++) {
    if (*p == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  char msg[300];
  snprintf(msg, sizeof msg, fmt, what);
  q35_seterr(b->err, "grammar: line %d, column %d: %s", line, col, msg);
  return -1;
}

static int oom(builder *b) {
  if (!b->failed) q35_seterr(b->err, "grammar: out of memory");
  b->failed = 1;
  return -1;
}

static int push(builder *b, evec *v, uint8_t kind, int32_t arg) {
  if (++b->n_elems > MAX_CODE) {
    if (!b->failed) q35_seterr(b->err, "grammar: too large (over %d elements once repetitions are expanded)", MAX_CODE);
    b->failed = 1;
    return -1;
  }
  cn_elem *e = grow(v->e, &v->cap, v->n + 1, sizeof *v->e);
  if (!e) return oom(b);
  v->e = e;
  v->e[v->n++] = (cn_elem){kind, arg};
  return 0;
}

static int append(builder *b, evec *dst, const evec *src) {
  for (int32_t i = 0; i < src->n; i++)
    if (push(b, dst, src->e[i].kind, src->e[i].arg)) return -1;
  return 0;
}

/* ---- rules and classes ---- */

static int32_t new_rule(builder *b, const char *name, size_t len) {
  brule *r = grow(b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules);
  if (!r) return oom(b);
  b->rules = r;
  brule *nr = &b->rules[b->n_rules];
  memset(nr, 0, sizeof *nr);
  nr->name = q35_strndup(name, len);
  if (!nr->name) return oom(b);
  return b->n_rules++;
}

static int32_t find_rule(builder *b, const char *name, size_t len) {
  for (int32_t i = 0; i < b->n_rules; i++)
    if (strlen(b->rules[i].name) == len && !memcmp(b->rules[i].name, name, len)) return i;
  return new_rule(b, name, len);
}

static int32_t anon_rule(builder *b, const char *kind) {
  char name[48];
  snprintf(name, sizeof name, "%s-%d", kind, b->n_rules);
  const int32_t r = new_rule(b, name, strlen(name));
  if (r >= 0) b->rules[r].defined = 1;
  return r;
}

static evec *new_alt(builder *b, int32_t rule) {
  brule *r = &b->rules[rule];
  evec *a = grow(r->alts, &r->cap, r->n + 1, sizeof *r->alts);
  if (!a) {
    oom(b);
    return NULL;
  }
  r->alts = a;
  memset(&r->alts[r->n], 0, sizeof *r->alts);
  return &r->alts[r->n++];
}

static uint32_t cls_hash(const uint64_t *c) {
  uint64_t h = c[0] * 0x9E3779B97F4A7C15ull ^ c[1] * 0xC2B2AE3D27D4EB4Full ^ c[2] * 0x165667B19E3779F9ull ^
               c[3] * 0x27D4EB2F165667C5ull;
  return (uint32_t)(h ^ (h >> 29));
}

/* The index of a byte class (interned: equal classes share one index). */
static int32_t intern_cls(builder *b, const uint64_t *c) {
  if (b->n_cls * 2 >= b->cap_hash) {
    const int32_t cap = b->cap_hash ? b->cap_hash * 2 : 256;
    int32_t *h = malloc((size_t)cap * sizeof *h);
    if (!h) return oom(b);
    for (int32_t i = 0; i < cap; i++) h[i] = -1;
    for (int32_t i = 0; i < b->n_cls; i++) {
      uint32_t k = cls_hash(b->cls[i]) & (uint32_t)(cap - 1);
      while (h[k] >= 0) k = (k + 1) & (uint32_t)(cap - 1);
      h[k] = i;
    }
    free(b->cls_hash);
    b->cls_hash = h;
    b->cap_hash = cap;
  }
  uint32_t k = cls_hash(c) & (uint32_t)(b->cap_hash - 1);
  while (b->cls_hash[k] >= 0) {
    if (!memcmp(b->cls[b->cls_hash[k]], c, 32)) return b->cls_hash[k];
    k = (k + 1) & (uint32_t)(b->cap_hash - 1);
  }
  uint64_t(*nc)[4] = grow(b->cls, &b->cap_cls, b->n_cls + 1, sizeof *b->cls);
  if (!nc) return oom(b);
  b->cls = nc;
  memcpy(b->cls[b->n_cls], c, 32);
  b->cls_hash[k] = b->n_cls;
  return b->n_cls++;
}

static int push_byte_range(builder *b, evec *v, uint8_t lo, uint8_t hi) {
  uint64_t c[4] = {0, 0, 0, 0};
  for (unsigned x = lo; x <= hi; x++) c[x >> 6] |= 1ull << (x & 63);
  const int32_t id = intern_cls(b, c);
  return id < 0 ? -1 : push(b, v, CN_CLASS, id);
}

/* ---- code-point classes ---- */

typedef struct {
  uint32_t lo, hi;
} cp_range;

typedef struct {
  cp_range *r;
  int32_t n, cap;
} cp_set;

typedef struct {
  builder *b;
  int32_t rule;
  uint64_t ascii[4];
} cls_emit;

static void emit_seq(const uint8_t *lo, const uint8_t *hi, int n, void *vctx) {
  cls_emit *ce = vctx;
  if (n == 1) {
    for (unsigned x = lo[0]; x <= hi[0]; x++) ce->ascii[x >> 6] |= 1ull << (x & 63);
    return;
  }
  evec *a = new_alt(ce->b, ce->rule);
  if (!a) return;
  for (int i = 0; i < n; i++)
    if (push_byte_range(ce->b, a, lo[i], hi[i])) return;
}

static int cmp_range(const void *x, const void *y) {
  const cp_range *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Sorted, merged ranges; negated: the complement in [0, 0x10FFFF]. */
static int normalize(builder *b, cp_set *s, int negate) {
  if (s->n) qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range); /* an empty class has no array */
  int32_t m = 0;
  for (int32_t i = 0; i < s->n; i++) {
    if (m && s->r[i].lo <= s->r[m - 1].hi + 1) {
      if (s->r[i].hi > s->r[m - 1].hi) s->r[m - 1].hi = s->r[i].hi;
    } else {
      s->r[m++] = s->r[i];
    }
  }
  s->n = m;
  if (!negate) return 0;
  cp_set c = {0};
  uint32_t next = 0;
  for (int32_t i = 0; i <= s->n; i++) {
    const uint32_t lo = i < s->n ? s->r[i].lo : 0x110000;
    if (lo > next) {
      cp_range *r = grow(c.r, &c.cap, c.n + 1, sizeof *c.r);
      if (!r) {
        free(c.r);
        return oom(b);
      }
      c.r = r;
      c.r[c.n++] = (cp_range){next, lo - 1};
    }
    if (i < s->n) next = s->r[i].hi + 1;
  }
  free(s->r);
  *s = c;
  return 0;
}

/* A code-point set as elements of unit: one byte class when every member is ASCII, else a
 * rule whose alternatives are the ASCII class and the multi-byte sequences. */
static int cp_set_unit(builder *b, const cp_set *s, evec *unit) {
  int ascii_only = 1;
  for (int32_t i = 0; i < s->n; i++)
    if (s->r[i].hi >= 0x80) ascii_only = 0;
  cls_emit ce = {b, -1, {0, 0, 0, 0}};
  if (!ascii_only && (ce.rule = anon_rule(b, "class")) < 0) return -1;
  for (int32_t i = 0; i < s->n; i++) cn_utf8_ranges(s->r[i].lo, s->r[i].hi, emit_seq, &ce);
  if (b->failed) return -1;
  const int32_t id = intern_cls(b, ce.ascii);
  if (id < 0) return -1;
  if (ascii_only) return push(b, unit, CN_CLASS, id);
  if (ce.ascii[0] | ce.ascii[1]) {
    evec *a = new_alt(b, ce.rule);
    if (!a || push(b, a, CN_CLASS, id)) return -1;
  }
  if (b->rules[ce.rule].n == 0) { /* empty class: a rule with no alternative matches nothing */
    evec *a = new_alt(b, ce.rule);
    if (!a || push(b, a, CN_CLASS, id)) return -1;
  }
  return push(b, unit, CN_REF, ce.rule);
}

/* ---- lexing ---- */

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int is_word(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* One code point of a literal or class at b->s (escapes decoded); -1 on error. */
static int64_t read_char(builder *b) {
  const char *at = b->s;
  if (b->s >= b->end) return fail_at(b, at, "%s", "unexpected end of grammar");
  unsigned char c = (unsigned char)*b->s++;
  if (c == '\\') {
    if (b->s >= b->end) return fail_at(b, at, "%s", "unexpected end of grammar after \\");
    const char e = *b->s++;
    int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (nhex) {
      uint32_t v = 0;
      for (int i = 0; i < nhex; i++) {
        const int h = b->s < b->end ? hexval((unsigned char)*b->s) : -1;
        if (h < 0) return fail_at(b, at, "%s", "bad hex escape");
        v = v * 16 + (uint32_t)h;
        b->s++;
      }
      if (v > 0x10FFFF) return fail_at(b, at, "%s", "escape beyond U+10FFFF");
      return v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    default:
      if ((e >= '!' && e <= '/') || (e >= ':' && e <= '@') || (e >= '[' && e <= '`') || (e >= '{' && e <= '~'))
        return (unsigned char)e;
      return fail_at(b, at, "unknown escape \\%s", (char[]){e, 0});
    }
  }
  if (c < 0x80) return c;
  int n = c >= 0xF0 && c < 0xF5 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
  if (c >= 0xF5) n = -1;
  if (n < 0 || b->s + n > b->end) return fail_at(b, at, "%s", "invalid UTF-8");
  uint32_t v = c & (0x3F >> n);
  for (int i = 0; i < n; i++) {
    const unsigned char d = (unsigned char)*b->s++;
    if ((d & 0xC0) != 0x80) return fail_at(b, at, "%s", "invalid UTF-8");
    v = (v << 6) | (d & 0x3F);
  }
  if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF))
    return fail_at(b, at, "%s", "invalid UTF-8");
  return v;
}

static void skip_space(builder *b, int newlines) {
  while (b->s < b->end) {
    const char c = *b->s;
    if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
      b->s++;
    } else if (c == '#') {
      while (b->s < b->end && *b->s != '\n') b->s++;
    } else {
      break;
    }
  }
}

/* ---- parsing ---- */

static int parse_alts(builder *b, int32_t rule, int nested);

static int parse_literal(builder *b, evec *unit) {
  b->s++; /* the opening quote */
  while (b->s < b->end && *b->s != '"') {
    const int64_t cp = read_char(b);
    if (cp < 0) return -1;
    uint8_t u[4];
    const int n = cn_utf8_encode((uint32_t)cp, u);
    for (int i = 0; i < n; i++)
      if (push_byte_range(b, unit, u[i], u[i])) return -1;
  }
  if (b->s >= b->end) return fail_at(b, b->s, "%s", "unterminated string literal");
  b->s++;
  return 0;
}

static int parse_class(builder *b, evec *unit) {
  const char *at = b->s++;
  int negate = 0;
  if (b->s < b->end && *b->s == '^') {
    negate = 1;
    b->s++;
  }
  cp_set set = {0};
  while (b->s < b->end && *b->s != ']') {
    const int64_t lo = read_char(b);
    int64_t hi = lo;
    if (lo >= 0 && b->s + 1 < b->end && *b->s == '-' && b->s[1] != ']') {
      b->s++;
      hi = read_char(b);
    }
    if (lo < 0 || hi < 0) break;
    if (hi < lo) {
      free(set.r);
      return fail_at(b, at, "%s", "class range out of order");
    }
    cp_range *r = grow(set.r, &set.cap, set.n + 1, sizeof *set.r);
    if (!r) break;
    set.r = r;
    set.r[set.n++] = (cp_range){(uint32_t)lo, (uint32_t)hi};
  }
  if (!b->failed && b->s >= b->end) fail_at(b, at, "%s", "unterminated character class");
  int rc = b->failed ? -1 : 0;
  if (!rc) {
    b->s++;
    rc = normalize(b, &set, negate);
  }
  if (!rc) rc = cp_set_unit(b, &set, unit);
  free(set.r);
  return rc;
}

/* Apply one quantifier (min, max; max < 0: unbounded) to unit, appending to alt. */
static int quantify(builder *b, evec *alt, evec *unit, int64_t min, int64_t max) {
  if (unit->n != 1) { /* wrap a multi-element unit into a rule */
    const int32_t w = anon_rule(b, "group");
    evec *a = w < 0 ? NULL : new_alt(b, w);
    if (!a || append(b, a, unit)) return -1;
    unit->n = 0;
    if (push(b, unit, CN_REF, w)) return -1;
  }
  for (int64_t i = 0; i < min; i++)
    if (append(b, alt, unit)) return -1;
  if (max < 0) { /* R ::= unit R | "" */
    const int32_t r = anon_rule(b, "star");
    evec *a = r < 0 ? NULL : new_alt(b, r);
    if (!a || append(b, a, unit) || push(b, a, CN_REF, r) || !new_alt(b, r)) return -1;
    return push(b, alt, CN_REF, r);
  }
  int32_t prev = -1; /* Q_k ::= unit Q_{k-1} | "" */
  for (int64_t k = min; k < max; k++) {
    const int32_t q = anon_rule(b, "opt");
    evec *a = q < 0 ? NULL : new_alt(b, q);
    if (!a || append(b, a, unit) || (prev >= 0 && push(b, a, CN_REF, prev)) || !new_alt(b, q)) return -1;
    b->rules[q].chain = (int32_t)(k - min + 1); /* Q_1, Q_2, ...: consecutive rule ids */
    prev = q;
  }
  return prev >= 0 ? push(b, alt, CN_REF, prev) : 0;
}

static int read_int(builder *b, int64_t *v) {
  if (b->s >= b->end || *b->s < '0' || *b->s > '9') return fail_at(b, b->s, "%s", "expected a number in { }");
  *v = 0;
  while (b->s < b->end && *b->s >= '0' && *b->s <= '9') {
    *v = *v * 10 + (*b->s++ - '0');
    if (*v > MAX_CODE) return fail_at(b, b->s, "%s", "repetition count too large");
  }
  return 0;
}

/* Quantifiers after a unit: *, +, ?, {m}, {m,}, {m,n} (they stack). */
static int parse_quantifiers(builder *b, evec *alt, evec *unit, int nested) {
  for (;;) {
    skip_space(b, nested);
    if (b->s >= b->end) break;
    const char c = *b->s;
    int64_t min, max;
    if (c == '*' || c == '+' || c == '?') {
      b->s++;
      min = c == '+';
      max = c == '?' ? 1 : -1;
    } else if (c == '{') {
      const char *at = b->s++;
      skip_space(b, 0);
      if (read_int(b, &min)) return -1;
      skip_space(b, 0);
      max = min;
      if (b->s < b->end && *b->s == ',') {
        b->s++;
        skip_space(b, 0);
        max = -1;
        if (b->s < b->end && *b->s != '}' && read_int(b, &max)) return -1;
        skip_space(b, 0);
      }
      if (b->s >= b->end || *b->s != '}') return fail_at(b, at, "%s", "expected } after a repetition count");
      b->s++;
      if (max >= 0 && max < min) return fail_at(b, at, "%s", "repetition {m,n} with n < m");
    } else {
      break;
    }
    /* the quantified result becomes the unit for a further quantifier */
    evec tmp = {0};
    if (quantify(b, &tmp, unit, min, max)) {
      free(tmp.e);
      return -1;
    }
    free(unit->e);
    *unit = tmp;
  }
  return append(b, alt, unit);
}

static int parse_unit(builder *b, evec *unit) {
  const char c = *b->s;
  if (c == '"') return parse_literal(b, unit);
  if (c == '[') return parse_class(b, unit);
  if (c == '.') {
    b->s++;
    cp_set all = {(cp_range[]){{0, 0x10FFFF}}, 1, 1};
    return cp_set_unit(b, &all, unit);
  }
  if (c == '(') {
    const char *at = b->s++;
    if (++b->depth > MAX_DEPTH) return fail_at(b, at, "%s", "groups nested too deeply");
    const int32_t g = anon_rule(b, "group");
    if (g < 0) return -1;
    skip_space(b, 1);
    if (parse_alts(b, g, 1)) return -1;
    skip_space(b, 1);
    if (b->s >= b->end || *b->s != ')') return fail_at(b, at, "%s", "unclosed (");
    b->s++;
    b->depth--;
    return push(b, unit, CN_REF, g);
  }
  if (c == '<') return fail_at(b, b->s, "%s", "token references (<...>) are not supported");
  const char *name = b->s;
  while (b->s < b->end && is_word((unsigned char)*b->s)) b->s++;
  const int32_t r = find_rule(b, name, (size_t)(b->s - name));
  return r < 0 ? -1 : push(b, unit, CN_REF, r);
}

static int parse_seq(builder *b, int32_t rule, int nested) {
  if (!new_alt(b, rule)) return -1;
  for (;;) {
    skip_space(b, nested);
    if (b->s >= b->end) return 0;
    const char c = *b->s;
    if (c == '|' || c == ')' || c == '\n') return 0;
    if (!(c == '"' || c == '[' || c == '.' || c == '(' || c == '<' || is_word((unsigned char)c)))
      return fail_at(b, b->s, "unexpected character '%s'", (char[]){c, 0});
    evec unit = {0};
    int rc = parse_unit(b, &unit);
    if (!rc) {
      brule *r = &b->rules[rule]; /* re-read: parse_unit may have moved the rules */
      evec tmp = r->alts[r->n - 1];
      rc = parse_quantifiers(b, &tmp, &unit, nested);
      b->rules[rule].alts[b->rules[rule].n - 1] = tmp;
    }
    free(unit.e);
    if (rc) return -1;
  }
}

static int parse_alts(builder *b, int32_t rule, int nested) {
  if (parse_seq(b, rule, nested)) return -1;
  for (;;) {
    const char *save = b->s;
    skip_space(b, 1);
    if (b->s < b->end && *b->s == '|') {
      b->s++;
      skip_space(b, 1);
      if (parse_seq(b, rule, nested)) return -1;
    } else {
      b->s = save;
      return 0;
    }
  }
}

static int parse_rules(builder *b) {
  for (;;) {
    skip_space(b, 1);
    if (b->s >= b->end) return 0;
    const char *name = b->s;
    while (b->s < b->end && is_word((unsigned char)*b->s)) b->s++;
    if (b->s == name) return fail_at(b, name, "%s", "expected a rule name");
    const size_t nlen = (size_t)(b->s - name);
    skip_space(b, 0);
    if (b->end - b->s < 3 || memcmp(b->s, "::=", 3)) return fail_at(b, b->s, "%s", "expected ::=");
    b->s += 3;
    const int32_t r = find_rule(b, name, nlen);
    if (r < 0) return -1;
    if (b->rules[r].defined) return fail_at(b, name, "rule %s is defined twice", b->rules[r].name);
    b->rules[r].defined = 1;
    skip_space(b, 1);
    if (parse_alts(b, r, 0)) return -1;
  }
}

/* ---- checks and flattening ---- */

/* Left recursion: a rule that reaches itself through leftmost (possibly after nullable
 * elements) references where at least one reference is not in tail position would grow its
 * stack without bound. Tail-only cycles are fine (the matcher's closure deduplicates them). */
typedef struct {
  const cn_grammar *g;
  const uint8_t *nullable;
  int32_t *index, *low, *stack, *comp;
  uint8_t *on;
  int32_t next, sp, n_comp;
} tarjan;

static void lc_edges(const cn_grammar *g, const uint8_t *nullable, int32_t r,
                     void (*f)(int32_t to, int tail, void *ctx), void *ctx) {
  for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
    for (int32_t p = g->alt[a]; g->code[p].kind == CN_REF; p++) {
      f(g->code[p].arg, g->code[p + 1].kind == CN_END, ctx);
      if (!nullable[g->code[p].arg]) break;
    }
}

typedef struct {
  tarjan *t;
  int32_t v;
} visit_ctx;

static void strong(tarjan *t, int32_t v);

static void visit_edge(int32_t w, int tail, void *vctx) {
  (void)tail;
  visit_ctx *c = vctx;
  tarjan *t = c->t;
  if (t->index[w] < 0) {
    strong(t, w);
    if (t->low[w] < t->low[c->v]) t->low[c->v] = t->low[w];
  } else if (t->on[w] && t->index[w] < t->low[c->v]) {
    t->low[c->v] = t->index[w];
  }
}

static void strong(tarjan *t, int32_t v) {
  t->index[v] = t->low[v] = t->next++;
  t->stack[t->sp++] = v;
  t->on[v] = 1;
  visit_ctx c = {t, v};
  lc_edges(t->g, t->nullable, v, visit_edge, &c);
  if (t->low[v] == t->index[v]) {
    int32_t w;
    do {
      w = t->stack[--t->sp];
      t->on[w] = 0;
      t->comp[w] = t->n_comp;
    } while (w != v);
    t->n_comp++;
  }
}

typedef struct {
  const tarjan *t;
  int32_t from, bad;
} grow_ctx;

static void check_edge(int32_t to, int tail, void *vctx) {
  grow_ctx *c = vctx;
  if (!tail && c->t->comp[to] == c->t->comp[c->from] && c->bad < 0) c->bad = c->from;
}

static int check_left_recursion(const cn_grammar *g, q35_err *err) {
  const int32_t n = g->n_rules;
  uint8_t *nullable = calloc((size_t)n, 1), *on = calloc((size_t)n, 1);
  int32_t *mem = malloc((size_t)n * 4 * sizeof *mem);
  if (!nullable || !on || !mem) {
    free(nullable);
    free(on);
    free(mem);
    return q35_seterr(err, "grammar: out of memory");
  }
  for (int changed = 1; changed;) { /* nullable rules, to a fixpoint */
    changed = 0;
    for (int32_t r = 0; r < n; r++) {
      if (nullable[r]) continue;
      for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
        int32_t p = g->alt[a];
        while (g->code[p].kind == CN_REF && nullable[g->code[p].arg]) p++;
        if (g->code[p].kind == CN_END) nullable[r] = changed = 1;
      }
    }
  }
  tarjan t = {g, nullable, mem, mem + n, mem + 2 * n, mem + 3 * n, on, 0, 0, 0};
  for (int32_t i = 0; i < n; i++) t.index[i] = -1;
  for (int32_t i = 0; i < n; i++)
    if (t.index[i] < 0) strong(&t, i);
  grow_ctx c = {&t, 0, -1};
  for (int32_t r = 0; r < n && c.bad < 0; r++) {
    c.from = r;
    lc_edges(g, nullable, r, check_edge, &c);
  }
  int rc = 0;
  if (c.bad >= 0) rc = q35_seterr(err, "grammar: rule %s is left-recursive (not supported)", g->names[c.bad]);
  free(nullable);
  free(on);
  free(mem);
  return rc;
}

/* Unproductive alternatives are dropped: one with an element that matches no string (an empty
 * byte class, or a rule whose every alternative is unproductive: "nothing", a property whose
 * schema is false) could be entered but never finished, and a mask would let a model write
 * into that dead end. After this every stack the matcher builds can still complete. A root
 * that matches no string at all is refused. */
static int prune_unproductive(builder *b, int32_t root) {
  uint8_t *prod = calloc((size_t)b->n_rules, 1);
  if (!prod) return oom(b);
  for (int changed = 1; changed;) {
    changed = 0;
    for (int32_t r = 0; r < b->n_rules; r++)
      for (int32_t a = 0; a < b->rules[r].n && !prod[r]; a++) {
        const evec *v = &b->rules[r].alts[a];
        int ok = 1;
        for (int32_t k = 0; k < v->n && ok; k++) {
          const cn_elem e = v->e[k];
          ok = e.kind == CN_REF ? prod[e.arg]
                                : (b->cls[e.arg][0] | b->cls[e.arg][1] | b->cls[e.arg][2] | b->cls[e.arg][3]) != 0;
        }
        if (ok) prod[r] = changed = 1;
      }
  }
  for (int32_t r = 0; r < b->n_rules; r++) {
    brule *br = &b->rules[r];
    int32_t w = 0;
    for (int32_t a = 0; a < br->n; a++) {
      int ok = 1;
      for (int32_t k = 0; k < br->alts[a].n && ok; k++) {
        const cn_elem e = br->alts[a].e[k];
        ok = e.kind == CN_REF ? prod[e.arg]
                              : (b->cls[e.arg][0] | b->cls[e.arg][1] | b->cls[e.arg][2] | b->cls[e.arg][3]) != 0;
      }
      if (ok) br->alts[w++] = br->alts[a];
      else free(br->alts[a].e);
    }
    if (w < br->n) br->chain = 0; /* no longer the "X Q_{k-1} | """ layout counter states need */
    br->n = w;
  }
  const int root_ok = prod[root];
  free(prod);
  if (!root_ok) {
    q35_seterr(b->err, "grammar: rule %s matches no string at all (nothing could be generated)", b->rules[root].name);
    b->failed = 1;
    return -1;
  }
  return 0;
}

static cn_grammar *flatten(builder *b, q35_err *err) {
  cn_grammar *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  size_t n_code = 0, n_alt = 0;
  for (int32_t r = 0; r < b->n_rules; r++) {
    n_alt += (size_t)b->rules[r].n;
    for (int32_t a = 0; a < b->rules[r].n; a++) n_code += (size_t)b->rules[r].alts[a].n + 1;
  }
  g->code = malloc((n_code + 1) * sizeof *g->code);
  g->alt = malloc((n_alt + 1) * sizeof *g->alt);
  g->rule_alt = malloc(((size_t)b->n_rules + 1) * sizeof *g->rule_alt);
  g->names = calloc((size_t)b->n_rules, sizeof *g->names);
  g->chain = calloc((size_t)b->n_rules + 1, sizeof *g->chain);
  g->pos_rule = malloc((n_code + 1) * sizeof *g->pos_rule);
  if (!g->code || !g->alt || !g->rule_alt || !g->names || !g->chain || !g->pos_rule) {
    cn_grammar_free(g);
    q35_seterr(err, "grammar: out of memory");
    return NULL;
  }
  g->n_rules = b->n_rules;
  int32_t pc = 0, ai = 0;
  for (int32_t r = 0; r < b->n_rules; r++) {
    g->rule_alt[r] = ai;
    g->names[r] = b->rules[r].name;
    g->chain[r] = b->rules[r].chain;
    b->rules[r].name = NULL;
    for (int32_t a = 0; a < b->rules[r].n; a++) {
      g->alt[ai++] = pc;
      if (b->rules[r].alts[a].n) /* an empty alternative has no elements (and maybe no array) */
        memcpy(g->code + pc, b->rules[r].alts[a].e, (size_t)b->rules[r].alts[a].n * sizeof *g->code);
      for (int32_t k = 0; k <= b->rules[r].alts[a].n; k++) g->pos_rule[pc + k] = r;
      pc += b->rules[r].alts[a].n;
      g->code[pc++] = (cn_elem){CN_END, 0};
    }
  }
  g->rule_alt[b->n_rules] = ai;
  g->code[pc] = (cn_elem){CN_END, 0};
  g->pos_rule[pc] = 0;
  g->n_code = pc;
  g->cls = b->cls;
  g->n_cls = b->n_cls;
  b->cls = NULL;
  return g;
}

void cn_grammar_free(cn_grammar *g) {
  if (!g) return;
  if (g->names)
    for (int32_t i = 0; i < g->n_rules; i++) free(g->names[i]);
  free(g->names);
  free(g->chain);
  free(g->pos_rule);
  free(g->code);
  free(g->alt);
  free(g->rule_alt);
  free(g->cls);
  free(g);
}

cn_grammar *cn_gbnf_compile(const char *text, size_t len, q35_err *err) { return cn_gbnf_compile_root(text, len, "root", err); }

cn_grammar *cn_gbnf_compile_root(const char *text, size_t len, const char *root_name, q35_err *err) {
  builder b = {0};
  b.s = b.start = text;
  b.end = text + len;
  b.err = err;
  cn_grammar *g = NULL;
  if (parse_rules(&b) == 0) {
    int32_t root = -1;
    for (int32_t r = 0; r < b.n_rules && !b.failed; r++) {
      if (!b.rules[r].defined) {
        q35_seterr(err, "grammar: rule %s is used but not defined", b.rules[r].name);
        b.failed = 1;
      }
      if (!strcmp(b.rules[r].name, root_name)) root = r;
    }
    if (!b.failed && root < 0) q35_seterr(err, "grammar: no rule named %s", root_name);
    else if (!b.failed && !prune_unproductive(&b, root) && (g = flatten(&b, err))) {
      g->root = root;
      if (check_left_recursion(g, err)) {
        cn_grammar_free(g);
        g = NULL;
      }
    }
  }
  for (int32_t r = 0; r < b.n_rules; r++) {
    for (int32_t a = 0; a < b.rules[r].n; a++) free(b.rules[r].alts[a].e);
    free(b.rules[r].alts);
    free(b.rules[r].name);
  }
  free(b.rules);
  free(b.cls);
  free(b.cls_hash);
  return g;
}
