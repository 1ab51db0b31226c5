/* A journal socket of the test's own, for tests of svc/journal.c and of
 * the daemons that use it: svc/journal.c sends to
 * /run/systemd/journal/socket, so the test enters a mount namespace of its
 * own, puts a tmpfs over /run/systemd there and binds that path. Also the
 * native protocol's parser and the child's side (stderr into a file that
 * JOURNAL_STREAM names, as systemd sets it), and the test's teardown.
 * Header-only: each test program includes it once. */
#ifndef CORDON_TESTS_JOURNAL_SOCK_H
#define CORDON_TESTS_JOURNAL_SOCK_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOURNAL_SOCK_PATH "/run/systemd/journal/socket"

/* The bound datagram socket (200 ms receive timeout), or -1 with *why
 * set: not root, or no private mount namespace. Call it from the test's
 * own process: the namespace is the test's, the children inherit it. */
static inline int journal_sock_bind(const char **why) {
  if (geteuid() != 0 || unshare(CLONE_NEWNS) < 0) {
    *why = "needs root for a private mount namespace";
    return -1;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
    *why = "cannot make / private";
    return -1;
  }
  mkdir("/run/systemd", 0755);
  if (mount("tmpfs", "/run/systemd", "tmpfs", 0, "mode=0755") < 0 ||
      mkdir("/run/systemd/journal", 0755) < 0) {
    *why = "cannot put a tmpfs over /run/systemd";
    return -1;
  }
  int js = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = JOURNAL_SOCK_PATH};
  if (js < 0 || bind(js, (struct sockaddr *)&a, sizeof(a)) < 0) {
    *why = "cannot bind the journal socket";
    return -1;
  }
  struct timeval tv = {0, 200000};
  setsockopt(js, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return js;
}

/* In a child before exec: stderr into path, and JOURNAL_STREAM naming it.
 * 0, or -1. */
static inline int journal_sock_child_stderr(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  struct stat st;
  if (fd < 0 || dup2(fd, 2) < 0 || fstat(2, &st) < 0)
    return -1;
  char v[64];
  snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
  return setenv("JOURNAL_STREAM", v, 1);
}

/* One native-protocol datagram's field, or NULL: "KEY=VALUE\n", or
 * "KEY\n" + 64-bit little-endian length + VALUE + "\n". */
static inline char *journal_sock_field(const char *d, size_t n, const char *key, char *out,
                                       size_t size) {
  size_t kl = strlen(key);
  const char *p = d, *end = d + n;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (!nl)
      return NULL;
    if (eq && eq < nl) {
      if ((size_t)(eq - p) == kl && memcmp(p, key, kl) == 0) {
        snprintf(out, size, "%.*s", (int)(nl - eq - 1), eq + 1);
        return out;
      }
      p = nl + 1;
    } else {
      uint64_t len = 0;
      if (nl + 9 > end)
        return NULL;
      for (int i = 7; i >= 0; i--)
        len = len << 8 | (unsigned char)nl[1 + i];
      if ((size_t)(nl - p) == kl && memcmp(p, key, kl) == 0) {
        snprintf(out, size, "%.*s", (int)len, nl + 9);
        return out;
      }
      p = nl + 9 + len + 1;
    }
  }
  return NULL;
}

/* The daemon under test and its temporary directory, for the test's fini
 * (journal_sock_teardown: kill -9 it, remove the directory). */
static pid_t journal_sock_daemon = -1;
static char journal_sock_tmp[64];

static inline void journal_sock_teardown(void) {
  if (journal_sock_daemon > 0) {
    kill(journal_sock_daemon, SIGKILL);
    waitpid(journal_sock_daemon, NULL, 0);
  }
  if (journal_sock_tmp[0]) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", journal_sock_tmp);
    (void)!system(cmd);
  }
}

/* The file at path into buf (NUL-terminated, at most size - 1 bytes; ""
 * when it cannot be read). */
static inline void journal_sock_slurp(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

#endif
