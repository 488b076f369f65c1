/*
 * mask.c - the vocabulary as tries of token byte strings, and token masks.
 *
 * The trie holds the normal tokens (kind 0) in preorder: a node is (byte, depth) and the index
 * one past its subtree, so a walk is a loop over an array that jumps past each subtree the
 * state refuses (cn_trie_walk in matcher.c, next to the transition tables it reads). It is
 * built from the tokens sorted by their bytes: each token adds the nodes of its bytes past the
 * longest common prefix with the token before it.
 *
 * Loop states. Inside a JSON string (or any `[^"]*`-like repetition) a state s takes almost
 * every token, so a plain walk visits the whole trie. But such a state LOOPS: every plain ASCII
 * byte of a set A, and every complete UTF-8 character, leads from s back to s. A token is then
 * its longest prefix of such units (which ends in s again) and a remainder, and only the
 * remainder needs walking. So for each loop set (A, utf8) seen, the vocabulary is split once
 * (cn_loop, cached in the vocabulary, shared by every constraint and thread): the bitset of
 * tokens that are only units, and a trie of the remainders (a few thousand tokens for a JSON
 * string: those holding a quote, a backslash, a control byte or a split character). A mask is
 * then that bitset plus a walk of the small trie. cn_mask_reference is the plain twin: every
 * token's bytes stepped one by one.
 */
#include <pthread.h>
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

static void trie_free(cn_trie *t) {
  free(t->byte);
  free(t->depth);
  free(t->end);
  free(t->tok_off);
  free(t->tok);
  memset(t, 0, sizeof *t);
}

/* The trie of nt strings (sorted here). */
static int trie_build(cn_trie *tr, tok_ref *t, int32_t nt) {
  memset(tr, 0, sizeof *tr);
  qsort(t, (size_t)nt, sizeof *t, cmp_tok);
  size_t n_nodes = 0;
  for (int32_t i = 0; i < nt; i++) {
    size_t lcp = 0;
    if (i)
      while (lcp < t[i].n && lcp < t[i - 1].n && t[i].p[lcp] == t[i - 1].p[lcp]) lcp++;
    n_nodes += t[i].n - lcp;
    if ((int32_t)t[i].n > tr->max_depth) tr->max_depth = (int32_t)t[i].n;
  }
  if (n_nodes > INT32_MAX / 2) return -1;
  tr->byte = malloc(n_nodes + 1);
  tr->depth = malloc((n_nodes + 1) * sizeof *tr->depth);
  tr->end = malloc((n_nodes + 1) * sizeof *tr->end);
  tr->tok_off = calloc(n_nodes + 2, sizeof *tr->tok_off);
  tr->tok = malloc(((size_t)nt + 1) * sizeof *tr->tok);
  int32_t *open = malloc((size_t)(tr->max_depth + 2) * sizeof *open); /* the open node per depth */
  if (!tr->byte || !tr->depth || !tr->end || !tr->tok_off || !tr->tok || !open) {
    free(open);
    trie_free(tr);
    return -1;
  }
  int32_t k = 0, n_open = 0;
  for (int32_t i = 0; i < nt; i++) {
    size_t lcp = 0;
    if (i)
      while (lcp < t[i].n && lcp < t[i - 1].n && t[i].p[lcp] == t[i - 1].p[lcp]) lcp++;
    while (n_open > (int32_t)lcp) tr->end[open[--n_open]] = k; /* close the subtrees left behind */
    for (size_t d = lcp; d < t[i].n; d++) {
      tr->byte[k] = (uint8_t)t[i].p[d];
      tr->depth[k] = (uint16_t)(d + 1);
      open[n_open++] = k++;
    }
    tr->tok[i] = t[i].id;
    tr->tok_off[k]++; /* the token ends at node k - 1: counted at k, prefix sums below */
  }
  while (n_open > 0) tr->end[open[--n_open]] = k;
  free(open);
  tr->n_nodes = k;
  for (int32_t i = 0; i < k; i++) tr->tok_off[i + 1] += tr->tok_off[i];
  return 0;
}

