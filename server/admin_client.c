#include "server/admin_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/daemon.h"

#define ADMIN_REPLY_MAX (16u << 20)

int admin_call(const char *state_dir, json_t *req, json_t **out_reply, struct cordon_diag *diag) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s", state_dir, SERVER_ADMIN_SOCKET) >=
      (int)sizeof(addr.sun_path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long for a socket");
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
    int e = errno;
    close(fd);
    return cordon_diag_set(diag, -e,
                           "the daemon is not running (%s: %s); start `cordon-server run`",
                           addr.sun_path, strerror(e));
  }
  char *text = json_dumps(req, JSON_COMPACT);
  int r = 0;
  if (!text) {
    r = -ENOMEM;
    goto out;
  }
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves room for its NUL: reuse it */
  for (size_t off = 0; off <= n;) {
    ssize_t w = write(fd, text + off, n + 1 - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      r = cordon_diag_set(diag, -errno, "admin socket: %s", strerror(errno));
      goto out;
    }
    off += (size_t)w;
  }
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      r = -ENOMEM;
      goto out;
    }
    if (len + 1 >= cap) {
      if (cap >= ADMIN_REPLY_MAX) {
        r = cordon_diag_set(diag, CORDON_E_LIMIT, "admin reply too large");
        break;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        r = -ENOMEM;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t k = read(fd, buf + len, cap - 1 - len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    len += (size_t)k;
    if (memchr(buf + len - (size_t)k, '\n', (size_t)k))
      break;
  }
  if (r == 0) {
    buf[len] = '\0';
    json_t *reply = len ? json_loads(buf, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!reply)
      r = cordon_diag_set(diag, CORDON_E_PROTOCOL, "no reply from the daemon");
    else
      *out_reply = reply;
  }
  free(buf);
out:
  free(text);
  close(fd);
  return r;
}
