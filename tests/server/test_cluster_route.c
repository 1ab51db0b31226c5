/* server/cluster.c: two real `cordon-server run` daemons on one real
 * PostgreSQL database (B made with `init --keys-from A`), real agents on
 * loopback. A dispatch through A reaches a device connected to B (queued
 * by A, its package from the database, sent by B when A's NOTIFY comes); restarting A does not
 * mark B's device offline; a job queued for an offline device is sent by
 * the server it connects to; a newer session on A replaces B's (B's log
 * says so); a kill -9 of the server running a job: the device reconnects
 * to the other, which records the result once, and `job --json` is the
 * same through either server. Events are relayed: `follow` through A of
 * a job running on B's device streams its output live (every byte once,
 * in order, across the split of a large chunk) and ends when B records
 * the result; `watch` on each server sees the other's job states and
 * device comings and goings, each once; payloads that are not the relay's
 * (sent with NOTIFY by the test: without the cluster's MAC, or with it and
 * fields out of their limits) are dropped with a warning and the servers
 * go on. PostgreSQL only (the pg pass): with SQLite there is one
 * server. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "e2e.h"
#include "e2e_cluster.h"
#include "peer.h"

#include "admin_conn.h" /* after e2e.h */
#include "server/keys.h"
#include "server/relay.h"

static const char manifest[] =
    "{\"name\":\"r\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":60}";

/* Both states on one new database; nothing runs yet. Skipped on SQLite. */
static void cluster_setup(void) {
  if (!pg_test_base())
    cr_skip_test("a cluster needs PostgreSQL (CORDON_TEST_PG)");
  cr_assert(sodium_init() >= 0);
  e2e_dir_new("cordon-route");
  cl_make();
}

static void teardown(void) {
  e2e_stop(&cl_pid_b, SIGKILL);
  if (e2e_dir[0])
    e2e_teardown();
}

TestSuite(route, .fini = teardown, .timeout = 180);

static int connected_in(const char *log) {
  return count_in(log, "msg=\"device connected\"");
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
  int before = connected_in(cl_log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(cl_wait_count(cl_log_b, "msg=\"device connected\"", before + 1, 15000),
            "the agent reached B");
}

/* Both servers up, the device paired through A and connected to B. */
static struct e2e_agent *a_device_on_b(void) {
  cluster_setup();
  cl_start_a();
  cl_start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  agent_on_b(a);
  cl_start_a();
  return a;
}

Test(route, a_dispatch_through_one_server_reaches_a_device_on_the_other) {
  /* A starts again (a_device_on_b): B's device stays online (in the column, and to A) */
  struct e2e_agent *a = a_device_on_b();
  cr_expect(online_column(a->id), "A's start did not mark B's device offline");
  cr_expect(device_online(a->id), "A sees the device online through B's lease");

  char *pkg = pack("r", manifest, "echo routed\n");
  char id[33];
  dispatch_detached(pkg, id);
  cr_assert(wait_state(id, "done", 15000), "the job ran on the device connected to B: %s",
            job_state(id, NULL));
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(cl_log_b, needle), 1, "B sent it");
  cr_expect_eq(count_in(e2e_server_log, needle), 0, "A did not");
  cr_expect_eq(connected_in(e2e_server_log), 0, "the device never came to A");
  cr_expect_eq(count_in(cl_log_b, "cannot LISTEN"), 0, "B listens for queued jobs");
  char *ja = job_json(e2e_state, id), *jb = job_json(cl_state_b, id);
  cr_expect_str_eq(ja, jb, "job --json is the same through either server");
  free(ja);
  free(jb);
  /* --no-queue: the device on B can run it now, so it goes (through the queue) */
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--no-queue", "--detach",
                      "--state", e2e_state);
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
  int before = connected_in(cl_log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(cl_wait_count(cl_log_b, "msg=\"device connected\"", before + 1, 15000));
  cr_assert(wait_state(id, "done", 15000), "the queued job ran: %s", job_state(id, NULL));
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(cl_log_b, needle), 1, "B sent the job A queued");
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
  cr_assert(wait_in(cl_log_b, "msg=\"session replaced\"", 8000), "B noticed A took the device");
  cr_expect(wait_in(cl_log_b, "by=\"another server\"", 100));
  cr_expect(wait_in(cl_log_b, "reason=goaway.replaced", 3000), "B's session ended as replaced");
  cr_expect(wait_in(a->log, "replaced", 3000), "the agent was told");
  cr_expect(device_online(a->id));
  peer_release(&p);
}

