/*
 * gguf_names.h - the one table of GGUF names: every metadata key and every tensor name q35
 * reads or writes, in llama.cpp's conventions for the qwen35moe / qwen35 architectures (the
 * model notes, docs/DESIGN.md). The model loader, the Hugging Face exporter and the test-model
 * writer all spell names through it, so a key or tensor is renamed in one place.
 *
 * Keys. Q35_GGUF_KEYS lists (id, spelling). A key of the architecture's block is spelled with
 * "%s" for the architecture ("%s.block_count" -> "qwen35moe.block_count"); the general.* and
 * tokenizer.* keys have no "%s".
 *
 * Tensors. Q35_GGUF_TENSORS lists (id, spelling). A per-layer tensor is spelled with "%d" for
 * the layer index ("blk.%d.attn_q.weight" -> "blk.3.attn_q.weight"); the whole-model tensors
 * (token_embd, output_norm, output) have no "%d".
 *
 * Use: q35_gguf_key(Q35_KEY_BLOCK_COUNT, arch).s and q35_gguf_tensor(Q35_TENSOR_ATTN_Q, il).s
 * are the finished names. They return a small struct by value, so the name can be passed
 * straight to gguf_get_u32 / gguf_set_u32 / gguf_find_tensor (it lives until the end of the
 * enclosing full expression; copy .s to keep it longer).
 */
#ifndef Q35_GGUF_NAMES_H
#define Q35_GGUF_NAMES_H

#include <stddef.h>

/* general.architecture values */
#define Q35_GGUF_ARCH_MOE "qwen35moe"
#define Q35_GGUF_ARCH_DENSE "qwen35"

/* clang-format off */
#define Q35_GGUF_KEYS(X)                                                                   \
  /* general */                                                                            \
  X(GENERAL_ARCHITECTURE,        "general.architecture")                                   \
  X(GENERAL_NAME,                "general.name")                                           \
  X(GENERAL_FILE_TYPE,           "general.file_type")                                      \
  X(GENERAL_QUANT_VERSION,       "general.quantization_version")                           \
  X(GENERAL_ALIGNMENT,           "general.alignment")                                      \
  /* split files (llama.cpp's gguf-split: split.no is 0-based, u16; tensors.count is i32) */ \
  X(SPLIT_NO,                    "split.no")                                               \
  X(SPLIT_COUNT,                 "split.count")                                            \
  X(SPLIT_TENSORS_COUNT,         "split.tensors.count")                                    \
  /* the architecture's block: sizes */                                                    \
  X(BLOCK_COUNT,                 "%s.block_count")                                         \
  X(CONTEXT_LENGTH,              "%s.context_length")                                      \
  X(EMBEDDING_LENGTH,            "%s.embedding_length")                                    \
  X(FEED_FORWARD_LENGTH,         "%s.feed_forward_length")                                 \
  X(NEXTN_PREDICT_LAYERS,        "%s.nextn_predict_layers")                                \
  X(FULL_ATTENTION_INTERVAL,     "%s.full_attention_interval")                             \
  /* attention */                                                                          \
  X(HEAD_COUNT,                  "%s.attention.head_count")                                \
  X(HEAD_COUNT_KV,               "%s.attention.head_count_kv")                             \
  X(KEY_LENGTH,                  "%s.attention.key_length")                                \
  X(VALUE_LENGTH,                "%s.attention.value_length")                              \
  X(RMS_EPS,                     "%s.attention.layer_norm_rms_epsilon")                    \
  /* rope */                                                                               \
  X(ROPE_DIMENSION_COUNT,        "%s.rope.dimension_count")                                \
  X(ROPE_DIMENSION_SECTIONS,     "%s.rope.dimension_sections")                             \
  X(ROPE_FREQ_BASE,              "%s.rope.freq_base")                                      \
  /* DeltaNet (gated delta rule) layers */                                                 \
  X(SSM_CONV_KERNEL,             "%s.ssm.conv_kernel")                                     \
  X(SSM_STATE_SIZE,              "%s.ssm.state_size")                                      \
  X(SSM_GROUP_COUNT,             "%s.ssm.group_count")                                     \
  X(SSM_TIME_STEP_RANK,          "%s.ssm.time_step_rank")                                  \
  X(SSM_INNER_SIZE,              "%s.ssm.inner_size")                                      \
  /* mixture of experts */                                                                 \
  X(EXPERT_COUNT,                "%s.expert_count")                                        \
  X(EXPERT_USED_COUNT,           "%s.expert_used_count")                                   \
  X(EXPERT_FF_LENGTH,            "%s.expert_feed_forward_length")                          \
  X(EXPERT_SHARED_FF_LENGTH,     "%s.expert_shared_feed_forward_length")                   \
  /* tokenizer */                                                                          \
  X(TOKENIZER_MODEL,             "tokenizer.ggml.model")                                   \
  X(TOKENIZER_PRE,               "tokenizer.ggml.pre")                                     \
  X(TOKENIZER_TOKENS,            "tokenizer.ggml.tokens")                                  \
  X(TOKENIZER_TOKEN_TYPE,        "tokenizer.ggml.token_type")                              \
  X(TOKENIZER_MERGES,            "tokenizer.ggml.merges")                                  \
  X(TOKENIZER_BOS_ID,            "tokenizer.ggml.bos_token_id")                            \
  X(TOKENIZER_EOS_ID,            "tokenizer.ggml.eos_token_id")                            \
  X(TOKENIZER_PAD_ID,            "tokenizer.ggml.padding_token_id")                        \
  X(TOKENIZER_ADD_BOS,           "tokenizer.ggml.add_bos_token")                           \
  X(TOKENIZER_CHAT_TEMPLATE,     "tokenizer.chat_template")

