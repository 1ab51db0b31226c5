/* The launcher of the POSIX layers (Linux and macOS): prepares a job's
 * first process without copying the agent. vfork() shares the agent's
 * memory until exec, so the child does only system calls on data prepared
 * beforehand, in this order: default signal dispositions and an empty mask,
 * join cgroups (Linux), a new session (the job is its own process group),
 * stdin from /dev/null, every other inherited fd close-on-exec but the
 * kept ones, rlimits, the drop to the job user, no_new_privs and the
 * parent-death signal (Linux), cwd, the seccomp filter (Linux), execve.
 *
 * The steps marked Linux are asked for by spec fields; where the build has
 * no prctl (CORDON_WITH_PRCTL=0: macOS) asking for one fails with ENOSYS.
 * Errors come back over a close-on-exec pipe: nothing ran if one arrives.
 */
#ifndef CORDON_PLATFORM_POSIX_LAUNCH_H
#define CORDON_PLATFORM_POSIX_LAUNCH_H

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
  bool drop_uid; /* supplementary groups {gid}, then gid, then uid; uid 0 must not come back */
  uid_t uid;
  gid_t gid;
  bool no_new_privs;       /* PR_SET_NO_NEW_PRIVS */
  int parent_death_signal; /* 0, or PR_SET_PDEATHSIG after the uid change (agent checked alive) */
  const char *cwd;         /* NULL: unchanged */
  const struct sock_fprog *seccomp; /* NULL, or loaded just before exec */
};

/* Start the process. Returns 0 and its pid (also its process group and
 * session id), or a negated errno from the step that failed in the child;
 * nothing was executed then. */
int launch_spawn(const struct launch_spec *spec, pid_t *out_pid);

/* pipe() with both ends close-on-exec (atomically where the build has
 * pipe2: CORDON_WITH_PIPE2). 0 or a negated errno. */
int launch_cloexec_pipe(int p[2]);

#endif
