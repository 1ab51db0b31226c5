/* The end of an isolated job does not depend on the job (docs/SECURITY.md,
 * "The job's init"): the real cordon-agent runs real packages under real
 * bwrap, as root (jobs as a throw-away job user) and as that user, and the
 * test, as root, rewrites the job's namespace init from outside through
 * /proc/PID/mem the way a job that could reach it would: the init clears
 * its parent-death signal and pauses (and, for a normal end, first tells
 * bwrap the entry exited 0). Whatever ends the job then (its exit, its
 * timeout, exec's SIGTERM, a kill -9 of exec), nothing of it may run on.
 * And the job itself cannot open its init's memory at all.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx_harness.h"

struct env {
  bool as_user;      /* agent runs as u */
  struct sbx_user u; /* the job user (and in as_user, the agent's) */
  struct sbx_dirs d; /* temp dir, agent --config, package source dir */
  char marker[64];   /* the sleep length that names the job's worker */
};

static struct env E;

static void setup_env(bool as_user) {
  memset(&E, 0, sizeof(E));
  if (geteuid() != 0 || access("/usr/bin/bwrap", X_OK) != 0)
    cr_skip_test("needs root and bwrap");
#if !defined(__x86_64__)
  cr_skip_test("the init is rewritten with x86_64 code");
#endif
  E.as_user = as_user;
  sbx_user_make(&E.u, as_user ? "cdninu" : "cdninj");
  uid_t owner = as_user ? E.u.uid : 0;
  gid_t group = as_user ? E.u.gid : 0;
  sbx_dirs_make(&E.d, "/tmp/cordon-ini-XXXXXX", owner, group);
  char c[256];
  if (as_user)
    snprintf(c, sizeof(c), "{}");
  else
    snprintf(c, sizeof(c), "{\"job_user\": \"%s\"}", E.u.name);
  sbx_agent_config(&E.d, c);
  snprintf(E.marker, sizeof(E.marker), "3000.%d7", getpid());
}

static void teardown_env(void) {
  if (E.marker[0])
    xsystem("pkill -KILL -f '^sleep %s$' ; true", E.marker);
  if (E.d.root[0])
    xsystem("rm -rf %s", E.d.root);
  sbx_user_drop(&E.u);
}

static void setup_root(void) {
  setup_env(false);
}
static void setup_user(void) {
  setup_env(true);
}

#define BOTH(name) SBX_BOTH(init_root, init_user, name)

/* The package: run.sh starts the worker (sleep MARKER), waits until the
 * test has rewritten the init, then does tail. */
static void package(int timeout_s, const char *tail) {
  char m[512], s[1024];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":%d}",
           timeout_s);
  snprintf(s, sizeof(s),
           "sleep %s &\n"
           "until [ -e /cordon/workspace/patched ]; do sleep 0.05; done\n"
           "%s\n",
           E.marker, tail);
  sbx_package_files(&E.d, m, s);
}

/* `cordon-agent --config C exec PKG --json` started, not waited for;
 * stdout into ROOT/out. */
static pid_t agent_start(void) {
  char outp[128];
  snprintf(outp, sizeof(outp), "%s/out", E.d.root);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0)
      _exit(SBX_EXIT_NO_EXEC);
    char home[300];
    snprintf(home, sizeof(home), "HOME=%s", E.as_user ? E.u.home : "/root");
    char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", home, NULL};
    if (E.as_user && (setgroups(0, NULL) < 0 || setgid(E.u.gid) < 0 || setuid(E.u.uid) < 0))
      _exit(SBX_EXIT_NO_USER);
    char *argv[] = {AGENT, "--config", E.d.config, "exec", E.d.pkg, "--json", NULL};
    execve(AGENT, argv, envp);
    _exit(SBX_EXIT_NO_EXEC);
  }
  return pid;
}

/* The agent's result, once it has ended; its wait status in *out_st. */
static json_t *agent_wait(pid_t pid, int *out_st) {
  while (waitpid(pid, out_st, 0) < 0 && errno == EINTR)
    ;
  char outp[128];
  snprintf(outp, sizeof(outp), "%s/out", E.d.root);
  json_error_t je;
  return json_load_file(outp, 0, &je);
}

static long status_field(pid_t pid, const char *key, char *val, size_t len) {
  char path[64], line[512];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  long r = -1;
  size_t k = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      if (val)
        snprintf(val, len, "%s", line + k + 1);
      r = strtol(line + k + 1, NULL, 10);
      break;
    }
  fclose(f);
  return r;
}

/* The host pid of the job's namespace init: a process of agent's
 * grandchildren (agent -> bwrap -> init) that is pid 1 of its own
 * namespace; waits up to 10 s. */
static pid_t find_init(pid_t agent) {
  for (int round = 0; round < 1000; round++) {
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
    if (found)
      return found;
    usleep(10 * 1000);
  }
  cr_assert_fail("no init of the job's pid namespace under agent %d", (int)agent);
  return -1;
}

