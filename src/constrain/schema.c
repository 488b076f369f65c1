/*
 * schema.c - JSON Schema to GBNF: the keyword check, the dispatch by type, objects, $ref,
 * enum / const, anyOf / oneOf / allOf, and free JSON. The policies (docs/CONSTRAIN.md):
 *
 *  - Every keyword is known: a constraint keyword the compiler does not implement is refused
 *    with an error naming it (and its JSON pointer), never ignored; annotations (title,
 *    description, default, examples, ...) are accepted and ignored.
 *  - Output is compact JSON by default: no whitespace between tokens. With ws_max > 0, each
 *    place between tokens takes up to ws_max bytes of space, tab or newline.
 *  - Objects: a property listed in `properties` appears at most once; required ones must
 *    appear. With up to 8 listed properties any order is allowed; with more, schema order
 *    (optional ones may be left out). `additionalProperties` absent means false when
 *    `properties` is given (strict output, as OpenAI's strict mode requires) and true
 *    otherwise; a schema value gives the extra values' schema (extra keys are any strings).
 *  - No `type`: the type is inferred from the keywords present (properties -> object, items
 *    -> array, minLength -> string, minimum -> number), else any JSON value.
 *  - oneOf is generated as anyOf when its branches have distinct types; allOf is merged into
 *    one schema and `not` must be a type test (schema_combine.c); $ref takes local JSON pointers
 *    (#, #/$defs/x, #/definitions/x), recursion included; a remote $ref is refused.
 *  - minProperties / maxProperties count the listed properties (up to 8 of them) or, with none
 *    listed, the additional ones; propertyNames restricts additional keys (with none listed).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "constrain/grammar.h"
#include "constrain/schema.h"

int sc_fail(sc *c, const char *fmt, ...) {
  if (c->failed) return -1;
  c->failed = 1;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  q35_seterr(c->err, "json schema: %s", msg);
  return -1;
}

void sc_new_name(sc *c, char *name) { snprintf(name, SC_NAME, "s%d", c->n_rules++); }

void sc_put_rule(sc *c, const char *name, q35_buf *body) {
  q35_buf_printf(&c->out, "%s ::= %s\n", name, body->p ? body->p : "\"\"");
  if (body->oom) c->out.oom = 1;
  q35_buf_free(body);
}

void sc_literal(q35_buf *b, const char *s, size_t n) {
  q35_buf_char(b, '"');
  for (size_t i = 0; i < n; i++) {
    const unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') q35_buf_printf(b, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7f) q35_buf_printf(b, "\\x%02X", ch);
    else q35_buf_char(b, (char)ch);
  }
  q35_buf_char(b, '"');
}

/* The primitives every grammar shares (names used by the generators). */
static void put_primitives(sc *c, int ws_max) {
  q35_buf *o = &c->out;
  if (ws_max > 0) q35_buf_printf(o, "ws ::= [ \\t\\n\\r]{0,%d}\n", ws_max);
  else q35_buf_str(o, "ws ::= \"\"\n");
  q35_buf_str(o,
              "value ::= object | array | string | number | boolean | null\n"
              "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
              "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
              "string ::= \"\\\"\" char* \"\\\"\"\n"
              "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex hex hex hex )\n"
              "hex ::= [0-9a-fA-F]\n"
              "kchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\\\\\" | \"\\\\\\\"\"\n"
              "number ::= \"-\"? uint ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
              "integer ::= \"-\"? uint\n"
              "uint ::= \"0\" | [1-9] [0-9]*\n"
              "boolean ::= \"true\" | \"false\"\n"
              "null ::= \"null\"\n"
              "ut-var ::= ( [a-zA-Z0-9_] | \"%\" hex hex )+ ( \":\" [1-9] [0-9]{0,3} | \"*\" )?\n"
              "nothing ::= [^\\x00-\\U0010FFFF]\n");
}

/* ---- keywords ---- */

static const char *const annotations[] = {"title", "description", "$comment", "examples", "default", "$schema",
                                          "$id", "id", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "contentMediaType", "contentEncoding", NULL};
static const char *const supported[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                        "items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                        "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                        "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref",
                                        "uniqueItems", "multipleOf", "not", "contains", "propertyNames",
                                        "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
                                        "dependencies", "patternProperties", "if", "then", "else", NULL};

static int in_list(const char *const *l, const char *k) {
  for (; *l; l++)
    if (!strcmp(*l, k)) return 1;
  return 0;
}

static int check_keywords(sc *c, json_t *s) {
  const char *k;
  json_t *v;
  json_object_foreach(s, k, v) {
    if (in_list(annotations, k) || in_list(supported, k)) continue;
    return sc_fail(c, "keyword \"%s\" is not supported", k);
  }
  v = json_object_get(s, "uniqueItems");
  if (v && !json_is_boolean(v)) return sc_fail(c, "uniqueItems must be a boolean");
  return 0;
}

static int has_any(json_t *s, const char *const *keys) {
  for (; *keys; keys++)
    if (json_object_get(s, *keys)) return 1;
  return 0;
}

static const char *const object_kw[] = {"properties", "required", "additionalProperties", "propertyNames",
                                        "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
                                        "dependencies", "patternProperties", NULL};
static const char *const array_kw[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                       "contains", NULL};
static const char *const string_kw[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const number_kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                                        NULL};

/* ---- $ref ---- */

json_t *sc_resolve(sc *c, const char *ref) {
  if (ref[0] != '#') return NULL;
  json_t *t = c->doc;
  const char *p = ref + 1;
  if (*p && *p != '/') return NULL;
  while (*p == '/' && t) {
    p++;
    char seg[256];
    size_t n = 0;
    while (*p && *p != '/' && n + 1 < sizeof seg) {
      char ch = *p++;
      if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
      else if (ch == '%' && p[0] && p[1]) {
        unsigned v;
        if (sscanf(p, "%2x", &v) == 1) {
          ch = (char)v;
          p += 2;
        }
      }
      seg[n++] = ch;
    }
    seg[n] = 0;
    if (json_is_object(t)) {
      t = json_object_get(t, seg);
    } else if (json_is_array(t)) {
      char *end;
      const long i = strtol(seg, &end, 10);
      t = *end || i < 0 ? NULL : json_array_get(t, (size_t)i);
    } else {
      t = NULL;
    }
  }
  return t;
}

static int gen_ref(sc *c, json_t *s, char *name) {
  const char *ref = json_string_value(json_object_get(s, "$ref"));
  if (!ref) return sc_fail(c, "$ref must be a string");
  const char *k;
  json_t *v;
  json_object_foreach(s, k, v) if (strcmp(k, "$ref") && !in_list(annotations, k))
      return sc_fail(c, "$ref with the sibling keyword \"%s\" is not supported", k);
  for (size_t i = 0; i < c->n_refs; i++)
    if (!strcmp(c->refs[i].ptr, ref)) {
      snprintf(name, SC_NAME, "%s", c->refs[i].name);
      return 0;
    }
  if (ref[0] != '#') return sc_fail(c, "remote $ref \"%s\" is refused (only local #/... references)", ref);
  json_t *t = sc_resolve(c, ref);
  if (!t) return sc_fail(c, "$ref \"%s\" does not resolve in this document", ref);
  if (q35_grow((void **)&c->refs, &c->cap_refs, c->n_refs + 1, sizeof *c->refs)) return sc_fail(c, "out of memory");
  sc_ref *r = &c->refs[c->n_refs++];
  r->ptr = strdup(ref);
  sc_new_name(c, r->name);
  snprintf(name, SC_NAME, "%s", r->name);
  char body[SC_NAME];
  if (sc_gen(c, t, body)) return -1;
  q35_buf b = {0};
  q35_buf_str(&b, body);
  sc_put_rule(c, name, &b);
  return 0;
}

