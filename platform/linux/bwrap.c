#include "platform/linux/bwrap.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* The writable space of the view besides the writable grants: one tmpfs
 * of disk_mb on the workspace (the agent's, bounded in inodes too, or
 * bwrap's), which holds /tmp and /dev/shm too (symlinks to its .tmp and
 * .shm), so writing to all of them together stops at disk_mb with ENOSPC.
 * /dev is a read-only directory of the root with the host's harmless
 * device nodes bound on it; ptys come from a private devpts that bwrap's
 * --dev mounts under SANDBOX_DEV_DIR, whose tmpfs is then read-only. */
static void add_dev_and_scratch(struct strv *a, const struct bwrap_input *in, uint64_t disk) {
  static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  strv_addv(a, "--dev", SANDBOX_DEV_DIR, "--remount-ro", SANDBOX_DEV_DIR, "--perms", "0755",
            "--dir", "/dev", NULL);
  for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
    strv_add(a, "--dev-bind");
    strv_addf(a, "/dev/%s", nodes[i]);
    strv_addf(a, "/dev/%s", nodes[i]);
  }
  strv_addv(a, "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0",
            "/dev/stdin", "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink",
            "/proc/self/fd/2", "/dev/stderr", "--symlink", SANDBOX_DEV_DIR "/pts", "/dev/pts",
            "--symlink", "pts/ptmx", "/dev/ptmx", NULL);
  if (in->workspace_mounted) {
    strv_add(a, "--bind-fd");
    strv_addf(a, "%d", in->workspace_fd);
    strv_add(a, SANDBOX_WORKSPACE_DIR);
  } else {
    strv_add(a, "--size");
    strv_addf(a, "%" PRIu64, disk);
    strv_addv(a, "--tmpfs", SANDBOX_WORKSPACE_DIR, NULL);
  }
  strv_addv(a, "--perms", "01777", "--dir", SANDBOX_TMP_DIR, "--perms", "01777", "--dir",
            SANDBOX_SHM_DIR, "--symlink", SANDBOX_TMP_DIR, "/tmp", "--symlink", SANDBOX_SHM_DIR,
            "/dev/shm", NULL);
}

