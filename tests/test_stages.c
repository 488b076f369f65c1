/*
 * test_stages.c - pipeline stages in one process, without MPI: a model loaded as layer ranges
 * (q35_model_params.layer_begin / layer_end), the residual stream handed from stage to stage with
 * q35_fwd_row.x_out / x_in, gives logits bit-identical to the whole model (reference: the whole
 * model's q35_session_eval), for several splits and prefill chunkings; a stage's sessions hold
 * only its layers' state (the stages' bytes add up to the whole's); the other stages' tensor data
 * is not mapped (mincore: ENOMEM); misuse is refused with a message. The same for the model
 * written as a split GGUF (shards of a few tensors each: a stage maps its tensors from whichever
 * shards hold them and keeps no data of a shard holding none) and read into memory (no_mmap: only
 * the stage's tensors are copied). The MPI driver on top of this (src/dist/pp.c) is tested by
 * test_mpi.sh.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "engine/context.h"
#include "export/tiny.h"
#include "format/tensor_types.h"
#include "model/model.h"

enum { NL = 6, NT = 11 };
static const int32_t toks[NT] = {5, 17, 3, 99, 250, 7, 1, 64, 300, 2, 11};

static int g_no_mmap; /* load the stages with no_mmap */

static q35_model *load_range(const char *path, int b, int e, q35_err *err) {
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = 1; /* several models live at once: no spinning workers */
  mp.no_mmap = g_no_mmap;
  mp.layer_begin = b;
  mp.layer_end = e;
  return q35_model_load(path, &mp, err);
}

/* Through stages [bounds[k], bounds[k+1]), prefill in chunks of 1, 6 and 11 tokens: the logits of
 * every position equal ref. */
static void run_stages(const char *path, const int *bounds, int n_st, const float *ref, float *logits, int V, int H,
                       size_t whole_bytes) {
  q35_err err;
  q35_model *m[8];
  q35_session *s[8];
  int ok = 1;
  size_t state_bytes = 0;
  for (int k = 0; k < n_st; k++) {
    m[k] = load_range(path, bounds[k], bounds[k + 1], &err);
    CHECK(m[k] != NULL, "%s", err.msg);
    if (!m[k]) return;
    q35_session_params sp = q35_session_default_params();
    sp.n_ctx = 64;
    sp.kv_type = Q35_KV_F32;
    s[k] = q35_session_new(m[k], &sp, &err);
    CHECK(s[k] != NULL, "%s", err.msg);
    state_bytes += q35_session_bytes(s[k]);
  }
  CHECK(state_bytes == whole_bytes, "%d stages' state %zu bytes, whole %zu", n_st, state_bytes, whole_bytes);
  float *xa = malloc(sizeof(float) * NT * H), *xb = malloc(sizeof(float) * NT * H);
  for (int chunk = 1; chunk <= NT && ok; chunk += 5) {
  memset(logits, 0, sizeof(float) * NT * V);
  for (int k = 0; k < n_st; k++) q35_session_reset(s[k]);
  for (int i = 0; i < NT && ok; i += chunk) {
    const int n = NT - i < chunk ? NT - i : chunk;
    for (int k = 0; k < n_st && ok; k++) {
      q35_fwd_row r = {s[k], k ? NULL : toks + i, n, 0, NULL, NULL, k ? xa : NULL, NULL};
      if (k + 1 < n_st) r.x_out = xb;
      else r.n_out = n, r.logits = logits + (size_t)i * V;
      ok = q35_forward(m[k], &m[k]->ctx->fwd, &r, 1, &err) == 0;
      CHECK(ok, "stage %d: %s", k, err.msg);
      float *t = xa;
      xa = xb;
      xb = t;
    }
  }
  CHECK(memcmp(logits, ref, sizeof(float) * NT * V) == 0, "%s%s: stages from %d to %d (%d stages), chunk %d: logits "
        "differ", path, g_no_mmap ? " (no_mmap)" : "", bounds[1], bounds[n_st - 1], n_st, chunk);
  }
  free(xa);
  free(xb);
  for (int k = 0; k < n_st; k++) {
    q35_session_free(s[k]);
    q35_model_free(m[k]);
  }
}

/* Whether the page at p is unmapped. */
static int page_unmapped(const void *p) {
  const long pg = sysconf(_SC_PAGESIZE);
  unsigned char v;
  return mincore((void *)((uintptr_t)p & ~(uintptr_t)(pg - 1)), 1, &v) != 0 && errno == ENOMEM;
}

