/* The launcher of the POSIX layers (Linux and macOS): prepares a job's
 * first process without copying the agent. vfork() shares the agent's
 * memory until exec, so the child does only system calls on data prepared
 * beforehand, in this order: default signal dispositions and an empty mask,
 * join cgroups (Linux: by writing "0" to each given file, unless the
 * process was started in its cgroup by clone3(CLONE_INTO_CGROUP)), a new session (the job is its
 * own process group), stdin from /dev/null, every other inherited fd close-on-exec but the kept
 * ones, rlimits (RLIMIT_NOFILE after the next step), a user and mount namespace of its own with
 * a tmpfs mounted in it (Linux), the drop to the job user, no_new_privs and the parent-death
 * signal (Linux), cwd,
 * the seccomp filter (Linux), execve.
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

/* How the child came into its cgroup. */
enum launch_join {
  LAUNCH_JOIN_NONE,   /* no cgroup asked for */
  LAUNCH_JOIN_CLONE3, /* started in it: clone3(CLONE_INTO_CGROUP), no migration */
  LAUNCH_JOIN_WRITE,  /* vfork, then the child wrote "0" to each of cgroup_procs_fds */
};

/* A tmpfs the child mounts in a user and mount namespace of its own before
 * exec (Linux): the program (bwrap) then runs in them, so that a
 * per-user agent, which may mount nothing in the host's namespace, gives
 * it a tmpfs bounded as it chooses (nr_inodes). The namespace maps the
 * child's uid and gid to themselves (uid_map and gid_map: "ID ID 1",
 * prepared by the caller; setgroups denied), receives the host's mounts
 * and sends none. The tmpfs's root lands on fd (an O_PATH fd that is
 * in keep_fds too). It dies with the last process in the namespace. */
struct launch_ns_tmpfs {
  const char *uid_map;
  const char *gid_map;
  const char *target;  /* an existing directory */
  const char *options; /* tmpfs mount options */
  int fd;
};

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
  /* The child writes "0" (itself) to each: v1 `tasks` (one thread, no
   * thread-group lock: the child is single-threaded), v2 `cgroup.procs`. */
  const int *cgroup_procs_fds;
  size_t n_cgroup;
  /* into_cgroup: start the child in the v2 cgroup directory cgroup_dir_fd
   * with clone3(CLONE_INTO_CGROUP) and skip the writes above; where the
   * kernel or build lacks it (ENOSYS, EINVAL, E2BIG), fall back to vfork
   * and the writes, so cgroup_procs_fds must hold the same cgroup's
   * cgroup.procs. The clone3 child is a copy-on-write fork, not vfork. */
  bool into_cgroup;
  int cgroup_dir_fd;
  enum launch_join *ret_join; /* NULL, or set to the way used on success */
  const struct launch_rlimit *rlimits;
  size_t n_rlimits;
  bool drop_uid; /* supplementary groups {gid}, then gid, then uid; uid 0 must not come back */
  uid_t uid;
  gid_t gid;
  /* NULL, or made after the rlimits but RLIMIT_NOFILE (without
   * CORDON_WITH_USERNS: ENOSYS); the namespace records RLIMIT_NPROC then
   * as the bound of the uid's processes in and outside it.
   * Never with drop_uid (EINVAL): a child that changed its uid is not
   * dumpable, so its /proc/self/uid_map is root's, and it must stay so: a
   * vfork child shares the agent's memory until exec. */
  const struct launch_ns_tmpfs *ns_tmpfs;
  bool no_new_privs;       /* PR_SET_NO_NEW_PRIVS */
  int parent_death_signal; /* 0, or PR_SET_PDEATHSIG after the uid change (agent checked alive) */
  const char *cwd;         /* NULL: unchanged */
  const struct sock_fprog *seccomp; /* NULL, or loaded just before exec */
};

/* Start the process. Returns 0 and its pid (also its process group and
 * session id), or a negated errno from the step that failed in the child;
 * nothing was executed then. */
int launch_spawn(const struct launch_spec *spec, pid_t *out_pid);

/* 1 if this kernel (and build) can start a process in a cgroup with
 * clone3(CLONE_INTO_CGROUP), 0 if not or once a launch found out it
 * cannot. Starts no process. */
int launch_clone3_into_cgroup_ok(void);

/* pipe() with both ends close-on-exec (atomically where the build has
 * pipe2: CORDON_WITH_PIPE2). 0 or a negated errno. */
int launch_cloexec_pipe(int p[2]);

#endif
