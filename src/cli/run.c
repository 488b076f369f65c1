/* run.c - the generation loop of q35 run: load, prefill, decode with the sampling head, stats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "args.h"
#include "text/chat.h"
#include "format/gguf.h"
#include "run_text.h"
#include "text/tokenizer.h"
#include "base/buf.h"
#include "base/util.h"

void run_opts_default(run_opts *o) {
  memset(o, 0, sizeof *o);
  o->stats = 1;
  o->n_new = 256;
  o->ma.takes = MODEL_ARG_CTX | MODEL_ARG_MEM_BUDGET;
  o->ma.ctx = 4096;
  o->ma.chunk = 512;
  o->ma.kv = Q35_KV_F16;
  o->ma.ctx_help = "context limit (default 4096)";
  o->ma.chunk_help = "prefill chunk size (default 512)";
  o->ma.mem_budget_help = "memory for the KV cache + recurrent state (e.g. 512M, 4G;\n"
                          "                                   0 = no limit; default 3/4 of MemAvailable); refused up front";
  o->iters = 1;
  o->seed = -1;
  o->sp = q35_sampling_default();
  o->sp.temperature = 0.8f;
}

typedef struct {
  double prefill_s, ttft_s, decode_s;
  double decode_cpu_s; /* CPU seconds of the whole process (every thread) during decode */
  int n_prompt, n_gen;
  long long draft_tokens, draft_accepted; /* --draft: tokens the head drafted, and the trunk accepted */
} iter_stats;

/* CPU seconds this process has used (all threads): on a shared machine the work a decode did,
 * where wall time also counts the time other processes held the cores. */
static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Text output of one generation: streamed through the detokenizer, stopping at EOG tokens. */
typedef struct {
  const q35_tokenizer *tok;
  q35_detok *dt;
  FILE *out;       /* where text goes (stdout), NULL: nowhere */
  q35_buf text;    /* the whole reply, kept for chat history */
} text_sink;

static void sink_put(text_sink *k, const char *p, size_t n) {
  if (!n) return;
  if (k->out) {
    fwrite(p, 1, n, k->out);
    fflush(k->out);
  }
  q35_buf_add(&k->text, p, n);
}

/* One generated token to the output: its id (print) and its text (sink). 1 when generation
 * stops here (an EOG token in text mode), -1 on a detokenizer error. */
static int emit_token(int32_t i, int32_t cur, int print, text_sink *sink, q35_err *err) {
  if (print) {
    printf(i ? " %d" : "%d", cur);
    fflush(stdout);
  }
  if (sink) {
    if (q35_tokenizer_is_eog(sink->tok, cur)) return 1;
    const char *piece;
    size_t len;
    if (q35_detok_feed(sink->dt, cur, &piece, &len, err)) return -1;
    sink_put(sink, piece, len);
  }
  return 0;
}

/* Prefill prompt[from..n_prompt) then decode. With a text sink, generation stops at an EOG token
 * (not printed) and text is streamed; otherwise (ids mode) exactly n_new tokens are produced. */
/* Prefill prompt[from..n_prompt) then decode. With a text sink, generation stops at an EOG token
 * (not printed) and text is streamed; otherwise (ids mode) exactly n_new tokens are produced.
 * With --draft N (a session made with draft_max N) each decode step carries up to N drafts of
 * the MTP head and emits the tokens the trunk accepts (q35.h "Speculative decoding"). */
