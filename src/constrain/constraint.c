/*
 * constraint.c - the public constraint API (include/q35.h): vocabularies, compilation of each
 * kind to the one grammar form, token acceptance with rollback, and masks with a per-state
 * cache.
 *
 * A constraint keeps the state after each accepted token (hist[0] is the start), so rolling
 * back n tokens is dropping n entries: the matcher's states are interned and immutable. The
 * compiled grammar and its GBNF text are shared by clones (reference counted); the matcher's
 * store, the history and the mask cache belong to one constraint.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "constrain/constrain.h"
#include "constrain/grammar.h"
#include "model/model.h"
#include "text/tokenizer.h"

#define FINISHED (-10)   /* the history entry after an end-of-generation token */
#define WAITING (-11)    /* the history entry while waiting for the trigger token */
#define MAX_SLOTS 256    /* masks cached per constraint */

struct q35_constraint_vocab {
  cn_vocab *v;
};

typedef struct {
  atomic_int refs;
  cn_grammar *g;
  char *gbnf;
} shared_grammar;

struct q35_constraint {
  shared_grammar *sh;
  int32_t trigger;      /* the trigger token, or -1 */
  int32_t lazy_start;   /* the lazy grammar's start state (after the trigger) */
  const cn_vocab *v;
  cn_matcher *m;
  int32_t *hist;
  size_t n_hist, cap_hist;
  int32_t *slot;        /* per state: its cached mask's slot, or -1 */
  size_t cap_slot;
  uint32_t *masks;      /* MAX_SLOTS masks of `words` words, made on demand */
  int32_t n_slots, words;
};

/* ---- vocabularies ---- */

q35_constraint_vocab *q35_constraint_vocab_from_tok(const q35_tokenizer *t, int32_t n, q35_err *err) {
  const char **bytes = calloc((size_t)n, sizeof *bytes);
  size_t *lens = calloc((size_t)n, sizeof *lens);
  uint8_t *kind = calloc((size_t)n, 1);
  q35_constraint_vocab *cv = calloc(1, sizeof *cv);
  if (!bytes || !lens || !kind || !cv) {
    q35_seterr(err, "constraint: out of memory");
    goto done;
  }
  const int32_t nt = q35_tokenizer_n_vocab(t);
  for (int32_t i = 0; i < n; i++) {
    bytes[i] = "";
    kind[i] = 2;
    if (i >= nt) continue; /* padding past the tokenizer */
    const int type = q35_token_type(t, i);
    size_t len = 0;
    const char *b = q35_token_bytes(t, i, &len);
    if (q35_tokenizer_is_eog(t, i)) kind[i] = 1;
    else if (type == Q35_TOKEN_CONTROL || type == Q35_TOKEN_UNUSED || type == Q35_TOKEN_UNKNOWN || !b) kind[i] = 2;
    else {
      kind[i] = 0;
      bytes[i] = b;
      lens[i] = len;
    }
  }
  cv->v = cn_vocab_new(n, bytes, lens, kind, err);
  if (!cv->v) {
    free(cv);
    cv = NULL;
  }
done:
  if (!cv || !cv->v) cv = NULL;
  free(bytes);
  free(lens);
  free(kind);
  return cv;
}

q35_constraint_vocab *q35_constraint_vocab_from_model(const q35_model *model, q35_err *err) {
  q35_tokenizer *t = q35_tokenizer_from_gguf(model->gguf, err);
  if (!t) return NULL;
  q35_constraint_vocab *v = q35_constraint_vocab_from_tok(t, model->hp.n_vocab, err);
  q35_tokenizer_free(t);
  return v;
}

q35_constraint_vocab *q35_constraint_vocab_from_tokenizer(const char *path, q35_err *err) {
  q35_tokenizer *t = q35_tokenizer_from_json(path, NULL, err);
  if (!t) return NULL;
  q35_constraint_vocab *v = q35_constraint_vocab_from_tok(t, q35_tokenizer_n_vocab(t), err);
  q35_tokenizer_free(t);
  return v;
}

