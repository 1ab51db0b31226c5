/* A minimal HTTP/1.1 responder for /metrics and /healthz, on libuv.
 *
 * Only what a Prometheus scraper and a health check send: GET, a request
 * head of at most HTTP_REQUEST_MAX bytes (in a buffer of that size that
 * each connection has from its accept: nothing a peer sends makes it
 * allocate), one response, then the connection is closed. A request that
 * is not complete HTTP_TIMEOUT_MS after the accept is dropped; at most
 * HTTP_MAX_CONNS connections at once (more are accepted and closed). No
 * keep-alive, no bodies, no chunked encoding, no TLS: bind it to loopback
 * or a management network (docs/OPERATIONS.md, "Metrics").
 *
 * http_request_parse() is the whole parser, pure (tests/fuzz/fuzz_http.c). */
#ifndef CORDON_SERVER_HTTP_H
#define CORDON_SERVER_HTTP_H

#include <stddef.h>
#include <uv.h>

#define HTTP_REQUEST_MAX 4096 /* bytes of a request head, CRLFCRLF included */
#define HTTP_PATH_MAX 256     /* bytes of the request target */
#define HTTP_MAX_CONNS 32
#define HTTP_TIMEOUT_MS 5000

struct http_request {
  char method[8];
  char path[HTTP_PATH_MAX]; /* the target up to '?', NUL-terminated, starts with '/' */
  int minor;                /* HTTP/1.<minor>: 0 or 1 */
};

/* Parse the request head in buf[0..len). Lines end in CRLF (a bare LF is
 * accepted); the head ends at the first empty line. Returns
 *   > 0  the head is complete and well formed: its length; *out is set
 *   0    not complete yet (only while len < HTTP_REQUEST_MAX)
 *   < 0  the HTTP status to answer, negated: 400 malformed (a NUL or
 *        control byte, a bad request line or header line, a folded
 *        header), 405 a method other than GET, 414 a target of
 *        HTTP_PATH_MAX bytes or more, 431 no end within HTTP_REQUEST_MAX
 *        bytes, 505 a version other than HTTP/1.0 and HTTP/1.1.
 * *out is written only when the result is > 0. */
int http_request_parse(const char *buf, size_t len, struct http_request *out);

/* The reason phrase of a status this responder uses ("OK", "Not Found"...). */
const char *http_reason(int status);

struct http_response {
  int status;
  const char *content_type; /* static */
  char *body;               /* heap (malloc), taken by the responder; NULL: empty */
  size_t len;
};

/* Called for each well-formed GET; fills out (status 0 means 500). */
typedef void http_handler_fn(void *data, const struct http_request *req, struct http_response *out);

struct http_server;

/* Listen on host:port (an IPv4 or IPv6 literal). 0 and *out_server, or a
 * negative uv error; on failure the loop must run to finish the close. */
int http_server_open(uv_loop_t *loop, const char *host, int port, http_handler_fn *handler,
                     void *data, struct http_server **out_server);
/* The bound port (useful after port 0). */
int http_server_port(const struct http_server *s);
/* Stop listening and close every connection; freed once the loop has
 * closed its handles. NULL-safe. */
void http_server_close(struct http_server *s);

#endif
