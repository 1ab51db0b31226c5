/* Tests for net/conn.c on real TCP loopback sockets with a real uv loop.
 *
 * The loop runs in the test's main thread. Misbehaving peers are plain
 * blocking sockets driven from a thread ("raw" peers): they speak the wire
 * protocol through proto/noise and proto/frame directly, so they can send
 * exactly the bytes a test wants and record exactly the bytes they get.
 * Raw threads never assert; they record, and the main thread asserts after
 * joining them. Every test ends in finish(): close everything, uv_run must
 * return and uv_loop_close must return 0. */
#include "core/error.h"
#include "net/conn.h"
#include "proto/frame.h"
#include "proto/noise.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- time and the loop ----------------------------------------------- */

static uv_loop_t loop;
static uv_timer_t watch; /* wakes uv_run at least every millisecond */

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000u;
}

static void on_watch(uv_timer_t *t) {
  (void)t;
}

/* Run the loop until cond holds or ms pass; the value of cond. */
#define RUN_UNTIL(cond, ms)                                                                        \
  ({                                                                                               \
    uint64_t dl_ = now_ms() + (ms);                                                                \
    while (!(cond) && now_ms() < dl_)                                                              \
      uv_run(&loop, UV_RUN_ONCE);                                                                  \
    (bool)(cond);                                                                                  \
  })

/* Run the loop for ms, whatever happens. */
static void run_for(uint64_t ms) {
  uint64_t dl = now_ms() + ms;
  while (now_ms() < dl)
    uv_run(&loop, UV_RUN_ONCE);
}

/* ---- keys ------------------------------------------------------------- */

static uint8_t srv_pub[NOISE_KEY_LEN], srv_priv[NOISE_KEY_LEN];
static uint8_t cli_pub[NOISE_KEY_LEN], cli_priv[NOISE_KEY_LEN];
static uint8_t raw_pub[NOISE_KEY_LEN], raw_priv[NOISE_KEY_LEN];

/* ---- the server side: every server connection reports here ------------ */

#define MAX_TRACKED 64

static struct {
  int ready, closed, quiet, records;
  int data_not_null; /* a server connection's data must start NULL */
  int last_err;
  uint64_t last_close_ms;
  bool echo;           /* send every record back */
  bool ping_on_quiet;  /* on_quiet sends "ping" */
  size_t record_bytes; /* total plaintext received */
  struct net_conn *conns[MAX_TRACKED];
  uint8_t keys[MAX_TRACKED][NOISE_KEY_LEN];
  uint8_t hash[NOISE_HASH_LEN], remote[NOISE_KEY_LEN];
  enum noise_mode mode;
} srv;

static struct net_server *server;
static int port;

static int srv_on_ready(struct net_conn *c) {
  srv.ready++;
  srv.data_not_null += net_conn_data(c) != NULL;
  cr_assert_eq(net_conn_server(c), server);
  cr_assert_eq(net_server_data(server), &srv);
  net_conn_remote_key(c, srv.remote);
  net_conn_handshake_hash(c, srv.hash);
  srv.mode = net_conn_mode(c);
  for (int i = 0; i < MAX_TRACKED; i++)
    if (!srv.conns[i]) {
      srv.conns[i] = c;
      memcpy(srv.keys[i], srv.remote, NOISE_KEY_LEN);
      break;
    }
  return 0;
}

static void srv_on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  srv.records++;
  srv.record_bytes += len;
  if (srv.echo)
    net_conn_send(c, data, len);
}

static void srv_on_quiet(struct net_conn *c) {
  srv.quiet++;
  if (srv.ping_on_quiet)
    net_conn_send(c, (const uint8_t *)"ping", 4);
}

static void srv_on_close(struct net_conn *c, int err) {
  srv.closed++;
  srv.data_not_null += net_conn_data(c) != NULL;
  srv.last_err = err;
  srv.last_close_ms = now_ms();
  for (int i = 0; i < MAX_TRACKED; i++)
    if (srv.conns[i] == c)
      srv.conns[i] = NULL;
}

static const struct net_conn_ops srv_ops = {
    .on_ready = srv_on_ready,
    .on_record = srv_on_record,
    .on_quiet = srv_on_quiet,
    .on_close = srv_on_close,
};

/* The server connection whose peer has static key pub, or NULL. */
static struct net_conn *srv_conn_of(const uint8_t pub[NOISE_KEY_LEN]) {
  for (int i = 0; i < MAX_TRACKED; i++)
    if (srv.conns[i] && memcmp(srv.keys[i], pub, NOISE_KEY_LEN) == 0)
      return srv.conns[i];
  return NULL;
}

static struct net_limits test_limits(void) {
  struct net_limits l;
  net_limits_default(&l);
  l.tick_ms = 10;
  l.handshake_ms = 3000;
  l.frame_ms = 3000;
  l.idle_ms = 10000;
  l.quiet_ms = 10000;
  return l;
}

static void server_start(unsigned modes, const struct net_limits *l) {
  cr_assert_eq(net_server_new(&loop, "127.0.0.1", 0, srv_priv, modes, l, &srv_ops, &srv, &server),
               0);
  port = net_server_port(server);
  cr_assert_gt(port, 0);
}

#define MODE_BIT(m) (1u << (m))
#define BOTH_MODES (MODE_BIT(NOISE_MODE_SESSION) | MODE_BIT(NOISE_MODE_PAIRING))

/* ---- agents (net_connect), one struct each ---------------------------- */

struct agent {
  struct net_conn *c;
  int ready, closed, quiet, records, checked;
  int close_err;
  bool pin_set;
  uint8_t pin[NOISE_KEY_LEN];
  uint8_t hash[NOISE_HASH_LEN], remote[NOISE_KEY_LEN];
  bool echo;
  /* records expected back, in order (session_handshake_and_records) */
  const size_t *expect_lens;
  size_t n_expect, next;
  bool order_ok;
};

#define MAX_AGENTS 16
static struct agent agents[MAX_AGENTS];
static int n_agents;

static int agent_check_peer(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]) {
  struct agent *a = net_conn_data(c);
  a->checked++;
  if (a->pin_set && sodium_memcmp(key, a->pin, NOISE_KEY_LEN) != 0)
    return CORDON_E_UNKNOWN_KEY;
  return 0;
}

static int agent_on_ready(struct net_conn *c) {
  struct agent *a = net_conn_data(c);
  a->ready++;
  net_conn_remote_key(c, a->remote);
  net_conn_handshake_hash(c, a->hash);
  return 0;
}

static uint8_t pattern(size_t rec, size_t j) {
  return (uint8_t)(rec * 31 + j * 7 + 1);
}

static void agent_on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct agent *a = net_conn_data(c);
  a->records++;
  if (a->expect_lens) {
    size_t k = a->next++;
    if (k >= a->n_expect || a->expect_lens[k] != len) {
      a->order_ok = false;
      return;
    }
    for (size_t j = 0; j < len; j++)
      if (data[j] != pattern(k, j)) {
        a->order_ok = false;
        return;
      }
  }
  if (a->echo)
    net_conn_send(c, data, len);
}

static void agent_on_quiet(struct net_conn *c) {
  struct agent *a = net_conn_data(c);
  a->quiet++;
}

static void agent_on_close(struct net_conn *c, int err) {
  struct agent *a = net_conn_data(c);
  a->closed++;
  a->close_err = err;
  a->c = NULL;
}

static const struct net_conn_ops agent_ops = {
    .check_peer = agent_check_peer,
    .on_ready = agent_on_ready,
    .on_record = agent_on_record,
    .on_quiet = agent_on_quiet,
    .on_close = agent_on_close,
};

static struct agent *agent_start(enum noise_mode mode, int to_port, const struct net_limits *l) {
  cr_assert_lt(n_agents, MAX_AGENTS);
  struct agent *a = &agents[n_agents++];
  memset(a, 0, sizeof(*a));
  a->pin_set = true;
  memcpy(a->pin, srv_pub, NOISE_KEY_LEN);
  a->order_ok = true;
  cr_assert_eq(net_connect(&loop, "127.0.0.1", to_port, cli_priv, mode, l, &agent_ops, a, &a->c),
               0);
  return a;
}

/* ---- setup and the end of every test ---------------------------------- */

static void setup(void) {
  signal(SIGPIPE, SIG_IGN);
  cr_assert_geq(sodium_init(), 0);
  cr_assert_eq(uv_loop_init(&loop), 0);
  uv_timer_init(&loop, &watch);
  uv_timer_start(&watch, on_watch, 1, 1);
  cr_assert_eq(noise_keypair_generate(srv_pub, srv_priv), 0);
  cr_assert_eq(noise_keypair_generate(cli_pub, cli_priv), 0);
  cr_assert_eq(noise_keypair_generate(raw_pub, raw_priv), 0);
  memset(&srv, 0, sizeof(srv));
  memset(agents, 0, sizeof(agents));
  n_agents = 0;
  server = NULL;
}

TestSuite(conn, .init = setup, .timeout = 60);

/* Close the server and every agent; the loop must then run dry and close. */
static void finish(void) {
  if (server)
    net_server_close(server);
  server = NULL;
  for (int i = 0; i < n_agents; i++)
    if (agents[i].c)
      net_conn_close(agents[i].c, 0);
  uv_close((uv_handle_t *)&watch, NULL);
  cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
  cr_assert_eq(uv_loop_close(&loop), 0, "a handle or request outlived its close");
  cr_assert_eq(srv.data_not_null, 0, "a server connection started with someone's data");
  for (int i = 0; i < n_agents; i++)
    cr_assert_eq(agents[i].closed, 1, "agent %d: on_close ran %d times", i, agents[i].closed);
}

/* ---- raw sockets (blocking; used from threads) ------------------------ */

static int raw_connect(int to_port, const char *src) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)to_port)};
  if (src) {
    struct sockaddr_in b = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &b.sin_addr);
    if (bind(fd, (struct sockaddr *)&b, sizeof(b)) < 0) {
      close(fd);
      return -errno;
    }
  }
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

/* A listening socket on 127.0.0.1, port in *out_port. */
static int raw_listen(int *out_port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(listen(fd, 16), 0);
  socklen_t len = sizeof(a);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *out_port = ntohs(a.sin_port);
  return fd;
}