q35_constraint_vocab *q35_constraint_vocab_from_bytes(int32_t n, const char *const *bytes, const size_t *lens,
                                                      const uint8_t *kind, q35_err *err) {
  q35_constraint_vocab *cv = calloc(1, sizeof *cv);
  if (!cv) {
    q35_seterr(err, "constraint: out of memory");
    return NULL;
  }
  if (!(cv->v = cn_vocab_new(n, bytes, lens, kind, err))) {
    free(cv);
    return NULL;
  }
  return cv;
}

void q35_constraint_vocab_free(q35_constraint_vocab *v) {
  if (!v) return;
  cn_vocab_free(v->v);
  free(v);
}

int32_t q35_constraint_vocab_n(const q35_constraint_vocab *v) { return cn_vocab_n(v->v); }

/* ---- constraints ---- */

static void shared_release(shared_grammar *sh) {
  if (!sh || atomic_fetch_sub(&sh->refs, 1) != 1) return;
  cn_grammar_free(sh->g);
  free(sh->gbnf);
  free(sh);
}

static char *to_gbnf(q35_constraint_kind kind, const char *text, size_t len, int ws_max, q35_err *err) {
  char *out = NULL;
  if (kind == Q35_CONSTRAINT_GBNF) {
    out = q35_strndup(text, len);
    if (!out) q35_seterr(err, "constraint: out of memory");
    return out;
  }
  if (kind == Q35_CONSTRAINT_JSON_SCHEMA || kind == Q35_CONSTRAINT_JSON_OBJECT)
    return cn_schema_to_gbnf(text, len, kind == Q35_CONSTRAINT_JSON_OBJECT, ws_max, &out, err) ? NULL : out;
  if (kind == Q35_CONSTRAINT_REGEX) {
    char *expr;
    if (cn_regex_to_gbnf(text, len, 0, &expr, err)) return NULL;
    q35_buf b = {0};
    q35_buf_printf(&b, "root ::= %s\n", expr);
    free(expr);
    if (b.oom) {
      q35_buf_free(&b);
      q35_seterr(err, "constraint: out of memory");
      return NULL;
    }
    return q35_buf_take(&b, NULL);
  }
  q35_seterr(err, "constraint: unknown kind %d", (int)kind);
  return NULL;
}

q35_constraint *q35_constraint_new(const q35_constraint_vocab *v, q35_constraint_kind kind, const char *text,
                                   size_t len, const q35_constraint_params *params, q35_err *err) {
  const int ws_max = params ? params->ws_max : 0;
  if (!v) {
    q35_seterr(err, "constraint: no vocabulary");
    return NULL;
  }
  if (ws_max < 0 || ws_max > 64) {
    q35_seterr(err, "constraint: ws_max %d is out of range [0, 64]", ws_max);
    return NULL;
  }
  if (!text && kind != Q35_CONSTRAINT_JSON_OBJECT) {
    q35_seterr(err, "constraint: no text to compile");
    return NULL;
  }
  shared_grammar *sh = calloc(1, sizeof *sh);
  q35_constraint *c = calloc(1, sizeof *c);
  if (!sh || !c) {
    free(sh);
    free(c);
    q35_seterr(err, "constraint: out of memory");
    return NULL;
  }
  atomic_init(&sh->refs, 1);
  c->sh = sh;
  c->v = v->v;
  c->words = (cn_vocab_n(v->v) + 31) / 32;
  if (!(sh->gbnf = to_gbnf(kind, text ? text : "", text ? len : 0, ws_max, err)) ||
      !(sh->g = cn_gbnf_compile(sh->gbnf, strlen(sh->gbnf), err)) || !(c->m = cn_matcher_new(sh->g, err)) ||
      q35_grow((void **)&c->hist, &c->cap_hist, 1, sizeof *c->hist)) {
    if (c->m && !c->hist) q35_seterr(err, "constraint: out of memory");
    q35_constraint_free(c);
    return NULL;
  }
  c->hist[0] = cn_start(c->m);
  c->n_hist = 1;
  c->trigger = -1;
  return c;
}

