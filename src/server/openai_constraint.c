/*
 * openai_constraint.c - what a request asks the decoder to be constrained to (see openai.h):
 * response_format (text, json_object, json_schema), llama-server's `grammar` and `json_schema`,
 * a forced tool call (tool_choice "required" or a named function) and strict tool arguments.
 *
 * oai_parse_constraint reads and shape-checks the fields; oai_apply_constraint is the one place
 * that turns them into decoding. Until the constrained-decoding engine is wired in here, every
 * constraint is refused with a 400 naming the field: answering with unconstrained text would
 * pretend to honour it.
 */
#include <string.h>

#include "server/openai.h"

static int parse_response_format(const json_t *v, oai_constraint *c, oai_error *e) {
  if (!json_is_object(v)) return oai_bad(e, "response_format", "'response_format' must be an object");
  const json_t *t = json_object_get(v, "type");
  const char *ts = json_string_value(t);
  if (!ts) return oai_bad(e, "response_format", "'response_format.type' must be a string");
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

int oai_apply_constraint(const oai_model *M, oai_request *r, oai_error *e) {
  (void)M;
  const oai_constraint *c = &r->constraint;
  static const char why[] = "is not supported until constrained decoding is available on this server";
  if (c->kind == OAI_CONSTRAINT_JSON_OBJECT) return oai_bad(e, c->param, "response_format json_object %s", why);
  if (c->kind == OAI_CONSTRAINT_JSON_SCHEMA) return oai_bad(e, c->param, "'%s' (a JSON schema) %s", c->param, why);
  if (c->kind == OAI_CONSTRAINT_GRAMMAR) return oai_bad(e, c->param, "'grammar' %s", why);
  const char *tc = r->legacy_functions ? "function_call" : "tool_choice";
  if (c->tool_choice == OAI_TOOLS_REQUIRED) return oai_bad(e, tc, "%s 'required' (a forced tool call) %s", tc, why);
  if (c->tool_choice == OAI_TOOLS_NAMED)
    return oai_bad(e, tc, "%s naming function '%s' (a forced tool call) %s", tc, c->tool_name, why);
  if (c->strict_tools) return oai_bad(e, "tools", "'tools[].function.strict: true' (schema-exact arguments) %s", why);
  return 0;
}