/* ---- enum, const, combinators ---- */

/* v as compact JSON, each real number as the shortest decimal that reads back as it (jansson
 * writes 0.1 as 0.10000000000000001). */
static void put_json(q35_buf *b, json_t *v) {
  const char *k;
  json_t *x;
  size_t i;
  if (json_is_object(v)) {
    q35_buf_char(b, '{');
    int first = 1;
    json_object_foreach(v, k, x) {
      json_t *key = json_string(k);
      if (!key) b->oom = 1;
      if (!first) q35_buf_char(b, ',');
      first = 0;
      put_json(b, key);
      json_decref(key);
      q35_buf_char(b, ':');
      put_json(b, x);
    }
    q35_buf_char(b, '}');
  } else if (json_is_array(v)) {
    q35_buf_char(b, '[');
    json_array_foreach(v, i, x) {
      if (i) q35_buf_char(b, ',');
      put_json(b, x);
    }
    q35_buf_char(b, ']');
  } else if (json_is_real(v)) {
    char num[40];
    for (int p = 1; p <= 17; p++) {
      snprintf(num, sizeof num, "%.*g", p, json_real_value(v));
      if (strtod(num, NULL) == json_real_value(v)) break;
    }
    q35_buf_str(b, num);
  } else {
    char *txt = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (!txt) b->oom = 1;
    else q35_buf_str(b, txt);
    free(txt);
  }
}

static void put_value_literal(q35_buf *b, json_t *v) {
  q35_buf t = {0};
  put_json(&t, v);
  if (t.oom) b->oom = 1;
  else sc_literal(b, t.p, t.n);
  q35_buf_free(&t);
}


/* The values of vals (an array) that the schema r (enum's sibling keywords) allows, as a new
 * array: each value's compact text matched against r's own grammar (compiled apart, with the
 * same document for $refs), so a value is kept only where r's language takes it (sound: that
 * language is inside what r allows). NULL (a message set) on failure. */
static json_t *enum_filter(sc *c, json_t *vals, json_t *r) {
  sc c2 = {0};
  q35_err e2;
  c2.doc = c->doc;
  c2.err = &e2;
  c2.depth = c->depth;
  put_primitives(&c2, 0);
  char root[SC_NAME];
  cn_grammar *g = NULL;
  json_t *keep = NULL;
  if (!sc_gen(&c2, r, root)) {
    q35_buf_printf(&c2.out, "root ::= %s\n", root);
    if (c2.out.oom) q35_seterr(&e2, "json schema: out of memory");
    else g = cn_gbnf_compile(c2.out.p, c2.out.n, &e2);
    if (g || strstr(e2.msg, "matches no string")) keep = json_array();
  }
  cn_matcher *m = g ? cn_matcher_new(g, &e2) : NULL;
  size_t i;
  json_t *v;
  json_array_foreach(vals, i, v) {
    if (!m || !keep) break;
    q35_buf t = {0};
    put_json(&t, v);
    int32_t st = cn_start(m);
    for (size_t k = 0; k < t.n && st >= 0; k++) st = cn_step(m, st, (uint8_t)t.p[k]);
    if (st >= 0 && cn_complete(m, st)) json_array_append(keep, v);
    q35_buf_free(&t);
  }
  if (g && !m) {
    json_decref(keep);
    keep = NULL;
  }
  if (!keep && !c->failed) {
    const char *msg = strncmp(e2.msg, "json schema: ", 13) ? e2.msg : e2.msg + 13;
    sc_fail(c, "%s", msg);
  }
  cn_matcher_free(m);
  cn_grammar_free(g);
  for (size_t k = 0; k < c2.n_refs; k++) free(c2.refs[k].ptr);
  free(c2.refs);
  q35_buf_free(&c2.out);
  return keep;
}

int sc_finite_values(sc *c, json_t *s, json_t **out) {
  *out = NULL;
  while (json_is_object(s) && json_is_string(json_object_get(s, "$ref")) && json_object_size(s) == 1)
    s = sc_resolve(c, json_string_value(json_object_get(s, "$ref")));
  if (!json_is_object(s)) return 0;
  json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const"), *t = json_object_get(s, "type");
  json_t *vals = NULL;
  if (k) vals = json_pack("[O]", k);
  else if (json_is_array(e)) vals = json_copy(e);
  else if (t) { /* only booleans and null */
    json_t *ts = json_is_string(t) ? json_pack("[O]", t) : json_incref(t);
    vals = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(ts, i, x) {
      const char *n = json_string_value(x);
      if (n && !strcmp(n, "boolean")) {
        json_array_append_new(vals, json_true());
        json_array_append_new(vals, json_false());
      } else if (n && !strcmp(n, "null")) {
        json_array_append_new(vals, json_null());
      } else {
        json_decref(vals);
        vals = NULL;
        break;
      }
    }
    json_decref(ts);
  }
  if (!vals) return 0;
  json_t *kept = enum_filter(c, vals, s); /* the values the whole schema takes */
  json_decref(vals);
  if (!kept) return -1;
  *out = kept;
  return 0;
}

void sc_put_value(q35_buf *b, json_t *v) { put_value_literal(b, v); }

static int gen_enum(sc *c, json_t *s, char *name) {
  json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
  if (e && !json_is_array(e)) return sc_fail(c, "enum must be an array");
  json_t *vals = json_array();
  if (!vals) return sc_fail(c, "out of memory");
  size_t i;
  json_t *v;
  if (k) { /* const, and beside enum only when enum lists it */
    int in = !e;
    json_array_foreach(e, i, v) in |= json_equal(v, k);
    if (in) json_array_append(vals, k);
  } else {
    json_array_extend(vals, e);
  }
  /* sibling constraint keywords (type, bounds, lengths, ...) keep the values they allow */
  json_t *rest = json_copy(s);
  json_object_del(rest, "enum");
  json_object_del(rest, "const");
  int constrained = 0;
  const char *key;
  json_object_foreach(rest, key, v) constrained += !in_list(annotations, key);
  json_t *types = json_object_get(rest, "type");
  if (constrained == 1 && json_array_size(vals) && types) {
    /* only "type" (common: {"type": "string", "enum": [...]}): a value stays if its kind is listed */
    json_t *tl = json_is_array(types) ? json_incref(types) : json_pack("[O]", types), *kept = json_array();
    json_array_foreach(vals, i, v) {
      int ok = 0;
      size_t j;
      json_t *t;
      json_array_foreach(tl, j, t) {
        const char *n = json_string_value(t);
        if (!n) continue;
        if (!strcmp(n, "integer") && json_is_real(v)) { /* an integral real is written as an integer */
          q35_buf txt = {0};
          put_json(&txt, v);
          ok |= txt.p && strspn(txt.p + (txt.p[0] == '-'), "0123456789") == strlen(txt.p + (txt.p[0] == '-'));
          q35_buf_free(&txt);
        }
        ok |= (!strcmp(n, "object") && json_is_object(v)) || (!strcmp(n, "array") && json_is_array(v)) ||
              (!strcmp(n, "string") && json_is_string(v)) || (!strcmp(n, "number") && json_is_number(v)) ||
              (!strcmp(n, "integer") && json_is_integer(v)) || (!strcmp(n, "boolean") && json_is_boolean(v)) ||
              (!strcmp(n, "null") && json_is_null(v));
      }
      if (ok) json_array_append(kept, v);
    }
    json_decref(tl);
    json_decref(vals);
    vals = kept;
  } else if (constrained && json_array_size(vals)) {
    /* without "type", each value is checked against the keywords of its own kind (a keyword
     * applies to one kind only: minimum to numbers, maxLength to strings, ...) */
    static const char *const kinds[] = {"object", "array", "string", "number", "boolean", "null"};
    json_t *kept = json_array();
    for (int t = 0; t < 6 && kept; t++) {
      json_t *group = json_array();
      json_array_foreach(vals, i, v) {
        const int kind = json_is_object(v) ? 0 : json_is_array(v) ? 1 : json_is_string(v) ? 2 : json_is_number(v) ? 3
                         : json_is_boolean(v) ? 4 : 5;
        if (kind == t) json_array_append(group, v);
      }
      json_t *r = json_object_get(rest, "type") ? json_incref(rest) : json_copy(rest);
      if (!json_object_get(rest, "type")) json_object_set_new(r, "type", json_string(kinds[t]));
      json_t *k2 = json_array_size(group) ? enum_filter(c, group, r) : json_array();
      if (k2) json_array_extend(kept, k2);
      else json_decref(kept), kept = NULL;
      json_decref(k2);
      json_decref(r);
      json_decref(group);
    }
    json_decref(vals);
    vals = kept;
  }
  json_decref(rest);
  if (!vals) return -1;
  q35_buf b = {0};
  json_array_foreach(vals, i, v) {
    if (i) q35_buf_str(&b, " | ");
    put_value_literal(&b, v);
  }
  if (json_array_size(vals) == 0) q35_buf_str(&b, "nothing");
  json_decref(vals);
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
}

