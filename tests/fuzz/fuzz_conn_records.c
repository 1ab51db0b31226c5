/* libFuzzer target for a server connection of net/conn.c: what a peer
 * sends, over a real loopback TCP socket, to a real net_server on a uv loop.
 *
 * Input: byte 0 picks how far the peer gets honestly:
 *   even  nothing: the rest is sent raw from the first byte (frame lengths,
 *         message 1, the mode byte, anything);
 *   odd   a whole session handshake first (fixed keys), then the rest is a
 *         list of operations, each [op][len_hi][len_lo][len bytes]:
 *           op % 3 == 0  seal the bytes as the next record and send it;
 *           op % 3 == 1  send the bytes raw (frames, lengths, garbage);
 *           op % 3 == 2  seal the bytes, flip the last byte, send it.
 * The peer then shuts down its side. Whatever arrives, the server must not
 * crash, leak or read out of bounds; every connection must be closed and
 * freed by the loop; records must arrive only after the handshake and only
 * as sealed, in order; and the server must stay able to serve the next
 * connection. */
#include "net/conn.h"
#include "core/error.h"
#include "proto/frame.h"
#include "proto/noise.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_conn_records:%d: %s\n", __LINE__, #cond);                              \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static uv_loop_t loop;
static struct net_server *server;
static int port;
static uint8_t srv_priv[NOISE_KEY_LEN], srv_pub[NOISE_KEY_LEN];
static uint8_t cli_priv[NOISE_KEY_LEN], cli_pub[NOISE_KEY_LEN];

static struct {
  int ready, closed, records;
  size_t expect_next; /* index of the next sealed record */
  const size_t *sealed_lens;
  size_t n_sealed;
  bool order_ok;
} ev;

static int on_ready(struct net_conn *c) {
  ev.ready++;
  return 0;
}

static void on_record(struct net_conn *c, const uint8_t *d, size_t len) {
  CHECK(ev.ready > 0);
  ev.records++;
  if (ev.expect_next >= ev.n_sealed || ev.sealed_lens[ev.expect_next] != len)
    ev.order_ok = false;
  ev.expect_next++;
}

static void on_close(struct net_conn *c, int err) {
  ev.closed++;
}

static const struct net_conn_ops ops = {
    .on_ready = on_ready, .on_record = on_record, .on_close = on_close};

static void init_once(void) {
  static int done;
  if (done)
    return;
  done = 1;
  CHECK(sodium_init() >= 0);
  /* fixed keys: runs are reproducible (ephemeral keys still vary) */
  for (int i = 0; i < NOISE_KEY_LEN; i++) {
    srv_priv[i] = (uint8_t)(i + 1);
    cli_priv[i] = (uint8_t)(0xa0 + i);
  }
  CHECK(noise_public_key(srv_priv, srv_pub) == 0);
  CHECK(noise_public_key(cli_priv, cli_pub) == 0);
  CHECK(uv_loop_init(&loop) == 0);
  struct net_limits l;
  net_limits_default(&l);
  l.handshake_ms = 2000;
  l.frame_ms = 2000;
  l.tick_ms = 50;
  l.max_per_addr = 64;
  CHECK(net_server_new(&loop, "127.0.0.1", 0, srv_priv, 1u << NOISE_MODE_SESSION, &l, &ops, NULL,
                       &server) == 0);
  port = net_server_port(server);
}

static int peer_connect(void) {
  /* the server closes first, so its side keeps each address pair in
   * TIME_WAIT: spread the source over 127.0.0.0/8 so that a long run does
   * not run out of pairs */
  static uint32_t n;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  CHECK(fd >= 0);
  int one = 1; /* the port is chosen at connect, for this destination */
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
  struct sockaddr_in src = {.sin_family = AF_INET};
  src.sin_addr.s_addr = htonl(0x7f000001u + (n++ % 4096u) * 256u);
  CHECK(bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0);
  /* non-blocking: libFuzzer's SIGALRM must not interrupt a blocking
   * connect, which would go on in the background as a second connection */
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
    CHECK(errno == EINPROGRESS);
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    while (poll(&pf, 1, 1000) <= 0)
      CHECK(errno == EINTR || errno == 0);
    int err = 0;
    socklen_t len = sizeof(err);
    CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  /* close with a reset: no TIME_WAIT on this side */
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  return fd;
}

/* Send everything, running the loop whenever the socket is full (the server
 * reads on this same thread). Returns 0, or -1 once the server has gone. */
static int peer_send(int fd, const uint8_t *p, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      uv_run(&loop, UV_RUN_NOWAIT);
      continue;
    }
    return -1;
  }
  return 0;
}

