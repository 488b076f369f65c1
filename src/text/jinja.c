/*
 * jinja.c - the Jinja subset interpreter behind chat templates (see jinja.h for the
 * supported language and where it follows @huggingface/jinja).
 *
 * Structure, in the order data flows:
 *   1. preprocess: the trim_blocks / lstrip_blocks text rewrites, keeping a map from each
 *      output byte back to its source offset so errors can name the original line/column;
 *   2. lexer: text / tag tokens, following the reference's whitespace-control rules;
 *   3. parser: recursive descent into an AST (statements and expressions are both `node`);
 *   4. renderer: walks the AST with values (`val`) allocated in one arena per render.
 *
 * Errors in the parser and the renderer unwind with longjmp to the entry point: every
 * allocation made after setjmp lives in an arena, so unwinding leaks nothing. This keeps
 * the hundreds of "could this fail?" sites down to one call each.
 */
#include "text/jinja.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/util.h"

/* ---------------------------------------------------------------------------------------- */
/* arena                                                                                    */

typedef struct ablk {
  struct ablk *next;
  size_t used, cap;
  max_align_t data[];
} ablk;

typedef struct arena {
  ablk *head;
  size_t total, limit;
} arena;

static void arena_free(arena *a) {
  ablk *b = a->head;
  while (b) {
    ablk *n = b->next;
    free(b);
    b = n;
  }
  a->head = NULL;
  a->total = 0;
}

/* Returns NULL when the limit is reached or malloc fails (callers turn that into an error). */
static void *arena_alloc_raw(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    if (a->total + cap > a->limit) return NULL;
    ablk *b = malloc(sizeof(ablk) + cap);
    if (!b) return NULL;
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
    a->total += cap;
  }
  void *p = (char *)a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

/* ---------------------------------------------------------------------------------------- */
/* AST                                                                                      */

enum {
  /* statements */
  N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE,
  /* expressions */
  E_LIT, E_NAME, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NOT, E_NEG, E_POS,
  E_BIN, E_AND, E_OR, E_COND, E_LIST, E_TUPLE, E_DICT,
};

/* binary operators */
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

/* ---------------------------------------------------------------------------------------- */
/* values                                                                                   */

enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_FUNC };
enum { F_NAMESPACE = 1, F_RAISE, F_RANGE, F_DICT };

struct scope;

