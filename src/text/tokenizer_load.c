/*
 * tokenizer_load.c - building a tokenizer: the GGUF and tokenizer.json loaders collect views of
 * the vocabulary and merges into a builder, finish() turns it into the tables of
 * tokenizer_internal.h (vocabulary text and bytes, text hash, byte ids, merge pairs, added
 * tokens) and compiles the pre-tokenizer regex; and the way back, the tokenizer as GGUF keys.
 */
#include "text/tokenizer_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "format/gguf_names.h"

/* GPT-2's byte alphabet: the 256 bytes map to code points below 256 + 68 (bytes_to_unicode). */
#define BYTE_ALPHABET 324
#define HASH_MIN_SLOTS 16      /* the smallest open-addressing table */
#define VOCAB_MAX (1u << 30)   /* tokens or merges a loader accepts */
#define PAD_NAME_MAX 32        /* "[PAD<id>]" */
#define MSG_QUOTE_MAX 60       /* bytes of a token quoted in an error message */
#define MSG_NAME_MAX 64        /* bytes of a GGUF string value quoted in an error message */
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
static uint32_t utf8_cp(const uint8_t *s, int len) {
  if (len == 1) return s[0];
  if (len == 2) return ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
  if (len == 3) return ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
  return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
         ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
}
/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68 to 256, 257, ... */
static void byte_unicode_tables(uint32_t b2u[256], int16_t u2b[BYTE_ALPHABET]) {
  int k = 0;
  for (int i = 0; i < BYTE_ALPHABET; i++) u2b[i] = -1;
  for (int b = 0; b < 256; b++) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + k++);
    u2b[b2u[b]] = (int16_t)b;
  }
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
    PCRE2_UCHAR msg[PCRE_MSG_MAX];
    pcre2_get_error_message(ec, msg, sizeof msg);
    return q35_seterr(err, "tokenizer: cannot compile the pre-tokenizer regex: %s (offset %zu)",
                      (const char *)msg, (size_t)eo);
  }
  pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
  return 0;
}

/* Vocabulary strings (t->text) and the bytes each token decodes to (t->bytes), by id. Returns 0,
 * -1 with err set, or -2 when out of memory. */
static int build_strings(q35_tokenizer *t, const builder *b, const int16_t u2b[BYTE_ALPHABET],
                         const char *what, q35_err *err) {
  q35_buf tx = {0}, by = {0};
  q35_buf_add(&tx, "", 0);
  q35_buf_add(&by, "", 0);
  for (int32_t i = 0; i < b->n && !tx.oom && !by.oom; i++) {
    char padname[PAD_NAME_MAX];
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
    if (t->type[i] < Q35_TOKEN_NORMAL || t->type[i] > Q35_TOKEN_BYTE) {
      q35_seterr(err, "%s: token %d has an invalid token type %d (valid: 1..6)", what, i, t->type[i]);
      goto fail;
    }
    t->text_off[i] = (uint32_t)tx.n;
    q35_buf_add(&tx, s, n);
    q35_buf_add(&tx, "", 1);
    t->bytes_off[i] = (uint32_t)by.n;
    int ty = t->type[i];
    if (ty == Q35_TOKEN_CONTROL || ty == Q35_TOKEN_USER_DEFINED) {
      q35_buf_add(&by, s, n);
      t->flags[i] |= TOKF_ADDED;
      if (ty == Q35_TOKEN_CONTROL && !(t->flags[i] & TOKF_NOT_SPECIAL)) t->flags[i] |= TOKF_SPECIAL;
    } else if (ty != Q35_TOKEN_UNUSED) {
      /* Byte-level decode; a token with any character outside the map decodes to its own
       * UTF-8 text, as Hugging Face's ByteLevel decoder does. */
      const uint8_t *u = (const uint8_t *)s;
      size_t start = by.n;
      for (size_t k = 0; k < n;) {
        int bad, l = tok_utf8_seq(u + k, n - k, &bad);
        if (l <= 0) {
          q35_seterr(err, "%s: token %d is not valid UTF-8", what, i);
          goto fail;
        }
        uint32_t c = utf8_cp(u + k, l);
        if (c >= BYTE_ALPHABET || u2b[c] < 0) {
          by.n = start;
          q35_buf_add(&by, s, n);
          break;
        }
        q35_buf_char(&by, (char)u2b[c]);
        k += (size_t)l;
      }
    }
  }
  if (tx.oom || by.oom) {
    q35_buf_free(&tx);
    q35_buf_free(&by);
    return -2;
  }
  t->text_off[b->n] = (uint32_t)tx.n;
  t->bytes_off[b->n] = (uint32_t)by.n;
  if (tx.n > UINT32_MAX || by.n > UINT32_MAX) {
    q35_seterr(err, "%s: vocabulary too large", what);
    goto fail;
  }
  t->text = q35_buf_take(&tx, NULL);
  t->bytes = q35_buf_take(&by, NULL);
  return 0;
fail:
  q35_buf_free(&tx);
  q35_buf_free(&by);
  return -1;
}

