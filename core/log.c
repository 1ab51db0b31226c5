#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static const char *log_program = "cordon";

void core_log_set_program(const char *name) {
  log_program = name ? name : "cordon";
}

void core_log(const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  /* one write per line, so lines of two threads do not interleave */
  fprintf(stderr, "%s: %s\n", log_program, line);
}
