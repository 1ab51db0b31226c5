/* The admin socket, daemon side (server/admin_sock.h). */
#include "server/admin_sock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/log.h"

#define ADMIN_BACKLOG ADMIN_CONN_MAX /* a client may have as many connecting as it may hold */
#define ADMIN_DROP_GRACE_MS 2000 /* a dropped stream's last lines, then it is closed anyway */
#define ADMIN_GROUPS_MAX 4096    /* supplementary groups looked at */
#define ADMIN_UID_CONN_MAX 16    /* connections of one uid other than the daemon's and root */
#define ADMIN_OWNER_RESERVED 8   /* of ADMIN_CONN_MAX, kept for the daemon's uid and root */

/* What the connection's timer counts down (docs/protocol/admin.md,
 * "Timeouts"): none while a request is answered or a stream runs. */
enum conn_deadline {
  DEADLINE_NONE,
  DEADLINE_IDLE, /* between requests: idle_ms */
  DEADLINE_LINE, /* from a line's first byte to its newline: request_ms */
  DEADLINE_BODY, /* between two reads of a body's bytes: request_ms */
};

enum conn_mode {
  CONN_IDLE,   /* reading request lines */
  CONN_BODY,   /* reading the bytes a request announced */
  CONN_BUSY,   /* a request is being answered: not reading */
  CONN_STREAM, /* sending a stream's lines; what the peer sends is dropped */
  CONN_CLOSING,
};

struct admin_sock {
  uv_pipe_t pipe;
  admin_request_fn *on_request;
  void *data;
  char spool_dir[4001];
  size_t stream_max;
  uint64_t request_ms, idle_ms;
  bool has_group, closing;
  gid_t gid;
  uid_t uid;
  size_t count;
  struct admin_conn *conns;
};

struct admin_conn {
  uv_pipe_t pipe;
  uv_timer_t timer; /* a deadline (enum conn_deadline), then the grace of a connection
                       closing with lines unsent */
  uv_shutdown_t shutdown;
  int handles;
  struct admin_sock *sock;
  struct admin_conn *next;
  enum conn_mode mode;
  bool reading, pumping;
  enum conn_deadline deadline;
  bool body_progress; /* body bytes came since the deadline was set */
  char buf[ADMIN_REQUEST_MAX];
  size_t len;
  /* CONN_BODY */
  json_t *req; /* NULL: the bytes of a refused request, read past */
  enum admin_op op;
  int body_fd;
  char body_path[PATH_MAX];
  unsigned long long body_left;
  int body_err;
  size_t queued; /* bytes written, not yet sent */
  admin_gone_fn *gone;
  void *gone_ctx;
  long uid, pid;
  bool owner;
  unsigned long requests;
  int version;
};

struct wreq {
  uv_write_t w;
  struct admin_conn *c;
  size_t n;
  char data[];
};

static void conn_pump(struct admin_conn *c);
static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void log_peer(enum core_log_level level, const char *msg, long uid, long pid, const char *k,
                     const char *v) {
  char u[24], p[24];
  snprintf(u, sizeof(u), "%ld", uid);
  snprintf(p, sizeof(p), "%ld", pid);
  core_log_kv(level, msg, "uid", u, "pid", p, k, v, NULL);
}

/* ---- closing ---- */

static void handle_closed(uv_handle_t *h) {
  struct admin_conn *c = h->data;
  if (--c->handles == 0)
    free(c);
}

static void conn_close_handles(struct admin_conn *c) {
  if (!uv_is_closing((uv_handle_t *)&c->pipe))
    uv_close((uv_handle_t *)&c->pipe, handle_closed);
  if (!uv_is_closing((uv_handle_t *)&c->timer))
    uv_close((uv_handle_t *)&c->timer, handle_closed);
}

static void body_release(struct admin_conn *c) {
  if (c->body_fd >= 0)
    close(c->body_fd);
  c->body_fd = -1;
  if (c->body_path[0])
    unlink(c->body_path);
  c->body_path[0] = '\0';
  json_decref(c->req);
  c->req = NULL;
}

