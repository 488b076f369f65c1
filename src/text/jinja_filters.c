/*
 * jinja_filters.c - the built-ins: string and dict methods (s.split(), d.get(), ...), the tests
 * (`x is defined`, ...) and the filters (`x | tojson`, ...), the last as one sorted table of
 * {name, function, parameters} with one small function per filter.
 */
#include "text/jinja_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* methods                                                                                  */

/* Methods: s.startswith(...), d.get(...), ... Returns NULL if `name` is not a method. */
val *jj_call_method(render *r, val *obj, const char *name, const args *a, const node *at) {
  if (obj->t == V_STR) {
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
      return jj_mkbool(r, jj_starts_ends(r, obj, jj_arg_get(a, 0, NULL), name[0] == 'e', at));
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
      val *c = jj_arg_get(a, 0, "chars");
      if (c && c->t == V_NONE) c = NULL;
      if (c) jj_need_str(r, c, "strip characters", at);
      return jj_strip(r, obj, name[0] == 'l' ? STRIP_LEFT : name[0] == 'r' ? STRIP_RIGHT : STRIP_BOTH, c);
    }
    if (!strcmp(name, "split")) {
      val *ms = jj_arg_get(a, 1, "maxsplit");
      return jj_str_split(r, obj, jj_arg_get(a, 0, "sep"), ms ? jj_need_int(r, ms, "maxsplit", at) : -1, at);
    }
    if (!strcmp(name, "replace")) {
      val *o = jj_arg_get(a, 0, "old"), *nw = jj_arg_get(a, 1, "new"), *c = jj_arg_get(a, 2, "count");
      jj_need_str(r, o, "replace: old", at);
      jj_need_str(r, nw, "replace: new", at);
      return jj_str_replace(r, obj, o, nw, c ? jj_need_int(r, c, "replace count", at) : -1);
    }
    if (!strcmp(name, "upper")) return jj_case_map(r, obj, CASE_UPPER);
    if (!strcmp(name, "lower")) return jj_case_map(r, obj, CASE_LOWER);
    if (!strcmp(name, "title")) return jj_case_map(r, obj, CASE_TITLE);
    if (!strcmp(name, "capitalize")) return jj_case_map(r, obj, CASE_CAPITALIZE);
    if (!strcmp(name, "find") || !strcmp(name, "count")) {
      const val *x = jj_need_str(r, jj_arg_get(a, 0, NULL), name, at);
      if (name[0] == 'f') {
        const char *f = jj_memfind(obj->u.s.p, obj->u.s.n, x->u.s.p, x->u.s.n);
        return jj_mkint(r, f ? (int64_t)jj_u8_len(obj->u.s.p, (size_t)(f - obj->u.s.p)) : -1);
      }
      if (!x->u.s.n) return jj_mkint(r, (int64_t)jj_u8_len(obj->u.s.p, obj->u.s.n) + 1);
      int64_t c = 0;
      size_t i = 0;
      const char *f;
      while ((f = jj_memfind(obj->u.s.p + i, obj->u.s.n - i, x->u.s.p, x->u.s.n))) {
        c++;
        i = (size_t)(f - obj->u.s.p) + x->u.s.n;
      }
      return jj_mkint(r, c);
    }
    if (!strcmp(name, "join")) {
      val *l = jj_arg_get(a, 0, NULL);
      if (!l || l->t != V_LIST) jj_rerr(r, at, "join argument must be a list");
      sbuf b = {0};
      for (size_t i = 0; i < l->u.l.n; i++) {
        if (i) jj_sb_put(r, &b, obj->u.s.p, obj->u.s.n);
        jj_put_str(r, &b, l->u.l.a[i], at);
      }
      return jj_sb_val(r, &b);
    }
    return NULL;
  }
  if (obj->t == V_DICT) {
    if (!strcmp(name, "get")) {
      val *k = jj_arg_get(a, 0, "key"), *d = jj_arg_get(a, 1, "default");
      if (k && k->t == V_STR) {
        val **s = jj_dict_slot(obj, k->u.s.p, k->u.s.n);
        if (s) return *s;
      }
      return d ? d : r->none;
    }
    if (!strcmp(name, "items")) return jj_items_of(r, obj);
    if (!strcmp(name, "keys") || !strcmp(name, "values")) {
      val *l = jj_mklist(r, obj->u.d.n);
      for (size_t i = 0; i < obj->u.d.n; i++)
        jj_list_push(r, l, name[0] == 'k' ? jj_mkstr(r, obj->u.d.k[i], obj->u.d.kn[i]) : obj->u.d.v[i]);
      return l;
    }
    return NULL;
  }
  return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* tests                                                                                    */

