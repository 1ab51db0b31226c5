/* A TCP proxy on loopback in front of the tests' PostgreSQL (its unix
 * socket, or its TCP address), run by a thread of the test: a database
 * host that can vanish. Forwarding, it relays each connection both ways;
 * black-holed, the connections it accepts are held, read and never
 * answered (no byte forwarded, no close, no RST), as a host that went
 * away without a word looks to a client whose SYN got through. The
 * connections relayed before stay relayed (their close comes through: a
 * cut backend is seen). Armed to cut (pg_proxy_cut), it cuts one relayed
 * connection at a chosen point of a COMMIT: before the request reaches the
 * server, or after the server answered it (the answer dropped), as a
 * failover or a lost link cuts a client that cannot tell which it was.
 * Include after pg_test.h. Header-only. */
#ifndef CORDON_TESTS_SERVER_PG_PROXY_H
#define CORDON_TESTS_SERVER_PG_PROXY_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PG_PROXY_FN static __attribute__((unused))
#define PG_PROXY_PAIRS 128

struct pg_proxy_pair {
  int client, server;   /* server -1: held (black-holed) */
  bool commit_sent;     /* a request holding a COMMIT went through (armed to cut its answer) */
  char commit_name[64]; /* the name the client prepared COMMIT under, "" for none yet */
};

/* Where pg_proxy_cut cuts a connection. PG_PROXY_CUT_REQUEST: the client's
 * next bytes are dropped, and the connection cut. PG_PROXY_CUT_ANSWER: the
 * server's next answer that ends with ReadyForQuery is dropped, and the
 * connection cut. PG_PROXY_CUT_REQUEST_LINGER: the client's next bytes are
 * dropped and its side closed, but the server's side stays open, never
 * written (a link that died without a word: the backend waits for the
 * rest of its transaction). PG_PROXY_CUT_COMMIT_ANSWER: the same as
 * PG_PROXY_CUT_ANSWER, for the first
 * answer after a request that runs a COMMIT (its text, or the name the
 * connection prepared it under, which the proxy learns from its Parse).
 * Each cuts once, then it forwards. */
enum {
  PG_PROXY_CUT_NONE,
  PG_PROXY_CUT_REQUEST,
  PG_PROXY_CUT_REQUEST_LINGER,
  PG_PROXY_CUT_ANSWER,
  PG_PROXY_CUT_COMMIT_ANSWER
};

struct pg_proxy {
  int listen_fd, port;
  char up_host[512], up_port[16]; /* the real server: a socket directory or a host */
  atomic_bool black_hole, stop;
  atomic_int accepted, held, cut, cuts;
  int linger[PG_PROXY_PAIRS]; /* server sides kept open after a LINGER cut, until stop */
  int nlinger;
  struct pg_proxy_pair pairs[PG_PROXY_PAIRS];
  int npairs;
  pthread_t thread;
};

/* A connection to the real server, or -1. */
PG_PROXY_FN int pg_proxy_upstream(const struct pg_proxy *p) {
  if (p->up_host[0] == '/') {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/.s.PGSQL.%s", p->up_host, p->up_port) >=
        (int)sizeof(sa.sun_path))
      return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
      close(fd);
      fd = -1;
    }
    return fd;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(p->up_host, p->up_port, &hints, &ai) != 0)
    return -1;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  return fd;
}

PG_PROXY_FN void pg_proxy_drop(struct pg_proxy *p, int i) {
  close(p->pairs[i].client);
  if (p->pairs[i].server >= 0)
    close(p->pairs[i].server);
  p->pairs[i] = p->pairs[--p->npairs];
}

/* Armed (p->cut), whether this chunk of pair x's, read from its client
 * (up) or its server, is where the connection is cut: then it is dropped. */
PG_PROXY_FN bool pg_proxy_cut_here(struct pg_proxy *p, struct pg_proxy_pair *x, bool up,
                                   const char *buf, size_t n) {
  int mode = atomic_load(&p->cut);
  static const char ready[] = {'Z', 0, 0, 0, 5}; /* ReadyForQuery */
  bool here = false;
  /* Parse: ... name \0 "COMMIT" \0 ... */
  const char *at = up ? memmem(buf, n, "\0COMMIT", 8) : NULL;
  if (at) {
    size_t e = (size_t)(at - buf), b = e;
    while (b > 0 && (buf[b - 1] == '_' || (buf[b - 1] >= '0' && buf[b - 1] <= '9') ||
                     (buf[b - 1] >= 'a' && buf[b - 1] <= 'z')))
      b--;
    if (e - b < sizeof(x->commit_name))
      snprintf(x->commit_name, sizeof(x->commit_name), "%.*s", (int)(e - b), buf + b);
  }
  if (up && mode == PG_PROXY_CUT_COMMIT_ANSWER) {
    char bind[68]; /* Bind: portal "" \0, statement name \0 */
    size_t len = strlen(x->commit_name);
    bind[0] = '\0';
    memcpy(bind + 1, x->commit_name, len + 1);
    if (memmem(buf, n, "COMMIT", 7) || (len && memmem(buf, n, bind, len + 2)))
      x->commit_sent = true;
  }
  if (up)
    here = mode == PG_PROXY_CUT_REQUEST || mode == PG_PROXY_CUT_REQUEST_LINGER;
  else if (memmem(buf, n, ready, sizeof(ready)))
    here = mode == PG_PROXY_CUT_ANSWER || (mode == PG_PROXY_CUT_COMMIT_ANSWER && x->commit_sent);
  if (here && atomic_compare_exchange_strong(&p->cut, &mode, PG_PROXY_CUT_NONE)) {
    if (mode == PG_PROXY_CUT_REQUEST_LINGER && p->nlinger < PG_PROXY_PAIRS) {
      p->linger[p->nlinger++] = x->server;
      x->server = -1; /* not closed with the pair */
    }
    atomic_fetch_add(&p->cuts, 1);
    return true;
  }
  return false;
}

