/* The agent's reaper (platform/sandbox.h, sandbox_reaper_start). */
#include "platform/linux/reaper_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "platform/linux/cgroup.h"
#include "platform/linux/pidfd.h"
#include "platform/sandbox.h"
#include "platform/sandbox_os.h"

/* the most job inits one reaper watches at once (the agent's jobs run on
 * at most a few dozen threads) */
#define REAPER_MAX_INITS 256

/* The agent's end of the socket to its reaper, or -1 (none started). */
static int reaper_sock = -1;
/* The reaper's pid, or 0. */
static pid_t reaper_pid;

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

/* One pidfd the agent sent, or -1; 0 at the agent's end. */
static int recv_pidfd(int sock, int *out_fd) {
  char b;
  struct iovec iov = {&b, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } c;
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf)};
  ssize_t n;
  do
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return 0;
  *out_fd = -1;
  struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
  if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
      h->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(out_fd, CMSG_DATA(h), sizeof(int));
  return 1;
}

static void reaper_main(int sock, const char *config_dir) {
  long agent = (long)getppid(); /* the agent, whose jobs are job-<its pid>-<n> */
  close_all_but(sock);
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
  /* pf[0] is the agent's socket; then the pidfds of its jobs' inits, each
   * dropped once its process has exited */
  struct pollfd pf[1 + REAPER_MAX_INITS];
  nfds_t n = 1;
  pf[0] = (struct pollfd){sock, POLLIN, 0};
  for (;;) {
    if (poll(pf, n, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    for (nfds_t i = n; i-- > 1;)
      if (pf[i].revents) {
        close(pf[i].fd);
        pf[i] = pf[--n];
      }
    if (pf[0].revents) {
      int fd;
      if (recv_pidfd(sock, &fd) == 0)
        break; /* the agent is gone, whatever killed it */
      if (fd >= 0 && n < sizeof(pf) / sizeof(pf[0]))
        pf[n++] = (struct pollfd){fd, POLLIN, 0};
      else if (fd >= 0)
        close(fd);
    }
  }
  /* each init's SIGKILL ends its whole pid namespace */
  for (nfds_t i = 1; i < n; i++)
    (void)pidfd_linux_signal(pf[i].fd, SIGKILL);
  for (nfds_t i = 1; i < n; i++)
    (void)pidfd_linux_wait_exit(pf[i].fd, 1000);
  /* only that agent's jobs: a newer agent of this instance (a restart)
   * keeps its own, whenever this runs */
  (void)cgroup_instance_reap(config_dir, agent);
  _exit(0);
}

int sandbox_os_reaper_start(const char *config_dir) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    return -e;
  }
  if (pid == 0) {
    close(sv[1]);
    reaper_main(sv[0], config_dir);
  }
  close(sv[0]);
  /* sv[1] stays open, close-on-exec, for the agent's life */
  reaper_sock = sv[1];
  reaper_pid = pid;
  return 0;
}

pid_t reaper_linux_pid(void) {
  return reaper_pid;
}

void reaper_linux_watch(int pidfd) {
  if (reaper_sock < 0)
    return;
  char b = 'p';
  struct iovec iov = {&b, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } c;
  memset(&c, 0, sizeof(c));
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf)};
  struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &pidfd, sizeof(int));
  ssize_t n;
  do
    n = sendmsg(reaper_sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
}