int jj_run_test(render *r, const char *name, val *v, const args *a, const node *at) {
  val *x = jj_arg_get(a, 0, NULL);
  if (!strcmp(name, "defined")) return v->t != V_UNDEF;
  if (!strcmp(name, "undefined")) return v->t == V_UNDEF;
  if (!strcmp(name, "none")) return v->t == V_NONE;
  if (!strcmp(name, "string")) return v->t == V_STR;
  if (!strcmp(name, "number")) return jj_is_num(v);
  if (!strcmp(name, "integer")) return v->t == V_INT;
  if (!strcmp(name, "float")) return v->t == V_FLOAT;
  if (!strcmp(name, "boolean")) return v->t == V_BOOL;
  if (!strcmp(name, "true")) return v->t == V_BOOL && v->u.b;
  if (!strcmp(name, "false")) return v->t == V_BOOL && !v->u.b;
  if (!strcmp(name, "mapping")) return v->t == V_DICT;
  if (!strcmp(name, "sequence")) return v->t == V_LIST || v->t == V_DICT || v->t == V_STR;
  if (!strcmp(name, "iterable")) return v->t == V_LIST || v->t == V_DICT || v->t == V_STR;
  if (!strcmp(name, "callable")) return v->t == V_MACRO || v->t == V_FUNC;
  if (!strcmp(name, "odd") || !strcmp(name, "even")) {
    int64_t i = jj_need_int(r, v, name, at);
    return ((i % 2) != 0) == (name[0] == 'o');
  }
  if (!strcmp(name, "divisibleby")) {
    int64_t d = jj_need_int(r, x, "divisibleby argument", at), i = jj_need_int(r, v, "divisibleby", at);
    if (d == 0) jj_rerr(r, at, "divisibleby 0");
    return i % d == 0;
  }
  if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
    if (v->t != V_STR) return 0;
    return jj_val_eq(v, jj_case_map(r, v, name[0] == 'u' ? CASE_UPPER : CASE_LOWER));
  }
  if (!x && (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==") || !strcmp(name, "sameas") ||
             !strcmp(name, "ne") || !strcmp(name, "!=") || !strcmp(name, "lt") || !strcmp(name, "<") ||
             !strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "le") || !strcmp(name, "<=") ||
             !strcmp(name, "ge") || !strcmp(name, ">=") || !strcmp(name, "in")))
    jj_rerr(r, at, "test '%s' needs an argument", name);
  if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) return jj_val_eq(v, x);
  if (!strcmp(name, "sameas")) return jj_val_eq(v, x) && (v->t < V_STR || v == x);
  if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !jj_val_eq(v, x);
  if (!strcmp(name, "lt") || !strcmp(name, "<")) return jj_val_cmp(r, v, x, at) < 0;
  if (!strcmp(name, "gt") || !strcmp(name, ">")) return jj_val_cmp(r, v, x, at) > 0;
  if (!strcmp(name, "le") || !strcmp(name, "<=")) return jj_val_cmp(r, v, x, at) <= 0;
  if (!strcmp(name, "ge") || !strcmp(name, ">=")) return jj_val_cmp(r, v, x, at) >= 0;
  if (!strcmp(name, "in")) {
    if (x->t == V_LIST) {
      for (size_t i = 0; i < x->u.l.n; i++)
        if (jj_val_eq(v, x->u.l.a[i])) return 1;
      return 0;
    }
    if (x->t == V_STR && v->t == V_STR) return jj_memfind(x->u.s.p, x->u.s.n, v->u.s.p, v->u.s.n) != NULL;
    if (x->t == V_DICT && v->t == V_STR) return jj_dict_slot(x, v->u.s.p, v->u.s.n) != NULL;
    return 0;
  }
  jj_rerr(r, at, "unknown test '%s'", name);
}

/* ---------------------------------------------------------------------------------------- */
/* what the filters share: attribute paths and a stable sort                                */

