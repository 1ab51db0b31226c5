/* End to end, the real daemon and real agents on loopback: jobs that wait
 * for offline devices (the queue), device labels and --where, the choice
 * among devices, --explain, and waiting for jobs (dispatch --wait/--detach,
 * job ID --wait). */
#include "e2e.h"

#include <dirent.h>

TestSuite(queue, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static const char hello_manifest[] =
    "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

/* The ms of the day of a log line's ts=YYYY-MM-DDTHH:MM:SS.mmmZ; 0 without. */
static double log_ts_ms(const char *line) {
  const char *t = strstr(line, "ts=");
  int h, m, sec, ms;
  if (!t || sscanf(t + 3, "%*10sT%d:%d:%d.%dZ", &h, &m, &sec, &ms) != 4)
    return 0;
  return ((h * 60.0 + m) * 60.0 + sec) * 1000.0 + ms;
}

/* How many entries STATE/queue holds. */
static int queued_files(void) {
  char path[400];
  snprintf(path, sizeof(path), "%s/queue", e2e_state);
  DIR *d = opendir(path);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

Test(queue, a_job_dispatched_while_the_only_device_is_offline_runs_exactly_once_when_it_starts) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo \"hi $1\"\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state, "--", "there");
  char id[33];
  job_id_of(o, id);
  cr_assert(strstr(o->err, "queued"), "a note on stderr: %s", o->err);
  free(o);
  cr_assert_str_eq(job_state(id, NULL), "queued");
  cr_assert_eq(queued_files(), 1, "its package waits in STATE/queue");
  msleep(1500); /* a tick or more with nobody online: still waiting */
  cr_assert_str_eq(job_state(id, NULL), "queued");

  start_agent(a);
  cr_assert(wait_state(id, "done", 20000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(job, "device")), a->id);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                   "hi there\n");
  json_decref(job);
  cr_assert_eq(queued_files(), 0, "the copy is gone once sent");

  /* exactly once: one send, one start, also across a reconnect */
  char sent[80], started[80];
  snprintf(sent, sizeof(sent), "msg=\"job sent\" job=%s ", id);
  snprintf(started, sizeof(started), "msg=\"job started\" job=%s", id);
  e2e_stop(&a->pid, SIGTERM);
  start_agent(a);
  msleep(2500);
  cr_assert_eq(count_in(e2e_server_log, sent), 1);
  cr_assert_eq(count_in(a->log, started), 1);
  cr_assert_str_eq(job_state(id, NULL), "done");
  free(pkg);
}

Test(queue, a_device_that_connects_gets_its_queued_jobs_in_order_within_max_jobs) {
  struct e2e_agent *a = pair_agent(0, "small", "{\"max_jobs\": 1}");
  char *pkg = pack("slowish", hello_manifest, "sleep 1; echo \"job $1\"\n");
  char ids[3][33];
  for (int i = 0; i < 3; i++) {
    char arg[8];
    snprintf(arg, sizeof(arg), "%d", i);
    struct out *o =
        RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state, "--", arg);
    job_id_of(o, ids[i]);
    free(o);
    msleep(1100); /* distinct created seconds: a strict order */
  }
  start_agent(a);
  for (int i = 0; i < 3; i++) {
    /* an agent at its max_jobs refuses more (spawn_failed): done means the
     * server never sent it two at once */
    cr_assert(wait_state(ids[i], "done", 30000), "job %d: %s", i, job_state(ids[i], NULL));
    json_t *job;
    job_state(ids[i], &job);
    char want[16];
    snprintf(want, sizeof(want), "job %d\n", i);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                     want);
    json_decref(job);
  }
  /* sent oldest first, each as soon as the one before it finished (the
   * result's record makes room: not the once-a-second look at the queue) */
  FILE *f = fopen(e2e_server_log, "r");
  char line[1024];
  int next = 0;
  double finished[3] = {0}, sent[3] = {0};
  while (fgets(line, sizeof(line), f)) {
    for (int i = 0; i < 3; i++)
      if (strstr(line, ids[i]) && strstr(line, " msg=\"job finished\" "))
        finished[i] = log_ts_ms(line);
    if (next < 3 && strstr(line, ids[next]) && strstr(line, " msg=\"job sent\" "))
      sent[next++] = log_ts_ms(line);
  }
  fclose(f);
  cr_assert_eq(next, 3, "the three were sent in the order they were dispatched");
  for (int i = 1; i < 3; i++)
    cr_assert(finished[i - 1] > 0 && sent[i] - finished[i - 1] < 500,
              "job %d sent %.0f ms after job %d finished", i, sent[i] - finished[i - 1], i - 1);
  free(pkg);
}

