/* cmd_export_hf.c - q35 export --model-dir DIR -o OUT.gguf: a Hugging Face checkpoint to GGUF. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "export_split.h"
#include "export/hf.h"
#include "export/imatrix.h"
#include "export/recipe.h"
#include "kernels/quant.h"

int cmd_export_hf(int argc, char **argv);

#define MIB 1048576.0 /* bytes */

static void usage(void) {
  printf(
      "usage: q35 export --model-dir DIR -o OUT.gguf [--qlinear TYPE] [--qembedding TYPE] [options]\n"
      "Converts a Hugging Face Qwen3.5 checkpoint (qwen3_5_moe or dense qwen3_5; config.json,\n"
      "model.safetensors or sharded model-*.safetensors + model.safetensors.index.json, tokenizer.json,\n"
      "tokenizer_config.json) into a GGUF that q35 and llama.cpp run (llama.cpp's conventions).\n"
      "Everything is validated before OUT.gguf is written; it appears only when complete.\n"
      "  --qtype NAME       a llama-quantize recipe: each weight's type chosen as llama-quantize's NAME\n"
      "                     chooses it (README.md, \"Export recipes\"); NAME, any case: q4_0 q4_1 q5_0 q5_1 q8_0\n"
      "                     q2_k q2_k_s q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k iq1_s iq1_m iq2_xxs\n"
      "                     iq2_xs iq2_s iq2_m iq3_xxs iq3_xs iq3_s iq3_m iq4_nl iq4_xs mxfp4_moe bf16 f16 f32\n"
      "                     (the iq1/iq2, iq3_xxs and q2_k_s recipes need --imatrix, as in llama-quantize).\n"
      "                     --qlinear / --qembedding / --qoutput override it for their tensors\n"
      "  --imatrix FILE     importance weights (llama.cpp's imatrix GGUF or its legacy .dat, e.g. from q35\n"
      "                     imatrix) for every quantizer but q8_0 and mxfp4 (which have no weighted form)\n"
      "  --dry-run          print each tensor's name and type on stdout and write nothing\n"
      "  --qlinear TYPE     linear weights (attention, DeltaNet, experts, shared expert)  default bf16\n"
      "  --qembedding TYPE  token_embd                                                    default bf16\n"
      "  --qoutput TYPE     output.weight (untied models)     default: q6_k if --qlinear q4_k, else --qlinear\n"
      "      TYPE: q4_0 | q4_k | q5_0 | q5_k | q6_k | q8_0 | iq4_xs | q2_k | q3_k | mxfp4 | iq4_nl | q4_1 | q5_1\n"
      "            | iq2_xxs | iq2_xs | iq2_s | iq3_xxs | iq3_s | iq1_s | iq1_m | bf16 | f16 | f32, or 4w (= q4_0),\n"
      "            8w (= q8_0); iq2_xxs, iq2_xs and iq1_s need --imatrix (as ggml's quantizer).\n"
      "      Norms, ssm_conv1d, ssm_a, ssm_dt.bias and the routers (ffn_gate_inp, ffn_gate_inp_shexp) stay f32.\n"
      "  --fallback         a tensor whose row length the type cannot hold (not a multiple of its block:\n"
      "                     32 for q*_0, 256 for k-quants/iq4_xs) falls back like llama-quantize\n"
      "                     (q4_k/q5_k/iq4_xs/q4_0 -> q5_0, q2_k/q3_k -> iq4_nl, others -> q8_0, then f16); default: refuse\n"
      "  -t, --threads N    conversion threads (default: one per CPU, at most 16)\n"
      "  --stats            report peak anonymous memory (RssAnon, sampled after each tensor) on stderr\n"
      "  --quiet            no progress output\n"
      "  --no-mtp           drop the MTP head (mtp.*); by default it is kept as llama.cpp's converter writes it\n"
      "                     (blk.{layers}.* + nextn.*, nextn_predict_layers = 1)\n"
      "Progress goes to stderr: a bar when it is a terminal, a line every 10%% otherwise.\n"
      "Vision (model.visual.*) tensors are skipped; a missing lm_head means tied output.\n");
  export_split_help(stdout);
}

