/*
 * matcher.c - the pushdown automaton over a compiled grammar, with interned stacks and states
 * (the picture is in grammar.h).
 *
 * Nodes: (pos, parent) pairs, hash-consed, so equal stacks have one id. A stack's top node
 * sits at a CN_CLASS element (a byte it can take next); node 0 is the empty stack.
 * Closure (expand): from a node, follow CN_END up to the parent and CN_REF down into each
 * alternative, until byte classes (or the empty stack) are reached. A reference in tail
 * position (the element after it is CN_END) passes its own parent on instead of a new return
 * node, which is what keeps the stacks of right-recursive repetitions bounded. A generation
 * mark per node makes the closure visit each node once, so nullable loops (("a"?)*) end.
 * States: sorted node-id sets, hash-consed; each state's transitions are cached in a table of
 * 256 entries made on its first step (unknown entries hold CN_UNKNOWN).
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "constrain/grammar.h"

#define CN_UNKNOWN (-2)
#define MAX_BYTES ((size_t)1 << 30) /* a matcher's store: refuse to grow past this */

struct cn_matcher {
  const cn_grammar *g;
  int32_t *npos, *npar;
  uint32_t *mark;
  int32_t n_nodes, cap_nodes;
  int32_t *nhash;
  uint32_t cap_nhash;
  uint32_t gen;
  int32_t *sdata;
  size_t n_sdata, cap_sdata;
  size_t *soff;
  int32_t *slen;
  int32_t **trans;
  int32_t n_states, cap_states;
  int32_t *shash;
  uint32_t cap_shash;
  int32_t *tmp, *work;
  int32_t n_tmp, cap_tmp, cap_work;
  int32_t *ncanon, *scanon; /* cn_canon memos per node and per state (-1: not yet) */
  int32_t cap_ncanon, cap_scanon;
  size_t bytes;
  int32_t start;
};

static uint32_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (uint32_t)h;
}

static int grow_arr(void **p, int32_t *cap, int32_t need, size_t size, size_t *bytes) {
  if (need <= *cap) return 0;
  int32_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  if (*bytes + (size_t)(c - *cap) * size > MAX_BYTES) return -1;
  void *q = realloc(*p, (size_t)c * size);
  if (!q) return -1;
  *bytes += (size_t)(c - *cap) * size;
  *p = q;
  *cap = c;
  return 0;
}

/* ---- nodes ---- */

static int rehash_nodes(cn_matcher *m, uint32_t cap) {
  int32_t *h = malloc((size_t)cap * sizeof *h);
  if (!h) return -1;
  for (uint32_t i = 0; i < cap; i++) h[i] = -1;
  for (int32_t i = 1; i < m->n_nodes; i++) {
    uint32_t k = mix(((uint64_t)(uint32_t)m->npos[i] << 32) | (uint32_t)m->npar[i]) & (cap - 1);
    while (h[k] >= 0) k = (k + 1) & (cap - 1);
    h[k] = i;
  }
  m->bytes += (size_t)(cap - m->cap_nhash) * sizeof *h;
  free(m->nhash);
  m->nhash = h;
  m->cap_nhash = cap;
  return 0;
}

