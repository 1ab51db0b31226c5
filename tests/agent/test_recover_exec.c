/* agent/recover.c's sweep of CONFIG/jobs/exec-* (the ad-hoc packages of
 * `cordon-agent exec`), with real directories and real locks held by real
 * processes: a directory older than the sweep whose exec is gone goes; one
 * whose exec still holds its lock stays, and so does one made after the
 * sweep began. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "agent/recover.h"
#include "platform/daemon.h"

static char dir[64];
static struct agent_spool sp;
static pid_t holder;

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-recover-exec-XXXXXX");
  cr_assert(mkdtemp(dir));
  cr_assert_eq(agent_spool_init(&sp, dir), 0);
  char jobs[128];
  snprintf(jobs, sizeof(jobs), "%s/jobs", dir);
  cr_assert_eq(mkdir(jobs, 0700), 0);
  holder = 0;
}

static void teardown(void) {
  if (holder > 0) {
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
  }
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
}

TestSuite(recover_exec, .init = setup, .fini = teardown);

/* jobs/name holding a manifest, its mtime `age` seconds ago. */
static void exec_dir(const char *name, long age) {
  char path[256];
  snprintf(path, sizeof(path), "%s/jobs/%s", dir, name);
  cr_assert_eq(mkdir(path, 0700), 0);
  char file[300];
  snprintf(file, sizeof(file), "%s/manifest.json", path);
  FILE *f = fopen(file, "w");
  cr_assert(f);
  fputs("{}", f);
  fclose(f);
  struct utimbuf t = {time(NULL) - age, time(NULL) - age};
  cr_assert_eq(utime(path, &t), 0);
}

static bool exists(const char *name) {
  char path[256];
  snprintf(path, sizeof(path), "%s/jobs/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* A process that holds jobs/name's exec lock, as `cordon-agent exec` does
 * while the directory exists; returns once it holds it. */
static pid_t hold_lock(const char *name) {
  char path[256];
  snprintf(path, sizeof(path), "%s/jobs/%s", dir, name);
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    struct daemon_lock *l = NULL;
    char ok = daemon_lock_take(path, AGENT_EXEC_LOCK, &l) == 0 ? 'y' : 'n';
    (void)!write(p[1], &ok, 1);
    pause();
    _exit(0);
  }
  close(p[1]);
  char ok = 0;
  cr_assert_eq(read(p[0], &ok, 1), 1);
  close(p[0]);
  cr_assert_eq(ok, 'y', "the holder took the lock");
  struct utimbuf t = {time(NULL) - 3600, time(NULL) - 3600};
  cr_assert_eq(utime(path, &t), 0); /* old: only the lock keeps it */
  return pid;
}

Test(recover_exec, a_dead_execs_dir_goes_a_live_ones_and_a_new_one_stay) {
  exec_dir("exec-0000000000000001", 3600); /* an exec killed an hour ago */
  exec_dir("exec-0000000000000002", 3600);
  holder = hold_lock("exec-0000000000000002");
  exec_dir("exec-0000000000000003", -5); /* made after the sweep began */
  exec_dir("exec-0000000000000004", 3600);
  pid_t gone = hold_lock("exec-0000000000000004");
  kill(gone, SIGKILL); /* its exec died holding the lock: the kernel released it */
  waitpid(gone, NULL, 0);

  int n = agent_recover_staging(dir, &sp);
  cr_assert_eq(n, 2, "the two dead ones: %d", n);
  cr_assert_not(exists("exec-0000000000000001"), "no lock file (an earlier version): gone");
  cr_assert_not(exists("exec-0000000000000004"), "its holder died: gone");
  cr_assert(exists("exec-0000000000000002"), "its exec still runs");
  cr_assert(exists("exec-0000000000000003"), "younger than the sweep");

  kill(holder, SIGKILL); /* now that exec is gone too */
  waitpid(holder, NULL, 0);
  holder = 0;
  cr_assert_eq(agent_recover_staging(dir, &sp), 1);
  cr_assert_not(exists("exec-0000000000000002"));
}