/* attribute path "a.b" of an item, for map/selectattr/sort/join attribute= */
static val *attr_path(render *r, val *v, const val *path) {
  const char *p = path->u.s.p;
  size_t n = path->u.s.n, i = 0;
  while (i <= n) {
    size_t j = i;
    while (j < n && p[j] != '.') j++;
    val key = {.t = V_STR};
    key.u.s.p = p + i;
    key.u.s.n = j - i;
    int isnum = j > i;
    for (size_t k = i; k < j; k++) isnum &= isdigit((unsigned char)p[k]) != 0;
    if (isnum && v->t == V_LIST) v = jj_getitem(r, v, jj_mkint(r, strtoll(p + i, NULL, 10)), NULL);
    else v = jj_getitem(r, v, &key, NULL);
    i = j + 1;
  }
  return v;
}

typedef struct sort_ctx {
  render *r;
  const node *at;
  const val *attr;
  int reverse, case_sensitive;
  val **keys;
} sort_ctx;

static void merge_sort(sort_ctx *c, size_t *idx, size_t *tmp, size_t n) {
  if (n < 2) return;
  size_t h = n / 2;
  merge_sort(c, idx, tmp, h);
  merge_sort(c, idx + h, tmp, n - h);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int cmp = jj_val_cmp(c->r, c->keys[idx[j]], c->keys[idx[i]], c->at);
    if (c->reverse) cmp = -cmp;
    tmp[k++] = cmp < 0 ? idx[j++] : idx[i++];
  }
  while (i < h) tmp[k++] = idx[i++];
  while (j < n) tmp[k++] = idx[j++];
  memcpy(idx, tmp, n * sizeof *idx);
}

static val *sorted(render *r, val *l, const val *attr, int reverse, int case_sensitive, const node *at) {
  size_t n = l->u.l.n;
  sort_ctx c = {r, at, attr, reverse, case_sensitive, jj_ralloc(r, (n + 1) * sizeof(val *))};
  for (size_t i = 0; i < n; i++) {
    val *k = attr ? attr_path(r, l->u.l.a[i], attr) : l->u.l.a[i];
    if (k->t == V_STR && !case_sensitive) k = jj_case_map(r, k, CASE_LOWER);
    c.keys[i] = k;
  }
  size_t *idx = jj_ralloc(r, (n + 1) * sizeof *idx), *tmp = jj_ralloc(r, (n + 1) * sizeof *tmp);
  for (size_t i = 0; i < n; i++) idx[i] = i;
  merge_sort(&c, idx, tmp, n);
  val *out = jj_mklist(r, n);
  for (size_t i = 0; i < n; i++) jj_list_push(r, out, l->u.l.a[idx[i]]);
  return out;
}

/* ---------------------------------------------------------------------------------------- */
/* filters                                                                                  */

#define TOJSON_MAX_INDENT 64
#define ROUND_MAX_PRECISION 15 /* digits after the point; 10^15 still scales exactly */
#define INDENT_MAX_WIDTH 1000
#define INDENT_DEFAULT_WIDTH 4

/* Every filter has this signature: `name` is the name it was called by (for messages), v the
 * value filtered, p its parameters bound from the call's arguments (filter_def.params; NULL
 * where not given), a the arguments themselves (for filters that take a variable list). */
#define FILTER(fn)                                                                                 \
  static val *fn(render *r __attribute__((unused)), const char *name __attribute__((unused)),    \
                 val *v __attribute__((unused)), val *const *p __attribute__((unused)),          \
                 const args *a __attribute__((unused)), const node *at __attribute__((unused)))

#define FILTER_MAX_PARAMS 4

typedef struct filter_def {
  const char *name;
  val *(*fn)(render *r, const char *name, val *v, val *const *p, const args *a, const node *at);
  int string_only; /* applies to strings: undefined gives "", any other type is an error */
  int npos;        /* the first npos parameters may be given by position, the rest by keyword only */
  const char *params[FILTER_MAX_PARAMS];
} filter_def;

FILTER(f_safe) { return v; }

