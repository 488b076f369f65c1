/*
 * qwen35_gguf.h - what both GGUF writers of export/ (the Hugging Face exporter, hf.c, and the
 * test-model writer, tiny.c) put into a Qwen3.5 file the same way: the architecture's block of
 * hyperparameters (in llama.cpp's key order), the default M-RoPE sections, and the type a
 * tensor falls back to when its row length is not a multiple of the requested type's block.
 */
#ifndef Q35_EXPORT_QWEN35_GGUF_H
#define Q35_EXPORT_QWEN35_GGUF_H

#include <stdint.h>

#include "format/gguf.h"

typedef struct q35_export_hparams {
  int moe; /* 1: qwen35moe (expert keys), 0: qwen35 (feed_forward_length) */
  int64_t n_layer, n_ctx_train, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot;
  int32_t rope_sections[4];
  float rope_theta, rms_eps;
  int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
  int64_t conv_kernel, ssm_state, ssm_k_heads, ssm_v_heads, ssm_inner, interval;
  int64_t n_nextn; /* MTP blocks after the trunk: counted in block_count, nextn_predict_layers when > 0 */
} q35_export_hparams;

/* The architecture's name for general.architecture and its keys. */
const char *q35_export_arch(int moe);
/* Write every %s.* key of h (the architecture from h->moe). */
void q35_export_write_hparams(gguf_writer *w, const q35_export_hparams *h);

/* The M-RoPE sections llama.cpp's converter writes by default: n_rot / 2 split in three. */
void q35_export_rope_sections(int n_rot, int32_t out[4]);

/* Type for a row of ne0 elements asked to be `type`: `type` itself when its block divides
 * ne0, else as llama-quantize falls back: the 4-bit types (q4_0, q4_k, iq4_xs, and q5_k when
 * q5_k_to_q5_0) to q5_0, others to q8_0, and f16 when 32 does not divide ne0 either. */
int q35_export_fallback_type(int type, int64_t ne0, int q5_k_to_q5_0);

#endif