Test(route, a_server_killed_during_a_job_loses_nothing) {
  cluster_setup();
  cl_start_a();
  cl_start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a); /* on A */
  char *pkg = pack("r", manifest, "sleep 3; echo survived\n");
  char id[33];
  dispatch_detached(pkg, id);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  e2e_stop(&e2e_server_pid, SIGKILL);
  cr_assert(cl_wait_count(cl_log_b, "msg=\"device connected\"", 1, 15000), "the device moved to B");
  /* through B: A is dead */
  char *jb = NULL;
  for (int t = 0; t < 20000; t += 100) {
    free(jb);
    jb = job_json(cl_state_b, id);
    if (strstr(jb, "\"state\":\"done\"") || strstr(jb, "\"state\": \"done\""))
      break;
    msleep(100);
  }
  cr_assert(strstr(jb, "done"), "B recorded the result: %s", jb);
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job finished\" job=%s", id);
  /* the line follows the commit that made the state done */
  for (int t = 0; t < 500 && count_in(cl_log_b, needle) + count_in(e2e_server_log, needle) == 0;
       t++)
    msleep(10);
  cr_expect_eq(count_in(cl_log_b, needle) + count_in(e2e_server_log, needle), 1,
               "recorded exactly once");
  cl_start_a();
  char *ja = job_json(e2e_state, id);
  free(jb);
  jb = job_json(cl_state_b, id);
  cr_expect_str_eq(ja, jb, "job --json is the same through either server");
  cr_expect(strstr(ja, "survived"), "with its output: %s", ja);
  free(ja);
  free(jb);
  free(pkg);
}

Test(route, a_revoke_or_a_cancel_through_one_server_reaches_the_device_on_the_other) {
  struct e2e_agent *a = a_device_on_b();
  char *pkg = pack("r", manifest, "sleep 30; echo late\n");
  char id[33];
  dispatch_detached(pkg, id);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  struct out *o = RUN(SERVER, "cancel", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "cancel through A: %s", o->err);
  free(o);
  /* B tells its agent: the job stops and its result comes long before 30 s */
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job finished\" job=%s", id);
  cr_assert(wait_in(cl_log_b, needle, 10000), "the agent on B stopped the job cancelled through A");
  cr_expect_str_eq(job_state(id, NULL), "cancelled");

  o = RUN(SERVER, "revoke", "box", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "revoke through A: %s", o->err);
  free(o);
  cr_assert(
      wait_in(cl_log_b, "msg=\"device revoked through another server: session closed\"", 8000),
      "B closed the revoked device's session");
  cr_expect(wait_in(cl_log_b, "reason=goaway.revoked", 3000));
  for (int i = 0; i < 300 && device_online(a->id); i++)
    msleep(20);
  cr_expect(!device_online(a->id), "a revoked device is offline everywhere");
  free(pkg);
}

Test(route, a_dead_servers_devices_go_offline_after_the_lease_and_its_jobs_end_device_lost) {
  cluster_setup();
  cl_start_a();
  cl_start_b();
  struct e2e_agent *a = pair_agent(0, "box", NULL);
  start_agent(a); /* on A */
  char *pkg = pack("s",
                   "{\"name\":\"s\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":2}",
                   "sleep 60\n");
  char id[33];
  dispatch_detached(pkg, id);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  /* the server and its device die together: nobody closes the session
   * (the agent frozen first, so that A never sees its connection end) */
  kill(a->pid, SIGSTOP);
  e2e_stop(&e2e_server_pid, SIGKILL);
  e2e_stop(&a->pid, SIGKILL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *j = job_json(cl_state_b, id);
  cr_expect(strstr(j, "\"device_online\": true"),
            "through B the device is online while A's lease lasts: %s", j);
  free(j);
  snprintf(e2e_state, sizeof(e2e_state), "%.290s", cl_state_b); /* the helpers ask B now */
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
  cr_expect_eq(count_in(cl_log_b, needle), 1, "B ended it");
  free(pkg);
}

