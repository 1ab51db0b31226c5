#include "agent/cpkg_stage.h"
#include "core/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat/posix.h"

struct agent_cpkg_stager {
  struct cpkg_stream *stream;
  int dirfd;                           /* the caller's stage directory */
  int parent_fd;                       /* directory of the current file; -1 = none */
  char parent_path[CPKG_MAX_PATH + 1]; /* its path below dirfd ("" = dirfd) */
  int file_fd;
  struct manifest *manifest;
  int err;  /* first error; the stager is dead once set */
  int done; /* finish() succeeded: keep what was staged */
};

static int clear_at(int dirfd, unsigned depth) {
  if (depth > CPKG_MAX_DEPTH + 8)
    return -ELOOP;
  /* A new open file description, so the caller's offset is not moved. */
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return -e;
  }
  int err = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (unlinkat(dirfd, de->d_name, 0) == 0 || errno == ENOENT)
      continue;
    if (errno != EISDIR && errno != EPERM) {
      if (!err)
        err = -errno;
      continue;
    }
    int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0) {
      int e = clear_at(sub, depth + 1);
      if (e && !err)
        err = e;
      close(sub);
    }
    if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0 && !err)
      err = -errno;
  }
  closedir(d);
  return err;
}

int agent_cpkg_clear_dir(int dirfd) {
  return clear_at(dirfd, 0);
}

static int dir_is_empty(int dirfd) {
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return -e;
  }
  int err = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
      err = -ENOTEMPTY;
      break;
    }
  closedir(d);
  return err;
}

static void close_parent(struct agent_cpkg_stager *st) {
  if (st->parent_fd >= 0 && st->parent_fd != st->dirfd)
    close(st->parent_fd);
  st->parent_fd = -1;
  st->parent_path[0] = '\0';
}

static int stager_fail(struct agent_cpkg_stager *st, int err) {
  if (!st->err)
    st->err = err;
  if (st->file_fd >= 0)
    close(st->file_fd);
  st->file_fd = -1;
  close_parent(st);
  agent_cpkg_clear_dir(st->dirfd);
  return st->err;
}

int agent_cpkg_stager_new(const struct cpkg_trust *trust, int stage_dirfd,
                          struct agent_cpkg_stager **out_stager, struct cordon_diag *diag) {
  int err = dir_is_empty(stage_dirfd);
  if (err)
    return cordon_diag_set(diag, err, "the staging directory is %s",
                           err == -ENOTEMPTY ? "not empty" : strerror(-err));
  struct agent_cpkg_stager *st = calloc(1, sizeof(*st));
  if (!st)
    return -ENOMEM;
  if ((err = cpkg_stream_new(trust, &st->stream)) != 0) {
    free(st);
    return err;
  }
  st->dirfd = stage_dirfd;
  st->parent_fd = -1;
  st->file_fd = -1;
  *out_stager = st;
  return 0;
}

/* Open (creating as needed) the directory that holds path. */
static int enter_parent(struct agent_cpkg_stager *st, const char *path, struct cordon_diag *diag) {
  const char *slash = strrchr(path, '/');
  size_t dlen = slash ? (size_t)(slash - path) : 0;
  if (st->parent_fd >= 0 && strlen(st->parent_path) == dlen &&
      memcmp(st->parent_path, path, dlen) == 0)
    return 0;
  close_parent(st);
  char dir[CPKG_MAX_PATH + 1];
  memcpy(dir, path, dlen);
  dir[dlen] = '\0';
  int cur = st->dirfd;
  for (char *comp = dir, *next; dlen > 0 && comp; comp = next) {
    next = strchr(comp, '/');
    if (next)
      *next++ = '\0';
    int made = mkdirat(cur, comp, 0700) == 0;
    if (!made && errno != EEXIST) {
      int e = errno;
      if (cur != st->dirfd)
        close(cur);
      return cordon_diag_set(diag, -e, "staging directory for '%s': %s", path, strerror(e));
    }
    int fd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    if (cur != st->dirfd)
      close(cur);
    if (fd < 0)
      return cordon_diag_set(diag, -e, "staging directory for '%s': %s", path, strerror(e));
    if (made && fchmod(fd, 0755) < 0) {
      e = errno;
      close(fd);
      return cordon_diag_set(diag, -e, "staging directory for '%s': %s", path, strerror(e));
    }
    cur = fd;
  }
  st->parent_fd = cur;
  memcpy(st->parent_path, path, dlen);
  st->parent_path[dlen] = '\0';
  return 0;
}