struct val {
  int t;
  union {
    int b;
    int64_t i;
    double f;
    struct {
      const char *p;
      size_t n;
    } s;
    struct {
      val **a;
      size_t n, cap;
    } l;
    struct {
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

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

/* ---------------------------------------------------------------------------------------- */
/* template and contexts                                                                     */

struct jinja_template {
  arena ar;      /* AST and literals */
  nlist body;
  char *src;     /* preprocessed source */
  size_t n;
};

typedef struct tok {
  int type;
  const char *s; /* TK_TEXT, TK_NAME, TK_STR: contents (TK_STR unescaped, in the arena) */
  size_t n;
  size_t pos;    /* offset in the preprocessed source */
  double f;
  int64_t i;
  char op[3];
} tok;

enum { TK_TEXT, TK_OPEN_STMT, TK_CLOSE_STMT, TK_OPEN_EXPR, TK_CLOSE_EXPR, TK_NAME, TK_STR,
       TK_INT, TK_FLOAT, TK_OP, TK_COMMENT, TK_EOF };

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

typedef struct render {
  arena ar;
  jmp_buf jb;
  q35_err *err;
  jinja_limits lim;
  int depth;
  int brk, cont;      /* pending break / continue */
  val *undef, *none, *vtrue, *vfalse;
  scope *globals;
  size_t out_total;
} render;

/* ---------------------------------------------------------------------------------------- */
/* small helpers                                                                             */

static void line_col(const char *src, size_t off, int *line, int *col) {
  int l = 1, c = 1;
  for (size_t i = 0; i < off && src[i]; i++) {
    if (src[i] == '\n') {
      l++;
      c = 1;
    } else if (((unsigned char)src[i] & 0xc0) != 0x80) {
      c++;
    }
  }
  *line = l;
  *col = c;
}

__attribute__((noreturn, format(printf, 3, 4))) static void perr(parser *p, size_t pos,
                                                                 const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line, col;
  size_t o = pos < p->n ? p->map[pos] : (p->n ? p->map[p->n - 1] + 1 : 0);
  line_col(p->orig, o, &line, &col);
  q35_seterr(p->err, "template syntax error at line %d, column %d: %s", line, col, msg);
  longjmp(p->jb, 1);
}

static void *palloc(parser *p, size_t n) {
  void *r = arena_alloc_raw(p->ar, n);
  if (!r) {
    q35_seterr(p->err, "template too large (out of memory while parsing)");
    longjmp(p->jb, 1);
  }
  memset(r, 0, n);
  return r;
}

__attribute__((noreturn, format(printf, 3, 4))) static void rerr(render *r, const node *at,
                                                                 const char *fmt, ...) {
  char msg[420];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (at)
    q35_seterr(r->err, "template error at line %d: %s", at->line, msg);
  else
    q35_seterr(r->err, "template error: %s", msg);
  longjmp(r->jb, 1);
}

static void *ralloc(render *r, size_t n) {
  void *p = arena_alloc_raw(&r->ar, n);
  if (!p) rerr(r, NULL, "render needs more than %zu bytes of memory", r->lim.max_memory);
  return p;
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Decode one UTF-8 code point at s[*i] (invalid bytes decode as themselves). */
static int32_t u8_next(const char *s, size_t n, size_t *i) {
  utf8proc_int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
  if (k <= 0) {
    cp = (unsigned char)s[*i];
    k = 1;
  }
  *i += (size_t)k;
  return cp;
}

static int is_uspace(int32_t c) {
  if (c < 128) return is_ws(c) || (c >= 0x1c && c <= 0x1f);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000 || c == 0xfeff;
}

/* ---------------------------------------------------------------------------------------- */
/* 1. preprocess                                                                            */

/* Apply the reference's text rewrites; returns the new text and a map to original offsets. */
static char *preprocess(const char *src, size_t n, size_t **map_out, size_t *n_out) {
  if (n && src[n - 1] == '\n') n--;
  char *a = malloc(n + 1), *b = malloc(n + 1);
  size_t *ma = malloc((n + 1) * sizeof *ma), *mb = malloc((n + 1) * sizeof *mb);
  if (!a || !b || !ma || !mb) {
    free(a), free(b), free(ma), free(mb);
    return NULL;
  }
  /* lstrip_blocks: at a line start, [ \t]* directly before "{%", "{#" or "{-" is removed */
  size_t na = 0;
  for (size_t i = 0; i < n;) {
    if (i == 0 || src[i - 1] == '\n' || src[i - 1] == '\r') {
      size_t j = i;
      while (j < n && (src[j] == ' ' || src[j] == '\t')) j++;
      if (j > i && j + 1 < n && src[j] == '{' && (src[j + 1] == '%' || src[j + 1] == '#' || src[j + 1] == '-'))
        i = j;
    }
    ma[na] = i;
    a[na++] = src[i++];
  }
  /* trim_blocks: a newline right after "%}", "#}" or "-}" is removed */
  size_t nb = 0;
  for (size_t i = 0; i < na; i++) {
    if (a[i] == '\n' && i >= 2 && a[i - 1] == '}' && (a[i - 2] == '%' || a[i - 2] == '#' || a[i - 2] == '-'))
      continue;
    mb[nb] = ma[i];
    b[nb++] = a[i];
  }
  b[nb] = 0;
  mb[nb] = n;
  free(a);
  free(ma);
  *map_out = mb;
  *n_out = nb;
  return b;
}

/* ---------------------------------------------------------------------------------------- */
/* 2. lexer                                                                                 */

static tok *push_tok(parser *p, int type, size_t pos) {
  if (p->nt == p->ct) {
    size_t nc = p->ct ? p->ct * 2 : 256;
    tok *t = palloc(p, nc * sizeof *t);
    if (p->nt) memcpy(t, p->t, p->nt * sizeof *t);
    p->t = t;
    p->ct = nc;
  }
  tok *t = &p->t[p->nt++];
  memset(t, 0, sizeof *t);
  t->type = type;
  t->pos = pos;
  return t;
}

static void strip_prev_text(parser *p) {
  if (p->nt && p->t[p->nt - 1].type == TK_TEXT) {
    tok *t = &p->t[p->nt - 1];
    while (t->n && is_ws((unsigned char)t->s[t->n - 1])) t->n--;
    if (!t->n) p->nt--;
  }
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void lex(parser *p) {
  const char *s = p->src;
  size_t n = p->n, i = 0;
  int curly = 0;
  static const char *ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "<", ">", "=",
                              "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "~", NULL};
  while (i < n) {
    int last = p->nt ? p->t[p->nt - 1].type : -1;
    if (last == -1 || last == TK_CLOSE_STMT || last == TK_CLOSE_EXPR || last == TK_COMMENT) {
      size_t j = i;
      while (j < n && !(s[j] == '{' && j + 1 < n && (s[j + 1] == '%' || s[j + 1] == '{' || s[j + 1] == '#'))) j++;
      if (j > i) {
        tok *t = push_tok(p, TK_TEXT, i);
        t->s = s + i;
        t->n = j - i;
        i = j;
        continue;
      }
    }
    if (s[i] == '{' && i + 1 < n && s[i + 1] == '#') {
      size_t start = i;
      i += 2;
      int strip_before = i < n && s[i] == '-';
      size_t j = i;
      while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
      if (j + 1 >= n) perr(p, start, "missing end of comment tag '#}'");
      int strip_after = j > i && s[j - 1] == '-';
      if (strip_before) strip_prev_text(p);
      push_tok(p, TK_COMMENT, start);
      i = j + 2;
      if (strip_after)
        while (i < n && is_ws((unsigned char)s[i])) i++;
      continue;
    }
    if (i + 2 < n && s[i] == '{' && (s[i + 1] == '%' || s[i + 1] == '{') && s[i + 2] == '-') {
      strip_prev_text(p);
      push_tok(p, s[i + 1] == '%' ? TK_OPEN_STMT : TK_OPEN_EXPR, i);
      if (s[i + 1] == '{') curly = 0;
      i += 3;
      continue;
    }
    while (i < n && is_ws((unsigned char)s[i])) i++;
    if (i >= n) break;
    if (i + 2 < n + 0 && s[i] == '-' && (s[i + 1] == '%' || s[i + 1] == '}') && s[i + 2] == '}') {
      push_tok(p, s[i + 1] == '%' ? TK_CLOSE_STMT : TK_CLOSE_EXPR, i);
      i += 3;
      while (i < n && is_ws((unsigned char)s[i])) i++;
      continue;
    }
    if (i + 1 < n && s[i] == '{' && s[i + 1] == '%') {
      push_tok(p, TK_OPEN_STMT, i);
      i += 2;
      continue;
    }
    if (i + 1 < n && s[i] == '{' && s[i + 1] == '{') {
      push_tok(p, TK_OPEN_EXPR, i);
      curly = 0;
      i += 2;
      continue;
    }
    if (i + 1 < n && s[i] == '%' && s[i + 1] == '}') {
      push_tok(p, TK_CLOSE_STMT, i);
      i += 2;
      continue;
    }
    if (i + 1 < n && s[i] == '}' && s[i + 1] == '}' && curly <= 0) {
      push_tok(p, TK_CLOSE_EXPR, i);
      i += 2;
      continue;
    }
    unsigned char c = (unsigned char)s[i];
    if (c == '\'' || c == '"') {
      size_t start = i++;
      size_t end = i; /* find the closing quote first: the unescaped text is no longer */
      while (end < n && (unsigned char)s[end] != c) end += s[end] == '\\' ? 2 : 1;
      char *buf = palloc(p, (end < n ? end : n) - i + 8);
      size_t bn = 0;
      for (;;) {
        if (i >= n) perr(p, start, "unterminated string literal");
        if ((unsigned char)s[i] == c) break;
        if (s[i] == '\\') {
          if (++i >= n) perr(p, start, "unterminated string literal");
          char e = s[i++];
          switch (e) {
            case 'n': buf[bn++] = '\n'; break;
            case 't': buf[bn++] = '\t'; break;
            case 'r': buf[bn++] = '\r'; break;
            case 'b': buf[bn++] = '\b'; break;
            case 'f': buf[bn++] = '\f'; break;
            case 'v': buf[bn++] = '\v'; break;
            case '0': buf[bn++] = '\0'; break;
            case '\\': case '\'': case '"': buf[bn++] = e; break;
            case 'x': case 'u': {
              int len = e == 'x' ? 2 : 4;
              uint32_t cp = 0;
              for (int k = 0; k < len; k++) {
                int h = i + (size_t)k < n ? hexval((unsigned char)s[i + (size_t)k]) : -1;
                if (h < 0) perr(p, i - 2, "invalid \\%c escape in string literal", e);
                cp = cp * 16 + (uint32_t)h;
              }
              i += (size_t)len;
              utf8proc_uint8_t u8[4];
              utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, u8);
              if (k <= 0) perr(p, i - 2, "invalid code point in string literal");
              memcpy(buf + bn, u8, (size_t)k);
              bn += (size_t)k;
              break;
            }
            default: perr(p, i - 2, "unknown escape '\\%c' in string literal", e);
          }
          continue;
        }
        buf[bn++] = s[i++];
      }
      i++;
      tok *t = push_tok(p, TK_STR, start);
      t->s = buf;
      t->n = bn;
      continue;
    }
    if (isdigit(c)) {
      size_t start = i;
      while (i < n && isdigit((unsigned char)s[i])) i++;
      int isf = 0;
      if (!(p->nt && p->t[p->nt - 1].type == TK_OP && p->t[p->nt - 1].op[0] == '.' && !p->t[p->nt - 1].op[1]) &&
          i + 1 < n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
        isf = 1;
        i++;
        while (i < n && isdigit((unsigned char)s[i])) i++;
      }
      char num[64];
      size_t len = i - start < 63 ? i - start : 63;
      memcpy(num, s + start, len);
      num[len] = 0;
      tok *t = push_tok(p, isf ? TK_FLOAT : TK_INT, start);
      if (isf) {
        t->f = strtod(num, NULL);
      } else {
        errno = 0;
        unsigned long long v = strtoull(num, NULL, 10);
        if (i - start > 19 || errno == ERANGE || v > INT64_MAX) perr(p, start, "integer literal too large");
        t->i = (int64_t)v;
      }
      continue;
    }
    if (isalpha(c) || c == '_') {
      size_t start = i;
      while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
      tok *t = push_tok(p, TK_NAME, start);
      t->s = s + start;
      t->n = i - start;
      continue;
    }
    int found = 0;
    for (int k = 0; ops[k]; k++) {
      size_t l = strlen(ops[k]);
      if (i + l <= n && !memcmp(s + i, ops[k], l)) {
        tok *t = push_tok(p, TK_OP, i);
        memcpy(t->op, ops[k], l);
        if (!strcmp(ops[k], "{")) curly++;
        if (!strcmp(ops[k], "}")) curly--;
        i += l;
        found = 1;
        break;
      }
    }
    if (!found) {
      if (c >= 0x20 && c < 0x7f)
        perr(p, i, "unexpected character '%c'", c);
      else
        perr(p, i, "unexpected byte 0x%02x", c);
    }
  }
  push_tok(p, TK_EOF, n);
}

/* ---------------------------------------------------------------------------------------- */
/* 3. parser                                                                                */

static tok *peek(parser *p) { return &p->t[p->i]; }
static tok *peek2(parser *p) { return &p->t[p->i + 1 < p->nt ? p->i + 1 : p->nt - 1]; }
static tok *next(parser *p) {
  tok *t = &p->t[p->i];
  if (p->i + 1 < p->nt) p->i++;
  return t;
}
static int is_op(const tok *t, const char *op) { return t->type == TK_OP && !strcmp(t->op, op); }
static int is_name(const tok *t, const char *w) {
  return t->type == TK_NAME && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}

static const char *tok_desc(const tok *t, char *buf, size_t n) {
  switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "text";
    case TK_OPEN_STMT: return "'{%'";
    case TK_CLOSE_STMT: return "'%}'";
    case TK_OPEN_EXPR: return "'{{'";
    case TK_CLOSE_EXPR: return "'}}'";
    case TK_STR: return "string literal";
    case TK_INT: case TK_FLOAT: return "number";
    case TK_NAME: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    default: snprintf(buf, n, "'%s'", t->op); return buf;
  }
}

static void expect_op(parser *p, const char *op) {
  if (!is_op(peek(p), op)) {
    char b[64];
    perr(p, peek(p)->pos, "expected '%s', found %s", op, tok_desc(peek(p), b, sizeof b));
  }
  next(p);
}

static void expect_type(parser *p, int type, const char *what) {
  if (peek(p)->type != type) {
    char b[64];
    perr(p, peek(p)->pos, "expected %s, found %s", what, tok_desc(peek(p), b, sizeof b));
  }
  next(p);
}

static const char *pstrdup(parser *p, const char *s, size_t n) {
  char *r = palloc(p, n + 1);
  memcpy(r, s, n);
  return r;
}

static const char *expect_ident(parser *p) {
  tok *t = peek(p);
  if (t->type != TK_NAME) {
    char b[64];
    perr(p, t->pos, "expected a name, found %s", tok_desc(t, b, sizeof b));
  }
  next(p);
  return pstrdup(p, t->s, t->n);
}

static node *mknode(parser *p, int kind, size_t pos) {
  node *nd = palloc(p, sizeof *nd);
  nd->kind = kind;
  size_t o = pos < p->n ? p->map[pos] : (p->n ? p->map[p->n - 1] : 0);
  size_t lo = 0, hi = p->nlines; /* last line start <= o */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (p->lines[mid] <= o) lo = mid;
    else hi = mid;
  }
  nd->line = (int)lo + 1;
  return nd;
}

typedef struct nvec {
  node **v;
  const char **names;
  int n, cap;
} nvec;

static void nvec_push(parser *p, nvec *v, node *x, const char *name) {
  if (v->n == v->cap) {
    int nc = v->cap ? v->cap * 2 : 8;
    node **nv = palloc(p, (size_t)nc * sizeof *nv);
    const char **nn = palloc(p, (size_t)nc * sizeof *nn);
    if (v->n) {
      memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
      memcpy(nn, v->names, (size_t)v->n * sizeof *nn);
    }
    v->v = nv;
    v->names = nn;
    v->cap = nc;
  }
  v->names[v->n] = name;
  v->v[v->n++] = x;
}

static val *plit(parser *p, int t) {
  val *v = palloc(p, sizeof *v);
  v->t = t;
  return v;
}

static node *parse_expr(parser *p);
static node *parse_or(parser *p);
static node *parse_unary(parser *p);

static void enter(parser *p) {
  if (++p->depth > 200) perr(p, peek(p)->pos, "template nested too deeply");
}

/* Call arguments after '(' up to and including ')': positional and name=value. */
static void parse_args(parser *p, node *call) {
  nvec v = {0};
  int any_kw = 0;
  while (!is_op(peek(p), ")")) {
    const char *kw = NULL;
    if (peek(p)->type == TK_NAME && is_op(peek2(p), "=")) {
      kw = expect_ident(p);
      next(p);
      any_kw = 1;
    } else if (any_kw) {
      perr(p, peek(p)->pos, "positional argument follows keyword argument");
    }
    nvec_push(p, &v, parse_expr(p), kw);
    if (!is_op(peek(p), ",")) break;
    next(p);
  }
  expect_op(p, ")");
  call->args.v = v.v;
  call->args.n = v.n;
  call->argnames = v.names;
}

static node *parse_primary(parser *p) {
  tok *t = peek(p);
  node *nd;
  switch (t->type) {
    case TK_STR: {
      /* adjacent string literals concatenate */
      nd = mknode(p, E_LIT, t->pos);
      size_t total = 0;
      size_t j = p->i;
      while (p->t[j].type == TK_STR) total += p->t[j++].n;
      char *buf = palloc(p, total + 1);
      size_t k = 0;
      while (peek(p)->type == TK_STR) {
        memcpy(buf + k, peek(p)->s, peek(p)->n);
        k += peek(p)->n;
        next(p);
      }
      nd->lit = plit(p, V_STR);
      nd->lit->u.s.p = buf;
      nd->lit->u.s.n = total;
      return nd;
    }
    case TK_INT:
      nd = mknode(p, E_LIT, t->pos);
      nd->lit = plit(p, V_INT);
      nd->lit->u.i = t->i;
      next(p);
      return nd;
    case TK_FLOAT:
      nd = mknode(p, E_LIT, t->pos);
      nd->lit = plit(p, V_FLOAT);
      nd->lit->u.f = t->f;
      next(p);
      return nd;
    case TK_NAME:
      nd = mknode(p, E_LIT, t->pos);
      if (is_name(t, "true") || is_name(t, "True")) {
        nd->lit = plit(p, V_BOOL);
        nd->lit->u.b = 1;
      } else if (is_name(t, "false") || is_name(t, "False")) {
        nd->lit = plit(p, V_BOOL);
      } else if (is_name(t, "none") || is_name(t, "None")) {
        nd->lit = plit(p, V_NONE);
      } else {
        nd->kind = E_NAME;
        nd->s = pstrdup(p, t->s, t->n);
        nd->slen = t->n;
      }
      next(p);
      return nd;
    case TK_OP:
      if (is_op(t, "(")) {
        next(p);
        if (is_op(peek(p), ")")) { /* empty tuple */
          next(p);
          return mknode(p, E_TUPLE, t->pos);
        }
        node *e = parse_expr(p);
        if (is_op(peek(p), ",")) {
          nvec v = {0};
          nvec_push(p, &v, e, NULL);
          while (is_op(peek(p), ",")) {
            next(p);
            if (is_op(peek(p), ")")) break;
            nvec_push(p, &v, parse_expr(p), NULL);
          }
          e = mknode(p, E_TUPLE, t->pos);
          e->args.v = v.v;
          e->args.n = v.n;
        }
        expect_op(p, ")");
        return e;
      }
      if (is_op(t, "[")) {
        next(p);
        nvec v = {0};
        while (!is_op(peek(p), "]")) {
          nvec_push(p, &v, parse_expr(p), NULL);
          if (!is_op(peek(p), ",")) break;
          next(p);
        }
        expect_op(p, "]");
        nd = mknode(p, E_LIST, t->pos);
        nd->args.v = v.v;
        nd->args.n = v.n;
        return nd;
      }
      if (is_op(t, "{")) {
        next(p);
        nvec v = {0};
        while (!is_op(peek(p), "}")) {
          nvec_push(p, &v, parse_expr(p), NULL);
          expect_op(p, ":");
          nvec_push(p, &v, parse_expr(p), NULL);
          if (!is_op(peek(p), ",")) break;
          next(p);
        }
        expect_op(p, "}");
        nd = mknode(p, E_DICT, t->pos);
        nd->args.v = v.v;
        nd->args.n = v.n;
        return nd;
      }
      break;
    default: break;
  }
  char b[64];
  perr(p, t->pos, "unexpected %s in expression", tok_desc(t, b, sizeof b));
}

static node *parse_postfix(parser *p, node *e) {
  for (;;) {
    tok *t = peek(p);
    if (is_op(t, ".")) {
      next(p);
      tok *a = peek(p);
      node *nd = mknode(p, E_ATTR, a->pos);
      if (a->type == TK_INT) { /* x.0 -> x[0] */
        nd->kind = E_INDEX;
        nd->b = mknode(p, E_LIT, a->pos);
        nd->b->lit = plit(p, V_INT);
        nd->b->lit->u.i = a->i;
        next(p);
      } else {
        nd->s = expect_ident(p);
        nd->slen = strlen(nd->s);
      }
      nd->a = e;
      e = nd;
    } else if (is_op(t, "[")) {
      next(p);
      node *parts[3] = {NULL, NULL, NULL};
      int k = 0, slice = 0;
      for (;;) {
        if (!is_op(peek(p), ":") && !is_op(peek(p), "]")) parts[k] = parse_expr(p);
        if (is_op(peek(p), ":") && k < 2) {
          next(p);
          k++;
          slice = 1;
          continue;
        }
        break;
      }
      expect_op(p, "]");
      node *nd = mknode(p, slice ? E_SLICE : E_INDEX, t->pos);
      nd->a = e;
      if (slice) {
        nd->b = parts[0];
        nd->c = parts[1];
        nd->args.n = parts[2] ? 1 : 0;
        if (parts[2]) {
          nd->args.v = palloc(p, sizeof(node *));
          nd->args.v[0] = parts[2];
        }
      } else {
        if (!parts[0]) perr(p, t->pos, "empty subscript");
        nd->b = parts[0];
      }
      e = nd;
    } else if (is_op(t, "(")) {
      next(p);
      node *nd = mknode(p, E_CALL, t->pos);
      nd->a = e;
      parse_args(p, nd);
      e = nd;
    } else {
      return e;
    }
  }
}

/* filters (|name(args)) and tests (is [not] name [arg]) after a primary */
static node *parse_filters_tests(parser *p, node *e) {
  for (;;) {
    tok *t = peek(p);
    if (is_op(t, "|")) {
      next(p);
      node *nd = mknode(p, E_FILTER, peek(p)->pos);
      nd->s = expect_ident(p);
      nd->a = e;
      if (is_op(peek(p), "(")) {
        next(p);
        parse_args(p, nd);
      }
      e = nd;
    } else if (is_name(t, "is")) {
      next(p);
      node *nd = mknode(p, E_TEST, t->pos);
      if (is_name(peek(p), "not")) {
        nd->op = 1;
        next(p);
      }
      tok *nt = peek(p);
      if (nt->type == TK_NAME) {
        nd->s = expect_ident(p);
      } else if (is_op(nt, "==") || is_op(nt, "!=") || is_op(nt, "<") || is_op(nt, ">") || is_op(nt, "<=") ||
                 is_op(nt, ">=")) {
        nd->s = pstrdup(p, nt->op, strlen(nt->op));
        next(p);
      } else {
        char b[64];
        perr(p, nt->pos, "expected a test name after 'is', found %s", tok_desc(nt, b, sizeof b));
      }
      nd->a = e;
      if (is_op(peek(p), "(")) {
        next(p);
        parse_args(p, nd);
      } else {
        /* one bare argument: `is divisibleby 3`, `is sameas none`, `is equalto x` */
        tok *at = peek(p);
        if (at->type == TK_STR || at->type == TK_INT || at->type == TK_FLOAT ||
            (at->type == TK_NAME && !is_name(at, "and") && !is_name(at, "or") && !is_name(at, "if") &&
             !is_name(at, "else") && !is_name(at, "is") && !is_name(at, "in") && !is_name(at, "not"))) {
          nd->args.v = palloc(p, sizeof(node *));
          nd->argnames = palloc(p, sizeof(char *));
          nd->args.v[0] = parse_postfix(p, parse_primary(p));
          nd->args.n = 1;
        }
      }
      e = nd;
    } else {
      return e;
    }
  }
}

/* Unary minus/plus bind tighter than filters, as in Jinja: `-3|abs` is `(-3)|abs`. */
static node *parse_unary_nf(parser *p) {
  enter(p);
  tok *t = peek(p);
  node *r;
  if (is_op(t, "-") || is_op(t, "+")) {
    next(p);
    r = mknode(p, is_op(t, "-") ? E_NEG : E_POS, t->pos);
    r->a = parse_unary_nf(p);
  } else {
    r = parse_postfix(p, parse_primary(p));
  }
  p->depth--;
  return r;
}

static node *parse_unary(parser *p) { return parse_filters_tests(p, parse_unary_nf(p)); }

static node *mkbin(parser *p, int op, node *a, node *b, size_t pos) {
  node *nd = mknode(p, E_BIN, pos);
  nd->op = op;
  nd->a = a;
  nd->b = b;
  return nd;
}

static node *parse_pow(parser *p) {
  node *e = parse_unary(p);
  while (is_op(peek(p), "**")) {
    size_t pos = next(p)->pos;
    e = mkbin(p, OP_POW, e, parse_unary(p), pos);
  }
  return e;
}

static node *parse_mul(parser *p) {
  node *e = parse_pow(p);
  for (;;) {
    tok *t = peek(p);
    int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : -1;
    if (op < 0) return e;
    next(p);
    e = mkbin(p, op, e, parse_pow(p), t->pos);
  }
}

static node *parse_add(parser *p) {
  node *e = parse_mul(p);
  for (;;) {
    tok *t = peek(p);
    int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : -1;
    if (op < 0) return e;
    next(p);
    e = mkbin(p, op, e, parse_mul(p), t->pos);
  }
}

static node *parse_concat(parser *p) {
  node *e = parse_add(p);
  while (is_op(peek(p), "~")) {
    size_t pos = next(p)->pos;
    e = mkbin(p, OP_CAT, e, parse_add(p), pos);
  }
  return e;
}

static node *parse_compare(parser *p) {
  node *e = parse_concat(p);
  for (;;) {
    tok *t = peek(p);
    int op = -1;
    if (is_op(t, "==")) op = OP_EQ;
    else if (is_op(t, "!=")) op = OP_NE;
    else if (is_op(t, "<")) op = OP_LT;
    else if (is_op(t, ">")) op = OP_GT;
    else if (is_op(t, "<=")) op = OP_LE;
    else if (is_op(t, ">=")) op = OP_GE;
    else if (is_name(t, "in")) op = OP_IN;
    else if (is_name(t, "not") && is_name(peek2(p), "in")) {
      next(p);
      op = OP_NOTIN;
    }
    if (op < 0) return e;
    next(p);
    e = mkbin(p, op, e, parse_concat(p), t->pos);
  }
}

static node *parse_not(parser *p) {
  tok *t = peek(p);
  if (is_name(t, "not")) {
    next(p);
    enter(p);
    node *nd = mknode(p, E_NOT, t->pos);
    nd->a = parse_not(p);
    p->depth--;
    return nd;
  }
  return parse_compare(p);
}

static node *parse_and(parser *p) {
  node *e = parse_not(p);
  while (is_name(peek(p), "and")) {
    tok *t = next(p);
    node *nd = mknode(p, E_AND, t->pos);
    nd->a = e;
    nd->b = parse_not(p);
    e = nd;
  }
  return e;
}

static node *parse_or(parser *p) {
  node *e = parse_and(p);
  while (is_name(peek(p), "or")) {
    tok *t = next(p);
    node *nd = mknode(p, E_OR, t->pos);
    nd->a = e;
    nd->b = parse_and(p);
    e = nd;
  }
  return e;
}

static node *parse_expr(parser *p) {
  enter(p);
  node *e = parse_or(p);
  while (is_name(peek(p), "if")) {
    tok *t = next(p);
    node *nd = mknode(p, E_COND, t->pos);
    nd->a = parse_or(p);  /* condition */
    nd->b = e;            /* then */
    if (is_name(peek(p), "else")) {
      next(p);
      nd->c = parse_expr(p);
    }
    e = nd;
  }
  p->depth--;
  return e;
}

/* Tuple without parentheses (for `set a = 1, 2` and `for x in a, b`) */
static node *parse_expr_tuple(parser *p) {
  node *e = parse_expr(p);
  if (!is_op(peek(p), ",")) return e;
  nvec v = {0};
  nvec_push(p, &v, e, NULL);
  while (is_op(peek(p), ",")) {
    next(p);
    if (peek(p)->type == TK_CLOSE_STMT) break;
    nvec_push(p, &v, parse_expr(p), NULL);
  }
  node *t = mknode(p, E_TUPLE, p->t[p->i].pos);
  t->args.v = v.v;
  t->args.n = v.n;
  return t;
}

static void parse_targets(parser *p, node *nd) {
  nvec v = {0};
  int paren = 0;
  if (is_op(peek(p), "(")) {
    next(p);
    paren = 1;
  }
  for (;;) {
    nvec_push(p, &v, NULL, expect_ident(p));
    if (!is_op(peek(p), ",")) break;
    next(p);
  }
  if (paren) expect_op(p, ")");
  nd->names = v.names;
  nd->nnames = v.n;
}

/* Parse statements until `{% WORD` with WORD in stops; returns the index of the stop word
 * (the parser is left after the word) or -1 at end of input when stops is empty. */
static int parse_body(parser *p, nlist *out, const char *const *stops, int nstops, size_t open_pos,
                      const char *what);

static void close_stmt(parser *p) { expect_type(p, TK_CLOSE_STMT, "'%}'"); }

static node *parse_stmt(parser *p) {
  tok *open = next(p); /* {% */
  tok *kw = peek(p);
  if (kw->type != TK_NAME) {
    char b[64];
    perr(p, kw->pos, "expected a statement name after '{%%', found %s", tok_desc(kw, b, sizeof b));
  }
  enter(p);
  node *nd = NULL;
  if (is_name(kw, "if")) {
    next(p);
    nd = mknode(p, N_IF, open->pos);
    nd->a = parse_expr(p);
    close_stmt(p);
    static const char *const st[] = {"elif", "else", "endif"};
    node *cur = nd;
    for (;;) {
      int w = parse_body(p, &cur->body, st, 3, open->pos, "if");
      if (w == 0) {
        node *el = mknode(p, N_IF, peek(p)->pos);
        el->a = parse_expr(p);
        close_stmt(p);
        cur->orelse.v = palloc(p, sizeof(node *));
        cur->orelse.v[0] = el;
        cur->orelse.n = 1;
        cur = el;
      } else if (w == 1) {
        close_stmt(p);
        static const char *const st2[] = {"endif"};
        parse_body(p, &cur->orelse, st2, 1, open->pos, "if");
        close_stmt(p);
        break;
      } else {
        close_stmt(p);
        break;
      }
    }
  } else if (is_name(kw, "for")) {
    next(p);
    nd = mknode(p, N_FOR, open->pos);
    parse_targets(p, nd);
    if (!is_name(peek(p), "in")) {
      char b[64];
      perr(p, peek(p)->pos, "expected 'in' in for loop, found %s", tok_desc(peek(p), b, sizeof b));
    }
    next(p);
    /* the iterable: no ternary here, so that `for x in xs if cond` is the loop filter */
    nd->a = parse_or(p);
    if (is_op(peek(p), ",")) {
      nvec v = {0};
      nvec_push(p, &v, nd->a, NULL);
      while (is_op(peek(p), ",")) {
        next(p);
        nvec_push(p, &v, parse_or(p), NULL);
      }
      nd->a = mknode(p, E_TUPLE, open->pos);
      nd->a->args.v = v.v;
      nd->a->args.n = v.n;
    }
    if (is_name(peek(p), "if")) {
      next(p);
      nd->b = parse_expr(p);
    }
    if (is_name(peek(p), "recursive")) perr(p, peek(p)->pos, "recursive loops are not supported");
    close_stmt(p);
    static const char *const st[] = {"else", "endfor"};
    int w = parse_body(p, &nd->body, st, 2, open->pos, "for");
    close_stmt(p);
    if (w == 0) {
      static const char *const st2[] = {"endfor"};
      parse_body(p, &nd->orelse, st2, 1, open->pos, "for");
      close_stmt(p);
    }
  } else if (is_name(kw, "set")) {
    next(p);
    nd = mknode(p, N_SET, open->pos);
    const char *name = expect_ident(p);
    if (is_op(peek(p), ".")) {
      next(p);
      nd->s = name;
      nd->s2 = expect_ident(p);
    } else {
      nvec v = {0};
      nvec_push(p, &v, NULL, name);
      while (is_op(peek(p), ",")) {
        next(p);
        nvec_push(p, &v, NULL, expect_ident(p));
      }
      nd->names = v.names;
      nd->nnames = v.n;
    }
    if (is_op(peek(p), "=")) {
      next(p);
      nd->a = parse_expr_tuple(p);
      close_stmt(p);
    } else if (peek(p)->type == TK_CLOSE_STMT) {
      if (nd->s2 || nd->nnames != 1) perr(p, peek(p)->pos, "block set needs a single name");
      nd->kind = N_SETBLOCK;
      close_stmt(p);
      static const char *const st[] = {"endset"};
      parse_body(p, &nd->body, st, 1, open->pos, "set");
      close_stmt(p);
    } else {
      char b[64];
      perr(p, peek(p)->pos, "expected '=' in set, found %s", tok_desc(peek(p), b, sizeof b));
    }
  } else if (is_name(kw, "macro")) {
    next(p);
    nd = mknode(p, N_MACRO, open->pos);
    nd->s = expect_ident(p);
    expect_op(p, "(");
    nvec names = {0};
    while (!is_op(peek(p), ")")) {
      const char *pn = expect_ident(p);
      node *def = NULL;
      if (is_op(peek(p), "=")) {
        next(p);
        def = parse_expr(p);
      }
      nvec_push(p, &names, def, pn);
      if (!is_op(peek(p), ",")) break;
      next(p);
    }
    expect_op(p, ")");
    nd->names = names.names;
    nd->nnames = names.n;
    nd->args.v = names.v; /* defaults (NULL = required) */
    nd->args.n = names.n;
    close_stmt(p);
    static const char *const st[] = {"endmacro"};
    parse_body(p, &nd->body, st, 1, open->pos, "macro");
    if (peek(p)->type == TK_NAME) next(p); /* {% endmacro name %} */
    close_stmt(p);
  } else if (is_name(kw, "break") || is_name(kw, "continue")) {
    nd = mknode(p, is_name(kw, "break") ? N_BREAK : N_CONTINUE, open->pos);
    next(p);
    close_stmt(p);
  } else if (is_name(kw, "generation")) {
    /* transformers' assistant-mask markers: the body renders as is */
    next(p);
    close_stmt(p);
    nd = mknode(p, N_IF, open->pos);
    nd->a = mknode(p, E_LIT, open->pos);
    nd->a->lit = plit(p, V_BOOL);
    nd->a->lit->u.b = 1;
    static const char *const st[] = {"endgeneration"};
    parse_body(p, &nd->body, st, 1, open->pos, "generation");
    close_stmt(p);
  } else {
    perr(p, kw->pos, "unknown statement '%.*s'", (int)(kw->n > 40 ? 40 : kw->n), kw->s);
  }
  p->depth--;
  return nd;
}

static int parse_body(parser *p, nlist *out, const char *const *stops, int nstops, size_t open_pos,
                      const char *what) {
  nvec v = {0};
  for (;;) {
    tok *t = peek(p);
    if (t->type == TK_EOF) {
      if (nstops == 0) break;
      perr(p, open_pos, "unclosed '%s' block: expected '{%% %s %%}' before end of template", what,
           stops[nstops - 1]);
    }
    if (t->type == TK_TEXT) {
      node *nd = mknode(p, N_TEXT, t->pos);
      nd->s = t->s;
      nd->slen = t->n;
      nvec_push(p, &v, nd, NULL);
      next(p);
    } else if (t->type == TK_COMMENT) {
      next(p);
    } else if (t->type == TK_OPEN_EXPR) {
      next(p);
      node *nd = mknode(p, N_OUT, t->pos);
      nd->a = parse_expr(p);
      expect_type(p, TK_CLOSE_EXPR, "'}}'");
      nvec_push(p, &v, nd, NULL);
    } else if (t->type == TK_OPEN_STMT) {
      tok *kw = peek2(p);
      for (int k = 0; k < nstops; k++) {
        if (is_name(kw, stops[k])) {
          next(p);
          next(p);
          out->v = v.v;
          out->n = v.n;
          return k;
        }
      }
      if (kw->type == TK_NAME && kw->n > 3 && (!memcmp(kw->s, "end", 3) || is_name(kw, "elif") || is_name(kw, "else")))
        perr(p, kw->pos, "unexpected '%.*s'%s%s", (int)(kw->n > 40 ? 40 : kw->n), kw->s,
             nstops ? " inside " : "", nstops ? what : "");
      nvec_push(p, &v, parse_stmt(p), NULL);
    } else {
      char b[64];
      perr(p, t->pos, "unexpected %s", tok_desc(t, b, sizeof b));
    }
  }
  out->v = v.v;
  out->n = v.n;
  return -1;
}

static int parse_run(parser *p, jinja_template *t) {
  if (setjmp(p->jb)) return 0;
  lex(p);
  parse_body(p, &t->body, NULL, 0, 0, "template");
  return 1;
}

jinja_template *jinja_parse(const char *src, size_t len, q35_err *err) {
  jinja_template *t = calloc(1, sizeof *t);
  if (!t) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  t->ar.limit = (size_t)1 << 30;
  size_t *map = NULL;
  t->src = preprocess(src, len, &map, &t->n);
  if (!t->src) {
    free(t);
    q35_seterr(err, "out of memory");
    return NULL;
  }
  parser *p = calloc(1, sizeof *p);
  if (!p) {
    free(map);
    jinja_free(t);
    q35_seterr(err, "out of memory");
    return NULL;
  }
  p->ar = &t->ar;
  p->src = t->src;
  p->n = t->n;
  p->orig = src;
  p->map = map;
  p->err = err;
  /* line_col on the original needs it NUL-free up to len: use a bounded copy */
  char *orig = malloc(len + 1);
  if (!orig) {
    free(p), free(map), jinja_free(t);
    q35_seterr(err, "out of memory");
    return NULL;
  }
  memcpy(orig, src, len);
  orig[len] = 0;
  p->orig = orig;
  p->nlines = 1;
  for (size_t i = 0; i < len; i++) p->nlines += src[i] == '\n';
  p->lines = malloc(p->nlines * sizeof *p->lines);
  if (!p->lines) {
    free(orig), free(p), free(map), jinja_free(t);
    q35_seterr(err, "out of memory");
    return NULL;
  }
  p->lines[0] = 0;
  for (size_t i = 0, k = 1; i < len; i++)
    if (src[i] == '\n') p->lines[k++] = i + 1;
  int ok = parse_run(p, t);
  free(p->lines);
  free(orig);
  free(map);
  free(p);
  if (!ok) {
    jinja_free(t);
    return NULL;
  }
  return t;
}

void jinja_free(jinja_template *t) {
  if (!t) return;
  arena_free(&t->ar);
  free(t->src);
  free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* 4. values and rendering                                                                   */

static val *mkval(render *r, int t) {
  val *v = ralloc(r, sizeof *v);
  memset(v, 0, sizeof *v);
  v->t = t;
  return v;
}

static val *mkint(render *r, int64_t i) {
  val *v = mkval(r, V_INT);
  v->u.i = i;
  return v;
}

static val *mkfloat(render *r, double f) {
  val *v = mkval(r, V_FLOAT);
  v->u.f = f;
  return v;
}

static val *mkbool(render *r, int b) { return b ? r->vtrue : r->vfalse; }

static val *mkstr(render *r, const char *s, size_t n) {
  val *v = mkval(r, V_STR);
  char *p = ralloc(r, n + 1);
  if (n) memcpy(p, s, n);
  p[n] = 0;
  v->u.s.p = p;
  v->u.s.n = n;
  return v;
}

static val *mkstr_c(render *r, const char *s) { return mkstr(r, s, strlen(s)); }

static val *mklist(render *r, size_t cap) {
  val *v = mkval(r, V_LIST);
  v->u.l.cap = cap ? cap : 4;
  v->u.l.a = ralloc(r, v->u.l.cap * sizeof(val *));
  return v;
}

static void list_push(render *r, val *l, val *x) {
  if (l->u.l.n == l->u.l.cap) {
    size_t nc = l->u.l.cap * 2 + 4;
    val **na = ralloc(r, nc * sizeof *na);
    if (l->u.l.n) memcpy(na, l->u.l.a, l->u.l.n * sizeof *na);
    l->u.l.a = na;
    l->u.l.cap = nc;
  }
  l->u.l.a[l->u.l.n++] = x;
}

static val *mkdict(render *r, int t) {
  val *v = mkval(r, t);
  return v;
}

static val **dict_slot(const val *d, const char *k, size_t kn) {
  for (size_t i = 0; i < d->u.d.n; i++)
    if (d->u.d.kn[i] == kn && !memcmp(d->u.d.k[i], k, kn)) return &d->u.d.v[i];
  return NULL;
}

static void dict_set(render *r, val *d, const char *k, size_t kn, val *x) {
  val **s = dict_slot(d, k, kn);
  if (s) {
    *s = x;
    return;
  }
  if (d->u.d.n == d->u.d.cap) {
    size_t nc = d->u.d.cap * 2 + 4;
    const char **nk = ralloc(r, nc * sizeof *nk);
    size_t *nkn = ralloc(r, nc * sizeof *nkn);
    val **nv = ralloc(r, nc * sizeof *nv);
    if (d->u.d.n) {
      memcpy(nk, d->u.d.k, d->u.d.n * sizeof *nk);
      memcpy(nkn, d->u.d.kn, d->u.d.n * sizeof *nkn);
      memcpy(nv, d->u.d.v, d->u.d.n * sizeof *nv);
    }
    d->u.d.k = nk;
    d->u.d.kn = nkn;
    d->u.d.v = nv;
    d->u.d.cap = nc;
  }
  d->u.d.k[d->u.d.n] = k;
  d->u.d.kn[d->u.d.n] = kn;
  d->u.d.v[d->u.d.n++] = x;
}

static void dict_set_c(render *r, val *d, const char *k, val *x) { dict_set(r, d, k, strlen(k), x); }

/* string buffer in the arena */
static void sb_put(render *r, sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->cap ? b->cap * 2 : 256);
    while (nc < b->n + n + 1) nc *= 2;
    char *np = ralloc(r, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = nc;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}
static void sb_puts(render *r, sbuf *b, const char *s) { sb_put(r, b, s, strlen(s)); }
static val *sb_val(render *r, sbuf *b) {
  val *v = mkval(r, V_STR);
  if (!b->p) sb_put(r, b, "", 0);
  v->u.s.p = b->p;
  v->u.s.n = b->n;
  return v;
}

static const char *type_name(const val *v) {
  switch (v->t) {
    case V_UNDEF: return "undefined";
    case V_NONE: return "none";
    case V_BOOL: return "boolean";
    case V_INT: return "integer";
    case V_FLOAT: return "float";
    case V_STR: return "string";
    case V_LIST: return "list";
    case V_DICT: return "mapping";
    case V_NS: return "namespace";
    default: return "function";
  }
}

static int truthy(const val *v) {
  switch (v->t) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: return v->u.b;
    case V_INT: return v->u.i != 0;
    case V_FLOAT: return v->u.f != 0;
    case V_STR: return v->u.s.n != 0;
    case V_LIST: return v->u.l.n != 0;
    case V_DICT: return v->u.d.n != 0;
    default: return 1;
  }
}

/* JavaScript Number#toString (the reference prints numbers that way). */
static void fmt_js_number(double x, char *out, size_t outn) {
  if (isnan(x)) {
    snprintf(out, outn, "NaN");
    return;
  }
  if (isinf(x)) {
    snprintf(out, outn, x < 0 ? "-Infinity" : "Infinity");
    return;
  }
  if (x == 0) {
    snprintf(out, outn, "0");
    return;
  }
  char buf[40];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (strtod(buf, NULL) == x) break;
  }
  /* buf: [-]d[.ddd]e[+-]XX */
  char digits[24];
  int nd = 0, neg = buf[0] == '-';
  const char *q = buf + neg;
  for (; *q && *q != 'e'; q++)
    if (isdigit((unsigned char)*q)) digits[nd++] = *q;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  int e = atoi(q + 1);
  char res[64];
  size_t k = 0;
  if (neg) res[k++] = '-';
  if (e >= 21 || e <= -7) {
    res[k++] = digits[0];
    if (nd > 1) {
      res[k++] = '.';
      for (int i = 1; i < nd; i++) res[k++] = digits[i];
    }
    k += (size_t)snprintf(res + k, sizeof res - k, "e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  } else if (e < 0) {
    res[k++] = '0';
    res[k++] = '.';
    for (int i = 0; i < -e - 1; i++) res[k++] = '0';
    for (int i = 0; i < nd; i++) res[k++] = digits[i];
  } else {
    for (int i = 0; i <= e; i++) res[k++] = i < nd ? digits[i] : '0';
    if (nd > e + 1) {
      res[k++] = '.';
      for (int i = e + 1; i < nd; i++) res[k++] = digits[i];
    }
  }
  res[k] = 0;
  snprintf(out, outn, "%s", res);
}

static void fmt_float(double x, char *out, size_t n) {
  if (x == 0 && signbit(x)) {
    snprintf(out, n, "-0.0");
  } else if (isfinite(x) && x == floor(x) && fabs(x) < 1e21) {
    snprintf(out, n, "%.1f", x);
  } else {
    fmt_js_number(x, out, n);
  }
}

typedef struct json_opts {
  int indent;
  int ensure_ascii;
  int sort_keys;
  const char *item_sep, *key_sep;
} json_opts;

static void json_str(render *r, sbuf *b, const char *s, size_t n, int ensure_ascii) {
  sb_put(r, b, "\"", 1);
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    char esc[16];
    if (c == '"') { sb_put(r, b, "\\\"", 2); i++; }
    else if (c == '\\') { sb_put(r, b, "\\\\", 2); i++; }
    else if (c == '\n') { sb_put(r, b, "\\n", 2); i++; }
    else if (c == '\r') { sb_put(r, b, "\\r", 2); i++; }
    else if (c == '\t') { sb_put(r, b, "\\t", 2); i++; }
    else if (c == '\b') { sb_put(r, b, "\\b", 2); i++; }
    else if (c == '\f') { sb_put(r, b, "\\f", 2); i++; }
    else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); sb_puts(r, b, esc); i++; }
    else if (ensure_ascii && c >= 0x7f) {
      int32_t cp = u8_next(s, n, &i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        snprintf(esc, sizeof esc, "\\u%04x", cp);
      }
      sb_puts(r, b, esc);
    } else {
      size_t j = i;
      while (j < n && (unsigned char)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' && !(ensure_ascii && (unsigned char)s[j] >= 0x7f)) j++;
      sb_put(r, b, s + i, j - i);
      i = j;
    }
  }
  sb_put(r, b, "\"", 1);
}

