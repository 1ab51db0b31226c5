/* Process handles that name one process for its whole life (pidfds):
 * a signal sent through one never hits a process that reused the pid.
 * Needs Linux >= 5.3 (pidfd_open); each call returns -ENOSYS before. */
#ifndef CORDON_PLATFORM_LINUX_PIDFD_H
#define CORDON_PLATFORM_LINUX_PIDFD_H

#include <stdbool.h>
#include <sys/types.h>

/* A close-on-exec pidfd for pid: the fd, or a negated errno (-ESRCH: no
 * such process). */
int pidfd_linux_open(pid_t pid);

/* Send sig through fd: 0, or a negated errno (-ESRCH: it has exited). */
int pidfd_linux_signal(int fd, int sig);

/* Wait at most timeout_ms for the process of fd to exit (for the init of
 * a pid namespace: for every process of the namespace to be gone).
 * true once it has. */
bool pidfd_linux_wait_exit(int fd, int timeout_ms);

#endif