/* Out of the socket's list, and no more requests. */
static void conn_detach(struct admin_conn *c) {
  c->mode = CONN_CLOSING;
  for (struct admin_conn **pp = &c->sock->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      c->sock->count--;
      break;
    }
  body_release(c);
}

static void conn_close(struct admin_conn *c) {
  if (c->mode != CONN_CLOSING)
    conn_detach(c);
  conn_close_handles(c);
}

static void on_shutdown_done(uv_shutdown_t *req, int status) {
  if (status < 0) /* cancelled by the close, or the peer is gone */
    conn_close_handles(req->data);
}

static void on_grace(uv_timer_t *t) {
  conn_close_handles(t->data);
}

/* Close once what was written is sent and the peer has closed its side
 * (what it still sends is read and dropped, so that closing does not reset
 * the connection under our last line), at most ADMIN_DROP_GRACE_MS. */
static void conn_finish(struct admin_conn *c) {
  if (c->mode == CONN_CLOSING)
    return;
  conn_detach(c);
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->pipe, on_shutdown_done) < 0 ||
      (!c->reading && uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read) < 0)) {
    conn_close_handles(c);
    return;
  }
  c->reading = true;
  c->deadline = DEADLINE_NONE;
  uv_timer_start(&c->timer, on_grace, ADMIN_DROP_GRACE_MS, 0);
}

/* A stream that goes: its owner hears it once. */
static void conn_gone(struct admin_conn *c) {
  admin_gone_fn *gone = c->gone;
  c->gone = NULL;
  if (gone)
    gone(c->gone_ctx, c);
}

/* ---- writing ---- */

static void write_done(uv_write_t *w, int status) {
  (void)status;
  struct wreq *r = (struct wreq *)w;
  r->c->queued -= r->n;
  free(r);
}

/* line (stolen) and a newline. 0, -ENOMEM or a uv error. */
static int conn_write(struct admin_conn *c, json_t *line) {
  char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
  json_decref(line);
  if (!text)
    return -ENOMEM;
  size_t n = strlen(text);
  struct wreq *r = malloc(sizeof(*r) + n + 1);
  if (!r) {
    free(text);
    return -ENOMEM;
  }
  memcpy(r->data, text, n);
  r->data[n] = '\n';
  free(text);
  r->c = c;
  r->n = n + 1;
  uv_buf_t b = uv_buf_init(r->data, (unsigned)(n + 1));
  int e = uv_write(&r->w, (uv_stream_t *)&c->pipe, &b, 1, write_done);
  if (e < 0) {
    free(r);
    return e;
  }
  c->queued += n + 1;
  return 0;
}

static json_t *stream_error(int err, const char *message) {
  json_t *e = admin_reply_error(err, message);
  if (e)
    json_object_set_new(e, ADMIN_REPLY_EVENT, json_string("error"));
  return e;
}

void admin_conn_reply(struct admin_conn *c, json_t *reply) {
  if (c->mode == CONN_CLOSING) {
    json_decref(reply);
    return;
  }
  if (!reply || conn_write(c, reply) < 0) {
    conn_close(c);
    return;
  }
  if (c->sock->closing) {
    conn_finish(c);
    return;
  }
  c->mode = CONN_IDLE;
  conn_pump(c);
}

int admin_conn_stream_start(struct admin_conn *c, admin_gone_fn *gone, void *ctx) {
  json_t *ok = admin_reply_ok();
  if (!ok || conn_write(c, ok) < 0) {
    admin_conn_reply(c, admin_reply_error(-ENOMEM, "out of memory"));
    return -ENOMEM;
  }
  c->gone = gone;
  c->gone_ctx = ctx;
  c->mode = CONN_STREAM;
  conn_pump(c);
  return 0;
}

