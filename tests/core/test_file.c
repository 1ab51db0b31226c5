/* Tests for core/file.c: whole writes, atomic replacement, bounded reads. */
#include "core/file.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-core-file-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    cr_log_warn("cannot remove %s", dir);
}

static void put(const char *name, const char *text) {
  char p[128];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

TestSuite(file, .init = setup, .fini = teardown);

Test(file, reads_a_small_regular_file_whole) {
  put("a", "hello");
  char p[128], *buf = NULL;
  size_t len = 0;
  struct cordon_diag d = {{0}};
  snprintf(p, sizeof(p), "%s/a", dir);
  cr_assert_eq(core_read_file(p, 100, CORDON_E_USAGE, "x", &buf, &len, &d), 0, "%s", d.msg);
  cr_assert_eq(len, 5);
  cr_assert_str_eq(buf, "hello");
  free(buf);
}

Test(file, refuses_a_symlink_in_place_of_the_file) {
  put("secret", "root:$6$hash");
  char link[128], target[128];
  snprintf(target, sizeof(target), "%s/secret", dir);
  snprintf(link, sizeof(link), "%s/manifest.json", dir);
  cr_assert_eq(symlink(target, link), 0);
  char *buf = (char *)0x1;
  size_t len = 7;
  struct cordon_diag d = {{0}};
  int r = core_read_file(link, 100, CORDON_E_USAGE, "manifest", &buf, &len, &d);
  cr_assert_eq(r, -ELOOP, "got %d: %s", r, d.msg);
  cr_assert_eq(buf, (char *)0x1, "output written on failure");
  cr_assert_eq(len, 7);
  cr_assert(strstr(d.msg, "root:") == NULL, "the target's bytes in the error: %s", d.msg);
}

Test(file, refuses_a_fifo_without_waiting_and_a_too_large_file) {
  char p[128];
  snprintf(p, sizeof(p), "%s/fifo", dir);
  cr_assert_eq(mkfifo(p, 0600), 0);
  char *buf = NULL;
  size_t len = 0;
  struct cordon_diag d = {{0}};
  cr_assert_eq(core_read_file(p, 100, CORDON_E_USAGE, "x", &buf, &len, &d), CORDON_E_USAGE);
  cr_assert(strstr(d.msg, "not a regular file"), "%s", d.msg);
  put("big", "0123456789");
  snprintf(p, sizeof(p), "%s/big", dir);
  cr_assert_eq(core_read_file(p, 9, CORDON_E_USAGE, "x", &buf, &len, &d), CORDON_E_USAGE);
  cr_assert(strstr(d.msg, "larger than 9 bytes"), "%s", d.msg);
  cr_assert_null(buf);
}

Test(file, atomic_write_replaces_whole_and_leaves_no_temporary) {
  put("state", "old");
  cr_assert_eq(core_write_file_atomic(dir, "state", "new contents", 12, 0600), 0);
  char p[128], *buf = NULL;
  size_t len = 0;
  struct cordon_diag d = {{0}};
  snprintf(p, sizeof(p), "%s/state", dir);
  cr_assert_eq(core_read_file(p, 100, CORDON_E_USAGE, "x", &buf, &len, &d), 0);
  cr_assert_str_eq(buf, "new contents");
  free(buf);
  struct stat st;
  cr_assert_eq(stat(p, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600);
  snprintf(p, sizeof(p), "%s/.state.tmp", dir);
  cr_assert_eq(access(p, F_OK), -1, "temporary file left behind");
}

Test(file, atomic_write_into_a_missing_directory_changes_nothing) {
  char missing[128];
  snprintf(missing, sizeof(missing), "%s/nope", dir);
  cr_assert_eq(core_write_file_atomic(missing, "x", "y", 1, 0600), -ENOENT);
}

Test(file, write_all_writes_everything_through_a_pipe) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  static char big[60000];
  memset(big, 'z', sizeof(big));
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    size_t got = 0;
    char b[4096];
    ssize_t n;
    while ((n = read(p[0], b, sizeof(b))) > 0)
      got += (size_t)n;
    _exit(got == sizeof(big) ? 0 : 1);
  }
  close(p[0]);
  cr_assert_eq(core_write_all(p[1], big, sizeof(big)), 0);
  close(p[1]);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
