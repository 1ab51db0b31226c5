/* File helpers both programs and the platform layer use: whole writes,
 * atomic replacement, bounded reads of small files. Plain POSIX calls
 * (on Windows through compat/). Nothing here prints. */
#ifndef CORDON_CORE_FILE_H
#define CORDON_CORE_FILE_H

#include <stddef.h>

#include "core/error.h"

/* Write all len bytes (retrying short writes and EINTR). 0 or -errno. */
int core_write_all(int fd, const void *buf, size_t len);

/* Replace dir/name with data: written to dir/.name.tmp (O_EXCL, O_NOFOLLOW,
 * created with mode), fsynced, renamed over dir/name, then dir fsynced.
 * Readers see the old file or the new one, never a part. On failure
 * dir/name is unchanged and the temporary file is gone. 0 or -errno. */
int core_write_file_atomic(const char *dir, const char *name, const void *data, size_t len,
                           unsigned mode);

/* Read a regular file of at most max bytes into a fresh NUL-terminated
 * buffer (*out_buf, caller frees; *out_len excludes the NUL). The path is
 * opened O_NONBLOCK so a FIFO is refused, not waited on. Failures of the
 * system calls return -errno; a file that is not regular, larger than max
 * or grew while read returns bad_code. diag says which, prefixed by
 * "<what>: ". Outputs are written only on success. */
int core_read_file(const char *path, size_t max, int bad_code, const char *what, char **out_buf,
                   size_t *out_len, struct cordon_diag *diag);

#endif
