/* cordon-server migrate (server/cmd_migrate.c): a real server's SQLite
 * state, with a real agent paired and jobs run, moved into a real
 * PostgreSQL database; `run` on the same state then uses PostgreSQL, shows
 * the same devices and jobs, sends the queued job (its package from the
 * database) and the agent runs a new job without pairing again. Refusals
 * (a running daemon, a target with rows, a table it does not know, an
 * older schema, a bad URL, a row PostgreSQL refuses midway) leave both
 * sides as they were. The table list is held to both schemas. Everything
 * but the table list needs PostgreSQL (the pg pass, CORDON_TEST_PG). */
#include <sqlite3.h>

#include "e2e.h"
#include "server/cli.h"

static const char ok_manifest[] =
    "{\"name\":\"ok\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";
static const char *target; /* the empty database migrate is given */

/* A SQLite state (whatever CORDON_TEST_DB says), alice, the daemon; an
 * empty database on the test's PostgreSQL. */
static void migrate_setup(void) {
  if (!pg_test_base())
    cr_skip_test("migrate needs PostgreSQL (CORDON_TEST_PG)");
  e2e_dir_new("cordon-migrate");
  snprintf(e2e_state, sizeof(e2e_state), "%s/state", e2e_dir);
  snprintf(e2e_server_log, sizeof(e2e_server_log), "%s/server.log", e2e_dir);
  struct out *o = RUN(SERVER, "init", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "init: %s", o->err);
  free(o);
  o = RUN(SERVER, "user", "add", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 0);
  free(o);
  target = pg_test_new_db();
  start_server();
}

static void migrate_teardown(void) {
  if (e2e_dir[0])
    e2e_teardown();
}

TestSuite(migrate, .init = migrate_setup, .fini = migrate_teardown, .timeout = 180);

/* Whether cond (SQL) holds in the target database. */
static bool pg_holds(const char *cond) {
  char sql[4400];
  snprintf(sql, sizeof(sql), "DO $$BEGIN IF NOT (%s) THEN RAISE 'no'; END IF; END$$", cond);
  return pg_test_exec(sql) == 0;
}

#define NO_TABLES                                                                                  \
  "NOT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema())"

static int lines(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

static bool has_db_url(void) {
  char path[400];
  snprintf(path, sizeof(path), "%s/%s", e2e_state, SERVER_DB_URL_FILE);
  return access(path, F_OK) == 0;
}

/* Every row of every table of STATE/cordon.db, as one text (heap). */
static char *sqlite_rows(void) {
  char path[400];
  snprintf(path, sizeof(path), "%s/cordon.db", e2e_state);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  size_t cap = 1 << 16, n = 0;
  char *out = calloc(1, cap);
  sqlite3_stmt *t = NULL;
  cr_assert_eq(
      sqlite3_prepare_v2(h, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", -1,
                         &t, NULL),
      SQLITE_OK);
  while (sqlite3_step(t) == SQLITE_ROW) {
    char sql[200];
    snprintf(sql, sizeof(sql), "SELECT * FROM \"%s\" ORDER BY 1", sqlite3_column_text(t, 0));
    sqlite3_stmt *r = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, sql, -1, &r, NULL), SQLITE_OK);
    while (sqlite3_step(r) == SQLITE_ROW)
      for (int i = 0; i < sqlite3_column_count(r); i++) {
        const unsigned char *v = sqlite3_column_text(r, i);
        size_t len = (size_t)sqlite3_column_bytes(r, i);
        if (n + len + 8 > cap)
          out = realloc(out, cap = 2 * (cap + len));
        n += (size_t)snprintf(out + n, cap - n, "%d|", sqlite3_column_type(r, i));
        memcpy(out + n, v ? (const char *)v : "", len);
        n += len;
        out[n++] = '\n';
        out[n] = '\0';
      }
    sqlite3_finalize(r);
  }
  sqlite3_finalize(t);
  sqlite3_close(h);
  return out;
}

static void sqlite_exec(const char *sql) {
  char path[400];
  snprintf(path, sizeof(path), "%s/cordon.db", e2e_state);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
  sqlite3_close(h);
}

/* A command's stdout, which must succeed (heap). */
static char *out_of(const char *const *argv) {
  struct out *o = run(argv);
  cr_assert_eq(o->status, 0, "%s %s: %s", argv[1], argv[2] ? argv[2] : "", o->err);
  char *s = strdup(o->out);
  free(o);
  return s;
}
#define OUT(...) out_of((const char *const[]){__VA_ARGS__, NULL})

static struct out *migrate_to(const char *url) {
  return RUN(SERVER, "migrate", "--state", e2e_state, "--to", url);
}

