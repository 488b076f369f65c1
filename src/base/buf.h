/*
 * buf.h - growable byte buffers, growable arrays and whole-file reads: the one copy of what
 * the GGUF writer, the tokenizer, the chat renderer, the server and the CLI each need.
 *
 * A q35_buf keeps its bytes NUL-terminated (p[n] == 0 whenever p != NULL), so text built in
 * it is a C string. Out of memory is sticky: the first failed growth sets `oom`, later
 * appends do nothing, and the caller checks once at the end (or checks each call's -1).
 */
#ifndef Q35_BUF_H
#define Q35_BUF_H

#include <stddef.h>
#include <stdio.h>

#include "q35.h"

typedef struct q35_buf {
  char *p;    /* NULL until the first append */
  size_t n;   /* bytes used, not counting the terminating NUL */
  size_t cap; /* bytes allocated */
  int oom;    /* an append failed for lack of memory */
} q35_buf;

/* Append n bytes (n may be 0). 0, or -1 when out of memory (then b->oom is set). */
int q35_buf_add(q35_buf *b, const void *data, size_t n);
int q35_buf_str(q35_buf *b, const char *s);
int q35_buf_char(q35_buf *b, char c);
int q35_buf_printf(q35_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Take the bytes (caller frees; never NULL unless out of memory) and leave b empty. */
char *q35_buf_take(q35_buf *b, size_t *len);
void q35_buf_free(q35_buf *b);

/* A NUL-terminated copy of exactly n bytes of s (s need not be terminated: GGUF strings in the
 * mapping, slices of a buffer); NULL when out of memory. Unlike strndup it never looks past
 * s[n - 1], which matters under ASan's strict string checks and at the end of a mapping. */
char *q35_strndup(const char *s, size_t n);

/* Make room for `need` elements of `elem` bytes in the array *p of capacity *cap (doubling;
 * new slots zeroed). 0, or -1 when out of memory (the array is left as it was). */
int q35_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Everything a stream holds until EOF, NUL-terminated; NULL when out of memory or on a read
 * error (the stream is not closed). */
char *q35_read_stream(FILE *f, size_t *len);
/* A whole file, NUL-terminated (binary-safe: *len counts every byte). NULL with a message
 * naming the path when it cannot be opened or read. */
char *q35_read_file(const char *path, size_t *len, q35_err *err);

#endif
