/*
 * chat.c - chat rendering with the model's template and parsing of model output (chat.h).
 *
 * Rendering is a thin layer over the Jinja interpreter (jinja.h): normalize the OpenAI messages, build the variable
 * object the template expects, render. The built-in template used when a model ships none is
 * itself a Jinja template (Qwen3-style ChatML), so there is one rendering path.
 *
 * Output parsing is one streaming state machine (q35_chat_stream); the whole-text think
 * splitter is that machine fed once. Tool-call blocks are parsed by parse_block, shared by
 * the streaming and whole-text paths.
 */
#include "text/chat.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/util.h"
#include "format/gguf.h"
#include "format/gguf_names.h"
#include "text/jinja.h"

/* The tags of the model's output (Qwen3 / Qwen3.5), and their lengths. */
#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define TOOL_OPEN "<tool_call>"
#define TOOL_CLOSE "</tool_call>"
#define FUNC_OPEN "<function="
#define FUNC_CLOSE "</function>"
#define PARAM_OPEN "<parameter="
#define PARAM_CLOSE "</parameter>"
#define TAGLEN(tag) (sizeof tag - 1)

/* ---- built-in ChatML (Qwen3 style) ---- */
static const char builtin_template[] =
    "{%- if tools %}\n"
    "{{- '<|im_start|>system\\n' }}\n"
    "{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}\n"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}\n"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}\n"
    "{%- elif messages and messages[0].role == 'system' %}\n"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "{%- elif message.role == 'assistant' %}\n"
    "{{- '<|im_start|>assistant\\n' + message.content }}\n"
    "{%- for tc in message.tool_calls or [] %}\n"
    "{%- set f = tc.function if tc.function is defined else tc %}\n"
    "{%- if loop.first and message.content or not loop.first %}{{- '\\n' }}{%- endif %}\n"
    "{{- '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}\n"
    "{{- f.arguments if f.arguments is string else f.arguments | tojson }}\n"
    "{{- '}\\n</tool_call>' }}\n"
    "{%- endfor %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- elif message.role == 'tool' %}\n"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}\n"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n"
    "{%- endif %}\n";

const char *q35_chat_builtin_template(void) { return builtin_template; }

/* ---- message normalization ---- */

json_t *q35_chat_normalize_messages(const json_t *messages, q35_err *err) {
  if (!json_is_array(messages)) {
    q35_seterr(err, "messages must be a JSON array of message objects");
    return NULL;
  }
  json_t *out = json_deep_copy(messages);
  if (!out) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  size_t i;
  json_t *m;
  json_array_foreach(out, i, m) {
    if (!json_is_object(m)) {
      q35_seterr(err, "messages[%zu] is not an object", i);
      json_decref(out);
      return NULL;
    }
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) {
      q35_seterr(err, "messages[%zu] has no \"role\" string", i);
      json_decref(out);
      return NULL;
    }
    json_t *c = json_object_get(m, "content");
    if (!c || json_is_null(c)) {
      json_object_set_new(m, "content", json_string(""));
    } else if (json_is_array(c)) {
      /* a list of parts: keep the text ones */
      size_t total = 0, k;
      json_t *part;
      json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        if (json_is_string(t)) total += json_string_length(t);
      }
      char *buf = malloc(total + 1);
      if (!buf) {
        json_decref(out);
        q35_seterr(err, "out of memory");
        return NULL;
      }
      size_t pos = 0;
      json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        if (json_is_string(t)) {
          memcpy(buf + pos, json_string_value(t), json_string_length(t));
          pos += json_string_length(t);
        }
      }
      json_object_set_new(m, "content", json_stringn(buf, pos));
      free(buf);
    } else if (!json_is_string(c)) {
      q35_seterr(err, "messages[%zu].content must be a string, null or a list of parts", i);
      json_decref(out);
      return NULL;
    }
    json_t *tcs = json_object_get(m, "tool_calls");
    if (json_is_array(tcs)) {
      size_t k;
      json_t *tc;
      json_array_foreach(tcs, k, tc) {
        json_t *f = json_object_get(tc, "function");
        json_t *args = json_object_get(f ? f : tc, "arguments");
        if (json_is_string(args)) {
          json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
          if (json_is_object(parsed))
            json_object_set_new(f ? f : tc, "arguments", parsed);
          else
            json_decref(parsed);
        }
      }
    }
  }
  return out;
}

