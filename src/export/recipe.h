/*
 * recipe.h - llama-quantize's quantization recipes (q35 export --qtype NAME): per-tensor types
 * chosen the way llama.cpp's llama_tensor_get_type (src/llama-quant.cpp) chooses them for the
 * qwen35moe / qwen35 architectures, so `q35 export --qtype q4_k_m` writes the same per-tensor
 * types as `llama-quantize IN OUT Q4_K_M` does on the same model (tests/test_recipe_peer.sh).
 *
 * A recipe has a default type (q4_K for q4_k_m); llama's rules then raise some tensors
 * (attn_v / attn_qkv and the "use_more_bits" layers of ffn_down to q6_K for q4_k_m, ...),
 * output.weight (and a tied token_embd) to q6_K, and a row length the type's block does not
 * divide falls back (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K / q3_K -> q4_0, iq4_xs ->
 * iq4_nl, then f16). Tensors llama-quantize never quantizes (norms, the routers, ssm_conv1d,
 * 1-D tensors) keep their type. The table of what each recipe picks is in README.md.
 */
#ifndef Q35_EXPORT_RECIPE_H
#define Q35_EXPORT_RECIPE_H

#include <stdint.h>

#include "q35.h"

/* What the rules look at besides the tensor itself. */
typedef struct q35_recipe_model {
  int n_layer_all; /* every blk.N of the file, the MTP block included (llama's n_layer_all) */
  int n_expert;    /* 0 for a dense model */
  int n_head, n_head_kv;
  int tied;        /* no output.weight: token_embd takes output.weight's rule */
  int has_imatrix; /* an importance matrix is given (changes a few of llama's choices) */
  int n_down_per_layer; /* ffn_down tensors per layer: 2 with experts and a shared expert, else 1 */
} q35_recipe_model;

/* The recipe named `name` (llama-quantize's spelling, any case: "q4_k_m", "Q8_0", "bf16"), or
 * -1 with the reason in err (an unknown name). */
int q35_recipe_from_name(const char *name, q35_err *err);
/* llama-quantize's name of recipe r ("Q4_K_M"). */
const char *q35_recipe_name(int r);
/* The llama_ftype number of recipe r (general.file_type of the files it writes). */
int q35_recipe_ftype(int r);
/* Is tensor `name` (n_dims dimensions) one llama-quantize quantizes at all? */
int q35_recipe_quantizes(const char *name, int n_dims);
/* The type recipe r gives tensor `name` ({ne0, ne1, ne2}: ne0 the row length, ne2 the experts
 * of a 3-D tensor, else 1) whose unquantized type is src_type: src_type itself when
 * llama-quantize leaves the tensor alone. -1 with a message when no type fits the row length.
 * (Whether the type needs importance weights is q35_recipe_needs_imatrix's.) */
int q35_recipe_tensor_type(int r, const q35_recipe_model *m, const char *name, int n_dims, int64_t ne0, int64_t ne2,
                           int src_type, q35_err *err);
/* Does a tensor of `type` need importance weights: its quantizer needs them
 * (q35_type_requires_imatrix), or recipe r (-1: none) is llama's that requires them (llama's
 * tensor_requires_imatrix: IQ3_XXS, IQ2_S, IQ1_M, and Q2_K in Q2_K_S, but for token_embd and
 * output.weight)? */
int q35_recipe_needs_imatrix(int r, const char *name, int type);
/* The names of every recipe q35 has, separated by ", " (for usage texts). */
const char *q35_recipe_names(void);

#endif
