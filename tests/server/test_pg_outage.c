/* The database fails under a running server (PostgreSQL only: the pg
 * pass; with SQLite the database is a file in the state, whose failures
 * are tests/server/test_faults.c's full disk). Its connections are cut in
 * the middle of a burst of jobs (pg_terminate_backend: a restart, a
 * failover, a proxy that dropped them): the server reconnects, every
 * dispatch is answered, every job it accepted ends exactly once, and it
 * goes on dispatching. The database refuses connections for a while: a
 * dispatch fails with one clear line and no hang, a device that connects
 * meanwhile is asked to come back (goaway unavailable, not unpaired), and
 * the server works again once the database is back. Its host vanishes
 * (a proxy in front of it that answers nothing): the daemon's loop is never
 * held by the reconnect, and it comes back once the host does. */
#include "e2e.h"
// e2e.h first: admin_conn.h reads its state directory
#include "admin_conn.h"
#include "pg_proxy.h"

static const char quick_manifest[] =
    "{\"name\":\"quick\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

static void pg_setup(void) {
  if (!pg_test_base())
    cr_skip_test("the database's failures: PostgreSQL only (CORDON_TEST_PG)");
  e2e_setup();
}

TestSuite(pg_outage, .init = pg_setup, .fini = e2e_teardown, .timeout = 240);

/* Cut every connection to the test's database (asked through another). */
static void cut_connections(void) {
  char sql[300];
  snprintf(sql, sizeof(sql),
           "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
           " WHERE datname = '%s'",
           pg_test_name);
  cr_assert_eq(pg_test_exec_on(NULL, sql), 0);
}

/* Whether the database lets connections in (as the cluster's superuser). */
static void allow_connections(bool allow) {
  char sql[200];
  snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS %s", pg_test_name,
           allow ? "true" : "false");
  cr_assert_eq(pg_test_exec_on(NULL, sql), 0);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* device_online, false while the daemon cannot read the devices: the
 * first statements after the database is back may still fail, until the
 * reconnect's backoff lets it try again. */
static bool device_back(const char *id) {
  struct out *o = RUN(SERVER, "devices", "--json", "--state", e2e_state);
  int status = o->status;
  free(o);
  return status == 0 && device_online(id);
}

/* `dispatch --wait -- back` until it goes through (0) or tries times
 * (its last status); each (may be NULL) runs before every try. */
static int dispatch_back(const char *pkg, int tries, void (*each)(void)) {
  int status = -1;
  for (int i = 0; i < tries && status != 0; i++) {
    if (each)
      each();
    struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state,
                        "--", "back");
    status = o->status;
    if (status == 0)
      cr_expect(strstr(o->out, "job back"), "%s", o->out);
    free(o);
    if (status != 0)
      msleep(250);
  }
  return status;
}

static int server_alive(void) {
  return e2e_server_pid > 0 && kill(e2e_server_pid, 0) == 0;
}

Test(pg_outage, connections_cut_mid_burst_every_accepted_job_ends_once_and_dispatch_goes_on) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("quick", quick_manifest, "echo \"job $1\"\n");
  enum { N = 24 };
  char ids[N][33];
  int accepted = 0, refused = 0;
  for (int i = 0; i < N; i++) {
    if (i % 4 == 3) /* six cuts, at different phases of the jobs in flight */
      cut_connections();
    char arg[16];
    snprintf(arg, sizeof(arg), "%d", i);
    struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state",
                        e2e_state, "--", arg);
    if (o->status == 0) {
      job_id_of(o, ids[accepted++]);
    } else {
      refused++;
      cr_expect(strchr(o->err, '\n') == strrchr(o->err, '\n'), "one line: %s", o->err);
    }
    free(o);
  }
  cr_assert(server_alive(), "the server lived through it");
  cr_expect_gt(count_in(e2e_server_log, "the database connection broke: connected again"), 0,
               "the operator hears of it");
  cr_assert_gt(accepted, N / 2, "most went (accepted %d, refused %d)", accepted, refused);
  for (int i = 0; i < accepted; i++) {
    cr_assert(wait_state(ids[i], "done", 30000), "job %s: %s", ids[i], job_state(ids[i], NULL));
    char needle[100];
    snprintf(needle, sizeof(needle), "msg=\"job finished\" job=%s", ids[i]);
    int n = count_in(e2e_server_log, needle);
    cr_expect_eq(n, 1, "job %s recorded once (%d)", ids[i], n);
  }
  /* and after: dispatch with --wait, the result back through the admin API */
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state,
                      "--", "after");
  cr_expect_eq(o->status, 0, "a dispatch after the cut: %s", o->err);
  cr_expect(strstr(o->out, "job after"), "%s", o->out);
  free(o);
  free(pkg);
}

