/* Group commit in the daemon (server/jobs.c, docs/ARCHITECTURE.md,
 * "Durable writes"), end to end with the real daemon, real agents and the
 * admin socket: a burst of dispatches is committed in fewer commits than
 * jobs and every job ends with exactly one result; a kill -9 in the middle
 * of a burst loses no job the admin socket answered, and runs none twice;
 * a commit that fails (the state's disk full) answers each dispatch of its
 * group with an error and sends none of their jobs. */
#include "e2e.h"

#include "admin_conn.h"
#include "prom.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

TestSuite(group_commit, .init = e2e_setup, .fini = e2e_teardown, .timeout = 240);

#define BURST 16 /* the admin socket's listen backlog */

static int metrics_port;
static int server_starts;
static char server_logs[4][400];

/* (Re)start the daemon on the same port with a metrics listener, each
 * start with a log of its own (server-N.log). */
static void start_server_metrics(void) {
  cr_assert_lt(server_starts, 4);
  char *log = server_logs[server_starts++];
  snprintf(log, sizeof(server_logs[0]), "%s/server-%d.log", e2e_dir, server_starts);
  const char *argv[] = {SERVER,     "run",    "--state",   e2e_state,     "--job-grace", "5",
                        "--listen", e2e_addr, "--metrics", "127.0.0.1:0", NULL};
  e2e_server_pid = spawn_logged(log, argv);
  cr_assert(wait_in(log, "msg=listening listen=127.0.0.1:", 5000), "the server did not start");
  metrics_port = prom_port_from_log(log);
}

static double commits(void) {
  static char body[1 << 17];
  cr_assert_eq(http_get(metrics_port, "/metrics", body, sizeof(body)), 200);
  double v = prom_value(body, "cordon_db_commits_total");
  cr_assert_geq(v, 0, "cordon_db_commits_total is served");
  return v;
}

/* How many times needle is in all the daemon's logs of the test. */
static int count_in_server_logs(const char *needle) {
  int n = 0;
  for (int i = 0; i < server_starts; i++)
    n += count_in(server_logs[i], needle);
  return n;
}

static void setup_agents(int n, struct e2e_agent **out) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  start_server_metrics();
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof(name), "dev%d", i);
    out[i] = pair_agent(i, name, "{\"max_jobs\": 64}");
    start_agent(out[i]);
  }
}

/* A non-asserting line reader: the next reply, or NULL when the
 * connection ended (closed or reset: the daemon was killed). */
static json_t *reply_or_null(struct conn *c) {
  for (;;) {
    char *nl = memchr(c->buf, '\n', c->len);
    if (nl) {
      size_t n = (size_t)(nl - c->buf);
      json_t *j = json_loadb(c->buf, n, 0, NULL);
      memmove(c->buf, nl + 1, c->len - n - 1);
      c->len -= n + 1;
      return j;
    }
    ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
    if (k <= 0)
      return NULL;
    c->len += (size_t)k;
  }
}

/* Send BURST dispatch lines of pkg on BURST connections at once (args: the
 * index, then two arguments of filler bytes each). */
static void send_burst(struct conn *cs[BURST], const char *pkg, int round, size_t filler) {
  static char line[3 * ADMIN_REQUEST_MAX];
  static char fill[ADMIN_REQUEST_MAX];
  cr_assert_lt(filler, sizeof(fill) - 512);
  memset(fill, 'x', filler);
  fill[filler] = '\0';
  for (int i = 0; i < BURST; i++)
    cs[i] = conn_open();
  for (int i = 0; i < BURST; i++) {
    snprintf(line, sizeof(line),
             "{\"op\":\"dispatch\",\"user\":\"alice\",\"package\":\"%s\",\"no_queue\":true,"
             "\"args\":[\"%d-%d\",\"%s\",\"%s\"]}",
             pkg, round, i, fill, fill);
    send_line(cs[i], line);
  }
}

static const char *const quick_manifest =
    "{\"name\":\"quick\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],\"timeout_s\":20}";

