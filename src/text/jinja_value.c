/*
 * jinja_value.c - the renderer's values: the arena they live in, constructors, lists, dicts and
 * scopes, string buffers, conversions (string form, JSON out as Python's json.dumps and JSON in
 * from jansson), equality and ordering, and the string operations behind the filters and methods
 * (Python semantics; lengths and indices count code points).
 */
#include "text/jinja_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#define ARENA_BLOCK 65536 /* bytes per arena block (a larger request gets its own block) */
#define ARENA_ALIGN 16    /* every allocation starts on this boundary */
#define JSON_IN_MAX_DEPTH 10000 /* nesting of the input variables (jansson recurses too) */
/* A JSON real that is integral and below 2^53 in magnitude becomes an integer, as in JavaScript
 * (9e15 < 2^53 ~ 9.007e15: every such value is exact in a double). */
#define JSON_INTEGRAL_MAX 9e15

/* ---------------------------------------------------------------------------------------- */
/* arena and errors                                                                         */

void jj_arena_free(arena *a) {
  ablk *b = a->head;
  while (b) {
    ablk *n = b->next;
    free(b);
    b = n;
  }
  a->head = NULL;
  a->total = 0;
}

void *jj_arena_alloc(arena *a, size_t n) {
  n = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if (!a->head || a->head->cap - a->head->used < n) {
    size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
    if (a->total + cap > a->limit) return NULL;
    ablk *b = malloc(sizeof(ablk) + cap);
    if (!b) return NULL;
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
    a->total += cap;
  }
  void *p = (char *)a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

__attribute__((noreturn, format(printf, 3, 4))) void jj_rerr(render *r, const node *at, const char *fmt, ...) {
  char msg[420];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (at)
    q35_seterr(r->err, "template error at line %d: %s", at->line, msg);
  else
    q35_seterr(r->err, "template error: %s", msg);
  longjmp(r->jb, 1);
}

void *jj_ralloc(render *r, size_t n) {
  void *p = jj_arena_alloc(&r->ar, n);
  if (!p) jj_rerr(r, NULL, "render needs more than %zu bytes of memory", r->lim.max_memory);
  return p;
}

int32_t jj_u8_next(const char *s, size_t n, size_t *i) {
  utf8proc_int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
  if (k <= 0) {
    cp = (unsigned char)s[*i];
    k = 1;
  }
  *i += (size_t)k;
  return cp;
}

static int is_uspace(int32_t c) {
  if (c < 128) return jj_is_ws(c) || (c >= 0x1c && c <= 0x1f);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000 || c == 0xfeff;
}
/* ---------------------------------------------------------------------------------------- */
/* constructors, lists, dicts, string buffers                                               */

val *jj_mkval(render *r, int t) {
  val *v = jj_ralloc(r, sizeof *v);
  memset(v, 0, sizeof *v);
  v->t = t;
  return v;
}

val *jj_mkint(render *r, int64_t i) {
  val *v = jj_mkval(r, V_INT);
  v->u.i = i;
  return v;
}

val *jj_mkfloat(render *r, double f) {
  val *v = jj_mkval(r, V_FLOAT);
  v->u.f = f;
  return v;
}

val *jj_mkstr(render *r, const char *s, size_t n) {
  val *v = jj_mkval(r, V_STR);
  char *p = jj_ralloc(r, n + 1);
  if (n) memcpy(p, s, n);
  p[n] = 0;
  v->u.s.p = p;
  v->u.s.n = n;
  return v;
}

char *jj_rstrdup(render *r, const char *s) {
  size_t n = strlen(s);
  char *p = jj_ralloc(r, n + 1);
  memcpy(p, s, n + 1);
  return p;
}

val *jj_mkstr_c(render *r, const char *s) { return jj_mkstr(r, s, strlen(s)); }

val *jj_mklist(render *r, size_t cap) {
  val *v = jj_mkval(r, V_LIST);
  v->u.l.cap = cap ? cap : 4;
  v->u.l.a = jj_ralloc(r, v->u.l.cap * sizeof(val *));
  return v;
}

void jj_list_push(render *r, val *l, val *x) {
  if (l->u.l.n == l->u.l.cap) {
    size_t nc = l->u.l.cap * 2 + 4;
    val **na = jj_ralloc(r, nc * sizeof *na);
    if (l->u.l.n) memcpy(na, l->u.l.a, l->u.l.n * sizeof *na);
    l->u.l.a = na;
    l->u.l.cap = nc;
  }
  l->u.l.a[l->u.l.n++] = x;
}

val *jj_mkdict(render *r, int t) {
  val *v = jj_mkval(r, t);
  return v;
}

val **jj_dict_slot(const val *d, const char *k, size_t kn) {
  for (size_t i = 0; i < d->u.d.n; i++)
    if (d->u.d.kn[i] == kn && !memcmp(d->u.d.k[i], k, kn)) return &d->u.d.v[i];
  return NULL;
}

void jj_dict_set(render *r, val *d, const char *k, size_t kn, val *x) {
  val **s = jj_dict_slot(d, k, kn);
  if (s) {
    *s = x;
    return;
  }
  if (d->u.d.n == d->u.d.cap) {
    size_t nc = d->u.d.cap * 2 + 4;
    const char **nk = jj_ralloc(r, nc * sizeof *nk);
    size_t *nkn = jj_ralloc(r, nc * sizeof *nkn);
    val **nv = jj_ralloc(r, nc * sizeof *nv);
    if (d->u.d.n) {
      memcpy(nk, d->u.d.k, d->u.d.n * sizeof *nk);
      memcpy(nkn, d->u.d.kn, d->u.d.n * sizeof *nkn);
      memcpy(nv, d->u.d.v, d->u.d.n * sizeof *nv);
    }
    d->u.d.k = nk;
    d->u.d.kn = nkn;
    d->u.d.v = nv;
    d->u.d.cap = nc;
  }
  d->u.d.k[d->u.d.n] = k;
  d->u.d.kn[d->u.d.n] = kn;
  d->u.d.v[d->u.d.n++] = x;
}

void jj_dict_set_c(render *r, val *d, const char *k, val *x) { jj_dict_set(r, d, k, strlen(k), x); }

/* string buffer in the arena */
void jj_sb_put(render *r, sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->cap ? b->cap * 2 : 256);
    while (nc < b->n + n + 1) nc *= 2;
    char *np = jj_ralloc(r, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = nc;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
void jj_sb_puts(render *r, sbuf *b, const char *s) { jj_sb_put(r, b, s, strlen(s)); }
val *jj_sb_val(render *r, sbuf *b) {
  val *v = jj_mkval(r, V_STR);
  if (!b->p) jj_sb_put(r, b, "", 0);
  v->u.s.p = b->p;
  v->u.s.n = b->n;
  return v;
}

const char *jj_type_name(const val *v) {
  switch (v->t) {
    case V_UNDEF: return "undefined";
    case V_NONE: return "none";
    case V_BOOL: return "boolean";
    case V_INT: return "integer";
    case V_FLOAT: return "float";
    case V_STR: return "string";
    case V_LIST: return "list";
    case V_DICT: return "mapping";
    case V_NS: return "namespace";
    default: return "function";
  }
}

int jj_truthy(const val *v) {
  switch (v->t) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: return v->u.b;
    case V_INT: return v->u.i != 0;
    case V_FLOAT: return v->u.f != 0;
    case V_STR: return v->u.s.n != 0;
    case V_LIST: return v->u.l.n != 0;
    case V_DICT: return v->u.d.n != 0;
    default: return 1;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* conversions: type names, truth, numbers, JSON, string form                               */

/* JavaScript Number#toString (the reference prints numbers that way). */
static void fmt_js_number(double x, char *out, size_t outn) {
  if (isnan(x)) {
    snprintf(out, outn, "NaN");
    return;
  }
  if (isinf(x)) {
    snprintf(out, outn, x < 0 ? "-Infinity" : "Infinity");
    return;
  }
  if (x == 0) {
    snprintf(out, outn, "0");
    return;
  }
  char buf[40];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (strtod(buf, NULL) == x) break;
  }
  /* buf: [-]d[.ddd]e[+-]XX */
  char digits[24];
  int nd = 0, neg = buf[0] == '-';
  const char *q = buf + neg;
  for (; *q && *q != 'e'; q++)
    if (isdigit((unsigned char)*q)) digits[nd++] = *q;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  int e = atoi(q + 1);
  char res[64];
  size_t k = 0;
  if (neg) res[k++] = '-';
  if (e >= 21 || e <= -7) {
    res[k++] = digits[0];
    if (nd > 1) {
      res[k++] = '.';
      for (int i = 1; i < nd; i++) res[k++] = digits[i];
    }
    k += (size_t)snprintf(res + k, sizeof res - k, "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  } else if (e < 0) {
    res[k++] = '0';
    res[k++] = '.';
    for (int i = 0; i < -e - 1; i++) res[k++] = '0';
    for (int i = 0; i < nd; i++) res[k++] = digits[i];
  } else {
    for (int i = 0; i <= e; i++) res[k++] = i < nd ? digits[i] : '0';
    if (nd > e + 1) {
      res[k++] = '.';
      for (int i = e + 1; i < nd; i++) res[k++] = digits[i];
    }
  }
  res[k] = 0;
  snprintf(out, outn, "%s", res);
}

static void fmt_float(double x, char *out, size_t n) {
  if (x == 0 && signbit(x)) {
    snprintf(out, n, "-0.0");
  } else if (isfinite(x) && x == floor(x) && fabs(x) < 1e21) {
    snprintf(out, n, "%.1f", x);
  } else {
    fmt_js_number(x, out, n);
  }
}

static void json_str(render *r, sbuf *b, const char *s, size_t n, int ensure_ascii) {
  jj_sb_put(r, b, "\"", 1);
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    char esc[16];
    if (c == '"') { jj_sb_put(r, b, "\\\"", 2); i++; }
    else if (c == '\\') { jj_sb_put(r, b, "\\\\", 2); i++; }
    else if (c == '\n') { jj_sb_put(r, b, "\\n", 2); i++; }
    else if (c == '\r') { jj_sb_put(r, b, "\\r", 2); i++; }
    else if (c == '\t') { jj_sb_put(r, b, "\\t", 2); i++; }
    else if (c == '\b') { jj_sb_put(r, b, "\\b", 2); i++; }
    else if (c == '\f') { jj_sb_put(r, b, "\\f", 2); i++; }
    else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); jj_sb_puts(r, b, esc); i++; }
    else if (ensure_ascii && c >= 0x7f) {
      int32_t cp = jj_u8_next(s, n, &i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        snprintf(esc, sizeof esc, "\\u%04x", cp);
      }
      jj_sb_puts(r, b, esc);
    } else {
      size_t j = i;
      while (j < n && (unsigned char)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' && !(ensure_ascii && (unsigned char)s[j] >= 0x7f)) j++;
      jj_sb_put(r, b, s + i, j - i);
      i = j;
    }
  }
  jj_sb_put(r, b, "\"", 1);
}

static void json_pad(render *r, sbuf *b, const json_opts *o, int depth) {
  jj_sb_put(r, b, "\n", 1);
  for (int i = 0; i < depth * o->indent; i++) jj_sb_put(r, b, " ", 1);
}

static int key_cmp(const void *a, const void *b, void *unused);

void jj_to_json(render *r, sbuf *b, const val *v, const json_opts *o, int depth, const node *at) {
  if (depth > r->lim.max_depth) jj_rerr(r, at, "tojson: value nested too deeply");
  char num[64];
  switch (v->t) {
    case V_UNDEF: case V_NONE: jj_sb_puts(r, b, "null"); break;
    case V_BOOL: jj_sb_puts(r, b, v->u.b ? "true" : "false"); break;
    case V_INT: snprintf(num, sizeof num, "%" PRId64, v->u.i); jj_sb_puts(r, b, num); break;
    case V_FLOAT:
      if (!isfinite(v->u.f)) jj_sb_puts(r, b, "null");
      else { fmt_js_number(v->u.f, num, sizeof num); jj_sb_puts(r, b, num); }
      break;
    case V_STR: json_str(r, b, v->u.s.p, v->u.s.n, o->ensure_ascii); break;
    case V_LIST:
      jj_sb_put(r, b, "[", 1);
      for (size_t i = 0; i < v->u.l.n; i++) {
        if (i) jj_sb_puts(r, b, o->item_sep);
        if (o->indent) json_pad(r, b, o, depth + 1);
        jj_to_json(r, b, v->u.l.a[i], o, depth + 1, at);
      }
      if (o->indent && v->u.l.n) json_pad(r, b, o, depth);
      jj_sb_put(r, b, "]", 1);
      break;
    case V_DICT: case V_NS: {
      size_t n = v->u.d.n;
      size_t *idx = jj_ralloc(r, (n + 1) * sizeof *idx);
      for (size_t i = 0; i < n; i++) idx[i] = i;
      if (o->sort_keys) /* insertion sort: stable, small n */
        for (size_t i = 1; i < n; i++)
          for (size_t j = i; j > 0 && key_cmp(&idx[j - 1], &idx[j], (void *)v) > 0; j--) {
            size_t tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
          }
      jj_sb_put(r, b, "{", 1);
      for (size_t k = 0; k < n; k++) {
        size_t i = idx[k];
        if (k) jj_sb_puts(r, b, o->item_sep);
        if (o->indent) json_pad(r, b, o, depth + 1);
        json_str(r, b, v->u.d.k[i], v->u.d.kn[i], o->ensure_ascii);
        jj_sb_puts(r, b, o->key_sep);
        jj_to_json(r, b, v->u.d.v[i], o, depth + 1, at);
      }
      if (o->indent && n) json_pad(r, b, o, depth);
      jj_sb_put(r, b, "}", 1);
      break;
    }
    default: jj_rerr(r, at, "cannot convert a %s to JSON", jj_type_name(v));
  }
}

static int key_cmp(const void *a, const void *b, void *ctx) {
  const val *d = ctx;
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  size_t n = d->u.d.kn[i] < d->u.d.kn[j] ? d->u.d.kn[i] : d->u.d.kn[j];
  int c = memcmp(d->u.d.k[i], d->u.d.k[j], n);
  if (c) return c;
  return d->u.d.kn[i] < d->u.d.kn[j] ? -1 : d->u.d.kn[i] > d->u.d.kn[j];
}

void jj_put_str(render *r, sbuf *b, const val *v, const node *at) {
  char num[64];
  switch (v->t) {
    case V_UNDEF: break;
    case V_NONE: jj_sb_puts(r, b, "None"); break;
    case V_BOOL: jj_sb_puts(r, b, v->u.b ? "true" : "false"); break;
    case V_INT: snprintf(num, sizeof num, "%" PRId64, v->u.i); jj_sb_puts(r, b, num); break;
    case V_FLOAT: fmt_float(v->u.f, num, sizeof num); jj_sb_puts(r, b, num); break;
    case V_STR: jj_sb_put(r, b, v->u.s.p, v->u.s.n); break;
    case V_LIST: case V_DICT: case V_NS: {
      json_opts o = {0, 0, 0, ", ", ": "};
      jj_to_json(r, b, v, &o, 0, at);
      break;
    }
    default: jj_sb_puts(r, b, "<function>"); break;
  }
}

val *jj_to_str(render *r, const val *v, const node *at) {
  if (v->t == V_STR) return (val *)v;
  sbuf b = {0};
  jj_put_str(r, &b, v, at);
  return jj_sb_val(r, &b);
}

int jj_vstr_eq(const val *v, const char *s) {
  return v->t == V_STR && v->u.s.n == strlen(s) && !memcmp(v->u.s.p, s, v->u.s.n);
}


int jj_val_eq(const val *a, const val *b) {
  if (jj_is_num(a) && jj_is_num(b)) {
    if (a->t == V_INT && b->t == V_INT) return a->u.i == b->u.i;
    return jj_num_of(a) == jj_num_of(b);
  }
  if (a->t != b->t) return 0;
  switch (a->t) {
    case V_UNDEF: case V_NONE: return 1;
    case V_BOOL: return a->u.b == b->u.b;
    case V_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    case V_LIST:
      if (a->u.l.n != b->u.l.n) return 0;
      for (size_t i = 0; i < a->u.l.n; i++)
        if (!jj_val_eq(a->u.l.a[i], b->u.l.a[i])) return 0;
      return 1;
    case V_DICT:
      if (a->u.d.n != b->u.d.n) return 0;
      for (size_t i = 0; i < a->u.d.n; i++) {
        val **o = jj_dict_slot(b, a->u.d.k[i], a->u.d.kn[i]);
        if (!o || !jj_val_eq(a->u.d.v[i], *o)) return 0;
      }
      return 1;
    default: return a == b;
  }
}

int jj_val_cmp(render *r, const val *a, const val *b, const node *at) {
  if ((jj_is_num(a) || a->t == V_BOOL) && (jj_is_num(b) || b->t == V_BOOL)) {
    double x = jj_num_of(a), y = jj_num_of(b);
    return x < y ? -1 : x > y;
  }
  if (a->t == V_STR && b->t == V_STR) {
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    if (c) return c < 0 ? -1 : 1;
    return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
  }
  jj_rerr(r, at, "cannot compare %s with %s", jj_type_name(a), jj_type_name(b));
}

/* ---------------------------------------------------------------------------------------- */
/* scopes and arguments                                                                     */

scope *jj_scope_new(render *r, scope *parent) {
  scope *s = jj_ralloc(r, sizeof *s);
  memset(s, 0, sizeof *s);
  s->parent = parent;
  return s;
}

void jj_scope_set(render *r, scope *s, const char *k, val *v) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->k[i], k)) {
      s->v[i] = v;
      return;
    }
  if (s->n == s->cap) {
    size_t nc = s->cap * 2 + 8;
    const char **nk = jj_ralloc(r, nc * sizeof *nk);
    val **nv = jj_ralloc(r, nc * sizeof *nv);
    if (s->n) {
      memcpy(nk, s->k, s->n * sizeof *nk);
      memcpy(nv, s->v, s->n * sizeof *nv);
    }
    s->k = nk;
    s->v = nv;
    s->cap = nc;
  }
  s->k[s->n] = k;
  s->v[s->n++] = v;
}

