/* export_split.c - q35 export's --split-max-size / --split-max-tensors (export_split.h). */
#include "export_split.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "args.h"

#define SPLIT_MAX_TENSORS_LIMIT 2147483647LL /* split.tensors.count is an i32 */

int export_split_parse_size(const char *v, uint64_t *out) {
  static const struct {
    const char *suffix;
    double mul;
  } units[] = {
      {"", 1},     {"B", 1},           {"K", 1e3},          {"KB", 1e3},         {"M", 1e6},
      {"MB", 1e6}, {"G", 1e9},         {"GB", 1e9},         {"T", 1e12},         {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
  };
  if (!v || !isdigit((unsigned char)*v)) return -1;
  errno = 0;
  char *end;
  const double x = strtod(v, &end);
  if (errno || !isfinite(x) || x <= 0) return -1;
  for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
    if (strcasecmp(end, units[u].suffix) != 0) continue;
    const double b = x * units[u].mul;
    if (b < 1 || b >= 18446744073709551616.0) return -1;
    *out = (uint64_t)b;
    return 0;
  }
  return -1;
}

int export_split_arg(gguf_split_opts *s, int argc, char **argv, int *i) {
  if (arg_is(argc, argv, i, "--split_max_size")) {
    const char *v = arg_value(argc, argv, i);
    if (export_split_parse_size(v, &s->max_bytes))
      die("--split-max-size: '%s' is not a size (bytes, or a number with K, M, G, T = powers of 1000, or "
          "KiB, MiB, GiB, TiB; e.g. 50G)", v);
    return 1;
  }
  if (arg_is(argc, argv, i, "--split_max_tensors")) {
    s->max_tensors = (uint32_t)arg_int("--split-max-tensors", arg_value(argc, argv, i), 1, SPLIT_MAX_TENSORS_LIMIT);
    return 1;
  }
  return 0;
}

void export_split_help(FILE *f) {
  fprintf(f,
          "  --split-max-size SIZE   write a split GGUF as llama.cpp's gguf-split does: OUT-00001-of-0000N.gguf ...,\n"
          "                     each shard's tensor data at most SIZE (bytes, or K/M/G/T = powers of 1000 as\n"
          "                     gguf-split counts, or KiB/MiB/GiB/TiB; e.g. 50G); a larger tensor gets a shard\n"
          "                     of its own. All metadata goes into the first shard; open the model by it\n"
          "  --split-max-tensors N   (also) at most N tensors per shard\n");
}

void export_split_report(const char *out, const gguf_split_opts *s, uint32_t n_shards) {
  if (!gguf_split_wanted(s) || n_shards == 0) return;
  const size_t n = strlen(out), ext = strlen(".gguf");
  char *prefix = strdup(out);
  if (!prefix) return;
  if (n > ext && !strcmp(out + n - ext, ".gguf")) prefix[n - ext] = 0;
  char *first = gguf_split_path(prefix, 0, n_shards), *last = gguf_split_path(prefix, n_shards - 1, n_shards);
  if (first && last)
    fprintf(stderr, "q35 export: wrote a split GGUF of %u shard%s: %s%s%s (open it by the first shard)\n", n_shards,
            n_shards == 1 ? "" : "s", first, n_shards > 1 ? " .. " : "", n_shards > 1 ? last : "");
  free(first);
  free(last);
  free(prefix);
}
