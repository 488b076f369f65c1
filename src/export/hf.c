/*
 * hf.c - Hugging Face Qwen3.5 checkpoint -> GGUF, the driver (see hf.h; the conversion rules
 * are those of the model notes, docs/DESIGN.md). Read and validate everything (config.json:
 * hf_config.c; the safetensors headers and the tensor mapping: hf_plan.c; the tokenizer and
 * chat template), write the metadata, declare every tensor, then stream them one by one
 * (conversion and quantization: hf_convert.c) into the GGUF writer's temporary file.
 */
#define _GNU_SOURCE
#include "export/hf.h"

#include <jansson.h>
#if defined(__GLIBC__)
#include <malloc.h> /* malloc_trim */
#endif
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"
#include "export/hf_internal.h"
#include "export/recipe.h"
#include "export/qwen35_gguf.h"
#include "format/gguf.h"
#include "format/gguf_names.h"
#include "format/tensor_types.h"
#include "kernels/quant.h"
#include "text/tokenizer.h"

#define RSS_ANON_FIELD "RssAnon:" /* of /proc/self/status: anonymous resident memory */
#define PROGRESS_BAR_WIDTH 30 /* characters of the TTY progress bar */
#define PROGRESS_LINE_STEP 10 /* percent between two progress lines when stderr is not a TTY */

q35_export_opts q35_export_default_opts(void) {
  q35_export_opts o;
  memset(&o, 0, sizeof o);
  o.qlinear = Q35_TYPE_BF16;
  o.qembedding = Q35_TYPE_BF16;
  o.qoutput = -1;
  o.progress = 1;
  o.recipe = -1;
  return o;
}

static uint64_t rss_anon(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, RSS_ANON_FIELD, sizeof RSS_ANON_FIELD - 1)) {
      kb = strtoull(line + sizeof RSS_ANON_FIELD - 1, NULL, 10);
      break;
    }
  fclose(f);
  return kb * 1024; /* the field is in kB */
}

static void progress(const q35_export_opts *o, int tty, int i, int n, uint64_t done, uint64_t total, const char *name,
                     int *last_pct) {
  if (!o->progress) return;
  const double mib = 1.0 / (1024.0 * 1024.0);
  const int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
  if (tty) {
    char bar[PROGRESS_BAR_WIDTH + 1];
    const int fill = pct * PROGRESS_BAR_WIDTH / 100;
    for (int k = 0; k < PROGRESS_BAR_WIDTH; k++) bar[k] = k < fill ? '#' : '.';
    bar[PROGRESS_BAR_WIDTH] = 0;
    fprintf(stderr, "\r[%s] %3d%%  tensor %d/%d  %.1f/%.1f MiB  %-40.40s", bar, pct, i, n, done * mib, total * mib,
            name);
    if (i == n) fputc('\n', stderr);
  } else if (pct >= *last_pct + PROGRESS_LINE_STEP || i == n) {
    fprintf(stderr, "q35 export: %3d%%  tensor %d/%d  %.1f/%.1f MiB\n", pct, i, n, done * mib, total * mib);
    *last_pct = pct;
  }
  fflush(stderr);
}

/* DIR/chat_template.jinja when the file exists (NULL otherwise), for a tokenizer without one. */
static int load_template_file(const char *dir, char **out, q35_err *err) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
  *out = NULL;
  if (access(path, R_OK) != 0) return 0;
  *out = q35_read_file(path, NULL, err);
  return *out ? 0 : -1;
}

/* tokenizer.json (+ tokenizer_config.json) and, when the tokenizer has no chat template, the
 * chat_template.jinja file */