static int parse_type(const char *flag, const char *v) {
  if (!strcmp(v, "4w")) return Q35_TYPE_Q4_0;
  if (!strcmp(v, "8w")) return Q35_TYPE_Q8_0;
  int t = q35_type_from_name(v);
  if (t < 0 || !q35_type_supported(t) || !q35_type_quantizable(t) || t == Q35_TYPE_Q8_K)
    die("%s: unknown or unsupported type '%s' (q4_0, q4_k, q5_0, q5_k, q6_k, q8_0, iq4_xs, q2_k, q3_k, mxfp4, iq4_nl, "
        "q4_1, q5_1, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, bf16, f16, f32, 4w, 8w)",
        flag, v);
  return t;
}

int cmd_export_hf(int argc, char **argv) {
  q35_export_opts o = q35_export_default_opts();
  const char *imatrix_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage();
      return 0;
    }
    if (arg_is(argc, argv, &i, "--model_dir") || arg_is(argc, argv, &i, "-m")) {
      o.model_dir = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "-o") || arg_is(argc, argv, &i, "--output") || arg_is(argc, argv, &i, "--out")) {
      o.out = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "--qlinear")) {
      o.qlinear = parse_type("--qlinear", arg_value(argc, argv, &i));
      o.given |= Q35_EXPORT_GIVEN_LINEAR;
      continue;
    }
    if (arg_is(argc, argv, &i, "--qembedding")) {
      o.qembedding = parse_type("--qembedding", arg_value(argc, argv, &i));
      o.given |= Q35_EXPORT_GIVEN_EMBEDDING;
      continue;
    }
    if (arg_is(argc, argv, &i, "--qoutput")) {
      o.qoutput = parse_type("--qoutput", arg_value(argc, argv, &i));
      o.given |= Q35_EXPORT_GIVEN_OUTPUT;
      continue;
    }
    if (arg_is(argc, argv, &i, "--qtype")) {
      q35_err e;
      if ((o.recipe = q35_recipe_from_name(arg_value(argc, argv, &i), &e)) < 0) die("%s", e.msg);
      continue;
    }
    if (arg_is(argc, argv, &i, "--imatrix")) {
      imatrix_path = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "--fallback")) {
      o.fallback = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--dry_run")) {
      o.dry_run = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--no_mtp")) {
      o.no_mtp = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--threads") || arg_is(argc, argv, &i, "-t")) {
      o.threads = (int)arg_int("--threads", arg_value(argc, argv, &i), 1, Q35_EXPORT_MAX_THREADS);
      continue;
    }
    if (arg_is(argc, argv, &i, "--stats")) {
      o.stats = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--quiet") || arg_is(argc, argv, &i, "-q")) {
      o.progress = 0;
      continue;
    }
    if (export_split_arg(&o.split, argc, argv, &i)) continue;
    arg_unknown("export", argv[i]);
  }
  if (!o.model_dir) {
    fprintf(stderr, "q35 export: --model-dir DIR is required (see q35 export --help)\n");
    return 2;
  }
  if (!o.out) {
    fprintf(stderr, "q35 export: -o OUT.gguf is required (see q35 export --help)\n");
    return 2;
  }
  q35_err err = {0};
  q35_export_stats st;
  uint32_t n_shards = 0;
  o.split.n_shards_out = &n_shards;
  q35_imatrix *im = NULL;
  if (imatrix_path && !(im = q35_imatrix_load(imatrix_path, &err))) {
    fprintf(stderr, "q35 export: --imatrix: %s\n", err.msg);
    return 1;
  }
  if (im) q35_imatrix_report(im, imatrix_path);
  o.imatrix = im;
  const int rc = q35_export_hf(&o, &st, &err);
  q35_imatrix_free(im);
  if (rc) {
    fprintf(stderr, "q35 export: %s\n", err.msg);
    return 1;
  }
  if (o.dry_run) {
    fprintf(stderr, "q35 export: dry run, %s not written\n", o.out);
    return 0;
  }
  fprintf(stderr, "q35 export: wrote %s: %d tensors, %.1f MiB (largest tensor %.1f MiB)\n", o.out, st.n_tensors,
          (double)st.bytes_out / MIB, (double)st.largest_out / MIB);
  export_split_report(o.out, &o.split, n_shards);
  if (o.stats)
    fprintf(stderr, "q35 export: stats: rss_anon_start %llu rss_anon_peak %llu largest_out %llu largest_in %llu "
                    "bytes_in %llu bytes_out %llu\n", (unsigned long long)st.rss_anon_start,
            (unsigned long long)st.rss_anon_peak, (unsigned long long)st.largest_out,
            (unsigned long long)st.largest_in, (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out);
  return 0;
}
