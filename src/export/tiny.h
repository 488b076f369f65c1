/*
 * tiny.h - random-weight Qwen3.5 GGUF files in llama.cpp's exact conventions, for tests and
 * benchmarks (q35 export --tiny-test). Any shape the architecture allows: MoE or dense,
 * Hk != Hv or Hk == Hv, tied or untied output, any interval, any supported tensor types.
 * Weights are scaled so that activations stay of unit order and logits are not degenerate.
 */
#ifndef Q35_EXPORT_TINY_H
#define Q35_EXPORT_TINY_H

#include <stdint.h>

#include "format/gguf.h"
#include "q35.h"

/* Largest layer count and embedding width q35_tiny_write accepts. */
#define Q35_TINY_MAX_LAYERS 256
#define Q35_TINY_MAX_EMBD 16384

typedef struct q35_tiny_opts {
  int moe;                 /* 1: qwen35moe, 0: dense qwen35 */
  int n_layer, n_embd, n_head, n_head_kv, head_dim, n_rot;
  int ssm_k_heads, ssm_v_heads, ssm_head_dim, conv_kernel;
  int n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_ff;
  int n_vocab, interval, tied, n_ctx_train;
  float rope_theta;
  int type;                /* linear weights (q35_type) */
  int type_down;           /* ffn_down* (and attn_v) override, -1: same as type */
  int type_output;         /* output.weight, -1: same as type */
  int type_embd;           /* token_embd, -1: same as type */
  uint64_t seed;
  const char *tokenizer_json; /* NULL: a synthetic byte-level BPE vocabulary */
  const char *tokenizer_config; /* tokenizer_config.json (chat template, specials), or NULL */
  int merged_gate_up;      /* write ffn_gate_up_exps instead of separate gate/up */
  int mtp;                 /* 1: append one MTP block blk.{n_layer} (attention + FFN + nextn.*), as
                              llama.cpp's converter writes a Qwen3.5 checkpoint's mtp.* */
  gguf_split_opts split;   /* zero: one file; else shards as gguf_writer_set_split writes them */
  float mtp_agree;         /* >= 0 (with mtp): a trunk that predicts a fixed permutation of the
                              vocabulary and a head agreeing with it on about this fraction of
                              tokens (tiny.c); -1: random weights */
  int32_t mtp_agree_vocab; /* > 0 (with mtp_agree): the permutation maps ids [0, K) onto themselves (and
                              [K, vocab) onto themselves), so a generation that starts below K stays
                              there: a stand-in for a real text's most frequent ids, for measuring a
                              draft over a reduced vocabulary (--draft-vocab K); 0: one permutation */
  int recipe;              /* -1, or a recipe (export/recipe.h) choosing every weight's type; the
                              types given explicitly (type_set, type_down, type_output, type_embd)
                              override it for their tensors */
  int type_set;            /* 1: `type` was given (it overrides the recipe for the linear weights) */
  const struct q35_imatrix *imatrix; /* importance weights for the quantizers, or NULL */
  int dry_run;             /* 1: print each tensor's name and type on stdout instead of writing (the
                              checks still run), as llama-quantize --dry-run lists them */
} q35_tiny_opts;

/* A small MoE default: 4 layers (interval 4), embd 256, 4/2 heads of 64, DeltaNet 4 key
 * heads / 8 value heads of 32, 8 experts top-2 of 64, shared expert 64, vocab 1024, f32. */
q35_tiny_opts q35_tiny_default(void);
int q35_tiny_write(const q35_tiny_opts *o, const char *path, q35_err *err);

#endif