Test(queue, a_queued_job_expires_with_queue_expired) {
  pair_agent(0, "laptop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--queue-ttl", "2s", pkg, "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert(wait_state(id, "expired", 8000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(job, "error")), "queue_expired");
  cr_assert(json_is_null(json_object_get(job, "result")), "it never ran");
  json_decref(job);
  cr_assert_eq(queued_files(), 0);

  /* --wait: the id on stderr at once, then the one-line error and exit 1 */
  o = RUN(SERVER, "dispatch", "--user", "alice", "--queue-ttl", "1s", pkg, "--wait", "--state",
          e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert(strstr(o->err, "queued"), "%s", o->err);
  cr_assert(strstr(o->err, "cordon-server: queue_expired: "), "%s", o->err);
  cr_assert_str_eq(o->out, "", "no result, nothing on stdout");
  free(o);
  /* --no-queue refuses instead; --no-queue with --queue-ttl is bad usage */
  o = RUN(SERVER, "dispatch", "--user", "alice", "--no-queue", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "no_eligible_device") && strstr(o->err, "offline"), "%s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--no-queue", "--queue-ttl", "5m", pkg, "--state",
          e2e_state);
  cr_assert_eq(o->status, 2);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--queue-ttl", "1h30", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 2, "1h30 is not a duration");
  cr_assert(strstr(o->err, "--queue-ttl"), "%s", o->err);
  free(o);
  free(pkg);
}

Test(queue, a_queued_job_can_be_cancelled_and_never_runs) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, pkg, "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  cr_assert_str_eq(job_state(id, NULL), "queued");
  o = RUN(SERVER, "cancel", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  cr_assert_str_eq(job_state(id, NULL), "cancelled");
  cr_assert_eq(queued_files(), 0);
  /* job --wait on a job that is over returns at once, with the job's status */
  o = RUN(SERVER, "job", id, "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  cr_assert(strstr(o->out, "cancelled"), "%s", o->out);
  free(o);
  start_agent(a);
  msleep(2500);
  char any[80];
  snprintf(any, sizeof(any), "job %s", id);
  cr_assert_eq(count_in(a->log, any), 0, "the device never heard of it");
  cr_assert_str_eq(job_state(id, NULL), "cancelled");
  free(pkg);
}

Test(queue, a_queued_job_survives_the_server_dying) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo \"after $1\"\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state, "--", "restart");
  char id[33];
  job_id_of(o, id);
  free(o);
  e2e_stop(&e2e_server_pid, SIGKILL); /* committed before the reply: nothing to lose */
  start_server();
  cr_assert_str_eq(job_state(id, NULL), "queued");
  cr_assert_eq(queued_files(), 1, "the daemon's start kept the package of a queued job");
  start_agent(a);
  cr_assert(wait_state(id, "done", 20000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                   "after restart\n");
  json_decref(job);
  free(pkg);
}

Test(queue, dispatch_wait_names_the_job_at_once_and_waits_for_the_offline_device) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  char *pkg = pack("hello", hello_manifest, "echo \"hi $1\"\n");
  char outp[400], errp[400];
  snprintf(outp, sizeof(outp), "%s/wait.out", e2e_dir);
  snprintf(errp, sizeof(errp), "%s/wait.err", e2e_dir);
  pid_t pid = fork();
  if (pid == 0) {
    FILE *fo = fopen(outp, "w"), *fe = fopen(errp, "w");
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    execl(SERVER, SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", e2e_state, "--",
          "later", (char *)NULL);
    _exit(127);
  }
  cr_assert(wait_in(errp, "queued", 5000), "the id is printed before the job runs");
  FILE *f = fopen(errp, "r");
  char line[512] = "";
  cr_assert(fgets(line, sizeof(line), f));
  fclose(f);
  char *p = strstr(line, "job ");
  cr_assert(p, "%s", line);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", p + 4);
  cr_assert_str_eq(job_state(id, NULL), "queued", "the id on stderr is the job's: %s", line);
  start_agent(a);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  f = fopen(outp, "r");
  json_t *r = json_loadf(f, 0, NULL);
  fclose(f);
  cr_assert(r, "stdout is the result JSON");
  cr_assert_str_eq(json_string_value(json_object_get(r, "job_id")), id);
  cr_assert_str_eq(json_string_value(json_object_get(r, "stdout")), "hi later\n");
  json_decref(r);
  free(pkg);
}

Test(queue, detach_prints_the_id_and_job_wait_waits_for_it) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("sleepy", hello_manifest, "sleep 2; echo woke\n");
  char id[33];
  dispatch_detached(pkg, id);
  struct out *o = RUN(SERVER, "job", id, "--wait", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert(j, "%s", o->out);
  cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "done",
                   "it returned once the job was over");
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "result"), "stdout")),
                   "woke\n");
  json_decref(j);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--detach", "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 2, "--detach and --wait exclude each other");
  free(o);
  /* no daemon: a finished job is printed, an unfinished one cannot be waited for */
  e2e_stop(&e2e_server_pid, SIGTERM);
  o = RUN(SERVER, "job", id, "--wait", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  free(pkg);
}

