/* The built cordon-server binary run as a command, for the tests of its
 * command line: a temporary directory with a state directory in it, the
 * command run with stdin from /dev/null and its stdout, stderr and exit
 * status collected. Header-only: one test program includes it once. */
#ifndef CORDON_TESTS_SERVER_CLI_RUN_H
#define CORDON_TESTS_SERVER_CLI_RUN_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/server/pg_test.h"

#define SERVER_BIN CORDON_BINARY_DIR "/cordon-server"
#define CLI_RUN_FN static __attribute__((unused))

static char tmp_dir[256], state_dir[300];

struct run {
  int status;
  char out[65536];
  char err[65536];
};

/* A fresh /tmp/<prefix>-XXXXXX as tmp_dir, state_dir inside it (not made). */
CLI_RUN_FN void cli_run_setup(const char *prefix) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/%s-XXXXXX", prefix);
  cr_assert_not_null(mkdtemp(tmp_dir));
  snprintf(state_dir, sizeof(state_dir), "%s/state", tmp_dir);
}

CLI_RUN_FN void cli_run_teardown(void) {
  pg_test_drop();
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
  cr_assert_eq(system(cmd), 0);
}

CLI_RUN_FN void slurp(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* Run SERVER_BIN with argv (argv[0] included, NULL-terminated) and wait
 * for it; it must exit (not die of a signal). Under CORDON_TEST_DB
 * (pg_test.h) every `init` without a --db of its own gets `--db` and the
 * test's own database. */
CLI_RUN_FN void cli_run_exec(struct run *r, char *const *argv_in) {
  char *argv[64];
  size_t argc = 0;
  bool has_db = false;
  for (; argv_in[argc] && argc < 60; argc++) {
    argv[argc] = argv_in[argc];
    has_db |= strcmp(argv[argc], "--db") == 0;
  }
  if (argc > 1 && strcmp(argv[1], "init") == 0 && pg_test_base() && !has_db) {
    if (!pg_test_name[0])
      pg_test_new_db();
    argv[argc++] = "--db";
    argv[argc++] = pg_test_url_buf;
  }
  argv[argc] = NULL;
  char out_path[400], err_path[400];
  snprintf(out_path, sizeof(out_path), "%s/stdout", tmp_dir);
  snprintf(err_path, sizeof(err_path), "%s/stderr", tmp_dir);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int n = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || n < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(n, 0) < 0)
      _exit(127);
    execv(SERVER_BIN, argv);
    _exit(127);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "cordon-server died");
  r->status = WEXITSTATUS(st);
  slurp(out_path, r->out, sizeof(r->out));
  slurp(err_path, r->err, sizeof(r->err));
}

CLI_RUN_FN size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

#endif