/* The syscall pid is in ("running" or a number), and the pc after it. */
static long in_syscall(pid_t pid, uint64_t *out_pc) {
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
static void rewrite_init(pid_t init, int event_fd) {
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
    if (setgroups(0, NULL) < 0 || setgid(E.u.gid) < 0 || setuid(E.u.uid) < 0)
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
static int event_fd_of(pid_t init) {
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
static void wait_paused(pid_t init) {
  long nr = -1;
  for (int round = 0; round < 500 && (nr = in_syscall(init, NULL)) != 34; round++)
    usleep(10 * 1000);
  cr_assert_eq(nr, 34, "the rewritten init did not reach its pause (%ld)", nr);
}

static bool worker_alive(void) {
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "pgrep -f '^sleep %s$' >/dev/null", E.marker);
  return system(cmd) == 0;
}

/* Nothing of the job runs (allowing 3 s for a reaper to act). */
static void assert_job_gone(pid_t init) {
  for (int round = 0; round < 300 && (worker_alive() || kill(init, 0) == 0); round++)
    usleep(10 * 1000);
  cr_assert(!worker_alive(), "the job's worker outlived the job");
  char st[16] = "";
  (void)status_field(init, "State", st, sizeof(st)); /* "" when it is reaped */
  cr_assert(!st[0] || strchr(st, 'Z'), "the job's init outlived the job: state %s", st);
}

BOTH(a_rewritten_init_ends_with_the_jobs_result) {
  package(20, "exit 0");
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, event_fd_of(init));
  int st;
  json_t *res = agent_wait(agent, &st);
  assert_job_gone(init);
  cr_assert(res, "no result");
  cr_assert_eq(json_integer_value(jget(res, "exit_code")), 0);
  cr_assert(json_is_false(jget(res, "timed_out")));
  cr_assert_str_eq(sbx_jstr(res, "kill_scope"), "pid-namespace");
  cr_assert_geq(json_integer_value(jget(res, "orphans_killed")), 1);
  json_decref(res);
}

BOTH(a_rewritten_init_ends_at_the_timeout) {
  /* an orphan's exit wakes the init into the rewritten code */
  package(3, "(sleep 0.2 &); sleep 100");
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, -1);
  int st;
  json_t *res = agent_wait(agent, &st);
  assert_job_gone(init);
  cr_assert(res, "no result");
  cr_assert(json_is_true(jget(res, "timed_out")));
  cr_assert_str_eq(sbx_jstr(res, "kill_scope"), "pid-namespace");
  json_decref(res);
}

BOTH(a_rewritten_init_ends_when_exec_gets_sigterm) {
  package(60, "(sleep 0.2 &); sleep 100");
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, -1);
  wait_paused(init);
  cr_assert_eq(kill(agent, SIGTERM), 0);
  int st;
  json_t *res = agent_wait(agent, &st);
  assert_job_gone(init);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "exec ends by its SIGTERM: %d", st);
  cr_assert(res, "the result is printed first");
  cr_assert_str_eq(sbx_jstr(res, "error.code"), "cancelled");
  cr_assert_str_eq(sbx_jstr(res, "kill_scope"), "pid-namespace");
  json_decref(res);
}

BOTH(a_rewritten_init_ends_when_exec_is_killed) {
  package(60, "(sleep 0.2 &); sleep 100");
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, -1);
  wait_paused(init);
  cr_assert_eq(kill(agent, SIGKILL), 0);
  int st;
  json_t *res = agent_wait(agent, &st);
  json_decref(res);
  assert_job_gone(init);
}

BOTH(the_job_cannot_open_its_inits_memory) {
  char m[256];
  snprintf(
      m, sizeof(m),
      "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":20}");
  sbx_package_files(&E.d, m,
                    "for f in /proc/1/mem /proc/1/task/1/mem; do\n"
                    "  if (exec 3<>$f) 2>/dev/null; then echo OPENED $f; fi\n"
                    "done\n"
                    "cat /proc/1/status 2>/dev/null | grep -c PPid\n"
                    "echo end\n");
  struct sbx_exec x =
      sbx_exec_of(&E.d, "exec", NULL, E.as_user ? E.u.name : NULL, E.as_user ? E.u.home : "/root");
  x.json = true;
  struct sbx_run r = sbx_run_agent(&x);
  sbx_assert_ran(&r, "isolated");
  const char *out = out_of(&r);
  cr_assert(strstr(out, "end"), "%s", out);
  cr_assert_null(strstr(out, "OPENED"), "the job opened its init's memory: %s", out);
  cr_assert(strstr(out, "0\n"), "the init's /proc directory is empty: %s", out);
  json_decref(r.res);
}

BOTH(kill_scope_is_null_for_a_job_that_ends_alone_and_the_namespace_else) {
  char m[256];
  snprintf(
      m, sizeof(m),
      "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":20}");
  sbx_package_files(&E.d, m, "echo alone\n");
  struct sbx_exec x =
      sbx_exec_of(&E.d, "exec", NULL, E.as_user ? E.u.name : NULL, E.as_user ? E.u.home : "/root");
  x.json = true;
  struct sbx_run r = sbx_run_agent(&x);
  sbx_assert_ran(&r, "isolated");
  cr_assert(json_is_null(jget(r.res, "kill_scope")), "nothing was left to kill");
  cr_assert_eq(json_integer_value(jget(r.res, "orphans_killed")), 0);
  json_decref(r.res);
  char script[128];
  snprintf(script, sizeof(script), "setsid sleep %s &\nsleep 0.2\n", E.marker);
  sbx_package_files(&E.d, m, script);
  r = sbx_run_agent(&x);
  sbx_assert_ran(&r, "isolated");
  cr_assert_str_eq(sbx_jstr(r.res, "kill_scope"), "pid-namespace");
  cr_assert_geq(json_integer_value(jget(r.res, "orphans_killed")), 1);
  cr_assert(!worker_alive(), "the job's leftover outlived it");
  json_decref(r.res);
}
