/*
 * schema.h - the JSON Schema compiler's shared state (schema.c: schemas, objects, refs;
 * schema_types.c: strings, formats, numbers and integer ranges, arrays).
 *
 * Each sub-schema becomes a GBNF rule `sN ::= ...`; gen functions return the rule's name (or a
 * primitive's: value, string, number, ...). Rules are written to their own buffer and appended
 * when complete, so a rule can be generated while another is half written.
 */
#ifndef Q35_CONSTRAIN_SCHEMA_H
#define Q35_CONSTRAIN_SCHEMA_H

#include <jansson.h>

#include "base/buf.h"
#include "q35.h"

typedef struct {
  char *ptr;   /* the $ref text */
  char name[24];
} sc_ref;

typedef struct {
  q35_buf out;     /* finished rules */
  json_t *doc;     /* the whole schema document ($ref targets) */
  q35_err *err;
  int failed;
  int n_rules;
  int depth;
  sc_ref *refs;
  size_t n_refs, cap_refs;
} sc;

#define SC_NAME 24
#define SC_MAX_DEPTH 64

/* Fail with a message (the first one is kept); returns -1. */
int sc_fail(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A fresh rule name into name. */
void sc_new_name(sc *c, char *name);
/* Append "name ::= body\n" (body: a finished buffer, freed). */
void sc_put_rule(sc *c, const char *name, q35_buf *body);
/* A GBNF literal of n bytes. */
void sc_literal(q35_buf *b, const char *s, size_t n);
/* The rule for schema s into name; 0 or -1. */
int sc_gen(sc *c, json_t *s, char *name);

/* The target of a local JSON pointer ("#", "#/a/b") in the document, or NULL. */
json_t *sc_resolve(sc *c, const char *ref);
/* allOf (with its sibling keywords) merged into one schema (a new reference) into *out
 * (schema_combine.c); 0 or -1. */
int sc_merge_all_of(sc *c, json_t *s, json_t **out);
/* not: the type bits (object 1, array 2, string 4, number 8, boolean 16, null 32, integer 64)
 * it leaves into *keep; 0 or -1 when the negation is not a type test. */
int sc_not_types(sc *c, json_t *n, unsigned *keep);
/* 1 when no value can satisfy both schemas (a sufficient test: kinds of value, enum / const
 * values, and objects whose required properties exclude each other); 0 when they may overlap. */
int sc_disjoint(sc *c, json_t *a, json_t *b, int depth);
/* s without "not", its types restricted to keep (a new reference). */
json_t *sc_restrict_types(json_t *s, unsigned keep);

/* The values of a schema with finitely many (enum, const, or only booleans / null), each one the
 * schema takes, as a new array into *out; *out NULL when the schema is not of that kind. 0 or -1. */
int sc_finite_values(sc *c, json_t *s, json_t **out);
/* A JSON value as a GBNF literal of its compact text. */
void sc_put_value(q35_buf *b, json_t *v);

/* Type-specific generators (schema_types.c), each writing a rule into name. */
int sc_gen_string(sc *c, json_t *s, char *name);
int sc_gen_number(sc *c, json_t *s, int integer, char *name);
int sc_gen_number_plain(sc *c, json_t *s, int integer, char *name); /* without multipleOf */
int sc_gen_array(sc *c, json_t *s, char *name);

#endif
