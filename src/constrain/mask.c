/*
 * mask.c - the vocabulary as a trie of token byte strings, and token masks.
 *
 * The trie holds the normal tokens (kind 0) and is stored in preorder: a node is (byte, depth)
 * and the index one past its subtree, so a walk is a loop over an array that jumps past a
 * subtree the state refuses (cn_mask_compute in matcher.c, next to the transition tables it
 * reads). It is built from the tokens sorted by their bytes: each token adds the nodes of its
 * bytes past the longest common prefix with the token before it.
 *
 * cn_mask_reference is the plain twin: every token's bytes stepped one by one.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "constrain/grammar.h"

typedef struct {
  const char *p;
  size_t n;
  int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b) {
  const tok_ref *x = a, *y = b;
  const size_t n = x->n < y->n ? x->n : y->n;
  const int c = memcmp(x->p, y->p, n);
  if (c) return c;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

void cn_vocab_free(cn_vocab *v) {
  if (!v) return;
  if (v->bytes)
    for (int32_t i = 0; i < v->n; i++) free(v->bytes[i]);
  free(v->bytes);
  free(v->lens);
  free(v->kind);
  free(v->byte);
  free(v->depth);
  free(v->end);
  free(v->tok_off);
  free(v->tok);
  free(v);
}

/* The trie's arrays from the normal tokens sorted by bytes. */
static int build_trie(cn_vocab *v, const tok_ref *t, int32_t nt) {
  size_t n_nodes = 0;
  for (int32_t i = 0; i < nt; i++) {
    size_t lcp = 0;
    if (i)
      while (lcp < t[i].n && lcp < t[i - 1].n && t[i].p[lcp] == t[i - 1].p[lcp]) lcp++;
    n_nodes += t[i].n - lcp;
  }
  if (n_nodes > INT32_MAX / 2) return -1;
  v->byte = malloc(n_nodes + 1);
  v->depth = malloc((n_nodes + 1) * sizeof *v->depth);
  v->end = malloc((n_nodes + 1) * sizeof *v->end);
  v->tok_off = calloc(n_nodes + 2, sizeof *v->tok_off);
  v->tok = malloc(((size_t)nt + 1) * sizeof *v->tok);
  int32_t *open = malloc((size_t)(v->max_depth + 2) * sizeof *open); /* open node per depth */
  if (!v->byte || !v->depth || !v->end || !v->tok_off || !v->tok || !open) {
    free(open);
    return -1;
  }
  int32_t k = 0, n_open = 0;
  for (int32_t i = 0; i < nt; i++) {
    size_t lcp = 0;
    if (i)
      while (lcp < t[i].n && lcp < t[i - 1].n && t[i].p[lcp] == t[i - 1].p[lcp]) lcp++;
    while (n_open > (int32_t)lcp) v->end[open[--n_open]] = k; /* close the subtrees left */
    for (size_t d = lcp; d < t[i].n; d++) {
      v->byte[k] = (uint8_t)t[i].p[d];
      v->depth[k] = (uint16_t)(d + 1);
      open[n_open++] = k++;
    }
    v->tok[i] = t[i].id;
    v->tok_off[k - 1 + 1]++; /* the token ends at node k - 1: count it, prefix sums below */
  }
  while (n_open > 0) v->end[open[--n_open]] = k;
  free(open);
  v->n_nodes = k;
  for (int32_t i = 0; i < k; i++) v->tok_off[i + 1] += v->tok_off[i];
  return 0;
}

cn_vocab *cn_vocab_new(int32_t n, const char *const *bytes, const size_t *lens, const uint8_t *kind, q35_err *err) {
  cn_vocab *v = calloc(1, sizeof *v);
  tok_ref *t = malloc(((size_t)n + 1) * sizeof *t);
  if (!v || !t || n < 1) goto fail;
  v->n = n;
  v->kind = malloc((size_t)n);
  v->bytes = calloc((size_t)n, sizeof *v->bytes);
  v->lens = malloc((size_t)n * sizeof *v->lens);
  if (!v->kind || !v->bytes || !v->lens) goto fail;
  int32_t nt = 0;
  for (int32_t i = 0; i < n; i++) {
    v->kind[i] = kind[i] > 2 ? 2 : kind[i];
    v->lens[i] = lens[i];
    if (!(v->bytes[i] = malloc(lens[i] + 1))) goto fail;
    memcpy(v->bytes[i], bytes[i], lens[i]);
    v->bytes[i][lens[i]] = 0;
    if (v->kind[i] == 0 && (lens[i] == 0 || lens[i] > 60000)) v->kind[i] = 2; /* no empty tokens: they would not advance */
    if (v->kind[i] == 0) {
      t[nt++] = (tok_ref){v->bytes[i], lens[i], i};
      if ((int32_t)lens[i] > v->max_depth) v->max_depth = (int32_t)lens[i];
    }
  }
  qsort(t, (size_t)nt, sizeof *t, cmp_tok);
  if (build_trie(v, t, nt)) goto fail;
  free(t);
  return v;
fail:
  free(t);
  cn_vocab_free(v);
  q35_seterr(err, n < 1 ? "constraint: empty vocabulary" : "constraint: out of memory building the vocabulary trie");
  return NULL;
}

int32_t cn_vocab_n(const cn_vocab *v) { return v->n; }
int cn_vocab_kind(const cn_vocab *v, int32_t id) { return id >= 0 && id < v->n ? v->kind[id] : 2; }
const char *cn_vocab_bytes(const cn_vocab *v, int32_t id, size_t *len) {
  if (id < 0 || id >= v->n) return NULL;
  *len = v->lens[id];
  return v->bytes[id];
}
size_t cn_vocab_trie_nodes(const cn_vocab *v) { return (size_t)v->n_nodes; }

int cn_mask_reference(cn_matcher *m, const cn_vocab *v, int32_t s, uint32_t *mask) {
  memset(mask, 0, (size_t)(v->n + 31) / 32 * sizeof *mask);
  const int complete = cn_complete(m, s);
  for (int32_t i = 0; i < v->n; i++) {
    int ok = 0;
    if (v->kind[i] == 1) {
      ok = complete;
    } else if (v->kind[i] == 0) {
      int32_t st = s;
      for (size_t j = 0; j < v->lens[i] && st >= 0; j++) st = cn_step(m, st, (uint8_t)v->bytes[i][j]);
      if (st == CN_OOM) return -1;
      ok = st >= 0;
    }
    if (ok) mask[i >> 5] |= 1u << (i & 31);
  }
  return 0;
}