Test(pg_outage, a_database_that_refuses_connections_fails_dispatch_in_one_line_then_recovers) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("quick", quick_manifest, "echo \"job $1\"\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state,
                      "--", "before");
  char known[33];
  job_id_of(o, known);
  free(o);
  cr_assert(wait_state(known, "done", 15000));
  allow_connections(false);
  cut_connections();
  /* what exists is not said to be missing: the database's error, not
   * not_found, which a calling service takes as final */
  o = RUN(SERVER, "job", known, "--state", e2e_state);
  cr_expect_neq(o->status, 0);
  cr_expect(!strstr(o->err, "not_found") && strstr(o->err, "io_error"), "job: %s", o->err);
  free(o);
  o = RUN(SERVER, "jobs", "--user", "alice", "--state", e2e_state);
  cr_expect(!strstr(o->err, "not_found") && strstr(o->err, "io_error"), "jobs --user: %s", o->err);
  free(o);
  int64_t t0 = now_ms();
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state, "--",
          "down");
  int64_t took = now_ms() - t0;
  cr_expect_neq(o->status, 0, "no database, no job: %s", o->out);
  cr_expect(!strstr(o->err, "no user") && !strstr(o->err, "not_found"), "%s", o->err);
  cr_expect(o->err[0] && strchr(o->err, '\n') == strrchr(o->err, '\n'), "one line: %s", o->err);
  cr_expect_lt(took, 15000, "answered, not hung (%lld ms)", (long long)took);
  free(o);
  /* a device that connects meanwhile is told to come back, never that it
   * is not paired (which would stop its agent for good) */
  e2e_stop(&a->pid, SIGKILL);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(wait_in(e2e_server_log, "session refused", 10000), "the server refused the session");
  msleep(500);
  cr_assert(server_alive(), "the server lives without its database");
  cr_assert_eq(waitpid(a->pid, NULL, WNOHANG), 0,
               "the agent runs on: it was not told it is unpaired");
  cr_expect_eq(count_in(a->log, "not paired any more"), 0);
  cr_expect_gt(count_in(e2e_server_log, "session refused: the database failed"), 0,
               "the server says why");
  allow_connections(true);
  bool back = false;
  for (int i = 0; i < 75 && !(back = device_back(a->id)); i++)
    msleep(200);
  cr_assert(back, "the agent is back once the database is");
  /* back: within a few seconds a dispatch goes through and runs */
  cr_expect_eq(dispatch_back(pkg, 40, NULL), 0, "dispatch works again once the database is back");
  cr_expect(server_alive());
  free(pkg);
}

/* One request on a new admin connection: its reply's time (ms); ok says
 * whether it was ok. */
static int64_t ask_timed(const char *line, bool *ok) {
  int64_t t0 = now_ms();
  struct conn *c = conn_open();
  json_t *r = ask(c, line);
  int64_t took = now_ms() - t0;
  *ok = json_is_true(json_object_get(r, "ok"));
  json_decref(r);
  conn_close(c);
  return took;
}

/* The daemon answers a ping within a second. */
static void ping_fast(void) {
  bool ok;
  int64_t took = ask_timed("{\"op\":\"ping\"}", &ok);
  cr_assert(ok && took < 1000, "ping: %s after %lld ms", ok ? "ok" : "not ok", (long long)took);
}

