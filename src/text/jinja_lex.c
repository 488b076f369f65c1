/*
 * jinja_lex.c - the first two stages of the Jinja interpreter: the preprocess text rewrites
 * (trim_blocks / lstrip_blocks, with a map back to source offsets) and the lexer, which cuts
 * the text into text runs and tag tokens following the reference's whitespace-control rules
 * (see jinja.h). Syntax errors (jj_perr) name the original line and column.
 */
#include "text/jinja_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#define PERR_MSG_MAX 400  /* bytes of a syntax error's message after the position */
#define INT64_DIGITS 19   /* decimal digits of INT64_MAX: a longer literal is too large */
#define TOKENS_INITIAL 256

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

__attribute__((noreturn, format(printf, 3, 4))) void jj_perr(parser *p, size_t pos, const char *fmt, ...) {
  char msg[PERR_MSG_MAX];
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

void *jj_palloc(parser *p, size_t n) {
  void *r = jj_arena_alloc(p->ar, n);
  if (!r) {
    q35_seterr(p->err, "template too large (out of memory while parsing)");
    longjmp(p->jb, 1);
  }
  memset(r, 0, n);
  return r;
}

/* ---------------------------------------------------------------------------------------- */
/* preprocess                                                                               */

char *jj_preprocess(const char *src, size_t n, size_t **map_out, size_t *n_out) {
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
/* lexer                                                                                    */

static tok *push_tok(parser *p, int type, size_t pos) {
  if (p->nt == p->ct) {
    size_t nc = p->ct ? p->ct * 2 : TOKENS_INITIAL;
    tok *t = jj_palloc(p, nc * sizeof *t);
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
    while (t->n && jj_is_ws((unsigned char)t->s[t->n - 1])) t->n--;
    if (!t->n) p->nt--;
  }
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The escape after a backslash at s[i - 1] in a string literal, appended to buf[*bn]; returns
 * the offset after it. */
static size_t lex_escape(parser *p, size_t i, char *buf, size_t *bn) {
  const char *s = p->src;
  size_t n = p->n;
  char e = s[i++];
  switch (e) {
    case 'n': buf[(*bn)++] = '\n'; break;
    case 't': buf[(*bn)++] = '\t'; break;
    case 'r': buf[(*bn)++] = '\r'; break;
    case 'b': buf[(*bn)++] = '\b'; break;
    case 'f': buf[(*bn)++] = '\f'; break;
    case 'v': buf[(*bn)++] = '\v'; break;
    case '0': buf[(*bn)++] = '\0'; break;
    case '\\': case '\'': case '"': buf[(*bn)++] = e; break;
    case 'x': case 'u': {
      int len = e == 'x' ? 2 : 4;
      uint32_t cp = 0;
      for (int k = 0; k < len; k++) {
        int h = i + (size_t)k < n ? hexval((unsigned char)s[i + (size_t)k]) : -1;
        if (h < 0) jj_perr(p, i - 2, "invalid \\%c escape in string literal", e);
        cp = cp * 16 + (uint32_t)h;
      }
      i += (size_t)len;
      utf8proc_uint8_t u8[4];
      utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, u8);
      if (k <= 0) jj_perr(p, i - 2, "invalid code point in string literal");
      memcpy(buf + *bn, u8, (size_t)k);
      *bn += (size_t)k;
      break;
    }
    default: jj_perr(p, i - 2, "unknown escape '\\%c' in string literal", e);
  }
  return i;
}

/* A string literal whose opening quote is at s[i]: a TK_STR token with the unescaped text.
 * Returns the offset after the closing quote. */
static size_t lex_string(parser *p, size_t i) {
  const char *s = p->src;
  size_t n = p->n;
  unsigned char c = (unsigned char)s[i];
  size_t start = i++;
  size_t end = i; /* find the closing quote first: the unescaped text is no longer */
  while (end < n && (unsigned char)s[end] != c) end += s[end] == '\\' ? 2 : 1;
  char *buf = jj_palloc(p, (end < n ? end : n) - i + 8);
  size_t bn = 0;
  for (;;) {
    if (i >= n) jj_perr(p, start, "unterminated string literal");
    if ((unsigned char)s[i] == c) break;
    if (s[i] == '\\') {
      if (++i >= n) jj_perr(p, start, "unterminated string literal");
      i = lex_escape(p, i, buf, &bn);
      continue;
    }
    buf[bn++] = s[i++];
  }
  tok *t = push_tok(p, TK_STR, start);
  t->s = buf;
  t->n = bn;
  return i + 1;
}

/* An integer or float literal at s[i]; returns the offset after it. */
static size_t lex_number(parser *p, size_t i) {
  const char *s = p->src;
  size_t n = p->n, start = i;
  while (i < n && isdigit((unsigned char)s[i])) i++;
  int isf = 0;
  /* after a '.', "x.0.1" is two item accesses, not x[0.1] */
  if (!(p->nt && p->t[p->nt - 1].type == TK_OP && p->t[p->nt - 1].op[0] == '.' && !p->t[p->nt - 1].op[1]) &&
      i + 1 < n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
    isf = 1;
    i++;
    while (i < n && isdigit((unsigned char)s[i])) i++;
  }
  char num[64];
  size_t len = i - start < sizeof num - 1 ? i - start : sizeof num - 1;
  memcpy(num, s + start, len);
  num[len] = 0;
  tok *t = push_tok(p, isf ? TK_FLOAT : TK_INT, start);
  if (isf) {
    t->f = strtod(num, NULL);
  } else {
    errno = 0;
    unsigned long long v = strtoull(num, NULL, 10);
    if (i - start > INT64_DIGITS || errno == ERANGE || v > INT64_MAX) jj_perr(p, start, "integer literal too large");
    t->i = (int64_t)v;
  }
  return i;
}

/* An operator at s[i] (the longest match); returns the offset after it. `curly` counts the
 * open '{' of dict literals, so that "}}" inside one does not close the expression. */
static size_t lex_op(parser *p, size_t i, int *curly) {
  static const char *ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "<", ">", "=",
                              "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "~", NULL};
  const char *s = p->src;
  size_t n = p->n;
  for (int k = 0; ops[k]; k++) {
    size_t l = strlen(ops[k]);
    if (i + l <= n && !memcmp(s + i, ops[k], l)) {
      tok *t = push_tok(p, TK_OP, i);
      memcpy(t->op, ops[k], l);
      if (!strcmp(ops[k], "{")) (*curly)++;
      if (!strcmp(ops[k], "}")) (*curly)--;
      return i + l;
    }
  }
  unsigned char c = (unsigned char)s[i];
  if (c >= 0x20 && c < 0x7f) jj_perr(p, i, "unexpected character '%c'", c);
  jj_perr(p, i, "unexpected byte 0x%02x", c);
}

/* A comment "{# ... #}" at s[i]: a TK_COMMENT token (with the whitespace control of "{#-" and
 * "-#}"). Returns the offset after it. */
static size_t lex_comment(parser *p, size_t i) {
  const char *s = p->src;
  size_t n = p->n, start = i;
  i += 2;
  int strip_before = i < n && s[i] == '-';
  size_t j = i;
  while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
  if (j + 1 >= n) jj_perr(p, start, "missing end of comment tag '#}'");
  int strip_after = j > i && s[j - 1] == '-';
  if (strip_before) strip_prev_text(p);
  push_tok(p, TK_COMMENT, start);
  i = j + 2;
  if (strip_after)
    while (i < n && jj_is_ws((unsigned char)s[i])) i++;
  return i;
}

/* A tag delimiter at s[*i] after whitespace ("-%}", "-}}", "{%", "{{", "%}", "}}"): pushes its
 * token, advances *i and returns 1; 0 when there is none. */
static int lex_delim(parser *p, size_t *i, int *curly) {
  const char *s = p->src;
  size_t n = p->n, k = *i;
  if (k + 2 < n && s[k] == '-' && (s[k + 1] == '%' || s[k + 1] == '}') && s[k + 2] == '}') {
    push_tok(p, s[k + 1] == '%' ? TK_CLOSE_STMT : TK_CLOSE_EXPR, k);
    k += 3;
    while (k < n && jj_is_ws((unsigned char)s[k])) k++;
  } else if (k + 1 < n && s[k] == '{' && s[k + 1] == '%') {
    push_tok(p, TK_OPEN_STMT, k);
    k += 2;
  } else if (k + 1 < n && s[k] == '{' && s[k + 1] == '{') {
    push_tok(p, TK_OPEN_EXPR, k);
    *curly = 0;
    k += 2;
  } else if (k + 1 < n && s[k] == '%' && s[k + 1] == '}') {
    push_tok(p, TK_CLOSE_STMT, k);
    k += 2;
  } else if (k + 1 < n && s[k] == '}' && s[k + 1] == '}' && *curly <= 0) {
    push_tok(p, TK_CLOSE_EXPR, k);
    k += 2;
  } else {
    return 0;
  }
  *i = k;
  return 1;
}

void jj_lex(parser *p) {
  const char *s = p->src;
  size_t n = p->n, i = 0;
  int curly = 0;
  while (i < n) {
    int last = p->nt ? p->t[p->nt - 1].type : -1;
    if (last == -1 || last == TK_CLOSE_STMT || last == TK_CLOSE_EXPR || last == TK_COMMENT) {
      /* text runs up to the next "{%", "{{" or "{#" */
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
      i = lex_comment(p, i);
      continue;
    }
    if (i + 2 < n && s[i] == '{' && (s[i + 1] == '%' || s[i + 1] == '{') && s[i + 2] == '-') {
      strip_prev_text(p); /* "{%-" / "{{-" */
      push_tok(p, s[i + 1] == '%' ? TK_OPEN_STMT : TK_OPEN_EXPR, i);
      if (s[i + 1] == '{') curly = 0;
      i += 3;
      continue;
    }
    while (i < n && jj_is_ws((unsigned char)s[i])) i++;
    if (i >= n) break;
    if (lex_delim(p, &i, &curly)) continue;
    unsigned char c = (unsigned char)s[i];
    if (c == '\'' || c == '"') {
      i = lex_string(p, i);
    } else if (isdigit(c)) {
      i = lex_number(p, i);
    } else if (isalpha(c) || c == '_') {
      size_t start = i;
      while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
      tok *t = push_tok(p, TK_NAME, start);
      t->s = s + start;
      t->n = i - start;
    } else {
      i = lex_op(p, i, &curly);
    }
  }
  push_tok(p, TK_EOF, n);
}
