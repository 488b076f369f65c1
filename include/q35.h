/*
 * q35.h - the q35 library: Qwen3.5 (qwen35moe, dense qwen35) inference on the CPU.
 *
 * Overview
 * --------
 * Four objects, one per concern:
 *
 *   q35_model    the weights: one loaded GGUF file. The file is mmapped read-only and every
 *                weight tensor is a zero-copy view into it, so loading is cheap and several
 *                processes share pages. A model holds only what the file defines
 *                (hyperparameters, tensors, a description) and never changes after loading.
 *   q35_context  the run state apart from the weights: a thread pool, the forward pass's
 *                scratch, the step's buffers (logits of the sampled positions), the sampler
 *                workspaces and a sampling-time counter. A context computes on one model; one
 *                model can serve several contexts at once (each running its own steps on its own
 *                threads). Every model owns a default context, made at load with
 *                q35_model_params.n_threads threads; q35_step and q35_session_eval use it.
 *   q35_session  one sequence's state: the KV cache of the full-attention layers, the
 *                convolution and recurrent (delta-rule) state of the Gated DeltaNet layers, the
 *                position. Sessions belong to the model (not to a context): any context of
 *                that model may step a session, one step at a time. Sessions never share
 *                mutable state, so any number of them can live on one model. They are created
 *                with a context limit (n_ctx); feeding a token past it is refused with an
 *                error, never truncated silently.
 *   q35_row      one session's part of a step (below).
 *
 * The step: q35_context_step (or q35_step on the default context) advances several sessions
 * in one pass over the weights. Each row names a session and the tokens it consumes (a prompt
 * chunk for prefill, one token for decode, or a run of drafted tokens to verify) and says
 * where it wants outputs: by default one sample at its last position; none at all
 * (Q35_OUTPUTS_NONE: the tokens are consumed and nothing past the last layer is computed, as
 * for a prompt chunk before the last one); or a sample at each of its last n_outputs positions
 * (speculative verification). Each sample comes from that position's logits with the row's own
 * sampling parameters (temperature, top-k, top-p, min-p, penalties, seed, draw index); on
 * request the row also receives the post-norm hidden state of those positions (the input of
 * the output matrix, as a multi-token-prediction draft head consumes it). The caller never sees
 * logits through a step: a step goes from tokens to tokens (q35_session_eval / q35_context_eval
 * return logits, for inspection and tests).
 *
 * Sampling follows the contract in docs/SAMPLING.md: temperature 0 is greedy; seeded draws are
 * a pure function of (seed, draw index), so seeded runs reproduce bit for bit whatever the
 * batch neighbours, thread count, context or prefill chunking. A row's logits never depend on
 * the other rows (the invariance contract: the same bits however tokens are batched, chunked
 * or threaded). So a row consuming k tokens with samples at its last m positions returns
 * exactly what feeding those tokens one step at a time would (see q35_row for the draw index
 * and penalty history of each position).
 *
 * Threading: a context runs one step (or eval) at a time; the caller serializes the calls on
 * one context (the server's scheduler does). Distinct contexts run at the same time, on one
 * model or several. A session is in one call at a time (a step, an eval, a snapshot, a restore,
 * a reset). Making and freeing sessions and contexts is safe from any thread while other
 * contexts step; freeing a model frees its default context and needs every other context and
 * every session of it freed first.
 *
 * Errors: fallible calls return 0 (or a non-NULL object) on success, and -1 (or NULL) on
 * failure with a human-readable message in the caller's q35_err. Messages name the parameter
 * involved (n_ctx, mem_budget, a row's field) with the numbers; a refused step or eval moves no
 * session.
 *
 * Example: greedy decoding of 16 tokens after a prompt, on a context of 4 threads.
 *
 *   q35_err err;
 *   q35_model *model = q35_model_load("model.gguf", NULL, &err);          // NULL: default params
 *   if (!model) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *   q35_context_params cp = q35_context_default_params();
 *   cp.n_threads = 4;
 *   q35_context *ctx = q35_context_new(model, &cp, &err);                 // or q35_model_context(model)
 *   q35_session *s = q35_session_new(model, NULL, &err);                  // n_ctx 4096, F16 KV cache
 *   q35_sampling greedy = q35_sampling_default();
 *   greedy.temperature = 0;
 *   const int32_t prompt[] = {9707, 11, 1879, 0};                         // token ids (tokenizer: src/text)
 *   q35_row row = {0};                                                    // zero: one sample, last position
 *   row.session = s;
 *   row.tokens = prompt;
 *   row.n_tokens = 4;
 *   row.sampling = &greedy;
 *   row.n_top_logprobs = -1;                                              // no log-probabilities
 *   int32_t next;
 *   for (int i = 0; i < 16; i++) {
 *     if (q35_context_step(ctx, &row, 1, &err)) { fprintf(stderr, "%s\n", err.msg); break; }
 *     printf("%d\n", row.token);
 *     next = row.token;                                                   // feed the sample back
 *     row.tokens = &next;
 *     row.n_tokens = 1;
 *   }
 *   q35_session_free(s);
 *   q35_context_free(ctx);
 *   q35_model_free(model);
 *
 * Speculative decoding with the MTP head: a model file with a multi-token-prediction block
 * (q35_model_has_mtp) can draft. A session made with q35_session_params.draft_max = N keeps the
 * head's own KV cache and state; a one-token row of it with n_draft > 0 then makes up to n_draft
 * drafts inside the step (the head over the session's latest hidden states, chained; each draft
 * sampled with the row's parameters and the draw index the trunk will use at that position),
 * feeds [token, drafts] to the trunk in the same pass as the step's other rows, samples every
 * position, accepts the longest prefix of drafts equal to the trunk's own samples plus the
 * trunk's sample after it, and rolls the session back to the accepted position (per-position
 * state checkpoints, no re-run). The row returns n_emitted >= 1 tokens in outputs[]: exactly the
 * tokens, log-probabilities and constraint moves that n_emitted one-token steps would have
 * produced (draw index + j and the emitted tokens as history at the j-th), for greedy and seeded
 * sampling alike; drafts decide only how many tokens a step emits, never which. The caller
 * feeds the last emitted token next. Snapshots of such a session carry the head's state, so a
 * restored prefix drafts as well as the session it came from. A context adapts the number of
 * drafts (0 .. n_draft) to the acceptance each session measures and to the step's size, from the
 * times it measures (q35_context_draft_adapt turns that off: then every row drafts n_draft).
 *
 * Pipeline stages: q35_model_params.layer_begin / layer_end load a range of layers (a session
 * then holds the KV cache and recurrent state of those layers only). Such a model is driven by
 * the MPI build's pipeline (src/dist/pp.h, docs/DESIGN.md): rank 0's steps and evals keep this
 * API unchanged and run the later stages' layers, output head and sampler on the other ranks;
 * the last stage samples exactly what a whole model would.
 */