static void json_pad(render *r, sbuf *b, const json_opts *o, int depth) {
  sb_put(r, b, "\n", 1);
  for (int i = 0; i < depth * o->indent; i++) sb_put(r, b, " ", 1);
}

static int key_cmp(const void *a, const void *b, void *unused);

static void to_json(render *r, sbuf *b, const val *v, const json_opts *o, int depth, const node *at) {
  if (depth > r->lim.max_depth) rerr(r, at, "tojson: value nested too deeply");
  char num[64];
  switch (v->t) {
    case V_UNDEF: case V_NONE: sb_puts(r, b, "null"); break;
    case V_BOOL: sb_puts(r, b, v->u.b ? "true" : "false"); break;
    case V_INT: snprintf(num, sizeof num, "%" PRId64, v->u.i); sb_puts(r, b, num); break;
    case V_FLOAT:
      if (!isfinite(v->u.f)) sb_puts(r, b, "null");
      else { fmt_js_number(v->u.f, num, sizeof num); sb_puts(r, b, num); }
      break;
    case V_STR: json_str(r, b, v->u.s.p, v->u.s.n, o->ensure_ascii); break;
    case V_LIST:
      sb_put(r, b, "[", 1);
      for (size_t i = 0; i < v->u.l.n; i++) {
        if (i) sb_puts(r, b, o->item_sep);
        if (o->indent) json_pad(r, b, o, depth + 1);
        to_json(r, b, v->u.l.a[i], o, depth + 1, at);
      }
      if (o->indent && v->u.l.n) json_pad(r, b, o, depth);
      sb_put(r, b, "]", 1);
      break;
    case V_DICT: case V_NS: {
      size_t n = v->u.d.n;
      size_t *idx = ralloc(r, (n + 1) * sizeof *idx);
      for (size_t i = 0; i < n; i++) idx[i] = i;
      if (o->sort_keys) /* insertion sort: stable, small n */
        for (size_t i = 1; i < n; i++)
          for (size_t j = i; j > 0 && key_cmp(&idx[j - 1], &idx[j], (void *)v) > 0; j--) {
            size_t tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
          }
      sb_put(r, b, "{", 1);
      for (size_t k = 0; k < n; k++) {
        size_t i = idx[k];
        if (k) sb_puts(r, b, o->item_sep);
        if (o->indent) json_pad(r, b, o, depth + 1);
        json_str(r, b, v->u.d.k[i], v->u.d.kn[i], o->ensure_ascii);
        sb_puts(r, b, o->key_sep);
        to_json(r, b, v->u.d.v[i], o, depth + 1, at);
      }
      if (o->indent && n) json_pad(r, b, o, depth);
      sb_put(r, b, "}", 1);
      break;
    }
    default: rerr(r, at, "cannot convert a %s to JSON", type_name(v));
  }
}

