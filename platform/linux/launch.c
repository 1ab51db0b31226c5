#include "platform/linux/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs in the vfork child: async-signal-safe system calls only, no heap,
 * no writes to shared memory besides this stack frame. */
static void child_fail(int err_fd, int step_errno) {
  int e = step_errno ? step_errno : EINVAL;
  (void)!write(err_fd, &e, sizeof(e));
  _exit(127);
}

static size_t fmt_uint(char *buf, unsigned long v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++)
    buf[i] = tmp[n - 1 - i];
  return n;
}

static void child_main(const struct launch_spec *s, int err_fd, int null_fd, pid_t parent) {
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

  /* Join the job's cgroups while we still may. */
  char pidbuf[24];
  size_t plen = fmt_uint(pidbuf, (unsigned long)getpid());
  for (size_t i = 0; i < s->n_cgroup; i++)
    if (write(s->cgroup_procs_fds[i], pidbuf, plen) < 0)
      child_fail(err_fd, errno);

  if (setsid() < 0)
    child_fail(err_fd, errno);
  if (dup2(null_fd, 0) < 0 || dup2(s->stdout_fd, 1) < 0 || dup2(s->stderr_fd, 2) < 0)
    child_fail(err_fd, errno);
  /* Everything but 0-2, the kept fds and err_fd closes at exec. */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
    child_fail(err_fd, errno);
  for (size_t i = 0; i < s->n_keep; i++)
    if (fcntl(s->keep_fds[i], F_SETFD, 0) < 0)
      child_fail(err_fd, errno);

  for (size_t i = 0; i < s->n_rlimits; i++)
    if (setrlimit(s->rlimits[i].resource, &s->rlimits[i].lim) < 0)
      child_fail(err_fd, errno);

  if (s->drop_uid) {
    /* raw system calls: glibc's wrappers would signal the agent's threads */
    gid_t groups[1] = {s->gid};
    if (syscall(SYS_setgroups, 1, groups) < 0)
      child_fail(err_fd, errno);
    if (syscall(SYS_setresgid, s->gid, s->gid, s->gid) < 0)
      child_fail(err_fd, errno);
    if (syscall(SYS_setresuid, s->uid, s->uid, s->uid) < 0)
      child_fail(err_fd, errno);
    if (syscall(SYS_setresuid, 0, 0, 0) == 0) /* must be impossible now */
      child_fail(err_fd, EPERM);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    child_fail(err_fd, errno);
  /* set after the uid change, which clears it; then make sure the agent
   * did not die in between */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
    child_fail(err_fd, errno);
  if (getppid() != parent)
    child_fail(err_fd, ESRCH);
  if (s->cwd && chdir(s->cwd) < 0)
    child_fail(err_fd, errno);
  if (s->seccomp && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, s->seccomp, 0, 0) < 0)
    child_fail(err_fd, errno);
  execve(s->path, s->argv, s->envp);
  child_fail(err_fd, errno);
}

int launch_spawn(const struct launch_spec *spec, pid_t *out_pid) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0)
    return -errno;
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    int e = -errno;
    close(pfd[0]);
    close(pfd[1]);
    return e;
  }
  /* Block signals so no agent handler runs in the child before it resets
   * them; the child sets its own empty mask. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t parent = getpid();
  pid_t pid = vfork();
  if (pid == 0)
    child_main(spec, pfd[1], null_fd, parent);
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
  return 0;
}