/* The smallest power of two >= 2 n + HASH_MIN_SLOTS: open-addressing tables stay at most half full. */
static uint32_t hash_slots(int32_t n) {
  uint32_t cap = HASH_MIN_SLOTS;
  while (cap < 2u * (uint32_t)n + HASH_MIN_SLOTS) cap *= 2;
  return cap;
}

/* text -> id (first id wins on duplicates). */
static int build_text_hash(q35_tokenizer *t) {
  uint32_t cap = hash_slots(t->n_vocab);
  t->text_mask = cap - 1;
  t->text_hash = malloc(cap * sizeof *t->text_hash);
  if (!t->text_hash) return -1;
  memset(t->text_hash, 0xff, cap * sizeof *t->text_hash);
  for (int32_t i = 0; i < t->n_vocab; i++) {
    const char *s = t->text + t->text_off[i];
    size_t n = t->text_off[i + 1] - t->text_off[i] - 1;
    if (!n) continue;
    if (tok_text_lookup(t, s, n) >= 0) continue;
    uint32_t h = (uint32_t)hash_bytes(s, n) & t->text_mask;
    while (t->text_hash[h] >= 0) h = (h + 1) & t->text_mask;
    t->text_hash[h] = i;
  }
  return 0;
}

/* Merges: (a, b) -> rank; a later duplicate overrides an earlier one, as in Hugging Face.
 * Returns 0, -1 with err set, or -2 when out of memory. */
static int build_merges(q35_tokenizer *t, const builder *b, const char *what, q35_err *err) {
  t->n_merges = b->n_merges;
  t->merge_a = malloc(((size_t)b->n_merges + 1) * sizeof(int32_t));
  t->merge_b = malloc(((size_t)b->n_merges + 1) * sizeof(int32_t));
  t->merge_new = malloc(((size_t)b->n_merges + 1) * sizeof(int32_t));
  uint32_t cap = hash_slots(b->n_merges);
  t->pair_mask = cap - 1;
  t->pairs = malloc(cap * sizeof *t->pairs);
  if (!t->merge_a || !t->merge_b || !t->merge_new || !t->pairs) return -2;
  for (uint32_t k = 0; k < cap; k++) t->pairs[k].key = UINT64_MAX;
  q35_buf cat = {0};
  for (int32_t r = 0; r < b->n_merges; r++) {
    sv l = b->merge_l[r], rr = b->merge_r[r];
    int32_t ia = tok_text_lookup(t, l.p, l.n), ib = tok_text_lookup(t, rr.p, rr.n);
    cat.n = 0;
    if (q35_buf_add(&cat, l.p, l.n) || q35_buf_add(&cat, rr.p, rr.n)) {
      q35_buf_free(&cat);
      return -2;
    }
    int32_t in = tok_text_lookup(t, cat.p, cat.n);
    if (ia < 0 || ib < 0 || in < 0) {
      q35_seterr(err, "%s: merge %d \"%.*s %.*s\" names a token not in the vocabulary", what, r,
                 (int)(l.n > MSG_QUOTE_MAX ? MSG_QUOTE_MAX : l.n), l.p,
                 (int)(rr.n > MSG_QUOTE_MAX ? MSG_QUOTE_MAX : rr.n), rr.p);
      q35_buf_free(&cat);
      return -1;
    }
    t->merge_a[r] = ia;
    t->merge_b[r] = ib;
    t->merge_new[r] = in;
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    uint32_t h = (uint32_t)hash_u64(key) & t->pair_mask;
    while (t->pairs[h].key != UINT64_MAX && t->pairs[h].key != key) h = (h + 1) & t->pair_mask;
    t->pairs[h] = (struct pair_ent){key, r, in};
  }
  q35_buf_free(&cat);
  return 0;
}

