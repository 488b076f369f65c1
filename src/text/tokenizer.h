/*
 * tokenizer.h - Qwen's byte-level BPE tokenizer, matching Hugging Face `tokenizers` exactly.
 *
 * A q35_tokenizer is loaded from a GGUF file's tokenizer.* block (llama.cpp conventions) or
 * from a Hugging Face tokenizer.json (+ optional tokenizer_config.json). Once loaded it is
 * immutable: every function below that takes a `const q35_tokenizer *` may be called from any
 * number of threads at once.
 *
 * Encoding (q35_tokenize) follows Hugging Face's pipeline for Qwen2/Qwen3/Qwen3.5:
 *   1. added tokens (every control and user-defined token: "<|im_start|>", "<think>", ...)
 *      are split out of the raw text first, as whole strings, leftmost-longest;
 *   2. each remaining segment is NFC-normalized (Hugging Face's Qwen normalizer; llama.cpp
 *      applies none, q35 follows Hugging Face);
 *   3. the segment is split by the pre-tokenizer regex: "qwen2" (Qwen2, Qwen2.5, Qwen3) or
 *      "qwen35" (Qwen3.5: combining marks \p{M} join letters);
 *   4. each piece's bytes are merged by BPE rank (lowest rank first, leftmost on ties).
 * No BOS/EOS is added. The input must be valid UTF-8 (Hugging Face's Rust API takes &str, so
 * invalid input cannot reach it); invalid input is refused with an error naming the byte
 * offset, never "repaired".
 *
 * Added tokens are matched on the raw text whatever their "normalized" flag says, and their
 * single_word / lstrip / rstrip flags are not supported (Qwen's tokenizers set none of them).
 *
 * Decoding maps ids back to bytes. Normal tokens decode through the GPT-2 byte <-> unicode
 * map; control and user-defined tokens decode to their text; unused tokens (vocabulary
 * padding) decode to nothing. A token sequence need not end on a character boundary, so the
 * raw decode may hold incomplete or invalid UTF-8. The lossy form (and the streaming
 * decoder) replaces each maximal invalid subpart by U+FFFD exactly like Rust's
 * String::from_utf8_lossy, which is what Hugging Face's decode returns.
 */
#ifndef Q35_TOKENIZER_H
#define Q35_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "q35.h"

typedef struct q35_tokenizer q35_tokenizer;

/* Token types (GGUF tokenizer.ggml.token_type values). */
enum {
  Q35_TOKEN_NORMAL = 1,
  Q35_TOKEN_UNKNOWN = 2,
  Q35_TOKEN_CONTROL = 3,      /* special added tokens: <|im_start|>, <|endoftext|>, ... */
  Q35_TOKEN_USER_DEFINED = 4, /* non-special added tokens: <think>, <tool_call>, ... */
  Q35_TOKEN_UNUSED = 5,       /* vocabulary padding ([PAD...]) */
  Q35_TOKEN_BYTE = 6,
};

/* Pre-tokenizer regex variants. */
typedef enum q35_pre {
  Q35_PRE_AUTO = 0,   /* from_json: detect from the file's regex */
  Q35_PRE_QWEN2 = 1,  /* "qwen2": Qwen2 / Qwen2.5 / Qwen3 */
  Q35_PRE_QWEN35 = 2, /* "qwen35": Qwen3.5 */
} q35_pre;

/* ---- loading ------------------------------------------------------------------------------ */

/* From an open GGUF (only the metadata is read; the file may be closed afterwards: everything
 * is copied). Needs tokenizer.ggml.model = "gpt2", tokens, token_type, merges, and
 * tokenizer.ggml.pre "qwen35" or "qwen2" (others are refused, naming the value). */
q35_tokenizer *q35_tokenizer_from_gguf(const gguf_file *f, q35_err *err);

/* From Hugging Face files. tokenizer_config_path may be NULL; when given it supplies the
 * eos/pad/bos tokens, add_bos_token and the chat template. The regex variant is detected
 * from the pre_tokenizer's Split regex (error if it is neither Qwen regex). */
q35_tokenizer *q35_tokenizer_from_json(const char *tokenizer_json_path,
                                       const char *tokenizer_config_path_or_NULL, q35_err *err);
/* Same with an explicit regex variant (Q35_PRE_AUTO = detect). */
q35_tokenizer *q35_tokenizer_from_json_ex(const char *tokenizer_json_path,
                                          const char *tokenizer_config_path_or_NULL,
                                          q35_pre pre, q35_err *err);

void q35_tokenizer_free(q35_tokenizer *t);

/* ---- encoding ----------------------------------------------------------------------------- */

/* Text (len bytes, need not be NUL-terminated) to ids. *ids is malloc'ed (free() it; never NULL
 * on success, even for empty text), *n its length. Returns 0, or -1 for invalid UTF-8 or out
 * of memory. */
int q35_tokenize(const q35_tokenizer *t, const char *text, size_t len, int32_t **ids, int32_t *n,
                 q35_err *err);

