#include "platform/linux/grants.h"

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
#include <sys/stat.h>
#include <unistd.h>

/* Credentials and secrets, relative to the job user's home: never granted,
 * blinded wherever a grant would show them. docs/SECURITY.md has the list. */
static const char *const forbidden_home[] = {
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config/gh",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".config/git/credentials",
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".password-store",
    ".local/share/keyrings",
    ".config/cordon",
    ".local/state/cordon-agent",
    ".pki",
};
static const char *const forbidden_abs[] = {
    "/etc/shadow",           "/etc/gshadow",           "/etc/shadow-",
    "/etc/gshadow-",         "/etc/ssl/private",       "/etc/security/opasswd",
    "/var/lib/cordon-agent", "/var/lib/cordon-server", "/root",
};
/* Places where written code later runs outside the sandbox. A writable
 * grant that contains one of these (existing or not) is too broad. */
static const char *const write_forbidden_home[] = {
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".xprofile",
    ".xsessionrc",
    ".pam_environment",
    ".config/autostart",
    ".config/systemd",
    ".config/environment.d",
    ".config/fish",
    ".local/share/applications",
    ".local/bin",
};
/* Inside a writable grant, at its top or one level down: made read-only. */
static const char *const write_forbidden_rel[] = {".git/hooks", ".envrc"};

struct ident {
  dev_t dev;
  ino_t ino;
};