int admin_conn_stream_send(struct admin_conn *c, json_t *line) {
  if (c->mode != CONN_STREAM) {
    json_decref(line);
    return 0;
  }
  char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
  size_t n = text ? strlen(text) + 1 : 0;
  free(text);
  if (!text || c->queued + n > c->sock->stream_max) {
    json_decref(line);
    char u[24], q[24];
    snprintf(u, sizeof(u), "%ld", c->uid);
    snprintf(q, sizeof(q), "%zu", c->queued);
    core_log_kv(CORE_LOG_WARN, "admin stream dropped: the client does not keep up", "uid", u,
                "queued_bytes", q, NULL);
    (void)conn_write(c, stream_error(CORDON_E_LIMIT,
                                     "the client fell behind: too many unsent bytes; reconnect"));
    conn_gone(c);
    conn_finish(c);
    return -ENOBUFS;
  }
  if (conn_write(c, line) < 0) {
    conn_gone(c);
    conn_close(c);
    return -ENOBUFS;
  }
  return 0;
}

void admin_conn_stream_end(struct admin_conn *c, json_t *line) {
  c->gone = NULL;
  if (c->mode == CONN_STREAM)
    c->mode = CONN_BUSY;
  admin_conn_reply(c, line);
}

void admin_conn_peer(const struct admin_conn *c, long *out_uid, long *out_pid) {
  *out_uid = c->uid;
  *out_pid = c->pid;
}

bool admin_conn_is_owner(const struct admin_conn *c) {
  return c->owner;
}

unsigned long admin_conn_requests(const struct admin_conn *c) {
  return c->requests;
}

int admin_conn_version(const struct admin_conn *c) {
  return c->version;
}

void admin_conn_set_version(struct admin_conn *c, int version) {
  c->version = version;
}

/* ---- reading ---- */

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char dropped[4096]; /* what a stream or a closing connection reads */
  struct admin_conn *c = h->data;
  (void)suggested;
  if (c->mode == CONN_STREAM || c->mode == CONN_CLOSING) {
    *buf = uv_buf_init(dropped, sizeof(dropped));
    return;
  }
  buf->base = c->buf + c->len;
  buf->len = sizeof(c->buf) - 1 - c->len;
}

static void body_done(struct admin_conn *c) {
  if (c->body_fd >= 0 && close(c->body_fd) < 0 && !c->body_err)
    c->body_err = -errno;
  c->body_fd = -1;
  json_t *req = c->req;
  c->req = NULL;
  if (!req) { /* a refused request's bytes: answered already */
    c->mode = CONN_IDLE;
    return;
  }
  c->mode = CONN_BUSY;
  if (c->body_err) {
    body_release(c);
    json_decref(req);
    admin_conn_reply(c, admin_reply_error(c->body_err, "cannot store the request's bytes"));
    return;
  }
  c->sock->on_request(c->sock->data, c, req, c->op, c->body_path);
  json_decref(req);
  if (c->body_path[0])
    unlink(c->body_path);
  c->body_path[0] = '\0';
}

/* The buffered bytes that belong to the body. */
static void body_feed(struct admin_conn *c) {
  size_t take = c->len < c->body_left ? c->len : (size_t)c->body_left;
  if (take && c->body_fd >= 0 && !c->body_err) {
    int r = core_write_all(c->body_fd, c->buf, take);
    if (r < 0)
      c->body_err = r;
  }
  if (take)
    c->body_progress = true;
  memmove(c->buf, c->buf + take, c->len - take);
  c->len -= take;
  c->body_left -= take;
  if (c->body_left == 0)
    body_done(c);
}

static int body_open(struct admin_conn *c) {
  if (snprintf(c->body_path, sizeof(c->body_path), "%.4000s/upload-XXXXXX", c->sock->spool_dir) >=
      (int)sizeof(c->body_path)) {
    c->body_path[0] = '\0';
    return -ENAMETOOLONG;
  }
  int fd = mkostemp(c->body_path, O_CLOEXEC);
  if (fd < 0) {
    int e = -errno;
    c->body_path[0] = '\0';
    return e;
  }
  c->body_fd = fd;
  return 0;
}

