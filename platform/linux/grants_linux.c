#include "platform/linux/grants_linux.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform/forbidden.h"
#include "platform/linux/sandbox_linux.h"

struct ident {
  dev_t dev;
  ino_t ino;
};

struct grants_known {
  struct ident *v;
  size_t n;
};

struct sandbox_os_place {
  int fd; /* O_PATH */
  struct ident id;
  mode_t mode;
};

/* snprintf that refuses to truncate: a cut path would name another place */
static int pathf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool same(struct ident a, struct ident b) {
  return a.dev == b.dev && a.ino == b.ino;
}

static int fd_ident(int fd, struct ident *out, mode_t *out_mode) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return -errno;
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  if (out_mode)
    *out_mode = st.st_mode;
  return 0;
}

static char *fd_realpath(int fd) {
  char link[64], buf[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, buf, sizeof(buf) - 1);
  if (n <= 0)
    return NULL;
  buf[n] = '\0';
  return strdup(buf);
}

/* Is id the directory fd or one of its ancestors? */
static bool ancestor_match(int fd, struct ident id) {
  int cur = dup(fd);
  bool found = false;
  for (int depth = 0; cur >= 0 && depth < 4096 && !found; depth++) {
    struct ident here = {0};
    if (fd_ident(cur, &here, NULL) < 0)
      break;
    if (same(here, id)) {
      found = true;
      break;
    }
    int up = openat(cur, "..", O_PATH | O_CLOEXEC | O_DIRECTORY);
    if (up < 0) {
      /* a file: its directory is found through its path */
      char *rp = fd_realpath(cur);
      char *slash = rp ? strrchr(rp, '/') : NULL;
      if (slash) {
        *slash = '\0';
        up = open(*rp ? rp : "/", O_PATH | O_CLOEXEC | O_DIRECTORY);
      }
      free(rp);
    }
    struct ident upid = {0};
    if (up < 0 || fd_ident(up, &upid, NULL) < 0 || same(upid, here)) {
      if (up >= 0)
        close(up);
      break;
    }
    close(cur);
    cur = up;
  }
  if (cur >= 0)
    close(cur);
  return found;
}

/* Open with the job user's rights (a root agent switches its fs ids) or
 * the agent's own. */
static int open_as(const struct sandbox_os_probe *p, bool job_user, const char *path, int flags) {
  bool sw = job_user && p->user.is_root;
  int old_uid = 0, old_gid = 0;
  if (sw) {
    old_gid = setfsgid(p->user.u.gid);
    old_uid = setfsuid(p->user.u.uid);
  }
  int fd = open(path, flags);
  int e = errno;
  if (sw) {
    setfsuid((uid_t)old_uid);
    setfsgid((gid_t)old_gid);
  }
  errno = e;
  return fd;
}

