/*
 * grammar.h - the constraint engine's internal pieces (public API: the constraint section of
 * include/q35.h; languages and policies: docs/CONSTRAIN.md).
 *
 * One grammar form serves every language: a context-free grammar over BYTES whose terminals
 * are byte classes (256-bit sets). Every front end produces GBNF text (llama.cpp's grammar
 * syntax), and the one GBNF parser (gbnf.c) compiles it into this form:
 *   regex.c    a regular expression -> a GBNF expression
 *   schema.c   a JSON Schema (or free JSON) -> a GBNF grammar
 * GBNF character classes and literals are Unicode code points; the parser turns each into
 * byte sequences of valid UTF-8 (utf8.c), so the matcher never sees a code point and a
 * character split across tokens needs no special case.
 *
 * The compiled grammar is flat code: each rule is a list of alternatives, each alternative a
 * run of elements (a byte class or a rule reference) ended by END. A position is an index into
 * that code.
 *
 * The matcher (matcher.c) is a pushdown automaton over that code, with sets of stacks (as
 * llama.cpp's grammar sampler works, but interned): a stack is a linked list of positions
 * whose top is always a byte-class element; stacks are hash-consed nodes (pos, parent), so a
 * set of stacks is a sorted array of node ids, itself interned as a STATE. A state's byte
 * transitions are cached in a dense table, so the matcher lazily builds a DFA over the
 * automaton's configurations: advancing a byte already seen from a state is one array read.
 * Node 0 is the empty stack: a state holding it is complete (the language accepts here).
 * A reference in tail position reuses its caller's return node, so right recursion (every
 * repetition compiles to it) keeps stacks bounded; left recursion is refused at compile time.
 *
 * Masks (mask.c): the vocabulary's token byte strings form a trie in preorder; a mask walks it
 * from a state through the transition tables, skipping each subtree whose prefix the state
 * refuses. Masks are cached per state.
 */
#ifndef Q35_CONSTRAIN_GRAMMAR_H
#define Q35_CONSTRAIN_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "q35.h"

/* ---- compiled grammar ---------------------------------------------------------------------- */

enum { CN_END = 0, CN_CLASS = 1, CN_REF = 2 };

typedef struct cn_elem {
  uint8_t kind;  /* CN_END, CN_CLASS, CN_REF */
  int32_t arg;   /* class index or rule index */
} cn_elem;

typedef struct cn_grammar {
  cn_elem *code;        /* every alternative of every rule, each ended by CN_END */
  int32_t n_code;
  uint64_t (*cls)[4];   /* byte classes: bit b of cls[i] set when byte b is in class i */
  int32_t n_cls;
  int32_t *alt;         /* start positions of the alternatives, rule by rule */
  int32_t *rule_alt;    /* rule r's alternatives: alt[rule_alt[r] .. rule_alt[r + 1]) */
  int32_t n_rules;
  int32_t root;
  char **names;         /* rule names (generated ones too), for messages */
  int32_t *chain;       /* per rule: k when it is Q_k of a bounded repetition X{m,n}'s chain
                           Q_k ::= X Q_{k-1} | "" (Q_1 .. Q_{n-m} have consecutive ids), else 0 */
  int32_t *pos_rule;    /* per position: its rule */
} cn_grammar;

/* Compile GBNF text (len bytes). Needs a rule named "root". NULL with a message naming the line
 * and column (or the rule) on a syntax error, an undefined rule, or left recursion. */
cn_grammar *cn_gbnf_compile(const char *text, size_t len, q35_err *err);
/* The same with another rule as the language. */
cn_grammar *cn_gbnf_compile_root(const char *text, size_t len, const char *root_name, q35_err *err);
void cn_grammar_free(cn_grammar *g);

/* ---- front ends: text to GBNF ---------------------------------------------------------------- */

/* A regular expression as a GBNF expression (appended to *out, malloc'ed, NUL-terminated).
 * search != 0: JSON Schema `pattern` semantics (unanchored unless ^ / $ are given); else the
 * whole text must match (^ and $ at the ends are accepted). -1 with a message naming the
 * offset and the construct on anything unsupported (backreferences, lookaround, ...). */
int cn_regex_to_gbnf(const char *re, size_t len, int search, char **out, q35_err *err);

/* A JSON Schema (text) as a GBNF grammar (malloc'ed). json_object != 0 ignores schema and
 * gives free JSON whose top level is an object. ws_max: whitespace allowed between JSON
 * tokens, at most that many bytes each place (0: compact). */
int cn_schema_to_gbnf(const char *schema, size_t len, int json_object, int ws_max, char **out, q35_err *err);

/* ---- UTF-8 classes --------------------------------------------------------------------------- */

/* A code-point range [lo, hi] as byte-range sequences: calls emit(seq_lo, seq_hi, n, ctx) for
 * each sequence of n byte ranges (surrogates are left out). */
void cn_utf8_ranges(uint32_t lo, uint32_t hi, void (*emit)(const uint8_t *lo, const uint8_t *hi, int n, void *ctx),
                    void *ctx);
/* Encode a code point; returns the byte count (1..4). */
int cn_utf8_encode(uint32_t cp, uint8_t *out);

/* ---- matcher --------------------------------------------------------------------------------- */

#define CN_DEAD (-1)
#define CN_OOM (-3)

typedef struct cn_matcher cn_matcher;

