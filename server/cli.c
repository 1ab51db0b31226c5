#include "server/cli.h"

#include <stdarg.h>
#include <stdio.h>

int server_cli_exit_status(int err) {
  switch (err) {
  case 0:
    return 0;
  case CORDON_E_USAGE:
  case CORDON_E_MANIFEST_INVALID:
  case CORDON_E_PACKAGE_CORRUPT:
  case CORDON_E_PACKAGE_TOO_LARGE:
  case CORDON_E_CONFIG_INVALID:
    return 2;
  default:
    return 1;
  }
}

int server_cli_fail(int err, const struct cordon_diag *diag) {
  const char *msg = diag && diag->msg[0] ? diag->msg : cordon_err_message(err);
  fprintf(stderr, "%s: %s: %s\n", SERVER_PROG, cordon_err_name(err), msg);
  return server_cli_exit_status(err);
}

int server_cli_failf(int err, const char *fmt, ...) {
  struct cordon_diag d;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d.msg, sizeof(d.msg), fmt, ap);
  va_end(ap);
  return server_cli_fail(err, &d);
}