/* The line of text that holds needle, into out (512 bytes). */
static bool line_of(const char *text, const char *needle, char out[512]) {
  const char *p = strstr(text, needle);
  if (!p)
    return false;
  while (p > text && p[-1] != '\n')
    p--;
  const char *e = strchr(p, '\n');
  size_t n = e ? (size_t)(e - p) : strlen(p);
  snprintf(out, 512, "%.*s", (int)(n < 511 ? n : 511), p);
  return true;
}

/* Three devices of alice, labelled. */
static void three_labelled(struct e2e_agent **a, struct e2e_agent **b, struct e2e_agent **c) {
  *a = pair_agent(0, "gpu-box", NULL);
  *b = pair_agent(1, "desk-one", NULL);
  *c = pair_agent(2, "desk-two", NULL);
  struct out *o =
      RUN(SERVER, "device", "label", (*a)->id, "gpu=yes", "zone=eu", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert_str_eq(o->out, "gpu=yes\nzone=eu\n", "the labels after, one a line");
  free(o);
  o = RUN(SERVER, "device", "label", (*b)->id, "zone=eu", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "device", "label", (*c)->id, "zone=eu", "gpu=no", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "device", "label", (*c)->id, "--remove", "gpu", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert_str_eq(o->out, "zone=eu\n");
  free(o);
  start_agent(*a);
  start_agent(*b);
  start_agent(*c);
}

Test(queue, where_picks_the_labelled_device_and_load_spreads_over_equal_ones) {
  struct e2e_agent *a, *b, *c;
  three_labelled(&a, &b, &c);
  /* a bad label: one clear line, exit 2 */
  struct out *o = RUN(SERVER, "device", "label", a->id, "GPU=yes", "--state", e2e_state);
  cr_assert_eq(o->status, 2);
  cr_assert(strstr(o->err, "cordon-server: usage: label 'GPU=yes': a label is KEY=VALUE"), "%s",
            o->err);
  cr_assert_eq(strchr(o->err, '\n') - o->err + 1, (long)strlen(o->err), "one line: %s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "zone", "x.cpkg", "--state", e2e_state);
  cr_assert_eq(o->status, 2);
  cr_assert(strstr(o->err, "--where label 'zone'"), "%s", o->err);
  free(o);

  char *pkg = pack("long", hello_manifest, "sleep 4; echo done\n");
  o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "gpu=yes", pkg, "--state", e2e_state);
  char j1[33], j2[33], j3[33], dev[33];
  job_id_of(o, j1);
  free(o);
  job_device(j1, dev);
  cr_assert_str_eq(dev, a->id, "the only device with gpu=yes");
  /* a runs one job now: the next two go to b and c, one each */
  o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "zone=eu", pkg, "--state", e2e_state);
  job_id_of(o, j2);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "zone=eu", pkg, "--state", e2e_state);
  job_id_of(o, j3);
  free(o);
  char d2[33], d3[33];
  job_device(j2, d2);
  job_device(j3, d3);
  cr_assert_str_neq(d2, a->id, "the busiest device is not chosen");
  cr_assert_str_neq(d3, a->id);
  cr_assert_str_neq(d2, d3, "two equal devices share the load");
  cr_assert((strcmp(d2, b->id) == 0 || strcmp(d2, c->id) == 0));
  /* nothing has gpu=no: refused with the reason per device, not queued */
  o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "gpu=no", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "no_eligible_device"), "%s", o->err);
  cr_assert(strstr(o->err, "label gpu=no wanted, it has gpu=yes"), "%s", o->err);
  cr_assert(strstr(o->err, "label gpu=no wanted, it has none"), "%s", o->err);
  free(o);
  for (int i = 0; i < 3; i++) {
    const char *id = i == 0 ? j1 : i == 1 ? j2 : j3;
    cr_assert(wait_state(id, "done", 30000), "job %s: %s", id, job_state(id, NULL));
  }
  free(pkg);
}

