/*
 * cmd_perplexity.c - `q35 perplexity` and `q35 kld`: judge a model (or a quantization of one)
 * the way llama.cpp's llama-perplexity does (its tools/perplexity/perplexity.cpp; the method and
 * formulas are restated in docs/PERPLEXITY.md).
 *
 * The method: the input (text tokenized with the model's tokenizer, a BOS first when the model
 * asks for one, or token ids as given) is cut into n_chunk = n_tokens / n_ctx chunks of n_ctx
 * tokens (at least 2 * n_ctx tokens are required, as llama.cpp does). Each chunk is evaluated
 * from an empty state, its first token replaced by BOS when the model adds one; only the second
 * half is scored: the logits of positions first = n_ctx / 2 .. n_ctx - 2 predict the tokens after
 * them (n_ctx - 1 - first positions per chunk).
 *
 * kld first runs the base model over every chunk and writes the log-probabilities of the scored
 * positions to a file (an unlinked temporary one, or --save-base FILE, reusable with
 * --base-logits FILE), then frees it and runs the quantized model over the same tokens: only
 * one model computes at a time and only one chunk of logits is in memory.
 *
 * Base file (little-endian): "Q35KLDB1", u32 n_ctx, u32 n_vocab, u32 n_chunk, u32 first, then
 * the n_chunk * n_ctx token ids fed (int32, BOS substituted), then per chunk (n_ctx - 1 - first)
 * rows of n_vocab float32 log-probabilities.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "commands.h"
#include "format/gguf.h"
#include "format/gguf_names.h"
#include "ppl_stats.h"
#include "q35.h"
#include "base/buf.h"
#include "text/tokenizer.h"

#define DEFAULT_N_CTX 512 /* llama-perplexity's default --ctx-size */
static const char BASE_MAGIC[8] = {'Q', '3', '5', 'K', 'L', 'D', 'B', '1'};

/* ---- input -------------------------------------------------------------------------------- */

typedef struct ppl_source {
  const char *text;       /* -f FILE: text, tokenized with the model's tokenizer */
  const char *ids;        /* --tokens FILE: ids separated by whitespace or commas */
  const char *ids_bin;    /* --tokens-bin FILE: little-endian int32 ids */
} ppl_source;

static int source_arg(ppl_source *src, int argc, char **argv, int *i) {
  if (arg_is(argc, argv, i, "-f") || arg_is(argc, argv, i, "--file")) src->text = arg_value(argc, argv, i);
  else if (arg_is(argc, argv, i, "--tokens")) src->ids = arg_value(argc, argv, i);
  else if (arg_is(argc, argv, i, "--tokens_bin")) src->ids_bin = arg_value(argc, argv, i);
  else return 0;
  return 1;
}

static int source_count(const ppl_source *src) { return !!src->text + !!src->ids + !!src->ids_bin; }

/* Does the model add a BOS (tokenizer.ggml.add_bos_token), and which? 0 = no, 1 = yes (*bos
 * set), -1 with a message on error. */
static int model_bos(const char *path, int32_t *bos, q35_err *err) {
  gguf_file *f = gguf_open_ex(path, GGUF_OPEN_ANY_LAYOUT, err);
  if (!f) return -1;
  int add = 0, rc = 0;
  if (gguf_find(f, "tokenizer.ggml.add_bos_token") && gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add, err))
    rc = -1;
  uint32_t id = 0;
  if (!rc && add && gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &id, err)) rc = -1;
  gguf_close(f);
  *bos = (int32_t)id;
  return rc ? -1 : add;
}

static int32_t *ids_from_text(const char *cmd, const char *path, const char *data, size_t len, int32_t *n) {
  int32_t *ids = NULL;
  size_t cap = 0, cnt = 0;
  const char *p = data, *end = data + len;
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')) p++;
    if (p >= end) break;
    char *stop;
    errno = 0;
    long v = strtol(p, &stop, 10);
    const int sep = stop >= end || *stop == ' ' || *stop == '\t' || *stop == '\n' || *stop == '\r' || *stop == ',';
    if (stop == p || errno || !sep || v < 0 || v > INT32_MAX) {
      fprintf(stderr, "q35 %s: %s: not a token id at byte %zu\n", cmd, path, (size_t)(p - data));
      exit(1);
    }
    if (q35_grow((void **)&ids, &cap, cnt + 1, sizeof(int32_t))) die("out of memory");
    ids[cnt++] = (int32_t)v;
    p = stop;
  }
  *n = (int32_t)cnt;
  return ids;
}

