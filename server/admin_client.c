/* The admin socket, command-line side (server/admin_client.h). */
#include "server/admin_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/file.h"
#include "server/admin_ops.h"

int admin_call(const char *state_dir, const json_t *req, json_t **out_reply,
               struct cordon_diag *diag) {
  return admin_call_within(state_dir, req, 0, out_reply, diag);
}

int admin_call_within(const char *state_dir, const json_t *req, unsigned timeout_ms,
                      json_t **out_reply, struct cordon_diag *diag) {
  enum admin_op op;
  int r = admin_request_check(req, &op, diag);
  if (r < 0)
    return r;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s", state_dir, ADMIN_SOCKET_FILE) >=
      (int)sizeof(addr.sun_path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long for a socket");
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (timeout_ms) {
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
    int e = errno;
    close(fd);
    return cordon_diag_set(diag, -e,
                           "the daemon is not running (%s: %s); start `cordon-server run`",
                           addr.sun_path, strerror(e));
  }
  char *text = json_dumps(req, JSON_COMPACT);
  char *buf = NULL;
  if (!text) {
    r = -ENOMEM;
    goto out;
  }
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves room for its NUL: reuse it */
  if ((r = core_write_all(fd, text, n + 1)) < 0) {
    cordon_diag_set(diag, r, "admin socket: %s", strerror(-r));
    goto out;
  }
  size_t cap = 65536, len = 0;
  buf = malloc(cap);
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
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      r = cordon_diag_set(diag, -ETIMEDOUT, "the daemon did not answer within %u ms", timeout_ms);
      break;
    }
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
out:
  free(buf);
  free(text);
  close(fd);
  return r;
}