val *jj_scope_get(render *r, scope *s, const char *k) {
  for (; s; s = s->parent)
    for (size_t i = 0; i < s->n; i++)
      if (!strcmp(s->k[i], k)) return s->v[i];
  return r->undef;
}
val *jj_arg_get(const args *a, int pos, const char *name) {
  int k = 0;
  for (int i = 0; i < a->n; i++) {
    if (a->names[i]) {
      if (name && !strcmp(a->names[i], name)) return a->v[i];
    } else if (k++ == pos) {
      return a->v[i];
    }
  }
  return NULL;
}

const val *jj_need_str(render *r, const val *v, const char *what, const node *at) {
  if (!v || v->t != V_STR) jj_rerr(r, at, "%s must be a string, got %s", what, v ? jj_type_name(v) : "nothing");
  return v;
}
/* ---------------------------------------------------------------------------------------- */
/* strings                                                                                  */

size_t jj_u8_len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    jj_u8_next(s, n, &i);
    k++;
  }
  return k;
}

size_t *jj_u8_offsets(render *r, const char *s, size_t n, size_t *count) {
  size_t c = jj_u8_len(s, n);
  size_t *off = jj_ralloc(r, (c + 1) * sizeof *off);
  size_t i = 0, k = 0;
  while (i < n) {
    off[k++] = i;
    jj_u8_next(s, n, &i);
  }
  off[k] = n;
  *count = c;
  return off;
}

