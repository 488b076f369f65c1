/* stop.c - holding back text that may start a stop string (see stop.h). */
#define _GNU_SOURCE /* memmem */
#include "server/stop.h"

#include <stdlib.h>
#include <string.h>

int stop_release(q35_buf *hold, const char *const *stop, int n_stop, int final, char **out, size_t *out_len) {
  size_t cut = hold->n, keep_from = hold->n;
  int matched = 0;
  for (int k = 0; k < n_stop; k++) {
    const char *m = hold->n ? memmem(hold->p, hold->n, stop[k], strlen(stop[k])) : NULL;
    if (m && (size_t)(m - hold->p) < cut) {
      cut = (size_t)(m - hold->p);
      matched = 1;
    }
  }
  if (matched) {
    keep_from = cut;
  } else if (!final) { /* hold back the longest suffix that is a proper prefix of a stop string */
    for (int k = 0; k < n_stop; k++) {
      size_t sl = strlen(stop[k]);
      for (size_t l = sl - 1; l > 0; l--)
        if (l <= hold->n && !memcmp(hold->p + hold->n - l, stop[k], l)) {
          if (hold->n - l < keep_from) keep_from = hold->n - l;
          break;
        }
    }
  }
  *out = NULL;
  *out_len = 0;
  if (keep_from > 0) {
    *out = malloc(keep_from + 1);
    if (*out) {
      memcpy(*out, hold->p, keep_from);
      (*out)[keep_from] = 0;
      *out_len = keep_from;
    }
  }
  if (matched) {
    hold->n = 0;
  } else {
    if (hold->n > keep_from) memmove(hold->p, hold->p + keep_from, hold->n - keep_from);
    hold->n -= keep_from;
  }
  if (hold->p) hold->p[hold->n] = 0;
  return matched;
}