char *q35_chat_render(const char *template_src, const json_t *messages, const json_t *tools,
                      int add_generation_prompt, int enable_thinking, const char *bos,
                      const char *eos, size_t *out_len, q35_err *err) {
  if (!template_src) template_src = builtin_template;
  json_t *msgs = q35_chat_normalize_messages(messages, err);
  if (!msgs) return NULL;
  if (tools && !json_is_array(tools)) {
    json_decref(msgs);
    q35_seterr(err, "tools must be a JSON array");
    return NULL;
  }
  jinja_template *t = jinja_parse(template_src, strlen(template_src), err);
  if (!t) {
    json_decref(msgs);
    return NULL;
  }
  json_t *vars = json_object();
  json_object_set_new(vars, "messages", msgs);
  if (tools) json_object_set(vars, "tools", (json_t *)tools);
  json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
  if (enable_thinking >= 0) json_object_set_new(vars, "enable_thinking", json_boolean(enable_thinking));
  json_object_set_new(vars, "bos_token", json_string(bos ? bos : ""));
  json_object_set_new(vars, "eos_token", json_string(eos ? eos : ""));
  char *out = jinja_render(t, vars, NULL, out_len, err);
  json_decref(vars);
  jinja_free(t);
  return out;
}

/* ---- template sources ---- */

static char *gguf_token_text(const gguf_file *f, const char *id_key) {
  const gguf_kv *id = gguf_find(f, id_key), *toks = gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_TOKENS, NULL).s);
  if (!id || !toks || toks->type != GGUF_ARRAY || toks->arr_type != GGUF_STRING || !toks->arr_str) return NULL;
  uint64_t i;
  switch (id->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: i = id->v.u; break;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
      if (id->v.i < 0) return NULL;
      i = (uint64_t)id->v.i;
      break;
    default: return NULL;
  }
  if (i >= toks->arr_n) return NULL;
  return q35_strndup(toks->arr_str[i].ptr, (size_t)toks->arr_str[i].len);
}

int q35_chat_template_from_gguf(const gguf_file *f, char **tmpl, char **bos, char **eos, q35_err *err) {
  *tmpl = NULL;
  if (bos) *bos = gguf_token_text(f, q35_gguf_key(Q35_KEY_TOKENIZER_BOS_ID, NULL).s);
  if (eos) *eos = gguf_token_text(f, q35_gguf_key(Q35_KEY_TOKENIZER_EOS_ID, NULL).s);
  const gguf_kv *kv = gguf_find(f, q35_gguf_key(Q35_KEY_TOKENIZER_CHAT_TEMPLATE, NULL).s);
  if (!kv) return 0;
  if (kv->type != GGUF_STRING) {
    if (bos) free(*bos), *bos = NULL;
    if (eos) free(*eos), *eos = NULL;
    return q35_seterr(err, "%s: tokenizer.chat_template is not a string", f->path ? f->path : "GGUF");
  }
  *tmpl = q35_strndup(kv->v.s.ptr, (size_t)kv->v.s.len);
  if (*tmpl && strlen(*tmpl) != kv->v.s.len) {
    free(*tmpl);
    *tmpl = NULL;
    return q35_seterr(err, "tokenizer.chat_template contains a NUL byte");
  }
  return 0;
}

static char *token_field(const json_t *v) {
  if (json_is_string(v)) return strdup(json_string_value(v));
  if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
    return strdup(json_string_value(json_object_get(v, "content")));
  return NULL;
}

