/*
 * openai_constraint.c - what a request asks the decoder to be constrained to (see openai.h):
 * response_format (text, json_object, json_schema), llama-server's `grammar` and `json_schema`,
 * a forced tool call (tool_choice "required" or a named function) and strict tool arguments.
 *
 * oai_parse_constraint reads and shape-checks the fields; oai_constraint_build (through
 * oai_apply_constraint for chat/completions; responses.c and anthropic.c call it directly) is the
 * one place that turns them into a q35_constraint on the job (src/constrain/, include/q35.h):
 *   - response_format / json_schema / grammar alone, thinking off: the language itself;
 *   - otherwise one GBNF grammar the server writes: the language's rules (renamed "j-..."),
 *     Qwen3.5's XML tool calls "<tool_call>
<function=NAME>
<parameter=P>
VALUE
</parameter>

 *     ...</function>
</tool_call>" (chat.c's format) with each value constrained by its
 *     parameter's schema (a string parameter is raw text, its enum the literals; other types
 *     compact JSON of the schema; parameters in the schema's order, the required ones present);
 *   - lazy activation (the job's triggers, sched.h): with thinking on, from "</think>" (the
 *     reasoning is free); tool_choice auto with strict tools, from the "<tool_call>" opening.
 * A language that does not compile is a 400 naming the field and the compiler's message.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/openai.h"

static int parse_response_format(const json_t *v, oai_constraint *c, oai_error *e) {
  if (!json_is_object(v)) return oai_bad(e, "response_format", "'response_format' must be an object");
  const json_t *t = json_object_get(v, "type");
  const char *ts = json_string_value(t);
  if (!ts) return oai_bad(e, "response_format", "'response_format.type' must be a string");
  static const char *const keys[] = {"type", "json_schema", NULL};
  static const char *const jkeys[] = {"name", "description", "schema", "strict", NULL};
  const char *u = api_unknown_key(v, keys);
  const json_t *js0 = json_object_get(v, "json_schema");
  if (!u && json_is_object(js0)) u = api_unknown_key(js0, jkeys);
  if (u) return oai_bad(e, "response_format", "'response_format' has an unknown field '%s'", u);
  if (!strcmp(ts, "text")) return 0;
  if (!strcmp(ts, "json_object")) {
    c->kind = OAI_CONSTRAINT_JSON_OBJECT;
    c->param = "response_format";
    return 0;
  }
  if (!strcmp(ts, "json_schema")) {
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js) || !json_is_string(json_object_get(js, "name")))
      return oai_bad(e, "response_format",
                     "'response_format.json_schema' must be an object with a 'name' (and a 'schema')");
    const json_t *sc = json_object_get(js, "schema");
    if (sc && !json_is_null(sc) && !json_is_object(sc) && !json_is_boolean(sc))
      return oai_bad(e, "response_format", "'response_format.json_schema.schema' must be a JSON Schema object");
    c->kind = OAI_CONSTRAINT_JSON_SCHEMA;
    c->param = "response_format";
    c->schema = sc;
    c->schema_strict = json_is_true(json_object_get(js, "strict"));
    return 0;
  }
  return oai_bad(e, "response_format", "'response_format.type' is '%s'; it must be text, json_object or json_schema",
                 ts);
}

int oai_parse_constraint(const oai_model *M, const json_t *b, oai_request *r, oai_error *e) {
  (void)M;
  oai_constraint *c = &r->constraint;
  const json_t *v = json_object_get(b, "response_format");
  if (v && !json_is_null(v) && parse_response_format(v, c, e)) return -1;
  v = json_object_get(b, "json_schema"); /* llama-server */
  if (v && !json_is_null(v)) {
    if (!json_is_object(v) && !json_is_boolean(v)) return oai_bad(e, "json_schema", "'json_schema' must be an object");
    if (c->kind) return oai_bad(e, "json_schema", "give either 'response_format' or 'json_schema', not both");
    c->kind = OAI_CONSTRAINT_JSON_SCHEMA;
    c->param = "json_schema";
    c->schema = v;
  }
  v = json_object_get(b, "grammar"); /* llama-server */
  if (v && !json_is_null(v)) {
    if (!json_is_string(v)) return oai_bad(e, "grammar", "'grammar' must be a string (GBNF)");
    if (c->kind) return oai_bad(e, "grammar", "'grammar' cannot be combined with 'response_format' or 'json_schema'");
    c->kind = OAI_CONSTRAINT_GRAMMAR;
    c->param = "grammar";
    c->grammar = json_string_value(v);
  }
  return 0;
}

