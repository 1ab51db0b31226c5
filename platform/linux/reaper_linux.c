/* The agent's reaper (platform/sandbox.h, sandbox_reaper_start). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "platform/linux/cgroup.h"
#include "platform/sandbox.h"
#include "platform/sandbox_os.h"

/* Every descriptor but keep goes (the agent lock's above all: the lock
 * must end with the agent). */
static void close_all_but(int keep) {
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 65536)
    max = 65536;
  for (int fd = 0; fd < (int)max; fd++)
    if (fd != keep)
      (void)close(fd);
}

static void reaper_main(int rfd, const char *config_dir) {
  long agent = (long)getppid(); /* the agent, whose jobs are job-<its pid>-<n> */
  close_all_but(rfd);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC); /* 0, 1, 2: nothing to say */
  if (null == 0) {
    (void)dup2(0, 1);
    (void)dup2(0, 2);
  }
  (void)prctl(PR_SET_NAME, "cordon-reaper", 0, 0, 0);
  /* a terminal's ^C, a service manager's SIGTERM to the whole group: the
   * agent answers those; the reaper waits for the agent to be gone */
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  char b;
  ssize_t n;
  do
    n = read(rfd, &b, 1);
  while (n > 0 || (n < 0 && errno == EINTR));
  /* only that agent's jobs: a newer agent of this instance (a restart)
   * keeps its own, whenever this runs */
  (void)cgroup_instance_reap(config_dir, agent);
  _exit(0);
}

int sandbox_os_reaper_start(const char *config_dir) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(p[0]);
    close(p[1]);
    return -e;
  }
  if (pid == 0) {
    close(p[1]);
    reaper_main(p[0], config_dir);
  }
  close(p[0]); /* p[1] stays open, close-on-exec, for the agent's life */
  return 0;
}
