/* Faults at the edges, end to end with the real daemon and real agents on
 * loopback, the faults made by the tests (docs/OPERATIONS.md, "Faults"):
 * what a crash leaves is recovered at start, the server expires overdue
 * jobs before it takes a connection, stopping an agent is not cancelling
 * its job, a full disk does not lose or mislabel a result, a dispatch is
 * idempotent and survives its daemon, and many devices share an address. */
#include "e2e.h"

#include "agent/state.h"
#include "proto/noise.h"
#include "server/db.h"

#include <dirent.h>
#include <sched.h>
#include <sodium.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>

TestSuite(faults, .init = e2e_setup, .fini = e2e_teardown, .timeout = 180);

static const char slow_manifest[] =
    "{\"name\":\"slow\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

/* The names below dir (one level) that end in ".tmp", into out (a
 * space-separated list); how many. */
static int temps_in(const char *dir, char *out, size_t cap) {
  DIR *d = opendir(dir);
  int n = 0;
  out[0] = '\0';
  if (!d)
    return 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l > 4 && strcmp(de->d_name + l - 4, ".tmp") == 0) {
      n++;
      snprintf(out + strlen(out), cap - strlen(out), "%s ", de->d_name);
    }
  }
  closedir(d);
  return n;
}

static const char *random_hex(void) {
  static char hex[33];
  FILE *f = fopen("/dev/urandom", "r");
  unsigned char b[16];
  cr_assert_eq(fread(b, 1, 16, f), 16);
  fclose(f);
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return hex;
}

/* A package of manifest and script dispatched to the one device, and
 * running: its id. */
static void dispatch_running(const char *name, const char *manifest, const char *script,
                             char id[33]) {
  char *pkg = pack(name, manifest, script);
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state);
  job_id_of(o, id);
  free(o);
  free(pkg);
  cr_assert(wait_state(id, "running", 10000), "state %s", job_state(id, NULL));
}

/* A job that runs until stopped, dispatched to the one device: its id. */
static void dispatch_slow(const char *marker, char id[33]) {
  char script[80];
  snprintf(script, sizeof(script), "sleep 300.%s\n", marker);
  dispatch_running("slow", slow_manifest, script, id);
}

static const char *error_code(const char *id) {
  json_t *job;
  job_state(id, &job);
  static char code[64];
  const char *c = json_string_value(
      json_object_get(json_object_get(json_object_get(job, "result"), "error"), "code"));
  snprintf(code, sizeof(code), "%s", c ? c : "");
  json_decref(job);
  return code;
}

/* ---- start-up recovery ---- */

Test(faults, the_agent_finishes_or_removes_what_a_crash_left_and_reports_the_job_agent_restarted) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char id[33];
  dispatch_slow("515151", id);
  e2e_stop(&a->pid, SIGKILL);
  /* what a crash one step earlier leaves: the job's marker still a temp
   * (it was accepted, its id journaled), a half-written seen entry, a
   * half-written result, and staging directories with nothing in them */
  char path[800], tmp[600];
  snprintf(path, sizeof(path), "%s/spool/%s.running", a->dir, id);
  snprintf(tmp, sizeof(tmp), "%s/spool/.%s.running.tmp", a->dir, id);
  cr_assert_eq(rename(path, tmp), 0, "%s: %s", path, strerror(errno));
  char other[33];
  snprintf(other, sizeof(other), "%s", random_hex());
  snprintf(path, sizeof(path), "%s/spool/.%s.result.tmp", a->dir, other);
  put_file(path, "partial");
  snprintf(path, sizeof(path), "%s/seen/.%s.tmp", a->dir, random_hex());
  put_file(path, "17");
  char empty1[600], empty2[600], kept[600];
  snprintf(empty1, sizeof(empty1), "%s/jobs/%s", a->dir, random_hex());
  cr_assert_eq(mkdir(empty1, 0700), 0);
  snprintf(empty2, sizeof(empty2), "%s/jobs/%s", a->dir, random_hex());
  cr_assert_eq(mkdir(empty2, 0700), 0);
  snprintf(path, sizeof(path), "%s/package", empty2);
  cr_assert_eq(mkdir(path, 0700), 0);
  /* a staging directory with files and no result is not the run's: kept */
  snprintf(kept, sizeof(kept), "%s/jobs/%s", a->dir, random_hex());
  cr_assert_eq(mkdir(kept, 0700), 0);
  snprintf(path, sizeof(path), "%s/file", kept);
  put_file(path, "x");

  start_agent(a);
  cr_assert(wait_state(id, "failed", 10000), "reported at once, not at the deadline: %s",
            job_state(id, NULL));
  cr_assert_str_eq(error_code(id), "agent_restarted");
  char names[600];
  snprintf(path, sizeof(path), "%s/spool", a->dir);
  cr_assert_eq(temps_in(path, names, sizeof(names)), 0, "spool temps left: %s", names);
  snprintf(path, sizeof(path), "%s/seen", a->dir);
  cr_assert_eq(temps_in(path, names, sizeof(names)), 0, "seen temps left: %s", names);
  cr_assert_neq(access(empty1, F_OK), 0, "an empty staging directory is removed");
  cr_assert_neq(access(empty2, F_OK), 0, "one with an empty package directory too");
  cr_assert_eq(access(kept, F_OK), 0, "one with files and no spooled result is kept");
  snprintf(path, sizeof(path), "%s/jobs/%s", a->dir, id);
  cr_assert_neq(access(path, F_OK), 0, "the restarted job's staging directory is gone");
  cr_assert(wait_in(a->log, "msg=\"removed what a crash left\" temp_files=3 staging_dirs=2", 5000),
            "the agent says what it removed");
}