val *jj_case_map(render *r, const val *s, int mode) {
  sbuf b = {0};
  int word_start = 1;
  size_t i = 0, idx = 0;
  while (i < s->u.s.n) {
    int32_t cp = jj_u8_next(s->u.s.p, s->u.s.n, &i);
    int32_t o;
    if (mode == CASE_LOWER) o = utf8proc_tolower(cp);
    else if (mode == CASE_UPPER) o = utf8proc_toupper(cp);
    else if (mode == CASE_TITLE) {
      int alpha = utf8proc_category(cp) >= UTF8PROC_CATEGORY_LU && utf8proc_category(cp) <= UTF8PROC_CATEGORY_LO;
      o = alpha ? (word_start ? utf8proc_totitle(cp) : utf8proc_tolower(cp)) : cp;
      word_start = !alpha;
    } else {
      o = idx == 0 ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
    }
    idx++;
    utf8proc_uint8_t u8[4];
    utf8proc_ssize_t k = utf8proc_encode_char(o, u8);
    if (k > 0) jj_sb_put(r, &b, (const char *)u8, (size_t)k);
  }
  return jj_sb_val(r, &b);
}

/* Whether strip removes code point cp: one of `chars`, or whitespace when chars is NULL. */
static int strip_hit(int32_t cp, const val *chars) {
  if (!chars) return is_uspace(cp);
  int hit = 0;
  for (size_t j = 0; j < chars->u.s.n;)
    if (jj_u8_next(chars->u.s.p, chars->u.s.n, &j) == cp) hit = 1;
  return hit;
}

