/* The server's clock steps while it runs (server/db.h, "the daemon's
 * clock"): the real daemon under libfaketime (Debian's faketime, whose
 * offset a file sets and the daemon re-reads at every clock call; the
 * monotonic clock is left alone, as a real step leaves it), real agents.
 * A step forward of an hour expires no running job and no queued one
 * early; a step back of an hour holds no job past its deadline. On
 * SQLite the deadlines move with the step; on PostgreSQL (the pg pass)
 * the daemon keeps the database's clock, which did not step, and says
 * that its own clock is off it. */
#include "e2e.h"

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

static char offset_file[400];
#define SLEEP_ARGS                                                                                 \
  "sleep\0"                                                                                        \
  "61.7" /* the job's command line, to find it */

/* libfaketime's offset in file, e.g. "+1h" */
static void set_offset_in(const char *file, const char *offset) {
  char tmp[460];
  snprintf(tmp, sizeof(tmp), "%s.tmp", file);
  FILE *f = fopen(tmp, "w");
  cr_assert(f);
  fprintf(f, "%s\n", offset);
  fclose(f);
  cr_assert_eq(rename(tmp, file), 0); /* whole, never half a line */
}

/* the daemon's */
static void set_offset(const char *offset) {
  set_offset_in(offset_file, offset);
}

/* The processes started next run under libfaketime with the offset in
 * file (their monotonic clock left alone, as a real step leaves it);
 * faketime_env_end() restores the environment. */
static char *asan_saved;
static void faketime_env_begin(const char *file) {
  setenv("LD_PRELOAD", FAKETIME_LIB, 1);
  setenv("FAKETIME_TIMESTAMP_FILE", file, 1);
  setenv("FAKETIME_NO_CACHE", "1", 1);
  setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
  /* under the sanitizers (scripts/test.sh's ASan pass) the preloaded
   * library comes before ASan's runtime, which ASan refuses by default */
  const char *asan = getenv("ASAN_OPTIONS");
  asan_saved = asan ? strdup(asan) : NULL;
  char opts[1024];
  snprintf(opts, sizeof(opts), "%s%sverify_asan_link_order=0", asan ? asan : "", asan ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
}

static void faketime_env_end(void) {
  if (asan_saved)
    setenv("ASAN_OPTIONS", asan_saved, 1);
  else
    unsetenv("ASAN_OPTIONS");
  free(asan_saved);
  asan_saved = NULL;
  unsetenv("LD_PRELOAD");
  unsetenv("FAKETIME_TIMESTAMP_FILE");
  unsetenv("FAKETIME_NO_CACHE");
  unsetenv("FAKETIME_DONT_FAKE_MONOTONIC");
}

/* The daemon again (e2e_setup started it), under libfaketime. */
static void clock_setup(void) {
  if (access(FAKETIME_LIB, R_OK) != 0)
    cr_skip_test("no libfaketime (apt-get install faketime; scripts/deps.sh does)");
  e2e_setup();
  e2e_stop(&e2e_server_pid, SIGTERM);
  snprintf(offset_file, sizeof(offset_file), "%s/faketime", e2e_dir);
  set_offset("+0");
  faketime_env_begin(offset_file);
  start_server();
  faketime_env_end();
}

TestSuite(clock, .init = clock_setup, .fini = e2e_teardown, .timeout = 120);

/* What the daemon said about the step (SQLite) or about its clock being
 * off the database's (PostgreSQL). */
static bool step_noticed(int ms) {
  const char *needle =
      pg_test_base() ? "this host's clock is off the database's" : "the system clock stepped";
  return wait_in(e2e_server_log, needle, ms);
}

/* The laptop paired and connected, a job of the package slow (timeout_s,
 * script) running on it: its id into id, the agent returned, the package
 * into *out_pkg (free it). */
static struct e2e_agent *a_running_job(const char *timeout_s, const char *script, char id[33],
                                       char **out_pkg) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  char manifest[200];
  snprintf(manifest, sizeof(manifest),
           "{\"name\":\"slow\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
           "\"timeout_s\":%s}",
           timeout_s);
  *out_pkg = pack("slow", manifest, script);
  dispatch_detached(*out_pkg, id);
  cr_assert(wait_state(id, "running", 10000), "%s", job_state(id, NULL));
  return a;
}

