#include "agent/cli.h"
#include "compat/posix.h"

#include <stdio.h>
#include <stdlib.h>

void agent_say_error(int err, const char *detail) {
  fprintf(stderr, AGENT_PROG ": %s: %s\n", cordon_err_name(err),
          detail && detail[0] ? detail : cordon_err_message(err));
}

int agent_fail(int err, const char *message) {
  agent_say_error(err, message);
  return err == CORDON_E_USAGE ? 2 : 1;
}

int agent_usage(const char *message) {
  agent_say_error(CORDON_E_USAGE, message);
  return 2;
}

void agent_print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) {
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
  }
  fflush(stdout);
}