#ifndef Q35_H
#define Q35_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct q35_err {
  char msg[512];
} q35_err;

typedef struct q35_model q35_model;
typedef struct q35_context q35_context;
typedef struct q35_session q35_session;

/* ---- model ---------------------------------------------------------------------------- */

typedef struct q35_model_params {
  int n_threads;     /* threads of the default context (q35_model_context); <= 0: all online CPUs */
  int progress;      /* non-zero: print a load progress indication on stderr */
  int no_mmap;       /* non-zero: read the weights into anonymous memory instead of using the
                      * file mapping; costs a copy of the file in memory and a slower load */
  int no_huge;       /* non-zero: leave the file mapping in the kernel's default page size. By
                      * default the mapping asks for 2 MiB pages (MADV_HUGEPAGE), and when the
                      * file sits in the page cache in small pages, q35 drops that cached copy
                      * and reads it again through the mapping in 2 MiB pages (once: the cache
                      * keeps them for later loads), after a one-range trial shows the kernel
                      * can map the file that way. Decode streams the weights every token, and
                      * 2 MiB pages spare it a TLB fill every 4 KiB. */
  int32_t layer_begin, layer_end; /* a pipeline stage: load trunk layers [layer_begin, layer_end)
                      * only (the embedding only when layer_begin is 0, the output head only when
                      * layer_end is the last layer); the file's other tensors are unmapped. 0, 0:
                      * the whole model. Such a model's steps run through dist/pp.c. */
  int no_repack;     /* non-zero: keep every weight in the file's layout. By default, at the AVX2
                      * level, the Q4_0 product weights are rewritten at load into the order the
                      * AVX2 kernels read (same size, same results bit for bit, faster decode and
                      * prefill); env Q35_REPACK=0 does the same as this. */
} q35_model_params;