#define Q35_GGUF_TENSORS(X)                                                                \
  /* whole model */                                                                        \
  X(TOKEN_EMBD,                  "token_embd.weight")                                      \
  X(OUTPUT_NORM,                 "output_norm.weight")                                     \
  X(OUTPUT,                      "output.weight")                                          \
  /* every layer */                                                                        \
  X(ATTN_NORM,                   "blk.%d.attn_norm.weight")                                \
  X(POST_ATTN_NORM,              "blk.%d.post_attention_norm.weight")                      \
  /* full-attention layers */                                                              \
  X(ATTN_Q,                      "blk.%d.attn_q.weight")                                   \
  X(ATTN_K,                      "blk.%d.attn_k.weight")                                   \
  X(ATTN_V,                      "blk.%d.attn_v.weight")                                   \
  X(ATTN_OUTPUT,                 "blk.%d.attn_output.weight")                              \
  X(ATTN_Q_NORM,                 "blk.%d.attn_q_norm.weight")                              \
  X(ATTN_K_NORM,                 "blk.%d.attn_k_norm.weight")                              \
  /* DeltaNet layers */                                                                    \
  X(ATTN_QKV,                    "blk.%d.attn_qkv.weight")                                 \
  X(ATTN_GATE,                   "blk.%d.attn_gate.weight")                                \
  X(SSM_BETA,                    "blk.%d.ssm_beta.weight")                                 \
  X(SSM_ALPHA,                   "blk.%d.ssm_alpha.weight")                                \
  X(SSM_CONV1D,                  "blk.%d.ssm_conv1d.weight")                               \
  X(SSM_DT_BIAS,                 "blk.%d.ssm_dt.bias")                                     \
  X(SSM_A,                       "blk.%d.ssm_a")                                           \
  X(SSM_NORM,                    "blk.%d.ssm_norm.weight")                                 \
  X(SSM_OUT,                     "blk.%d.ssm_out.weight")                                  \
  /* MoE feed-forward: router, experts, shared expert */                                   \
  X(FFN_GATE_INP,                "blk.%d.ffn_gate_inp.weight")                             \
  X(FFN_GATE_UP_EXPS,            "blk.%d.ffn_gate_up_exps.weight")                         \
  X(FFN_GATE_EXPS,               "blk.%d.ffn_gate_exps.weight")                            \
  X(FFN_UP_EXPS,                 "blk.%d.ffn_up_exps.weight")                              \
  X(FFN_DOWN_EXPS,               "blk.%d.ffn_down_exps.weight")                            \
  X(FFN_GATE_SHEXP,              "blk.%d.ffn_gate_shexp.weight")                           \
  X(FFN_UP_SHEXP,                "blk.%d.ffn_up_shexp.weight")                             \
  X(FFN_DOWN_SHEXP,              "blk.%d.ffn_down_shexp.weight")                           \
  X(FFN_GATE_INP_SHEXP,          "blk.%d.ffn_gate_inp_shexp.weight")                       \
  /* dense feed-forward */                                                                 \
  X(FFN_GATE,                    "blk.%d.ffn_gate.weight")                                 \
  X(FFN_UP,                      "blk.%d.ffn_up.weight")                                   \
  X(FFN_DOWN,                    "blk.%d.ffn_down.weight")                                 \
  /* the MTP (NextN) block blk.{n_layer}: an attention layer plus these (llama.cpp's names) */ \
  X(NEXTN_EH_PROJ,               "blk.%d.nextn.eh_proj.weight")                            \
  X(NEXTN_ENORM,                 "blk.%d.nextn.enorm.weight")                              \
  X(NEXTN_HNORM,                 "blk.%d.nextn.hnorm.weight")                              \
  X(NEXTN_SHARED_HEAD_NORM,      "blk.%d.nextn.shared_head_norm.weight")                   \
  X(NEXTN_EMBED_TOKENS,          "blk.%d.nextn.embed_tokens.weight")                       \
  X(NEXTN_SHARED_HEAD_HEAD,      "blk.%d.nextn.shared_head_head.weight")