/* Open path, and append it as a place. Returns 0 or a negated errno. */
static int add_opened(const struct sandbox_os_probe *p, bool job_user, const char *path,
                      struct sandbox_places *list) {
  int fd = open_as(p, job_user, path, O_PATH | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  struct sandbox_os_place *pl = calloc(1, sizeof(*pl));
  char *real = fd_realpath(fd);
  if (!pl || !real || fd_ident(fd, &pl->id, &pl->mode) < 0) {
    int r = !pl || !real ? -ENOMEM : -EIO;
    free(pl);
    free(real);
    close(fd);
    return r;
  }
  pl->fd = fd;
  return sandbox_places_push(list, real, pl);
}

int sandbox_os_place_add(const struct sandbox_os_probe *p, enum sandbox_place_base base,
                         const char *path, enum sandbox_place_use use,
                         struct sandbox_places *list) {
  char full[PATH_MAX];
  char *home_real = NULL;
  int r = 0;
  if (base == SANDBOX_BASE_HOME) {
    const char *home = p->user.u.home;
    if (use == SANDBOX_PLACE_NAME) { /* names are compared with real paths */
      int hfd = open_as(p, true, home, O_PATH | O_CLOEXEC);
      home_real = hfd >= 0 ? fd_realpath(hfd) : NULL;
      if (hfd >= 0)
        close(hfd);
      if (home_real)
        home = home_real;
    }
    r = path[0] ? pathf(full, sizeof(full), "%s/%s", home, path)
                : pathf(full, sizeof(full), "%s", home);
  } else {
    r = pathf(full, sizeof(full), "%s", path);
  }
  free(home_real);
  if (r < 0)
    return r;

  switch (use) {
  case SANDBOX_PLACE_GRANT:
    return add_opened(p, true, full, list);
  case SANDBOX_PLACE_NAME: {
    char *copy = strdup(full);
    return copy ? sandbox_places_push(list, copy, NULL) : -ENOMEM;
  }
  case SANDBOX_PLACE_SECRET:
    break;
  }
  /* a secret that does not exist (or cannot be reached) has nothing to hide */
  if (!strchr(full, '*')) {
    r = add_opened(p, false, full, list);
    return r == -ENOMEM ? r : 0;
  }
  glob_t g;
  if (glob(full, 0, NULL, &g) != 0)
    return 0;
  for (size_t i = 0; i < g.gl_pathc && r != -ENOMEM; i++)
    r = add_opened(p, false, g.gl_pathv[i], list);
  globfree(&g);
  return r == -ENOMEM ? r : 0;
}

bool sandbox_os_place_within(const struct sandbox_place *inner, const struct sandbox_place *outer) {
  if (inner->os && outer->os)
    return ancestor_match(inner->os->fd, outer->os->id);
  return sandbox_path_within(inner->path, outer->path, '/', false);
}

void sandbox_os_place_free(struct sandbox_os_place *os) {
  if (!os)
    return;
  close(os->fd);
  free(os);
}

/* ---- the bwrap mounts ---- */

void grants_base_blinds(const char *const **out_files, size_t *out_n_files,
                        const char *const **out_dirs, size_t *out_n_dirs) {
  static char store[64][PATH_MAX];
  static const char *files[64];
  static const char *dirs[8];
  size_t nf = 0, nd = 0, ns = 0;
  for (const struct forbidden_row *row = NULL; (row = forbidden_next(FORBIDDEN_SECRET, row));) {
    /* the base view shows /etc; the rest of it holds no secret */
    if (row->base != FORBIDDEN_ROOT || strncmp(row->path, "/etc/", 5) != 0)
      continue;
    if (strchr(row->path, '*')) {
      glob_t g;
      if (glob(row->path, 0, NULL, &g) != 0)
        continue;
      for (size_t i = 0; i < g.gl_pathc && nf < 64 && ns < 64; i++) {
        snprintf(store[ns], PATH_MAX, "%s", g.gl_pathv[i]);
        files[nf++] = store[ns++];
      }
      globfree(&g);
      continue;
    }
    struct stat st;
    if (lstat(row->path, &st) < 0)
      continue;
    if (S_ISDIR(st.st_mode) && nd < 8)
      dirs[nd++] = row->path;
    else if (S_ISREG(st.st_mode) && nf < 64)
      files[nf++] = row->path;
  }
  *out_files = files;
  *out_n_files = nf;
  *out_dirs = dirs;
  *out_n_dirs = nd;
}

/* path relative to base if it lies strictly below it */
static const char *below(const char *path, const char *base) {
  size_t n = strlen(base);
  if (strcmp(base, "/") == 0)
    return path[0] == '/' && path[1] ? path + 1 : NULL;
  if (strncmp(path, base, n) == 0 && path[n] == '/')
    return path + n + 1;
  return NULL;
}

static int add_mount(struct grant_set *gs, enum bwrap_mount_kind kind, int fd, const char *dest) {
  size_t n = gs->n_mounts;
  struct bwrap_mount *m = realloc(gs->mounts, (n + 1) * sizeof(*m));
  if (!m)
    return -ENOMEM;
  gs->mounts = m;
  char **d = realloc(gs->dests, (n + 1) * sizeof(*d));
  if (!d)
    return -ENOMEM;
  gs->dests = d;
  if (!(d[n] = strdup(dest)))
    return -ENOMEM;
  if (fd >= 0) {
    int *f = realloc(gs->fds, (gs->n_fds + 1) * sizeof(*f));
    if (!f)
      return -ENOMEM;
    gs->fds = f;
    f[gs->n_fds++] = fd;
  }
  m[n].kind = kind;
  m[n].fd = fd;
  m[n].dest = d[n];
  gs->n_mounts = n + 1;
  return 0;
}

void grants_release(struct grant_set *g) {
  if (!g)
    return;
  strv_release(&g->read_only);
  strv_release(&g->blinded);
  free(g->rw_grants);
  if (g->known)
    free(g->known->v);
  free(g->known);
  for (size_t i = 0; i < g->n_fds; i++)
    close(g->fds[i]);
  for (size_t i = 0; i < g->n_mounts; i++)
    free(g->dests[i]);
  free(g->fds);
  free(g->dests);
  free(g->mounts);
  memset(g, 0, sizeof(*g));
}

/* Blind the secrets inside a read-only grant where the job sees them. */
static int blind_hidden(struct grant_set *later, const struct sandbox_grant *sg, const char *dest,
                        struct cordon_diag *diag) {
  for (size_t i = 0; i < sg->n_hidden; i++) {
    const struct sandbox_place *f = sg->hidden[i];
    const char *rel = below(f->path, sg->place->path);
    if (!rel)
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                             "grant %s: cannot place forbidden path %s", sg->g->path, f->path);
    char blind[PATH_MAX];
    if (pathf(blind, sizeof(blind), "%s/%s", dest, rel) < 0)
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long",
                             sg->g->path);
    int r = add_mount(later, S_ISDIR(f->os->mode) ? BWRAP_MOUNT_BLIND_DIR : BWRAP_MOUNT_BLIND_FILE,
                      -1, blind);
    if (r < 0)
      return r;
  }
  return 0;
}

