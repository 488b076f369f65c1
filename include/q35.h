/*
 * q35.h - the q35 library: Qwen3.5 (qwen35moe, dense qwen35) inference on the CPU.
 *
 * Overview
 * --------
 * A q35_model is one loaded GGUF file: the file is mmapped read-only and every weight tensor
 * is a zero-copy view into it, so loading is cheap and several processes share pages. The
 * model owns a persistent thread pool that every forward pass uses.
 *
 * A q35_session is one sequence's state: the KV cache of the full-attention layers, the
 * convolution and recurrent (delta-rule) state of the Gated DeltaNet layers, the position,
 * and the tokens consumed so far. Sessions never share mutable state, so any number of them
 * can live on one model. They are created with a context limit; feeding a token past it is
 * refused with an error, never truncated silently.
 *
 * The model step is q35_step: each row names a session and the tokens it consumes (a prompt
 * chunk for prefill, one token for decode), and the step returns, per row, the token sampled
 * from that row's last-position logits with that row's own sampling parameters
 * (temperature, top-k, top-p, min-p, penalties, seed, draw index). Sampling follows the
 * contract in docs/SAMPLING.md: temperature 0 is greedy; seeded draws are a pure function of
 * (seed, draw index), so seeded runs reproduce bit for bit whatever the batch neighbours,
 * thread count or prefill chunking. A row's logits never depend on the other rows.
 *
 * Threading: one q35_step runs at a time per model (the caller serializes; the server's
 * scheduler does). Distinct models are independent.
 *
 * Errors: fallible calls return 0 (or a non-NULL object) on success, and -1 (or NULL) on
 * failure with a human-readable message in the caller's q35_err.
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
typedef struct q35_session q35_session;

/* ---- model ---------------------------------------------------------------------------- */

typedef struct q35_model_params {
  int n_threads;     /* worker threads for the forward pass; <= 0: all online CPUs */
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
} q35_model_params;

q35_model_params q35_model_default_params(void);
q35_model *q35_model_load(const char *path, const q35_model_params *params, q35_err *err);
void q35_model_free(q35_model *model);

int32_t q35_model_n_vocab(const q35_model *model);
int32_t q35_model_n_threads(const q35_model *model);
/* Seconds spent in the sampling head by q35_step since the model was loaded. */
double q35_model_sample_seconds(const q35_model *model);
/* Bytes of the weight file mapped with 2 MiB pages after loading (0 with no_mmap, where the
 * copy is anonymous memory); -1 where the kernel does not report it. */
long long q35_model_huge_bytes(const q35_model *model);
/* Short description: architecture, layer counts, tensor types (one line, no newline). */
const char *q35_model_desc(const q35_model *model);

/* ---- sessions ------------------------------------------------------------------------- */

typedef enum q35_kv_type {
  Q35_KV_F32 = 0,
  Q35_KV_F16 = 1,
  Q35_KV_Q8_0 = 8,
} q35_kv_type;

typedef struct q35_session_params {
  int32_t n_ctx;          /* context limit in tokens (default 4096) */
  q35_kv_type kv_type;    /* KV cache element type (default F16) */
  uint64_t mem_budget;    /* bytes; 0 = no limit (default). q35_session_new refuses, before allocating,
                             when the state (q35_session_state_bytes) would exceed it */
} q35_session_params;

q35_session_params q35_session_default_params(void);
/* Bytes of KV cache + recurrent (DeltaNet conv + delta-rule) state a session with these params
 * allocates, computed without allocating; 0 when the params are invalid. With recurrent != NULL,
 * *recurrent receives the recurrent part alone (the size of one snapshot's data). */
uint64_t q35_session_state_bytes(const q35_model *model, const q35_session_params *params, uint64_t *recurrent);
q35_session *q35_session_new(q35_model *model, const q35_session_params *params, q35_err *err);
void q35_session_reset(q35_session *s); /* back to position 0, empty state */
void q35_session_free(q35_session *s);
int32_t q35_session_pos(const q35_session *s);
int32_t q35_session_n_ctx(const q35_session *s);
size_t q35_session_bytes(const q35_session *s); /* memory held by the state */

/* Snapshots of the recurrent state, for prefix reuse. The attention KV cache is append-only,
 * so going back to an earlier position only needs the DeltaNet conv + recurrent state of that
 * position: q35_session_snapshot copies it (with the position); q35_session_restore puts it
 * back and sets the position, provided the session still holds the KV entries below it (it
 * has not been reset or rewound below the snapshot's position since the snapshot was taken;
 * the caller, who tracks the tokens, guarantees this). */
typedef struct q35_snapshot q35_snapshot;
q35_snapshot *q35_session_snapshot(const q35_session *s, q35_err *err);
int q35_session_restore(q35_session *s, const q35_snapshot *snap, q35_err *err);
int32_t q35_snapshot_pos(const q35_snapshot *snap);
size_t q35_snapshot_bytes(const q35_snapshot *snap);
void q35_snapshot_free(q35_snapshot *snap);

/* Feed tokens (prefill in chunks of `chunk` tokens, <= 0: one chunk) and optionally write
 * logits: the last position's n_vocab floats, or with all != 0 every position's (n * n_vocab,
 * position major). logits may be NULL. */
int q35_session_eval(q35_session *s, const int32_t *tokens, int32_t n, int32_t chunk,
                     float *logits, int all, q35_err *err);

/* ---- sampling ------------------------------------------------------------------------- */

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
} q35_sampling;

/* temperature 1, top_k 0, top_p 1, min_p 0, no penalties, seed 0, draw 0 */
q35_sampling q35_sampling_default(void);
/* 0 if every parameter is in range, else -1 with a message naming the parameter and range. */
int q35_sampling_validate(const q35_sampling *p, q35_err *err);
/* A seed below 2^53 from OS entropy (for unseeded requests; report it to the user). */
uint64_t q35_random_seed(void);

#define Q35_MAX_TOP_LOGPROBS 20

/* ---- the step ------------------------------------------------------------------------- */

typedef struct q35_row {
  /* inputs */
  q35_session *session;
  const int32_t *tokens;       /* tokens this row consumes in this step (>= 1) */
  int32_t n_tokens;
  const q35_sampling *sampling;
  const int32_t *history;      /* for penalties: prompt then generated tokens (may be NULL) */
  int32_t n_history;
  int32_t n_prompt;            /* history[0 .. n_prompt) is the prompt */
  int32_t n_top_logprobs;      /* -1: no logprobs; 0: the token's; 1 .. Q35_MAX_TOP_LOGPROBS: alternatives */
  /* outputs */
  int32_t token;               /* the sampled token */
  float logprob;               /* log-probability of `token` under log_softmax(logits) */
  int32_t top_ids[Q35_MAX_TOP_LOGPROBS];
  float top_logprobs[Q35_MAX_TOP_LOGPROBS];
} q35_row;

/* Advance every row's session by its tokens in one pass over the weights and sample one
 * token per row. Rows must name distinct sessions of this model. */
int q35_step(q35_model *model, q35_row *rows, int32_t n_rows, q35_err *err);

#ifdef __cplusplus
}
#endif
#endif
