/* The PostgreSQL driver's statements (server/db_pg.c), on a real
 * PostgreSQL (the pg pass; skipped on SQLite): a statement run many times
 * is prepared once on the connection; in a group, the transaction
 * statements travel with the op's statements (a group of N one-statement
 * ops costs N + 1 round trips) and an op that fails still rolls back only
 * itself; a connection killed under the handle is made again, its
 * statements prepared anew, inside a group or not; a BEGIN whose writer
 * lock times out fails its op and leaves no failed transaction behind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/db.h"
#include "server/db_internal.h"
#include "tests/server/pg_test.h"

static char state_dir[256];
static struct server_db *db;
static int64_t alice;
static int ended_calls, ended_err;

static void on_ended(void *arg, int err) {
  (void)arg;
  ended_calls++;
  ended_err = err;
}

static void setup(void) {
  if (!pg_test_base())
    return;
  cr_assert(sodium_init() >= 0);
  snprintf(state_dir, sizeof(state_dir), "/tmp/cordon-test-dbpg-XXXXXX");
  cr_assert_not_null(mkdtemp(state_dir));
  pg_test_attach(state_dir);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_open(state_dir, SERVER_DB_CREATE, &db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_user_add(db, "alice", &alice, &d), 0, "%s", d.msg);
}

static void teardown(void) {
  if (!pg_test_base())
    return;
  server_db_close(db);
  pg_test_drop();
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state_dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(db_pg, .init = setup, .fini = teardown, .timeout = 60);

#define PG_ONLY()                                                                                  \
  do {                                                                                             \
    if (!pg_test_base())                                                                           \
      cr_skip_test("the PostgreSQL driver only (the pg pass)");                                    \
  } while (0)

/* One integer from sql, on the handle's own connection (its session's
 * prepared statements). */
static long long on_handle(const char *sql) {
  PGresult *r = PQexec(db->h, sql);
  cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(r));
  cr_assert_eq(PQntuples(r), 1);
  long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return v;
}

#define USER_GET_TEXT                                                                              \
  "'SELECT id, name, created, require_approval, removed FROM users WHERE id = $1'"

static long long user_get_prepared(void) {
  return on_handle("SELECT count(*) FROM pg_prepared_statements WHERE statement = " USER_GET_TEXT);
}

static long long user_get_runs(void) {
  return on_handle("SELECT coalesce(sum(generic_plans + custom_plans), 0)"
                   " FROM pg_prepared_statements WHERE statement = " USER_GET_TEXT);
}

static void get_alice(void) {
  struct server_db_user u;
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_user_get(db, alice, &u, &d), 0, "%s", d.msg);
  cr_assert_str_eq(u.name, "alice");
}

static bool user_exists(const char *name) {
  struct server_db_user u;
  return server_db_user_get_by_name(db, name, &u, NULL) == 0;
}

/* Kill the handle's backend from another connection, and wait until it is
 * gone. */
static void kill_backend(void) {
  long long pid = on_handle("SELECT pg_backend_pid()");
  char sql[160];
  snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%lld, 5000)", pid);
  cr_assert_eq(pg_test_exec(sql), 0);
}

Test(db_pg, a_statement_run_many_times_is_prepared_once) {
  PG_ONLY();
  for (int i = 0; i < 50; i++)
    get_alice();
  cr_assert_eq(user_get_prepared(), 1, "one prepared statement for the 50 runs");
  cr_assert_geq(user_get_runs(), 50, "the 50 runs used the prepared statement");
}

Test(db_pg, a_group_of_n_ops_costs_n_plus_one_round_trips_and_a_failed_op_undoes_only_itself) {
  PG_ONLY();
  server_db_group_enable(db, on_ended, NULL);
  struct cordon_diag d = {{0}};
  get_alice(); /* the statements prepared, so that the count below is the group's only */
  cr_assert_eq(server_db_user_add(db, "warm", NULL, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_user_add(db, "warm", NULL, NULL), -EEXIST);
  uint64_t before = db->round_trips;
  const char *names[] = {"bob", "bob", "carol", "dave"};
  int want[] = {0, -EEXIST, 0, 0};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
    int err = server_db_user_add(db, names[i], NULL, NULL);
    cr_assert_eq(server_db_group_op_end(db, err), want[i], "op %d (%s)", i, names[i]);
  }
  cr_assert(server_db_group_pending(db));
  cr_assert_eq(server_db_group_commit(db, &d), 0, "%s", d.msg);
  cr_assert_eq(db->round_trips - before, 4 + 1,
               "4 statements and the COMMIT: BEGIN, SAVEPOINT, RELEASE and ROLLBACK TO travel "
               "with them (%llu round trips)",
               (unsigned long long)(db->round_trips - before));
  cr_assert_eq(ended_calls, 1);
  cr_assert_eq(ended_err, 0);
  cr_assert(user_exists("bob") && user_exists("carol") && user_exists("dave"));
  cr_assert_eq(on_handle("SELECT count(*) FROM users WHERE name = 'bob'"), 1);

  /* an op with a transaction of its own inside (SAVEPOINT t ... RELEASE t),
   * then one that fails after it, in one group: only the second is undone */
  int64_t bob_id = 0;
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(db, "bob", &u, NULL), 0);
  bob_id = u.id;
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_group_op_end(db, server_db_user_remove(db, bob_id, &d)), 0, "%s", d.msg);
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  int err = server_db_user_add(db, "erin", NULL, NULL);
  cr_assert_eq(err, 0);
  err = server_db_user_add(db, "carol", NULL, NULL); /* fails after a write of the same op */
  cr_assert_eq(server_db_group_op_end(db, err), -EEXIST);
  cr_assert_eq(server_db_group_commit(db, &d), 0, "%s", d.msg);
  cr_assert_eq(ended_calls, 2);
  cr_assert_eq(ended_err, 0);
  cr_assert_eq(server_db_user_get(db, bob_id, &u, NULL), 0);
  cr_assert(u.removed, "the first op's transaction was kept");
  cr_assert(!user_exists("erin"), "the failed op's first write was rolled back with it");
  cr_assert_eq(PQtransactionStatus(db->h), PQTRANS_IDLE);
}