int q35_constraint_set_trigger(q35_constraint *c, int32_t token, int32_t ws_max, q35_err *err) {
  if (c->n_hist != 1 || c->trigger >= 0) return q35_seterr(err, "constraint: a trigger is set before any token and once");
  if (token < 0 || token >= cn_vocab_n(c->v))
    return q35_seterr(err, "constraint: trigger token %d is out of range [0, %d)", token, cn_vocab_n(c->v));
  if (ws_max < 0 || ws_max > 64) return q35_seterr(err, "constraint: ws_max %d is out of range [0, 64]", ws_max);
  /* the language after the trigger: whitespace, then root (a grammar of its own) */
  q35_buf b = {0};
  q35_buf_printf(&b, "%s\nq35-lazy-root ::= [ \\t\\r\\n]{0,%d} root\n", c->sh->gbnf, ws_max);
  shared_grammar *sh = calloc(1, sizeof *sh);
  cn_matcher *m = NULL;
  if (!sh || b.oom) goto oom;
  atomic_init(&sh->refs, 1);
  sh->gbnf = q35_buf_take(&b, NULL);
  if (!(sh->g = cn_gbnf_compile_root(sh->gbnf, strlen(sh->gbnf), "q35-lazy-root", err)) || !(m = cn_matcher_new(sh->g, err))) {
    shared_release(sh);
    return -1;
  }
  shared_release(c->sh);
  cn_matcher_free(c->m);
  c->sh = sh;
  c->m = m;
  c->lazy_start = cn_start(m);
  c->trigger = token;
  c->hist[0] = WAITING;
  free(c->slot); /* states of the old matcher */
  c->slot = NULL;
  c->cap_slot = 0;
  c->n_slots = 0;
  return 0;
oom:
  q35_buf_free(&b);
  free(sh);
  return q35_seterr(err, "constraint: out of memory");
}

int q35_constraint_is_waiting(const q35_constraint *c) { return c->hist[c->n_hist - 1] == WAITING; }

q35_constraint *q35_constraint_clone(const q35_constraint *c) {
  q35_constraint *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->sh = c->sh;
  d->trigger = c->trigger;
  d->lazy_start = c->lazy_start;
  atomic_fetch_add(&c->sh->refs, 1);
  d->v = c->v;
  d->words = c->words;
  d->m = cn_matcher_clone(c->m);
  d->hist = malloc(c->cap_hist * sizeof *d->hist);
  if (!d->m || !d->hist) {
    q35_constraint_free(d);
    return NULL;
  }
  memcpy(d->hist, c->hist, c->n_hist * sizeof *d->hist);
  d->n_hist = c->n_hist;
  d->cap_hist = c->cap_hist;
  return d; /* the mask cache starts empty */
}

void q35_constraint_free(q35_constraint *c) {
  if (!c) return;
  shared_release(c->sh);
  cn_matcher_free(c->m);
  free(c->hist);
  free(c->slot);
  free(c->masks);
  free(c);
}

static int32_t cur(const q35_constraint *c) { return c->hist[c->n_hist - 1]; }

/* The state after token t from state s (FINISHED after an end-of-generation token), CN_DEAD
 * when refused, CN_OOM when out of memory. */
static int32_t after_token(q35_constraint *c, int32_t s, int32_t t) {
  const int kind = cn_vocab_kind(c->v, t);
  if (s == WAITING) return t == c->trigger ? c->lazy_start : kind == 1 ? FINISHED : WAITING;
  if (s == FINISHED) return CN_DEAD;
  if (kind == 1) return cn_complete(c->m, s) ? FINISHED : CN_DEAD;
  if (kind != 0) return CN_DEAD;
  size_t len;
  const char *b = cn_vocab_bytes(c->v, t, &len);
  for (size_t i = 0; i < len && s >= 0; i++) s = cn_step(c->m, s, (uint8_t)b[i]);
  return s;
}

