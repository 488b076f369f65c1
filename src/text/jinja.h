/*
 * jinja.h - a Jinja interpreter for the subset that chat templates use.
 *
 * What it is for: rendering a model's chat template (tokenizer.chat_template) the way
 * Hugging Face does. The reference we test against is @huggingface/jinja (the renderer
 * transformers.js uses), and where the two Jinja implementations differ we follow it:
 *
 *  - the template is preprocessed like HF does with trim_blocks=True, lstrip_blocks=True:
 *    one trailing newline of the source is dropped, spaces/tabs at the start of a line before
 *    `{%` / `{#` are removed, and the newline right after `%}` / `#}` is removed (these are
 *    plain text rewrites over the whole source, as in the reference);
 *  - `{%-`, `{{-`, `{#-` strip the whitespace at the end of the preceding text, `-%}`, `-}}`,
 *    `-#}` skip the whitespace that follows;
 *  - undefined values are falsy, print as empty, and attribute/item access on them gives
 *    undefined again; `none` prints as empty; booleans print as `true` / `false`;
 *  - `tojson` writes Python json.dumps style: separators ", " and ": " (or "," with indent),
 *    non-ASCII kept unless ensure_ascii=true; numbers from JSON input that are integral are
 *    integers (as in JavaScript).
 *
 * Where the reference departs from Python Jinja (what transformers runs), q35 follows Python:
 * str.strip/lstrip/rstrip honor their `chars` argument (the reference strips whitespace),
 * capitalize() lowercases the rest, title() is Unicode-aware, `%` and `//` floor like Python,
 * `==` on lists and dicts compares contents. Strings count code points
 * (the reference counts UTF-16 units, which differs only for characters beyond U+FFFF).
 *
 * Supported: {{ }}, {% %}, {# #}; if/elif/else, for (loop.index, index0, revindex,
 * revindex0, first, last, length, previtem, nextitem; `for a, b in ...`; `for x in xs if c`;
 * for-else; break/continue), set (name, ns.attr, tuple unpacking, block set), macro (with
 * defaults and keyword arguments); literals (string, int, float, true/false/none in either
 * case, lists, tuples, dicts), attribute and item access, slicing with steps, arithmetic,
 * comparison, in / not in, is [not] TEST, and/or/not, `a if c else b`, `~` concatenation;
 * filters (tojson, length/count, trim, string, safe, default/d, join, first, last, upper,
 * lower, title, capitalize, items, list, replace, map, reverse, sort, unique, int, float,
 * abs, round, select/reject, selectattr/rejectattr, indent, dictsort, min, max, sum, wordcount);
 * tests (defined, undefined, none, string, number, integer, float, boolean, true, false,
 * mapping, sequence, iterable, callable, odd, even, divisibleby, eq/equalto/==, ne, lt, gt,
 * le, ge, in, lower, upper); string methods (startswith, endswith, split, rsplit, strip,
 * lstrip, rstrip, replace, upper, lower, title, capitalize, find, count, join, format-free);
 * dict methods (get, items, keys, values); globals namespace(), raise_exception(msg),
 * range(). Strings are UTF-8; lengths, indices and slices count code points.
 *
 * Safety: parse and render never abort on bad input. A syntax error is reported as
 * "line L, column C: ..."; a render error names the template line. Nesting depth, output
 * size and memory are bounded (see jinja_limits). All render-time memory lives in one arena
 * that is freed when the render returns.
 */
#ifndef Q35_JINJA_H
#define Q35_JINJA_H

#include <stddef.h>

#include <jansson.h>

#include "q35.h"

typedef struct jinja_template jinja_template;

typedef struct jinja_limits {
  size_t max_output;   /* bytes of output (default 64 MiB) */
  size_t max_memory;   /* bytes of render-time memory (default 512 MiB) */
  int max_depth;       /* nesting of expressions, blocks and macro calls (default 200) */
} jinja_limits;

jinja_limits jinja_default_limits(void);

/* Parse a template (len bytes; need not be NUL-terminated). NULL + err on a syntax error. */
jinja_template *jinja_parse(const char *src, size_t len, q35_err *err);
void jinja_free(jinja_template *t);

/* Render with the variables of the JSON object `vars` (may be NULL). Values map as JSON does:
 * object -> mapping, array -> list, string, integer, real (integral reals become integers),
 * true/false, null -> none; names not in `vars` are undefined. limits may be NULL (defaults).
 * Returns a malloc'ed NUL-terminated string (its length in *out_len when out_len != NULL;
 * the output may contain NUL bytes only if the input strings did), or NULL + err. */
char *jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *limits,
                   size_t *out_len, q35_err *err);

#endif