/* Added tokens, grouped by first byte, longest first. */
static int build_added(q35_tokenizer *t) {
  t->added = malloc(((size_t)t->n_vocab + 1) * sizeof *t->added);
  if (!t->added) return -1;
  for (int32_t i = 0; i < t->n_vocab; i++)
    if ((t->flags[i] & TOKF_ADDED) && t->text[t->text_off[i]]) t->added[t->n_added++] = i;
  for (int32_t i = 1; i < t->n_added; i++) { /* insertion sort: added tokens are few */
    int32_t x = t->added[i], j = i;
    for (; j > 0 && cmp_added(t, t->added[j - 1], x) > 0; j--) t->added[j] = t->added[j - 1];
    t->added[j] = x;
  }
  int32_t k = 0;
  for (int c = 0; c <= 256; c++) {
    while (k < t->n_added && (uint8_t)t->text[t->text_off[t->added[k]]] < c) k++;
    t->added_first[c] = k;
  }
  return 0;
}

/* Turn the collected vocabulary into a tokenizer. `what` names the source for messages. */
static q35_tokenizer *finish(builder *b, q35_pre pre, const char *what, q35_err *err) {
  uint32_t b2u[256];
  int16_t u2b[BYTE_ALPHABET];
  byte_unicode_tables(b2u, u2b);
  q35_tokenizer *t = calloc(1, sizeof *t);
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
  int rc = build_strings(t, b, u2b, what, err);
  if (rc == -2) goto oom;
  if (rc) goto fail;
  if (build_text_hash(t)) goto oom;
  for (int c = 0; c < 256; c++) { /* one token per byte */
    char s[4];
    int l = put_utf8(s, b2u[c]);
    t->byte_id[c] = tok_text_lookup(t, s, (size_t)l);
    if (t->byte_id[c] < 0) {
      q35_seterr(err, "%s: the vocabulary lacks the byte-level token for byte 0x%02x", what, c);
      goto fail;
    }
  }
  rc = build_merges(t, b, what, err);
  if (rc == -2) goto oom;
  if (rc) goto fail;
  if (build_added(t)) goto oom;
  t->im_start = q35_token_id(t, "<|im_start|>");
  t->im_end = q35_token_id(t, "<|im_end|>");
  t->endoftext = q35_token_id(t, "<|endoftext|>");
  if (compile_regex(t, err)) goto fail;
  return t;

oom:
  q35_seterr(err, "%s: out of memory", what);
fail:
  q35_tokenizer_free(t);
  return NULL;
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
  if (gguf_get_str(f, q35_gguf_key(Q35_KEY_TOKENIZER_MODEL, NULL).s, &s, err)) return NULL;
  if (!gguf_str_eq(s, "gpt2")) {
    q35_seterr(err, "%s: tokenizer.ggml.model is \"%.*s\"; q35 supports only \"gpt2\" (byte-level BPE)",
               path, (int)(s.len > MSG_NAME_MAX ? MSG_NAME_MAX : s.len), s.ptr);
    return NULL;
  }
  if (gguf_get_str(f, q35_gguf_key(Q35_KEY_TOKENIZER_PRE, NULL).s, &s, err)) return NULL;
  if (parse_pre_name(s.ptr, s.len, &pre)) {
    q35_seterr(err, "%s: tokenizer.ggml.pre is \"%.*s\"; q35 supports \"qwen35\" and \"qwen2\"", path,
               (int)(s.len > MSG_NAME_MAX ? MSG_NAME_MAX : s.len), s.ptr);
    return NULL;
  }
  const gguf_kv *tok = gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_TOKENS, NULL).s);
  const gguf_kv *typ = gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_TOKEN_TYPE, NULL).s);
  const gguf_kv *mer = gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_MERGES, NULL).s);
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
  if (tok->arr_n < 256 || tok->arr_n > VOCAB_MAX || mer->arr_n > VOCAB_MAX) {
    q35_seterr(err, "%s: tokenizer.ggml.tokens has %llu entries (expected 256 .. 2^30)", path,
               (unsigned long long)tok->arr_n);
    return NULL;
  }
  if (builder_alloc(&b, (int32_t)tok->arr_n, (int32_t)mer->arr_n)) goto oom;
  for (int32_t i = 0; i < b.n; i++) {
    b.text[i] = (sv){tok->arr_str[i].ptr, tok->arr_str[i].len};
    int64_t ty = gguf_arr_int(typ, (uint64_t)i);
    b.type[i] = (uint8_t)(ty < 0 || ty > Q35_TOKEN_BYTE ? 0 : ty);
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
  if (gguf_opt_id(f, q35_gguf_key(Q35_KEY_TOKENIZER_EOS_ID, NULL).s, t->n_vocab, &t->eos, err) ||
      gguf_opt_id(f, q35_gguf_key(Q35_KEY_TOKENIZER_BOS_ID, NULL).s, t->n_vocab, &t->bos, err) ||
      gguf_opt_id(f, q35_gguf_key(Q35_KEY_TOKENIZER_PAD_ID, NULL).s, t->n_vocab, &t->pad, err))
    goto fail_t;
  if (gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_ADD_BOS, NULL).s) &&
      gguf_get_bool(f, q35_gguf_key(Q35_KEY_TOKENIZER_ADD_BOS, NULL).s, &t->add_bos, err))
    goto fail_t;
  if (t->eos < 0) t->eos = t->im_end >= 0 ? t->im_end : t->endoftext;
  if (gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_CHAT_TEMPLATE, NULL).s)) {
    if (gguf_get_str(f, q35_gguf_key(Q35_KEY_TOKENIZER_CHAT_TEMPLATE, NULL).s, &s, err)) goto fail_t;
    if (!(t->chat_template = q35_strndup(s.ptr, s.len))) goto oom_t;
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

/* The normalizer (NFC or none) and the pre-tokenizer variant of tokenizer.json's root. */
static int json_model_kind(json_t *root, const char *path, int *nfc, q35_pre *pre, q35_err *err) {
  json_t *norm = json_object_get(root, "normalizer");
  *nfc = 0;
  if (json_is_object(norm)) {
    const char *nt = json_string_value(json_object_get(norm, "type"));
    if (nt && !strcmp(nt, "NFC")) *nfc = 1;
    else return q35_seterr(err, "%s: normalizer \"%s\" is not supported (only NFC or none)", path, nt ? nt : "?");
  }
  const char *rx = find_split_regex(json_object_get(root, "pre_tokenizer"));
  if (*pre == Q35_PRE_AUTO) {
    if (rx && !strcmp(rx, HF_RE_QWEN2)) *pre = Q35_PRE_QWEN2;
    else if (rx && !strcmp(rx, HF_RE_QWEN35)) *pre = Q35_PRE_QWEN35;
    else
      return q35_seterr(err, "%s: the pre-tokenizer regex is neither Qwen2's nor Qwen3.5's (%.120s)", path,
                        rx ? rx : "no Split regex found");
  }
  return 0;
}

/* The vocabulary size: the largest id in vocab or added_tokens, plus one; -1 with err set. */
static int64_t json_vocab_size(json_t *vocab, json_t *added, const char *path, q35_err *err) {
  int64_t max_id = -1;
  const char *key;
  json_t *val;
  json_object_foreach(vocab, key, val) {
    if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= VOCAB_MAX) {
      q35_seterr(err, "%s: vocab entry \"%.60s\" has no valid id", path, key);
      return -1;
    }
    if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *a = json_array_get(added, i);
    json_t *id = json_object_get(a, "id");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= VOCAB_MAX ||
        !json_is_string(json_object_get(a, "content"))) {
      q35_seterr(err, "%s: added_tokens[%zu] needs an id and a content string", path, i);
      return -1;
    }
    if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
  }
  return max_id + 1;
}