static int raw_send(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -EPIPE;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Wait for fd to be readable. 1 readable, 0 timeout. */
static int raw_wait(int fd, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r = poll(&p, 1, timeout_ms);
  return r > 0 ? 1 : 0;
}

/* Read exactly len bytes: 0, -ETIMEDOUT, or -ECONNRESET on EOF/error. */
static int raw_recv(int fd, void *buf, size_t len, int timeout_ms) {
  uint8_t *p = buf;
  uint64_t dl = now_ms() + (uint64_t)timeout_ms;
  while (len > 0) {
    int left = (int)(dl - now_ms());
    if (left <= 0 || !raw_wait(fd, left))
      return -ETIMEDOUT;
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -ECONNRESET;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Read until EOF or timeout; *out_bytes gets what arrived. 1 on EOF (or a
 * reset), 0 on timeout. */
static int raw_drain_to_eof(int fd, int timeout_ms, size_t *out_bytes) {
  uint8_t buf[4096];
  size_t total = 0;
  uint64_t dl = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int left = (int)(dl - now_ms());
    if (left <= 0 || !raw_wait(fd, left)) {
      *out_bytes = total;
      return 0;
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      *out_bytes = total;
      return 1;
    }
    total += (size_t)n;
  }
}

/* 1 if the peer has closed fd (EOF or reset is waiting), 0 if it is open
 * and has sent nothing. */
static int raw_closed(int fd) {
  uint8_t b;
  if (!raw_wait(fd, 0))
    return 0;
  return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

static int raw_send_frame(int fd, const uint8_t *body, size_t len) {
  uint8_t hdr[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
  int r = raw_send(fd, hdr, 4);
  return r < 0 ? r : raw_send(fd, body, len);
}

static int raw_recv_frame(int fd, uint8_t *buf, size_t cap, size_t *out_len, int timeout_ms) {
  uint8_t hdr[4];
  int r = raw_recv(fd, hdr, 4, timeout_ms);
  if (r < 0)
    return r;
  size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
  if (len > cap)
    return -ENOBUFS;
  r = raw_recv(fd, buf, len, timeout_ms);
  if (r == 0)
    *out_len = len;
  return r;
}

/* The initiator's side of a handshake over fd: prologue for pro_mode, but
 * mode_byte in message 1 (they differ only to test that the byte is
 * bound). */
static int raw_handshake(int fd, const uint8_t *priv, enum noise_mode pro_mode, uint8_t mode_byte,
                         struct noise_session **out_s) {
  uint8_t pro[NOISE_PROLOGUE_LEN], msg[FRAME_MAX_HANDSHAKE];
  size_t pl, n, pn;
  struct noise_handshake *hs = NULL;
  int r = noise_prologue_build(NOISE_WIRE_VERSION, pro_mode, pro, sizeof(pro), &pl);
  if (r == 0)
    r = noise_handshake_new(NOISE_INITIATOR, priv, pro, pl, &hs);
  if (r == 0)
    r = noise_handshake_write_message(hs, &mode_byte, 1, msg, sizeof(msg), &n);
  if (r == 0)
    r = raw_send_frame(fd, msg, n);
  if (r == 0)
    r = raw_recv_frame(fd, msg, sizeof(msg), &n, 3000);
  if (r == 0)
    r = noise_handshake_read_message(hs, msg, n, NULL, 0, &pn);
  if (r == 0)
    r = noise_handshake_write_message(hs, NULL, 0, msg, sizeof(msg), &n);
  if (r == 0)
    r = raw_send_frame(fd, msg, n);
  if (r == 0)
    r = noise_handshake_split(&hs, out_s);
  noise_handshake_free(hs);
  return r;
}

/* Encrypt pt as the next record of s into out (a whole frame). */
static size_t raw_seal(struct noise_session *s, const void *pt, size_t len, uint8_t *out,
                       size_t cap) {
  size_t n = 0;
  if (noise_session_encrypt(s, pt, len, out + 4, cap - 4, &n) != 0)
    return 0;
  out[0] = (uint8_t)(n >> 24);
  out[1] = (uint8_t)(n >> 16);
  out[2] = (uint8_t)(n >> 8);
  out[3] = (uint8_t)n;
  return n + 4;
}

static pthread_t spawn(void *(*fn)(void *), void *arg) {
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, fn, arg), 0);
  return t;
}

/* ======================================================================= */
/* A real agent and a real server                                          */
/* ======================================================================= */

Test(conn, session_handshake_and_records_both_ways) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  srv.echo = true;
  static const size_t lens[] = {1, 0, 5, 64, 1000, 65535, 65536, NOISE_MAX_PLAINTEXT, 17, 3, 0};
  size_t n_lens = sizeof(lens) / sizeof(lens[0]);
  struct agent *a = agent_start(NOISE_MODE_SESSION, port, &l);
  a->expect_lens = lens;
  a->n_expect = n_lens;
  cr_assert(RUN_UNTIL(a->ready && srv.ready, 3000));
  cr_assert(net_conn_ready(a->c));
  cr_assert_eq(a->checked, 1);
  cr_assert_eq(memcmp(a->remote, srv_pub, NOISE_KEY_LEN), 0, "agent sees the server's key");
  cr_assert_eq(memcmp(srv.remote, cli_pub, NOISE_KEY_LEN), 0, "server sees the agent's key");
  cr_assert_eq(memcmp(a->hash, srv.hash, NOISE_HASH_LEN), 0, "both hold the same hash");
  cr_assert_eq(srv.mode, NOISE_MODE_SESSION);
  cr_assert_eq(net_conn_mode(a->c), NOISE_MODE_SESSION);
  cr_assert_eq(net_server_count(server), 1);
  cr_assert_str_eq(net_conn_peer(a->c), "127.0.0.1");
  cr_assert_null(net_conn_server(a->c));

  uint8_t *buf = malloc(NOISE_MAX_PLAINTEXT);
  cr_assert_not_null(buf);
  for (size_t k = 0; k < n_lens; k++) {
    for (size_t j = 0; j < lens[k]; j++)
      buf[j] = pattern(k, j);
    cr_assert_eq(net_conn_send(a->c, buf, lens[k]), 0, "record %zu", k);
  }
  cr_assert_eq(net_conn_send(a->c, buf, NOISE_MAX_PLAINTEXT + 1), CORDON_E_LIMIT);
  cr_assert(net_conn_ready(a->c), "a refused oversize send leaves the connection up");
  free(buf);
  cr_assert(RUN_UNTIL(a->next == n_lens, 5000), "echoed %zu of %zu", a->next, n_lens);
  cr_assert(a->order_ok, "every record came back intact and in order");
  cr_assert_eq(srv.records, (int)n_lens);

  /* an orderly close: the agent's err is its own, the server sees EOF as 0 */
  net_conn_close(a->c, 0);
  cr_assert_eq(net_conn_send(a->c, (const uint8_t *)"x", 1), -EPIPE);
  net_conn_close(a->c, CORDON_E_INTERNAL); /* idempotent: the first reason stays */
  cr_assert(RUN_UNTIL(a->closed && srv.closed, 3000));
  cr_assert_eq(a->close_err, 0);
  cr_assert_eq(srv.last_err, 0);
  cr_assert_eq(net_server_count(server), 0);
  finish();
}

Test(conn, pairing_mode_accepted_when_offered) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_PAIRING), &l);
  struct agent *a = agent_start(NOISE_MODE_PAIRING, port, &l);
  cr_assert(RUN_UNTIL(a->ready && srv.ready, 3000));
  cr_assert_eq(srv.mode, NOISE_MODE_PAIRING);
  cr_assert_eq(net_conn_mode(a->c), NOISE_MODE_PAIRING);
  finish();
}

Test(conn, server_accepting_only_session_refuses_pairing) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct agent *a = agent_start(NOISE_MODE_PAIRING, port, &l);
  cr_assert(RUN_UNTIL(a->closed && srv.closed, 3000));
  cr_assert_eq(a->ready, 0);
  cr_assert_eq(a->checked, 0, "no message 2 was sent");
  cr_assert_eq(srv.ready, 0);
  cr_assert_eq(srv.last_err, CORDON_E_PROTOCOL);
  cr_assert_eq(a->close_err, -ECONNRESET);
  finish();
}

Test(conn, server_accepting_only_pairing_refuses_session) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_PAIRING), &l);
  struct agent *a = agent_start(NOISE_MODE_SESSION, port, &l);
  cr_assert(RUN_UNTIL(a->closed && srv.closed, 3000));
  cr_assert_eq(a->ready + srv.ready, 0);
  cr_assert_eq(srv.last_err, CORDON_E_PROTOCOL);
  finish();
}

Test(conn, bad_arguments_refused_without_callbacks) {
  struct net_limits l = test_limits();
  struct net_server *s = NULL;
  struct net_conn *c = NULL;
  cr_assert_eq(
      net_server_new(&loop, "not an address", 0, srv_priv, BOTH_MODES, &l, &srv_ops, NULL, &s),
      -EINVAL);
  cr_assert_eq(net_server_new(&loop, "127.0.0.1", 0, srv_priv, 0, &l, &srv_ops, NULL, &s), -EINVAL);
  cr_assert_eq(net_server_new(&loop, "127.0.0.1", 0, srv_priv, 1u << 7, &l, &srv_ops, NULL, &s),
               -EINVAL);
  struct net_limits bad = l;
  bad.tick_ms = 0;
  cr_assert_eq(
      net_server_new(&loop, "127.0.0.1", 0, srv_priv, BOTH_MODES, &bad, &srv_ops, NULL, &s),
      -EINVAL);
  bad = l;
  bad.wq_high = bad.wq_hard + 1;
  cr_assert_eq(
      net_connect(&loop, "127.0.0.1", 1, cli_priv, NOISE_MODE_SESSION, &bad, &agent_ops, NULL, &c),
      -EINVAL);
  cr_assert_eq(
      net_connect(&loop, "127.0.0.1", 1, cli_priv, (enum noise_mode)3, &l, &agent_ops, NULL, &c),
      -EINVAL);
  cr_assert_null(s);
  cr_assert_null(c);

  /* a port in use: an error, and the half-made server is freed by the loop */
  server_start(BOTH_MODES, &l);
  cr_assert_eq(
      net_server_new(&loop, "127.0.0.1", port, srv_priv, BOTH_MODES, &l, &srv_ops, NULL, &s),
      -EADDRINUSE);
  cr_assert_null(s);
  finish();
}

Test(conn, connection_refused_reported_once) {
  struct net_limits l = test_limits();
  int p;
  int lfd = raw_listen(&p);
  close(lfd); /* nobody listens on p now */
  struct agent *a = agent_start(NOISE_MODE_SESSION, p, &l);
  cr_assert(RUN_UNTIL(a->closed, 3000));
  cr_assert_eq(a->close_err, -ECONNREFUSED);
  cr_assert_eq(a->ready, 0);
  finish();
}

