/* The macOS layer's launcher: the job's first process is prepared with
 * vfork() so the agent is not copied. The child does only system calls on
 * data prepared here: default signal dispositions, a new session (so the
 * job is its own process group), stdin from /dev/null, inherited fds
 * marked close-on-exec, rlimits, the drop to the job user, cwd, execve.
 * No parent-death signal and no no_new_privs exist on macOS: see
 * docs/MACOS.md.
 */
#ifndef CORDON_PLATFORM_MACOS_SPAWN_H
#define CORDON_PLATFORM_MACOS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

struct spawn_rlimit {
  int resource;
  struct rlimit lim;
};

struct spawn_spec {
  const char *path; /* executed as is, never searched in PATH */
  char *const *argv;
  char *const *envp;
  int stdout_fd, stderr_fd; /* become 1 and 2 */
  const struct spawn_rlimit *rlimits;
  size_t n_rlimits;
  bool drop_ids; /* run as uid/gid (the agent is root) */
  uid_t uid;
  gid_t gid;
  const char *cwd; /* NULL: unchanged */
};

/* Start the process. Returns 0 and its pid (also its process group and
 * session id), or a negated errno from the step that failed in the child;
 * nothing was executed then. */
int spawn_job(const struct spawn_spec *spec, pid_t *out_pid);

#endif