/* ---- the relay of events ---- */

/* An admin connection to the server of state. */
static struct conn *conn_at(const char *state) {
  char keep[sizeof(e2e_state)], want[sizeof(e2e_state)];
  snprintf(keep, sizeof(keep), "%s", e2e_state);
  snprintf(want, sizeof(want), "%s", state);
  snprintf(e2e_state, sizeof(e2e_state), "%s", want);
  struct conn *c = conn_open();
  snprintf(e2e_state, sizeof(e2e_state), "%s", keep);
  return c;
}

#define FAKE_INSTANCE "00112233445566778899aabbccddeeff" /* another server's, as it were */

/* The cluster's relay key, from A's Noise static key (server/relay.h). */
static void cluster_key(uint8_t out[RELAY_KEY_LEN]) {
  char path[400];
  snprintf(path, sizeof(path), "%s/" SERVER_NOISE_KEY_FILE, e2e_state);
  uint8_t *secret = NULL;
  cr_assert_eq(keys_read_file(path, KEYFILE_NOISE_SECRET, &secret, NULL), 0);
  cr_assert_eq(relay_key_derive(secret, KEYFILE_KEY_SIZE, out), 0);
  sodium_free(secret);
}

/* body, a space and its MAC under key (NULL: the cluster's), on the heap */
static char *with_mac(const uint8_t *key, const char *body) {
  uint8_t k[RELAY_KEY_LEN], mac[RELAY_MAC_LEN];
  if (!key) {
    cluster_key(k);
    key = k;
  }
  crypto_generichash(mac, sizeof(mac), (const unsigned char *)body, strlen(body), key,
                     RELAY_KEY_LEN);
  char hex[2 * RELAY_MAC_LEN + 1], *out = NULL;
  sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
  cr_assert(asprintf(&out, "%s %s", body, hex) > 0);
  return out;
}

/* The next line within ms, or NULL (a read that would wait longer). */
static json_t *line_within(struct conn *c, int ms) {
  if (!memchr(c->buf, '\n', c->len)) {
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
      return NULL;
  }
  return read_line(c);
}

static char *big_line(size_t n) {
  char *s = malloc(n + 2);
  cr_assert(s);
  memset(s, 'x', n);
  s[n] = '\n';
  s[n + 1] = '\0';
  return s;
}

