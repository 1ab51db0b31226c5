/* bench_wire: the cost of a cordon session on loopback, in one run.
 *
 *   1. 64-byte ping-pong: plain libuv TCP and the same over a cordon session
 *      (net/conn), median and p99 round trip, and their ratio (target
 *      <= 1.3);
 *   2. handshakes: connect + Noise XX + close, one after another, time per
 *      handshake and handshakes per second (target < 1 ms), plus the CPU cost
 *      of the Noise handshake alone (both sides, in memory);
 *   3. bulk: 64 KiB frames one way over plain libuv TCP and over a session
 *      (target > 1 GB/s), next to raw libsodium ChaCha20-Poly1305 on one
 *      core, measured in the same run, as the baseline.
 *
 * The servers run on their own uv loop in a second thread, the clients on
 * the main thread's loop, as a server and an agent would on two machines.
 * Medians, not means. Usage: bench_wire [round_trips] [bulk_MiB] [handshakes]
 */
#include "core/error.h"
#include "net/conn.h"
#include "proto/noise.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#define PING_LEN 64
#define BULK_REC (65536 - NOISE_TAG_LEN) /* one 64 KiB frame body */
#define BULK_QUEUE (2u << 20)            /* client-side bytes in flight */

/* ---- statistics --------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

struct stats {
  double median_us, p99_us;
};

static struct stats stats_of(uint64_t *ns, size_t n) {
  qsort(ns, n, sizeof(*ns), cmp_u64);
  size_t p99 = n * 99 / 100;
  if (p99 >= n)
    p99 = n - 1;
  return (struct stats){.median_us = (double)ns[n / 2] / 1e3, .p99_us = (double)ns[p99] / 1e3};
}

/* CPU seconds of the whole process (both threads) so far */
static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what, int err) {
  fprintf(stderr, "bench_wire: %s: %s\n", what, cordon_err_message(err));
  exit(1);
}

static uint8_t srv_priv[NOISE_KEY_LEN], srv_pub[NOISE_KEY_LEN];
static uint8_t cli_priv[NOISE_KEY_LEN], cli_pub[NOISE_KEY_LEN];

/* ====================================================================== */
/* The server thread: a cordon echo server, a plain echo server and a     */
/* plain sink, all on one loop                                            */
/* ====================================================================== */

static struct {
  uv_loop_t loop;
  uv_thread_t thread;
  uv_sem_t ready;
  uv_async_t stop;
  struct net_server *ns;
  uv_tcp_t echo_listener, sink_listener;
  int net_port, echo_port, sink_port;
} srv;

/* cordon: small records come back, large ones (bulk) are only counted */
static void srv_on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  if (len <= PING_LEN)
    net_conn_send(c, data, len);
}

static const struct net_conn_ops srv_ops = {.on_record = srv_on_record};

/* plain TCP connections: echo, or sink (count, answer one byte at the end) */
struct plain_conn {
  uv_tcp_t tcp;
  bool sink;
  uint64_t want, got; /* sink: the client announces want in 8 bytes first */
  uint8_t hdr[8];
  size_t hdr_len;
};

struct plain_write {
  uv_write_t req;
  uv_buf_t buf;
};

static void plain_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static uint8_t sink_buf[256 << 10];
  struct plain_conn *pc = h->data;
  if (pc->sink) {
    *buf = uv_buf_init((char *)sink_buf, sizeof(sink_buf));
    return;
  }
  buf->base = malloc(65536);
  buf->len = buf->base ? 65536 : 0;
}

static void plain_closed(uv_handle_t *h) {
  free(h->data);
}

static void plain_written(uv_write_t *req, int status) {
  struct plain_write *w = (struct plain_write *)req;
  free(w->buf.base);
  free(w);
}