/* which: STRIP_LEFT / STRIP_RIGHT / STRIP_BOTH; chars NULL = whitespace */
val *jj_strip(render *r, const val *s, int which, const val *chars) {
  const char *p = s->u.s.p;
  size_t n = s->u.s.n, a = 0, b = n;
  if (which & STRIP_LEFT) {
    while (a < b) {
      size_t i = a;
      int32_t cp = jj_u8_next(p, n, &i);
      if (!strip_hit(cp, chars)) break;
      a = i;
    }
  }
  if (which & STRIP_RIGHT) {
    while (b > a) {
      size_t st = b - 1;
      while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
      size_t i = st;
      int32_t cp = jj_u8_next(p, n, &i);
      if (!strip_hit(cp, chars)) break;
      b = st;
    }
  }
  return jj_mkstr(r, p + a, b - a);
}

const char *jj_memfind(const char *h, size_t hn, const char *nd, size_t nn) {
  if (nn == 0) return h;
  if (nn > hn) return NULL;
  for (size_t i = 0; i + nn <= hn; i++)
    if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
  return NULL;
}

val *jj_str_replace(render *r, const val *s, const val *old, const val *new_, int64_t count) {
  sbuf b = {0};
  const char *p = s->u.s.p;
  size_t n = s->u.s.n, i = 0;
  int64_t done = 0;
  if (old->u.s.n == 0) {
    /* Python: insert `new` between every character and at both ends */
    while (count < 0 || done < count) {
      jj_sb_put(r, &b, new_->u.s.p, new_->u.s.n);
      done++;
      if (i >= n) break;
      size_t j = i;
      jj_u8_next(p, n, &j);
      jj_sb_put(r, &b, p + i, j - i);
      i = j;
    }
    jj_sb_put(r, &b, p + i, n - i);
    return jj_sb_val(r, &b);
  }
  while (i <= n && (count < 0 || done < count)) {
    const char *f = jj_memfind(p + i, n - i, old->u.s.p, old->u.s.n);
    if (!f) break;
    jj_sb_put(r, &b, p + i, (size_t)(f - (p + i)));
    jj_sb_put(r, &b, new_->u.s.p, new_->u.s.n);
    i = (size_t)(f - p) + old->u.s.n;
    done++;
  }
  jj_sb_put(r, &b, p + i, n - i);
  return jj_sb_val(r, &b);
}

