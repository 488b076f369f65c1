/*
 * jinja_internal.h - what the pieces of the Jinja interpreter share (jinja.h is the public face).
 *
 * The interpreter, in the order data flows, one file per stage:
 *   jinja_lex.c      preprocess (the trim_blocks / lstrip_blocks text rewrites, with a map from
 *                    each output byte back to its source offset so errors name the original
 *                    line/column) and the lexer (text / tag tokens, following the reference's
 *                    whitespace-control rules);
 *   jinja_parse.c    recursive descent into an AST (statements and expressions are both `node`);
 *                    jinja_parse / jinja_free;
 *   jinja_value.c    the arena, the value type `val` and its constructors, conversions (string
 *                    form, JSON in and out), equality and ordering, scopes, the string operations;
 *   jinja_filters.c  the built-ins: the filter table, the tests (`is NAME`), the string and dict
 *                    methods;
 *   jinja_render.c   walks the AST: expressions, operators, calls, statements; jinja_render.
 *
 * Errors in the parser and the renderer unwind with longjmp to the entry point: every
 * allocation made after setjmp lives in an arena, so unwinding leaks nothing. This keeps the
 * hundreds of "could this fail?" sites down to one call each (jj_perr / jj_rerr never return).
 * Values are never freed one by one: the render's arena goes at the end of jinja_render.
 *
 * Every function shared between the files is named jj_*; everything else is static.
 */
#ifndef Q35_JINJA_INTERNAL_H
#define Q35_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "text/jinja.h"

/* Default limits (jinja_default_limits; a zero field in the caller's limits means these). */
#define JINJA_DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define JINJA_DEFAULT_MAX_MEMORY ((size_t)512 << 20)
#define JINJA_DEFAULT_MAX_DEPTH 200
/* Nesting the parser accepts (expressions and blocks); the renderer has its own limit. */
#define JINJA_PARSE_MAX_DEPTH 200
/* Memory for one template's AST and literals. */
#define JINJA_TEMPLATE_MAX_MEMORY ((size_t)1 << 30)
/* A double below this magnitude converts to int64 without overflow (INT64_MAX is ~9.22e18). */
#define JJ_INT_RANGE 9e18

/* ---------------------------------------------------------------------------------------- */
/* arena: bump allocation in 64 KiB blocks (larger requests get a block of their own)        */

typedef struct ablk {
  struct ablk *next;
  size_t used, cap;
  max_align_t data[];
} ablk;

typedef struct arena {
  ablk *head;
  size_t total, limit; /* bytes allocated in blocks; the most allowed */
} arena;

void jj_arena_free(arena *a);
/* NULL when the limit is reached or malloc fails (callers turn that into an error). */
void *jj_arena_alloc(arena *a, size_t n);

/* ---------------------------------------------------------------------------------------- */
/* AST                                                                                      */

enum {
  /* statements */
  N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE,
  /* expressions */
  E_LIT, E_NAME, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NOT, E_NEG, E_POS,
  E_BIN, E_AND, E_OR, E_COND, E_LIST, E_TUPLE, E_DICT,
};

/* binary operators (the arithmetic ones first: OP_ADD..OP_POW index an operator-name table) */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CAT, OP_EQ, OP_NE,
       OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN };

typedef struct val val;
typedef struct node node;

typedef struct nlist {
  node **v;
  int n;
} nlist;

struct node {
  int kind, line;
  int op;                 /* E_BIN operator; E_TEST: negated */
  const char *s;          /* names, text, attribute, filter/test/macro name */
  size_t slen;
  const char *s2;         /* N_SET: attribute of ns.attr */
  node *a, *b, *c;        /* operands / condition / iterable / slice parts */
  nlist body, orelse;     /* statement bodies */
  nlist args;             /* call / filter / test args; list / tuple / dict items (k,v,k,v) */
  const char **argnames;  /* per arg: keyword name or NULL */
  const char **names;     /* for / set targets, macro parameters */
  int nnames;
  val *lit;               /* E_LIT */
};

struct jinja_template {
  arena ar;      /* AST and literals */
  nlist body;
  char *src;     /* preprocessed source */
  size_t n;
};

