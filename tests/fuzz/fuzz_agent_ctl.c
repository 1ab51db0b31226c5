/* libFuzzer target for the agent's control protocol (agent/ctl.c), what a
 * local client sends to CONFIG/agent.sock.
 *
 * Input: the bytes of a connection, fed to the line reader in pieces whose
 * sizes come from the input itself (the first byte of each piece), as
 * libuv would hand them over; every complete line goes to the request
 * parser. The reader never stores past its buffer, a line it returns is
 * NUL-terminated without its newline and within the limit, the bytes it
 * says it took are within the piece; the parser answers 0 with a known op
 * or CORDON_E_USAGE with a reason, and never touches the op when it
 * refuses. A reply for an accepted request is one JSON line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ctl.h"
#include "core/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      abort();                                                                                     \
  } while (0)

static void check_line(const char *line, size_t len) {
  CHECK(len < AGENT_CTL_REQUEST_MAX);
  CHECK(line[len] == '\0');
  CHECK(memchr(line, '\n', len) == NULL);
  enum agent_ctl_op op = (enum agent_ctl_op)77;
  struct cordon_diag diag = {{0}};
  int r = agent_ctl_parse_request(line, len, &op, &diag);
  if (r == 0) {
    CHECK(op == AGENT_CTL_STATUS || op == AGENT_CTL_METRICS);
    struct agent_health h;
    agent_health_init(&h);
    struct agent_ctl_view v = {
        .pid = 1, .version = "0", .config_dir = "/c", .health = &h, .max_jobs = 1};
    char *reply = agent_ctl_reply(op, &v);
    CHECK(reply);
    size_t n = strlen(reply);
    CHECK(n >= 2 && reply[n - 1] == '\n' && memchr(reply, '\n', n - 1) == NULL);
    free(reply);
  } else {
    CHECK(r == CORDON_E_USAGE);
    CHECK(op == (enum agent_ctl_op)77);
    CHECK(diag.msg[0] != '\0');
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct agent_ctl_reader rd;
  agent_ctl_reader_init(&rd);
  size_t i = 0;
  while (i < size) {
    size_t piece = 1 + data[i] % 97; /* the piece's size, then its bytes */
    i++;
    if (piece > size - i)
      piece = size - i;
    const char *p = (const char *)data + i;
    size_t left = piece;
    while (left > 0) {
      size_t used = 0, len = 0;
      int r = agent_ctl_reader_feed(&rd, p, left, &used, &len);
      CHECK(rd.len < sizeof(rd.buf));
      if (r == CORDON_E_LIMIT)
        return 0; /* the server answers an error and closes */
      if (r == 0)
        break;
      CHECK(r == 1 && used >= 1 && used <= left && p[used - 1] == '\n');
      CHECK(len == rd.len);
      check_line(rd.buf, len);
      agent_ctl_reader_init(&rd);
      p += used;
      left -= used;
    }
    i += piece;
  }
  return 0;
}