/* ---- the bounded walk of each grant ---- */

/* Identities a writable grant must not let a job change: every hidden
 * entry of the home, with a symlink followed once to its target
 * (~/.profile -> ~/dotfiles/profile keeps ~/dotfiles/profile read-only). */
struct home_ids {
  struct ident *v;
  size_t n;
};

static int home_ids_collect(const char *home, struct home_ids *out) {
  memset(out, 0, sizeof(*out));
  int hfd = home ? open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (hfd < 0)
    return 0; /* no home: nothing of it to protect */
  DIR *d = fdopendir(hfd);
  if (!d) {
    close(hfd);
    return 0;
  }
  int r = 0;
  struct dirent *de;
  /* the bin-like places too (forbidden_home_hidden), which may be links */
  bool local_bin_done = false;
  while (out->n < GRANTS_WALK_MAX_PROTECTED) {
    const char *name;
    if (!local_bin_done) {
      name = ".local/bin";
      local_bin_done = true;
    } else if ((de = readdir(d))) {
      name = de->d_name;
    } else {
      break;
    }
    if ((name[0] != '.' && strcmp(name, "bin") != 0) || !strcmp(name, ".") || !strcmp(name, ".."))
      continue;
    struct stat st;
    if (fstatat(dirfd(d), name, &st, 0) < 0)
      continue;
    struct ident *v = realloc(out->v, (out->n + 1) * sizeof(*v));
    if (!v) {
      r = -ENOMEM;
      break;
    }
    out->v = v;
    v[out->n++] = (struct ident){st.st_dev, st.st_ino};
  }
  closedir(d);
  return r;
}

static bool home_ids_has(const struct home_ids *h, struct ident id) {
  for (size_t i = 0; i < h->n; i++)
    if (same(h->v[i], id))
      return true;
  return false;
}

static int known_add(struct grants_known *k, struct ident id) {
  struct ident *v = realloc(k->v, (k->n + 1) * sizeof(*v));
  if (!v)
    return -ENOMEM;
  k->v = v;
  v[k->n++] = id;
  return 0;
}

static bool known_has(const struct grants_known *k, struct ident id) {
  for (size_t i = 0; k && i < k->n; i++)
    if (same(k->v[i], id))
      return true;
  return false;
}

/* A directory on the walk's path from the grant root. */
struct walk_dir {
  struct walk_dir *parent;
  int fd;         /* O_RDONLY|O_DIRECTORY */
  size_t rel_len; /* its path in walk.rel */
  bool pinned;    /* bound onto itself: it cannot be renamed or removed */
};

