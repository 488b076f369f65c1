/*
 * cmd_schema_check.c - q35 schema-check: walk JSON values (or strings) through a constraint's
 * token masks, one line at a time.
 *
 *   q35 schema-check (-m M.gguf | --tokenizer tokenizer.json)
 *                    (--schema S.json | --grammar F.gbnf | --regex RE | --json-object) --jsonl F [--ws N]
 *
 * Each line of F is tokenized with the model's tokenizer and its tokens are checked one by one
 * against the mask of the constraint's state (then accepted), and at the end an
 * end-of-generation token must be allowed. With --schema / --json-object the line's bytes are
 * the text (compact JSON is what the default whitespace policy allows); with --grammar /
 * --regex each line is a JSON string and its value is the text. Output, one line per input
 * line: `accept`, or `reject OFFSET` (the byte offset in the text where the mask refused), then
 * {"accepted":N,"rejected":M,"mask_us_median":X,"mask_us_p99":Y} over every mask computed.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "base/buf.h"
#include "base/util.h"
#include "commands.h"
#include "constrain/constrain.h"
#include "format/gguf.h"
#include "text/tokenizer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: q35 schema-check (-m MODEL.gguf | --tokenizer tokenizer.json)\n"
          "                        (--schema S.json | --grammar F.gbnf | --regex RE | --json-object) --jsonl F\n"
          "Walks each line's tokens through the constraint's token masks: prints accept or reject OFFSET\n"
          "per line, then {\"accepted\":N,\"rejected\":M,\"mask_us_median\":X,\"mask_us_p99\":Y}.\n"
          "  --schema FILE      a JSON Schema; lines are JSON texts\n"
          "  --json-object      any JSON object; lines are JSON texts\n"
          "  --grammar FILE     a GBNF grammar; lines are JSON strings, their values are checked\n"
          "  --regex RE         a regular expression; lines are JSON strings\n"
          "  --ws N             JSON whitespace allowed between tokens, bytes (default 0: compact)\n"
          "  --print-grammar    print the compiled GBNF grammar on stderr\n"
          "  --dump-masks FILE  write each mask walked: a line of allowed normal-token id ranges \"a-b,c\" per\n"
          "                     step, then \"eog 0|1\"; the file starts with the ids that are not normal tokens,\n"
          "                     then those whose bytes strict UTF-8 refuses where a lax decoder would not\n");
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double *us;
  size_t n, cap;
} samples;

/* id ranges "a-b,c,..." of the ids for which keep(id) holds */
static void put_ranges(FILE *f, int32_t n, int (*keep)(int32_t, const void *), const void *ctx) {
  int32_t run = -1;
  int first = 1;
  for (int32_t i = 0; i <= n; i++) {
    const int ok = i < n && keep(i, ctx);
    if (ok && run < 0) run = i;
    if (!ok && run >= 0) {
      fprintf(f, run == i - 1 ? "%s%d" : "%s%d-%d", first ? "" : ",", run, i - 1);
      first = 0;
      run = -1;
    }
  }
  fputc('\n', f);
}

typedef struct {
  const q35_tokenizer *t;
  const uint32_t *mask;
} dump_ctx;

static int keep_special(int32_t id, const void *vctx) {
  return q35_token_type(((const dump_ctx *)vctx)->t, id) != Q35_TOKEN_NORMAL;
}

static int keep_allowed(int32_t id, const void *vctx) {
  const dump_ctx *d = vctx;
  return q35_token_type(d->t, id) == Q35_TOKEN_NORMAL && (d->mask[id >> 5] >> (id & 31) & 1);
}

/* Bytes llama.cpp's UTF-8 decoder takes and strict UTF-8 refuses: NUL (llama.cpp ends a piece
 * there), C0, C1, F5..FF, overlong / surrogate / beyond-U+10FFFF second bytes. */
static int keep_suspect(int32_t id, const void *vctx) {
  size_t n;
  const unsigned char *b = (const unsigned char *)q35_token_bytes(((const dump_ctx *)vctx)->t, id, &n);
  for (size_t i = 0; b && i < n; i++) {
    const unsigned c = b[i], d = i + 1 < n ? b[i + 1] : 0x80;
    if (c == 0 || c == 0xC0 || c == 0xC1 || c >= 0xF5) return 1;
    if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))
      return 1;
  }
  return 0;
}

