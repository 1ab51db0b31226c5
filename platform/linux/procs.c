#include "platform/linux/procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "platform/linux/pidfd.h"

struct pp {
  pid_t pid, ppid;
};

/* /proc/<name>/<file> into buf (NUL-terminated, cut at size - 1); false
 * when the process is gone or the file unreadable. */
static bool read_proc(const char *name, const char *file, char *buf, size_t size) {
  char path[300];
  snprintf(path, sizeof(path), "/proc/%s/%s", name, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  ssize_t len = read(fd, buf, size - 1);
  close(fd);
  if (len <= 0)
    return false;
  buf[len] = '\0';
  return true;
}

/* "pid (comm) state ppid ...": comm may hold spaces and parens */
static bool parse_stat(const char *name, char *state, long *ppid) {
  char buf[512];
  if (!read_proc(name, "stat", buf, sizeof(buf)))
    return false;
  char *rp = strrchr(buf, ')');
  return rp && sscanf(rp + 1, " %c %ld", state, ppid) == 2;
}

/* The next process directory of /proc in d ("1234"), NULL at its end. */
static const char *next_pid(DIR *d) {
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
      return de->d_name;
  return NULL;
}

size_t procs_zombie_children(pid_t parent, pid_t *out, size_t max) {
  DIR *d = opendir("/proc");
  if (!d)
    return 0;
  size_t n = 0;
  for (const char *name; (name = next_pid(d));) {
    char state;
    long ppid;
    if (parse_stat(name, &state, &ppid) && state == 'Z' && ppid == parent) {
      if (n < max)
        out[n] = (pid_t)atol(name);
      n++;
    }
  }
  closedir(d);
  return n;
}

/* The real uid and the thread count of /proc/<name>/status; false when
 * the process is gone or unreadable. */
static bool status_uid_threads(const char *name, uid_t *uid, unsigned long *threads) {
  char buf[4096];
  if (!read_proc(name, "status", buf, sizeof(buf)))
    return false;
  const char *u = strstr(buf, "\nUid:"), *t = strstr(buf, "\nThreads:");
  unsigned long real, n;
  if (!u || !t || sscanf(u + 5, " %lu", &real) != 1 || sscanf(t + 9, " %lu", &n) != 1)
    return false;
  *uid = (uid_t)real;
  *threads = n;
  return true;
}

size_t procs_count_uid(uid_t uid) {
  DIR *d = opendir("/proc");
  if (!d)
    return 0;
  size_t n = 0;
  for (const char *name; (name = next_pid(d));) {
    uid_t owner;
    unsigned long threads;
    if (status_uid_threads(name, &owner, &threads) && owner == uid)
      n += threads;
  }
  closedir(d);
  return n;
}

static size_t snapshot(struct pp **out) {
  DIR *d = opendir("/proc");
  size_t n = 0, cap = 0;
  struct pp *v = NULL;
  if (!d) {
    *out = NULL;
    return 0;
  }
  for (const char *name; (name = next_pid(d));) {
    long ppid;
    char state;
    if (!parse_stat(name, &state, &ppid) || state == 'Z')
      continue; /* zombies are dead already; their parent reaps them */
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      struct pp *nv = realloc(v, cap * sizeof(*nv));
      if (!nv)
        break;
      v = nv;
    }
    v[n].pid = (pid_t)atol(name);
    v[n].ppid = (pid_t)ppid;
    n++;
  }
  closedir(d);
  *out = v;
  return n;
}

size_t procs_descendants(pid_t root, pid_t *out, size_t max) {
  struct pp *v;
  size_t n = snapshot(&v);
  if (!v)
    return 0;
  /* breadth-first over the snapshot; `mark` holds the frontier */
  char *in = calloc(n, 1);
  size_t found = 0;
  if (!in) {
    free(v);
    return 0;
  }
  int changed = 1;
  while (changed) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (in[i])
        continue;
      int parent_in = v[i].ppid == root;
      for (size_t k = 0; k < n && !parent_in; k++)
        parent_in = in[k] && v[k].pid == v[i].ppid;
      if (parent_in) {
        in[i] = 1;
        changed = 1;
        if (found < max)
          out[found] = v[i].pid;
        found++;
      }
    }
  }
  free(in);
  free(v);
  return found;
}

#define KILL_BATCH 256

/* The descendants of root, spare's subtree left out: how many (<= max). */
static size_t tree_but(pid_t root, pid_t spare, pid_t *out, size_t max) {
  size_t n = procs_descendants(root, out, max);
  if (n > max)
    n = max;
  if (spare <= 0)
    return n;
  pid_t skip[KILL_BATCH];
  size_t ns = procs_descendants(spare, skip, KILL_BATCH);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool spared = out[i] == spare;
    for (size_t j = 0; j < ns && j < KILL_BATCH && !spared; j++)
      spared = skip[j] == out[i];
    if (!spared)
      out[k++] = out[i];
  }
  return k;
}

size_t procs_kill_descendants(pid_t root, pid_t spare) {
  pid_t pids[KILL_BATCH], again[KILL_BATCH];
  int fds[KILL_BATCH];
  size_t first = 0;
  for (int round = 0; round < 50; round++) {
    size_t n = tree_but(root, spare, pids, KILL_BATCH);
    if (round == 0) { /* all of them, beyond the batch too */
      size_t all = procs_descendants(root, NULL, 0);
      size_t spared = spare > 0 ? procs_descendants(spare, NULL, 0) + 1 : 0;
      first = all > spared ? all - spared : n;
    }
    if (n == 0)
      break;
    for (size_t i = 0; i < n; i++)
      fds[i] = pidfd_linux_open(pids[i]);
    size_t m = tree_but(root, spare, again, KILL_BATCH);
    for (size_t i = 0; i < n; i++) {
      bool listed = false;
      for (size_t j = 0; j < m && !listed; j++)
        listed = again[j] == pids[i];
      if (listed && fds[i] >= 0)
        (void)pidfd_linux_signal(fds[i], SIGKILL);
      else if (listed && fds[i] == -ENOSYS)
        kill(pids[i], SIGKILL);
      if (fds[i] >= 0)
        close(fds[i]);
    }
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return first;
}