int q35_chat_template_from_tokenizer_config(const char *path, char **tmpl, char **bos, char **eos,
                                            q35_err *err) {
  *tmpl = NULL;
  if (bos) *bos = NULL;
  if (eos) *eos = NULL;
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return q35_seterr(err, "%s: line %d: %s", path, je.line, je.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return q35_seterr(err, "%s: not a JSON object", path);
  }
  json_t *ct = json_object_get(root, "chat_template");
  if (json_is_string(ct)) {
    *tmpl = strdup(json_string_value(ct));
  } else if (json_is_array(ct)) {
    size_t i;
    json_t *e;
    json_array_foreach(ct, i, e) {
      if (json_is_string(json_object_get(e, "name")) && !strcmp(json_string_value(json_object_get(e, "name")), "default") &&
          json_is_string(json_object_get(e, "template")))
        *tmpl = strdup(json_string_value(json_object_get(e, "template")));
    }
    if (!*tmpl) {
      json_decref(root);
      return q35_seterr(err, "%s: chat_template list has no entry named \"default\"", path);
    }
  } else if (ct && !json_is_null(ct)) {
    json_decref(root);
    return q35_seterr(err, "%s: chat_template must be a string or a list of {name, template}", path);
  }
  if (bos) *bos = token_field(json_object_get(root, "bos_token"));
  if (eos) *eos = token_field(json_object_get(root, "eos_token"));
  json_decref(root);
  return 0;
}

/* ---- tool calls ---- */

static const char *skip_ws(const char *p, const char *e) {
  while (p < e && isspace((unsigned char)*p)) p++;
  return p;
}

static const char *memfind(const char *h, const char *he, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = h; p + n <= he; p++)
    if (*p == *needle && !memcmp(p, needle, n)) return p;
  return NULL;
}

/* The declared JSON-schema type of parameter `param` of function `fn` in tools (or NULL). */
static const char *param_type(const json_t *tools, const char *fn, const char *param) {
  size_t i;
  json_t *t;
  if (!json_is_array(tools)) return NULL;
  json_array_foreach(tools, i, t) {
    json_t *f = json_object_get(t, "function");
    if (!f) f = (json_t *)t;
    json_t *name = json_object_get(f, "name");
    if (!json_is_string(name) || strcmp(json_string_value(name), fn)) continue;
    json_t *ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), param), "type");
    return json_is_string(ty) ? json_string_value(ty) : NULL;
  }
  return NULL;
}

static json_t *make_call(const char *name, size_t nlen, json_t *args /* stolen */, int index) {
  char *a = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(args);
  char id[32];
  snprintf(id, sizeof id, "call_%d", index);
  json_t *fn = json_pack("{s:s%, s:s}", "name", name, nlen, "arguments", a ? a : "{}");
  free(a);
  return json_pack("{s:s, s:s, s:o}", "id", id, "type", "function", "function", fn);
}

/* The JSON form {"name": ..., "arguments": ...} in [p, e) (trimmed). */
static json_t *parse_json_call(const char *p, const char *e, int index, q35_err *err) {
  json_error_t je;
  json_t *o = json_loadb(p, (size_t)(e - p), 0, &je);
  if (!o) {
    q35_seterr(err, "tool call %d: invalid JSON: %s", index, je.text);
    return NULL;
  }
  json_t *name = json_object_get(o, "name");
  if (!json_is_string(name)) {
    json_decref(o);
    q35_seterr(err, "tool call %d: no \"name\" string", index);
    return NULL;
  }
  json_t *args = json_object_get(o, "arguments");
  if (!args) args = json_object_get(o, "parameters");
  if (json_is_string(args)) {
    json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
    args = parsed ? parsed : json_incref(args);
  } else if (args) {
    json_incref(args);
  } else {
    args = json_object();
  }
  json_t *call = make_call(json_string_value(name), json_string_length(name), args, index);
  json_decref(o);
  return call;
}

/* The XML form <function=NAME><parameter=P>value</parameter>...</function>; p is just after
 * "<function=". A value is JSON unless the tool declares the parameter a string. */