Test(clock, a_step_forward_expires_no_running_job_and_no_queued_one) {
  char running[33], *slow = NULL;
  (void)a_running_job("20", "sleep 4; echo survived\n", running, &slow);
  struct out *o;
  /* and one queued for a device that is away, for a minute */
  struct e2e_agent *b = pair_agent(1, "desk", NULL);
  o = RUN(SERVER, "dispatch", "--user", "alice", "--device", "desk", slow, "--detach",
          "--queue-ttl", "60", "--state", e2e_state);
  char queued[33];
  job_id_of(o, queued);
  free(o);
  cr_assert_str_eq(job_state(queued, NULL), "queued");

  set_offset("+1h");
  cr_expect(step_noticed(3000), "the daemon noticed its clock");
  msleep(1500); /* a tick or more after the step */
  cr_expect_str_eq(job_state(queued, NULL), "queued", "the queued job still waits");
  cr_assert(wait_state(running, "done", 15000), "the running job ends with its own result: %s",
            job_state(running, NULL));
  cr_expect_eq(count_in(e2e_server_log, "msg=\"job expired\""), 0, "nothing expired");
  /* and the queued one runs when its device comes */
  start_agent(b);
  cr_expect(wait_state(queued, "done", 15000), "%s", job_state(queued, NULL));
  free(slow);
}

Test(clock, a_step_back_holds_no_job_past_its_deadline) {
  char id[33], *slow = NULL;
  struct e2e_agent *a = a_running_job("2", "sleep 61.7\n", id, &slow);
  /* the device goes (its result never comes): the job ends at its
   * deadline, timeout_s 2 + --job-grace 5, whatever the clock did */
  e2e_stop(&a->pid, SIGKILL);
  /* and its processes go with the agent (sandbox_reaper_start), not an hour later */
  bool left = true;
  for (int i = 0; i < 300 && (left = e2e_process_with_args(SLEEP_ARGS, sizeof(SLEEP_ARGS))); i++)
    msleep(10);
  cr_expect(!left, "the job's sleep outlived the agent");
  set_offset("-1h");
  cr_expect(step_noticed(3000), "the daemon noticed its clock");
  cr_expect(wait_state(id, "expired", 15000), "expired at its deadline, not an hour later: %s",
            job_state(id, NULL));
  free(slow);
}

/* A package that says it ran, dispatched; its end state and error. */
static void quick_job_ends(const char *why) {
  char *quick =
      pack("quick", "{\"name\":\"quick\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "echo ran\n");
  char id[33];
  dispatch_detached(quick, id);
  json_t *j = NULL;
  if (!wait_state(id, "done", 15000)) {
    job_state(id, &j);
    cr_assert_fail("%s: %s", why, json_dumps(j, 0));
  }
  job_state(id, &j);
  cr_expect(json_is_null(json_object_get(j, "error")) || !json_object_get(j, "error"),
            "%s: error %s", why, json_string_value(json_object_get(j, "error")));
  json_decref(j);
  free(quick);
}

/* The agent under libfaketime with its own offset file (the commands
 * that check it connected are not). */
static void start_agent_faked(struct e2e_agent *a, const char *file) {
  device_online_within(a->id, false, 2000);
  const char *argv[] = {AGENT, "--config", a->dir, "run", NULL};
  faketime_env_begin(file);
  a->pid = spawn_logged(a->log, argv);
  faketime_env_end();
  cr_assert(device_online_within(a->id, true, 5000), "agent %s did not connect", a->name);
}

/* A laptop's clock steps inside a session (a resume, NTP after sleep):
 * the agent carries the server's clock on its boot-time clock, so the
 * next ticket is judged right at once, not after the next ping (15 s). */
Test(clock, an_agent_clock_step_either_way_inside_a_session_breaks_no_ticket) {
  char agent_offset[420];
  snprintf(agent_offset, sizeof(agent_offset), "%s/faketime-agent", e2e_dir);
  set_offset_in(agent_offset, "+0");
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent_faked(a, agent_offset);
  set_offset_in(agent_offset, "+15m"); /* the agent's clock, forward */
  msleep(300);
  quick_job_ends("after a step forward of the agent's clock");
  set_offset_in(agent_offset, "-15m"); /* and back, 15 minutes behind the server */
  msleep(300);
  quick_job_ends("after a step back of the agent's clock");
  cr_expect(!wait_in(a->log, "ticket", 100), "no ticket was refused");
}

/* The server's clock steps: it tells every agent at once (a ping with the
 * new time) instead of at each session's next quiet ping, so the next
 * ticket, minted on the new clock, is judged on it. */
Test(clock, a_server_clock_step_back_is_told_to_the_agents_before_the_next_ticket) {
  struct e2e_agent *a = pair_agent(0, "laptop", NULL);
  start_agent(a);
  quick_job_ends("before the step");
  set_offset("-15m");
  msleep(1500); /* the daemon's tick (every second) notices and pings */
  quick_job_ends("after a step back of the server's clock");
  cr_expect(wait_in(a->log, "the server's clock moved", 3000), "the agent logged the move");
}
