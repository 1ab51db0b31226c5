/* os.h on Linux, so the macOS layer's logic runs in tests here: /proc for
 * the process table and the program's path. Compiled to nothing unless the
 * build sets CORDON_WITH_PROCFS. */
#if CORDON_WITH_PROCFS
#include "platform/macos/os.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n >= 0)
    buf[n] = '\0';
  return n;
}

/* Real uid from /proc/PID/status ("Uid:\treal\teffective..."). */
static int proc_ruid(const char *pid, uid_t *out) {
  char path[300], buf[2048];
  snprintf(path, sizeof(path), "/proc/%s/status", pid);
  if (read_small(path, buf, sizeof(buf)) <= 0)
    return -1;
  const char *u = strstr(buf, "\nUid:");
  unsigned long v;
  if (!u || sscanf(u + 5, "%lu", &v) != 1)
    return -1;
  *out = (uid_t)v;
  return 0;
}

int macos_os_procs(uid_t ruid, struct macos_proc **out_v, size_t *out_n) {
  DIR *d = opendir("/proc");
  if (!d)
    return -errno;
  struct macos_proc *v = NULL;
  size_t n = 0, cap = 0;
  int r = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9')
      continue;
    uid_t uid;
    if (proc_ruid(de->d_name, &uid) < 0 || uid != ruid)
      continue;
    char path[300], buf[1024];
    snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
    if (read_small(path, buf, sizeof(buf)) <= 0)
      continue;
    /* "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime cutime cstime prio nice threads itreal
     * starttime": comm may hold spaces and parentheses */
    char *rp = strrchr(buf, ')');
    char state;
    int ppid, pgrp, sid;
    unsigned long long start;
    if (!rp ||
        sscanf(rp + 1,
               " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &state, &ppid, &pgrp, &sid, &start) != 5)
      continue;
    if (state == 'Z' || state == 'X')
      continue;
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 64;
      struct macos_proc *nv = realloc(v, ncap * sizeof(*nv));
      if (!nv) {
        r = -ENOMEM;
        break;
      }
      v = nv;
      cap = ncap;
    }
    v[n++] = (struct macos_proc){
        .pid = (pid_t)atol(de->d_name), .ppid = ppid, .pgid = pgrp, .sid = sid, .start = start};
  }
  closedir(d);
  if (r < 0) {
    free(v);
    return r;
  }
  *out_v = v;
  *out_n = n;
  return 0;
}

const char *macos_os_procs_source(void) {
  return "/proc";
}

int macos_os_self_path(char *out, size_t len) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  if (n < 0)
    return -errno;
  if ((size_t)n >= len - 1)
    return -ENAMETOOLONG;
  out[n] = '\0';
  return 0;
}
#endif
