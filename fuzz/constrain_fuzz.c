/*
 * constrain_fuzz.c - libFuzzer target for the constraint compilers and matcher (src/constrain/).
 * Build: fuzz/build.sh; run: fuzz/run.sh constrain SECONDS.
 *
 * Input: byte 0 picks the language (0 GBNF, 1 regex, 2 regex as a search, 3 JSON Schema, 4 free
 * JSON with whitespace), byte 1 splits the rest into the language text and a probe string. A
 * text that does not compile must give a message; one that compiles is walked along the probe
 * byte by byte, and at each state the trie-walk mask over a small synthetic vocabulary (the
 * probe's own substrings, single bytes, an end token) must equal the brute-force mask, and a
 * clone of the matcher must step to the same completeness. The public API walks the probe too
 * (its single-byte tokens), where counter states take their canonical masks: q35_constraint_mask
 * must equal q35_constraint_mask_reference at every checked step.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "constrain/grammar.h"

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "constrain_fuzz: property failed: %s\n", what);
    abort();
  }
}

static char *compile_text(int mode, const char *s, size_t n, q35_err *err) {
  char *out = NULL;
  if (mode == 0) {
    out = malloc(n + 1);
    memcpy(out, s, n);
    out[n] = 0;
    return out;
  }
  if (mode == 1 || mode == 2) {
    char *expr;
    if (cn_regex_to_gbnf(s, n, mode == 2, &expr, err)) return NULL;
    out = malloc(strlen(expr) + 16);
    sprintf(out, "root ::= %s\n", expr);
    free(expr);
    return out;
  }
  if (cn_schema_to_gbnf(s, n, mode == 4, mode == 4 ? 2 : 0, &out, err)) return NULL;
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 1024) return 0;
  const int mode = data[0] % 5;
  size_t split = 2 + (size_t)data[1] * (size - 2) / 255;
  if (split > size) split = size;
  const char *text = (const char *)data + 2, *probe = (const char *)data + split;
  const size_t tn = split - 2, pn = size - split;
  q35_err err = {{0}};
  char *gbnf = compile_text(mode, text, tn, &err);
  if (!gbnf) {
    check(err.msg[0] != 0, "a refusal has a message");
    return 0;
  }
  cn_grammar *g = cn_gbnf_compile(gbnf, strlen(gbnf), &err);
  if (mode >= 3 || mode == 1 || mode == 2) /* or a language with no string at all, refused by name */
    check(g != NULL || strstr(err.msg, "matches no string"), "the front ends write grammars that compile");
  if (!g) {
    check(err.msg[0] != 0, "a refused grammar has a message");
    free(gbnf);
    return 0;
  }
  cn_matcher *m = cn_matcher_new(g, &err);
  if (!m) {
    cn_grammar_free(g);
    free(gbnf);
    return 0;
  }
  /* a vocabulary: every single byte, the probe's substrings of length 2..4, an end token */
  enum { MAXV = 256 + 64 + 1 };
  const char *bytes[MAXV];
  size_t lens[MAXV];
  uint8_t kind[MAXV];
  static char single[256];
  int32_t nv = 0;
  for (int b = 0; b < 256; b++) {
    single[b] = (char)b;
    bytes[nv] = &single[b];
    lens[nv] = 1;
    kind[nv++] = 0;
  }
  for (size_t i = 0; i + 2 <= pn && nv < MAXV - 1; i++) {
    bytes[nv] = probe + i;
    lens[nv] = 2 + i % 3 <= pn - i ? 2 + i % 3 : pn - i;
    kind[nv++] = 0;
  }
  bytes[nv] = "";
  lens[nv] = 0;
  kind[nv++] = 1;
  cn_vocab *v = cn_vocab_new(nv, bytes, lens, kind, &err);
  uint32_t m1[(MAXV + 31) / 32], m2[(MAXV + 31) / 32];
  int32_t s = cn_start(m);
  int n_checks = 0;
  for (size_t i = 0; i <= pn && s >= 0 && v; i++) {
    if (i % 8 == 0 && n_checks++ < 6) {
      const int r1 = cn_mask_compute(m, v, s, m1), r2 = cn_mask_reference(m, v, s, m2);
      if (r1 == 0 && r2 == 0) check(!memcmp(m1, m2, (size_t)(nv + 31) / 32 * sizeof *m1), "trie mask == brute-force mask");
      cn_matcher *c = cn_matcher_clone(m);
      if (c) {
        check(cn_complete(c, s) == cn_complete(m, s), "a clone agrees");
        cn_matcher_free(c);
      }
    }
    if (i < pn) s = cn_step(m, s, (uint8_t)probe[i]);
  }
  cn_vocab_free(v);
  q35_constraint_vocab *pv = q35_constraint_vocab_from_bytes(nv, bytes, lens, kind, &err);
  q35_constraint *c = pv ? q35_constraint_new(pv, Q35_CONSTRAINT_GBNF, gbnf, strlen(gbnf), NULL, &err) : NULL;
  n_checks = 0;
  for (size_t i = 0; c && i <= pn; i++) {
    if (i % 8 == 0 && n_checks++ < 6) {
      const int r1 = q35_constraint_mask(c, m1, &err), r2 = q35_constraint_mask_reference(c, m2);
      if (r1 == 0 && r2 == 0) check(!memcmp(m1, m2, (size_t)(nv + 31) / 32 * sizeof *m1), "API mask == brute-force mask");
    }
    if (i < pn && q35_constraint_accept(c, (uint8_t)probe[i], &err)) break;
  }
  q35_constraint_free(c);
  q35_constraint_vocab_free(pv);
  cn_matcher_free(m);
  cn_grammar_free(g);
  free(gbnf);
  return 0;
}
