#include "platform/posix/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Feature switches from the build (CMakeLists.txt), never OS tests. */
#ifndef CORDON_WITH_PRCTL
#define CORDON_WITH_PRCTL 0
#endif
#ifndef CORDON_WITH_CLOSE_RANGE
#define CORDON_WITH_CLOSE_RANGE 0
#endif
#ifndef CORDON_WITH_RAW_SETID
#define CORDON_WITH_RAW_SETID 0
#endif
#ifndef CORDON_WITH_PIPE2
#define CORDON_WITH_PIPE2 0
#endif
#ifndef CORDON_WITH_CLONE3
#define CORDON_WITH_CLONE3 0
#endif
#ifndef CORDON_WITH_USERNS
#define CORDON_WITH_USERNS 0
#endif

#if CORDON_WITH_PRCTL
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#endif
#if CORDON_WITH_CLOSE_RANGE || CORDON_WITH_RAW_SETID || CORDON_WITH_CLONE3
#include <sys/syscall.h>
#endif
#if CORDON_WITH_CLONE3
#include <linux/sched.h>
#include <stdatomic.h>
#include <stdint.h>
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#endif
#if CORDON_WITH_CLOSE_RANGE
#include <linux/close_range.h>
#endif
#if CORDON_WITH_USERNS
#include <sched.h>
#include <sys/mount.h>
#endif

/* Runs in the vfork child: async-signal-safe system calls only, no heap,
 * no writes to shared memory besides this stack frame. */
static void child_fail(int err_fd, int step_errno) {
  int e = step_errno ? step_errno : EINVAL;
  (void)!write(err_fd, &e, sizeof(e));
  _exit(127);
}

/* Every fd from lowfd up close-on-exec (max_fd: the parent's
 * sysconf(_SC_OPEN_MAX), capped, for the walk without close_range). */