/* The token ids of the source (exits with a message on error). */
static int32_t *source_tokens(const char *cmd, const ppl_source *src, const char *model, int32_t *n) {
  q35_err err = {{0}};
  const char *path = src->text ? src->text : src->ids ? src->ids : src->ids_bin;
  size_t len;
  char *data = q35_read_file(path, &len, &err);
  if (!data) {
    fprintf(stderr, "q35 %s: %s\n", cmd, err.msg);
    exit(1);
  }
  int32_t *ids = NULL;
  if (src->ids) {
    ids = ids_from_text(cmd, path, data, len, n);
  } else if (src->ids_bin) {
    if (len % 4) {
      fprintf(stderr, "q35 %s: %s: %zu bytes is not a whole number of int32 ids\n", cmd, path, len);
      exit(1);
    }
    ids = malloc(len ? len : 1);
    if (!ids) die("out of memory");
    memcpy(ids, data, len);
    *n = (int32_t)(len / 4);
  } else {
    gguf_file *f = gguf_open_ex(model, GGUF_OPEN_ANY_LAYOUT, &err);
    q35_tokenizer *t = f ? q35_tokenizer_from_gguf(f, &err) : NULL;
    if (f) gguf_close(f);
    int32_t *raw = NULL, nraw = 0;
    if (!t || q35_tokenize(t, data, len, &raw, &nraw, &err)) {
      fprintf(stderr, "q35 %s: %s: %s\n", cmd, t ? path : model, err.msg);
      exit(1);
    }
    /* llama.cpp tokenizes with add_special: a BOS first when the model adds one */
    const int add_bos = q35_tokenizer_add_bos(t);
    ids = malloc(((size_t)nraw + 1) * sizeof(int32_t));
    if (!ids) die("out of memory");
    if (add_bos) ids[0] = q35_tokenizer_bos(t);
    memcpy(ids + add_bos, raw, (size_t)nraw * sizeof(int32_t));
    *n = nraw + add_bos;
    free(raw);
    q35_tokenizer_free(t);
  }
  free(data);
  return ids;
}

/* Every id below n_vocab, else exit naming the first that is not. */
static void check_ids(const char *cmd, const int32_t *ids, size_t n, int32_t n_vocab) {
  for (size_t k = 0; k < n; k++)
    if (ids[k] < 0 || ids[k] >= n_vocab) {
      fprintf(stderr, "q35 %s: token %zu is id %d, outside the model's vocabulary of %d\n", cmd, k, ids[k], n_vocab);
      exit(1);
    }
}

/* The number of chunks of n_ctx tokens (llama.cpp's rule: at least 2 * n_ctx tokens). */
static int32_t chunk_count(const char *cmd, int32_t n, int32_t n_ctx, int32_t max_chunks) {
  if (n < 2 * (int64_t)n_ctx) {
    fprintf(stderr,
            "q35 %s: the input has %d tokens; at least %lld (2 x --ctx %d) are needed, as llama-perplexity "
            "requires (lower --ctx or give more text)\n",
            cmd, n, 2 * (long long)n_ctx, n_ctx);
    exit(1);
  }
  int32_t c = n / n_ctx;
  return max_chunks > 0 && max_chunks < c ? max_chunks : c;
}

/* The tokens fed for each chunk: the chunks back to back, each first token BOS when add_bos. */
static int32_t *fed_tokens(const int32_t *ids, int32_t n_chunk, int32_t n_ctx, int add_bos, int32_t bos) {
  int32_t *fed = malloc((size_t)n_chunk * n_ctx * sizeof(int32_t));
  if (!fed) die("out of memory");
  memcpy(fed, ids, (size_t)n_chunk * n_ctx * sizeof(int32_t));
  if (add_bos)
    for (int32_t c = 0; c < n_chunk; c++) fed[(size_t)c * n_ctx] = bos;
  return fed;
}

/* ---- evaluation --------------------------------------------------------------------------- */

typedef struct evaluator {
  q35_model *m;
  q35_session *s;
  int32_t n_ctx, first, n_vocab, chunk;
  float *logits; /* (n_ctx - first) rows */
} evaluator;