static int gen_any_of(sc *c, json_t *s, const char *kw, char *name) {
  json_t *l = json_object_get(s, kw);
  if (!json_is_array(l) || !json_array_size(l)) return sc_fail(c, "%s must be a non-empty array", kw);
  const char *k;
  json_t *v;
  json_object_foreach(s, k, v) if (strcmp(k, kw) && !in_list(annotations, k))
      return sc_fail(c, "%s with the sibling keyword \"%s\" is not supported", kw, k);
  if (!strcmp(kw, "oneOf")) { /* as anyOf, which is exact only when no value fits two branches */
    for (size_t i = 0; i < json_array_size(l); i++)
      for (size_t j = i + 1; j < json_array_size(l); j++)
        if (!sc_disjoint(c, json_array_get(l, i), json_array_get(l, j), 0))
          return sc_fail(c, "oneOf whose branches %zu and %zu may overlap is not supported (branches must differ in "
                            "type, enum/const values or a required property)", i, j);
  }
  q35_buf b = {0};
  size_t i;
  json_array_foreach(l, i, v) {
    char sub[SC_NAME];
    if (sc_gen(c, v, sub)) {
      q35_buf_free(&b);
      return -1;
    }
    q35_buf_printf(&b, "%s%s", i ? " | " : "", sub);
  }
  sc_new_name(c, name);
  sc_put_rule(c, name, &b);
  return 0;
}

/* ---- objects ---- */

typedef struct {
  const char *key;
  char kv[SC_NAME]; /* rule: "key" ws ":" ws value */
  int required;
} prop;

#define MAX_ANY_ORDER 8

/* ---- extra property keys: any string but the listed names ----
 * Keys of additional properties are written with kchar (no control characters, and only the
 * escapes \\ and \" that " and \ need), so each key has one spelling and "not a listed name" is
 * a regular language: a trie over the names' code points, where from each node a key may end
 * (unless the node ends a name), go on with a child's code point, or leave the trie with any
 * other character and then go on freely. */
typedef struct {
  uint32_t cp;
  int child;
} tedge;

typedef struct {
  tedge *e;
  size_t n, cap;
  int end;
} tnode;

static int cp_decode(const unsigned char *s, size_t n, size_t *i, uint32_t *cp) {
  const unsigned char c = s[*i];
  const int k = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
  if (k < 0 || *i + (size_t)k >= n + (k ? 0 : 1)) return -1;
  uint32_t v = k ? c & (0x3F >> k) : c;
  for (int j = 1; j <= k; j++) v = (v << 6) | (s[*i + (size_t)j] & 0x3F);
  *i += (size_t)k + 1;
  *cp = v;
  return 0;
}

static void put_kchar_unit(q35_buf *b, uint32_t cp) {
  if (cp == '"') q35_buf_str(b, "\"\\\\\\\"\"");
  else if (cp == '\\') q35_buf_str(b, "\"\\\\\\\\\"");
  else q35_buf_printf(b, "[\\U%08X]", (unsigned)cp);
}

static void key_rules(sc *c, const tnode *t, int i, const char *base) {
  q35_buf b = {0};
  int alts = 0;
  if (!t[i].end) {
    q35_buf_str(&b, "\"\\\"\"");
    alts = 1;
  }
  int has_q = 0, has_bs = 0;
  for (size_t k = 0; k < t[i].n; k++) {
    q35_buf_str(&b, alts++ ? " | " : "");
    put_kchar_unit(&b, t[i].e[k].cp);
    q35_buf_printf(&b, " %s-%d", base, t[i].e[k].child);
    has_q |= t[i].e[k].cp == '"';
    has_bs |= t[i].e[k].cp == '\\';
  }
  q35_buf_printf(&b, "%s( [^\"\\\\\\x00-\\x1F", alts++ ? " | " : "");
  for (size_t k = 0; k < t[i].n; k++)
    if (t[i].e[k].cp != '"' && t[i].e[k].cp != '\\') q35_buf_printf(&b, "\\U%08X", (unsigned)t[i].e[k].cp);
  q35_buf_str(&b, "]");
  if (!has_q) q35_buf_str(&b, " | \"\\\\\\\"\"");
  if (!has_bs) q35_buf_str(&b, " | \"\\\\\\\\\"");
  q35_buf_str(&b, " ) kchar* \"\\\"\"");
  char nm[SC_NAME + 16];
  snprintf(nm, sizeof nm, "%s-%d", base, i);
  sc_put_rule(c, nm, &b);
  for (size_t k = 0; k < t[i].n; k++) key_rules(c, t, t[i].e[k].child, base);
}

/* The rule of a JSON key (with its quotes) that is none of the n names, into name. */
static int other_key(sc *c, const char *const *names, int n, char *name) {
  tnode *t = calloc(1, sizeof *t);
  size_t nt = 1, cap = 1;
  int rc = t ? 0 : sc_fail(c, "out of memory");
  for (int k = 0; k < n && !rc; k++) {
    const unsigned char *s = (const unsigned char *)names[k];
    const size_t len = strlen(names[k]);
    int at = 0, ok = 1;
    for (size_t i = 0; i < len && ok;) {
      uint32_t cp;
      if (cp_decode(s, len, &i, &cp) || cp < 0x20) {
        ok = 0; /* a name kchar cannot spell: no key can equal it */
        break;
      }
      int next = -1;
      for (size_t e = 0; e < t[at].n; e++)
        if (t[at].e[e].cp == cp) next = t[at].e[e].child;
      if (next < 0) {
        if (q35_grow((void **)&t, &cap, nt + 1, sizeof *t) ||
            q35_grow((void **)&t[at].e, &t[at].cap, t[at].n + 1, sizeof *t[at].e)) {
          rc = sc_fail(c, "out of memory");
          break;
        }
        memset(&t[nt], 0, sizeof *t);
        t[at].e[t[at].n++] = (tedge){cp, (int)nt};
        next = (int)nt++;
      }
      at = next;
    }
    if (ok && !rc) t[at].end = 1;
  }
  if (!rc) {
    char base[SC_NAME];
    sc_new_name(c, base);
    key_rules(c, t, 0, base);
    q35_buf b = {0};
    q35_buf_printf(&b, "\"\\\"\" %s-0", base);
    sc_new_name(c, name);
    sc_put_rule(c, name, &b);
  }
  for (size_t i = 0; t && i < nt; i++) free(t[i].e);
  free(t);
  return rc;
}

