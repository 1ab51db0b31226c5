/* The admin socket, command-line side (server/admin_client.h). */
#include "server/admin_client.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/admin_ops.h"

struct admin_stream {
  int fd;
  char *buf;
  size_t len, cap;
  unsigned timeout_ms;
};

void admin_stream_close(struct admin_stream *st) {
  if (!st)
    return;
  if (st->fd >= 0)
    close(st->fd);
  free(st->buf);
  free(st);
}

/* Never SIGPIPE: a daemon that refused and closed is answered by its reply. */
static int send_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

/* Connect, send req's line (and body_fd's bytes when >= 0). */
static int stream_connect(const char *state_dir, const json_t *req, int body_fd, uint64_t size,
                          unsigned timeout_ms, struct admin_stream **out_stream,
                          struct cordon_diag *diag) {
  enum admin_op op;
  int r = admin_request_check(req, &op, diag);
  if (r < 0)
    return r;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s", state_dir, ADMIN_SOCKET_FILE) >=
      (int)sizeof(addr.sun_path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long for a socket");
  struct admin_stream *st = calloc(1, sizeof(*st));
  if (!st)
    return -ENOMEM;
  st->timeout_ms = timeout_ms;
  st->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (st->fd < 0) {
    r = -errno;
    admin_stream_close(st);
    return r;
  }
  if (timeout_ms) {
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    (void)setsockopt(st->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(st->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  if (connect(st->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
    int e = errno;
    admin_stream_close(st);
    return cordon_diag_set(diag, -e,
                           "the daemon is not running (%s: %s); start `cordon-server run`",
                           addr.sun_path, strerror(e));
  }
  char *text = json_dumps(req, JSON_COMPACT);
  if (!text) {
    admin_stream_close(st);
    return -ENOMEM;
  }
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves room for its NUL: reuse it */
  r = send_all(st->fd, text, n + 1);
  free(text);
  uint8_t chunk[65536];
  for (uint64_t off = 0; r == 0 && body_fd >= 0 && off < size;) {
    size_t want = size - off < sizeof(chunk) ? (size_t)(size - off) : sizeof(chunk);
    ssize_t k = pread(body_fd, chunk, want, (off_t)off);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      r = k < 0 ? -errno : -EIO;
      break;
    }
    r = send_all(st->fd, chunk, (size_t)k);
    off += (uint64_t)k;
  }
  if (r < 0) {
    /* the daemon may have refused and closed: its reply says why */
    cordon_diag_set(diag, r, "admin socket: %s", strerror(-r));
    if (r != -EPIPE) {
      admin_stream_close(st);
      return r;
    }
  }
  *out_stream = st;
  return 0;
}

int admin_stream_next(struct admin_stream *st, json_t **out_line, struct cordon_diag *diag) {
  for (;;) {
    char *nl = st->len ? memchr(st->buf, '\n', st->len) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - st->buf);
      /* a job's stored result may carry \u0000 (docs/PROTOCOL.md "Result") */
      json_t *line = json_loadb(st->buf, n, JSON_ALLOW_NUL, NULL);
      memmove(st->buf, nl + 1, st->len - n - 1);
      st->len -= n + 1;
      if (!json_is_object(line)) {
        json_decref(line);
        return cordon_diag_set(diag, CORDON_E_PROTOCOL, "the daemon sent a line that is not JSON");
      }
      *out_line = line;
      return 0;
    }
    if (st->len + 1 >= st->cap) {
      if (st->cap >= ADMIN_REPLY_MAX)
        return cordon_diag_set(diag, CORDON_E_LIMIT,
                               "the daemon's reply is over %u MiB: ask for less (e.g. jobs "
                               "--limit N or --since TIME)",
                               ADMIN_REPLY_MAX >> 20);
      size_t cap = st->cap ? st->cap * 2 : 65536;
      char *nb = realloc(st->buf, cap);
      if (!nb)
        return -ENOMEM;
      st->buf = nb;
      st->cap = cap;
    }
    ssize_t k = read(st->fd, st->buf + st->len, st->cap - 1 - st->len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return cordon_diag_set(diag, -ETIMEDOUT, "the daemon did not answer within %u ms",
                             st->timeout_ms);
    if (k <= 0)
      return cordon_diag_set(diag, CORDON_E_PROTOCOL, "no reply from the daemon");
    st->len += (size_t)k;
  }
}

static int call(const char *state_dir, const json_t *req, int body_fd, uint64_t size,
                unsigned timeout_ms, json_t **out_reply, struct cordon_diag *diag) {
  struct admin_stream *st = NULL;
  int r = stream_connect(state_dir, req, body_fd, size, timeout_ms, &st, diag);
  if (r == 0)
    r = admin_stream_next(st, out_reply, diag);
  admin_stream_close(st);
  return r;
}

int admin_call(const char *state_dir, const json_t *req, json_t **out_reply,
               struct cordon_diag *diag) {
  return call(state_dir, req, -1, 0, 0, out_reply, diag);
}

int admin_call_within(const char *state_dir, const json_t *req, unsigned timeout_ms,
                      json_t **out_reply, struct cordon_diag *diag) {
  return call(state_dir, req, -1, 0, timeout_ms, out_reply, diag);
}

int admin_call_with_file(const char *state_dir, json_t *req, int body_fd, json_t **out_reply,
                         struct cordon_diag *diag) {
  struct stat st;
  if (fstat(body_fd, &st) < 0 || !S_ISREG(st.st_mode))
    return cordon_diag_set(diag, CORDON_E_USAGE, "the package is not a regular file");
  int r = admin_request_set(req, ADMIN_ARG_BYTES, json_integer((json_int_t)st.st_size));
  if (r < 0)
    return r;
  return call(state_dir, req, body_fd, (uint64_t)st.st_size, 0, out_reply, diag);
}

int admin_stream_open(const char *state_dir, const json_t *req, struct admin_stream **out_stream,
                      json_t **out_reply, struct cordon_diag *diag) {
  struct admin_stream *st = NULL;
  int r = stream_connect(state_dir, req, -1, 0, 0, &st, diag);
  json_t *reply = NULL;
  if (r == 0)
    r = admin_stream_next(st, &reply, diag);
  if (r < 0) {
    admin_stream_close(st);
    return r;
  }
  *out_stream = st;
  *out_reply = reply;
  return 0;
}