static q35_model *load_model(const char *cmd, const model_args *ma, const char *path) {
  q35_err err = {{0}};
  const q35_model_params mp = model_args_model_params(ma);
  q35_model *m = q35_model_load(path, &mp, &err);
  if (!m) {
    fprintf(stderr, "q35 %s: %s\n", cmd, err.msg);
    exit(1);
  }
  return m;
}

static void evaluator_init(evaluator *e, const char *cmd, const model_args *ma, q35_model *m, int32_t n_ctx) {
  q35_err err = {{0}};
  model_args a = *ma;
  a.ctx = n_ctx;
  const q35_session_params sp = model_args_session_params(&a);
  *e = (evaluator){.m = m, .n_ctx = n_ctx, .first = n_ctx / 2, .n_vocab = q35_model_n_vocab(m), .chunk = ma->chunk};
  e->s = q35_session_new(m, &sp, &err);
  if (!e->s) {
    char hint[128];
    fprintf(stderr, "q35 %s: %s%s\n", cmd, err.msg, model_args_session_hint(&a, m, hint, sizeof hint));
    exit(1);
  }
  e->logits = malloc((size_t)(n_ctx - e->first) * e->n_vocab * sizeof(float));
  if (!e->logits) die("out of memory for %d rows of %d logits", n_ctx - e->first, e->n_vocab);
}

static void evaluator_free(evaluator *e) {
  free(e->logits);
  q35_session_free(e->s);
  q35_model_free(e->m);
  *e = (evaluator){0};
}

/* One chunk from an empty state: the logits of positions first .. n_ctx - 1 in e->logits. */
static void eval_chunk(evaluator *e, const char *cmd, const int32_t *fed) {
  q35_err err = {{0}};
  q35_session_reset(e->s);
  if (q35_session_eval(e->s, fed, e->first, e->chunk, NULL, 0, &err) ||
      q35_session_eval(e->s, fed + e->first, e->n_ctx - e->first, e->chunk, e->logits, 1, &err)) {
    fprintf(stderr, "q35 %s: %s\n", cmd, err.msg);
    exit(1);
  }
}

/* ---- options ------------------------------------------------------------------------------ */

typedef struct ppl_opts {
  model_args ma;
  ppl_source src;
  int32_t max_chunks;
  const char *quant, *save_base, *base_logits; /* kld only */
} ppl_opts;

static void parse(const char *cmd, ppl_opts *o, int argc, char **argv, void (*usage)(const model_args *)) {
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(&o->ma);
      exit(0);
    } else if (model_arg(&o->ma, argc, argv, &i) || source_arg(&o->src, argc, argv, &i)) {
      continue;
    } else if (arg_is(argc, argv, &i, "--chunks")) {
      o->max_chunks = (int32_t)arg_int("--chunks", arg_value(argc, argv, &i), 1, ARG_MAX_TOKENS);
    } else if (!strcmp(cmd, "kld") && (arg_is(argc, argv, &i, "-q") || arg_is(argc, argv, &i, "--quant"))) {
      o->quant = arg_value(argc, argv, &i);
    } else if (!strcmp(cmd, "kld") && arg_is(argc, argv, &i, "--save_base")) {
      o->save_base = arg_value(argc, argv, &i);
    } else if (!strcmp(cmd, "kld") && arg_is(argc, argv, &i, "--base_logits")) {
      o->base_logits = arg_value(argc, argv, &i);
    } else {
      arg_unknown(cmd, argv[i]);
    }
  }
  if (o->ma.ctx && o->ma.ctx < 3) die("%s: --ctx must be at least 3 (half of each chunk is scored)", cmd);
  if (source_count(&o->src) > 1) die("%s: give one of -f TEXT, --tokens FILE, --tokens-bin FILE", cmd);
}

/* A number for JSON: non-finite values become null. */
static void json_num(const char *name, double v, int last) {
  if (isfinite(v)) printf("\"%s\":%.10g%s", name, v, last ? "" : ",");
  else printf("\"%s\":null%s", name, last ? "" : ",");
}

/* ---- q35 perplexity ----------------------------------------------------------------------- */

