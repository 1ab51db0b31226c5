/* libFuzzer target for the HTTP request parser (server/http.c).
 *
 * The input is a request head as a peer would send it. The parser must
 * never read past len, and must agree with itself: a complete head parses
 * the same whatever follows it, every shorter prefix of it is incomplete
 * or the same error, an answer is one of the statuses it documents, and
 * the path it returns is a NUL-terminated origin-form target without '?'
 * or '#'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

static int known_status(int s) {
  return s == 400 || s == 405 || s == 414 || s == 431 || s == 505;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 2 * HTTP_REQUEST_MAX)
    return 0;
  /* an exact-size copy, so that ASan sees any read past the end */
  char *buf = malloc(size ? size : 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  struct http_request r;
  memset(&r, 0, sizeof(r));
  int got = http_request_parse(buf, size, &r);
  if (got > 0) {
    CHECK((size_t)got <= size && (size_t)got <= HTTP_REQUEST_MAX);
    CHECK(buf[got - 1] == '\n');
    size_t pl = strnlen(r.path, sizeof(r.path));
    CHECK(pl < sizeof(r.path) && r.path[0] == '/');
    CHECK(!strchr(r.path, '?') && !strchr(r.path, '#'));
    for (size_t i = 0; i < pl; i++)
      CHECK((unsigned char)r.path[i] > ' ' && (unsigned char)r.path[i] < 0x7f);
    CHECK(strcmp(r.method, "GET") == 0 && (r.minor == 0 || r.minor == 1));
    /* the head alone parses the same */
    struct http_request again;
    CHECK(http_request_parse(buf, (size_t)got, &again) == got);
    CHECK(strcmp(again.path, r.path) == 0);
    /* and no prefix of it is complete */
    if (got > 1) {
      int p = http_request_parse(buf, (size_t)got - 1, &again);
      CHECK(p <= 0);
    }
  } else if (got == 0) {
    CHECK(size < HTTP_REQUEST_MAX);
  } else {
    CHECK(known_status(-got));
    /* an error seen in a prefix is not undone by more bytes of the same
     * request: a longer input gives an error too (maybe another one) */
    if (size + 1 <= 2 * HTTP_REQUEST_MAX) {
      char *more = malloc(size + 1);
      if (more) {
        memcpy(more, buf, size);
        more[size] = '\n';
        struct http_request m;
        CHECK(http_request_parse(more, size + 1, &m) < 0);
        free(more);
      }
    }
  }
  free(buf);
  return 0;
}
