/* run.c - the generation loop of q35 run: load, prefill, decode with the sampling head, stats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "run_text.h"
#include "util.h"

void run_opts_default(run_opts *o) {
  memset(o, 0, sizeof *o);
  o->stats = 1;
  o->n_new = 256;
  o->ctx = 4096;
  o->chunk = 512;
  o->iters = 1;
  o->kv = Q35_KV_F16;
  o->seed = -1;
  o->sp = q35_sampling_default();
  o->sp.temperature = 0.8f;
}

typedef struct {
  double prefill_s, ttft_s, decode_s;
  int n_prompt, n_gen;
} iter_stats;

/* One generation: prefill the prompt, then decode until n_new tokens (or EOG in text mode). */
static int generate(q35_model *m, q35_session *s, const run_opts *o, const q35_sampling *sp0, const int32_t *prompt,
                    int32_t n_prompt, int32_t *out_ids, int print, iter_stats *st) {
  q35_err err = {{0}};
  const int32_t n_total = n_prompt + o->n_new;
  int32_t *hist = malloc(sizeof(int32_t) * (size_t)(n_total + 1));
  memcpy(hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
  q35_sampling sp = *sp0;
  q35_session_reset(s);
  double t0 = q35_now();
  /* all but the last chunk without logits, then the last chunk through the sampling step */
  int32_t done = 0;
  while (n_prompt - done > o->chunk) {
    if (q35_session_eval(s, prompt + done, o->chunk, 0, NULL, 0, &err)) goto fail;
    done += o->chunk;
  }
  q35_row row;
  memset(&row, 0, sizeof row);
  row.session = s;
  row.sampling = &sp;
  row.history = hist;
  row.n_prompt = n_prompt;
  row.n_top_logprobs = -1;
  int32_t cur = 0;
  for (int32_t i = 0; i < o->n_new; i++) {
    if (i == 0) {
      row.tokens = prompt + done;
      row.n_tokens = n_prompt - done;
    } else {
      row.tokens = &cur;
      row.n_tokens = 1;
    }
    row.n_history = n_prompt + i;
    sp.draw_index = (uint64_t)i;
    if (q35_step(m, &row, 1, &err)) goto fail;
    cur = row.token;
    hist[n_prompt + i] = cur;
    out_ids[i] = cur;
    if (i == 0) {
      st->prefill_s = q35_now() - t0;
      st->ttft_s = st->prefill_s;
      t0 = q35_now();
    }
    if (print) {
      printf(i ? " %d" : "%d", cur);
      fflush(stdout);
    }
  }
  if (print && o->n_new > 0) printf("\n");
  st->decode_s = o->n_new > 1 ? q35_now() - t0 : 0;
  st->n_prompt = n_prompt;
  st->n_gen = o->n_new;
  free(hist);
  return 0;
fail:
  fprintf(stderr, "q35 run: %s\n", err.msg);
  free(hist);
  return -1;
}

int run_main(const run_opts *o) {
  q35_err err = {{0}};
  int32_t n_prompt = 0;
  int32_t *prompt = NULL;
  if (!o->tokens_s) {
    fprintf(stderr, "q35 run: text prompts need the tokenizer, which is not built yet; use --tokens\n");
    return 2;
  }
  prompt = arg_ids("--tokens", o->tokens_s, &n_prompt);
  if (n_prompt + o->n_new > o->ctx) {
    fprintf(stderr, "q35 run: the prompt (%d tokens) plus %d new tokens exceed the context limit of %d (raise --ctx)\n",
            n_prompt, o->n_new, o->ctx);
    free(prompt);
    return 1;
  }
  double t0 = q35_now();
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = o->threads;
  mp.progress = o->stats;
  q35_model *m = q35_model_load(o->model, &mp, &err);
  if (!m) {
    fprintf(stderr, "q35 run: %s\n", err.msg);
    free(prompt);
    return 1;
  }
  const double load_s = q35_now() - t0;
  for (int32_t i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= q35_model_n_vocab(m)) {
      fprintf(stderr, "q35 run: prompt token id %d is out of range [0, %d)\n", prompt[i], q35_model_n_vocab(m));
      q35_model_free(m);
      free(prompt);
      return 1;
    }
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = o->ctx;
  sp.kv_type = o->kv;
  q35_session *s = q35_session_new(m, &sp, &err);
  if (!s) {
    fprintf(stderr, "q35 run: %s\n", err.msg);
    q35_model_free(m);
    free(prompt);
    return 1;
  }
  q35_sampling samp = o->sp;
  samp.seed = o->seed < 0 ? q35_random_seed() : (uint64_t)o->seed;
  fprintf(stderr, "seed: %llu\n", (unsigned long long)samp.seed);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(o->n_new + 1));
  int rc = 0;
  iter_stats sum = {0}, st = {0};
  const int runs = o->warmup + o->iters;
  for (int it = 0; it < runs && rc == 0; it++) {
    const double ts0 = q35_model_sample_seconds(m);
    if (generate(m, s, o, &samp, prompt, n_prompt, ids, it == 0 && o->print_ids, &st)) rc = 1;
    if (rc == 0 && runs > 1 && o->stats)
      fprintf(stderr, "iteration %d%s: prefill %.2f tok/s, decode %.2f tok/s, sampling %.3f ms\n", it,
              it < o->warmup ? " (warm-up)" : "", st.n_prompt / (st.prefill_s > 0 ? st.prefill_s : 1e-9),
              st.n_gen > 1 ? (st.n_gen - 1) / st.decode_s : 0.0, 1e3 * (q35_model_sample_seconds(m) - ts0));
    if (it >= o->warmup) {
      sum.prefill_s += st.prefill_s;
      sum.ttft_s += st.ttft_s;
      sum.decode_s += st.decode_s;
      sum.n_prompt = st.n_prompt;
      sum.n_gen = st.n_gen;
    }
  }
  if (rc == 0 && o->stats) {
    const double k = o->iters;
    const double pf = sum.n_prompt / (sum.prefill_s / k), dec = sum.n_gen > 1 ? (sum.n_gen - 1) / (sum.decode_s / k) : 0;
    const double samp_ms = 1e3 * q35_model_sample_seconds(m) / runs;
    fprintf(stderr,
            "load: %.3f s | prompt: %d tokens, prefill %.2f tok/s | time to first token: %.3f s | "
            "generated: %d tokens, decode %.2f tok/s | sampling: %.3f ms\n",
            load_s, sum.n_prompt, pf, sum.ttft_s / k, sum.n_gen, dec, samp_ms);
    fprintf(stderr,
            "{\"load_s\": %.6f, \"prompt_tokens\": %d, \"prefill_tok_s\": %.3f, \"ttft_s\": %.6f, "
            "\"generated_tokens\": %d, \"decode_tok_s\": %.3f, \"sampling_ms\": %.3f, \"iterations\": %d, "
            "\"seed\": %llu}\n",
            load_s, sum.n_prompt, pf, sum.ttft_s / k, sum.n_gen, dec, samp_ms, o->iters,
            (unsigned long long)samp.seed);
  }
  free(ids);
  free(prompt);
  q35_session_free(s);
  q35_model_free(m);
  return rc;
}