q35_model_params q35_model_default_params(void);
q35_model *q35_model_load(const char *path, const q35_model_params *params, q35_err *err);
void q35_model_free(q35_model *model);

int32_t q35_model_n_vocab(const q35_model *model);
/* Width of the hidden state (the floats per position of q35_row.hidden). */
int32_t q35_model_n_embd(const q35_model *model);
/* Threads of the default context (q35_context_n_threads of q35_model_context). */
int32_t q35_model_n_threads(const q35_model *model);
/* Seconds the default context has spent in the sampling head since the model was loaded. */
double q35_model_sample_seconds(const q35_model *model);
/* Bytes of the weight file mapped with 2 MiB pages after loading (0 with no_mmap, where the
 * copy is anonymous memory); -1 where the kernel does not report it. */
long long q35_model_huge_bytes(const q35_model *model);
/* Bytes of weights rewritten at load into the running SIMD level's layout (0 where none were:
 * another level, no_repack, or not enough memory available). */
long long q35_model_repacked_bytes(const q35_model *model);
/* Whether the file carries an MTP (multi-token prediction) head, the draft model of speculative
 * decoding (q35_session_params.draft_max). */
int q35_model_has_mtp(const q35_model *model);
/* Short description: architecture, layer counts, tensor types (one line, no newline). */
const char *q35_model_desc(const q35_model *model);

/* ---- contexts ------------------------------------------------------------------------- */

typedef struct q35_context_params {
  int32_t n_threads; /* threads of the context's pool, the calling thread included (at most 256);
                        <= 0: all online CPUs */
} q35_context_params;

/* n_threads 0 */
q35_context_params q35_context_default_params(void);
/* A context on model: starts its threads now; its buffers grow with the first steps that need
 * them (later steps of that size allocate nothing). NULL with a message on failure. */
q35_context *q35_context_new(q35_model *model, const q35_context_params *params, q35_err *err);
/* A context on ctx's model that runs on ctx's threads and forward-pass scratch instead of its own:
 * for contexts one thread steps in turn, such as steps in flight (q35_context_step_begin). It and
 * ctx never run a step, an eval or a begin at the same time, and it is freed before ctx. */
q35_context *q35_context_new_sharing(q35_context *ctx, q35_err *err);
/* Frees a context made by q35_context_new (not the default context: q35_model_free does). */
void q35_context_free(q35_context *ctx);
/* The context q35_step and q35_session_eval use; owned by the model. */
q35_context *q35_model_context(q35_model *model);
int32_t q35_context_n_threads(const q35_context *ctx);
/* Seconds this context has spent in the sampling head since it was made. */
double q35_context_sample_seconds(const q35_context *ctx);
/* Speculation: on (the default), the context chooses how many drafts each row with n_draft > 0
 * carries, from 0 to n_draft, to maximize the tokens per second it measures: the acceptance each
 * session has shown (accepted drafts against rejections, recent rounds weighing most) against
 * the step times it has measured for each number of tokens per step and the head's pass times
 * (docs/DESIGN.md "Adaptive draft length"); off: every such row drafts n_draft (fewer only where
 * the context limit leaves no room). Outputs are the same either way. */
