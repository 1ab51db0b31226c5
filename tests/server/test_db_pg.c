/* The PostgreSQL driver's statements (server/db_pg.c), on a real
 * PostgreSQL (the pg pass; skipped on SQLite): a statement run many times
 * is prepared once on the connection; in a group, the transaction
 * statements travel with the op's statements (a group of N one-statement
 * ops costs N + 1 round trips) and an op that fails still rolls back only
 * itself; a connection killed under the handle is made again, its
 * statements prepared anew, inside a group or not; a BEGIN whose writer
 * lock times out fails its op and leaves no failed transaction behind; a
 * COMMIT whose answer the connection lost (a proxy cuts it) ends as the
 * database says it went, asked on the connection made again, and while
 * that cannot be asked no new group begins. */
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
// pg_test.h first: pg_proxy.h reads its base URL
#include "tests/server/pg_proxy.h"

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

/* ---- a COMMIT whose answer is lost -------------------------------------- */

static struct pg_proxy proxy;

/* A second handle on the test's database, through a proxy that can cut
 * its connection (a reconnect gives up after 2 s: connect_timeout). */
static struct server_db *open_through_proxy(char dir[64]) {
  char url[1200];
  pg_proxy_start(&proxy, pg_test_name, url, sizeof(url) - 32);
  strcat(url, "?connect_timeout=2");
  snprintf(dir, 64, "/tmp/cordon-test-dbpg-proxy-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_save_url(dir, url, &d), 0, "%s", d.msg);
  struct server_db *h = NULL;
  cr_assert_eq(server_db_open(dir, 0, &h, &d), 0, "%s", d.msg);
  return h;
}

static void close_through_proxy(struct server_db *h, const char *dir) {
  server_db_close(h);
  pg_proxy_stop(&proxy);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* One op of h's group: a user named name added. */
static void group_add_user(struct server_db *h, const char *name) {
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_group_op_begin(h, &d), 0, "%s", d.msg);
  cr_assert_eq(server_db_group_op_end(h, server_db_user_add(h, name, NULL, &d)), 0, "%s", d.msg);
}

/* server_db_group_settle on h until the group in doubt ends (at most ms). */
static bool settle_within(struct server_db *h, int ms) {
  for (int i = 0; i < ms / 50; i++) {
    if (server_db_group_settle(h) == 0)
      return true;
    usleep(50 * 1000);
  }
  return false;
}

Test(db_pg, a_group_commit_whose_answer_is_lost_ends_as_the_database_says_it_went) {
  PG_ONLY();
  char dir[64];
  struct server_db *h = open_through_proxy(dir);
  server_db_group_enable(h, on_ended, NULL);
  struct cordon_diag d = {{0}};

  /* committed, its answer dropped: asked at once on the connection made
   * again, it ended committed (before, it ended with -EIO: what waited for
   * it took its failure path although its changes were in) */
  group_add_user(h, "frank");
  pg_proxy_cut(&proxy, PG_PROXY_CUT_ANSWER);
  cr_assert_eq(server_db_group_commit(h, &d), 0, "%s", d.msg);
  cr_assert_eq(atomic_load(&proxy.cuts), 1, "the proxy cut the COMMIT's answer");
  cr_assert_eq(ended_calls, 1);
  cr_assert_eq(ended_err, 0, "the group committed, and says so");
  cr_assert(user_exists("frank"));
  cr_assert(!server_db_group_in_doubt(h));

  /* never reached the server: it ended not committed (once the old
   * backend saw the cut: until then the transaction is in progress) */
  group_add_user(h, "gina");
  pg_proxy_cut(&proxy, PG_PROXY_CUT_REQUEST);
  int r = server_db_group_commit(h, &d);
  cr_assert_eq(r, -EIO, "%s", d.msg);
  cr_assert_eq(atomic_load(&proxy.cuts), 2);
  cr_assert(settle_within(h, 5000), "the database said what became of it");
  cr_assert_eq(ended_calls, 2);
  cr_assert_eq(ended_err, -EIO, "not committed, and says so");
  cr_assert(!user_exists("gina"));

  /* committed, answer dropped, and the database cannot be asked (its host
   * answers nothing): in doubt, no new group begins, until it can */
  group_add_user(h, "hana");
  pg_proxy_black_hole(&proxy, true);
  pg_proxy_cut(&proxy, PG_PROXY_CUT_ANSWER);
  r = server_db_group_commit(h, &d);
  cr_assert_eq(r, -EIO);
  cr_assert(strstr(d.msg, "not known yet"), "%s", d.msg);
  cr_assert(server_db_group_in_doubt(h));
  cr_assert_eq(ended_calls, 2, "not ended while not known");
  cr_assert(!server_db_group_pending(h));
  cr_assert_eq(server_db_group_op_begin(h, &d), -EIO, "no group begins while one is in doubt");
  cr_assert(strstr(d.msg, "not known yet"), "%s", d.msg);
  cr_assert_eq(server_db_group_settle(h), -EAGAIN);
  cr_assert(user_exists("hana"), "(it is in, as the other handle sees)");
  pg_proxy_black_hole(&proxy, false);
  /* the attempt into the hole gives up after connect_timeout (2 s) */
  cr_assert(settle_within(h, 10000), "asked once the host is back");
  cr_assert_eq(ended_calls, 3);
  cr_assert_eq(ended_err, 0, "committed, and says so");
  cr_assert(!server_db_group_in_doubt(h));

  /* the group full (open past SERVER_DB_GROUP_MS_MAX): the op_begin that
   * commits it finds that commit in doubt, and begins no group of its own
   * (what waits for the next would be taken for the one in doubt's) */
  group_add_user(h, "lee");
  usleep((SERVER_DB_GROUP_MS_MAX + 5) * 1000);
  /* its COMMIT never reaches the server, whose backend waits (see below):
   * the connection is made again at once, but the answer is not known */
  pg_proxy_cut(&proxy, PG_PROXY_CUT_REQUEST_LINGER);
  cr_assert_eq(server_db_group_op_begin(h, &d), -EIO, "no op while its group's commit is in doubt");
  cr_assert(server_db_group_in_doubt(h));
  cr_assert(!server_db_group_pending(h), "no group opened");
  cr_assert_eq(ended_calls, 3);
  cr_assert(settle_within(h, 5000));
  cr_assert_eq(ended_calls, 4);
  cr_assert_eq(ended_err, -EIO);
  cr_assert(!user_exists("lee"));

  /* the COMMIT never came and the old backend waits for the rest, idle in
   * its transaction with the writer lock (a link that died without a
   * word): "in progress" until its keepalive, hours; it is ended, and the
   * group ends not committed */
  group_add_user(h, "mia");
  pg_proxy_cut(&proxy, PG_PROXY_CUT_REQUEST_LINGER);
  cr_assert_eq(server_db_group_commit(h, &d), -EIO, "%s", d.msg);
  cr_assert(settle_within(h, 5000), "the old backend was ended, and the database said");
  cr_assert_eq(ended_calls, 5);
  cr_assert_eq(ended_err, -EIO);
  cr_assert(!user_exists("mia"));

  /* and the next group goes on */
  group_add_user(h, "ivan");
  cr_assert_eq(server_db_group_commit(h, &d), 0, "%s", d.msg);
  cr_assert_eq(ended_calls, 6);
  cr_assert(user_exists("ivan"));
  close_through_proxy(h, dir);
}

Test(db_pg, a_transaction_commit_whose_answer_is_lost_returns_what_the_database_says) {
  PG_ONLY();
  char dir[64];
  struct server_db *h = open_through_proxy(dir);
  struct cordon_diag d = {{0}};
  int64_t id = 0;
  cr_assert_eq(server_db_user_add(h, "jo", &id, &d), 0, "%s", d.msg);
  /* server_db_user_remove is a transaction of its own (db_tx_commit): the
   * answer cut is its COMMIT's (the first on each connection is parsed) */
  pg_proxy_cut(&proxy, PG_PROXY_CUT_COMMIT_ANSWER);
  cr_assert_eq(server_db_user_remove(h, id, &d), 0, "committed, its answer lost: %s", d.msg);
  cr_assert_eq(atomic_load(&proxy.cuts), 1);
  struct server_db_user u;
  cr_assert_eq(server_db_user_get(db, id, &u, NULL), 0);
  cr_assert(u.removed);
  /* the database cannot be asked: an error that says so, not a success */
  cr_assert_eq(server_db_user_add(h, "kim", &id, &d), 0, "%s", d.msg);
  pg_proxy_black_hole(&proxy, true);
  pg_proxy_cut(&proxy, PG_PROXY_CUT_COMMIT_ANSWER);
  cr_assert_eq(server_db_user_remove(h, id, &d), -EIO);
  cr_assert(strstr(d.msg, "not known yet"), "%s", d.msg);
  pg_proxy_black_hole(&proxy, false);
  close_through_proxy(h, dir);
}
