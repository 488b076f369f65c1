/*
 * hf_internal.h - the pieces of the Hugging Face exporter (hf.h) and what they share:
 *
 *   hf_config.c    config.json -> hf_config (every value the GGUF later relies on, checked)
 *   hf_plan.c      tensor-name mapping HF -> GGUF: the plan, a list of output tensors, each
 *                  with the source tensors it is gathered from (checked: present, dtype, shape)
 *   hf_convert.c   conversion rules (row gathers, value-head reorder, elementwise ops) and
 *                  quantization of a whole tensor, rows split over threads
 *   hf.c           the driver: read and validate everything, write the metadata, declare the
 *                  tensors, stream them into the GGUF writer
 *
 * Gathers (how output row r is read from the mmapped source tensors):
 *   G_PLAIN     row r = source row r
 *   G_ROWPERM   rows >= perm_start are permuted in blocks of perm_block rows by the value-head
 *               reorder (in_proj_qkv V rows, in_proj_z, in_proj_a/b, conv1d V channels)
 *   G_COLPERM   columns permuted in blocks of perm_block by the same reorder (out_proj input
 *               columns; A_log and dt_bias, which are single rows)
 *   G_FUSED     experts from a fused [E, 2I, H] gate_up_proj: row (e, i) = source row
 *               e*2I + fused_off + i (gate rows first, then up)
 *   G_SPLIT     experts from per-expert tensors: row (e, i) = row i of srcs[e]
 * and then an elementwise op (OP_PLUS1 for unit-offset norms, OP_NEGEXP for A_log).
 *
 * Value-head reorder (only changes anything when Hk != Hv, R = Hv / Hk): new head j holds old
 * head (j mod Hk) * R + j / Hk, so llama.cpp's tiled mapping (v head j -> k head j mod Hk)
 * reproduces HF's grouped mapping (old v head h -> k head h / R).
 */
#ifndef Q35_EXPORT_HF_INTERNAL_H
#define Q35_EXPORT_HF_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "export/hf.h"
#include "export/safetensors.h"
#include "format/gguf_names.h"
#include "q35.h"

/* The text model's parameters from config.json (names as in the model notes). */
typedef struct hfcfg {
  int moe;
  int64_t vocab, H, L, nh, nkv, hd, n_rot, ctx, interval, conv_k, dk, dv, Hk, Hv, E, topk, I, Is, F;
  int64_t n_mtp; /* mtp_num_hidden_layers (0 when absent) */
  double theta, eps;
  int32_t sections[4];
  int tied;
  char model_type[64];
} hfcfg;

/* DIR/config.json, read and checked. */
int hf_read_config(const char *dir, hfcfg *cfg, q35_err *err);
/* The checks of hf_read_config on an already parsed document (path only names it in
 * messages). Takes ownership of root. Separate so the fuzz target can skip the file. */
int hf_parse_config(const char *path, json_t *root, hfcfg *cfg, q35_err *err);

enum { G_PLAIN, G_ROWPERM, G_COLPERM, G_FUSED, G_SPLIT };
enum { OP_NONE, OP_PLUS1, OP_NEGEXP };

typedef struct otensor {
  char name[Q35_GGUF_NAME_MAX];
  int n_dims;
  int64_t ne[3];
  int type;
  int gather, op;
  const st_tensor *src;
  const st_tensor **srcs; /* G_SPLIT: E entries */
  int64_t perm_start, perm_block;
  int64_t fused_off, fused_rows;
  int index; /* in the writer */
} otensor;

typedef struct plan {
  const char *dir;
  st_set *st;
  unsigned char *used; /* per source tensor */
  const char *P;       /* language-model prefix: "model.language_model." or "model." */
  const char *mtp_pfx; /* the MTP head's prefix ("mtp." or "model.mtp.") when it is exported, else NULL */
  hfcfg cfg;
  otensor *t;
  int n;
  size_t cap;
  q35_err *err;
  const q35_export_opts *o;
  int t_lin, t_emb, t_out;
  int missing_imatrix; /* dry run: a tensor needs importance weights it has not got */
} plan;

/* Fill p->t from p->cfg and p->st (p->used marks the source tensors taken); every source
 * tensor must be used or skipped on purpose (vision tower, MTP head, rotary inv_freq). */
int hf_build_plan(plan *p);
void hf_plan_free(plan *p);

/* Most threads one tensor's conversion uses. */
#define HF_MAX_THREADS Q35_EXPORT_MAX_THREADS

/* Convert every row of t into buf (q35_row_size(t->type, t->ne[0]) bytes per row) with
 * nthreads threads (1..HF_MAX_THREADS); scratch holds 2 * nthreads * maxrow floats, maxrow >=
 * t->ne[0]. Returns -1 and the first row holding a non-finite value in *bad_row, else 0. */
/* -1 (message in err) when the importance matrix has an entry for t of the wrong size, or none
 * where t's type needs one (q35_imatrix_check; a dry run only notes it in p->missing_imatrix). */
int hf_check_imatrix(plan *p, const otensor *t, q35_err *err);
int hf_convert_tensor(const plan *p, const otensor *t, void *buf, float *scratch, int64_t maxrow,
                      int nthreads, int64_t *bad_row);

#endif