static FILE *dump;

/* One text through the masks: -1 accepted, else the byte offset of the refusal. */
static long walk(q35_constraint *c, const q35_tokenizer *t, const char *text, size_t len, samples *sm) {
  q35_err err;
  int32_t *ids = NULL, n = 0;
  if (q35_tokenize(t, text, len, &ids, &n, &err)) {
    fprintf(stderr, "q35 schema-check: %s\n", err.msg);
    return 0;
  }
  q35_constraint_rollback(c, q35_constraint_n_tokens(c), &err);
  long at = 0, result = -1;
  const int32_t eog[3] = {q35_tokenizer_im_end(t), q35_tokenizer_eos(t), q35_tokenizer_endoftext(t)};
  for (int32_t i = 0; i <= n && result < 0; i++) {
    const double t0 = q35_now();
    const uint32_t *mask = q35_constraint_mask_ref(c);
    const double dt = (q35_now() - t0) * 1e6;
    if (!mask) {
      fprintf(stderr, "q35 schema-check: out of memory computing a mask\n");
      exit(1);
    }
    if (q35_grow((void **)&sm->us, &sm->cap, sm->n + 1, sizeof *sm->us) == 0) sm->us[sm->n++] = dt;
    if (dump) {
      const dump_ctx d = {t, mask};
      put_ranges(dump, q35_tokenizer_n_vocab(t), keep_allowed, &d);
      fprintf(dump, "eog %d\n", eog[0] >= 0 && (mask[eog[0] >> 5] >> (eog[0] & 31) & 1));
    }
    if (i == n) {
      int ok = 0;
      for (int k = 0; k < 3; k++)
        if (eog[k] >= 0 && mask[eog[k] >> 5] >> (eog[k] & 31) & 1) ok = 1;
      if (!ok) result = at;
      break;
    }
    size_t tl = 0;
    const char *tb = q35_token_bytes(t, ids[i], &tl);
    if (!(mask[ids[i] >> 5] >> (ids[i] & 31) & 1)) {
      const size_t k = q35_token_type(t, ids[i]) == Q35_TOKEN_NORMAL ? q35_constraint_prefix(c, tb, tl) : 0;
      result = at + (long)(k < tl ? k : 0);
      break;
    }
    if (q35_constraint_accept(c, ids[i], &err)) {
      result = at;
      break;
    }
    at += (long)tl;
  }
  free(ids);
  return result;
}

/* The line's text: itself (JSON kinds) or the value of the JSON string it holds. */
static char *line_text(char *line, size_t len, int string_lines, size_t *out_len, long lineno) {
  if (!string_lines) {
    *out_len = len;
    return q35_strndup(line, len);
  }
  json_error_t je;
  json_t *v = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (!v || !json_is_string(v)) {
    fprintf(stderr, "q35 schema-check: line %ld: with --grammar / --regex each line must be a JSON string\n", lineno);
    exit(1);
  }
  *out_len = json_string_length(v);
  char *s = q35_strndup(json_string_value(v), *out_len);
  json_decref(v);
  return s;
}

static void load_kind(const char *schema, const char *grammar, const char *regex, int json_object, q35_constraint_kind *kind,
                      char **text, size_t *len) {
  q35_err err;
  if (!!schema + !!grammar + !!regex + !!json_object != 1) {
    fprintf(stderr, "q35 schema-check: give exactly one of --schema, --grammar, --regex, --json-object\n");
    exit(2);
  }
  const char *file = schema ? schema : grammar;
  *kind = schema ? Q35_CONSTRAINT_JSON_SCHEMA : grammar ? Q35_CONSTRAINT_GBNF : regex ? Q35_CONSTRAINT_REGEX
                                                                                        : Q35_CONSTRAINT_JSON_OBJECT;
  if (file) {
    if (!(*text = q35_read_file(file, len, &err))) {
      fprintf(stderr, "q35 schema-check: %s\n", err.msg);
      exit(1);
    }
  } else {
    *text = strdup(regex ? regex : "");
    *len = strlen(*text);
  }
}