/* Whether the middle of tensor `name` is unmapped. */
static int unmapped(const gguf_file *f, const char *name) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  return page_unmapped((const char *)t->data + t->nbytes / 2);
}

/* Whether a stage of layers [b, e) binds tensor t (its layers', the embedding for the first stage,
 * output_norm and output for the last; never the MTP block). */
static int stage_tensor(const gguf_tensor *t, int b, int e) {
  char name[96];
  snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
  int l = -1;
  if (sscanf(name, "blk.%d.", &l) == 1) return l >= b && l < e;
  return !strcmp(name, "token_embd.weight") ? b == 0 : e == NL; /* output_norm, output */
}

/* A stage of layers [b, e) of a split file: the middle of every tensor it binds is mapped and every
 * other tensor's is not (unless that page holds a bound tensor or the header); a shard holding none
 * of its tensors has no page of its data section mapped.
 * Returns the shards that held none (with data past the header's last page). */
static int check_split_stage(const char *path, int b, int e) {
  q35_err err;
  q35_model *m = load_range(path, b, e, &err);
  CHECK(m != NULL, "%s", err.msg);
  if (!m) return 0;
  gguf_file *f = m->gguf;
  const long pg = sysconf(_SC_PAGESIZE);
  int empty = 0;
  for (uint32_t sh = 0; sh < gguf_n_shards(f); sh++) {
    int kept = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
      const gguf_tensor *t = &f->tensors[i];
      if (t->shard != sh) continue;
      const int keep = stage_tensor(t, b, e);
      const uintptr_t mid = ((uintptr_t)t->data + t->nbytes / 2) & ~(uintptr_t)(pg - 1);
      const gguf_file *sf = gguf_shard(f, sh);
      /* a small tensor on a page of a kept one, or of the header, stays mapped with it */
      int shared = mid < (((uintptr_t)sf->map + sf->data_offset + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1));
      for (uint64_t j = 0; j < f->n_tensors && !keep; j++) {
        const gguf_tensor *u = &f->tensors[j];
        const uintptr_t lo = (uintptr_t)u->data & ~(uintptr_t)(pg - 1), hi = (uintptr_t)u->data + u->nbytes;
        shared |= u->shard == sh && stage_tensor(u, b, e) && mid >= lo && mid < hi;
      }
      kept += keep;
      if (!shared)
        CHECK(page_unmapped((const void *)mid) == !keep, "layers [%d, %d): %.*s (shard %u) is %s", b, e,
              (int)t->name.len, t->name.ptr, sh + 1, keep ? "not mapped" : "still mapped");
    }
    const gguf_file *sf = gguf_shard(f, sh);
    const size_t o0 = (sf->data_offset + pg - 1) & ~(size_t)(pg - 1);
    if (kept || o0 >= sf->size) continue; /* (a data section within the header's last page stays) */
    empty++;
    int any = 0;
    for (size_t o = o0; o < sf->size; o += (size_t)pg) any |= !page_unmapped(sf->map + o);
    CHECK(!any, "layers [%d, %d): shard %u holds none of the stage's tensors but has data pages mapped", b, e, sh + 1);
  }
  q35_model_free(m);
  return empty;
}

