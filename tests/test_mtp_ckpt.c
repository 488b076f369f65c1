/*
 * test_mtp_ckpt.c - per-position state checkpoints (model/mtp.h), the rollback speculative
 * decoding relies on: a session armed before a chunk of n tokens and rolled back to position
 * P + k + 1 must hold exactly the state of a session that was fed only the first k + 1 tokens
 * of that chunk, one at a time (every DeltaNet conv and recurrent state byte, the position, and
 * the logits of the next token bit for bit), for every k; bad rollbacks are refused. Also the
 * MTP head: its logits are finite, depend on the token and the hidden state, and a head with
 * no file block is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/context.h"
#include "export/tiny.h"
#include "model/mtp.h"

static int fails;
#define CHECK(c, ...)                 \
  do {                                \
    if (!(c)) {                       \
      fprintf(stderr, "FAIL " __VA_ARGS__); \
      fprintf(stderr, "\n");          \
      fails++;                        \
    }                                 \
  } while (0)

static size_t conv_n(const q35_hparams *hp) {
  return (size_t)(hp->conv_kernel - 1) * (size_t)(2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner);
}
static size_t ssm_n(const q35_hparams *hp) { return (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state; }

static int same_state(const q35_session *a, const q35_session *b) {
  const q35_model *m = a->model;
  if (a->pos != b->pos) return 0;
  for (int i = 0; i < m->n_gdn_layers; i++)
    if (memcmp(a->conv_state[i], b->conv_state[i], conv_n(&m->hp) * 4) ||
        memcmp(a->ssm_state[i], b->ssm_state[i], ssm_n(&m->hp) * 4))
      return 0;
  return 1;
}

static void test_rollback(q35_model *m) {
  q35_err err;
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 64;
  q35_session *a = q35_session_new(m, &sp, &err), *b = q35_session_new(m, &sp, &err);
  const int V = m->hp.n_vocab;
  float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
  const int32_t prefix[] = {5, 17, 33, 2, 91, 7, 60}, chunk[] = {11, 250, 3, 42, 199};
  const int P = 7, n = 5;
  for (int k = 0; k < n; k++) {
    q35_session_reset(a);
    q35_session_reset(b);
    CHECK(!q35_session_eval(a, prefix, P, 0, NULL, 0, &err) && !q35_session_eval(b, prefix, P, 3, NULL, 0, &err),
          "prefix: %s", err.msg);
    CHECK(!q35_session_ckpt_arm(a, n - 1, &err), "arm: %s", err.msg);
    CHECK(!q35_session_eval(a, chunk, n, 0, NULL, 0, &err), "chunk: %s", err.msg);
    CHECK(!q35_session_ckpt_rollback(a, P + k + 1, &err), "rollback k=%d: %s", k, err.msg);
    for (int i = 0; i <= k; i++) CHECK(!q35_session_eval(b, &chunk[i], 1, 0, NULL, 0, &err), "one: %s", err.msg);
    CHECK(same_state(a, b), "k=%d: the rolled-back state differs from feeding %d tokens", k, k + 1);
    const int32_t next = 77;
    CHECK(!q35_session_eval(a, &next, 1, 0, la, 0, &err) && !q35_session_eval(b, &next, 1, 0, lb, 0, &err),
          "next: %s", err.msg);
    CHECK(!memcmp(la, lb, sizeof(float) * V), "k=%d: logits after the rollback differ", k);
  }
  /* the check can fail: without the rollback the state is that of all n tokens */
  q35_session_reset(a);
  q35_session_reset(b);
  q35_session_eval(a, prefix, P, 0, NULL, 0, &err);
  q35_session_eval(b, prefix, P, 0, NULL, 0, &err);
  q35_session_eval(a, chunk, n, 0, NULL, 0, &err);
  q35_session_eval(b, chunk, 2, 0, NULL, 0, &err);
  a->pos = b->pos;
  CHECK(!same_state(a, b), "the state comparison cannot tell 5 tokens from 2");
  /* refusals */
  CHECK(q35_session_ckpt_rollback(a, P, &err) != 0, "rollback without arming accepted");
  q35_session_ckpt_arm(a, 2, &err);
  q35_session_eval(a, chunk, 3, 0, NULL, 0, &err);
  CHECK(q35_session_ckpt_rollback(a, a->pos + 1, &err) != 0, "rollback past the position accepted");
  q35_session_ckpt_arm(a, 2, &err);
  q35_session_eval(a, chunk, 3, 0, NULL, 0, &err);
  CHECK(q35_session_ckpt_rollback(a, a->pos - 3, &err) != 0, "rollback before the armed pass accepted");
  CHECK(a->ckpt_n == 0, "a refused rollback left the session armed");
  free(la);
  free(lb);
  q35_session_free(a);
  q35_session_free(b);
}