/* The entries of dir that are directories holding nothing: how many. */
static int empty_dirs_in(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    DIR *sub = opendir(path);
    if (!sub)
      continue;
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(sub)))
      entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(sub);
    n += entries == 0;
  }
  closedir(d);
  return n;
}

Test(faults, kill_9_of_the_agent_at_each_phase_leaves_nothing_once_it_restarted) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("brief",
                   "{\"name\":\"brief\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":1}",
                   "echo brief\n");
  static const int delays_ms[] = {0, 5, 20, 60, 150, 400};
  for (size_t k = 0; k < sizeof(delays_ms) / sizeof(delays_ms[0]); k++) {
    struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state);
    char id[33];
    job_id_of(o, id);
    free(o);
    msleep(delays_ms[k]);
    e2e_stop(&a->pid, SIGKILL);
    start_agent(a);
    const char *st = "";
    for (int t = 0; t < 200; t++) { /* done, failed (agent_restarted) or expired */
      st = job_state(id, NULL);
      if (strcmp(st, "done") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "expired") == 0)
        break;
      msleep(100);
    }
    cr_assert(strcmp(st, "done") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "expired") == 0,
              "killed after %d ms: nothing stuck (%s)", delays_ms[k], st);
    msleep(300); /* the restarted agent's recovery is done by its first connection */
    char path[600], names[600];
    snprintf(path, sizeof(path), "%s/spool", a->dir);
    cr_assert_eq(temps_in(path, names, sizeof(names)), 0, "after %d ms: %s", delays_ms[k], names);
    snprintf(path, sizeof(path), "%s/seen", a->dir);
    cr_assert_eq(temps_in(path, names, sizeof(names)), 0, "after %d ms: %s", delays_ms[k], names);
    snprintf(path, sizeof(path), "%s/jobs", a->dir);
    cr_assert_eq(empty_dirs_in(path), 0, "after %d ms: an empty staging directory", delays_ms[k]);
  }
  free(pkg);
}

Test(faults, the_server_expires_an_overdue_job_before_it_takes_a_connection) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char id[33];
  dispatch_running("short",
                   "{\"name\":\"short\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":1}",
                   "sleep 300.525252\n", id);
  e2e_stop(&a->pid, SIGKILL);
  e2e_stop(&e2e_server_pid, SIGKILL);
  msleep(7000); /* past timeout_s + --job-grace 5 */
  start_server();
  /* the first thing asked after "listening": already decided */
  cr_assert_str_eq(job_state(id, NULL), "expired");
  cr_assert_str_eq(error_code(id), "");
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(job, "error")), "device_lost");
  json_decref(job);
}