/* The id of node (pos, parent), made when new; CN_OOM when out of memory. */
static int32_t node(cn_matcher *m, int32_t pos, int32_t parent) {
  if ((uint32_t)m->n_nodes * 2 >= m->cap_nhash && rehash_nodes(m, m->cap_nhash * 2)) return CN_OOM;
  uint32_t k = mix(((uint64_t)(uint32_t)pos << 32) | (uint32_t)parent) & (m->cap_nhash - 1);
  for (int32_t id; (id = m->nhash[k]) >= 0; k = (k + 1) & (m->cap_nhash - 1))
    if (m->npos[id] == pos && m->npar[id] == parent) return id;
  int32_t cap = m->cap_nodes;
  if (grow_arr((void **)&m->npos, &cap, m->n_nodes + 1, sizeof *m->npos, &m->bytes)) return CN_OOM;
  cap = m->cap_nodes;
  if (grow_arr((void **)&m->npar, &cap, m->n_nodes + 1, sizeof *m->npar, &m->bytes)) return CN_OOM;
  cap = m->cap_nodes;
  if (grow_arr((void **)&m->mark, &cap, m->n_nodes + 1, sizeof *m->mark, &m->bytes)) return CN_OOM;
  if (cap > m->cap_nodes) memset(m->mark + m->cap_nodes, 0, (size_t)(cap - m->cap_nodes) * sizeof *m->mark);
  m->cap_nodes = cap;
  const int32_t id = m->n_nodes++;
  m->npos[id] = pos;
  m->npar[id] = parent;
  m->mark[id] = 0;
  m->nhash[k] = id;
  return id;
}

static int push_work(cn_matcher *m, int32_t *n_work, int32_t id) {
  if (id < 0) return -1;
  if (grow_arr((void **)&m->work, &m->cap_work, *n_work + 1, sizeof *m->work, &m->bytes)) return -1;
  m->work[(*n_work)++] = id;
  return 0;
}

/* The closure of node id, added to m->tmp (the current generation's marks dedupe). */
static int expand(cn_matcher *m, int32_t id) {
  const cn_grammar *g = m->g;
  int32_t n_work = 0;
  if (push_work(m, &n_work, id)) return -1;
  while (n_work) {
    const int32_t n = m->work[--n_work];
    if (m->mark[n] == m->gen) continue;
    m->mark[n] = m->gen;
    const cn_elem e = n ? g->code[m->npos[n]] : (cn_elem){CN_CLASS, 0};
    if (e.kind == CN_CLASS) { /* a stack top (or the empty stack) */
      if (grow_arr((void **)&m->tmp, &m->cap_tmp, m->n_tmp + 1, sizeof *m->tmp, &m->bytes)) return -1;
      m->tmp[m->n_tmp++] = n;
    } else if (e.kind == CN_END) {
      if (push_work(m, &n_work, m->npar[n])) return -1;
    } else {
      const int32_t p = m->npos[n];
      const int32_t ret = g->code[p + 1].kind == CN_END ? m->npar[n] : node(m, p + 1, m->npar[n]);
      if (ret < 0) return -1;
      for (int32_t a = g->rule_alt[e.arg]; a < g->rule_alt[e.arg + 1]; a++)
        if (push_work(m, &n_work, node(m, g->alt[a], ret))) return -1;
    }
  }
  return 0;
}

/* ---- states ---- */

