/* One daemon per state directory (server/lock.h). */
#include "server/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/file.h"

struct server_lock {
  int fd;
};

/* The pid the holder wrote, 0 when there is none yet. */
static long holder_pid(int fd) {
  char buf[32];
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  char *end;
  long pid = strtol(buf, &end, 10);
  return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}

int server_lock_take(const char *state_dir, struct server_lock **out_lock,
                     struct cordon_diag *diag) {
  char path[4096];
  if (snprintf(path, sizeof(path), "%s/%s", state_dir, SERVER_LOCK_FILE) >= (int)sizeof(path))
    return cordon_diag_set(diag, -ENAMETOOLONG, "state directory path too long");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int e = errno;
    return cordon_diag_set(diag, -e, "cannot open the lock %s: %s", path, strerror(e));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    long pid = e == EWOULDBLOCK ? holder_pid(fd) : 0;
    close(fd);
    if (e != EWOULDBLOCK)
      return cordon_diag_set(diag, -e, "cannot lock %s: %s", path, strerror(e));
    if (pid)
      return cordon_diag_set(diag, -EBUSY,
                             "%s is in use by cordon-server pid %ld (it holds %s); stop it first",
                             state_dir, pid, SERVER_LOCK_FILE);
    return cordon_diag_set(diag, -EBUSY, "%s is in use by another cordon-server (it holds %s)",
                           state_dir, SERVER_LOCK_FILE);
  }
  struct server_lock *l = malloc(sizeof(*l));
  char pid[32];
  int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
  int r = l ? 0 : -ENOMEM;
  if (r == 0 && ftruncate(fd, 0) < 0)
    r = -errno;
  if (r == 0)
    r = core_write_all(fd, pid, (size_t)n);
  if (r < 0) {
    free(l);
    close(fd);
    return cordon_diag_set(diag, r, "cannot write the lock %s: %s", path, strerror(-r));
  }
  l->fd = fd;
  *out_lock = l;
  return 0;
}

void server_lock_release(struct server_lock *l) {
  if (!l)
    return;
  if (ftruncate(l->fd, 0) < 0) {
    /* the pid stays; harmless, the lock decides */
  }
  close(l->fd);
  free(l);
}