/* ---- building the constraint ---- */

/* A character of a raw-text parameter value: not '<' (it would open a tag) and no control
 * character but tab, LF and CR (a NUL would end the C strings the call parser reads). */
#define RAW "[^<\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]"

/* A GBNF string literal of s[0, n). */
static void g_lit(q35_buf *b, const char *s, size_t n) {
  q35_buf_char(b, '"');
  for (size_t i = 0; i < n; i++) {
    const unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') q35_buf_printf(b, "\\%c", ch);
    else if (ch == '\n') q35_buf_str(b, "\\n");
    else if (ch == '\r') q35_buf_str(b, "\\r");
    else if (ch == '\t') q35_buf_str(b, "\\t");
    else if (ch < 0x20) q35_buf_printf(b, "\\x%02x", ch);
    else q35_buf_char(b, (char)ch);
  }
  q35_buf_char(b, '"');
}

/* Append grammar g with every rule name prefixed by pfx (so several compiled grammars share one
 * text): names are the identifiers outside literals, classes, {m,n} counts and comments. */
static void g_embed(q35_buf *b, const char *g, const char *pfx) {
  for (const char *p = g; *p;) {
    const char c = *p;
    if (c == '"' || c == '[') {
      const char close = c == '"' ? '"' : ']';
      const char *q = p + 1;
      while (*q && *q != close) q += q[0] == '\\' && q[1] ? 2 : 1;
      if (*q) q++;
      q35_buf_add(b, p, (size_t)(q - p));
      p = q;
    } else if (c == '{' || c == '#') {
      const char *q = strchr(p, c == '{' ? '}' : '\n');
      q = q ? q + 1 : p + strlen(p);
      q35_buf_add(b, p, (size_t)(q - p));
      p = q;
    } else if (isalnum((unsigned char)c) || c == '_' || c == '-') {
      const char *q = p;
      while (isalnum((unsigned char)*q) || *q == '_' || *q == '-') q++;
      q35_buf_str(b, pfx);
      q35_buf_add(b, p, (size_t)(q - p));
      p = q;
    } else {
      q35_buf_char(b, c);
      p++;
    }
  }
  q35_buf_char(b, '\n');
}

static q35_constraint *compile(const oai_model *M, q35_constraint_kind k, const char *text, const char *param,
                               const char *what, oai_error *e) {
  q35_err err = {{0}};
  q35_constraint *c = q35_constraint_new(M->cvocab, k, text, text ? strlen(text) : 0, NULL, &err);
  if (!c) oai_bad(e, param, "%s does not compile: %s", what, err.msg);
  return c;
}

/* The GBNF rules of a compiled JSON Schema (root renamed pfx + "root"), or -1 (e filled when
 * must: a strict schema; otherwise the caller falls back to free text). */
static int schema_rules(const oai_model *M, q35_buf *b, const json_t *schema, const char *pfx, const char *param,
                        const char *what, int must, oai_error *e) {
  char *txt = json_dumps(schema, JSON_COMPACT);
  oai_error e2 = {0};
  q35_constraint *c = txt ? compile(M, Q35_CONSTRAINT_JSON_SCHEMA, txt, param, what, must ? e : &e2) : NULL;
  free(txt);
  if (!c) return -1;
  g_embed(b, q35_constraint_grammar(c), pfx);
  q35_constraint_free(c);
  return 0;
}