void q35_context_draft_adapt(q35_context *ctx, int on);
/* A hint to the adaptive draft length: the decode rows the caller's next steps are about to carry
 * (its sequences, those still prefilling included, plus requests waiting to start); 0 (the
 * default): none. While a step has fewer one-token rows than that, a session that has not been
 * drafting lately starts drafting only where the plan would draft it in a step of that many
 * one-token rows too (its first drafts pay a catch-up over its recent positions, paid for a step
 * or two before the batch forms). Kept until changed; decides only whether drafts are made, never
 * an output. */
void q35_context_draft_rows(q35_context *ctx, int32_t rows);

/* ---- sessions ------------------------------------------------------------------------- */

typedef enum q35_kv_type {
  Q35_KV_F32 = 0,
  Q35_KV_F16 = 1,
  Q35_KV_Q8_0 = 8,
} q35_kv_type;

/* most drafts one row may carry (q35_session_params.draft_max) */
#define Q35_DRAFT_MAX 16

typedef struct q35_session_params {
  int32_t n_ctx;          /* context limit in tokens (default 4096) */
  q35_kv_type kv_type;    /* KV cache element type (default F16) */
  uint64_t mem_budget;    /* bytes; 0 = no limit (default). q35_session_new refuses, before allocating,
                             when the state (q35_session_state_bytes) would exceed it */
  int32_t draft_max;      /* 0 (default): no speculation. 1 .. Q35_DRAFT_MAX: the session keeps the MTP
                             head's KV cache (n_ctx entries of one attention layer), its pending hidden
                             states and draft_max recurrent-state checkpoints, so its rows may carry up
                             to draft_max drafts (q35_row.n_draft); needs q35_model_has_mtp */
  int32_t draft_vocab;    /* with draft_max: the head drafts among token ids [0, draft_vocab) only (its
                             largest read is the output matrix: draft_vocab of its rows; BPE ids are
                             roughly frequency ordered); 0 (default): all. Never changes an output */
} q35_session_params;

q35_session_params q35_session_default_params(void);
/* Bytes of KV cache + recurrent (DeltaNet conv + delta-rule) state a session with these params
 * allocates, computed without allocating; 0 when the params are invalid. With recurrent != NULL,
 * *recurrent receives the recurrent part alone (the size of one snapshot's data). */
uint64_t q35_session_state_bytes(const q35_model *model, const q35_session_params *params, uint64_t *recurrent);
q35_session *q35_session_new(q35_model *model, const q35_session_params *params, q35_err *err);
void q35_session_reset(q35_session *s); /* back to position 0, empty state */
/* After a step in which a row of s emitted m > 1 tokens (n_emitted), keep only the first n
 * (1 <= n <= m) of them: the session goes back to the state after feeding the row's token and
 * the first n - 1 emitted ones, as if the step had emitted n (the caller then feeds outputs[n - 1]
 * next). For a caller whose sampling changes after some emitted token (a thinking budget that
 * forces the next token, a constraint that starts after a trigger): the tokens after it were
 * sampled under the old rules. A constraint the row carried advanced by all m tokens: roll it
 * back by m - n (q35_constraint_rollback). Valid until the next step, eval, reset, snapshot
 * restore of s; 0, or -1 with a message (nothing moved). */
int q35_session_draft_keep(q35_session *s, int32_t n, q35_err *err);
void q35_session_free(q35_session *s);
int32_t q35_session_pos(const q35_session *s);
int32_t q35_session_n_ctx(const q35_session *s);
size_t q35_session_bytes(const q35_session *s); /* memory held by the state */

