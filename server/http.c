/* A minimal HTTP/1.1 responder (server/http.h). */
#include "server/http.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parser: pure ---- */

static bool is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The end of the line starting at p (its '\n'), or NULL when there is none
 * before end. A byte below 0x20 other than HT, CR (only right before the
 * LF), or 0x7f makes the line malformed: *bad. */
static const char *line_end(const char *p, const char *end, bool *bad) {
  for (const char *q = p; q < end; q++) {
    unsigned char c = (unsigned char)*q;
    if (c == '\n')
      return q;
    if (c == '\r' && (q + 1 >= end || q[1] == '\n'))
      continue;
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      *bad = true;
      return NULL;
    }
  }
  return NULL;
}

/* The length of a line without its CR. */
static size_t content_len(const char *p, const char *nl) {
  size_t n = (size_t)(nl - p);
  return n && p[n - 1] == '\r' ? n - 1 : n;
}

static int parse_request_line(const char *p, size_t n, struct http_request *r) {
  size_t i = 0, m = 0;
  while (i < n && is_tchar((unsigned char)p[i]))
    i++;
  m = i;
  if (m == 0 || i >= n || p[i] != ' ')
    return -400;
  size_t t0 = ++i;
  while (i < n && p[i] != ' ')
    i++;
  size_t tn = i - t0;
  if (i >= n || tn == 0)
    return -400;
  if (tn >= HTTP_PATH_MAX)
    return -414;
  const char *ver = p + i + 1;
  size_t vn = n - i - 1;
  if (vn != 8 || memcmp(ver, "HTTP/", 5) != 0 || ver[6] != '.' || ver[5] < '0' || ver[5] > '9' ||
      ver[7] < '0' || ver[7] > '9')
    return -400;
  if (ver[5] != '1' || (ver[7] != '0' && ver[7] != '1'))
    return -505;
  if (p[t0] != '/')
    return -400; /* only origin-form: no absolute URI, no '*' */
  for (size_t k = t0; k < t0 + tn; k++)
    if ((unsigned char)p[k] <= ' ' || (unsigned char)p[k] >= 0x7f)
      return -400;
  if (m >= sizeof(r->method) || memcmp(p, "GET", 3) != 0 || m != 3)
    return -405;
  memcpy(r->method, p, m);
  r->method[m] = '\0';
  size_t pn = 0;
  while (pn < tn && p[t0 + pn] != '?' && p[t0 + pn] != '#')
    pn++;
  memcpy(r->path, p + t0, pn);
  r->path[pn] = '\0';
  r->minor = ver[7] - '0';
  return 0;
}

static int parse_header_line(const char *p, size_t n) {
  if (p[0] == ' ' || p[0] == '\t')
    return -400; /* obsolete line folding */
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)p[i]))
    i++;
  if (i == 0 || i >= n || p[i] != ':')
    return -400;
  return 0;
}

int http_request_parse(const char *buf, size_t len, struct http_request *out) {
  const char *p = buf, *end = buf + (len < HTTP_REQUEST_MAX ? len : HTTP_REQUEST_MAX);
  struct http_request r;
  bool first = true, bad = false;
  int status = 0;
  /* a request may be preceded by empty lines (RFC 9112 section 2.2) */
  while (p < end && (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n')))
    p += *p == '\r' ? 2 : 1;
  for (;;) {
    const char *nl = line_end(p, end, &bad);
    if (bad)
      return -400;
    if (!nl) {
      /* an unfinished request line can already hold too long a target */
      const char *sp = first ? memchr(p, ' ', (size_t)(end - p)) : NULL;
      if (sp) {
        const char *sp2 = memchr(sp + 1, ' ', (size_t)(end - sp - 1));
        if ((size_t)((sp2 ? sp2 : end) - sp - 1) >= HTTP_PATH_MAX)
          return -414;
      }
      if (len >= HTTP_REQUEST_MAX)
        return -431;
      return status < 0 ? status : 0;
    }
    size_t n = content_len(p, nl);
    if (first) {
      int rc = parse_request_line(p, n, &r);
      if (rc < 0 && rc != -405)
        return rc;
      status = rc; /* a method error is answered once the head is well formed */
      first = false;
    } else if (n == 0) {
      if (status < 0)
        return status;
      *out = r;
      return (int)(nl + 1 - buf);
    } else if (parse_header_line(p, n) < 0) {
      return -400;
    }
    p = nl + 1;
  }
}

const char *http_reason(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 414:
    return "URI Too Long";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return "Unknown";
  }
}

/* ---- the responder ---- */

struct http_server {
  uv_tcp_t tcp;
  http_handler_fn *handler;
  void *data;
  struct http_conn *conns;
  unsigned n_conns;
  bool closing;
};

struct http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t write;
  uv_shutdown_t shutdown;
  struct http_server *srv;
  struct http_conn *next;
  char buf[HTTP_REQUEST_MAX];
  size_t len;
  char *out;   /* the response, while it is written */
  int handles; /* open handles: freed at 0 */
  bool answered, closing;
};

