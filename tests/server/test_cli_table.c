/* The command table (server/cli.c) as the built cordon-server binary shows
 * it: every command and subcommand answers --help (exit 0, stdout), help
 * COMMAND [SUB] says the same, version prints what it is, and a usage error
 * is one line with one prefix. */
#include "cli_run.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "server/cli.h"
#include "server/db.h"

static void setup(void) {
  cli_run_setup("cordon-test-cli");
}

TestSuite(cli_table, .init = setup, .fini = cli_run_teardown);

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
  cli_run_exec(r, argv);
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

/* Every form of the table, with a call that lacks a required argument
 * (exit 2, usage) and one that names what does not exist (exit 1,
 * not_found); {NULL} where the form has no such call. A form missing here
 * fails forms_are_all_in_the_error_table. */
#define NOID "0123456789abcdef0123456789abcdef"
struct error_row {
  const char *cmd, *sub;
  const char *missing[8];
  const char *unknown[10];
};

static const struct error_row error_rows[] = {
    {"init", NULL, {NULL}, {NULL}},
    {"run", NULL, {"run", NULL}, {NULL}},
    {"user", "add", {"user", "add", NULL}, {NULL}},
    {"user", "list", {"user", NULL}, {NULL}},
    {"user",
     "set",
     {"user", "set", "alice", NULL},
     {"user", "set", "nobody", "--require-approval", "yes", NULL}},
    {"user", "remove", {"user", "remove", NULL}, {"user", "remove", "nobody", NULL}},
    {"pair-code",
     "list",
     {"pair-code", "list", "--user", NULL},
     {"pair-code", "list", "--user", "nobody", NULL}},
    {"pair-code",
     "revoke",
     {"pair-code", "revoke", NULL},
     {"pair-code", "revoke", "00000-00000", NULL}},
    {"device", "approve", {"device", "approve", NULL}, {"device", "approve", "nodevice", NULL}},
    {"device", "reject", {"device", "reject", NULL}, {"device", "reject", "nodevice", NULL}},
    {"pair-code", NULL, {"pair-code", NULL}, {"pair-code", "nobody", NULL}},
    {"devices", NULL, {"devices", "--user", NULL}, {"devices", "--user", "nobody", NULL}},
    {"device", "label", {"device", "label", NULL}, {"device", "label", NOID, "k=v", NULL}},
    {"device", "show", {"device", "show", NULL}, {"device", "show", "nodevice", NULL}},
    {"device",
     "rename",
     {"device", "rename", "laptop", NULL},
     {"device", "rename", "nodevice", "new", NULL}},
    {"revoke", NULL, {"revoke", NULL}, {"revoke", NOID, NULL}},
    {"pack", NULL, {"pack", NULL}, {NULL}},
    {"dispatch",
     NULL,
     {"dispatch", "--user", "alice", NULL},
     {"dispatch", "--user", "nobody", "x.cpkg", NULL}},
    {"cancel", NULL, {"cancel", NULL}, {"cancel", NOID, NULL}},
    {"jobs", NULL, {"jobs", "--limit", NULL}, {"jobs", "--user", "nobody", NULL}},
    {"job", NULL, {"job", NULL}, {"job", NOID, NULL}},
    {"verify-receipt", NULL, {"verify-receipt", NULL}, {NULL}},
    {"keys", "export-public", {NULL}, {NULL}},
    {"keys", "rotate", {NULL}, {NULL}},
    {"keys", "retire", {"keys", "retire", NULL}, {"keys", "retire", "0123abcd", NULL}},
    {"keys", "list", {NULL}, {NULL}},
    {"backup", NULL, {"backup", NULL}, {NULL}},
    {"restore", NULL, {"restore", NULL}, {NULL}},
    {"migrate", NULL, {"migrate", NULL}, {NULL}},
    {"version", NULL, {NULL}, {NULL}},
    {"help", NULL, {NULL}, {"help", "nosuch", NULL}},
};
#define N_ERROR_ROWS (sizeof(error_rows) / sizeof(error_rows[0]))

static const struct error_row *error_row_find(const char *cmd, const char *sub) {
  for (size_t i = 0; i < N_ERROR_ROWS; i++)
    if (strcmp(error_rows[i].cmd, cmd) == 0 &&
        (sub ? error_rows[i].sub && strcmp(error_rows[i].sub, sub) == 0 : !error_rows[i].sub))
      return &error_rows[i];
  return NULL;
}

Test(cli_table, forms_are_all_in_the_error_table) {
  for (const struct server_cli_command *c = server_cli_commands; c->name; c++)
    for (const struct server_cli_form *f = c->forms; f->summary; f++)
      cr_assert_not_null(error_row_find(c->name, f->sub), "%s %s has no row", c->name,
                         f->sub ? f->sub : "");
}