/* The daemon started again with its database through a proxy (STATE/db-url:
 * the commands' too, used only while it forwards). */
static void server_through(struct pg_proxy *proxy) {
  char url[1200];
  pg_proxy_start(proxy, pg_test_name, url, sizeof(url));
  e2e_stop(&e2e_server_pid, SIGTERM);
  char file[400];
  snprintf(file, sizeof(file), "%s/db-url", e2e_state);
  cr_assert_eq(unlink(file), 0);
  struct cordon_diag d = {{0}};
  cr_assert_eq(server_db_save_url(e2e_state, url, &d), 0, "%s", d.msg);
  start_server();
}

/* The daemon through proxy, a laptop of alice's connected: the package
 * that echoes "job ARG" (the caller frees it). */
static char *proxied_laptop(struct pg_proxy *proxy) {
  server_through(proxy);
  start_agent(pair_agent(0, "laptop", NULL));
  return pack("quick", quick_manifest, "echo \"job $1\"\n");
}

Test(pg_outage, a_database_host_that_vanished_never_holds_the_daemon_loop_and_it_comes_back) {
  static struct pg_proxy proxy;
  char *pkg = proxied_laptop(&proxy);
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state,
                      "--", "before");
  cr_assert_eq(o->status, 0, "through the proxy: %s", o->err);
  free(o);
  cr_assert_gt(atomic_load(&proxy.accepted), 0, "the daemon talks through the proxy");
  /* the host goes away: its connections cut, new ones answered by nobody */
  pg_proxy_black_hole(&proxy, true);
  cut_connections();
  int64_t t0 = now_ms();
  while (now_ms() - t0 < 12000) {
    ping_fast();
    /* a request that needs the database: answered at once (io_error),
     * and a step of the reconnect */
    bool ok;
    int64_t took = ask_timed("{\"op\":\"jobs\",\"user\":\"alice\"}", &ok);
    cr_assert_lt(took, 1000, "jobs: answered after %lld ms (at %lld ms)", (long long)took,
                 (long long)(now_ms() - t0));
    msleep(200);
  }
  cr_expect_gt(atomic_load(&proxy.held), 0, "the daemon tried the vanished host");
  cr_expect_gt(count_in(e2e_server_log, "timeout expired"), 0,
               "an attempt older than connect_timeout was dropped, and said");
  cr_assert(server_alive());
  /* the host is back: the daemon is, and a dispatch runs */
  pg_proxy_black_hole(&proxy, false);
  /* the attempt into the hole is dropped after connect_timeout, the next
   * one after its backoff: some 12 s */
  cr_expect_eq(dispatch_back(pkg, 120, ping_fast), 0, "dispatch works again once the host is back");
  cr_expect_gt(count_in(e2e_server_log, "the database connection broke: connected again"), 0);
  cr_expect(server_alive());
  e2e_stop(&e2e_server_pid, SIGKILL); /* before the proxy it talks through */
  pg_proxy_stop(&proxy);
  free(pkg);
}

/* fn(pid) over the daemon's LISTEN connection: the one backend whose
 * last statement was a LISTEN or a relayed event's NOTIFY (the daemon's
 * other connection runs neither). 0, or -1 when there is not exactly one. */
static int on_listener(const char *fn) {
  char sql[600];
  snprintf(sql, sizeof(sql),
           "DO $$BEGIN IF (SELECT count(%s(pid)) FROM pg_stat_activity"
           " WHERE datname = current_database() AND pid <> pg_backend_pid()"
           " AND application_name = 'cordon-server'"
           " AND (query LIKE 'LISTEN %%' OR query LIKE 'SELECT pg_notify(%%')) <> 1"
           " THEN RAISE 'not one LISTEN connection'; END IF; END$$",
           fn);
  return pg_test_exec(sql);
}

