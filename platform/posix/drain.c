#include "platform/posix/drain.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

bool posix_drain_fd(int fd, struct result_buf *b, size_t cap) {
  uint8_t chunk[16384];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      result_buf_append(b, chunk, (size_t)n, cap);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    return false;
  }
}
