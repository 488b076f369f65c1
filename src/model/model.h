/*
 * model.h - the model as the file defines it: Qwen3.5 hyperparameters and weights (views into the
 * mmapped GGUF); per-session state; and the forward pass over several sessions at once.
 *
 * A q35_model is read-only once loaded: every forward pass reads it and writes only the sessions
 * it advances and the workspace it is given (q35_fwd_ws: threads + scratch, which a q35_context
 * owns, engine/context.h). So any number of contexts can run forward passes on one model at once.
 *
 * Architectures: "qwen35moe" (sparse MoE FFN with a shared expert) and "qwen35" (dense
 * SwiGLU FFN). Layer i is full attention iff (i + 1) % full_attention_interval == 0, else a
 * Gated DeltaNet layer. The first MTP block (blk.{n_layer}, of nextn_predict_layers blocks after the
 * trunk) is bound as `mtp` (a full-attention layer plus the nextn tensors); the forward pass of the
 * trunk never reads it.
 * Math: the model notes (docs/DESIGN.md); GGUF conventions: norms hold 1 + w, ssm_a holds
 * -exp(A_log), value head j of a DeltaNet layer uses key head j mod Hk.
 */
#ifndef Q35_MODEL_H
#define Q35_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "q35.h"
#include "engine/threadpool.h"

typedef struct q35_tensor {
  const void *data;      /* NULL when absent */
  int type;              /* enum q35_type */
  int64_t ne[4];
  size_t nb1;            /* bytes per row (ne[0] elements) */
  size_t nb2;            /* bytes per matrix (ne[0] * ne[1] elements) */
} q35_tensor;

typedef struct q35_hparams {
  int is_moe;
  int n_vocab, n_embd, n_layer, n_layer_all;
  int n_head, n_head_kv, head_dim, n_rot;
  float rope_theta, eps;
  int interval;
  /* Gated DeltaNet */
  int conv_kernel, ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_inner;
  /* FFN */
  int n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_ff;
  int n_ctx_train;
} q35_hparams;

typedef struct q35_layer {
  int is_attn;
  int attn_index;        /* index among attention layers, or among DeltaNet layers */
  q35_tensor attn_norm, post_norm;
  /* attention */
  q35_tensor wq, wk, wv, wo, q_norm, k_norm;
  /* Gated DeltaNet */
  q35_tensor wqkv, wz, wbeta, walpha, conv, dt_bias, ssm_a, ssm_norm, ssm_out;
  /* MoE */
  q35_tensor router, gate_exps, up_exps, gate_up_exps, down_exps;
  q35_tensor gate_shexp, up_shexp, down_shexp, shexp_gate;
  /* dense FFN */
  q35_tensor ffn_gate, ffn_up, ffn_down;
} q35_layer;

/* The MTP (NextN) head, llama.cpp's graph_mtp: x = eh_proj concat[enorm(embed(t+1)), hnorm(h_t)],
 * one full-attention decoder layer, then shared_head_norm (or output_norm) and the output matrix
 * (shared_head_head or output); embed_tokens or token_embd. Norms hold 1 + w (the converter adds 1
 * to enorm, hnorm and shared_head.norm: their remapped names end in norm.weight). */
typedef struct q35_mtp {
  q35_layer layer;            /* is_attn = 1 */
  q35_tensor eh_proj;         /* {2H, H} */
  q35_tensor enorm, hnorm;    /* {H} f32 */
  q35_tensor head_norm;       /* shared_head_norm, or the model's output_norm */
  q35_tensor embd;            /* nextn.embed_tokens, or token_embd */
  q35_tensor head;            /* nextn.shared_head_head, or the model's output */
} q35_mtp;

/* The later stages of a pipeline (dist/pp.c, built with -DQ35_MPI=ON): a model that holds the first
 * layers only hands the residual stream of each step's tokens on through these, and its sessions'
 * lifetimes are mirrored there. NULL in a process that holds the whole model. */
enum { Q35_STAGE_SESSION_NEW, Q35_STAGE_SESSION_FREE, Q35_STAGE_SESSION_RESET };
/* snapshot(): SAVE copies each later stage's recurrent state of s under a new id (*id, set by the
 * call); RESTORE puts the state of snapshot *id back into s on every later stage (0, or -1 with the
 * failing stage's message); FREE drops snapshot *id (s NULL; callable from any thread: the release
 * travels with the next command) */
enum { Q35_STAGE_SNAP_SAVE, Q35_STAGE_SNAP_RESTORE, Q35_STAGE_SNAP_FREE };
enum { Q35_STAGE_MICRO_BEGIN, Q35_STAGE_MICRO_END };
/* flight(): between OPEN and CLOSE (around the forward pass of q35_context_step_begin) forward()
 * sends the rows on and returns without waiting for their results; WAIT (q35_context_step_end)
 * waits for every result sent under that key (0, or -1 with a message) */