Test(route, follow_through_one_server_streams_a_job_running_on_the_others_device) {
  cl_a_debug = true;
  struct e2e_agent *a = a_device_on_b();
  (void)a;
  /* 20,000 bytes in one line: more than one NOTIFY's payload holds */
  char *pkg = pack("r", manifest,
                   "sleep 1; echo first; sleep 1; head -c 20000 /dev/zero | tr '\\0' x; echo;"
                   " echo oops >&2; sleep 1; echo last\n");
  char id[33];
  dispatch_detached(pkg, id);
  struct conn *c = conn_at(e2e_state); /* A */
  char req[300];
  snprintf(req, sizeof(req), "{\"op\":\"follow\",\"job\":\"%s\"}", id);
  assert_ok(ask(c, req));
  char *want_out = NULL, *x = big_line(20000);
  cr_assert(asprintf(&want_out, "first\n%slast\n", x) > 0);
  free(x);
  size_t cap = strlen(want_out) + 64, got[2] = {0, 0};
  char *bytes[2] = {calloc(1, cap), calloc(1, cap)};
  bool live_while_running = false, dup_sent = false;
  json_t *end = NULL, *line;
  while (!end && (line = line_within(c, 20000))) {
    const char *ev = str(line, "event");
    if (ev && strcmp(ev, "output") == 0) {
      int st = strcmp(str(line, "stream"), "stderr") == 0;
      json_int_t off = json_integer_value(json_object_get(line, "offset"));
      cr_assert_eq((size_t)off, got[st], "stream %d: offset %lld after %zu bytes (lost or twice)",
                   st, (long long)off, got[st]);
      const char *b64 = str(line, "data");
      size_t n = 0;
      cr_assert_eq(sodium_base642bin((unsigned char *)bytes[st] + got[st], cap - 1 - got[st], b64,
                                     strlen(b64), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL),
                   0);
      got[st] += n;
      if (!st && got[0] == 6 && !dup_sent) {
        /* the same first bytes again (a payload as another server would
         * send it): the follower does not get them twice */
        char body[200], *dup = NULL, *sql = NULL;
        snprintf(body, sizeof(body), "cordon1 " FAKE_INSTANCE " 1 output %s - - 1 0 Zmlyc3QK", id);
        dup = with_mac(NULL, body);
        cr_assert(asprintf(&sql, "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", '%s'", dup) > 0);
        cr_assert_eq(pg_test_exec(sql), 0);
        free(sql);
        free(dup);
        dup_sent = true;
      }
      if (!live_while_running)
        live_while_running = strcmp(job_state(id, NULL), "running") == 0;
      json_decref(line);
    } else {
      end = line;
    }
  }
  cr_assert(end, "the follow through A ended");
  cr_expect_str_eq(str(end, "event"), "end");
  json_t *job = json_object_get(end, "job");
  cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "done", "%s",
                   json_dumps(end, 0));
  cr_expect(live_while_running, "output came while the job ran on B");
  cr_expect(dup_sent, "the first line came alone");
  cr_expect_str_eq(bytes[0], want_out, "stdout, every byte once and in order");
  cr_expect_str_eq(bytes[1], "oops\n", "stderr");
  char needle[120];
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(e2e_server_log, needle), 0, "the job ran through B, not A");
  cr_expect_eq(count_in(e2e_server_log, "relayed event dropped"), 0);
  cr_expect_eq(count_in(cl_log_b, "relayed event dropped"), 0);
  json_decref(end);
  conn_close(c);
  free(bytes[0]);
  free(bytes[1]);
  free(want_out);

  /* `dispatch --wait` through A: answered at B's word too */
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state);
  cr_expect_eq(o->status, 0, "dispatch --wait through A: %s", o->err);
  cr_expect(strstr(o->out, "last"), "%s", o->out);
  free(o);
  /* their ends came with B's word, not at A's next tick: A's tick may
   * come first (between B's commit and its NOTIFY: a few ms of A's 1 s
   * tick), so one of the two is asked for, not both */
  cr_expect(cl_wait_count(e2e_server_log, "msg=\"job end heard from another server\"", 1, 2000),
            "A answered at B's word");
  free(pkg);
}

/* Lines of a watch until one matches event (and job's state when job is
 * given), within ms: that line, or NULL. Each line read is counted in
 * seen[] by its "event"/"state" text. */
struct seen {
  char kinds[64][48];
  int n;
};

static json_t *watch_until(struct conn *c, struct seen *seen, const char *event, const char *job,
                           const char *state, int ms) {
  for (int t = 0; t < ms; t += 50) {
    json_t *line = line_within(c, 50);
    if (!line)
      continue;
    const char *ev = str(line, "event"), *st = str(line, "state");
    if (seen && seen->n < 64)
      snprintf(seen->kinds[seen->n++], 48, "%s/%s/%.8s", ev, st ? st : "-",
               str(line, "job") ? str(line, "job") : "-");
    if (ev && strcmp(ev, event) == 0 &&
        (!job || (str(line, "job") && strcmp(str(line, "job"), job) == 0)) &&
        (!state || (st && strcmp(st, state) == 0)))
      return line;
    json_decref(line);
  }
  return NULL;
}

