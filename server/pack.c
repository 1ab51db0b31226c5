#include "server/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/manifest.h"

#define PACK_BUF_SIZE (1u << 20)
/* Where the key id sits in the header (proto/cpkg.h): after the magic, the
 * u16 version, the u16 flags and the u32 index length. */
#define PACK_HEADER_KEY_ID_OFF (CPKG_MAGIC_SIZE + 2 + 2 + 4)

struct pack_entry {
  char *path;
  uint32_t mode;
  uint64_t size;
  dev_t dev;
  ino_t ino;
};

struct pack_walk {
  const char *root;
  struct pack_entry *v;
  size_t n, cap;
};

static const char *file_kind(mode_t m) {
  if (S_ISLNK(m))
    return "symlink";
  if (S_ISFIFO(m))
    return "fifo";
  if (S_ISSOCK(m))
    return "socket";
  if (S_ISCHR(m))
    return "character device";
  if (S_ISBLK(m))
    return "block device";
  return "special file";
}

static int walk_add(struct pack_walk *w, char *path, const struct stat *st,
                    struct cordon_diag *diag) {
  if (w->n >= CPKG_MAX_FILES)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE, "%s: more than %u files", w->root,
                           CPKG_MAX_FILES);
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 64;
    struct pack_entry *v = realloc(w->v, cap * sizeof(*v));
    if (!v)
      return -ENOMEM;
    w->v = v;
    w->cap = cap;
  }
  w->v[w->n++] = (struct pack_entry){
      .path = path,
      .mode = (st->st_mode & 0111) ? CPKG_MODE_EXEC : CPKG_MODE_PLAIN,
      .size = (uint64_t)st->st_size,
      .dev = st->st_dev,
      .ino = st->st_ino,
  };
  return 0;
}

static int walk_dir(struct pack_walk *w, int dirfd, const char *prefix, unsigned depth,
                    struct cordon_diag *diag) {
  if (depth >= CPKG_MAX_DEPTH)
    return cordon_diag_set(diag, CORDON_E_PACKAGE_TOO_LARGE,
                           "%s/%s: directories nested deeper than %u", w->root, prefix,
                           CPKG_MAX_DEPTH);
  int fd = dup(dirfd);
  if (fd < 0)
    return -errno;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -errno;
  }
  int err = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno)
        err = cordon_diag_set(diag, -errno, "%s/%s: %s", w->root, prefix, strerror(errno));
      break;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    char *rel = NULL;
    if (asprintf(&rel, "%s%s%s", prefix, *prefix ? "/" : "", de->d_name) < 0) {
      err = -ENOMEM;
      break;
    }
    struct stat st;
    if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      err = cordon_diag_set(diag, -errno, "%s/%s: %s", w->root, rel, strerror(errno));
      free(rel);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        err = cordon_diag_set(diag, -errno, "%s/%s: %s", w->root, rel, strerror(errno));
      } else {
        err = walk_dir(w, sub, rel, depth + 1, diag);
        close(sub);
      }
      free(rel);
    } else if (S_ISREG(st.st_mode)) {
      err = walk_add(w, rel, &st, diag);
      if (err)
        free(rel);
    } else {
      err = cordon_diag_set(diag, CORDON_E_USAGE, "%s/%s: not a regular file (%s)", w->root, rel,
                            file_kind(st.st_mode));
      free(rel);
    }
    if (err)
      break;
  }
  closedir(d);
  return err;
}

static int entry_cmp(const void *a, const void *b) {
  return cpkg_path_cmp(((const struct pack_entry *)a)->path, ((const struct pack_entry *)b)->path);
}

static int pwrite_all(int fd, const void *buf, size_t len, off_t off) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += n;
    off += n;
    len -= (size_t)n;
  }
  return 0;
}

static ssize_t read_some(int fd, void *buf, size_t len) {
  for (;;) {
    ssize_t n = read(fd, buf, len);
    if (n >= 0 || errno != EINTR)
      return n < 0 ? -errno : n;
  }
}

