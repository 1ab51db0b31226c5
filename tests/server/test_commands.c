/* The commands on the state database (user, pair-code, devices, revoke,
 * jobs, job) and init, run as the built cordon-server binary against a real
 * state directory. */
#include "cli_run.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/db.h"

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  cli_run_setup("cordon-test-commands");
}

TestSuite(commands, .init = setup, .fini = cli_run_teardown);

/* Run cordon-server with the given arguments (NULL-terminated) and
 * `--state STATE` appended; collect stdout and stderr. */
static void run(struct run *r, ...) {
  char *argv[32];
  int argc = 0;
  argv[argc++] = SERVER_BIN;
  va_list ap;
  va_start(ap, r);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && argc < 28)
    argv[argc++] = (char *)a;
  va_end(ap);
  argv[argc++] = "--state";
  argv[argc++] = state_dir;
  argv[argc] = NULL;
  cli_run_exec(r, argv);
}

static void init_state(void) {
  struct run r;
  run(&r, "init", NULL);
  cr_assert_eq(r.status, 0, "init: %s", r.err);
}

static void assert_one_line_error(const struct run *r, int status, const char *needle) {
  cr_assert_eq(r->status, status, "status %d, stderr: %s", r->status, r->err);
  cr_assert_str_eq(r->out, "", "nothing on stdout: %s", r->out);
  cr_assert_eq(count_lines(r->err), 1, "one line: %s", r->err);
  cr_assert_eq(strncmp(r->err, "cordon-server: ", 15), 0, "%s", r->err);
  if (needle)
    cr_assert(strstr(r->err, needle), "'%s' not in: %s", needle, r->err);
}

static struct server_db *open_state(void) {
  struct server_db *db = NULL;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, 0, &db, &d), 0, "%s", d.msg);
  return db;
}

static json_t *parse_stdout(const struct run *r) {
  json_error_t jerr;
  json_t *j = json_loads(r->out, 0, &jerr);
  cr_assert_not_null(j, "stdout is not JSON (%s): %s", jerr.text, r->out);
  return j;
}

Test(commands, init_creates_the_database_with_its_schema) {
  init_state();
  char path[512];
  struct stat st;
  /* PostgreSQL: the file naming the database, which may hold a password */
  snprintf(path, sizeof(path), "%s/%s", state_dir,
           pg_test_base() ? SERVER_DB_URL_FILE : SERVER_DB_FILE);
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
  struct server_db *db = open_state();
  int v = 0;
  cr_assert_eq(server_db_schema_version(db, &v, NULL), 0);
  cr_assert_eq(v, SERVER_DB_SCHEMA_VERSION);
  server_db_close(db);
}

Test(commands, init_db_that_cannot_connect_names_the_host_and_leaves_nothing) {
  struct run r;
  /* port 1 on loopback: nothing listens there */
  run(&r, "init", "--db", "postgresql://cordon:pw-s3cret@127.0.0.1:1/cordon", NULL);
  assert_one_line_error(&r, 1, "127.0.0.1");
  cr_assert(strstr(r.err, "cannot connect"), "%s", r.err);
  cr_assert_null(strstr(r.err, "pw-s3cret"), "the password is printed: %s", r.err);
  cr_assert_eq(access(state_dir, F_OK), -1, "init left %s behind", state_dir);
  run(&r, "init", "--db", "mysql://cordon@127.0.0.1/cordon", NULL);
  assert_one_line_error(&r, 2, "postgresql://");
  cr_assert_eq(access(state_dir, F_OK), -1);
}

Test(commands, backup_and_restore_on_postgresql_are_one_line_naming_pg_dump) {
  if (!pg_test_base())
    cr_skip_test("the PostgreSQL pass only");
  init_state();
  char file[400];
  snprintf(file, sizeof(file), "%s/copy.db", tmp_dir);
  struct run r;
  run(&r, "backup", file, NULL);
  assert_one_line_error(&r, 1, "pg_dump");
  cr_assert_eq(access(file, F_OK), -1, "nothing written");
  run(&r, "restore", file, NULL);
  assert_one_line_error(&r, 1, "pg_dump");
}