static void ppl_usage(const model_args *ma) {
  printf(
      "usage: q35 perplexity -m MODEL.gguf (-f TEXT | --tokens FILE | --tokens-bin FILE) [options]\n"
      "Perplexity as llama-perplexity computes it: chunks of --ctx tokens, each from an empty state\n"
      "(first token BOS when the model adds one), the second half of each scored. Prints the\n"
      "running perplexity per chunk and the final estimate on stderr, and one JSON line\n"
      "{\"ppl\":..,\"ppl_err\":..,\"tokens\":..,\"chunks\":..} on stdout (tokens = positions scored).\n"
      "  -f, --file FILE       text, tokenized with the model's tokenizer\n"
      "  --tokens FILE         token ids separated by whitespace or commas (any vocabulary)\n"
      "  --tokens-bin FILE     token ids as little-endian int32\n"
      "  --chunks K            at most K chunks (default: all; at least 2 x --ctx tokens needed)\n");
  model_args_help(stdout, ma);
}

int cmd_perplexity(int argc, char **argv) {
  ppl_opts o = {.ma = {.takes = MODEL_ARG_CTX,
                       .kv = Q35_KV_F32,
                       .ctx_help = "tokens per chunk (default 512, as llama-perplexity)",
                       .chunk_help = "prefill in steps of N tokens (default: half a chunk at once)"}};
  parse("perplexity", &o, argc, argv, ppl_usage);
  if (!o.ma.model || source_count(&o.src) != 1)
    die("perplexity: -m MODEL and one of -f TEXT, --tokens FILE, --tokens-bin FILE are required (see --help)");
  model_args_done(&o.ma, "perplexity");
  const int32_t n_ctx = o.ma.ctx ? o.ma.ctx : DEFAULT_N_CTX;
  q35_err err = {{0}};
  int32_t bos;
  const int add_bos = model_bos(o.ma.model, &bos, &err);
  if (add_bos < 0) {
    fprintf(stderr, "q35 perplexity: %s\n", err.msg);
    return 1;
  }
  q35_model *m = load_model("perplexity", &o.ma, o.ma.model);
  int32_t n;
  int32_t *ids = source_tokens("perplexity", &o.src, o.ma.model, &n);
  check_ids("perplexity", ids, (size_t)n, q35_model_n_vocab(m));
  const int32_t n_chunk = chunk_count("perplexity", n, n_ctx, o.max_chunks);
  int32_t *fed = fed_tokens(ids, n_chunk, n_ctx, add_bos, bos);
  evaluator e;
  evaluator_init(&e, "perplexity", &o.ma, m, n_ctx);
  float *lp = malloc((size_t)e.n_vocab * sizeof(float));
  if (!lp) die("out of memory");
  fprintf(stderr, "perplexity: %d tokens, calculating perplexity over %d chunks, n_ctx=%d\n", n, n_chunk, n_ctx);
  double nll = 0, nll2 = 0;
  size_t count = 0;
  for (int32_t c = 0; c < n_chunk; c++) {
    const int32_t *chunk_ids = ids + (size_t)c * n_ctx;
    eval_chunk(&e, "perplexity", fed + (size_t)c * n_ctx);
    for (int32_t j = 0; j < n_ctx - 1 - e.first; j++) {
      ppl_log_probs(e.logits + (size_t)j * e.n_vocab, e.n_vocab, lp);
      const double v = -(double)lp[chunk_ids[e.first + j + 1]];
      nll += v;
      nll2 += v * v;
      count++;
    }
    fprintf(stderr, "[%d]%.4lf,", c + 1, exp(nll / count));
  }
  fprintf(stderr, "\n");
  /* llama.cpp's final estimate: the standard error of the mean NLL, scaled by the PPL */
  const double mean = nll / count, ppl = exp(mean);
  double var = nll2 / count - mean * mean, err_ppl = 0;
  if (var > 0) err_ppl = sqrt(var / (count - 1)) * ppl;
  fprintf(stderr, "Final estimate: PPL = %.4lf +/- %.5lf\n", ppl, err_ppl);
  printf("{");
  json_num("ppl", ppl, 0);
  json_num("ppl_err", err_ppl, 0);
  printf("\"tokens\":%zu,\"chunks\":%d}\n", count, n_chunk);
  free(lp);
  free(fed);
  free(ids);
  evaluator_free(&e);
  return 0;
}

/* ---- q35 kld: the base file --------------------------------------------------------------- */