struct walk {
  const struct sandbox_grant *sg; /* its secrets are blinded already: not walked */
  struct grant_set *later;
  struct grant_set *gs; /* for explain's lists */
  const struct manifest_grant *g;
  const char *dest;
  const struct home_ids *home;
  size_t *n_entries, *n_protected;
  char rel[PATH_MAX];
  struct cordon_diag *diag;
};

static int walk_too_broad(struct walk *w, const char *what, size_t limit) {
  return cordon_diag_set(w->diag, CORDON_E_SCOPE_TOO_BROAD,
                         "grant %s: more than %zu %s to check; grant a smaller directory",
                         w->g->path, limit, what);
}

static int walk_mount(struct walk *w, enum bwrap_mount_kind kind, int fd, const char *list) {
  if (++*w->n_protected > GRANTS_WALK_MAX_PROTECTED) {
    if (fd >= 0)
      close(fd);
    return walk_too_broad(w, "protected entries", GRANTS_WALK_MAX_PROTECTED);
  }
  char dest[PATH_MAX];
  int r = pathf(dest, sizeof(dest), "%s/%s", w->dest, w->rel);
  if (r == 0)
    r = add_mount(w->later, kind, fd, dest);
  if (r < 0) {
    if (fd >= 0)
      close(fd);
    return r == -ENAMETOOLONG ? cordon_diag_set(w->diag, CORDON_E_CAPABILITY_DENIED,
                                                "grant %s: path too long", w->g->path)
                              : r;
  }
  if (list && !strcmp(list, "ro"))
    strv_add(&w->gs->read_only, dest);
  else if (list)
    strv_add(&w->gs->blinded, dest);
  return 0;
}

/* Bind every not yet pinned directory between the grant root and here
 * onto itself, root-most first: a mount point cannot be renamed (EBUSY),
 * so nothing protected below can be moved aside and rebuilt. */
static int pin_ancestors(struct walk *w, struct walk_dir *dir) {
  if (!dir || !dir->parent || dir->pinned)
    return 0; /* the grant root is a mount point already */
  int r = pin_ancestors(w, dir->parent);
  if (r < 0)
    return r;
  int fd = fcntl(dir->fd, F_DUPFD_CLOEXEC, 3);
  if (fd < 0)
    return -errno;
  char save = w->rel[dir->rel_len];
  w->rel[dir->rel_len] = '\0';
  r = walk_mount(w, BWRAP_MOUNT_RW_FD, fd, NULL);
  w->rel[dir->rel_len] = save;
  if (r == 0)
    dir->pinned = true;
  return r;
}

static bool is_secret(const struct sandbox_grant *sg, struct ident id) {
  for (size_t i = 0; sg && i < sg->n_hidden; i++)
    if (sg->hidden[i]->os && same(sg->hidden[i]->os->id, id))
      return true;
  return false;
}

static bool is_state_dir(int dfd) {
  size_t n;
  const char *const *names = forbidden_state_markers(&n);
  struct stat st;
  for (size_t i = 0; i < n; i++)
    if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0)
      return true;
  return false;
}

/* Walk dir (whose path below the grant is w->rel[0..dir->rel_len]) by fd,
 * following no symlink. In a writable grant (and not already inside a
 * read-only entry) a hidden entry, and anything that is a hidden entry of
 * the home, is bound read-only over itself with its ancestors pinned; in
 * every grant FIFOs and sockets are blinded and cordon state directories
 * hidden. */