int main(void) {
  char dir[] = "/tmp/q35_test_stages_XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  char path[512];
  snprintf(path, sizeof path, "%s/moe.gguf", dir);
  q35_tiny_opts o = q35_tiny_default();
  o.n_layer = NL;
  o.interval = 2; /* attention and DeltaNet layers in every stage of two */
  o.n_embd = 128;
  o.n_vocab = 512;
  o.type = Q35_TYPE_Q8_0;
  o.mtp = 1; /* a stage never binds the MTP block */
  o.seed = 5;
  q35_err err;
  if (q35_tiny_write(&o, path, &err)) return fprintf(stderr, "FAIL q35_tiny_write: %s\n", err.msg), 1;
  q35_model *whole = load_range(path, 0, 0, &err);
  if (!whole) return fprintf(stderr, "FAIL load: %s\n", err.msg), 1;
  const int V = q35_model_n_vocab(whole), H = q35_model_n_embd(whole);
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = 64;
  sp.kv_type = Q35_KV_F32;
  q35_session *ws = q35_session_new(whole, &sp, &err);
  float *ref = malloc(sizeof(float) * NT * V), *got = malloc(sizeof(float) * NT * V);
  CHECK(q35_session_eval(ws, toks, NT, 0, ref, 1, &err) == 0, "%s", err.msg);
  const size_t whole_bytes = q35_session_bytes(ws);

  const int splits[][5] = {{3, 0, 3, 6}, {4, 0, 2, 4, 6}, {3, 0, 5, 6}, {3, 0, 1, 6}};
  for (size_t t = 0; t < sizeof splits / sizeof splits[0]; t++)
    run_stages(path, splits[t] + 1, splits[t][0] - 1, ref, got, V, H, whole_bytes);

  /* a middle stage: its own tensors only, the others' data unmapped, misuse refused */
  q35_model *mid = load_range(path, 2, 4, &err);
  CHECK(mid != NULL, "%s", err.msg);
  if (mid) {
    CHECK(!mid->tok_embd.data && !mid->output.data && !mid->has_mtp && !mid->layers[0].attn_norm.data);
    CHECK(mid->n_attn_layers == 1 && mid->n_gdn_layers == 1, "%d attention, %d DeltaNet", mid->n_attn_layers,
          mid->n_gdn_layers);
    CHECK(unmapped(mid->gguf, "blk.0.ffn_down_exps.weight"), "blk.0 is still mapped");
    CHECK(unmapped(mid->gguf, "token_embd.weight"), "token_embd is still mapped");
    CHECK(!unmapped(mid->gguf, "blk.2.ffn_down_exps.weight"), "blk.2 is not mapped");
    q35_session *s = q35_session_new(mid, &sp, &err);
    float x[4 * 128] = {0};
    q35_fwd_row r = {s, toks, 2, 0, NULL, NULL, NULL, NULL};
    CHECK(q35_forward(mid, &mid->ctx->fwd, &r, 1, &err) != 0 && strstr(err.msg, "takes hidden states"), "%s",
          err.msg);
    r = (q35_fwd_row){s, NULL, 2, 1, got, NULL, x, NULL};
    CHECK(q35_forward(mid, &mid->ctx->fwd, &r, 1, &err) != 0 && strstr(err.msg, "has no output head"), "%s", err.msg);
    CHECK(q35_session_pos(s) == 0);
    r.x_out = x + 2 * 128;
    CHECK(q35_forward(mid, &mid->ctx->fwd, &r, 1, &err) == 0, "%s", err.msg);
    CHECK(q35_session_pos(s) == 2);
    q35_session_free(s);
    q35_model_free(mid);
  }
  q35_fwd_row r = {ws, NULL, 1, 0, NULL, NULL, got, NULL};
  CHECK(q35_forward(whole, &whole->ctx->fwd, &r, 1, &err) != 0 && strstr(err.msg, "takes tokens"), "%s", err.msg);
  CHECK(load_range(path, 4, 7, &err) == NULL && strstr(err.msg, "layer range [4, 7)"), "%s", err.msg);
  CHECK(load_range(path, 3, 3, &err) == NULL && strstr(err.msg, "not within"), "%s", err.msg);

  /* the same model as a split GGUF (shards of at most 7 tensors), and read into memory */
  char spath[512], sbase[512];
  snprintf(sbase, sizeof sbase, "%s/split.gguf", dir);
  uint32_t n_shards = 0;
  o.split = (gguf_split_opts){0, 7, &n_shards};
  if (q35_tiny_write(&o, sbase, &err)) return fprintf(stderr, "FAIL q35_tiny_write (split): %s\n", err.msg), 1;
  CHECK(n_shards > 4, "%u shards", n_shards);
  snprintf(spath, sizeof spath, "%s/split-00001-of-%05u.gguf", dir, n_shards);
  for (size_t t = 0; t < sizeof splits / sizeof splits[0]; t++)
    run_stages(spath, splits[t] + 1, splits[t][0] - 1, ref, got, V, H, whole_bytes);
  int empty = 0;
  for (int b = 0; b < NL; b += 2) empty += check_split_stage(spath, b, b + 2);
  CHECK(empty >= 3, "only %d (stage, shard) pairs with none of the stage's tensors", empty);
  g_no_mmap = 1;
  run_stages(spath, splits[1] + 1, splits[1][0] - 1, ref, got, V, H, whole_bytes);
  run_stages(path, splits[0] + 1, splits[0][0] - 1, ref, got, V, H, whole_bytes);
  check_split_stage(spath, 2, 4);
  g_no_mmap = 0;

  q35_session_free(ws);
  q35_model_free(whole);
  free(ref);
  free(got);
  unlink(path);
  for (uint32_t k = 0; k < n_shards; k++) {
    snprintf(spath, sizeof spath, "%s/split-%05u-of-%05u.gguf", dir, k + 1, n_shards);
    unlink(spath);
  }
  rmdir(dir);
  return check_done("test_stages");
}