/* Read one frame, running the loop until it is there. */
static int peer_recv_frame(int fd, uint8_t *buf, size_t cap, size_t *out_len) {
  size_t have = 0, want = 4;
  for (int spins = 0; spins < 100000 && have < want; spins++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    ssize_t n = recv(fd, buf + have, want - have, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
      return -1;
    if (n > 0)
      have += (size_t)n;
    if (have == 4 && want == 4) {
      want = 4 + ((size_t)buf[0] << 24 | (size_t)buf[1] << 16 | (size_t)buf[2] << 8 | buf[3]);
      if (want > cap)
        return -1;
    }
  }
  if (have < want)
    return -1;
  *out_len = want;
  return 0;
}

static int peer_handshake(int fd, struct noise_session **out_s) {
  uint8_t pro[NOISE_PROLOGUE_LEN], msg[4 + FRAME_MAX_HANDSHAKE], mode = NOISE_MODE_SESSION;
  size_t pl, n, pn;
  struct noise_handshake *hs = NULL;
  int r = noise_prologue_build(NOISE_WIRE_VERSION, NOISE_MODE_SESSION, pro, sizeof(pro), &pl);
  if (r == 0)
    r = noise_handshake_new(NOISE_INITIATOR, cli_priv, pro, pl, &hs);
  if (r == 0)
    r = noise_handshake_write_message(hs, &mode, 1, msg + 4, sizeof(msg) - 4, &n);
  if (r == 0) {
    msg[0] = msg[1] = msg[2] = 0;
    msg[3] = (uint8_t)n;
    r = peer_send(fd, msg, n + 4);
  }
  if (r == 0)
    r = peer_recv_frame(fd, msg, sizeof(msg), &n);
  if (r == 0)
    r = noise_handshake_read_message(hs, msg + 4, n - 4, NULL, 0, &pn);
  if (r == 0)
    r = noise_handshake_write_message(hs, NULL, 0, msg + 4, sizeof(msg) - 4, &n);
  if (r == 0) {
    msg[0] = msg[1] = msg[2] = 0;
    msg[3] = (uint8_t)n;
    r = peer_send(fd, msg, n + 4);
  }
  if (r == 0)
    r = noise_handshake_split(&hs, out_s);
  noise_handshake_free(hs);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static size_t sealed_lens[4096];
  static uint8_t frame[4 + 65536 + NOISE_TAG_LEN];
  init_once();
  if (size < 1)
    return 0;
  memset(&ev, 0, sizeof(ev));
  ev.order_ok = true;
  ev.sealed_lens = sealed_lens;
  int fd = peer_connect();
  struct noise_session *s = NULL;
  bool honest = data[0] & 1;
  data++;
  size--;
  if (!honest) {
    peer_send(fd, data, size);
  } else if (peer_handshake(fd, &s) == 0) {
    while (size >= 3) {
      uint8_t op = data[0];
      size_t len = (size_t)data[1] << 8 | data[2];
      data += 3;
      size -= 3;
      if (len > size)
        len = size;
      if (op % 3 == 1) {
        if (peer_send(fd, data, len) < 0)
          break;
      } else {
        size_t n = 0;
        CHECK(noise_session_encrypt(s, data, len, frame + 4, sizeof(frame) - 4, &n) == 0);
        frame[0] = (uint8_t)(n >> 24);
        frame[1] = (uint8_t)(n >> 16);
        frame[2] = (uint8_t)(n >> 8);
        frame[3] = (uint8_t)n;
        if (op % 3 == 2)
          frame[4 + n - 1] ^= 1;
        else if (ev.n_sealed < sizeof(sealed_lens) / sizeof(sealed_lens[0]))
          sealed_lens[ev.n_sealed++] = len;
        if (peer_send(fd, frame, n + 4) < 0)
          break;
      }
      data += len;
      size -= len;
    }
  }
  shutdown(fd, SHUT_WR);
  /* the server closes the connection: at our EOF at the latest */
  for (int spins = 0; ev.closed == 0 && spins < 1000000; spins++)
    uv_run(&loop, UV_RUN_ONCE);
  CHECK(ev.closed == 1);
  CHECK(ev.order_ok);
  CHECK(ev.records <= (int)ev.n_sealed);
  CHECK(net_server_count(server) == 0);
  close(fd);
  noise_session_free(s);
  /* a connection never holds the next one back: run until it is freed */
  uv_run(&loop, UV_RUN_NOWAIT);
  return 0;
}
