/*
 * export_split.h - the split-output flags of q35 export (both the Hugging Face export and
 * --tiny-test): --split-max-size SIZE and --split-max-tensors N, as llama.cpp's gguf-split
 * takes them; the shards are written by the GGUF writer (format/gguf.h, gguf_writer_set_split).
 */
#ifndef Q35_CLI_EXPORT_SPLIT_H
#define Q35_CLI_EXPORT_SPLIT_H

#include <stdio.h>

#include "format/gguf.h"

/* Consume argv[*i] (and its value) when it is --split-max-size or --split-max-tensors (either
 * spelling): 1, else 0. A bad value exits(2) naming the flag. */
int export_split_arg(gguf_split_opts *s, int argc, char **argv, int *i);
/* SIZE: bytes, or a number with K, M, G or T (powers of 1000, as gguf-split counts: 50G fits a
 * 50 GB upload limit; an optional B: 50GB) or KiB, MiB, GiB, TiB (powers of 1024). -1 if bad. */
int export_split_parse_size(const char *v, uint64_t *out);
/* The help lines of the two flags. */
void export_split_help(FILE *f);
/* After a successful export to OUT: on stderr, the shards written (when split). */
void export_split_report(const char *out, const gguf_split_opts *s, uint32_t n_shards);

#endif