static void handle_line(struct admin_conn *c, const char *line, size_t n) {
  json_t *req = NULL;
  enum admin_op op;
  unsigned long long bytes = 0;
  struct cordon_diag diag = {{0}};
  c->requests++;
  int r = admin_request_parse(line, n, &req, &op, &bytes, &diag);
  if (r < 0) {
    log_peer(CORE_LOG_WARN, "admin request refused", c->uid, c->pid, "error", diag.msg);
    if (r == CORDON_E_PACKAGE_TOO_LARGE) { /* the bytes cannot be read past: close */
      c->mode = CONN_BUSY;
      (void)conn_write(c, admin_reply_error(r, diag.msg));
      conn_finish(c);
      return;
    }
    if (conn_write(c, admin_reply_error(r, diag.msg)) < 0) {
      conn_close(c);
      return;
    }
    if (bytes) {
      c->mode = CONN_BODY;
      c->body_left = bytes;
    }
    return;
  }
  if (bytes) {
    c->req = req;
    c->op = op;
    c->body_left = bytes;
    c->body_err = body_open(c);
    c->mode = CONN_BODY;
    return;
  }
  c->mode = CONN_BUSY;
  c->sock->on_request(c->sock->data, c, req, op, NULL);
  json_decref(req);
}

/* A deadline passed: a final error line, then the connection closes. */
static void on_deadline(uv_timer_t *t) {
  struct admin_conn *c = t->data;
  bool idle = c->deadline == DEADLINE_IDLE;
  uint64_t ms = idle ? c->sock->idle_ms : c->sock->request_ms;
  const char *what = idle                           ? "idle between requests"
                     : c->deadline == DEADLINE_LINE ? "a request line not complete"
                                                    : "no bytes of the request's body";
  char msg[160];
  snprintf(msg, sizeof(msg), "%s for %llu ms: closed", what, (unsigned long long)ms);
  log_peer(CORE_LOG_WARN, "admin connection timed out", c->uid, c->pid, "reason", what);
  c->deadline = DEADLINE_NONE;
  c->mode = CONN_BUSY;
  (void)conn_write(c, admin_reply_error(CORDON_E_LIMIT, msg));
  conn_finish(c);
}

/* Set the timer for what the connection now waits for: a line or body in
 * progress must complete (a body: bytes keep coming) within request_ms,
 * an idle connection is kept idle_ms; none while a request is answered or
 * a stream runs. */
static void deadline_update(struct admin_conn *c) {
  enum conn_deadline want = c->mode == CONN_IDLE   ? (c->len ? DEADLINE_LINE : DEADLINE_IDLE)
                            : c->mode == CONN_BODY ? DEADLINE_BODY
                                                   : DEADLINE_NONE;
  if (want == c->deadline && !(want == DEADLINE_BODY && c->body_progress))
    return;
  c->deadline = want;
  c->body_progress = false;
  if (want == DEADLINE_NONE)
    uv_timer_stop(&c->timer);
  else
    uv_timer_start(&c->timer, on_deadline,
                   want == DEADLINE_IDLE ? c->sock->idle_ms : c->sock->request_ms, 0);
}

/* Handle what is buffered while the connection takes requests, then read
 * (or not) as its mode says. */