enum { Q35_STAGE_FLIGHT_OPEN, Q35_STAGE_FLIGHT_CLOSE, Q35_STAGE_FLIGHT_WAIT };
enum { Q35_STAGE_CKPT_RESTORE };
typedef struct q35_stage_next q35_stage_next;
struct q35_fwd_row;
struct q35_step_out;
struct q35_stage_next {
  /* after this stage's layers: x = the residual stream [T][n_embd] of the rows' tokens; writes
   * each row's logits (and hidden) as the whole model would */
  int (*forward)(q35_stage_next *nx, const struct q35_fwd_row *rows, int n_rows, const float *x, int64_t T,
                 q35_err *err);
  int (*session)(q35_stage_next *nx, int op, const q35_session *s, q35_err *err);
  /* a step (engine/step.c) about to run its forward pass: the last stage samples the rows'
   * positions itself and the next forward writes the results to out[] (in step order) instead of
   * logits; rows NULL withdraws the offer (the forward pass was refused). 0: it will. */
  int (*sample_next)(q35_stage_next *nx, const q35_row *rows, int n_rows, struct q35_step_out *out);
  int (*snapshot)(q35_stage_next *nx, int op, const q35_session *s, uint64_t *id, q35_err *err);
  /* micro-batching: a forward pass with at least n_micro rows and 4 n_micro tokens (n_micro > 1;
   * forward.c MICRO_MIN_TOKENS) runs as n_micro
   * forward passes of contiguous row groups between micro(BEGIN) and micro(END); in between,
   * forward() sends each group on without waiting for its results, so the stages overlap, and
   * END waits for every group's results (0, or -1 with a message) */
  int n_micro;
  int (*micro)(q35_stage_next *nx, int op, q35_err *err);
  /* steps in flight: key is the stepping context (one step in flight per context) */
  int (*flight)(q35_stage_next *nx, int op, const void *key, q35_err *err);
  /* speculation: a session's checkpoints on the later stages follow the first stage's (checkpoint.c):
   * CKPT_RESTORE restores the state after token arg (q35_session_ckpt_restore; a rollback is one). The later
   * stages arm theirs with each forward's rows (the first stage's q35_session.ckpt_n), and write
   * the trunk's hidden states into the first stage's q35_session.hidden_all when it is set;
   * NULL: no speculation on this pipeline. */
  void (*ckpt)(q35_stage_next *nx, int op, const q35_session *s, int32_t arg);
  int n_stages; /* this stage and the later ones */
  void (*close)(q35_stage_next *nx); /* the model is freed: the later stages stop */
};

struct q35_model {
  gguf_file *gguf;
  q35_hparams hp;
  q35_tensor tok_embd, output_norm, output;
  q35_layer *layers;
  int n_attn_layers, n_gdn_layers;
  int has_mtp;                  /* the file carries an MTP block (nextn_predict_layers >= 1) */
  q35_mtp mtp;
  char desc[256];
  long long huge_bytes;         /* bytes of the file mapping mapped with 2 MiB entries; -1 unknown */
  long long repacked_bytes;     /* bytes of weights rewritten at load (q35_repack_type) */
  /* anonymous mappings holding weights repacked into a larger layout (IQ2_XXSR), unmapped at free */
  void **grown;
  size_t *grown_size;
  size_t n_grown;
  q35_context *ctx;             /* the default context (q35_step, q35_session_eval), made at load */
  /* A pipeline stage holds layers [layer_begin, layer_end) only (all: 0, n_layer), the embedding
   * when it begins at 0 and the output head when it ends at n_layer; n_attn_layers / n_gdn_layers
   * and attn_index count its own layers, so its sessions hold their state only. */
  int layer_begin, layer_end;
  q35_stage_next *next;         /* NULL, or the later stages (set by dist/pp.c) */
};