static json_t *parse_xml_call(const char *p, const char *e, const json_t *tools, int index, q35_err *err) {
  const char *ne = memchr(p, '>', (size_t)(e - p));
  if (!ne) {
    q35_seterr(err, "tool call %d: unterminated <function=...> tag", index);
    return NULL;
  }
  char *name = q35_strndup(p, (size_t)(ne - p));
  json_t *args = json_object();
  const char *q = ne + 1;
  const char *fend = memfind(q, e, FUNC_CLOSE);
  if (!fend) fend = e;
  for (;;) {
    const char *ps = memfind(q, fend, PARAM_OPEN);
    if (!ps) break;
    const char *pe = memchr(ps + TAGLEN(PARAM_OPEN), '>', (size_t)(fend - ps - TAGLEN(PARAM_OPEN)));
    if (!pe) {
      free(name);
      json_decref(args);
      q35_seterr(err, "tool call %d: unterminated <parameter=...> tag", index);
      return NULL;
    }
    char *pname = q35_strndup(ps + TAGLEN(PARAM_OPEN), (size_t)(pe - ps - TAGLEN(PARAM_OPEN)));
    const char *vs = pe + 1, *ve = memfind(vs, fend, PARAM_CLOSE);
    const char *next = ve ? ve + TAGLEN(PARAM_CLOSE) : fend;
    if (!ve) { /* tolerate a missing close tag: value runs to the next parameter */
      const char *np = memfind(vs, fend, PARAM_OPEN);
      ve = np ? np : fend;
      next = ve;
    }
    if (vs < ve && *vs == '\n') vs++;
    if (ve > vs && ve[-1] == '\n') ve--;
    const char *ty = param_type(tools, name, pname);
    json_t *v = NULL;
    if (!ty || strcmp(ty, "string")) v = json_loadb(vs, (size_t)(ve - vs), JSON_DECODE_ANY, NULL);
    if (!v) v = json_stringn(vs, (size_t)(ve - vs));
    json_object_set_new(args, pname, v);
    free(pname);
    q = next;
  }
  json_t *call = make_call(name, strlen(name), args, index);
  free(name);
  return call;
}

/* Parse the inside of one <tool_call> block [p, e). */
static json_t *parse_block(const char *p, const char *e, const json_t *tools, int index, q35_err *err) {
  p = skip_ws(p, e);
  while (e > p && isspace((unsigned char)e[-1])) e--;
  if (p < e && *p == '{') return parse_json_call(p, e, index, err);
  if ((size_t)(e - p) > TAGLEN(FUNC_OPEN) && !memcmp(p, FUNC_OPEN, TAGLEN(FUNC_OPEN)))
    return parse_xml_call(p + TAGLEN(FUNC_OPEN), e, tools, index, err);
  q35_seterr(err, "tool call %d: expected a JSON object or <function=NAME>", index);
  return NULL;
}

int q35_chat_parse_tool_calls(const char *text, const json_t *tools, char **content, json_t **tool_calls,
                              q35_err *err) {
  *content = NULL;
  *tool_calls = NULL;
  size_t n = strlen(text);
  const char *e = text + n;
  char *buf = malloc(n + 1);
  json_t *calls = json_array();
  if (!buf || !calls) {
    free(buf);
    json_decref(calls);
    return q35_seterr(err, "out of memory");
  }
  size_t bn = 0;
  const char *p = text;
  for (;;) {
    const char *s = memfind(p, e, TOOL_OPEN);
    const char *ce = s ? memfind(s + TAGLEN(TOOL_OPEN), e, TOOL_CLOSE) : NULL;
    if (!s || !ce) {
      memcpy(buf + bn, p, (size_t)(e - p));
      bn += (size_t)(e - p);
      break;
    }
    memcpy(buf + bn, p, (size_t)(s - p));
    bn += (size_t)(s - p);
    json_t *call = parse_block(s + TAGLEN(TOOL_OPEN), ce, tools, (int)json_array_size(calls), err);
    if (!call) {
      free(buf);
      json_decref(calls);
      return -1;
    }
    json_array_append_new(calls, call);
    p = ce + TAGLEN(TOOL_CLOSE);
  }
  const char *a = buf, *b = buf + bn;
  a = skip_ws(a, b);
  while (b > a && isspace((unsigned char)b[-1])) b--;
  *content = q35_strndup(a, (size_t)(b - a));
  free(buf);
  *tool_calls = calls;
  return 0;
}

/* ---- streaming splitter ---- */

enum { ST_START, ST_THINK, ST_CONTENT, ST_TOOL };

struct q35_chat_stream {
  int state, parse_tools, any_reasoning, any_content, n_calls;
  json_t *tools;
  q35_buf pend; /* held-back text */
};

q35_chat_stream *q35_chat_stream_new(int in_think, int parse_tools, const json_t *tools) {
  q35_chat_stream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->state = in_think ? ST_THINK : ST_START;
  s->parse_tools = parse_tools;
  s->tools = tools ? json_incref((json_t *)tools) : NULL;
  return s;
}