val *jj_str_split(render *r, const val *s, const val *sep, int64_t maxsplit, const node *at) {
  val *l = jj_mklist(r, 4);
  const char *p = s->u.s.p;
  size_t n = s->u.s.n;
  if (!sep || sep->t == V_NONE) {
    size_t i = 0;
    for (;;) {
      while (i < n) {
        size_t j = i;
        if (!is_uspace(jj_u8_next(p, n, &j))) break;
        i = j;
      }
      if (i >= n) break;
      if (maxsplit >= 0 && (int64_t)l->u.l.n >= maxsplit) {
        /* the rest, with trailing whitespace kept */
        jj_list_push(r, l, jj_mkstr(r, p + i, n - i));
        break;
      }
      size_t st = i;
      while (i < n) {
        size_t j = i;
        if (is_uspace(jj_u8_next(p, n, &j))) break;
        i = j;
      }
      jj_list_push(r, l, jj_mkstr(r, p + st, i - st));
    }
    return l;
  }
  jj_need_str(r, sep, "split separator", at);
  if (!sep->u.s.n) jj_rerr(r, at, "split: empty separator");
  size_t i = 0;
  for (;;) {
    const char *f = (maxsplit < 0 || (int64_t)l->u.l.n < maxsplit) ? jj_memfind(p + i, n - i, sep->u.s.p, sep->u.s.n) : NULL;
    if (!f) {
      jj_list_push(r, l, jj_mkstr(r, p + i, n - i));
      break;
    }
    jj_list_push(r, l, jj_mkstr(r, p + i, (size_t)(f - (p + i))));
    i = (size_t)(f - p) + sep->u.s.n;
  }
  return l;
}

