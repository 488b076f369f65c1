/*
 * tokenizer_decode.c - ids to text: q35_detokenize, the lossy UTF-8 conversion (U+FFFD for each
 * maximal invalid subpart, as Rust's from_utf8_lossy) and the streaming decoder, which holds
 * back an incomplete character until the next token completes it.
 */
#include "text/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"

/* Appends the lossy conversion of s[0..n) to b. When final is 0, a trailing incomplete but
 * valid prefix is not converted; *used tells how many bytes were consumed. */
static int lossy_append(q35_buf *b, const char *s, size_t n, int final, size_t *used) {
  static const char FFFD[3] = {(char)0xef, (char)0xbf, (char)0xbd};
  const uint8_t *u = (const uint8_t *)s;
  size_t i = 0, run = 0; /* run: start of the pending valid stretch */
  while (i < n) {
    if (u[i] < 0x80) { i++; continue; }
    int bad = 0, l = tok_utf8_seq(u + i, n - i, &bad);
    if (l > 0) { i += (size_t)l; continue; }
    if (q35_buf_add(b, s + run, i - run)) return -1;
    if (l < 0) {
      if (!final) { *used = i; return 0; }
      bad = -l;
    }
    if (q35_buf_add(b, FFFD, 3)) return -1;
    i += (size_t)bad;
    run = i;
  }
  if (q35_buf_add(b, s + run, n - run)) return -1;
  *used = n;
  return 0;
}

char *q35_utf8_lossy(const char *s, size_t len, size_t *out_len) {
  q35_buf b = {0};
  size_t used;
  if (q35_buf_add(&b, "", 0) || lossy_append(&b, s, len, 1, &used)) {
    free(b.p);
    return NULL;
  }
  if (out_len) *out_len = b.n;
  return b.p;
}

/* ---- decoding ------------------------------------------------------------------------------- */

int q35_detokenize(const q35_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
                   size_t *len, q35_err *err) {
  q35_buf b = {0};
  *out = NULL;
  if (q35_buf_add(&b, "", 0)) goto oom;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_vocab) {
      free(b.p);
      return q35_seterr(err, "detokenize: token id %d at position %zu is outside the vocabulary "
                        "[0, %d)", id, i, t->n_vocab);
    }
    if ((flags & Q35_DETOK_SKIP_SPECIAL) && (t->flags[id] & TOKF_SPECIAL)) continue;
    if (q35_buf_add(&b, t->bytes + t->bytes_off[id], t->bytes_off[id + 1] - t->bytes_off[id])) goto oom;
  }
  if (flags & Q35_DETOK_LOSSY) {
    size_t l;
    char *x = q35_utf8_lossy(b.p, b.n, &l);
    free(b.p);
    if (!x) goto oom;
    b.p = x;
    b.n = l;
  }
  *out = b.p;
  if (len) *len = b.n;
  return 0;
oom:
  free(b.p);
  return q35_seterr(err, "detokenize: out of memory");
}

struct q35_detok {
  const q35_tokenizer *t;
  int flags;
  char pend[8];
  size_t npend;
  q35_buf in, out;
};

q35_detok *q35_detok_new(const q35_tokenizer *t, int flags) {
  q35_detok *d = calloc(1, sizeof *d);
  if (d) {
    d->t = t;
    d->flags = flags;
  }
  return d;
}

void q35_detok_reset(q35_detok *d) { d->npend = 0; }

void q35_detok_free(q35_detok *d) {
  if (!d) return;
  free(d->in.p);
  free(d->out.p);
  free(d);
}

static int detok_emit(q35_detok *d, const char *s, size_t n, int final, const char **out, size_t *len) {
  size_t used;
  d->in.n = 0;
  d->out.n = 0;
  if (q35_buf_add(&d->in, d->pend, d->npend) || q35_buf_add(&d->in, s, n) || q35_buf_add(&d->out, "", 0)) return -1;
  if (lossy_append(&d->out, d->in.p, d->in.n, final, &used)) return -1;
  d->npend = d->in.n - used; /* at most 3: a valid prefix of one character */
  memcpy(d->pend, d->in.p + used, d->npend);
  *out = d->out.p;
  *len = d->out.n;
  return 0;
}

int q35_detok_feed(q35_detok *d, int32_t id, const char **out, size_t *len, q35_err *err) {
  const q35_tokenizer *t = d->t;
  *out = "";
  *len = 0;
  if (id < 0 || id >= t->n_vocab)
    return q35_seterr(err, "detokenize: token id %d is outside the vocabulary [0, %d)", id, t->n_vocab);
  if ((d->flags & Q35_DETOK_SKIP_SPECIAL) && (t->flags[id] & TOKF_SPECIAL)) return 0;
  if (detok_emit(d, t->bytes + t->bytes_off[id], t->bytes_off[id + 1] - t->bytes_off[id], 0, out, len))
    return q35_seterr(err, "detokenize: out of memory");
  return 0;
}

void q35_detok_flush(q35_detok *d, const char **out, size_t *len) {
  *out = "";
  *len = 0;
  if (d->npend && detok_emit(d, "", 0, 1, out, len)) {
    /* out of memory: emit the replacement character from static storage */
    *out = "\xef\xbf\xbd";
    *len = 3;
  }
  d->npend = 0;
}