Test(pg_outage, a_listen_connection_made_again_into_a_vanished_host_never_holds_the_daemon_loop) {
  static struct pg_proxy proxy;
  server_through(&proxy);
  bool listening = false;
  for (int i = 0; i < 50 && !(listening = on_listener("abs") == 0); i++)
    msleep(100);
  cr_assert(listening, "the daemon listens (by its first tick)");
  /* the host goes away while the daemon's main connection stays (relayed
   * before): its ticks go on, and each tries to LISTEN again */
  pg_proxy_black_hole(&proxy, true);
  cr_assert_eq(on_listener("pg_terminate_backend"), 0, "the daemon's LISTEN connection, cut");
  cr_assert(wait_in(e2e_server_log, "the LISTEN connection broke", 5000));
  int held = atomic_load(&proxy.held);
  int64_t t0 = now_ms();
  while (now_ms() - t0 < 17000) {
    ping_fast();
    bool ok;
    int64_t took = ask_timed("{\"op\":\"jobs\",\"user\":\"alice\"}", &ok);
    cr_assert(ok && took < 1000, "jobs: %s after %lld ms (at %lld ms)", ok ? "ok" : "not ok",
              (long long)took, (long long)(now_ms() - t0));
    msleep(200);
  }
  cr_expect_geq(atomic_load(&proxy.held) - held, 2, "the daemon tried the vanished host again");
  cr_expect_eq(count_in(e2e_server_log, "msg=\"cannot LISTEN"), 1, "said once, not at every try");
  cr_expect_gt(count_in(e2e_server_log, "timeout expired"), 0,
               "an attempt older than connect_timeout was dropped");
  cr_expect_eq(count_in(e2e_server_log, "the database connection broke"), 0,
               "the main connection never broke");
  cr_assert(server_alive());
  /* the host is back: the daemon listens again (after the attempt into the
   * hole is dropped, and its backoff), and hears a NOTIFY on its channel */
  pg_proxy_black_hole(&proxy, false);
  bool heard = false;
  for (int i = 0; i < 60 && !heard; i++) {
    ping_fast();
    cr_assert_eq(pg_test_exec("NOTIFY " SERVER_DB_EVENTS_CHANNEL ", 'garbage'"), 0);
    heard = wait_in(e2e_server_log, "relayed event dropped: not a payload this server reads", 500);
  }
  cr_assert(heard, "the daemon hears its channel again once the host is back");
  cr_expect_eq(count_in(e2e_server_log, "listening for queued jobs and events again"), 1);
  cr_expect(server_alive());
  /* stopped while it makes its LISTEN connection into the hole again: at
   * once (nothing waits for the attempt, which goes with the handle) */
  pg_proxy_black_hole(&proxy, true);
  int before = atomic_load(&proxy.held);
  cr_assert_eq(on_listener("pg_terminate_backend"), 0, "the daemon's LISTEN connection, cut again");
  for (int i = 0; i < 50 && atomic_load(&proxy.held) == before; i++)
    msleep(100);
  cr_assert_gt(atomic_load(&proxy.held), before, "an attempt into the hole");
  msleep(500);
  ping_fast();
  int64_t t1 = now_ms();
  e2e_stop(&e2e_server_pid, SIGTERM); /* before the proxy it talks through */
  cr_expect_lt(now_ms() - t1, 5000, "stopped after %lld ms", (long long)(now_ms() - t1));
  pg_proxy_stop(&proxy);
}

/* The CPU time (ms) process pid has used so far. */
static long long cpu_ms(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* past the name, which may hold spaces */
  cr_assert_not_null(p);
  unsigned long long ut = 0, st = 0;
  /* after ")": state, then 10 fields, then utime and stime */
  cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st), 2);
  return (long long)(ut + st) * 1000 / sysconf(_SC_CLK_TCK);
}

/* The daemon's connection made again, by a request that only reads (so
 * that its next COMMIT is the first on it: parsed, seen by the proxy). */