static void plain_send(uv_stream_t *s, char *owned, size_t len) {
  struct plain_write *w = malloc(sizeof(*w));
  w->buf = uv_buf_init(owned, (unsigned)len);
  if (uv_write(&w->req, s, &w->buf, 1, plain_written) < 0) {
    free(owned);
    free(w);
  }
}

static void plain_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct plain_conn *pc = s->data;
  if (nread < 0) {
    if (!pc->sink)
      free(buf->base);
    uv_close((uv_handle_t *)s, plain_closed);
    return;
  }
  if (!pc->sink) {
    if (nread > 0)
      plain_send(s, buf->base, (size_t)nread); /* echo, handing the buffer on */
    else
      free(buf->base);
    return;
  }
  size_t off = 0;
  while (pc->hdr_len < 8 && off < (size_t)nread)
    pc->hdr[pc->hdr_len++] = (uint8_t)buf->base[off++];
  if (pc->hdr_len < 8)
    return;
  if (!pc->want)
    for (int i = 0; i < 8; i++)
      pc->want = pc->want << 8 | pc->hdr[i];
  pc->got += (size_t)nread - off;
  if (pc->want && pc->got >= pc->want) {
    char *done = malloc(1);
    *done = 'D';
    plain_send(s, done, 1);
    pc->want = 0;
    pc->got = 0;
    pc->hdr_len = 0;
  }
}

static void plain_accept(uv_stream_t *listener, int status) {
  if (status < 0)
    return;
  struct plain_conn *pc = calloc(1, sizeof(*pc));
  pc->sink = listener == (uv_stream_t *)&srv.sink_listener;
  uv_tcp_init(listener->loop, &pc->tcp);
  pc->tcp.data = pc;
  if (uv_accept(listener, (uv_stream_t *)&pc->tcp) < 0) {
    uv_close((uv_handle_t *)&pc->tcp, plain_closed);
    return;
  }
  uv_tcp_nodelay(&pc->tcp, 1);
  uv_read_start((uv_stream_t *)&pc->tcp, plain_alloc, plain_read);
}

static int listen_plain(uv_tcp_t *t) {
  struct sockaddr_in a;
  struct sockaddr_storage b;
  int len = sizeof(b);
  uv_ip4_addr("127.0.0.1", 0, &a);
  uv_tcp_init(&srv.loop, t);
  t->data = NULL;
  if (uv_tcp_bind(t, (struct sockaddr *)&a, 0) < 0 ||
      uv_listen((uv_stream_t *)t, 128, plain_accept) < 0)
    die("listen", -EADDRINUSE);
  uv_tcp_getsockname(t, (struct sockaddr *)&b, &len);
  return ntohs(((struct sockaddr_in *)&b)->sin_port);
}

static void close_plain(uv_handle_t *h, void *arg) {
  /* what is left on the server loop: plain listeners and connections */
  if (uv_is_closing(h) || h == (uv_handle_t *)&srv.stop)
    return;
  uv_close(h, h->data ? plain_closed : NULL);
}

static void srv_on_stop(uv_async_t *a) {
  net_server_close(srv.ns);
  uv_walk(&srv.loop, close_plain, NULL);
  uv_close((uv_handle_t *)a, NULL);
}

static void srv_main(void *arg) {
  struct net_limits l;
  net_limits_default(&l);
  l.max_per_addr = 1024; /* every client is 127.0.0.1 */
  int r = net_server_new(&srv.loop, "127.0.0.1", 0, srv_priv, 1u << NOISE_MODE_SESSION, &l,
                         &srv_ops, NULL, &srv.ns);
  if (r < 0)
    die("net_server_new", r);
  srv.net_port = net_server_port(srv.ns);
  srv.echo_port = listen_plain(&srv.echo_listener);
  srv.sink_port = listen_plain(&srv.sink_listener);
  uv_async_init(&srv.loop, &srv.stop, srv_on_stop);
  uv_sem_post(&srv.ready);
  uv_run(&srv.loop, UV_RUN_DEFAULT);
}

