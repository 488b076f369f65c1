/* qwen35_gguf.c - the metadata and type rules both exporters share (see qwen35_gguf.h). */
#include "export/qwen35_gguf.h"

#include "format/gguf_names.h"
#include "format/tensor_types.h"

#define FALLBACK_BLOCK 32 /* block of q5_0 / q8_0, the fallback types */

const char *q35_export_arch(int moe) { return moe ? Q35_GGUF_ARCH_MOE : Q35_GGUF_ARCH_DENSE; }

static void put_u32(gguf_writer *w, const char *arch, q35_gguf_key_id key, int64_t v) {
  gguf_set_u32(w, q35_gguf_key(key, arch).s, (uint32_t)v);
}

void q35_export_write_hparams(gguf_writer *w, const q35_export_hparams *h) {
  const char *arch = q35_export_arch(h->moe);
  put_u32(w, arch, Q35_KEY_BLOCK_COUNT, h->n_layer + h->n_nextn);
  put_u32(w, arch, Q35_KEY_CONTEXT_LENGTH, h->n_ctx_train);
  put_u32(w, arch, Q35_KEY_EMBEDDING_LENGTH, h->n_embd);
  if (!h->moe) put_u32(w, arch, Q35_KEY_FEED_FORWARD_LENGTH, h->n_ff);
  put_u32(w, arch, Q35_KEY_HEAD_COUNT, h->n_head);
  put_u32(w, arch, Q35_KEY_HEAD_COUNT_KV, h->n_head_kv);
  put_u32(w, arch, Q35_KEY_KEY_LENGTH, h->head_dim);
  put_u32(w, arch, Q35_KEY_VALUE_LENGTH, h->head_dim);
  put_u32(w, arch, Q35_KEY_ROPE_DIMENSION_COUNT, h->n_rot);
  gguf_set_arr_i32(w, q35_gguf_key(Q35_KEY_ROPE_DIMENSION_SECTIONS, arch).s, h->rope_sections, 4);
  gguf_set_f32(w, q35_gguf_key(Q35_KEY_ROPE_FREQ_BASE, arch).s, h->rope_theta);
  gguf_set_f32(w, q35_gguf_key(Q35_KEY_RMS_EPS, arch).s, h->rms_eps);
  if (h->moe) {
    put_u32(w, arch, Q35_KEY_EXPERT_COUNT, h->n_expert);
    put_u32(w, arch, Q35_KEY_EXPERT_USED_COUNT, h->n_expert_used);
    put_u32(w, arch, Q35_KEY_EXPERT_FF_LENGTH, h->n_ff_exp);
    put_u32(w, arch, Q35_KEY_EXPERT_SHARED_FF_LENGTH, h->n_ff_shexp);
  }
  put_u32(w, arch, Q35_KEY_SSM_CONV_KERNEL, h->conv_kernel);
  put_u32(w, arch, Q35_KEY_SSM_STATE_SIZE, h->ssm_state);
  put_u32(w, arch, Q35_KEY_SSM_GROUP_COUNT, h->ssm_k_heads);
  put_u32(w, arch, Q35_KEY_SSM_TIME_STEP_RANK, h->ssm_v_heads);
  put_u32(w, arch, Q35_KEY_SSM_INNER_SIZE, h->ssm_inner);
  put_u32(w, arch, Q35_KEY_FULL_ATTENTION_INTERVAL, h->interval);
  if (h->n_nextn > 0) put_u32(w, arch, Q35_KEY_NEXTN_PREDICT_LAYERS, h->n_nextn);
}

void q35_export_rope_sections(int n_rot, int32_t out[4]) {
  const int s = n_rot / 2;
  out[0] = (s + 2) / 3;
  out[1] = (s + 1) / 3;
  out[2] = s / 3;
  out[3] = 0;
}

int q35_export_fallback_type(int type, int64_t ne0, int q5_k_to_q5_0) {
  if (ne0 % q35_type_block(type) == 0) return type;
  const int four_bit = type == Q35_TYPE_Q4_K || type == Q35_TYPE_IQ4_XS || type == Q35_TYPE_Q4_0 ||
                       (q5_k_to_q5_0 && type == Q35_TYPE_Q5_K);
  if (ne0 % FALLBACK_BLOCK) return Q35_TYPE_F16;
  if (type == Q35_TYPE_Q2_K || type == Q35_TYPE_Q3_K || type == Q35_TYPE_IQ2_XXS || type == Q35_TYPE_IQ2_XS ||
      type == Q35_TYPE_IQ2_S || type == Q35_TYPE_IQ3_XXS || type == Q35_TYPE_IQ3_S || type == Q35_TYPE_IQ1_S ||
      type == Q35_TYPE_IQ1_M)
    return Q35_TYPE_IQ4_NL; /* as llama-quantize */
  return four_bit ? Q35_TYPE_Q5_0 : Q35_TYPE_Q8_0;
}