static int key_cmp(const void *a, const void *b, void *ctx) {
  const val *d = ctx;
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  size_t n = d->u.d.kn[i] < d->u.d.kn[j] ? d->u.d.kn[i] : d->u.d.kn[j];
  int c = memcmp(d->u.d.k[i], d->u.d.k[j], n);
  if (c) return c;
  return d->u.d.kn[i] < d->u.d.kn[j] ? -1 : d->u.d.kn[i] > d->u.d.kn[j];
}

/* String form of a value (str() / ~ / output). */
static void put_str(render *r, sbuf *b, const val *v, const node *at) {
  char num[64];
  switch (v->t) {
    case V_UNDEF: break;
    case V_NONE: sb_puts(r, b, "None"); break;
    case V_BOOL: sb_puts(r, b, v->u.b ? "true" : "false"); break;
    case V_INT: snprintf(num, sizeof num, "%" PRId64, v->u.i); sb_puts(r, b, num); break;
    case V_FLOAT: fmt_float(v->u.f, num, sizeof num); sb_puts(r, b, num); break;
    case V_STR: sb_put(r, b, v->u.s.p, v->u.s.n); break;
    case V_LIST: case V_DICT: case V_NS: {
      json_opts o = {0, 0, 0, ", ", ": "};
      to_json(r, b, v, &o, 0, at);
      break;
    }
    default: sb_puts(r, b, "<function>"); break;
  }
}

static val *to_str(render *r, const val *v, const node *at) {
  if (v->t == V_STR) return (val *)v;
  sbuf b = {0};
  put_str(r, &b, v, at);
  return sb_val(r, &b);
}

static int vstr_eq(const val *v, const char *s) {
  return v->t == V_STR && v->u.s.n == strlen(s) && !memcmp(v->u.s.p, s, v->u.s.n);
}

static int is_num(const val *v) { return v->t == V_INT || v->t == V_FLOAT; }
static double num_of(const val *v) { return v->t == V_INT ? (double)v->u.i : v->t == V_FLOAT ? v->u.f : v->t == V_BOOL ? v->u.b : 0; }

static int val_eq(const val *a, const val *b) {
  if (is_num(a) && is_num(b)) {
    if (a->t == V_INT && b->t == V_INT) return a->u.i == b->u.i;
    return num_of(a) == num_of(b);
  }
  if (a->t != b->t) return 0;
  switch (a->t) {
    case V_UNDEF: case V_NONE: return 1;
    case V_BOOL: return a->u.b == b->u.b;
    case V_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    case V_LIST:
      if (a->u.l.n != b->u.l.n) return 0;
      for (size_t i = 0; i < a->u.l.n; i++)
        if (!val_eq(a->u.l.a[i], b->u.l.a[i])) return 0;
      return 1;
    case V_DICT:
      if (a->u.d.n != b->u.d.n) return 0;
      for (size_t i = 0; i < a->u.d.n; i++) {
        val **o = dict_slot(b, a->u.d.k[i], a->u.d.kn[i]);
        if (!o || !val_eq(a->u.d.v[i], *o)) return 0;
      }
      return 1;
    default: return a == b;
  }
}

/* ordering for < > and sort: numbers, strings (bytewise = code point order) */
static int val_cmp(render *r, const val *a, const val *b, const node *at) {
  if ((is_num(a) || a->t == V_BOOL) && (is_num(b) || b->t == V_BOOL)) {
    double x = num_of(a), y = num_of(b);
    return x < y ? -1 : x > y;
  }
  if (a->t == V_STR && b->t == V_STR) {
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    if (c) return c < 0 ? -1 : 1;
    return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
  }
  rerr(r, at, "cannot compare %s with %s", type_name(a), type_name(b));
}