/* ====================================================================== */
/* Clients, on the main thread's loop                                     */
/* ====================================================================== */

static uv_loop_t *cloop;

/* ---- plain TCP client ------------------------------------------------- */

static struct {
  uv_tcp_t tcp;
  uv_connect_t creq;
  bool connected, closed;
  /* ping-pong */
  uint64_t *samples;
  size_t n, want, got_bytes;
  uint64_t t0;
  /* bulk */
  bool bulk, bulk_done;
  uint64_t bulk_total, bulk_sent;
  size_t queued;
  uv_check_t topup;
} pc;

static uint8_t ping_buf[PING_LEN];
static uint8_t *bulk_buf;

static void pc_connected(uv_connect_t *req, int status) {
  if (status < 0)
    die("connect", status);
  uv_tcp_nodelay(&pc.tcp, 1);
  pc.connected = true;
}

static void pc_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  static char rbuf[65536];
  *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void pc_write_done(uv_write_t *req, int status) {
  size_t len = (size_t)(uintptr_t)req->data;
  pc.queued -= len;
  free(req);
}

static void pc_write(const void *data, size_t len) {
  uv_write_t *req = malloc(sizeof(*req));
  uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
  req->data = (void *)(uintptr_t)len;
  pc.queued += len;
  int r = uv_write(req, (uv_stream_t *)&pc.tcp, &b, 1, pc_write_done);
  if (r < 0)
    die("uv_write", r);
}

static void pc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  if (nread < 0)
    die("plain read", (int)nread);
  if (pc.bulk) {
    if (nread > 0)
      pc.bulk_done = true; /* the sink's 'D' */
    return;
  }
  pc.got_bytes += (size_t)nread;
  if (pc.got_bytes < PING_LEN)
    return;
  pc.got_bytes -= PING_LEN;
  uint64_t t = uv_hrtime();
  pc.samples[pc.n++] = t - pc.t0;
  if (pc.n < pc.want) {
    pc.t0 = uv_hrtime();
    pc_write(ping_buf, PING_LEN);
  }
}

static void plain_connect(int port) {
  struct sockaddr_in a;
  pc.connected = pc.closed = pc.bulk = pc.bulk_done = false;
  pc.n = pc.want = pc.got_bytes = pc.queued = 0;
  pc.bulk_total = pc.bulk_sent = 0;
  uv_ip4_addr("127.0.0.1", port, &a);
  uv_tcp_init(cloop, &pc.tcp);
  int r = uv_tcp_connect(&pc.creq, &pc.tcp, (struct sockaddr *)&a, pc_connected);
  if (r < 0)
    die("connect", r);
  while (!pc.connected)
    uv_run(cloop, UV_RUN_ONCE);
  uv_read_start((uv_stream_t *)&pc.tcp, pc_alloc, pc_read);
}

static void pc_closed(uv_handle_t *h) {
  pc.closed = true;
}

static void plain_close(void) {
  uv_close((uv_handle_t *)&pc.tcp, pc_closed);
  while (!pc.closed)
    uv_run(cloop, UV_RUN_ONCE);
}

static struct stats plain_pingpong(int port, uint64_t *samples, size_t warm, size_t n) {
  plain_connect(port);
  pc.samples = samples;
  for (int pass = 0; pass < 2; pass++) {
    pc.n = 0;
    pc.want = pass ? n : warm;
    pc.t0 = uv_hrtime();
    pc_write(ping_buf, PING_LEN);
    while (pc.n < pc.want)
      uv_run(cloop, UV_RUN_ONCE);
  }
  plain_close();
  return stats_of(samples, n);
}

static void pc_topup(uv_check_t *h) {
  while (pc.bulk_sent < pc.bulk_total && pc.queued < BULK_QUEUE) {
    pc_write(bulk_buf, BULK_REC);
    pc.bulk_sent += BULK_REC;
  }
}