static int walk_tree(struct walk *w, struct walk_dir *dir, bool protect, int depth) {
  if (depth > 256)
    return walk_too_broad(w, "directory levels", 256);
  int dup_fd = dup(dir->fd);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) {
    if (dup_fd >= 0)
      close(dup_fd);
    return 0; /* unreadable to the agent: the job cannot list it either */
  }
  int r = 0;
  struct dirent *de;
  while (r == 0 && (de = readdir(d))) {
    const char *name = de->d_name;
    if (!strcmp(name, ".") || !strcmp(name, ".."))
      continue;
    if (++*w->n_entries > GRANTS_WALK_MAX_ENTRIES) {
      r = walk_too_broad(w, "entries", GRANTS_WALK_MAX_ENTRIES);
      break;
    }
    size_t len = dir->rel_len;
    if (pathf(w->rel + len, sizeof(w->rel) - len, "%s%s", len ? "/" : "", name) < 0) {
      r = cordon_diag_set(w->diag, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long",
                          w->g->path);
      break;
    }
    size_t sub_len = strlen(w->rel);
    struct stat st;
    if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      w->rel[len] = '\0';
      continue;
    }
    if (is_secret(w->sg, (struct ident){st.st_dev, st.st_ino})) {
      w->rel[len] = '\0';
      continue;
    }
    bool hidden = name[0] == '.' || home_ids_has(w->home, (struct ident){st.st_dev, st.st_ino});
    if (protect && name[0] == '.' &&
        (r = known_add(w->gs->known, (struct ident){st.st_dev, st.st_ino})) < 0)
      break;
    if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
      /* no write reaches a host FIFO, no connect a host socket */
      r = pin_ancestors(w, protect ? dir : NULL);
      if (r == 0)
        r = walk_mount(w, BWRAP_MOUNT_BLIND_FILE, -1, "blind");
    } else if (S_ISLNK(st.st_mode)) {
      /* a symlink cannot be a mount point: a hidden one would be replaceable */
      if (protect && name[0] == '.')
        r = cordon_diag_set(w->diag, CORDON_E_SCOPE_TOO_BROAD,
                            "writable grant %s holds the hidden symlink %s, which cannot be kept "
                            "read-only",
                            w->g->path, w->rel);
    } else if (S_ISDIR(st.st_mode)) {
      int sub = openat(dir->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      struct stat sst;
      if (sub >= 0 && (fstat(sub, &sst) < 0 || sst.st_ino != st.st_ino)) {
        close(sub);
        sub = -1;
      }
      if (sub >= 0 && is_state_dir(sub)) {
        close(sub);
        r = pin_ancestors(w, protect ? dir : NULL);
        if (r == 0)
          r = walk_mount(w, BWRAP_MOUNT_BLIND_DIR, -1, "blind");
      } else if (sub >= 0) {
        struct walk_dir child = {dir, sub, sub_len, false};
        bool ro = protect && hidden;
        if (ro) {
          r = pin_ancestors(w, dir);
          int fd = r == 0 ? fcntl(sub, F_DUPFD_CLOEXEC, 3) : -1;
          if (r == 0)
            r = fd < 0 ? -errno : walk_mount(w, BWRAP_MOUNT_RO_FD, fd, "ro");
          child.pinned = true;
        }
        if (r == 0)
          r = walk_tree(w, &child, protect && !ro, depth + 1);
        close(sub);
      }
    } else if (protect && hidden && S_ISREG(st.st_mode)) {
      int fd = openat(dir->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      struct stat fst;
      if (fd >= 0 && fstat(fd, &fst) == 0 && fst.st_ino == st.st_ino) {
        r = pin_ancestors(w, dir);
        if (r == 0)
          r = walk_mount(w, BWRAP_MOUNT_RO_FD, fd, "ro");
        else
          close(fd);
      } else if (fd >= 0) {
        close(fd);
      }
    }
    w->rel[len] = '\0';
  }
  closedir(d);
  return r;
}

/* Every protected entry holds an fd until bwrap mounts it. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 8192 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* Append later's mounts to gs, handing their fds over. */
static int append_mounts(struct grant_set *gs, struct grant_set *later) {
  for (size_t i = 0; i < later->n_mounts; i++) {
    int fd = later->mounts[i].fd;
    int r = add_mount(gs, later->mounts[i].kind, fd, later->mounts[i].dest);
    if (r < 0)
      return r;
    for (size_t k = 0; fd >= 0 && k < later->n_fds; k++)
      if (later->fds[k] == fd)
        later->fds[k] = -1; /* ownership moved to gs */
  }
  return 0;
}

static void release_later(struct grant_set *later) {
  for (size_t k = 0; k < later->n_fds; k++)
    if (later->fds[k] >= 0)
      close(later->fds[k]);
  later->n_fds = 0;
  grants_release(later);
}