/* ======================================================================= */
/* A raw responder: what does the agent send?                              */
/* ======================================================================= */

struct raw_resp {
  int lfd;
  bool answer;   /* send message 2 */
  long flip_at;  /* flip a bit at this offset of the message 2 frame, -1 none */
  size_t before; /* bytes received before message 2 went out */
  size_t after;  /* bytes received after message 2 went out */
  bool eof;
  int err;
  atomic_int done;
};

static void *raw_resp_main(void *arg) {
  struct raw_resp *rr = arg;
  uint8_t msg[FRAME_MAX_HANDSHAKE + 4], pl[8];
  size_t n = 0, pn = 0;
  struct noise_handshake *hs = NULL;
  int fd = accept(rr->lfd, NULL, NULL);
  if (fd < 0) {
    rr->err = -errno;
    goto out;
  }
  rr->err = raw_recv_frame(fd, msg, sizeof(msg), &n, 3000);
  if (rr->err < 0)
    goto out_close;
  rr->before = n + 4;
  if (!rr->answer) {
    rr->eof = raw_drain_to_eof(fd, 5000, &rr->after);
    goto out_close;
  }
  uint8_t pro[NOISE_PROLOGUE_LEN];
  size_t prl;
  uint8_t mode = n == NOISE_MSG1_LEN(1) ? msg[NOISE_KEY_LEN] : 0;
  rr->err = noise_prologue_build(NOISE_WIRE_VERSION, (enum noise_mode)mode, pro, sizeof(pro), &prl);
  if (rr->err == 0)
    rr->err = noise_handshake_new(NOISE_RESPONDER, srv_priv, pro, prl, &hs);
  if (rr->err == 0)
    rr->err = noise_handshake_read_message(hs, msg, n, pl, sizeof(pl), &pn);
  if (rr->err == 0)
    rr->err = noise_handshake_write_message(hs, NULL, 0, msg + 4, sizeof(msg) - 4, &n);
  if (rr->err < 0)
    goto out_close;
  msg[0] = 0;
  msg[1] = 0;
  msg[2] = (uint8_t)(n >> 8);
  msg[3] = (uint8_t)n;
  if (rr->flip_at >= 0)
    msg[rr->flip_at] ^= (uint8_t)(1u << (rr->flip_at % 8));
  rr->err = raw_send(fd, msg, n + 4);
  if (rr->err == 0)
    rr->eof = raw_drain_to_eof(fd, 5000, &rr->after);
out_close:
  close(fd);
out:
  noise_handshake_free(hs);
  atomic_store(&rr->done, 1);
  return NULL;
}

Test(conn, pinned_key_mismatch_sends_nothing_after_message_2) {
  struct net_limits l = test_limits();
  int p;
  struct raw_resp rr = {.answer = true, .flip_at = -1};
  rr.lfd = raw_listen(&p);
  pthread_t t = spawn(raw_resp_main, &rr);
  struct agent *a = agent_start(NOISE_MODE_SESSION, p, &l);
  /* pin a key that is not the responder's */
  memcpy(a->pin, cli_pub, NOISE_KEY_LEN);
  cr_assert(RUN_UNTIL(a->closed && atomic_load(&rr.done), 6000));
  pthread_join(t, NULL);
  close(rr.lfd);
  cr_assert_eq(rr.err, 0);
  cr_assert_eq(rr.before, 4 + NOISE_MSG1_LEN(1), "message 1: e and the mode byte");
  cr_assert_eq(a->checked, 1);
  cr_assert_eq(a->ready, 0);
  cr_assert_eq(a->close_err, CORDON_E_UNKNOWN_KEY);
  cr_assert(rr.eof, "the agent closed the connection");
  cr_assert_eq(rr.after, 0, "%zu bytes arrived after message 2", rr.after);
  finish();
}

/* The control for the test above: the same recorder sees message 3. */
Test(conn, matching_key_sends_message_3) {
  struct net_limits l = test_limits();
  int p;
  struct raw_resp rr = {.answer = true, .flip_at = -1};
  rr.lfd = raw_listen(&p);
  pthread_t t = spawn(raw_resp_main, &rr);
  struct agent *a = agent_start(NOISE_MODE_SESSION, p, &l);
  cr_assert(RUN_UNTIL(a->ready, 3000));
  net_conn_close(a->c, 0);
  cr_assert(RUN_UNTIL(a->closed && atomic_load(&rr.done), 6000));
  pthread_join(t, NULL);
  close(rr.lfd);
  cr_assert_eq(rr.after, 4 + NOISE_MSG3_LEN(0));
  finish();
}

Test(conn, bit_flip_in_message_2_closes_agent) {
  struct net_limits l = test_limits();
  l.handshake_ms = 300; /* a flip in the length may leave it waiting */
  for (long off = 0; off < 4 + (long)NOISE_MSG2_LEN(0); off++) {
    int p;
    struct raw_resp rr = {.answer = true, .flip_at = off};
    rr.lfd = raw_listen(&p);
    pthread_t t = spawn(raw_resp_main, &rr);
    struct agent *a = agent_start(NOISE_MODE_SESSION, p, &l);
    cr_assert(RUN_UNTIL(a->closed && atomic_load(&rr.done), 6000), "offset %ld", off);
    pthread_join(t, NULL);
    close(rr.lfd);
    cr_assert_eq(a->ready, 0, "offset %ld", off);
    cr_assert_neq(a->close_err, 0, "offset %ld", off);
    cr_assert_eq(rr.after, 0, "offset %ld: message 3 was sent", off);
    if (off >= 4) /* the body: it does not authenticate */
      cr_assert_eq(a->close_err, CORDON_E_CRYPTO, "offset %ld: %d", off, a->close_err);
    n_agents = 0; /* reuse the slot: this one is closed */
  }
  finish();
}

Test(conn, agent_handshake_deadline) {
  struct net_limits l = test_limits();
  l.handshake_ms = 150;
  int p;
  struct raw_resp rr = {.answer = false};
  rr.lfd = raw_listen(&p);
  pthread_t t = spawn(raw_resp_main, &rr);
  uint64_t t0 = now_ms();
  struct agent *a = agent_start(NOISE_MODE_SESSION, p, &l);
  cr_assert(RUN_UNTIL(a->closed, 3000));
  uint64_t took = now_ms() - t0;
  cr_assert(RUN_UNTIL(atomic_load(&rr.done), 6000));
  pthread_join(t, NULL);
  close(rr.lfd);
  cr_assert_eq(a->close_err, -ETIMEDOUT);
  cr_assert_geq(took, 140); /* the loop clock is coarse (4 ms here) */
  cr_assert_lt(took, 1000);
  cr_assert(rr.eof);
  finish();
}

/* ======================================================================= */
/* A proxy between a real agent and a real server that flips one bit       */
/* ======================================================================= */

struct proxy {
  int lfd;
  int target;
  int dir;      /* 0: agent -> server, 1: server -> agent */
  long flip_at; /* stream offset in that direction, -1 none */
  uint8_t mask; /* bits to flip there */
  atomic_int done;
};

