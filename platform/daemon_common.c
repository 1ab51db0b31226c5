/* The parts of platform/daemon.h that are the same on every OS. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int daemon_ctl_read_reply(daemon_read_fn read_some, void *ctx, size_t max_reply, char **out_reply,
                          size_t *out_len) {
  char *buf = NULL;
  size_t have = 0, cap = 0;
  int r = 0;
  for (;;) {
    if (have == cap) { /* grow by doubling, never past max_reply + 1 */
      if (cap > max_reply) {
        r = -EMSGSIZE;
        break;
      }
      size_t ncap = cap ? cap * 2 : 1024;
      if (ncap > max_reply + 1)
        ncap = max_reply + 1;
      char *nb = realloc(buf, ncap + 1);
      if (!nb) {
        r = -ENOMEM;
        break;
      }
      buf = nb;
      cap = ncap;
    }
    size_t n = 0;
    if ((r = read_some(ctx, buf + have, cap - have, &n)) < 0)
      break;
    if (n == 0) {
      r = -EPROTO; /* closed before a newline */
      break;
    }
    char *nl = memchr(buf + have, '\n', n);
    have += n;
    if (nl) {
      have = (size_t)(nl - buf);
      break;
    }
    if (have > max_reply) {
      r = -EMSGSIZE;
      break;
    }
  }
  if (r < 0) {
    free(buf);
    return r;
  }
  buf[have] = '\0';
  *out_reply = buf;
  *out_len = have;
  return 0;
}
