/* server/http.c: the request parser, table-driven, and the responder on a
 * real libuv loop and real loopback sockets (its limits: size, time,
 * connections, one response then close). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "server/http.h"

struct parse_case {
  const char *in;
  int want; /* > 0: complete (its length is strlen(in) unless trailing); 0; -status */
  const char *path;
};

static const struct parse_case cases[] = {
    {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 1, "/metrics"},
    {"GET /metrics HTTP/1.0\r\n\r\n", 1, "/metrics"},
    {"GET /healthz?verbose=1 HTTP/1.1\r\n\r\n", 1, "/healthz"},
    {"GET /a#frag HTTP/1.1\r\n\r\n", 1, "/a"},
    {"GET / HTTP/1.1\n\n", 1, "/"},                        /* bare LF */
    {"\r\nGET / HTTP/1.1\r\n\r\n", 1, "/"},                /* a leading empty line */
    {"GET / HTTP/1.1\r\nA: b\tc\r\nX-Y:\r\n\r\n", 1, "/"}, /* HT and an empty value */
    {"GET /metrics HTTP/1.1\r\nHost: x\r\n", 0, NULL},     /* not finished */
    {"GET /metr", 0, NULL},
    {"", 0, NULL},
    {"GET /metrics HTTP/1.1\r", 0, NULL},
    {"POST /metrics HTTP/1.1\r\n\r\n", -405, NULL},
    {"HEAD /metrics HTTP/1.1\r\n\r\n", -405, NULL},
    {"get /metrics HTTP/1.1\r\n\r\n", -405, NULL},
    {"GET /metrics HTTP/2.0\r\n\r\n", -505, NULL},
    {"GET /metrics HTTP/1.2\r\n\r\n", -505, NULL},
    {"GET /metrics HTTP/1.1 \r\n\r\n", -400, NULL},
    {"GET  /metrics HTTP/1.1\r\n\r\n", -400, NULL},
    {"GET metrics HTTP/1.1\r\n\r\n", -400, NULL}, /* not origin-form */
    {"GET http://x/metrics HTTP/1.1\r\n\r\n", -400, NULL},
    {"GET /metrics\r\n\r\n", -400, NULL}, /* HTTP/0.9 */
    {"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", -400, NULL},
    {"GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n", -400, NULL},
    {"GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", -400, NULL},
    {"GET /metrics HTTP/1.1\r\nA: b\x01\r\n\r\n", -400, NULL}, /* a control byte */
    {"GET /me\x7ftrics HTTP/1.1\r\n\r\n", -400, NULL},
    {"GET /metrics HTTP/1.1\rX\n\r\n", -400, NULL},             /* a lone CR */
    {"GET /metrics HTTP/1.1\r\nA:\xff\r\n\r\n", 1, "/metrics"}, /* obs-text is allowed */
};

Test(http_parse, the_table) {
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct parse_case *c = &cases[i];
    struct http_request r;
    memset(&r, 0x5a, sizeof(r));
    int got = http_request_parse(c->in, strlen(c->in), &r);
    if (c->want > 0) {
      cr_assert_eq(got, (int)strlen(c->in), "case %zu '%s': %d", i, c->in, got);
      cr_assert_str_eq(r.path, c->path, "case %zu", i);
      cr_assert_str_eq(r.method, "GET");
    } else {
      cr_assert_eq(got, c->want, "case %zu '%s': %d", i, c->in, got);
      cr_assert_eq(r.path[0], 0x5a, "case %zu: out is untouched", i);
    }
  }
}

Test(http_parse, a_nul_byte_is_malformed) {
  static const char req[] = "GET /metrics HTTP/1.1\r\nA: b\0c\r\n\r\n";
  struct http_request r;
  cr_assert_eq(http_request_parse(req, sizeof(req) - 1, &r), -400);
}

Test(http_parse, what_follows_the_head_is_not_part_of_it) {
  static const char req[] = "GET /x HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n";
  struct http_request r;
  cr_assert_eq(http_request_parse(req, strlen(req), &r), 19);
  cr_assert_str_eq(r.path, "/x");
}

