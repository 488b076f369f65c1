/*
 * jinja_render.c - renders a parsed template: evaluates expressions (item access, slices,
 * operators, calls of macros, methods and global functions), executes statements, and the
 * public jinja_render / jinja_default_limits. All memory lives in the render's arena.
 */
#include "text/jinja_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RANGE_MAX_ITEMS 10000000 /* range() longer than this is an error, not a memory hog */

static val *eval(render *r, scope *sc, const node *e);
static void exec_body(render *r, scope *sc, const nlist *body, sbuf *out);

/* ---------------------------------------------------------------------------------------- */
/* item access, slices, iteration                                                           */

static args eval_args(render *r, scope *sc, const node *call) {
  args a = {0};
  a.n = call->args.n;
  if (a.n) {
    a.v = jj_ralloc(r, (size_t)a.n * sizeof *a.v);
    a.names = jj_ralloc(r, (size_t)a.n * sizeof *a.names);
    for (int i = 0; i < a.n; i++) {
      a.v[i] = eval(r, sc, call->args.v[i]);
      a.names[i] = call->argnames ? call->argnames[i] : NULL;
    }
  }
  return a;
}

static val *getattr(render *r, val *obj, const char *k, size_t kn) {
  if (obj->t == V_DICT || obj->t == V_NS) {
    val **s = jj_dict_slot(obj, k, kn);
    return s ? *s : r->undef;
  }
  return r->undef;
}

val *jj_getitem(render *r, val *obj, val *key, const node *at) {
  if (obj->t == V_DICT || obj->t == V_NS) {
    if (key->t == V_STR) return getattr(r, obj, key->u.s.p, key->u.s.n);
    return r->undef;
  }
  if (obj->t == V_LIST || obj->t == V_STR) {
    if (key->t != V_INT) {
      if (obj->t == V_STR && key->t == V_STR) return r->undef;
      jj_rerr(r, at, "%s index must be an integer, got %s", jj_type_name(obj), jj_type_name(key));
    }
    int64_t i = key->u.i;
    if (obj->t == V_LIST) {
      int64_t n = (int64_t)obj->u.l.n;
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj->u.l.a[i] : r->undef;
    }
    size_t cnt;
    size_t *off = jj_u8_offsets(r, obj->u.s.p, obj->u.s.n, &cnt);
    int64_t n = (int64_t)cnt;
    if (i < 0) i += n;
    return i >= 0 && i < n ? jj_mkstr(r, obj->u.s.p + off[i], off[i + 1] - off[i]) : r->undef;
  }
  return r->undef;
}

val *jj_do_slice(render *r, val *obj, val *vs, val *ve, val *vst, const node *at) {
  if (obj->t != V_LIST && obj->t != V_STR) {
    if (obj->t == V_UNDEF) return r->undef;
    jj_rerr(r, at, "cannot slice a %s", jj_type_name(obj));
  }
  size_t cnt;
  size_t *off = NULL;
  if (obj->t == V_STR) off = jj_u8_offsets(r, obj->u.s.p, obj->u.s.n, &cnt);
  else cnt = obj->u.l.n;
  int64_t n = (int64_t)cnt;
  int64_t step = (vst && vst->t != V_NONE) ? jj_need_int(r, vst, "slice step", at) : 1;
  if (step == 0) jj_rerr(r, at, "slice step cannot be zero");
  int64_t start, stop;
  int has_s = vs && vs->t != V_NONE, has_e = ve && ve->t != V_NONE;
  if (step > 0) {
    start = has_s ? jj_need_int(r, vs, "slice start", at) : 0;
    stop = has_e ? jj_need_int(r, ve, "slice stop", at) : n;
    if (start < 0) start = start + n < 0 ? 0 : start + n;
    if (stop < 0) stop = stop + n < 0 ? 0 : stop + n;
    if (start > n) start = n;
    if (stop > n) stop = n;
  } else {
    start = has_s ? jj_need_int(r, vs, "slice start", at) : n - 1;
    stop = has_e ? jj_need_int(r, ve, "slice stop", at) : -1 - n;
    if (start < 0) start = start + n < 0 ? -1 : start + n;
    if (start >= n) start = n - 1;
    if (stop < 0) stop = stop + n < -1 ? -1 : stop + n;
    if (stop >= n) stop = n - 1;
  }
  if (obj->t == V_LIST) {
    val *l = jj_mklist(r, 4);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jj_list_push(r, l, obj->u.l.a[i]);
    return l;
  }
  sbuf b = {0};
  jj_sb_put(r, &b, "", 0);
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    jj_sb_put(r, &b, obj->u.s.p + off[i], off[i + 1] - off[i]);
  return jj_sb_val(r, &b);
}