static void *proxy_main(void *arg) {
  struct proxy *px = arg;
  int fds[2] = {-1, -1};
  size_t off[2] = {0, 0};
  uint8_t buf[65536];
  fds[0] = accept(px->lfd, NULL, NULL);
  if (fds[0] < 0)
    goto out;
  fds[1] = raw_connect(px->target, NULL);
  if (fds[1] < 0)
    goto out;
  uint64_t dl = now_ms() + 8000;
  while (now_ms() < dl) {
    struct pollfd pf[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
    if (poll(pf, 2, 100) <= 0)
      continue;
    for (int d = 0; d < 2; d++) {
      if (!(pf[d].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      ssize_t n = recv(fds[d], buf, sizeof(buf), 0);
      if (n <= 0)
        goto out;
      if (d == px->dir && px->flip_at >= (long)off[d] && px->flip_at < (long)(off[d] + (size_t)n))
        buf[px->flip_at - (long)off[d]] ^= px->mask;
      off[d] += (size_t)n;
      if (raw_send(fds[1 - d], buf, (size_t)n) < 0)
        goto out;
    }
  }
out:
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  atomic_store(&px->done, 1);
  return NULL;
}

/* One agent through a proxy that flips mask at flip_at of direction dir. */
static struct agent *proxied_session(int dir, long flip_at, uint8_t mask,
                                     const struct net_limits *l) {
  int p;
  struct proxy px = {.target = port, .dir = dir, .flip_at = flip_at, .mask = mask};
  px.lfd = raw_listen(&p);
  pthread_t t = spawn(proxy_main, &px);
  struct agent *a = agent_start(NOISE_MODE_SESSION, p, l);
  int closed_before = srv.closed;
  /* done when both ends have closed, or both are ready (no flip) */
  cr_assert(RUN_UNTIL((a->closed && srv.closed > closed_before && atomic_load(&px.done)) ||
                          (flip_at < 0 && a->ready && srv.ready),
                      8000),
            "dir %d offset %ld", dir, flip_at);
  if (flip_at < 0) {
    net_conn_close(a->c, 0);
    cr_assert(RUN_UNTIL(a->closed && atomic_load(&px.done), 8000));
  }
  pthread_join(t, NULL);
  close(px.lfd);
  return a;
}

Test(conn, proxy_without_flip_works) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct agent *a = proxied_session(0, -1, 0, &l);
  cr_assert_eq(a->ready, 1);
  cr_assert_eq(srv.ready, 1);
  finish();
}

Test(conn, bit_flip_in_any_handshake_byte_fails_the_handshake) {
  struct net_limits l = test_limits();
  l.handshake_ms = 200; /* a flipped length can leave a side waiting */
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  /* agent -> server: message 1 (4 + 33 bytes) and message 3 (4 + 64) */
  long up = 4 + (long)NOISE_MSG1_LEN(1) + 4 + (long)NOISE_MSG3_LEN(0);
  long down = 4 + (long)NOISE_MSG2_LEN(0);
  int tried = 0;
  for (int dir = 0; dir < 2; dir++) {
    for (long off = 0; off < (dir == 0 ? up : down); off++) {
      struct agent *a = proxied_session(dir, off, (uint8_t)(1u << (off % 8)), &l);
      cr_assert_eq(srv.ready, 0, "dir %d offset %ld: the server accepted a tampered handshake", dir,
                   off);
      bool in_msg3 = dir == 0 && off >= 4 + (long)NOISE_MSG1_LEN(1);
      if (!in_msg3)
        cr_assert_eq(a->ready, 0, "dir %d offset %ld: the agent accepted it", dir, off);
      n_agents = 0;
      tried++;
    }
  }
  cr_assert_eq(tried, 37 + 68 + 100);
  finish();
}

Test(conn, flipped_mode_byte_fails_the_handshake) {
  struct net_limits l = test_limits();
  long mode_at = 4 + NOISE_KEY_LEN;
  /* a server that takes both modes proceeds in pairing mode; the agent's
   * prologue says session, so message 2 does not authenticate */
  server_start(BOTH_MODES, &l);
  struct agent *a = proxied_session(0, mode_at, NOISE_MODE_SESSION ^ NOISE_MODE_PAIRING, &l);
  cr_assert_eq(a->ready + srv.ready, 0);
  cr_assert_eq(a->close_err, CORDON_E_CRYPTO);
  cr_assert_eq(a->checked, 0);
  finish();
}

Test(conn, flipped_mode_byte_refused_by_session_only_server) {
  struct net_limits l = test_limits();
  long mode_at = 4 + NOISE_KEY_LEN;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct agent *a = proxied_session(0, mode_at, NOISE_MODE_SESSION ^ NOISE_MODE_PAIRING, &l);
  cr_assert_eq(a->ready + srv.ready, 0);
  cr_assert_eq(srv.last_err, CORDON_E_PROTOCOL);
  finish();
}

/* ======================================================================= */
/* A raw initiator against the server                                      */
/* ======================================================================= */

enum script {
  SCRIPT_DUPLICATE,       /* A A */
  SCRIPT_REORDER,         /* B A */
  SCRIPT_DROP,            /* B (A never sent) */
  SCRIPT_FOREIGN,         /* a record sealed by another session */
  SCRIPT_REFLECT,         /* A, then the server's echo of A sent back */
  SCRIPT_FLIP,            /* A with one bit flipped */
  SCRIPT_SHORT,           /* a 15-byte record: shorter than a tag */
  SCRIPT_HEADER_ONLY,     /* after the handshake, a bare 4-byte header */
  SCRIPT_HS_HEADER_ONLY,  /* instead of message 1, a bare header */
  SCRIPT_SILENT,          /* connect and say nothing */
  SCRIPT_HS_TRICKLE,      /* message 1 one byte every 20 ms */
  SCRIPT_FRAME_TRICKLE,   /* after the handshake, a record one byte every 20 ms */
  SCRIPT_IDLE_AFTER_HS,   /* handshake, then nothing */
  SCRIPT_HALF_RECORD_EOF, /* a whole record, half of the next, then shutdown */
  SCRIPT_RECORD_EOF,      /* a whole record, then shutdown */
};

struct raw_init {
  int target;
  const char *src;
  enum script script;
  uint32_t header; /* SCRIPT_*HEADER_ONLY */
  int wait_ms;     /* how long to wait for the server's close */
  int hs_err;
  bool eof;         /* the server closed the connection */
  size_t got;       /* bytes received after the handshake */
  uint64_t sent_ms; /* just before the offending bytes went out */
  int closes;       /* server closes to wait for (default 1) */
  atomic_int done;
};

static void *raw_init_main(void *arg) {
  struct raw_init *ri = arg;
  struct noise_session *s = NULL, *other = NULL;
  static uint8_t f1[256], f2[256], echo[256];
  size_t n1, n2, ne;
  int fd = raw_connect(ri->target, ri->src);
  if (fd < 0) {
    ri->hs_err = fd;
    goto out;
  }
  switch (ri->script) {
  case SCRIPT_SILENT:
    ri->sent_ms = now_ms();
    goto wait_close;
  case SCRIPT_HS_HEADER_ONLY: {
    uint8_t h[4] = {(uint8_t)(ri->header >> 24), (uint8_t)(ri->header >> 16),
                    (uint8_t)(ri->header >> 8), (uint8_t)ri->header};
    ri->sent_ms = now_ms();
    raw_send(fd, h, 4);
    goto wait_close;
  }
  case SCRIPT_HS_TRICKLE: {
    uint8_t m[4 + NOISE_MSG1_LEN(1)] = {0, 0, 0, NOISE_MSG1_LEN(1)};
    ri->sent_ms = now_ms();
    for (size_t i = 0; i < sizeof(m); i++) {
      if (raw_send(fd, m + i, 1) < 0 || raw_wait(fd, 20))
        break; /* the server closed (readable: EOF) */
    }
    goto wait_close;
  }
  default:
    break;
  }
  ri->hs_err = raw_handshake(fd, raw_priv, NOISE_MODE_SESSION, NOISE_MODE_SESSION, &s);
  if (ri->hs_err < 0)
    goto out_close;
  n1 = raw_seal(s, "record A", 8, f1, sizeof(f1));
  n2 = raw_seal(s, "record B", 8, f2, sizeof(f2));
  ri->sent_ms = now_ms();
  switch (ri->script) {
  case SCRIPT_DUPLICATE:
    raw_send(fd, f1, n1);
    raw_send(fd, f1, n1);
    break;
  case SCRIPT_REORDER:
    raw_send(fd, f2, n2);
    raw_send(fd, f1, n1);
    break;
  case SCRIPT_DROP:
    raw_send(fd, f2, n2);
    break;
  case SCRIPT_FOREIGN: {
    /* a second, complete session with the same server and the same keys */
    int fd2 = raw_connect(ri->target, ri->src);
    if (fd2 < 0 || raw_handshake(fd2, raw_priv, NOISE_MODE_SESSION, NOISE_MODE_SESSION, &other) < 0)
      ri->hs_err = CORDON_E_INTERNAL;
    if (fd2 >= 0)
      close(fd2);
    if (other)
      n1 = raw_seal(other, "record A", 8, f1, sizeof(f1));
    raw_send(fd, f1, n1);
    break;
  }
  case SCRIPT_REFLECT:
    raw_send(fd, f1, n1);
    if (raw_recv_frame(fd, echo + 4, sizeof(echo) - 4, &ne, 3000) == 0) {
      memcpy(echo, (uint8_t[]){0, 0, 0, (uint8_t)ne}, 4);
      raw_send(fd, echo, ne + 4);
    } else {
      ri->hs_err = CORDON_E_INTERNAL;
    }
    break;
  case SCRIPT_FLIP:
    f1[4 + 3] ^= 0x10;
    raw_send(fd, f1, n1);
    break;
  case SCRIPT_SHORT: {
    uint8_t shortrec[4 + 15] = {0, 0, 0, 15};
    raw_send(fd, shortrec, sizeof(shortrec));
    break;
  }
  case SCRIPT_HEADER_ONLY: {
    uint8_t h[4] = {(uint8_t)(ri->header >> 24), (uint8_t)(ri->header >> 16),
                    (uint8_t)(ri->header >> 8), (uint8_t)ri->header};
    raw_send(fd, h, 4);
    break;
  }
  case SCRIPT_HALF_RECORD_EOF:
  case SCRIPT_RECORD_EOF:
    raw_send(fd, f1, n1);
    if (ri->script == SCRIPT_HALF_RECORD_EOF)
      raw_send(fd, f2, n2 / 2);
    shutdown(fd, SHUT_WR);
    break;
  case SCRIPT_FRAME_TRICKLE:
    for (size_t i = 0; i < n1; i++) {
      if (raw_send(fd, f1 + i, 1) < 0 || raw_wait(fd, 20))
        break;
    }
    break;
  default:
    break;
  }
wait_close:
  ri->eof = raw_drain_to_eof(fd, ri->wait_ms ? ri->wait_ms : 3000, &ri->got);
out_close:
  close(fd);
out:
  noise_session_free(s);
  noise_session_free(other);
  atomic_store(&ri->done, 1);
  return NULL;
}

/* Run a script against the server; the server conn's close is awaited. */
static void raw_run(struct raw_init *ri) {
  ri->target = port;
  int closed_before = srv.closed;
  int closes = ri->closes ? ri->closes : 1;
  pthread_t t = spawn(raw_init_main, ri);
  cr_assert(RUN_UNTIL(atomic_load(&ri->done) && srv.closed >= closed_before + closes,
                      (uint64_t)(ri->wait_ms ? ri->wait_ms : 3000) + 3000),
            "script %d: done %d, server closes %d", ri->script, atomic_load(&ri->done),
            srv.closed - closed_before);
  pthread_join(t, NULL);
}

Test(conn, misordered_records_close_the_connection) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  srv.echo = true;
  static const struct {
    enum script script;
    int records; /* delivered before the close */
    int err;
  } cases[] = {
      {SCRIPT_DUPLICATE, 1, CORDON_E_CRYPTO}, {SCRIPT_REORDER, 0, CORDON_E_CRYPTO},
      {SCRIPT_DROP, 0, CORDON_E_CRYPTO},      {SCRIPT_FOREIGN, 0, CORDON_E_CRYPTO},
      {SCRIPT_REFLECT, 1, CORDON_E_CRYPTO},   {SCRIPT_FLIP, 0, CORDON_E_CRYPTO},
      {SCRIPT_SHORT, 0, CORDON_E_PROTOCOL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct raw_init ri = {.script = cases[i].script,
                          .closes = cases[i].script == SCRIPT_FOREIGN ? 2 : 1};
    int rec0 = srv.records, ready0 = srv.ready;
    raw_run(&ri);
    cr_assert_eq(ri.hs_err, 0, "case %zu", i);
    cr_assert_eq(srv.ready - ready0, cases[i].script == SCRIPT_FOREIGN ? 2 : 1, "case %zu", i);
    cr_assert_eq(srv.records - rec0, cases[i].records, "case %zu: records", i);
    if (cases[i].script != SCRIPT_FOREIGN) /* there the other session closes last */
      cr_assert_eq(srv.last_err, cases[i].err, "case %zu: err %d", i, srv.last_err);
    cr_assert(ri.eof, "case %zu: the server closed the connection", i);
  }
  cr_assert_eq(net_server_count(server), 0);
  finish();
}

Test(conn, bad_lengths_close_at_the_header) {
  struct net_limits l = test_limits();
  l.handshake_ms = 5000;
  l.frame_ms = 5000;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  static const struct {
    enum script script;
    uint32_t header;
    int err;
  } cases[] = {
      {SCRIPT_HS_HEADER_ONLY, 0, CORDON_E_PROTOCOL},
      {SCRIPT_HS_HEADER_ONLY, FRAME_MAX_HANDSHAKE + 1, CORDON_E_LIMIT},
      {SCRIPT_HS_HEADER_ONLY, 0xffffffffu, CORDON_E_LIMIT},
      {SCRIPT_HEADER_ONLY, 0, CORDON_E_PROTOCOL},
      {SCRIPT_HEADER_ONLY, FRAME_MAX_SESSION + 1, CORDON_E_LIMIT},
      {SCRIPT_HEADER_ONLY, 0x80000000u, CORDON_E_LIMIT},
      {SCRIPT_HEADER_ONLY, 0xffffffffu, CORDON_E_LIMIT},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct raw_init ri = {.script = cases[i].script, .header = cases[i].header, .wait_ms = 3000};
    raw_run(&ri);
    cr_assert_eq(ri.hs_err, 0, "case %zu", i);
    cr_assert_eq(srv.last_err, cases[i].err, "case %zu: err %d", i, srv.last_err);
    /* closed on the header alone, long before any deadline */
    cr_assert_lt(srv.last_close_ms - ri.sent_ms, 1000, "case %zu", i);
    cr_assert(ri.eof, "case %zu", i);
  }
  finish();
}

/* The limits are exact: a header at the maximum is accepted and the server
 * waits for the body (until frame_ms). */
Test(conn, length_at_the_maximum_waits_for_the_body) {
  struct net_limits l = test_limits();
  l.frame_ms = 300;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct raw_init ri = {.script = SCRIPT_HEADER_ONLY, .header = FRAME_MAX_SESSION, .wait_ms = 3000};
  raw_run(&ri);
  cr_assert_eq(srv.last_err, -ETIMEDOUT);
  cr_assert_geq(srv.last_close_ms - ri.sent_ms, 250);
  finish();
}

Test(conn, slowloris_in_the_handshake) {
  struct net_limits l = test_limits();
  l.handshake_ms = 150;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  enum script scripts[] = {SCRIPT_SILENT, SCRIPT_HS_TRICKLE};
  for (size_t i = 0; i < 2; i++) {
    struct raw_init ri = {.script = scripts[i], .wait_ms = 3000};
    raw_run(&ri);
    uint64_t took = srv.last_close_ms - ri.sent_ms;
    cr_assert_eq(srv.last_err, -ETIMEDOUT, "case %zu: %d", i, srv.last_err);
    cr_assert_geq(took, 140, "case %zu", i);
    cr_assert_lt(took, 1000, "case %zu", i);
    cr_assert(ri.eof);
  }
  cr_assert_eq(srv.ready, 0);
  finish();
}

Test(conn, slowloris_inside_a_frame) {
  struct net_limits l = test_limits();
  l.frame_ms = 150;
  l.idle_ms = 10000; /* bytes keep coming: only the frame deadline can fire */
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct raw_init ri = {.script = SCRIPT_FRAME_TRICKLE, .wait_ms = 3000};
  raw_run(&ri);
  uint64_t took = srv.last_close_ms - ri.sent_ms;
  cr_assert_eq(srv.ready, 1);
  cr_assert_eq(srv.records, 0);
  cr_assert_eq(srv.last_err, -ETIMEDOUT);
  cr_assert_geq(took, 140);
  cr_assert_lt(took, 1000);
  finish();
}

Test(conn, idle_session_gets_on_quiet_then_closes) {
  struct net_limits l = test_limits();
  l.quiet_ms = 100;
  l.idle_ms = 250;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct raw_init ri = {.script = SCRIPT_IDLE_AFTER_HS, .wait_ms = 3000};
  raw_run(&ri);
  uint64_t took = srv.last_close_ms - ri.sent_ms;
  cr_assert_eq(srv.ready, 1);
  cr_assert_eq(srv.quiet, 1, "on_quiet once per silence");
  cr_assert_eq(srv.last_err, -ETIMEDOUT);
  cr_assert_geq(took, 240);
  cr_assert_lt(took, 1000);
  finish();
}

/* A session whose server pings on quiet_ms and closes at idle_ms, and
 * whose agent answers each ping. */
static struct agent *pinged_session(uint64_t quiet_ms, uint64_t idle_ms) {
  struct net_limits l = test_limits();
  l.quiet_ms = quiet_ms;
  l.idle_ms = idle_ms;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  srv.ping_on_quiet = true;
  struct net_limits al = test_limits(); /* the agent itself never times out here */
  struct agent *a = agent_start(NOISE_MODE_SESSION, port, &al);
  a->echo = true;
  cr_assert(RUN_UNTIL(a->ready && srv.ready, 3000));
  return a;
}

Test(conn, pings_on_quiet_keep_a_session_alive) {
  struct agent *a = pinged_session(50, 200);
  run_for(700);
  cr_assert_eq(srv.closed, 0, "closed with %d", srv.last_err);
  cr_assert_eq(a->closed, 0);
  cr_assert_geq(srv.quiet, 4, "on_quiet fired %d times", srv.quiet);
  cr_assert_geq(a->records, srv.quiet - 1, "pings %d, answered %d", srv.quiet, a->records);
  /* without answers, the same session dies at idle_ms */
  a->echo = false;
  cr_assert(RUN_UNTIL(srv.closed, 1000));
  cr_assert_eq(srv.last_err, -ETIMEDOUT);
  finish();
}

/* ======================================================================= */
/* Connection caps                                                         */
/* ======================================================================= */

/* Connect a raw socket from src and report whether the server closed it
 * at once (1), or kept it open for wait_ms (0). */
struct capped {
  const char *src;
  int target;
  int result;
  atomic_int done;
};

static void *capped_main(void *arg) {
  struct capped *cp = arg;
  size_t got = 0;
  int fd = raw_connect(cp->target, cp->src);
  if (fd < 0) {
    cp->result = fd;
  } else {
    cp->result = raw_drain_to_eof(fd, 300, &got);
    if (got)
      cp->result = -EPROTO; /* the server must not say anything */
    close(fd);
  }
  atomic_store(&cp->done, 1);
  return NULL;
}

static int try_conn(const char *src) {
  struct capped cp = {.src = src, .target = port};
  pthread_t t = spawn(capped_main, &cp);
  cr_assert(RUN_UNTIL(atomic_load(&cp.done), 3000));
  pthread_join(t, NULL);
  return cp.result;
}

/* Each agent echoes one record now. */
static void all_agents_echo(int n) {
  for (int i = 0; i < n; i++) {
    int before = agents[i].records;
    cr_assert(agents[i].c && net_conn_ready(agents[i].c), "agent %d", i);
    cr_assert_eq(net_conn_send(agents[i].c, (const uint8_t *)"hi", 2), 0);
    cr_assert(RUN_UNTIL(agents[i].records > before, 3000), "agent %d", i);
  }
}

Test(conn, caps_close_new_connections_and_spare_existing_ones) {
  struct net_limits l = test_limits();
  l.max_conns = 4;
  l.max_per_addr = 1;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  srv.echo = true;
  agent_start(NOISE_MODE_SESSION, port, &l); /* one at a time: one may be in the handshake */
  cr_assert(RUN_UNTIL(agents[0].ready, 3000));
  agent_start(NOISE_MODE_SESSION, port, &l);
  cr_assert(RUN_UNTIL(agents[0].ready && agents[1].ready, 3000));
  cr_assert_eq(net_server_count(server), 2);

  /* per address, only connections still in the handshake count: the two
   * sessions of 127.0.0.1 do not keep a third out (stays open 300 ms) */
  cr_assert_eq(try_conn("127.0.0.1"), 0);
  /* one from 127.0.0.5 that never finishes its handshake, then a second
   * from there is accepted and closed at once */
  int pre = raw_connect(port, "127.0.0.5");
  cr_assert_geq(pre, 0);
  run_for(100);
  cr_assert_eq(try_conn("127.0.0.5"), 1);
  /* another address still gets in */
  cr_assert_eq(try_conn("127.0.0.2"), 0);
  /* a flood of refused connections does not count against anyone */
  for (int i = 0; i < 20; i++)
    cr_assert_eq(try_conn("127.0.0.5"), 1, "flood %d", i);
  close(pre);
  cr_assert(RUN_UNTIL(net_server_count(server) == 2, 3000));

  /* the global cap: a third live connection, then a fourth is refused */
  struct raw_init keep = {
      .script = SCRIPT_IDLE_AFTER_HS, .src = "127.0.0.3", .wait_ms = 1500, .target = port};
  pthread_t t = spawn(raw_init_main, &keep);
  cr_assert(RUN_UNTIL(srv.ready == 3, 3000));
  int fourth = raw_connect(port, "127.0.0.6");
  cr_assert_geq(fourth, 0);
  cr_assert(RUN_UNTIL(net_server_count(server) == 4, 3000));
  cr_assert_eq(try_conn("127.0.0.4"), 1);
  cr_assert_eq(net_server_count(server), 4);
  close(fourth);
  cr_assert(RUN_UNTIL(net_server_count(server) == 3, 3000));
  /* the existing ones are unaffected */
  all_agents_echo(2);
  cr_assert_eq(srv.closed, 4, "only the two 300 ms probes and the two raw ones closed (%d)",
               srv.closed);
  cr_assert_eq(agents[0].closed + agents[1].closed, 0);
  /* when one leaves, a new one gets in */
  net_conn_close(agents[0].c, 0);
  cr_assert(RUN_UNTIL(agents[0].closed && net_server_count(server) == 2, 3000));
  cr_assert_eq(try_conn("127.0.0.4"), 0);
  cr_assert(RUN_UNTIL(atomic_load(&keep.done), 5000));
  pthread_join(t, NULL);
  finish();
}

/* A burst from one address that arrives in one accept batch: the refused
 * connections (closed but not yet freed) must not count against the global
 * cap, or a well-behaved peer in the same batch is refused too. */
Test(conn, refused_burst_does_not_fill_the_global_cap) {
  struct net_limits l = test_limits();
  l.max_conns = 4;
  l.max_per_addr = 2;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  int fds[11];
  /* the kernel completes these connects before the loop accepts any */
  for (int i = 0; i < 10; i++)
    cr_assert_geq(fds[i] = raw_connect(port, "127.0.0.1"), 0);
  cr_assert_geq(fds[10] = raw_connect(port, "127.0.0.2"), 0);
  run_for(100);
  int open_one = 0;
  for (int i = 0; i < 10; i++)
    open_one += !raw_closed(fds[i]);
  cr_assert_not(raw_closed(fds[10]), "the other address was refused");
  cr_assert_eq(open_one, 2, "per address: %d open", open_one);
  cr_assert_eq(net_server_count(server), 3);
  for (int i = 0; i < 11; i++)
    close(fds[i]);
  cr_assert(RUN_UNTIL(net_server_count(server) == 0 && srv.closed == 3, 3000));
  finish();
}

/* EOF in the middle of a record is not an orderly end. */
Test(conn, eof_inside_a_record_is_an_error) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct raw_init ri = {.script = SCRIPT_HALF_RECORD_EOF};
  raw_run(&ri);
  cr_assert_eq(ri.hs_err, 0);
  cr_assert_eq(srv.ready, 1);
  cr_assert_eq(srv.records, 1);
  cr_assert_eq(srv.last_err, -ECONNRESET);
  /* the control: EOF between records is orderly */
  struct raw_init ok = {.script = SCRIPT_RECORD_EOF};
  raw_run(&ok);
  cr_assert_eq(srv.records, 2);
  cr_assert_eq(srv.last_err, 0);
  finish();
}

#ifndef __SANITIZE_ADDRESS__ /* ASan aborts when an allocation fails */
struct late_peer {
  int target;
  atomic_int may_connect, connected, go;
  int hs_err;
  atomic_int done;
};

static void *late_peer_main(void *arg) {
  struct late_peer *lp = arg;
  struct noise_session *s = NULL;
  while (!atomic_load(&lp->may_connect))
    usleep(1000);
  int fd = raw_connect(lp->target, NULL); /* the kernel completes it */
  atomic_store(&lp->connected, 1);
  while (!atomic_load(&lp->go))
    usleep(1000);
  lp->hs_err =
      fd < 0 ? fd : raw_handshake(fd, raw_priv, NOISE_MODE_SESSION, NOISE_MODE_SESSION, &s);
  if (fd >= 0)
    close(fd);
  noise_session_free(s);
  atomic_store(&lp->done, 1);
  return NULL;
}

/* Out of memory when a connection arrives: libuv stops listening until it
 * is accepted, so the server must try again rather than stall for good. */
Test(conn, listener_recovers_after_running_out_of_memory) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct late_peer lp = {.target = port};
  pthread_t t = spawn(late_peer_main, &lp);
  run_for(20);

  /* no new address space from the kernel, and none left in the heap */
  struct rlimit old, none;
  size_t pages = 0;
  FILE *statm = fopen("/proc/self/statm", "r");
  cr_assert_not_null(statm);
  cr_assert_eq(fscanf(statm, "%zu", &pages), 1);
  fclose(statm);
  cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
  none = old;
  none.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE);
  cr_assert_eq(setrlimit(RLIMIT_AS, &none), 0);
  void **hog = NULL;
  size_t n_hog = 0;
  for (size_t sz = 4096; sz >= 16; sz /= 2)
    for (void *p; (p = malloc(sz)) != NULL;) {
      *(void **)p = hog;
      hog = p;
      n_hog++;
    }
  atomic_store(&lp.may_connect, 1);
  while (!atomic_load(&lp.connected))
    usleep(1000);
  run_for(300);
  unsigned accepted = net_server_count(server);
  while (hog) {
    void *next = *hog;
    free(hog);
    hog = next;
  }
  cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
  cr_assert_gt(n_hog, 0);
  cr_assert_eq(accepted, 0, "accepted without memory?");

  atomic_store(&lp.go, 1);
  cr_assert(RUN_UNTIL(srv.ready == 1, 3000), "the listener stalled");
  cr_assert(RUN_UNTIL(atomic_load(&lp.done), 3000));
  pthread_join(t, NULL);
  cr_assert_eq(lp.hs_err, 0);
  finish();
}
#endif