static int cmp_i32(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

static uint32_t set_hash(const int32_t *s, int32_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
  for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 0x100000001B3ull + 0x9E37;
  return mix(h);
}

static int rehash_states(cn_matcher *m, uint32_t cap) {
  int32_t *h = malloc((size_t)cap * sizeof *h);
  if (!h) return -1;
  for (uint32_t i = 0; i < cap; i++) h[i] = -1;
  for (int32_t i = 0; i < m->n_states; i++) {
    uint32_t k = set_hash(m->sdata + m->soff[i], m->slen[i]) & (cap - 1);
    while (h[k] >= 0) k = (k + 1) & (cap - 1);
    h[k] = i;
  }
  m->bytes += (size_t)(cap - m->cap_shash) * sizeof *h;
  free(m->shash);
  m->shash = h;
  m->cap_shash = cap;
  return 0;
}

/* The state of the node set in m->tmp (sorted here); CN_DEAD for the empty set. */
static int32_t intern_tmp(cn_matcher *m) {
  if (m->n_tmp == 0) return CN_DEAD;
  qsort(m->tmp, (size_t)m->n_tmp, sizeof *m->tmp, cmp_i32);
  if ((uint32_t)m->n_states * 2 >= m->cap_shash && rehash_states(m, m->cap_shash * 2)) return CN_OOM;
  const int32_t n = m->n_tmp;
  uint32_t k = set_hash(m->tmp, n) & (m->cap_shash - 1);
  for (int32_t id; (id = m->shash[k]) >= 0; k = (k + 1) & (m->cap_shash - 1))
    if (m->slen[id] == n && !memcmp(m->sdata + m->soff[id], m->tmp, (size_t)n * sizeof *m->tmp)) return id;
  if (m->n_sdata + (size_t)n > m->cap_sdata) {
    size_t c = m->cap_sdata ? m->cap_sdata * 2 : 1024;
    while (c < m->n_sdata + (size_t)n) c *= 2;
    if (m->bytes + (c - m->cap_sdata) * sizeof *m->sdata > MAX_BYTES) return CN_OOM;
    int32_t *d = realloc(m->sdata, c * sizeof *d);
    if (!d) return CN_OOM;
    m->bytes += (c - m->cap_sdata) * sizeof *d;
    m->sdata = d;
    m->cap_sdata = c;
  }
  int32_t cap = m->cap_states;
  if (grow_arr((void **)&m->soff, &cap, m->n_states + 1, sizeof *m->soff, &m->bytes)) return CN_OOM;
  cap = m->cap_states;
  if (grow_arr((void **)&m->slen, &cap, m->n_states + 1, sizeof *m->slen, &m->bytes)) return CN_OOM;
  cap = m->cap_states;
  if (grow_arr((void **)&m->trans, &cap, m->n_states + 1, sizeof *m->trans, &m->bytes)) return CN_OOM;
  m->cap_states = cap;
  const int32_t id = m->n_states++;
  memcpy(m->sdata + m->n_sdata, m->tmp, (size_t)n * sizeof *m->tmp);
  m->soff[id] = m->n_sdata;
  m->slen[id] = n;
  m->trans[id] = NULL;
  m->n_sdata += (size_t)n;
  m->shash[k] = id;
  return id;
}

cn_matcher *cn_matcher_new(const cn_grammar *g, q35_err *err) {
  cn_matcher *m = calloc(1, sizeof *m);
  if (!m) {
    q35_seterr(err, "constraint: out of memory");
    return NULL;
  }
  m->g = g;
  m->n_nodes = 1; /* node 0: the empty stack */
  int32_t cap = 0;
  if (grow_arr((void **)&m->npos, &cap, 64, sizeof *m->npos, &m->bytes) ||
      !(m->npar = malloc(64 * sizeof *m->npar)) || !(m->mark = calloc(64, sizeof *m->mark)) ||
      rehash_nodes(m, 128) || rehash_states(m, 64))
    goto oom;
  m->cap_nodes = cap;
  m->npos[0] = m->npar[0] = 0;
  m->gen = 1;
  m->n_tmp = 0;
  for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
    const int32_t n = node(m, g->alt[a], 0);
    if (n < 0 || expand(m, n)) goto oom;
  }
  m->start = intern_tmp(m);
  if (m->start == CN_OOM) goto oom;
  return m;
oom:
  cn_matcher_free(m);
  q35_seterr(err, "constraint: out of memory");
  return NULL;
}

void cn_matcher_free(cn_matcher *m) {
  if (!m) return;
  for (int32_t i = 0; i < m->n_states; i++) free(m->trans[i]);
  free(m->npos);
  free(m->npar);
  free(m->mark);
  free(m->nhash);
  free(m->sdata);
  free(m->soff);
  free(m->slen);
  free(m->trans);
  free(m->shash);
  free(m->tmp);
  free(m->work);
  free(m->ncanon);
  free(m->scanon);
  free(m);
}

static void *dup_mem(const void *p, size_t n, int *fail) {
  if (!p || !n) return NULL;
  void *q = malloc(n);
  if (!q) *fail = 1;
  else memcpy(q, p, n);
  return q;
}