Test(queue, explain_lists_every_candidate_and_why_and_sends_nothing) {
  struct e2e_agent *a, *b, *c;
  three_labelled(&a, &b, &c);
  e2e_stop(&c->pid, SIGKILL);
  for (int i = 0; i < 100 && device_online(c->id); i++)
    msleep(50);
  char *pkg = pack("hello", hello_manifest, "echo hi\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "zone=eu", "--explain", pkg,
                      "--state", e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  char la[512], lb[512], lc[512];
  cr_assert(line_of(o->out, a->id, la) && line_of(o->out, b->id, lb) && line_of(o->out, c->id, lc),
            "every candidate is listed: %s", o->out);
  size_t n = strlen(lc);
  cr_assert(n > 7 && strcmp(lc + n - 7, "offline") == 0, "its verdict says why: %s", lc);
  cr_assert(strstr(la, "chosen") || strstr(lb, "chosen"), "%s", o->out);
  cr_assert(strstr(o->out, "chosen"), "%s", o->out);
  cr_assert(strstr(o->out, "decision: send to "), "%s", o->out);
  cr_assert(strstr(o->out, "gpu=yes"), "the labels are shown: %s", o->out);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--where", "gpu=yes", "--explain", pkg, "--state",
          e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  char want[80];
  snprintf(want, sizeof(want), "decision: send to %s", a->id);
  cr_assert(strstr(o->out, want), "%s", o->out);
  cr_assert(strstr(o->out, "label gpu=yes wanted, it has none"), "%s", o->out);
  free(o);
  /* only the offline one fits: it would queue */
  o = RUN(SERVER, "dispatch", "--user", "alice", "--device", c->id, "--explain", pkg, "--state",
          e2e_state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  snprintf(want, sizeof(want), "decision: queue until %s comes online", c->id);
  cr_assert(strstr(o->out, want), "%s", o->out);
  free(o);
  o = RUN(SERVER, "jobs", "--json", "--state", e2e_state);
  cr_assert_str_eq(o->out, "[]\n", "explain sent and stored nothing: %s", o->out);
  free(o);
  cr_assert_eq(count_in(a->log, "job "), 0);
  cr_assert_eq(count_in(b->log, "job "), 0);
  free(pkg);
}