/* Any order, each property at most once: rule H_S for each subset S of the listed properties
 * ("after S, at least one member written"). */
static void object_any_order(sc *c, const prop *p, int n, const char *extra, uint32_t req, const uint32_t *dep,
                             long long pmin, long long pmax, q35_buf *b) {
  char base[SC_NAME];
  sc_new_name(c, base);
  for (uint32_t S = 0; S < (1u << n); S++) {
    q35_buf h = {0};
    int alts = 0;
    const long long cnt = __builtin_popcount(S);
    for (int i = 0; i < n && (pmax < 0 || cnt < pmax); i++)
      if (!(S >> i & 1)) q35_buf_printf(&h, "%s\",\" ws %s ws %s-%u", alts++ ? " | " : "", p[i].kv, base, S | 1u << i);
    if (extra) q35_buf_printf(&h, "%s\",\" ws %s ws %s-%u", alts++ ? " | " : "", extra, base, S);
    int deps_met = 1; /* each written property's dependencies are written too */
    for (int i = 0; i < n; i++)
      if ((S >> i & 1) && (dep[i] & S) != dep[i]) deps_met = 0;
    if ((S & req) == req && cnt >= pmin && deps_met) q35_buf_printf(&h, "%s\"\"", alts++ ? " | " : "");
    if (!alts) q35_buf_str(&h, "nothing");
    char nm[SC_NAME + 12];
    snprintf(nm, sizeof nm, "%s-%u", base, S);
    sc_put_rule(c, nm, &h);
  }
  q35_buf_str(b, "\"{\" ws ( ");
  int alts = 0;
  for (int i = 0; i < n && pmax != 0; i++) q35_buf_printf(b, "%s%s ws %s-%u", alts++ ? " | " : "", p[i].kv, base, 1u << i);
  if (extra) q35_buf_printf(b, "%s%s ws %s-0", alts++ ? " | " : "", extra, base);
  if (req == 0 && pmin == 0) q35_buf_printf(b, "%s\"\"", alts++ ? " | " : "");
  if (!alts) q35_buf_str(b, "nothing");
  q35_buf_str(b, " ) \"}\"");
}

/* Schema order: F_i^S (nothing written yet) and G_i^S (something written) from property i on,
 * S the set of dependency-relevant properties written so far (rel: per property its index
 * among those, or -1; rdep: per relevant property the relevant ones it needs, bit 31 never
 * set). Without dependencies S stays empty. Rules are made for the (i, S) that occur. */
typedef struct {
  sc *c;
  const prop *p;
  int n, nr;
  const char *extra;
  const int *rel;
  const uint32_t *rdep;
  uint8_t *seen; /* per (i, S, g) */
  char base[SC_NAME];
} in_order;

static void in_order_rule(in_order *o, int i, uint32_t S, int g) {
  const size_t k = ((size_t)i << o->nr | S) * 2 + (size_t)g;
  if (o->seen[k]) return;
  o->seen[k] = 1;
  q35_buf r = {0};
  if (i == o->n) {
    int ok = 1;
    for (int j = 0; j < o->nr; j++)
      if ((S >> j & 1) && (o->rdep[j] & S) != o->rdep[j]) ok = 0;
    if (!ok) q35_buf_str(&r, "nothing");
    else if (o->extra && !g) q35_buf_printf(&r, "( %s ws ( \",\" ws %s ws )* )?", o->extra, o->extra);
    else if (o->extra) q35_buf_printf(&r, "( \",\" ws %s ws )*", o->extra);
  } else {
    const uint32_t S2 = o->rel[i] >= 0 ? S | 1u << o->rel[i] : S;
    q35_buf_printf(&r, "%s%s ws %s-g%d-%u", g ? "\",\" ws " : "", o->p[i].kv, o->base, i + 1, S2);
    in_order_rule(o, i + 1, S2, 1);
    if (!o->p[i].required) {
      q35_buf_printf(&r, " | %s-%c%d-%u", o->base, g ? 'g' : 'f', i + 1, S);
      in_order_rule(o, i + 1, S, g);
    }
  }
  char nm[SC_NAME + 32];
  snprintf(nm, sizeof nm, "%s-%c%d-%u", o->base, g ? 'g' : 'f', i, S);
  sc_put_rule(o->c, nm, &r);
}

static int object_in_order(sc *c, const prop *p, int n, const char *extra, const int *rel, const uint32_t *rdep, int nr,
                           q35_buf *b) {
  in_order o = {c, p, n, nr, extra, rel, rdep, calloc(((size_t)n + 1) << nr, 2), {0}};
  if (!o.seen) return sc_fail(c, "out of memory");
  sc_new_name(c, o.base);
  in_order_rule(&o, 0, 0, 0);
  free(o.seen);
  q35_buf_printf(b, "\"{\" ws %s-f0-0 \"}\"", o.base);
  return 0;
}

/* minProperties / maxProperties into *pmin / *pmax (-1: no upper bound). */
static int object_counts(sc *c, json_t *s, long long *pmin, long long *pmax) {
  json_t *mn = json_object_get(s, "minProperties"), *mx = json_object_get(s, "maxProperties");
  if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
      (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)))
    return sc_fail(c, "minProperties / maxProperties must be non-negative integers");
  if (json_integer_value(mn) > 1000 || json_integer_value(mx) > 1000)
    return sc_fail(c, "minProperties / maxProperties above 1000 is not supported");
  *pmin = mn ? json_integer_value(mn) : 0;
  *pmax = mx ? json_integer_value(mx) : -1;
  return 0;
}

/* Only additional properties, between pmin and pmax of them. */
static void object_counted_extra(const char *extra, long long pmin, long long pmax, q35_buf *b) {
  if (pmax == 0 || (pmax >= 0 && pmin > pmax)) {
    q35_buf_str(b, pmax == 0 && pmin == 0 ? "\"{\" ws \"}\"" : "nothing");
    return;
  }
  q35_buf_printf(b, "\"{\" ws ( %s ws ( \",\" ws %s ws )", extra, extra);
  if (pmax < 0) q35_buf_printf(b, "{%lld,} )", pmin > 0 ? pmin - 1 : 0);
  else q35_buf_printf(b, "{%lld,%lld} )", pmin > 0 ? pmin - 1 : 0, pmax - 1);
  q35_buf_str(b, pmin == 0 ? "? \"}\"" : " \"}\"");
}

/* The key rule of propertyNames' schema (keys are strings: the schema's string part). */
static int key_schema(sc *c, json_t *pn, char *key) {
  if (!json_is_object(pn)) return sc_fail(c, "propertyNames must be a schema");
  json_t *t = json_object_get(pn, "type");
  json_t *k = json_copy(pn);
  if (!k) return sc_fail(c, "out of memory");
  if (!t || json_is_array(t)) json_object_set_new(k, "type", json_string("string"));
  else if (!json_is_string(t) || strcmp(json_string_value(t), "string")) { /* no string passes: no keys */
    json_decref(k);
    snprintf(key, SC_NAME, "nothing");
    return 0;
  }
  const int rc = sc_gen(c, k, key);
  json_decref(k);
  return rc;
}

