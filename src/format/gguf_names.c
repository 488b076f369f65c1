/* gguf_names.c - the GGUF key and tensor name table (see gguf_names.h). */
#include "format/gguf_names.h"

#include <stdio.h>
#include <string.h>

#include "format/tensor_types.h"

static const char *const key_spelling[Q35_KEY_COUNT] = {
#define Q35_GGUF_KEY_SPELLING(id, spelling) [Q35_KEY_##id] = spelling,
    Q35_GGUF_KEYS(Q35_GGUF_KEY_SPELLING)
#undef Q35_GGUF_KEY_SPELLING
};

static const char *const tensor_spelling[Q35_TENSOR_COUNT] = {
#define Q35_GGUF_TENSOR_SPELLING(id, spelling) [Q35_TENSOR_##id] = spelling,
    Q35_GGUF_TENSORS(Q35_GGUF_TENSOR_SPELLING)
#undef Q35_GGUF_TENSOR_SPELLING
};

const char *q35_gguf_key_spelling(q35_gguf_key_id id) {
  return (unsigned)id < Q35_KEY_COUNT ? key_spelling[id] : NULL;
}

const char *q35_gguf_tensor_spelling(q35_gguf_tensor_id id) {
  return (unsigned)id < Q35_TENSOR_COUNT ? tensor_spelling[id] : NULL;
}

int q35_gguf_key_is_arch(q35_gguf_key_id id) {
  const char *s = q35_gguf_key_spelling(id);
  return s && strstr(s, "%s") != NULL;
}

int q35_gguf_tensor_is_layer(q35_gguf_tensor_id id) {
  const char *s = q35_gguf_tensor_spelling(id);
  return s && strstr(s, "%d") != NULL;
}

/* The spellings are the formats: "%s" (architecture) or "%d" (layer) at most once each. */
q35_gguf_name q35_gguf_key(q35_gguf_key_id id, const char *arch) {
  q35_gguf_name n;
  const char *s = q35_gguf_key_spelling(id);
  if (!s) s = "";
  if (q35_gguf_key_is_arch(id)) snprintf(n.s, sizeof n.s, s, arch ? arch : "");
  else snprintf(n.s, sizeof n.s, "%s", s);
  return n;
}

q35_gguf_name q35_gguf_tensor(q35_gguf_tensor_id id, int il) {
  q35_gguf_name n;
  const char *s = q35_gguf_tensor_spelling(id);
  if (!s) s = "";
  if (q35_gguf_tensor_is_layer(id)) snprintf(n.s, sizeof n.s, s, il);
  else snprintf(n.s, sizeof n.s, "%s", s);
  return n;
}

int q35_gguf_file_type(int type, int down_type) {
  const int m_mix = down_type == Q35_TYPE_Q6_K;
  switch (type) {
    case Q35_TYPE_F32: return Q35_FTYPE_ALL_F32;
    case Q35_TYPE_F16: return Q35_FTYPE_MOSTLY_F16;
    case Q35_TYPE_Q4_0: return Q35_FTYPE_MOSTLY_Q4_0;
    case Q35_TYPE_Q8_0: return Q35_FTYPE_MOSTLY_Q8_0;
    case Q35_TYPE_Q5_0: return Q35_FTYPE_MOSTLY_Q5_0;
    case Q35_TYPE_Q4_K: return m_mix ? Q35_FTYPE_MOSTLY_Q4_K_M : Q35_FTYPE_MOSTLY_Q4_K_S;
    case Q35_TYPE_Q5_K: return m_mix ? Q35_FTYPE_MOSTLY_Q5_K_M : Q35_FTYPE_MOSTLY_Q5_K_S;
    case Q35_TYPE_Q6_K: return Q35_FTYPE_MOSTLY_Q6_K;
    case Q35_TYPE_IQ4_XS: return Q35_FTYPE_MOSTLY_IQ4_XS;
    case Q35_TYPE_BF16: return Q35_FTYPE_MOSTLY_BF16;
    case Q35_TYPE_Q4_1: return Q35_FTYPE_MOSTLY_Q4_1;
    case Q35_TYPE_Q5_1: return Q35_FTYPE_MOSTLY_Q5_1;
    case Q35_TYPE_Q2_K: return Q35_FTYPE_MOSTLY_Q2_K;
    case Q35_TYPE_Q3_K: return m_mix ? Q35_FTYPE_MOSTLY_Q3_K_M : Q35_FTYPE_MOSTLY_Q3_K_S;
    case Q35_TYPE_IQ4_NL: return Q35_FTYPE_MOSTLY_IQ4_NL;
    case Q35_TYPE_MXFP4: return Q35_FTYPE_MOSTLY_MXFP4_MOE;
    default: return Q35_FTYPE_ALL_F32;
  }
}