/* Every job of the table: state final, or wait up to ms for it. */
static json_t *jobs_json(void) {
  struct out *o = RUN(SERVER, "jobs", "--json", "--limit", "0", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "jobs: %s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  free(o);
  cr_assert(json_is_array(j));
  return j;
}

static bool is_final(const char *st) {
  return strcmp(st, "done") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "expired") == 0 ||
         strcmp(st, "cancelled") == 0;
}

Test(group_commit, a_burst_of_dispatches_takes_fewer_commits_than_jobs_and_each_job_one_result) {
  struct e2e_agent *agents[2];
  setup_agents(2, agents);
  char *pkg = pack("quick", quick_manifest, "echo \"job $1\"\n");
  char ids[3 * BURST][33];
  int n = 0;
  double dispatch_commits = 0;
  for (int round = 0; round < 3; round++) {
    struct conn *cs[BURST];
    double before = commits();
    send_burst(cs, pkg, round, 16);
    for (int i = 0; i < BURST; i++) {
      json_t *r = reply_or_null(cs[i]);
      cr_assert(r && json_is_true(json_object_get(r, "ok")), "dispatch %d-%d: %s", round, i,
                r ? json_dumps(r, 0) : "no reply");
      snprintf(ids[n++], 33, "%s", str(r, "job_id"));
      json_decref(r);
      conn_close(cs[i]);
    }
    /* the jobs' insert and sent, and meanwhile the running and results of
     * those already out: without group commit 2 commits per dispatch */
    dispatch_commits += commits() - before;
  }
  cr_assert_lt(dispatch_commits, n, "%d dispatches in %.0f commits", n, dispatch_commits);
  cr_log_info("%d dispatches answered over %.0f commits", n, dispatch_commits);
  for (int i = 0; i < n; i++) {
    cr_assert(wait_state(ids[i], "done", 60000), "job %s: %s", ids[i], job_state(ids[i], NULL));
    char finished[120];
    snprintf(finished, sizeof(finished), "msg=\"job finished\" job=%.32s", ids[i]);
    /* the line follows the commit that made the state done */
    for (int t = 0; t < 500 && count_in_server_logs(finished) == 0; t++)
      msleep(10);
    cr_assert_eq(count_in_server_logs(finished), 1, "job %s: one result", ids[i]);
  }
  json_t *jobs = jobs_json();
  cr_assert_eq(json_array_size(jobs), (size_t)n, "no job but the answered ones");
  json_decref(jobs);
  free(pkg);
}

Test(group_commit, a_kill_during_a_burst_loses_no_answered_job_and_runs_none_twice) {
  struct e2e_agent *agents[2];
  setup_agents(2, agents);
  char *pkg = pack("quick", quick_manifest, "sleep 0.5; echo \"job $1\"\n");
  char answered[2 * BURST][33];
  int n_answered = 0;
  for (int round = 0; round < 2; round++) {
    struct conn *cs[BURST];
    send_burst(cs, pkg, round, 16);
    for (int i = 0; i < BURST; i++) {
      if (round == 1 && i == BURST / 2) /* half of the second burst answered: */
        e2e_stop(&e2e_server_pid, SIGKILL);
      json_t *r = reply_or_null(cs[i]);
      if (r && json_is_true(json_object_get(r, "ok")))
        snprintf(answered[n_answered++], 33, "%s", str(r, "job_id"));
      json_decref(r);
      conn_close(cs[i]);
    }
  }
  cr_assert_geq(n_answered, BURST, "the first burst was answered");
  start_server_metrics();
  for (int i = 0; i < 2; i++)
    cr_assert(device_online_within(agents[i]->id, true, 5000), "%s is back", agents[i]->name);
  /* every job the admin socket told of exists and ends with a result (or
   * an explicit failure: device_lost at its deadline) */
  for (int i = 0; i < n_answered; i++) {
    const char *st = "";
    for (int t = 0; t < 600; t++) {
      st = job_state(answered[i], NULL);
      if (is_final(st))
        break;
      msleep(50);
    }
    cr_assert(is_final(st), "answered job %s ends: %s", answered[i], st);
  }
  /* and so does every job of the table, answered or not (one committed
   * just before the kill was never told of, but it is no one's orphan) */
  json_t *jobs = jobs_json();
  size_t i;
  json_t *j;
  json_array_foreach(jobs, i, j) {
    const char *id = str(j, "id");
    const char *st = str(j, "state");
    for (int t = 0; t < 600 && !is_final(st); t++) {
      msleep(50);
      st = job_state(id, NULL);
    }
    cr_assert(is_final(st), "job %s ends: %s", id, st);
    char finished[120];
    snprintf(finished, sizeof(finished), "msg=\"job finished\" job=%.32s", id);
    cr_assert_leq(count_in_server_logs(finished), 1, "job %s: recorded once at most", id);
    if (strcmp(st, "done") == 0)
      cr_assert_eq(count_in_server_logs(finished), 1, "job %s: its result", id);
  }
  json_decref(jobs);
  /* each job ran once: one "job started" on one agent */
  for (int k = 0; k < n_answered; k++) {
    char started[120];
    snprintf(started, sizeof(started), "msg=\"job started\" job=%.32s", answered[k]);
    int runs = count_in(agents[0]->log, started) + count_in(agents[1]->log, started);
    cr_assert_leq(runs, 1, "job %s started %d times", answered[k], runs);
  }
  free(pkg);
}