static int read_tokenizer(const char *dir, int64_t vocab, q35_tokenizer **tok, char **tmpl, q35_err *err) {
  char tj[PATH_MAX], tc[PATH_MAX];
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
  if (access(tj, F_OK) != 0)
    return q35_seterr(err, "%s: missing (the tokenizer is needed for the GGUF's tokenizer block)", tj);
  *tok = q35_tokenizer_from_json(tj, access(tc, F_OK) == 0 ? tc : NULL, err);
  if (!*tok) return -1;
  if (q35_tokenizer_n_vocab(*tok) > vocab)
    return q35_seterr(err, "%s: the tokenizer has %d tokens but config.json's vocab_size is %lld", tj,
                      q35_tokenizer_n_vocab(*tok), (long long)vocab);
  if (!q35_tokenizer_chat_template(*tok)) return load_template_file(dir, tmpl, err);
  return 0;
}

/* generation_config.json's recommended sampling -> general.sampling.* (the key names and types
 * gguf-py writes: temp, top_p, min_p and penalty_repeat float32, top_k int32). do_sample: false
 * (greedy) is temp 0. An absent file writes nothing; a malformed one is an error. */
static int write_sampling(gguf_writer *w, const char *dir, q35_err *err) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  if (access(path, F_OK)) return 0;
  json_error_t je;
  json_t *g = json_load_file(path, 0, &je);
  if (!json_is_object(g)) {
    json_decref(g);
    return q35_seterr(err, "%s: not a JSON object (%s, line %d)", path, je.text, je.line);
  }
  static const struct { const char *hf, *key; double lo, hi; } F[] = { /* temperature first */
      {"temperature", "general.sampling.temp", 0, 1e6},
      {"top_p", "general.sampling.top_p", 0, 1},
      {"min_p", "general.sampling.min_p", 0, 1},
      {"repetition_penalty", "general.sampling.penalty_repeat", 0, 1e6},
  };
  int rc = 0;
  const int greedy = json_is_false(json_object_get(g, "do_sample"));
  if (greedy) gguf_set_f32(w, "general.sampling.temp", 0.0f);
  for (size_t i = greedy; i < sizeof F / sizeof F[0] && !rc; i++) {
    const json_t *v = json_object_get(g, F[i].hf);
    if (!v || json_is_null(v)) continue;
    if (!json_is_number(v) || json_number_value(v) < F[i].lo || json_number_value(v) > F[i].hi)
      rc = q35_seterr(err, "%s: %s must be a number in [%g, %g]", path, F[i].hf, F[i].lo, F[i].hi);
    else gguf_set_f32(w, F[i].key, (float)json_number_value(v));
  }
  const json_t *k = json_object_get(g, "top_k");
  if (!rc && k && !json_is_null(k)) {
    if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > INT32_MAX)
      rc = q35_seterr(err, "%s: top_k must be a non-negative integer", path);
    else gguf_set_i32(w, "general.sampling.top_k", (int32_t)json_integer_value(k));
  }
  json_decref(g);
  return rc;
}

/* general.*, the architecture's block, the tokenizer block (padded to the vocabulary) */
static int write_metadata(gguf_writer *w, const plan *p, const q35_tokenizer *tok, const char *tmpl,
                          q35_err *err) {
  const hfcfg *c = &p->cfg;
  const char *base = strrchr(p->dir, '/');
  base = base && base[1] ? base + 1 : p->dir;
  gguf_set_str(w, q35_gguf_key(Q35_KEY_GENERAL_ARCHITECTURE, NULL).s, q35_export_arch(c->moe));
  gguf_set_str(w, q35_gguf_key(Q35_KEY_GENERAL_NAME, NULL).s, base);
  /* a k-quant export is labelled the _M mix (q6_k output by default) */
  const int file_type = q35_gguf_file_type(p->t_lin, Q35_TYPE_Q6_K);
  gguf_set_u32(w, q35_gguf_key(Q35_KEY_GENERAL_FILE_TYPE, NULL).s,
               (uint32_t)(p->o->recipe >= 0 ? q35_recipe_ftype(p->o->recipe) : file_type));
  gguf_set_u32(w, q35_gguf_key(Q35_KEY_GENERAL_QUANT_VERSION, NULL).s, Q35_GGUF_QUANT_VERSION);
  q35_export_hparams h = {
      .moe = c->moe, .n_layer = c->L, .n_ctx_train = c->ctx, .n_embd = c->H, .n_ff = c->F,
      .n_head = c->nh, .n_head_kv = c->nkv, .head_dim = c->hd, .n_rot = c->n_rot,
      .rope_theta = (float)c->theta, .rms_eps = (float)c->eps,
      .n_expert = c->E, .n_expert_used = c->topk, .n_ff_exp = c->I, .n_ff_shexp = c->Is,
      .conv_kernel = c->conv_k, .ssm_state = c->dk, .ssm_k_heads = c->Hk, .ssm_v_heads = c->Hv,
      .ssm_inner = c->Hv * c->dv, .interval = c->interval, .n_nextn = p->mtp_pfx ? 1 : 0};
  memcpy(h.rope_sections, c->sections, sizeof h.rope_sections);
  q35_export_write_hparams(w, &h);
  if (q35_tokenizer_write_gguf_padded(tok, w, NULL, (int32_t)c->vocab))
    return q35_seterr(err, "%s/tokenizer.json: cannot write the tokenizer block", p->dir);
  if (tmpl) gguf_set_str(w, q35_gguf_key(Q35_KEY_TOKENIZER_CHAT_TEMPLATE, NULL).s, tmpl);
  return write_sampling(w, p->dir, err);
}