static void init_with_alice(void) {
  struct run r;
  run(&r, "init", NULL);
  cr_assert_eq(r.status, 0, "init: %s", r.err);
  run(&r, "user", "add", "alice", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
}

Test(cli_table, a_missing_argument_is_usage_exit_2) {
  init_with_alice();
  struct run r;
  for (size_t i = 0; i < N_ERROR_ROWS; i++) {
    if (!error_rows[i].missing[0])
      continue;
    run_argv(&r, error_rows[i].missing);
    assert_one_line_error(&r, 2, "usage", error_rows[i].cmd);
  }
}

Test(cli_table, an_unknown_name_or_id_is_not_found_exit_1) {
  init_with_alice();
  struct run r;
  for (size_t i = 0; i < N_ERROR_ROWS; i++) {
    if (!error_rows[i].unknown[0])
      continue;
    run_argv(&r, error_rows[i].unknown);
    if (strcmp(error_rows[i].cmd, "help") == 0) /* an unknown command is bad usage */
      assert_one_line_error(&r, 2, "usage", "help nosuch");
    else
      assert_one_line_error(&r, 1, "not_found", error_rows[i].cmd);
  }
}

Test(cli_table, a_name_that_is_taken_is_already_exists_exit_1) {
  init_with_alice();
  struct run r;
  run(&r, "user", "add", "alice", NULL);
  assert_one_line_error(&r, 1, "already_exists", "user add alice");
}

Test(cli_table, commands_that_need_the_daemon_say_not_running_exit_1) {
  init_with_alice();
  char pkg[600];
  snprintf(pkg, sizeof(pkg), "%s/some.cpkg", state_dir); /* read only by the daemon */
  FILE *f = fopen(pkg, "w");
  cr_assert(f && fputs("not checked by the command line", f) >= 0 && fclose(f) == 0);
  struct run r;
  run(&r, "dispatch", "--user", "alice", pkg, NULL);
  assert_one_line_error(&r, 1, "not_running", "dispatch");
}

Test(cli_table, cancel_of_a_finished_job_is_exit_1) {
  init_with_alice();
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), 0, "%s", d.msg);
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(db, "alice", &u, NULL), 0);
  uint8_t hash[32] = {1};
  struct server_db_job_new n = {.user_id = u.id, .package_hash = hash};
  char job[CORDON_ID_HEX_SIZE];
  cr_assert_eq(server_db_job_add(db, &n, job, NULL), 0);
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_CANCELLED, NULL, NULL),
      0);
  server_db_close(db);
  struct run r;
  run(&r, "cancel", job, NULL);
  assert_one_line_error(&r, 1, "not_running", "cancel of a cancelled job");
  cr_assert(strstr(r.err, "cancelled"), "%s", r.err);
}

/* --- devices by name ------------------------------------------------------ */

static void add_device(const char *user, const char *name, uint8_t key_byte,
                       char out_id[CORDON_ID_HEX_SIZE]) {
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), 0, "%s", d.msg);
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(db, user, &u, NULL), 0);
  uint8_t pk[32];
  memset(pk, key_byte, sizeof(pk));
  struct server_db_device_info info = {.name = name, .platform = "linux", .max_jobs = 1};
  cr_assert_eq(server_db_device_add(db, u.id, pk, &info, out_id, &d), 0, "%s", d.msg);
  server_db_close(db);
}

static json_t *labels_of(const char *device, const char *user) {
  struct run r;
  if (user)
    run(&r, "device", "label", device, "--user", user, "--json", NULL);
  else
    run(&r, "device", "label", device, "--json", NULL);
  cr_assert_eq(r.status, 0, "%s: %s", device, r.err);
  json_error_t jerr;
  json_t *j = json_loads(r.out, 0, &jerr);
  cr_assert_not_null(j, "%s", r.out);
  return j;
}

Test(cli_table, a_second_device_of_the_same_name_gets_a_suffix) {
  init_with_alice();
  char a[CORDON_ID_HEX_SIZE], b[CORDON_ID_HEX_SIZE], c[CORDON_ID_HEX_SIZE];
  add_device("alice", "laptop", 1, a);
  add_device("alice", "laptop", 2, b);
  add_device("alice", "laptop", 3, c);
  struct run r;
  run(&r, "devices", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"laptop\""), "%s", r.out);
  cr_assert(strstr(r.out, "\"laptop-2\""), "%s", r.out);
  cr_assert(strstr(r.out, "\"laptop-3\""), "%s", r.out);
  /* a revoked device's name is free again */
  run(&r, "revoke", "laptop-3", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char d[CORDON_ID_HEX_SIZE];
  add_device("alice", "laptop", 4, d);
  run(&r, "device", "rename", d, "laptop-3", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.err, "renamed from laptop-"), "%s", r.err);
}

