/* cmd_tokenize.c - `q35 tokenize` (text -> ids) and `q35 detokenize` (ids -> text). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "format/gguf.h"
#include "format/gguf_names.h"
#include "text/tokenizer.h"
#include "base/buf.h"
#include "base/util.h"

typedef struct tok_source {
  const char *model, *json, *config, *pre;
} tok_source;

static q35_tokenizer *load_tokenizer(const char *cmd, const tok_source *src) {
  q35_err err = {{0}};
  q35_tokenizer *t = NULL;
  if (!!src->model == !!src->json) {
    fprintf(stderr, "q35 %s: give exactly one of -m MODEL.gguf or --tokenizer tokenizer.json\n", cmd);
    exit(2);
  }
  if (src->model) {
    if (src->pre) {
      fprintf(stderr, "q35 %s: --pre applies to --tokenizer only\n", cmd);
      exit(2);
    }
    gguf_file *f = gguf_open(src->model, &err);
    if (f) {
      t = q35_tokenizer_from_gguf(f, &err);
      gguf_close(f);
    }
  } else {
    q35_pre pre = Q35_PRE_AUTO;
    if (src->pre && !strcmp(src->pre, "qwen2")) pre = Q35_PRE_QWEN2;
    else if (src->pre && !strcmp(src->pre, "qwen35")) pre = Q35_PRE_QWEN35;
    else if (src->pre) {
      fprintf(stderr, "q35 %s: --pre must be qwen2 or qwen35, not '%s'\n", cmd, src->pre);
      exit(2);
    }
    t = q35_tokenizer_from_json_ex(src->json, src->config, pre, &err);
  }
  if (!t) {
    fprintf(stderr, "q35 %s: %s\n", cmd, err.msg);
    exit(1);
  }
  return t;
}

static int source_arg(int argc, char **argv, int *i, tok_source *src) {
  if (arg_is(argc, argv, i, "-m") || arg_is(argc, argv, i, "--model")) src->model = arg_value(argc, argv, i);
  else if (arg_is(argc, argv, i, "--tokenizer")) src->json = arg_value(argc, argv, i);
  else if (arg_is(argc, argv, i, "--tokenizer_config")) src->config = arg_value(argc, argv, i);
  else if (arg_is(argc, argv, i, "--pre")) src->pre = arg_value(argc, argv, i);
  else return 0;
  return 1;
}

static void print_ids(const int32_t *ids, int32_t n, int json) {
  if (json) fputs("{\"ids\": [", stdout);
  for (int32_t k = 0; k < n; k++) printf(k ? (json ? ", %d" : " %d") : "%d", ids[k]);
  fputs(json ? "]}\n" : "\n", stdout);
}

/* A JSONL input ("-" = stdin), read one parsed line at a time. */
typedef struct jsonl_in {
  const char *cmd, *path;
  FILE *f;
  char *line;
  size_t cap;
  long lineno;
} jsonl_in;

/* 0, or -1 with a message when the file cannot be opened. */
static int jsonl_open(jsonl_in *in, const char *cmd, const char *path) {
  *in = (jsonl_in){.cmd = cmd, .path = path};
  in->f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!in->f) fprintf(stderr, "q35 %s: cannot open %s\n", cmd, path);
  return in->f ? 0 : -1;
}

/* The next non-empty line, parsed; NULL at the end. Exits on a malformed line. */
static json_t *jsonl_next(jsonl_in *in) {
  for (;;) {
    ssize_t r = getline(&in->line, &in->cap, in->f);
    if (r < 0) return NULL;
    ++in->lineno;
    while (r > 0 && (in->line[r - 1] == '\n' || in->line[r - 1] == '\r')) r--;
    if (r == 0) continue;
    json_error_t je;
    json_t *j = json_loadb(in->line, (size_t)r, JSON_ALLOW_NUL, &je);
    if (!j) {
      fprintf(stderr, "q35 %s: %s:%ld: %s\n", in->cmd, in->path, in->lineno, je.text);
      exit(1);
    }
    return j;
  }
}

static void jsonl_close(jsonl_in *in) {
  free(in->line);
  if (in->f != stdin) fclose(in->f);
}

static const char TOKENIZE_USAGE[] =
    "usage: q35 tokenize (-m MODEL.gguf | --tokenizer tokenizer.json [--tokenizer-config FILE]\n"
    "                    [--pre qwen2|qwen35]) (--text TEXT | --file FILE | --jsonl FILE) [--timing]\n"
    "  --text TEXT   print the ids of TEXT on one line, space-separated\n"
    "  --file FILE   the same for the contents of FILE\n"
    "  --timing      print load and tokenize times on stderr\n"
    "  --jsonl FILE  for each line {\"text\": ...} print {\"ids\": [...]}\n"
    "  (no special tokens are added; special-token strings in the text map to their ids)\n";