/* Snapshots of the recurrent state, for prefix reuse. The attention KV cache is append-only,
 * so going back to an earlier position only needs the DeltaNet conv + recurrent state of that
 * position: q35_session_snapshot copies it (with the position); q35_session_restore puts it
 * back and sets the position, provided the session still holds the KV entries below it (it
 * has not been reset or rewound below the snapshot's position since the snapshot was taken;
 * the caller, who tracks the tokens, guarantees this). A session with drafts also stores the
 * MTP head's state: its position (its KV cache is append-only as the trunk's) and its pending
 * hidden states (a few n_embd vectors). */
typedef struct q35_snapshot q35_snapshot;
q35_snapshot *q35_session_snapshot(const q35_session *s, q35_err *err);
int q35_session_restore(q35_session *s, const q35_snapshot *snap, q35_err *err);
int32_t q35_snapshot_pos(const q35_snapshot *snap);
size_t q35_snapshot_bytes(const q35_snapshot *snap);
void q35_snapshot_free(q35_snapshot *snap);

/* Feed tokens on ctx (prefill in chunks of `chunk` tokens, <= 0: one chunk) and optionally
 * write logits: the last position's n_vocab floats, or with all != 0 every position's
 * (n * n_vocab, position major). logits may be NULL. The whole input is checked first: a
 * refused call leaves the session as it was. */
int q35_context_eval(q35_context *ctx, q35_session *s, const int32_t *tokens, int32_t n, int32_t chunk,
                     float *logits, int all, q35_err *err);
/* q35_context_eval on the default context of the session's model. */
int q35_session_eval(q35_session *s, const int32_t *tokens, int32_t n, int32_t chunk,
                     float *logits, int all, q35_err *err);

/* ---- sampling ------------------------------------------------------------------------- */

/* One additive logit bias: logits[token] += bias after the penalties, before temperature and the
 * filters (OpenAI's logit_bias: -100 effectively bans a token, +100 effectively forces it). */
typedef struct q35_logit_bias {
  int32_t token;
  float bias;
} q35_logit_bias;

typedef struct q35_sampling {
  float temperature;          /* >= 0; 0 = greedy */
  int64_t top_k;              /* <= 0: keep all; > vocab: clipped */
  float top_p;                /* (0, 1]; 1 = off */
  float min_p;                /* [0, 1]; 0 = off */
  float presence_penalty;     /* [-2, 2]; over generated tokens */
  float frequency_penalty;    /* [-2, 2]; over generated tokens */
  float repetition_penalty;   /* > 0; 1 = off; over prompt + generated tokens */
  uint64_t seed;              /* the draw is keyed by (seed, draw_index) */
  uint64_t draw_index;        /* 0 for the token after prefill, then 1, 2, ... */
  const q35_logit_bias *logit_bias; /* n_logit_bias entries (borrowed; NULL when 0); each token in
                                       [0, n_vocab), each bias finite; a token listed twice adds both */
  int32_t n_logit_bias;
} q35_sampling;

/* temperature 1, top_k 0, top_p 1, min_p 0, no penalties, seed 0, draw 0, no logit bias */
q35_sampling q35_sampling_default(void);
/* 0 if every parameter is in range, else -1 with a message naming the parameter and range. */
int q35_sampling_validate(const q35_sampling *p, q35_err *err);
/* 0 if every logit_bias token id is in [0, n_vocab), else -1 with a message naming the id. */
int q35_sampling_check_vocab(const q35_sampling *p, int32_t n_vocab, q35_err *err);
/* A seed below 2^53 from OS entropy (for unseeded requests; report it to the user). */
uint64_t q35_random_seed(void);

#define Q35_MAX_TOP_LOGPROBS 20

/* ---- the step ------------------------------------------------------------------------- */

/* q35_row.n_outputs: consume the tokens only (no logits, no sample; token = -1) */
#define Q35_OUTPUTS_NONE (-1)