static int seen_count(const struct seen *s, const char *what) {
  int n = 0;
  for (int i = 0; i < s->n; i++)
    n += strcmp(s->kinds[i], what) == 0;
  return n;
}

Test(route, watch_on_either_server_sees_the_others_jobs_and_devices) {
  struct e2e_agent *a = a_device_on_b();
  struct conn *wa = conn_at(e2e_state), *wb = conn_at(cl_state_b);
  assert_ok(ask(wa, "{\"op\":\"watch\"}"));
  assert_ok(ask(wb, "{\"op\":\"watch\"}"));
  /* the device leaves B and comes back to it: A's watch hears both */
  e2e_stop(&a->pid, SIGKILL);
  json_t *l = watch_until(wa, NULL, "device_offline", NULL, NULL, 8000);
  cr_assert(l, "A's watch saw the device go from B");
  cr_expect_str_eq(str(l, "device"), a->id);
  cr_expect_str_eq(str(l, "user"), "alice");
  json_decref(l);
  int before = connected_in(cl_log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(cl_wait_count(cl_log_b, "msg=\"device connected\"", before + 1, 15000), "back on B");
  l = watch_until(wa, NULL, "device_online", NULL, NULL, 8000);
  cr_assert(l, "A's watch saw the device come to B");
  cr_expect_str_eq(str(l, "device"), a->id);
  json_decref(l);
  cr_expect_eq(connected_in(e2e_server_log), 0, "the device never came to A");

  /* a job through A, run by B: each watch sees every state once */
  char *pkg = pack("r", manifest, "echo hi\n");
  char id[33];
  dispatch_detached(pkg, id);
  struct seen sa = {0}, sb = {0};
  l = watch_until(wa, &sa, "job_state", id, "done", 15000);
  cr_assert(l, "A's watch saw B finish the job A queued");
  cr_expect_str_eq(str(l, "device"), a->id);
  cr_expect_str_eq(str(l, "user"), "alice");
  cr_expect(json_is_null(json_object_get(l, "code")));
  json_decref(l);
  l = watch_until(wb, &sb, "job_state", id, "done", 15000);
  cr_assert(l, "B's watch too");
  json_decref(l);
  msleep(300); /* a second copy would come now */
  json_t *more;
  while ((more = watch_until(wa, &sa, "none", NULL, NULL, 50)))
    json_decref(more);
  while ((more = watch_until(wb, &sb, "none", NULL, NULL, 50)))
    json_decref(more);
  char key[64];
  const char *states[] = {"queued", "sent", "running", "done"};
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof(key), "job_state/%s/%.8s", states[i], id);
    cr_expect_eq(seen_count(&sa, key), 1, "A saw %s once", key);
    cr_expect_eq(seen_count(&sb, key), 1, "B saw %s once (no echo of its own)", key);
  }
  conn_close(wa);
  conn_close(wb);
  free(pkg);
}

