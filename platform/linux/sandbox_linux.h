/* The Linux probe, shared by sandbox_linux.c and grants_linux.c. */
#ifndef CORDON_PLATFORM_LINUX_SANDBOX_LINUX_H
#define CORDON_PLATFORM_LINUX_SANDBOX_LINUX_H

#include <stdbool.h>

#include "platform/posix/job_user.h"
#include "platform/sandbox_os.h"

struct sandbox_os_probe {
  struct posix_job_user_probe user;
  /* bwrap */
  char *bwrap_path;
  bool bwrap_exists;
  char bwrap_version[64];
  bool bwrap_tried, bwrap_works;
  char bwrap_error[256];
  /* kernel */
  bool userns_ok;
  char userns_detail[160];
  bool seccomp_ok;
  int landlock_abi;
  /* the workspace tmpfs, sized in bytes and inodes: the agent mounts it
   * itself (root with CAP_SYS_ADMIN); a per-user agent's launcher child
   * mounts it in a user and mount namespace of its own that bwrap then
   * runs in; a root agent without CAP_SYS_ADMIN leaves it to bwrap's
   * --size (bytes only) */
  bool mounts_workspace;
};

#endif