/* dependentRequired and the array form of dependencies, as {name: [names]} pairs into *out (a
 * new object); 0 or -1. */
static int required_deps(sc *c, json_t *s, json_t **out) {
  *out = json_object();
  if (!*out) return sc_fail(c, "out of memory");
  static const char *const kws[] = {"dependentRequired", "dependencies"};
  for (int k = 0; k < 2; k++) {
    json_t *d = json_object_get(s, kws[k]), *v;
    const char *t;
    if (d && !json_is_object(d)) return sc_fail(c, "%s must be an object", kws[k]);
    json_object_foreach(d, t, v) {
      if (!json_is_array(v)) {
        if (k == 0) return sc_fail(c, "dependentRequired values must be arrays of names");
        continue; /* a schema dependency: split off before (gen_dep_schema) */
      }
      size_t i;
      json_t *x;
      json_array_foreach(v, i, x) if (!json_is_string(x)) return sc_fail(c, "%s must list names (strings)", kws[k]);
      json_t *have = json_object_get(*out, t);
      if (have) json_array_extend(have, v);
      else json_object_set(*out, t, v);
    }
  }
  return 0;
}

/* Whether keys other than the listed properties may appear: additionalProperties not false;
 * missing, it is false when properties or patternProperties is given (strict output). */
static int extras_on(json_t *s) {
  json_t *add = json_object_get(s, "additionalProperties");
  if (add) return !json_is_false(add);
  return !json_object_get(s, "properties") && !json_object_get(s, "patternProperties");
}

/* Whether the regex re (a search, as `pattern`) matches the string name; 0 / 1, -1 on failure. */
static int regex_finds(sc *c, const char *re, const char *name) {
  char *expr;
  q35_err e;
  if (cn_regex_to_gbnf(re, strlen(re), 1, &expr, &e)) return sc_fail(c, "patternProperties: %s", e.msg);
  q35_buf g = {0};
  q35_buf_printf(&g, "root ::= %s\n", expr);
  free(expr);
  cn_grammar *gr = g.oom ? NULL : cn_gbnf_compile(g.p, g.n, &e);
  q35_buf_free(&g);
  if (!gr) return strstr(e.msg, "matches no string") ? 0 : sc_fail(c, "patternProperties: %s", e.msg);
  cn_matcher *m = cn_matcher_new(gr, &e);
  int found = -1;
  if (m) {
    int32_t st = cn_start(m);
    for (const char *q = name; *q && st >= 0; q++) st = cn_step(m, st, (uint8_t)*q);
    found = st >= 0 && cn_complete(m, st);
  }
  cn_matcher_free(m);
  cn_grammar_free(gr);
  return found < 0 ? sc_fail(c, "out of memory") : found;
}

/* patternProperties: with additional properties off, the keys besides the listed ones are the
 * strings that match a pattern, and their values follow its schema. Exact when every pattern has
 * the same schema (a key matching several then needs that one schema) and no listed name matches
 * a pattern (else that name could be written as a pattern key with only the pattern's schema).
 * With additional properties on, only patterns whose schema is true are exact (they change
 * nothing). The key ws ":" ws value rule into extra_buf (empty: no pattern keys); 0 or -1. */
static int pattern_extra(sc *c, json_t *s, const prop *p, int n, char *extra_buf) {
  json_t *pp = json_object_get(s, "patternProperties"), *v, *first = NULL;
  const char *re;
  extra_buf[0] = 0;
  if (!pp) return 0;
  if (!json_is_object(pp)) return sc_fail(c, "patternProperties must be an object");
  int trivial = 1;
  json_object_foreach(pp, re, v) {
    if (!json_is_true(v) && !(json_is_object(v) && !json_object_size(v))) trivial = 0;
    if (!first) first = v;
    else if (!json_equal(first, v))
      return sc_fail(c, "patternProperties whose patterns have different schemas is not supported");
  }
  if (!first || (trivial && extras_on(s))) return 0;
  if (extras_on(s))
    return sc_fail(c, "patternProperties beside additional properties that are allowed is not supported "
                      "(additionalProperties false is)");
  if (json_object_get(s, "propertyNames")) return sc_fail(c, "patternProperties together with propertyNames is not supported");
  json_t *keys = json_array();
  json_object_foreach(pp, re, v) {
    for (int j = 0; j < n; j++) {
      const int f = regex_finds(c, re, p[j].key);
      if (f) {
        json_decref(keys);
        return f < 0 ? -1 : sc_fail(c, "patternProperties \"%s\" matching the listed property \"%s\" is not supported", re, p[j].key);
      }
    }
    json_array_append_new(keys, json_pack("{s:s,s:s}", "type", "string", "pattern", re));
  }
  json_t *ks = json_array_size(keys) == 1 ? json_incref(json_array_get(keys, 0)) : json_pack("{s:O}", "anyOf", keys);
  json_decref(keys);
  char key[SC_NAME], val[SC_NAME];
  int rc = ks ? sc_gen(c, ks, key) : sc_fail(c, "out of memory");
  json_decref(ks);
  if (!rc) rc = sc_gen(c, first, val);
  if (rc) return -1;
  q35_buf kv = {0};
  q35_buf_printf(&kv, "%s ws \":\" ws %s", key, val);
  sc_new_name(c, extra_buf);
  sc_put_rule(c, extra_buf, &kv);
  return 0;
}

/* Names the object must track (required ones, dependentRequired's) that `properties` does not
 * list, while additional properties are allowed: listed here with the additional schema (an
 * optional property that is written at most once), so the any-order grammar can count them.
 * The same language: such a key is an additional property either way. 1 when *out is that
 * new schema, 0 when nothing changes, -1 on failure. */
static int promote_names(sc *c, json_t *s, json_t *deps, json_t **out) {
  json_t *props = json_object_get(s, "properties"), *add = json_object_get(s, "additionalProperties");
  if (!extras_on(s)) return 0;
  json_t *names = json_array();
  size_t i;
  json_t *x, *v;
  const char *t;
  json_array_foreach(json_object_get(s, "required"), i, x) json_array_append(names, x);
  json_object_foreach(deps, t, v) {
    json_array_append_new(names, json_string(t));
    json_array_extend(names, v);
  }
  json_t *np = NULL;
  json_array_foreach(names, i, x) {
    if (!json_is_string(x) || json_object_get(props, json_string_value(x))) continue;
    if (!np) np = props ? json_copy(props) : json_object();
    json_object_set(np, json_string_value(x), add ? add : json_true());
  }
  json_decref(names);
  if (!np) return 0;
  *out = json_copy(s);
  json_object_set_new(*out, "properties", np);
  if (!add) json_object_set_new(*out, "additionalProperties", json_true()); /* the policy without properties */
  return c->failed ? -1 : 1;
}