cn_matcher *cn_matcher_clone(const cn_matcher *m) {
  cn_matcher *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  *c = *m;
  int fail = 0;
  c->npos = dup_mem(m->npos, (size_t)m->cap_nodes * sizeof *m->npos, &fail);
  c->npar = dup_mem(m->npar, (size_t)m->cap_nodes * sizeof *m->npar, &fail);
  c->mark = dup_mem(m->mark, (size_t)m->cap_nodes * sizeof *m->mark, &fail);
  c->nhash = dup_mem(m->nhash, (size_t)m->cap_nhash * sizeof *m->nhash, &fail);
  c->sdata = dup_mem(m->sdata, m->cap_sdata * sizeof *m->sdata, &fail);
  c->soff = dup_mem(m->soff, (size_t)m->cap_states * sizeof *m->soff, &fail);
  c->slen = dup_mem(m->slen, (size_t)m->cap_states * sizeof *m->slen, &fail);
  c->shash = dup_mem(m->shash, (size_t)m->cap_shash * sizeof *m->shash, &fail);
  c->trans = m->cap_states ? calloc((size_t)m->cap_states, sizeof *c->trans) : NULL;
  c->tmp = c->work = NULL;
  c->cap_tmp = c->cap_work = c->n_tmp = 0;
  c->ncanon = c->scanon = NULL; /* the memos are rebuilt on demand */
  c->cap_ncanon = c->cap_scanon = 0;
  if (m->cap_states && !c->trans) fail = 1;
  for (int32_t i = 0; i < m->n_states && !fail; i++)
    if (m->trans[i]) c->trans[i] = dup_mem(m->trans[i], 256 * sizeof **m->trans, &fail);
  if (fail) {
    if (!c->trans) c->n_states = 0;
    cn_matcher_free(c);
    return NULL;
  }
  return c;
}

int32_t cn_start(cn_matcher *m) { return m->start; }

int cn_complete(const cn_matcher *m, int32_t s) { return s >= 0 && m->slen[s] > 0 && m->sdata[m->soff[s]] == 0; }

int32_t cn_n_states(const cn_matcher *m) { return m->n_states; }

size_t cn_matcher_bytes(const cn_matcher *m) { return m->bytes + sizeof *m; }

int32_t cn_step(cn_matcher *m, int32_t s, uint8_t b) {
  if (s < 0) return CN_DEAD;
  int32_t *t = m->trans[s];
  if (t && t[b] != CN_UNKNOWN) return t[b];
  if (!t) {
    if (m->bytes + 256 * sizeof *t > MAX_BYTES || !(t = malloc(256 * sizeof *t))) return CN_OOM;
    m->bytes += 256 * sizeof *t;
    for (int i = 0; i < 256; i++) t[i] = CN_UNKNOWN;
    m->trans[s] = t;
  }
  const cn_grammar *g = m->g;
  if (++m->gen == 0) { /* the marks wrapped: clear them */
    memset(m->mark, 0, (size_t)m->cap_nodes * sizeof *m->mark);
    m->gen = 1;
  }
  m->n_tmp = 0;
  const int32_t n = m->slen[s];
  for (int32_t i = 0; i < n; i++) {
    const int32_t id = m->sdata[m->soff[s] + (size_t)i];
    if (id == 0) continue;
    const int32_t p = m->npos[id];
    const uint64_t *c = g->cls[g->code[p].arg];
    if (!(c[b >> 6] >> (b & 63) & 1)) continue;
    const int32_t next = node(m, p + 1, m->npar[id]);
    if (next < 0 || expand(m, next)) return CN_OOM;
  }
  const int32_t r = intern_tmp(m);
  if (r == CN_OOM) return CN_OOM;
  m->trans[s][b] = r;
  return r;
}

/* ---- counter states ---- */

static int memo_grow(int32_t **p, int32_t *cap, int32_t need, size_t *bytes) {
  const int32_t old = *cap;
  if (grow_arr((void **)p, cap, need, sizeof **p, bytes)) return -1;
  for (int32_t i = old; i < *cap; i++) (*p)[i] = -1;
  return 0;
}

