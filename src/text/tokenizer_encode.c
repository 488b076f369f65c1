/*
 * tokenizer_encode.c - text to ids (q35_tokenize): added tokens are matched first in the raw
 * text, leftmost-longest; each stretch between them is NFC-normalized, split by the PCRE2
 * pre-tokenizer, and each piece is BPE-merged (through a per-call cache for long texts).
 */
#include "text/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/buf.h"
#include "base/util.h"

/* ---- encoding ------------------------------------------------------------------------------- */

/* Per-call cache of piece -> ids (long texts repeat words; the tokenizer itself stays
 * immutable, so the cache lives with the call). Direct-mapped; emptied when its pools fill. */
#define WC_SLOTS 4096
#define WC_MAX_PIECE 64
#define WC_POOL_MAX (1u << 20)
#define WC_MIN_TEXT 4096 /* bytes of text from which a call gets a cache */
#define IDS_INITIAL 64   /* ids allocated up front */
#define SHORT_WORD 24    /* bytes up to which BPE scans for the best pair instead of keeping a heap */
#define SCRATCH_MIN 64   /* BPE scratch symbols allocated at least */
typedef struct wc_ent {
  uint64_t h;
  uint32_t key_off, ids_off;
  uint16_t key_len, n_ids; /* n_ids 0: empty */
} wc_ent;

typedef struct enc_ctx {
  const q35_tokenizer *t;
  wc_ent *wc;               /* NULL: no cache (short text) */
  q35_buf wc_keys;
  int32_t *wc_ids;
  size_t wc_n_ids;
  int32_t *ids;
  size_t n, cap;
  /* BPE scratch */
  int32_t *sym, *prev, *next;
  uint64_t *heap;
  size_t scap;
  pcre2_match_data *md;
} enc_ctx;

static int push_id(enc_ctx *c, int32_t id) {
  if (c->n == c->cap && q35_grow((void **)&c->ids, &c->cap, c->n + 1, sizeof *c->ids)) return -1;
  c->ids[c->n++] = id;
  return 0;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p] <= v) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
  uint64_t top = h[0], v = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t l = 2 * i + 1;
    if (l >= m) break;
    if (l + 1 < m && h[l + 1] < h[l]) l++;
    if (h[l] >= v) break;
    h[i] = h[l];
    i = l;
  }
  if (m) h[i] = v;
  return top;
}

/* BPE over one pre-token's bytes. */
static int bpe_word(enc_ctx *c, const uint8_t *w, size_t n) {
  const q35_tokenizer *t = c->t;
  if (n == 1) return push_id(c, t->byte_id[w[0]]);
  if (n > c->scap) {
    size_t cap = n < SCRATCH_MIN ? SCRATCH_MIN : n;
    free(c->sym);
    free(c->prev);
    free(c->next);
    free(c->heap);
    c->sym = malloc(cap * sizeof *c->sym);
    c->prev = malloc(cap * sizeof *c->prev);
    c->next = malloc(cap * sizeof *c->next);
    c->heap = malloc(cap * sizeof *c->heap * 2);
    c->scap = c->sym && c->prev && c->next && c->heap ? cap : 0;
    if (!c->scap) return -1;
  }
  int32_t *sym = c->sym, *prev = c->prev, *next = c->next;
  if (n <= SHORT_WORD) { /* short words: a linear scan for the lowest (rank, position) beats a heap */
    int32_t *rank = prev; /* rank[i]: rank of the pair starting at symbol i (-1: none) */
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[w[i]];
    for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_lookup(t, sym[i], sym[i + 1]);
    while (m > 1) {
      size_t best = SIZE_MAX;
      for (size_t i = 0; i + 1 < m; i++)
        if (rank[i] >= 0 && (best == SIZE_MAX || rank[i] < rank[best])) best = i;
      if (best == SIZE_MAX) break;
      sym[best] = t->merge_new[rank[best]];
      m--;
      memmove(sym + best + 1, sym + best + 2, (m - best - 1) * sizeof *sym);
      memmove(rank + best + 1, rank + best + 2, (m > best + 2 ? m - best - 2 : 0) * sizeof *rank);
      if (best > 0) rank[best - 1] = pair_lookup(t, sym[best - 1], sym[best]);
      if (best + 1 < m) rank[best] = pair_lookup(t, sym[best], sym[best + 1]);
    }
    for (size_t i = 0; i < m; i++)
      if (push_id(c, sym[i])) return -1;
    return 0;
  }
  uint64_t *heap = c->heap;
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    sym[i] = t->byte_id[w[i]];
    prev[i] = (int32_t)i - 1;
    next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    int32_t r = pair_lookup(t, sym[i], sym[i + 1]);
    if (r >= 0) heap_push(heap, &hn, (uint64_t)r << 32 | i);
  }
  /* Each merge removes a symbol and pushes at most 2 entries; the heap never exceeds 2n. */
  while (hn) {
    uint64_t e = heap_pop(heap, &hn);
    int32_t r = (int32_t)(e >> 32), p = (int32_t)(uint32_t)e;
    if (sym[p] < 0) continue;
    int32_t q = next[p];
    const struct pair_ent *pe = q < 0 ? NULL : pair_find(t, sym[p], sym[q]);
    if (!pe || pe->rank != r) continue; /* stale */
    sym[p] = pe->new_id;
    sym[q] = -1;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0) {
      int32_t r2 = pair_lookup(t, sym[prev[p]], sym[p]);
      if (r2 >= 0) heap_push(heap, &hn, (uint64_t)r2 << 32 | (uint32_t)prev[p]);
    }
    if (next[p] >= 0) {
      int32_t r2 = pair_lookup(t, sym[p], sym[next[p]]);
      if (r2 >= 0) heap_push(heap, &hn, (uint64_t)r2 << 32 | (uint32_t)p);
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i])
    if (push_id(c, sym[i])) return -1;
  return 0;
}