/* A refusal: its status, its one line naming what, and neither side
 * changed (no STATE/db-url, the same rows in cordon.db; target_unchanged
 * the condition the target still meets). */
static void assert_refused(struct out *o, int status, const char *what, const char *before,
                           const char *target_unchanged) {
  cr_assert_eq(o->status, status, "status %d: %s", o->status, o->err);
  cr_assert(strstr(o->err, what), "'%s' not in: %s", what, o->err);
  cr_assert_not(has_db_url(), "STATE/db-url written by a refused migrate");
  char *after = sqlite_rows();
  cr_assert_str_eq(after, before, "STATE/cordon.db changed");
  free(after);
  cr_assert(pg_holds(target_unchanged), "the target changed: %s", o->err);
  free(o);
}

/* The daemon stopped, and another state made with init --db on the target
 * (the cordon schema, no row): its directory. */
static const char *other_state_on_target(void) {
  static char other[400];
  snprintf(other, sizeof(other), "%s/other", e2e_dir);
  struct out *o = RUN(SERVER, "init", "--state", other, "--db", target);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  return other;
}

Test(migrate, the_whole_state_moves_and_the_agent_runs_a_new_job_without_pairing_again) {
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a);
  struct out *o = RUN(SERVER, "device", "label", "box", "room=lab", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char *ok = pack("ok", ok_manifest, "echo \"ran $1\"\n");
  char *bad = pack("bad", ok_manifest, "exit 3\n");
  char ids[3][33];
  o = RUN(SERVER, "dispatch", "--user", "alice", ok, "--wait", "--state", e2e_state, "--", "one");
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", bad, "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "the job's own failure: %s", o->err);
  free(o);
  /* a job queued for the device while it is away */
  e2e_stop(&a->pid, SIGTERM);
  for (int i = 0; i < 100 && device_online(a->id); i++)
    msleep(50);
  o = RUN(SERVER, "dispatch", "--user", "alice", ok, "--state", e2e_state, "--", "queued");
  job_id_of(o, ids[2]);
  free(o);
  cr_assert_str_eq(job_state(ids[2], NULL), "queued");
  char *code = mint_code("alice"); /* a live code: its proof key moves too */
  o = RUN(SERVER, "user", "add", "bob", "--state", e2e_state);
  free(o);
  e2e_stop(&e2e_server_pid, SIGTERM);

  /* what the commands show of the SQLite state, no daemon running */
  char *jobs = OUT(SERVER, "jobs", "--json", "--state", e2e_state);
  char *devices = OUT(SERVER, "devices", "--json", "--state", e2e_state);
  char *users = OUT(SERVER, "user", "list", "--json", "--state", e2e_state);
  char *codes = OUT(SERVER, "pair-code", "list", "--json", "--state", e2e_state);
  json_t *jl = json_loads(jobs, 0, NULL);
  cr_assert_eq(json_array_size(jl), 3, "%s", jobs);
  for (int i = 0; i < 2; i++)
    snprintf(ids[i], 33, "%s",
             json_string_value(json_object_get(json_array_get(jl, (size_t)(2 - i)), "id")));
  json_decref(jl);
  char *job_before[3];
  for (int i = 0; i < 3; i++)
    job_before[i] = OUT(SERVER, "job", ids[i], "--json", "--state", e2e_state);

  o = migrate_to(target);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "migrated "), "one line says what was done: %s", o->err);
  cr_assert(strstr(o->err, "jobs 3"), "%s", o->err);
  cr_assert(strstr(o->err, "1 queued package"), "%s", o->err);
  cr_assert_eq(lines(o->err), 1, "%s", o->err);
  free(o);
  char path[400];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%s", e2e_state, SERVER_DB_URL_FILE);
  cr_assert_eq(stat(path, &st), 0, "STATE/db-url written");
  cr_assert_eq(st.st_mode & 0777, 0600);
  snprintf(path, sizeof(path), "%s/cordon.db", e2e_state);
  cr_assert_eq(stat(path, &st), 0, "the SQLite file is kept");
  cr_assert(pg_holds("(SELECT count(*) FROM jobs) = 3 AND (SELECT count(*) FROM device_labels) = 1"
                     " AND (SELECT count(*) FROM job_packages) = 1"));
  /* the package a server of the cluster sends comes from the database:
   * this one's own copy goes */
  snprintf(path, sizeof(path), "%s/queue/%s.cpkg", e2e_state, ids[2]);
  cr_assert_eq(unlink(path), 0, "%s", path);

  /* the same through PostgreSQL now */
  char *jobs2 = OUT(SERVER, "jobs", "--json", "--state", e2e_state);
  char *devices2 = OUT(SERVER, "devices", "--json", "--state", e2e_state);
  char *users2 = OUT(SERVER, "user", "list", "--json", "--state", e2e_state);
  char *codes2 = OUT(SERVER, "pair-code", "list", "--json", "--state", e2e_state);
  cr_assert_str_eq(jobs2, jobs);
  cr_assert_str_eq(devices2, devices);
  cr_assert_str_eq(users2, users);
  cr_assert_str_eq(codes2, codes);
  for (int i = 0; i < 3; i++) {
    char *j = OUT(SERVER, "job", ids[i], "--json", "--state", e2e_state);
    cr_assert_str_eq(j, job_before[i]);
    free(j);
    free(job_before[i]);
  }
  o = RUN(SERVER, "user", "add", "carol", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "(id 3)"), "ids go on after the moved ones: %s", o->err);
  free(o);

  start_server();
  cr_assert(count_in(e2e_server_log, "cluster=yes") == 1, "run uses PostgreSQL");
  start_agent(a); /* the same config directory: no pairing */
  cr_assert(wait_state(ids[2], "done", 20000), "the queued job: %s", job_state(ids[2], NULL));
  json_t *job;
  job_state(ids[2], &job);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                   "ran queued\n");
  json_decref(job);
  o = RUN(SERVER, "dispatch", "--user", "alice", ok, "--wait", "--state", e2e_state, "--", "new");
  cr_assert_eq(o->status, 0, "a new job after the move: %s", o->err);
  free(o);
  cr_assert(pg_holds("(SELECT count(*) FROM jobs WHERE state = 'done') = 3"));
  /* the code minted before the move pairs a second agent */
  snprintf(e2e_agents[1].dir, sizeof(e2e_agents[1].dir), "%s/agent-two", e2e_dir);
  o = RUN(AGENT, "--config", e2e_agents[1].dir, "pair", "--server", e2e_addr, "--code", code,
          "--name", "two");
  cr_assert_eq(o->status, 0, "the moved code pairs: %s", o->err);
  free(o);
  free(code);
  free(jobs);
  free(jobs2);
  free(devices);
  free(devices2);
  free(users);
  free(users2);
  free(codes);
  free(codes2);
  free(ok);
  free(bad);
}