/* The node with every chain rule Q_k (k > CN_CANON_DEPTH) on its stack lowered to
 * Q_CN_CANON_DEPTH: the same offset in that rule's first alternative (the chain's rules all
 * have the layout "X Q_{k-1}"). */
static int32_t canon_node(cn_matcher *m, int32_t n) {
  if (n == 0) return 0;
  if (n < m->cap_ncanon && m->ncanon[n] >= 0) return m->ncanon[n];
  const cn_grammar *g = m->g;
  const int32_t par = canon_node(m, m->npar[n]);
  if (par < 0) return par;
  int32_t p = m->npos[n];
  const int32_t r = g->pos_rule[p], k = g->chain[r];
  if (k > CN_CANON_DEPTH && p < g->alt[g->rule_alt[r] + 1]) {
    const int32_t r2 = r - (k - CN_CANON_DEPTH);
    p = g->alt[g->rule_alt[r2]] + (p - g->alt[g->rule_alt[r]]);
  }
  const int32_t c = p == m->npos[n] && par == m->npar[n] ? n : node(m, p, par);
  if (c < 0 || memo_grow(&m->ncanon, &m->cap_ncanon, n + 1, &m->bytes)) return CN_OOM;
  m->ncanon[n] = c;
  return c;
}

int32_t cn_canon(cn_matcher *m, int32_t s) {
  if (s < 0) return s;
  if (s < m->cap_scanon && m->scanon[s] >= 0) return m->scanon[s];
  int changed = 0;
  m->n_tmp = 0;
  for (int32_t i = 0; i < m->slen[s]; i++) {
    const int32_t n = m->sdata[m->soff[s] + (size_t)i], c = canon_node(m, n);
    if (c < 0 || grow_arr((void **)&m->tmp, &m->cap_tmp, m->n_tmp + 1, sizeof *m->tmp, &m->bytes)) return s;
    changed |= c != n;
    m->tmp[m->n_tmp++] = c;
  }
  if (changed) { /* distinct nodes may have met: dedupe before interning */
    int32_t w = 0;
    for (int32_t i = 0; i < m->n_tmp; i++) {
      int dup = 0;
      for (int32_t j = 0; j < w && !dup; j++) dup = m->tmp[j] == m->tmp[i];
      if (!dup) m->tmp[w++] = m->tmp[i];
    }
    m->n_tmp = w;
  }
  const int32_t c = changed ? intern_tmp(m) : s;
  if (c < 0 || memo_grow(&m->scanon, &m->cap_scanon, s + 1, &m->bytes)) return s;
  m->scanon[s] = c;
  return c;
}

/* ---- masks ---- */

int cn_trie_walk(cn_matcher *m, const cn_trie *tr, int32_t s, uint32_t *mask) {
  if (s < 0) return 0;
  int32_t stack_buf[256], *st = tr->max_depth < 255 ? stack_buf : malloc(((size_t)tr->max_depth + 1) * sizeof *st);
  if (!st) return -1;
  st[0] = s;
  const uint8_t *byte = tr->byte;
  const uint16_t *depth = tr->depth;
  int rc = 0;
  for (int32_t i = 0; i < tr->n_nodes;) {
    const int32_t from = st[depth[i] - 1];
    const int32_t *t = m->trans[from];
    int32_t to = t ? t[byte[i]] : CN_UNKNOWN;
    if (to == CN_UNKNOWN) to = cn_step(m, from, byte[i]);
    if (to < 0) {
      if (to == CN_OOM) {
        rc = -1;
        break;
      }
      i = tr->end[i];
      continue;
    }
    st[depth[i]] = to;
    for (int32_t k = tr->tok_off[i]; k < tr->tok_off[i + 1]; k++) mask[tr->tok[k] >> 5] |= 1u << (tr->tok[k] & 31);
    i++;
  }
  if (st != stack_buf) free(st);
  return rc;
}