/* One sampled position's result. */
typedef struct q35_output {
  int32_t token;               /* the sampled token */
  float logprob;               /* log-probability of `token` under log_softmax(logits); NAN when
                                  n_top_logprobs is -1 */
  int32_t top_ids[Q35_MAX_TOP_LOGPROBS];
  float top_logprobs[Q35_MAX_TOP_LOGPROBS];
} q35_output;

/*
 * One row of a step. Zero-initialise it and set the inputs: a zero row's outputs are one sample
 * at its last position, as before these fields existed.
 *
 * Outputs at several positions (n_outputs = m > 1): the row consumes tokens[0 .. n_tokens) and
 * samples at its last m positions, p_j = n_tokens - m + j for j = 0 .. m-1 (the sample at p_j
 * predicts the token after tokens[p_j]). Position p_j is sampled exactly as a step that had fed
 * tokens[0 .. p_j] would have sampled it, with
 *   draw index  sampling->draw_index + j
 *   history     history[0 .. n_history) followed by tokens[p_0 + 1 .. p_j] (j tokens; they count
 *               as generated tokens, after the prompt's n_prompt)
 * So `history` is the history of the first sampled position, and a verification row
 * [last accepted token, draft_1 .. draft_k-1] with m = k gets, at position j, the sample a
 * one-token-per-step decoder would draw after accepting draft_1 .. draft_j. The results go to
 * outputs[0 .. m); the last one is also written to the row's own token / logprob / top fields.
 */
typedef struct q35_row {
  /* inputs */
  q35_session *session;
  const int32_t *tokens;       /* tokens this row consumes in this step (>= 1) */
  int32_t n_tokens;
  const q35_sampling *sampling;/* required unless n_outputs is Q35_OUTPUTS_NONE */
  const int32_t *history;      /* for penalties: prompt then generated tokens (may be NULL) */
  int32_t n_history;
  int32_t n_prompt;            /* history[0 .. n_prompt) is the prompt */
  int32_t n_top_logprobs;      /* -1: no logprobs; 0: the token's; 1 .. Q35_MAX_TOP_LOGPROBS: alternatives */
  /* outputs: the sample at the last position */
  int32_t token;               /* the sampled token (-1 with Q35_OUTPUTS_NONE) */
  float logprob;               /* log-probability of `token` under log_softmax(logits) */
  int32_t top_ids[Q35_MAX_TOP_LOGPROBS];
  float top_logprobs[Q35_MAX_TOP_LOGPROBS];
  /* inputs (zero: one sample at the last position, no hidden state) */
  int32_t n_outputs;           /* positions sampled, the last n_outputs: 1 .. n_tokens; 0 means 1;
                                  Q35_OUTPUTS_NONE: none */
  q35_output *outputs;         /* NULL, or one result per sampled position (required when
                                  n_outputs > 1) */
  float *hidden;               /* NULL, or (sampled positions) * q35_model_n_embd floats: the
                                  post-norm hidden state of each sampled position, position major
                                  (output matrix x hidden = logits); unused with Q35_OUTPUTS_NONE */
  struct q35_constraint *constraint; /* NULL, or the structured-output constraint of this row (see
                                  the constraints section): its token mask is applied to the logits
                                  first, and the step advances it by the tokens it samples */
  /* speculative decoding (inputs; zero: none) */
  int32_t n_draft;             /* 0, or at most this many drafts of the MTP head after the row's token:
                                  a row of one token (n_outputs 0, hidden NULL, outputs with room for
                                  n_draft + 1) on a session with draft_max >= n_draft. The step emits
                                  n_emitted tokens into outputs[] (the last also into token / logprob /
                                  top fields): those n_emitted one-token steps would have sampled */
  /* outputs of a row on a session with drafts (else 0) */
  int32_t n_emitted;           /* tokens emitted: accepted drafts + 1 (1 without drafts, 0 with
                                  Q35_OUTPUTS_NONE) */
  int32_t n_drafted;           /* drafts the head made for this row this step (the trunk accepted
                                  n_emitted - 1 of them) */
} q35_row;