/* The items a for loop or filter iterates over. */
val *jj_iter_list(render *r, val *v, const node *at) {
  if (v->t == V_LIST) return v;
  if (v->t == V_UNDEF || v->t == V_NONE) {
    if (v->t == V_NONE) jj_rerr(r, at, "cannot iterate over none");
    return jj_mklist(r, 1);
  }
  if (v->t == V_DICT) {
    val *l = jj_mklist(r, v->u.d.n);
    for (size_t i = 0; i < v->u.d.n; i++) jj_list_push(r, l, jj_mkstr(r, v->u.d.k[i], v->u.d.kn[i]));
    return l;
  }
  if (v->t == V_STR) {
    val *l = jj_mklist(r, v->u.s.n);
    for (size_t i = 0; i < v->u.s.n;) {
      size_t j = i;
      jj_u8_next(v->u.s.p, v->u.s.n, &j);
      jj_list_push(r, l, jj_mkstr(r, v->u.s.p + i, j - i));
      i = j;
    }
    return l;
  }
  jj_rerr(r, at, "cannot iterate over a %s", jj_type_name(v));
}
/* ---------------------------------------------------------------------------------------- */
/* operators                                                                                */

static val *arith(render *r, int op, val *a, val *b, const node *at);

val *jj_binop(render *r, int op, val *a, val *b, const node *at) {
  switch (op) {
    case OP_EQ: return jj_mkbool(r, jj_val_eq(a, b));
    case OP_NE: return jj_mkbool(r, !jj_val_eq(a, b));
    case OP_CAT: {
      sbuf s = {0};
      jj_put_str(r, &s, a, at);
      jj_put_str(r, &s, b, at);
      return jj_sb_val(r, &s);
    }
    case OP_IN: case OP_NOTIN: {
      int in;
      if (b->t == V_UNDEF) in = 0;
      else if (b->t == V_LIST) {
        in = 0;
        for (size_t i = 0; i < b->u.l.n && !in; i++) in = jj_val_eq(a, b->u.l.a[i]);
      } else if (b->t == V_STR) {
        if (a->t != V_STR) jj_rerr(r, at, "'in <string>' needs a string on the left, got %s", jj_type_name(a));
        in = jj_memfind(b->u.s.p, b->u.s.n, a->u.s.p, a->u.s.n) != NULL;
      } else if (b->t == V_DICT || b->t == V_NS) {
        in = a->t == V_STR && jj_dict_slot(b, a->u.s.p, a->u.s.n) != NULL;
      } else {
        jj_rerr(r, at, "cannot test membership in a %s", jj_type_name(b));
      }
      return jj_mkbool(r, op == OP_IN ? in : !in);
    }
    case OP_LT: return jj_mkbool(r, jj_val_cmp(r, a, b, at) < 0);
    case OP_GT: return jj_mkbool(r, jj_val_cmp(r, a, b, at) > 0);
    case OP_LE: return jj_mkbool(r, jj_val_cmp(r, a, b, at) <= 0);
    case OP_GE: return jj_mkbool(r, jj_val_cmp(r, a, b, at) >= 0);
    default: break;
  }
  if (op == OP_ADD) {
    if (a->t == V_LIST && b->t == V_LIST) {
      val *l = jj_mklist(r, a->u.l.n + b->u.l.n);
      for (size_t i = 0; i < a->u.l.n; i++) jj_list_push(r, l, a->u.l.a[i]);
      for (size_t i = 0; i < b->u.l.n; i++) jj_list_push(r, l, b->u.l.a[i]);
      return l;
    }
    if (a->t == V_STR && b->t == V_STR) {
      sbuf s = {0};
      jj_sb_put(r, &s, a->u.s.p, a->u.s.n);
      jj_sb_put(r, &s, b->u.s.p, b->u.s.n);
      return jj_sb_val(r, &s);
    }
    if ((a->t == V_STR || b->t == V_STR) && a->t != V_NONE && b->t != V_NONE && a->t != V_UNDEF && b->t != V_UNDEF) {
      sbuf s = {0};
      jj_put_str(r, &s, a, at);
      jj_put_str(r, &s, b, at);
      return jj_sb_val(r, &s);
    }
  }
  if (op == OP_MUL && ((a->t == V_STR && b->t == V_INT) || (a->t == V_INT && b->t == V_STR))) {
    const val *s = a->t == V_STR ? a : b;
    int64_t k = a->t == V_INT ? a->u.i : b->u.i;
    if (k > 0 && s->u.s.n * (uint64_t)k > r->lim.max_output) jj_rerr(r, at, "string repetition too large");
    sbuf o = {0};
    jj_sb_put(r, &o, "", 0);
    for (int64_t i = 0; i < k; i++) jj_sb_put(r, &o, s->u.s.p, s->u.s.n);
    return jj_sb_val(r, &o);
  }
  return arith(r, op, a, b, at);
}