static int gen_object(sc *c, json_t *s, char *name) {
  json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
  json_t *add = json_object_get(s, "additionalProperties");
  if (props && !json_is_object(props)) return sc_fail(c, "properties must be an object");
  if (req && !json_is_array(req)) return sc_fail(c, "required must be an array");
  json_t *deps, *promoted;
  if (required_deps(c, s, &deps)) {
    json_decref(deps);
    return -1;
  }
  const int pr = promote_names(c, s, deps, &promoted);
  if (pr) {
    json_decref(deps);
    if (pr < 0) return -1;
    const int rc = gen_object(c, promoted, name);
    json_decref(promoted);
    return rc;
  }
  const int n = props ? (int)json_object_size(props) : 0;
  prop *p = calloc((size_t)n + 1, sizeof *p);
  if (!p) {
    json_decref(deps);
    return sc_fail(c, "out of memory");
  }
  int i = 0, rc = 0;
  const char *k;
  json_t *v;
  uint32_t reqmask = 0;
  json_object_foreach(props, k, v) {
    char val[SC_NAME];
    if (sc_gen(c, v, val)) {
      rc = -1;
      break;
    }
    p[i].key = k;
    size_t j;
    json_t *r;
    json_array_foreach(req, j, r) if (json_is_string(r) && !strcmp(json_string_value(r), k)) p[i].required = 1;
    if (p[i].required && i < 32) reqmask |= 1u << i;
    q35_buf kv = {0};
    json_t *ks = json_string(k);
    char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
    json_decref(ks);
    if (!kj) {
      rc = sc_fail(c, "out of memory");
      break;
    }
    sc_literal(&kv, kj, strlen(kj));
    free(kj);
    q35_buf_printf(&kv, " ws \":\" ws %s", val);
    sc_new_name(c, p[i].kv);
    sc_put_rule(c, p[i].kv, &kv);
    i++;
  }
  if (!rc) { /* a required name that is not listed can never be produced */
    size_t j;
    json_t *r;
    json_array_foreach(req, j, r) {
      if (!json_is_string(r)) rc = sc_fail(c, "required must list strings");
      else if (!json_object_get(props, json_string_value(r)) && !extras_on(s))
        rc = sc_fail(c, "required property \"%s\" is not in properties (additional properties are off)",
                     json_string_value(r));
      if (rc) break;
    }
  }
  long long pmin = 0, pmax = -1;
  json_t *pn = json_object_get(s, "propertyNames");
  if (!rc) rc = object_counts(c, s, &pmin, &pmax);
  if (!rc && pn && !json_is_true(pn) && !(json_is_object(pn) && !json_object_size(pn))) {
    if (json_is_false(pn)) pmax = 0;
    else if (n > 0) rc = sc_fail(c, "propertyNames together with properties is not supported");
  } else {
    pn = NULL;
  }
  char extra_buf[SC_NAME], *extra = NULL;
  if (!rc && pmax != 0 && (rc = pattern_extra(c, s, p, i, extra_buf)) == 0 && extra_buf[0]) {
    extra = extra_buf;
  } else if (!rc && pmax != 0 && extras_on(s)) {
    char val[SC_NAME] = "value";
    if (add && !json_is_true(add) && sc_gen(c, add, val)) rc = -1;
    char key[SC_NAME];
    const char **names = calloc((size_t)n + 1, sizeof *names);
    for (int j = 0; names && j < i; j++) names[j] = p[j].key;
    if (rc) {
      /* failed above */
    } else if (pn) {
      rc = key_schema(c, pn, key);
    } else if (!names || other_key(c, names, i, key)) {
      rc = names ? -1 : sc_fail(c, "out of memory");
    }
    free(names);
    if (!rc) {
      q35_buf kv = {0};
      q35_buf_printf(&kv, "%s ws \":\" ws %s", key, val);
      sc_new_name(c, extra_buf);
      sc_put_rule(c, extra_buf, &kv);
      extra = extra_buf;
    }
  }
  /* dependencies among the listed properties (others cannot appear: additional properties are
   * off, or they were promoted above); one that needs an unlistable name can never be written
   * (bit 31: never set) */
  uint32_t dep[MAX_ANY_ORDER] = {0}, rdep[MAX_ANY_ORDER] = {0};
  int *rel = calloc((size_t)n + 1, sizeof *rel), nr = 0;
  if (!rel && !rc) rc = sc_fail(c, "out of memory");
  for (int j = 0; rel && j < n; j++) rel[j] = -1;
  if (!rc && json_object_size(deps)) {
    /* with more than MAX_ANY_ORDER listed properties (schema order) the properties that take
     * part in a dependency are tracked apart: at most MAX_ANY_ORDER of them */
    const char *t;
    json_t *v;
    json_object_foreach(deps, t, v) {
      if (rc) break;
      int ti = -1;
      for (int j = 0; j < n; j++)
        if (!strcmp(p[j].key, t)) ti = j;
      size_t k;
      json_t *x;
      json_array_foreach(v, k, x) {
        if (ti < 0 || rc) break;
        int di = -1;
        for (int j = 0; j < n; j++)
          if (!strcmp(p[j].key, json_string_value(x))) di = j;
        if (n <= MAX_ANY_ORDER) {
          dep[ti] |= di >= 0 ? 1u << di : 1u << 31;
          continue;
        }
        for (int w = 0; w < 2; w++) {
          const int j = w ? di : ti;
          if (j >= 0 && rel[j] < 0) {
            if (nr == MAX_ANY_ORDER) {
              rc = sc_fail(c, "dependentRequired / dependencies among more than %d properties of an object with more "
                              "than %d is not supported", MAX_ANY_ORDER, MAX_ANY_ORDER);
              break;
            }
            rel[j] = nr++;
          }
        }
        if (!rc) rdep[rel[ti]] |= di >= 0 ? 1u << rel[di] : 1u << 31;
      }
    }
  }
  json_decref(deps);
  const int counted = pmin > 0 || pmax >= 0;
  if (!rc && counted && extra && n > 0)
    rc = sc_fail(c, "minProperties / maxProperties on an object with listed and additional properties is not supported");
  if (!rc && counted && n > MAX_ANY_ORDER)
    rc = sc_fail(c, "minProperties / maxProperties with more than %d listed properties is not supported", MAX_ANY_ORDER);
  if (!rc) {
    q35_buf b = {0};
    if (counted && extra) object_counted_extra(extra, pmin, pmax, &b);
    else if (n <= MAX_ANY_ORDER) object_any_order(c, p, n, extra, reqmask, dep, pmin, pmax, &b);
    else rc = object_in_order(c, p, n, extra, rel, rdep, nr, &b);
    sc_new_name(c, name);
    sc_put_rule(c, name, &b);
  }
  free(rel);
  free(p);
  return rc;
}

/* ---- schema dependencies ----
 * dependentSchemas {t: D} (and dependencies with a schema value): an object with property t
 * must also satisfy D. Exactly: anyOf[ the schema with t forbidden (properties.t = false),
 * allOf[ the schema with t required, D ] ] (allOf merged as usual, refused where that merge
 * is inexact). Non-objects pass both branches as they pass the schema. One dependency is split
 * off per step, at most SC_MAX_DEP_SCHEMAS of them (each doubles the alternatives). */
#define SC_MAX_DEP_SCHEMAS 4

static int dep_schema(json_t *s, const char **kw, const char **t, json_t **d) {
  static const char *const kws[] = {"dependentSchemas", "dependencies"};
  for (int k = 0; k < 2; k++) {
    json_t *o = json_object_get(s, kws[k]), *v;
    const char *key;
    json_object_foreach(o, key, v) if (!json_is_array(v)) {
        *kw = kws[k];
        *t = key;
        *d = v;
        return 1;
      }
  }
  return 0;
}