/* Read manifest.json (at most MANIFEST_MAX_BYTES) into a new buffer. */
static int read_manifest(int rootfd, const char *root, uint8_t **out_buf, size_t *out_len,
                         struct cordon_diag *diag) {
  int fd = openat(rootfd, CPKG_MANIFEST_PATH, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "%s/%s: %s", root, CPKG_MANIFEST_PATH,
                           strerror(errno));
  uint8_t *buf = malloc(MANIFEST_MAX_BYTES + 1);
  size_t len = 0;
  int err = buf ? 0 : -ENOMEM;
  while (!err && len <= MANIFEST_MAX_BYTES) {
    ssize_t n = read_some(fd, buf + len, MANIFEST_MAX_BYTES + 1 - len);
    if (n < 0)
      err = cordon_diag_set(diag, (int)n, "%s/%s: %s", root, CPKG_MANIFEST_PATH, strerror((int)-n));
    else if (n == 0)
      break;
    else
      len += (size_t)n;
  }
  close(fd);
  if (!err && len > MANIFEST_MAX_BYTES)
    err = cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "%s/%s: larger than %d bytes", root,
                          CPKG_MANIFEST_PATH, MANIFEST_MAX_BYTES);
  if (err) {
    free(buf);
    return err;
  }
  *out_buf = buf;
  *out_len = len;
  return 0;
}

/* Copy one source file into the package at the current offset of outfd,
 * hashing it; the file must still be the one the walk saw. */
static int copy_file(int rootfd, const char *root, const struct pack_entry *e, int outfd,
                     uint8_t *buf, uint8_t out_hash[CPKG_HASH_SIZE], struct cordon_diag *diag) {
  int fd = openat(rootfd, e->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "%s/%s: %s", root, e->path, strerror(errno));
  int err = 0;
  struct stat st;
  if (fstat(fd, &st) < 0) {
    err = cordon_diag_set(diag, -errno, "%s/%s: %s", root, e->path, strerror(errno));
    goto out_close;
  }
  if (!S_ISREG(st.st_mode) || st.st_dev != e->dev || st.st_ino != e->ino ||
      (uint64_t)st.st_size != e->size)
    goto changed;
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, CPKG_HASH_SIZE);
  uint64_t left = e->size;
  while (left > 0) {
    ssize_t n = read_some(fd, buf, left < PACK_BUF_SIZE ? (size_t)left : PACK_BUF_SIZE);
    if (n < 0) {
      err = cordon_diag_set(diag, (int)n, "%s/%s: %s", root, e->path, strerror((int)-n));
      goto out_close;
    }
    if (n == 0)
      goto changed;
    crypto_generichash_update(&h, buf, (size_t)n);
    if ((err = core_write_all(outfd, buf, (size_t)n)) != 0) {
      cordon_diag_set(diag, err, "writing the package: %s", strerror(-err));
      goto out_close;
    }
    left -= (uint64_t)n;
  }
  ssize_t extra = read_some(fd, buf, 1);
  if (extra != 0)
    goto changed;
  crypto_generichash_final(&h, out_hash, CPKG_HASH_SIZE);
  goto out_close;
changed:
  err = cordon_diag_set(diag, CORDON_E_USAGE, "%s/%s: changed while being packed", root, e->path);
out_close:
  close(fd);
  return err;
}