Test(migrate, refused_while_the_daemon_runs) {
  char *before = sqlite_rows();
  struct out *o = migrate_to(target);
  assert_refused(o, 1, "in use by cordon-server pid", before, NO_TABLES);
  free(before);
}

Test(migrate, refused_into_a_database_that_holds_cordon_rows) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  const char *other = other_state_on_target();
  struct out *o;
  o = RUN(SERVER, "user", "add", "bob", "--state", other);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char *before = sqlite_rows();
  o = migrate_to(target);
  assert_refused(o, 1, "never merges", before,
                 "(SELECT count(*) FROM users) = 1 AND (SELECT name FROM users) = 'bob'");
  free(before);
}

Test(migrate, an_empty_cordon_schema_is_an_empty_target) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  (void)other_state_on_target();
  struct out *o = migrate_to(target);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert(pg_holds("(SELECT name FROM users) = 'alice'"));
}

/* The daemon stopped, sql run on STATE/cordon.db: migrate is refused
 * (config_invalid, exit 2) naming what, and nothing changes. */
static void refused_after(const char *sql, const char *what) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  sqlite_exec(sql);
  char *before = sqlite_rows();
  assert_refused(migrate_to(target), 2, what, before, NO_TABLES);
  free(before);
}

Test(migrate, refused_with_a_table_it_does_not_know) {
  refused_after("CREATE TABLE audit (at INTEGER, what TEXT); INSERT INTO audit VALUES (1, 'x')",
                "a table audit that this cordon-server does not know");
}

Test(migrate, refused_with_a_column_it_does_not_know) {
  refused_after("ALTER TABLE devices ADD COLUMN owner_note TEXT",
                "a column devices.owner_note that postgresql://");
}

Test(migrate, refused_with_an_older_schema) {
  refused_after("UPDATE schema_version SET version = 10", "schema version 10");
}

Test(migrate, refused_with_a_bad_url_and_never_prints_its_password) {
  e2e_stop(&e2e_server_pid, SIGKILL);
  char *before = sqlite_rows();
  assert_refused(migrate_to("mysql://cordon@localhost/cordon"), 2, "usage: --to", before,
                 NO_TABLES);
  char url[128];
  snprintf(url, sizeof(url), "postgresql://cordon:s3cret-pw@127.0.0.1:%d/cordon", e2e_free_port());
  struct out *o = migrate_to(url);
  cr_assert_null(strstr(o->err, "s3cret-pw"), "the password printed: %s", o->err);
  cr_assert(strstr(o->err, "postgresql://cordon@127.0.0.1:"), "names the database: %s", o->err);
  assert_refused(o, 1, "cannot connect", before, NO_TABLES);
  free(before);
}

