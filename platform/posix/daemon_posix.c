/* platform/daemon.h on Linux and macOS: flock(2) for the instance lock, a
 * UNIX stream socket for the control endpoint, systemd's notification
 * datagrams (the sd_notify protocol: one datagram of NAME=value lines to
 * the AF_UNIX socket named by $NOTIFY_SOCKET, '@' meaning the abstract
 * namespace), and a probe child for the job user's reach. */
#include "platform/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform/posix/job_user.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* a send to a closed peer then raises SIGPIPE */
#endif

#define SUN_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

static int join(const char *dir, const char *name, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s", dir, name);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int set_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFD);
  return fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0 ? -errno : 0;
}

/* ---- the lock ---- */

struct daemon_lock {
  int fd;
};

#define LOCK_DEAD_WAIT_MS 5000

/* Is the pid written in the lock file a living process? (Unknown: yes.) */
static bool holder_alive(int fd) {
  char buf[32];
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0)
    return true;
  buf[n] = '\0';
  char *end;
  long pid = strtol(buf, &end, 10);
  if (pid <= 0 || end == buf)
    return true;
  return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

int daemon_lock_take(const char *dir, const char *name, struct daemon_lock **out_lock) {
  char path[PATH_MAX];
  int r = join(dir, name, path, sizeof(path));
  if (r < 0)
    return r;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return -errno;
  /* The holder named in the file may be dead while what it left behind
   * (a job tree still dying after its agent was killed) keeps the lock's
   * open file for a moment: then wait for it, at most LOCK_DEAD_WAIT_MS.
   * A living holder is refused at once. */
  for (int waited = 0;; waited += 100) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      break;
    r = errno == EWOULDBLOCK ? -EAGAIN : -errno;
    if (r != -EAGAIN || waited >= LOCK_DEAD_WAIT_MS || holder_alive(fd))
      goto out_close;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  char pid[32];
  int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
    r = -errno;
    goto out_close;
  }
  struct daemon_lock *l = malloc(sizeof(*l));
  if (!l) {
    r = -ENOMEM;
    goto out_close;
  }
  l->fd = fd;
  *out_lock = l;
  return 0;

out_close:
  close(fd);
  return r;
}

void daemon_lock_release(struct daemon_lock *lock) {
  if (!lock)
    return;
  flock(lock->fd, LOCK_UN);
  close(lock->fd);
  free(lock);
}

/* ---- the control endpoint ---- */

int daemon_ctl_path(const char *dir, const char *name, char *out, size_t len) {
  char path[PATH_MAX];
  int r = join(dir, name, path, sizeof(path));
  if (r < 0)
    return r;
  if (strlen(path) >= SUN_PATH_MAX || strlen(path) >= len)
    return -ENAMETOOLONG;
  memcpy(out, path, strlen(path) + 1);
  return 0;
}

int daemon_ctl_prepare(const char *path) {
  if (unlink(path) < 0 && errno != ENOENT) /* a socket left by a killed agent */
    return -errno;
  return 0;
}

int daemon_ctl_restrict(const char *path, intptr_t os_handle) {
  (void)os_handle;
  return chmod(path, 0600) < 0 ? -errno : 0;
}

void daemon_ctl_remove(const char *path) {
  (void)unlink(path);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for fd to be ready for events until deadline (monotonic ms). */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0)
      return -ETIMEDOUT;
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, (int)left);
    if (n > 0)
      return 0;
    if (n < 0 && errno != EINTR)
      return -errno;
  }
}

static int connect_to(const char *path, int64_t deadline, int *out_fd) {
  if (strlen(path) >= SUN_PATH_MAX)
    return -ENAMETOOLONG;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0)
    return -errno;
  int r = set_cloexec(fd);
  int fl = fcntl(fd, F_GETFL);
  if (r == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
    r = -errno;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  if (r == 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    r = -errno;
    if (r == -EINPROGRESS || r == -EAGAIN) { /* a full backlog: wait for it */
      r = wait_fd(fd, POLLOUT, deadline);
      int err = 0;
      socklen_t elen = sizeof(err);
      if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err)
        r = -err;
    }
  }
  if (r < 0) {
    close(fd);
    return r;
  }
  *out_fd = fd;
  return 0;
}

static int send_all(int fd, const char *p, size_t len, int64_t deadline) {
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int r = wait_fd(fd, POLLOUT, deadline);
      if (r < 0)
        return r;
    } else if (n < 0 && errno != EINTR) {
      return -errno;
    }
  }
  return 0;
}

struct sock_reader {
  int fd;
  int64_t deadline;
};

static int sock_read_some(void *ctx, char *buf, size_t cap, size_t *out_n) {
  struct sock_reader *rd = ctx;
  for (;;) {
    ssize_t n = recv(rd->fd, buf, cap, 0);
    if (n >= 0) {
      *out_n = (size_t)n;
      return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int r = wait_fd(rd->fd, POLLIN, rd->deadline);
      if (r < 0)
        return r;
    } else if (errno != EINTR) {
      return -errno;
    }
  }
}

int daemon_ctl_request(const char *path, const char *request, size_t max_reply, int timeout_ms,
                       char **out_reply, size_t *out_len) {
  int64_t deadline = now_ms() + timeout_ms;
  int fd = -1;
  int r = connect_to(path, deadline, &fd);
  if (r < 0)
    return r;
  r = send_all(fd, request, strlen(request), deadline);
  struct sock_reader rd = {.fd = fd, .deadline = deadline};
  if (r == 0)
    r = daemon_ctl_read_reply(sock_read_some, &rd, max_reply, out_reply, out_len);
  close(fd);
  return r;
}

/* ---- notifications ---- */

