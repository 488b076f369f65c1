/*
 * hf.h - Hugging Face Qwen3.5 checkpoint (qwen3_5_moe / qwen3_5, multimodal or text-only
 * layout) to a GGUF in llama.cpp's conventions (the model notes, docs/DESIGN.md), streaming.
 *
 * Everything is read and validated before the output is opened: config.json (text
 * parameters under text_config when present), tokenizer.json (+ tokenizer_config.json,
 * chat_template.jinja), every safetensors header, and every tensor the model needs (present,
 * F32/F16/BF16, expected shape) -- and no tensor is left unexplained (vision tower `model.visual.*`,
 * MTP `mtp.*` and `rotary_emb.inv_freq` are skipped on purpose; anything else unknown is an
 * error). Then the output is written tensor by tensor into OUT.tmp and renamed into place;
 * any error removes the temporary file.
 *
 * Memory: the checkpoint is mmapped (page cache, not anonymous memory); each output tensor is
 * built row by row from the map into one reusable buffer the size of the largest output
 * tensor, so peak anonymous memory is about the largest converted tensor plus the vocabulary.
 */
#ifndef Q35_EXPORT_HF_H
#define Q35_EXPORT_HF_H

#include <stdint.h>

#include "format/gguf.h"
#include "q35.h"

typedef struct q35_export_opts {
  const char *model_dir;
  const char *out;
  int qlinear;     /* q35_type for linear weights */
  int qembedding;  /* q35_type for token_embd */
  int qoutput;     /* q35_type for output.weight; -1: q6_k when qlinear is q4_k, else qlinear */
  int fallback;    /* 1: a row length the type cannot hold falls back like llama-quantize
                      (k-quants -> q5_0/q8_0 -> f16); 0: refuse */
  int progress;    /* 0 none, 1 bar (TTY) / periodic lines (not a TTY) on stderr */
  int stats;       /* 1: sample RssAnon after each tensor, report the peak on stderr */
  int threads;     /* conversion threads; 0: one per online CPU (at most Q35_EXPORT_MAX_THREADS) */
  int no_mtp;      /* 1: drop the MTP head (mtp.*); 0: keep it as llama.cpp's converter writes it */
  gguf_split_opts split; /* zero: one file; else shards as gguf_writer_set_split writes them */
  int recipe;      /* -1, or a llama-quantize recipe (export/recipe.h) choosing each weight's type; a type
                      given explicitly (bits of `given`) overrides it for its tensors */
  unsigned given;  /* Q35_EXPORT_GIVEN_*: which of qlinear / qembedding / qoutput were given */
  const struct q35_imatrix *imatrix; /* importance weights for the quantizers (export/imatrix.h), or NULL */
  int dry_run;     /* 1: print each tensor's name and type on stdout instead of writing (the checks
                      still run), as llama-quantize --dry-run lists them */
} q35_export_opts;

#define Q35_EXPORT_GIVEN_LINEAR 1u
#define Q35_EXPORT_GIVEN_EMBEDDING 2u
#define Q35_EXPORT_GIVEN_OUTPUT 4u

#define Q35_EXPORT_MAX_THREADS 16

typedef struct q35_export_stats {
  int n_tensors;
  uint64_t bytes_in, bytes_out;
  uint64_t largest_out;     /* bytes of the largest output tensor */
  uint64_t largest_in;      /* bytes of the largest source tensor */
  uint64_t rss_anon_peak;   /* bytes (stats only) */
  uint64_t rss_anon_start;  /* bytes, sampled just before the first tensor (stats only) */
} q35_export_stats;

q35_export_opts q35_export_default_opts(void);
int q35_export_hf(const q35_export_opts *o, q35_export_stats *st, q35_err *err);

#endif