static int in_required(const json_t *params, const char *key) {
  const json_t *req = json_object_get(params, "required");
  for (size_t i = 0; i < json_array_size(req); i++)
    if (!strcmp(json_string_value(json_array_get(req, i)) ? json_string_value(json_array_get(req, i)) : "", key))
      return 1;
  return 0;
}

/* A string parameter is raw text in the XML call (chat.c reads it so): its enum / const as
 * literals, minLength / maxLength as a count of characters other than '<'. A strict tool's
 * schema is compiled first, so an unsupported keyword is refused by name; a pattern or a format
 * cannot be checked on raw text and is refused too (strict), or left free (forced, not strict). */
static int string_value(const oai_model *M, q35_buf *b, const json_t *sc, int fi, int pi, int typed, oai_error *e) {
  if (typed > 1) {
    q35_buf tmp = {0};
    const int rc = schema_rules(M, &tmp, sc, "x-", "tools", "a tool parameter's schema", 1, e);
    q35_buf_free(&tmp);
    if (rc) return -1;
    const char *kw = json_object_get(sc, "pattern") ? "pattern" : json_object_get(sc, "format") ? "format" : NULL;
    if (kw)
      return oai_bad(e, "tools", "a strict tool's string parameter with '%s' cannot be constrained: Qwen3.5's XML "
                     "tool calls carry strings as raw text", kw);
  }
  const json_t *en = json_object_get(sc, "enum"), *cn = json_object_get(sc, "const");
  q35_buf_printf(b, "v%d-%d ::= ", fi, pi);
  if (json_is_string(cn)) {
    g_lit(b, json_string_value(cn), json_string_length(cn));
  } else if (json_is_array(en) && json_array_size(en)) {
    for (size_t i = 0; i < json_array_size(en); i++) {
      const json_t *x = json_array_get(en, i);
      if (!json_is_string(x)) return oai_bad(e, "tools", "a string parameter's enum holds a non-string");
      if (i) q35_buf_str(b, " | ");
      g_lit(b, json_string_value(x), json_string_length(x));
    }
  } else {
    const json_t *mn = json_object_get(sc, "minLength"), *mx = json_object_get(sc, "maxLength");
    if (json_is_integer(mn) || json_is_integer(mx)) {
      const json_int_t lo = json_is_integer(mn) ? json_integer_value(mn) : 0;
      if (json_is_integer(mx)) q35_buf_printf(b, RAW "{%lld,%lld}", (long long)lo, (long long)json_integer_value(mx));
      else q35_buf_printf(b, RAW "{%lld,}", (long long)lo);
    } else {
      q35_buf_str(b, RAW "*");
    }
  }
  q35_buf_char(b, '\n');
  return 0;
}

/* The value rule v<fi>-<pi> of one parameter in Qwen3.5's XML call: a string parameter as raw
 * text (string_value); any other schema its compact JSON. typed as for tool_rules. */
static int param_value(const oai_model *M, q35_buf *b, const json_t *sc, int fi, int pi, int typed, oai_error *e) {
  char pfx[48];
  snprintf(pfx, sizeof pfx, "t%d-%d-", fi, pi);
  const char *ty = json_string_value(json_object_get(sc, "type"));
  if (typed && ty && !strcmp(ty, "string")) return string_value(M, b, sc, fi, pi, typed, e);
  if (typed && json_is_object(sc)) {
    if (schema_rules(M, b, sc, pfx, "tools", "a tool parameter's schema", typed > 1, e) == 0) {
      q35_buf_printf(b, "v%d-%d ::= %sroot\n", fi, pi, pfx);
      return 0;
    }
    if (typed > 1) return -1;
  }
  q35_buf_printf(b, "v%d-%d ::= " RAW "*\n", fi, pi);
  return 0;
}

/* Rule f<fi>: one function's XML body "<function=NAME>\n" parameters "</function>\n". typed: 2
 * strict (a schema that does not compile is a 400), 1 constrained where it compiles, 0 free. */
