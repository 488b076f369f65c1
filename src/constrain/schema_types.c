/*
 * schema_types.c - JSON Schema to GBNF for strings (lengths, pattern, formats) and arrays
 * (items, prefixItems, counts, contains). Numbers and integers are in schema_number.c.
 *
 * Formats: date (months with their day counts, February up to 29), time (hh:mm:ss, optional
 * fraction, Z or an offset), date-time, uuid, email (ajv-formats' grammar), uri and uri-reference
 * (RFC 3986 with a registered-name host), uri-template (RFC 6570, ajv-formats' check); others
 * are refused.
 */
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
    /* uri-reference: RFC 3986's URI-reference with a registered-name host, a subset of
     * ajv-formats' uri-reference: an optional scheme, then "//" authority and path, an absolute
     * path, or a relative one (without a scheme its first segment has no ':', which would read
     * as a scheme), or nothing; then an optional query and fragment */
#define SEG0 "( [a-zA-Z0-9._~!$&'()*+,;=@-] | " PCT " )"
    static const char uri_reference[] =
        "( [a-zA-Z] [a-zA-Z0-9+.-]* \":\" ( \"//\" ( ( [a-zA-Z0-9._~!$&'()*+,;=:-] | " PCT " )* \"@\" )?"
        " ( [a-zA-Z0-9._~!$&'()*+,;=-] | " PCT " )* ( \":\" [0-9]* )? ( \"/\" " PCHAR "* )*"
        " | \"/\" ( " PCHAR "+ ( \"/\" " PCHAR "* )* )? | " PCHAR "+ ( \"/\" " PCHAR "* )* )?"
        " | \"//\" ( ( [a-zA-Z0-9._~!$&'()*+,;=:-] | " PCT " )* \"@\" )?"
        " ( [a-zA-Z0-9._~!$&'()*+,;=-] | " PCT " )* ( \":\" [0-9]* )? ( \"/\" " PCHAR "* )*"
        " | \"/\" ( " PCHAR "+ ( \"/\" " PCHAR "* )* )? | " SEG0 "+ ( \"/\" " PCHAR "* )* | \"\" )"
        " ( \"?\" ( " PCHAR " | [/?] )* )? ( \"#\" ( " PCHAR " | [/?] )* )?";
#undef SEG0
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
    else if (!strcmp(f, "uri-reference")) q35_buf_str(&b, uri_reference);
    else {
      q35_buf_free(&b);
      return sc_fail(c, "format \"%s\" is not supported (date, time, date-time, uuid, email, uri, uri-reference, "
                        "uri-template are)", f);
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

/* uniqueItems over a finite set of values V (|V| <= UNIQUE_MAX): the arrays of distinct members
 * of V, between lo and hi of them (hi < 0: any), as rules U_S ("after the set S, written"). */
#define UNIQUE_MAX 8

static int gen_unique(sc *c, json_t *vals, long long lo, long long hi, char *name) {
  const int k = (int)json_array_size(vals);
  char base[SC_NAME], nm[SC_NAME + 16];
  sc_new_name(c, base);
  for (uint32_t S = 0; S < (1u << k); S++) {
    q35_buf b = {0};
    int alts = 0;
    const int cnt = __builtin_popcount(S);
    if (cnt >= lo) {
      q35_buf_str(&b, "\"]\"");
      alts++;
    }
    for (int i = 0; i < k && (hi < 0 || cnt < hi); i++) {
      if (S >> i & 1) continue;
      q35_buf_str(&b, alts++ ? " | \",\" ws " : "\",\" ws ");
      sc_put_value(&b, json_array_get(vals, (size_t)i));
      q35_buf_printf(&b, " ws %s-%u", base, S | 1u << i);
    }
    if (!alts || !S) { /* S empty is written by the opening below */
      q35_buf_free(&b);
      if (S) q35_buf_str(&b, "nothing");
      else continue;
    }
    snprintf(nm, sizeof nm, "%s-%u", base, S);
    sc_put_rule(c, nm, &b);
  }
  q35_buf b = {0};
  int alts = 0;
  q35_buf_str(&b, "\"[\" ws ( ");
  if (lo <= 0) {
    q35_buf_str(&b, "\"]\"");
    alts++;
  }
  for (int i = 0; i < k && hi != 0; i++) {
    q35_buf_str(&b, alts++ ? " | " : "");
    sc_put_value(&b, json_array_get(vals, (size_t)i));
    q35_buf_printf(&b, " ws %s-%u", base, 1u << i);
  }
  q35_buf_str(&b, alts ? " )" : "nothing )");
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
  if (json_is_true(json_object_get(s, "uniqueItems")) && !(mx && json_integer_value(mx) <= 1)) {
    /* distinct items: exact over a small finite set of values; at most one item is always unique */
    json_t *vals = NULL;
    if (!tuple && !cont && rest && sc_finite_values(c, rest, &vals)) return -1;
    if (!vals || json_array_size(vals) > UNIQUE_MAX) {
      json_decref(vals);
      return sc_fail(c, "uniqueItems true is supported for items with at most %d values (enum, const, booleans, null), "
                        "without prefixItems or contains, or with maxItems <= 1", UNIQUE_MAX);
    }
    const int rc = gen_unique(c, vals, json_integer_value(mn), mx ? json_integer_value(mx) : -1, name);
    json_decref(vals);
    return rc;
  }
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
