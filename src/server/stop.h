/*
 * stop.h - stop strings for q35 serve: generated text is held back while it could still be
 * the start of a stop string, and released once it cannot; a match ends the choice with
 * finish_reason "stop" and the stop string itself is never sent.
 */
#ifndef Q35_SERVER_STOP_H
#define Q35_SERVER_STOP_H

#include <stddef.h>

#include "base/buf.h"

/* Move the text of `hold` that can no longer be part of one of the n_stop stop strings into
 * *out (malloc'ed, NUL-terminated; NULL with *out_len 0 when there is none). With `final`
 * (the last text of the choice) nothing is held back. Returns 1 when a stop string matched:
 * the text before it is released and the rest dropped. */
int stop_release(q35_buf *hold, const char *const *stop, int n_stop, int final, char **out, size_t *out_len);

#endif
