/*
 * jinja_fuzz.c - libFuzzer target for the chat-template interpreter and the output parsers.
 * Built by fuzz/build.sh (clang, -fsanitize=fuzzer,address,undefined):
 *
 *   bash fuzz/build.sh && build-fuzz/jinja_fuzz -max_total_time=60 NEW_DIR fuzz/corpus/jinja
 *
 * The input is a template: it is parsed and rendered with a fixed conversation (messages,
 * tools, flags) under small limits, and must either render or fail with a message. The same
 * bytes are then fed to the think splitter, the tool-call parser and the streaming splitter
 * (in 7-byte pieces), whose results must agree with each other.
 */
// needs: src/text/jinja_lex.c src/text/jinja_parse.c src/text/jinja_value.c src/text/jinja_filters.c src/text/jinja_render.c src/text/chat.c
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/jinja.h"

static void check(int cond) {
  if (!cond) abort();
}

static const char vars_json[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi {{x}}\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nok\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"a\": {\"type\": \"integer\"}}}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"\", \"eos_token\": \"<|im_end|>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static json_t *vars;
  if (!vars) vars = json_loads(vars_json, 0, NULL);
  char *src = malloc(size + 1);
  if (!src) return 0;
  memcpy(src, data, size);
  src[size] = 0;

  q35_err err;
  err.msg[0] = 0;
  jinja_template *t = jinja_parse(src, size, &err);
  if (t) {
    jinja_limits lim = jinja_default_limits();
    lim.max_output = 1 << 16;
    lim.max_memory = 16 << 20;
    size_t n = 0;
    err.msg[0] = 0;
    char *out = jinja_render(t, vars, &lim, &n, &err);
    if (out) check(n <= lim.max_output);
    else check(err.msg[0] != 0);
    free(out);
    jinja_free(t);
  } else {
    check(err.msg[0] != 0);
  }

  /* output parsers on the same bytes (as text: up to the first NUL) */
  char *r, *c, *content;
  json_t *calls;
  q35_chat_split_think(src, size & 1, &r, &c);
  if (q35_chat_parse_tool_calls(c, NULL, &content, &calls, &err) == 0) {
    free(content);
    json_decref(calls);
  }
  q35_chat_stream *s = q35_chat_stream_new(size & 1, 0, NULL);
  size_t len = strlen(src), rn = 0;
  char *acc = malloc(len + 1);
  for (size_t i = 0;; i += 7) {
    int final = i >= len;
    char piece[8] = {0};
    if (!final) memcpy(piece, src + i, len - i < 7 ? len - i : 7);
    q35_chat_delta d;
    check(q35_chat_stream_feed(s, final ? NULL : piece, final, &d, &err) == 0);
    if (d.reasoning) {
      size_t k = strlen(d.reasoning);
      check(rn + k <= len);
      memcpy(acc + rn, d.reasoning, k);
      rn += k;
    }
    q35_chat_delta_free(&d);
    if (final) break;
  }
  acc[rn] = 0;
  check(!strcmp(acc, r)); /* streamed reasoning == whole-text reasoning */
  free(acc);
  q35_chat_stream_free(s);
  free(r);
  free(c);
  free(src);
  return 0;
}