/* What is readable on pair x's from goes to its to; false when from or to
 * is done (or the connection is cut here). */
PG_PROXY_FN bool pg_proxy_relay(struct pg_proxy *p, struct pg_proxy_pair *x, bool up) {
  int from = up ? x->client : x->server, to = up ? x->server : x->client;
  char buf[16384];
  ssize_t n = read(from, buf, sizeof(buf));
  if (n <= 0)
    return false;
  if (to < 0)
    return true; /* held: read, never answered */
  if (pg_proxy_cut_here(p, x, up, buf, (size_t)n))
    return false;
  for (ssize_t o = 0; o < n;) {
    ssize_t w = send(to, buf + o, (size_t)(n - o), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    o += w;
  }
  return true;
}

PG_PROXY_FN void *pg_proxy_run(void *arg) {
  struct pg_proxy *p = arg;
  struct pollfd fds[1 + 2 * PG_PROXY_PAIRS];
  while (!atomic_load(&p->stop)) {
    int n = 0;
    fds[n++] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
    for (int i = 0; i < p->npairs; i++) {
      fds[n++] = (struct pollfd){.fd = p->pairs[i].client, .events = POLLIN};
      fds[n++] = (struct pollfd){.fd = p->pairs[i].server, .events = POLLIN}; /* -1: ignored */
    }
    if (poll(fds, (nfds_t)n, 50) <= 0)
      continue;
    for (int i = p->npairs - 1; i >= 0; i--) {
      struct pollfd *c = &fds[1 + 2 * i], *s = &fds[2 + 2 * i];
      bool ok = true;
      if (c->revents)
        ok = pg_proxy_relay(p, &p->pairs[i], true);
      if (ok && s->fd >= 0 && s->revents)
        ok = pg_proxy_relay(p, &p->pairs[i], false);
      if (!ok)
        pg_proxy_drop(p, i);
    }
    if (fds[0].revents & POLLIN) {
      int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd < 0)
        continue;
      atomic_fetch_add(&p->accepted, 1);
      int up = -1;
      if (atomic_load(&p->black_hole))
        atomic_fetch_add(&p->held, 1);
      else if ((up = pg_proxy_upstream(p)) < 0) {
        close(fd); /* the real server refused: so does the proxy */
        continue;
      }
      if (p->npairs == PG_PROXY_PAIRS) {
        close(fd);
        if (up >= 0)
          close(up);
        continue;
      }
      p->pairs[p->npairs++] = (struct pg_proxy_pair){.client = fd, .server = up};
    }
  }
  while (p->npairs)
    pg_proxy_drop(p, p->npairs - 1);
  while (p->nlinger)
    close(p->linger[--p->nlinger]);
  return NULL;
}

/* Start a proxy (forwarding) in front of the server of CORDON_TEST_DB;
 * its URL for database name in url_out. */
PG_PROXY_FN void pg_proxy_start(struct pg_proxy *p, const char *name, char *url_out, size_t size) {
  memset(p, 0, sizeof(*p));
  char *err = NULL;
  PQconninfoOption *opts = PQconninfoParse(pg_test_base(), &err);
  cr_assert_not_null(opts, "CORDON_TEST_DB: %s", err ? err : "not a URL");
  const char *user = "", *host = "", *port = "5432";
  for (PQconninfoOption *o = opts; o->keyword; o++) {
    if (!o->val || !o->val[0])
      continue;
    if (strcmp(o->keyword, "user") == 0)
      user = o->val;
    else if (strcmp(o->keyword, "host") == 0)
      host = o->val;
    else if (strcmp(o->keyword, "port") == 0)
      port = o->val;
  }
  snprintf(p->up_host, sizeof(p->up_host), "%s", host[0] ? host : "/var/run/postgresql");
  snprintf(p->up_port, sizeof(p->up_port), "%s", port);
  p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(p->listen_fd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(p->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
  cr_assert_eq(listen(p->listen_fd, 64), 0);
  socklen_t len = sizeof(sa);
  cr_assert_eq(getsockname(p->listen_fd, (struct sockaddr *)&sa, &len), 0);
  p->port = ntohs(sa.sin_port);
  /* an address, not a name: libpq resolves no name in the daemon's loop */
  snprintf(url_out, size, "postgresql://%s%s127.0.0.1:%d/%s", user, user[0] ? "@" : "", p->port,
           name);
  PQconninfoFree(opts);
  cr_assert_eq(pthread_create(&p->thread, NULL, pg_proxy_run, p), 0);
}

PG_PROXY_FN void pg_proxy_black_hole(struct pg_proxy *p, bool on) {
  atomic_store(&p->black_hole, on);
}

/* Arm the proxy to cut one connection at mode (PG_PROXY_CUT_*). */
PG_PROXY_FN void pg_proxy_cut(struct pg_proxy *p, int mode) {
  atomic_store(&p->cut, mode);
}

PG_PROXY_FN void pg_proxy_stop(struct pg_proxy *p) {
  if (!p->listen_fd)
    return;
  atomic_store(&p->stop, true);
  pthread_join(p->thread, NULL);
  close(p->listen_fd);
  p->listen_fd = 0;
}

#endif