/* A matcher's store (nodes, states, transition tables) belongs to it alone. */
cn_matcher *cn_matcher_new(const cn_grammar *g, q35_err *err);
cn_matcher *cn_matcher_clone(const cn_matcher *m);
void cn_matcher_free(cn_matcher *m);
/* The start state. */
int32_t cn_start(cn_matcher *m);
/* The state after byte b from state s, or CN_DEAD; CN_OOM when out of memory. */
int32_t cn_step(cn_matcher *m, int32_t s, uint8_t b);
/* Whether the language is complete in state s. */
int cn_complete(const cn_matcher *m, int32_t s);
/* Counter states. Inside X{m,n} a state records how many X may still come (the chain rule
 * Q_k on its stacks), so each step makes a new state and masks would never repeat. But a token
 * of at most CN_CANON_DEPTH bytes cannot use more than that many X, so a state whose chain
 * rules all have k > CN_CANON_DEPTH takes, for such tokens, exactly the mask of the state with
 * every such k lowered to CN_CANON_DEPTH: cn_canon returns that state (s itself when nothing
 * changes). Longer tokens are walked from s itself (cn_vocab.long_trie). */
#define CN_CANON_DEPTH 16
int32_t cn_canon(cn_matcher *m, int32_t s);
/* Number of states interned so far (for caches keyed by state). */
int32_t cn_n_states(const cn_matcher *m);
/* Bytes the store holds. */
size_t cn_matcher_bytes(const cn_matcher *m);

/* ---- vocabulary and masks -------------------------------------------------------------------- */

/* A trie of byte strings in preorder, without its root: node i takes byte[i] at depth depth[i]
 * (1 = a first byte); its subtree is nodes i .. end[i); the tokens whose strings end at node i
 * are tok[tok_off[i] .. tok_off[i + 1]). */
typedef struct cn_trie {
  uint8_t *byte;
  uint16_t *depth;
  int32_t *end, *tok_off, *tok;
  int32_t n_nodes, max_depth;
} cn_trie;

/* The vocabulary split for states that loop on a set of units (mask.c): a unit is an ASCII
 * byte of `ascii`, or (with utf8) any complete valid UTF-8 character. Each normal token is its
 * longest prefix of units, then a remainder; `all` has the tokens with no remainder, `rem` is
 * the trie of the remainders (each with its token). */
#define CN_CHAIN 16 /* unit counts split out one by one for chain states (mask.c) */
typedef struct cn_loop {
  uint64_t ascii[2];
  int utf8;
  uint32_t *all;
  cn_trie rem;
  /* For chain states (each unit leads to the next state of a chain s_0, s_1, ...: inside a
   * bounded string): the same split by unit count u. le[j]: the unit-only tokens with at most j
   * units; big: the unit-only tokens with u >= CN_CHAIN (ids, counts); remu[u]: the remainders of
   * the tokens with u units; rbig: the tokens with a remainder and u >= CN_CHAIN (id, u, the
   * remainder's offset); max_u: the largest u of any token. */
  uint32_t *le[CN_CHAIN];
  int32_t *big, n_big, *big_u;
  cn_trie remu[CN_CHAIN];
  int32_t *rbig, *rbig_u, *rbig_at, n_rbig;
  int32_t max_u;
} cn_loop;

#define CN_MAX_LOOPS 32

typedef struct cn_vocab {
  int32_t n;            /* tokens */
  uint8_t *kind;        /* per token: 0 normal, 1 end of generation, 2 never */
  char **bytes;         /* per token: its bytes */
  size_t *lens;
  cn_trie trie;         /* the normal tokens */
  cn_trie long_trie;    /* the normal tokens longer than CN_CANON_DEPTH bytes */
  uint32_t *long_bits;  /* the same as a bitset */
  void *lock;           /* a pthread mutex over the loops, built on demand */
  cn_loop *loops[CN_MAX_LOOPS];
  int n_loops;
} cn_vocab;

/* The trie of the vocabulary's token byte strings. tokens: n byte strings (lens[i] bytes at
 * bytes[i]); kind[i]: 0 a normal token (in the trie), 1 an end-of-generation token (allowed
 * only where the language is complete), 2 never allowed (control tokens, padding). */
cn_vocab *cn_vocab_new(int32_t n, const char *const *bytes, const size_t *lens, const uint8_t *kind, q35_err *err);
void cn_vocab_free(cn_vocab *v);
int32_t cn_vocab_n(const cn_vocab *v);
int cn_vocab_kind(const cn_vocab *v, int32_t id);
const char *cn_vocab_bytes(const cn_vocab *v, int32_t id, size_t *len);
size_t cn_vocab_trie_nodes(const cn_vocab *v);

/* The mask of state s: bit t of mask (uint32 words, (n + 31) / 32 of them) set when token t
 * may come next (mask.c); -1 when out of memory. A state that loops on many units takes its
 * vocabulary split (cn_loop): the tokens made of units, then a walk of the remainders only;
 * other states walk the whole trie. */
int cn_mask_compute(cn_matcher *m, const cn_vocab *v, int32_t s, uint32_t *mask);
/* The mask of a chain state s (inside a bounded string: each unit leads to the next state of a
 * chain; mask.c): 1 when s is one and mask is written, 0 when not (mask untouched), -1 when out
 * of memory. cn_mask_compute tries it; a counter state tries it before its canonical state. */
int cn_chain_mask(cn_matcher *m, const cn_vocab *v, int32_t s, uint32_t *mask);
/* OR into mask the tokens of trie t whose strings state s accepts (matcher.c); -1 when out of
 * memory. */
int cn_trie_walk(cn_matcher *m, const cn_trie *t, int32_t s, uint32_t *mask);
/* The same by brute force (each token's bytes stepped one by one): the reference twin. */
int cn_mask_reference(cn_matcher *m, const cn_vocab *v, int32_t s, uint32_t *mask);

#endif
