/*
 * tokenizer.c - byte-level BPE (Qwen2 / Qwen3 / Qwen3.5), bit-exact with Hugging Face.
 *
 * Data structures
 *   - Every token has two forms: its vocabulary text (GGUF tokens / tokenizer.json vocab, in
 *     the GPT-2 "byte-level" alphabet where byte 0x20 is 'Ġ') and the raw bytes it decodes
 *     to. Both live in arenas indexed by id. A hash of text -> id serves lookups and merges.
 *   - BPE runs on raw bytes: a word starts as one symbol per byte (byte_id[]), and merges are
 *     a hash from the id pair (a, b) to its rank; merge_new[rank] is the merged token.
 *   - Merging uses a binary min-heap keyed (rank, position), so it is O(n log n) for long
 *     words and picks the lowest rank first and the leftmost on ties, as Hugging Face does.
 *     Stale heap entries are recognised by re-checking the pair's rank at pop time.
 *   - Added tokens (control + user-defined) are matched in the raw text before anything else,
 *     leftmost-longest; they are grouped by first byte and sorted longest first.
 *   - The pre-tokenizer is PCRE2 (UTF + UCP, JIT) with the whitespace class spelled out as
 *     Unicode White_Space: Debian's PCRE2 counts U+180E as \s, Hugging Face (Oniguruma) does
 *     not.
 *
 * The tokenizer is immutable after loading; per-call scratch lives in a stack context, so
 * concurrent calls are safe.
 */
#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/util.h"

/* ---- regexes -------------------------------------------------------------------------------- */

/* The pre-tokenizer regexes as they appear in tokenizer.json (used to detect the variant). */
static const char HF_RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_RE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The same for PCRE2, with \s spelled out as Unicode White_Space. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char PCRE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    "[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char PCRE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS
    "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
#undef WS

/* ---- the tokenizer -------------------------------------------------------------------------- */

#define TOKF_SPECIAL 1 /* Hugging Face "special" (skipped by skip_special_tokens) */
#define TOKF_ADDED 2   /* matched as a whole string in the input */
#define TOKF_NOT_SPECIAL 4 /* while loading: control by its looks only, not HF-special */

/* One merge in the pair table: 16 bytes, so a probe touches one cache line. */
struct pair_ent {
  uint64_t key; /* a << 32 | b */
  int32_t rank, new_id;
};

struct q35_tokenizer {
  int32_t n_vocab;
  char *text;          /* arena: NUL-terminated vocabulary strings */
  uint32_t *text_off;  /* [n_vocab] */
  char *bytes;         /* arena: decoded bytes */
  uint32_t *bytes_off; /* [n_vocab + 1] */
  uint8_t *type;       /* [n_vocab] Q35_TOKEN_* */
  uint8_t *flags;      /* [n_vocab] TOKF_* */

  int32_t *text_hash;  /* open addressing: id or -1 */
  uint32_t text_mask;

  int32_t byte_id[256];
  int32_t n_merges;
  int32_t *merge_a, *merge_b, *merge_new; /* [n_merges] by rank */
  struct pair_ent *pairs;                 /* open addressing on (a, b); key UINT64_MAX: empty */
  uint32_t pair_mask;

  int32_t n_added;
  int32_t *added;            /* ids sorted by (first byte, length desc) */
  int32_t added_first[257];  /* added[added_first[b] .. added_first[b+1]) start with byte b */

  q35_pre pre;
  int nfc;
  pcre2_code *re;

  int32_t bos, eos, pad, im_start, im_end, endoftext;
  int add_bos;
  char *chat_template;
};

