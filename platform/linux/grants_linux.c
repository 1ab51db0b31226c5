#include "platform/linux/grants_linux.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "platform/forbidden.h"
#include "platform/linux/sandbox_linux.h"

struct ident {
  dev_t dev;
  ino_t ino;
};

/* A symlink as it was before the job: a symlink cannot be changed, only
 * replaced, and a replacement (even one on a reused inode) or a rename has
 * a new ctime. */
struct link_id {
  dev_t dev;
  ino_t ino;
  time_t ctime_s;
  long ctime_ns;
};

/* What was inside the writable grants before the job (grants_linux_mounts):
 * the hidden entries (by identity; each one is read-only during the job and
 * cannot be renamed or removed) and the symlinks, sorted. */
struct grants_known {
  struct ident *v;
  size_t n;
  struct link_id *links;
  size_t n_links, cap_links;
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
  if (g->known) {
    free(g->known->v);
    free(g->known->links);
  }
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

static int ident_cmp(const void *pa, const void *pb) {
  const struct ident *a = pa, *b = pb;
  if (a->dev != b->dev)
    return a->dev < b->dev ? -1 : 1;
  return a->ino < b->ino ? -1 : a->ino > b->ino;
}

/* (sorted by grants_linux_mounts) */
static bool known_has(const struct grants_known *k, struct ident id) {
  return k && k->n && bsearch(&id, k->v, k->n, sizeof(id), ident_cmp) != NULL;
}

static struct link_id link_id_of(const struct stat *st) {
  return (struct link_id){st->st_dev, st->st_ino, st->st_ctim.tv_sec, st->st_ctim.tv_nsec};
}

static int link_id_cmp(const void *pa, const void *pb) {
  const struct link_id *a = pa, *b = pb;
  if (a->dev != b->dev)
    return a->dev < b->dev ? -1 : 1;
  if (a->ino != b->ino)
    return a->ino < b->ino ? -1 : 1;
  if (a->ctime_s != b->ctime_s)
    return a->ctime_s < b->ctime_s ? -1 : 1;
  return a->ctime_ns < b->ctime_ns ? -1 : a->ctime_ns > b->ctime_ns;
}

/* (bounded by the walk's GRANTS_WALK_MAX_ENTRIES) */
static int known_link_add(struct grants_known *k, const struct stat *st) {
  if (k->n_links == k->cap_links) {
    size_t cap = k->cap_links ? 2 * k->cap_links : 64;
    struct link_id *v = realloc(k->links, cap * sizeof(*v));
    if (!v)
      return -ENOMEM;
    k->links = v;
    k->cap_links = cap;
  }
  k->links[k->n_links++] = link_id_of(st);
  return 0;
}

static bool known_link_has(const struct grants_known *k, const struct stat *st) {
  struct link_id id = link_id_of(st);
  return k && k->n_links && bsearch(&id, k->links, k->n_links, sizeof(id), link_id_cmp) != NULL;
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
      /* blinded during the job: the quarantine leaves it */
      w->rel[len] = '\0';
      if (protect && (r = known_add(w->gs->known, (struct ident){st.st_dev, st.st_ino})) < 0)
        break;
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
      /* an outward symlink the owner made is left by the quarantine */
      if (protect && (r = known_link_add(w->gs->known, &st)) < 0)
        break;
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
        /* blinded during the job: the quarantine leaves it (by identity) */
        r = protect ? known_add(w->gs->known, (struct ident){st.st_dev, st.st_ino}) : 0;
        if (r == 0)
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
  if (r == 0 && gs.known->n)
    qsort(gs.known->v, gs.known->n, sizeof(*gs.known->v), ident_cmp);
  if (r == 0 && gs.known->n_links)
    qsort(gs.known->links, gs.known->n_links, sizeof(*gs.known->links), link_id_cmp);
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
      "{s:o, s:o, s:[s,s,s,s,s,s], s:{s:i, s:i, s:i}}", "read_only", strv_array(&g->read_only),
      "blinded", strv_array(&g->blinded), "rules", "a grant of / or ~ is too broad",
      "hidden entries and bin, .local/bin of the home are granted only when the owner's grant "
      "roots name them",
      "a grant holding a forbidden path that does not exist yet is too broad",
      "inside a writable grant every hidden entry (.git as a whole) and every target of a home "
      "dotfile is read-only, the directories above it cannot be renamed",
      "FIFOs and sockets in any grant are replaced by /dev/null; cordon state directories by an "
      "empty directory",
      "new hidden entries and new outward symlinks a job leaves in a writable grant are moved "
      "aside when the job ends (NAME.cordon-quarantined-<job id>-<nonce>), and so is whole any "
      "directory deeper than the quarantine's depth bound or that cannot be walked; the first "
      "ones are named on its stderr, the rest counted",
      "walk_limits", "entries", GRANTS_WALK_MAX_ENTRIES, "protected", GRANTS_WALK_MAX_PROTECTED,
      "quarantine_depth", GRANTS_QUARANTINE_MAX_DEPTH);
}

