/*
 * tokenizer.c - the tokenizer's lookups (by id, by text, the special ids) and q35_tokenizer_free.
 * The data structures, and the helpers the other tokenizer files share inline (hashes, the merge
 * table probe, UTF-8 validation), are in tokenizer_internal.h.
 */
#include "text/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

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

int32_t tok_text_lookup(const q35_tokenizer *t, const char *s, size_t n) {
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
  return tok_text_lookup(t, text, strlen(text));
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
