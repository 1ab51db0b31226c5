/* server/cluster.c: two real `cordon-server run` daemons on one real
 * PostgreSQL database (B made with `init --keys-from A`), real agents on
 * loopback. A dispatch through A reaches a device connected to B (queued
 * by A, its package from the database, sent by B when A's NOTIFY comes); restarting A does not
 * mark B's device offline; a job queued for an offline device is sent by
 * the server it connects to; a newer session on A replaces B's (B's log
 * says so); a kill -9 of the server running a job: the device reconnects
 * to the other, which records the result once, and `job --json` is the
 * same through either server. PostgreSQL only (the pg pass): with SQLite
 * there is one server. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "e2e.h"
#include "peer.h"

static char state_b[320], log_b[400], addr_a[64], addr_b[64];
static pid_t pid_b = -1;
static const char manifest[] =
    "{\"name\":\"r\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":60}";

static pid_t start_daemon(const char *state, const char *listen, const char *log) {
  e2e_log_restart(log);
  const char *argv[] = {SERVER,        "run",         "--state", state,         "--listen",
                        listen,        "--job-grace", "5",       "--advertise", addr_a,
                        "--advertise", addr_b,        NULL};
  pid_t pid = spawn_logged(log, argv);
  cr_assert(wait_in(log, "msg=listening", 5000), "the server on %s did not start", listen);
  return pid;
}

static void start_a(void) {
  e2e_server_pid = start_daemon(e2e_state, addr_a, e2e_server_log);
}

static void start_b(void) {
  pid_b = start_daemon(state_b, addr_b, log_b);
}

/* Both states on one new database; nothing runs yet. Skipped on SQLite. */
static void cluster_setup(void) {
  if (!pg_test_base())
    cr_skip_test("a cluster needs PostgreSQL (CORDON_TEST_PG)");
  cr_assert(sodium_init() >= 0);
  memset(e2e_agents, 0, sizeof(e2e_agents));
  for (int i = 0; i < E2E_AGENTS; i++)
    e2e_agents[i].pid = -1;
  snprintf(e2e_dir, sizeof(e2e_dir), "/tmp/cordon-route-XXXXXX");
  cr_assert(mkdtemp(e2e_dir));
  chmod(e2e_dir, 0755);
  snprintf(e2e_state, sizeof(e2e_state), "%s/state-a", e2e_dir);
  snprintf(state_b, sizeof(state_b), "%s/state-b", e2e_dir);
  snprintf(e2e_server_log, sizeof(e2e_server_log), "%s/server-a.log", e2e_dir);
  snprintf(log_b, sizeof(log_b), "%s/server-b.log", e2e_dir);
  const char *url = pg_test_new_db();
  struct out *o = RUN(SERVER, "init", "--state", e2e_state, "--db", url);
  cr_assert_eq(o->status, 0, "init A: %s", o->err);
  free(o);
  o = RUN(SERVER, "init", "--state", state_b, "--db", url, "--keys-from", e2e_state);
  cr_assert_eq(o->status, 0, "init B: %s", o->err);
  free(o);
  o = RUN(SERVER, "user", "add", "alice", "--state", e2e_state);
  cr_assert_eq(o->status, 0);
  free(o);
  int pa = e2e_free_port(), pb = e2e_free_port();
  while (pb == pa)
    pb = e2e_free_port();
  snprintf(addr_a, sizeof(addr_a), "127.0.0.1:%d", pa);
  snprintf(addr_b, sizeof(addr_b), "127.0.0.1:%d", pb);
  snprintf(e2e_addr, sizeof(e2e_addr), "%s", addr_a); /* pairing and peers go to A */
}

static void teardown(void) {
  e2e_stop(&pid_b, SIGKILL);
  if (e2e_dir[0])
    e2e_teardown();
}

TestSuite(route, .fini = teardown, .timeout = 180);

static int connected_in(const char *log) {
  return count_in(log, "msg=\"device connected\"");
}

static bool wait_count(const char *log, const char *needle, int n, int ms) {
  for (int t = 0; t < ms; t += 20) {
    if (count_in(log, needle) >= n)
      return true;
    msleep(20);
  }
  return false;
}

/* `job ID --json` through the server of state. */
static char *job_json(const char *state, const char *id) {
  struct out *o = RUN(SERVER, "job", id, "--json", "--state", state);
  cr_assert_eq(o->status, 0, "job through %s: %s", state, o->err);
  char *s = strdup(o->out);
  free(o);
  return s;
}

/* The device's devices.online column, straight from the database. */
static bool online_column(const char *device_id) {
  char sql[300];
  snprintf(sql, sizeof(sql),
           "DO $$BEGIN IF (SELECT online FROM devices WHERE id = '%s') <> 1"
           " THEN RAISE 'offline'; END IF; END$$",
           device_id);
  return pg_test_exec(sql) == 0;
}

