#include "platform/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int remove_children(int dfd, int depth) {
  if (depth > 256)
    return -ELOOP;
  int dup_fd = dup(dfd);
  if (dup_fd < 0)
    return -errno;
  DIR *d = fdopendir(dup_fd);
  if (!d) {
    close(dup_fd);
    return -errno;
  }
  int r = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    if (unlinkat(dfd, de->d_name, 0) == 0)
      continue;
    if (errno != EISDIR && errno != EPERM) {
      r = -errno;
      continue;
    }
    int sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      r = -errno;
      continue;
    }
    int rr = remove_children(sub, depth + 1);
    close(sub);
    if (rr < 0)
      r = rr;
    if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) < 0)
      r = -errno;
  }
  closedir(d);
  return r;
}

int fs_remove_tree_at(int dirfd, const char *name) {
  if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
    return 0;
  int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0)
    return -errno;
  /* a staged package may be read-only for its owner */
  fchmod(sub, 0700);
  int r = remove_children(sub, 0);
  close(sub);
  if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && r == 0)
    r = -errno;
  return r;
}

struct copy_state {
  dev_t dst_dev; /* the destination must not be inside the source */
  ino_t dst_ino;
  size_t files;
  unsigned long long bytes;
  char path[PATH_MAX];
  struct cordon_diag *diag;
};

/* Open a file checked with lstat as the same regular file: no symlink
 * followed, no FIFO or device opened in a way that blocks, and (staged by
 * root) no hard link to a file the job user could not read. */
static int open_checked(int sfd, const char *name, const struct stat *seen, struct copy_state *cs) {
  int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (in < 0)
    return cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
  struct stat st;
  int r = 0;
  if (fstat(in, &st) < 0)
    r = cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
  else if (!S_ISREG(st.st_mode) || st.st_dev != seen->st_dev || st.st_ino != seen->st_ino)
    r = cordon_diag_set(cs->diag, CORDON_E_USAGE, "%s: changed while it was being copied",
                        cs->path);
  else if (geteuid() == 0 && st.st_nlink > 1 && !(st.st_mode & S_IROTH))
    /* the job user is in none of the file's groups: only "other" bits
     * would let it read a file it does not own */
    r = cordon_diag_set(cs->diag, CORDON_E_USAGE,
                        "%s: a hard link to a file the job user cannot read", cs->path);
  if (r < 0) {
    close(in);
    return r;
  }
  int fl = fcntl(in, F_GETFL);
  if (fl >= 0)
    (void)fcntl(in, F_SETFL, fl & ~O_NONBLOCK);
  return in;
}

static int copy_file(int sfd, int dfd, const char *name, const struct stat *seen,
                     struct copy_state *cs) {
  mode_t mode = seen->st_mode;
  int in = open_checked(sfd, name, seen, cs);
  if (in < 0)
    return in;
  int out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   (mode & 0111) ? 0755 : 0644);
  if (out < 0) {
    int e = errno;
    close(in);
    return cordon_diag_set(cs->diag, -e, "%s: %s", cs->path, strerror(e));
  }
  int r = 0;
  char buf[65536];
  for (;;) {
    ssize_t n = read(in, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r = cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
      break;
    }
    if (n == 0)
      break;
    cs->bytes += (unsigned long long)n;
    if (cs->bytes > STAGE_MAX_BYTES) {
      r = cordon_diag_set(cs->diag, CORDON_E_PACKAGE_TOO_LARGE, "package larger than %llu bytes",
                          STAGE_MAX_BYTES);
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(out, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0) {
        r = cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
        goto out;
      }
      off += w;
    }
  }
out:
  close(in);
  if (close(out) < 0 && r == 0)
    r = -errno;
  return r;
}

static int copy_dir(int sfd, int dfd, int depth, struct copy_state *cs) {
  if (depth > STAGE_MAX_DEPTH)
    return cordon_diag_set(cs->diag, CORDON_E_PACKAGE_TOO_LARGE, "%s: nested too deeply", cs->path);
  int dup_fd = dup(sfd);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) {
    if (dup_fd >= 0)
      close(dup_fd);
    return cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
  }
  size_t plen = strlen(cs->path);
  int r = 0;
  struct dirent *de;
  while (r == 0 && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    if (plen + 1 + strlen(de->d_name) >= sizeof(cs->path)) {
      r = cordon_diag_set(cs->diag, CORDON_E_USAGE, "%s: path too long", cs->path);
      break;
    }
    snprintf(cs->path + plen, sizeof(cs->path) - plen, "/%s", de->d_name);
    if (++cs->files > STAGE_MAX_FILES) {
      r = cordon_diag_set(cs->diag, CORDON_E_PACKAGE_TOO_LARGE, "more than %d files",
                          STAGE_MAX_FILES);
      break;
    }
    struct stat st;
    if (fstatat(sfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      r = cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
      r = copy_file(sfd, dfd, de->d_name, &st, cs);
    } else if (S_ISDIR(st.st_mode) && st.st_dev == cs->dst_dev && st.st_ino == cs->dst_ino) {
      r = cordon_diag_set(cs->diag, CORDON_E_USAGE,
                          "%s: the source contains the staging directory (is the agent's "
                          "config directory inside the package?)",
                          cs->path);
    } else if (S_ISDIR(st.st_mode)) {
      if (mkdirat(dfd, de->d_name, 0755) < 0) {
        r = cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
      } else {
        int s2 =
            openat(sfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        int d2 = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st2;
        if (s2 < 0 || d2 < 0)
          r = cordon_diag_set(cs->diag, -errno, "%s: %s", cs->path, strerror(errno));
        else if (fstat(s2, &st2) < 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino)
          r = cordon_diag_set(cs->diag, CORDON_E_USAGE, "%s: changed while it was being copied",
                              cs->path);
        else
          r = copy_dir(s2, d2, depth + 1, cs);
        if (s2 >= 0)
          close(s2);
        if (d2 >= 0)
          close(d2);
      }
    } else {
      r = cordon_diag_set(cs->diag, CORDON_E_USAGE, "%s: not a regular file or directory%s",
                          cs->path, S_ISLNK(st.st_mode) ? " (a symbolic link)" : "");
    }
    cs->path[plen] = '\0';
  }
  closedir(d);
  return r;
}

int fs_copy_tree(int src_dirfd, int dst_dirfd, struct cordon_diag *diag) {
  struct copy_state *cs = calloc(1, sizeof(*cs));
  if (!cs)
    return -ENOMEM;
  cs->diag = diag;
  cs->path[0] = '.';
  struct stat dst;
  if (fstat(dst_dirfd, &dst) < 0) {
    free(cs);
    return -errno;
  }
  cs->dst_dev = dst.st_dev;
  cs->dst_ino = dst.st_ino;
  int r = copy_dir(src_dirfd, dst_dirfd, 0, cs);
  free(cs);
  if (r < 0)
    (void)remove_children(dst_dirfd, 0); /* leave nothing behind */
  return r;
}

int fs_mkdir_p(const char *path, unsigned mode) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
    return -ENAMETOOLONG;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
      return -errno;
    *p = '/';
  }
  if (mkdir(buf, mode) < 0 && errno != EEXIST)
    return -errno;
  return 0;
}