static cn_loop *loop_build(const cn_vocab *v, const uint64_t ascii[2], int utf8);

static void loop_free(cn_loop *l) {
  if (!l) return;
  free(l->all);
  trie_free(&l->rem);
  for (int j = 0; j < CN_CHAIN; j++) {
    free(l->le[j]);
    trie_free(&l->remu[j]);
  }
  free(l->big);
  free(l->big_u);
  free(l->rbig);
  free(l->rbig_u);
  free(l->rbig_at);
  free(l);
}

void cn_vocab_free(cn_vocab *v) {
  if (!v) return;
  if (v->bytes)
    for (int32_t i = 0; i < v->n; i++) free(v->bytes[i]);
  for (int i = 0; i < v->n_loops; i++) loop_free(v->loops[i]);
  if (v->lock) pthread_mutex_destroy(v->lock);
  free(v->lock);
  free(v->bytes);
  free(v->lens);
  free(v->kind);
  free(v->long_bits);
  trie_free(&v->trie);
  trie_free(&v->long_trie);
  free(v);
}

cn_vocab *cn_vocab_new(int32_t n, const char *const *bytes, const size_t *lens, const uint8_t *kind, q35_err *err) {
  cn_vocab *v = calloc(1, sizeof *v);
  tok_ref *t = malloc(((size_t)n + 1) * sizeof *t);
  if (!v || !t || n < 1) goto fail;
  v->n = n;
  v->kind = malloc((size_t)n);
  v->bytes = calloc((size_t)n, sizeof *v->bytes);
  v->lens = malloc((size_t)n * sizeof *v->lens);
  v->lock = malloc(sizeof(pthread_mutex_t));
  if (!v->kind || !v->bytes || !v->lens || !v->lock || pthread_mutex_init(v->lock, NULL)) {
    free(v->lock);
    v->lock = NULL;
    goto fail;
  }
  int32_t nt = 0;
  for (int32_t i = 0; i < n; i++) {
    v->kind[i] = kind[i] > 2 ? 2 : kind[i];
    v->lens[i] = lens[i];
    if (!(v->bytes[i] = malloc(lens[i] + 1))) goto fail;
    memcpy(v->bytes[i], bytes[i], lens[i]);
    v->bytes[i][lens[i]] = 0;
    if (v->kind[i] == 0 && (lens[i] == 0 || lens[i] > 60000)) v->kind[i] = 2; /* an empty token would not advance */
    if (v->kind[i] == 0) t[nt++] = (tok_ref){v->bytes[i], lens[i], i};
  }
  if (trie_build(&v->trie, t, nt)) goto fail;
  /* the tokens longer than CN_CANON_DEPTH bytes (a counter state walks these itself) */
  if (!(v->long_bits = calloc((size_t)(n + 31) / 32, sizeof *v->long_bits))) goto fail;
  int32_t nl = 0;
  for (int32_t i = 0; i < n; i++)
    if (v->kind[i] == 0 && lens[i] > CN_CANON_DEPTH) {
      t[nl++] = (tok_ref){v->bytes[i], lens[i], i};
      v->long_bits[i >> 5] |= 1u << (i & 31);
    }
  if (trie_build(&v->long_trie, t, nl)) goto fail;
  free(t);
  t = NULL;
  { /* the split of a JSON string's inside (schema.c's char: any character but " \\ and controls),
       made now so that the first string of every constraint does not pay for it */
    const uint64_t ascii[2] = {~0ull << 32 & ~(1ull << '"'), ~0ull & ~(1ull << ('\\' - 64))};
    if ((v->loops[0] = loop_build(v, ascii, 1))) v->n_loops = 1;
  }
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
size_t cn_vocab_trie_nodes(const cn_vocab *v) { return (size_t)v->trie.n_nodes; }

/* ---- loop states ---- */

/* Length of the complete valid UTF-8 character at p (n bytes left), or 0. */
static size_t utf8_char(const unsigned char *p, size_t n) {
  const unsigned c = p[0];
  size_t k;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) k = 2;
  else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (n < k || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < k; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return k;
}

/* The split of the vocabulary for loop set (ascii, utf8). */
static cn_loop *loop_build(const cn_vocab *v, const uint64_t ascii[2], int utf8) {
  cn_loop *l = calloc(1, sizeof *l);
  tok_ref *t = malloc(((size_t)v->n + 1) * sizeof *t);
  int32_t *units = malloc(((size_t)v->n + 1) * sizeof *units), *at_of = malloc(((size_t)v->n + 1) * sizeof *at_of);
  const size_t words = (size_t)(v->n + 31) / 32;
  if (!l || !t || !units || !at_of) goto fail;
  if (!(l->all = calloc(words, sizeof *l->all))) goto fail;
  for (int j = 0; j < CN_CHAIN; j++)
    if (!(l->le[j] = calloc(words, sizeof *l->le[j]))) goto fail;
  l->ascii[0] = ascii[0];
  l->ascii[1] = ascii[1];
  l->utf8 = utf8;
  int32_t nt = 0;
  for (int32_t i = 0; i < v->n; i++) {
    units[i] = -1;
    if (v->kind[i] != 0) continue;
    const unsigned char *p = (const unsigned char *)v->bytes[i];
    size_t at = 0;
    int32_t u = 0;
    while (at < v->lens[i]) {
      const unsigned c = p[at];
      if (c < 128) {
        if (!(ascii[c >> 6] >> (c & 63) & 1)) break;
        at++;
      } else {
        const size_t k = utf8 ? utf8_char(p + at, v->lens[i] - at) : 0;
        if (!k) break;
        at += k;
      }
      u++;
    }
    units[i] = u;
    at_of[i] = (int32_t)at;
    if (u > l->max_u) l->max_u = u;
    if (at == v->lens[i]) {
      l->all[i >> 5] |= 1u << (i & 31);
      for (int j = u; j < CN_CHAIN; j++) l->le[j][i >> 5] |= 1u << (i & 31);
      if (u >= CN_CHAIN) l->n_big++;
    } else {
      t[nt++] = (tok_ref){v->bytes[i] + at, v->lens[i] - at, i};
      if (u >= CN_CHAIN) l->n_rbig++;
    }
  }
  if (trie_build(&l->rem, t, nt)) goto fail;
  l->big = malloc(((size_t)l->n_big + 1) * sizeof *l->big);
  l->big_u = malloc(((size_t)l->n_big + 1) * sizeof *l->big_u);
  l->rbig = malloc(((size_t)l->n_rbig + 1) * sizeof *l->rbig);
  l->rbig_u = malloc(((size_t)l->n_rbig + 1) * sizeof *l->rbig_u);
  l->rbig_at = malloc(((size_t)l->n_rbig + 1) * sizeof *l->rbig_at);
  if (!l->big || !l->big_u || !l->rbig || !l->rbig_u || !l->rbig_at) goto fail;
  int32_t nb = 0, nr = 0;
  for (int32_t i = 0; i < v->n; i++) {
    if (units[i] < CN_CHAIN) continue;
    if ((size_t)at_of[i] == v->lens[i]) l->big[nb] = i, l->big_u[nb++] = units[i];
    else l->rbig[nr] = i, l->rbig_u[nr] = units[i], l->rbig_at[nr++] = at_of[i];
  }
  for (int u = 0; u < CN_CHAIN; u++) { /* the remainders of the tokens with u units */
    int32_t n = 0;
    for (int32_t i = 0; i < v->n; i++)
      if (units[i] == u && (size_t)at_of[i] < v->lens[i]) t[n++] = (tok_ref){v->bytes[i] + at_of[i], v->lens[i] - (size_t)at_of[i], i};
    if (trie_build(&l->remu[u], t, n)) goto fail;
  }
  free(t);
  free(units);
  free(at_of);
  return l;
fail:
  free(t);
  free(units);
  free(at_of);
  loop_free(l);
  return NULL;
}

/* The cached split for (ascii, utf8), made on first use; NULL when the cache is full or out of
 * memory (the caller walks the whole trie). */
static const cn_loop *vocab_loop(const cn_vocab *cv, const uint64_t ascii[2], int utf8) {
  cn_vocab *v = (cn_vocab *)cv; /* the loop cache is the one mutable part, under its lock */
  const cn_loop *found = NULL;
  pthread_mutex_lock(v->lock);
  for (int i = 0; i < v->n_loops && !found; i++)
    if (v->loops[i]->ascii[0] == ascii[0] && v->loops[i]->ascii[1] == ascii[1] && v->loops[i]->utf8 == utf8)
      found = v->loops[i];
  if (!found && v->n_loops < CN_MAX_LOOPS && (v->loops[v->n_loops] = loop_build(v, ascii, utf8)))
    found = v->loops[v->n_loops++];
  pthread_mutex_unlock(v->lock);
  return found;
}

/* Does every valid UTF-8 character lead from s to target? The byte ranges of valid UTF-8,
 * stepped level by level over the (few) distinct intermediate states. */
static int utf8_to(cn_matcher *m, int32_t s, int32_t target) {
  static const uint8_t seqs[8][4][2] = {
      {{0xC2, 0xDF}, {0x80, 0xBF}},
      {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
      {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
      {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
  };
  static const int len[8] = {2, 3, 3, 3, 3, 4, 4, 4};
  for (int q = 0; q < 8; q++) {
    int32_t cur[8] = {s}, n_cur = 1;
    for (int lv = 0; lv < len[q]; lv++) {
      int32_t next[8] = {0}, n_next = 0;
      for (int i = 0; i < n_cur; i++)
        for (unsigned b = seqs[q][lv][0]; b <= seqs[q][lv][1]; b++) {
          const int32_t t = cn_step(m, cur[i], (uint8_t)b);
          if (t < 0) return 0;
          int seen = 0;
          for (int j = 0; j < n_next; j++) seen |= next[j] == t;
          if (!seen) {
            if (n_next == 8) return 0; /* not a simple loop: walk instead */
            next[n_next++] = t;
          }
        }
      memcpy(cur, next, sizeof next);
      n_cur = n_next;
    }
    if (n_cur != 1 || cur[0] != target) return 0;
  }
  return 1;
}

#define MIN_LOOP_BYTES 48 /* ASCII bytes a state must loop on before the split pays */
#define MAX_CHAIN 256 /* chain states followed from one state before the plain walk is used */

/* Chain states. Inside X{0,n} with X one character (a bounded string), every unit (an ASCII
 * byte of a set A, and with utf8 every complete character) leads from s_0 = s to one state
 * s_1, from s_1 to s_2, ... until the units die (J: the units the chain takes) or a state
 * loops on them. A token with u units then a remainder is allowed iff u <= J and the
 * remainder is allowed from s_u, so the mask is the split by unit count (cn_loop.le, remu,
 * big, rbig). The mask is written (from zero) only when done. 1 when done, 0 when s is no chain (the caller walks the trie), -1 when out of
 * memory. */
int cn_chain_mask(cn_matcher *m, const cn_vocab *v, int32_t s, uint32_t *mask) {
  const int32_t t1 = cn_step(m, s, 'a');
  if (t1 == CN_OOM) return -1;
  if (t1 < 0 || t1 == s) return 0;
  uint64_t ascii[2] = {0, 0};
  int n_units = 0;
  for (unsigned b = 0; b < 128; b++)
    if (cn_step(m, s, (uint8_t)b) == t1) ascii[b >> 6] |= 1ull << (b & 63), n_units++;
  if (n_units < MIN_LOOP_BYTES) return 0;
  const int utf8 = utf8_to(m, s, t1);
  const cn_loop *l = vocab_loop(v, ascii, utf8);
  if (!l) return 0;
  int32_t st[MAX_CHAIN + 1];
  st[0] = s;
  st[1] = t1;
  int32_t J = -1, loop_at = -1; /* J: units taken (chain end); loop_at: the first looping state */
  for (int32_t j = 1; J < 0 && loop_at < 0; j++) {
    if (j > l->max_u) { /* no token has more units: the chain's rest does not matter */
      J = INT32_MAX;
      break;
    }
    if (j >= MAX_CHAIN) return 0;
    const int32_t x = cn_step(m, st[j], 'a');
    if (x == CN_OOM) return -1;
    int same = 1, dead = x < 0;
    for (unsigned b = 0; b < 128 && same; b++)
      if (ascii[b >> 6] >> (b & 63) & 1) {
        const int32_t y = cn_step(m, st[j], (uint8_t)b);
        if (y == CN_OOM) return -1;
        same = y == x;
      }
    if (!same) return 0;
    if (dead) {
      if (utf8)
        for (unsigned b = 0xC2; b <= 0xF4; b++) {
          const int32_t y = cn_step(m, st[j], (uint8_t)b);
          if (y == CN_OOM) return -1;
          if (y >= 0) return 0;
        }
      J = j;
      break;
    }
    if (utf8 && !utf8_to(m, st[j], x)) return 0;
    if (x == st[j]) loop_at = j;
    else st[j + 1] = x;
  }
  const int32_t JE = loop_at >= 0 ? INT32_MAX : J; /* the units allowed */
  const size_t words = (size_t)(v->n + 31) / 32;
  if (JE >= l->max_u) memcpy(mask, l->all, words * sizeof *mask);
  else if (JE < CN_CHAIN) memcpy(mask, l->le[JE], words * sizeof *mask);
  else {
    memcpy(mask, l->le[CN_CHAIN - 1], words * sizeof *mask);
    for (int32_t i = 0; i < l->n_big; i++)
      if (l->big_u[i] <= JE) mask[l->big[i] >> 5] |= 1u << (l->big[i] & 31);
  }
#define ST_OF(u) (loop_at >= 0 && (u) >= loop_at ? st[loop_at] : st[u])
  for (int32_t u = 0; u < CN_CHAIN && u <= JE; u++)
    if (cn_trie_walk(m, &l->remu[u], ST_OF(u), mask)) return -1;
  for (int32_t i = 0; i < l->n_rbig; i++) {
    const int32_t u = l->rbig_u[i];
    if (u > JE) continue;
    int32_t x = ST_OF(u);
    size_t len = 0;
    const char *b = cn_vocab_bytes(v, l->rbig[i], &len);
    for (size_t k = (size_t)l->rbig_at[i]; k < len && x >= 0; k++) x = cn_step(m, x, (uint8_t)b[k]);
    if (x == CN_OOM) return -1;
    if (x >= 0) mask[l->rbig[i] >> 5] |= 1u << (l->rbig[i] & 31);
  }
#undef ST_OF
  return 1;
}


int cn_mask_compute(cn_matcher *m, const cn_vocab *v, int32_t s, uint32_t *mask) {
  memset(mask, 0, (size_t)(v->n + 31) / 32 * sizeof *mask);
  if (s < 0) return 0;
  uint64_t ascii[2] = {0, 0};
  int n_loop = 0;
  for (unsigned b = 0; b < 128; b++) {
    const int32_t t = cn_step(m, s, (uint8_t)b);
    if (t == CN_OOM) return -1;
    if (t == s) {
      ascii[b >> 6] |= 1ull << (b & 63);
      n_loop++;
    }
  }
  const cn_loop *l = n_loop >= MIN_LOOP_BYTES ? vocab_loop(v, ascii, utf8_to(m, s, s)) : NULL;
  int rc;
  if (l) {
    memcpy(mask, l->all, (size_t)(v->n + 31) / 32 * sizeof *mask);
    rc = cn_trie_walk(m, &l->rem, s, mask);
  } else {
    rc = n_loop < MIN_LOOP_BYTES ? cn_chain_mask(m, v, s, mask) : 0;
    if (rc == 0) {
      memset(mask, 0, (size_t)(v->n + 31) / 32 * sizeof *mask);
      rc = cn_trie_walk(m, &v->trie, s, mask);
    } else if (rc == 1) {
      rc = 0;
    }
  }
  if (rc == 0 && cn_complete(m, s))
    for (int32_t i = 0; i < v->n; i++)
      if (v->kind[i] == 1) mask[i >> 5] |= 1u << (i & 31);
  return rc;
}

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
