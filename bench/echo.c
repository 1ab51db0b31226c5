/* bench/echo: the baseline of bench/scale: a plain libuv TCP echo server on
 * loopback (no encryption, no framing, no database). It prints
 * "echo listening on 127.0.0.1:PORT" and echoes every byte back to its
 * connection until killed. Usage: bench_echo [PORT] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

static uv_loop_t *loop;
static char rbuf[64 << 10]; /* one read buffer for every connection, as the server's */

struct wreq {
  uv_write_t req;
  char buf[];
};

static void on_written(uv_write_t *req, int status) {
  (void)status;
  free(req);
}

static void on_closed(uv_handle_t *h) {
  free(h);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  if (nread < 0) {
    uv_close((uv_handle_t *)st, on_closed);
    return;
  }
  if (nread == 0)
    return;
  struct wreq *w = malloc(sizeof(*w) + (size_t)nread);
  if (!w)
    return;
  memcpy(w->buf, buf->base, (size_t)nread);
  uv_buf_t b = uv_buf_init(w->buf, (unsigned)nread);
  if (uv_write(&w->req, st, &b, 1, on_written) < 0)
    free(w);
}

static void on_connection(uv_stream_t *server, int status) {
  if (status < 0)
    return;
  uv_tcp_t *c = malloc(sizeof(*c));
  if (!c)
    return;
  uv_tcp_init(loop, c);
  if (uv_accept(server, (uv_stream_t *)c) < 0) {
    uv_close((uv_handle_t *)c, on_closed);
    return;
  }
  uv_tcp_nodelay(c, 1);
  uv_read_start((uv_stream_t *)c, on_alloc, on_read);
}

int main(int argc, char **argv) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  loop = uv_default_loop();
  uv_tcp_t server;
  uv_tcp_init(loop, &server);
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", argc > 1 ? atoi(argv[1]) : 0, &addr);
  if (uv_tcp_bind(&server, (struct sockaddr *)&addr, 0) < 0 ||
      uv_listen((uv_stream_t *)&server, 128, on_connection) < 0) {
    fprintf(stderr, "bench_echo: cannot listen\n");
    return 1;
  }
  struct sockaddr_in bound;
  int len = sizeof(bound);
  uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
  printf("echo listening on 127.0.0.1:%d\n", ntohs(bound.sin_port));
  fflush(stdout);
  return uv_run(loop, UV_RUN_DEFAULT);
}
