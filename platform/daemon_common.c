/* The parts of platform/daemon.h that are the same on every OS. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "compat/posix.h"
#include "platform/daemon.h"

long daemon_lock_holder(const char *dir, const char *name) {
  char path[PATH_MAX], buf[32];
  int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= sizeof(path))
    return 0;
  /* flock is advisory, and on Windows the holder locks a byte far past
   * the pid (locks there are mandatory): reading never waits */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return 0;
  ssize_t got = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (got <= 0)
    return 0;
  buf[got] = '\0';
  char *end;
  long pid = strtol(buf, &end, 10);
  return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}