Test(db_pg, a_killed_connection_is_made_again_and_its_statements_prepared_anew) {
  PG_ONLY();
  get_alice();
  cr_assert_eq(user_get_prepared(), 1);
  kill_backend();
  struct server_db_user u;
  cr_assert_eq(server_db_user_get(db, alice, &u, NULL), -EIO,
               "the statement that finds the connection dead fails");
  get_alice(); /* the next one reconnects and prepares it again */
  get_alice();
  cr_assert_eq(on_handle("SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout'"),
               SERVER_DB_BUSY_TIMEOUT_MS, "the new session has the handle's settings");
  cr_assert_eq(user_get_prepared(), 1, "prepared once on the new connection");
  cr_assert_eq(user_get_runs(), 2);
}

Test(db_pg, a_connection_killed_under_a_group_loses_the_group_and_the_next_one_works) {
  PG_ONLY();
  server_db_group_enable(db, on_ended, NULL);
  struct cordon_diag d = {{0}};
  get_alice();
  /* BEGIN and SAVEPOINT are held back: the op's statement finds the death */
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  kill_backend();
  int err = server_db_user_add(db, "bob", NULL, NULL);
  cr_assert_eq(err, -EIO);
  cr_assert_eq(server_db_group_op_end(db, err), -EIO);
  cr_assert_eq(ended_calls, 1, "the group ended with the connection");
  cr_assert_eq(ended_err, -EIO);
  cr_assert(!server_db_group_pending(db));
  /* a group whose connection died after its last op (its RELEASE held
   * back): the COMMIT finds the death */
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_group_op_end(db, server_db_user_add(db, "carol", NULL, &d)), 0, "%s",
               d.msg);
  kill_backend();
  cr_assert_eq(server_db_group_commit(db, NULL), -EIO);
  cr_assert_eq(ended_calls, 2);
  cr_assert_eq(ended_err, -EIO);
  /* the next group, on the new connection */
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_group_op_end(db, server_db_user_add(db, "erin", NULL, &d)), 0, "%s",
               d.msg);
  cr_assert_eq(server_db_group_commit(db, &d), 0, "%s", d.msg);
  cr_assert_eq(ended_calls, 3);
  cr_assert_eq(ended_err, 0);
  cr_assert(user_exists("erin"));
  cr_assert(!user_exists("bob") && !user_exists("carol"),
            "nothing of the lost groups was committed");
}

Test(db_pg, a_begin_whose_writer_lock_times_out_fails_its_op_and_leaves_no_failed_transaction,
     .timeout = 60) {
  PG_ONLY();
  server_db_group_enable(db, on_ended, NULL);
  struct cordon_diag d = {{0}};
  /* another server holds the writer lock (server/db_internal.h's BEGIN) */
  PGconn *other = PQconnectdb(pg_test_url_buf);
  cr_assert_eq(PQstatus(other), CONNECTION_OK);
  PGresult *r = PQexec(other, "SELECT pg_advisory_lock(1668248164)");
  cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
  PQclear(r);
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  int err = server_db_user_add(db, "bob", NULL, NULL);
  cr_assert_eq(err, -EBUSY, "the lock's timeout is the op's error (%d)", err);
  cr_assert_eq(server_db_group_op_end(db, err), -EBUSY);
  cr_assert_eq(ended_calls, 1);
  cr_assert_eq(ended_err, -EBUSY);
  cr_assert_eq(PQtransactionStatus(db->h), PQTRANS_IDLE, "no failed transaction left open");
  PQfinish(other); /* the lock goes with its session */
  cr_assert_eq(server_db_group_op_begin(db, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_group_op_end(db, server_db_user_add(db, "carol", NULL, &d)), 0, "%s",
               d.msg);
  cr_assert_eq(server_db_group_commit(db, &d), 0, "%s", d.msg);
  cr_assert_eq(ended_err, 0);
  cr_assert(user_exists("carol") && !user_exists("bob"));
}
