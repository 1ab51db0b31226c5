#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int core_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int core_write_file_atomic(const char *dir, const char *name, const void *data, size_t len,
                           unsigned mode) {
  char tmp[PATH_MAX], dst[PATH_MAX];
  if (snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name) >= (int)sizeof(tmp) ||
      snprintf(dst, sizeof(dst), "%s/%s", dir, name) >= (int)sizeof(dst))
    return -ENAMETOOLONG;
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0)
    return -errno;
  int r = core_write_all(fd, data, len);
  if (r == 0 && fsync(fd) < 0)
    r = -errno;
  close(fd);
  if (r == 0 && rename(tmp, dst) < 0)
    r = -errno;
  if (r < 0) {
    unlink(tmp);
    return r;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

int core_read_file(const char *path, size_t max, int bad_code, const char *what, char **out_buf,
                   size_t *out_len, struct cordon_diag *diag) {
  /* O_NONBLOCK: a FIFO must be refused, not waited on */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: cannot open %s: %s", what, path, strerror(errno));
  int r;
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) < 0) {
    r = cordon_diag_set(diag, -errno, "%s: cannot stat %s: %s", what, path, strerror(errno));
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    r = cordon_diag_set(diag, bad_code, "%s: %s is not a regular file", what, path);
    goto out_close;
  }
  if ((unsigned long long)st.st_size > max) {
    r = cordon_diag_set(diag, bad_code, "%s: %s is larger than %zu bytes", what, path, max);
    goto out_close;
  }
  buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    r = -ENOMEM;
    goto out_close;
  }
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, (size_t)st.st_size + 1 - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r = cordon_diag_set(diag, -errno, "%s: cannot read %s: %s", what, path, strerror(errno));
      goto out_free;
    }
    if (n == 0)
      break;
    have += (size_t)n;
    if (have > (size_t)st.st_size) {
      r = cordon_diag_set(diag, bad_code, "%s: %s grew while being read", what, path);
      goto out_free;
    }
  }
  buf[have] = '\0';
  *out_buf = buf;
  *out_len = have;
  buf = NULL;
  r = 0;
out_free:
  free(buf);
out_close:
  close(fd);
  return r;
}