/* MB/s of n_rec records of BULK_REC bytes through the plain sink */
static double plain_bulk(int port, uint64_t n_rec) {
  plain_connect(port);
  pc.bulk = true;
  pc.bulk_total = n_rec * BULK_REC;
  uint8_t hdr[8];
  for (int i = 0; i < 8; i++)
    hdr[i] = (uint8_t)(pc.bulk_total >> (56 - 8 * i));
  uint64_t t0 = uv_hrtime();
  pc_write(hdr, 8);
  uv_check_init(cloop, &pc.topup);
  uv_check_start(&pc.topup, pc_topup);
  pc_topup(&pc.topup);
  while (!pc.bulk_done)
    uv_run(cloop, UV_RUN_ONCE);
  uint64_t dt = uv_hrtime() - t0;
  uv_close((uv_handle_t *)&pc.topup, NULL);
  plain_close();
  return (double)pc.bulk_total / ((double)dt / 1e9) / 1e6;
}

/* ---- cordon session client -------------------------------------------- */

static struct {
  struct net_conn *c;
  bool ready, closed;
  int close_err;
  uint64_t *samples;
  size_t n, want;
  uint64_t t0;
  /* bulk */
  bool bulk_done;
  uint64_t bulk_total, bulk_sent;
  uv_check_t topup;
  /* handshakes */
  uint64_t hs_t0;
} sc;

static int sc_on_ready(struct net_conn *c) {
  sc.ready = true;
  return 0;
}

static void sc_on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  if (len == 1) { /* the echo of the bulk run's end marker */
    sc.bulk_done = true;
    return;
  }
  sc.samples[sc.n++] = uv_hrtime() - sc.t0;
  if (sc.n < sc.want) {
    sc.t0 = uv_hrtime();
    net_conn_send(c, ping_buf, PING_LEN);
  }
}

static void sc_on_close(struct net_conn *c, int err) {
  sc.closed = true;
  sc.close_err = err;
  sc.c = NULL;
}

static int sc_check_peer(struct net_conn *c, const uint8_t key[NOISE_KEY_LEN]) {
  return sodium_memcmp(key, srv_pub, NOISE_KEY_LEN) == 0 ? 0 : CORDON_E_UNKNOWN_KEY;
}

static const struct net_conn_ops sc_ops = {
    .check_peer = sc_check_peer,
    .on_ready = sc_on_ready,
    .on_record = sc_on_record,
    .on_close = sc_on_close,
};

static struct net_limits client_limits(void) {
  struct net_limits l;
  net_limits_default(&l);
  return l;
}

static void session_connect(int port) {
  struct net_limits l = client_limits();
  sc.ready = sc.closed = false;
  int r =
      net_connect(cloop, "127.0.0.1", port, cli_priv, NOISE_MODE_SESSION, &l, &sc_ops, NULL, &sc.c);
  if (r < 0)
    die("net_connect", r);
  while (!sc.ready && !sc.closed)
    uv_run(cloop, UV_RUN_ONCE);
  if (!sc.ready)
    die("handshake", sc.close_err);
}

static void session_close(void) {
  net_conn_close(sc.c, 0);
  while (!sc.closed)
    uv_run(cloop, UV_RUN_ONCE);
}

static struct stats session_pingpong(int port, uint64_t *samples, size_t warm, size_t n) {
  session_connect(port);
  sc.samples = samples;
  for (int pass = 0; pass < 2; pass++) {
    sc.n = 0;
    sc.want = pass ? n : warm;
    sc.t0 = uv_hrtime();
    net_conn_send(sc.c, ping_buf, PING_LEN);
    while (sc.n < sc.want && !sc.closed)
      uv_run(cloop, UV_RUN_ONCE);
    if (sc.closed)
      die("session closed", sc.close_err);
  }
  session_close();
  return stats_of(samples, n);
}

