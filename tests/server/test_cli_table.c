/* The command table (server/cli.c) as the built cordon-server binary shows
 * it: every command and subcommand answers --help (exit 0, stdout), help
 * COMMAND [SUB] says the same, version prints what it is, and a usage error
 * is one line with one prefix. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/cli.h"

#define SERVER_BIN CORDON_BINARY_DIR "/cordon-server"

static char tmp_dir[256], state_dir[300];

static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/cordon-test-cli-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp_dir));
  snprintf(state_dir, sizeof(state_dir), "%s/state", tmp_dir);
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(cli_table, .init = setup, .fini = teardown);

struct run {
  int status;
  char out[65536];
  char err[65536];
};

static void slurp(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* Run cordon-server --state STATE with argv (NULL-terminated). */
static void run_argv(struct run *r, const char *const *args) {
  char *argv[40];
  int argc = 0;
  argv[argc++] = SERVER_BIN;
  argv[argc++] = "--state";
  argv[argc++] = state_dir;
  for (; *args && argc < 38; args++)
    argv[argc++] = (char *)*args;
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

static void run(struct run *r, ...) {
  const char *args[40];
  size_t n = 0;
  va_list ap;
  va_start(ap, r);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 39)
    args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  run_argv(r, args);
}

static size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

/* One line on stderr, `cordon-server: <code>: ...`, nothing on stdout. */
static void assert_one_line_error(const struct run *r, int status, const char *code,
                                  const char *what) {
  cr_assert_eq(r->status, status, "%s: status %d, stderr: %s", what, r->status, r->err);
  cr_assert_str_eq(r->out, "", "%s: nothing on stdout: %s", what, r->out);
  cr_assert_eq(count_lines(r->err), 1, "%s: one line: %s", what, r->err);
  char prefix[128];
  snprintf(prefix, sizeof(prefix), "cordon-server: %s: ", code);
  cr_assert_eq(strncmp(r->err, prefix, strlen(prefix)), 0, "%s: '%s' expected: %s", what, prefix,
               r->err);
  cr_assert_null(strstr(r->err + strlen(prefix), "usage: "), "%s: a doubled prefix: %s", what,
                 r->err);
}

/* The help of cmd [sub] names each form it covers. */
static void assert_help(const struct run *r, const struct server_cli_command *c,
                        const struct server_cli_form *only, const char *what) {
  cr_assert_eq(r->status, 0, "%s: status %d: %s", what, r->status, r->err);
  cr_assert_str_eq(r->err, "", "%s: help on stdout only: %s", what, r->err);
  for (const struct server_cli_form *f = c->forms; f->summary; f++) {
    if (only && f != only)
      continue;
    char line[1024];
    snprintf(line, sizeof(line), "cordon-server %s%s%s%s%s", c->name, f->sub ? " " : "",
             f->sub ? f->sub : "", f->args[0] ? " " : "", f->args);
    cr_assert(strstr(r->out, line), "%s: '%s' not in: %s", what, line, r->out);
    cr_assert(strstr(r->out, f->summary), "%s: summary not in: %s", what, r->out);
  }
}

Test(cli_table, every_command_and_subcommand_answers_help) {
  struct run r;
  for (const struct server_cli_command *c = server_cli_commands; c->name; c++) {
    for (const char *h = "--help"; h; h = strcmp(h, "--help") == 0 ? "-h" : NULL) {
      run(&r, c->name, h, NULL);
      assert_help(&r, c, NULL, c->name);
    }
    run(&r, "help", c->name, NULL);
    assert_help(&r, c, NULL, c->name);
    for (const struct server_cli_form *f = c->forms; f->summary; f++) {
      if (!f->sub)
        continue;
      char what[128];
      snprintf(what, sizeof(what), "%s %s --help", c->name, f->sub);
      run(&r, c->name, f->sub, "--help", NULL);
      assert_help(&r, c, f, what);
      for (const struct server_cli_form *g = c->forms; g->summary; g++)
        if (g != f && g->sub)
          cr_assert_null(strstr(r.out, g->summary), "%s: only its own form: %s", what, r.out);
      run(&r, "help", c->name, f->sub, NULL);
      assert_help(&r, c, f, what);
    }
  }
}

Test(cli_table, the_command_list_names_every_command) {
  struct run r;
  const char *const forms[][2] = {{"--help", NULL}, {"-h", NULL}, {"help", NULL}};
  for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
    run(&r, forms[i][0], NULL);
    cr_assert_eq(r.status, 0, "%s: %s", forms[i][0], r.err);
    for (const struct server_cli_command *c = server_cli_commands; c->name; c++) {
      char line[128];
      snprintf(line, sizeof(line), "  %-10s %s\n", c->name, c->summary);
      cr_assert(strstr(r.out, line), "%s: '%s' not in: %s", forms[i][0], line, r.out);
    }
  }
}

Test(cli_table, help_after_a_double_dash_is_an_argument) {
  struct run r;
  run(&r, "dispatch", "--user", "alice", "x.cpkg", "--", "--help", NULL);
  cr_assert_neq(r.status, 0, "not help: %s", r.out);
  cr_assert_null(strstr(r.out, "usage:"), "%s", r.out);
}

Test(cli_table, version_names_the_build_and_its_libraries) {
  struct run r;
  const char *const ways[][2] = {{"--version", NULL}, {"version", NULL}};
  for (size_t i = 0; i < 2; i++) {
    run(&r, ways[i][0], NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_eq(strncmp(r.out, "cordon-server " SERVER_VERSION "\n", 15 + strlen(SERVER_VERSION)),
                 0, "%s", r.out);
    static const char *const words[] = {"protocol: session", "build:",  "libsodium ", "libuv ",
                                        "SQLite ",           "jansson "};
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
      cr_assert(strstr(r.out, words[w]), "'%s' not in: %s", words[w], r.out);
  }
  run(&r, "version", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"version\": \"" SERVER_VERSION "\""), "%s", r.out);
  cr_assert(strstr(r.out, "\"sqlite\": \""), "%s", r.out);
}

Test(cli_table, usage_errors_are_one_line_with_one_prefix) {
  struct run r;
  const char *const cases[][4] = {
      {"user", "frob", NULL},
      {"run", "--bogus", NULL},
      {"pair-code", "--ttl", NULL},
      {"nosuch", NULL},
      {"--bogus", NULL},
      {"cancel", "-x", NULL},
      {"jobs", "--limit", "x", NULL},
      {"device", "frob", NULL},
      {"help", "nosuch", NULL},
      {"version", "extra", NULL},
      {"init", "extra", NULL},
      {"dispatch", NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    run_argv(&r, cases[i]);
    assert_one_line_error(&r, 2, "usage", cases[i][0]);
  }
}