void q35_chat_stream_free(q35_chat_stream *s) {
  if (!s) return;
  json_decref(s->tools);
  q35_buf_free(&s->pend);
  free(s);
}

void q35_chat_delta_free(q35_chat_delta *d) {
  free(d->reasoning);
  free(d->content);
  json_decref(d->tool_calls);
  memset(d, 0, sizeof *d);
}

/* Append s[0..k) to the malloc'ed string *dst (NULL: none yet). */
static int delta_add(char **dst, const char *s, size_t k) {
  if (!k) return 0;
  size_t n = *dst ? strlen(*dst) : 0;
  q35_buf b = {*dst, n, *dst ? n + 1 : 0, 0};
  if (q35_buf_add(&b, s, k)) return -1;
  *dst = b.p;
  return 0;
}

/* Length of the longest suffix of [p, p+n) that is a proper prefix of tag. */
static size_t partial_tag(const char *p, size_t n, const char *tag) {
  size_t t = strlen(tag);
  for (size_t k = t - 1; k > 0; k--)
    if (k <= n && !memcmp(p + n - k, tag, k)) return k;
  return 0;
}

static void consume(q35_chat_stream *s, size_t k) {
  q35_buf *b = &s->pend;
  memmove(b->p, b->p + k, b->n - k);
  b->n -= k;
  if (b->p) b->p[b->n] = 0;
}

static int emit_reasoning(q35_chat_stream *s, q35_chat_delta *d, size_t k, int strip_trailing) {
  const char *p = s->pend.p;
  size_t a = 0, b = k;
  if (!s->any_reasoning)
    while (a < b && p[a] == '\n') a++;
  size_t b0 = b;
  while (b > a && p[b - 1] == '\n') b--;
  if (!strip_trailing) {
    /* hold trailing newlines back: they are dropped if </think> follows */
    if (delta_add(&d->reasoning, p + a, b - a)) return -1;
    if (b > a) s->any_reasoning = 1;
    consume(s, b == a && s->any_reasoning == 0 ? b0 : b);
    return 0;
  }
  if (delta_add(&d->reasoning, p + a, b - a)) return -1;
  if (b > a) s->any_reasoning = 1;
  consume(s, k);
  return 0;
}

static int emit_content(q35_chat_stream *s, q35_chat_delta *d, size_t k) {
  size_t a = 0;
  if (!s->any_content)
    while (a < k && (s->pend.p[a] == '\n')) a++;
  if (k > a) {
    if (delta_add(&d->content, s->pend.p + a, k - a)) return -1;
    s->any_content = 1;
  }
  consume(s, k);
  return 0;
}

/* One step of the splitter in its current state, on the held-back text: FEED_AGAIN after a
 * state change, FEED_WAIT when it needs more text (or is done), -1 on error (err set). */
enum { FEED_WAIT = 0, FEED_AGAIN = 1 };

static int feed_start(q35_chat_stream *s, int final) {
  /* a leading "<think>" opens the reasoning */
  const char *p = s->pend.p;
  size_t a = 0;
  while (a < s->pend.n && isspace((unsigned char)p[a])) a++;
  size_t rest = s->pend.n - a;
  if (rest >= TAGLEN(THINK_OPEN) && !memcmp(p + a, THINK_OPEN, TAGLEN(THINK_OPEN))) {
    consume(s, a + TAGLEN(THINK_OPEN));
    s->state = ST_THINK;
    return FEED_AGAIN;
  }
  if (!final && rest < TAGLEN(THINK_OPEN) && !memcmp(p + a, THINK_OPEN, rest)) return FEED_WAIT; /* undecided */
  s->state = ST_CONTENT;
  return FEED_AGAIN;
}

static int feed_think(q35_chat_stream *s, int final, q35_chat_delta *d, q35_err *err) {
  const char *p = s->pend.p, *f = memfind(p, p + s->pend.n, THINK_CLOSE);
  if (f) {
    if (emit_reasoning(s, d, (size_t)(f - p), 1)) return q35_seterr(err, "out of memory");
    consume(s, TAGLEN(THINK_CLOSE));
    s->state = ST_CONTENT;
    return FEED_AGAIN;
  }
  size_t hold = final ? 0 : partial_tag(p, s->pend.n, THINK_CLOSE);
  if (emit_reasoning(s, d, s->pend.n - hold, final)) return q35_seterr(err, "out of memory");
  return FEED_WAIT;
}