static void test_head(q35_model *m) {
  q35_err err;
  const int V = m->hp.n_vocab, H = m->hp.n_embd;
  q35_mtp_cache *c = q35_mtp_cache_new(m, 16, Q35_KV_F32, &err);
  CHECK(c != NULL, "mtp cache: %s", err.msg);
  if (!c) return;
  float *h = malloc(sizeof(float) * H * 2), *l1 = malloc(sizeof(float) * V), *l2 = malloc(sizeof(float) * V);
  float *g = malloc(sizeof(float) * H);
  for (int i = 0; i < 2 * H; i++) h[i] = sinf(0.37f * (float)i);
  const int32_t t[2] = {9, 10};
  CHECK(!q35_mtp_forward(m, &m->ctx->fwd, c, t, h, 1, 0, l1, g, &err), "head: %s", err.msg);
  int finite = 1;
  for (int i = 0; i < V; i++) finite &= isfinite(l1[i]);
  CHECK(finite, "head logits not finite");
  q35_mtp_cache_truncate(c, 0);
  CHECK(!q35_mtp_forward(m, &m->ctx->fwd, c, &t[1], h, 1, 0, l2, NULL, &err), "head: %s", err.msg);
  CHECK(memcmp(l1, l2, sizeof(float) * V) != 0, "head logits do not depend on the token");
  q35_mtp_cache_truncate(c, 0);
  CHECK(!q35_mtp_forward(m, &m->ctx->fwd, c, t, h + H, 1, 0, l2, NULL, &err), "head: %s", err.msg);
  CHECK(memcmp(l1, l2, sizeof(float) * V) != 0, "head logits do not depend on the hidden state");
  q35_mtp_cache_truncate(c, 0);
  CHECK(!q35_mtp_forward(m, &m->ctx->fwd, c, t, h, 1, 0, l2, NULL, &err) && !memcmp(l1, l2, sizeof(float) * V),
        "head not deterministic");
  const int32_t bad = V;
  CHECK(q35_mtp_forward(m, &m->ctx->fwd, c, &bad, h, 1, 0, l2, NULL, &err) != 0, "out-of-range token accepted");
  free(h);
  free(l1);
  free(l2);
  free(g);
  q35_mtp_cache_free(c);
}

/* --dump MODEL OUT: the trunk's hidden states over a short sequence, then the head over pairs
 * (h_p, t_{p+1}): one call of 3 pairs, single pairs, and a last pair chained on the head's own
 * state g; writes what tests/tools/mtp_reference.py reads (test_mtp_parity.sh). */
static int dump(const char *model, const char *out) {
  q35_err err;
  q35_model_params mp = q35_model_default_params();
  q35_model *m = q35_model_load(model, &mp, &err);
  if (!m) return fprintf(stderr, "load: %s\n", err.msg), 1;
  const int H = m->hp.n_embd, V = m->hp.n_vocab, N = 9, NP = N - 1;
  int32_t tok[9] = {3, 141, 59, 26, 5, 35, 89, 79, 32};
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 32;
  sp.kv_type = Q35_KV_F32;
  q35_session *s = q35_session_new(m, &sp, &err);
  float *lg = malloc(sizeof(float) * (size_t)V * N), *hid = malloc(sizeof(float) * (size_t)H * N);
  float *used = malloc(sizeof(float) * (size_t)H * NP), *g = malloc(sizeof(float) * H);
  float *calls = malloc(sizeof(float) * (size_t)V * NP);
  int32_t ends[8], n_calls = 0;
  q35_fwd_row row = {s, tok, N, N, lg, hid, NULL, NULL};
  if (!s || q35_forward(m, &m->ctx->fwd, &row, 1, &err)) return fprintf(stderr, "trunk: %s\n", err.msg), 1;
  memcpy(used, hid, sizeof(float) * (size_t)H * (NP - 1));
  memcpy(used + (size_t)(NP - 1) * H, hid + (size_t)(NP - 1) * H, sizeof(float) * H);
  q35_mtp_cache *c = q35_mtp_cache_new(m, 32, Q35_KV_F32, &err);
  int rc = !c;
  for (int p = 0; !rc && p < NP;) {
    const int cnt = p == 0 ? 3 : 1;
    if (p == NP - 1) memcpy(used + (size_t)p * H, g, sizeof(float) * H); /* chained on g */
    rc = q35_mtp_forward(m, &m->ctx->fwd, c, &tok[p + 1], used + (size_t)p * H, cnt, 0, calls + (size_t)n_calls * V, g,
                         &err);
    p += cnt;
    ends[n_calls++] = p;
  }
  FILE *f = fopen(out, "wb");
  if (rc || !f) return fprintf(stderr, "head: %s\n", err.msg), 1;
  const int32_t hdr[4] = {NP, H, V, n_calls};
  fwrite(hdr, 4, 4, f);
  fwrite(tok + 1, 4, NP, f);
  fwrite(used, sizeof(float), (size_t)H * NP, f);
  for (int i = 0; i < n_calls; i++) {
    fwrite(&ends[i], 4, 1, f);
    fwrite(calls + (size_t)i * V, sizeof(float), V, f);
  }
  fclose(f);
  q35_mtp_cache_free(c);
  q35_session_free(s);
  q35_model_free(m);
  free(lg);
  free(hid);
  free(used);
  free(g);
  free(calls);
  return 0;
}