FILTER(f_tojson) {
  json_opts o = {0, 0, 0, NULL, ": "};
  val *ind = p[0], *ea = p[1], *sk = p[2], *sep = p[3];
  if (ind && ind->t != V_NONE) o.indent = (int)jj_need_int(r, ind, "tojson indent", at);
  if (o.indent < 0 || o.indent > TOJSON_MAX_INDENT) jj_rerr(r, at, "tojson indent must be in 0..64");
  if (ea) o.ensure_ascii = jj_truthy(ea);
  if (sk) o.sort_keys = jj_truthy(sk);
  o.item_sep = o.indent ? "," : ", ";
  if (sep && sep->t != V_NONE) {
    if (sep->t != V_LIST || sep->u.l.n != 2 || sep->u.l.a[0]->t != V_STR || sep->u.l.a[1]->t != V_STR)
      jj_rerr(r, at, "tojson separators must be a pair of strings");
    o.item_sep = sep->u.l.a[0]->u.s.p;
    o.key_sep = sep->u.l.a[1]->u.s.p;
  }
  sbuf b = {0};
  jj_to_json(r, &b, v, &o, 0, at);
  return jj_sb_val(r, &b);
}

FILTER(f_default) {
  val *d = p[0], *bo = p[1];
  if (!d) d = jj_mkstr(r, "", 0);
  if (v->t == V_UNDEF || (bo && jj_truthy(bo) && !jj_truthy(v))) return d;
  return v;
}

FILTER(f_string) { return jj_to_str(r, v, at); }

FILTER(f_length) {
  if (v->t == V_STR) return jj_mkint(r, (int64_t)jj_u8_len(v->u.s.p, v->u.s.n));
  if (v->t == V_LIST) return jj_mkint(r, (int64_t)v->u.l.n);
  if (v->t == V_DICT || v->t == V_NS) return jj_mkint(r, (int64_t)v->u.d.n);
  if (v->t == V_UNDEF) return jj_mkint(r, 0);
  jj_rerr(r, at, "filter 'length' cannot be applied to a %s", jj_type_name(v));
}

FILTER(f_int) {
  val *d = p[0];
  if (v->t == V_INT) return v;
  if (v->t == V_FLOAT)
    return isfinite(v->u.f) && fabs(v->u.f) < JJ_INT_RANGE ? jj_mkint(r, (int64_t)trunc(v->u.f)) : (d ? d : jj_mkint(r, 0));
  if (v->t == V_BOOL) return jj_mkint(r, v->u.b);
  if (v->t == V_STR) {
    char *end;
    errno = 0;
    const char *s = v->u.s.p;
    while (jj_is_ws((unsigned char)*s)) s++;
    long long x = strtoll(s, &end, 10);
    if (end == s || errno) return d ? d : jj_mkint(r, 0);
    return jj_mkint(r, x);
  }
  return d ? d : jj_mkint(r, 0);
}

FILTER(f_float) {
  val *d = p[0];
  if (jj_is_num(v) || v->t == V_BOOL) return jj_mkfloat(r, jj_num_of(v));
  if (v->t == V_STR) {
    char *end;
    double x = strtod(v->u.s.p, &end);
    if (end == v->u.s.p) return d ? d : jj_mkfloat(r, 0);
    return jj_mkfloat(r, x);
  }
  return d ? d : jj_mkfloat(r, 0);
}

FILTER(f_abs) {
  if (v->t == V_INT) return jj_mkint(r, v->u.i < 0 ? -v->u.i : v->u.i);
  if (v->t == V_FLOAT) return jj_mkfloat(r, fabs(v->u.f));
  jj_rerr(r, at, "filter 'abs' needs a number, got %s", jj_type_name(v));
}

FILTER(f_round) {
  val *pr = p[0], *me = p[1];
  if (!jj_is_num(v)) jj_rerr(r, at, "filter 'round' needs a number, got %s", jj_type_name(v));
  int64_t digits = pr ? jj_need_int(r, pr, "round precision", at) : 0;
  if (digits < 0 || digits > ROUND_MAX_PRECISION) jj_rerr(r, at, "round precision must be in 0..15");
  double m = pow(10, (double)digits), x = jj_num_of(v) * m;
  if (me && jj_vstr_eq(me, "floor")) x = floor(x);
  else if (me && jj_vstr_eq(me, "ceil")) x = ceil(x);
  else x = round(x);
  return jj_mkfloat(r, x / m);
}

FILTER(f_upper) { return jj_case_map(r, v, CASE_UPPER); }
FILTER(f_lower) { return jj_case_map(r, v, CASE_LOWER); }
FILTER(f_title) { return jj_case_map(r, v, CASE_TITLE); }
FILTER(f_capitalize) { return jj_case_map(r, v, CASE_CAPITALIZE); }