typedef struct base_file {
  FILE *f;
  uint32_t n_ctx, n_vocab, n_chunk, first;
  int32_t *fed; /* n_chunk * n_ctx */
} base_file;

static size_t base_rows(const base_file *b) { return b->n_ctx - 1 - b->first; }

static void base_write_header(base_file *b, const char *path) {
  const uint32_t h[4] = {b->n_ctx, b->n_vocab, b->n_chunk, b->first};
  const size_t nt = (size_t)b->n_chunk * b->n_ctx;
  if (fwrite(BASE_MAGIC, 1, 8, b->f) != 8 || fwrite(h, sizeof h, 1, b->f) != 1 ||
      fwrite(b->fed, sizeof(int32_t), nt, b->f) != nt)
    die("kld: cannot write %s: %s", path, strerror(errno));
}

/* Open and check a base file; exits naming the problem. */
static void base_open(base_file *b, const char *path) {
  *b = (base_file){.f = fopen(path, "rb")};
  if (!b->f) die("kld: cannot open %s: %s", path, strerror(errno));
  char magic[8];
  uint32_t h[4];
  if (fread(magic, 1, 8, b->f) != 8 || memcmp(magic, BASE_MAGIC, 8) || fread(h, sizeof h, 1, b->f) != 1)
    die("kld: %s is not a base file written by q35 kld --save-base", path);
  b->n_ctx = h[0], b->n_vocab = h[1], b->n_chunk = h[2], b->first = h[3];
  if (b->n_ctx < 3 || b->n_ctx > ARG_MAX_TOKENS || b->first != b->n_ctx / 2 || !b->n_vocab || b->n_vocab > (1u << 24) ||
      !b->n_chunk || (uint64_t)b->n_chunk * b->n_ctx > (1u << 30))
    die("kld: %s: implausible header (n_ctx %u, n_vocab %u, n_chunk %u)", path, b->n_ctx, b->n_vocab, b->n_chunk);
  const size_t nt = (size_t)b->n_chunk * b->n_ctx;
  const uint64_t want = 8 + sizeof h + nt * 4 + (uint64_t)b->n_chunk * base_rows(b) * b->n_vocab * 4;
  struct stat st;
  if (fstat(fileno(b->f), &st) || (uint64_t)st.st_size != want)
    die("kld: %s has %lld bytes, its header implies %llu (truncated or not a base file)", path,
        (long long)st.st_size, (unsigned long long)want);
  b->fed = malloc(nt * sizeof(int32_t));
  if (!b->fed || fread(b->fed, sizeof(int32_t), nt, b->f) != nt) die("kld: cannot read %s", path);
}

/* The base pass: every chunk through the base model, log-probabilities to b->f. */
static void base_pass(base_file *b, const char *path, const ppl_opts *o, q35_model *m) {
  evaluator e;
  evaluator_init(&e, "kld", &o->ma, m, (int32_t)b->n_ctx);
  float *lp = malloc((size_t)e.n_vocab * sizeof(float));
  if (!lp) die("out of memory");
  base_write_header(b, path);
  for (uint32_t c = 0; c < b->n_chunk; c++) {
    eval_chunk(&e, "kld", b->fed + (size_t)c * b->n_ctx);
    for (size_t j = 0; j < base_rows(b); j++) {
      ppl_log_probs(e.logits + j * e.n_vocab, e.n_vocab, lp);
      if (fwrite(lp, sizeof(float), b->n_vocab, b->f) != b->n_vocab)
        die("kld: cannot write %s: %s", path, strerror(errno));
    }
    fprintf(stderr, "kld: base chunk %u/%u\n", c + 1, b->n_chunk);
  }
  if (fflush(b->f)) die("kld: cannot write %s: %s", path, strerror(errno));
  free(lp);
  evaluator_free(&e);
}

/* ---- q35 kld: the report ------------------------------------------------------------------ */

static void print_chunk_line(int chunk, const kld_acc *a) {
  kld_result r;
  kld_running(a, &r);
  fprintf(stderr, "%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf    %6.3lf ± %6.3lf %%    %6.3lf ± %6.3lf %%\n",
          chunk, r.ppl_quant, r.ppl_quant_err, r.ln_ratio, r.ln_ratio_err, r.mean_kld, r.mean_kld_err,
          100 * r.rms_dp, 100 * r.rms_dp_err, 100 * r.top1, 100 * r.top1_err);
}