/* Declare every planned tensor; the sizes of the largest one and of the longest row. */
static int declare_tensors(gguf_writer *w, plan *p, const char *out, q35_export_stats *st, size_t *maxbuf,
                           int64_t *maxrow, q35_err *err) {
  *maxbuf = 0;
  *maxrow = 1;
  for (int i = 0; i < p->n; i++) {
    otensor *t = &p->t[i];
    if (hf_check_imatrix(p, t, err)) return -1;
    int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], 1};
    t->index = gguf_add_tensor(w, t->name, t->type, (uint32_t)t->n_dims, ne, NULL);
    if (t->index < 0) return q35_seterr(err, "%s: cannot declare tensor '%s'", out, t->name);
    const size_t nb = q35_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
    if (nb > *maxbuf) *maxbuf = nb;
    if (t->ne[0] > *maxrow) *maxrow = t->ne[0];
    st->bytes_out += nb;
    st->bytes_in += (uint64_t)t->src->nbytes / (t->gather == G_FUSED ? 2 : 1) *
                    (t->gather == G_SPLIT ? (uint64_t)t->ne[2] : 1);
    if (t->src->nbytes > st->largest_in) st->largest_in = t->src->nbytes;
  }
  st->largest_out = *maxbuf;
  st->n_tensors = p->n;
  return 0;
}

/* Convert and write every tensor in declaration order; buf holds the largest one. */
static int stream_tensors(gguf_writer *w, const plan *p, q35_export_stats *st, void *buf, float *scratch,
                          int64_t maxrow, int nthreads, q35_err *err) {
  const q35_export_opts *o = p->o;
  const int tty = isatty(2);
  int last_pct = -100;
  uint64_t done_b = 0;
  for (int i = 0; i < p->n; i++) {
    const otensor *t = &p->t[i];
    const int64_t rows = t->ne[1] * t->ne[2];
    const size_t rb = q35_row_size(t->type, t->ne[0]);
    int64_t bad;
    if (hf_convert_tensor(p, t, buf, scratch, maxrow, nthreads, &bad))
      return q35_seterr(err, "%s: tensor '%s' (for '%s') holds a non-finite value at row %lld", t->src->file,
                        t->src->name, t->name, (long long)bad);
    if (o->stats) {
      uint64_t ra = rss_anon();
      if (ra > st->rss_anon_peak) st->rss_anon_peak = ra;
    }
    if (gguf_writer_write_tensor(w, t->index, buf, err)) return -1;
    done_b += rb * (uint64_t)rows;
    progress(o, tty, i + 1, p->n, done_b, st->bytes_out, t->name, &last_pct);
  }
  return 0;
}