/* vocab, added_tokens and merges into the builder (allocated for them). */
static int json_collect(builder *b, json_t *vocab, json_t *added, json_t *merges, const char *path,
                        q35_err *err) {
  const char *key;
  json_t *val;
  json_object_foreach(vocab, key, val) {
    int64_t id = json_integer_value(val);
    b->text[id] = (sv){key, strlen(key)};
    b->type[id] = Q35_TOKEN_NORMAL;
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *a = json_array_get(added, i);
    int64_t id = json_integer_value(json_object_get(a, "id"));
    const char *content = json_string_value(json_object_get(a, "content"));
    int special = json_is_true(json_object_get(a, "special"));
    b->text[id] = (sv){content, json_string_length(json_object_get(a, "content"))};
    /* The converter's rule: special or "<|...|>" -> control, else user-defined. */
    b->type[id] = special || looks_special(content) ? Q35_TOKEN_CONTROL : Q35_TOKEN_USER_DEFINED;
    b->flags[id] = special ? TOKF_SPECIAL : TOKF_NOT_SPECIAL;
  }
  for (int32_t r = 0; r < b->n_merges; r++) {
    json_t *m = json_array_get(merges, (size_t)r);
    int ok = 0;
    if (json_is_string(m)) {
      ok = !split_merge(json_string_value(m), json_string_length(m), &b->merge_l[r], &b->merge_r[r]);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
      json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
      b->merge_l[r] = (sv){json_string_value(x), json_string_length(x)};
      b->merge_r[r] = (sv){json_string_value(y), json_string_length(y)};
      ok = 1;
    }
    if (!ok) return q35_seterr(err, "%s: model.merges[%d] is neither \"A B\" nor [\"A\", \"B\"]", path, r);
  }
  return 0;
}