/* clang-format on */

typedef enum q35_gguf_key_id {
#define Q35_GGUF_KEY_ENUM(id, spelling) Q35_KEY_##id,
  Q35_GGUF_KEYS(Q35_GGUF_KEY_ENUM)
#undef Q35_GGUF_KEY_ENUM
  Q35_KEY_COUNT
} q35_gguf_key_id;

typedef enum q35_gguf_tensor_id {
#define Q35_GGUF_TENSOR_ENUM(id, spelling) Q35_TENSOR_##id,
  Q35_GGUF_TENSORS(Q35_GGUF_TENSOR_ENUM)
#undef Q35_GGUF_TENSOR_ENUM
  Q35_TENSOR_COUNT
} q35_gguf_tensor_id;

/* Room for any finished name: GGUF tensor names are at most 63 bytes (llama.cpp's
 * GGML_MAX_NAME); keys are an architecture name plus a suffix. */
#define Q35_GGUF_NAME_MAX 128

typedef struct q35_gguf_name {
  char s[Q35_GGUF_NAME_MAX];
} q35_gguf_name;

/* The table's spelling of a key / tensor (with its "%s" / "%d"); NULL for an id out of range. */
const char *q35_gguf_key_spelling(q35_gguf_key_id id);
const char *q35_gguf_tensor_spelling(q35_gguf_tensor_id id);
/* 1 when the key belongs to the architecture's block ("%s."), 1 when the tensor is per layer. */
int q35_gguf_key_is_arch(q35_gguf_key_id id);
int q35_gguf_tensor_is_layer(q35_gguf_tensor_id id);

/* The finished key for architecture arch (ignored by general.* / tokenizer.* keys). */
q35_gguf_name q35_gguf_key(q35_gguf_key_id id, const char *arch);
/* The finished tensor name for layer il (ignored by whole-model tensors). */
q35_gguf_name q35_gguf_tensor(q35_gguf_tensor_id id, int il);

/* general.file_type values (llama.cpp's LLAMA_FTYPE_*): the dominant weight type of a file. */
enum q35_gguf_file_type {
  Q35_FTYPE_ALL_F32 = 0,
  Q35_FTYPE_MOSTLY_F16 = 1,
  Q35_FTYPE_MOSTLY_Q4_0 = 2,
  Q35_FTYPE_MOSTLY_Q4_1 = 3,
  Q35_FTYPE_MOSTLY_Q8_0 = 7,
  Q35_FTYPE_MOSTLY_Q5_0 = 8,
  Q35_FTYPE_MOSTLY_Q5_1 = 9,
  Q35_FTYPE_MOSTLY_Q2_K = 10,
  Q35_FTYPE_MOSTLY_Q3_K_S = 11,
  Q35_FTYPE_MOSTLY_Q3_K_M = 12,
  Q35_FTYPE_MOSTLY_Q4_K_S = 14,
  Q35_FTYPE_MOSTLY_Q4_K_M = 15,
  Q35_FTYPE_MOSTLY_Q5_K_S = 16,
  Q35_FTYPE_MOSTLY_Q5_K_M = 17,
  Q35_FTYPE_MOSTLY_Q6_K = 18,
  Q35_FTYPE_MOSTLY_IQ4_NL = 25,
  Q35_FTYPE_MOSTLY_IQ4_XS = 30,
  Q35_FTYPE_MOSTLY_BF16 = 32,
  Q35_FTYPE_MOSTLY_MXFP4_MOE = 38,
};
/* The general.file_type of a file whose linear weights are `type` and whose ffn_down / attn_v
 * are `down_type` (a k-quant with q6_k there is the _M mix, otherwise _S). */
int q35_gguf_file_type(int type, int down_type);

/* general.quantization_version: the ggml block layout revision of the quantized types. */
#define Q35_GGUF_QUANT_VERSION 2

#endif