static void conn_handle_closed(uv_handle_t *h) {
  struct http_conn *c = h->data;
  if (--c->handles > 0)
    return;
  free(c->out);
  free(c);
}

static void conn_close(struct http_conn *c) {
  if (c->closing)
    return;
  c->closing = true;
  struct http_server *s = c->srv;
  for (struct http_conn **pp = &s->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  s->n_conns--;
  uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

static void on_timeout(uv_timer_t *t) {
  conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)req;
  (void)status;
  /* the FIN is out; what the peer still sends is read and dropped until
   * it closes or the timer fires, so that unread bytes never turn our
   * close into a reset that could discard the response */
}

static void on_written(uv_write_t *req, int status) {
  struct http_conn *c = req->data;
  free(c->out);
  c->out = NULL;
  if (status < 0 || c->closing ||
      uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
    conn_close(c);
}

static void respond(struct http_conn *c, int status, const char *type, char *body, size_t len) {
  c->answered = true;
  if (status == 0)
    status = 500;
  char head[256];
  int hn = snprintf(head, sizeof(head),
                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                    "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                    status, http_reason(status), type ? type : "text/plain; charset=utf-8", len);
  c->out = malloc((size_t)hn + len);
  if (!c->out) {
    free(body);
    conn_close(c);
    return;
  }
  memcpy(c->out, head, (size_t)hn);
  if (len)
    memcpy(c->out + hn, body, len);
  free(body);
  uv_buf_t b = uv_buf_init(c->out, (unsigned)((size_t)hn + len));
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0)
    conn_close(c);
}

static void respond_text(struct http_conn *c, int status, const char *text) {
  char *body = strdup(text);
  respond(c, status, NULL, body, body ? strlen(body) : 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct http_conn *c = h->data;
  (void)suggested;
  if (c->answered) { /* read and dropped */
    buf->base = c->buf;
    buf->len = sizeof(c->buf);
    return;
  }
  buf->base = c->buf + c->len;
  buf->len = sizeof(c->buf) - c->len; /* never 0 unanswered: 431 at a full buffer */
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  struct http_conn *c = st->data;
  (void)buf;
  if (n < 0) {
    conn_close(c);
    return;
  }
  if (c->answered || n == 0)
    return;
  c->len += (size_t)n;
  struct http_request req;
  int r = http_request_parse(c->buf, c->len, &req);
  if (r == 0)
    return;
  if (r < 0) {
    respond_text(c, -r, http_reason(-r));
    return;
  }
  struct http_response resp = {0};
  c->srv->handler(c->srv->data, &req, &resp);
  respond(c, resp.status, resp.content_type, resp.body, resp.body ? resp.len : 0);
}

static void on_connection(uv_stream_t *server, int status) {
  struct http_server *s = server->data;
  if (status < 0 || s->closing)
    return;
  struct http_conn *c = calloc(1, sizeof(*c));
  if (!c)
    return;
  c->srv = s;
  uv_tcp_init(server->loop, &c->tcp);
  uv_timer_init(server->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles = 2;
  c->next = s->conns;
  s->conns = c;
  s->n_conns++;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 || s->n_conns > HTTP_MAX_CONNS) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timeout, HTTP_TIMEOUT_MS, 0);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    conn_close(c);
}

static void server_closed(uv_handle_t *h) {
  free(h->data);
}

int http_server_open(uv_loop_t *loop, const char *host, int port, http_handler_fn *handler,
                     void *data, struct http_server **out_server) {
  struct sockaddr_storage ss;
  int r = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
  if (r < 0)
    r = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
  if (r < 0)
    return r;
  struct http_server *s = calloc(1, sizeof(*s));
  if (!s)
    return UV_ENOMEM;
  s->handler = handler;
  s->data = data;
  uv_tcp_init(loop, &s->tcp);
  s->tcp.data = s;
  r = uv_tcp_bind(&s->tcp, (const struct sockaddr *)&ss, 0);
  if (r == 0)
    r = uv_listen((uv_stream_t *)&s->tcp, 16, on_connection);
  if (r < 0) {
    uv_close((uv_handle_t *)&s->tcp, server_closed);
    return r;
  }
  *out_server = s;
  return 0;
}

int http_server_port(const struct http_server *s) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  if (uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len) < 0)
    return -1;
  if (ss.ss_family == AF_INET6)
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void http_server_close(struct http_server *s) {
  if (!s || s->closing)
    return;
  s->closing = true;
  while (s->conns)
    conn_close(s->conns);
  uv_close((uv_handle_t *)&s->tcp, server_closed);
}