Test(commands, run_db_overrides_the_state_and_names_the_host_it_cannot_reach) {
  init_state();
  struct run r;
  run(&r, "run", "--listen", "127.0.0.1:0", "--db", "postgresql://cordon:pw-s3cret@127.0.0.1:1/x",
      NULL);
  assert_one_line_error(&r, 1, "127.0.0.1");
  cr_assert(strstr(r.err, "cannot connect"), "%s", r.err);
  cr_assert_null(strstr(r.err, "pw-s3cret"), "the password is printed: %s", r.err);
  run(&r, "run", "--listen", "127.0.0.1:0", "--db", "sqlite:x", NULL);
  assert_one_line_error(&r, 2, "postgresql://");
}

Test(commands, commands_without_a_database_say_run_init) {
  struct run r;
  run(&r, "devices", NULL);
  assert_one_line_error(&r, 1, "init");
  cr_assert_eq(access(state_dir, F_OK), -1, "nothing created");
}

Test(commands, user_add_list_and_duplicate) {
  init_state();
  struct run r;
  run(&r, "user", "add", "alice", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert_str_eq(r.out, "");
  run(&r, "user", "add", "bob", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = parse_stdout(&r);
  cr_assert_str_eq(json_string_value(json_object_get(j, "name")), "bob");
  json_decref(j);
  run(&r, "user", "add", "alice", NULL);
  assert_one_line_error(&r, 1, "already exists");
  run(&r, "user", "add", "bad name", NULL);
  assert_one_line_error(&r, 2, NULL);
  run(&r, "user", "frobnicate", NULL);
  assert_one_line_error(&r, 2, NULL);

  run(&r, "user", "list", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "alice") && strstr(r.out, "bob"), "%s", r.out);
  run(&r, "user", "list", "--json", NULL);
  cr_assert_eq(r.status, 0);
  j = parse_stdout(&r);
  cr_assert(json_is_array(j));
  cr_assert_eq(json_array_size(j), 2);
  cr_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "name")), "alice");
  json_decref(j);
}

