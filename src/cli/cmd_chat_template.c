/* cmd_chat_template.c - `q35 chat-template`: render a conversation with the model's chat
 * template and print the prompt exactly (no newline added). With --parse, split a generated
 * text into reasoning, content and tool calls instead (JSON on stdout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "args.h"
#include "base/buf.h"
#include "text/chat.h"
#include "commands.h"
#include "format/gguf.h"
#include "text/jinja.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: q35 chat-template (-m MODEL.gguf | --tokenizer-config tokenizer_config.json |\n"
          "                          --template FILE.jinja | --builtin) --messages FILE.json\n"
          "                         [--tools TOOLS.json] [--no-think | --think] [--no-generation-prompt]\n"
          "       q35 chat-template --parse OUTPUT.txt [--in-think] [--tools TOOLS.json]\n"
          "\n"
          "Renders an OpenAI-style messages array with the model's chat template\n"
          "(tokenizer.chat_template in the GGUF, or chat_template in tokenizer_config.json; the\n"
          "built-in ChatML when the file has none) and prints the prompt exactly.\n"
          "  --no-think              pass enable_thinking=false (default: not passed)\n"
          "  --think                 pass enable_thinking=true\n"
          "  --no-generation-prompt  add_generation_prompt=false (default true)\n"
          "  --parse FILE            parse generated text: prints {\"reasoning\",\"content\",\"tool_calls\"}\n"
          "  --in-think              (with --parse) the text starts inside <think>\n"
          "  --show-template         print the template source that would be used, and exit\n"
          "  --vars FILE.json        render the template with exactly these variables (a JSON object)\n"
          "                          instead of --messages (for testing templates)\n");
}

static char *read_text(const char *path, const char *what) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "q35 chat-template: cannot open %s file '%s'\n", what, path);
    return NULL;
  }
  char *buf = q35_read_stream(f, NULL);
  fclose(f);
  if (!buf) fprintf(stderr, "q35 chat-template: cannot read %s file '%s'\n", what, path);
  return buf;
}

static json_t *load_json(const char *path, const char *what) {
  json_error_t je;
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "q35 chat-template: cannot open %s file '%s'\n", what, path);
    return NULL;
  }
  json_t *j = json_loadf(f, JSON_DECODE_ANY, &je);
  fclose(f);
  if (!j) fprintf(stderr, "q35 chat-template: %s file '%s': invalid JSON at line %d: %s\n", what, path, je.line, je.text);
  return j;
}

static int do_parse(const char *path, int in_think, const json_t *tools) {
  char *text = read_text(path, "output");
  if (!text) return 1;
  char *reasoning, *rest, *content;
  json_t *calls;
  q35_err err = {{0}};
  q35_chat_split_think(text, in_think, &reasoning, &rest);
  free(text);
  if (q35_chat_parse_tool_calls(rest, tools, &content, &calls, &err)) {
    fprintf(stderr, "q35 chat-template: %s\n", err.msg);
    free(reasoning);
    free(rest);
    return 1;
  }
  json_t *o = json_pack("{s:s, s:s, s:o}", "reasoning", reasoning, "content", content, "tool_calls", calls);
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  fputs(s, stdout);
  fputc('\n', stdout);
  free(s);
  json_decref(o);
  free(reasoning);
  free(rest);
  free(content);
  return 0;
}

int cmd_chat_template(int argc, char **argv) {
  const char *model = NULL, *tokcfg = NULL, *tmplfile = NULL, *msgfile = NULL, *toolsfile = NULL, *parse = NULL,
             *varsfile = NULL;
  int think = -1, gen = 1, builtin = 0, in_think = 0, show = 0;
  for (int i = 1; i < argc; i++) {
    if (arg_is(argc, argv, &i, "-m") || arg_is(argc, argv, &i, "--model")) model = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--tokenizer_config")) tokcfg = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--template")) tmplfile = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--builtin")) builtin = 1;
    else if (arg_is(argc, argv, &i, "--messages")) msgfile = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--tools")) toolsfile = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--no_think")) think = 0;
    else if (arg_is(argc, argv, &i, "--think")) think = 1;
    else if (arg_is(argc, argv, &i, "--no_generation_prompt")) gen = 0;
    else if (arg_is(argc, argv, &i, "--parse")) parse = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--in_think")) in_think = 1;
    else if (arg_is(argc, argv, &i, "--show_template")) show = 1;
    else if (arg_is(argc, argv, &i, "--vars")) varsfile = arg_value(argc, argv, &i);
    else if (arg_is(argc, argv, &i, "--help") || arg_is(argc, argv, &i, "-h")) {
      usage(stdout);
      return 0;
    } else arg_unknown("chat-template", argv[i]);
  }
  json_t *tools = NULL;
  if (toolsfile) {
    tools = load_json(toolsfile, "tools");
    if (!tools) return 1;
    if (!json_is_array(tools)) {
      fprintf(stderr, "q35 chat-template: tools file '%s' must hold a JSON array\n", toolsfile);
      json_decref(tools);
      return 1;
    }
  }
  if (parse) {
    int rc = do_parse(parse, in_think, tools);
    json_decref(tools);
    return rc;
  }
  if ((model != NULL) + (tokcfg != NULL) + (tmplfile != NULL) + builtin != 1 || (!msgfile && !show && !varsfile)) {
    fprintf(stderr, "q35 chat-template: give exactly one of -m, --tokenizer-config, --template, --builtin, and --messages\n");
    usage(stderr);
    json_decref(tools);
    return 2;
  }
  char *tmpl = NULL, *bos = NULL, *eos = NULL;
  q35_err err = {{0}};
  int rc = 1;
  json_t *msgs = NULL;
  if (model) {
    gguf_file *g = gguf_open(model, &err);
    if (!g) {
      fprintf(stderr, "q35 chat-template: %s\n", err.msg);
      goto done;
    }
    int r = q35_chat_template_from_gguf(g, &tmpl, &bos, &eos, &err);
    gguf_close(g);
    if (r) {
      fprintf(stderr, "q35 chat-template: %s\n", err.msg);
      goto done;
    }
    if (!tmpl) fprintf(stderr, "q35 chat-template: %s has no tokenizer.chat_template; using built-in ChatML\n", model);
  } else if (tokcfg) {
    if (q35_chat_template_from_tokenizer_config(tokcfg, &tmpl, &bos, &eos, &err)) {
      fprintf(stderr, "q35 chat-template: %s\n", err.msg);
      goto done;
    }
    if (!tmpl) fprintf(stderr, "q35 chat-template: %s has no chat_template; using built-in ChatML\n", tokcfg);
  } else if (tmplfile) {
    tmpl = read_text(tmplfile, "template");
    if (!tmpl) goto done;
  }
  if (show) {
    const char *t = tmpl ? tmpl : q35_chat_builtin_template();
    fwrite(t, 1, strlen(t), stdout);
    rc = fflush(stdout) ? 1 : 0;
    goto done;
  }
  if (varsfile) { /* raw Jinja rendering with exactly these variables */
    json_t *vars = load_json(varsfile, "vars");
    if (!vars) goto done;
    jinja_template *jt = jinja_parse(tmpl ? tmpl : q35_chat_builtin_template(), strlen(tmpl ? tmpl : q35_chat_builtin_template()), &err);
    size_t vn = 0;
    char *out = jt ? jinja_render(jt, vars, NULL, &vn, &err) : NULL;
    jinja_free(jt);
    json_decref(vars);
    if (!out) {
      fprintf(stderr, "q35 chat-template: %s\n", err.msg);
      goto done;
    }
    fwrite(out, 1, vn, stdout);
    free(out);
    rc = fflush(stdout) ? 1 : 0;
    goto done;
  }
  msgs = load_json(msgfile, "messages");
  if (!msgs) goto done;
  size_t n = 0;
  char *out = q35_chat_render(tmpl, msgs, tools, gen, think, bos, eos, &n, &err);
  if (!out) {
    fprintf(stderr, "q35 chat-template: %s\n", err.msg);
    goto done;
  }
  fwrite(out, 1, n, stdout);
  free(out);
  rc = fflush(stdout) ? 1 : 0;
done:
  json_decref(msgs);
  json_decref(tools);
  free(tmpl);
  free(bos);
  free(eos);
  return rc;
}