int cmd_schema_check(int argc, char **argv) {
  const char *model = NULL, *tokjson = NULL, *schema = NULL, *grammar = NULL, *regex = NULL, *jsonl = NULL;
  int json_object = 0, print_grammar = 0;
  const char *dump_path = NULL;
  q35_constraint_params cp = {0};
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(stdout);
      return 0;
    }
    if (arg_is(argc, argv, &i, "-m") || arg_is(argc, argv, &i, "--model")) model = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--tokenizer")) tokjson = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--schema") || arg_is(argc, argv, &i, "--json_schema")) schema = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--grammar")) grammar = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--regex")) regex = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--json_object")) json_object = 1;
    else if (arg_is(argc, argv, &i, "--jsonl")) jsonl = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--ws")) cp.ws_max = (int32_t)arg_int("--ws", arg_value(argc, argv, &i), 0, 64);
    else if (arg_is(argc, argv, &i, "--print_grammar")) print_grammar = 1;
    else if (arg_is(argc, argv, &i, "--dump_masks")) dump_path = arg_value(argc, argv, &i);
    else {
      fprintf(stderr, "q35 schema-check: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!!model == !!tokjson || !jsonl) {
    fprintf(stderr, "q35 schema-check: give exactly one of -m MODEL.gguf or --tokenizer tokenizer.json, and --jsonl F\n");
    return 2;
  }
  q35_constraint_kind kind;
  char *text;
  size_t tlen;
  load_kind(schema, grammar, regex, json_object, &kind, &text, &tlen);
  q35_err err;
  q35_tokenizer *t = NULL;
  if (model) {
    gguf_file *f = gguf_open(model, &err);
    if (f) {
      t = q35_tokenizer_from_gguf(f, &err);
      gguf_close(f);
    }
  } else {
    t = q35_tokenizer_from_json(tokjson, NULL, &err);
  }
  q35_constraint_vocab *v = t ? q35_constraint_vocab_from_tok(t, q35_tokenizer_n_vocab(t), &err) : NULL;
  q35_constraint *c = v ? q35_constraint_new(v, kind, text, tlen, &cp, &err) : NULL;
  free(text);
  FILE *in = c ? fopen(jsonl, "rb") : NULL;
  if (!c || !in) {
    fprintf(stderr, "q35 schema-check: %s\n", c ? "cannot open the --jsonl file" : err.msg);
    q35_constraint_free(c);
    q35_constraint_vocab_free(v);
    q35_tokenizer_free(t);
    return 1;
  }
  if (print_grammar) fputs(q35_constraint_grammar(c), stderr);
  if (dump_path && !(dump = fopen(dump_path, "w"))) {
    fprintf(stderr, "q35 schema-check: cannot write %s\n", dump_path);
    return 1;
  }
  if (dump) {
    const dump_ctx d = {t, NULL};
    put_ranges(dump, q35_tokenizer_n_vocab(t), keep_special, &d);
    put_ranges(dump, q35_tokenizer_n_vocab(t), keep_suspect, &d);
  }
  size_t n_acc = 0, n_rej = 0, cap = 0;
  samples sm = {0};
  char *line = NULL;
  ssize_t got;
  long lineno = 0;
  while ((got = getline(&line, &cap, in)) >= 0) {
    lineno++;
    size_t len = (size_t)got;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    if (!len) continue;
    size_t n;
    char *s = line_text(line, len, kind == Q35_CONSTRAINT_GBNF || kind == Q35_CONSTRAINT_REGEX, &n, lineno);
    const long r = walk(c, t, s, n, &sm);
    free(s);
    if (r < 0) {
      n_acc++;
      printf("accept\n");
    } else {
      n_rej++;
      printf("reject %ld\n", r);
    }
  }
  free(line);
  fclose(in);
  if (dump) fclose(dump);
  qsort(sm.us, sm.n, sizeof *sm.us, cmp_double);
  const double med = sm.n ? sm.us[sm.n / 2] : 0, p99 = sm.n ? sm.us[(size_t)((double)(sm.n - 1) * 0.99)] : 0;
  printf("{\"accepted\":%zu,\"rejected\":%zu,\"mask_us_median\":%.3f,\"mask_us_p99\":%.3f}\n", n_acc, n_rej, med, p99);
  free(sm.us);
  q35_constraint_free(c);
  q35_constraint_vocab_free(v);
  q35_tokenizer_free(t);
  return 0;
}