static int check_types(const q35_export_opts *o, q35_err *err) {
  const int types_ok[] = {o->qlinear, o->qembedding, o->qoutput < 0 ? o->qlinear : o->qoutput};
  for (int i = 0; i < 3; i++)
    if (!q35_type_supported(types_ok[i]) || !q35_type_quantizable(types_ok[i]) || types_ok[i] == Q35_TYPE_Q8_K)
      return q35_seterr(err, "export: type %d is not a supported weight type", types_ok[i]);
  return 0;
}

int q35_export_hf(const q35_export_opts *o, q35_export_stats *st, q35_err *err) {
  q35_export_stats dummy;
  if (!st) st = &dummy;
  memset(st, 0, sizeof *st);
  if (!o->model_dir || !o->out) return q35_seterr(err, "export: the model directory and the output path are required");
  if (check_types(o, err)) return -1;

  plan p;
  memset(&p, 0, sizeof p);
  p.dir = o->model_dir;
  p.err = err;
  p.o = o;
  p.t_lin = o->qlinear;
  p.t_emb = o->qembedding;
  p.t_out = o->qoutput >= 0 ? o->qoutput : (o->qlinear == Q35_TYPE_Q4_K ? Q35_TYPE_Q6_K : o->qlinear);
  q35_tokenizer *tok = NULL;
  gguf_writer *w = NULL;
  char *tmpl = NULL;
  void *buf = NULL;
  float *scratch = NULL;
  int rc = -1;

  /* 1. read and validate everything */
  if (hf_read_config(o->model_dir, &p.cfg, err)) goto done;
  p.st = st_open_dir(o->model_dir, err);
  if (!p.st) goto done;
  p.used = calloc(st_count(p.st) + 1, 1);
  if (!p.used) {
    q35_seterr(err, "out of memory");
    goto done;
  }
  if (hf_build_plan(&p) || read_tokenizer(o->model_dir, p.cfg.vocab, &tok, &tmpl, err)) goto done;

  /* 2. metadata and tensor declarations */
  w = gguf_writer_new();
  if (!w) {
    q35_seterr(err, "out of memory");
    goto done;
  }
  if (write_metadata(w, &p, tok, tmpl, err)) goto done;
  q35_tokenizer_free(tok);
  tok = NULL;
  free(tmpl);
  tmpl = NULL;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  size_t maxbuf;
  int64_t maxrow;
  if (declare_tensors(w, &p, o->out, st, &maxbuf, &maxrow, err)) goto done;
  if (o->dry_run) {
    for (int i = 0; i < p.n; i++) printf("%s %s\n", p.t[i].name, q35_type_name(p.t[i].type));
    if (p.missing_imatrix)
      fprintf(stderr, "q35 export: dry run: writing this file needs importance weights (--imatrix FILE) for some "
                      "tensors\n");
    rc = 0;
    goto done;
  }
  int nthreads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nthreads < 1) nthreads = 1;
  if (nthreads > HF_MAX_THREADS) nthreads = HF_MAX_THREADS;
  buf = malloc(maxbuf ? maxbuf : 1);
  scratch = malloc((size_t)maxrow * sizeof(float) * 2 * (size_t)nthreads); /* a row and a temporary per thread */
  if (!buf || !scratch) {
    q35_seterr(err, "out of memory (the largest output tensor needs %zu bytes)", maxbuf);
    goto done;
  }

  /* 3. stream */
  gguf_writer_set_split(w, &o->split);
  if (gguf_writer_begin(w, o->out, err)) goto done;
  if (o->stats) st->rss_anon_start = st->rss_anon_peak = rss_anon();
  if (stream_tensors(w, &p, st, buf, scratch, maxrow, nthreads, err)) goto done;
  if (gguf_writer_finish(w, err)) goto done;
  rc = 0;
done:
  if (w) gguf_writer_abort(w);
  gguf_writer_free(w);
  hf_plan_free(&p);
  free(p.used);
  st_close(p.st);
  q35_tokenizer_free(tok);
  free(tmpl);
  free(buf);
  free(scratch);
  return rc;
}
