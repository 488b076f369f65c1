/*
 * tokenizer_internal.h - the tokenizer's data structures, shared by its files (tokenizer.h is the
 * public face). Byte-level BPE (Qwen2 / Qwen3 / Qwen3.5), bit-exact with Hugging Face.
 *
 *   tokenizer.c          lookups by id and text, UTF-8 validation, free;
 *   tokenizer_load.c     loading from GGUF or tokenizer.json into one builder, building the
 *                        tables (finish), the pre-tokenizer regexes, export to GGUF;
 *   tokenizer_encode.c   added-token matching, NFC, the pre-tokenizer, BPE (q35_tokenize);
 *   tokenizer_decode.c   ids to bytes, lossy UTF-8, the streaming decoder.
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
#ifndef Q35_TOKENIZER_INTERNAL_H
#define Q35_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

#define PCRE_MSG_MAX 256 /* bytes of a PCRE2 error message */

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
/* FNV-1a over bytes, folded: the text -> id hash and the encoder's piece cache. */
static inline uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}


/* The pair table's hash of (a << 32 | b). */
static inline uint64_t hash_u64(uint64_t k) {
  k *= 0x9e3779b97f4a7c15ull;
  return k ^ (k >> 32);
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

/* The rank of the merge of (a, b), or -1. */
static inline int32_t pair_lookup(const q35_tokenizer *t, int32_t a, int32_t b) {
  const struct pair_ent *e = pair_find(t, a, b);
  return e ? e->rank : -1;
}

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), 0 when invalid, or -k when the k bytes
 * available are a valid but incomplete prefix (only when they run to the end). For an invalid
 * sequence *bad is the length of its maximal subpart (>= 1), as from_utf8_lossy replaces. */
static inline int tok_utf8_seq(const uint8_t *s, size_t n, int *bad) {
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
/* The id whose vocabulary text is s[0..n), or -1. */
int32_t tok_text_lookup(const q35_tokenizer *t, const char *s, size_t n);

#endif
