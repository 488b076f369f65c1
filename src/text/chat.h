/*
 * chat.h - chat formatting with the model's own Jinja template, and parsing of what the model
 * writes back (reasoning, tool calls).
 *
 * Rendering
 * ---------
 * q35_chat_render(template, messages, tools, add_generation_prompt, enable_thinking, bos, eos)
 * renders an OpenAI-style conversation with the model's chat template (jinja.h), or, when the
 * template is NULL, with the built-in ChatML template (Qwen3 style: system/user/assistant turns,
 * tool results wrapped in <tool_response> inside a user turn, a <tools> block in the system
 * turn, and a generation prompt "<|im_start|>assistant\n", followed by "<think>\n\n</think>\n\n"
 * when enable_thinking == 0). The template sees the variables messages, tools (only when not
 * NULL), add_generation_prompt, enable_thinking (only when >= 0), bos_token, eos_token.
 *
 * Messages are normalized first (q35_chat_normalize_messages), so that OpenAI requests render:
 *  - "content": null or missing -> "" ; a list of parts -> the concatenated "text" parts;
 *  - tool_calls[].function.arguments given as a JSON string holding an object -> that object
 *    (templates print it with tojson, or iterate it with |items for the XML form).
 *
 * Template sources: GGUF key tokenizer.chat_template, or tokenizer_config.json "chat_template"
 * (a string, or a list of {"name", "template"} from which "default" is taken).
 *
 * Parsing model output
 * --------------------
 * q35_chat_split_think: "reasoning</think>content" -> reasoning + content.
 * q35_chat_parse_tool_calls: <tool_call>...</tool_call> blocks in both forms,
 *   Qwen3 JSON   {"name": "f", "arguments": {...}}
 *   Qwen3.5 XML  <function=f>\n<parameter=a>\nvalue\n</parameter>\n</function>
 * -> OpenAI tool_calls [{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}]
 * and the content with the blocks removed.
 *
 * Streaming: q35_chat_stream splits a token-by-token text stream into reasoning deltas,
 * content deltas and completed tool calls. It holds back only the bytes that could still be
 * the start of a tag ("</think>", "<tool_call>"), so a server can forward every delta as it is
 * produced and get, at the end, the same split as the whole-text functions.
 */
#ifndef Q35_CHAT_H
#define Q35_CHAT_H

#include <stddef.h>

#include <jansson.h>

#include "q35.h"

struct gguf_file;

/* Render a conversation. template_src NULL -> built-in ChatML. messages: JSON array of
 * message objects. tools: JSON array (OpenAI {"type":"function","function":{...}}) or NULL.
 * enable_thinking: 1 / 0, or -1 to leave it undefined (the template's default). bos/eos may be
 * NULL (""). Returns a malloc'ed string (length in *out_len if not NULL) or NULL + err. */
char *q35_chat_render(const char *template_src, const json_t *messages, const json_t *tools,
                      int add_generation_prompt, int enable_thinking, const char *bos,
                      const char *eos, size_t *out_len, q35_err *err);

/* The normalized deep copy of messages described above (NULL + err if messages is not an
 * array of objects). */
json_t *q35_chat_normalize_messages(const json_t *messages, q35_err *err);

/* The built-in ChatML template text. */
const char *q35_chat_builtin_template(void);

/* Template and special tokens from a GGUF file: *tmpl gets a malloc'ed copy of
 * tokenizer.chat_template, or NULL when the key is absent (not an error). bos/eos (may be
 * NULL pointers) get malloc'ed token texts from tokenizer.ggml.{bos,eos}_token_id, or NULL. */
int q35_chat_template_from_gguf(const struct gguf_file *f, char **tmpl, char **bos, char **eos,
                                q35_err *err);

/* Template and bos/eos tokens from a tokenizer_config.json file. *tmpl is NULL when the file
 * has no chat_template. */
int q35_chat_template_from_tokenizer_config(const char *path, char **tmpl, char **bos,
                                            char **eos, q35_err *err);

/* Split generated text into reasoning and content. in_think: the prompt ended inside a
 * <think> block (thinking on), so the text starts with reasoning. A leading "<think>" is
 * skipped. Without "</think>", everything is reasoning when in_think, else content.
 * Reasoning is stripped of surrounding newlines, content of leading newlines. */
void q35_chat_split_think(const char *text, int in_think, char **reasoning, char **content);

/* Find tool calls. Returns 0 and sets *tool_calls (a JSON array, possibly empty; caller
 * decrefs) and *content (malloc'ed text outside the blocks, trimmed of surrounding
 * whitespace), or -1 + err when a block is malformed (bad JSON, no name). tools (may be NULL)
 * gives parameter types for the XML form: a parameter declared "string" stays a string,
 * other values are read as JSON when they parse (42, true, {...}), else kept as strings.
 * An unterminated final <tool_call> is left in content. Call ids are "call_0", "call_1"... */
int q35_chat_parse_tool_calls(const char *text, const json_t *tools, char **content,
                              json_t **tool_calls, q35_err *err);

/* ---- streaming ---- */
typedef struct q35_chat_stream q35_chat_stream;

/* in_think as for q35_chat_split_think; parse_tools: recognize <tool_call> blocks. */
q35_chat_stream *q35_chat_stream_new(int in_think, int parse_tools, const json_t *tools);
void q35_chat_stream_free(q35_chat_stream *s);

typedef struct q35_chat_delta {
  char *reasoning;     /* malloc'ed text to append to the reasoning (or NULL) */
  char *content;       /* malloc'ed text to append to the content (or NULL) */
  json_t *tool_calls;  /* completed tool calls in this delta (array, or NULL) */
} q35_chat_delta;

/* Feed the next piece of generated text (final != 0 flushes what was held back). Returns 0
 * or -1 + err on a malformed tool call. Free the delta with q35_chat_delta_free. Reasoning
 * deltas are raw (not newline-stripped); the whole-text functions give the stripped form. */
int q35_chat_stream_feed(q35_chat_stream *s, const char *text, int final, q35_chat_delta *d,
                         q35_err *err);
void q35_chat_delta_free(q35_chat_delta *d);

#endif
