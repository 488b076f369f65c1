/*
 * schema_combine.c - allOf and not, by rewriting the schema before it becomes a grammar.
 *
 * allOf: the branches (and the keywords beside allOf) are merged into one schema, keyword by
 * keyword, where the merge is exact: types intersect; properties are united (a name in two
 * branches takes both schemas, as a nested allOf); required lists are united; lower bounds
 * (minimum, minLength, minItems, minProperties) take the largest, upper ones the smallest;
 * items take both schemas; integer multipleOf the least common multiple; enum / const keep the
 * values both allow; a keyword set in two branches with different values that has no merge rule
 * (pattern, format, a tuple, ...) is refused by name; draft 4's boolean exclusive bounds are
 * first written in the draft 6 form ({minimum: m, exclusiveMinimum: true} as
 * {exclusiveMinimum: m}), so they merge like the others. A
 * branch with anyOf is distributed over (allOf[anyOf[a, b], c] = anyOf[allOf[a, c], allOf[b, c]]).
 * additionalProperties in one branch must list every property the others name (otherwise the
 * branches disagree on what "additional" means and the merge is refused); absent everywhere,
 * the merged object follows the usual policy (docs/CONSTRAIN.md).
 *
 * not: the negated schema must be a type test ({"type": ...}), true/{} (nothing passes) or
 * false (no effect); the schema beside it keeps the remaining types. Other negations are
 * refused: a grammar cannot take the complement of a language in general.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "constrain/schema.h"

static const char *const merge_min[] = {"minimum", "minLength", "minItems", "minProperties", NULL};
static const char *const merge_max[] = {"maximum", "maxLength", "maxItems", "maxProperties", NULL};
static const char *const type_names[] = {"object", "array", "string", "number", "boolean", "null", "integer"};

static int listed(const char *const *l, const char *k) {
  for (; *l; l++)
    if (!strcmp(*l, k)) return 1;
  return 0;
}

/* Type bits: object 1, array 2, string 4, number 8, boolean 16, null 32, integer 64 (a number). */
static unsigned type_mask(json_t *t) {
  if (!t) return 127;
  unsigned m = 0;
  if (json_is_string(t)) t = json_pack("[O]", t);
  else json_incref(t);
  size_t i;
  json_t *v;
  json_array_foreach(t, i, v) {
    for (int k = 0; k < 7; k++)
      if (json_is_string(v) && !strcmp(json_string_value(v), type_names[k])) m |= 1u << k;
  }
  json_decref(t);
  if (m & 8) m |= 64; /* number includes integer */
  return m;
}

static json_t *type_value(unsigned m) {
  json_t *a = json_array();
  if ((m & 8) && (m & 64)) m &= ~64u;
  for (int k = 0; k < 7; k++)
    if (m >> k & 1) json_array_append_new(a, json_string(type_names[k]));
  return a;
}

static json_t *deref(sc *c, json_t *s) {
  for (int hops = 0; json_is_object(s) && json_object_get(s, "$ref") && hops < 16; hops++) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, "$ref") && strcmp(k, "description") && strcmp(k, "title") &&
                                     strcmp(k, "$comment")) return s; /* $ref with siblings: left to sc_gen */
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    json_t *t = ref ? sc_resolve(c, ref) : NULL;
    if (!t) return s;
    s = t;
  }
  return s;
}