/* ======================================================================= */
/* Write queues                                                            */
/* ======================================================================= */

struct sink {
  int target;
  atomic_bool reads;             /* read everything, or never read */
  bool small_window;             /* shrink the receive buffer (a peer that reads slowly) */
  atomic_size_t got;             /* bytes read */
  atomic_int ready;              /* handshake done */
  atomic_int stop;               /* set by the test */
  atomic_int send_one, sent_one; /* the test asks for one record */
  int hs_err;
  atomic_int done;
};

static void *sink_main(void *arg) {
  struct sink *sk = arg;
  struct noise_session *s = NULL;
  int fd = raw_connect(sk->target, NULL);
  if (fd < 0) {
    sk->hs_err = fd;
    goto out;
  }
  if (sk->small_window) { /* the server's queue fills sooner */
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  }
  sk->hs_err = raw_handshake(fd, raw_priv, NOISE_MODE_SESSION, NOISE_MODE_SESSION, &s);
  atomic_store(&sk->ready, 1);
  static uint8_t buf[1 << 16];
  while (!atomic_load(&sk->stop)) {
    if (atomic_exchange(&sk->send_one, 0)) {
      uint8_t rec[64];
      size_t n = raw_seal(s, "hello", 5, rec, sizeof(rec));
      raw_send(fd, rec, n);
      atomic_store(&sk->sent_one, 1);
    }
    if (!atomic_load(&sk->reads) || !raw_wait(fd, 10)) {
      usleep(1000);
      continue;
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      break;
    }
    sk->got += (size_t)n;
  }
  close(fd);
out:
  noise_session_free(s);
  atomic_store(&sk->done, 1);
  return NULL;
}