/* ---------------------------------------------------------------------------------------- */
/* lexer and parser                                                                         */

enum { TK_TEXT, TK_OPEN_STMT, TK_CLOSE_STMT, TK_OPEN_EXPR, TK_CLOSE_EXPR, TK_NAME, TK_STR,
       TK_INT, TK_FLOAT, TK_OP, TK_COMMENT, TK_EOF };

typedef struct tok {
  int type;
  const char *s; /* TK_TEXT, TK_NAME, TK_STR: contents (TK_STR unescaped, in the arena) */
  size_t n;
  size_t pos;    /* offset in the preprocessed source */
  double f;
  int64_t i;
  char op[3];
} tok;

typedef struct parser {
  arena *ar;
  const char *src;     /* preprocessed */
  size_t n;
  const char *orig;    /* original source, for line/column */
  size_t *map;         /* preprocessed offset -> original offset */
  tok *t;
  size_t nt, ct, i;
  int depth;
  jmp_buf jb;
  q35_err *err;
  size_t *lines;       /* original offsets where each line starts (for node line numbers) */
  size_t nlines;
} parser;

/* A syntax error at preprocessed offset pos: "template syntax error at line L, column C: ...". */
__attribute__((noreturn, format(printf, 3, 4))) void jj_perr(parser *p, size_t pos, const char *fmt, ...);
/* n zeroed bytes in the template's arena, or a "template too large" error. */
void *jj_palloc(parser *p, size_t n);
/* The reference's text rewrites; returns the new text (malloc'ed) and a map to original offsets. */
char *jj_preprocess(const char *src, size_t n, size_t **map_out, size_t *n_out);
/* Tokenize p->src into p->t (ends with TK_EOF). */
void jj_lex(parser *p);

/* ---------------------------------------------------------------------------------------- */
/* values                                                                                   */

enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_FUNC };
/* the global functions (V_FUNC's u.fn) */
enum { F_NAMESPACE = 1, F_RAISE, F_RANGE, F_DICT };

struct scope;

struct val {
  int t;
  union {
    int b;
    int64_t i;
    double f;
    struct {
      const char *p; /* NUL-terminated */
      size_t n;
    } s;
    struct {
      val **a;
      size_t n, cap;
    } l;
    struct { /* V_DICT and V_NS: keys in insertion order */
      const char **k;
      size_t *kn;
      val **v;
      size_t n, cap;
    } d;
    struct {
      const node *def;
      struct scope *sc;
    } m;
    int fn;
  } u;
};

typedef struct scope {
  struct scope *parent;
  const char **k;
  val **v;
  size_t n, cap;
} scope;

/* A growing string in the render arena (render-time memory counts against max_memory). */
typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

typedef struct render {
  arena ar;
  jmp_buf jb;
  q35_err *err;
  jinja_limits lim;
  int depth;
  int brk, cont;      /* pending break / continue */
  val *undef, *none, *vtrue, *vfalse;
} render;

/* Evaluated call arguments: names[i] is the keyword of v[i], or NULL when positional. */
typedef struct args {
  val **v;
  const char **names;
  int n;
} args;

typedef struct json_opts {
  int indent;
  int ensure_ascii;
  int sort_keys;
  const char *item_sep, *key_sep;
} json_opts;

/* A render error at node `at` (may be NULL): "template error at line L: ...". */
__attribute__((noreturn, format(printf, 3, 4))) void jj_rerr(render *r, const node *at, const char *fmt, ...);
/* n bytes (not zeroed) in the render arena, or an out-of-memory render error. */
void *jj_ralloc(render *r, size_t n);
/* A copy of the C string s in the render arena. */
char *jj_rstrdup(render *r, const char *s);