/* ---- stopping an agent is not cancelling its job ---- */

/* One agent run with --drain-timeout secs; waited for (up to 5 s) to be
 * online. */
static struct e2e_agent *agent_draining(const char *secs) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  const char *argv[] = {AGENT, "--config", a->dir, "run", "--drain-timeout", secs, NULL};
  a->pid = spawn_logged(a->log, argv);
  device_online_within(a->id, true, 5000);
  return a;
}

Test(faults, sigterm_of_the_agent_past_its_drain_timeout_ends_the_job_agent_stopped) {
  struct e2e_agent *a = agent_draining("1");
  cr_assert(device_online(a->id));
  char id[33];
  dispatch_slow("535353", id);
  kill(a->pid, SIGTERM);
  int st;
  cr_assert_eq(waitpid(a->pid, &st, 0), a->pid);
  a->pid = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a drained agent exits 0");
  start_agent(a); /* delivers the spooled result */
  cr_assert(wait_state(id, "failed", 10000), "state %s", job_state(id, NULL));
  cr_assert_str_eq(error_code(id), "agent_stopped");
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(job, "error")), "agent_stopped",
                   "the job's own code, not cancelled");
  json_decref(job);
}

Test(faults, an_operators_cancel_stays_cancelled_when_the_agent_stops_after_it) {
  struct e2e_agent *a = agent_draining("0");
  char id[33];
  dispatch_slow("545454", id);
  struct out *o = RUN(SERVER, "cancel", id, "--state", e2e_state);
  cr_assert_eq(o->status, 0, "cancel: %s", o->err);
  free(o);
  cr_assert(wait_state(id, "cancelled", 5000));
  msleep(1500);
  e2e_stop(&a->pid, SIGTERM);
  start_agent(a);
  msleep(1500);
  cr_assert_str_eq(job_state(id, NULL), "cancelled");
  cr_assert_str_eq(error_code(id), "cancelled");
}

/* The id a dispatch --wait logging into log tells at once ("job ID sent
 * to device D" on stderr), into id. */
static void id_told(const char *log, char id[33]) {
  cr_assert(wait_in(log, "sent to device", 10000), "dispatch --wait tells the id at once");
  FILE *f = fopen(log, "r");
  char line[512] = "";
  cr_assert(fgets(line, sizeof(line), f));
  fclose(f);
  char *p = strstr(line, "job ");
  cr_assert(p, "%s", line);
  snprintf(id, 33, "%.32s", p + 4);
}

/* ---- the server's disk fills while a job runs (e2e_state_on_tmpfs) ---- */

Test(faults, a_result_the_full_disk_refused_is_recorded_once_after_space_is_freed_not_expired,
     .fini = e2e_tmpfs_teardown) {
  PG_TEST_SQLITE_ONLY(); /* it fills the state directory's disk, where SQLite writes */
  if (geteuid() != 0)
    PG_TEST_SKIP("needs root for a mount namespace");
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  e2e_stop(&e2e_server_pid, SIGTERM);
  e2e_state_on_tmpfs(8);
  start_server();
  cr_assert(device_online_within(a->id, true, 5000), "the agent came back");
  /* a result of some 30 KB: it needs new blocks in the database's log */
  char *pkg = pack("big",
                   "{\"name\":\"big\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":2}",
                   "sleep 1.5; head -c 30000 /dev/zero | tr '\\000' x\n");
  char wait_log[400];
  snprintf(wait_log, sizeof(wait_log), "%s/wait.log", e2e_dir);
  const char *wargv[] = {SERVER,   "dispatch", "--user",  "alice", pkg,
                         "--wait", "--state",  e2e_state, NULL};
  pid_t waiting = spawn_logged(wait_log, wargv);
  char id[33];
  id_told(wait_log, id);
  free(pkg);
  int64_t t0 = time(NULL);
  cr_assert(wait_state(id, "running", 10000));
  char fill[400];
  snprintf(fill, sizeof(fill), "%s/fill", e2e_state);
  e2e_fill_state(fill);
  cr_assert(wait_in(a->log, "the server could not record a result", 10000),
            "the server asked for it again:\n%s", e2e_server_log);
  /* past its deadline (timeout_s 2 + --job-grace 5) with the disk still full */
  while (time(NULL) < t0 + 10)
    msleep(200);
  cr_assert_str_eq(job_state(id, NULL), "running",
                   "a job whose result its connected agent holds does not expire");
  cr_assert_eq(unlink(fill), 0);
  cr_assert(wait_state(id, "done", 40000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  const char *out = json_string_value(json_object_get(json_object_get(job, "result"), "stdout"));
  cr_assert(out && strlen(out) == 30000, "the whole result");
  cr_assert_null(json_object_get(job, "late"));
  json_decref(job);
  char finished[120];
  snprintf(finished, sizeof(finished), "msg=\"job finished\" job=%s", id);
  msleep(1500);
  cr_assert_eq(count_in(e2e_server_log, finished), 1, "recorded once");
  char spooled[600];
  snprintf(spooled, sizeof(spooled), "%s/spool/%s.result", a->dir, id);
  cr_assert(access(spooled, F_OK) != 0, "acked: out of the agent's spool");
  int st;
  cr_assert_eq(waitpid(waiting, &st, 0), waiting);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "dispatch --wait reports the job as it ended (done, exit 0), nothing else");
  cr_assert_eq(count_in(wait_log, "cancelled"), 0);
  e2e_stop(&e2e_server_pid, SIGTERM);
}

