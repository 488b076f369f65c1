#include <stdio.h>
#include "commands.h"
int cmd_export_hf(int argc, char **argv);
int cmd_export_hf(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "q35 export: Hugging Face export is not implemented yet (use --tiny-test)\n");
  return 2;
}