/* + - * / // % ** on numbers (booleans count as 0 / 1): integers stay integers where Python's do,
 * and overflow is an error. */
static val *arith(render *r, int op, val *a, val *b, const node *at) {
  static const char *opn[] = {"+", "-", "*", "/", "//", "%", "**"};
  if (!((jj_is_num(a) || a->t == V_BOOL) && (jj_is_num(b) || b->t == V_BOOL)))
    jj_rerr(r, at, "unsupported operand types for %s: %s and %s", op <= OP_POW ? opn[op] : "?", jj_type_name(a),
         jj_type_name(b));
  int fl = a->t == V_FLOAT || b->t == V_FLOAT;
  if (!fl && op != OP_DIV && op != OP_POW) {
    int64_t x = a->t == V_BOOL ? a->u.b : a->u.i, y = b->t == V_BOOL ? b->u.b : b->u.i, z;
    switch (op) {
      case OP_ADD: if (__builtin_add_overflow(x, y, &z)) break; return jj_mkint(r, z);
      case OP_SUB: if (__builtin_sub_overflow(x, y, &z)) break; return jj_mkint(r, z);
      case OP_MUL: if (__builtin_mul_overflow(x, y, &z)) break; return jj_mkint(r, z);
      case OP_FLOORDIV: case OP_MOD: {
        if (y == 0) jj_rerr(r, at, "division by zero");
        if (x == INT64_MIN && y == -1) break;
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q--;
          m += y;
        }
        return jj_mkint(r, op == OP_MOD ? m : q);
      }
      default: break;
    }
    jj_rerr(r, at, "integer overflow");
  }
  double x = jj_num_of(a), y = jj_num_of(b);
  switch (op) {
    case OP_ADD: return jj_mkfloat(r, x + y);
    case OP_SUB: return jj_mkfloat(r, x - y);
    case OP_MUL: return jj_mkfloat(r, x * y);
    case OP_DIV:
      if (y == 0) jj_rerr(r, at, "division by zero");
      return jj_mkfloat(r, x / y);
    case OP_FLOORDIV:
      if (y == 0) jj_rerr(r, at, "division by zero");
      return jj_mkfloat(r, floor(x / y));
    case OP_MOD:
      if (y == 0) jj_rerr(r, at, "division by zero");
      return jj_mkfloat(r, x - y * floor(x / y));
    case OP_POW: {
      double z = pow(x, y);
      if (!isfinite(z)) jj_rerr(r, at, "exponentiation result is not finite");
      if (!fl && y >= 0 && fabs(z) < JJ_INT_RANGE) return jj_mkint(r, (int64_t)z);
      return jj_mkfloat(r, z);
    }
  }
  jj_rerr(r, at, "bad operator");
}