Test(faults, a_result_after_the_deadline_is_kept_and_shown_late_under_expired) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char id[33];
  dispatch_running("nap",
                   "{\"name\":\"nap\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":4}",
                   "sleep 1; echo woke\n", id);
  /* the job ends (3 s to spare for a slow start on a loaded machine: its
   * output must be in before its deadline), its agent does not say so in
   * time */
  kill(a->pid, SIGSTOP);
  cr_assert(wait_state(id, "expired", 15000), "state %s", job_state(id, NULL));
  kill(a->pid, SIGCONT);
  json_t *job = NULL;
  for (int i = 0; i < 200; i++) {
    job_state(id, &job);
    if (json_is_object(json_object_get(job, "result")))
      break;
    json_decref(job);
    job = NULL;
    msleep(100);
  }
  cr_assert(job, "the late result is kept");
  cr_assert_str_eq(json_string_value(json_object_get(job, "state")), "expired");
  cr_assert(json_is_true(json_object_get(job, "late")), "and said to be late");
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                   "woke\n");
  json_decref(job);
  struct out *o = RUN(SERVER, "job", id, "--state", e2e_state);
  cr_assert(strstr(o->out, "late:     yes"), "%s", o->out);
  free(o);
  cr_assert_gt(count_in(e2e_server_log, "msg=\"late result\""), 0);
}

/* ---- a dispatch is idempotent and its id is known ---- */

static const char echo_manifest[] =
    "{\"name\":\"echo\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

static int jobs_count(void) {
  struct out *o = RUN(SERVER, "jobs", "--json", "--limit", "0", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "jobs: %s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  free(o);
  int n = (int)json_array_size(j);
  json_decref(j);
  return n;
}

Test(faults, the_same_key_twice_makes_one_job_and_names_it_both_times) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("echo", echo_manifest, "echo ran\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--key", "build-42", pkg, "--state", e2e_state);
  char first[33], second[33];
  job_id_of(o, first);
  free(o);
  cr_assert(wait_state(first, "done", 20000));
  o = RUN(SERVER, "dispatch", "--user", "alice", "--key", "build-42", pkg, "--state", e2e_state);
  job_id_of(o, second);
  cr_assert(strstr(o->err, "was dispatched with key build-42 before (it is done)"), "%s", o->err);
  free(o);
  cr_assert_str_eq(first, second, "the same key: the same job");
  cr_assert_eq(jobs_count(), 1, "never a second one");
  o = RUN(SERVER, "dispatch", "--user", "alice", "--key", "build-42", pkg, "--wait", "--state",
          e2e_state);
  cr_assert_eq(o->status, 0, "--wait on a known key gives its result: %s", o->err);
  cr_assert(strstr(o->out, "\"ran\\n\""), "%s", o->out);
  free(o);
  cr_assert_eq(jobs_count(), 1);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--key", "build-43", pkg, "--state", e2e_state);
  job_id_of(o, second);
  free(o);
  cr_assert_str_neq(first, second, "another key, another job");
  char *other = pack("other", slow_manifest, "echo other\n");
  o = RUN(SERVER, "dispatch", "--user", "alice", "--key", "build-42", other, "--state", e2e_state);
  cr_assert_eq(o->status, 2, "the key of another package is a usage error: %d %s", o->status,
               o->err);
  cr_assert(strstr(o->err, "of another package"), "%s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--key", "a b", pkg, "--state", e2e_state);
  cr_assert_eq(o->status, 2);
  free(o);
  cr_assert_eq(jobs_count(), 2);
  free(pkg);
  free(other);
}