/* Agent a (paired through A) on B: A is stopped while it connects. */
static void agent_on_b(struct e2e_agent *a) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  int before = connected_in(log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(wait_count(log_b, "msg=\"device connected\"", before + 1, 15000),
            "the agent reached B");
}

/* Both servers up, the device paired through A and connected to B. */
static struct e2e_agent *a_device_on_b(void) {
  cluster_setup();
  start_a();
  start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  agent_on_b(a);
  start_a();
  return a;
}

Test(route, a_dispatch_through_one_server_reaches_a_device_on_the_other) {
  /* A starts again (a_device_on_b): B's device stays online (in the column, and to A) */
  struct e2e_agent *a = a_device_on_b();
  cr_expect(online_column(a->id), "A's start did not mark B's device offline");
  cr_expect(device_online(a->id), "A sees the device online through B's lease");

  char *pkg = pack("r", manifest, "echo routed\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert(wait_state(id, "done", 15000), "the job ran on the device connected to B: %s",
            job_state(id, NULL));
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(log_b, needle), 1, "B sent it");
  cr_expect_eq(count_in(e2e_server_log, needle), 0, "A did not");
  cr_expect_eq(connected_in(e2e_server_log), 0, "the device never came to A");
  cr_expect_eq(count_in(log_b, "cannot LISTEN"), 0, "B listens for queued jobs");
  char *ja = job_json(e2e_state, id), *jb = job_json(state_b, id);
  cr_expect_str_eq(ja, jb, "job --json is the same through either server");
  free(ja);
  free(jb);
  /* --no-queue: the device on B can run it now, so it goes (through the queue) */
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--no-queue", "--detach", "--state",
          e2e_state);
  job_id_of(o, id);
  free(o);
  cr_expect(wait_state(id, "done", 15000), "--no-queue through A: %s", job_state(id, NULL));
  /* --wait through A: answered when B records the result */
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state);
  cr_expect_eq(o->status, 0, "dispatch --wait through A: %s", o->err);
  cr_expect(strstr(o->out, "routed"), "with the job's output: %s", o->out);
  free(o);

  /* a job queued while the device is offline goes out through the server
   * it connects to (B, which it prefers now), its package from the database */
  e2e_stop(&a->pid, SIGKILL);
  for (int i = 0; i < 300 && device_online(a->id); i++)
    msleep(20);
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state);
  job_id_of(o, id);
  free(o);
  cr_assert_str_eq(job_state(id, NULL), "queued");
  char copy[500];
  snprintf(copy, sizeof(copy), "%s/queue/%s.cpkg", e2e_state, id);
  cr_assert_eq(access(copy, F_OK), 0, "A keeps the package it queued");
  int before = connected_in(log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(wait_count(log_b, "msg=\"device connected\"", before + 1, 15000));
  cr_assert(wait_state(id, "done", 15000), "the queued job ran: %s", job_state(id, NULL));
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(log_b, needle), 1, "B sent the job A queued");
  /* A's copy of the package goes at A's next sweep (every 5th renewal tick) */
  bool gone = false;
  for (int i = 0; i < 300 && !(gone = access(copy, F_OK) != 0); i++)
    msleep(50);
  cr_expect(gone, "A dropped its copy of the package B sent");
  free(pkg);
}

Test(route, a_newer_session_on_the_other_server_replaces_the_older) {
  struct e2e_agent *a = a_device_on_b();
  /* the device's newer session is on A (a peer with its keys): B's closes */
  struct peer p;
  peer_session(&p, a);
  cr_assert(wait_in(log_b, "msg=\"session replaced\"", 8000), "B noticed A took the device");
  cr_expect(wait_in(log_b, "by=\"another server\"", 100));
  cr_expect(wait_in(log_b, "reason=goaway.replaced", 3000), "B's session ended as replaced");
  cr_expect(wait_in(a->log, "replaced", 3000), "the agent was told");
  cr_expect(device_online(a->id));
  peer_release(&p);
}

Test(route, a_server_killed_during_a_job_loses_nothing) {
  cluster_setup();
  start_a();
  start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a); /* on A */
  char *pkg = pack("r", manifest, "sleep 3; echo survived\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  e2e_stop(&e2e_server_pid, SIGKILL);
  cr_assert(wait_count(log_b, "msg=\"device connected\"", 1, 15000), "the device moved to B");
  /* through B: A is dead */
  char *jb = NULL;
  for (int t = 0; t < 20000; t += 100) {
    free(jb);
    jb = job_json(state_b, id);
    if (strstr(jb, "\"state\":\"done\"") || strstr(jb, "\"state\": \"done\""))
      break;
    msleep(100);
  }
  cr_assert(strstr(jb, "done"), "B recorded the result: %s", jb);
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job finished\" job=%s", id);
  cr_expect_eq(count_in(log_b, needle) + count_in(e2e_server_log, needle), 1,
               "recorded exactly once");
  start_a();
  char *ja = job_json(e2e_state, id);
  free(jb);
  jb = job_json(state_b, id);
  cr_expect_str_eq(ja, jb, "job --json is the same through either server");
  cr_expect(strstr(ja, "survived"), "with its output: %s", ja);
  free(ja);
  free(jb);
  free(pkg);
}