/* ---- decoding ----------------------------------------------------------------------------- */

#define Q35_DETOK_SKIP_SPECIAL 1 /* drop control tokens (like HF skip_special_tokens) */
#define Q35_DETOK_LOSSY 2        /* replace invalid UTF-8 by U+FFFD (HF decode's result) */

/* Ids to bytes. *out is malloc'ed and NUL-terminated (the text itself may contain NULs; use
 * *len). An id outside [0, n_vocab) is an error naming it. */
int q35_detokenize(const q35_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
                   size_t *len, q35_err *err);

/* Replace invalid UTF-8 like Rust's String::from_utf8_lossy. Returns a malloc'ed,
 * NUL-terminated string (NULL when out of memory). */
char *q35_utf8_lossy(const char *s, size_t len, size_t *out_len);

/* Streaming decoder: feed ids one at a time; each call yields the newly completed text, which
 * is always valid UTF-8. Bytes that may still become a character (a valid prefix of a
 * multi-byte sequence, at most 3 bytes) are held back; a byte sequence that can no longer
 * become valid is emitted as U+FFFD (one per maximal invalid subpart, as from_utf8_lossy).
 * q35_detok_flush emits what is held (an incomplete sequence becomes one U+FFFD), so the
 * concatenation of all outputs + flush equals q35_detokenize(..., Q35_DETOK_LOSSY). */
typedef struct q35_detok q35_detok;
q35_detok *q35_detok_new(const q35_tokenizer *t, int flags); /* flags: Q35_DETOK_SKIP_SPECIAL */
/* *out points into the decoder (valid until the next call), *len may be 0. */
int q35_detok_feed(q35_detok *d, int32_t id, const char **out, size_t *len, q35_err *err);
void q35_detok_flush(q35_detok *d, const char **out, size_t *len);
void q35_detok_reset(q35_detok *d);
void q35_detok_free(q35_detok *d);

/* ---- vocabulary --------------------------------------------------------------------------- */

int32_t q35_tokenizer_n_vocab(const q35_tokenizer *t);
q35_pre q35_tokenizer_pre(const q35_tokenizer *t);
/* The token's vocabulary string (byte-level form for normal tokens, e.g. "Ġthe"), NUL-terminated;
 * NULL for an id out of range. */
const char *q35_token_text(const q35_tokenizer *t, int32_t id);
/* The bytes the token decodes to (not NUL-terminated); NULL for an id out of range. */
const char *q35_token_bytes(const q35_tokenizer *t, int32_t id, size_t *len);
int q35_token_type(const q35_tokenizer *t, int32_t id); /* Q35_TOKEN_*, 0 when out of range */
/* Id of a vocabulary string (as q35_token_text gives it), or -1. */
int32_t q35_token_id(const q35_tokenizer *t, const char *text);

/* Special ids (-1 when unknown). eos: tokenizer.ggml.eos_token_id / tokenizer_config eos_token,
 * else <|im_end|>, else <|endoftext|>. */
int32_t q35_tokenizer_eos(const q35_tokenizer *t);
int32_t q35_tokenizer_bos(const q35_tokenizer *t);
int32_t q35_tokenizer_pad(const q35_tokenizer *t);
int32_t q35_tokenizer_im_start(const q35_tokenizer *t);
int32_t q35_tokenizer_im_end(const q35_tokenizer *t);
int32_t q35_tokenizer_endoftext(const q35_tokenizer *t);
/* End of generation: eos, <|im_end|> or <|endoftext|>. */
int q35_tokenizer_is_eog(const q35_tokenizer *t, int32_t id);
int q35_tokenizer_add_bos(const q35_tokenizer *t); /* tokenizer.ggml.add_bos_token (default 0) */
/* Chat template (tokenizer.chat_template or tokenizer_config's), or NULL. */
const char *q35_tokenizer_chat_template(const q35_tokenizer *t);
/* Override special ids (e.g. from config.json's bos_token_id); -2 leaves one unchanged. */
void q35_tokenizer_set_special(q35_tokenizer *t, int32_t bos, int32_t eos, int32_t pad);

/* ---- export ------------------------------------------------------------------------------- */

/* Write the tokenizer.* block as llama.cpp's converter does: model "gpt2", pre (NULL: this
 * tokenizer's variant name), tokens, token_type, merges, eos/padding/bos ids (those known),
 * add_bos_token false, chat_template when known. Returns 0, or -1 for an unknown pre. */
int q35_tokenizer_write_gguf(const q35_tokenizer *t, gguf_writer *w, const char *pre);
/* Same, padding the vocabulary to n_vocab_padded tokens ("[PAD<id>]", type unused), as the
 * converter does when config.json's vocab_size exceeds the tokenizer's (0 = no padding). */
int q35_tokenizer_write_gguf_padded(const q35_tokenizer *t, gguf_writer *w, const char *pre,
                                    int32_t n_vocab_padded);

#endif