/* Advance every row's session by its tokens in one pass over the weights and sample the
 * positions each row asks for. Rows must name distinct sessions of the context's model; no
 * session may be in another context's step at the same time. The step computes the logits of
 * the sampled positions only (Q35_OUTPUTS_NONE rows compute none) and allocates nothing once
 * its buffers have grown to the step's size. Every row is checked before anything runs: a
 * refused step moves no session. */
int q35_context_step(q35_context *ctx, q35_row *rows, int32_t n_rows, q35_err *err);
/* q35_context_step on the model's default context. */
int q35_step(q35_model *model, q35_row *rows, int32_t n_rows, q35_err *err);

/* Steps in flight, for a model split into pipeline stages (the MPI build under mpirun; see
 * "Pipeline stages" above). q35_context_step is q35_context_step_begin then _end:
 * begin checks the rows and runs this process's part of the step (the first stage's layers),
 * hands the rest to the later stages and returns without waiting for them (0, or -1 with nothing
 * in flight: a refused step moves no session); end waits for the step's results and fills the rows
 * as q35_context_step would (its 0 / -1 and error are the step's). In between, the caller leaves
 * the rows and everything they point to as they are, and may begin steps of other sessions on other
 * contexts of the same model, from the same thread: with up to q35_model_stages of them in flight,
 * every stage works on a different step at once (a pipeline of N stages then decodes up to N
 * times what one step at a time does). A context has at most one step in flight; steps end in the
 * order they began. Without later stages, begin runs the whole forward pass. A row's results never
 * depend on which steps are in flight (the invariance contract). */
int q35_context_step_begin(q35_context *ctx, q35_row *rows, int32_t n_rows, q35_err *err);
int q35_context_step_end(q35_context *ctx, q35_err *err);
/* The stages a step of this model passes through: 1 for a whole model in this process, N for rank 0
 * of a pipeline of N ranks. */
int32_t q35_model_stages(const q35_model *model);


/* ---- constraints: structured outputs ----------------------------------------------------
 *
 * A constraint restricts a row's samples to a language: a JSON Schema, free JSON (any
 * object), a regular expression or a GBNF grammar (llama.cpp's syntax). Languages, what is
 * supported and refused, and the whitespace and property-order policies: docs/CONSTRAIN.md.
 *
 * A q35_constraint_vocab holds the vocabulary's token byte strings (a trie); make it once per
 * model and keep it alive while constraints made from it exist. A q35_constraint is one
 * sequence's state in its language. In a step (q35_row.constraint), at every sampled position
 * the tokens that cannot continue the language get -inf logits BEFORE anything else of the
 * sampling contract (penalties, logit bias, temperature, filters); end-of-generation tokens
 * (eos, <|im_end|>, <|endoftext|>) are allowed only where the language is complete, and control
 * tokens never. The log-probabilities a constrained row returns are those of the masked logits.
 * After the sample the step advances the constraint by it. A row with n_outputs = m > 1
 * (speculative verification) is masked at position j by the state after its drafted tokens
 * tokens[p_0 + 1 .. p_j] (positions after a draft the constraint refuses are sampled unmasked:
 * a verifier never reaches them), and afterwards the constraint has advanced by the samples a
 * verifier accepts: outputs[0], then outputs[j] for as long as outputs[j - 1] equals the draft
 * tokens[p_0 + j]. A constraint is in one step at a time; distinct constraints are independent
 * (seeded rows stay bit-reproducible whatever their batch neighbours).
 */
typedef struct q35_constraint_vocab q35_constraint_vocab;
typedef struct q35_constraint q35_constraint;

