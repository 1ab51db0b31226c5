/* The bwrap command line for an isolated job: a pure function of
 * (manifest, resolved grants, host facts). It opens nothing and runs
 * nothing, so it is unit-tested without bwrap; `explain` prints its output.
 */
#ifndef CORDON_PLATFORM_LINUX_BWRAP_H
#define CORDON_PLATFORM_LINUX_BWRAP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/manifest.h"
#include "platform/strv.h"

/* Where the job sees its package and workspace. */
#define SANDBOX_PACKAGE_DIR "/cordon/package"
#define SANDBOX_WORKSPACE_DIR "/cordon/workspace"

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
  const struct bwrap_mount *mounts; /* grants, then their blinds/overlays */
  size_t n_mounts;
};

/* Fill out_argv (which must be empty). Returns 0 or -ENOMEM. */
int bwrap_argv_build(const struct bwrap_host *host, const struct bwrap_input *in,
                     struct strv *out_argv);

#endif