int cmd_tokenize(int argc, char **argv) {
  tok_source src = {0};
  const char *text = NULL, *jsonl = NULL, *write_gguf = NULL, *file = NULL;
  int timing = 0;
  char *file_text = NULL;
  size_t text_len = 0;
  for (int i = 1; i < argc; i++) {
    if (source_arg(argc, argv, &i, &src)) continue;
    if (arg_is(argc, argv, &i, "--text")) text = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--jsonl")) jsonl = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--file")) file = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--timing")) timing = 1;
    else if (arg_is(argc, argv, &i, "--write_gguf")) write_gguf = arg_value(argc, argv, &i); /* test helper */
    else if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      fputs(TOKENIZE_USAGE, stdout);
      return 0;
    } else arg_unknown("tokenize", argv[i]);
  }
  if ((!!text + !!jsonl + !!file) > 1 || (!write_gguf && !text && !jsonl && !file)) {
    fputs(TOKENIZE_USAGE, stderr);
    return 2;
  }
  if (file) {
    q35_err ferr = {{0}};
    file_text = q35_read_file(file, &text_len, &ferr);
    if (!file_text) {
      fprintf(stderr, "q35 tokenize: cannot read %s\n", file);
      return 1;
    }
    text = file_text;
  } else if (text) {
    text_len = strlen(text);
  }
  double t0 = q35_now();
  q35_tokenizer *t = load_tokenizer("tokenize", &src);
  double t1 = q35_now();
  q35_err err = {{0}};
  int rc = 0;
  if (write_gguf) { /* hidden: write a tokenizer-only GGUF (tests compare it with the JSON) */
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, q35_gguf_key(Q35_KEY_GENERAL_ARCHITECTURE, NULL).s, Q35_GGUF_ARCH_DENSE);
    if (!w || q35_tokenizer_write_gguf(t, w, NULL) || gguf_writer_save(w, write_gguf, &err)) {
      fprintf(stderr, "q35 tokenize: %s\n", err.msg[0] ? err.msg : "cannot write the GGUF");
      rc = 1;
    }
    gguf_writer_free(w);
  }
  if (text) {
    int32_t *ids, n;
    if (q35_tokenize(t, text, text_len, &ids, &n, &err)) {
      fprintf(stderr, "q35 tokenize: %s\n", err.msg);
      rc = 1;
    } else {
      double t2 = q35_now();
      if (timing)
        fprintf(stderr, "load %.1f ms, tokenize %.1f ms: %zu bytes, %d tokens, %.2f MB/s\n",
                1e3 * (t1 - t0), 1e3 * (t2 - t1), text_len, n, text_len / 1e6 / (t2 - t1));
      print_ids(ids, n, 0);
      free(ids);
    }
  } else if (jsonl) {
    jsonl_in in;
    if (jsonl_open(&in, "tokenize", jsonl)) {
      q35_tokenizer_free(t);
      return 1;
    }
    json_t *j;
    while (!rc && (j = jsonl_next(&in))) {
      json_t *s = json_object_get(j, "text");
      int32_t *ids, n;
      if (!json_is_string(s)) {
        fprintf(stderr, "q35 tokenize: %s:%ld: no \"text\" string\n", jsonl, in.lineno);
        rc = 1;
      } else if (q35_tokenize(t, json_string_value(s), json_string_length(s), &ids, &n, &err)) {
        fprintf(stderr, "q35 tokenize: %s:%ld: %s\n", jsonl, in.lineno, err.msg);
        rc = 1;
      } else {
        print_ids(ids, n, 1);
        free(ids);
      }
      json_decref(j);
    }
    jsonl_close(&in);
  }
  q35_tokenizer_free(t);
  free(file_text);
  return rc;
}

static const char DETOKENIZE_USAGE[] =
    "usage: q35 detokenize (-m MODEL.gguf | --tokenizer tokenizer.json) (--ids 1,2,3 | --jsonl FILE)\n"
    "                      [--skip-special] [--raw] [--stream]\n"
    "  --ids LIST      print the text of the ids (no newline added)\n"
    "  --jsonl FILE    for each line {\"ids\": [...]} print {\"text\": ...}\n"
    "  --skip-special  drop special (control) tokens\n"
    "  --raw           print the raw bytes (default: invalid UTF-8 becomes U+FFFD, as in HF decode)\n"
    "  --stream        decode with the streaming decoder, one id at a time (same output)\n";