/* ---- scopes ---- */

static scope *scope_new(render *r, scope *parent) {
  scope *s = ralloc(r, sizeof *s);
  memset(s, 0, sizeof *s);
  s->parent = parent;
  return s;
}

static void scope_set(render *r, scope *s, const char *k, val *v) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->k[i], k)) {
      s->v[i] = v;
      return;
    }
  if (s->n == s->cap) {
    size_t nc = s->cap * 2 + 8;
    const char **nk = ralloc(r, nc * sizeof *nk);
    val **nv = ralloc(r, nc * sizeof *nv);
    if (s->n) {
      memcpy(nk, s->k, s->n * sizeof *nk);
      memcpy(nv, s->v, s->n * sizeof *nv);
    }
    s->k = nk;
    s->v = nv;
    s->cap = nc;
  }
  s->k[s->n] = k;
  s->v[s->n++] = v;
}

static val *scope_get(render *r, scope *s, const char *k) {
  for (; s; s = s->parent)
    for (size_t i = 0; i < s->n; i++)
      if (!strcmp(s->k[i], k)) return s->v[i];
  return r->undef;
}

/* ---- evaluation ---- */

static val *eval(render *r, scope *sc, const node *e);
static void exec_body(render *r, scope *sc, const nlist *body, sbuf *out);

typedef struct args {
  val **v;
  const char **names;
  int n;
} args;

static args eval_args(render *r, scope *sc, const node *call) {
  args a = {0};
  a.n = call->args.n;
  if (a.n) {
    a.v = ralloc(r, (size_t)a.n * sizeof *a.v);
    a.names = ralloc(r, (size_t)a.n * sizeof *a.names);
    for (int i = 0; i < a.n; i++) {
      a.v[i] = eval(r, sc, call->args.v[i]);
      a.names[i] = call->argnames ? call->argnames[i] : NULL;
    }
  }
  return a;
}

/* positional argument `pos` (skipping keywords) or keyword `name`; NULL if absent */
static val *arg_get(const args *a, int pos, const char *name) {
  int k = 0;
  for (int i = 0; i < a->n; i++) {
    if (a->names[i]) {
      if (name && !strcmp(a->names[i], name)) return a->v[i];
    } else if (k++ == pos) {
      return a->v[i];
    }
  }
  return NULL;
}

static const val *need_str(render *r, const val *v, const char *what, const node *at) {
  if (!v || v->t != V_STR) rerr(r, at, "%s must be a string, got %s", what, v ? type_name(v) : "nothing");
  return v;
}

static size_t u8_len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    u8_next(s, n, &i);
    k++;
  }
  return k;
}

/* byte offsets of each code point (count+1 entries) */
static size_t *u8_offsets(render *r, const char *s, size_t n, size_t *count) {
  size_t c = u8_len(s, n);
  size_t *off = ralloc(r, (c + 1) * sizeof *off);
  size_t i = 0, k = 0;
  while (i < n) {
    off[k++] = i;
    u8_next(s, n, &i);
  }
  off[k] = n;
  *count = c;
  return off;
}

static val *case_map(render *r, const val *s, int mode /* 0 lower 1 upper 2 title 3 capitalize */) {
  sbuf b = {0};
  int word_start = 1;
  size_t i = 0, idx = 0;
  while (i < s->u.s.n) {
    int32_t cp = u8_next(s->u.s.p, s->u.s.n, &i);
    int32_t o;
    if (mode == 0) o = utf8proc_tolower(cp);
    else if (mode == 1) o = utf8proc_toupper(cp);
    else if (mode == 2) {
      int alpha = utf8proc_category(cp) >= UTF8PROC_CATEGORY_LU && utf8proc_category(cp) <= UTF8PROC_CATEGORY_LO;
      o = alpha ? (word_start ? utf8proc_totitle(cp) : utf8proc_tolower(cp)) : cp;
      word_start = !alpha;
    } else {
      o = idx == 0 ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
    }
    idx++;
    utf8proc_uint8_t u8[4];
    utf8proc_ssize_t k = utf8proc_encode_char(o, u8);
    if (k > 0) sb_put(r, &b, (const char *)u8, (size_t)k);
  }
  return sb_val(r, &b);
}

/* strip: which 1 = left, 2 = right, 3 = both; chars NULL = whitespace */
static val *strip(render *r, const val *s, int which, const val *chars) {
  const char *p = s->u.s.p;
  size_t n = s->u.s.n, a = 0, b = n;
  if (which & 1) {
    while (a < b) {
      size_t i = a;
      int32_t cp = u8_next(p, n, &i);
      int hit;
      if (chars) {
        hit = 0;
        for (size_t j = 0; j < chars->u.s.n;) {
          if (u8_next(chars->u.s.p, chars->u.s.n, &j) == cp) hit = 1;
        }
      } else {
        hit = is_uspace(cp);
      }
      if (!hit) break;
      a = i;
    }
  }
  if (which & 2) {
    while (b > a) {
      size_t st = b - 1;
      while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80) st--;
      size_t i = st;
      int32_t cp = u8_next(p, n, &i);
      int hit;
      if (chars) {
        hit = 0;
        for (size_t j = 0; j < chars->u.s.n;) {
          if (u8_next(chars->u.s.p, chars->u.s.n, &j) == cp) hit = 1;
        }
      } else {
        hit = is_uspace(cp);
      }
      if (!hit) break;
      b = st;
    }
  }
  return mkstr(r, p + a, b - a);
}

static const char *memfind(const char *h, size_t hn, const char *nd, size_t nn) {
  if (nn == 0) return h;
  if (nn > hn) return NULL;
  for (size_t i = 0; i + nn <= hn; i++)
    if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
  return NULL;
}

static val *str_replace(render *r, const val *s, const val *old, const val *new_, int64_t count) {
  sbuf b = {0};
  const char *p = s->u.s.p;
  size_t n = s->u.s.n, i = 0;
  int64_t done = 0;
  if (old->u.s.n == 0) {
    /* Python: insert `new` between every character and at both ends */
    while (count < 0 || done < count) {
      sb_put(r, &b, new_->u.s.p, new_->u.s.n);
      done++;
      if (i >= n) break;
      size_t j = i;
      u8_next(p, n, &j);
      sb_put(r, &b, p + i, j - i);
      i = j;
    }
    sb_put(r, &b, p + i, n - i);
    return sb_val(r, &b);
  }
  while (i <= n && (count < 0 || done < count)) {
    const char *f = memfind(p + i, n - i, old->u.s.p, old->u.s.n);
    if (!f) break;
    sb_put(r, &b, p + i, (size_t)(f - (p + i)));
    sb_put(r, &b, new_->u.s.p, new_->u.s.n);
    i = (size_t)(f - p) + old->u.s.n;
    done++;
  }
  sb_put(r, &b, p + i, n - i);
  return sb_val(r, &b);
}

static val *str_split(render *r, const val *s, const val *sep, int64_t maxsplit, const node *at) {
  val *l = mklist(r, 4);
  const char *p = s->u.s.p;
  size_t n = s->u.s.n;
  if (!sep || sep->t == V_NONE) {
    size_t i = 0;
    for (;;) {
      while (i < n) {
        size_t j = i;
        if (!is_uspace(u8_next(p, n, &j))) break;
        i = j;
      }
      if (i >= n) break;
      if (maxsplit >= 0 && (int64_t)l->u.l.n >= maxsplit) {
        /* the rest, with trailing whitespace kept */
        list_push(r, l, mkstr(r, p + i, n - i));
        break;
      }
      size_t st = i;
      while (i < n) {
        size_t j = i;
        if (is_uspace(u8_next(p, n, &j))) break;
        i = j;
      }
      list_push(r, l, mkstr(r, p + st, i - st));
    }
    return l;
  }
  need_str(r, sep, "split separator", at);
  if (!sep->u.s.n) rerr(r, at, "split: empty separator");
  size_t i = 0;
  for (;;) {
    const char *f = (maxsplit < 0 || (int64_t)l->u.l.n < maxsplit) ? memfind(p + i, n - i, sep->u.s.p, sep->u.s.n) : NULL;
    if (!f) {
      list_push(r, l, mkstr(r, p + i, n - i));
      break;
    }
    list_push(r, l, mkstr(r, p + i, (size_t)(f - (p + i))));
    i = (size_t)(f - p) + sep->u.s.n;
  }
  return l;
}

static int64_t need_int(render *r, const val *v, const char *what, const node *at) {
  if (!v) rerr(r, at, "%s is missing", what);
  if (v->t == V_INT) return v->u.i;
  if (v->t == V_BOOL) return v->u.b;
  rerr(r, at, "%s must be an integer, got %s", what, type_name(v));
}

static int starts_ends(render *r, const val *s, const val *x, int ends, const node *at) {
  if (x && x->t == V_LIST) {
    for (size_t i = 0; i < x->u.l.n; i++)
      if (starts_ends(r, s, x->u.l.a[i], ends, at)) return 1;
    return 0;
  }
  need_str(r, x, ends ? "endswith argument" : "startswith argument", at);
  if (x->u.s.n > s->u.s.n) return 0;
  return !memcmp(s->u.s.p + (ends ? s->u.s.n - x->u.s.n : 0), x->u.s.p, x->u.s.n);
}

static val *items_of(render *r, const val *d) {
  val *l = mklist(r, d->u.d.n);
  for (size_t i = 0; i < d->u.d.n; i++) {
    val *t = mklist(r, 2);
    list_push(r, t, mkstr(r, d->u.d.k[i], d->u.d.kn[i]));
    list_push(r, t, d->u.d.v[i]);
    list_push(r, l, t);
  }
  return l;
}

/* Methods: s.startswith(...), d.get(...), ... Returns NULL if `name` is not a method. */
static val *call_method(render *r, val *obj, const char *name, const args *a, const node *at) {
  if (obj->t == V_STR) {
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
      return mkbool(r, starts_ends(r, obj, arg_get(a, 0, NULL), name[0] == 'e', at));
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
      val *c = arg_get(a, 0, "chars");
      if (c && c->t == V_NONE) c = NULL;
      if (c) need_str(r, c, "strip characters", at);
      return strip(r, obj, name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3, c);
    }
    if (!strcmp(name, "split")) {
      val *ms = arg_get(a, 1, "maxsplit");
      return str_split(r, obj, arg_get(a, 0, "sep"), ms ? need_int(r, ms, "maxsplit", at) : -1, at);
    }
    if (!strcmp(name, "replace")) {
      val *o = arg_get(a, 0, "old"), *nw = arg_get(a, 1, "new"), *c = arg_get(a, 2, "count");
      need_str(r, o, "replace: old", at);
      need_str(r, nw, "replace: new", at);
      return str_replace(r, obj, o, nw, c ? need_int(r, c, "replace count", at) : -1);
    }
    if (!strcmp(name, "upper")) return case_map(r, obj, 1);
    if (!strcmp(name, "lower")) return case_map(r, obj, 0);
    if (!strcmp(name, "title")) return case_map(r, obj, 2);
    if (!strcmp(name, "capitalize")) return case_map(r, obj, 3);
    if (!strcmp(name, "find") || !strcmp(name, "count")) {
      const val *x = need_str(r, arg_get(a, 0, NULL), name, at);
      if (name[0] == 'f') {
        const char *f = memfind(obj->u.s.p, obj->u.s.n, x->u.s.p, x->u.s.n);
        return mkint(r, f ? (int64_t)u8_len(obj->u.s.p, (size_t)(f - obj->u.s.p)) : -1);
      }
      if (!x->u.s.n) return mkint(r, (int64_t)u8_len(obj->u.s.p, obj->u.s.n) + 1);
      int64_t c = 0;
      size_t i = 0;
      const char *f;
      while ((f = memfind(obj->u.s.p + i, obj->u.s.n - i, x->u.s.p, x->u.s.n))) {
        c++;
        i = (size_t)(f - obj->u.s.p) + x->u.s.n;
      }
      return mkint(r, c);
    }
    if (!strcmp(name, "join")) {
      val *l = arg_get(a, 0, NULL);
      if (!l || l->t != V_LIST) rerr(r, at, "join argument must be a list");
      sbuf b = {0};
      for (size_t i = 0; i < l->u.l.n; i++) {
        if (i) sb_put(r, &b, obj->u.s.p, obj->u.s.n);
        put_str(r, &b, l->u.l.a[i], at);
      }
      return sb_val(r, &b);
    }
    return NULL;
  }
  if (obj->t == V_DICT) {
    if (!strcmp(name, "get")) {
      val *k = arg_get(a, 0, "key"), *d = arg_get(a, 1, "default");
      if (k && k->t == V_STR) {
        val **s = dict_slot(obj, k->u.s.p, k->u.s.n);
        if (s) return *s;
      }
      return d ? d : r->none;
    }
    if (!strcmp(name, "items")) return items_of(r, obj);
    if (!strcmp(name, "keys") || !strcmp(name, "values")) {
      val *l = mklist(r, obj->u.d.n);
      for (size_t i = 0; i < obj->u.d.n; i++)
        list_push(r, l, name[0] == 'k' ? mkstr(r, obj->u.d.k[i], obj->u.d.kn[i]) : obj->u.d.v[i]);
      return l;
    }
    return NULL;
  }
  return NULL;
}

static val *getattr(render *r, val *obj, const char *k, size_t kn) {
  if (obj->t == V_DICT || obj->t == V_NS) {
    val **s = dict_slot(obj, k, kn);
    return s ? *s : r->undef;
  }
  return r->undef;
}

static val *getitem(render *r, val *obj, val *key, const node *at) {
  if (obj->t == V_DICT || obj->t == V_NS) {
    if (key->t == V_STR) return getattr(r, obj, key->u.s.p, key->u.s.n);
    return r->undef;
  }
  if (obj->t == V_LIST || obj->t == V_STR) {
    if (key->t != V_INT) {
      if (obj->t == V_STR && key->t == V_STR) return r->undef;
      rerr(r, at, "%s index must be an integer, got %s", type_name(obj), type_name(key));
    }
    int64_t i = key->u.i;
    if (obj->t == V_LIST) {
      int64_t n = (int64_t)obj->u.l.n;
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj->u.l.a[i] : r->undef;
    }
    size_t cnt;
    size_t *off = u8_offsets(r, obj->u.s.p, obj->u.s.n, &cnt);
    int64_t n = (int64_t)cnt;
    if (i < 0) i += n;
    return i >= 0 && i < n ? mkstr(r, obj->u.s.p + off[i], off[i + 1] - off[i]) : r->undef;
  }
  return r->undef;
}