static int fsync_parent(const char *path) {
  char *copy = strdup(path);
  if (!copy)
    return -ENOMEM;
  char *slash = strrchr(copy, '/');
  const char *dir = ".";
  if (slash == copy)
    dir = "/";
  else if (slash) {
    *slash = '\0';
    dir = copy;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = 0;
  if (fd < 0 || fsync(fd) < 0)
    err = -errno;
  if (fd >= 0)
    close(fd);
  free(copy);
  return err;
}

/* What every agent would refuse, refused here with the agent's code: an
 * entry[0] that is neither absolute nor a file of the package
 * (CORDON_E_MANIFEST_INVALID), a grant too broad on any device
 * (CORDON_E_SCOPE_TOO_BROAD, core/manifest.h). w holds the files. */
static int check_runnable(const struct manifest *m, const struct pack_walk *w,
                          struct cordon_diag *diag) {
  for (size_t i = 0; i < sizeof(m->entry) / sizeof(m->entry[0]); i++) {
    if (m->entry[i].argc == 0)
      continue;
    const char *e = m->entry[i].argv[0];
    if (e[0] == '/' || manifest_path_is_windows_absolute(e))
      continue;
    bool found = false;
    for (size_t k = 0; k < w->n && !found; k++)
      found = strcmp(w->v[k].path, e) == 0;
    if (!found)
      return cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID,
                             "field 'entry[0]': %s is neither an absolute path nor a file of the "
                             "package",
                             e);
  }
  for (size_t i = 0; i < m->n_grants; i++) {
    struct cordon_diag d = {{0}};
    int r = manifest_grant_scope_check(&m->grants[i], &d);
    if (r < 0)
      return cordon_diag_set(diag, r, "field 'capabilities.fs[%zu]' (%s): %s on every agent", i,
                             m->grants[i].path, d.msg);
  }
  return 0;
}