/* ---- small helpers -------------------------------------------------------------------------- */

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int buf_put(buf *b, const void *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->n + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

static inline uint64_t hash_u64(uint64_t k) {
  k *= 0x9e3779b97f4a7c15ull;
  return k ^ (k >> 32);
}

static int put_utf8(char *o, uint32_t c) {
  if (c < 0x80) { o[0] = (char)c; return 1; }
  if (c < 0x800) { o[0] = (char)(0xc0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
  if (c < 0x10000) {
    o[0] = (char)(0xe0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
    o[2] = (char)(0x80 | (c & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((c >> 6) & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
  return 4;
}

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), 0 when invalid, or -k when the k bytes
 * available are a valid but incomplete prefix (only when they run to the end). For an invalid
 * sequence *bad is the length of its maximal subpart (>= 1), as from_utf8_lossy replaces. */
static int utf8_seq(const uint8_t *s, size_t n, int *bad) {
  uint8_t c = s[0];
  int need;
  uint8_t lo = 0x80, hi = 0xbf;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) need = 1;
  else if (c == 0xe0) { need = 2; lo = 0xa0; }
  else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) need = 2;
  else if (c == 0xed) { need = 2; hi = 0x9f; }
  else if (c == 0xf0) { need = 3; lo = 0x90; }
  else if (c >= 0xf1 && c <= 0xf3) need = 3;
  else if (c == 0xf4) { need = 3; hi = 0x8f; }
  else { *bad = 1; return 0; }
  for (int k = 1; k <= need; k++) {
    if ((size_t)k >= n) return -k; /* ran out: valid prefix of k bytes */
    uint8_t d = s[k];
    uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
    if (d < l || d > h) { *bad = k; return 0; }
  }
  return need + 1;
}

static uint32_t utf8_cp(const uint8_t *s, int len) {
  if (len == 1) return s[0];
  if (len == 2) return ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
  if (len == 3) return ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
  return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
         ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
}

/* Appends the lossy conversion of s[0..n) to b. When final is 0, a trailing incomplete but
 * valid prefix is not converted; *used tells how many bytes were consumed. */
static int lossy_append(buf *b, const char *s, size_t n, int final, size_t *used) {
  static const char FFFD[3] = {(char)0xef, (char)0xbf, (char)0xbd};
  const uint8_t *u = (const uint8_t *)s;
  size_t i = 0, run = 0; /* run: start of the pending valid stretch */
  while (i < n) {
    if (u[i] < 0x80) { i++; continue; }
    int bad = 0, l = utf8_seq(u + i, n - i, &bad);
    if (l > 0) { i += (size_t)l; continue; }
    if (buf_put(b, s + run, i - run)) return -1;
    if (l < 0) {
      if (!final) { *used = i; return 0; }
      bad = -l;
    }
    if (buf_put(b, FFFD, 3)) return -1;
    i += (size_t)bad;
    run = i;
  }
  if (buf_put(b, s + run, n - run)) return -1;
  *used = n;
  return 0;
}

char *q35_utf8_lossy(const char *s, size_t len, size_t *out_len) {
  buf b = {0};
  size_t used;
  if (buf_put(&b, "", 0) || lossy_append(&b, s, len, 1, &used)) {
    free(b.p);
    return NULL;
  }
  if (out_len) *out_len = b.n;
  return b.p;
}

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68 to 256, 257, ... */
static void byte_unicode_tables(uint32_t b2u[256], int16_t u2b[324]) {
  int k = 0;
  for (int i = 0; i < 324; i++) u2b[i] = -1;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + k++);
    u2b[b2u[b]] = (int16_t)b;
  }
}

/* ---- lookups -------------------------------------------------------------------------------- */

int32_t q35_tokenizer_n_vocab(const q35_tokenizer *t) { return t->n_vocab; }
q35_pre q35_tokenizer_pre(const q35_tokenizer *t) { return t->pre; }

const char *q35_token_text(const q35_tokenizer *t, int32_t id) {
  if (id < 0 || id >= t->n_vocab) return NULL;
  return t->text + t->text_off[id];
}

const char *q35_token_bytes(const q35_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab) return NULL;
  if (len) *len = t->bytes_off[id + 1] - t->bytes_off[id];
  return t->bytes + t->bytes_off[id];
}

int q35_token_type(const q35_tokenizer *t, int32_t id) {
  return id < 0 || id >= t->n_vocab ? 0 : t->type[id];
}

static int32_t text_lookup(const q35_tokenizer *t, const char *s, size_t n) {
  if (!t->text_hash) return -1;
  uint32_t h = (uint32_t)hash_bytes(s, n) & t->text_mask;
  for (;; h = (h + 1) & t->text_mask) {
    int32_t id = t->text_hash[h];
    if (id < 0) return -1;
    const char *x = t->text + t->text_off[id];
    if (t->text_off[id + 1] - t->text_off[id] - 1 == n && !memcmp(x, s, n)) return id;
  }
}

int32_t q35_token_id(const q35_tokenizer *t, const char *text) {
  return text_lookup(t, text, strlen(text));
}

int32_t q35_tokenizer_eos(const q35_tokenizer *t) { return t->eos; }
int32_t q35_tokenizer_bos(const q35_tokenizer *t) { return t->bos; }
int32_t q35_tokenizer_pad(const q35_tokenizer *t) { return t->pad; }
int32_t q35_tokenizer_im_start(const q35_tokenizer *t) { return t->im_start; }
int32_t q35_tokenizer_im_end(const q35_tokenizer *t) { return t->im_end; }
int32_t q35_tokenizer_endoftext(const q35_tokenizer *t) { return t->endoftext; }
int q35_tokenizer_add_bos(const q35_tokenizer *t) { return t->add_bos; }
const char *q35_tokenizer_chat_template(const q35_tokenizer *t) { return t->chat_template; }

int q35_tokenizer_is_eog(const q35_tokenizer *t, int32_t id) {
  return id >= 0 && (id == t->eos || id == t->im_end || id == t->endoftext);
}

void q35_tokenizer_set_special(q35_tokenizer *t, int32_t bos, int32_t eos, int32_t pad) {
  if (bos != -2) t->bos = bos;
  if (eos != -2) t->eos = eos;
  if (pad != -2) t->pad = pad;
}

/* The merge of (a, b), or NULL. */
static inline const struct pair_ent *pair_find(const q35_tokenizer *t, int32_t a, int32_t b) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  uint32_t h = (uint32_t)hash_u64(key) & t->pair_mask;
  for (;; h = (h + 1) & t->pair_mask) {
    const struct pair_ent *e = &t->pairs[h];
    if (e->key == key) return e;
    if (e->key == UINT64_MAX) return NULL;
  }
}

static inline int32_t pair_lookup(const q35_tokenizer *t, int32_t a, int32_t b) {
  const struct pair_ent *e = pair_find(t, a, b);
  return e ? e->rank : -1;
}

/* ---- building ------------------------------------------------------------------------------- */

/* A string view into the loader's source (GGUF map or parsed JSON). */
typedef struct sv {
  const char *p;
  size_t n;
} sv;

/* What the loaders collect before q35_tokenizer is finished (views, nothing copied). */
typedef struct builder {
  int32_t n;
  sv *text;         /* [n] (p == NULL: an id no token claims) */
  uint8_t *type;    /* [n] */
  uint8_t *flags;   /* [n] */
  int32_t n_merges;
  sv *merge_l, *merge_r; /* [n_merges] */
} builder;

static void builder_free(builder *b) {
  free(b->text);
  free(b->type);
  free(b->flags);
  free(b->merge_l);
  free(b->merge_r);
}

static int builder_alloc(builder *b, int32_t n, int32_t n_merges) {
  b->n = n;
  b->n_merges = n_merges;
  b->text = calloc((size_t)n, sizeof *b->text);
  b->type = calloc((size_t)n, 1);
  b->flags = calloc((size_t)n, 1);
  b->merge_l = calloc((size_t)n_merges + 1, sizeof *b->merge_l);
  b->merge_r = calloc((size_t)n_merges + 1, sizeof *b->merge_r);
  return b->text && b->type && b->flags && b->merge_l && b->merge_r ? 0 : -1;
}

static char *dupn(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

/* Split a merge "a b" at the first space after position 0 (a token may itself be " "). */
static int split_merge(const char *s, size_t n, sv *l, sv *r) {
  const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
  if (!sp) return -1;
  *l = (sv){s, (size_t)(sp - s)};
  *r = (sv){sp + 1, n - (size_t)(sp - s) - 1};
  return 0;
}

static int looks_special(const char *s) {
  size_t n = strlen(s);
  return n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

static int cmp_added(const q35_tokenizer *t, int32_t x, int32_t y) {
  const char *sx = t->text + t->text_off[x], *sy = t->text + t->text_off[y];
  if ((uint8_t)sx[0] != (uint8_t)sy[0]) return (uint8_t)sx[0] < (uint8_t)sy[0] ? -1 : 1;
  size_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
  if (lx != ly) return lx > ly ? -1 : 1;
  return x < y ? -1 : x > y;
}

static int compile_regex(q35_tokenizer *t, q35_err *err) {
  int ec;
  PCRE2_SIZE eo;
  const char *pat = t->pre == Q35_PRE_QWEN35 ? PCRE_QWEN35 : PCRE_QWEN2;
  t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  if (!t->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    return q35_seterr(err, "tokenizer: cannot compile the pre-tokenizer regex: %s (offset %zu)",
                      (const char *)msg, (size_t)eo);
  }
  pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
  return 0;
}

/* Turn the collected vocabulary into a tokenizer. `what` names the source for messages. */
static q35_tokenizer *finish(builder *b, q35_pre pre, const char *what, q35_err *err) {
  uint32_t b2u[256];
  int16_t u2b[324];
  byte_unicode_tables(b2u, u2b);
  q35_tokenizer *t = calloc(1, sizeof *t);
  buf tx = {0}, by = {0};
  if (!t) goto oom;
  t->pre = pre;
  t->nfc = 1;
  t->n_vocab = b->n;
  t->bos = t->eos = t->pad = -1;
  t->text_off = malloc(((size_t)b->n + 1) * sizeof *t->text_off);
  t->bytes_off = malloc(((size_t)b->n + 1) * sizeof *t->bytes_off);
  t->type = b->type;
  t->flags = b->flags;
  b->type = NULL;
  b->flags = NULL;
  if (!t->text_off || !t->bytes_off) goto oom;
  if (buf_put(&tx, "", 0) || buf_put(&by, "", 0)) goto oom;

  /* Vocabulary strings and their bytes. */
  for (int32_t i = 0; i < b->n; i++) {
    char padname[32];
    const char *s = b->text[i].p;
    size_t n = b->text[i].n;
    if (!s) { /* an id no token claims: the converter's padding */
      n = (size_t)snprintf(padname, sizeof padname, "[PAD%d]", i);
      s = padname;
      t->type[i] = Q35_TOKEN_UNUSED;
    }
    if (memchr(s, 0, n)) {
      q35_seterr(err, "%s: token %d contains a NUL byte", what, i);
      goto fail;
    }
    if (t->type[i] < 1 || t->type[i] > 6) {
      q35_seterr(err, "%s: token %d has an invalid token type %d (valid: 1..6)", what, i, t->type[i]);
      goto fail;
    }
    t->text_off[i] = (uint32_t)tx.n;
    if (buf_put(&tx, s, n) || buf_put(&tx, "", 1)) goto oom;
    t->bytes_off[i] = (uint32_t)by.n;
    int ty = t->type[i];
    if (ty == Q35_TOKEN_CONTROL || ty == Q35_TOKEN_USER_DEFINED) {
      if (buf_put(&by, s, n)) goto oom;
      t->flags[i] |= TOKF_ADDED;
      if (ty == Q35_TOKEN_CONTROL && !(t->flags[i] & TOKF_NOT_SPECIAL)) t->flags[i] |= TOKF_SPECIAL;
    } else if (ty != Q35_TOKEN_UNUSED) {
      /* Byte-level decode; a token with any character outside the map decodes to its own
       * UTF-8 text, as Hugging Face's ByteLevel decoder does. */
      const uint8_t *u = (const uint8_t *)s;
      size_t start = by.n;
      for (size_t k = 0; k < n;) {
        int bad, l = utf8_seq(u + k, n - k, &bad);
        if (l <= 0) {
          q35_seterr(err, "%s: token %d is not valid UTF-8", what, i);
          goto fail;
        }
        uint32_t c = utf8_cp(u + k, l);
        if (c >= 324 || u2b[c] < 0) {
          by.n = start;
          if (buf_put(&by, s, n)) goto oom;
          break;
        }
        char ch = (char)u2b[c];
        if (buf_put(&by, &ch, 1)) goto oom;
        k += (size_t)l;
      }
    }
  }
  t->text_off[b->n] = (uint32_t)tx.n;
  t->bytes_off[b->n] = (uint32_t)by.n;
  if (tx.n > UINT32_MAX || by.n > UINT32_MAX) {
    q35_seterr(err, "%s: vocabulary too large", what);
    goto fail;
  }
  t->text = tx.p;
  t->bytes = by.p;
  tx.p = by.p = NULL;

  /* text -> id (first id wins on duplicates). */
  uint32_t cap = 16;
  while (cap < 2u * (uint32_t)b->n + 16) cap *= 2;
  t->text_mask = cap - 1;
  t->text_hash = malloc(cap * sizeof *t->text_hash);
  if (!t->text_hash) goto oom;
  memset(t->text_hash, 0xff, cap * sizeof *t->text_hash);
  for (int32_t i = 0; i < b->n; i++) {
    const char *s = t->text + t->text_off[i];
    size_t n = t->text_off[i + 1] - t->text_off[i] - 1;
    if (!n) continue;
    if (text_lookup(t, s, n) >= 0) continue;
    uint32_t h = (uint32_t)hash_bytes(s, n) & t->text_mask;
    while (t->text_hash[h] >= 0) h = (h + 1) & t->text_mask;
    t->text_hash[h] = i;
  }

  /* One token per byte. */
  for (int c = 0; c < 256; c++) {
    char s[4];
    int l = put_utf8(s, b2u[c]);
    t->byte_id[c] = text_lookup(t, s, (size_t)l);
    if (t->byte_id[c] < 0) {
      q35_seterr(err, "%s: the vocabulary lacks the byte-level token for byte 0x%02x", what, c);
      goto fail;
    }
  }

  /* Merges: (a, b) -> rank; a later duplicate overrides an earlier one, as in Hugging Face. */
  t->n_merges = b->n_merges;
  t->merge_a = malloc(((size_t)b->n_merges + 1) * sizeof(int32_t));
  t->merge_b = malloc(((size_t)b->n_merges + 1) * sizeof(int32_t));
  t->merge_new = malloc(((size_t)b->n_merges + 1) * sizeof(int32_t));
  cap = 16;
  while (cap < 2u * (uint32_t)b->n_merges + 16) cap *= 2;
  t->pair_mask = cap - 1;
  t->pairs = malloc(cap * sizeof *t->pairs);
  if (!t->merge_a || !t->merge_b || !t->merge_new || !t->pairs) goto oom;
  for (uint32_t k = 0; k < cap; k++) t->pairs[k].key = UINT64_MAX;
  {
    buf cat = {0};
    for (int32_t r = 0; r < b->n_merges; r++) {
      sv l = b->merge_l[r], rr = b->merge_r[r];
      int32_t ia = text_lookup(t, l.p, l.n), ib = text_lookup(t, rr.p, rr.n);
      cat.n = 0;
      if (buf_put(&cat, l.p, l.n) || buf_put(&cat, rr.p, rr.n)) {
        free(cat.p);
        goto oom;
      }
      int32_t in = text_lookup(t, cat.p, cat.n);
      if (ia < 0 || ib < 0 || in < 0) {
        q35_seterr(err, "%s: merge %d \"%.*s %.*s\" names a token not in the vocabulary", what, r,
                   (int)(l.n > 60 ? 60 : l.n), l.p, (int)(rr.n > 60 ? 60 : rr.n), rr.p);
        free(cat.p);
        goto fail;
      }
      t->merge_a[r] = ia;
      t->merge_b[r] = ib;
      t->merge_new[r] = in;
      uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
      uint32_t h = (uint32_t)hash_u64(key) & t->pair_mask;
      while (t->pairs[h].key != UINT64_MAX && t->pairs[h].key != key) h = (h + 1) & t->pair_mask;
      t->pairs[h] = (struct pair_ent){key, r, in};
    }
    free(cat.p);
  }

  /* Added tokens, grouped by first byte, longest first. */
  t->added = malloc(((size_t)b->n + 1) * sizeof *t->added);
  if (!t->added) goto oom;
  for (int32_t i = 0; i < b->n; i++)
    if ((t->flags[i] & TOKF_ADDED) && t->text[t->text_off[i]]) t->added[t->n_added++] = i;
  for (int32_t i = 1; i < t->n_added; i++) { /* insertion sort: added tokens are few */
    int32_t x = t->added[i], j = i;
    for (; j > 0 && cmp_added(t, t->added[j - 1], x) > 0; j--) t->added[j] = t->added[j - 1];
    t->added[j] = x;
  }
  {
    int32_t k = 0;
    for (int c = 0; c <= 256; c++) {
      while (k < t->n_added && (uint8_t)t->text[t->text_off[t->added[k]]] < c) k++;
      t->added_first[c] = k;
    }
  }

  t->im_start = q35_token_id(t, "<|im_start|>");
  t->im_end = q35_token_id(t, "<|im_end|>");
  t->endoftext = q35_token_id(t, "<|endoftext|>");
  if (compile_regex(t, err)) goto fail;
  return t;

oom:
  q35_seterr(err, "%s: out of memory", what);
fail:
  free(tx.p);
  free(by.p);
  q35_tokenizer_free(t);
  return NULL;
}

void q35_tokenizer_free(q35_tokenizer *t) {
  if (!t) return;
  free(t->text);
  free(t->text_off);
  free(t->bytes);
  free(t->bytes_off);
  free(t->type);
  free(t->flags);
  free(t->text_hash);
  free(t->merge_a);
  free(t->merge_b);
  free(t->merge_new);
  free(t->pairs);
  free(t->added);
  if (t->re) pcre2_code_free(t->re);
  free(t->chat_template);
  free(t);
}

/* ---- loading from GGUF ---------------------------------------------------------------------- */

static int parse_pre_name(const char *s, size_t n, q35_pre *pre) {
  if (n == 6 && !memcmp(s, "qwen35", 6)) *pre = Q35_PRE_QWEN35;
  else if (n == 5 && !memcmp(s, "qwen2", 5)) *pre = Q35_PRE_QWEN2;
  else return -1;
  return 0;
}

static int gguf_opt_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *out, q35_err *err) {
  if (!gguf_find(f, key)) return 0;
  uint32_t v;
  if (gguf_get_u32(f, key, &v, err)) return -1;
  if (v >= (uint32_t)n_vocab)
    return q35_seterr(err, "%s: %s = %u is outside the vocabulary (%d tokens)", f->path, key, v, n_vocab);
  *out = (int32_t)v;
  return 0;
}

q35_tokenizer *q35_tokenizer_from_gguf(const gguf_file *f, q35_err *err) {
  builder b = {0};
  q35_tokenizer *t = NULL;
  gguf_str s;
  q35_pre pre;
  const char *path = f->path ? f->path : "gguf";
  if (gguf_get_str(f, "tokenizer.ggml.model", &s, err)) return NULL;
  if (!gguf_str_eq(s, "gpt2")) {
    q35_seterr(err, "%s: tokenizer.ggml.model is \"%.*s\"; q35 supports only \"gpt2\" (byte-level BPE)",
               path, (int)(s.len > 64 ? 64 : s.len), s.ptr);
    return NULL;
  }
  if (gguf_get_str(f, "tokenizer.ggml.pre", &s, err)) return NULL;
  if (parse_pre_name(s.ptr, s.len, &pre)) {
    q35_seterr(err, "%s: tokenizer.ggml.pre is \"%.*s\"; q35 supports \"qwen35\" and \"qwen2\"", path,
               (int)(s.len > 64 ? 64 : s.len), s.ptr);
    return NULL;
  }
  const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
  const gguf_kv *typ = gguf_find(f, "tokenizer.ggml.token_type");
  const gguf_kv *mer = gguf_find(f, "tokenizer.ggml.merges");
  if (!tok || tok->type != GGUF_ARRAY || tok->arr_type != GGUF_STRING) {
    q35_seterr(err, "%s: tokenizer.ggml.tokens is missing or not a string array", path);
    return NULL;
  }
  if (!typ || typ->type != GGUF_ARRAY || typ->arr_type == GGUF_STRING || typ->arr_type == GGUF_F32 ||
      typ->arr_type == GGUF_F64 || typ->arr_type == GGUF_ARRAY || typ->arr_n != tok->arr_n) {
    q35_seterr(err, "%s: tokenizer.ggml.token_type is missing, not an integer array, or its length "
               "differs from tokenizer.ggml.tokens", path);
    return NULL;
  }
  if (!mer || mer->type != GGUF_ARRAY || mer->arr_type != GGUF_STRING) {
    q35_seterr(err, "%s: tokenizer.ggml.merges is missing or not a string array", path);
    return NULL;
  }
  if (tok->arr_n < 256 || tok->arr_n > (1u << 30) || mer->arr_n > (1u << 30)) {
    q35_seterr(err, "%s: tokenizer.ggml.tokens has %llu entries (expected 256 .. 2^30)", path,
               (unsigned long long)tok->arr_n);
    return NULL;
  }
  if (builder_alloc(&b, (int32_t)tok->arr_n, (int32_t)mer->arr_n)) goto oom;
  for (int32_t i = 0; i < b.n; i++) {
    b.text[i] = (sv){tok->arr_str[i].ptr, tok->arr_str[i].len};
    int64_t ty = gguf_arr_int(typ, (uint64_t)i);
    b.type[i] = (uint8_t)(ty < 0 || ty > 6 ? 0 : ty);
  }
  for (int32_t r = 0; r < b.n_merges; r++) {
    gguf_str x = mer->arr_str[r];
    if (split_merge(x.ptr, x.len, &b.merge_l[r], &b.merge_r[r])) {
      q35_seterr(err, "%s: tokenizer.ggml.merges[%d] is not of the form \"A B\"", path, r);
      goto fail;
    }
  }
  t = finish(&b, pre, path, err);
  if (!t) goto fail;
  builder_free(&b);
  if (gguf_opt_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err) ||
      gguf_opt_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err) ||
      gguf_opt_id(f, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad, err))
    goto fail_t;
  if (gguf_find(f, "tokenizer.ggml.add_bos_token") &&
      gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err))
    goto fail_t;
  if (t->eos < 0) t->eos = t->im_end >= 0 ? t->im_end : t->endoftext;
  if (gguf_find(f, "tokenizer.chat_template")) {
    if (gguf_get_str(f, "tokenizer.chat_template", &s, err)) goto fail_t;
    if (!(t->chat_template = dupn(s.ptr, s.len))) goto oom_t;
  }
  return t;
