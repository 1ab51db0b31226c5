#include "server/keys.h"
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int keys_write_file(int dirfd, const char *name, enum keyfile_kind kind,
                    const uint8_t key[KEYFILE_KEY_SIZE], mode_t mode, const char *comment,
                    struct cordon_diag *diag) {
  char *line = sodium_malloc(KEYFILE_MAX_BYTES);
  if (!line)
    return -ENOMEM;
  size_t len = 0;
  int err = keyfile_format(kind, key, comment, line, KEYFILE_MAX_BYTES, &len);
  if (err) {
    cordon_diag_set(diag, err, "%s: cannot format key", name);
    goto out_free_line;
  }
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", name, strerror(errno));
    goto out_free_line;
  }
  if ((err = fchmod(fd, mode) < 0 ? -errno : 0) == 0 && (err = core_write_all(fd, line, len)) == 0)
    err = fsync(fd) < 0 ? -errno : 0;
  if (close(fd) < 0 && !err)
    err = -errno;
  if (err) {
    cordon_diag_set(diag, err, "%s: %s", name, strerror(-err));
    unlinkat(dirfd, name, 0);
  }
out_free_line:
  sodium_free(line);
  return err;
}

int keys_read_file(const char *path, enum keyfile_kind kind, uint8_t **out_key,
                   struct cordon_diag *diag) {
  int secret = kind != KEYFILE_PUBLISHER_PUBLIC && kind != KEYFILE_TICKET_PUBLIC;
  int err = 0;
  char *text = sodium_malloc(KEYFILE_MAX_BYTES + 1);
  uint8_t *key = sodium_malloc(KEYFILE_KEY_SIZE);
  if (!text || !key) {
    err = -ENOMEM;
    goto out_free;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
    goto out_free;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "%s: not a regular file", path);
    goto out_close;
  }
  if (secret && (st.st_mode & 077)) {
    err = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                          "%s: secret key file is accessible by group or others (mode 0%03o); "
                          "chmod 600 it",
                          path, (unsigned)(st.st_mode & 0777));
    goto out_close;
  }
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, text + len, KEYFILE_MAX_BYTES + 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      err = cordon_diag_set(diag, -errno, "%s: %s", path, strerror(errno));
      goto out_close;
    }
    if (n == 0 || (len += (size_t)n) > KEYFILE_MAX_BYTES)
      break;
  }
  struct cordon_diag d = {{0}};
  err = keyfile_parse(kind, text, len, key, &d);
  if (err) {
    cordon_diag_set(diag, err, "%s: %s", path, d.msg);
    goto out_close;
  }
  *out_key = key;
  key = NULL;
out_close:
  close(fd);
out_free:
  sodium_free(text); /* sodium_free wipes */
  sodium_free(key);
  return err;
}

int keys_load_publisher_secret(const char *path, uint8_t **out_secret_key,
                               struct cordon_diag *diag) {
  uint8_t *seed = NULL;
  int err = keys_read_file(path, KEYFILE_PUBLISHER_SECRET, &seed, diag);
  if (err)
    return err;
  uint8_t pk[crypto_sign_PUBLICKEYBYTES];
  uint8_t *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
  if (!sk) {
    sodium_free(seed);
    return -ENOMEM;
  }
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_free(seed);
  *out_secret_key = sk;
  return 0;
}
