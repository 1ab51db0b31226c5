/* Faults at the edges, end to end with the real daemon and real agents on
 * loopback, the faults made by the tests (docs/OPERATIONS.md, "Faults"):
 * what a crash leaves is recovered at start, the server expires overdue
 * jobs before it takes a connection, stopping an agent is not cancelling
 * its job. */
#include "e2e.h"

#include <dirent.h>

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

/* A job that runs until stopped, dispatched to the one device: its id. */
static void dispatch_slow(const char *marker, char id[33]) {
  char script[80];
  snprintf(script, sizeof(script), "sleep 300.%s\n", marker);
  char *pkg = pack("slow", slow_manifest, script);
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state);
  job_id_of(o, id);
  free(o);
  free(pkg);
  cr_assert(wait_state(id, "running", 10000), "state %s", job_state(id, NULL));
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

Test(faults, the_server_expires_an_overdue_job_before_it_takes_a_connection) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char *pkg = pack("short",
                   "{\"name\":\"short\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"timeout_s\":1}",
                   "sleep 300.525252\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  free(pkg);
  cr_assert(wait_state(id, "running", 10000));
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

Test(faults, sigterm_of_the_agent_past_its_drain_timeout_ends_the_job_agent_stopped) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  const char *argv[] = {AGENT, "--config", a->dir, "run", "--drain-timeout", "1", NULL};
  a->pid = spawn_logged(a->log, argv);
  for (int i = 0; i < 250 && !device_online(a->id); i++)
    msleep(20);
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
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  const char *argv[] = {AGENT, "--config", a->dir, "run", "--drain-timeout", "0", NULL};
  a->pid = spawn_logged(a->log, argv);
  for (int i = 0; i < 250 && !device_online(a->id); i++)
    msleep(20);
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