int grants_linux_mounts(const struct sandbox_grants *judged, const char *home,
                        struct grant_set *out, struct cordon_diag *diag) {
  struct grant_set gs = {0};
  /* the blinds and read-only binds of the grant being walked */
  struct grant_set later = {0};
  struct home_ids hids;
  size_t n_entries = 0, n_protected = 0;
  strv_init(&gs.read_only);
  strv_init(&gs.blinded);
  int r = home_ids_collect(home, &hids);
  int hfd = home ? open(home, O_PATH | O_CLOEXEC) : -1;
  char *home_real = hfd >= 0 ? fd_realpath(hfd) : NULL;
  if (hfd >= 0)
    close(hfd);
  if (r == 0 && !(gs.known = calloc(1, sizeof(*gs.known))))
    r = -ENOMEM;
  raise_nofile();
  for (size_t i = 0; i < judged->n && r == 0; i++) {
    const struct sandbox_grant *sg = &judged->v[i];
    const struct manifest_grant *g = sg->g;
    if (!sg->place)
      continue; /* the workspace is always there, and writable */
    if (!(S_ISDIR(sg->place->os->mode) || S_ISREG(sg->place->os->mode))) {
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                          "grant %s: not a directory or regular file", g->path);
      break;
    }
    /* where the job sees it: the path as granted */
    char dest[PATH_MAX];
    r = g->base == MANIFEST_GRANT_HOME ? pathf(dest, sizeof(dest), "%s%s", home, g->path + 1)
                                       : pathf(dest, sizeof(dest), "%s", g->path);
    if (r < 0) {
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long", g->path);
      break;
    }
    int gfd = fcntl(sg->place->os->fd, F_DUPFD_CLOEXEC, 3);
    if (gfd < 0) {
      r = -errno;
      break;
    }
    if (g->rw && S_ISDIR(sg->place->os->mode)) {
      size_t *v = realloc(gs.rw_grants, (gs.n_rw_grants + 1) * sizeof(*v));
      if (!v) {
        close(gfd);
        r = -ENOMEM;
        break;
      }
      gs.rw_grants = v;
      v[gs.n_rw_grants++] = gs.n_mounts;
    }
    r = add_mount(&gs, g->rw ? BWRAP_MOUNT_RW_FD : BWRAP_MOUNT_RO_FD, gfd, dest);
    if (r < 0) {
      close(gfd);
      break;
    }
    r = blind_hidden(&later, sg, dest, diag);
    /* reached through a link (a grant of the place itself was judged by
     * the policy layer: the owner's ceiling names it) */
    const char *rel = home_real ? below(sg->place->path, home_real) : NULL;
    if (r == 0 && g->rw && home_ids_has(&hids, sg->place->os->id) &&
        !(rel && forbidden_home_hidden(rel)))
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                          "writable grant %s is a hidden entry of the home (a dotfile links to it)",
                          g->path);
    if (r == 0 && S_ISDIR(sg->place->os->mode)) {
      struct walk w = {.sg = sg,
                       .later = &later,
                       .gs = &gs,
                       .g = g,
                       .dest = dest,
                       .home = &hids,
                       .n_entries = &n_entries,
                       .n_protected = &n_protected,
                       .diag = diag};
      int wfd = openat(gfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (wfd < 0) {
        r = -errno;
      } else if (is_state_dir(wfd)) {
        r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                            "grant %s is a cordon state directory", g->path);
      } else {
        struct walk_dir root = {NULL, wfd, 0, true};
        r = walk_tree(&w, &root, g->rw, 0);
      }
      if (wfd >= 0)
        close(wfd);
    }
    /* each grant's blinds and read-only binds follow it directly, so that
     * a grant nested in another one is never covered by the outer one's
     * pins */
    if (r == 0)
      r = append_mounts(&gs, &later);
    release_later(&later);
  }
  if (r == 0)
    r = gs.read_only.err ? gs.read_only.err : gs.blinded.err;
  release_later(&later);
  free(hids.v);
  free(home_real);
  if (r < 0) {
    grants_release(&gs);
    return r;
  }
  *out = gs;
  return 0;
}

static json_t *strv_array(const struct strv *s) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < s->n; i++)
    json_array_append_new(a, json_string(s->v[i]));
  return a;
}