/* A piece through the cache. */
static int bpe_piece(enc_ctx *c, const uint8_t *w, size_t n) {
  if (n == 1) return push_id(c, c->t->byte_id[w[0]]);
  if (!c->wc || n > WC_MAX_PIECE) return bpe_word(c, w, n);
  uint64_t h = hash_bytes((const char *)w, n);
  wc_ent *e = &c->wc[h & (WC_SLOTS - 1)];
  if (e->n_ids && e->h == h && e->key_len == n && !memcmp(c->wc_keys.p + e->key_off, w, n)) {
    for (uint32_t k = 0; k < e->n_ids; k++)
      if (push_id(c, c->wc_ids[e->ids_off + k])) return -1;
    return 0;
  }
  size_t first = c->n;
  if (bpe_word(c, w, n)) return -1;
  size_t m = c->n - first; /* <= n <= WC_MAX_PIECE */
  if (c->wc_keys.n + n > WC_POOL_MAX || c->wc_n_ids + m > WC_POOL_MAX) { /* full: start over */
    memset(c->wc, 0, WC_SLOTS * sizeof *c->wc);
    c->wc_keys.n = 0;
    c->wc_n_ids = 0;
  }
  if (q35_buf_add(&c->wc_keys, w, n)) return 0; /* no memory: just skip caching */
  e->h = h;
  e->key_off = (uint32_t)(c->wc_keys.n - n);
  e->key_len = (uint16_t)n;
  e->ids_off = (uint32_t)c->wc_n_ids;
  e->n_ids = (uint16_t)m;
  memcpy(c->wc_ids + c->wc_n_ids, c->ids + first, m * sizeof *c->ids);
  c->wc_n_ids += m;
  return 0;
}