Test(route, payloads_that_are_not_the_relays_are_dropped_with_a_warning) {
  struct e2e_agent *a = a_device_on_b();
  (void)a;
  /* the test's own NOTIFYs: garbage; a well-formed payload with the MAC
   * of another key (what a role that may connect to the database but
   * holds no key of the cluster can send); with the cluster's MAC, a
   * future version, a state and data out of their limits; the largest
   * payload PostgreSQL takes, and an empty one */
  char *fill = malloc(8000);
  memset(fill, 'z', 7900);
  fill[7900] = '\0';
  uint8_t other[RELAY_KEY_LEN] = {0};
  char body[300], *forged, *future, *bogus, *data;
  snprintf(body, sizeof(body), "cordon1 " FAKE_INSTANCE " 1 online %s alice", a->id);
  forged = with_mac(other, body);
  snprintf(body, sizeof(body), "cordon9 " FAKE_INSTANCE " 1 online %s alice", a->id);
  future = with_mac(NULL, body);
  snprintf(body, sizeof(body), "cordon1 " FAKE_INSTANCE " 1 state %s bogus - - -", a->id);
  bogus = with_mac(NULL, body);
  snprintf(body, sizeof(body), "cordon1 " FAKE_INSTANCE " 1 output %s - - 1 0 e!==", a->id);
  data = with_mac(NULL, body);
  char *sql = NULL;
  cr_assert(asprintf(&sql,
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", 'garbage';"
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", '%s';"
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", '%s';"
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", '%s';"
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", '%s';"
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", 'cordon1 %s';"
                     "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", '';",
                     forged, future, bogus, data, fill) > 0);
  cr_assert_eq(pg_test_exec(sql), 0, "the test's NOTIFYs");
  free(sql);
  free(fill);
  free(forged);
  free(future);
  free(bogus);
  free(data);
  cr_assert(wait_in(e2e_server_log,
                    "msg=\"relayed event dropped: not a payload this server reads\"", 5000),
            "A warned");
  cr_assert(
      wait_in(cl_log_b, "msg=\"relayed event dropped: not a payload this server reads\"", 5000),
      "B warned");
  cr_expect(wait_in(e2e_server_log, "reason=\"no MAC\"", 2000));
  cr_expect(wait_in(e2e_server_log, "reason=\"bad MAC (not this cluster's)\"", 2000));
  cr_expect(wait_in(e2e_server_log, "reason=\"unknown version\"", 2000));
  cr_expect(wait_in(e2e_server_log, "reason=\"bad state\"", 2000));
  cr_expect(wait_in(e2e_server_log, "reason=\"bad data\"", 2000));
  /* many: a few lines, not one each */
  sql = NULL;
  char *p = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&p, &n);
  for (int i = 0; i < 200; i++)
    fprintf(f, "NOTIFY " SERVER_DB_EVENTS_CHANNEL ", 'junk %d';", i);
  fclose(f);
  cr_assert_eq(pg_test_exec(p), 0);
  free(p);
  msleep(500);
  /* both still work: a job through A runs on B and its end is relayed */
  struct conn *w = conn_at(e2e_state);
  assert_ok(ask(w, "{\"op\":\"watch\"}"));
  char *pkg = pack("r", manifest, "echo still\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state);
  cr_expect_eq(o->status, 0, "dispatch --wait through A: %s", o->err);
  cr_expect(strstr(o->out, "still"), "%s", o->out);
  free(o);
  json_t *l = watch_until(w, NULL, "job_state", NULL, "done", 5000);
  cr_expect(l, "A's watch still hears B");
  json_decref(l);
  conn_close(w);
  int lines = count_in(e2e_server_log, "msg=\"relayed event dropped");
  cr_expect(lines >= 1 && lines <= 12, "206 bad payloads, %d lines", lines);
  cr_expect_eq(kill(e2e_server_pid, 0), 0, "A runs");
  cr_expect_eq(kill(cl_pid_b, 0), 0, "B runs");
  free(pkg);
}

Test(route, a_queued_package_above_what_one_row_keeps_reaches_the_device_through_the_other,
     .timeout = 240) {
  cluster_setup();
  cl_start_a();
  cl_start_b();
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
  char id[33];
  dispatch_detached(pkg, id);
  cr_assert_str_eq(job_state(id, NULL), "queued");
  /* the queueing server dies: only the database's copy can reach the device */
  e2e_stop(&e2e_server_pid, SIGKILL);
  int before = connected_in(cl_log_b);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  a->pid = spawn_logged(a->log, argv);
  cr_assert(cl_wait_count(cl_log_b, "msg=\"device connected\"", before + 1, 15000));
  cr_assert(wait_state(id, "done", 90000), "the job ran: %s", job_state(id, NULL));
  char needle[100];
  snprintf(needle, sizeof(needle), "msg=\"job sent\" job=%s", id);
  cr_expect_eq(count_in(cl_log_b, needle), 1, "B sent the job A queued");
  cr_expect_eq(count_in(cl_log_b, "queued package not kept"), 0);
  cr_expect_eq(count_in(e2e_server_log, "queued package not kept"), 0);
  struct out *o = RUN(SERVER, "job", id, "--state", cl_state_b);
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
