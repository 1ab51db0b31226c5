/* A raw client of the daemon's admin socket (docs/protocol/admin.md), for
 * the tests that speak its lines themselves: connect, send, read a line,
 * ask. Include after e2e.h (e2e_state). Header-only. */
#ifndef CORDON_TESTS_SERVER_ADMIN_CONN_H
#define CORDON_TESTS_SERVER_ADMIN_CONN_H

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/admin_ops.h"

#define ADMIN_CONN_FN static __attribute__((unused))

struct conn {
  int fd;
  char buf[1 << 16];
  size_t len;
};

/* A connection to STATE/admin.sock whose reads give up after 20 s: the fd,
 * or -errno. */
ADMIN_CONN_FN int sock_connect(void) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (snprintf(addr.sun_path, sizeof(addr.sun_path), "%.80s/%s", e2e_state, ADMIN_SOCKET_FILE) >=
      (int)sizeof(addr.sun_path))
    return -ENAMETOOLONG;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  struct timeval tv = {20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

ADMIN_CONN_FN struct conn *conn_open(void) {
  struct conn *c = calloc(1, sizeof(*c));
  cr_assert_not_null(c);
  c->fd = sock_connect();
  cr_assert_geq(c->fd, 0, "connect: %s", strerror(-c->fd));
  return c;
}

ADMIN_CONN_FN void conn_close(struct conn *c) {
  close(c->fd);
  free(c);
}

ADMIN_CONN_FN void send_raw(struct conn *c, const void *data, size_t n) {
  cr_assert_eq(send(c->fd, data, n, MSG_NOSIGNAL), (ssize_t)n);
}

ADMIN_CONN_FN void send_line(struct conn *c, const char *line) {
  send_raw(c, line, strlen(line));
  send_raw(c, "\n", 1);
}

/* The next line, parsed; NULL when the daemon closed the connection. */
ADMIN_CONN_FN json_t *read_line(struct conn *c) {
  for (;;) {
    char *nl = memchr(c->buf, '\n', c->len);
    if (nl) {
      size_t n = (size_t)(nl - c->buf);
      json_error_t je;
      json_t *j = json_loadb(c->buf, n, 0, &je);
      cr_assert(json_is_object(j), "not a JSON object (%s): %.*s", je.text, (int)n, c->buf);
      memmove(c->buf, nl + 1, c->len - n - 1);
      c->len -= n + 1;
      return j;
    }
    cr_assert_lt(c->len, sizeof(c->buf) - 1, "a line too long");
    ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
    cr_assert_geq(k, 0, "read: %s", strerror(errno));
    if (k == 0) {
      cr_assert_eq(c->len, 0, "a partial line before the close");
      return NULL;
    }
    c->len += (size_t)k;
  }
}

ADMIN_CONN_FN json_t *ask(struct conn *c, const char *line) {
  send_line(c, line);
  json_t *j = read_line(c);
  cr_assert_not_null(j, "no reply to %s", line);
  return j;
}

ADMIN_CONN_FN const char *str(const json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

ADMIN_CONN_FN void assert_ok(json_t *reply) {
  cr_assert(json_is_true(json_object_get(reply, "ok")), "not ok: %s", json_dumps(reply, 0));
  json_decref(reply);
}

/* Entries of STATE named upload-*: request bodies not yet removed. */
ADMIN_CONN_FN int uploads(void) {
  DIR *d = opendir(e2e_state);
  cr_assert_not_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    n += strncmp(de->d_name, "upload-", 7) == 0;
  closedir(d);
  return n;
}

#endif
