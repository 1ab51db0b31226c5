/* The admin socket, daemon side (server/admin_sock.h). */
#include "server/admin_sock.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "server/admin_ops.h"

#define ADMIN_BACKLOG 16

struct admin_sock {
  uv_pipe_t pipe;
  admin_request_fn *on_request;
  void *data;
};

struct admin_conn {
  uv_pipe_t pipe;
  struct admin_sock *sock;
  char buf[ADMIN_REQUEST_MAX];
  size_t len;
  bool responded;
  long uid, pid;
};

static void conn_closed(uv_handle_t *h) {
  free(h->data);
}

static void conn_close(struct admin_conn *c) {
  uv_close((uv_handle_t *)&c->pipe, conn_closed);
}

static void conn_write_done(uv_write_t *req, int status) {
  (void)status;
  struct admin_conn *c = req->data;
  free(req);
  conn_close(c);
}

void admin_conn_reply(struct admin_conn *c, json_t *reply) {
  char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
  json_decref(reply);
  size_t n = text ? strlen(text) : 0;
  uv_write_t *req = malloc(sizeof(*req) + n + 1);
  if (!text || !req) {
    free(text);
    free(req);
    conn_close(c);
    return;
  }
  char *copy = (char *)(req + 1);
  memcpy(copy, text, n);
  copy[n] = '\n';
  free(text);
  req->data = c;
  c->responded = true;
  uv_buf_t b = uv_buf_init(copy, (unsigned)n + 1);
  if (uv_write(req, (uv_stream_t *)&c->pipe, &b, 1, conn_write_done) < 0) {
    free(req);
    conn_close(c);
  }
}

void admin_conn_peer(const struct admin_conn *c, long *out_uid, long *out_pid) {
  *out_uid = c->uid;
  *out_pid = c->pid;
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct admin_conn *c = h->data;
  (void)suggested;
  buf->base = c->buf + c->len;
  buf->len = sizeof(c->buf) - 1 - c->len;
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct admin_conn *c = st->data;
  (void)buf;
  if (nread < 0 || c->responded) {
    if (!c->responded)
      conn_close(c);
    return;
  }
  c->len += (size_t)nread;
  c->buf[c->len] = '\0';
  char *nl = memchr(c->buf, '\n', c->len);
  if (!nl) {
    if (c->len >= sizeof(c->buf) - 1)
      admin_conn_reply(c, admin_reply_error(CORDON_E_LIMIT, "request too long"));
    return;
  }
  *nl = '\0';
  uv_read_stop(st);
  json_error_t je;
  json_t *req = json_loads(c->buf, JSON_REJECT_DUPLICATES, &je);
  if (!req || !json_is_object(req)) {
    json_decref(req);
    admin_conn_reply(c, admin_reply_error(CORDON_E_USAGE, "request is not a JSON object"));
    return;
  }
  c->sock->on_request(c->sock->data, c, req);
  json_decref(req);
}

static void on_connection(uv_stream_t *server, int status) {
  struct admin_sock *a = server->data;
  if (status < 0)
    return;
  struct admin_conn *c = calloc(1, sizeof(*c));
  if (!c)
    return;
  c->sock = a;
  uv_pipe_init(server->loop, &c->pipe, 0);
  c->pipe.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
    conn_close(c);
    return;
  }
  /* only the daemon's own user may talk to it */
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t cl = sizeof(cred);
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
    conn_close(c);
    return;
  }
  if (cred.uid != geteuid()) {
    char uid[24], pid[24];
    snprintf(uid, sizeof(uid), "%ld", (long)cred.uid);
    snprintf(pid, sizeof(pid), "%ld", (long)cred.pid);
    core_log_kv(CORE_LOG_WARN, "admin connection refused", "uid", uid, "pid", pid, "reason",
                "not the daemon's user", NULL);
    conn_close(c);
    return;
  }
  c->uid = (long)cred.uid;
  c->pid = (long)cred.pid;
  uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read);
}

static void sock_closed_on_failure(uv_handle_t *h) {
  free(h->data);
}

int admin_sock_open(uv_loop_t *loop, const char *path, admin_request_fn *on_request, void *data,
                    struct admin_sock **out_sock) {
  struct admin_sock *a = calloc(1, sizeof(*a));
  if (!a)
    return UV_ENOMEM;
  a->on_request = on_request;
  a->data = data;
  unlink(path);
  uv_pipe_init(loop, &a->pipe, 0);
  a->pipe.data = a;
  mode_t old = umask(0177);
  int r = uv_pipe_bind(&a->pipe, path);
  umask(old);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&a->pipe, ADMIN_BACKLOG, on_connection);
  if (r < 0) {
    uv_close((uv_handle_t *)&a->pipe, sock_closed_on_failure);
    return r;
  }
  *out_sock = a;
  return 0;
}

void admin_sock_close(struct admin_sock *a) {
  if (a && !uv_is_closing((uv_handle_t *)&a->pipe))
    uv_close((uv_handle_t *)&a->pipe, NULL);
}

void admin_sock_free(struct admin_sock *a) {
  free(a);
}