static val *do_slice(render *r, val *obj, val *vs, val *ve, val *vst, const node *at) {
  if (obj->t != V_LIST && obj->t != V_STR) {
    if (obj->t == V_UNDEF) return r->undef;
    rerr(r, at, "cannot slice a %s", type_name(obj));
  }
  size_t cnt;
  size_t *off = NULL;
  if (obj->t == V_STR) off = u8_offsets(r, obj->u.s.p, obj->u.s.n, &cnt);
  else cnt = obj->u.l.n;
  int64_t n = (int64_t)cnt;
  int64_t step = (vst && vst->t != V_NONE) ? need_int(r, vst, "slice step", at) : 1;
  if (step == 0) rerr(r, at, "slice step cannot be zero");
  int64_t start, stop;
  int has_s = vs && vs->t != V_NONE, has_e = ve && ve->t != V_NONE;
  if (step > 0) {
    start = has_s ? need_int(r, vs, "slice start", at) : 0;
    stop = has_e ? need_int(r, ve, "slice stop", at) : n;
    if (start < 0) start = start + n < 0 ? 0 : start + n;
    if (stop < 0) stop = stop + n < 0 ? 0 : stop + n;
    if (start > n) start = n;
    if (stop > n) stop = n;
  } else {
    start = has_s ? need_int(r, vs, "slice start", at) : n - 1;
    stop = has_e ? need_int(r, ve, "slice stop", at) : -1 - n;
    if (start < 0) start = start + n < 0 ? -1 : start + n;
    if (start >= n) start = n - 1;
    if (stop < 0) stop = stop + n < -1 ? -1 : stop + n;
    if (stop >= n) stop = n - 1;
  }
  if (obj->t == V_LIST) {
    val *l = mklist(r, 4);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) list_push(r, l, obj->u.l.a[i]);
    return l;
  }
  sbuf b = {0};
  sb_put(r, &b, "", 0);
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    sb_put(r, &b, obj->u.s.p + off[i], off[i + 1] - off[i]);
  return sb_val(r, &b);
}

/* The items a for loop or filter iterates over. */
static val *iter_list(render *r, val *v, const node *at) {
  if (v->t == V_LIST) return v;
  if (v->t == V_UNDEF || v->t == V_NONE) {
    if (v->t == V_NONE) rerr(r, at, "cannot iterate over none");
    return mklist(r, 1);
  }
  if (v->t == V_DICT) {
    val *l = mklist(r, v->u.d.n);
    for (size_t i = 0; i < v->u.d.n; i++) list_push(r, l, mkstr(r, v->u.d.k[i], v->u.d.kn[i]));
    return l;
  }
  if (v->t == V_STR) {
    val *l = mklist(r, v->u.s.n);
    for (size_t i = 0; i < v->u.s.n;) {
      size_t j = i;
      u8_next(v->u.s.p, v->u.s.n, &j);
      list_push(r, l, mkstr(r, v->u.s.p + i, j - i));
      i = j;
    }
    return l;
  }
  rerr(r, at, "cannot iterate over a %s", type_name(v));
}

static int run_test(render *r, const char *name, val *v, const args *a, const node *at) {
  val *x = arg_get(a, 0, NULL);
  if (!strcmp(name, "defined")) return v->t != V_UNDEF;
  if (!strcmp(name, "undefined")) return v->t == V_UNDEF;
  if (!strcmp(name, "none")) return v->t == V_NONE;
  if (!strcmp(name, "string")) return v->t == V_STR;
  if (!strcmp(name, "number")) return is_num(v);
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
    int64_t i = need_int(r, v, name, at);
    return ((i % 2) != 0) == (name[0] == 'o');
  }
  if (!strcmp(name, "divisibleby")) {
    int64_t d = need_int(r, x, "divisibleby argument", at), i = need_int(r, v, "divisibleby", at);
    if (d == 0) rerr(r, at, "divisibleby 0");
    return i % d == 0;
  }
  if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
    if (v->t != V_STR) return 0;
    return val_eq(v, case_map(r, v, name[0] == 'u'));
  }
  if (!x && (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==") || !strcmp(name, "sameas") ||
             !strcmp(name, "ne") || !strcmp(name, "!=") || !strcmp(name, "lt") || !strcmp(name, "<") ||
             !strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "le") || !strcmp(name, "<=") ||
             !strcmp(name, "ge") || !strcmp(name, ">=") || !strcmp(name, "in")))
    rerr(r, at, "test '%s' needs an argument", name);
  if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) return val_eq(v, x);
  if (!strcmp(name, "sameas")) return val_eq(v, x) && (v->t < V_STR || v == x);
  if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !val_eq(v, x);
  if (!strcmp(name, "lt") || !strcmp(name, "<")) return val_cmp(r, v, x, at) < 0;
  if (!strcmp(name, "gt") || !strcmp(name, ">")) return val_cmp(r, v, x, at) > 0;
  if (!strcmp(name, "le") || !strcmp(name, "<=")) return val_cmp(r, v, x, at) <= 0;
  if (!strcmp(name, "ge") || !strcmp(name, ">=")) return val_cmp(r, v, x, at) >= 0;
  if (!strcmp(name, "in")) {
    if (x->t == V_LIST) {
      for (size_t i = 0; i < x->u.l.n; i++)
        if (val_eq(v, x->u.l.a[i])) return 1;
      return 0;
    }
    if (x->t == V_STR && v->t == V_STR) return memfind(x->u.s.p, x->u.s.n, v->u.s.p, v->u.s.n) != NULL;
    if (x->t == V_DICT && v->t == V_STR) return dict_slot(x, v->u.s.p, v->u.s.n) != NULL;
    return 0;
  }
  rerr(r, at, "unknown test '%s'", name);
}

static val *binop(render *r, int op, val *a, val *b, const node *at);
static val *apply_filter(render *r, const char *name, val *v, const args *a, const node *at);

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
    if (isnum && v->t == V_LIST) v = getitem(r, v, mkint(r, strtoll(p + i, NULL, 10)), NULL);
    else v = getitem(r, v, &key, NULL);
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
    int cmp = val_cmp(c->r, c->keys[idx[j]], c->keys[idx[i]], c->at);
    if (c->reverse) cmp = -cmp;
    tmp[k++] = cmp < 0 ? idx[j++] : idx[i++];
  }
  while (i < h) tmp[k++] = idx[i++];
  while (j < n) tmp[k++] = idx[j++];
  memcpy(idx, tmp, n * sizeof *idx);
}

static val *sorted(render *r, val *l, const val *attr, int reverse, int case_sensitive, const node *at) {
  size_t n = l->u.l.n;
  sort_ctx c = {r, at, attr, reverse, case_sensitive, ralloc(r, (n + 1) * sizeof(val *))};
  for (size_t i = 0; i < n; i++) {
    val *k = attr ? attr_path(r, l->u.l.a[i], attr) : l->u.l.a[i];
    if (k->t == V_STR && !case_sensitive) k = case_map(r, k, 0);
    c.keys[i] = k;
  }
  size_t *idx = ralloc(r, (n + 1) * sizeof *idx), *tmp = ralloc(r, (n + 1) * sizeof *tmp);
  for (size_t i = 0; i < n; i++) idx[i] = i;
  merge_sort(&c, idx, tmp, n);
  val *out = mklist(r, n);
  for (size_t i = 0; i < n; i++) list_push(r, out, l->u.l.a[idx[i]]);
  return out;
}

