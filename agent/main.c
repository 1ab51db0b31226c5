/* cordon-agent: command dispatch. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "cordon-agent: usage: cordon-agent [--config DIR] status|explain|exec ...\n");
  return 2;
}