static inline int jj_is_ws(int c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
/* Decode one UTF-8 code point at s[*i] (invalid bytes decode as themselves). */
int32_t jj_u8_next(const char *s, size_t n, size_t *i);
size_t jj_u8_len(const char *s, size_t n);
/* byte offsets of each code point (count+1 entries) */
size_t *jj_u8_offsets(render *r, const char *s, size_t n, size_t *count);
const char *jj_memfind(const char *h, size_t hn, const char *nd, size_t nn);

val *jj_mkval(render *r, int t);
val *jj_mkint(render *r, int64_t i);
val *jj_mkfloat(render *r, double f);
static inline val *jj_mkbool(render *r, int b) { return b ? r->vtrue : r->vfalse; }
val *jj_mkstr(render *r, const char *s, size_t n);
val *jj_mkstr_c(render *r, const char *s);
val *jj_mklist(render *r, size_t cap);
void jj_list_push(render *r, val *l, val *x);
val *jj_mkdict(render *r, int t);
val **jj_dict_slot(const val *d, const char *k, size_t kn);
void jj_dict_set(render *r, val *d, const char *k, size_t kn, val *x);
void jj_dict_set_c(render *r, val *d, const char *k, val *x);
val *jj_items_of(render *r, const val *d);
val *jj_from_json(render *r, const json_t *j, int depth);

void jj_sb_put(render *r, sbuf *b, const char *s, size_t n);
void jj_sb_puts(render *r, sbuf *b, const char *s);
val *jj_sb_val(render *r, sbuf *b);

const char *jj_type_name(const val *v);
int jj_truthy(const val *v);
static inline int jj_is_num(const val *v) { return v->t == V_INT || v->t == V_FLOAT; }
static inline double jj_num_of(const val *v) {
  return v->t == V_INT ? (double)v->u.i : v->t == V_FLOAT ? v->u.f : v->t == V_BOOL ? v->u.b : 0;
}
int jj_vstr_eq(const val *v, const char *s);
int jj_val_eq(const val *a, const val *b);
/* ordering for < > and sort: numbers, strings (bytewise = code point order) */
int jj_val_cmp(render *r, const val *a, const val *b, const node *at);

void jj_to_json(render *r, sbuf *b, const val *v, const json_opts *o, int depth, const node *at);
/* String form of a value (str() / ~ / output). */
void jj_put_str(render *r, sbuf *b, const val *v, const node *at);
val *jj_to_str(render *r, const val *v, const node *at);

/* positional argument `pos` (skipping keywords; -1: keyword only) or keyword `name`; NULL if absent */
val *jj_arg_get(const args *a, int pos, const char *name);
const val *jj_need_str(render *r, const val *v, const char *what, const node *at);
int64_t jj_need_int(render *r, const val *v, const char *what, const node *at);

/* string operations (Python semantics, code points) */
enum { CASE_LOWER, CASE_UPPER, CASE_TITLE, CASE_CAPITALIZE };
val *jj_case_map(render *r, const val *s, int mode);
/* which: STRIP_LEFT | STRIP_RIGHT; chars NULL = whitespace */
enum { STRIP_LEFT = 1, STRIP_RIGHT = 2, STRIP_BOTH = 3 };
val *jj_strip(render *r, const val *s, int which, const val *chars);
val *jj_str_replace(render *r, const val *s, const val *old, const val *new_, int64_t count);
val *jj_str_split(render *r, const val *s, const val *sep, int64_t maxsplit, const node *at);
int jj_starts_ends(render *r, const val *s, const val *x, int ends, const node *at);

scope *jj_scope_new(render *r, scope *parent);
void jj_scope_set(render *r, scope *s, const char *k, val *v);
val *jj_scope_get(render *r, scope *s, const char *k);

/* ---------------------------------------------------------------------------------------- */
/* built-ins (jinja_filters.c) and the operations they share with the renderer              */

val *jj_apply_filter(render *r, const char *name, val *v, const args *a, const node *at);
int jj_run_test(render *r, const char *name, val *v, const args *a, const node *at);
/* Methods: s.startswith(...), d.get(...), ... Returns NULL if `name` is not a method. */
val *jj_call_method(render *r, val *obj, const char *name, const args *a, const node *at);

val *jj_getitem(render *r, val *obj, val *key, const node *at);
val *jj_do_slice(render *r, val *obj, val *vs, val *ve, val *vst, const node *at);
/* The items a for loop or filter iterates over. */
val *jj_iter_list(render *r, val *v, const node *at);
val *jj_binop(render *r, int op, val *a, val *b, const node *at);

#endif
