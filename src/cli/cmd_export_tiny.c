/* cmd_export_tiny.c - q35 export --tiny-test: write a random-weight Qwen3.5 GGUF. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "export_split.h"
#include "export/imatrix.h"
#include "export/recipe.h"
#include "export/tiny.h"
#include "format/gguf_names.h"
#include "kernels/quant.h"

static void tiny_usage(void) {
  q35_tiny_opts d = q35_tiny_default();
  printf(
      "usage: q35 export --tiny-test -o OUT.gguf [options]\n"
      "Writes a random-weight Qwen3.5 model in llama.cpp's GGUF conventions (for tests and benchmarks).\n"
      "  --arch qwen35moe|qwen35   MoE (default) or dense\n"
      "  --layers N        %d          --interval N      %d (layer i is attention iff (i+1) %% N == 0)\n"
      "  --embd N          %d        --vocab N         %d\n"
      "  --heads N         %d          --kv-heads N      %d\n"
      "  --head-dim N      %d         --rot N           %d (rotary dims)\n"
      "  --ssm-k-heads N   %d          --ssm-v-heads N   %d\n"
      "  --ssm-head-dim N  %d         --conv-kernel N   %d\n"
      "  --experts N       %d          --experts-used N  %d\n"
      "  --ff N            %d (expert FFN for MoE; dense FFN is --dense-ff, default %d)\n"
      "  --shexp-ff N      %d (0 = no shared expert)\n"
      "  --tied            tie the output matrix to the embedding\n"
      "  --tokenizer tokenizer.json [--tokenizer-config tokenizer_config.json]\n"
      "                    use a real Hugging Face tokenizer (and its chat template); --vocab is raised\n"
      "                    to the tokenizer's size if smaller (default: a synthetic byte-level vocabulary)\n"
      "  --merged-gate-up  write ffn_gate_up_exps instead of separate gate/up experts\n"
      "  --mtp             append an MTP block (blk.{layers}.*: attention + FFN + nextn.eh_proj/enorm/\n"
      "                    hnorm/shared_head_norm; nextn_predict_layers = 1), as llama.cpp's converter does\n"
      "  --mtp-agree RATE  with --mtp: the trunk predicts a fixed permutation of the vocabulary and\n"
      "                    the head agrees with it on about RATE of the tokens (speculation tests)\n"
      "  --mtp-agree-vocab K  with --mtp-agree: the permutation keeps ids below K among themselves\n"
      "                    (a generation starting there stays there: the 'frequent' ids a draft over a\n"
      "                    reduced vocabulary, --draft-vocab K, covers)\n"
      "  --type T          f32 | f16 | bf16 | q8_0 | q4_0 | q5_0 | q4_k | q5_k | q6_k | iq4_xs | q2_k | q3_k\n"
      "                    | mxfp4 | iq4_nl | q4_1 | q5_1 | iq2_xxs | iq2_xs | iq2_s | iq3_xxs | iq3_s | iq1_s\n"
      "                    | iq1_m (iq2_xxs, iq2_xs, iq1_s need --imatrix), or the\n"
      "                    presets q4_k_m (q4_k + q6_k for ffn_down/attn_v/output)  (default f32)\n"
      "  --down-type T, --output-type T, --embd-type T   per-tensor overrides\n"
      "  --qtype NAME      a llama-quantize recipe (q4_k_m, q8_0, ...: see q35 export --help); --type and the\n"
      "                    per-tensor flags override it for their tensors\n"
      "  --imatrix FILE    importance weights (llama.cpp's imatrix GGUF) for the quantizers\n"
      "  --dry-run         print each tensor's name and type on stdout and write nothing\n"
      "  --rope-theta F    1e7         --seed N   %llu\n"
      "Split output (OUT-00001-of-0000N.gguf ...):\n",
      d.n_layer, d.interval, d.n_embd, d.n_vocab, d.n_head, d.n_head_kv, d.head_dim, d.n_rot, d.ssm_k_heads,
      d.ssm_v_heads, d.ssm_head_dim, d.conv_kernel, d.n_expert, d.n_expert_used, d.n_ff_exp, d.n_ff, d.n_ff_shexp,
      (unsigned long long)d.seed);
  export_split_help(stdout);
}

static int parse_type(const char *flag, const char *v) {
  int t = q35_type_from_name(v);
  if (t < 0 || !q35_type_supported(t) || !q35_type_quantizable(t)) die("%s: unknown or unsupported type '%s'", flag, v);
  return t;
}

int cmd_export_tiny(int argc, char **argv) {
  q35_tiny_opts o = q35_tiny_default();
  const char *out = NULL, *imatrix_path = NULL;
  int dense_ff_set = 0, ff_set = 0, ff = 0, vocab_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define INT(flag, field, lo, hi) \
  if (arg_is(argc, argv, &i, flag)) { o.field = (int)arg_int(flag, arg_value(argc, argv, &i), lo, hi); continue; }
    if (arg_is(argc, argv, &i, "--tiny_test")) continue;
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      tiny_usage();
      return 0;
    }
    if (arg_is(argc, argv, &i, "-o") || arg_is(argc, argv, &i, "--output") || arg_is(argc, argv, &i, "--out")) {
      out = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "--arch")) {
      const char *v = arg_value(argc, argv, &i);
      if (!strcmp(v, Q35_GGUF_ARCH_MOE)) o.moe = 1;
      else if (!strcmp(v, Q35_GGUF_ARCH_DENSE)) o.moe = 0;
      else die("--arch: '%s' is not qwen35moe or qwen35", v);
      continue;
    }
    INT("--layers", n_layer, 1, Q35_TINY_MAX_LAYERS)
    INT("--interval", interval, 1, 256)
    INT("--embd", n_embd, 1, Q35_TINY_MAX_EMBD)
    if (arg_is(argc, argv, &i, "--vocab")) {
      o.n_vocab = (int)arg_int("--vocab", arg_value(argc, argv, &i), 1, 1 << 20);
      vocab_set = 1;
      continue;
    }
    INT("--heads", n_head, 1, 256)
    INT("--kv_heads", n_head_kv, 1, 256)
    INT("--head_dim", head_dim, 2, 1024)
    INT("--rot", n_rot, 2, 1024)
    INT("--ssm_k_heads", ssm_k_heads, 1, 256)
    INT("--ssm_v_heads", ssm_v_heads, 1, 256)
    INT("--ssm_head_dim", ssm_head_dim, 1, 1024)
    INT("--conv_kernel", conv_kernel, 1, 16)
    INT("--experts", n_expert, 1, 1024)
    INT("--experts_used", n_expert_used, 1, 1024)
    INT("--shexp_ff", n_ff_shexp, 0, 1 << 16)
    if (arg_is(argc, argv, &i, "--ff")) {
      ff = (int)arg_int("--ff", arg_value(argc, argv, &i), 1, 1 << 16);
      ff_set = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--dense_ff")) {
      o.n_ff = (int)arg_int("--dense-ff", arg_value(argc, argv, &i), 1, 1 << 18);
      dense_ff_set = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--seed")) {
      o.seed = (uint64_t)arg_int("--seed", arg_value(argc, argv, &i), 0, INT64_MAX);
      continue;
    }
    if (arg_is(argc, argv, &i, "--rope_theta")) {
      o.rope_theta = (float)arg_double("--rope-theta", arg_value(argc, argv, &i));
      continue;
    }
    if (arg_is(argc, argv, &i, "--tokenizer")) {
      o.tokenizer_json = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "--tokenizer_config")) {
      o.tokenizer_config = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "--tied")) {
      o.tied = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--merged_gate_up")) {
      o.merged_gate_up = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--mtp")) {
      o.mtp = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--mtp_agree_vocab")) {
      o.mtp_agree_vocab = (int32_t)arg_int("--mtp-agree-vocab", arg_value(argc, argv, &i), 1, INT32_MAX);
      continue;
    }
    if (arg_is(argc, argv, &i, "--mtp_agree")) {
      o.mtp = 1;
      o.mtp_agree = (float)arg_double("--mtp-agree", arg_value(argc, argv, &i));
      continue;
    }
    if (arg_is(argc, argv, &i, "--type")) {
      const char *v = arg_value(argc, argv, &i);
      if (!strcmp(v, "q4_k_m") || !strcmp(v, "Q4_K_M")) {
        o.type = Q35_TYPE_Q4_K;
        o.type_down = Q35_TYPE_Q6_K;
        o.type_output = Q35_TYPE_Q6_K;
      } else {
        o.type = parse_type("--type", v);
      }
      o.type_set = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--qtype")) {
      q35_err e;
      const char *v = arg_value(argc, argv, &i);
      if ((o.recipe = q35_recipe_from_name(v, &e)) < 0) die("%s", e.msg);
      continue;
    }
    if (arg_is(argc, argv, &i, "--imatrix")) {
      imatrix_path = arg_value(argc, argv, &i);
      continue;
    }
    if (arg_is(argc, argv, &i, "--dry_run")) {
      o.dry_run = 1;
      continue;
    }
    if (arg_is(argc, argv, &i, "--down_type")) { o.type_down = parse_type("--down-type", arg_value(argc, argv, &i)); continue; }
    if (arg_is(argc, argv, &i, "--output_type")) { o.type_output = parse_type("--output-type", arg_value(argc, argv, &i)); continue; }
    if (arg_is(argc, argv, &i, "--embd_type")) { o.type_embd = parse_type("--embd-type", arg_value(argc, argv, &i)); continue; }
#undef INT
    if (export_split_arg(&o.split, argc, argv, &i)) continue;
    arg_unknown("export --tiny-test", a);
  }
  if (!out) die("export --tiny-test: -o OUT.gguf is required");
  if (o.tokenizer_json && !vocab_set) o.n_vocab = 1; /* take the tokenizer's size */
  if (ff_set) {
    o.n_ff_exp = ff;
    if (!o.moe && !dense_ff_set) o.n_ff = ff;
  }
  q35_err err = {{0}};
  uint32_t n_shards = 0;
  o.split.n_shards_out = &n_shards;
  q35_imatrix *im = NULL;
  if (imatrix_path && !(im = q35_imatrix_load(imatrix_path, &err))) {
    fprintf(stderr, "q35 export: --imatrix: %s\n", err.msg);
    return 1;
  }
  if (im) q35_imatrix_report(im, imatrix_path);
  o.imatrix = im;
  const int rc = q35_tiny_write(&o, out, &err);
  q35_imatrix_free(im);
  if (rc) {
    fprintf(stderr, "q35 export: %s\n", err.msg);
    return 1;
  }
  if (o.dry_run) fprintf(stderr, "q35 export: dry run, %s not written\n", out);
  else if (gguf_split_wanted(&o.split)) export_split_report(out, &o.split, n_shards);
  else fprintf(stderr, "wrote %s\n", out);
  return 0;
}
