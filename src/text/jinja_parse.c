/*
 * jinja_parse.c - recursive descent from tokens to the AST (jinja_internal.h's `node`), and the
 * public jinja_parse / jinja_free. Precedence, loosest first: `a if c else b`, or, and, not,
 * comparisons and `in`, `~`, + -, * / // %, **, filters and tests, unary - +, postfix
 * (.attr, [index], [slice], call), primary.
 */
#include "text/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_DESC_MAX 64  /* bytes of a token's description in an error message */
#define TOK_QUOTE_MAX 40 /* characters of a name quoted in an error message */

/* ---------------------------------------------------------------------------------------- */
/* tokens                                                                                   */

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
    case TK_NAME: snprintf(buf, n, "'%.*s'", (int)(t->n > TOK_QUOTE_MAX ? TOK_QUOTE_MAX : t->n), t->s); return buf;
    default: snprintf(buf, n, "'%s'", t->op); return buf;
  }
}

static void expect_op(parser *p, const char *op) {
  if (!is_op(peek(p), op)) {
    char b[TOK_DESC_MAX];
    jj_perr(p, peek(p)->pos, "expected '%s', found %s", op, tok_desc(peek(p), b, sizeof b));
  }
  next(p);
}

static void expect_type(parser *p, int type, const char *what) {
  if (peek(p)->type != type) {
    char b[TOK_DESC_MAX];
    jj_perr(p, peek(p)->pos, "expected %s, found %s", what, tok_desc(peek(p), b, sizeof b));
  }
  next(p);
}

static const char *pstrdup(parser *p, const char *s, size_t n) {
  char *r = jj_palloc(p, n + 1);
  memcpy(r, s, n);
  return r;
}

static const char *expect_ident(parser *p) {
  tok *t = peek(p);
  if (t->type != TK_NAME) {
    char b[TOK_DESC_MAX];
    jj_perr(p, t->pos, "expected a name, found %s", tok_desc(t, b, sizeof b));
  }
  next(p);
  return pstrdup(p, t->s, t->n);
}

static node *mknode(parser *p, int kind, size_t pos) {
  node *nd = jj_palloc(p, sizeof *nd);
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
    node **nv = jj_palloc(p, (size_t)nc * sizeof *nv);
    const char **nn = jj_palloc(p, (size_t)nc * sizeof *nn);
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
  val *v = jj_palloc(p, sizeof *v);
  v->t = t;
  return v;
}

/* ---------------------------------------------------------------------------------------- */
/* expressions                                                                              */

static node *parse_expr(parser *p);
static node *parse_or(parser *p);
static node *parse_unary(parser *p);

static void enter(parser *p) {
  if (++p->depth > JINJA_PARSE_MAX_DEPTH) jj_perr(p, peek(p)->pos, "template nested too deeply");
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
      jj_perr(p, peek(p)->pos, "positional argument follows keyword argument");
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
      char *buf = jj_palloc(p, total + 1);
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
  char b[TOK_DESC_MAX];
  jj_perr(p, t->pos, "unexpected %s in expression", tok_desc(t, b, sizeof b));
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
          nd->args.v = jj_palloc(p, sizeof(node *));
          nd->args.v[0] = parts[2];
        }
      } else {
        if (!parts[0]) jj_perr(p, t->pos, "empty subscript");
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
        char b[TOK_DESC_MAX];
        jj_perr(p, nt->pos, "expected a test name after 'is', found %s", tok_desc(nt, b, sizeof b));
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
          nd->args.v = jj_palloc(p, sizeof(node *));
          nd->argnames = jj_palloc(p, sizeof(char *));
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

/* The left-associative binary operators, loosest first: `~`, then + -, then * / // %, then **
 * (whose operands are unary expressions with their filters). */
#define LEVEL_OPS 4
static const struct {
  const char *tok[LEVEL_OPS]; /* NULL-terminated when shorter */
  int op[LEVEL_OPS];
} bin_levels[] = {
    {{"~"}, {OP_CAT}},
    {{"+", "-"}, {OP_ADD, OP_SUB}},
    {{"*", "/", "//", "%"}, {OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD}},
    {{"**"}, {OP_POW}},
};
#define N_LEVELS (int)(sizeof bin_levels / sizeof bin_levels[0])

static node *parse_level(parser *p, int lv) {
  node *e = lv + 1 < N_LEVELS ? parse_level(p, lv + 1) : parse_unary(p);
  for (;;) {
    tok *t = peek(p);
    int k = 0;
    while (k < LEVEL_OPS && bin_levels[lv].tok[k] && !is_op(t, bin_levels[lv].tok[k])) k++;
    if (k == LEVEL_OPS || !bin_levels[lv].tok[k]) return e;
    next(p);
    e = mkbin(p, bin_levels[lv].op[k], e, lv + 1 < N_LEVELS ? parse_level(p, lv + 1) : parse_unary(p), t->pos);
  }
}

static node *parse_compare(parser *p) {
  node *e = parse_level(p, 0);
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
    e = mkbin(p, op, e, parse_level(p, 0), t->pos);
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

/* ---------------------------------------------------------------------------------------- */
/* statements                                                                               */

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

/* {% if c %} ... {% elif c %} ... {% else %} ... {% endif %}: elif chains nest as N_IF in orelse */
static node *parse_if(parser *p, const tok *open) {
  node *nd = mknode(p, N_IF, open->pos);
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
      cur->orelse.v = jj_palloc(p, sizeof(node *));
      cur->orelse.v[0] = el;
      cur->orelse.n = 1;
      cur = el;
    } else if (w == 1) {
      close_stmt(p);
      static const char *const st2[] = {"endif"};
      parse_body(p, &cur->orelse, st2, 1, open->pos, "if");
      close_stmt(p);
      return nd;
    } else {
      close_stmt(p);
      return nd;
    }
  }
}