/* One stretch of text between added tokens: normalize, split, BPE. */
static int encode_segment(enc_ctx *c, const char *s, size_t n, q35_err *err) {
  const q35_tokenizer *t = c->t;
  uint8_t *norm = NULL;
  if (!n) return 0;
  if (t->nfc) {
    /* Text whose code points are all below U+0300 is already NFC (lead bytes < 0xCC). */
    int need = 0;
    for (size_t i = 0; i < n && !need; i++) need = (uint8_t)s[i] >= 0xcc;
    if (need) {
      utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm,
                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE);
      if (r < 0) return q35_seterr(err, "tokenize: NFC normalization failed: %s", utf8proc_errmsg(r));
      s = (const char *)norm;
      n = (size_t)r;
    }
  }
  size_t pos = 0;
  int rc = 0;
  while (pos < n) {
    int m = pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
    size_t ms = n, me = n;
    if (m >= 0) {
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
      ms = ov[0];
      me = ov[1];
    } else if (m != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR msg[PCRE_MSG_MAX];
      pcre2_get_error_message(m, msg, sizeof msg);
      rc = q35_seterr(err, "tokenize: pre-tokenizer regex failed: %s", (const char *)msg);
      break;
    }
    if (ms > pos && bpe_piece(c, (const uint8_t *)s + pos, ms - pos)) goto oom; /* a gap */
    if (me > ms) {
      if (bpe_piece(c, (const uint8_t *)s + ms, me - ms)) goto oom;
      pos = me;
    } else {
      pos = ms < n ? ms + 1 : n; /* cannot happen: no alternative matches empty */
      while (pos < n && ((uint8_t)s[pos] & 0xc0) == 0x80) pos++;
    }
  }
  free(norm);
  return rc;
oom:
  free(norm);
  return q35_seterr(err, "tokenize: out of memory");
}

int q35_tokenize(const q35_tokenizer *t, const char *text, size_t len, int32_t **ids, int32_t *n,
                 q35_err *err) {
  enc_ctx c = {.t = t};
  *ids = NULL;
  *n = 0;
  /* The input must be valid UTF-8. */
  for (size_t i = 0; i < len;) {
    if ((uint8_t)text[i] < 0x80) { i++; continue; }
    int bad, l = tok_utf8_seq((const uint8_t *)text + i, len - i, &bad);
    if (l <= 0)
      return q35_seterr(err, "tokenize: the text is not valid UTF-8 (byte 0x%02x at offset %zu)",
                        (uint8_t)text[i], i);
    i += (size_t)l;
  }
  c.md = pcre2_match_data_create_from_pattern(t->re, NULL);
  c.cap = IDS_INITIAL;
  c.ids = malloc(c.cap * sizeof *c.ids);
  if (!c.md || !c.ids) {
    pcre2_match_data_free(c.md);
    free(c.ids);
    return q35_seterr(err, "tokenize: out of memory");
  }
  if (len >= WC_MIN_TEXT) { /* worth a cache; without memory, go on without one */
    c.wc = calloc(WC_SLOTS, sizeof *c.wc);
    c.wc_ids = malloc(WC_POOL_MAX * sizeof *c.wc_ids);
    if (!c.wc || !c.wc_ids) {
      free(c.wc);
      free(c.wc_ids);
      c.wc = NULL;
      c.wc_ids = NULL;
    }
  }
  int rc = 0;
  size_t pos = 0, seg = 0;
  /* Added tokens first: leftmost-longest over the raw text. */
  while (pos < len) {
    uint8_t b0 = (uint8_t)text[pos];
    int32_t lo = t->added_first[b0], hi = t->added_first[b0 + 1], hit = -1;
    size_t hl = 0;
    for (int32_t k = lo; k < hi; k++) {
      const char *a = t->text + t->text_off[t->added[k]];
      size_t al = t->text_off[t->added[k] + 1] - t->text_off[t->added[k]] - 1;
      if (al <= len - pos && !memcmp(text + pos, a, al)) {
        hit = t->added[k];
        hl = al;
        break;
      }
    }
    if (hit < 0) {
      pos++;
      continue;
    }
    if ((rc = encode_segment(&c, text + seg, pos - seg, err))) break;
    if (push_id(&c, hit)) { rc = q35_seterr(err, "tokenize: out of memory"); break; }
    pos += hl;
    seg = pos;
  }
  if (!rc) rc = encode_segment(&c, text + seg, len - seg, err);
  pcre2_match_data_free(c.md);
  free(c.wc);
  free(c.wc_ids);
  q35_buf_free(&c.wc_keys);
  free(c.sym);
  free(c.prev);
  free(c.next);
  free(c.heap);
  if (rc) {
    free(c.ids);
    return -1;
  }
  if (c.n > INT32_MAX) {
    free(c.ids);
    return q35_seterr(err, "tokenize: too many tokens");
  }
  *ids = c.ids;
  *n = (int32_t)c.n;
  return 0;
}