/* ---------------------------------------------------------------------------------------- */
/* calls, expressions, statements                                                           */

static val *call_macro(render *r, val *m, const args *a, const node *at) {
  const node *def = m->u.m.def;
  scope *sc = jj_scope_new(r, m->u.m.sc);
  int npos = 0;
  for (int i = 0; i < a->n; i++)
    if (!a->names[i]) npos++;
  if (npos > def->nnames) jj_rerr(r, at, "macro '%s' takes %d arguments, got %d", def->s, def->nnames, npos);
  for (int i = 0; i < a->n; i++) {
    if (!a->names[i]) continue;
    int ok = 0;
    for (int k = 0; k < def->nnames; k++) ok |= !strcmp(def->names[k], a->names[i]);
    if (!ok) jj_rerr(r, at, "macro '%s' has no parameter '%s'", def->s, a->names[i]);
  }
  for (int k = 0; k < def->nnames; k++) {
    val *v = jj_arg_get(a, k, def->names[k]);
    if (!v) v = def->args.v[k] ? eval(r, sc, def->args.v[k]) : r->undef;
    jj_scope_set(r, sc, def->names[k], v);
  }
  sbuf out = {0};
  jj_sb_put(r, &out, "", 0);
  exec_body(r, sc, &def->body, &out);
  r->brk = r->cont = 0;
  return jj_sb_val(r, &out);
}

static val *call_value(render *r, scope *sc, const node *e) {
  const node *callee = e->a;
  args a = eval_args(r, sc, e);
  if (callee->kind == E_ATTR) {
    val *obj = eval(r, sc, callee->a);
    if (obj->t == V_DICT || obj->t == V_NS) {
      val **s = jj_dict_slot(obj, callee->s, callee->slen);
      if (s && (*s)->t == V_MACRO) return call_macro(r, *s, &a, e);
    }
    val *res = jj_call_method(r, obj, callee->s, &a, e);
    if (res) return res;
    jj_rerr(r, e, "%s has no method '%s'", jj_type_name(obj), callee->s);
  }
  val *f = eval(r, sc, callee);
  if (f->t == V_MACRO) return call_macro(r, f, &a, e);
  if (f->t != V_FUNC) {
    if (callee->kind == E_NAME) jj_rerr(r, e, "'%s' is %s, not a function", callee->s, f->t == V_UNDEF ? "undefined" : jj_type_name(f));
    jj_rerr(r, e, "a %s is not callable", jj_type_name(f));
  }
  switch (f->u.fn) {
    case F_RAISE: {
      val *m = jj_arg_get(&a, 0, NULL);
      sbuf b = {0};
      if (m) jj_put_str(r, &b, m, e);
      jj_rerr(r, e, "raise_exception: %s", b.p ? b.p : "");
    }
    case F_NAMESPACE: case F_DICT: {
      val *ns = jj_mkdict(r, f->u.fn == F_NAMESPACE ? V_NS : V_DICT);
      for (int i = 0; i < a.n; i++) {
        if (a.names[i]) {
          jj_dict_set_c(r, ns, a.names[i], a.v[i]);
        } else if (a.v[i]->t == V_DICT) {
          for (size_t k = 0; k < a.v[i]->u.d.n; k++) jj_dict_set(r, ns, a.v[i]->u.d.k[k], a.v[i]->u.d.kn[k], a.v[i]->u.d.v[k]);
        } else {
          jj_rerr(r, e, "namespace()/dict() positional argument must be a mapping");
        }
      }
      return ns;
    }
    case F_RANGE: {
      int64_t s = 0, st = 1, en;
      val *x = jj_arg_get(&a, 0, NULL), *y = jj_arg_get(&a, 1, NULL), *z = jj_arg_get(&a, 2, NULL);
      if (!x) jj_rerr(r, e, "range needs at least one argument");
      if (y) {
        s = jj_need_int(r, x, "range start", e);
        en = jj_need_int(r, y, "range stop", e);
      } else {
        en = jj_need_int(r, x, "range stop", e);
      }
      if (z) st = jj_need_int(r, z, "range step", e);
      if (st == 0) jj_rerr(r, e, "range step cannot be zero");
      val *l = jj_mklist(r, 8);
      for (int64_t i = s; st > 0 ? i < en : i > en; i += st) {
        if (l->u.l.n >= RANGE_MAX_ITEMS) jj_rerr(r, e, "range too large");
        jj_list_push(r, l, jj_mkint(r, i));
      }
      return l;
    }
  }
  jj_rerr(r, e, "bad function");
}