/* Decode ids into a malloc'ed string; returns NULL with the message printed on error. */
static char *decode(const q35_tokenizer *t, const int32_t *ids, size_t n, int flags, int stream,
                    size_t *len) {
  q35_err err = {{0}};
  char *out = NULL;
  if (!stream) {
    if (q35_detokenize(t, ids, n, flags, &out, len, &err)) {
      fprintf(stderr, "q35 detokenize: %s\n", err.msg);
      return NULL;
    }
    return out;
  }
  q35_detok *d = q35_detok_new(t, flags & Q35_DETOK_SKIP_SPECIAL);
  q35_buf b = {0};
  if (!d) die("out of memory");
  for (size_t k = 0; k <= n; k++) {
    const char *piece;
    size_t pl;
    if (k == n) q35_detok_flush(d, &piece, &pl);
    else if (q35_detok_feed(d, ids[k], &piece, &pl, &err)) {
      fprintf(stderr, "q35 detokenize: %s\n", err.msg);
      q35_buf_free(&b);
      q35_detok_free(d);
      return NULL;
    }
    q35_buf_add(&b, piece, pl);
  }
  q35_detok_free(d);
  out = q35_buf_take(&b, len);
  if (!out) die("out of memory");
  return out;
}

int cmd_detokenize(int argc, char **argv) {
  tok_source src = {0};
  const char *ids_arg = NULL, *jsonl = NULL;
  int flags = Q35_DETOK_LOSSY, stream = 0;
  for (int i = 1; i < argc; i++) {
    if (source_arg(argc, argv, &i, &src)) continue;
    if (arg_is(argc, argv, &i, "--ids")) ids_arg = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--jsonl")) jsonl = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--skip_special")) flags |= Q35_DETOK_SKIP_SPECIAL;
    else if (arg_is(argc, argv, &i, "--raw")) flags &= ~Q35_DETOK_LOSSY;
    else if (arg_is(argc, argv, &i, "--stream")) stream = 1;
    else if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      fputs(DETOKENIZE_USAGE, stdout);
      return 0;
    } else arg_unknown("detokenize", argv[i]);
  }
  if (!ids_arg == !jsonl) {
    fputs(DETOKENIZE_USAGE, stderr);
    return 2;
  }
  if (stream && !(flags & Q35_DETOK_LOSSY)) {
    fprintf(stderr, "q35 detokenize: --stream always yields valid UTF-8; it cannot be combined with --raw\n");
    return 2;
  }
  int32_t n = 0, *ids = ids_arg ? arg_ids("--ids", ids_arg, &n) : NULL;
  q35_tokenizer *t = load_tokenizer("detokenize", &src);
  int rc = 0;
  if (ids_arg) {
    size_t len;
    char *s = decode(t, ids, (size_t)n, flags, stream, &len);
    if (!s) rc = 1;
    else fwrite(s, 1, len, stdout);
    free(s);
  } else {
    jsonl_in in;
    if (jsonl_open(&in, "detokenize", jsonl)) {
      q35_tokenizer_free(t);
      return 1;
    }
    json_t *j;
    while (!rc && (j = jsonl_next(&in))) {
      json_t *arr = json_object_get(j, "ids");
      size_t m = json_array_size(arr);
      int32_t *v = malloc((m + 1) * sizeof *v);
      if (!v) die("out of memory");
      for (size_t k = 0; k < m && !rc; k++) {
        json_t *x = json_array_get(arr, k);
        if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN || json_integer_value(x) > INT32_MAX) {
          fprintf(stderr, "q35 detokenize: %s:%ld: ids[%zu] is not a token id\n", jsonl, in.lineno, k);
          rc = 1;
        } else v[k] = (int32_t)json_integer_value(x);
      }
      if (!rc && !json_is_array(arr)) {
        fprintf(stderr, "q35 detokenize: %s:%ld: no \"ids\" array\n", jsonl, in.lineno);
        rc = 1;
      }
      if (!rc) {
        size_t len;
        char *s = decode(t, v, m, flags, stream, &len);
        if (!s) rc = 1;
        else {
          json_t *o = json_pack("{s:s%}", "text", s, len);
          char *dump = o ? json_dumps(o, JSON_ENSURE_ASCII | JSON_COMPACT) : NULL;
          if (!dump) {
            fprintf(stderr, "q35 detokenize: %s:%ld: the text is not valid UTF-8 (use lossy mode)\n",
                    jsonl, in.lineno);
            rc = 1;
          } else printf("%s\n", dump);
          free(dump);
          json_decref(o);
        }
        free(s);
      }
      free(v);
      json_decref(j);
    }
    jsonl_close(&in);
  }
  free(ids);
  q35_tokenizer_free(t);
  return rc;
}
