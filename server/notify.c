/* systemd's readiness protocol, spoken directly (server/notify.h). */
#include "server/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct notify {
  int fd;
  struct sockaddr_un addr;
  socklen_t addr_len;
};

int notify_open(struct notify **out, struct cordon_diag *diag) {
  const char *path = getenv("NOTIFY_SOCKET");
  *out = NULL;
  if (!path || !*path)
    return 0;
  struct notify *n = calloc(1, sizeof(*n));
  if (!n)
    return -ENOMEM;
  size_t len = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || len >= sizeof(n->addr.sun_path) || len < 2) {
    free(n);
    return cordon_diag_set(diag, -EINVAL, "NOTIFY_SOCKET is not a socket path: %s", path);
  }
  n->addr.sun_family = AF_UNIX;
  memcpy(n->addr.sun_path, path, len);
  if (path[0] == '@') /* the abstract namespace: a leading NUL, no terminator */
    n->addr.sun_path[0] = '\0';
  n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
  n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (n->fd < 0) {
    int e = errno;
    free(n);
    return cordon_diag_set(diag, -e, "NOTIFY_SOCKET: %s", strerror(e));
  }
  *out = n;
  return 0;
}

void notify_close(struct notify *n) {
  if (!n)
    return;
  close(n->fd);
  free(n);
}

int notify_send(struct notify *n, const char *text) {
  if (!n)
    return 0;
  ssize_t r;
  do
    r = sendto(n->fd, text, strlen(text), MSG_NOSIGNAL, (const struct sockaddr *)&n->addr,
               n->addr_len);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : 0;
}

uint64_t notify_watchdog_usec(void) {
  const char *usec = getenv("WATCHDOG_USEC");
  const char *pid = getenv("WATCHDOG_PID");
  if (!usec || !*usec)
    return 0;
  char *end;
  if (pid && *pid) {
    long p = strtol(pid, &end, 10);
    if (*end || p != (long)getpid())
      return 0; /* meant for another process */
  }
  errno = 0;
  unsigned long long v = strtoull(usec, &end, 10);
  if (errno || *end || *usec == '-')
    return 0;
  return (uint64_t)v;
}