/* ---- after the job: new hidden entries and outward links moved aside ---- */

void grants_quarantine_report_init(struct grants_quarantine_report *rep) {
  memset(rep, 0, sizeof(*rep));
  strv_init(&rep->named);
}

void grants_quarantine_report_release(struct grants_quarantine_report *rep) {
  if (rep)
    strv_release(&rep->named);
}

/* A directory on the quarantine walk's stack. */
struct qframe {
  DIR *d;
  struct ident id;
  size_t rel_len;  /* its path below the grant root: q->rel[0..rel_len] */
  bool unfinished; /* something in it could be neither checked nor moved */
};

struct quarantine {
  const struct grants_known *known;
  const char *suffix;
  const char *dest; /* the grant's host path (for the report only) */
  char *rel;        /* the current entry's path below the grant root */
  size_t rel_cap;
  struct qframe *st;
  size_t depth; /* frames on the stack; st[0] is the grant root */
  unsigned long counter;
  struct grants_quarantine_report *rep;
};

static bool has_suffix(const char *name, const char *suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* rel = the path of frame f, then "/" name (bounded: depth x NAME_MAX) */
static int rel_set(struct quarantine *q, const struct qframe *f, const char *name) {
  size_t n = strlen(name), need = f->rel_len + 1 + n + 1;
  if (need > q->rel_cap) {
    size_t cap = q->rel_cap ? q->rel_cap : 256;
    while (cap < need)
      cap *= 2;
    char *r = realloc(q->rel, cap);
    if (!r)
      return -ENOMEM;
    q->rel = r;
    q->rel_cap = cap;
  }
  size_t at = f->rel_len;
  if (at)
    q->rel[at++] = '/';
  memcpy(q->rel + at, name, n + 1);
  return 0;
}

static void q_name(struct quarantine *q, const char *what, const char *to) {
  struct grants_quarantine_report *rep = q->rep;
  if (rep->named.n >= GRANTS_QUARANTINE_MAX_NAMED)
    return;
  /* a path longer than the cut keeps its head and its tail */
  size_t n = strlen(q->rel), keep = GRANTS_QUARANTINE_NAME_CHARS / 2;
  if (n == 0)
    strv_addf(&rep->named, "%s %s %s", what, q->dest, to);
  else if (n <= GRANTS_QUARANTINE_NAME_CHARS)
    strv_addf(&rep->named, "%s %s/%s %s", what, q->dest, q->rel, to);
  else
    strv_addf(&rep->named, "%s %s/%.*s...%s %s", what, q->dest, (int)keep, q->rel,
              q->rel + n - keep, to);
  if (rep->named.err)
    rep->names_lost = true;
}

/* Rename name (in dfd) to name<suffix>, or, when that is too long or
 * taken, to a cut name with a number before the suffix. The suffix holds
 * a nonce drawn after the job ended: no name the job made ends with it. */
static int move_aside(struct quarantine *q, int dfd, const char *name, char *to, size_t to_len) {
  size_t nl = strlen(name), sl = strlen(q->suffix);
  if (to_len < NAME_MAX + 1)
    return -EINVAL;
  if (nl + sl <= NAME_MAX) {
    memcpy(to, name, nl);
    memcpy(to + nl, q->suffix, sl + 1);
    if (renameat2(dfd, name, dfd, to, RENAME_NOREPLACE) == 0)
      return 0;
    if (errno != EEXIST)
      return -errno;
  }
  for (int tries = 0; tries < 4; tries++) {
    char num[32];
    snprintf(num, sizeof(num), "-%lu", ++q->counter);
    size_t ml = strlen(num), keep = NAME_MAX - sl - ml;
    keep = keep < nl ? keep : nl;
    memcpy(to, name, keep);
    memcpy(to + keep, num, ml);
    memcpy(to + keep + ml, q->suffix, sl + 1);
    if (renameat2(dfd, name, dfd, to, RENAME_NOREPLACE) == 0)
      return 0;
    if (errno != EEXIST)
      return -errno;
  }
  return -EEXIST;
}

enum q_kind { Q_HIDDEN, Q_LINK, Q_UNWALKED };

/* Move the entry q->rel (name in frame f) aside and count it; a failure
 * leaves f unfinished, so that f itself is moved aside whole. */
static void q_move(struct quarantine *q, struct qframe *f, const char *name, enum q_kind kind) {
  static const char *const what[] = {"new hidden entry", "new outward symlink",
                                     "unwalked directory"};
  char to[NAME_MAX + 1];
  char note[NAME_MAX + 32];
  if (move_aside(q, dirfd(f->d), name, to, sizeof(to)) < 0) {
    f->unfinished = true;
    return;
  }
  if (kind == Q_HIDDEN)
    q->rep->n_hidden++;
  else if (kind == Q_LINK)
    q->rep->n_links++;
  else
    q->rep->n_unwalked++;
  snprintf(note, sizeof(note), "moved aside as %s", to);
  q_name(q, what[kind], note);
}

/* A symlink target, component by component, from the link's directory
 * (depth levels below the grant root): does it leave the grant or name a
 * hidden entry? */
static bool lexically_outward(const char *t, size_t depth) {
  size_t lvl = depth;
  for (const char *c = t; *c;) {
    size_t n = strcspn(c, "/");
    if (n == 2 && c[0] == '.' && c[1] == '.') {
      if (lvl == 0)
        return true;
      lvl--;
    } else if (n == 1 && c[0] == '.') {
      /* here */
    } else if (n > 0) {
      if (c[0] == '.')
        return true;
      lvl++;
    }
    c += n;
    while (*c == '/')
      c++;
  }
  return false;
}

bool grants_link_outward(int dfd, const char *name, size_t depth) {
  char t[PATH_MAX + 1];
  ssize_t n = readlinkat(dfd, name, t, sizeof(t));
  if (n <= 0 || (size_t)n >= sizeof(t))
    return true;
  t[n] = '\0';
  if (t[0] == '/' || lexically_outward(t, depth))
    return true;
  /* lexically inside: the kernel agrees only if no component on the way
   * is a symlink (nor a mount point), the last one included */
  struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                         .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
  int fd = (int)syscall(SYS_openat2, dfd, t, &how, sizeof(how));
  if (fd < 0)
    return !(errno == ENOENT || errno == ENOTDIR);
  struct stat st;
  bool out = fstat(fd, &st) < 0 || S_ISLNK(st.st_mode);
  close(fd);
  return out;
}

/* Open directory name in frame f and push it; false if it cannot be
 * walked (too deep, cannot be opened or is no longer what was seen). */
static bool q_push(struct quarantine *q, struct qframe *f, const char *name,
                   const struct stat *st) {
  if (q->depth >= GRANTS_QUARANTINE_MAX_DEPTH + 1)
    return false;
  int sub = openat(dirfd(f->d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat sst;
  if (sub >= 0 && (fstat(sub, &sst) < 0 || sst.st_ino != st->st_ino || sst.st_dev != st->st_dev)) {
    close(sub);
    sub = -1;
  }
  DIR *d = sub >= 0 ? fdopendir(sub) : NULL;
  if (!d) {
    if (sub >= 0)
      close(sub);
    return false;
  }
  q->st[q->depth++] = (struct qframe){d, {st->st_dev, st->st_ino}, strlen(q->rel), false};
  return true;
}

/* Pop the top frame; an unfinished directory is moved aside whole from
 * its parent (the grant root cannot be: it is counted as failed). */
static void q_pop(struct quarantine *q) {
  struct qframe f = q->st[--q->depth];
  closedir(f.d);
  if (!f.unfinished)
    return;
  if (q->depth == 0) {
    q->rep->n_failed++;
    if (rel_set(q, &(struct qframe){0}, "") == 0)
      q_name(q, "grant", "could not be walked to its end");
    return;
  }
  struct qframe *p = &q->st[q->depth - 1];
  q->rel[f.rel_len] = '\0';
  const char *name = q->rel + p->rel_len + (p->rel_len ? 1 : 0);
  struct stat st;
  /* still the directory that was walked (the owner may rename things) */
  if (fstatat(dirfd(p->d), name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != f.id.dev ||
      st.st_ino != f.id.ino) {
    p->unfinished = true;
    return;
  }
  q_move(q, p, name, Q_UNWALKED);
}

static int quarantine_grant(struct quarantine *q, int root_fd) {
  int dfd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  struct stat rst;
  if (!d || fstat(dirfd(d), &rst) < 0) {
    if (d)
      closedir(d);
    else if (dfd >= 0)
      close(dfd);
    q->rep->n_failed++;
    if (rel_set(q, &(struct qframe){0}, "") == 0)
      q_name(q, "grant", "could not be opened");
    return 0;
  }
  q->st[0] = (struct qframe){d, {rst.st_dev, rst.st_ino}, 0, false};
  q->depth = 1;
  while (q->depth > 0) {
    struct qframe *f = &q->st[q->depth - 1];
    errno = 0;
    struct dirent *de = readdir(f->d);
    if (!de) {
      if (errno)
        f->unfinished = true;
      q_pop(q);
      continue;
    }
    const char *name = de->d_name;
    if (!strcmp(name, ".") || !strcmp(name, "..") || has_suffix(name, q->suffix))
      continue; /* moved aside by this walk (readdir may show it again) */
    if (rel_set(q, f, name) < 0) {
      /* no memory to name it: moved aside whole from the parent */
      q->rep->names_lost = true;
      f->unfinished = true;
      continue;
    }
    struct stat st;
    if (fstatat(dirfd(f->d), name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) /* gone is fine; unknown is not */
        f->unfinished = true;
      continue;
    }
    if (known_has(q->known, (struct ident){st.st_dev, st.st_ino})) {
      /* there before and read-only or blinded during the job: left, and
       * not looked into */
    } else if (name[0] == '.') {
      q_move(q, f, name, Q_HIDDEN);
    } else if (S_ISLNK(st.st_mode)) {
      if (!known_link_has(q->known, &st) && grants_link_outward(dirfd(f->d), name, q->depth - 1))
        q_move(q, f, name, Q_LINK);
    } else if (S_ISDIR(st.st_mode)) {
      if (!q_push(q, f, name, &st))
        q_move(q, f, name, Q_UNWALKED);
    }
  }
  return 0;
}

int grants_quarantine_new(const struct grant_set *g, const char *job_id,
                          struct grants_quarantine_report *rep) {
  /* the nonce is drawn now, after the job ended: no name it made has it */
  uint8_t nonce[8];
  if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
    return -EIO;
  char id[33];
  size_t k = 0;
  for (const char *c = job_id ? job_id : "job"; *c && k < sizeof(id) - 1; c++)
    id[k++] = (isalnum((unsigned char)*c) || *c == '-' || *c == '_') ? *c : '_';
  id[k] = '\0';
  char suffix[80];
  snprintf(suffix, sizeof(suffix), ".cordon-quarantined-%s-%02x%02x%02x%02x%02x%02x%02x%02x", id,
           nonce[0], nonce[1], nonce[2], nonce[3], nonce[4], nonce[5], nonce[6], nonce[7]);
  struct quarantine q = {.known = g->known, .suffix = suffix, .rep = rep};
  q.st = calloc(GRANTS_QUARANTINE_MAX_DEPTH + 1, sizeof(*q.st));
  if (!q.st)
    return -ENOMEM;
  for (size_t i = 0; i < g->n_rw_grants; i++) {
    const struct bwrap_mount *m = &g->mounts[g->rw_grants[i]];
    q.dest = m->dest;
    quarantine_grant(&q, m->fd);
  }
  free(q.st);
  free(q.rel);
  return 0;
}