int pack_dir(const char *src_dir, const char *out_path, const uint8_t *secret_key,
             struct pack_summary *out_summary, struct cordon_diag *diag) {
  struct pack_walk w = {.root = src_dir};
  struct cpkg_file *files = NULL;
  uint8_t *manifest_json = NULL, *index = NULL, *buf = NULL;
  size_t manifest_len = 0, index_len = 0;
  char *tmp = NULL;
  int outfd = -1, err;

  int rootfd = open(src_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return cordon_diag_set(diag, errno == ENOTDIR ? CORDON_E_USAGE : -errno, "%s: %s", src_dir,
                           strerror(errno));

  /* The manifest first, validated as exec validates it. */
  char *mpath = NULL;
  if (asprintf(&mpath, "%s/%s", src_dir, CPKG_MANIFEST_PATH) < 0) {
    err = -ENOMEM;
    goto out;
  }
  struct manifest *m = NULL;
  err = manifest_load_file(mpath, &m, diag);
  free(mpath);
  if (err) {
    if (err != CORDON_E_MANIFEST_INVALID) {
      char why[sizeof(diag->msg)];
      snprintf(why, sizeof(why), "%s", diag && diag->msg[0] ? diag->msg : cordon_err_message(err));
      err = cordon_diag_set(diag, CORDON_E_MANIFEST_INVALID, "%s", why);
    }
    goto out;
  }
  manifest_free(m);

  if ((err = walk_dir(&w, rootfd, "", 0, diag)) != 0)
    goto out;
  qsort(w.v, w.n, sizeof(*w.v), entry_cmp);
  for (size_t i = 0; i < w.n; i++)
    if ((err = cpkg_path_check(w.v[i].path, strlen(w.v[i].path), diag)) != 0)
      goto out;

  /* The bytes that get signed are parsed once more, closing the gap between
   * the check above and this read. */
  if ((err = read_manifest(rootfd, src_dir, &manifest_json, &manifest_len, diag)) != 0)
    goto out;
  if ((err = manifest_parse((const char *)manifest_json, manifest_len, &m, diag)) != 0)
    goto out;
  err = check_runnable(m, &w, diag);
  manifest_free(m);
  if (err)
    goto out;

  files = calloc(w.n ? w.n : 1, sizeof(*files));
  buf = malloc(PACK_BUF_SIZE);
  if (!files || !buf) {
    err = -ENOMEM;
    goto out;
  }
  uint8_t manifest_hash[CPKG_HASH_SIZE];
  crypto_generichash(manifest_hash, sizeof(manifest_hash), manifest_json, manifest_len, NULL, 0);
  uint64_t total = 0;
  for (size_t i = 0; i < w.n; i++) {
    files[i].path = w.v[i].path;
    files[i].mode = w.v[i].mode;
    files[i].size = w.v[i].size;
    if (strcmp(w.v[i].path, CPKG_MANIFEST_PATH) == 0) {
      if (w.v[i].size != manifest_len) {
        err = cordon_diag_set(diag, CORDON_E_USAGE, "%s/%s: changed while being packed", src_dir,
                              CPKG_MANIFEST_PATH);
        goto out;
      }
      memcpy(files[i].hash, manifest_hash, sizeof(manifest_hash));
    }
    total += w.v[i].size;
  }

  /* Hashes have a fixed size, so an index with placeholder hashes has the
   * final length: the contents can be written in one pass after it. */
  if ((err = cpkg_index_encode(manifest_json, manifest_len, files, w.n, &index, &index_len,
                               diag)) != 0)
    goto out;
  free(index);
  index = NULL;

  if (asprintf(&tmp, "%s.tmp.XXXXXX", out_path) < 0) {
    tmp = NULL;
    err = -ENOMEM;
    goto out;
  }
  outfd = mkostemp(tmp, O_CLOEXEC);
  if (outfd < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", out_path, strerror(errno));
    free(tmp);
    tmp = NULL;
    goto out;
  }
  if (lseek(outfd, (off_t)(CPKG_HEADER_SIZE + index_len), SEEK_SET) < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", tmp, strerror(errno));
    goto out;
  }
  for (size_t i = 0; i < w.n; i++) {
    uint8_t h[CPKG_HASH_SIZE];
    if ((err = copy_file(rootfd, src_dir, &w.v[i], outfd, buf, h, diag)) != 0)
      goto out;
    if (strcmp(w.v[i].path, CPKG_MANIFEST_PATH) == 0 && memcmp(h, manifest_hash, sizeof(h)) != 0) {
      err = cordon_diag_set(diag, CORDON_E_USAGE, "%s/%s: changed while being packed", src_dir,
                            CPKG_MANIFEST_PATH);
      goto out;
    }
    memcpy(files[i].hash, h, sizeof(h));
  }

  size_t final_len = 0;
  if ((err = cpkg_index_encode(manifest_json, manifest_len, files, w.n, &index, &final_len,
                               diag)) != 0)
    goto out;
  if (final_len != index_len) {
    err = cordon_diag_set(diag, CORDON_E_INTERNAL, "index length changed while packing");
    goto out;
  }
  uint8_t header[CPKG_HEADER_SIZE];
  if ((err = cpkg_header_build(index, index_len, secret_key, header)) != 0) {
    cordon_diag_set(diag, err, "cannot sign the index");
    goto out;
  }
  if ((err = pwrite_all(outfd, header, sizeof(header), 0)) != 0 ||
      (err = pwrite_all(outfd, index, index_len, CPKG_HEADER_SIZE)) != 0 ||
      (err = fchmod(outfd, 0644) < 0 ? -errno : 0) != 0 ||
      (err = fsync(outfd) < 0 ? -errno : 0) != 0) {
    cordon_diag_set(diag, err, "%s: %s", tmp, strerror(-err));
    goto out;
  }
  if (close(outfd) < 0) {
    outfd = -1;
    err = cordon_diag_set(diag, -errno, "%s: %s", tmp, strerror(errno));
    goto out;
  }
  outfd = -1;
  if (rename(tmp, out_path) < 0) {
    err = cordon_diag_set(diag, -errno, "%s: %s", out_path, strerror(errno));
    goto out;
  }
  free(tmp);
  tmp = NULL;
  fsync_parent(out_path);
  if (out_summary) {
    struct pack_summary s = {
        .n_files = w.n, .total = total, .size = CPKG_HEADER_SIZE + index_len + total};
    cpkg_index_hash(index, index_len, s.index_hash);
    memcpy(s.key_id, header + PACK_HEADER_KEY_ID_OFF, CORDON_ID_LEN);
    *out_summary = s;
  }
  err = 0;
out:
  if (outfd >= 0)
    close(outfd);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  for (size_t i = 0; i < w.n; i++)
    free(w.v[i].path);
  free(w.v);
  free(files);
  free(index);
  free(buf);
  free(manifest_json);
  close(rootfd);
  return err;
}