static void sc_topup(uv_check_t *h) {
  while (sc.c && sc.bulk_sent < sc.bulk_total && net_conn_queued(sc.c) < BULK_QUEUE) {
    int r = net_conn_send(sc.c, bulk_buf, BULK_REC);
    if (r < 0)
      die("net_conn_send", r);
    sc.bulk_sent += BULK_REC;
    if (sc.bulk_sent >= sc.bulk_total)
      net_conn_send(sc.c, (const uint8_t *)"E", 1); /* echoed once all is in */
  }
}

static double session_bulk(int port, uint64_t n_rec) {
  session_connect(port);
  sc.bulk_total = n_rec * BULK_REC;
  sc.bulk_sent = 0;
  sc.bulk_done = false;
  uint64_t t0 = uv_hrtime();
  uv_check_init(cloop, &sc.topup);
  uv_check_start(&sc.topup, sc_topup);
  sc_topup(&sc.topup);
  while (!sc.bulk_done && !sc.closed)
    uv_run(cloop, UV_RUN_ONCE);
  if (sc.closed)
    die("session closed", sc.close_err);
  uint64_t dt = uv_hrtime() - t0;
  uv_close((uv_handle_t *)&sc.topup, NULL);
  session_close();
  return (double)sc.bulk_total / ((double)dt / 1e9) / 1e6;
}

/* connect + handshake + close, n times in a row; samples get connect ->
 * on_ready. Returns the wall time in ns. */
static uint64_t session_handshakes(int port, uint64_t *samples, size_t n) {
  uint64_t t0 = uv_hrtime();
  for (size_t i = 0; i < n; i++) {
    uint64_t t = uv_hrtime();
    session_connect(port);
    samples[i] = uv_hrtime() - t;
    session_close();
  }
  return uv_hrtime() - t0;
}

/* ---- without sockets -------------------------------------------------- */

/* One whole XX handshake, both sides, in memory: ns, median of n. */
static double noise_handshake_cpu_us(uint64_t *samples, size_t n) {
  uint8_t pro[NOISE_PROLOGUE_LEN], m[256], p[8];
  size_t pl, ml, ppl;
  noise_prologue_build(NOISE_WIRE_VERSION, NOISE_MODE_SESSION, pro, sizeof(pro), &pl);
  uint8_t mode = NOISE_MODE_SESSION;
  for (size_t i = 0; i < n; i++) {
    struct noise_handshake *hi = NULL, *hr = NULL;
    struct noise_session *si = NULL, *sr = NULL;
    uint64_t t = uv_hrtime();
    int r = noise_handshake_new(NOISE_INITIATOR, cli_priv, pro, pl, &hi);
    r |= noise_handshake_new(NOISE_RESPONDER, srv_priv, pro, pl, &hr);
    r |= noise_handshake_write_message(hi, &mode, 1, m, sizeof(m), &ml);
    r |= noise_handshake_read_message(hr, m, ml, p, sizeof(p), &ppl);
    r |= noise_handshake_write_message(hr, NULL, 0, m, sizeof(m), &ml);
    r |= noise_handshake_read_message(hi, m, ml, NULL, 0, &ppl);
    r |= noise_handshake_write_message(hi, NULL, 0, m, sizeof(m), &ml);
    r |= noise_handshake_read_message(hr, m, ml, NULL, 0, &ppl);
    r |= noise_handshake_split(&hi, &si);
    r |= noise_handshake_split(&hr, &sr);
    samples[i] = uv_hrtime() - t;
    if (r != 0)
      die("noise handshake", CORDON_E_CRYPTO);
    noise_session_free(si);
    noise_session_free(sr);
  }
  return stats_of(samples, n).median_us;
}

/* libsodium ChaCha20-Poly1305 (IETF) on BULK_REC-byte messages, one core:
 * MB/s, the median of 5 runs of about 64 MiB. */
