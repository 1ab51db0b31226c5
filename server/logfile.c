/* `run --log-file` (server/logfile.h). */
#include "server/logfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *log_path;

static int put_on_stderr(const char *path, struct cordon_diag *diag) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
  if (fd < 0) {
    int e = errno;
    return cordon_diag_set(diag, -e, "cannot open the log file %s: %s", path, strerror(e));
  }
  fflush(stderr);
  int r = 0;
  if (fd != 2 && dup2(fd, 2) < 0) {
    int e = errno;
    r = cordon_diag_set(diag, -e, "cannot use the log file %s: %s", path, strerror(e));
  }
  if (fd != 2)
    close(fd);
  return r;
}

int logfile_open(const char *path, struct cordon_diag *diag) {
  char *copy = strdup(path);
  if (!copy)
    return -ENOMEM;
  int r = put_on_stderr(path, diag);
  if (r < 0) {
    free(copy);
    return r;
  }
  free(log_path);
  log_path = copy;
  return 0;
}

bool logfile_active(void) {
  return log_path != NULL;
}

const char *logfile_path(void) {
  return log_path;
}

int logfile_reopen(struct cordon_diag *diag) {
  if (!log_path)
    return 0;
  return put_on_stderr(log_path, diag);
}