/* dispatch --wait of a job that runs ~3 s, in the background: its pid; the
 * id it printed into id. */
static pid_t dispatch_wait_bg(const char *log, const char *pkg, char id[33]) {
  const char *argv[] = {SERVER, "dispatch", "--user",  "alice",   "--key", "k-1",
                        pkg,    "--wait",   "--state", e2e_state, NULL};
  pid_t pid = spawn_logged(log, argv);
  id_told(log, id);
  return pid;
}

static void wait_resumes(const char *id) {
  struct out *o = RUN(SERVER, "job", id, "--wait", "--json", "--state", e2e_state);
  cr_assert_eq(o->status, 0, "job ID --wait resumes the wait: %s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "done");
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "result"), "stdout")),
                   "slept\n");
  json_decref(j);
  free(o);
  char finished[120];
  snprintf(finished, sizeof(finished), "msg=\"job finished\" job=%s", id);
  cr_assert_eq(count_in(e2e_server_log, finished), 1, "one result");
}

/* One agent, and a 3-second job (*pkg, its package) dispatched with
 * --wait in the background, its output in log, running: the waiting
 * dispatch. */
static pid_t nap_dispatched_waiting(char **pkg, char log[400], char id[33]) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  *pkg = pack("nap", slow_manifest, "sleep 3; echo slept\n");
  snprintf(log, 400, "%s/wait.log", e2e_dir);
  pid_t w = dispatch_wait_bg(log, *pkg, id);
  cr_assert(wait_state(id, "running", 10000));
  return w;
}

Test(faults, kill_9_of_the_server_during_dispatch_wait_names_the_job_and_job_wait_resumes) {
  char *pkg, log[400], id[33];
  pid_t w = nap_dispatched_waiting(&pkg, log, id);
  e2e_stop(&e2e_server_pid, SIGKILL);
  int st;
  cr_assert_eq(waitpid(w, &st, 0), w);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  char again[200];
  snprintf(again, sizeof(again),
           "job %s goes on without the daemon's answer; `cordon-server job %s "
           "--wait` waits for it again",
           id, id);
  cr_assert_eq(count_in(log, again), 1, "the caller is told the id and how to wait:\n%s", log);
  start_server();
  wait_resumes(id);
  /* and the key names it still: no second job */
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--key", "k-1", pkg, "--state", e2e_state);
  char same[33];
  job_id_of(o, same);
  free(o);
  cr_assert_str_eq(same, id);
  cr_assert_eq(jobs_count(), 1);
  free(pkg);
}

Test(faults, sigterm_of_the_server_during_dispatch_wait_names_the_job_and_its_state) {
  char *pkg, log[400], id[33];
  pid_t w = nap_dispatched_waiting(&pkg, log, id);
  kill(e2e_server_pid, SIGTERM); /* drains */
  cr_assert(wait_in(e2e_server_log, "draining", 5000));
  /* during the drain the key still names the job (no second one) */
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--key", "k-1", pkg, "--state", e2e_state);
  char same[33];
  job_id_of(o, same);
  free(o);
  cr_assert_str_eq(same, id);
  kill(e2e_server_pid, SIGTERM); /* a second one stops it at once */
  e2e_stop(&e2e_server_pid, 0);
  int st;
  cr_assert_eq(waitpid(w, &st, 0), w);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  char told[200];
  snprintf(told, sizeof(told), "the server stopped before job %s finished (it is running", id);
  cr_assert_eq(count_in(log, told), 1, "the id and the state, not an error about the job");
  start_server();
  wait_resumes(id);
  free(pkg);
}