struct forbidden {
  int fd;
  struct ident id;
  char *real; /* resolved path */
  bool is_dir;
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

/* Is any of ids[] the directory fd or one of its ancestors? (skip_self:
 * only strict ancestors.) Returns the index, or -1. */
static int ancestor_match(int fd, bool skip_self, const struct ident *ids, size_t n) {
  int cur = dup(fd);
  int found = -1;
  for (int depth = 0; cur >= 0 && depth < 4096 && found < 0; depth++) {
    struct ident id = {0};
    if (fd_ident(cur, &id, NULL) < 0)
      break;
    if (!(skip_self && depth == 0))
      for (size_t i = 0; i < n; i++)
        if (same(id, ids[i])) {
          found = (int)i;
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
    if (up < 0 || fd_ident(up, &upid, NULL) < 0 || same(upid, id)) {
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

static void forbidden_release(struct forbidden *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (f[i].fd >= 0)
      close(f[i].fd);
    free(f[i].real);
  }
  free(f);
}

static int forbidden_add(struct forbidden *f, size_t *n, const char *path) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0)
    return 0; /* does not exist (or cannot be reached): nothing to hide */
  mode_t mode;
  struct forbidden *e = &f[*n];
  if (fd_ident(fd, &e->id, &mode) < 0 || !(e->real = fd_realpath(fd))) {
    close(fd);
    return 0;
  }
  e->fd = fd;
  e->is_dir = S_ISDIR(mode);
  (*n)++;
  return 0;
}

static int forbidden_collect(const struct sandbox_policy *policy, const char *home,
                             struct forbidden **out, size_t *out_n) {
  size_t cap = sizeof(forbidden_home) / sizeof(forbidden_home[0]) +
               sizeof(forbidden_abs) / sizeof(forbidden_abs[0]) + 64;
  struct forbidden *f = calloc(cap, sizeof(*f));
  if (!f)
    return -ENOMEM;
  size_t n = 0;
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof(forbidden_home) / sizeof(forbidden_home[0]); i++) {
    if (pathf(path, sizeof(path), "%s/%s", home, forbidden_home[i]) == 0)
      forbidden_add(f, &n, path);
  }
  for (size_t i = 0; i < sizeof(forbidden_abs) / sizeof(forbidden_abs[0]); i++)
    forbidden_add(f, &n, forbidden_abs[i]);
  if (policy->state_dir)
    forbidden_add(f, &n, policy->state_dir);
  glob_t g;
  if (glob("/etc/ssh/*_key", 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc && n < cap; i++)
      forbidden_add(f, &n, g.gl_pathv[i]);
    globfree(&g);
  }
  *out = f;
  *out_n = n;
  return 0;
}

void grants_base_blinds(const char *const **out_files, size_t *out_n_files,
                        const char *const **out_dirs, size_t *out_n_dirs) {
  static char store[64][PATH_MAX];
  static const char *files[64];
  static const char *dirs[8];
  size_t nf = 0, nd = 0, ns = 0;
  for (size_t i = 0; i < sizeof(forbidden_abs) / sizeof(forbidden_abs[0]); i++) {
    struct stat st;
    if (strncmp(forbidden_abs[i], "/etc/", 5) != 0 || lstat(forbidden_abs[i], &st) < 0)
      continue;
    if (S_ISDIR(st.st_mode) && nd < 8)
      dirs[nd++] = forbidden_abs[i];
    else if (S_ISREG(st.st_mode) && nf < 64)
      files[nf++] = forbidden_abs[i];
  }
  glob_t g;
  if (glob("/etc/ssh/*_key", 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc && nf < 64 && ns < 64; i++) {
      snprintf(store[ns], PATH_MAX, "%s", g.gl_pathv[i]);
      files[nf++] = store[ns++];
    }
    globfree(&g);
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
  for (size_t i = 0; i < g->n_fds; i++)
    close(g->fds[i]);
  for (size_t i = 0; i < g->n_mounts; i++)
    free(g->dests[i]);
  free(g->fds);
  free(g->dests);
  free(g->mounts);
  memset(g, 0, sizeof(*g));
}

static int open_as(const struct grant_user *u, const char *path, int flags) {
  int old_uid = 0, old_gid = 0;
  if (u->switch_fsuid) {
    old_gid = setfsgid(u->gid);
    old_uid = setfsuid(u->uid);
  }
  int fd = open(path, flags);
  int e = errno;
  if (u->switch_fsuid) {
    setfsuid((uid_t)old_uid);
    setfsgid((gid_t)old_gid);
  }
  errno = e;
  return fd;
}

static int expand(const char *home, const char *p, char *out, size_t len) {
  if (p[0] == '~')
    return pathf(out, len, "%s%s", home, p + 1);
  return pathf(out, len, "%s", p);
}

/* Blind forbidden entries below a read-only grant; refuse a writable one. */
static int check_forbidden_below(struct grant_set *gs, const struct manifest_grant *g, int gfd,
                                 const char *greal, const char *dest, const struct forbidden *f,
                                 size_t nf, struct cordon_diag *diag) {
  struct ident gid = {0};
  if (fd_ident(gfd, &gid, NULL) < 0)
    return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: cannot stat", g->path);
  for (size_t i = 0; i < nf; i++) {
    if (ancestor_match(f[i].fd, true, &gid, 1) < 0)
      continue;
    if (g->rw)
      return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD,
                             "writable grant %s contains the forbidden path %s", g->path,
                             f[i].real);
    const char *rel = below(f[i].real, greal);
    if (!rel)
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                             "grant %s: cannot place forbidden path %s", g->path, f[i].real);
    char blind[PATH_MAX];
    if (pathf(blind, sizeof(blind), "%s/%s", dest, rel) < 0)
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long", g->path);
    int r = add_mount(gs, f[i].is_dir ? BWRAP_MOUNT_BLIND_DIR : BWRAP_MOUNT_BLIND_FILE, -1, blind);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Writable grants: too broad if they contain a home write-forbidden place;
 * existing .git/hooks and .envrc at the top or one level down become ro. */
static int check_write_forbidden(struct grant_set *gs, const struct manifest_grant *g, int gfd,
                                 const char *greal, const char *home_real, const char *dest,
                                 struct cordon_diag *diag) {
  char p[PATH_MAX];
  for (size_t i = 0; i < sizeof(write_forbidden_home) / sizeof(write_forbidden_home[0]); i++) {
    if (pathf(p, sizeof(p), "%s/%s", home_real, write_forbidden_home[i]) < 0)
      continue;
    if (strcmp(p, greal) == 0 || below(p, greal))
      return cordon_diag_set(
          diag, CORDON_E_SCOPE_TOO_BROAD,
          "writable grant %s contains %s, where written code runs outside the sandbox", g->path, p);
  }
  struct stat st;
  if (fstat(gfd, &st) < 0 || !S_ISDIR(st.st_mode))
    return 0;
  /* candidates: the grant itself and each subdirectory one level down */
  int dfd = openat(gfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return 0;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return 0;
  }
  int r = 0;
  struct dirent *de;
  bool top_done = false;
  for (;;) {
    const char *sub;
    if (!top_done) {
      sub = "";
      top_done = true;
    } else {
      de = readdir(d);
      if (!de)
        break;
      if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
        continue;
      sub = de->d_name;
    }
    for (size_t i = 0; i < sizeof(write_forbidden_rel) / sizeof(write_forbidden_rel[0]); i++) {
      if (pathf(p, sizeof(p), "%s%s%s", sub, *sub ? "/" : "", write_forbidden_rel[i]) < 0)
        continue;
      int fd = openat(gfd, p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0)
        continue;
      struct stat fst;
      if (fstat(fd, &fst) < 0 || S_ISLNK(fst.st_mode)) {
        close(fd);
        continue;
      }
      char ro[PATH_MAX];
      r = pathf(ro, sizeof(ro), "%s/%s", dest, p);
      if (r < 0) {
        close(fd);
        r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long", g->path);
        goto out;
      }
      r = add_mount(gs, BWRAP_MOUNT_RO_FD, fd, ro);
      if (r < 0) {
        close(fd);
        goto out;
      }
    }
  }
out:
  closedir(d);
  return r;
}

int grants_resolve(const struct sandbox_policy *policy, const struct grant_user *user,
                   const struct manifest *m, struct grant_set *out, struct cordon_diag *diag) {
  struct grant_set gs = {0};
  struct forbidden *f = NULL;
  size_t nf = 0;
  struct ident *roots = NULL;
  size_t nroots = 0;
  struct ident root_id = {0}, home_id = {0};
  char *home_real = NULL;
  int r = forbidden_collect(policy, user->home, &f, &nf);
  if (r < 0)
    return r;
  /* blind/overlay mounts go after every grant mount */
  struct grant_set later = {0};

  int rfd = open("/", O_PATH | O_CLOEXEC);
  int hfd = open_as(user, user->home, O_PATH | O_CLOEXEC);
  bool have_home = hfd >= 0;
  if (rfd < 0 || fd_ident(rfd, &root_id, NULL) < 0) {
    r = -EIO;
    goto out;
  }
  if (have_home) {
    fd_ident(hfd, &home_id, NULL);
    home_real = fd_realpath(hfd);
  }
  roots = calloc(policy->n_grant_roots + 1, sizeof(*roots));
  if (!roots) {
    r = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < policy->n_grant_roots; i++) {
    char p[PATH_MAX];
    if (expand(user->home, policy->grant_roots[i], p, sizeof(p)) < 0)
      continue;
    int fd = open_as(user, p, O_PATH | O_CLOEXEC);
    if (fd >= 0 && fd_ident(fd, &roots[nroots], NULL) == 0)
      nroots++;
    if (fd >= 0)
      close(fd);
  }

  for (size_t i = 0; i < m->n_grants; i++) {
    const struct manifest_grant *g = &m->grants[i];
    if (g->base == MANIFEST_GRANT_WORKSPACE)
      continue; /* the workspace is always there, and writable */
    char hostpath[PATH_MAX];
    if (expand(user->home, g->path, hostpath, sizeof(hostpath)) < 0) {
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: path too long", g->path);
      goto out;
    }
    if (g->base == MANIFEST_GRANT_ABSOLUTE && g->rel[0] == '\0') {
      r = cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD, "a grant of / is too broad");
      goto out;
    }
    if (g->base == MANIFEST_GRANT_HOME && g->rel[0] == '\0' && g->rw) {
      r = cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD, "a writable grant of ~ is too broad");
      goto out;
    }
    int gfd = open_as(user, hostpath, O_PATH | O_CLOEXEC);
    if (gfd < 0) {
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: %s", g->path,
                          strerror(errno));
      goto out;
    }
    r = add_mount(&gs, g->rw ? BWRAP_MOUNT_RW_FD : BWRAP_MOUNT_RO_FD, gfd, hostpath);
    if (r < 0) {
      close(gfd);
      goto out;
    }
    struct ident gid = {0};
    mode_t mode = 0;
    char *greal = fd_realpath(gfd);
    if (!greal || fd_ident(gfd, &gid, &mode) < 0 || !(S_ISDIR(mode) || S_ISREG(mode))) {
      free(greal);
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                          "grant %s: not a directory or regular file", g->path);
      goto out;
    }
    if (same(gid, root_id) || (g->rw && have_home && same(gid, home_id))) {
      r = cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD, "grant %s resolves to %s: too broad",
                          g->path, greal);
    } else if (ancestor_match(gfd, false, roots, nroots) < 0) {
      r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                          "grant %s (%s) is not under any of the owner's grant roots", g->path,
                          greal);
    } else {
      for (size_t k = 0; k < nf && r == 0; k++) {
        if (ancestor_match(gfd, false, &f[k].id, 1) >= 0)
          r = cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                              "grant %s is the forbidden path %s or lies inside it", g->path,
                              f[k].real);
      }
    }
    if (r == 0)
      r = check_forbidden_below(&later, g, gfd, greal, hostpath, f, nf, diag);
    if (r == 0 && g->rw)
      r = check_write_forbidden(&later, g, gfd, greal, home_real ? home_real : user->home, hostpath,
                                diag);
    free(greal);
    if (r < 0)
      goto out;
  }
  /* append the blinds and overlays after the grants */
  for (size_t i = 0; i < later.n_mounts; i++) {
    int fd = later.mounts[i].fd;
    r = add_mount(&gs, later.mounts[i].kind, fd, later.mounts[i].dest);
    if (r < 0)
      goto out;
    if (fd >= 0) { /* ownership moved to gs */
      for (size_t k = 0; k < later.n_fds; k++)
        if (later.fds[k] == fd)
          later.fds[k] = -1;
    }
  }
  *out = gs;
  memset(&gs, 0, sizeof(gs));
  r = 0;
out:
  for (size_t k = 0; k < later.n_fds; k++)
    if (later.fds[k] >= 0)
      close(later.fds[k]);
  later.n_fds = 0;
  grants_release(&later);
  grants_release(&gs);
  if (rfd >= 0)
    close(rfd);
  if (hfd >= 0)
    close(hfd);
  free(home_real);
  free(roots);
  forbidden_release(f, nf);
  return r;
}
