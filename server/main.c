/* cordon-server: command dispatch. */
#include <stdio.h>

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "cordon-server: usage: cordon-server [--state DIR] init|pack ...\n");
  return 2;
}
