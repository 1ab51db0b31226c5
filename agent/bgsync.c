#include "agent/bgsync.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "compat/posix.h"

struct bgsync {
  char dir[PATH_MAX];
  char path[PATH_MAX];
};

static void sync_now(const struct bgsync *w) {
  int fd = open(w->path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) { /* gone already (acked, pruned): nothing to keep */
    (void)fsync(fd);
    close(fd);
  }
  int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
}

static void *sync_thread(void *arg) {
  sync_now(arg);
  free(arg);
  return NULL;
}

void agent_bgsync(const char *dir, const char *path) {
  struct bgsync *w = malloc(sizeof(*w));
  if (!w)
    return; /* written; the kernel writes it back in its own time */
  if (snprintf(w->dir, sizeof(w->dir), "%s", dir) >= (int)sizeof(w->dir) ||
      snprintf(w->path, sizeof(w->path), "%s", path) >= (int)sizeof(w->path)) {
    free(w);
    return;
  }
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
  }
}
