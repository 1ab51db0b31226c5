/* server/logfile.c: --log-file on fd 2, and the reopen after a move. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/logfile.h"

static char dir[256];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/cordon-test-logfile-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  (void)!system(cmd);
}

TestSuite(logfile, .init = setup, .fini = teardown);

static void slurp(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

Test(logfile, stderr_goes_to_the_file_and_a_reopen_follows_a_move) {
  char path[300], moved[310], buf[256];
  snprintf(path, sizeof(path), "%s/cordon.log", dir);
  snprintf(moved, sizeof(moved), "%s.1", path);
  cr_assert(!logfile_active());
  cr_assert_eq(logfile_reopen(NULL), 0, "nothing to reopen is not an error");
  umask(022);
  cr_assert_eq(logfile_open(path, NULL), 0);
  cr_assert(logfile_active());
  cr_assert_str_eq(logfile_path(), path);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0640);
  fprintf(stderr, "one\n");
  cr_assert_eq(rename(path, moved), 0);
  fprintf(stderr, "two\n"); /* still the moved file: it is open */
  cr_assert_eq(logfile_reopen(NULL), 0);
  fprintf(stderr, "three\n");
  slurp(moved, buf, sizeof(buf));
  cr_assert_str_eq(buf, "one\ntwo\n");
  slurp(path, buf, sizeof(buf));
  cr_assert_str_eq(buf, "three\n");
}

Test(logfile, a_file_that_cannot_be_opened_leaves_stderr_alone) {
  char path[300];
  snprintf(path, sizeof(path), "%s/no/such/dir/cordon.log", dir);
  struct stat before, after;
  cr_assert_eq(fstat(2, &before), 0);
  struct cordon_diag diag = {{0}};
  cr_assert_eq(logfile_open(path, &diag), -ENOENT);
  cr_assert(strstr(diag.msg, path), "%s", diag.msg);
  cr_assert_eq(fstat(2, &after), 0);
  cr_assert(before.st_ino == after.st_ino && before.st_dev == after.st_dev);
  cr_assert(!logfile_active());
}