static void print_summary(const kld_result *r) {
  FILE *f = stderr;
  fprintf(f, "\n====== Perplexity statistics ======\n");
  fprintf(f, "Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", r->ppl_quant, r->ppl_quant_err);
  fprintf(f, "Mean PPL(base)                : %10.6lf ± %10.6lf\n", r->ppl_base, r->ppl_base_err);
  fprintf(f, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100 * r->ppl_cor);
  fprintf(f, "Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", r->ln_ratio, r->ln_ratio_err);
  fprintf(f, "Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", r->ppl_ratio, r->ppl_ratio_err);
  fprintf(f, "Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", r->ppl_diff, r->ppl_diff_err);
  fprintf(f, "\n====== KL divergence statistics ======\n");
  fprintf(f, "Mean    KLD: %10.6lf ± %10.6lf\n", r->mean_kld, r->mean_kld_err);
  fprintf(f, "Maximum KLD: %10.6f\n", r->max_kld);
  for (int k = 0; k < 4; k++) fprintf(f, "%4.1f%%   KLD: %10.6f\n", 100 * KLD_FRACTIONS[k], r->kld_q[k]);
  fprintf(f, "Median  KLD: %10.6f\n", r->median_kld);
  for (int k = 4; k < KLD_N_Q; k++) fprintf(f, "%4.1f%%   KLD: %10.6f\n", 100 * KLD_FRACTIONS[k], r->kld_q[k]);
  fprintf(f, "Minimum KLD: %10.6f\n", r->min_kld);
  fprintf(f, "\n====== Token probability statistics ======\n");
  fprintf(f, "Mean    Δp: %6.3lf ± %5.3lf %%\n", 100 * r->mean_dp, 100 * r->mean_dp_err);
  fprintf(f, "Maximum Δp: %6.3lf%%\n", 100 * r->max_dp);
  for (int k = 0; k < 5; k++) fprintf(f, "%4.1f%%   Δp: %6.3lf%%\n", 100 * DP_FRACTIONS[k], 100 * r->dp_q[k]);
  fprintf(f, "Median  Δp: %6.3lf%%\n", 100 * r->median_dp);
  for (int k = 5; k < DP_N_Q; k++) fprintf(f, "%4.1f%%   Δp: %6.3lf%%\n", 100 * DP_FRACTIONS[k], 100 * r->dp_q[k]);
  fprintf(f, "Minimum Δp: %6.3lf%%\n", 100 * r->min_dp);
  fprintf(f, "RMS Δp    : %6.3lf ± %5.3lf %%\n", 100 * r->rms_dp, 100 * r->rms_dp_err);
  fprintf(f, "Same top p: %6.3lf ± %5.3lf %%\n", 100 * r->top1, 100 * r->top1_err);
}

/* "0.999" -> "p999", "0.05" -> "p05", "0.9" -> "p90" (the digits after the point, at least 2). */
static void fraction_name(char *out, size_t n, const char *prefix, double f) {
  char digits[16];
  snprintf(digits, sizeof digits, "%.3f", f);
  size_t len = strlen(digits);
  while (len > 4 && digits[len - 1] == '0') digits[--len] = 0; /* keep two decimals at least */
  snprintf(out, n, "%s_p%s", prefix, digits + 2);
}