oom:
  q35_seterr(err, "%s: out of memory", path);
fail:
  builder_free(&b);
  return NULL;
oom_t:
  q35_seterr(err, "%s: out of memory", path);
fail_t:
  q35_tokenizer_free(t);
  return NULL;
}

/* ---- loading from tokenizer.json ------------------------------------------------------------ */

/* Find the Split pre-tokenizer's regex (directly or inside a Sequence). */
static const char *find_split_regex(json_t *pt) {
  if (!json_is_object(pt)) return NULL;
  const char *type = json_string_value(json_object_get(pt, "type"));
  if (type && !strcmp(type, "Split")) {
    json_t *pat = json_object_get(pt, "pattern");
    return json_string_value(json_object_get(pat, "Regex"));
  }
  if (type && !strcmp(type, "Sequence")) {
    json_t *arr = json_object_get(pt, "pretokenizers");
    for (size_t i = 0; i < json_array_size(arr); i++) {
      const char *r = find_split_regex(json_array_get(arr, i));
      if (r) return r;
    }
  }
  return NULL;
}

/* A token named by tokenizer_config.json: either a string or {"content": ...}. */
static int32_t config_token(const q35_tokenizer *t, json_t *v) {
  if (json_is_object(v)) v = json_object_get(v, "content");
  const char *s = json_string_value(v);
  return s ? q35_token_id(t, s) : -1;
}