static int tool_rules(const oai_model *M, q35_buf *b, const json_t *fn, int fi, int typed, oai_error *e) {
  const char *name = json_string_value(json_object_get(fn, "name"));
  const json_t *params = json_object_get(fn, "parameters");
  const json_t *props = json_object_get(params, "properties");
  q35_buf body = {0};
  q35_buf_printf(&body, "f%d ::= ", fi);
  q35_buf fname = {0};
  q35_buf_printf(&fname, "<function=%s>\n", name);
  g_lit(&body, fname.p, fname.n);
  q35_buf_free(&fname);
  int pi = 0;
  const char *key;
  const json_t *sc;
  if (typed && json_is_object(props)) {
    json_object_foreach((json_t *)props, key, sc) {
      if (param_value(M, b, sc, fi, pi, typed, e)) {
        q35_buf_free(&body);
        return -1;
      }
      q35_buf tag = {0};
      q35_buf_printf(&tag, "<parameter=%s>\n", key);
      q35_buf_str(&body, " (");
      g_lit(&body, tag.p, tag.n);
      q35_buf_printf(&body, " v%d-%d \"\\n</parameter>\\n\")%s", fi, pi, in_required(params, key) ? "" : "?");
      q35_buf_free(&tag);
      pi++;
    }
  } else {
    q35_buf_str(&body, " (\"<parameter=\" [^>\\n\\x00-\\x1f]+ \">\\n\" " RAW "* \"\\n</parameter>\\n\")*");
  }
  q35_buf_str(&body, " \"</function>\\n\"\n");
  q35_buf_add(b, body.p, body.n);
  q35_buf_free(&body);
  return 0;
}