int64_t jj_need_int(render *r, const val *v, const char *what, const node *at) {
  if (!v) jj_rerr(r, at, "%s is missing", what);
  if (v->t == V_INT) return v->u.i;
  if (v->t == V_BOOL) return v->u.b;
  jj_rerr(r, at, "%s must be an integer, got %s", what, jj_type_name(v));
}

int jj_starts_ends(render *r, const val *s, const val *x, int ends, const node *at) {
  if (x && x->t == V_LIST) {
    for (size_t i = 0; i < x->u.l.n; i++)
      if (jj_starts_ends(r, s, x->u.l.a[i], ends, at)) return 1;
    return 0;
  }
  jj_need_str(r, x, ends ? "endswith argument" : "startswith argument", at);
  if (x->u.s.n > s->u.s.n) return 0;
  return !memcmp(s->u.s.p + (ends ? s->u.s.n - x->u.s.n : 0), x->u.s.p, x->u.s.n);
}

val *jj_items_of(render *r, const val *d) {
  val *l = jj_mklist(r, d->u.d.n);
  for (size_t i = 0; i < d->u.d.n; i++) {
    val *t = jj_mklist(r, 2);
    jj_list_push(r, t, jj_mkstr(r, d->u.d.k[i], d->u.d.kn[i]));
    jj_list_push(r, t, d->u.d.v[i]);
    jj_list_push(r, l, t);
  }
  return l;
}

/* ---------------------------------------------------------------------------------------- */
/* JSON input (the render's variables)                                                      */

val *jj_from_json(render *r, const json_t *j, int depth) {
  if (depth > JSON_IN_MAX_DEPTH) jj_rerr(r, NULL, "input JSON nested too deeply");
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      val *d = jj_mkdict(r, V_DICT);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)j, k, v) jj_dict_set(r, d, jj_rstrdup(r, k), strlen(k), jj_from_json(r, v, depth + 1));
      return d;
    }
    case JSON_ARRAY: {
      val *l = jj_mklist(r, json_array_size(j));
      for (size_t i = 0; i < json_array_size(j); i++) jj_list_push(r, l, jj_from_json(r, json_array_get(j, i), depth + 1));
      return l;
    }
    case JSON_STRING: return jj_mkstr(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jj_mkint(r, (int64_t)json_integer_value(j));
    case JSON_REAL: {
      double x = json_real_value(j);
      if (x == floor(x) && fabs(x) < JSON_INTEGRAL_MAX) return jj_mkint(r, (int64_t)x);
      return jj_mkfloat(r, x);
    }
    case JSON_TRUE: return r->vtrue;
    case JSON_FALSE: return r->vfalse;
    default: return r->none;
  }
}
