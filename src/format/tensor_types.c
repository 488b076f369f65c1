/* tensor_types.c - the table of GGML tensor types: names, block sizes, bytes per block. */
#include <string.h>
#include <strings.h>

#include "format/tensor_types.h"

static const char *const type_names[Q35_TYPE_COUNT] = {
    [0] = "f32",      [1] = "f16",     [2] = "q4_0",     [3] = "q4_1",    [6] = "q5_0",
    [7] = "q5_1",     [8] = "q8_0",    [9] = "q8_1",     [10] = "q2_K",   [11] = "q3_K",
    [12] = "q4_K",    [13] = "q5_K",   [14] = "q6_K",    [15] = "q8_K",   [16] = "iq2_xxs",
    [17] = "iq2_xs",  [18] = "iq3_xxs", [19] = "iq1_s",  [20] = "iq4_nl", [21] = "iq3_s",
    [22] = "iq2_s",   [23] = "iq4_xs", [24] = "i8",      [25] = "i16",    [26] = "i32",
    [27] = "i64",     [28] = "f64",    [29] = "iq1_m",   [30] = "bf16",   [34] = "tq1_0",
    [35] = "tq2_0",   [39] = "mxfp4", [40] = "q8_0x", [41] = "q8_0y", [42] = "q8_0z", [43] = "q4_0r",
    [44] = "q4_Kr",   [45] = "q8_Kp",
    [46] = "q3_Kr",   [47] = "q6_Kr",   [48] = "q2_Kr",   [49] = "iq4_nlr", [50] = "mxfp4r", [51] = "q5_1r",
    [52] = "iq2_xxsr", [53] = "iq3_xxsr",
    [54] = "iq2_xsr",  [55] = "iq2_sr",   [56] = "iq3_sr",
    [57] = "iq1_sr", [58] = "iq1_mr",
};

/* block: elements per block; size: bytes per block (ggml's block_* structs); computed: q35 has
 * kernels for it (a type with a known layout but no kernels yet is refused by name). */
static const struct {
  int block;
  size_t size;
  int computed;
} traits[Q35_TYPE_COUNT] = {
    [Q35_TYPE_F32] = {1, 4, 1},          [Q35_TYPE_F16] = {1, 2, 1},        [Q35_TYPE_BF16] = {1, 2, 1},
    [Q35_TYPE_Q4_0] = {32, 18, 1},       [Q35_TYPE_Q5_0] = {32, 22, 1},     [Q35_TYPE_Q8_0] = {32, 34, 1},
    [Q35_TYPE_Q4_1] = {32, 20, 1},       [Q35_TYPE_Q5_1] = {32, 24, 1},     [Q35_TYPE_IQ4_NL] = {32, 18, 1},
    [Q35_TYPE_MXFP4] = {32, 17, 1},      [Q35_TYPE_Q2_K] = {256, 84, 1},    [Q35_TYPE_Q3_K] = {256, 110, 1},
    [Q35_TYPE_Q4_K] = {256, 144, 1},     [Q35_TYPE_Q5_K] = {256, 176, 1},   [Q35_TYPE_Q6_K] = {256, 210, 1},
    [Q35_TYPE_Q8_K] = {256, 292, 0},     [Q35_TYPE_IQ4_XS] = {256, 136, 1}, [Q35_TYPE_Q8_1] = {32, 36, 0},
    [Q35_TYPE_IQ2_XXS] = {256, 66, 1},   [Q35_TYPE_IQ2_XS] = {256, 74, 1},  [Q35_TYPE_IQ2_S] = {256, 82, 1},
    [Q35_TYPE_IQ3_XXS] = {256, 98, 1},   [Q35_TYPE_IQ3_S] = {256, 110, 1},  [Q35_TYPE_IQ1_S] = {256, 50, 1},
    [Q35_TYPE_IQ1_M] = {256, 56, 1},
    [Q35_TYPE_Q8_0X] = {32, 64, 0},      [Q35_TYPE_Q8_0Y] = {32, 96, 0},
    [Q35_TYPE_Q8_0Z] = {32, 40, 0}, /* per block; rows pad to 16 blocks */
    [Q35_TYPE_Q4_0R] = {32, 18, 0}, /* Q4_0's sizes; made at load only, never read from a file */
    [Q35_TYPE_Q4_KR] = {256, 144, 0}, /* Q4_K's, likewise */
    [Q35_TYPE_Q8_KP] = {256, 292, 0}, /* Q8_K's */
    [Q35_TYPE_Q3_KR] = {256, 110, 0}, /* Q3_K's sizes; likewise */
    [Q35_TYPE_Q6_KR] = {256, 210, 0}, /* Q6_K's sizes; likewise */
    [Q35_TYPE_Q2_KR] = {256, 84, 0},  /* Q2_K's sizes; likewise */
    [Q35_TYPE_IQ4_NLR] = {32, 18, 0}, /* IQ4_NL's sizes; likewise */
    [Q35_TYPE_MXFP4R] = {32, 17, 0}, /* MXFP4's sizes; likewise */
    [Q35_TYPE_Q5_1R] = {32, 24, 0}, /* Q5_1's sizes; likewise */
    [Q35_TYPE_IQ2_XXSR] = {256, 102, 0}, /* made at load only; larger than IQ2_XXS's 66 */
    [Q35_TYPE_IQ3_XXSR] = {256, 134, 0}, /* likewise; IQ3_XXS's 98 */
    [Q35_TYPE_IQ3_SR] = {256, 134, 0}, /* likewise; IQ3_S's 110 */
    [Q35_TYPE_IQ2_XSR] = {256, 106, 0}, /* likewise; IQ2_XS's 74 */
    [Q35_TYPE_IQ2_SR] = {256, 106, 0},  /* likewise; IQ2_S's 82 */
    [Q35_TYPE_IQ1_SR] = {256, 74, 0},    /* likewise; IQ1_S's 50 */
    [Q35_TYPE_IQ1_MR] = {256, 82, 0},    /* likewise; IQ1_M's 56 */
};

const char *q35_type_name(int type) {
  if (type < 0 || type >= Q35_TYPE_COUNT) return NULL;
  return type_names[type];
}

int q35_type_supported(int type) {
  return type >= 0 && type < Q35_TYPE_COUNT && traits[type].computed;
}

int q35_type_layout_known(int type) {
  return type >= 0 && type < Q35_TYPE_Q8_0X && traits[type].block > 0;
}

int q35_type_block(int type) {
  return type >= 0 && type < Q35_TYPE_COUNT ? traits[type].block : 0;
}

size_t q35_type_size(int type) {
  return type >= 0 && type < Q35_TYPE_COUNT ? traits[type].size : 0;
}

size_t q35_row_size(int type, int64_t n) {
  if (type == Q35_TYPE_Q8_0Z) return (size_t)((n / 32 + 15) / 16) * 640; /* whole groups of 16 blocks */
  int b = q35_type_block(type);
  return b ? (size_t)(n / b) * traits[type].size : 0;
}

int q35_type_from_name(const char *name) {
  for (int t = 0; t < Q35_TYPE_Q8_0X; t++) /* internal types have no file name */
    if (type_names[t] && !strcasecmp(type_names[t], name)) return t;
  return -1;
}