/* {% for a[, b] in xs [if c] %} ... [{% else %} ...] {% endfor %} */
static node *parse_for(parser *p, const tok *open) {
  node *nd = mknode(p, N_FOR, open->pos);
  parse_targets(p, nd);
  if (!is_name(peek(p), "in")) {
    char b[TOK_DESC_MAX];
    jj_perr(p, peek(p)->pos, "expected 'in' in for loop, found %s", tok_desc(peek(p), b, sizeof b));
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
  if (is_name(peek(p), "recursive")) jj_perr(p, peek(p)->pos, "recursive loops are not supported");
  close_stmt(p);
  static const char *const st[] = {"else", "endfor"};
  int w = parse_body(p, &nd->body, st, 2, open->pos, "for");
  close_stmt(p);
  if (w == 0) {
    static const char *const st2[] = {"endfor"};
    parse_body(p, &nd->orelse, st2, 1, open->pos, "for");
    close_stmt(p);
  }
  return nd;
}

/* {% set x = e %}, {% set a, b = e %}, {% set ns.attr = e %}, {% set x %} ... {% endset %} */
static node *parse_set(parser *p, const tok *open) {
  node *nd = mknode(p, N_SET, open->pos);
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
    if (nd->s2 || nd->nnames != 1) jj_perr(p, peek(p)->pos, "block set needs a single name");
    nd->kind = N_SETBLOCK;
    close_stmt(p);
    static const char *const st[] = {"endset"};
    parse_body(p, &nd->body, st, 1, open->pos, "set");
    close_stmt(p);
  } else {
    char b[TOK_DESC_MAX];
    jj_perr(p, peek(p)->pos, "expected '=' in set, found %s", tok_desc(peek(p), b, sizeof b));
  }
  return nd;
}

/* {% macro name(a, b=default) %} ... {% endmacro [name] %} */
static node *parse_macro(parser *p, const tok *open) {
  node *nd = mknode(p, N_MACRO, open->pos);
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
  return nd;
}

/* {% generation %} ... {% endgeneration %}: transformers' assistant-mask markers; the body
 * renders as is (an N_IF on a true literal). */
static node *parse_generation(parser *p, const tok *open) {
  close_stmt(p);
  node *nd = mknode(p, N_IF, open->pos);
  nd->a = mknode(p, E_LIT, open->pos);
  nd->a->lit = plit(p, V_BOOL);
  nd->a->lit->u.b = 1;
  static const char *const st[] = {"endgeneration"};
  parse_body(p, &nd->body, st, 1, open->pos, "generation");
  close_stmt(p);
  return nd;
}

static node *parse_stmt(parser *p) {
  tok *open = next(p); /* {% */
  tok *kw = peek(p);
  if (kw->type != TK_NAME) {
    char b[TOK_DESC_MAX];
    jj_perr(p, kw->pos, "expected a statement name after '{%%', found %s", tok_desc(kw, b, sizeof b));
  }
  enter(p);
  node *nd;
  if (is_name(kw, "break") || is_name(kw, "continue")) {
    nd = mknode(p, is_name(kw, "break") ? N_BREAK : N_CONTINUE, open->pos);
    next(p);
    close_stmt(p);
  } else {
    static const struct {
      const char *name;
      node *(*parse)(parser *p, const tok *open);
    } stmts[] = {{"if", parse_if}, {"for", parse_for}, {"set", parse_set}, {"macro", parse_macro},
                 {"generation", parse_generation}};
    size_t k = 0;
    while (k < sizeof stmts / sizeof stmts[0] && !is_name(kw, stmts[k].name)) k++;
    if (k == sizeof stmts / sizeof stmts[0])
      jj_perr(p, kw->pos, "unknown statement '%.*s'", (int)(kw->n > TOK_QUOTE_MAX ? TOK_QUOTE_MAX : kw->n), kw->s);
    next(p);
    nd = stmts[k].parse(p, open);
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
      jj_perr(p, open_pos, "unclosed '%s' block: expected '{%% %s %%}' before end of template", what,
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
        jj_perr(p, kw->pos, "unexpected '%.*s'%s%s", (int)(kw->n > TOK_QUOTE_MAX ? TOK_QUOTE_MAX : kw->n), kw->s,
             nstops ? " inside " : "", nstops ? what : "");
      nvec_push(p, &v, parse_stmt(p), NULL);
    } else {
      char b[TOK_DESC_MAX];
      jj_perr(p, t->pos, "unexpected %s", tok_desc(t, b, sizeof b));
    }
  }
  out->v = v.v;
  out->n = v.n;
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* entry points                                                                             */

static int parse_run(parser *p, jinja_template *t) {
  if (setjmp(p->jb)) return 0;
  jj_lex(p);
  parse_body(p, &t->body, NULL, 0, 0, "template");
  return 1;
}

jinja_template *jinja_parse(const char *src, size_t len, q35_err *err) {
  jinja_template *t = calloc(1, sizeof *t);
  if (!t) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  t->ar.limit = JINJA_TEMPLATE_MAX_MEMORY;
  size_t *map = NULL;
  t->src = jj_preprocess(src, len, &map, &t->n);
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
  jj_arena_free(&t->ar);
  free(t->src);
  free(t);
}