Test(cli_table, devices_are_named_by_name_or_id_prefix_and_ambiguity_is_an_error) {
  init_with_alice();
  struct run r;
  run(&r, "user", "add", "bob", NULL);
  char a[CORDON_ID_HEX_SIZE], b[CORDON_ID_HEX_SIZE];
  add_device("alice", "laptop", 1, a);
  add_device("bob", "laptop", 2, b);
  /* two users' laptops: the name alone is ambiguous, naming both */
  run(&r, "device", "label", "laptop", "gpu=yes", NULL);
  assert_one_line_error(&r, 2, "usage", "ambiguous name");
  cr_assert(strstr(r.err, a) && strstr(r.err, b), "the candidates: %s", r.err);
  cr_assert(strstr(r.err, "(alice)") && strstr(r.err, "(bob)"), "%s", r.err);
  run(&r, "revoke", "laptop", NULL);
  assert_one_line_error(&r, 2, "usage", "ambiguous revoke");
  /* --user settles it */
  run(&r, "device", "label", "laptop", "--user", "alice", "gpu=yes", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = labels_of(a, NULL);
  cr_assert_str_eq(json_string_value(json_object_get(j, "gpu")), "yes");
  json_decref(j);
  j = labels_of(b, NULL);
  cr_assert_eq(json_object_size(j), 0, "bob's laptop untouched");
  json_decref(j);
  /* a unique prefix of 4+ digits; a shorter one is not taken as an id */
  char prefix[9];
  snprintf(prefix, sizeof(prefix), "%.8s", a);
  j = labels_of(prefix, NULL);
  cr_assert_str_eq(json_string_value(json_object_get(j, "gpu")), "yes");
  json_decref(j);
  char three[4];
  snprintf(three, sizeof(three), "%.3s", a);
  run(&r, "device", "label", three, NULL);
  assert_one_line_error(&r, 1, "not_found", "a 3-digit prefix");
  /* of the wrong user: not found */
  run(&r, "device", "label", a, "--user", "bob", NULL);
  assert_one_line_error(&r, 1, "not_found", "alice's id as bob's");
  /* rename to a taken name is refused */
  run(&r, "device", "rename", "laptop", "--user", "alice", "desk", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  run(&r, "user", "add", "carol", NULL);
  char c1[CORDON_ID_HEX_SIZE], c2[CORDON_ID_HEX_SIZE];
  add_device("carol", "one", 3, c1);
  add_device("carol", "two", 4, c2);
  run(&r, "device", "rename", "two", "one", NULL);
  assert_one_line_error(&r, 1, "already_exists", "rename onto a taken name");
  /* names come out of the table by name now */
  run(&r, "revoke", "desk", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.err, a), "%s", r.err);
  /* dispatch --device resolves too (before it asks the daemon) */
  run(&r, "dispatch", "--user", "alice", "--device", "nodevice", "/dev/null", NULL);
  assert_one_line_error(&r, 1, "not_found", "dispatch --device");
  run(&r, "dispatch", "--user", "alice", "--device", "laptop", "/dev/null", NULL);
  assert_one_line_error(&r, 1, "not_found", "bob's laptop is not alice's");
}

Test(cli_table, the_man_page_documents_every_form) {
  FILE *f = fopen(CORDON_SOURCE_DIR "/docs/man/cordon-server.8.scd", "r");
  cr_assert_not_null(f);
  static char doc[1 << 17];
  size_t n = fread(doc, 1, sizeof(doc) - 1, f);
  doc[n] = '\0';
  fclose(f);
  for (const struct server_cli_command *c = server_cli_commands; c->name; c++)
    for (const struct server_cli_form *fm = c->forms; fm->summary; fm++) {
      char head[128];
      snprintf(head, sizeof(head), "\n*%s%s%s*", c->name, fm->sub ? " " : "",
               fm->sub ? fm->sub : "");
      cr_assert(strstr(doc, head), "docs/man/cordon-server.8.scd has no entry '%s'", head + 1);
    }
}

/* Where the word col begins on line (-1: not on it). */
static int column_of(const char *line, const char *col) {
  const char *p = strstr(line, col);
  return p ? (int)(p - line) : -1;
}

/* Tables measure their columns: a 48-character user name moves the
 * columns after it, on every line alike, instead of pushing its row out
 * of line with the header. */
Test(cli_table, a_long_name_widens_its_column_and_the_rows_stay_aligned) {
  struct run r;
  run(&r, "init", NULL);
  cr_assert_eq(r.status, 0, "init: %s", r.err);
  const char *long_name = "alice-with-a-rather-long-name-of-48-characters-x";
  run(&r, "user", "add", long_name, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  run(&r, "user", "add", "bob", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  run(&r, "user", "list", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *save = NULL, *header = strtok_r(r.out, "\n", &save);
  cr_assert(header);
  int created = column_of(header, "CREATED"), state = column_of(header, "STATE");
  cr_assert_gt(created, (int)strlen(long_name), "%s", header);
  int rows = 0;
  for (char *line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    rows++;
    /* the creation time: the first "T..Z" stamp, "YYYY-MM-DDT" */
    char *t = strchr(line, 'T');
    cr_assert(t && t - line >= 10, "%s", line);
    cr_assert_eq((int)(t - 10 - line), created, "CREATED under its header: %s", line);
    cr_assert_eq(column_of(line, "active"), state, "STATE under its header: %s", line);
  }
  cr_assert_eq(rows, 2);
}