Test(route, a_revoke_or_a_cancel_through_one_server_reaches_the_device_on_the_other) {
  struct e2e_agent *a = a_device_on_b();
  char *pkg = pack("r", manifest, "sleep 30; echo late\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  o = RUN(SERVER, "cancel", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "cancel through A: %s", o->err);
  free(o);
  /* B tells its agent: the job stops and its result comes long before 30 s */
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job finished\" job=%s", id);
  cr_assert(wait_in(log_b, needle, 10000), "the agent on B stopped the job cancelled through A");
  cr_expect_str_eq(job_state(id, NULL), "cancelled");

  o = RUN(SERVER, "revoke", "box", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "revoke through A: %s", o->err);
  free(o);
  cr_assert(wait_in(log_b, "msg=\"device revoked through another server: session closed\"", 8000),
            "B closed the revoked device's session");
  cr_expect(wait_in(log_b, "reason=goaway.revoked", 3000));
  for (int i = 0; i < 300 && device_online(a->id); i++)
    msleep(20);
  cr_expect(!device_online(a->id), "a revoked device is offline everywhere");
  free(pkg);
}

Test(route, a_dead_servers_devices_go_offline_after_the_lease_and_its_jobs_end_device_lost) {
  cluster_setup();
  start_a();
  start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a); /* on A */
  char *pkg = pack("s",
                   "{\"name\":\"s\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":2}",
                   "sleep 60\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  /* the server and its device die together: nobody closes the session
   * (the agent frozen first, so that A never sees its connection end) */
  kill(a->pid, SIGSTOP);
  e2e_stop(&e2e_server_pid, SIGKILL);
  e2e_stop(&a->pid, SIGKILL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *j = job_json(state_b, id);
  cr_expect(strstr(j, "\"device_online\": true"),
            "through B the device is online while A's lease lasts: %s", j);
  free(j);
  snprintf(e2e_state, sizeof(e2e_state), "%.290s", state_b); /* the helpers ask B now */
  bool off = false;
  for (int i = 0; i < 400 && !(off = !device_online(a->id)); i++)
    msleep(50);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  cr_assert(off, "B took the device offline when A's lease passed");
  cr_expect_lt(ms, 10000 + 2000 + 1500, "within the lease and a renewal tick: %ld ms", ms);
  cr_assert(wait_state(id, "expired", 15000), "%s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_expect_str_eq(json_string_value(json_object_get(job, "error")), "device_lost");
  json_decref(job);
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job expired\" job=%s", id);
  cr_expect_eq(count_in(log_b, needle), 1, "B ended it");
  free(pkg);
}

Test(route, a_queued_package_above_what_one_row_keeps_reaches_the_device_through_the_other,
     .timeout = 240) {
  cluster_setup();
  start_a();
  start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  e2e_stop(&a->pid, SIGKILL);
  for (int i = 0; i < 300 && device_online(a->id); i++)
    msleep(20);
  /* a package above SERVER_DB_PACKAGE_STORE_MAX (64 MiB): kept in parts */
  char dir[400], cmd[1200];
  snprintf(dir, sizeof(dir), "%s/big", e2e_dir);
  mkdir(dir, 0755);
  snprintf(cmd, sizeof(cmd),
           "head -c %u /dev/urandom > %s/blob && sha256sum < %s/blob | cut -c1-64 > %s/want",
           (64u << 20) + (9u << 20) + 77u, dir, dir, e2e_dir);
  cr_assert_eq(system(cmd), 0);
  char *pkg = pack("big", manifest, "sha256sum < blob | cut -c1-64\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert_str_eq(job_state(id, NULL), "queued");
  /* the queueing server dies: only the database's copy can reach the device */
  e2e_stop(&e2e_server_pid, SIGKILL);
  int before = connected_in(log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(wait_count(log_b, "msg=\"device connected\"", before + 1, 15000));
  cr_assert(wait_state(id, "done", 90000), "the job ran: %s", job_state(id, NULL));
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(log_b, needle), 1, "B sent the job A queued");
  cr_expect_eq(count_in(log_b, "queued package not kept"), 0);
  cr_expect_eq(count_in(e2e_server_log, "queued package not kept"), 0);
  o = RUN(SERVER, "job", id, "--state", state_b);
  char want[80] = "", path[500];
  snprintf(path, sizeof(path), "%s/want", e2e_dir);
  FILE *f = fopen(path, "r");
  cr_assert(f && fgets(want, sizeof(want), f));
  fclose(f);
  want[64] = 0;
  cr_expect(strstr(o->out, want), "the device got the package's bytes: %s", o->out);
  free(o);
  free(pkg);
}