static void cloexec_from(int lowfd, int max_fd) {
#if CORDON_WITH_CLOSE_RANGE
  if (syscall(SYS_close_range, (unsigned)lowfd, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
    return;
#endif
  for (int fd = lowfd; fd < max_fd; fd++)
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Groups {gid}, gid, uid (real, effective, saved); then uid 0 must be out
 * of reach. 0 or a positive errno. */
static int drop_ids(uid_t uid, gid_t gid) {
  gid_t groups[1] = {gid};
#if CORDON_WITH_RAW_SETID
  /* raw system calls: glibc's wrappers would signal the agent's threads */
  if (syscall(SYS_setgroups, 1, groups) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
      syscall(SYS_setresuid, uid, uid, uid) < 0)
    return errno;
  if (syscall(SYS_setresuid, 0, 0, 0) == 0)
    return EPERM;
#else
  /* per-process credentials (XNU): these are single system calls */
  if (setgroups(1, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
    return errno;
  if (setuid(0) == 0)
    return EPERM;
#endif
  return 0;
}

/* The Linux steps; positive errno values. Without prctl, asking for one
 * is ENOSYS. */
#if CORDON_WITH_PRCTL
static int set_no_new_privs(void) {
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? errno : 0;
}

static int set_parent_death_signal(int sig, pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) < 0)
    return errno;
  return getppid() != parent ? ESRCH : 0; /* the agent died before */
}

static int load_seccomp(const struct sock_fprog *prog) {
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) < 0 ? errno : 0;
}
#else
static int set_no_new_privs(void) {
  return ENOSYS;
}

static int set_parent_death_signal(int sig, pid_t parent) {
  (void)sig;
  (void)parent;
  return ENOSYS;
}

static int load_seccomp(const struct sock_fprog *prog) {
  (void)prog;
  return ENOSYS;
}
#endif

#if CORDON_WITH_USERNS
/* Write s (NUL-ended) to the file path. 0 or a positive errno. */
static int write_file(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  size_t n = strlen(s);
  int e = write(fd, s, n) == (ssize_t)n ? 0 : errno ? errno : EIO;
  close(fd);
  return e;
}

static int ns_tmpfs_mount(const struct launch_ns_tmpfs *t) {
  int e;
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
    return errno;
  if ((e = write_file("/proc/self/setgroups", "deny")) != 0 ||
      (e = write_file("/proc/self/uid_map", t->uid_map)) != 0 ||
      (e = write_file("/proc/self/gid_map", t->gid_map)) != 0)
    return e;
  /* a namespace of a new user namespace gets the host's shared mounts as
   * slaves already; said again, so nothing can propagate out */
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
    return errno;
  if (mount("cordon-workspace", t->target, "tmpfs", MS_NOSUID | MS_NODEV, t->options) < 0)
    return errno;
  int fd = open(t->target, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno;
  e = dup2(fd, t->fd) < 0 ? errno : 0;
  close(fd);
  return e;
}
#else
static int ns_tmpfs_mount(const struct launch_ns_tmpfs *t) {
  (void)t;
  return ENOSYS;
}
#endif

static void child_main(const struct launch_spec *s, int err_fd, int null_fd, int max_fd,
                       pid_t parent, bool in_cgroup) {
  /* Signals: default dispositions and an empty mask for the new program. */
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP)
      continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    (void)sigaction(sig, &sa, NULL);
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
    child_fail(err_fd, errno);

  /* Join the job's cgroups while we still may: "0" is the writer itself,
   * which on v1 `tasks` moves one thread without the thread-group lock
   * (whose write side waits for an RCU grace period). */
  for (size_t i = 0; !in_cgroup && i < s->n_cgroup; i++)
    if (write(s->cgroup_procs_fds[i], "0", 1) < 0)
      child_fail(err_fd, errno);

  if (setsid() < 0)
    child_fail(err_fd, errno);
  if (dup2(null_fd, 0) < 0 || dup2(s->stdout_fd, 1) < 0 || dup2(s->stderr_fd, 2) < 0)
    child_fail(err_fd, errno);
  /* Everything but 0-2, the kept fds and err_fd closes at exec. */
  cloexec_from(3, max_fd);
  for (size_t i = 0; i < s->n_keep; i++)
    if (fcntl(s->keep_fds[i], F_SETFD, 0) < 0)
      child_fail(err_fd, errno);

  /* RLIMIT_NOFILE last: the namespace's fd may lie above it */
  for (size_t i = 0; i < s->n_rlimits; i++)
    if (s->rlimits[i].resource != RLIMIT_NOFILE &&
        setrlimit(s->rlimits[i].resource, &s->rlimits[i].lim) < 0)
      child_fail(err_fd, errno);
  /* after the other rlimits: the new user namespace keeps RLIMIT_NPROC
   * as it is now as the bound of the uid's processes outside it; never
   * after a drop of the uid (launch.h) */
  int e;
  if (s->ns_tmpfs && (e = s->drop_uid ? EINVAL : ns_tmpfs_mount(s->ns_tmpfs)) != 0)
    child_fail(err_fd, e);
  for (size_t i = 0; i < s->n_rlimits; i++)
    if (s->rlimits[i].resource == RLIMIT_NOFILE &&
        setrlimit(s->rlimits[i].resource, &s->rlimits[i].lim) < 0)
      child_fail(err_fd, errno);

  if (s->drop_uid && (e = drop_ids(s->uid, s->gid)) != 0)
    child_fail(err_fd, e);
  if (s->no_new_privs && (e = set_no_new_privs()) != 0)
    child_fail(err_fd, e);
  /* after the uid change, which clears it */
  if (s->parent_death_signal && (e = set_parent_death_signal(s->parent_death_signal, parent)) != 0)
    child_fail(err_fd, e);
  if (s->cwd && chdir(s->cwd) < 0)
    child_fail(err_fd, errno);
  if (s->seccomp && (e = load_seccomp(s->seccomp)) != 0)
    child_fail(err_fd, e);
  execve(s->path, s->argv, s->envp);
  child_fail(err_fd, errno);
}

int launch_cloexec_pipe(int p[2]) {
#if CORDON_WITH_PIPE2
  return pipe2(p, O_CLOEXEC) < 0 ? -errno : 0;
#else
  if (pipe(p) < 0)
    return -errno;
  if (fcntl(p[0], F_SETFD, FD_CLOEXEC) < 0 || fcntl(p[1], F_SETFD, FD_CLOEXEC) < 0) {
    int e = -errno;
    close(p[0]);
    close(p[1]);
    return e;
  }
  return 0;
#endif
}

#if CORDON_WITH_CLONE3
/* Cleared once the kernel said it has no clone3(CLONE_INTO_CGROUP). */
static atomic_bool clone3_works = true;

/* A copy-on-write child started in the cgroup dir_fd: 0 in the child, its
 * pid in the parent, or -1 with errno. */
static pid_t fork_into_cgroup(int dir_fd) {
  struct clone_args ca;
  memset(&ca, 0, sizeof(ca));
  ca.flags = CLONE_INTO_CGROUP;
  ca.exit_signal = SIGCHLD;
  ca.cgroup = (uint64_t)dir_fd;
  return (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
}

/* Start the child in its cgroup where the kernel can; false: use vfork. */
static bool try_clone3(const struct launch_spec *spec, pid_t *pid) {
  if (!spec->into_cgroup || !atomic_load(&clone3_works))
    return false;
  *pid = fork_into_cgroup(spec->cgroup_dir_fd);
  if (*pid < 0 && (errno == ENOSYS || errno == EINVAL || errno == E2BIG)) {
    atomic_store(&clone3_works, false); /* an older kernel: not again */
    return false;
  }
  return true;
}
#else
static bool try_clone3(const struct launch_spec *spec, pid_t *pid) {
  (void)spec;
  (void)pid;
  return false;
}
#endif

int launch_clone3_into_cgroup_ok(void) {
#if CORDON_WITH_CLONE3
  if (!atomic_load(&clone3_works))
    return 0;
  /* a bad cgroup fd: EBADF where the flag is known, EINVAL/E2BIG/ENOSYS
   * where it is not; no process is made either way */
  pid_t pid = fork_into_cgroup(INT_MAX);
  if (pid == 0)
    _exit(0);
  if (pid > 0) {
    (void)waitpid(pid, NULL, 0);
    return 1;
  }
  return errno == EBADF ? 1 : 0;
#else
  return 0;
#endif
}

int launch_spawn(const struct launch_spec *spec, pid_t *out_pid) {
  int pfd[2];
  int r = launch_cloexec_pipe(pfd);
  if (r < 0)
    return r;
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    r = -errno;
    close(pfd[0]);
    close(pfd[1]);
    return r;
  }
  long max = sysconf(_SC_OPEN_MAX);
  int max_fd = max < 0 || max > 65536 ? 65536 : (int)max;
  /* Block signals so no agent handler runs in the child before it resets
   * them; the child sets its own empty mask. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t parent = getpid();
  pid_t pid;
  bool in_cgroup = try_clone3(spec, &pid);
  if (!in_cgroup)
    pid = vfork();
  if (pid == 0)
    child_main(spec, pfd[1], null_fd, max_fd, parent, in_cgroup);
  int saved = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(pfd[1]);
  close(null_fd);
  if (pid < 0) {
    close(pfd[0]);
    return -saved;
  }
  int child_err = 0;
  ssize_t n;
  do
    n = read(pfd[0], &child_err, sizeof(child_err));
  while (n < 0 && errno == EINTR);
  close(pfd[0]);
  if (n == (ssize_t)sizeof(child_err)) {
    /* exec did not happen: reap the child, report its error */
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
    return -child_err;
  }
  *out_pid = pid;
  if (spec->ret_join)
    *spec->ret_join = in_cgroup            ? LAUNCH_JOIN_CLONE3
                      : spec->n_cgroup > 0 ? LAUNCH_JOIN_WRITE
                                           : LAUNCH_JOIN_NONE;
  return 0;
}
