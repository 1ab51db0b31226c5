/* The launcher: prepares a job's first process without forking the whole
 * agent. vfork() shares the agent's memory until exec, so the child does
 * only system calls on data prepared beforehand: join cgroups, new session,
 * stdin from /dev/null, close inherited fds, rlimits, drop to the job user,
 * no_new_privs, parent-death signal, then execve.
 */
#ifndef CORDON_PLATFORM_LINUX_LAUNCH_H
#define CORDON_PLATFORM_LINUX_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

struct sock_fprog;

struct launch_rlimit {
  int resource;
  struct rlimit lim;
};

struct launch_spec {
  const char *path; /* executed as is, never searched in PATH */
  char *const *argv;
  char *const *envp;
  int stdout_fd, stderr_fd; /* become 1 and 2; stdin is /dev/null */
  const int *keep_fds;      /* inherited under the same numbers; all others close */
  size_t n_keep;
  const int *cgroup_procs_fds; /* the child writes its pid to each */
  size_t n_cgroup;
  const struct launch_rlimit *rlimits;
  size_t n_rlimits;
  bool drop_uid; /* setgroups({gid}), setresgid, setresuid */
  uid_t uid;
  gid_t gid;
  const char *cwd;                  /* NULL: unchanged */
  const struct sock_fprog *seccomp; /* NULL, or loaded just before exec */
};

/* Start the process. Returns 0 and its pid, or a negated errno from the
 * step that failed in the child (nothing was executed then). */
int launch_spawn(const struct launch_spec *spec, pid_t *out_pid);

#endif