int q35_constraint_accept(q35_constraint *c, int32_t t, q35_err *err) {
  if (t < 0 || t >= cn_vocab_n(c->v)) return q35_seterr(err, "constraint: token %d is out of range [0, %d)", t, cn_vocab_n(c->v));
  const int32_t s = after_token(c, cur(c), t);
  if (s == CN_OOM) return q35_seterr(err, "constraint: out of memory");
  if (s == CN_DEAD) return q35_seterr(err, "constraint: token %d is not allowed here (after %zu tokens)", t, c->n_hist - 1);
  if (q35_grow((void **)&c->hist, &c->cap_hist, c->n_hist + 1, sizeof *c->hist))
    return q35_seterr(err, "constraint: out of memory");
  c->hist[c->n_hist++] = s;
  return 0;
}

int q35_constraint_allows(q35_constraint *c, int32_t t) {
  if (t < 0 || t >= cn_vocab_n(c->v)) return 0;
  const int32_t s = after_token(c, cur(c), t);
  return s >= 0 || s == FINISHED || s == WAITING;
}

int q35_constraint_is_complete(const q35_constraint *c) {
  return cur(c) == FINISHED || cur(c) == WAITING || cn_complete(c->m, cur(c));
}
int q35_constraint_is_finished(const q35_constraint *c) { return cur(c) == FINISHED; }
int32_t q35_constraint_n_tokens(const q35_constraint *c) { return (int32_t)c->n_hist - 1; }

int q35_constraint_rollback(q35_constraint *c, int32_t n, q35_err *err) {
  if (n < 0 || (size_t)n >= c->n_hist)
    return q35_seterr(err, "constraint: cannot roll back %d tokens (%zu accepted)", n, c->n_hist - 1);
  c->n_hist -= (size_t)n;
  return 0;
}

size_t q35_constraint_prefix(q35_constraint *c, const char *text, size_t len) {
  int32_t s = cur(c);
  if (s == WAITING) return len;
  if (s < 0) return 0;
  size_t i = 0;
  for (; i < len; i++) {
    s = cn_step(c->m, s, (uint8_t)text[i]);
    if (s < 0) break;
  }
  return i;
}

const char *q35_constraint_grammar(const q35_constraint *c) { return c->sh->gbnf; }

/* The cache slot of state s's mask (made when missing, the cache emptied when full); NULL when
 * out of memory. *fresh is set when the slot is new (its contents are for the caller). */
static uint32_t *slot_for(q35_constraint *c, int32_t s, int *fresh) {
  const size_t bytes = (size_t)c->words * sizeof(uint32_t);
  *fresh = 0;
  if (!c->masks && !(c->masks = malloc(bytes * (MAX_SLOTS + 2)))) return NULL;
  const size_t n_states = (size_t)cn_n_states(c->m);
  if (c->cap_slot < n_states) {
    size_t old = c->cap_slot;
    if (q35_grow((void **)&c->slot, &c->cap_slot, n_states + 64, sizeof *c->slot)) return NULL;
    for (size_t i = old; i < c->cap_slot; i++) c->slot[i] = -1;
  }
  if (c->slot[s] >= 0) return c->masks + (size_t)c->slot[s] * (size_t)c->words;
  if (c->n_slots == MAX_SLOTS) {
    for (size_t i = 0; i < c->cap_slot; i++) c->slot[i] = -1;
    c->n_slots = 0;
  }
  *fresh = 1;
  c->slot[s] = c->n_slots++;
  return c->masks + (size_t)c->slot[s] * (size_t)c->words;
}

/* The mask of state s, from the cache or computed into it; NULL when out of memory. A counter
 * state (cn_canon) takes its canonical state's mask for the short tokens and walks the long
 * ones itself. */