static val *eval(render *r, scope *sc, const node *e) {
  if (++r->depth > r->lim.max_depth) jj_rerr(r, e, "nesting deeper than %d", r->lim.max_depth);
  val *res;
  switch (e->kind) {
    case E_LIT: res = e->lit; break;
    case E_NAME: res = jj_scope_get(r, sc, e->s); break;
    case E_ATTR: {
      val *o = eval(r, sc, e->a);
      res = getattr(r, o, e->s, e->slen);
      break;
    }
    case E_INDEX: {
      val *o = eval(r, sc, e->a), *k = eval(r, sc, e->b);
      res = jj_getitem(r, o, k, e);
      break;
    }
    case E_SLICE: {
      val *o = eval(r, sc, e->a);
      val *s = e->b ? eval(r, sc, e->b) : NULL, *en = e->c ? eval(r, sc, e->c) : NULL;
      val *st = e->args.n ? eval(r, sc, e->args.v[0]) : NULL;
      res = jj_do_slice(r, o, s, en, st, e);
      break;
    }
    case E_CALL: res = call_value(r, sc, e); break;
    case E_FILTER: {
      val *v = eval(r, sc, e->a);
      args a = eval_args(r, sc, e);
      res = jj_apply_filter(r, e->s, v, &a, e);
      break;
    }
    case E_TEST: {
      val *v = eval(r, sc, e->a);
      args a = eval_args(r, sc, e);
      int t = jj_run_test(r, e->s, v, &a, e);
      res = jj_mkbool(r, e->op ? !t : t);
      break;
    }
    case E_NOT: res = jj_mkbool(r, !jj_truthy(eval(r, sc, e->a))); break;
    case E_NEG: case E_POS: {
      val *v = eval(r, sc, e->a);
      if (v->t == V_INT) res = e->kind == E_NEG ? (v->u.i == INT64_MIN ? jj_mkfloat(r, -(double)INT64_MIN) /* 2^63: -INT64_MIN overflows */ : jj_mkint(r, -v->u.i)) : v;
      else if (v->t == V_FLOAT) res = e->kind == E_NEG ? jj_mkfloat(r, -v->u.f) : v;
      else jj_rerr(r, e, "bad operand type for unary %c: %s", e->kind == E_NEG ? '-' : '+', jj_type_name(v));
      break;
    }
    case E_BIN: {
      val *a = eval(r, sc, e->a), *b = eval(r, sc, e->b);
      res = jj_binop(r, e->op, a, b, e);
      break;
    }
    case E_AND: {
      val *a = eval(r, sc, e->a);
      res = jj_truthy(a) ? eval(r, sc, e->b) : a;
      break;
    }
    case E_OR: {
      val *a = eval(r, sc, e->a);
      res = jj_truthy(a) ? a : eval(r, sc, e->b);
      break;
    }
    case E_COND:
      if (jj_truthy(eval(r, sc, e->a))) res = eval(r, sc, e->b);
      else res = e->c ? eval(r, sc, e->c) : r->undef;
      break;
    case E_LIST: case E_TUPLE: {
      res = jj_mklist(r, (size_t)e->args.n);
      for (int i = 0; i < e->args.n; i++) jj_list_push(r, res, eval(r, sc, e->args.v[i]));
      break;
    }
    case E_DICT: {
      res = jj_mkdict(r, V_DICT);
      for (int i = 0; i + 1 < e->args.n; i += 2) {
        val *k = eval(r, sc, e->args.v[i]);
        val *v = eval(r, sc, e->args.v[i + 1]);
        k = jj_to_str(r, k, e);
        jj_dict_set(r, res, k->u.s.p, k->u.s.n, v);
      }
      break;
    }
    default: jj_rerr(r, e, "internal: bad expression node");
  }
  r->depth--;
  return res;
}