FILTER(f_trim) {
  val *c = p[0];
  if (c && c->t == V_NONE) c = NULL;
  if (c) jj_need_str(r, c, "trim characters", at);
  return jj_strip(r, v, STRIP_BOTH, c);
}

FILTER(f_replace) {
  val *o = p[0], *nw = p[1], *c = p[2];
  jj_need_str(r, o, "replace: old", at);
  jj_need_str(r, nw, "replace: new", at);
  return jj_str_replace(r, v, o, nw, c && c->t != V_NONE ? jj_need_int(r, c, "replace count", at) : -1);
}

FILTER(f_wordcount) { return jj_mkint(r, (int64_t)jj_str_split(r, v, NULL, -1, at)->u.l.n); }

FILTER(f_indent) {
  val *w = p[0], *first = p[1], *blank = p[2];
  sbuf pad = {0};
  if (w && w->t == V_STR) {
    jj_sb_put(r, &pad, w->u.s.p, w->u.s.n);
  } else {
    int64_t k = w ? jj_need_int(r, w, "indent width", at) : INDENT_DEFAULT_WIDTH;
    if (k < 0 || k > INDENT_MAX_WIDTH) jj_rerr(r, at, "indent width out of range");
    for (int64_t i = 0; i < k; i++) jj_sb_put(r, &pad, " ", 1);
  }
  if (!pad.p) jj_sb_put(r, &pad, "", 0);
  sbuf b = {0};
  jj_sb_put(r, &b, "", 0);
  size_t i = 0;
  int line = 0;
  while (i <= v->u.s.n) {
    size_t j = i;
    while (j < v->u.s.n && v->u.s.p[j] != '\n') j++;
    int empty = j == i;
    if ((line > 0 || (first && jj_truthy(first))) && (!empty || (blank && jj_truthy(blank))))
      jj_sb_put(r, &b, pad.p, pad.n);
    jj_sb_put(r, &b, v->u.s.p + i, j - i);
    if (j < v->u.s.n) jj_sb_put(r, &b, "\n", 1);
    i = j + 1;
    line++;
  }
  return jj_sb_val(r, &b);
}

FILTER(f_items) {
  if (v->t == V_DICT) return jj_items_of(r, v);
  if (v->t == V_UNDEF) return jj_mklist(r, 1);
  jj_rerr(r, at, "filter 'items' needs a mapping, got %s", jj_type_name(v));
}

FILTER(f_dictsort) {
  if (v->t != V_DICT) jj_rerr(r, at, "filter 'dictsort' needs a mapping, got %s", jj_type_name(v));
  val *cs = p[0], *by = p[1], *rev = p[2];
  val *path = jj_mkstr_c(r, by && jj_vstr_eq(by, "value") ? "1" : "0");
  return sorted(r, jj_items_of(r, v), path, rev && jj_truthy(rev), cs && jj_truthy(cs), at);
}

FILTER(f_join) {
  val *sep = p[0], *attr = p[1];
  if (sep) jj_need_str(r, sep, "join separator", at);
  val *l = jj_iter_list(r, v, at);
  sbuf b = {0};
  jj_sb_put(r, &b, "", 0);
  for (size_t i = 0; i < l->u.l.n; i++) {
    if (i && sep) jj_sb_put(r, &b, sep->u.s.p, sep->u.s.n);
    jj_put_str(r, &b, attr ? attr_path(r, l->u.l.a[i], jj_to_str(r, attr, at)) : l->u.l.a[i], at);
  }
  return jj_sb_val(r, &b);
}

FILTER(f_first) {
  val *l = jj_iter_list(r, v, at);
  return l->u.l.n ? l->u.l.a[0] : r->undef;
}

FILTER(f_last) {
  val *l = jj_iter_list(r, v, at);
  return l->u.l.n ? l->u.l.a[l->u.l.n - 1] : r->undef;
}

FILTER(f_list) {
  val *l = jj_iter_list(r, v, at), *c = jj_mklist(r, l->u.l.n);
  for (size_t i = 0; i < l->u.l.n; i++) jj_list_push(r, c, l->u.l.a[i]);
  return c;
}

FILTER(f_reverse) {
  if (v->t == V_STR) {
    val *st = jj_mkint(r, -1);
    return jj_do_slice(r, v, NULL, NULL, st, at);
  }
  val *l = jj_iter_list(r, v, at), *c = jj_mklist(r, l->u.l.n);
  for (size_t i = l->u.l.n; i-- > 0;) jj_list_push(r, c, l->u.l.a[i]);
  return c;
}