static long long gcd(long long a, long long b) {
  while (b) {
    const long long t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* enum / const values both sides allow (json_equal), as an enum array. */
static json_t *enum_of(json_t *s) {
  json_t *k = json_object_get(s, "const");
  if (k) return json_pack("[O]", k);
  json_t *e = json_object_get(s, "enum");
  return e ? json_incref(e) : NULL;
}

static int merge_key(sc *c, json_t *out, const char *k, json_t *a, json_t *b);

/* Draft 4's boolean exclusive bounds in the draft 6 form, in the object s itself, so bounds
 * merge keyword by keyword: {minimum: m, exclusiveMinimum: true} is {exclusiveMinimum: m}. */
static void bounds_as_numbers(json_t *s) {
  static const char *const pairs[2][2] = {{"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}};
  for (int k = 0; k < 2; k++) {
    json_t *in = json_object_get(s, pairs[k][0]), *ex = json_object_get(s, pairs[k][1]);
    if (!json_is_boolean(ex) || !in) continue; /* a lone boolean is refused by the number generator */
    if (json_is_true(ex)) {
      json_object_set(s, pairs[k][1], in);
      json_object_del(s, pairs[k][0]);
    } else {
      json_object_del(s, pairs[k][1]);
    }
  }
}

static int merge_into_object(sc *c, json_t *out, json_t *b);

/* Merge schema b into the object out (a copy of a). */
static int merge_into(sc *c, json_t *out, json_t *b) {
  if (!json_is_object(b) || (!json_is_boolean(json_object_get(b, "exclusiveMinimum")) &&
                             !json_is_boolean(json_object_get(b, "exclusiveMaximum"))))
    return merge_into_object(c, out, b);
  json_t *nb = json_copy(b);
  if (!nb) return sc_fail(c, "out of memory");
  bounds_as_numbers(nb);
  const int rc = merge_into_object(c, out, nb);
  json_decref(nb);
  return rc;
}

static int merge_into_object(sc *c, json_t *out, json_t *b) {
  if (json_is_true(b)) return 0;
  if (json_is_false(b)) {
    json_object_clear(out);
    json_object_set_new(out, "not", json_object());
    return 0;
  }
  if (!json_is_object(b)) return sc_fail(c, "allOf: a schema must be an object or a boolean");
  /* additionalProperties on one side must list every property the other side names */
  for (int side = 0; side < 2; side++) {
    json_t *x = side ? b : out, *y = side ? out : b;
    json_t *ap = json_object_get(x, "additionalProperties"), *px = json_object_get(x, "properties");
    const char *k;
    json_t *v;
    if (ap && !json_is_true(ap))
      json_object_foreach(json_object_get(y, "properties"), k, v) if (!json_object_get(px, k))
          return sc_fail(c, "allOf: additionalProperties in one branch excludes the property \"%s\" of another", k);
  }
  json_t *ea = enum_of(out), *eb = enum_of(b);
  if (ea && eb) { /* the values both allow */
    json_t *keep = json_array();
    size_t i, j;
    json_t *x, *y;
    json_array_foreach(ea, i, x) {
      int both = 0;
      json_array_foreach(eb, j, y) both |= json_equal(x, y);
      if (both) json_array_append(keep, x);
    }
    json_object_del(out, "const");
    json_object_set_new(out, "enum", keep);
  } else if (eb) {
    json_object_set(out, "enum", eb);
  }
  json_decref(ea);
  json_decref(eb);
  const char *k;
  json_t *v;
  json_object_foreach(b, k, v) {
    if (!strcmp(k, "enum") || !strcmp(k, "const")) continue;
    json_t *a = json_object_get(out, k);
    if (!a) {
      json_object_set(out, k, v);
      continue;
    }
    if (merge_key(c, out, k, a, v)) return -1;
  }
  return 0;
}

static int merge_key(sc *c, json_t *out, const char *k, json_t *a, json_t *b) {
  if (json_equal(a, b)) return 0;
  if (listed(merge_min, k) || listed(merge_max, k)) {
    if (!json_is_number(a) || !json_is_number(b)) return sc_fail(c, "%s must be a number", k);
    const int hi = listed(merge_max, k);
    const double x = json_number_value(a), y = json_number_value(b);
    json_object_set(out, k, (hi ? y < x : y > x) ? b : a);
    return 0;
  }
  if (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) {
    if (!json_is_number(a) || !json_is_number(b))
      return sc_fail(c, "%s must be a number (or, in draft 4, a boolean beside %s)", k,
                     strstr(k, "Min") ? "minimum" : "maximum");
    const int hi = !strcmp(k, "exclusiveMaximum");
    const double x = json_number_value(a), y = json_number_value(b);
    json_object_set(out, k, (hi ? y < x : y > x) ? b : a);
    return 0;
  }
  if (!strcmp(k, "type")) {
    const unsigned m = type_mask(a) & type_mask(b);
    if (!m) { /* no type both allow: no value passes */
      json_object_del(out, "const");
      json_object_set_new(out, "enum", json_array());
      return 0;
    }
    json_object_set_new(out, k, type_value(m));
    return 0;
  }
  if (!strcmp(k, "required")) {
    json_t *u = json_copy(a);
    size_t i, j;
    json_t *x, *y;
    json_array_foreach(b, i, x) {
      int found = 0;
      json_array_foreach(u, j, y) found |= json_equal(x, y);
      if (!found) json_array_append(u, x);
    }
    json_object_set_new(out, k, u);
    return 0;
  }
  if (!strcmp(k, "properties")) {
    if (!json_is_object(a) || !json_is_object(b)) return sc_fail(c, "properties must be an object");
    json_t *u = json_copy(a);
    const char *p;
    json_t *v;
    json_object_foreach(b, p, v) {
      json_t *w = json_object_get(u, p);
      if (!w) json_object_set(u, p, v);
      else if (!json_equal(w, v)) json_object_set_new(u, p, json_pack("{s:[O,O]}", "allOf", w, v));
    }
    json_object_set_new(out, k, u);
    return 0;
  }
  if ((!strcmp(k, "items") && json_is_object(a) && json_is_object(b)) || !strcmp(k, "additionalProperties") ||
      !strcmp(k, "contains") || !strcmp(k, "propertyNames")) {
    if (!strcmp(k, "contains")) return sc_fail(c, "allOf: two branches with contains are not supported");
    const int a_true = json_is_true(a) || (json_is_object(a) && !json_object_size(a));
    const int b_true = json_is_true(b) || (json_is_object(b) && !json_object_size(b));
    if (json_is_false(a) || json_is_false(b)) json_object_set_new(out, k, json_false()); /* booleans stay booleans */
    else if (a_true || b_true) json_object_set(out, k, a_true ? b : a);
    else json_object_set_new(out, k, json_pack("{s:[O,O]}", "allOf", a, b));
    return 0;
  }
  if (!strcmp(k, "multipleOf")) {
    const double x = json_number_value(a), y = json_number_value(b);
    if (x != floor(x) || y != floor(y) || x <= 0 || y <= 0 || x > 1e9 || y > 1e9)
      return sc_fail(c, "allOf: two different non-integer multipleOf values are not supported");
    const long long g = gcd((long long)x, (long long)y);
    json_object_set_new(out, k, json_integer((long long)x / g * (long long)y));
    return 0;
  }
  if (listed((const char *const[]){"title", "description", "$comment", "examples", "default", "$id", "id", "$schema",
                                   "$defs", "definitions", NULL}, k))
    return 0; /* annotations: the first one stays */
  return sc_fail(c, "allOf: two branches that both set \"%s\" (differently) are not supported", k);
}

int sc_merge_all_of(sc *c, json_t *s, json_t **out) {
  json_t *l = json_object_get(s, "allOf");
  if (!json_is_array(l) || !json_array_size(l)) return sc_fail(c, "allOf must be a non-empty array");
  json_t *m = json_object();
  const char *k;
  json_t *v;
  json_object_foreach(s, k, v) if (strcmp(k, "allOf")) json_object_set(m, k, v);
  bounds_as_numbers(m);
  size_t i;
  json_array_foreach(l, i, v) {
    json_t *b = deref(c, v);
    if (json_is_object(b) && (json_object_get(b, "anyOf") || json_object_get(b, "oneOf"))) {
      const char *kw = json_object_get(b, "anyOf") ? "anyOf" : "oneOf";
      if (!strcmp(kw, "oneOf")) { /* distributed like anyOf when no value fits two of its branches */
        json_t *alts = json_object_get(b, kw);
        for (size_t x = 0; x < json_array_size(alts); x++)
          for (size_t y = x + 1; y < json_array_size(alts); y++)
            if (!sc_disjoint(c, json_array_get(alts, x), json_array_get(alts, y), 0)) {
              json_decref(m);
              return sc_fail(c, "allOf with a oneOf branch whose alternatives may overlap is not supported");
            }
      }
      /* distribute: anyOf over allOf[the rest so far + the rest after, each alternative] */
      json_t *rest = json_array();
      size_t j;
      json_t *w;
      json_array_foreach(l, j, w) if (j != i) json_array_append(rest, w);
      json_t *base = json_deep_copy(b);
      json_object_del(base, kw);
      json_t *alts = json_array();
      json_array_foreach(json_object_get(b, kw), j, w) {
        json_t *all = json_copy(rest);
        json_array_append(all, w);
        if (json_object_size(base)) json_array_append(all, base);
        json_t *sib = json_copy(m);
        json_object_set_new(sib, "allOf", all);
        json_array_append_new(alts, sib);
      }
      json_decref(base);
      json_decref(rest);
      json_decref(m);
      *out = json_pack("{s:o}", "anyOf", alts);
      return 0;
    }
    if (json_is_object(b) && json_object_get(b, "allOf")) { /* nested: merge it first */
      json_t *inner;
      if (sc_merge_all_of(c, b, &inner)) {
        json_decref(m);
        return -1;
      }
      const int rc = json_is_object(inner) && json_object_get(inner, "anyOf")
                         ? sc_fail(c, "allOf nesting an allOf over anyOf is not supported")
                         : merge_into(c, m, inner);
      json_decref(inner);
      if (rc) {
        json_decref(m);
        return -1;
      }
      continue;
    }
    if (json_is_object(b) && json_object_get(b, "$ref")) {
      json_decref(m);
      return sc_fail(c, "allOf with a $ref that has sibling keywords is not supported");
    }
    if (merge_into(c, m, b)) {
      json_decref(m);
      return -1;
    }
  }
  *out = m;
  return 0;
}

/* not: the types it leaves, into *keep (bits as type_mask); -1 with a message if unsupported. */
int sc_not_types(sc *c, json_t *n, unsigned *keep) {
  if (json_is_false(n)) {
    *keep = 127;
    return 0;
  }
  if (json_is_true(n)) {
    *keep = 0;
    return 0;
  }
  if (!json_is_object(n)) return sc_fail(c, "not must be a schema");
  const char *k;
  json_t *v;
  json_object_foreach(n, k, v) if (strcmp(k, "type") && strcmp(k, "description") && strcmp(k, "title") &&
                                   strcmp(k, "$comment"))
      return sc_fail(c, "keyword \"not\" with \"%s\" inside is not supported (only a type test)", k);
  json_t *t = json_object_get(n, "type");
  if (!t) {
    *keep = 0;
    return 0;
  }
  unsigned m = type_mask(t);
  /* not integer: non-integer numbers stay valid, but a grammar that writes numbers cannot
   * leave integers out cheaply: numbers go (a subset of what the schema allows) */
  if (m & 64) m |= 8;
  *keep = 127u & ~m;
  if (!(*keep & 8)) *keep &= ~64u;
  return 0;
}

/* The schema s without "not", its types restricted to keep. */
json_t *sc_restrict_types(json_t *s, unsigned keep) {
  json_t *r = json_copy(s);
  json_object_del(r, "not");
  json_t *t = json_object_get(s, "type");
  unsigned m = t ? type_mask(t) : 127;
  m &= keep;
  if (!m) {
    json_object_clear(r);
    json_object_set_new(r, "enum", json_array());
    return r;
  }
  json_object_set_new(r, "type", type_value(m));
  json_t *e = enum_of(s);
  if (e) { /* an enum keeps the values of the remaining types */
    json_t *keepv = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(e, i, v) {
      unsigned bit = json_is_object(v) ? 1 : json_is_array(v) ? 2 : json_is_string(v) ? 4 : json_is_integer(v) ? 64
                   : json_is_real(v) ? 8 : json_is_boolean(v) ? 16 : 32;
      if (bit == 64 && (m & 8)) bit = 8;
      if (m & bit) json_array_append(keepv, v);
    }
    json_decref(e);
    json_object_del(r, "const");
    json_object_set_new(r, "enum", keepv);
  }
  return r;
}

/* ---- oneOf: can two branches hold the same value? ---- */

/* The kinds of value a schema may hold: object 1, array 2, string 4, non-integer number 8,
 * boolean 16, null 32, integer 64 (127 when unknown). */
static unsigned value_kind(json_t *v) {
  return json_is_object(v) ? 1 : json_is_array(v) ? 2 : json_is_string(v) ? 4 : json_is_integer(v) ? 64
       : json_is_real(v) ? (json_real_value(v) == floor(json_real_value(v)) ? 64 : 8) : json_is_boolean(v) ? 16 : 32;
}

static unsigned kinds(sc *c, json_t *s, int depth) {
  s = deref(c, s);
  if (json_is_false(s)) return 0;
  if (!json_is_object(s) || depth > 8) return 127;
  json_t *e = enum_of(s);
  if (e) {
    unsigned m = 0;
    size_t i;
    json_t *v;
    json_array_foreach(e, i, v) m |= value_kind(v);
    json_decref(e);
    return m;
  }
  const char *alt = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
  if (alt) {
    unsigned m = 0;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(s, alt), i, v) m |= kinds(c, v, depth + 1);
    return m;
  }
  json_t *t = json_object_get(s, "type");
  if (!t) return 127;
  unsigned m = type_mask(t), k = 0;
  if (m & 1) k |= 1;
  if (m & 2) k |= 2;
  if (m & 4) k |= 4;
  if (m & 8) k |= 8 | 64;
  if (m & 64) k |= 64;
  if (m & 16) k |= 16;
  if (m & 32) k |= 32;
  return k;
}

/* 1 when no object satisfies both a and b through a property a requires. */
static int objects_disjoint(sc *c, json_t *a, json_t *b, int depth) {
  json_t *ra = json_object_get(a, "required"), *pb = json_object_get(b, "properties");
  json_t *pa = json_object_get(a, "properties"), *apb = json_object_get(b, "additionalProperties");
  size_t i;
  json_t *r;
  json_array_foreach(ra, i, r) {
    if (!json_is_string(r)) continue;
    const char *k = json_string_value(r);
    json_t *sb = json_object_get(pb, k), *sa = json_object_get(pa, k);
    if (!sb && apb && json_is_false(apb)) return 1;
    if (sb && sa && sc_disjoint(c, sa, sb, depth + 1)) return 1;
  }
  return 0;
}

int sc_disjoint(sc *c, json_t *a, json_t *b, int depth) {
  a = deref(c, a);
  b = deref(c, b);
  if (depth > 8) return 0;
  if (json_is_false(a) || json_is_false(b)) return 1;
  if (!(kinds(c, a, depth) & kinds(c, b, depth))) return 1;
  if (!json_is_object(a) || !json_is_object(b)) return 0;
  json_t *ea = enum_of(a), *eb = enum_of(b);
  int common = !ea || !eb;
  size_t i, j;
  json_t *x, *y;
  if (ea && eb) json_array_foreach(ea, i, x) json_array_foreach(eb, j, y) common |= json_equal(x, y);
  json_decref(ea);
  json_decref(eb);
  if (!common) return 1;
  if ((kinds(c, a, depth) & kinds(c, b, depth)) == 1) /* objects only */
    return objects_disjoint(c, a, b, depth) || objects_disjoint(c, b, a, depth);
  return 0;
}
