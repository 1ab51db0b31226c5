/* libFuzzer target for the admin API's request line parser
 * (admin_request_parse, server/admin_ops.c): what any local client of
 * STATE/admin.sock may send (docs/protocol/admin.md).
 *
 * The input is one line without its newline. The parser must never read
 * past len, and must agree with itself: an accepted request names an op of
 * the table, passes admin_request_check again, announces at most
 * ADMIN_BODY_MAX bytes, and parses the same once re-encoded; a refusal is
 * one of the codes it documents, with a message. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/admin_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= ADMIN_REQUEST_MAX)
    return 0; /* the socket refuses those before parsing */
  /* an exact-size copy, so that ASan sees any read past the end */
  char *line = malloc(size ? size : 1);
  if (!line)
    return 0;
  memcpy(line, data, size);
  json_t *req = NULL;
  enum admin_op op = ADMIN_OP_COUNT_;
  unsigned long long bytes = 12345;
  struct cordon_diag diag = {{0}};
  int r = admin_request_parse(line, size, &req, &op, &bytes, &diag);
  if (r == 0) {
    CHECK(req && json_is_object(req));
    CHECK((unsigned)op < ADMIN_OP_COUNT_);
    CHECK(bytes <= ADMIN_BODY_MAX);
    CHECK(strcmp(json_string_value(json_object_get(req, "op")), admin_op_name(op)) == 0);
    enum admin_op again;
    CHECK(admin_request_check(req, &again, NULL) == 0 && again == op);
    /* re-encoded, it parses the same */
    char *text = json_dumps(req, JSON_COMPACT);
    if (text) {
      json_t *req2 = NULL;
      enum admin_op op2;
      unsigned long long bytes2;
      CHECK(admin_request_parse(text, strlen(text), &req2, &op2, &bytes2, NULL) == 0);
      CHECK(op2 == op && bytes2 == bytes && json_equal(req, req2));
      json_decref(req2);
      free(text);
    }
    json_decref(req);
  } else {
    CHECK(r == CORDON_E_USAGE || r == CORDON_E_PACKAGE_TOO_LARGE);
    CHECK(diag.msg[0] != '\0');
    CHECK(bytes == 12345 || (r == CORDON_E_USAGE && bytes <= ADMIN_BODY_MAX));
  }
  free(line);
  return 0;
}