FILTER(f_sort) {
  val *rev = p[0], *cs = p[1], *attr = p[2];
  return sorted(r, jj_iter_list(r, v, at), attr ? jj_to_str(r, attr, at) : NULL, rev && jj_truthy(rev),
                cs && jj_truthy(cs), at);
}

FILTER(f_unique) {
  val *l = jj_iter_list(r, v, at), *c = jj_mklist(r, l->u.l.n);
  for (size_t i = 0; i < l->u.l.n; i++) {
    int seen = 0;
    for (size_t j = 0; j < c->u.l.n && !seen; j++) seen = jj_val_eq(c->u.l.a[j], l->u.l.a[i]);
    if (!seen) jj_list_push(r, c, l->u.l.a[i]);
  }
  return c;
}

/* min (sign -1) or max (sign 1) of the items; undefined when there are none */
static val *extreme(render *r, val *v, int sign, const node *at) {
  val *l = jj_iter_list(r, v, at);
  if (!l->u.l.n) return r->undef;
  val *best = l->u.l.a[0];
  for (size_t i = 1; i < l->u.l.n; i++) {
    int c = jj_val_cmp(r, l->u.l.a[i], best, at);
    if (sign < 0 ? c < 0 : c > 0) best = l->u.l.a[i];
  }
  return best;
}

FILTER(f_min) { return extreme(r, v, -1, at); }
FILTER(f_max) { return extreme(r, v, 1, at); }

FILTER(f_sum) {
  val *l = jj_iter_list(r, v, at);
  val *acc = jj_mkint(r, 0);
  for (size_t i = 0; i < l->u.l.n; i++) acc = jj_binop(r, OP_ADD, acc, l->u.l.a[i], at);
  return acc;
}

static const filter_def *find_filter(const char *name);
static val *apply(render *r, const filter_def *f, const char *name, val *v, const args *a, const node *at);

/* map(attribute=path[, default=x]) or map("filter", args...) */
FILTER(f_map) {
  val *l = jj_iter_list(r, v, at), *out = jj_mklist(r, l->u.l.n);
  val *attr = p[0];
  if (attr) {
    val *dflt = p[1];
    val *path = jj_to_str(r, attr, at);
    for (size_t i = 0; i < l->u.l.n; i++) {
      val *x = attr_path(r, l->u.l.a[i], path);
      jj_list_push(r, out, x->t == V_UNDEF && dflt ? dflt : x);
    }
    return out;
  }
  val *fname = jj_arg_get(a, 0, NULL);
  if (!fname || fname->t != V_STR) jj_rerr(r, at, "map needs a filter name or attribute=");
  args rest = {a->v ? a->v + 1 : NULL, a->names ? a->names + 1 : NULL, a->n > 0 ? a->n - 1 : 0};
  const filter_def *f = find_filter(fname->u.s.p);
  for (size_t i = 0; i < l->u.l.n; i++) jj_list_push(r, out, apply(r, f, fname->u.s.p, l->u.l.a[i], &rest, at));
  return out;
}

/* select/reject([test, args...]) and selectattr/rejectattr(attr[, test, args...]): the items
 * whose value (or attribute) passes the test (truthiness without one), or fails it (reject*). */
static val *select_items(render *r, const char *name, val *v, const args *a, int by_attr, int reject,
                         const node *at) {
  val *l = jj_iter_list(r, v, at), *out = jj_mklist(r, l->u.l.n);
  int k = 0;
  val *path = NULL;
  if (by_attr) {
    val *pa = jj_arg_get(a, k++, NULL);
    if (!pa) jj_rerr(r, at, "%s needs an attribute name", name);
    path = jj_to_str(r, pa, at);
  }
  val *tn = jj_arg_get(a, k, NULL);
  args rest = {0};
  if (tn) {
    jj_need_str(r, tn, "test name", at);
    int skip = k + 1;
    rest.v = a->v + skip <= a->v + a->n ? a->v + skip : NULL;
    rest.names = a->names + skip <= a->names + a->n ? a->names + skip : NULL;
    rest.n = a->n - skip > 0 ? a->n - skip : 0;
  }
  for (size_t i = 0; i < l->u.l.n; i++) {
    val *x = path ? attr_path(r, l->u.l.a[i], path) : l->u.l.a[i];
    int ok = tn ? jj_run_test(r, tn->u.s.p, x, &rest, at) : jj_truthy(x);
    if (ok != reject) jj_list_push(r, out, l->u.l.a[i]);
  }
  return out;
}

