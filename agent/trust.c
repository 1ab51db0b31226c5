#include "agent/trust.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat/posix.h"
#include "proto/keyfile.h"

static int load_fd(struct cpkg_trust *trust, int fd, const char *name, struct cordon_diag *diag) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", name, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a regular file", name);
  char text[KEYFILE_MAX_BYTES + 1];
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, text + len, sizeof(text) - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return cordon_diag_set(diag, -errno, "%s: %s", name, strerror(errno));
    if (n == 0 || (len += (size_t)n) == sizeof(text))
      break;
  }
  uint8_t pk[KEYFILE_KEY_SIZE];
  struct cordon_diag d = {{0}};
  int err = keyfile_parse(KEYFILE_PUBLISHER_PUBLIC, text, len, pk, &d);
  if (err)
    return cordon_diag_set(diag, err, "%s: %s", name, d.msg);
  err = cpkg_trust_add(trust, pk);
  if (err == CORDON_E_LIMIT)
    return cordon_diag_set(diag, err, "%s: more than %u trusted keys", name, CPKG_MAX_TRUSTED_KEYS);
  return err;
}

int agent_trust_load_file(struct cpkg_trust *trust, const char *path, struct cordon_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
  int err = load_fd(trust, fd, path, diag);
  close(fd);
  return err;
}

int agent_trust_load_dir(struct cpkg_trust *trust, const char *dir, struct cordon_diag *diag) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT)
      return 0;
    return cordon_diag_set(diag, -errno, "%s: %s", dir, strerror(errno));
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    int e = errno;
    close(dfd);
    return cordon_diag_set(diag, -e, "%s: %s", dir, strerror(e));
  }
  int err = 0;
  struct dirent *de;
  while (!err && (de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    if (n <= 4 || strcmp(de->d_name + n - 4, ".pub") != 0)
      continue;
    char name[4096];
    snprintf(name, sizeof(name), "%s/%s", dir, de->d_name);
    /* The directory is the owner's; a link in it is not followed. */
    int fd =
        openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      err = cordon_diag_set(diag, errno == ELOOP ? CORDON_E_CONFIG_INVALID : -errno, "%s: %s", name,
                            errno == ELOOP ? "is a symlink" : strerror(errno));
      break;
    }
    err = load_fd(trust, fd, name, diag);
    close(fd);
  }
  closedir(d);
  return err;
}