json_t *grants_explain_json(const struct grant_set *g) {
  return json_pack(
      "{s:o, s:o, s:[s,s,s,s,s,s], s:{s:i, s:i}}", "read_only", strv_array(&g->read_only),
      "blinded", strv_array(&g->blinded), "rules", "a grant of / or ~ is too broad",
      "hidden entries and bin, .local/bin of the home are granted only when the owner's grant "
      "roots name them",
      "a grant holding a forbidden path that does not exist yet is too broad",
      "inside a writable grant every hidden entry (.git as a whole) and every target of a home "
      "dotfile is read-only, the directories above it cannot be renamed",
      "FIFOs and sockets in any grant are replaced by /dev/null; cordon state directories by an "
      "empty directory",
      "new hidden entries a job creates in a writable grant are moved aside when the job "
      "ends (NAME.cordon-quarantined-<job id>) and named on its stderr",
      "walk_limits", "entries", GRANTS_WALK_MAX_ENTRIES, "protected", GRANTS_WALK_MAX_PROTECTED);
}

/* ---- after the job: new hidden entries moved aside ---- */

struct quarantine {
  const struct grants_known *known;
  const char *suffix;
  const char *dest; /* the grant's host path */
  char rel[PATH_MAX];
  size_t entries;
  struct strv *moved;
  int count;
};

static bool has_suffix(const char *name, const char *suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  return n >= k && strcmp(name + n - k, suffix) == 0;
}

static int quarantine_tree(struct quarantine *q, int dfd, size_t rel_len, int depth) {
  if (depth > 256)
    return 0;
  int dup_fd = dup(dfd);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) {
    if (dup_fd >= 0)
      close(dup_fd);
    return 0;
  }
  int r = 0;
  struct dirent *de;
  while (r == 0 && (de = readdir(d)) && ++q->entries <= GRANTS_WALK_MAX_ENTRIES) {
    const char *name = de->d_name;
    if (!strcmp(name, ".") || !strcmp(name, ".."))
      continue;
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    struct ident id = {st.st_dev, st.st_ino};
    if (pathf(q->rel + rel_len, sizeof(q->rel) - rel_len, "%s%s", rel_len ? "/" : "", name) < 0)
      continue;
    if (name[0] == '.' && known_has(q->known, id)) {
      /* was there, and read-only during the job */
    } else if (name[0] == '.' && !has_suffix(name, q->suffix)) {
      /* only what this walk renamed is passed over (readdir may show it
       * again); any other new hidden name, whatever it contains, moves */
      char to[NAME_MAX + 1];
      if (pathf(to, sizeof(to), "%s%s", name, q->suffix) == 0 &&
          renameat2(dfd, name, dfd, to, RENAME_NOREPLACE) == 0) {
        char full[PATH_MAX];
        if (pathf(full, sizeof(full), "%s/%s", q->dest, q->rel) == 0)
          strv_add(q->moved, full);
        q->count++;
      }
    } else if (S_ISDIR(st.st_mode)) {
      int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        r = quarantine_tree(q, sub, strlen(q->rel), depth + 1);
        close(sub);
      }
    }
    q->rel[rel_len] = '\0';
  }
  closedir(d);
  return r;
}

int grants_quarantine_new(const struct grant_set *g, const char *job_id, struct strv *moved,
                          bool *out_incomplete) {
  *out_incomplete = false;
  char suffix[64];
  snprintf(suffix, sizeof(suffix), ".cordon-quarantined-%.32s", job_id ? job_id : "job");
  int total = 0;
  for (size_t i = 0; i < g->n_rw_grants; i++) {
    const struct bwrap_mount *m = &g->mounts[g->rw_grants[i]];
    int dfd = openat(m->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
      continue;
    struct quarantine q = {.known = g->known, .suffix = suffix, .dest = m->dest, .moved = moved};
    int r = quarantine_tree(&q, dfd, 0, 0);
    close(dfd);
    if (r < 0)
      return r;
    total += q.count;
    if (q.entries > GRANTS_WALK_MAX_ENTRIES)
      *out_incomplete = true;
  }
  return moved->err ? moved->err : total;
}