/* The special tokens, add_bos and chat template of tokenizer_config.json. 0, -1 with err set,
 * or -2 when out of memory. */
static int json_config(q35_tokenizer *t, const char *config_path, q35_err *err) {
  json_error_t je;
  json_t *cfg = json_load_file(config_path, 0, &je);
  if (!cfg) return q35_seterr(err, "%s: %s (line %d)", config_path, je.text, je.line);
  t->eos = config_token(t, json_object_get(cfg, "eos_token"));
  t->bos = config_token(t, json_object_get(cfg, "bos_token"));
  t->pad = config_token(t, json_object_get(cfg, "pad_token"));
  t->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
  const char *tpl = json_string_value(json_object_get(cfg, "chat_template"));
  int rc = tpl && !(t->chat_template = strdup(tpl)) ? -2 : 0;
  json_decref(cfg);
  return rc;
}

q35_tokenizer *q35_tokenizer_from_json_ex(const char *path, const char *config_path, q35_pre pre,
                                          q35_err *err) {
  json_error_t je;
  builder b = {0};
  q35_tokenizer *t = NULL;
  json_t *root = json_load_file(path, 0, &je);
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
  int nfc;
  if (json_model_kind(root, path, &nfc, &pre, err)) goto fail;
  int64_t n = json_vocab_size(vocab, added, path, err);
  if (n < 0) goto fail;
  if (builder_alloc(&b, (int32_t)n, (int32_t)json_array_size(merges))) goto oom;
  if (json_collect(&b, vocab, added, merges, path, err)) goto fail;
  t = finish(&b, pre, path, err);
  if (!t) goto fail;
  for (int32_t i = 0; i < t->n_vocab; i++) t->flags[i] &= TOKF_SPECIAL | TOKF_ADDED;
  t->nfc = nfc;
  if (config_path) {
    int rc = json_config(t, config_path, err);
    if (rc == -2) goto oom;
    if (rc) goto fail;
  }
  if (t->eos < 0) t->eos = t->im_end >= 0 ? t->im_end : t->endoftext;
  builder_free(&b);
  json_decref(root);
  return t;
oom:
  q35_seterr(err, "%s: out of memory", path);
fail:
  builder_free(&b);
  q35_tokenizer_free(t);
  json_decref(root);
  return NULL;
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
      char s[PAD_NAME_MAX];
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
  gguf_set_str(w, q35_gguf_key(Q35_KEY_TOKENIZER_MODEL, NULL).s, "gpt2");
  gguf_set_str(w, q35_gguf_key(Q35_KEY_TOKENIZER_PRE, NULL).s, pre);
  gguf_set_arr_str(w, q35_gguf_key(Q35_KEY_TOKENIZER_TOKENS, NULL).s, tok, (uint64_t)n);
  gguf_set_arr_i32(w, q35_gguf_key(Q35_KEY_TOKENIZER_TOKEN_TYPE, NULL).s, typ, (uint64_t)n);
  gguf_set_arr_str(w, q35_gguf_key(Q35_KEY_TOKENIZER_MERGES, NULL).s, (const char *const *)mer, (uint64_t)t->n_merges);
  if (t->bos >= 0) gguf_set_u32(w, q35_gguf_key(Q35_KEY_TOKENIZER_BOS_ID, NULL).s, (uint32_t)t->bos);
  if (t->eos >= 0) gguf_set_u32(w, q35_gguf_key(Q35_KEY_TOKENIZER_EOS_ID, NULL).s, (uint32_t)t->eos);
  if (t->pad >= 0) gguf_set_u32(w, q35_gguf_key(Q35_KEY_TOKENIZER_PAD_ID, NULL).s, (uint32_t)t->pad);
  gguf_set_bool(w, q35_gguf_key(Q35_KEY_TOKENIZER_ADD_BOS, NULL).s, t->add_bos);
  if (t->chat_template) gguf_set_str(w, q35_gguf_key(Q35_KEY_TOKENIZER_CHAT_TEMPLATE, NULL).s, t->chat_template);
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