q35_tokenizer *q35_tokenizer_from_json(const char *path, const char *config_path, q35_err *err) {
  return q35_tokenizer_from_json_ex(path, config_path, Q35_PRE_AUTO, err);
}

q35_tokenizer *q35_tokenizer_from_json_ex(const char *path, const char *config_path, q35_pre pre,
                                          q35_err *err) {
  json_error_t je;
  builder b = {0};
  q35_tokenizer *t = NULL;
  json_t *cfg = NULL, *root = json_load_file(path, 0, &je);
  if (!root) {
    q35_seterr(err, "%s: %s (line %d)", path, je.text, je.line);
    return NULL;
  }
  json_t *model = json_object_get(root, "model");
  const char *mtype = json_string_value(json_object_get(model, "type"));
  json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
  json_t *added = json_object_get(root, "added_tokens");
  if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab) || !json_is_array(merges)) {
    q35_seterr(err, "%s: model must be BPE with a vocab object and a merges array", path);
    goto fail;
  }
  /* Normalizer: NFC (Qwen) or none. */
  json_t *norm = json_object_get(root, "normalizer");
  int nfc = 0;
  if (json_is_object(norm)) {
    const char *nt = json_string_value(json_object_get(norm, "type"));
    if (nt && !strcmp(nt, "NFC")) nfc = 1;
    else {
      q35_seterr(err, "%s: normalizer \"%s\" is not supported (only NFC or none)", path, nt ? nt : "?");
      goto fail;
    }
  }
  const char *rx = find_split_regex(json_object_get(root, "pre_tokenizer"));
  if (pre == Q35_PRE_AUTO) {
    if (rx && !strcmp(rx, HF_RE_QWEN2)) pre = Q35_PRE_QWEN2;
    else if (rx && !strcmp(rx, HF_RE_QWEN35)) pre = Q35_PRE_QWEN35;
    else {
      q35_seterr(err, "%s: the pre-tokenizer regex is neither Qwen2's nor Qwen3.5's (%.120s)", path,
                 rx ? rx : "no Split regex found");
      goto fail;
    }
  }
  /* Size: the largest id in vocab or added_tokens. */
  int64_t max_id = -1;
  const char *key;
  json_t *val;
  json_object_foreach(vocab, key, val) {
    if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 30)) {
      q35_seterr(err, "%s: vocab entry \"%.60s\" has no valid id", path, key);
      goto fail;
    }
    if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *a = json_array_get(added, i);
    json_t *id = json_object_get(a, "id");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 30) ||
        !json_is_string(json_object_get(a, "content"))) {
      q35_seterr(err, "%s: added_tokens[%zu] needs an id and a content string", path, i);
      goto fail;
    }
    if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
  }
  if (builder_alloc(&b, (int32_t)(max_id + 1), (int32_t)json_array_size(merges))) goto oom;
  json_object_foreach(vocab, key, val) {
    int64_t id = json_integer_value(val);
    b.text[id] = (sv){key, strlen(key)};
    b.type[id] = Q35_TOKEN_NORMAL;
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *a = json_array_get(added, i);
    int64_t id = json_integer_value(json_object_get(a, "id"));
    const char *content = json_string_value(json_object_get(a, "content"));
    int special = json_is_true(json_object_get(a, "special"));
    b.text[id] = (sv){content, json_string_length(json_object_get(a, "content"))};
    /* The converter's rule: special or "<|...|>" -> control, else user-defined. */
    b.type[id] = special || looks_special(content) ? Q35_TOKEN_CONTROL : Q35_TOKEN_USER_DEFINED;
    b.flags[id] = special ? TOKF_SPECIAL : TOKF_NOT_SPECIAL;
  }
  for (int32_t r = 0; r < b.n_merges; r++) {
    json_t *m = json_array_get(merges, (size_t)r);
    int ok = 0;
    if (json_is_string(m)) {
      ok = !split_merge(json_string_value(m), json_string_length(m), &b.merge_l[r], &b.merge_r[r]);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
      json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
      b.merge_l[r] = (sv){json_string_value(x), json_string_length(x)};
      b.merge_r[r] = (sv){json_string_value(y), json_string_length(y)};
      ok = 1;
    }
    if (!ok) {
      q35_seterr(err, "%s: model.merges[%d] is neither \"A B\" nor [\"A\", \"B\"]", path, r);
      goto fail;
    }
  }
  t = finish(&b, pre, path, err);
  if (!t) goto fail;
  for (int32_t i = 0; i < t->n_vocab; i++) t->flags[i] &= TOKF_SPECIAL | TOKF_ADDED;
  t->nfc = nfc;
  if (config_path) {
    cfg = json_load_file(config_path, 0, &je);
    if (!cfg) {
      q35_seterr(err, "%s: %s (line %d)", config_path, je.text, je.line);
      goto fail;
    }
    t->eos = config_token(t, json_object_get(cfg, "eos_token"));
    t->bos = config_token(t, json_object_get(cfg, "bos_token"));
    t->pad = config_token(t, json_object_get(cfg, "pad_token"));
    t->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
    const char *tpl = json_string_value(json_object_get(cfg, "chat_template"));
    if (tpl && !(t->chat_template = strdup(tpl))) goto oom;
  }
  if (t->eos < 0) t->eos = t->im_end >= 0 ? t->im_end : t->endoftext;
  builder_free(&b);
  json_decref(root);
  json_decref(cfg);
  return t;