static void aead_baseline(double *out_enc, double *out_dec) {
  uint8_t k[crypto_aead_chacha20poly1305_ietf_KEYBYTES];
  uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES] = {0};
  uint8_t *ct = malloc(BULK_REC + NOISE_TAG_LEN), *pt = malloc(BULK_REC);
  unsigned long long len;
  uint64_t enc[5], dec[5];
  const int per_run = 1024;
  randombytes_buf(k, sizeof(k));
  for (int run = 0; run < 5; run++) {
    uint64_t t = uv_hrtime();
    for (int i = 0; i < per_run; i++)
      crypto_aead_chacha20poly1305_ietf_encrypt(ct, &len, bulk_buf, BULK_REC, NULL, 0, NULL, nonce,
                                                k);
    enc[run] = uv_hrtime() - t;
    t = uv_hrtime();
    for (int i = 0; i < per_run; i++)
      if (crypto_aead_chacha20poly1305_ietf_decrypt(pt, &len, NULL, ct, BULK_REC + NOISE_TAG_LEN,
                                                    NULL, 0, nonce, k) != 0)
        die("aead", CORDON_E_CRYPTO);
    dec[run] = uv_hrtime() - t;
  }
  qsort(enc, 5, sizeof(enc[0]), cmp_u64);
  qsort(dec, 5, sizeof(dec[0]), cmp_u64);
  double bytes = (double)per_run * BULK_REC;
  *out_enc = bytes / ((double)enc[2] / 1e9) / 1e6;
  *out_dec = bytes / ((double)dec[2] / 1e9) / 1e6;
  free(ct);
  free(pt);
}

