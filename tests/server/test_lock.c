/* server/lock.c: one holder of STATE/daemon.lock at a time, named in the
 * refusal; the lock goes with its holder, however it ends. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/lock.h"

static char dir[256];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-test-lock-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  (void)!system(cmd);
}

TestSuite(lock, .init = setup, .fini = teardown);

Test(lock, a_second_taker_is_refused_with_the_holders_pid) {
  struct server_lock *a = NULL, *b = NULL;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(server_lock_take(dir, &a, &diag), 0, "%s", diag.msg);
  char path[300];
  snprintf(path, sizeof(path), "%s/%s", dir, SERVER_LOCK_FILE);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600);
  /* another open file description, as another process would have */
  cr_assert_eq(server_lock_take(dir, &b, &diag), -EBUSY);
  cr_assert_null(b);
  char want[64];
  snprintf(want, sizeof(want), "cordon-server pid %ld ", (long)getpid());
  cr_assert(strstr(diag.msg, want), "%s", diag.msg);
  server_lock_release(a);
  cr_assert_eq(server_lock_take(dir, &b, &diag), 0, "released: %s", diag.msg);
  server_lock_release(b);
  server_lock_release(NULL);
}

Test(lock, a_holder_killed_with_sigkill_leaves_a_stale_pid_that_does_not_count) {
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    struct server_lock *l;
    if (server_lock_take(dir, &l, NULL) < 0)
      _exit(1);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1);
  struct server_lock *l = NULL;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(server_lock_take(dir, &l, &diag), -EBUSY);
  char want[64];
  snprintf(want, sizeof(want), "pid %ld", (long)pid);
  cr_assert(strstr(diag.msg, want), "%s", diag.msg);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  /* its pid is still in the file, but the kernel released the lock */
  cr_assert_eq(server_lock_take(dir, &l, &diag), 0, "%s", diag.msg);
  char path[300], text[64] = {0};
  snprintf(path, sizeof(path), "%s/%s", dir, SERVER_LOCK_FILE);
  FILE *f = fopen(path, "r");
  cr_assert(fgets(text, sizeof(text), f));
  fclose(f);
  cr_assert_eq(atol(text), (long)getpid(), "the new holder's pid: %s", text);
  server_lock_release(l);
}

Test(lock, a_missing_state_directory_is_an_error_not_a_lock) {
  char missing[300];
  snprintf(missing, sizeof(missing), "%s/nope", dir);
  struct server_lock *l = NULL;
  struct cordon_diag diag = {{0}};
  cr_assert_eq(server_lock_take(missing, &l, &diag), -ENOENT);
  cr_assert(strstr(diag.msg, "nope/daemon.lock"), "%s", diag.msg);
}
