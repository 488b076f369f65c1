/* cmd_export.c - q35 export: a Hugging Face checkpoint to GGUF, or --tiny-test. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

int cmd_export_tiny(int argc, char **argv);
int cmd_export_hf(int argc, char **argv);

int cmd_export(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (arg_is(argc, argv, &i, "--tiny_test")) return cmd_export_tiny(argc, argv);
  return cmd_export_hf(argc, argv);
}