static void print_json(const kld_result *r, uint32_t n_chunk) {
  char name[32];
  printf("{");
  json_num("mean_kld", r->mean_kld, 0);
  json_num("mean_kld_err", r->mean_kld_err, 0);
  json_num("median_kld", r->median_kld, 0);
  json_num("p99_kld", r->kld_q[1], 0);
  json_num("max_kld", r->max_kld, 0);
  json_num("min_kld", r->min_kld, 0);
  for (int k = 0; k < KLD_N_Q; k++) {
    fraction_name(name, sizeof name, "kld", KLD_FRACTIONS[k]);
    json_num(name, r->kld_q[k], 0);
  }
  json_num("mean_dp", r->mean_dp, 0);
  json_num("mean_dp_err", r->mean_dp_err, 0);
  json_num("median_dp", r->median_dp, 0);
  json_num("max_dp", r->max_dp, 0);
  json_num("min_dp", r->min_dp, 0);
  for (int k = 0; k < DP_N_Q; k++) {
    fraction_name(name, sizeof name, "dp", DP_FRACTIONS[k]);
    json_num(name, r->dp_q[k], 0);
  }
  json_num("rms_dp", r->rms_dp, 0);
  json_num("rms_dp_err", r->rms_dp_err, 0);
  json_num("top1_agree", r->top1, 0);
  json_num("top1_agree_err", r->top1_err, 0);
  json_num("ppl_base", r->ppl_base, 0);
  json_num("ppl_base_err", r->ppl_base_err, 0);
  json_num("ppl_quant", r->ppl_quant, 0);
  json_num("ppl_quant_err", r->ppl_quant_err, 0);
  json_num("ppl_cor", r->ppl_cor, 0);
  json_num("ppl_ratio", r->ppl_ratio, 0);
  json_num("ppl_ratio_err", r->ppl_ratio_err, 0);
  json_num("ln_ppl_ratio", r->ln_ratio, 0);
  json_num("ln_ppl_ratio_err", r->ln_ratio_err, 0);
  json_num("ppl_diff", r->ppl_diff, 0);
  json_num("ppl_diff_err", r->ppl_diff_err, 0);
  printf("\"tokens\":%zu,\"chunks\":%u}\n", r->tokens, n_chunk);
}

/* ---- q35 kld ------------------------------------------------------------------------------ */

static void kld_usage(const model_args *ma) {
  printf(
      "usage: q35 kld -m BASE.gguf -q QUANT.gguf (-f TEXT | --tokens FILE | --tokens-bin FILE) [options]\n"
      "       q35 kld --base-logits BASE.bin -q QUANT.gguf [options]\n"
      "KL divergence of QUANT's next-token distributions from BASE's, as llama-perplexity\n"
      "--kl-divergence computes it, over the scored halves of the same chunks as q35 perplexity.\n"
      "Per-chunk lines and llama's summary on stderr; one JSON line on stdout: mean_kld(_err),\n"
      "median_kld, p99_kld, kld_p999 .. kld_p001, max_kld, min_kld, mean_dp(_err) and the dp\n"
      "quantiles, rms_dp(_err), top1_agree(_err) (llama's \"same top p\"), ppl_base, ppl_quant,\n"
      "ppl_ratio, ln_ppl_ratio, ppl_diff (each with _err), ppl_cor, tokens, chunks (fractions, not %%).\n"
      "  -q, --quant FILE      the quantized model\n"
      "  -f, --file FILE       text, tokenized with BASE's tokenizer\n"
      "  --tokens FILE         token ids separated by whitespace or commas (any vocabulary)\n"
      "  --tokens-bin FILE     token ids as little-endian int32\n"
      "  --chunks K            at most K chunks (default: all; at least 2 x --ctx tokens needed)\n"
      "  --save-base FILE      keep BASE's log-probabilities (chunks x (ctx/2 - 1) x vocab floats)\n"
      "  --base-logits FILE    use a --save-base file instead of running BASE (-m, the input and\n"
      "                        --ctx come from it)\n");
  model_args_help(stdout, ma);
}

/* The base file for this run: computed now (into --save-base or an unlinked temporary file), or
 * read from --base-logits. */