static struct {
  struct net_conn *target;
  size_t sent, limit;
  int err;
  uv_timer_t timer;
} pump;

/* Every millisecond, send four 64 KiB records to pump.target. */
static void on_pump(uv_timer_t *t) {
  static uint8_t rec[65536 - NOISE_TAG_LEN];
  for (int i = 0; i < 4 && pump.err == 0 && pump.sent < pump.limit; i++) {
    int r = net_conn_send(pump.target, rec, sizeof(rec));
    if (r < 0)
      pump.err = r;
    else
      pump.sent += sizeof(rec);
  }
  if (pump.err || pump.sent >= pump.limit)
    uv_timer_stop(t);
}

Test(conn, peer_that_never_reads_is_closed_at_the_hard_limit) {
  struct net_limits l = test_limits();
  l.wq_high = 256u << 10;
  l.wq_hard = 1u << 20;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  srv.echo = true;
  struct net_limits al = test_limits();
  struct agent *a = agent_start(NOISE_MODE_SESSION, port, &al);
  cr_assert(RUN_UNTIL(a->ready, 3000));

  struct sink sk = {.target = port, .small_window = true};
  pthread_t t = spawn(sink_main, &sk);
  cr_assert(RUN_UNTIL(atomic_load(&sk.ready) && srv_conn_of(raw_pub), 3000));
  cr_assert_eq(sk.hs_err, 0);
  memset(&pump, 0, sizeof(pump));
  pump.target = srv_conn_of(raw_pub);
  pump.limit = 256u << 20;
  uv_timer_init(&loop, &pump.timer);
  uv_timer_start(&pump.timer, on_pump, 1, 1);
  /* while the server fills the queue, the agent keeps getting answers */
  int asked = 0;
  uint64_t dl = now_ms() + 10000;
  while (uv_is_active((uv_handle_t *)&pump.timer) && now_ms() < dl) {
    if (a->records == asked) {
      cr_assert_eq(net_conn_send(a->c, (const uint8_t *)"x", 1), 0);
      asked++;
    }
    uv_run(&loop, UV_RUN_ONCE);
  }
  cr_assert_eq(pump.err, CORDON_E_LIMIT, "send returned %d after %zu bytes", pump.err, pump.sent);
  cr_assert(RUN_UNTIL(srv.closed == 1, 3000));
  cr_assert_eq(srv.last_err, CORDON_E_LIMIT);
  cr_assert_null(srv_conn_of(raw_pub));
  cr_assert_lt(pump.sent, 64u << 20, "the limit came late: %zu bytes", pump.sent);
  /* the agent was served throughout and still is */
  cr_assert_gt(asked, 1);
  all_agents_echo(1);
  cr_assert_eq(a->closed, 0);
  atomic_store(&sk.stop, 1);
  pthread_join(t, NULL);
  uv_close((uv_handle_t *)&pump.timer, NULL);
  finish();
}

/* Above the high-water mark the server stops reading from that peer, and
 * starts again once the peer has read enough. */
Test(conn, high_water_mark_stops_reading_until_drained) {
  struct net_limits l = test_limits();
  l.wq_high = 256u << 10;
  l.wq_hard = 64u << 20;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct sink sk = {.target = port};
  pthread_t t = spawn(sink_main, &sk);
  cr_assert(RUN_UNTIL(atomic_load(&sk.ready) && srv_conn_of(raw_pub), 3000));
  struct net_conn *c = srv_conn_of(raw_pub);
  static uint8_t rec[65536 - NOISE_TAG_LEN];
  for (int i = 0; i < 128; i++) /* 8 MiB: more than the kernel takes */
    cr_assert_eq(net_conn_send(c, rec, sizeof(rec)), 0);
  atomic_store(&sk.send_one, 1);
  cr_assert(RUN_UNTIL(atomic_load(&sk.sent_one), 3000));
  run_for(200);
  cr_assert_gt(net_conn_queued(c), l.wq_high / 2);
  cr_assert_eq(srv.records, 0, "read while the queue was above the mark");
  atomic_store(&sk.reads, true);
  cr_assert(RUN_UNTIL(srv.records == 1, 5000), "never read again");
  cr_assert_leq(net_conn_queued(c), l.wq_high / 2);
  cr_assert_eq(srv.closed, 0);
  atomic_store(&sk.stop, 1);
  pthread_join(t, NULL);
  finish();
}

/* The control: the same pump into a peer that reads never hits the limit. */
Test(conn, peer_that_reads_is_not_closed) {
  struct net_limits l = test_limits();
  l.wq_high = 256u << 10;
  l.wq_hard = 1u << 20;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct sink sk = {.target = port};
  atomic_init(&sk.reads, true);
  pthread_t t = spawn(sink_main, &sk);
  cr_assert(RUN_UNTIL(atomic_load(&sk.ready) && srv_conn_of(raw_pub), 3000));
  memset(&pump, 0, sizeof(pump));
  pump.target = srv_conn_of(raw_pub);
  pump.limit = 256u * (65536 - NOISE_TAG_LEN); /* 16 MiB in 256 records */
  uv_timer_init(&loop, &pump.timer);
  uv_timer_start(&pump.timer, on_pump, 1, 1);
  cr_assert(RUN_UNTIL(!uv_is_active((uv_handle_t *)&pump.timer), 20000));
  cr_assert_eq(pump.err, 0, "err %d after %zu, got %zu", pump.err, pump.sent, (size_t)sk.got);
  cr_assert_eq(pump.sent, pump.limit);
  size_t framed = (pump.limit / (65536 - NOISE_TAG_LEN)) * (65536 + 4);
  cr_assert(RUN_UNTIL(atomic_load(&sk.got) == framed, 10000), "got %zu of %zu",
            atomic_load(&sk.got), framed);
  cr_assert_eq(srv.closed, 0);
  atomic_store(&sk.stop, 1);
  pthread_join(t, NULL);
  uv_close((uv_handle_t *)&pump.timer, NULL);
  finish();
}