struct q35_session {
  q35_model *model;
  q35_session_params params;
  int32_t pos;
  /* attention: per attention layer, K and V caches [n_ctx][n_head_kv * head_dim] of kv_type */
  void **k_cache, **v_cache;
  size_t kv_row_bytes;
  /* DeltaNet: per layer conv state [K-1][conv_dim] and recurrent state [Hv][dv][dk], fp32 */
  float **conv_state, **ssm_state;
  size_t bytes;
  /* per-position checkpoints of the DeltaNet state (model/mtp.h, checkpoint.c): while ckpt_n > 0
   * a forward pass saves the conv state after each of a row's first ckpt_n tokens into slot i and
   * the recurrence's inputs of those tokens, and runs the recurrence in the spare state buffer,
   * which then swaps with ssm_state (the spare keeps the state before the pass) */
  int32_t ckpt_n, ckpt_cap, ckpt_pos0;
  int32_t ckpt_last; /* the n_max of the last arm: slots holding that pass's states */
  float **ckpt_conv; /* per DeltaNet layer: [ckpt_cap][conv state] */
  float **ckpt_in;   /* per DeltaNet layer: [ckpt_cap][conv row (q, k, v), beta [Hv], decay [Hv]] */
  float **ckpt_spare; /* per DeltaNet layer: a second recurrent state [Hv][dv][dk] */
  int32_t ckpt_touched;          /* slots [0, ckpt_touched) have their pages touched (q35_session_ckpt_touch) */
  /* NULL, or where a forward pass writes output_norm(x) of every position of this session's row
   * (n * n_embd floats; the MTP head's input over a prompt, model/mtp.h) */
  float *hidden_all;
  /* NULL, or the MTP head's state of this session (params.draft_max > 0; model/mtp.h) */
  struct q35_mtp_cache *mtp;
};
/* checkpoint.c: free a session's checkpoint slots (q35_session_free) */
void q35_session_ckpt_free(q35_session *s);

/* One row of a forward pass: a session consuming n tokens, with logits (and optionally the
 * post-norm hidden state) wanted for its last n_out positions (0 <= n_out <= n). */
typedef struct q35_fwd_row {
  q35_session *s;
  const int32_t *tokens;
  int32_t n;
  int32_t n_out;
  float *logits; /* n_out * n_vocab floats, position major (unused when n_out is 0) */
  float *hidden; /* NULL, or n_out * n_embd floats: output_norm(x) of those positions */
  /* pipeline stages: */
  const float *x_in; /* NULL, or n * n_embd floats: the residual stream entering the model's first
                        layer, in place of the tokens' embeddings (tokens may then be NULL) */
  float *x_out;      /* NULL, or n * n_embd floats: the residual stream after the model's last layer
                        (no output head runs; n_out is ignored). All rows or none set it. */
} q35_fwd_row;

/* What a forward pass runs on: the threads, and the scratch block it grows on demand (never per
 * token once grown). One forward pass at a time per workspace. */
typedef struct q35_fwd_ws {
  q35_pool *pool;
  void *scratch;
  size_t scratch_size;
  float *mtp_cat;      /* the MTP head's eh_proj inputs [T][2 n_embd] (model/mtp.c), grown on demand */
  size_t mtp_cat_cap;  /* (floats) */
} q35_fwd_ws;

/* Advance every row's session by its tokens (rows name distinct sessions of m) and write the
 * logits asked for. Validates every row before anything runs: a refused call moves no session. */
int q35_forward(const q35_model *m, q35_fwd_ws *ws, q35_fwd_row *rows, int n_rows, q35_err *err);

/* mapping.c: populate the file mapping (2 MiB pages unless huge is 0); returns the bytes mapped
 * with 2 MiB entries, -1 where the kernel does not say. */
long long q35_map_prefault(const gguf_file *f, int huge, int progress);
/* mapping.c: the file's bytes into anonymous memory at the mapping's address (no_mmap). */
int q35_map_into_memory(gguf_file *f, const char *path, q35_err *err);

/* load.c: the bytes of the file's tensors of each trunk layer (layer_bytes[n_layer], malloc'd), of
 * the embedding and of the output head (output_norm + output; 0 when tied), for splitting a model
 * into pipeline stages. */
int q35_model_plan(const char *path, int *n_layer, uint64_t **layer_bytes, uint64_t *embd_bytes,
                   uint64_t *out_bytes, q35_err *err);
/* mapping.c: keep only [off[i], off[i] + len[i]) (offsets into f's own map, sorted, disjoint) of the
 * tensor data mapped, the rest replaced by an inaccessible reservation (a pipeline stage; n = 0
 * drops the whole data section),
 * and populate those ranges, or with copy (no_mmap) read them into anonymous memory at the same
 * addresses; returns the bytes mapped with 2 MiB entries (0 with copy), -1 where the kernel does
 * not say, -2 with err when a copy failed. f is one shard (gguf_shard). */
long long q35_map_keep(gguf_file *f, const size_t *off, const size_t *len, size_t n, int huge, int copy,
                       q35_err *err);

/* mapping.c: [lo, hi) of f's map (page-aligned) replaced by a rewritten copy at the same address
 * (see there; huge: 2 MiB pages advised while it is written); fn writes into copy, which stands
 * for orig = f->map + lo, every byte of [wlo, whi) (offsets in f: not copied first). 0, or -1
 * with err. */
int q35_map_rewrite(gguf_file *f, size_t lo, size_t hi, size_t wlo, size_t whi, int drop, int huge,
                    void (*fn)(void *arg, uint8_t *copy, const uint8_t *orig), void *arg, q35_err *err);

/* The scalar path of a full forward pass runs with Q35_SIMD=scalar; see quant.h. */

#endif
