/* The bwrap command line for an isolated job: a pure function of
 * (manifest, resolved grants, host facts), and the reading of what bwrap
 * reports about one start. It opens nothing and runs nothing, so it is
 * unit-tested without bwrap; `explain` prints the command line.
 */
#ifndef CORDON_PLATFORM_LINUX_BWRAP_H
#define CORDON_PLATFORM_LINUX_BWRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/manifest.h"
#include "platform/strv.h"

/* Where the job sees its package and workspace. */
#define SANDBOX_PACKAGE_DIR "/cordon/package"
#define SANDBOX_WORKSPACE_DIR "/cordon/workspace"
/* /tmp and /dev/shm are symlinks to these, inside the workspace's tmpfs:
 * one disk_mb budget for every writable place of the view */
#define SANDBOX_TMP_DIR SANDBOX_WORKSPACE_DIR "/.tmp"
#define SANDBOX_SHM_DIR SANDBOX_WORKSPACE_DIR "/.shm"
/* bwrap's --dev (read-only after setup), for its private devpts */
#define SANDBOX_DEV_DIR "/cordon/dev"

/* The inode bound of the workspace tmpfs the agent mounts itself: one
 * inode per 4 KiB of disk_mb (a page, the least an inode with data takes).
 * An inode and its dentry cost about 1 KiB of kernel memory (measured: 64
 * MiB held 62,000 empty files), so the tmpfs holds at most about
 * 1.25 x disk_mb of memory. bwrap's own --size bounds bytes only. */
#define BWRAP_WORKSPACE_INODES_PER_MB 256

enum bwrap_mount_kind {
  BWRAP_MOUNT_RO_FD,      /* --ro-bind-fd fd dest */
  BWRAP_MOUNT_RW_FD,      /* --bind-fd fd dest */
  BWRAP_MOUNT_BLIND_DIR,  /* an empty read-only tmpfs on dest */
  BWRAP_MOUNT_BLIND_FILE, /* /dev/null (reads empty) bound read-only on dest */
};

struct bwrap_mount {
  enum bwrap_mount_kind kind;
  int fd; /* for the *_FD kinds */
  const char *dest;
};

/* One entry of the base view: a directory bound read-only, or a symlink
 * recreated (merged /usr: /bin -> usr/bin). */
struct bwrap_base {
  const char *path;
  const char *link_target; /* NULL: --ro-bind path path */
};

struct bwrap_host {
  const char *bwrap_path;
  const struct bwrap_base *base;
  size_t n_base;
  /* forbidden files and directories inside the base view (/etc/shadow...) */
  const char *const *blind_files;
  size_t n_blind_files;
  const char *const *blind_dirs;
  size_t n_blind_dirs;
};

struct bwrap_input {
  const struct manifest *m;
  const struct manifest_argv *entry;
  char *const *args;
  size_t n_args;
  const char *home; /* the job user's home (HOME; grants under ~) */
  const char *user; /* USER/LOGNAME */
  int package_fd;
  int seccomp_fd;
  /* true: the workspace is a tmpfs the agent mounted itself, sized in
   * bytes and inodes (bwrap_workspace_tmpfs_options), whose root is
   * workspace_fd, bound with --bind-fd; false: bwrap's own
   * --size disk_mb --tmpfs, bounded in bytes only */
  bool workspace_mounted;
  int workspace_fd;
  const struct bwrap_mount *mounts; /* grants, then their blinds/overlays */
  size_t n_mounts;
};

/* The mount options of the agent-mounted workspace tmpfs of disk_mb for
 * the job user uid/gid: its size, its inode bound (disk_mb x
 * BWRAP_WORKSPACE_INODES_PER_MB) and its root 0755 owned by the job user,
 * into buf. 0, or -ENAMETOOLONG when len is too small. */
int bwrap_workspace_tmpfs_options(uint32_t disk_mb, uid_t uid, gid_t gid, char *buf, size_t len);

/* Fill out_argv (which must be empty). Returns 0 or -ENOMEM. */
int bwrap_argv_build(const struct bwrap_host *host, const struct bwrap_input *in,
                     struct strv *out_argv);

/* ---- did the package start? ----
 *
 * bwrap reports a failure to build the sandbox (a mount, the chdir, the
 * seccomp filter, the entry's execvp) the way the job reports its own end:
 * a line on stderr and exit status 1. What tells them apart is bwrap's
 * --json-status-fd: it writes {"child-pid": N} once it has cloned (before
 * any mount), and {"exit-code": N} when the child ends, but that one only
 * if the child got through every step of the setup and its execvp of the
 * entry succeeded (bwrap >= 0.3.2: the child writes a byte to a
 * close-on-exec pipe after the last step, and a second byte if execvp
 * fails; the report needs exactly one). The fd is closed in the sandbox
 * before the entry starts, so the job can neither write nor suppress it.
 * The plan's argv (and explain) holds no status fd: each start has a pipe
 * of its own, added by bwrap_argv_with_status_fd. */

/* argv (a bwrap argv of bwrap_argv_build) with "--json-status-fd fd" after
 * argv[0], into out_argv (which must be empty). 0 or -ENOMEM. */
int bwrap_argv_with_status_fd(const struct strv *argv, int fd, struct strv *out_argv);

/* Does text (what bwrap wrote to its --json-status-fd, JSON lines) hold
 * the exit-code object, i.e. did the entry start? */
bool bwrap_status_entry_started(const char *text, size_t len);

/* The pid (in the caller's pid namespace) of the sandbox's init, from
 * text's first complete line that holds {"child-pid": N}; 0 when none
 * does yet. The init is pid 1 of the job's namespace: a SIGKILL to it
 * from outside ends the whole namespace (sandbox_linux.c). */
int bwrap_status_child_pid(const char *text, size_t len);

/* Is line (bwrap's last line on stderr, for a start whose entry never
 * started) a failure that a concurrent change of a host file can cause
 * and that may pass at once: a step that ended with ENOENT or EBUSY, or
 * any failure of a bind mount ("Can't bind mount ..."), whose mount point
 * a rename (useradd's of /etc/shadow) replaces before the mount (ENOENT),
 * before bwrap finds it in the mount table ("Unable to find ... in mount
 * table") or before its remount read-only (EINVAL). bwrap runs with an
 * empty environment, so its messages are the C locale's. */
bool bwrap_setup_error_transient(const char *line);

#endif