static void emit(render *r, sbuf *out, const char *s, size_t n, const node *at) {
  if (out->n + n > r->lim.max_output) jj_rerr(r, at, "output larger than %zu bytes", r->lim.max_output);
  jj_sb_put(r, out, s, n);
}

static void assign_targets(render *r, scope *sc, const char **names, int nnames, val *v, const node *at) {
  if (nnames == 1) {
    jj_scope_set(r, sc, names[0], v);
    return;
  }
  val *l = jj_iter_list(r, v, at);
  if ((int)l->u.l.n != nnames)
    jj_rerr(r, at, "cannot unpack %zu values into %d names", l->u.l.n, nnames);
  for (int i = 0; i < nnames; i++) jj_scope_set(r, sc, names[i], l->u.l.a[i]);
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
        jj_put_str(r, &b, v, s);
        emit(r, out, b.p ? b.p : "", b.n, s);
      }
      break;
    }
    case N_IF: {
      if (jj_truthy(eval(r, sc, s->a))) exec_body(r, sc, &s->body, out);
      else exec_body(r, sc, &s->orelse, out);
      break;
    }
    case N_FOR: {
      val *items = jj_iter_list(r, eval(r, sc, s->a), s);
      scope *ls = jj_scope_new(r, sc);
      val *sel = items;
      if (s->b) { /* loop filter: evaluated with the loop variables bound */
        sel = jj_mklist(r, items->u.l.n);
        for (size_t i = 0; i < items->u.l.n; i++) {
          assign_targets(r, ls, s->names, s->nnames, items->u.l.a[i], s);
          if (jj_truthy(eval(r, ls, s->b))) jj_list_push(r, sel, items->u.l.a[i]);
        }
      }
      size_t n = sel->u.l.n;
      for (size_t i = 0; i < n; i++) {
        ls = jj_scope_new(r, sc);
        assign_targets(r, ls, s->names, s->nnames, sel->u.l.a[i], s);
        val *loop = jj_mkdict(r, V_DICT);
        jj_dict_set_c(r, loop, "index", jj_mkint(r, (int64_t)i + 1));
        jj_dict_set_c(r, loop, "index0", jj_mkint(r, (int64_t)i));
        jj_dict_set_c(r, loop, "revindex", jj_mkint(r, (int64_t)(n - i)));
        jj_dict_set_c(r, loop, "revindex0", jj_mkint(r, (int64_t)(n - i - 1)));
        jj_dict_set_c(r, loop, "first", jj_mkbool(r, i == 0));
        jj_dict_set_c(r, loop, "last", jj_mkbool(r, i == n - 1));
        jj_dict_set_c(r, loop, "length", jj_mkint(r, (int64_t)n));
        jj_dict_set_c(r, loop, "previtem", i > 0 ? sel->u.l.a[i - 1] : r->undef);
        jj_dict_set_c(r, loop, "nextitem", i + 1 < n ? sel->u.l.a[i + 1] : r->undef);
        jj_scope_set(r, ls, "loop", loop);
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
        val *ns = jj_scope_get(r, sc, s->s);
        if (ns->t != V_NS && ns->t != V_DICT)
          jj_rerr(r, s, "cannot set attribute '%s' on '%s' (a %s; use namespace())", s->s2, s->s, jj_type_name(ns));
        jj_dict_set_c(r, ns, s->s2, v);
      } else {
        assign_targets(r, sc, s->names, s->nnames, v, s);
      }
      break;
    }
    case N_SETBLOCK: {
      sbuf b = {0};
      jj_sb_put(r, &b, "", 0);
      exec_body(r, sc, &s->body, &b);
      jj_scope_set(r, sc, s->names[0], jj_sb_val(r, &b));
      break;
    }
    case N_MACRO: {
      val *m = jj_mkval(r, V_MACRO);
      m->u.m.def = s;
      m->u.m.sc = sc;
      jj_scope_set(r, sc, s->s, m);
      break;
    }
    case N_BREAK: r->brk = 1; break;
    case N_CONTINUE: r->cont = 1; break;
    default: jj_rerr(r, s, "internal: bad statement node");
  }
}