/* Rule "call-body": "\n" then one of the callable functions, then "</tool_call>". */
static int calls_rules(const oai_model *M, const oai_constraint *c, q35_buf *b, oai_error *e) {
  int any = 0;
  q35_buf alt = {0};
  for (size_t i = 0; i < json_array_size(c->tools); i++) {
    const json_t *fn = json_object_get(json_array_get(c->tools, i), "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (c->tool_choice == OAI_TOOLS_NAMED && strcmp(name, c->tool_name)) continue;
    const int strict = json_is_true(json_object_get(fn, "strict"));
    const int forced = c->tool_choice == OAI_TOOLS_REQUIRED || c->tool_choice == OAI_TOOLS_NAMED;
    if (tool_rules(M, b, fn, (int)i, strict ? 2 : forced ? 1 : 0, e)) {
      q35_buf_free(&alt);
      return -1;
    }
    q35_buf_printf(&alt, "%sf%zu", any++ ? " | " : "", i);
  }
  q35_buf_printf(b, "call-body ::= \"\\n\" (%s) \"</tool_call>\"\n", alt.p ? alt.p : "\"\"");
  q35_buf_free(&alt);
  return 0;
}

/* The request's own language (response_format, json_schema, grammar), compiled. */
static q35_constraint *base_constraint(const oai_model *M, const oai_constraint *c, oai_error *e) {
  if (c->kind == OAI_CONSTRAINT_JSON_OBJECT)
    return compile(M, Q35_CONSTRAINT_JSON_OBJECT, NULL, c->param, "response_format json_object", e);
  if (c->kind == OAI_CONSTRAINT_GRAMMAR) return compile(M, Q35_CONSTRAINT_GBNF, c->grammar, c->param, "'grammar'", e);
  const json_t *sc = c->schema;
  if (!sc || json_is_true(sc)) return compile(M, Q35_CONSTRAINT_JSON_OBJECT, NULL, c->param, "the JSON schema", e);
  char *txt = json_dumps(sc, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!txt) {
    oai_bad(e, NULL, "out of memory");
    return NULL;
  }
  char what[64];
  snprintf(what, sizeof what, "the JSON schema of '%s'", c->param);
  q35_constraint *k = compile(M, Q35_CONSTRAINT_JSON_SCHEMA, txt, c->param, what, e);
  free(txt);
  return k;
}

/* The language allows some first token (an empty one would fail in the step): 0, or -1 (e filled). */
static int check_start(const oai_model *M, q35_constraint *c, const char *param, oai_error *e) {
  const int32_t words = (q35_constraint_vocab_n(M->cvocab) + 31) / 32;
  uint32_t *mask = calloc((size_t)words, sizeof *mask);
  q35_err err = {{0}};
  int any = 0;
  if (mask && q35_constraint_mask(c, mask, &err) == 0)
    for (int32_t i = 0; i < words && !any; i++) any = mask[i] != 0;
  free(mask);
  if (!any) return oai_bad(e, param, "the constraint allows no output: no token of this vocabulary can start it");
  return 0;
}

static int set_trigger(srv_job *j, const char *t) {
  if (j->n_trigger >= SRV_MAX_TRIGGERS || !(j->trigger[j->n_trigger] = strdup(t))) return -1;
  j->n_trigger++;
  return 0;
}

int oai_constraint_build(const oai_model *M, const oai_constraint *c, int in_think, int max_calls, srv_job *j,
                         oai_error *e) {
  const int forced = c->tool_choice == OAI_TOOLS_REQUIRED || c->tool_choice == OAI_TOOLS_NAMED;
  const int tools = c->tools && json_array_size(c->tools) && c->tool_choice != OAI_TOOLS_NONE;
  const int tools_strict = tools && c->strict_tools;
  if (!c->kind && !forced && !tools_strict) return 0;
  if (!M->cvocab) return oai_bad(e, c->param ? c->param : "tool_choice", "constrained decoding needs a loaded model");
  q35_constraint *base = NULL;
  if (c->kind && !(base = base_constraint(M, c, e))) return -1; /* checked even when a call is forced */
  if (forced) { /* this turn is tool calls: the language is for a later text answer */
    q35_constraint_free(base);
    base = NULL;
  }
  /* The plain case: the request's language from the first generated token. */
  if (base && !in_think && !tools) {
    j->constraint = base;
    return check_start(M, base, c->param, e);
  }
  q35_buf g = {0};
  if (base) g_embed(&g, q35_constraint_grammar(base), "j-");
  q35_constraint_free(base);
  if ((tools || forced) && calls_rules(M, c, &g, e)) {
    q35_buf_free(&g);
    return -1;
  }
  const char *more = max_calls == 1 ? "" : " (\"\\n\"? \"<tool_call>\" call-body)*";
  const char *lead = in_think ? "\"\\n\"? \"\\n\"? " : "";
  if (c->kind && !forced && tools) /* the answer in the language, or tool calls */
    q35_buf_printf(&g, "root ::= %s(j-root | \"<tool_call>\" call-body%s)\n", lead, more);
  else if (c->kind && !forced)
    q35_buf_printf(&g, "root ::= %sj-root\n", lead);
  else if (forced)
    q35_buf_printf(&g, "root ::= %s\"<tool_call>\" call-body%s\n", lead, more);
  else /* auto with strict tools: from the template's <tool_call> on */
    q35_buf_printf(&g, "root ::= call-body%s\n", more);
  int rc = -1;
  if (g.oom) oai_bad(e, NULL, "out of memory");
  else if ((j->constraint = compile(M, Q35_CONSTRAINT_GBNF, g.p, c->param ? c->param : "tools",
                                    "the tool-call grammar", e)))
    rc = check_start(M, j->constraint, c->param ? c->param : "tools", e);
  q35_buf_free(&g);
  if (rc == 0 && in_think && set_trigger(j, "</think>")) rc = oai_bad(e, NULL, "out of memory");
  if (rc == 0 && !c->kind && !forced && set_trigger(j, "<tool_call>")) rc = oai_bad(e, NULL, "out of memory");
  return rc;
}

int oai_apply_constraint(const oai_model *M, oai_request *r, oai_error *e) {
  return oai_constraint_build(M, &r->constraint, r->in_think, r->max_tool_calls, r->job, e);
}
