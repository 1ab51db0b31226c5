/* Reading a job's output pipe (shared by the Linux and macOS layers). */
#ifndef CORDON_PLATFORM_POSIX_DRAIN_H
#define CORDON_PLATFORM_POSIX_DRAIN_H

#include <stdbool.h>
#include <stddef.h>

#include "core/result.h"

/* Read everything a non-blocking fd has now into b (at most cap kept).
 * Returns false at EOF or on an error, true when it would block. */
bool posix_drain_fd(int fd, struct result_buf *b, size_t cap);

#endif