static void exec_body(render *r, scope *sc, const nlist *body, sbuf *out) {
  if (++r->depth > r->lim.max_depth) jj_rerr(r, body->n ? body->v[0] : NULL, "nesting deeper than %d", r->lim.max_depth);
  for (int i = 0; i < body->n && !r->brk && !r->cont; i++) exec_stmt(r, sc, body->v[i], out);
  r->depth--;
}
/* ---------------------------------------------------------------------------------------- */
/* entry points                                                                             */

static char *render_run(render *r, const jinja_template *t, const json_t *vars, size_t *out_len) {
  char *result = NULL;
  if (setjmp(r->jb)) return NULL;
  {
    r->undef = jj_mkval(r, V_UNDEF);
    r->none = jj_mkval(r, V_NONE);
    r->vtrue = jj_mkval(r, V_BOOL);
    r->vtrue->u.b = 1;
    r->vfalse = jj_mkval(r, V_BOOL);
    scope *g = jj_scope_new(r, NULL);
    static const struct { const char *name; int fn; } fns[] = {
        {"namespace", F_NAMESPACE}, {"raise_exception", F_RAISE}, {"range", F_RANGE}, {"dict", F_DICT}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
      val *f = jj_mkval(r, V_FUNC);
      f->u.fn = fns[i].fn;
      jj_scope_set(r, g, fns[i].name, f);
    }
    if (vars && json_is_object(vars)) {
      scope *u = jj_scope_new(r, g);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)vars, k, v) jj_scope_set(r, u, jj_rstrdup(r, k), jj_from_json(r, v, 0));
      g = u;
    }
    scope *top = jj_scope_new(r, g);
    sbuf out = {0};
    jj_sb_put(r, &out, "", 0);
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
  jinja_limits l = {JINJA_DEFAULT_MAX_OUTPUT, JINJA_DEFAULT_MAX_MEMORY, JINJA_DEFAULT_MAX_DEPTH};
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
  if (r->lim.max_depth <= 0) r->lim.max_depth = JINJA_DEFAULT_MAX_DEPTH;
  if (!r->lim.max_output) r->lim.max_output = JINJA_DEFAULT_MAX_OUTPUT;
  if (!r->lim.max_memory) r->lim.max_memory = JINJA_DEFAULT_MAX_MEMORY;
  r->ar.limit = r->lim.max_memory;
  char *result = render_run(r, t, vars, out_len);
  jj_arena_free(&r->ar);
  free(r);
  return result;
}