static int gen_dep_schema(sc *c, json_t *s, char *name) {
  const char *kw, *t;
  json_t *d;
  dep_schema(s, &kw, &t, &d);
  int n_deps = 0;
  json_t *v;
  const char *key;
  json_object_foreach(json_object_get(s, "dependentSchemas"), key, v) n_deps++;
  json_object_foreach(json_object_get(s, "dependencies"), key, v) n_deps += !json_is_array(v);
  if (n_deps > SC_MAX_DEP_SCHEMAS)
    return sc_fail(c, "%s with more than %d schema dependencies is not supported", kw, SC_MAX_DEP_SCHEMAS);
  if (!json_is_object(d) && !json_is_boolean(d)) return sc_fail(c, "%s values must be schemas", kw);
  json_t *base = json_deep_copy(s);
  if (!base) return sc_fail(c, "out of memory");
  json_t *o = json_object_get(base, kw);
  json_t *dep = json_incref(json_object_get(o, t));
  json_object_del(o, t);
  if (!json_object_size(o)) json_object_del(base, kw);
  /* the policy for a missing additionalProperties, made explicit: listing t must not change it */
  json_t *props = json_object_get(base, "properties"), *add = json_object_get(base, "additionalProperties");
  if (!add) json_object_set_new(base, "additionalProperties", json_boolean(extras_on(base)));
  add = json_object_get(base, "additionalProperties");
  const int can_appear = (props && json_object_get(props, t) && !json_is_false(json_object_get(props, t))) ||
                         (!json_object_get(props, t) && !json_is_false(add)) ||
                         json_object_get(base, "patternProperties"); /* t may match a pattern */
  json_t *alt;
  if (!can_appear) { /* t is never written: the dependency never applies */
    alt = json_incref(base);
  } else {
    json_t *without = json_deep_copy(base), *with = json_deep_copy(base);
    if (!json_object_get(without, "properties")) json_object_set_new(without, "properties", json_object());
    json_object_set_new(json_object_get(without, "properties"), t, json_false());
    json_t *req = json_object_get(with, "required");
    if (!json_is_array(req)) json_object_set_new(with, "required", req = json_array());
    json_array_append_new(req, json_string(t));
    alt = json_pack("{s:[o,{s:[o,O]}]}", "anyOf", without, "allOf", with, dep);
  }
  json_decref(dep);
  json_decref(base);
  if (!alt) return sc_fail(c, "out of memory");
  const int rc = sc_gen(c, alt, name);
  json_decref(alt);
  return rc;
}

/* ---- if / then / else ----
 * (if and then) or (not if and else), as anyOf[allOf[S, if, then], allOf[S, N, else]...] where
 * S is the schema without if/then/else and the Ns are schemas whose union is exactly where `if`
 * fails. Exact where that negation is: `if` a type test (N: not that type); `if` number bounds
 * (N_k: a number past bound k the other way); `if` requiring names (N_k: an object without name
 * k); `if` holding one property to enum / const values
 * (and maybe requiring it) while S gives that property an enum (N: the property present with
 * one of S's other values; an object without it also fails `if` when `if` requires it).
 * Non-objects pass `if`'s object keywords, so they take `then`. Others are refused. */
static int only_keys(json_t *o, const char *const *keys) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) if (!in_list(keys, k) && !in_list(annotations, k)) return 0;
  return 1;
}

static int gen_if(sc *c, json_t *s, char *name) {
  json_t *cond = json_object_get(s, "if"), *then = json_object_get(s, "then"), *els = json_object_get(s, "else");
  json_t *base = json_copy(s);
  if (!base) return sc_fail(c, "out of memory");
  json_object_del(base, "if");
  json_object_del(base, "then");
  json_object_del(base, "else");
  if (!then) then = json_true();
  if (!els) els = json_true();
  json_t *neg = json_array(), *out = NULL; /* the Ns */
  int rc = 0;
  static const char *const type_only[] = {"type", NULL}, *const req_only[] = {"required", "type", NULL},
                           *const disc[] = {"properties", "required", "type", NULL},
                           *const bounds_only[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
  json_t *ct = json_is_object(cond) ? json_object_get(cond, "type") : NULL;
  const int object_type = !ct || (json_is_string(ct) && !strcmp(json_string_value(ct), "object"));
  if (!cond) {
    out = json_incref(base);
  } else if (json_is_boolean(cond) || (json_is_object(cond) && !json_object_size(cond))) {
    out = json_pack("{s:[O,O]}", "allOf", base, json_is_false(cond) ? els : then);
  } else if (!json_is_object(cond)) {
    rc = sc_fail(c, "if must be a schema");
  } else if (only_keys(cond, type_only)) {
    json_array_append_new(neg, json_pack("{s:O}", "not", cond));
  } else if (only_keys(cond, bounds_only) && json_object_size(cond)) {
    /* number bounds: each one's opposite (a number that fails it); non-numbers pass `if` */
    static const char *const opp[4][2] = {{"minimum", "exclusiveMaximum"}, {"exclusiveMinimum", "maximum"},
                                          {"maximum", "exclusiveMinimum"}, {"exclusiveMaximum", "minimum"}};
    for (int k = 0; k < 4 && !rc; k++) {
      json_t *b = json_object_get(cond, opp[k][0]);
      if (!b) continue;
      if (!json_is_number(b)) rc = sc_fail(c, "if: %s must be a number (draft 4's boolean forms are not supported here)", opp[k][0]);
      else json_array_append_new(neg, json_pack("{s:s,s:O}", "type", "number", opp[k][1], b));
    }
  } else if (only_keys(cond, req_only) && object_type && json_is_array(json_object_get(cond, "required"))) {
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(cond, "required"), i, r) {
      if (!json_is_string(r)) rc = sc_fail(c, "required must list strings");
      else json_array_append_new(neg, json_pack("{s:s,s:{s:b},s:b}", "type", "object", "properties", json_string_value(r),
                                                0, "additionalProperties", 1));
    }
    if (!json_array_size(json_object_get(cond, "required"))) { /* requires nothing: `if` always holds */
      json_decref(neg);
      neg = json_array();
      out = json_pack("{s:[O,O]}", "allOf", base, then);
    }
  } else if (only_keys(cond, disc) && object_type && json_is_object(json_object_get(cond, "properties")) &&
             json_object_size(json_object_get(cond, "properties")) == 1) {
    const char *p = NULL;
    json_t *ps, *r, *x;
    json_object_foreach(json_object_get(cond, "properties"), p, ps) break;
    json_t *req = json_object_get(cond, "required"), *vals = NULL;
    size_t i;
    int req_p = 0, req_other = 0;
    json_array_foreach(req, i, r) {
      if (json_is_string(r) && !strcmp(json_string_value(r), p)) req_p = 1;
      else req_other = 1;
    }
    if (json_is_object(ps) && only_keys(ps, (const char *const[]){"const", "enum", NULL}))
      vals = json_object_get(ps, "const") ? json_pack("[O]", json_object_get(ps, "const")) : json_incref(json_object_get(ps, "enum"));
    json_t *bp = json_object_get(json_object_get(base, "properties"), p);
    json_t *be = json_is_object(bp) ? (json_object_get(bp, "const") ? json_pack("[O]", json_object_get(bp, "const"))
                                                                     : json_incref(json_object_get(bp, "enum")))
                                    : NULL;
    if (!json_is_array(vals) || !json_is_array(be) || req_other || (req && !json_is_array(req))) {
      rc = sc_fail(c, "if / then / else is supported where `if` is a type test, number bounds, a list of required "
                      "names, or one property's const / enum that the schema also gives as an enum");
    } else {
      json_t *rest = json_array(); /* the property's values `if` refuses */
      json_array_foreach(be, i, x) {
        int in = 0;
        size_t j;
        json_t *y;
        json_array_foreach(vals, j, y) in |= json_equal(x, y);
        if (!in) json_array_append(rest, x);
      }
      json_array_append_new(neg, json_pack("{s:s,s:{s:{s:o}},s:[s],s:b}", "type", "object", "properties", p, "enum", rest,
                                           "required", p, "additionalProperties", 1));
      if (req_p) json_array_append_new(neg, json_pack("{s:s,s:{s:b},s:b}", "type", "object", "properties", p, 0,
                                                      "additionalProperties", 1));
    }
    json_decref(vals);
    json_decref(be);
  } else {
    rc = sc_fail(c, "if / then / else is supported where `if` is a type test, number bounds, a list of required "
                    "names, or one property's const / enum that the schema also gives as an enum");
  }
  if (!rc && !out && ct && json_array_size(neg) && !only_keys(cond, type_only)) /* `if` tests for an object: */
    json_array_append_new(neg, json_pack("{s:{s:s}}", "not", "type", "object")); /* non-objects fail it */
  if (!rc && !out) {
    /* S with its additionalProperties policy written out (where S is about objects), so merging
     * the branches' properties keeps it */
    json_t *bt = json_object_get(base, "type");
    int objecty = has_any(base, object_kw) || (json_is_string(bt) && !strcmp(json_string_value(bt), "object"));
    size_t ti;
    json_t *tv;
    json_array_foreach(bt, ti, tv) objecty |= json_is_string(tv) && !strcmp(json_string_value(tv), "object");
    if (objecty && !json_object_get(base, "additionalProperties"))
      json_object_set_new(base, "additionalProperties", json_boolean(extras_on(base)));
    json_t *alts = json_array();
    json_array_append_new(alts, json_pack("{s:[O,O,O]}", "allOf", base, cond, then));
    size_t i;
    json_t *n;
    json_array_foreach(neg, i, n) json_array_append_new(alts, json_pack("{s:[O,O,O]}", "allOf", base, n, els));
    out = json_pack("{s:o}", "anyOf", alts);
  }
  if (!rc && !out) rc = sc_fail(c, "out of memory");
  if (!rc) rc = sc_gen(c, out, name);
  json_decref(out);
  json_decref(neg);
  json_decref(base);
  return rc;
}