Test(migrate, a_row_refused_midway_leaves_the_target_as_it_was) {
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  (void)a;
  e2e_stop(&e2e_server_pid, SIGTERM);
  /* a text where PostgreSQL has a bigint: the devices are copied after
   * the users and codes, so those rows are in before it fails */
  sqlite_exec("UPDATE devices SET max_jobs = 'four'");
  char *before = sqlite_rows();
  struct out *o = migrate_to(target);
  assert_refused(o, 1, "rolled back", before, NO_TABLES);
  free(before);
  sqlite_exec("UPDATE devices SET max_jobs = 4");
  o = migrate_to(target);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert(pg_holds("(SELECT max_jobs FROM devices) = 4"));
}

Test(migrate, a_row_the_target_changes_is_caught_by_the_read_back) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  (void)other_state_on_target();
  struct out *o;
  /* every insert goes through, but one value is not the one sent */
  cr_assert_eq(pg_test_exec("CREATE FUNCTION skew() RETURNS trigger LANGUAGE plpgsql AS"
                            " $$BEGIN NEW.created := NEW.created + 1; RETURN NEW; END$$;"
                            " CREATE TRIGGER skew BEFORE INSERT ON users FOR EACH ROW"
                            " EXECUTE FUNCTION skew()"),
               0);
  char *before = sqlite_rows();
  o = migrate_to(target);
  assert_refused(o, 1, "table users read back", before, "NOT EXISTS (SELECT 1 FROM users)");
  free(before);
}

/* --- the table list ------------------------------------------------------- */

static void list_setup(void) {
  snprintf(e2e_dir, sizeof(e2e_dir), "/tmp/cordon-migrate-XXXXXX");
  cr_assert(mkdtemp(e2e_dir));
  snprintf(e2e_state, sizeof(e2e_state), "%s/state", e2e_dir);
}

TestSuite(migrate_tables, .init = list_setup, .fini = migrate_teardown, .timeout = 60);

/* The names of server_migrate_tables, sorted, one a line. */
static void known_tables(char *out, size_t size) {
  const char *names[32];
  size_t n = 0;
  for (const struct server_migrate_table *t = server_migrate_tables; t->name && n < 32; t++)
    names[n++] = t->name;
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (strcmp(names[j], names[i]) < 0) {
        const char *x = names[i];
        names[i] = names[j];
        names[j] = x;
      }
  size_t o = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n; i++)
    o += (size_t)snprintf(out + o, size - o, "%s\n", names[i]);
}

Test(migrate_tables, the_list_is_every_table_of_the_sqlite_schema) {
  struct out *o = RUN(SERVER, "init", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char path[400], have[2048] = "", want[2048];
  snprintf(path, sizeof(path), "%s/cordon.db", e2e_state);
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(h,
                                  "SELECT name FROM sqlite_master WHERE type = 'table' AND name"
                                  " NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                                  -1, &st, NULL),
               SQLITE_OK);
  size_t n = 0;
  while (sqlite3_step(st) == SQLITE_ROW)
    n += (size_t)snprintf(have + n, sizeof(have) - n, "%s\n", sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(h);
  known_tables(want, sizeof(want));
  cr_assert_str_eq(have, want,
                   "a table of the schema that migrate does not know (or knows no more): "
                   "add it to server_migrate_tables, in foreign-key order");
}

static void list_setup_pg(void) {
  if (!pg_test_base())
    cr_skip_test("needs PostgreSQL (CORDON_TEST_PG)");
  list_setup();
}

TestSuite(migrate_tables_pg, .init = list_setup_pg, .fini = migrate_teardown, .timeout = 60);

Test(migrate_tables_pg, the_list_is_every_table_of_the_postgresql_schema) {
  const char *url = pg_test_new_db();
  struct out *o = RUN(SERVER, "init", "--state", e2e_state, "--db", url);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char want[2048], cond[4096];
  known_tables(want, sizeof(want));
  for (char *p = want; (p = strchr(p, '\n'));)
    *p = ',';
  want[strlen(want) - 1] = '\0';
  snprintf(cond, sizeof(cond),
           "(SELECT string_agg(table_name, ',' ORDER BY table_name COLLATE \"C\") FROM"
           " information_schema.tables WHERE table_schema = current_schema()) = '%s'",
           want);
  cr_assert(pg_holds(cond), "the PostgreSQL schema's tables are not: %s", want);
}