int bwrap_workspace_tmpfs_options(uint32_t disk_mb, uid_t uid, gid_t gid, char *buf, size_t len) {
  uint64_t inodes = (uint64_t)disk_mb * BWRAP_WORKSPACE_INODES_PER_MB;
  int n = snprintf(buf, len, "size=%" PRIu64 ",nr_inodes=%" PRIu64 ",mode=0755,uid=%u,gid=%u",
                   (uint64_t)disk_mb << 20, inodes, (unsigned)uid, (unsigned)gid);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int bwrap_argv_build(const struct bwrap_host *host, const struct bwrap_input *in,
                     struct strv *out_argv) {
  struct strv *a = out_argv;
  const struct manifest *m = in->m;
  uint64_t disk = (uint64_t)m->disk_mb << 20;

  strv_add(a, host->bwrap_path);
  /* every namespace; a nested user namespace is disabled */
  strv_addv(a, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
            "--unshare-cgroup", NULL);
  if (!m->net)
    strv_add(a, "--unshare-net");
  strv_addv(a, "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "cordon", NULL);

  /* the base view: an allowlist */
  for (size_t i = 0; i < host->n_base; i++) {
    const struct bwrap_base *b = &host->base[i];
    if (b->link_target)
      strv_addv(a, "--symlink", b->link_target, b->path, NULL);
    else
      strv_addv(a, "--ro-bind", b->path, b->path, NULL);
  }
  for (size_t i = 0; i < host->n_blind_files; i++)
    strv_addv(a, "--ro-bind", "/dev/null", host->blind_files[i], NULL);
  for (size_t i = 0; i < host->n_blind_dirs; i++)
    strv_addv(a, "--tmpfs", host->blind_dirs[i], "--remount-ro", host->blind_dirs[i], NULL);
  /* /proc/1 is the namespace's init (bwrap's, the job's uid, dumpable):
   * an empty read-only tmpfs over its directory keeps the job from its
   * mem, task/1/mem and fds (docs/SECURITY.md, "The job's init") */
  strv_addv(a, "--proc", "/proc", "--tmpfs", "/proc/1", "--remount-ro", "/proc/1", NULL);
  add_dev_and_scratch(a, in, disk);
  strv_add(a, "--ro-bind-fd");
  strv_addf(a, "%d", in->package_fd);
  strv_add(a, SANDBOX_PACKAGE_DIR);

  for (size_t i = 0; i < in->n_mounts; i++) {
    const struct bwrap_mount *mt = &in->mounts[i];
    switch (mt->kind) {
    case BWRAP_MOUNT_RO_FD:
    case BWRAP_MOUNT_RW_FD:
      strv_add(a, mt->kind == BWRAP_MOUNT_RO_FD ? "--ro-bind-fd" : "--bind-fd");
      strv_addf(a, "%d", mt->fd);
      strv_add(a, mt->dest);
      break;
    case BWRAP_MOUNT_BLIND_DIR:
      strv_addv(a, "--tmpfs", mt->dest, "--remount-ro", mt->dest, NULL);
      break;
    case BWRAP_MOUNT_BLIND_FILE:
      strv_addv(a, "--ro-bind", "/dev/null", mt->dest, NULL);
      break;
    }
  }
  /* nothing else may be created at the top of the view */
  strv_addv(a, "--remount-ro", "/", NULL);

  strv_addv(a, "--chdir", SANDBOX_PACKAGE_DIR, "--clearenv", NULL);
  strv_addv(a, "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--setenv", "HOME", in->home, "--setenv", "USER", in->user, "--setenv", "LOGNAME",
            in->user, "--setenv", "PACKAGE", SANDBOX_PACKAGE_DIR, "--setenv", "WORKSPACE",
            SANDBOX_WORKSPACE_DIR, "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
            NULL);
  for (size_t i = 0; i < m->n_env; i++)
    strv_addv(a, "--setenv", m->env[i].name, m->env[i].value, NULL);
  strv_add(a, "--seccomp");
  strv_addf(a, "%d", in->seccomp_fd);
  strv_add(a, "--");

  const char *argv0 = in->entry->argv[0];
  if (argv0[0] == '/')
    strv_add(a, argv0);
  else
    strv_addf(a, "%s/%s", SANDBOX_PACKAGE_DIR, argv0);
  for (size_t i = 1; i < in->entry->argc; i++)
    strv_add(a, in->entry->argv[i]);
  for (size_t i = 0; i < in->n_args; i++)
    strv_add(a, in->args[i]);
  return a->err;
}

int bwrap_argv_with_status_fd(const struct strv *argv, int fd, struct strv *out_argv) {
  if (argv->n == 0)
    return -EINVAL;
  strv_add(out_argv, argv->v[0]);
  strv_add(out_argv, "--json-status-fd");
  strv_addf(out_argv, "%d", fd);
  for (size_t i = 1; i < argv->n; i++)
    strv_add(out_argv, argv->v[i]);
  return out_argv->err;
}

bool bwrap_status_entry_started(const char *text, size_t len) {
  /* one JSON object a line; objects and members not known are ignored */
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
    json_t *o = json_loadb(text + at, n, 0, NULL);
    bool started = json_is_integer(json_object_get(o, "exit-code"));
    json_decref(o);
    if (started)
      return true;
    at += n + 1;
  }
  return false;
}

int bwrap_status_child_pid(const char *text, size_t len) {
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    if (!nl) /* a line still being written */
      break;
    size_t n = (size_t)(nl - (text + at));
    json_t *o = json_loadb(text + at, n, 0, NULL);
    json_t *v = json_object_get(o, "child-pid");
    json_int_t pid = json_is_integer(v) ? json_integer_value(v) : 0;
    json_decref(o);
    if (pid > 1 && pid <= INT32_MAX)
      return (int)pid;
    at += n + 1;
  }
  return 0;
}

/* does s end with suffix? */
static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

bool bwrap_setup_error_transient(const char *line) {
  /* bwrap's die_with_error: "bwrap: <step>: <strerror(errno)>", here
   * glibc's and musl's texts of ENOENT and of EBUSY */
  static const char *const errs[] = {": No such file or directory", ": Device or resource busy",
                                     ": Resource busy"};
  if (strncmp(line, "bwrap: ", 7) != 0)
    return false;
  for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
    if (ends_with(line, errs[i]))
      return true;
  /* each step of a bind mount (the mount, the look for it in the mount
   * table, its remount read-only) sees a mount point renamed over */
  return strncmp(line, "bwrap: Can't bind mount ", 24) == 0;
}