static const uint32_t *state_mask(q35_constraint *c, int32_t s) {
  const size_t words = (size_t)c->words;
  if (s == WAITING) { /* before the trigger: everything */
    if (!c->masks && !(c->masks = malloc(words * sizeof(uint32_t) * (MAX_SLOTS + 2)))) return NULL;
    uint32_t *m = c->masks + (size_t)MAX_SLOTS * words;
    memset(m, 0xFF, words * sizeof *m);
    if (cn_vocab_n(c->v) % 32) m[words - 1] = (1u << (cn_vocab_n(c->v) % 32)) - 1;
    return m;
  }
  if (s == FINISHED) { /* after the end: only end-of-generation tokens, so a row can go on */
    if (!c->masks && !(c->masks = malloc(words * sizeof(uint32_t) * (MAX_SLOTS + 2)))) return NULL;
    uint32_t *m = c->masks + (size_t)MAX_SLOTS * words;
    memset(m, 0, words * sizeof *m);
    for (int32_t i = 0; i < cn_vocab_n(c->v); i++)
      if (cn_vocab_kind(c->v, i) == 1) m[i >> 5] |= 1u << (i & 31);
    return m;
  }
  const int32_t cs = cn_canon(c->m, s);
  int fresh;
  if (cs != s && cs >= 0) {
    uint32_t *m = slot_for(c, s, &fresh);
    if (!m || !fresh) return m;
    const int rc = cn_chain_mask(c->m, c->v, s, m);
    if (rc < 0) {
      c->slot[s] = -1;
      return NULL;
    }
    if (rc == 1) {
      if (cn_complete(c->m, s))
        for (int32_t i = 0; i < cn_vocab_n(c->v); i++)
          if (cn_vocab_kind(c->v, i) == 1) m[i >> 5] |= 1u << (i & 31);
      return m;
    }
    c->slot[s] = -1; /* not a chain: the canonical state's mask first */
    c->n_slots--;
    const uint32_t *base = state_mask(c, cs);
    if (!base) return NULL;
    uint32_t *tmp = c->masks + (size_t)(MAX_SLOTS + 1) * words; /* base's slot may be reused below */
    memcpy(tmp, base, words * sizeof *tmp);
    m = slot_for(c, s, &fresh);
    if (!m || !fresh) return m;
    for (size_t w = 0; w < words; w++) m[w] = tmp[w] & ~c->v->long_bits[w];
    if (cn_trie_walk(c->m, &c->v->long_trie, s, m)) {
      c->slot[s] = -1;
      return NULL;
    }
    return m;
  }
  uint32_t *m = slot_for(c, s, &fresh);
  if (!m || !fresh) return m;
  if (cn_mask_compute(c->m, c->v, s, m)) {
    c->slot[s] = -1;
    return NULL;
  }
  return m;
}

int q35_constraint_mask(q35_constraint *c, uint32_t *mask, q35_err *err) {
  const uint32_t *m = state_mask(c, cur(c));
  if (!m) return q35_seterr(err, "constraint: out of memory computing a mask");
  memcpy(mask, m, (size_t)c->words * sizeof *mask);
  return 0;
}

/* ---- for the step (engine/step.c) and the tests ---- */

const uint32_t *q35_constraint_mask_ref(q35_constraint *c) { return state_mask(c, cur(c)); }

int q35_constraint_mask_reference(q35_constraint *c, uint32_t *mask) {
  const int32_t s = cur(c);
  if (s == FINISHED || s == WAITING) {
    const uint32_t *m = state_mask(c, s);
    if (!m) return -1;
    memcpy(mask, m, (size_t)c->words * sizeof *mask);
    return 0;
  }
  return cn_mask_reference(c->m, c->v, s, mask);
}

size_t q35_constraint_bytes(const q35_constraint *c) {
  return cn_matcher_bytes(c->m) + c->cap_hist * sizeof *c->hist + c->cap_slot * sizeof *c->slot +
         (c->masks ? (size_t)(MAX_SLOTS + 2) * (size_t)c->words * 4 : 0);
}

int32_t q35_constraint_n_vocab(const q35_constraint *c) { return cn_vocab_n(c->v); }
