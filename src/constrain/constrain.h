/*
 * constrain.h - what the engine's step and the tests use of the constraint engine beyond the
 * public API (include/q35.h).
 */
#ifndef Q35_CONSTRAIN_H
#define Q35_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "q35.h"

/* The current mask without a copy (valid until the next call on c); NULL when out of memory. */
const uint32_t *q35_constraint_mask_ref(q35_constraint *c);
/* The mask by brute force (every token stepped byte by byte): the reference twin of the trie
 * walk. 0, or -1 when out of memory. */
int q35_constraint_mask_reference(q35_constraint *c, uint32_t *mask);
/* Bytes held by the constraint's own store (matcher, history, masks). */
size_t q35_constraint_bytes(const q35_constraint *c);
/* The vocabulary of a loaded tokenizer, n_vocab tokens (ids past the tokenizer's are never
 * allowed: padding). */
struct q35_tokenizer;
q35_constraint_vocab *q35_constraint_vocab_from_tok(const struct q35_tokenizer *t, int32_t n_vocab, q35_err *err);
/* A vocabulary from byte strings: kind[i] 0 a normal token, 1 end of generation, 2 never. */
q35_constraint_vocab *q35_constraint_vocab_from_bytes(int32_t n, const char *const *bytes, const size_t *lens,
                                                      const uint8_t *kind, q35_err *err);
/* The vocabulary size of a constraint. */
int32_t q35_constraint_n_vocab(const q35_constraint *c);

#endif