static int handle_event(struct agent_cpkg_stager *st, const struct cpkg_event *ev,
                        struct cordon_diag *diag) {
  const struct cpkg_index *idx = cpkg_stream_index(st->stream);
  int err;
  switch (ev->type) {
  case CPKG_EVENT_INDEX:
    return manifest_parse((const char *)idx->manifest_json, idx->manifest_len, &st->manifest, diag);
  case CPKG_EVENT_FILE_BEGIN: {
    const char *path = idx->files[ev->file].path;
    if ((err = enter_parent(st, path, diag)) != 0)
      return err;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    st->file_fd =
        openat(st->parent_fd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (st->file_fd < 0)
      return cordon_diag_set(diag, -errno, "staging '%s': %s", path, strerror(errno));
    return 0;
  }
  case CPKG_EVENT_FILE_DATA:
    if ((err = core_write_all(st->file_fd, ev->data, ev->len)) != 0)
      return cordon_diag_set(diag, err, "staging '%s': %s", idx->files[ev->file].path,
                             strerror(-err));
    return 0;
  case CPKG_EVENT_FILE_END: {
    /* The hash matched: give the file its mode. */
    const struct cpkg_file *f = &idx->files[ev->file];
    err = fchmod(st->file_fd, f->mode) < 0 ? -errno : 0;
    if (close(st->file_fd) < 0 && !err)
      err = -errno;
    st->file_fd = -1;
    if (err)
      return cordon_diag_set(diag, err, "staging '%s': %s", f->path, strerror(-err));
    return 0;
  }
  case CPKG_EVENT_DONE:
    close_parent(st);
    return 0;
  case CPKG_EVENT_NEED_MORE:
    break;
  }
  return 0;
}

int agent_cpkg_stager_feed(struct agent_cpkg_stager *st, const uint8_t *buf, size_t len,
                           struct cordon_diag *diag) {
  if (st->err)
    return st->err;
  if (st->done)
    return cordon_diag_set(diag, CORDON_E_USAGE, "the package was already staged");
  size_t off = 0;
  for (;;) {
    size_t used = 0;
    struct cpkg_event ev;
    int err = cpkg_stream_next(st->stream, buf ? buf + off : NULL, len - off, &used, &ev, diag);
    if (err)
      return stager_fail(st, err);
    off += used;
    if (ev.type == CPKG_EVENT_NEED_MORE)
      return 0;
    if ((err = handle_event(st, &ev, diag)) != 0)
      return stager_fail(st, err);
  }
}

int agent_cpkg_stager_finish(struct agent_cpkg_stager *st, struct manifest **out_manifest,
                             uint8_t out_index_hash[CPKG_HASH_SIZE], struct cordon_diag *diag) {
  int err = agent_cpkg_stager_feed(st, NULL, 0, diag);
  if (err)
    return err;
  if ((err = cpkg_stream_finish(st->stream, diag)) != 0)
    return stager_fail(st, err);
  uint8_t hash[CPKG_HASH_SIZE];
  if ((err = cpkg_stream_index_hash(st->stream, hash)) != 0 || !st->manifest)
    return stager_fail(st, err ? err : CORDON_E_INTERNAL);
  st->done = 1;
  *out_manifest = st->manifest;
  st->manifest = NULL;
  memcpy(out_index_hash, hash, sizeof(hash));
  return 0;
}

void agent_cpkg_stager_free(struct agent_cpkg_stager *st) {
  if (!st)
    return;
  if (!st->done)
    stager_fail(st, CORDON_E_INTERNAL);
  close_parent(st);
  manifest_free(st->manifest);
  cpkg_stream_free(st->stream);
  free(st);
}

int agent_cpkg_stage_fd(int fd, const struct cpkg_trust *trust, int stage_dirfd,
                        struct manifest **out_manifest, uint8_t out_index_hash[CPKG_HASH_SIZE],
                        struct cordon_diag *diag) {
  struct stat st_pkg;
  if (fstat(fd, &st_pkg) == 0 && S_ISREG(st_pkg.st_mode)) {
    if ((uint64_t)st_pkg.st_size > CPKG_HEADER_SIZE + (uint64_t)CPKG_MAX_INDEX + CPKG_MAX_TOTAL)
      return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                             "the package is %lld bytes, more than any package may be",
                             (long long)st_pkg.st_size);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  struct agent_cpkg_stager *st = NULL;
  int err = agent_cpkg_stager_new(trust, stage_dirfd, &st, diag);
  if (err)
    return err;
  uint8_t *buf = malloc(AGENT_CPKG_READ_SIZE);
  if (!buf) {
    agent_cpkg_stager_free(st);
    return -ENOMEM;
  }
  for (;;) {
    ssize_t n = read(fd, buf, AGENT_CPKG_READ_SIZE);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      err = cordon_diag_set(diag, -errno, "reading the package: %s", strerror(errno));
      break;
    }
    if (n == 0) {
      err = agent_cpkg_stager_finish(st, out_manifest, out_index_hash, diag);
      break;
    }
    if ((err = agent_cpkg_stager_feed(st, buf, (size_t)n, diag)) != 0)
      break;
  }
  free(buf);
  agent_cpkg_stager_free(st);
  return err;
}

int agent_cpkg_stage(const char *cpkg_path, const struct cpkg_trust *trust, int stage_dirfd,
                     struct manifest **out_manifest, uint8_t out_index_hash[CPKG_HASH_SIZE],
                     struct cordon_diag *diag) {
  int fd = open(cpkg_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s: %s", cpkg_path, strerror(errno));
  int err = agent_cpkg_stage_fd(fd, trust, stage_dirfd, out_manifest, out_index_hash, diag);
  close(fd);
  return err;
}
