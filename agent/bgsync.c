#include "agent/bgsync.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "compat/posix.h"

struct bgsync {
  char dir[PATH_MAX];
  char path[PATH_MAX];
  char then_unlink[PATH_MAX]; /* "" for none */
};

/* The syncs in flight, for agent_bgsync_wait and the wait at exit. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  unsigned pending;
  bool atexit_set;
} inflight = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void sync_now(const struct bgsync *w) {
  /* for writing: Windows flushes only a handle that may write */
  int fd = open(w->path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) { /* gone already (acked, pruned): nothing to keep */
    (void)fsync(fd);
    close(fd);
  }
  int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  /* only now: until path is durable, this file says what a crash lost */
  if (w->then_unlink[0])
    (void)unlink(w->then_unlink);
}

static void finished(void) {
  pthread_mutex_lock(&inflight.lock);
  inflight.pending--;
  pthread_cond_broadcast(&inflight.done);
  pthread_mutex_unlock(&inflight.lock);
}

static void *sync_thread(void *arg) {
  sync_now(arg);
  free(arg);
  finished();
  return NULL;
}

bool agent_bgsync_wait(unsigned ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&inflight.lock);
  int r = 0;
  while (inflight.pending > 0 && r != ETIMEDOUT)
    r = pthread_cond_timedwait(&inflight.done, &inflight.lock, &until);
  bool none = inflight.pending == 0;
  pthread_mutex_unlock(&inflight.lock);
  return none;
}

static void wait_at_exit(void) {
  (void)agent_bgsync_wait(AGENT_BGSYNC_EXIT_WAIT_MS);
}

void agent_bgsync_then_unlink(const char *dir, const char *path, const char *then_unlink) {
  struct bgsync *w = malloc(sizeof(*w));
  if (!w)
    return; /* written; the kernel writes it back in its own time */
  if (snprintf(w->dir, sizeof(w->dir), "%s", dir) >= (int)sizeof(w->dir) ||
      snprintf(w->path, sizeof(w->path), "%s", path) >= (int)sizeof(w->path) ||
      snprintf(w->then_unlink, sizeof(w->then_unlink), "%s", then_unlink ? then_unlink : "") >=
          (int)sizeof(w->then_unlink)) {
    free(w);
    return;
  }
  pthread_mutex_lock(&inflight.lock);
  inflight.pending++;
  if (!inflight.atexit_set)
    inflight.atexit_set = atexit(wait_at_exit) == 0;
  pthread_mutex_unlock(&inflight.lock);
  pthread_attr_t attr;
  pthread_t t;
  bool started = pthread_attr_init(&attr) == 0;
  if (started) {
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    (void)pthread_attr_setstacksize(&attr, 64 * 1024);
    started = pthread_create(&t, &attr, sync_thread, w) == 0;
    pthread_attr_destroy(&attr);
  }
  if (!started) {
    sync_now(w);
    free(w);
    finished();
  }
}

void agent_bgsync(const char *dir, const char *path) {
  agent_bgsync_then_unlink(dir, path, NULL);
}
