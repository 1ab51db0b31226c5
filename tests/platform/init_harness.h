/* Rewriting the init of a job's pid namespace from outside, as a job
 * that could reach it would (tests of docs/SECURITY.md, "The job's
 * init"): find it below an agent, make it clear its parent-death signal
 * and pause, and check that nothing of the job is left. x86_64 only; the
 * test runs as root. A job's worker is a process "sleep MARKER". */
#ifndef CORDON_TESTS_INIT_HARNESS_H
#define CORDON_TESTS_INIT_HARNESS_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Both test files' first step: the init is rewritten as root, with
 * x86_64 code, in a real bwrap sandbox. */
static inline void init_harness_skip_unless_able(void) {
  if (geteuid() != 0 || access("/usr/bin/bwrap", X_OK) != 0)
    cr_skip_test("needs root and bwrap");
#if !defined(__x86_64__)
  cr_skip_test("the init is rewritten with x86_64 code");
#endif
}

static inline long status_field(pid_t pid, const char *key, char *val, size_t len) {
  char path[64], line[512];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  long r = -1;
  size_t k = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      if (val && len) { /* a cut value is fine: the fields asked for are short */
        size_t m = strlen(line + k + 1);
        m = m < len - 1 ? m : len - 1;
        memcpy(val, line + k + 1, m);
        val[m] = '\0';
      }
      r = strtol(line + k + 1, NULL, 10);
      break;
    }
  fclose(f);
  return r;
}

/* The host pid of the job's namespace init: a process of agent's
 * grandchildren (agent -> bwrap -> init) that is pid 1 of its own
 * namespace; 0 when there is none now. */
static inline pid_t find_init_now(pid_t agent) {
  DIR *d = opendir("/proc");
  cr_assert(d);
  struct dirent *e;
  pid_t found = 0;
  while (!found && (e = readdir(d))) {
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid <= 0)
      continue;
    long ppid = status_field(pid, "PPid", NULL, 0);
    if (ppid <= 0 || status_field((pid_t)ppid, "PPid", NULL, 0) != agent)
      continue;
    char ns[128] = "";
    status_field(pid, "NSpid", ns, sizeof(ns));
    char *last = strrchr(ns, '\t');
    if (last && strchr(ns, '\t') != last && atoi(last + 1) == 1)
      found = pid;
  }
  closedir(d);
  return found;
}

/* find_init_now, waiting up to 10 s. */
static inline pid_t find_init(pid_t agent) {
  for (int round = 0; round < 1000; round++) {
    pid_t found = find_init_now(agent);
    if (found)
      return found;
    usleep(10 * 1000);
  }
  cr_assert_fail("no init of the job's pid namespace under agent %d", (int)agent);
  return -1;
}

/* The syscall pid is in ("running" or a number), and the pc after it. */
static inline long in_syscall(pid_t pid, uint64_t *out_pc) {
  char path[64], buf[512] = "";
  snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  if (!fgets(buf, sizeof(buf), f))
    buf[0] = '\0';
  fclose(f);
  if (buf[0] < '0' || buf[0] > '9')
    return -1;
  char *last = strrchr(buf, ' ');
  if (out_pc && last)
    *out_pc = strtoull(last + 1, NULL, 16);
  return strtol(buf, NULL, 10);
}

/* Rewrite the init (in wait4) at its pc: prctl(PR_SET_PDEATHSIG, 0);
 * with event_fd >= 0, write(event_fd, &1, 8), bwrap's "the entry exited
 * 0"; then pause() for ever. Then tell the job to go on. */
static inline void rewrite_init(pid_t init, int event_fd, uid_t uid, gid_t gid) {
  uint64_t pc = 0;
  long nr = -1;
  for (int round = 0; round < 500 && (nr = in_syscall(init, &pc)) != 61; round++)
    usleep(10 * 1000);
  cr_assert_eq(nr, 61, "the init is not in wait4 (%ld)", nr);
  uint8_t code[64];
  size_t n = 0;
  static const uint8_t clear_pdeathsig[] = {
      0xb8, 0x9d, 0x00, 0x00, 0x00, /* mov eax, 157 (prctl) */
      0xbf, 0x01, 0x00, 0x00, 0x00, /* mov edi, 1 (PR_SET_PDEATHSIG) */
      0x31, 0xf6,                   /* xor esi, esi */
      0x0f, 0x05,                   /* syscall */
  };
  memcpy(code + n, clear_pdeathsig, sizeof(clear_pdeathsig));
  n += sizeof(clear_pdeathsig);
  if (event_fd >= 0) {
    const uint8_t say_exit0[] = {
        0x6a, 0x01, /* push 1 */
        0x48, 0x89,
        0xe6, /* mov rsi, rsp */
        0xbf, (uint8_t)event_fd,
        0x00, 0x00,
        0x00, /* mov edi, event_fd */
        0xba, 0x08,
        0x00, 0x00,
        0x00, /* mov edx, 8 */
        0xb8, 0x01,
        0x00, 0x00,
        0x00,       /* mov eax, 1 (write) */
        0x0f, 0x05, /* syscall */
    };
    memcpy(code + n, say_exit0, sizeof(say_exit0));
    n += sizeof(say_exit0);
  }
  static const uint8_t pause_forever[] = {
      0xb8, 0x22, 0x00, 0x00, 0x00, /* mov eax, 34 (pause) */
      0x0f, 0x05,                   /* syscall */
      0xeb, 0xf7,                   /* jmp -9: to the mov */
  };
  memcpy(code + n, pause_forever, sizeof(pause_forever));
  n += sizeof(pause_forever);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)init);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(pwrite(fd, code, n, (off_t)pc), (ssize_t)n, "pwrite: %s", strerror(errno));
  close(fd);
  /* as the job's uid: root is not mapped into the job's user namespace */
  snprintf(path, sizeof(path), "/proc/%d/root/cordon/workspace/patched", (int)init);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
      _exit(1);
    _exit(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) < 0 ? 2 : 0);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cannot make %s: %d", path, st);
}

/* The fd of bwrap's eventfd in its init (the entry's exit status goes
 * through it to bwrap). */
static inline int event_fd_of(pid_t init) {
  for (int fd = 0; fd < 64; fd++) {
    char path[64], link[128];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)init, fd);
    ssize_t k = readlink(path, link, sizeof(link) - 1);
    if (k > 0) {
      link[k] = '\0';
      if (strstr(link, "eventfd"))
        return fd;
    }
  }
  cr_assert_fail("no eventfd in the init");
  return -1;
}

/* Wait (up to 5 s) until the rewritten init runs the pause loop. */
static inline void wait_paused(pid_t init) {
  long nr = -1;
  for (int round = 0; round < 500 && (nr = in_syscall(init, NULL)) != 34; round++)
    usleep(10 * 1000);
  cr_assert_eq(nr, 34, "the rewritten init did not reach its pause (%ld)", nr);
}

static inline bool worker_alive(const char *marker) {
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "pgrep -f '^sleep %s$' >/dev/null", marker);
  return system(cmd) == 0;
}

/* Nothing of the job runs (allowing 3 s for a reaper to act). */
static inline void assert_job_gone(pid_t init, const char *marker) {
  for (int round = 0; round < 300 && (worker_alive(marker) || kill(init, 0) == 0); round++)
    usleep(10 * 1000);
  cr_assert(!worker_alive(marker), "the job's worker outlived the job");
  char st[16] = "";
  (void)status_field(init, "State", st, sizeof(st)); /* "" when it is reaped */
  cr_assert(!st[0] || strchr(st, 'Z'), "the job's init outlived the job: state %s", st);
}

#endif