Test(http_parse, a_long_target_is_414_even_before_the_line_ends) {
  static char req[HTTP_REQUEST_MAX + 64];
  int n = snprintf(req, sizeof(req), "GET /");
  memset(req + n, 'a', HTTP_PATH_MAX);
  req[n + HTTP_PATH_MAX] = '\0';
  struct http_request r;
  cr_assert_eq(http_request_parse(req, strlen(req), &r), -414);
  snprintf(req + n + HTTP_PATH_MAX, sizeof(req) - (size_t)n - HTTP_PATH_MAX, " HTTP/1.1\r\n\r\n");
  cr_assert_eq(http_request_parse(req, strlen(req), &r), -414);
  /* one byte shorter fits */
  n = snprintf(req, sizeof(req), "GET /");
  memset(req + n, 'a', HTTP_PATH_MAX - 2);
  snprintf(req + n + HTTP_PATH_MAX - 2, 32, " HTTP/1.1\r\n\r\n");
  cr_assert_gt(http_request_parse(req, strlen(req), &r), 0);
  cr_assert_eq(strlen(r.path), HTTP_PATH_MAX - 1);
}

Test(http_parse, a_head_without_an_end_within_the_limit_is_431) {
  static char req[HTTP_REQUEST_MAX + 16];
  int n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\n");
  while ((size_t)n + 8 < HTTP_REQUEST_MAX)
    n += snprintf(req + n, sizeof(req) - (size_t)n, "A: b\r\n");
  struct http_request r;
  cr_assert_eq(http_request_parse(req, (size_t)n, &r), 0, "not yet at the limit");
  while ((size_t)n < HTTP_REQUEST_MAX + 8)
    req[n++] = 'x';
  cr_assert_eq(http_request_parse(req, (size_t)n, &r), -431);
  cr_assert_eq(http_request_parse(req, HTTP_REQUEST_MAX, &r), -431);
}