FILTER(f_select) { return select_items(r, name, v, a, 0, 0, at); }
FILTER(f_reject) { return select_items(r, name, v, a, 0, 1, at); }
FILTER(f_selectattr) { return select_items(r, name, v, a, 1, 0, at); }
FILTER(f_rejectattr) { return select_items(r, name, v, a, 1, 1, at); }

/* Sorted by name (find_filter searches it by bisection). */
static const filter_def filters[] = {
    {"abs", f_abs, 0, 0, {NULL}},
    {"capitalize", f_capitalize, 1, 0, {NULL}},
    {"count", f_length, 0, 0, {NULL}},
    {"d", f_default, 0, 2, {"default_value", "boolean"}},
    {"default", f_default, 0, 2, {"default_value", "boolean"}},
    {"dictsort", f_dictsort, 0, 3, {"case_sensitive", "by", "reverse"}},
    {"first", f_first, 0, 0, {NULL}},
    {"float", f_float, 0, 1, {"default"}},
    {"indent", f_indent, 1, 3, {"width", "first", "blank"}},
    {"int", f_int, 0, 1, {"default"}},
    {"items", f_items, 0, 0, {NULL}},
    {"join", f_join, 0, 2, {"d", "attribute"}},
    {"last", f_last, 0, 0, {NULL}},
    {"length", f_length, 0, 0, {NULL}},
    {"list", f_list, 0, 0, {NULL}},
    {"lower", f_lower, 1, 0, {NULL}},
    {"map", f_map, 0, 0, {"attribute", "default"}},
    {"max", f_max, 0, 0, {NULL}},
    {"min", f_min, 0, 0, {NULL}},
    {"reject", f_reject, 0, 0, {NULL}},
    {"rejectattr", f_rejectattr, 0, 0, {NULL}},
    {"replace", f_replace, 1, 3, {"old", "new", "count"}},
    {"reverse", f_reverse, 0, 0, {NULL}},
    {"round", f_round, 0, 2, {"precision", "method"}},
    {"safe", f_safe, 0, 0, {NULL}},
    {"select", f_select, 0, 0, {NULL}},
    {"selectattr", f_selectattr, 0, 0, {NULL}},
    {"sort", f_sort, 0, 3, {"reverse", "case_sensitive", "attribute"}},
    {"string", f_string, 0, 0, {NULL}},
    {"sum", f_sum, 0, 0, {NULL}},
    {"title", f_title, 1, 0, {NULL}},
    {"tojson", f_tojson, 0, 1, {"indent", "ensure_ascii", "sort_keys", "separators"}},
    {"trim", f_trim, 1, 1, {"chars"}},
    {"unique", f_unique, 0, 0, {NULL}},
    {"upper", f_upper, 1, 0, {NULL}},
    {"wordcount", f_wordcount, 1, 0, {NULL}},
};

static const filter_def *find_filter(const char *name) {
  size_t lo = 0, hi = sizeof filters / sizeof filters[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(name, filters[mid].name);
    if (!c) return &filters[mid];
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

/* Filter f (NULL: none is called `name`) applied to v: binds the parameters, then calls it. */
static val *apply(render *r, const filter_def *f, const char *name, val *v, const args *a, const node *at) {
  if (!f) jj_rerr(r, at, "unknown filter '%s'", name);
  if (f->string_only && v->t != V_STR) {
    if (v->t == V_UNDEF) return jj_mkstr(r, "", 0);
    jj_rerr(r, at, "filter '%s' needs a string, got %s", name, jj_type_name(v));
  }
  val *p[FILTER_MAX_PARAMS];
  for (int k = 0; k < FILTER_MAX_PARAMS; k++)
    p[k] = f->params[k] ? jj_arg_get(a, k < f->npos ? k : -1, f->params[k]) : NULL;
  return f->fn(r, name, v, p, a, at);
}

val *jj_apply_filter(render *r, const char *name, val *v, const args *a, const node *at) {
  return apply(r, find_filter(name), name, v, a, at);
}
