/* backup and restore with a real daemon and agent on loopback: backups
 * taken while jobs are dispatched are consistent databases, restore is
 * refused while the daemon runs, and a restored state works. */
#include <sqlite3.h>

#include "e2e.h"

TestSuite(backup, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static void assert_sound(const char *path, int64_t *out_jobs) {
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok", "%s", path);
  sqlite3_finalize(st);
  cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM jobs", -1, &st, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  *out_jobs = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(h);
}

Test(backup, backups_while_dispatching_restore_and_the_state_works) {
  PG_TEST_SQLITE_ONLY(); /* PostgreSQL refuses backup and restore: test_db.c */
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("ok", "{\"name\":\"ok\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "exit 0\n");
  /* dispatch in a child while the parent takes backups */
  pid_t busy = fork();
  cr_assert_neq(busy, -1);
  if (busy == 0) {
    for (int i = 0; i < 8; i++) {
      struct out *o =
          RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state);
      if (o->status != 0)
        _exit(1);
      free(o);
    }
    _exit(0);
  }
  char paths[4][400];
  int64_t jobs[4];
  for (int i = 0; i < 4; i++) {
    snprintf(paths[i], sizeof(paths[i]), "%s/backup-%d.db", e2e_dir, i);
    struct out *o = RUN(SERVER, "backup", paths[i], "--state", e2e_state);
    cr_assert_eq(o->status, 0, "%s", o->err);
    free(o);
    struct stat st;
    cr_assert_eq(stat(paths[i], &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "as private as the state");
    assert_sound(paths[i], &jobs[i]);
    if (i)
      cr_assert_geq(jobs[i], jobs[i - 1]);
    msleep(60);
  }
  int st = 0;
  cr_assert_eq(waitpid(busy, &st, 0), busy);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "every dispatch ran");
  struct out *o = RUN(SERVER, "backup", paths[0], "--state", e2e_state);
  cr_assert_eq(o->status, 1, "never over a file: %s", o->err);
  cr_assert(strstr(o->err, "already_exists"), "%s", o->err);
  free(o);

  /* the last one, with every job done */
  char last[400];
  snprintf(last, sizeof(last), "%s/backup-last.db", e2e_dir);
  o = RUN(SERVER, "backup", last, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);

  o = RUN(SERVER, "restore", last, "--state", e2e_state);
  cr_assert_eq(o->status, 1, "refused while the daemon runs: %s", o->err);
  cr_assert(strstr(o->err, "in use by cordon-server pid"), "%s", o->err);
  free(o);

  /* changes after the backup are gone once it is restored */
  o = RUN(SERVER, "user", "add", "bob", "--state", e2e_state);
  cr_assert_eq(o->status, 0);
  free(o);
  e2e_stop(&a->pid, SIGTERM);
  e2e_stop(&e2e_server_pid, SIGTERM);
  o = RUN(SERVER, "restore", last, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "user", "list", "--json", "--state", e2e_state);
  cr_assert(strstr(o->out, "\"alice\"") && !strstr(o->out, "\"bob\""), "%s", o->out);
  free(o);
  o = RUN(SERVER, "jobs", "--job-state", "done", "--limit", "0", "--json", "--state", e2e_state);
  json_t *l = json_loads(o->out, 0, NULL);
  cr_assert_eq(json_array_size(l), 8, "%s", o->out);
  json_decref(l);
  free(o);

  /* and it works: the daemon starts on it, the device connects and runs */
  start_server();
  start_agent(a);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--device", "laptop", pkg, "--wait", "--state",
          e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);

  /* what is not a cordon database is refused, and nothing changes */
  e2e_stop(&a->pid, SIGTERM);
  e2e_stop(&e2e_server_pid, SIGTERM);
  char junk[400];
  snprintf(junk, sizeof(junk), "%s/junk.db", e2e_dir);
  FILE *f = fopen(junk, "w");
  fputs("not a database at all, just text\n", f);
  fclose(f);
  o = RUN(SERVER, "restore", junk, "--state", e2e_state);
  cr_assert_neq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "restore", "/nonexistent/backup.db", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  o = RUN(SERVER, "user", "list", "--state", e2e_state);
  cr_assert(strstr(o->out, "alice"), "%s", o->out);
  free(o);
  free(pkg);
}
