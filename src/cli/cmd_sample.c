#include <stdio.h>
#include "commands.h"
int cmd_sample(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "q35: this command is not implemented yet\n");
  return 2;
}