static int generate(q35_model *m, q35_session *s, const run_opts *o, const q35_sampling *sp0, const int32_t *prompt,
                    int32_t n_prompt, int32_t from, int32_t *out_ids, int print, text_sink *sink, iter_stats *st) {
  q35_err err = {{0}};
  const int32_t n_total = n_prompt + o->n_new;
  int32_t *hist = malloc(sizeof(int32_t) * (size_t)(n_total + 1));
  q35_output *outs = calloc((size_t)o->draft + 1, sizeof *outs);
  memcpy(hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
  q35_sampling sp = *sp0;
  if (from == 0) q35_session_reset(s);
  double t0 = q35_now(), c0 = 0;
  /* all but the last chunk without logits, then the last chunk through the sampling step */
  int32_t done = from;
  int32_t n_gen = 0;
  st->draft_tokens = st->draft_accepted = 0;
  while (n_prompt - done > o->ma.chunk) {
    if (q35_session_eval(s, prompt + done, o->ma.chunk, 0, NULL, 0, &err)) goto fail;
    done += o->ma.chunk;
  }
  q35_row row;
  memset(&row, 0, sizeof row);
  if (o->constraint && !(row.constraint = q35_constraint_clone(o->constraint))) {
    q35_seterr(&err, "out of memory copying the constraint");
    goto fail;
  }
  row.session = s;
  row.sampling = &sp;
  row.history = hist;
  row.n_prompt = n_prompt;
  row.n_top_logprobs = -1;
  row.outputs = outs;
  int32_t cur = 0;
  for (int32_t i = 0; i < o->n_new;) {
    if (i == 0) {
      row.tokens = prompt + done;
      row.n_tokens = n_prompt - done;
      row.n_draft = 0;
    } else {
      row.tokens = &cur;
      row.n_tokens = 1;
      row.n_draft = o->draft < o->n_new - i - 1 ? o->draft : o->n_new - i - 1; /* no drafts past n_new */
    }
    row.n_history = n_prompt + i;
    sp.draw_index = (uint64_t)i;
    if (q35_step(m, &row, 1, &err)) goto fail;
    const int32_t n_emit = row.n_emitted > 0 ? row.n_emitted : 1;
    st->draft_tokens += row.n_drafted;
    st->draft_accepted += row.n_emitted > 0 ? row.n_emitted - 1 : 0;
    if (i == 0) {
      st->prefill_s = q35_now() - t0;
      st->ttft_s = st->prefill_s;
      t0 = q35_now();
      c0 = process_cpu_s();
    }
    int stop = 0;
    for (int32_t j = 0; j < n_emit && !stop; j++) {
      cur = row.n_emitted > 0 ? outs[j].token : row.token;
      hist[n_prompt + i] = cur;
      out_ids[i] = cur;
      n_gen = ++i;
      const int e = emit_token(i - 1, cur, print, sink, &err);
      if (e < 0) goto fail;
      stop = e > 0;
    }
    if (stop) break;
  }
  if (sink) {
    const char *piece;
    size_t len;
    q35_detok_flush(sink->dt, &piece, &len);
    sink_put(sink, piece, len);
  }
  if (print && o->n_new > 0) printf("\n");
  st->decode_s = n_gen > 1 ? q35_now() - t0 : 0;
  st->decode_cpu_s = n_gen > 1 ? process_cpu_s() - c0 : 0;
  st->n_prompt = n_prompt - from;
  st->n_gen = n_gen;
  if (row.constraint && q35_constraint_is_waiting(row.constraint))
    fprintf(stderr, "q35 run: the constrained part did not start (no </think> in %d tokens)\n", n_gen);
  else if (row.constraint && !q35_constraint_is_finished(row.constraint))
    fprintf(stderr, "q35 run: the output is %s the constrained language (stopped after %d tokens)\n",
                   q35_constraint_is_complete(row.constraint) ? "complete in" : "a prefix of", n_gen);
  q35_constraint_free(row.constraint);
  free(hist);
  free(outs);
  return 0;
fail:
  fprintf(stderr, "q35 run: %s\n", err.msg);
  q35_constraint_free(row.constraint);
  free(hist);
  free(outs);
  return -1;
}

/* The tokenizer (and chat template) of the model file, or of --tokenizer_path. */
static q35_tokenizer *load_tokenizer(const run_opts *o, char **tmpl, char **bos, char **eos) {
  q35_err err = {{0}};
  q35_tokenizer *t = NULL;
  if (o->tokenizer_path) {
    t = q35_tokenizer_from_json(o->tokenizer_path, NULL, &err);
  } else {
    gguf_file *f = gguf_open(o->ma.model, &err);
    if (f) {
      t = q35_tokenizer_from_gguf(f, &err);
      if (t && q35_chat_template_from_gguf(f, tmpl, bos, eos, &err)) {
        q35_tokenizer_free(t);
        t = NULL;
      }
      gguf_close(f);
    }
  }
  if (!t) fprintf(stderr, "q35 run: %s\n", err.msg);
  return t;
}

/* sample_s: seconds in the sampling head per run */
static void print_stats(const run_opts *o, double load_s, const iter_stats *sum, double sample_s, uint64_t seed) {
  const double k = o->iters;
  const double pf = sum->prefill_s > 0 ? sum->n_prompt / (sum->prefill_s / k) : 0;
  const double dec = sum->n_gen > 1 && sum->decode_s > 0 ? (sum->n_gen - 1) / (sum->decode_s / k) : 0;
  const double samp_ms = 1e3 * sample_s;
  fprintf(stderr,
          "load: %.3f s | prompt: %d tokens, prefill %.2f tok/s | time to first token: %.3f s | "
          "generated: %d tokens, decode %.2f tok/s | sampling: %.3f ms\n",
          load_s, sum->n_prompt, pf, sum->ttft_s / k, sum->n_gen, dec, samp_ms);
  fprintf(stderr,
          "{\"load_s\": %.6f, \"prompt_tokens\": %d, \"prefill_tok_s\": %.3f, \"ttft_s\": %.6f, "
          "\"generated_tokens\": %d, \"decode_tok_s\": %.3f, \"sampling_ms\": %.3f, \"iterations\": %d, "
          "\"seed\": %llu, \"draft_tokens\": %lld, \"draft_accepted\": %lld, \"draft_acceptance\": %.4f, "
          "\"decode_cpu_s\": %.6f}\n",
          load_s, sum->n_prompt, pf, sum->ttft_s / k, sum->n_gen, dec, samp_ms, o->iters, (unsigned long long)seed,
          sum->draft_tokens, sum->draft_accepted,
          sum->draft_tokens > 0 ? (double)sum->draft_accepted / (double)sum->draft_tokens : 0.0, sum->decode_cpu_s / k);
}

/* The prompt of -p, --prompt_file or stdin, tokenized. 0, or -1 with a message printed. */
static int prompt_from_text(const run_opts *o, const q35_tokenizer *tok, int32_t **prompt, int32_t *n_prompt) {
  q35_err err = {{0}};
  char *text = NULL;
  size_t len = 0;
  if (o->prompt) {
    text = strdup(o->prompt);
    len = strlen(text);
  } else {
    FILE *f = !o->prompt_file || !strcmp(o->prompt_file, "-") ? stdin : fopen(o->prompt_file, "rb");
    if (!f) {
      fprintf(stderr, "q35 run: cannot open prompt file %s\n", o->prompt_file);
      return -1;
    }
    text = q35_read_stream(f, &len);
    if (f != stdin) fclose(f);
    if (!text) {
      fprintf(stderr, "q35 run: cannot read the prompt%s%s\n", o->prompt_file ? " file " : "",
              o->prompt_file ? o->prompt_file : "");
      return -1;
    }
  }
  int trc = q35_tokenize(tok, text, len, prompt, n_prompt, &err);
  free(text);
  if (trc) {
    fprintf(stderr, "q35 run: prompt: %s\n", err.msg);
    return -1;
  }
  if (*n_prompt == 0) {
    fprintf(stderr, "q35 run: the prompt is empty\n");
    return -1;
  }
  return 0;
}

static int run_chat(const run_opts *o, q35_model *m, q35_session *s, const q35_tokenizer *tok, const char *tmpl,
                    const char *bos, const char *eos, q35_sampling *samp, double load_s);

/* The constraint of --json-schema / --grammar / --regex over the model's vocabulary (the
 * vocabulary into *vocab, freed by the caller after the constraint); NULL with a message. */
static q35_constraint *make_constraint(const run_opts *o, const q35_model *m, q35_constraint_vocab **vocab) {
  q35_err err = {{0}};
  char *text = NULL;
  size_t len = 0;
  const char *file = o->json_schema ? o->json_schema : o->grammar;
  if (file) text = q35_read_file(file, &len, &err);
  else if ((text = strdup(o->regex))) len = strlen(text);
  q35_constraint *c = NULL;
  if (text && (*vocab = q35_constraint_vocab_from_model(m, &err))) {
    const q35_constraint_params cp = {o->json_ws};
    const q35_constraint_kind kind = o->json_schema ? Q35_CONSTRAINT_JSON_SCHEMA
                                     : o->grammar   ? Q35_CONSTRAINT_GBNF
                                                    : Q35_CONSTRAINT_REGEX;
    c = q35_constraint_new(*vocab, kind, text, len, &cp, &err);
  }
  free(text);
  if (!c) {
    fprintf(stderr, "q35 run: %s\n", err.msg);
    q35_constraint_vocab_free(*vocab);
    *vocab = NULL;
  }
  return c;
}

int run_main(const run_opts *o) {
  q35_err err = {{0}};
  int32_t n_prompt = 0;
  int32_t *prompt = NULL;
  q35_tokenizer *tok = NULL;
  char *tmpl = NULL, *bos = NULL, *eos = NULL;
  if (!o->tokens_s || o->chat) {
    tok = load_tokenizer(o, &tmpl, &bos, &eos);
    if (!tok) return 1;
  }
  if (o->chat) {
    if (o->tokens_s || o->prompt || o->prompt_file) die("run: --chat reads the conversation from stdin; "
                                                         "--tokens/--prompt/--prompt_file do not apply");
  } else if (o->tokens_s) {
    prompt = arg_ids("--tokens", o->tokens_s, &n_prompt);
  } else if (prompt_from_text(o, tok, &prompt, &n_prompt)) {
    goto early_fail;
  }
  if (!o->chat && n_prompt + (o->print_ids ? o->n_new : 1) > o->ma.ctx) {
    fprintf(stderr, "q35 run: the prompt (%d tokens) plus %d new tokens exceed the context limit of %d (raise --ctx)\n",
            n_prompt, o->print_ids ? o->n_new : 1, o->ma.ctx);
    goto early_fail;
  }
  double t0 = q35_now();
  q35_model_params mp = model_args_model_params(&o->ma);
  mp.progress = o->stats;
  q35_model *m = model_args_load(&o->ma, &mp, &err);
  if (!m) {
    fprintf(stderr, "q35 run: %s\n", err.msg);
    goto early_fail;
  }
  const double load_s = q35_now() - t0;
  for (int32_t i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= q35_model_n_vocab(m)) {
      fprintf(stderr, "q35 run: prompt token id %d is out of range [0, %d)\n", prompt[i], q35_model_n_vocab(m));
      q35_model_free(m);
      goto early_fail;
    }
  if (o->draft_vocab > 0 && (o->draft == 0 || o->draft_vocab > q35_model_n_vocab(m))) {
    fprintf(stderr, "q35 run: --draft-vocab %d needs --draft N > 0 and at most the model's %d tokens\n",
            o->draft_vocab, q35_model_n_vocab(m));
    q35_model_free(m);
    goto early_fail;
  }
  if (o->draft > 0 && !q35_model_has_mtp(m)) {
    fprintf(stderr, "q35 run: --draft %d needs a model file with an MTP head (this one has none)\n", o->draft);
    q35_model_free(m);
    goto early_fail;
  }
  q35_session_params sp = model_args_session_params(&o->ma);
  sp.draft_max = o->draft;
  sp.draft_vocab = o->draft_vocab;
  q35_context_draft_adapt(q35_model_context(m), o->draft_adapt);
  q35_session *s = q35_session_new(m, &sp, &err);
  if (!s) {
    char hint[128];
    fprintf(stderr, "q35 run: %s%s\n", err.msg, model_args_session_hint(&o->ma, m, hint, sizeof hint));
    q35_model_free(m);
    goto early_fail;
  }
  run_opts oc = *o; /* with the compiled constraint */
  q35_constraint_vocab *cvocab = NULL;
  if (o->json_schema || o->grammar || o->regex) {
    if (!(oc.constraint = make_constraint(o, m, &cvocab))) {
      q35_session_free(s);
      q35_model_free(m);
      goto early_fail;
    }
    /* a chat that thinks: the reasoning is free, the constraint starts after </think> */
    const int32_t think_end = o->chat && !o->no_think && tok ? q35_token_id(tok, "</think>") : -1;
    if (think_end >= 0 && q35_constraint_set_trigger(oc.constraint, think_end, 2, &err)) {
      fprintf(stderr, "q35 run: %s\n", err.msg);
      q35_constraint_free(oc.constraint);
      q35_constraint_vocab_free(cvocab);
      q35_session_free(s);
      q35_model_free(m);
      goto early_fail;
    }
  }
  o = &oc;
  q35_sampling samp = o->sp;
  samp.seed = o->seed < 0 ? q35_random_seed() : (uint64_t)o->seed;
  fprintf(stderr, "seed: %llu\n", (unsigned long long)samp.seed);
  if (o->chat) {
    int rc = run_chat(o, m, s, tok, tmpl, bos, eos, &samp, load_s);
    q35_constraint_free(oc.constraint);
    q35_constraint_vocab_free(cvocab);
    q35_session_free(s);
    q35_model_free(m);
    q35_tokenizer_free(tok);
    free(tmpl);
    free(bos);
    free(eos);
    return rc;
  }
  /* text mode: generation stops at EOG or at the context limit */
  run_opts oo = *o;
  if (!o->print_ids && n_prompt + oo.n_new > o->ma.ctx) oo.n_new = o->ma.ctx - n_prompt;
  o = &oo;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(o->n_new + 1));
  int rc = 0;
  text_sink sink = {tok, tok ? q35_detok_new(tok, 0) : NULL, stdout, {0}};
  iter_stats sum = {0}, st = {0};
  const int runs = o->warmup + o->iters;
  for (int it = 0; it < runs && rc == 0; it++) {
    const double ts0 = q35_model_sample_seconds(m);
    if (sink.dt) q35_detok_reset(sink.dt);
    sink.out = it == 0 ? stdout : NULL;
    if (generate(m, s, o, &samp, prompt, n_prompt, 0, ids, it == 0 && o->print_ids,
                 o->print_ids || !tok ? NULL : &sink, &st))
      rc = 1;
    if (it == 0 && !o->print_ids && tok) {
      printf("\n");
      fflush(stdout);
    }
    if (rc == 0 && runs > 1 && o->stats)
      fprintf(stderr, "iteration %d%s: prefill %.2f tok/s, decode %.2f tok/s, sampling %.3f ms\n", it,
              it < o->warmup ? " (warm-up)" : "", st.n_prompt / (st.prefill_s > 0 ? st.prefill_s : 1e-9),
              st.n_gen > 1 ? (st.n_gen - 1) / st.decode_s : 0.0, 1e3 * (q35_model_sample_seconds(m) - ts0));
    if (it >= o->warmup) {
      sum.prefill_s += st.prefill_s;
      sum.ttft_s += st.ttft_s;
      sum.decode_s += st.decode_s;
      sum.decode_cpu_s += st.decode_cpu_s;
      sum.n_prompt = st.n_prompt;
      sum.n_gen = st.n_gen;
      sum.draft_tokens = st.draft_tokens;
      sum.draft_accepted = st.draft_accepted;
    }
  }
  if (rc == 0 && o->stats) print_stats(o, load_s, &sum, q35_model_sample_seconds(m) / runs, samp.seed);
  free(ids);
  q35_buf_free(&sink.text);
  q35_detok_free(sink.dt);
  q35_tokenizer_free(tok);
  free(tmpl);
  free(bos);
  free(eos);
  free(prompt);
  q35_constraint_free(oc.constraint);
  q35_constraint_vocab_free(cvocab);
  q35_session_free(s);
  q35_model_free(m);
  return rc;
early_fail:
  free(prompt);
  q35_tokenizer_free(tok);
  free(tmpl);
  free(bos);
  free(eos);
  return 1;
}