static void conn_pump(struct admin_conn *c) {
  if (c->pumping)
    return;
  c->pumping = true;
  for (;;) {
    if (c->mode == CONN_BODY && c->len) {
      body_feed(c);
      continue;
    }
    if (c->mode != CONN_IDLE || !c->len)
      break;
    char *nl = memchr(c->buf, '\n', c->len);
    if (!nl) {
      if (c->len >= sizeof(c->buf) - 1) { /* no way to find the next line: close */
        log_peer(CORE_LOG_WARN, "admin request refused", c->uid, c->pid, "error",
                 "request too long");
        c->mode = CONN_BUSY;
        (void)conn_write(c, admin_reply_error(CORDON_E_LIMIT, "request too long"));
        conn_finish(c);
      }
      break;
    }
    size_t n = (size_t)(nl - c->buf);
    char line[ADMIN_REQUEST_MAX];
    memcpy(line, c->buf, n);
    memmove(c->buf, nl + 1, c->len - n - 1);
    c->len -= n + 1;
    handle_line(c, line, n);
  }
  c->pumping = false;
  if (c->mode == CONN_CLOSING)
    return;
  deadline_update(c);
  bool want = c->mode != CONN_BUSY;
  if (want && !c->reading)
    c->reading = uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read) == 0;
  else if (!want && c->reading) {
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = false;
  }
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  struct admin_conn *c = st->data;
  (void)buf;
  if (nread == 0)
    return;
  if (c->mode == CONN_CLOSING) {
    if (nread < 0) /* the peer has closed too (or is gone): done */
      conn_close_handles(c);
    return;
  }
  if (nread < 0) {
    if (c->mode == CONN_STREAM)
      conn_gone(c);
    conn_close(c);
    return;
  }
  if (c->mode == CONN_STREAM)
    return; /* a stream takes no requests: dropped */
  c->len += (size_t)nread;
  conn_pump(c);
}

/* ---- who may ask ---- */

static bool in_group(uid_t uid, gid_t gid, gid_t want) {
  if (gid == want)
    return true;
  char buf[16384];
  struct passwd pw, *res = NULL;
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
    return false;
  int n = 64;
  gid_t *groups = malloc(sizeof(gid_t) * (size_t)n);
  if (groups && getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0) {
    /* n is now the count, which the 64 entries do not hold: never read past them */
    gid_t *more = n <= ADMIN_GROUPS_MAX ? realloc(groups, sizeof(gid_t) * (size_t)n) : NULL;
    if (more && getgrouplist(pw.pw_name, pw.pw_gid, more, &n) >= 0)
      groups = more;
    else {
      free(more ? more : groups);
      groups = NULL;
    }
  }
  bool member = false;
  for (int i = 0; groups && i < n && !member; i++)
    member = groups[i] == want;
  free(groups);
  return member;
}

static void on_connection(uv_stream_t *server, int status) {
  struct admin_sock *a = server->data;
  if (status < 0)
    return;
  struct admin_conn *c = calloc(1, sizeof(*c));
  if (!c)
    return;
  c->sock = a;
  c->body_fd = -1;
  c->version = ADMIN_VERSION;
  c->mode = CONN_BUSY;
  c->handles = 2;
  uv_pipe_init(server->loop, &c->pipe, 0);
  uv_timer_init(server->loop, &c->timer);
  c->pipe.data = c;
  c->timer.data = c;
  c->next = a->conns;
  a->conns = c;
  a->count++;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
    conn_close(c);
    return;
  }
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t cl = sizeof(cred);
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
    conn_close(c);
    return;
  }
  c->uid = (long)cred.uid;
  c->pid = (long)cred.pid;
  c->owner = cred.uid == a->uid || cred.uid == 0;
  if (!c->owner && !(a->has_group && in_group(cred.uid, cred.gid, a->gid))) {
    log_peer(CORE_LOG_WARN, "admin connection refused", c->uid, c->pid, "reason",
             a->has_group ? "not the daemon's user, root or a member of " ADMIN_GROUP
                          : "not the daemon's user or root");
    conn_close(c);
    return;
  }
  size_t same_uid = 0, others = 0; /* besides c */
  for (const struct admin_conn *x = a->conns; x; x = x->next)
    if (x != c) {
      same_uid += x->uid == c->uid;
      others += !x->owner;
    }
  const char *full = NULL;
  if (a->count > ADMIN_CONN_MAX)
    full = "too many admin connections";
  else if (!c->owner && same_uid >= ADMIN_UID_CONN_MAX)
    full = "too many admin connections of this uid";
  else if (!c->owner && others >= ADMIN_CONN_MAX - ADMIN_OWNER_RESERVED)
    full = "too many admin connections: the rest are kept for the daemon's user and root";
  if (full) {
    log_peer(CORE_LOG_WARN, "admin connection refused", c->uid, c->pid, "reason", full);
    conn_close(c);
    return;
  }
  c->mode = CONN_IDLE;
  conn_pump(c);
}