/* ======================================================================= */
/* Closing                                                                 */
/* ======================================================================= */

Test(conn, server_close_with_connections_in_every_state) {
  struct net_limits l = test_limits();
  server_start(BOTH_MODES, &l);
  srv.echo = true;
  struct agent *a = agent_start(NOISE_MODE_SESSION, port, &l);
  cr_assert(RUN_UNTIL(a->ready && srv.ready, 3000));
  /* one mid-handshake (silent) and one with records in flight */
  struct raw_init ri = {.script = SCRIPT_SILENT, .wait_ms = 3000, .target = port};
  pthread_t t = spawn(raw_init_main, &ri);
  cr_assert(RUN_UNTIL(net_server_count(server) == 2, 3000));
  for (int i = 0; i < 50; i++)
    net_conn_send(a->c, (const uint8_t *)"abcdefgh", 8);
  run_for(2);
  net_server_close(server);
  net_server_close(server); /* idempotent */
  server = NULL;
  cr_assert(RUN_UNTIL(srv.closed == 2 && a->closed && atomic_load(&ri.done), 3000));
  cr_assert_eq(srv.last_err, 0);
  cr_assert(ri.eof);
  pthread_join(t, NULL);
  finish();
}

Test(conn, flush_close_delivers_what_is_queued) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct sink sk = {.target = port};
  pthread_t t = spawn(sink_main, &sk);
  cr_assert(RUN_UNTIL(atomic_load(&sk.ready) && srv_conn_of(raw_pub), 3000));
  struct net_conn *c = srv_conn_of(raw_pub);
  static uint8_t rec[65536 - NOISE_TAG_LEN];
  for (int i = 0; i < 128; i++) /* 8 MiB: more than the socket buffers take */
    cr_assert_eq(net_conn_send(c, rec, sizeof(rec)), 0);
  cr_assert_gt(net_conn_queued(c), 0);
  net_conn_flush_close(c, CORDON_E_LIMIT);
  cr_assert_not(net_conn_ready(c));
  cr_assert_eq(net_conn_send(c, rec, 1), -EPIPE);
  run_for(50);
  cr_assert_eq(srv.closed, 0, "still flushing while the peer does not read");
  atomic_store(&sk.reads, true); /* now it reads: everything arrives, then the close */
  cr_assert(RUN_UNTIL(srv.closed == 1, 5000));
  cr_assert_eq(srv.last_err, CORDON_E_LIMIT);
  cr_assert(RUN_UNTIL(atomic_load(&sk.got) == 128u * (65536 + 4), 5000), "got %zu",
            atomic_load(&sk.got));
  atomic_store(&sk.stop, 1);
  pthread_join(t, NULL);
  finish();
}

/* Records sent while corked wait (the peer gets none of them) until the
 * uncork, then all arrive intact and in order, those larger than the corked
 * buffer too; a close while corked drops them, a flush_close writes them. */
Test(conn, corked_records_wait_for_the_uncork_and_arrive_in_order) {
  struct net_limits l = test_limits();
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  srv.echo = true;
  static const size_t lens[] = {1, 100, 5000, 10000, 20000, 3, NOISE_MAX_PLAINTEXT, 0, 7};
  size_t n_lens = sizeof(lens) / sizeof(lens[0]);
  struct agent *a = agent_start(NOISE_MODE_SESSION, port, &l);
  a->expect_lens = lens;
  a->n_expect = n_lens;
  cr_assert(RUN_UNTIL(a->ready && srv.ready, 3000));
  uint8_t *buf = malloc(NOISE_MAX_PLAINTEXT);
  cr_assert_not_null(buf);
  net_conn_cork(a->c);
  size_t want = 0;
  for (size_t k = 0; k < n_lens; k++) {
    for (size_t j = 0; j < lens[k]; j++)
      buf[j] = pattern(k, j);
    cr_assert_eq(net_conn_send(a->c, buf, lens[k]), 0, "record %zu", k);
    want += 4 + lens[k] + NOISE_TAG_LEN;
  }
  cr_assert_geq(net_conn_queued(a->c), 4 + NOISE_MAX_PLAINTEXT + NOISE_TAG_LEN + 7 + 16,
                "the held ones count as queued");
  cr_assert_leq(net_conn_queued(a->c), want);
  run_for(50);
  /* the records before the one that did not fit the held buffer went when
   * it filled; those after the largest one are still held */
  cr_assert_lt(srv.records, (int)n_lens, "held until the uncork");
  net_conn_uncork(a->c);
  cr_assert(RUN_UNTIL(a->next == n_lens, 5000), "echoed %zu of %zu", a->next, n_lens);
  cr_assert(a->order_ok, "every record came back intact and in order");
  cr_assert_eq(srv.records, (int)n_lens);
  cr_assert(RUN_UNTIL(net_conn_queued(a->c) == 0, 3000));

  /* corked, nothing written: a close drops what is held */
  int before = srv.records;
  net_conn_cork(a->c);
  cr_assert_eq(net_conn_send(a->c, buf, 10), 0);
  cr_assert_eq(net_conn_send(a->c, buf, 20), 0);
  net_conn_close(a->c, 0);
  net_conn_uncork(a->c); /* after a close: nothing */
  cr_assert(RUN_UNTIL(a->closed && srv.closed, 3000));
  cr_assert_eq(srv.records, before, "dropped with the close");

  /* a flush_close writes what is held, then closes */
  struct agent *b = agent_start(NOISE_MODE_SESSION, port, &l);
  cr_assert(RUN_UNTIL(b->ready && srv.ready == 2, 3000));
  srv.echo = false;
  before = srv.records;
  net_conn_cork(b->c);
  cr_assert_eq(net_conn_send(b->c, buf, 10), 0);
  cr_assert_eq(net_conn_send(b->c, buf, 20), 0);
  net_conn_flush_close(b->c, 0);
  cr_assert(RUN_UNTIL(b->closed && srv.closed == 2, 3000));
  cr_assert_eq(srv.records, before + 2, "the held ones went before the close");
  free(buf);
  finish();
}

Test(conn, flush_close_gives_up_after_frame_ms) {
  struct net_limits l = test_limits();
  l.frame_ms = 200;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  struct sink sk = {.target = port};
  pthread_t t = spawn(sink_main, &sk);
  cr_assert(RUN_UNTIL(atomic_load(&sk.ready) && srv_conn_of(raw_pub), 3000));
  struct net_conn *c = srv_conn_of(raw_pub);
  static uint8_t rec[65536 - NOISE_TAG_LEN];
  /* the deadline runs from the loop's time when the flush began: take t0
   * before the sends, which can take a while */
  uint64_t t0 = now_ms();
  for (int i = 0; i < 128; i++) /* 8 MiB */
    cr_assert_eq(net_conn_send(c, rec, sizeof(rec)), 0);
  net_conn_flush_close(c, 0);
  cr_assert(RUN_UNTIL(srv.closed == 1, 3000));
  cr_assert_geq(now_ms() - t0, 190, "closed after %llu ms", (unsigned long long)(now_ms() - t0));
  cr_assert_lt(now_ms() - t0, 1000);
  cr_assert_eq(srv.last_err, 0);
  atomic_store(&sk.stop, 1);
  pthread_join(t, NULL);
  finish();
}

/* ======================================================================= */
/* Deadlines and caps with many connections (one timer for the server)     */
/* ======================================================================= */

/* Each server connection of these tests has a record of its own. */
#define MANY 240

struct many_conn {
  uint64_t ready_ms, quiet_ms, close_ms;
  int quiet, err;
  bool ready, closed;
};

static struct {
  struct many_conn ready[MANY]; /* by the order of on_ready */
  int n_ready;
  uint64_t hs_close_ms[MANY]; /* connections closed before their handshake ended */
  int hs_err[MANY];
  int n_hs_closed;
} many;

static int many_on_ready(struct net_conn *c) {
  if (many.n_ready >= MANY)
    return -ENOMEM;
  struct many_conn *m = &many.ready[many.n_ready++];
  m->ready = true;
  m->ready_ms = now_ms();
  net_conn_set_data(c, m);
  return 0;
}

static void many_on_quiet(struct net_conn *c) {
  struct many_conn *m = net_conn_data(c);
  if (m->quiet++ == 0)
    m->quiet_ms = now_ms();
}

static void many_on_close(struct net_conn *c, int err) {
  struct many_conn *m = net_conn_data(c);
  if (!m) {
    if (many.n_hs_closed < MANY) {
      many.hs_close_ms[many.n_hs_closed] = now_ms();
      many.hs_err[many.n_hs_closed] = err;
    }
    many.n_hs_closed++;
    return;
  }
  m->closed = true;
  m->close_ms = now_ms();
  m->err = err;
}

static const struct net_conn_ops many_ops = {
    .on_ready = many_on_ready, .on_quiet = many_on_quiet, .on_close = many_on_close};

#define N_SILENT 80 /* never start the handshake */
#define N_IDLE 80   /* finish it, then say nothing */
#define N_TALK 40   /* finish it and send a record every 50 ms */

struct crowd {
  int target;
  uint64_t silent_ms;  /* when the silent ones were connected */
  uint64_t talk_until; /* the talkers stop (and close) after this */
  int fds[N_SILENT + N_IDLE + N_TALK];
  int errors;
  atomic_int connected, stop, done;
};