Test(http_parse, every_prefix_of_a_request_is_incomplete) {
  static const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: */*\r\n\r\n";
  struct http_request r;
  for (size_t i = 0; i < sizeof(req) - 1; i++)
    cr_assert_eq(http_request_parse(req, i, &r), 0, "prefix %zu", i);
  cr_assert_eq(http_request_parse(req, sizeof(req) - 1, &r), (int)sizeof(req) - 1);
}

/* ---- the responder, on its own loop in a thread ---- */

static uv_loop_t loop;
static uv_async_t stop_async;
static struct http_server *srv;
static int port;
static pthread_t thread;
static int handled;

static void handler(void *data, const struct http_request *req, struct http_response *out) {
  (void)data;
  handled++;
  if (strcmp(req->path, "/big") == 0) {
    out->len = 200000;
    out->body = malloc(out->len);
    memset(out->body, 'b', out->len);
    out->status = 200;
    return;
  }
  if (strcmp(req->path, "/ok") != 0) {
    out->status = 404;
    return;
  }
  out->status = 200;
  out->body = strdup("fine\n");
  out->len = 5;
  out->content_type = "text/plain; version=0.0.4";
}

static void on_stop(uv_async_t *a) {
  http_server_close(srv);
  uv_close((uv_handle_t *)a, NULL);
}

static void *run_loop(void *arg) {
  (void)arg;
  uv_run(&loop, UV_RUN_DEFAULT);
  return NULL;
}

static void setup(void) {
  cr_assert_eq(uv_loop_init(&loop), 0);
  cr_assert_eq(http_server_open(&loop, "127.0.0.1", 0, handler, NULL, &srv), 0);
  port = http_server_port(srv);
  cr_assert_gt(port, 0);
  uv_async_init(&loop, &stop_async, on_stop);
  pthread_create(&thread, NULL, run_loop, NULL);
}

static void teardown(void) {
  uv_async_send(&stop_async);
  pthread_join(thread, NULL);
  cr_assert_eq(uv_loop_close(&loop), 0, "every handle was closed");
}

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

/* Everything the server sends until it closes. */
static size_t drain(int fd, char *buf, size_t size) {
  size_t n = 0;
  ssize_t k;
  while (n + 1 < size && (k = read(fd, buf + n, size - 1 - n)) > 0)
    n += (size_t)k;
  buf[n] = '\0';
  return n;
}

static size_t exchange(const char *req, size_t len, char *buf, size_t size) {
  int fd = dial();
  cr_assert_eq(write(fd, req, len), (ssize_t)len);
  size_t n = drain(fd, buf, size);
  close(fd);
  return n;
}

TestSuite(http, .init = setup, .fini = teardown, .timeout = 60);

Test(http, one_get_one_response_then_close) {
  static char buf[4096];
  static const char req[] = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";
  exchange(req, sizeof(req) - 1, buf, sizeof(buf));
  cr_assert(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", buf);
  cr_assert(strstr(buf, "\r\nContent-Length: 5\r\n"), "%s", buf);
  cr_assert(strstr(buf, "\r\nConnection: close\r\n"), "%s", buf);
  cr_assert(strstr(buf, "\r\nContent-Type: text/plain; version=0.0.4\r\n"), "%s", buf);
  cr_assert(strcmp(strstr(buf, "\r\n\r\n") + 4, "fine\n") == 0, "%s", buf);
}

Test(http, a_pipelined_second_request_gets_nothing_but_the_first_answer_arrives) {
  static char buf[4096];
  static const char req[] = "GET /ok HTTP/1.1\r\n\r\nGET /ok HTTP/1.1\r\n\r\nGARBAGE";
  exchange(req, sizeof(req) - 1, buf, sizeof(buf));
  cr_assert(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", buf);
  cr_assert_eq(strstr(buf + 1, "HTTP/1.1"), NULL, "one response: %s", buf);
}

Test(http, errors_are_answered_with_their_status) {
  static char buf[4096];
  exchange("GET /nope HTTP/1.1\r\n\r\n", 22, buf, sizeof(buf));
  cr_assert(strncmp(buf, "HTTP/1.1 404 Not Found\r\n", 24) == 0, "%s", buf);
  exchange("DELETE /ok HTTP/1.1\r\n\r\n", 23, buf, sizeof(buf));
  cr_assert(strncmp(buf, "HTTP/1.1 405 ", 13) == 0, "%s", buf);
  exchange("GET /ok HTTP/1.1\r\nbad\r\n\r\n", 25, buf, sizeof(buf));
  cr_assert(strncmp(buf, "HTTP/1.1 400 ", 13) == 0, "%s", buf);
}

Test(http, an_oversized_head_is_refused_at_the_limit_without_reading_on) {
  static char req[3 * HTTP_REQUEST_MAX];
  int n = snprintf(req, sizeof(req), "GET /ok HTTP/1.1\r\n");
  memset(req + n, 'h', sizeof(req) - (size_t)n);
  int fd = dial();
  (void)!write(fd, req, sizeof(req)); /* the server may close before all of it */
  static char buf[4096];
  drain(fd, buf, sizeof(buf));
  close(fd);
  cr_assert(strncmp(buf, "HTTP/1.1 431 ", 13) == 0, "%s", buf);
  cr_assert_eq(handled, 0, "never reached the handler");
}

Test(http, a_large_body_is_written_whole) {
  static char buf[300000];
  size_t n = exchange("GET /big HTTP/1.1\r\n\r\n", 21, buf, sizeof(buf));
  char *body = strstr(buf, "\r\n\r\n");
  cr_assert(body);
  cr_assert_eq(n - (size_t)(body + 4 - buf), 200000);
}

Test(http, a_silent_connection_is_closed_after_the_timeout) {
  int fd = dial();
  (void)!write(fd, "GET /ok HT", 10);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  static char buf[64];
  size_t n = drain(fd, buf, sizeof(buf));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  close(fd);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  cr_assert_eq(n, 0, "closed without an answer: %s", buf);
  cr_assert(secs > HTTP_TIMEOUT_MS / 1000.0 - 0.5 && secs < HTTP_TIMEOUT_MS / 1000.0 + 3, "%.2f s",
            secs);
}

Test(http, connections_over_the_cap_are_closed_and_the_rest_still_served) {
  int fds[HTTP_MAX_CONNS + 4];
  for (int i = 0; i < HTTP_MAX_CONNS; i++)
    fds[i] = dial();
  /* let the loop accept them */
  struct timespec ts = {0, 200000000};
  nanosleep(&ts, NULL);
  int extra = dial();
  static char buf[4096];
  cr_assert_eq(drain(extra, buf, sizeof(buf)), 0, "over the cap: closed at once");
  close(extra);
  close(fds[0]);
  nanosleep(&ts, NULL);
  static const char req[] = "GET /ok HTTP/1.1\r\n\r\n";
  exchange(req, sizeof(req) - 1, buf, sizeof(buf));
  cr_assert(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "a freed slot serves again: %s", buf);
  for (int i = 1; i < HTTP_MAX_CONNS; i++)
    close(fds[i]);
}