static val *apply_filter(render *r, const char *name, val *v, const args *a, const node *at) {
  if (!strcmp(name, "safe")) return v;
  if (!strcmp(name, "tojson")) {
    json_opts o = {0, 0, 0, NULL, ": "};
    val *ind = arg_get(a, 0, "indent"), *ea = arg_get(a, -1, "ensure_ascii"), *sk = arg_get(a, -1, "sort_keys"),
        *sep = arg_get(a, -1, "separators");
    if (ind && ind->t != V_NONE) o.indent = (int)need_int(r, ind, "tojson indent", at);
    if (o.indent < 0 || o.indent > 64) rerr(r, at, "tojson indent must be in 0..64");
    if (ea) o.ensure_ascii = truthy(ea);
    if (sk) o.sort_keys = truthy(sk);
    o.item_sep = o.indent ? "," : ", ";
    if (sep && sep->t != V_NONE) {
      if (sep->t != V_LIST || sep->u.l.n != 2 || sep->u.l.a[0]->t != V_STR || sep->u.l.a[1]->t != V_STR)
        rerr(r, at, "tojson separators must be a pair of strings");
      o.item_sep = sep->u.l.a[0]->u.s.p;
      o.key_sep = sep->u.l.a[1]->u.s.p;
    }
    sbuf b = {0};
    to_json(r, &b, v, &o, 0, at);
    return sb_val(r, &b);
  }
  if (!strcmp(name, "default") || !strcmp(name, "d")) {
    val *d = arg_get(a, 0, "default_value"), *bo = arg_get(a, 1, "boolean");
    if (!d) d = mkstr(r, "", 0);
    if (v->t == V_UNDEF || (bo && truthy(bo) && !truthy(v))) return d;
    return v;
  }
  if (!strcmp(name, "string")) return to_str(r, v, at);
  if (!strcmp(name, "length") || !strcmp(name, "count")) {
    if (v->t == V_STR) return mkint(r, (int64_t)u8_len(v->u.s.p, v->u.s.n));
    if (v->t == V_LIST) return mkint(r, (int64_t)v->u.l.n);
    if (v->t == V_DICT || v->t == V_NS) return mkint(r, (int64_t)v->u.d.n);
    if (v->t == V_UNDEF) return mkint(r, 0);
    rerr(r, at, "filter 'length' cannot be applied to a %s", type_name(v));
  }
  if (!strcmp(name, "int")) {
    val *d = arg_get(a, 0, "default");
    if (v->t == V_INT) return v;
    if (v->t == V_FLOAT) return isfinite(v->u.f) && fabs(v->u.f) < 9e18 ? mkint(r, (int64_t)trunc(v->u.f)) : (d ? d : mkint(r, 0));
    if (v->t == V_BOOL) return mkint(r, v->u.b);
    if (v->t == V_STR) {
      char *end;
      errno = 0;
      const char *s = v->u.s.p;
      while (is_ws((unsigned char)*s)) s++;
      long long x = strtoll(s, &end, 10);
      if (end == s || errno) return d ? d : mkint(r, 0);
      return mkint(r, x);
    }
    return d ? d : mkint(r, 0);
  }
  if (!strcmp(name, "float")) {
    val *d = arg_get(a, 0, "default");
    if (is_num(v) || v->t == V_BOOL) return mkfloat(r, num_of(v));
    if (v->t == V_STR) {
      char *end;
      double x = strtod(v->u.s.p, &end);
      if (end == v->u.s.p) return d ? d : mkfloat(r, 0);
      return mkfloat(r, x);
    }
    return d ? d : mkfloat(r, 0);
  }
  if (!strcmp(name, "abs")) {
    if (v->t == V_INT) return mkint(r, v->u.i < 0 ? -v->u.i : v->u.i);
    if (v->t == V_FLOAT) return mkfloat(r, fabs(v->u.f));
    rerr(r, at, "filter 'abs' needs a number, got %s", type_name(v));
  }
  if (!strcmp(name, "round")) {
    val *pr = arg_get(a, 0, "precision"), *me = arg_get(a, 1, "method");
    if (!is_num(v)) rerr(r, at, "filter 'round' needs a number, got %s", type_name(v));
    int64_t p = pr ? need_int(r, pr, "round precision", at) : 0;
    if (p < 0 || p > 15) rerr(r, at, "round precision must be in 0..15");
    double m = pow(10, (double)p), x = num_of(v) * m;
    if (me && vstr_eq(me, "floor")) x = floor(x);
    else if (me && vstr_eq(me, "ceil")) x = ceil(x);
    else x = round(x);
    return mkfloat(r, x / m);
  }
  if (v->t == V_STR) {
    if (!strcmp(name, "upper")) return case_map(r, v, 1);
    if (!strcmp(name, "lower")) return case_map(r, v, 0);
    if (!strcmp(name, "title")) return case_map(r, v, 2);
    if (!strcmp(name, "capitalize")) return case_map(r, v, 3);
    if (!strcmp(name, "trim")) {
      val *c = arg_get(a, 0, "chars");
      if (c && c->t == V_NONE) c = NULL;
      if (c) need_str(r, c, "trim characters", at);
      return strip(r, v, 3, c);
    }
    if (!strcmp(name, "replace")) {
      val *o = arg_get(a, 0, "old"), *nw = arg_get(a, 1, "new"), *c = arg_get(a, 2, "count");
      need_str(r, o, "replace: old", at);
      need_str(r, nw, "replace: new", at);
      return str_replace(r, v, o, nw, c && c->t != V_NONE ? need_int(r, c, "replace count", at) : -1);
    }
    if (!strcmp(name, "wordcount")) return mkint(r, (int64_t)str_split(r, v, NULL, -1, at)->u.l.n);
    if (!strcmp(name, "indent")) {
      val *w = arg_get(a, 0, "width"), *first = arg_get(a, 1, "first"), *blank = arg_get(a, 2, "blank");
      sbuf pad = {0};
      if (w && w->t == V_STR) sb_put(r, &pad, w->u.s.p, w->u.s.n);
      else {
        int64_t k = w ? need_int(r, w, "indent width", at) : 4;
        if (k < 0 || k > 1000) rerr(r, at, "indent width out of range");
        for (int64_t i = 0; i < k; i++) sb_put(r, &pad, " ", 1);
      }
      if (!pad.p) sb_put(r, &pad, "", 0);
      sbuf b = {0};
      sb_put(r, &b, "", 0);
      size_t i = 0;
      int line = 0;
      while (i <= v->u.s.n) {
        size_t j = i;
        while (j < v->u.s.n && v->u.s.p[j] != '\n') j++;
        int empty = j == i;
        if ((line > 0 || (first && truthy(first))) && (!empty || (blank && truthy(blank)))) sb_put(r, &b, pad.p, pad.n);
        sb_put(r, &b, v->u.s.p + i, j - i);
        if (j < v->u.s.n) sb_put(r, &b, "\n", 1);
        i = j + 1;
        line++;
      }
      return sb_val(r, &b);
    }
  }
  if (!strcmp(name, "items")) {
    if (v->t == V_DICT) return items_of(r, v);
    if (v->t == V_UNDEF) return mklist(r, 1);
    rerr(r, at, "filter 'items' needs a mapping, got %s", type_name(v));
  }
  if (!strcmp(name, "dictsort")) {
    if (v->t != V_DICT) rerr(r, at, "filter 'dictsort' needs a mapping, got %s", type_name(v));
    val *by = arg_get(a, 1, "by"), *rev = arg_get(a, 2, "reverse"), *cs = arg_get(a, 0, "case_sensitive");
    val *path = mkstr_c(r, by && vstr_eq(by, "value") ? "1" : "0");
    return sorted(r, items_of(r, v), path, rev && truthy(rev), cs && truthy(cs), at);
  }
  if (!strcmp(name, "join")) {
    val *sep = arg_get(a, 0, "d"), *attr = arg_get(a, 1, "attribute");
    if (sep) need_str(r, sep, "join separator", at);
    val *l = iter_list(r, v, at);
    sbuf b = {0};
    sb_put(r, &b, "", 0);
    for (size_t i = 0; i < l->u.l.n; i++) {
      if (i && sep) sb_put(r, &b, sep->u.s.p, sep->u.s.n);
      put_str(r, &b, attr ? attr_path(r, l->u.l.a[i], to_str(r, attr, at)) : l->u.l.a[i], at);
    }
    return sb_val(r, &b);
  }
  if (!strcmp(name, "first") || !strcmp(name, "last")) {
    val *l = iter_list(r, v, at);
    if (!l->u.l.n) return r->undef;
    return name[0] == 'f' ? l->u.l.a[0] : l->u.l.a[l->u.l.n - 1];
  }
  if (!strcmp(name, "list")) {
    val *l = iter_list(r, v, at), *c = mklist(r, l->u.l.n);
    for (size_t i = 0; i < l->u.l.n; i++) list_push(r, c, l->u.l.a[i]);
    return c;
  }
  if (!strcmp(name, "reverse")) {
    if (v->t == V_STR) {
      val *st = mkint(r, -1);
      return do_slice(r, v, NULL, NULL, st, at);
    }
    val *l = iter_list(r, v, at), *c = mklist(r, l->u.l.n);
    for (size_t i = l->u.l.n; i-- > 0;) list_push(r, c, l->u.l.a[i]);
    return c;
  }
  if (!strcmp(name, "sort")) {
    val *rev = arg_get(a, 0, "reverse"), *cs = arg_get(a, 1, "case_sensitive"), *attr = arg_get(a, 2, "attribute");
    return sorted(r, iter_list(r, v, at), attr ? to_str(r, attr, at) : NULL, rev && truthy(rev), cs && truthy(cs), at);
  }
  if (!strcmp(name, "unique")) {
    val *l = iter_list(r, v, at), *c = mklist(r, l->u.l.n);
    for (size_t i = 0; i < l->u.l.n; i++) {
      int seen = 0;
      for (size_t j = 0; j < c->u.l.n && !seen; j++) seen = val_eq(c->u.l.a[j], l->u.l.a[i]);
      if (!seen) list_push(r, c, l->u.l.a[i]);
    }
    return c;
  }
  if (!strcmp(name, "min") || !strcmp(name, "max") || !strcmp(name, "sum")) {
    val *l = iter_list(r, v, at);
    if (name[1] == 'u') {
      val *acc = mkint(r, 0);
      for (size_t i = 0; i < l->u.l.n; i++) acc = binop(r, OP_ADD, acc, l->u.l.a[i], at);
      return acc;
    }
    if (!l->u.l.n) return r->undef;
    val *best = l->u.l.a[0];
    for (size_t i = 1; i < l->u.l.n; i++) {
      int c = val_cmp(r, l->u.l.a[i], best, at);
      if (name[1] == 'i' ? c < 0 : c > 0) best = l->u.l.a[i];
    }
    return best;
  }
  if (!strcmp(name, "map")) {
    val *l = iter_list(r, v, at), *out = mklist(r, l->u.l.n);
    val *attr = arg_get(a, -1, "attribute");
    if (attr) {
      val *dflt = arg_get(a, -1, "default");
      val *path = to_str(r, attr, at);
      for (size_t i = 0; i < l->u.l.n; i++) {
        val *x = attr_path(r, l->u.l.a[i], path);
        list_push(r, out, x->t == V_UNDEF && dflt ? dflt : x);
      }
      return out;
    }
    val *fname = arg_get(a, 0, NULL);
    if (!fname || fname->t != V_STR) rerr(r, at, "map needs a filter name or attribute=");
    args rest = {a->v ? a->v + 1 : NULL, a->names ? a->names + 1 : NULL, a->n > 0 ? a->n - 1 : 0};
    for (size_t i = 0; i < l->u.l.n; i++) list_push(r, out, apply_filter(r, fname->u.s.p, l->u.l.a[i], &rest, at));
    return out;
  }
  if (!strcmp(name, "select") || !strcmp(name, "reject") || !strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) {
    int attrv = strstr(name, "attr") != NULL, rej = name[0] == 'r';
    val *l = iter_list(r, v, at), *out = mklist(r, l->u.l.n);
    int k = 0;
    val *path = NULL;
    if (attrv) {
      val *p = arg_get(a, k++, NULL);
      if (!p) rerr(r, at, "%s needs an attribute name", name);
      path = to_str(r, p, at);
    }
    val *tn = arg_get(a, k, NULL);
    args rest = {0};
    if (tn) {
      need_str(r, tn, "test name", at);
      int skip = k + 1;
      rest.v = a->v + skip <= a->v + a->n ? a->v + skip : NULL;
      rest.names = a->names + skip <= a->names + a->n ? a->names + skip : NULL;
      rest.n = a->n - skip > 0 ? a->n - skip : 0;
    }
    for (size_t i = 0; i < l->u.l.n; i++) {
      val *x = path ? attr_path(r, l->u.l.a[i], path) : l->u.l.a[i];
      int ok = tn ? run_test(r, tn->u.s.p, x, &rest, at) : truthy(x);
      if (ok != rej) list_push(r, out, l->u.l.a[i]);
    }
    return out;
  }
  if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "trim") || !strcmp(name, "title") ||
      !strcmp(name, "capitalize") || !strcmp(name, "replace") || !strcmp(name, "indent") || !strcmp(name, "wordcount")) {
    if (v->t == V_UNDEF) return mkstr(r, "", 0);
    rerr(r, at, "filter '%s' needs a string, got %s", name, type_name(v));
  }
  rerr(r, at, "unknown filter '%s'", name);
}

static val *binop(render *r, int op, val *a, val *b, const node *at) {
  switch (op) {
    case OP_EQ: return mkbool(r, val_eq(a, b));
    case OP_NE: return mkbool(r, !val_eq(a, b));
    case OP_CAT: {
      sbuf s = {0};
      put_str(r, &s, a, at);
      put_str(r, &s, b, at);
      return sb_val(r, &s);
    }
    case OP_IN: case OP_NOTIN: {
      int in;
      if (b->t == V_UNDEF) in = 0;
      else if (b->t == V_LIST) {
        in = 0;
        for (size_t i = 0; i < b->u.l.n && !in; i++) in = val_eq(a, b->u.l.a[i]);
      } else if (b->t == V_STR) {
        if (a->t != V_STR) rerr(r, at, "'in <string>' needs a string on the left, got %s", type_name(a));
        in = memfind(b->u.s.p, b->u.s.n, a->u.s.p, a->u.s.n) != NULL;
      } else if (b->t == V_DICT || b->t == V_NS) {
        in = a->t == V_STR && dict_slot(b, a->u.s.p, a->u.s.n) != NULL;
      } else {
        rerr(r, at, "cannot test membership in a %s", type_name(b));
      }
      return mkbool(r, op == OP_IN ? in : !in);
    }
    case OP_LT: return mkbool(r, val_cmp(r, a, b, at) < 0);
    case OP_GT: return mkbool(r, val_cmp(r, a, b, at) > 0);
    case OP_LE: return mkbool(r, val_cmp(r, a, b, at) <= 0);
    case OP_GE: return mkbool(r, val_cmp(r, a, b, at) >= 0);
    default: break;
  }
  if (op == OP_ADD) {
    if (a->t == V_LIST && b->t == V_LIST) {
      val *l = mklist(r, a->u.l.n + b->u.l.n);
      for (size_t i = 0; i < a->u.l.n; i++) list_push(r, l, a->u.l.a[i]);
      for (size_t i = 0; i < b->u.l.n; i++) list_push(r, l, b->u.l.a[i]);
      return l;
    }
    if (a->t == V_STR && b->t == V_STR) {
      sbuf s = {0};
      sb_put(r, &s, a->u.s.p, a->u.s.n);
      sb_put(r, &s, b->u.s.p, b->u.s.n);
      return sb_val(r, &s);
    }
    if ((a->t == V_STR || b->t == V_STR) && a->t != V_NONE && b->t != V_NONE && a->t != V_UNDEF && b->t != V_UNDEF) {
      sbuf s = {0};
      put_str(r, &s, a, at);
      put_str(r, &s, b, at);
      return sb_val(r, &s);
    }
  }
  if (op == OP_MUL && ((a->t == V_STR && b->t == V_INT) || (a->t == V_INT && b->t == V_STR))) {
    const val *s = a->t == V_STR ? a : b;
    int64_t k = a->t == V_INT ? a->u.i : b->u.i;
    if (k > 0 && s->u.s.n * (uint64_t)k > r->lim.max_output) rerr(r, at, "string repetition too large");
    sbuf o = {0};
    sb_put(r, &o, "", 0);
    for (int64_t i = 0; i < k; i++) sb_put(r, &o, s->u.s.p, s->u.s.n);
    return sb_val(r, &o);
  }
  static const char *opn[] = {"+", "-", "*", "/", "//", "%", "**"};
  if (!((is_num(a) || a->t == V_BOOL) && (is_num(b) || b->t == V_BOOL)))
    rerr(r, at, "unsupported operand types for %s: %s and %s", op <= OP_POW ? opn[op] : "?", type_name(a),
         type_name(b));
  int fl = a->t == V_FLOAT || b->t == V_FLOAT;
  if (!fl && op != OP_DIV && op != OP_POW) {
    int64_t x = a->t == V_BOOL ? a->u.b : a->u.i, y = b->t == V_BOOL ? b->u.b : b->u.i, z;
    switch (op) {
      case OP_ADD: if (__builtin_add_overflow(x, y, &z)) break; return mkint(r, z);
      case OP_SUB: if (__builtin_sub_overflow(x, y, &z)) break; return mkint(r, z);
      case OP_MUL: if (__builtin_mul_overflow(x, y, &z)) break; return mkint(r, z);
      case OP_FLOORDIV: case OP_MOD: {
        if (y == 0) rerr(r, at, "division by zero");
        if (x == INT64_MIN && y == -1) break;
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q--;
          m += y;
        }
        return mkint(r, op == OP_MOD ? m : q);
      }
      default: break;
    }
    rerr(r, at, "integer overflow");
  }
  double x = num_of(a), y = num_of(b);
  switch (op) {
    case OP_ADD: return mkfloat(r, x + y);
    case OP_SUB: return mkfloat(r, x - y);
    case OP_MUL: return mkfloat(r, x * y);
    case OP_DIV:
      if (y == 0) rerr(r, at, "division by zero");
      return mkfloat(r, x / y);
    case OP_FLOORDIV:
      if (y == 0) rerr(r, at, "division by zero");
      return mkfloat(r, floor(x / y));
    case OP_MOD:
      if (y == 0) rerr(r, at, "division by zero");
      return mkfloat(r, x - y * floor(x / y));
    case OP_POW: {
      double z = pow(x, y);
      if (!isfinite(z)) rerr(r, at, "exponentiation result is not finite");
      if (!fl && y >= 0 && fabs(z) < 9e18) return mkint(r, (int64_t)z);
      return mkfloat(r, z);
    }
  }
  rerr(r, at, "bad operator");
}

static val *call_macro(render *r, val *m, const args *a, const node *at) {
  const node *def = m->u.m.def;
  scope *sc = scope_new(r, m->u.m.sc);
  int npos = 0;
  for (int i = 0; i < a->n; i++)
    if (!a->names[i]) npos++;
  if (npos > def->nnames) rerr(r, at, "macro '%s' takes %d arguments, got %d", def->s, def->nnames, npos);
  for (int i = 0; i < a->n; i++) {
    if (!a->names[i]) continue;
    int ok = 0;
    for (int k = 0; k < def->nnames; k++) ok |= !strcmp(def->names[k], a->names[i]);
    if (!ok) rerr(r, at, "macro '%s' has no parameter '%s'", def->s, a->names[i]);
  }
  for (int k = 0; k < def->nnames; k++) {
    val *v = arg_get(a, k, def->names[k]);
    if (!v) v = def->args.v[k] ? eval(r, sc, def->args.v[k]) : r->undef;
    scope_set(r, sc, def->names[k], v);
  }
  sbuf out = {0};
  sb_put(r, &out, "", 0);
  exec_body(r, sc, &def->body, &out);
  r->brk = r->cont = 0;
  return sb_val(r, &out);
}