#define CHAT_LINE_MAX 65536 /* longest user turn read from stdin, bytes (longer lines split) */

/* Interactive chat: each line on stdin is a user turn. The conversation is re-rendered with
 * the template every turn; the session keeps its state and a snapshot at the end of the last
 * rendered history (before the generation prompt), so a turn prefills only the new tokens
 * when the re-rendered history still starts with what the session holds. */
static int run_chat(const run_opts *o, q35_model *m, q35_session *s, const q35_tokenizer *tok, const char *tmpl,
                    const char *bos, const char *eos, q35_sampling *samp, double load_s) {
  q35_err err = {{0}};
  json_t *msgs = json_array();
  if (o->system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", o->system));
  int32_t *held = NULL, n_held = 0; /* tokens the snapshot covers */
  q35_snapshot *snap = NULL;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(o->n_new + 1));
  text_sink sink = {tok, q35_detok_new(tok, 0), stdout, {0}};
  const int think = o->no_think ? 0 : -1;
  char line[CHAT_LINE_MAX];
  int rc = 0;
  uint64_t draws = 0;
  fprintf(stderr, "chat: type a message and press enter (end with Ctrl-D)\n");
  while (rc == 0) {
    fprintf(stderr, "> ");
    if (!fgets(line, sizeof line, stdin)) break;
    size_t ln = strlen(line);
    while (ln && (line[ln - 1] == '\n' || line[ln - 1] == '\r')) line[--ln] = 0;
    if (!ln) continue;
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", line));
    char *base = q35_chat_render(tmpl, msgs, NULL, 0, think, bos, eos, NULL, &err);
    char *full = base ? q35_chat_render(tmpl, msgs, NULL, 1, think, bos, eos, NULL, &err) : NULL;
    int32_t *tb = NULL, *tf = NULL, nb = 0, nf = 0;
    if (!full || q35_tokenize(tok, base, strlen(base), &tb, &nb, &err) ||
        q35_tokenize(tok, full, strlen(full), &tf, &nf, &err)) {
      fprintf(stderr, "q35 run: %s\n", err.msg);
      rc = 1;
    } else if (nf + o->n_new > o->ma.ctx) {
      fprintf(stderr, "q35 run: the conversation (%d tokens) would pass the context limit of %d (raise --ctx)\n", nf,
              o->ma.ctx);
      rc = 1;
    } else {
      /* reuse the snapshot when its tokens start the new prompt */
      int32_t from = 0;
      int reuse = snap && n_held <= nb && !memcmp(held, tb, sizeof(int32_t) * (size_t)n_held);
      if (reuse && q35_session_restore(s, snap, &err) == 0) from = n_held;
      else q35_session_reset(s);
      int base_ok = nb <= nf && !memcmp(tb, tf, sizeof(int32_t) * (size_t)nb);
      const int32_t from0 = from;
      const double tb0 = q35_now();
      if (base_ok && nb > from) {
        if (q35_session_eval(s, tf + from, nb - from, o->ma.chunk, NULL, 0, &err)) rc = 1;
        from = nb;
      }
      const double t_hist = q35_now() - tb0; /* part of this turn's prefill */
      if (rc == 0 && base_ok) {
        q35_snapshot_free(snap);
        snap = q35_session_snapshot(s, &err);
        free(held);
        held = malloc(sizeof(int32_t) * (size_t)(nb + 1));
        memcpy(held, tb, sizeof(int32_t) * (size_t)nb);
        n_held = snap ? nb : 0;
      }
      iter_stats st = {0};
      sink.text.n = 0; /* this turn's reply */
      if (sink.text.p) sink.text.p[0] = 0;
      q35_detok_reset(sink.dt);
      q35_sampling sp = *samp;
      sp.seed = samp->seed + draws; /* each turn its own stream */
      if (rc == 0 && (from == nf ? (q35_session_reset(s), 0) : 0)) rc = 1;
      const double ts0 = q35_model_sample_seconds(m);
      if (rc == 0 && generate(m, s, o, &sp, tf, nf, from == nf ? 0 : from, ids, 0, &sink, &st)) rc = 1;
      if (from != nf) { /* the history prefill belongs to this turn's prompt and time to first token */
        st.n_prompt += from - from0;
        st.prefill_s += t_hist;
        st.ttft_s += t_hist;
      }
      const double turn_sample_s = q35_model_sample_seconds(m) - ts0;
      printf("\n");
      fflush(stdout);
      draws++;
      if (rc == 0) {
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                              sink.text.p && !sink.text.oom ? sink.text.p : ""));
        if (o->stats) {
          run_opts oo = *o;
          oo.iters = 1;
          print_stats(&oo, load_s, &st, turn_sample_s, sp.seed);
        }
      }
    }
    free(base);
    free(full);
    free(tb);
    free(tf);
  }
  q35_snapshot_free(snap);
  free(held);
  free(ids);
  q35_buf_free(&sink.text);
  q35_detok_free(sink.dt);
  json_decref(msgs);
  return rc;
}
