/*
 * hfconfig_fuzz.c - libFuzzer target for the Hugging Face config.json reader of the exporter
 * (hf_read_config in src/export/hf_config.c, declared in export/hf_internal.h).
 * The input is the whole config.json, parsed in memory (json_loadb) and handed to
 * hf_parse_config, the checks hf_read_config runs after json_load_file.
 * Properties: the file is either accepted, or refused with a message that names the file;
 * an accepted config has every value the GGUF writer later relies on in range: layers,
 * heads and head dims positive, attention heads a multiple of KV heads, value heads a
 * multiple of key heads, an even rotary dimension in [2, head_dim], a full-attention interval
 * in [1, layers + 1], positive rope theta and norm epsilon, top-k experts
 * <= experts, non-negative M-RoPE sections, a NUL-terminated model type.
 */
// needs: src/export/hf_config.c src/export/qwen35_gguf.c
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "export/hf_internal.h"


static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "hfconfig_fuzz: property failed: %s\n", what);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the file reader (hf_read_config) is json_load_file + hf_parse_config; jansson's file and
   * buffer loaders share one parser, so the buffer is parsed in memory (no file per input) */
  hfcfg c;
  q35_err err = {{0}};
  int rc;
  json_error_t je;
  json_t *root = json_loadb((const char *)data, size, 0, &je);
  if (!root)
    rc = q35_seterr(&err, "fuzz/config.json: malformed JSON: %s (line %d, column %d)", je.text, je.line, je.column);
  else
    rc = hf_parse_config("fuzz/config.json", root, &c, &err);
  if (rc) {
    check(rc == -1, "failure returns -1");
    check(err.msg[0] != 0, "a refused config has a message");
    check(strstr(err.msg, "config.json") != NULL, "the message names config.json");
    return 0;
  }
  check(memchr(c.model_type, 0, sizeof c.model_type) != NULL, "model_type NUL-terminated");
  check(c.moe == 0 || c.moe == 1, "moe flag");
  check(c.vocab >= 1 && c.H >= 1 && c.H <= 65536 && c.L >= 1 && c.L <= 4096, "vocab/hidden/layers in range");
  check(c.nh >= 1 && c.nkv >= 1 && c.nh % c.nkv == 0, "heads a multiple of kv heads");
  check(c.hd >= 2 && c.hd <= 4096, "head_dim in range");
  check(c.Hk >= 1 && c.Hv >= 1 && c.Hv % c.Hk == 0, "value heads a multiple of key heads");
  check(c.dk >= 1 && c.dv >= 1 && c.conv_k >= 1 && c.conv_k <= 16, "DeltaNet dims in range");
  check(c.n_rot >= 2 && c.n_rot % 2 == 0 && c.n_rot <= c.hd, "rotary dims even, in [2, head_dim]");
  check(c.interval >= 1 && c.interval <= c.L + 1, "full_attention_interval in [1, layers + 1]");
  check(c.theta > 0 && c.eps > 0, "rope theta and eps positive");
  check(c.ctx >= 1, "context positive");
  for (int i = 0; i < 4; i++) check(c.sections[i] >= 0 && c.sections[i] <= 4096, "mrope sections in range");
  if (c.moe) {
    check(c.E >= 1 && c.topk >= 1 && c.topk <= c.E, "top-k experts <= experts");
    check(c.I >= 1 && c.Is >= 0, "expert FFN sizes");
  } else {
    check(c.F >= 1, "FFN size");
  }
  check(c.tied == 0 || c.tied == 1, "tied flag");
  return 0;
}
