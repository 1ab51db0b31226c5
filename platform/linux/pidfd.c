#include "platform/linux/pidfd.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

int pidfd_linux_open(pid_t pid) {
  /* pidfds are close-on-exec from the start */
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -errno : fd;
}

int pidfd_linux_signal(int fd, int sig) {
  return syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0 ? -errno : 0;
}

bool pidfd_linux_wait_exit(int fd, int timeout_ms) {
  int64_t deadline = core_mono_ms() + timeout_ms;
  for (;;) {
    struct pollfd pf = {fd, POLLIN, 0};
    int64_t left = deadline - core_mono_ms();
    int k = poll(&pf, 1, left > 0 ? (int)left : 0);
    if (k > 0)
      return true; /* POLLIN: it has exited (POLLHUP/ERR: it is gone) */
    if (k == 0 || (k < 0 && errno != EINTR))
      return false;
  }
}