static val *call_value(render *r, scope *sc, const node *e) {
  const node *callee = e->a;
  args a = eval_args(r, sc, e);
  if (callee->kind == E_ATTR) {
    val *obj = eval(r, sc, callee->a);
    if (obj->t == V_DICT || obj->t == V_NS) {
      val **s = dict_slot(obj, callee->s, callee->slen);
      if (s && (*s)->t == V_MACRO) return call_macro(r, *s, &a, e);
    }
    val *res = call_method(r, obj, callee->s, &a, e);
    if (res) return res;
    rerr(r, e, "%s has no method '%s'", type_name(obj), callee->s);
  }
  val *f = eval(r, sc, callee);
  if (f->t == V_MACRO) return call_macro(r, f, &a, e);
  if (f->t != V_FUNC) {
    if (callee->kind == E_NAME) rerr(r, e, "'%s' is %s, not a function", callee->s, f->t == V_UNDEF ? "undefined" : type_name(f));
    rerr(r, e, "a %s is not callable", type_name(f));
  }
  switch (f->u.fn) {
    case F_RAISE: {
      val *m = arg_get(&a, 0, NULL);
      sbuf b = {0};
      if (m) put_str(r, &b, m, e);
      rerr(r, e, "raise_exception: %s", b.p ? b.p : "");
    }
    case F_NAMESPACE: case F_DICT: {
      val *ns = mkdict(r, f->u.fn == F_NAMESPACE ? V_NS : V_DICT);
      for (int i = 0; i < a.n; i++) {
        if (a.names[i]) {
          dict_set_c(r, ns, a.names[i], a.v[i]);
        } else if (a.v[i]->t == V_DICT) {
          for (size_t k = 0; k < a.v[i]->u.d.n; k++) dict_set(r, ns, a.v[i]->u.d.k[k], a.v[i]->u.d.kn[k], a.v[i]->u.d.v[k]);
        } else {
          rerr(r, e, "namespace()/dict() positional argument must be a mapping");
        }
      }
      return ns;
    }
    case F_RANGE: {
      int64_t s = 0, st = 1, en;
      val *x = arg_get(&a, 0, NULL), *y = arg_get(&a, 1, NULL), *z = arg_get(&a, 2, NULL);
      if (!x) rerr(r, e, "range needs at least one argument");
      if (y) {
        s = need_int(r, x, "range start", e);
        en = need_int(r, y, "range stop", e);
      } else {
        en = need_int(r, x, "range stop", e);
      }
      if (z) st = need_int(r, z, "range step", e);
      if (st == 0) rerr(r, e, "range step cannot be zero");
      val *l = mklist(r, 8);
      for (int64_t i = s; st > 0 ? i < en : i > en; i += st) {
        if (l->u.l.n >= 10000000) rerr(r, e, "range too large");
        list_push(r, l, mkint(r, i));
      }
      return l;
    }
  }
  rerr(r, e, "bad function");
}

static val *eval(render *r, scope *sc, const node *e) {
  if (++r->depth > r->lim.max_depth) rerr(r, e, "nesting deeper than %d", r->lim.max_depth);
  val *res;
  switch (e->kind) {
    case E_LIT: res = e->lit; break;
    case E_NAME: res = scope_get(r, sc, e->s); break;
    case E_ATTR: {
      val *o = eval(r, sc, e->a);
      res = getattr(r, o, e->s, e->slen);
      break;
    }
    case E_INDEX: {
      val *o = eval(r, sc, e->a), *k = eval(r, sc, e->b);
      res = getitem(r, o, k, e);
      break;
    }
    case E_SLICE: {
      val *o = eval(r, sc, e->a);
      val *s = e->b ? eval(r, sc, e->b) : NULL, *en = e->c ? eval(r, sc, e->c) : NULL;
      val *st = e->args.n ? eval(r, sc, e->args.v[0]) : NULL;
      res = do_slice(r, o, s, en, st, e);
      break;
    }
    case E_CALL: res = call_value(r, sc, e); break;
    case E_FILTER: {
      val *v = eval(r, sc, e->a);
      args a = eval_args(r, sc, e);
      res = apply_filter(r, e->s, v, &a, e);
      break;
    }
    case E_TEST: {
      val *v = eval(r, sc, e->a);
      args a = eval_args(r, sc, e);
      int t = run_test(r, e->s, v, &a, e);
      res = mkbool(r, e->op ? !t : t);
      break;
    }
    case E_NOT: res = mkbool(r, !truthy(eval(r, sc, e->a))); break;
    case E_NEG: case E_POS: {
      val *v = eval(r, sc, e->a);
      if (v->t == V_INT) res = e->kind == E_NEG ? (v->u.i == INT64_MIN ? mkfloat(r, 9.2233720368547758e18) : mkint(r, -v->u.i)) : v;
      else if (v->t == V_FLOAT) res = e->kind == E_NEG ? mkfloat(r, -v->u.f) : v;
      else rerr(r, e, "bad operand type for unary %c: %s", e->kind == E_NEG ? '-' : '+', type_name(v));
      break;
    }
    case E_BIN: {
      val *a = eval(r, sc, e->a), *b = eval(r, sc, e->b);
      res = binop(r, e->op, a, b, e);
      break;
    }
    case E_AND: {
      val *a = eval(r, sc, e->a);
      res = truthy(a) ? eval(r, sc, e->b) : a;
      break;
    }
    case E_OR: {
      val *a = eval(r, sc, e->a);
      res = truthy(a) ? a : eval(r, sc, e->b);
      break;
    }
    case E_COND:
      if (truthy(eval(r, sc, e->a))) res = eval(r, sc, e->b);
      else res = e->c ? eval(r, sc, e->c) : r->undef;
      break;
    case E_LIST: case E_TUPLE: {
      res = mklist(r, (size_t)e->args.n);
      for (int i = 0; i < e->args.n; i++) list_push(r, res, eval(r, sc, e->args.v[i]));
      break;
    }
    case E_DICT: {
      res = mkdict(r, V_DICT);
      for (int i = 0; i + 1 < e->args.n; i += 2) {
        val *k = eval(r, sc, e->args.v[i]);
        val *v = eval(r, sc, e->args.v[i + 1]);
        k = to_str(r, k, e);
        dict_set(r, res, k->u.s.p, k->u.s.n, v);
      }
      break;
    }
    default: rerr(r, e, "internal: bad expression node");
  }
  r->depth--;
  return res;
}

static void emit(render *r, sbuf *out, const char *s, size_t n, const node *at) {
  if (out->n + n > r->lim.max_output) rerr(r, at, "output larger than %zu bytes", r->lim.max_output);
  sb_put(r, out, s, n);
}

static void assign_targets(render *r, scope *sc, const char **names, int nnames, val *v, const node *at) {
  if (nnames == 1) {
    scope_set(r, sc, names[0], v);
    return;
  }
  val *l = iter_list(r, v, at);
  if ((int)l->u.l.n != nnames)
    rerr(r, at, "cannot unpack %zu values into %d names", l->u.l.n, nnames);
  for (int i = 0; i < nnames; i++) scope_set(r, sc, names[i], l->u.l.a[i]);
}

static void exec_stmt(render *r, scope *sc, const node *s, sbuf *out) {
  switch (s->kind) {
    case N_TEXT: emit(r, out, s->s, s->slen, s); break;
    case N_OUT: {
      val *v = eval(r, sc, s->a);
      if (v->t == V_NONE || v->t == V_UNDEF) break;
      if (v->t == V_STR) {
        emit(r, out, v->u.s.p, v->u.s.n, s);
      } else {
        sbuf b = {0};
        put_str(r, &b, v, s);
        emit(r, out, b.p ? b.p : "", b.n, s);
      }
      break;
    }
    case N_IF: {
      if (truthy(eval(r, sc, s->a))) exec_body(r, sc, &s->body, out);
      else exec_body(r, sc, &s->orelse, out);
      break;
    }
    case N_FOR: {
      val *items = iter_list(r, eval(r, sc, s->a), s);
      scope *ls = scope_new(r, sc);
      val *sel = items;
      if (s->b) { /* loop filter: evaluated with the loop variables bound */
        sel = mklist(r, items->u.l.n);
        for (size_t i = 0; i < items->u.l.n; i++) {
          assign_targets(r, ls, s->names, s->nnames, items->u.l.a[i], s);
          if (truthy(eval(r, ls, s->b))) list_push(r, sel, items->u.l.a[i]);
        }
      }
      size_t n = sel->u.l.n;
      for (size_t i = 0; i < n; i++) {
        ls = scope_new(r, sc);
        assign_targets(r, ls, s->names, s->nnames, sel->u.l.a[i], s);
        val *loop = mkdict(r, V_DICT);
        dict_set_c(r, loop, "index", mkint(r, (int64_t)i + 1));
        dict_set_c(r, loop, "index0", mkint(r, (int64_t)i));
        dict_set_c(r, loop, "revindex", mkint(r, (int64_t)(n - i)));
        dict_set_c(r, loop, "revindex0", mkint(r, (int64_t)(n - i - 1)));
        dict_set_c(r, loop, "first", mkbool(r, i == 0));
        dict_set_c(r, loop, "last", mkbool(r, i == n - 1));
        dict_set_c(r, loop, "length", mkint(r, (int64_t)n));
        dict_set_c(r, loop, "previtem", i > 0 ? sel->u.l.a[i - 1] : r->undef);
        dict_set_c(r, loop, "nextitem", i + 1 < n ? sel->u.l.a[i + 1] : r->undef);
        scope_set(r, ls, "loop", loop);
        exec_body(r, ls, &s->body, out);
        if (r->brk) {
          r->brk = 0;
          break;
        }
        r->cont = 0;
      }
      if (n == 0) exec_body(r, sc, &s->orelse, out);
      break;
    }
    case N_SET: {
      val *v = eval(r, sc, s->a);
      if (s->s2) {
        val *ns = scope_get(r, sc, s->s);
        if (ns->t != V_NS && ns->t != V_DICT)
          rerr(r, s, "cannot set attribute '%s' on '%s' (a %s; use namespace())", s->s2, s->s, type_name(ns));
        dict_set_c(r, ns, s->s2, v);
      } else {
        assign_targets(r, sc, s->names, s->nnames, v, s);
      }
      break;
    }
    case N_SETBLOCK: {
      sbuf b = {0};
      sb_put(r, &b, "", 0);
      exec_body(r, sc, &s->body, &b);
      scope_set(r, sc, s->names[0], sb_val(r, &b));
      break;
    }
    case N_MACRO: {
      val *m = mkval(r, V_MACRO);
      m->u.m.def = s;
      m->u.m.sc = sc;
      scope_set(r, sc, s->s, m);
      break;
    }
    case N_BREAK: r->brk = 1; break;
    case N_CONTINUE: r->cont = 1; break;
    default: rerr(r, s, "internal: bad statement node");
  }
}

static void exec_body(render *r, scope *sc, const nlist *body, sbuf *out) {
  if (++r->depth > r->lim.max_depth) rerr(r, body->n ? body->v[0] : NULL, "nesting deeper than %d", r->lim.max_depth);
  for (int i = 0; i < body->n && !r->brk && !r->cont; i++) exec_stmt(r, sc, body->v[i], out);
  r->depth--;
}

static val *from_json(render *r, const json_t *j, int depth) {
  if (depth > 10000) rerr(r, NULL, "input JSON nested too deeply");
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      val *d = mkdict(r, V_DICT);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)j, k, v) {
        size_t kn = strlen(k);
        char *kc = ralloc(r, kn + 1);
        memcpy(kc, k, kn + 1);
        dict_set(r, d, kc, kn, from_json(r, v, depth + 1));
      }
      return d;
    }
    case JSON_ARRAY: {
      val *l = mklist(r, json_array_size(j));
      for (size_t i = 0; i < json_array_size(j); i++) list_push(r, l, from_json(r, json_array_get(j, i), depth + 1));
      return l;
    }
    case JSON_STRING: return mkstr(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return mkint(r, (int64_t)json_integer_value(j));
    case JSON_REAL: {
      double x = json_real_value(j);
      if (x == floor(x) && fabs(x) < 9e15) return mkint(r, (int64_t)x);
      return mkfloat(r, x);
    }
    case JSON_TRUE: return r->vtrue;
    case JSON_FALSE: return r->vfalse;
    default: return r->none;
  }
}

static char *render_run(render *r, const jinja_template *t, const json_t *vars, size_t *out_len) {
  char *result = NULL;
  if (setjmp(r->jb)) return NULL;
  {
    r->undef = mkval(r, V_UNDEF);
    r->none = mkval(r, V_NONE);
    r->vtrue = mkval(r, V_BOOL);
    r->vtrue->u.b = 1;
    r->vfalse = mkval(r, V_BOOL);
    scope *g = scope_new(r, NULL);
    r->globals = g;
    static const struct { const char *name; int fn; } fns[] = {
        {"namespace", F_NAMESPACE}, {"raise_exception", F_RAISE}, {"range", F_RANGE}, {"dict", F_DICT}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
      val *f = mkval(r, V_FUNC);
      f->u.fn = fns[i].fn;
      scope_set(r, g, fns[i].name, f);
    }
    if (vars && json_is_object(vars)) {
      scope *u = scope_new(r, g);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)vars, k, v) {
        size_t kn = strlen(k);
        char *kc = ralloc(r, kn + 1);
        memcpy(kc, k, kn + 1);
        scope_set(r, u, kc, from_json(r, v, 0));
      }
      g = u;
    }
    scope *top = scope_new(r, g);
    sbuf out = {0};
    sb_put(r, &out, "", 0);
    exec_body(r, top, &t->body, &out);
    result = malloc(out.n + 1);
    if (!result) {
      q35_seterr(r->err, "out of memory");
    } else {
      memcpy(result, out.p, out.n + 1);
      if (out_len) *out_len = out.n;
    }
  }
  return result;
}

jinja_limits jinja_default_limits(void) {
  jinja_limits l = {(size_t)64 << 20, (size_t)512 << 20, 200};
  return l;
}

char *jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *limits, size_t *out_len,
                   q35_err *err) {
  render *r = calloc(1, sizeof *r);
  if (!r) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  r->err = err;
  r->lim = limits ? *limits : jinja_default_limits();
  if (r->lim.max_depth <= 0) r->lim.max_depth = 200;
  if (!r->lim.max_output) r->lim.max_output = (size_t)64 << 20;
  if (!r->lim.max_memory) r->lim.max_memory = (size_t)512 << 20;
  r->ar.limit = r->lim.max_memory;
  char *result = render_run(r, t, vars, out_len);
  arena_free(&r->ar);
  free(r);
  return result;
}