/* ---- dispatch ---- */


static int gen_type(sc *c, json_t *s, const char *t, char *name) {
  if (!strcmp(t, "object")) return gen_object(c, s, name);
  if (!strcmp(t, "array")) return sc_gen_array(c, s, name);
  if (!strcmp(t, "string")) return sc_gen_string(c, s, name);
  if (!strcmp(t, "number")) return sc_gen_number(c, s, 0, name);
  if (!strcmp(t, "integer")) return sc_gen_number(c, s, 1, name);
  if (!strcmp(t, "boolean") || !strcmp(t, "null")) {
    snprintf(name, SC_NAME, "%s", t);
    return 0;
  }
  return sc_fail(c, "unknown type \"%s\"", t);
}

static int gen_not(sc *c, json_t *s, char *name) {
  unsigned keep;
  if (sc_not_types(c, json_object_get(s, "not"), &keep)) return -1;
  json_t *r = sc_restrict_types(s, keep);
  if (!r) return sc_fail(c, "out of memory");
  const int rc = sc_gen(c, r, name);
  json_decref(r);
  return rc;
}

static int gen_all_of(sc *c, json_t *s, char *name) {
  json_t *m;
  if (sc_merge_all_of(c, s, &m)) return -1;
  const int rc = sc_gen(c, m, name);
  json_decref(m);
  return rc;
}

int sc_gen(sc *c, json_t *s, char *name) {
  if (c->failed) return -1;
  if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
    snprintf(name, SC_NAME, "value");
    return 0;
  }
  if (json_is_false(s)) {
    snprintf(name, SC_NAME, "nothing");
    return 0;
  }
  if (!json_is_object(s)) return sc_fail(c, "a schema must be an object or a boolean");
  if (++c->depth > SC_MAX_DEPTH) return sc_fail(c, "schema nested too deeply");
  int rc;
  json_t *type = json_object_get(s, "type");
  if (check_keywords(c, s)) rc = -1;
  else if (json_object_get(s, "not")) rc = gen_not(c, s, name);
  else if (json_object_get(s, "allOf")) rc = gen_all_of(c, s, name);
  else if (json_object_get(s, "if") || json_object_get(s, "then") || json_object_get(s, "else")) rc = gen_if(c, s, name);
  else if (json_object_get(s, "$ref")) rc = gen_ref(c, s, name);
  else if (json_object_get(s, "const") || json_object_get(s, "enum")) rc = gen_enum(c, s, name);
  else if (json_object_get(s, "anyOf")) rc = gen_any_of(c, s, "anyOf", name);
  else if (json_object_get(s, "oneOf")) rc = gen_any_of(c, s, "oneOf", name);
  else if (dep_schema(s, &(const char *){0}, &(const char *){0}, &(json_t *){0})) rc = gen_dep_schema(c, s, name);
  else if (json_is_string(type)) rc = gen_type(c, s, json_string_value(type), name);
  else if (json_is_array(type)) {
    q35_buf b = {0};
    size_t i;
    json_t *t;
    rc = json_array_size(type) ? 0 : sc_fail(c, "type must not be an empty array");
    json_array_foreach(type, i, t) {
      char sub[SC_NAME];
      if (!json_is_string(t) || gen_type(c, s, json_string_value(t), sub)) {
        rc = json_is_string(t) ? -1 : sc_fail(c, "type must be a string or an array of strings");
        break;
      }
      q35_buf_printf(&b, "%s%s", i ? " | " : "", sub);
    }
    if (!rc) {
      sc_new_name(c, name);
      sc_put_rule(c, name, &b);
    } else {
      q35_buf_free(&b);
    }
  } else if (type) rc = sc_fail(c, "type must be a string or an array of strings");
  else if (has_any(s, object_kw)) rc = gen_object(c, s, name);
  else if (has_any(s, array_kw) || json_is_true(json_object_get(s, "uniqueItems"))) rc = sc_gen_array(c, s, name);
  else if (has_any(s, string_kw)) rc = sc_gen_string(c, s, name);
  else if (has_any(s, number_kw)) rc = sc_gen_number(c, s, 0, name);
  else {
    snprintf(name, SC_NAME, "value");
    rc = 0;
  }
  c->depth--;
  return c->failed ? -1 : rc;
}

int cn_schema_to_gbnf(const char *text, size_t len, int json_object, int ws_max, char **out, q35_err *err) {
  sc c = {0};
  c.err = err;
  json_error_t je;
  if (json_object) {
    c.doc = NULL;
  } else if (!(c.doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je))) {
    return q35_seterr(err, "json schema: not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
  }
  put_primitives(&c, ws_max);
  char root[SC_NAME] = "object";
  if (!json_object && sc_gen(&c, c.doc, root)) {
    /* message set */
  } else {
    q35_buf_printf(&c.out, "root ::= %s\n", root);
  }
  for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
  free(c.refs);
  json_decref(c.doc);
  if (c.failed || c.out.oom) {
    if (!c.failed) q35_seterr(err, "json schema: out of memory");
    q35_buf_free(&c.out);
    return -1;
  }
  *out = q35_buf_take(&c.out, NULL);
  return 0;
}
