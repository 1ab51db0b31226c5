#include "platform/macos/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "platform/macos/os.h"

/* Runs in the vfork child: system calls only, no heap, no writes to
 * shared memory besides this stack frame. */
static void child_fail(int err_fd, int step_errno) {
  int e = step_errno ? step_errno : EINVAL;
  (void)!write(err_fd, &e, sizeof(e));
  _exit(127);
}

static void child_main(const struct spawn_spec *s, int err_fd, int null_fd, int max_fd) {
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
  if (setsid() < 0)
    child_fail(err_fd, errno);
  if (dup2(null_fd, 0) < 0 || dup2(s->stdout_fd, 1) < 0 || dup2(s->stderr_fd, 2) < 0)
    child_fail(err_fd, errno);
  macos_os_cloexec_from(3, max_fd);
  for (size_t i = 0; i < s->n_rlimits; i++)
    if (setrlimit(s->rlimits[i].resource, &s->rlimits[i].lim) < 0)
      child_fail(err_fd, errno);
  if (s->drop_ids) {
    int e = macos_os_drop_ids(s->uid, s->gid);
    if (e)
      child_fail(err_fd, e);
  }
  if (s->cwd && chdir(s->cwd) < 0)
    child_fail(err_fd, errno);
  execve(s->path, s->argv, s->envp);
  child_fail(err_fd, errno);
}

static int cloexec_pipe(int p[2]) {
  if (pipe(p) < 0)
    return -errno;
  if (fcntl(p[0], F_SETFD, FD_CLOEXEC) < 0 || fcntl(p[1], F_SETFD, FD_CLOEXEC) < 0) {
    int e = -errno;
    close(p[0]);
    close(p[1]);
    return e;
  }
  return 0;
}

int spawn_job(const struct spawn_spec *spec, pid_t *out_pid) {
  int pfd[2];
  int r = cloexec_pipe(pfd);
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
  /* no agent signal handler may run in the child before it resets them */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = vfork();
  if (pid == 0)
    child_main(spec, pfd[1], null_fd, max_fd);
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
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
    return -child_err;
  }
  *out_pid = pid;
  return 0;
}