static void fresh_connection(void) {
  cut_connections();
  bool ok = false;
  for (int i = 0; i < 50 && !ok; i++) {
    ask_timed("{\"op\":\"jobs\",\"user\":\"alice\"}", &ok);
    if (!ok)
      msleep(100);
  }
  cr_assert(ok, "the daemon reads its database again");
}

Test(pg_outage, a_commit_whose_answer_is_lost_is_acted_on_as_the_database_says_it_went) {
  static struct pg_proxy proxy;
  char *pkg = proxied_laptop(&proxy);
  cr_assert_eq(dispatch_back(pkg, 20, NULL), 0, "through the proxy");

  /* the dispatch's commit went in and its answer was cut: before, the
   * caller heard io_error and the job stayed `sent`, never sent */
  enum { N = 3 };
  char ids[N][33];
  for (int i = 0; i < N; i++) {
    fresh_connection();
    int cuts = atomic_load(&proxy.cuts);
    pg_proxy_cut(&proxy, PG_PROXY_CUT_COMMIT_ANSWER);
    char arg[16];
    snprintf(arg, sizeof(arg), "cut%d", i);
    struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state",
                        e2e_state, "--", arg);
    cr_assert_eq(o->status, 0, "dispatch %d, its commit's answer cut: %s", i, o->err);
    job_id_of(o, ids[i]);
    free(o);
    cr_assert_eq(atomic_load(&proxy.cuts), cuts + 1, "the proxy cut a commit's answer");
  }
  for (int i = 0; i < N; i++) {
    cr_assert(wait_state(ids[i], "done", 15000), "job %s: %s", ids[i], job_state(ids[i], NULL));
    char needle[160];
    snprintf(needle, sizeof(needle), "msg=\"job finished\" job=%s", ids[i]);
    cr_expect_eq(count_in(e2e_server_log, needle), 1, "job %s recorded once", ids[i]);
  }
  cr_expect_geq(count_in(e2e_server_log, "a commit lost its answer with the connection: it was "
                                         "committed"),
                N, "the operator hears of it");

  /* the answer cut and the host gone: the dispatch waits, the daemon
   * answers the rest (no loop held, none spinning), and once the host is
   * back the dispatch is answered as it went */
  fresh_connection();
  pg_proxy_cut(&proxy, PG_PROXY_CUT_COMMIT_ANSWER);
  pg_proxy_black_hole(&proxy, true);
  char log[400];
  snprintf(log, sizeof(log), "%s/dispatch-doubt.log", e2e_dir);
  const char *argv[] = {SERVER,    "dispatch", "--user", "alice", pkg, "--wait",
                        "--state", e2e_state,  "--",     "doubt", NULL};
  pid_t d = spawn_logged(log, argv);
  bool cut = false;
  for (int i = 0; i < 100 && !(cut = atomic_load(&proxy.cuts) == N + 1); i++)
    msleep(50);
  cr_assert(cut, "the dispatch's commit answer was cut");
  long long c0 = cpu_ms(e2e_server_pid);
  int64_t t0 = now_ms();
  while (now_ms() - t0 < 3000) {
    ping_fast();
    msleep(200);
  }
  long long used = cpu_ms(e2e_server_pid) - c0;
  cr_expect_lt(used, 1000, "the daemon waits, not spins: %lld ms of CPU in 3 s", used);
  cr_assert_eq(waitpid(d, NULL, WNOHANG), 0, "the dispatch waits while its end is not known");
  pg_proxy_black_hole(&proxy, false);
  int status = -1;
  for (int i = 0; i < 300; i++) {
    if (waitpid(d, &status, WNOHANG) == d)
      break;
    status = -1;
    msleep(100);
  }
  cr_assert_neq(status, -1, "the dispatch was answered once the host was back");
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "dispatch --wait: %d", status);
  cr_expect_gt(count_in(log, "job doubt"), 0, "it ran");
  cr_expect(server_alive());
  e2e_stop(&e2e_server_pid, SIGKILL); /* before the proxy it talks through */
  pg_proxy_stop(&proxy);
  free(pkg);
}