oom:
  q35_seterr(err, "%s: out of memory", path);
fail:
  builder_free(&b);
  q35_tokenizer_free(t);
  json_decref(root);
  json_decref(cfg);
  return NULL;
}

/* ---- encoding ------------------------------------------------------------------------------- */

/* Per-call cache of piece -> ids (long texts repeat words; the tokenizer itself stays
 * immutable, so the cache lives with the call). Direct-mapped; emptied when its pools fill. */
#define WC_SLOTS 4096
#define WC_MAX_PIECE 64
#define WC_POOL_MAX (1u << 20)
typedef struct wc_ent {
  uint64_t h;
  uint32_t key_off, ids_off;
  uint16_t key_len, n_ids; /* n_ids 0: empty */
} wc_ent;

typedef struct enc_ctx {
  const q35_tokenizer *t;
  wc_ent *wc;               /* NULL: no cache (short text) */
  buf wc_keys;
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
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    int32_t *p = realloc(c->ids, cap * sizeof *p);
    if (!p) return -1;
    c->ids = p;
    c->cap = cap;
  }
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
    size_t cap = n < 64 ? 64 : n;
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
  if (n <= 24) { /* short words: a linear scan for the lowest (rank, position) beats a heap */
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
  if (buf_put(&c->wc_keys, w, n)) return 0; /* no memory: just skip caching */
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
      PCRE2_UCHAR msg[256];
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
    int bad, l = utf8_seq((const uint8_t *)text + i, len - i, &bad);
    if (l <= 0)
      return q35_seterr(err, "tokenize: the text is not valid UTF-8 (byte 0x%02x at offset %zu)",
                        (uint8_t)text[i], i);
    i += (size_t)l;
  }
  c.md = pcre2_match_data_create_from_pattern(t->re, NULL);
  c.cap = 64;
  c.ids = malloc(c.cap * sizeof *c.ids);
  if (!c.md || !c.ids) {
    pcre2_match_data_free(c.md);
    free(c.ids);
    return q35_seterr(err, "tokenize: out of memory");
  }
  if (len >= 4096) { /* worth a cache; without memory, go on without one */
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
  free(c.wc_keys.p);
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

/* ---- decoding ------------------------------------------------------------------------------- */

int q35_detokenize(const q35_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
                   size_t *len, q35_err *err) {
  buf b = {0};
  *out = NULL;
  if (buf_put(&b, "", 0)) goto oom;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_vocab) {
      free(b.p);
      return q35_seterr(err, "detokenize: token id %d at position %zu is outside the vocabulary "
                        "[0, %d)", id, i, t->n_vocab);
    }
    if ((flags & Q35_DETOK_SKIP_SPECIAL) && (t->flags[id] & TOKF_SPECIAL)) continue;
    if (buf_put(&b, t->bytes + t->bytes_off[id], t->bytes_off[id + 1] - t->bytes_off[id])) goto oom;
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
  buf in, out;
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
  if (buf_put(&d->in, d->pend, d->npend) || buf_put(&d->in, s, n) || buf_put(&d->out, "", 0)) return -1;
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

/* ---- export --------------------------------------------------------------------------------- */

int q35_tokenizer_write_gguf(const q35_tokenizer *t, gguf_writer *w, const char *pre) {
  return q35_tokenizer_write_gguf_padded(t, w, pre, 0);
}

int q35_tokenizer_write_gguf_padded(const q35_tokenizer *t, gguf_writer *w, const char *pre,
                                    int32_t n_vocab_padded) {
  q35_pre p;
  if (!pre) pre = t->pre == Q35_PRE_QWEN35 ? "qwen35" : "qwen2";
  if (parse_pre_name(pre, strlen(pre), &p)) return -1;
  int32_t n = n_vocab_padded > t->n_vocab ? n_vocab_padded : t->n_vocab;
  const char **tok = malloc((size_t)n * sizeof *tok);
  char **pads = calloc((size_t)n, sizeof *pads);
  int32_t *typ = malloc((size_t)n * sizeof *typ);
  char **mer = calloc((size_t)t->n_merges + 1, sizeof *mer);
  int rc = -1;
  if (!tok || !pads || !typ || !mer) goto done;
  for (int32_t i = 0; i < n; i++) {
    if (i < t->n_vocab) {
      tok[i] = t->text + t->text_off[i];
      typ[i] = t->type[i];
    } else {
      char s[32];
      snprintf(s, sizeof s, "[PAD%d]", i);
      if (!(pads[i] = strdup(s))) goto done;
      tok[i] = pads[i];
      typ[i] = Q35_TOKEN_UNUSED;
    }
  }
  for (int32_t r = 0; r < t->n_merges; r++) {
    const char *a = q35_token_text(t, t->merge_a[r]), *b = q35_token_text(t, t->merge_b[r]);
    size_t la = strlen(a), lb = strlen(b);
    if (!(mer[r] = malloc(la + lb + 2))) goto done;
    memcpy(mer[r], a, la);
    mer[r][la] = ' ';
    memcpy(mer[r] + la + 1, b, lb + 1);
  }
  gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
  gguf_set_str(w, "tokenizer.ggml.pre", pre);
  gguf_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
  gguf_set_arr_i32(w, "tokenizer.ggml.token_type", typ, (uint64_t)n);
  gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mer, (uint64_t)t->n_merges);
  if (t->bos >= 0) gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
  if (t->eos >= 0) gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
  if (t->pad >= 0) gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
  gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
  if (t->chat_template) gguf_set_str(w, "tokenizer.chat_template", t->chat_template);
  rc = 0;
done:
  if (pads)
    for (int32_t i = 0; i < n; i++) free(pads[i]);
  if (mer)
    for (int32_t r = 0; r < t->n_merges; r++) free(mer[r]);
  free(pads);
  free(mer);
  free(tok);
  free(typ);
  return rc;
}
