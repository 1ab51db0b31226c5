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
  /* the workspace tmpfs: the agent mounts it itself, sized in bytes and
   * inodes (root with CAP_SYS_ADMIN), or bwrap's --size bounds bytes only */
  bool mounts_workspace;
  /* a memory cgroup is charged the kernel memory of the inodes a job
   * makes (no cgroup.memory=nokmem on the kernel command line) */
  bool kmem_charged;
};

#endif