static void test_restore_back(q35_model *m);

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--dump")) return dump(argv[2], argv[3]);
  char path[] = "/tmp/q35_mtp_ckpt_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return 1;
  close(fd);
  q35_tiny_opts o = q35_tiny_default();
  o.n_layer = 4;
  o.interval = 2;
  o.n_embd = 128;
  o.n_vocab = 512;
  o.head_dim = 32;
  o.ssm_head_dim = 16;
  o.mtp = 1;
  q35_err err;
  if (q35_tiny_write(&o, path, &err)) {
    fprintf(stderr, "FAIL tiny: %s\n", err.msg);
    return 1;
  }
  q35_model_params mp = q35_model_default_params();
  q35_model *m = q35_model_load(path, &mp, &err);
  if (!m) {
    fprintf(stderr, "FAIL load: %s\n", err.msg);
    unlink(path);
    return 1;
  }
  test_rollback(m);
  test_restore_back(m);
  test_head(m);
  q35_model_free(m);
  o.mtp = 0;
  if (!q35_tiny_write(&o, path, &err) && (m = q35_model_load(path, &mp, &err))) {
    CHECK(q35_mtp_cache_new(m, 16, Q35_KV_F32, &err) == NULL && strstr(err.msg, "MTP"),
          "a model without a head: cache accepted");
    q35_model_free(m);
  }
  unlink(path);
  if (fails) fprintf(stderr, "%d failed\n", fails);
  else printf("all passed\n");
  return fails != 0;
}

/* q35_session_ckpt_restore further back than the rollback, again after the rollback, and after
 * an unarmed pass that followed the armed one (model/mtp.h: the slots keep their contents until
 * the next arm): each time the state of a session fed only the first j + 1 tokens of the armed
 * chunk; also a chunk no longer than the armed count (its last token's state is a slot too). */
static void test_restore_back(q35_model *m) {
  q35_err err;
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 64;
  q35_session *a = q35_session_new(m, &sp, &err), *b = q35_session_new(m, &sp, &err);
  const int32_t prefix[] = {9, 4, 120, 66, 3}, chunk[] = {301, 8, 45, 19, 230}, extra = 12;
  const int P = 5;
  for (int n_max = 4; n_max <= 5; n_max++) /* chunk of 5: 4 armed (the pass's shape), 5 (all) */
    for (int j = 0; j < n_max; j++)
      for (int after = 0; after < 3; after++) { /* restore(j) after: a rollback to 3 tokens, all kept, one more token */
        q35_session_reset(a);
        q35_session_reset(b);
        CHECK(!q35_session_eval(a, prefix, P, 0, NULL, 0, &err) && !q35_session_eval(b, prefix, P, 0, NULL, 0, &err),
              "prefix: %s", err.msg);
        CHECK(!q35_session_ckpt_arm(a, n_max, &err), "arm: %s", err.msg);
        CHECK(!q35_session_eval(a, chunk, 5, 0, NULL, 0, &err), "chunk: %s", err.msg);
        CHECK(!q35_session_ckpt_rollback(a, after == 0 ? P + 3 : P + 5, &err), "rollback: %s", err.msg);
        if (after == 2) CHECK(!q35_session_eval(a, &extra, 1, 0, NULL, 0, &err), "extra: %s", err.msg);
        q35_session_ckpt_restore(a, j);
        for (int i = 0; i <= j; i++) CHECK(!q35_session_eval(b, &chunk[i], 1, 0, NULL, 0, &err), "one: %s", err.msg);
        CHECK(same_state(a, b), "n_max=%d after=%d: restore(%d) differs from feeding %d tokens", n_max, after, j, j + 1);
      }
  q35_session_free(a);
  q35_session_free(b);
}