typedef enum q35_constraint_kind {
  Q35_CONSTRAINT_JSON_SCHEMA = 1, /* text: a JSON Schema (drafts 4 to 2020-12; see docs/CONSTRAIN.md) */
  Q35_CONSTRAINT_JSON_OBJECT = 2, /* any JSON object (OpenAI's json_object); text unused */
  Q35_CONSTRAINT_REGEX = 3,       /* text: a regular expression the whole output matches */
  Q35_CONSTRAINT_GBNF = 4,        /* text: a GBNF grammar with a rule named root */
} q35_constraint_kind;

typedef struct q35_constraint_params {
  int32_t ws_max; /* JSON kinds: whitespace bytes allowed at each place between tokens; 0 (the
                     default) is compact JSON, at most 64 */
} q35_constraint_params;

/* The vocabulary of a model (its GGUF tokenizer) or of a tokenizer.json. */
q35_constraint_vocab *q35_constraint_vocab_from_model(const q35_model *model, q35_err *err);
q35_constraint_vocab *q35_constraint_vocab_from_tokenizer(const char *tokenizer_json, q35_err *err);
void q35_constraint_vocab_free(q35_constraint_vocab *v);
int32_t q35_constraint_vocab_n(const q35_constraint_vocab *v);

/* Compile text (len bytes) of the given kind (params may be NULL). NULL with a message naming
 * the problem: a syntax error with its position, an unsupported JSON Schema keyword by name, a
 * remote $ref, a language with no string at all (nothing could be generated). Every state the
 * constraint reaches can still complete: a mask never leads into a dead end. */
q35_constraint *q35_constraint_new(const q35_constraint_vocab *v, q35_constraint_kind kind, const char *text,
                                   size_t len, const q35_constraint_params *params, q35_err *err);
/* An independent copy in the same state (shares the compiled grammar); NULL when out of memory. */
q35_constraint *q35_constraint_clone(const q35_constraint *c);
void q35_constraint_free(q35_constraint *c);
/* Advance by one token: 0, or -1 (state unchanged) when the language does not allow it here. */
int q35_constraint_accept(q35_constraint *c, int32_t token, q35_err *err);
/* Whether token may come next (the state does not move). */
int q35_constraint_allows(q35_constraint *c, int32_t token);
/* The language is complete here (an end-of-generation token is allowed). */
int q35_constraint_is_complete(const q35_constraint *c);
/* An end-of-generation token has been accepted. */
int q35_constraint_is_finished(const q35_constraint *c);
/* Tokens accepted so far; q35_constraint_rollback(c, n) undoes the last n of them. */
int32_t q35_constraint_n_tokens(const q35_constraint *c);
int q35_constraint_rollback(q35_constraint *c, int32_t n, q35_err *err);
/* The mask of the current state: bit t of mask[t / 32] set when token t may come next
 * ((n_vocab + 31) / 32 words). 0, or -1 when out of memory. */
int q35_constraint_mask(q35_constraint *c, uint32_t *mask, q35_err *err);
/* Leading bytes of text the current state accepts (text itself allowed when it equals len). */
size_t q35_constraint_prefix(q35_constraint *c, const char *text, size_t len);
/* Lazy activation (a reasoning block, an optional tool call): before any token is accepted, make
 * the constraint wait for `token`: until it is accepted every token is allowed (the row samples
 * as if unconstrained, and may end there); from the token after it, the language applies,
 * after up to ws_max bytes of space, tab, CR or LF. For Qwen3.5 thinking, token is </think>;
 * for tool_choice auto with strict tools, <tool_call> (with a grammar for the call's body and
 * its </tool_call>). 0, or -1 when tokens were accepted already or the token is out of range. */
int q35_constraint_set_trigger(q35_constraint *c, int32_t token, int32_t ws_max, q35_err *err);
/* Whether the constraint is waiting for its trigger token. */
int q35_constraint_is_waiting(const q35_constraint *c);
/* The GBNF grammar the constraint compiled (JSON Schema and regex front ends write GBNF). */
const char *q35_constraint_grammar(const q35_constraint *c);

#ifdef __cplusplus
}
#endif
#endif