/* ---- a commit that fails ---- */

static int seen_entries(const struct e2e_agent *a) {
  char path[400];
  snprintf(path, sizeof(path), "%s/seen", a->dir);
  DIR *d = opendir(path);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    n += de->d_name[0] != '.';
  closedir(d);
  return n;
}

Test(group_commit, a_failed_commit_answers_each_dispatch_with_an_error_and_sends_none,
     .fini = e2e_tmpfs_teardown) {
  PG_TEST_SQLITE_ONLY(); /* it fills the state directory's disk, where SQLite writes */
  if (geteuid() != 0)
    PG_TEST_SKIP("needs root for a mount namespace");
  struct e2e_agent *a = pair_agent(0, "laptop", "{\"max_jobs\": 64}");
  e2e_stop(&e2e_server_pid, SIGTERM);
  e2e_state_on_tmpfs(8);
  start_server_metrics();
  start_agent(a);
  char *pkg = pack("quick", quick_manifest, "echo \"job $1\"\n");
  int seen_before = seen_entries(a);
  char fill[400];
  snprintf(fill, sizeof(fill), "%s/fill", e2e_state);
  e2e_fill_state(fill);
  /* jobs of some 7 KB of arguments each: the group needs new blocks */
  char ok_ids[3 * BURST][33];
  int n_ok = 0, n_err = 0;
  for (int round = 0; round < 3; round++) {
    struct conn *cs[BURST];
    send_burst(cs, pkg, round, 3500);
    for (int i = 0; i < BURST; i++) {
      json_t *r = reply_or_null(cs[i]);
      cr_assert(r, "every dispatch is answered");
      if (json_is_true(json_object_get(r, "ok")))
        snprintf(ok_ids[n_ok++], 33, "%s", str(r, "job_id"));
      else {
        cr_assert(strstr(str(r, "message"), "could not be committed") ||
                      strcmp(str(r, "code"), "io_error") == 0,
                  "a storage error, not another refusal: %s", json_dumps(r, 0));
        n_err++;
      }
      json_decref(r);
      conn_close(cs[i]);
    }
  }
  cr_assert_gt(n_err, 0, "the full disk failed some commits (%d ok)", n_ok);
  cr_assert_gt(count_in_server_logs("cannot commit the jobs' changes"), 0);
  cr_assert_eq(unlink(fill), 0);
  msleep(1500); /* whatever is under way ends */
  for (int i = 0; i < n_ok; i++)
    cr_assert(wait_state(ok_ids[i], "done", 30000), "job %s answered ok: %s", ok_ids[i],
              job_state(ok_ids[i], NULL));
  json_t *jobs = jobs_json();
  cr_assert_eq(json_array_size(jobs), (size_t)n_ok,
               "the dispatches answered with an error left no job (%d ok, %d errors)", n_ok, n_err);
  json_decref(jobs);
  cr_assert_eq(seen_entries(a) - seen_before, n_ok,
               "the agent was sent the committed jobs only (%d ok, %d errors)", n_ok, n_err);
  free(pkg);
  e2e_stop(&e2e_server_pid, SIGTERM);
}