static int feed_content(q35_chat_stream *s, int final, q35_chat_delta *d, q35_err *err) {
  const char *p = s->pend.p;
  const char *f = s->parse_tools ? memfind(p, p + s->pend.n, TOOL_OPEN) : NULL;
  if (f) {
    size_t k = (size_t)(f - p);
    /* whitespace right before a tool call is not content */
    size_t kk = k;
    while (kk > 0 && isspace((unsigned char)p[kk - 1])) kk--;
    if (emit_content(s, d, kk)) return q35_seterr(err, "out of memory");
    consume(s, k - kk + TAGLEN(TOOL_OPEN));
    s->state = ST_TOOL;
    return FEED_AGAIN;
  }
  size_t hold = final || !s->parse_tools ? 0 : partial_tag(p, s->pend.n, TOOL_OPEN);
  if (!final && s->parse_tools) { /* also hold trailing whitespace: it may precede a tool call */
    size_t k = s->pend.n - hold;
    while (k > 0 && isspace((unsigned char)p[k - 1])) k--;
    hold = s->pend.n - k;
  }
  if (emit_content(s, d, s->pend.n - hold)) return q35_seterr(err, "out of memory");
  return FEED_WAIT;
}

static int feed_tool(q35_chat_stream *s, int final, q35_chat_delta *d, q35_err *err) {
  const char *p = s->pend.p, *f = memfind(p, p + s->pend.n, TOOL_CLOSE);
  if (f) {
    json_t *call = parse_block(p, f, s->tools, s->n_calls, err);
    if (!call) return -1;
    s->n_calls++;
    if (!d->tool_calls) d->tool_calls = json_array();
    json_array_append_new(d->tool_calls, call);
    consume(s, (size_t)(f - p) + TAGLEN(TOOL_CLOSE));
    /* whitespace after a tool call is not content */
    size_t a = 0;
    while (a < s->pend.n && isspace((unsigned char)s->pend.p[a])) a++;
    consume(s, a);
    s->state = ST_CONTENT;
    return FEED_AGAIN;
  }
  if (final) { /* unterminated: give the text back as content */
    char *rest = q35_strndup(p, s->pend.n);
    if (!rest) return q35_seterr(err, "out of memory");
    s->pend.n = 0;
    if (q35_buf_str(&s->pend, TOOL_OPEN) || q35_buf_str(&s->pend, rest)) {
      free(rest);
      return q35_seterr(err, "out of memory");
    }
    free(rest);
    if (emit_content(s, d, s->pend.n)) return q35_seterr(err, "out of memory");
    s->state = ST_CONTENT;
  }
  return FEED_WAIT;
}

int q35_chat_stream_feed(q35_chat_stream *s, const char *text, int final, q35_chat_delta *d, q35_err *err) {
  memset(d, 0, sizeof *d);
  if (text && q35_buf_str(&s->pend, text)) return q35_seterr(err, "out of memory");
  if (!s->pend.p && q35_buf_add(&s->pend, "", 0)) return q35_seterr(err, "out of memory");
  for (;;) {
    int rc;
    switch (s->state) {
      case ST_START: rc = feed_start(s, final); break;
      case ST_THINK: rc = feed_think(s, final, d, err); break;
      case ST_CONTENT: rc = feed_content(s, final, d, err); break;
      default: rc = feed_tool(s, final, d, err); break;
    }
    if (rc != FEED_AGAIN) return rc < 0 ? -1 : 0;
  }
}

void q35_chat_split_think(const char *text, int in_think, char **reasoning, char **content) {
  q35_chat_stream *s = q35_chat_stream_new(in_think, 0, NULL);
  q35_chat_delta d = {0};
  q35_err err;
  if (s) q35_chat_stream_feed(s, text, 1, &d, &err);
  *reasoning = d.reasoning ? d.reasoning : strdup("");
  *content = d.content ? d.content : strdup("");
  d.reasoning = d.content = NULL;
  q35_chat_delta_free(&d);
  q35_chat_stream_free(s);
}