static struct sockaddr_un notify_addr;
static socklen_t notify_addr_len; /* 0: no socket */

uint64_t daemon_notify_init(void) {
  const char *sock = getenv("NOTIFY_SOCKET");
  size_t n = sock ? strlen(sock) : 0;
  notify_addr_len = 0;
  if (n >= 2 && n < SUN_PATH_MAX && (sock[0] == '/' || sock[0] == '@')) {
    memset(&notify_addr, 0, sizeof(notify_addr));
    notify_addr.sun_family = AF_UNIX;
    memcpy(notify_addr.sun_path, sock, n);
    if (sock[0] == '@') /* the abstract namespace: no NUL at the end */
      notify_addr.sun_path[0] = '\0';
    notify_addr_len =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (sock[0] == '/' ? 1 : 0));
  }
  uint64_t usec = 0;
  const char *wd = getenv("WATCHDOG_USEC");
  const char *wd_pid = getenv("WATCHDOG_PID");
  if (wd && wd[0] >= '0' && wd[0] <= '9') {
    char *end;
    unsigned long long v = strtoull(wd, &end, 10);
    bool ours = !wd_pid || strtol(wd_pid, NULL, 10) == (long)getpid();
    if (*end == '\0' && ours)
      usec = v;
  }
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  return usec;
}

int daemon_notify(const char *state) {
  if (notify_addr_len == 0)
    return 1;
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  if (fd < 0)
    return -errno;
  int r = set_cloexec(fd);
  if (r == 0 && sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&notify_addr,
                       notify_addr_len) < 0)
    r = -errno;
  close(fd);
  return r;
}

/* ---- the job user's reach ---- */

/* The child's exit statuses: 0 reached; 1 + i the i-th ancestor is not
 * searchable (i < REACH_MAX_DEPTH); the others below. */
#define REACH_MAX_DEPTH 200
#define REACH_DEEPER 250
#define REACH_OTHER 253
#define REACH_NO_IDENTITY 254

/* Exits with the index of the first prefix of path (in place: '/' -> '\0'
 * and back) it cannot enter as uid/gid. */
static void reach_child(char *path, uid_t uid, gid_t gid) {
  gid_t groups[1] = {gid};
  if (setgroups(1, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
    _exit(REACH_NO_IDENTITY);
  int depth = 0;
  size_t n = strlen(path);
  for (size_t i = 1; i <= n; i++) {
    if (path[i] != '/' && path[i] != '\0')
      continue;
    char c = path[i];
    path[i] = '\0';
    int ok = chdir(path);
    int err = errno;
    path[i] = c;
    if (ok < 0)
      _exit(err != EACCES ? REACH_OTHER : depth < REACH_MAX_DEPTH ? 1 + depth : REACH_DEEPER);
    depth++;
  }
  _exit(0);
}

/* "o+x" and the mode with that bit for the class job user falls in. */
static const char *needed_bit(const struct stat *st, uid_t uid, gid_t gid, mode_t *out_mode) {
  if (st->st_uid == uid) {
    *out_mode = (st->st_mode & 07777) | S_IXUSR;
    return "u+x";
  }
  if (st->st_gid == gid) {
    *out_mode = (st->st_mode & 07777) | S_IXGRP;
    return "g+x";
  }
  *out_mode = (st->st_mode & 07777) | S_IXOTH;
  return "o+x";
}

int daemon_job_reach_check(const char *job_user, const char *dir, struct cordon_diag *diag) {
  if (geteuid() != 0)
    return 0; /* jobs run as the agent's own account, which made dir */
  struct posix_job_user ju;
  char why[256];
  if (posix_job_user_lookup(job_user, true, &ju, why, sizeof(why)) < 0)
    return cordon_diag_set(diag, CORDON_E_JOB_USER_MISSING, "%s", why);
  char real[PATH_MAX];
  int r = 0;
  if (!realpath(dir, real)) {
    r = cordon_diag_set(diag, -errno, "%s: %s", dir, strerror(errno));
    goto out_user;
  }
  pid_t pid = fork();
  if (pid < 0) {
    r = cordon_diag_set(diag, -errno, "cannot check %s: fork: %s", real, strerror(errno));
    goto out_user;
  }
  if (pid == 0)
    reach_child(real, ju.uid, ju.gid);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      r = cordon_diag_set(diag, -errno, "cannot check %s: %s", real, strerror(errno));
      goto out_user;
    }
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : REACH_OTHER;
  if (code == 0)
    goto out_user;
  if (code > REACH_MAX_DEPTH) {
    r = cordon_diag_set(diag, code == REACH_NO_IDENTITY ? -EPERM : -EIO,
                        "cannot check whether job user %s can reach %s", ju.name, real);
    goto out_user;
  }
  /* the blocking ancestor: the first code components of real */
  char blocker[PATH_MAX];
  size_t i = 1;
  for (int depth = 0; real[i]; i++)
    if (real[i] == '/' && ++depth == code)
      break;
  snprintf(blocker, sizeof(blocker), "%.*s", (int)i, real);
  struct stat bs;
  if (stat(blocker, &bs) < 0) {
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "job user %s cannot search %s", ju.name,
                        blocker);
    goto out_user;
  }
  mode_t want;
  const char *bit = needed_bit(&bs, ju.uid, ju.gid, &want);
  r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID,
                      "the job user %s cannot reach %s: %s is mode %04o (owner uid %u) and needs "
                      "%s (chmod %s %s, mode %04o), or use a --config outside it",
                      ju.name, real, blocker, (unsigned)(bs.st_mode & 07777), (unsigned)bs.st_uid,
                      bit, bit, blocker, (unsigned)want);
out_user:
  posix_job_user_release(&ju);
  return r;
}