/* ---- the socket ---- */

static void sock_closed_on_failure(uv_handle_t *h) {
  free(h->data);
}

/* 0660 and the group when it exists and can be given, else 0600. */
static void sock_permissions(struct admin_sock *a, const char *path, const char *group) {
  if (!group)
    return;
  char buf[16384];
  struct group gr, *res = NULL;
  if (getgrnam_r(group, &gr, buf, sizeof(buf), &res) != 0 || !res)
    return;
  struct stat st;
  if (stat(path, &st) < 0)
    return;
  if (st.st_gid != res->gr_gid && chown(path, (uid_t)-1, res->gr_gid) < 0) {
    core_log_kv(CORE_LOG_WARN, "the admin socket stays 0600: cannot give it its group", "path",
                path, "group", group, "error", strerror(errno), NULL);
    return;
  }
  if (chmod(path, 0660) < 0)
    return;
  a->has_group = true;
  a->gid = res->gr_gid;
  /* the members reach it only through a directory they may search */
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  if (slash && stat(dir, &st) == 0 && !(st.st_mode & S_IXOTH) &&
      !((st.st_mode & S_IXGRP) && st.st_gid == a->gid))
    core_log_kv(CORE_LOG_WARN,
                "members of the admin group cannot reach the socket: the state directory is "
                "not searchable by the group (chgrp " ADMIN_GROUP " DIR; chmod g+x DIR)",
                "dir", dir, "group", group, NULL);
}

/* Bodies left by a daemon that died while it read them. */
static void sweep_uploads(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *de;
  char path[PATH_MAX];
  while ((de = readdir(d)))
    if (strncmp(de->d_name, "upload-", 7) == 0 &&
        snprintf(path, sizeof(path), "%.4000s/%s", dir, de->d_name) < (int)sizeof(path))
      unlink(path);
  closedir(d);
}

int admin_sock_open(uv_loop_t *loop, const struct admin_sock_config *cfg,
                    admin_request_fn *on_request, void *data, struct admin_sock **out_sock) {
  struct admin_sock *a = calloc(1, sizeof(*a));
  if (!a)
    return UV_ENOMEM;
  a->on_request = on_request;
  a->data = data;
  a->uid = geteuid();
  a->stream_max = cfg->stream_queue_max ? cfg->stream_queue_max : ADMIN_STREAM_QUEUE_MAX;
  a->request_ms = cfg->request_timeout_ms ? cfg->request_timeout_ms : ADMIN_REQUEST_TIMEOUT_MS;
  a->idle_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms : ADMIN_IDLE_TIMEOUT_MS;
  snprintf(a->spool_dir, sizeof(a->spool_dir), "%s", cfg->spool_dir ? cfg->spool_dir : ".");
  sweep_uploads(a->spool_dir);
  unlink(cfg->path);
  uv_pipe_init(loop, &a->pipe, 0);
  a->pipe.data = a;
  mode_t old = umask(0177);
  int r = uv_pipe_bind(&a->pipe, cfg->path);
  umask(old);
  if (r == 0)
    sock_permissions(a, cfg->path, cfg->group);
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
  if (!a || a->closing)
    return;
  a->closing = true;
  if (!uv_is_closing((uv_handle_t *)&a->pipe))
    uv_close((uv_handle_t *)&a->pipe, NULL);
  for (struct admin_conn *c = a->conns, *next; c; c = next) {
    next = c->next;
    if (c->mode == CONN_STREAM) {
      (void)conn_write(c, stream_error(-ESHUTDOWN, "the server is stopping"));
      conn_gone(c);
      conn_finish(c);
    } else if (c->mode != CONN_BUSY) {
      conn_close(c);
    }
  }
}

void admin_sock_free(struct admin_sock *a) {
  free(a);
}