/* A restart: the goaway `shutdown` carries a retry_ms of 1-3 s, and the
 * agent's rounds stay at most 2 s apart for a minute after it, so the
 * device is back within seconds of the server, not after a backoff that
 * grew to 8 or 16 s while the server was down. */
Test(faults, a_device_is_back_within_seconds_of_a_server_restart) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  e2e_stop(&e2e_server_pid, SIGTERM);
  msleep(8000); /* down long enough for a doubling backoff to reach 8 s */
  start_server();
  cr_assert(device_online_within(a->id, true, 3000), "back within 3 s of the restart");
  cr_assert(wait_in(a->log, "msg=\"reconnecting when the server asked\"", 100),
            "the shutdown's retry_ms was honoured");
}

/* ---- caps that fit an office behind one address ---- */

#define OFFICE 20

/* Device i (1..) of alice, paired without the pairing protocol (whose rate
 * limit would make 20 pairings from one address take minutes): the server
 * learns its key in the database, its config directory gets the first
 * agent's pairing record with its own identity and device id. */
static void clone_pairing(const struct e2e_agent *first, int i, char dir[400]) {
  snprintf(dir, 400, "%s/office-%d", e2e_dir, i);
  char cmd[1000];
  snprintf(cmd, sizeof(cmd), "mkdir -p %s && cp -a %s/trusted %s/", dir, first->dir, dir);
  cr_assert_eq(system(cmd), 0);
  struct agent_pairing p;
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_pairing_load(first->dir, &p, &d), 0, "%s", d.msg);
  uint8_t pub[32], *priv = sodium_malloc(32);
  noise_keypair_generate(pub, priv);
  struct server_db *db = NULL;
  cr_assert_eq(server_db_open(e2e_state, 0, &db, &d), 0, "%s", d.msg);
  struct server_db_user u;
  cr_assert_eq(server_db_user_get_by_name(db, "alice", &u, &d), 0);
  char name[32], id[CORDON_ID_HEX_SIZE];
  snprintf(name, sizeof(name), "office-%d", i);
  struct server_db_device_info info = {.name = name};
  cr_assert_eq(server_db_device_add(db, u.id, pub, &info, id, &d), 0, "%s", d.msg);
  server_db_close(db);
  cr_assert_eq(cordon_id_from_hex(id, p.device_id), 0);
  snprintf(p.name, sizeof(p.name), "%s", name);
  cr_assert_eq(agent_pairing_save(dir, priv, &p, NULL, 0, &d), 0, "%s", d.msg);
  sodium_free(priv);
}

static pid_t spawn_agent_dying_with_us(const char *dir) {
  char log[500];
  snprintf(log, sizeof(log), "%s/agent.log", dir);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    FILE *f = fopen(log, "a");
    dup2(fileno(f), 2);
    execl(AGENT, AGENT, "--config", dir, "run", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int online_count(void) {
  json_t *d = devices_json();
  int n = 0;
  size_t i;
  json_t *v;
  json_array_foreach(d, i, v) n += json_is_true(json_object_get(v, "online"));
  json_decref(d);
  return n;
}

Test(faults, twenty_devices_behind_one_address_are_all_online) {
  cr_assert(sodium_init() >= 0);
  struct e2e_agent *first = pair_agent(0, "office-0", NULL);
  char dirs[OFFICE][400];
  pid_t pids[OFFICE] = {0};
  for (int i = 1; i < OFFICE; i++)
    clone_pairing(first, i, dirs[i]);
  start_agent(first);
  for (int i = 1; i < OFFICE; i++)
    pids[i] = spawn_agent_dying_with_us(dirs[i]);
  int n = 0;
  for (int t = 0; t < 300 && (n = online_count()) < OFFICE; t++)
    msleep(100);
  cr_assert_eq(n, OFFICE, "every device from 127.0.0.1 is online (%d of %d):\n%s", n, OFFICE,
               e2e_server_log);
  for (int i = 1; i < OFFICE; i++)
    e2e_stop(&pids[i], SIGKILL);
}