int main(int argc, char **argv) {
  size_t n_rt = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
  uint64_t bulk_mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 512;
  size_t n_hs = argc > 3 ? strtoul(argv[3], NULL, 10) : 2000;
  if (n_rt < 100 || bulk_mib < 1 || n_hs < 10) {
    fprintf(stderr, "usage: bench_wire [round_trips >= 100] [bulk_MiB >= 1] [handshakes >= 10]\n");
    return 2;
  }
  if (sodium_init() < 0)
    die("sodium_init", CORDON_E_CRYPTO);
  if (noise_keypair_generate(srv_pub, srv_priv) < 0 ||
      noise_keypair_generate(cli_pub, cli_priv) < 0)
    die("keys", CORDON_E_CRYPTO);
  bulk_buf = malloc(BULK_REC);
  size_t n_samples = n_rt > n_hs ? n_rt : n_hs;
  uint64_t *samples = malloc(n_samples * sizeof(*samples));
  if (!bulk_buf || !samples)
    die("malloc", -ENOMEM);
  randombytes_buf(bulk_buf, BULK_REC);
  randombytes_buf(ping_buf, PING_LEN);

  uv_loop_init(&srv.loop);
  uv_sem_init(&srv.ready, 0);
  uv_thread_create(&srv.thread, srv_main, NULL);
  uv_sem_wait(&srv.ready);
  uv_loop_t client_loop;
  uv_loop_init(&client_loop);
  cloop = &client_loop;

  size_t warm = n_rt / 10;
  /* interleave plain and session twice, keep the better median of each
   * (the same treatment for both) */
  struct stats plain = {1e30, 1e30}, sess = {1e30, 1e30};
  for (int round = 0; round < 2; round++) {
    struct stats p = plain_pingpong(srv.echo_port, samples, warm, n_rt);
    struct stats s = session_pingpong(srv.net_port, samples, warm, n_rt);
    if (p.median_us < plain.median_us)
      plain = p;
    if (s.median_us < sess.median_us)
      sess = s;
  }

  double cpu0 = cpu_s();
  uint64_t wall = session_handshakes(srv.net_port, samples, n_hs);
  double hs_cpu_ms = (cpu_s() - cpu0) * 1e3 / (double)n_hs;
  struct stats hs = stats_of(samples, n_hs);
  double hs_cpu = noise_handshake_cpu_us(samples, n_hs);

  uint64_t n_rec = (bulk_mib << 20) / BULK_REC;
  double gib = (double)(n_rec * BULK_REC) / (double)(1u << 30);
  cpu0 = cpu_s();
  double plain_mbs = plain_bulk(srv.sink_port, n_rec);
  double plain_cpu = (cpu_s() - cpu0) / gib;
  cpu0 = cpu_s();
  double sess_mbs = session_bulk(srv.net_port, n_rec);
  double sess_cpu = (cpu_s() - cpu0) / gib;
  double enc_mbs, dec_mbs;
  aead_baseline(&enc_mbs, &dec_mbs);

  uv_async_send(&srv.stop);
  uv_thread_join(&srv.thread);
  int lr = uv_loop_close(&srv.loop);
  uv_run(cloop, UV_RUN_DEFAULT);
  int lc = uv_loop_close(cloop);

  double ratio_med = sess.median_us / plain.median_us, ratio_p99 = sess.p99_us / plain.p99_us;
  printf("cordon bench_wire: loopback TCP, server loop and client loop in two threads\n\n");
  printf("64-byte ping-pong, %zu round trips (best of 2)   median        p99\n", n_rt);
  printf("  plain libuv TCP                          %8.1f us  %8.1f us\n", plain.median_us,
         plain.p99_us);
  printf("  cordon session (net/conn)                %8.1f us  %8.1f us\n", sess.median_us,
         sess.p99_us);
  printf("  ratio session / plain                    %8.2f     %8.2f      target <= 1.3: %s\n",
         ratio_med, ratio_p99, ratio_med <= 1.3 ? "met" : "MISSED");
  printf("\nhandshakes: connect + Noise XX + close, %zu one after another\n", n_hs);
  printf("  time per handshake, median / p99         %8.3f ms / %.3f ms   target < 1 ms: %s\n",
         hs.median_us / 1e3, hs.p99_us / 1e3, hs.median_us < 1000 ? "met" : "MISSED");
  printf("  handshakes per second (incl. close)      %8.0f /s\n",
         (double)n_hs / ((double)wall / 1e9));
  printf("  CPU per handshake, both sides            %8.3f ms\n", hs_cpu_ms);
  printf("  Noise XX alone, both sides, in memory    %8.3f ms (CPU, median)\n", hs_cpu / 1e3);
  printf("\nbulk, one way, %llu MiB in %d-byte records (64 KiB frames)\n",
         (unsigned long long)bulk_mib, BULK_REC);
  printf("  plain libuv TCP                          %8.0f MB/s   CPU %5.2f s/GiB (both ends)\n",
         plain_mbs, plain_cpu);
  printf("  cordon session (net/conn)                %8.0f MB/s   CPU %5.2f s/GiB (both ends)   "
         "target > 1000 MB/s: %s\n",
         sess_mbs, sess_cpu, sess_mbs > 1000 ? "met" : "MISSED");
  printf("  libsodium ChaCha20-Poly1305 encrypt      %8.0f MB/s   (one core, baseline)\n", enc_mbs);
  printf("  libsodium ChaCha20-Poly1305 decrypt      %8.0f MB/s   (one core, baseline)\n", dec_mbs);
  printf("  session / slower of the two baselines    %8.2f\n",
         sess_mbs / (enc_mbs < dec_mbs ? enc_mbs : dec_mbs));
  printf("  AEAD alone, encrypt + decrypt            CPU %5.2f s/GiB\n",
         (double)(1u << 30) / 1e6 * (1.0 / enc_mbs + 1.0 / dec_mbs));
  printf("\n(%u CPUs online; figures from a shared machine vary between runs)\n",
         (unsigned)uv_available_parallelism());
  if (lr != 0 || lc != 0) {
    fprintf(stderr, "bench_wire: a loop did not close cleanly (%d, %d)\n", lr, lc);
    return 1;
  }
  free(samples);
  free(bulk_buf);
  return 0;
}