static void kld_base(base_file *b, const ppl_opts *o, int32_t quant_vocab) {
  if (o->base_logits) {
    base_open(b, o->base_logits);
    if (b->n_vocab != (uint32_t)quant_vocab)
      die("kld: vocabulary mismatch: %s has %u logits per position, %s has %d", o->base_logits, b->n_vocab, o->quant,
          quant_vocab);
    if (o->ma.ctx && (uint32_t)o->ma.ctx != b->n_ctx)
      die("kld: --ctx %d differs from the %u of %s", o->ma.ctx, b->n_ctx, o->base_logits);
    if (o->max_chunks > 0 && (uint32_t)o->max_chunks < b->n_chunk) b->n_chunk = (uint32_t)o->max_chunks;
    return;
  }
  q35_err err = {{0}};
  int32_t bos;
  const int add_bos = model_bos(o->ma.model, &bos, &err);
  if (add_bos < 0) die("kld: %s", err.msg);
  q35_model *m = load_model("kld", &o->ma, o->ma.model);
  const int32_t V = q35_model_n_vocab(m);
  if (V != quant_vocab)
    die("kld: vocabulary mismatch: %s has %d tokens, %s has %d", o->ma.model, V, o->quant, quant_vocab);
  int32_t n;
  int32_t *ids = source_tokens("kld", &o->src, o->ma.model, &n);
  check_ids("kld", ids, (size_t)n, V);
  const int32_t n_ctx = o->ma.ctx ? o->ma.ctx : DEFAULT_N_CTX;
  const int32_t n_chunk = chunk_count("kld", n, n_ctx, o->max_chunks);
  *b = (base_file){.n_ctx = (uint32_t)n_ctx, .n_vocab = (uint32_t)V, .n_chunk = (uint32_t)n_chunk,
                   .first = (uint32_t)n_ctx / 2, .fed = fed_tokens(ids, n_chunk, n_ctx, add_bos, bos)};
  free(ids);
  const char *path = o->save_base ? o->save_base : "a temporary file";
  b->f = o->save_base ? fopen(o->save_base, "w+b") : tmpfile();
  if (!b->f) die("kld: cannot create %s: %s", path, strerror(errno));
  fprintf(stderr, "kld: %d tokens, %d chunks, n_ctx=%d; base %s\n", n, n_chunk, n_ctx, o->ma.model);
  base_pass(b, path, o, m); /* frees m */
  if (fseek(b->f, (long)(8 + 16 + (size_t)b->n_chunk * b->n_ctx * 4), SEEK_SET))
    die("kld: cannot read back %s", path);
}

int cmd_kld(int argc, char **argv) {
  ppl_opts o = {.ma = {.takes = MODEL_ARG_CTX,
                       .kv = Q35_KV_F32,
                       .ctx_help = "tokens per chunk (default 512, as llama-perplexity)",
                       .chunk_help = "prefill in steps of N tokens (default: half a chunk at once)"}};
  parse("kld", &o, argc, argv, kld_usage);
  if (!o.quant) die("kld: -q QUANT.gguf is required (see q35 kld --help)");
  if (o.base_logits) {
    if (o.ma.model || source_count(&o.src) || o.save_base)
      die("kld: --base-logits replaces -m, the input and --save-base (its tokens are in the file)");
    o.ma.model = o.quant; /* model_args_done wants a model */
  } else if (!o.ma.model || source_count(&o.src) != 1) {
    die("kld: -m BASE, -q QUANT and one of -f TEXT, --tokens FILE, --tokens-bin FILE are required (see --help)");
  }
  model_args_done(&o.ma, "kld");
  if (o.base_logits) o.ma.model = NULL;
  q35_model *qm = load_model("kld", &o.ma, o.quant); /* loaded first: a bad file fails before the base pass */
  base_file b;
  kld_base(&b, &o, q35_model_n_vocab(qm));
  evaluator e;
  evaluator_init(&e, "kld", &o.ma, qm, (int32_t)b.n_ctx);
  const size_t rows = base_rows(&b);
  float *lp = malloc((size_t)e.n_vocab * sizeof(float)), *lp_base = malloc((size_t)e.n_vocab * sizeof(float));
  kld_acc acc;
  if (!lp || !lp_base || kld_acc_init(&acc, rows * b.n_chunk)) die("out of memory");
  fprintf(stderr, "kld: quantized %s\n", o.quant);
  fprintf(stderr, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");
  for (uint32_t c = 0; c < b.n_chunk; c++) {
    const int32_t *fed = b.fed + (size_t)c * b.n_ctx;
    eval_chunk(&e, "kld", fed);
    for (size_t j = 0; j < rows; j++) {
      if (fread(lp_base, sizeof(float), b.n_vocab, b.f) != b.n_vocab) die("kld: the base file ended early");
      ppl_log_probs(e.logits + j * e.n_vocab, e.n_vocab, lp);
      kld_acc_add(&acc, lp_base, lp, e.n_vocab, fed[b.first + j + 1]);
    }
    print_chunk_line((int)c + 1, &acc);
  }
  kld_result r;
  kld_finish(&acc, &r);
  print_summary(&r);
  print_json(&r, b.n_chunk);
  kld_acc_free(&acc);
  free(lp);
  free(lp_base);
  free(b.fed);
  fclose(b.f);
  evaluator_free(&e);
  return 0;
}