static void *crowd_main(void *arg) {
  struct crowd *cr = arg;
  struct noise_session *ss[N_IDLE + N_TALK] = {0};
  char src[32];
  int n = 0;
  /* eight addresses, as many behind a NAT would be */
  cr->silent_ms = now_ms();
  for (int i = 0; i < N_SILENT; i++, n++) {
    snprintf(src, sizeof(src), "127.0.2.%d", 1 + i % 8);
    cr->fds[n] = raw_connect(cr->target, src);
    cr->errors += cr->fds[n] < 0;
  }
  for (int i = 0; i < N_IDLE + N_TALK; i++, n++) {
    snprintf(src, sizeof(src), "127.0.3.%d", 1 + i % 8);
    cr->fds[n] = raw_connect(cr->target, src);
    if (cr->fds[n] < 0 ||
        raw_handshake(cr->fds[n], raw_priv, NOISE_MODE_SESSION, NOISE_MODE_SESSION, &ss[i]) != 0)
      cr->errors++;
  }
  atomic_store(&cr->connected, 1);
  /* the talkers: one record each every 50 ms */
  while (!atomic_load(&cr->stop) && now_ms() < cr->talk_until) {
    for (int i = N_IDLE; i < N_IDLE + N_TALK; i++) {
      uint8_t f[64];
      size_t len = raw_seal(ss[i], "hi", 2, f, sizeof(f));
      if (!len || raw_send(cr->fds[N_SILENT + i], f, len) < 0)
        cr->errors++;
    }
    usleep(50000);
  }
  while (!atomic_load(&cr->stop))
    usleep(1000);
  for (int i = 0; i < n; i++)
    if (cr->fds[i] >= 0)
      close(cr->fds[i]);
  for (int i = 0; i < N_IDLE + N_TALK; i++)
    noise_session_free(ss[i]);
  atomic_store(&cr->done, 1);
  return NULL;
}

/* The handshake, quiet and idle deadlines of many connections, some of
 * them beyond one turn of the server's deadline wheel (512 ticks of 2 ms),
 * fire neither early nor late, and connections that talk are left alone. */
Test(conn, deadlines_fire_on_time_among_many_connections) {
  memset(&many, 0, sizeof(many));
  struct net_limits l = test_limits();
  l.tick_ms = 2;
  l.handshake_ms = 1500;
  l.quiet_ms = 300;
  l.idle_ms = 1200;
  l.max_conns = 1000;
  l.max_per_addr = 1000;
  cr_assert_eq(net_server_new(&loop, "127.0.0.1", 0, srv_priv, MODE_BIT(NOISE_MODE_SESSION), &l,
                              &many_ops, &srv, &server),
               0);
  static struct crowd cw; /* static: the thread may outlive a failed assertion */
  memset(&cw, 0, sizeof(cw));
  cw.target = net_server_port(server);
  cw.talk_until = now_ms() + 2600;
  pthread_t t = spawn(crowd_main, &cw);
  cr_assert(RUN_UNTIL(atomic_load(&cw.connected), 20000));
  cr_assert_eq(cw.errors, 0);
  cr_assert(RUN_UNTIL(many.n_hs_closed == N_SILENT, 5000), "%d closed in the handshake",
            many.n_hs_closed);
  cr_assert(RUN_UNTIL(now_ms() > cw.talk_until + 100, 5000));
  int idle_closed = 0;
  /* the idle ones have all timed out by now; wait for their closes */
  cr_assert(RUN_UNTIL(({
                        idle_closed = 0;
                        for (int i = 0; i < many.n_ready; i++)
                          idle_closed += many.ready[i].closed;
                        idle_closed >= N_IDLE;
                      }),
                      5000),
            "%d closed of %d idle", idle_closed, N_IDLE);
  cr_assert_eq(many.n_ready, N_IDLE + N_TALK);
  for (int i = 0; i < N_SILENT; i++) {
    uint64_t took = many.hs_close_ms[i] - cw.silent_ms;
    cr_assert_eq(many.hs_err[i], -ETIMEDOUT, "silent %d: %d", i, many.hs_err[i]);
    /* the loop's clock (uv_now) is coarser than now_ms: 10 ms of slack */
    cr_assert_geq(took + 10, 1500, "silent %d: closed after %llu ms", i, (unsigned long long)took);
    cr_assert_lt(took, 1500 + 1000, "silent %d: closed after %llu ms", i, (unsigned long long)took);
  }
  for (int i = 0; i < many.n_ready; i++) {
    struct many_conn *m = &many.ready[i];
    if (!m->closed) {
      cr_assert_eq(m->quiet, 0, "a talker was quiet");
      continue;
    }
    uint64_t quiet = m->quiet_ms - m->ready_ms, idle = m->close_ms - m->ready_ms;
    cr_assert_eq(m->err, -ETIMEDOUT, "conn %d: %d", i, m->err);
    cr_assert_eq(m->quiet, 1, "conn %d: on_quiet %d times", i, m->quiet);
    /* last_rx is message 3, read just before on_ready */
    cr_assert_geq(quiet + 10, 300, "conn %d: quiet after %llu ms", i, (unsigned long long)quiet);
    cr_assert_lt(quiet, 300 + 700, "conn %d: quiet after %llu ms", i, (unsigned long long)quiet);
    cr_assert_geq(idle + 10, 1200, "conn %d: closed after %llu ms", i, (unsigned long long)idle);
    cr_assert_lt(idle, 1200 + 1000, "conn %d: closed after %llu ms", i, (unsigned long long)idle);
  }
  cr_assert_eq(idle_closed, N_IDLE, "a talker was closed: %d closed", idle_closed);
  cr_assert_eq(net_server_count(server), N_TALK);
  atomic_store(&cw.stop, 1);
  cr_assert(RUN_UNTIL(atomic_load(&cw.done), 5000));
  pthread_join(t, NULL);
  cr_assert(RUN_UNTIL(net_server_count(server) == 0, 3000));
  finish();
}

/* Open a raw connection from src that stays in the handshake; -1 if the
 * server closed it at once (over a cap), else the fd. */
static int hold_preauth(const char *src) {
  int fd = raw_connect(port, src);
  cr_assert_geq(fd, 0, "connect from %s: %d", src, fd);
  run_for(30);
  if (raw_closed(fd)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The per-address cap counts the connections of an address still in the
 * handshake, across many addresses; the count goes down when a handshake
 * finishes, fails or times out. */
Test(conn, per_address_cap_counts_handshakes_of_each_address) {
  struct net_limits l = test_limits();
  l.max_per_addr = 3;
  l.max_conns = 500;
  l.handshake_ms = 5000;
  server_start(MODE_BIT(NOISE_MODE_SESSION), &l);
  /* 40 addresses, three each: all in; a fourth from any of them is not */
  static int fds[40][3];
  char src[32];
  for (int a = 0; a < 40; a++) {
    snprintf(src, sizeof(src), "127.0.4.%d", a + 1);
    for (int i = 0; i < 3; i++)
      cr_assert_geq(fds[a][i] = raw_connect(port, src), 0);
  }
  cr_assert(RUN_UNTIL(net_server_count(server) == 120, 3000), "%u in", net_server_count(server));
  for (int a = 0; a < 40; a++)
    for (int i = 0; i < 3; i++)
      cr_assert_not(raw_closed(fds[a][i]), "127.0.4.%d, connection %d refused", a + 1, i);
  for (int a = 0; a < 40; a += 7) {
    snprintf(src, sizeof(src), "127.0.4.%d", a + 1);
    cr_assert_eq(hold_preauth(src), -1, "a fourth from %s got in", src);
  }
  cr_assert_eq(try_conn("127.0.5.1"), 0, "another address was refused");
  cr_assert(RUN_UNTIL(net_server_count(server) == 120, 3000));

  /* a failed handshake (a zero length) frees its address's place */
  uint8_t zero[4] = {0};
  cr_assert_eq(raw_send(fds[3][0], zero, 4), 0);
  cr_assert(RUN_UNTIL(net_server_count(server) == 119, 3000));
  cr_assert_eq(srv.last_err, CORDON_E_PROTOCOL);
  cr_assert_geq(fds[3][0] = hold_preauth("127.0.4.4"), 0, "the failed one's place was not freed");
  cr_assert_eq(hold_preauth("127.0.4.4"), -1);
  /* so does a closed one */
  close(fds[5][1]);
  cr_assert(RUN_UNTIL(net_server_count(server) == 119, 3000));
  cr_assert_geq(fds[5][1] = hold_preauth("127.0.4.6"), 0, "the closed one's place was not freed");

  /* 127.0.0.1: three in the handshake, then agents (from 127.0.0.1 too)
   * get in as places free up, and once ready they no longer count */
  int own[3];
  for (int i = 0; i < 3; i++)
    cr_assert_geq(own[i] = hold_preauth("127.0.0.1"), 0);
  cr_assert_eq(hold_preauth("127.0.0.1"), -1);
  close(own[0]);
  cr_assert(RUN_UNTIL(net_server_count(server) == 122, 3000));
  struct agent *a0 = agent_start(NOISE_MODE_SESSION, port, &l);
  cr_assert(RUN_UNTIL(a0->ready && srv.ready == 1, 3000));
  close(own[1]);
  cr_assert(RUN_UNTIL(net_server_count(server) == 122, 3000));
  struct agent *a1 = agent_start(NOISE_MODE_SESSION, port, &l);
  cr_assert(RUN_UNTIL(a1->ready && srv.ready == 2, 3000));
  /* two sessions and one handshake of 127.0.0.1: two more places */
  cr_assert_geq(own[0] = hold_preauth("127.0.0.1"), 0, "a finished handshake still counts");
  cr_assert_geq(own[1] = hold_preauth("127.0.0.1"), 0, "a finished handshake still counts");
  cr_assert_eq(hold_preauth("127.0.0.1"), -1);
  cr_assert_eq(a0->closed + a1->closed, 0);

  /* the handshake deadline frees every place */
  cr_assert(RUN_UNTIL(net_server_count(server) == 2, 9000), "%u left", net_server_count(server));
  for (int a = 0; a < 40; a++)
    for (int i = 0; i < 3; i++)
      close(fds[a][i]);
  for (int i = 0; i < 3; i++)
    close(own[i]);
  for (int i = 0; i < 3; i++)
    cr_assert_geq(own[i] = hold_preauth("127.0.4.9"), 0, "a timed-out one's place was not freed");
  cr_assert_eq(hold_preauth("127.0.4.9"), -1);
  for (int i = 0; i < 3; i++)
    close(own[i]);
  finish();
}

/* After on_quiet, traffic arms the quiet deadline again at once: the next
 * signal comes quiet_ms after that traffic, not at the idle deadline that
 * was the connection's next one while it was quiet. */
Test(conn, quiet_is_armed_again_by_traffic) {
  pinged_session(50, 5000);
  run_for(600);
  /* about one every 60 ms (50 ms of quiet, a tick, the round trip) */
  cr_assert_geq(srv.quiet, 5, "on_quiet fired %d times in 600 ms", srv.quiet);
  cr_assert_eq(srv.closed, 0);
  finish();
}