Test(commands, pair_code_prints_the_code_alone_on_the_first_line) {
  init_state();
  struct run r;
  run(&r, "user", "add", "alice", NULL);
  cr_assert_eq(r.status, 0);
  run(&r, "pair-code", "alice", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert_eq(count_lines(r.out), 1, "only the code on stdout: %s", r.out);
  char *nl = strchr(r.out, '\n');
  *nl = '\0';
  cr_assert_eq(strlen(r.out), SERVER_DB_CODE_TEXT_SIZE - 1, "%s", r.out);
  cr_assert(strstr(r.err, "alice"), "hints on stderr: %s", r.err);
  cr_assert_null(strstr(r.err, r.out), "the code is not repeated on stderr");

  char id[SERVER_DB_CODE_ID_SIZE];
  uint8_t key[SERVER_DB_CODE_KEY_SIZE];
  cr_assert_eq(server_db_code_derive(r.out, id, key), 0);
  struct server_db *db = open_state();
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert(c.usable);
  cr_assert_eq(memcmp(c.key, key, sizeof(key)), 0);
  cr_assert_eq(c.expires - c.created, SERVER_DB_CODE_TTL_DEFAULT);
  server_db_code_wipe(&c);
  server_db_close(db);
}

Test(commands, pair_code_ttl_cap_and_unknown_user) {
  init_state();
  struct run r;
  run(&r, "user", "add", "alice", NULL);
  run(&r, "pair-code", "alice", "--ttl", "90s", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char id[SERVER_DB_CODE_ID_SIZE];
  uint8_t key[SERVER_DB_CODE_KEY_SIZE];
  *strchr(r.out, '\n') = '\0';
  cr_assert_eq(server_db_code_derive(r.out, id, key), 0);
  struct server_db *db = open_state();
  struct server_db_code c;
  cr_assert_eq(server_db_code_lookup(db, id, &c, NULL), 0);
  cr_assert_eq(c.expires - c.created, 90);
  server_db_close(db);

  run(&r, "pair-code", "alice", "--ttl", "2h", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  run(&r, "pair-code", "alice", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  run(&r, "pair-code", "alice", NULL);
  assert_one_line_error(&r, 1, "limit_exceeded");
  run(&r, "pair-code", "alice", "--ttl", "ten", NULL);
  assert_one_line_error(&r, 2, "--ttl");
  run(&r, "pair-code", "alice", "--ttl", "8d", NULL);
  assert_one_line_error(&r, 2, "--ttl");
  run(&r, "pair-code", "carol", NULL);
  assert_one_line_error(&r, 1, "carol");
  run(&r, "pair-code", NULL);
  assert_one_line_error(&r, 2, "usage");
}

static void add_device(const char *user, uint8_t key_byte, char out_id[CORDON_ID_HEX_SIZE]) {
  struct server_db *db = open_state();
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(db, user, &u, NULL), 0);
  uint8_t pk[32];
  memset(pk, key_byte, sizeof(pk));
  struct server_db_device_info info = {.name = "laptop",
                                       .platform = "linux",
                                       .has_level = true,
                                       .best_level = SANDBOX_LEVEL_ISOLATED,
                                       .max_jobs = 4};
  cr_assert_eq(server_db_device_add(db, u.id, pk, &info, out_id, NULL), 0);
  server_db_close(db);
}

Test(commands, devices_json_is_an_array_of_the_documented_shape) {
  init_state();
  struct run r;
  run(&r, "devices", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = parse_stdout(&r);
  cr_assert(json_is_array(j));
  cr_assert_eq(json_array_size(j), 0);
  json_decref(j);

  run(&r, "user", "add", "alice", NULL);
  run(&r, "user", "add", "bob", NULL);
  char dev[CORDON_ID_HEX_SIZE], bobs[CORDON_ID_HEX_SIZE];
  add_device("alice", 1, dev);
  add_device("bob", 2, bobs);
  run(&r, "devices", "--json", "--user", "alice", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  j = parse_stdout(&r);
  cr_assert(json_is_array(j));
  cr_assert_eq(json_array_size(j), 1);
  json_t *d = json_array_get(j, 0);
  static const char *const keys[] = {"id",     "name",      "owner", "platform", "best_level",
                                     "online", "last_seen", "state", "labels"};
  cr_assert_eq(json_object_size(d), sizeof(keys) / sizeof(keys[0]));
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    cr_assert_not_null(json_object_get(d, keys[i]), "missing %s", keys[i]);
  cr_assert_str_eq(json_string_value(json_object_get(d, "id")), dev);
  cr_assert_str_eq(json_string_value(json_object_get(d, "owner")), "alice");
  cr_assert_str_eq(json_string_value(json_object_get(d, "platform")), "linux");
  cr_assert_str_eq(json_string_value(json_object_get(d, "best_level")), "isolated");
  /* no daemon runs: whether it is online is unknown, not the database's flag */
  cr_assert(json_is_null(json_object_get(d, "online")));
  cr_assert(json_is_null(json_object_get(d, "last_seen")));
  cr_assert_str_eq(json_string_value(json_object_get(d, "state")), "active");
  json_decref(j);

  run(&r, "devices", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, dev) && strstr(r.out, bobs), "%s", r.out);
  cr_assert(strstr(r.out, " unknown "), "%s", r.out);
  cr_assert(!strstr(r.out, "offline"), "%s", r.out);
  cr_assert(strstr(r.err, "online: unknown (daemon not running)"), "%s", r.err);
  run(&r, "devices", "--user", "nobody", NULL);
  assert_one_line_error(&r, 1, "nobody");
}

Test(commands, revoke_marks_the_device_revoked_for_good) {
  init_state();
  struct run r;
  run(&r, "user", "add", "alice", NULL);
  char dev[CORDON_ID_HEX_SIZE];
  add_device("alice", 1, dev);
  run(&r, "revoke", dev, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert_str_eq(r.out, "");
  run(&r, "devices", "--json", NULL);
  json_t *j = parse_stdout(&r);
  cr_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "state")), "revoked");
  json_decref(j);
  run(&r, "revoke", dev, NULL);
  cr_assert_eq(r.status, 0, "idempotent: %s", r.err);
  cr_assert(strstr(r.err, "already"), "%s", r.err);
  run(&r, "revoke", "ffffffffffffffffffffffffffffffff", NULL);
  assert_one_line_error(&r, 1, "no device");
}

Test(commands, job_of_an_unknown_id_fails_with_one_line) {
  init_state();
  struct run r;
  run(&r, "job", "0123456789abcdef0123456789abcdef", "--json", NULL);
  assert_one_line_error(&r, 1, "no job");
  run(&r, "job", "not-an-id", NULL);
  assert_one_line_error(&r, 1, "no job");
  run(&r, "job", NULL);
  assert_one_line_error(&r, 2, "usage");
}

Test(commands, job_and_jobs_json) {
  init_state();
  struct run r;
  run(&r, "user", "add", "alice", NULL);
  char dev[CORDON_ID_HEX_SIZE], job[CORDON_ID_HEX_SIZE], queued[CORDON_ID_HEX_SIZE];
  add_device("alice", 1, dev);
  struct server_db *db = open_state();
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(db, "alice", &u, NULL), 0);
  uint8_t hash[32] = {1};
  struct server_db_job_new n = {.user_id = u.id, .device_id = dev, .package_hash = hash};
  cr_assert_eq(server_db_job_add(db, &n, job, NULL), 0);
  cr_assert_eq(server_db_job_add(db, &n, queued, NULL), 0);
  cr_assert_eq(
      server_db_job_transition(db, job, SERVER_DB_JOB_QUEUED, SERVER_DB_JOB_SENT, NULL, NULL), 0);
  cr_assert_eq(server_db_job_record_result(db, job, dev, SERVER_DB_JOB_DONE, NULL,
                                           "{\"job_id\":\"x\",\"exit_code\":0,\"error\":null}",
                                           NULL, NULL),
               0);
  server_db_close(db);

  run(&r, "job", job, "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = parse_stdout(&r);
  /* the stored job and what the text view shows (docs/OPERATIONS.md) */
  cr_assert_eq(json_object_size(j), 15, "%s", r.out);
  cr_assert(json_is_null(json_object_get(j, "error")));
  cr_assert(json_is_null(json_object_get(j, "device_online")), "no daemon: unknown");
  cr_assert_str_eq(json_string_value(json_object_get(j, "id")), job);
  cr_assert_str_eq(json_string_value(json_object_get(j, "user")), "alice");
  cr_assert_str_eq(json_string_value(json_object_get(j, "device")), dev);
  cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "done");
  json_t *res = json_object_get(j, "result");
  cr_assert(json_is_object(res));
  cr_assert_eq(json_integer_value(json_object_get(res, "exit_code")), 0);
  json_decref(j);

  run(&r, "job", queued, "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  j = parse_stdout(&r);
  cr_assert(json_is_null(json_object_get(j, "result")));
  cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "queued");
  json_decref(j);

  run(&r, "job", job, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "done") && strstr(r.out, "exit_code"), "%s", r.out);
  cr_assert(strstr(r.out, "online:   unknown (daemon not running)\n"), "%s", r.out);

  run(&r, "jobs", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  j = parse_stdout(&r);
  cr_assert(json_is_array(j));
  cr_assert_eq(json_array_size(j), 2);
  json_decref(j);
  run(&r, "jobs", "--user", "alice", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, job) && strstr(r.out, queued), "%s", r.out);
  run(&r, "jobs", "--user", "nobody", "--json", NULL);
  assert_one_line_error(&r, 1, "nobody");
}
