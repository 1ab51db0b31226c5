/* End to end: the real cordon-server daemon and cordon-agent processes on
 * loopback — pairing, sessions, revoke, dispatch, cancel, and results that
 * survive either side dying. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prom.h"
#include "tests/server/pg_test.h"

#define SERVER CORDON_BINARY_DIR "/cordon-server"
#define AGENT CORDON_BINARY_DIR "/cordon-agent"

static char dir[256], state[300], agentdir[300], server_addr[64];
static pid_t server_pid = -1, agent_pid = -1;

static void msleep(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

struct out {
  int status;
  char out[1 << 16];
  char err[1 << 14];
};

/* Run a command (argv NULL-terminated) with optional stdin text. */
static struct out *run(const char *stdin_text, const char *const *argv) {
  struct out *o = calloc(1, sizeof(*o));
  int po[2], pe[2], pi[2];
  cr_assert(pipe(po) == 0 && pipe(pe) == 0 && pipe(pi) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pi[0], 0);
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(pi[1]);
    close(po[0]);
    close(pe[0]);
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  close(pi[0]);
  close(po[1]);
  close(pe[1]);
  if (stdin_text)
    (void)!write(pi[1], stdin_text, strlen(stdin_text));
  close(pi[1]);
  size_t n = 0;
  ssize_t k;
  while ((k = read(po[0], o->out + n, sizeof(o->out) - 1 - n)) > 0)
    n += (size_t)k;
  o->out[n] = '\0';
  n = 0;
  while ((k = read(pe[0], o->err + n, sizeof(o->err) - 1 - n)) > 0)
    n += (size_t)k;
  o->err[n] = '\0';
  close(po[0]);
  close(pe[0]);
  int st;
  waitpid(pid, &st, 0);
  o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return o;
}

#define RUN(...) run(NULL, (const char *const[]){__VA_ARGS__, NULL})

static pid_t spawn_logged(const char *log, const char *const *argv) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = fopen(log, "a");
    dup2(fileno(f), 2);
    dup2(fileno(f), 1);
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  return pid;
}

static bool log_has(const char *log, const char *needle) {
  FILE *f = fopen(log, "r");
  if (!f)
    return false;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, needle) != NULL;
}

static bool wait_log(const char *log, const char *needle, int ms) {
  for (int t = 0; t < ms; t += 20) {
    if (log_has(log, needle))
      return true;
    msleep(20);
  }
  return false;
}

/* The first start picks a free port; later starts reuse it (agents pin the
 * address at pairing). extra: more options for run, NULL-terminated, or
 * NULL. */
static void start_server_with(const char *const *extra) {
  char log[400];
  snprintf(log, sizeof(log), "%s/server.log", dir);
  (void)!truncate(log, 0);
  const char *argv[32] = {
      SERVER,        "run", "--state",  state,
      "--job-grace", "1",   "--listen", server_addr[0] ? server_addr : "127.0.0.1:0",
      NULL};
  for (int i = 0, n = 8; extra && extra[i] && n < 31; i++)
    argv[n++] = extra[i];
  server_pid = spawn_logged(log, argv);
  cr_assert(wait_log(log, "msg=listening listen=127.0.0.1:", 5000), "the server did not start");
  FILE *f = fopen(log, "r");
  char line[1024];
  int port = 0;
  while (fgets(line, sizeof(line), f)) {
    char *p = strstr(line, "msg=listening listen=127.0.0.1:");
    if (p)
      port = atoi(p + strlen("msg=listening listen=127.0.0.1:"));
  }
  fclose(f);
  cr_assert(port > 0);
  snprintf(server_addr, sizeof(server_addr), "127.0.0.1:%d", port);
}

static void start_server(void) {
  start_server_with(NULL);
}

static void stop(pid_t *pid, int sig) {
  if (*pid > 0) {
    kill(*pid, sig);
    waitpid(*pid, NULL, 0);
    *pid = -1;
  }
}

static void start_agent(void) {
  char log[400];
  snprintf(log, sizeof(log), "%s/agent.log", dir);
  const char *argv[] = {AGENT, "--config", agentdir, "run", NULL};
  agent_pid = spawn_logged(log, argv);
}

static char *mint_code(const char *user) {
  struct out *o = RUN(SERVER, "pair-code", user, "--state", state);
  cr_assert_eq(o->status, 0, "pair-code: %s", o->err);
  char *nl = strchr(o->out, '\n');
  cr_assert(nl, "the code is on its own first line");
  *nl = '\0';
  char *code = strdup(o->out);
  free(o);
  return code;
}

static void setup(void) {
  server_addr[0] = '\0';
  snprintf(dir, sizeof(dir), "/tmp/cordon-e2e-XXXXXX");
  cr_assert(mkdtemp(dir));
  chmod(dir, 0755);
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(agentdir, sizeof(agentdir), "%s/agent", dir);
  const char *db_url = pg_test_new_db(); /* CORDON_TEST_DB: PostgreSQL */
  struct out *o = db_url ? RUN(SERVER, "init", "--state", state, "--db", db_url)
                         : RUN(SERVER, "init", "--state", state);
  cr_assert_eq(o->status, 0, "init: %s", o->err);
  free(o);
  o = RUN(SERVER, "user", "add", "alice", "--state", state);
  cr_assert_eq(o->status, 0);
  free(o);
  o = RUN(SERVER, "user", "add", "bob", "--state", state);
  free(o);
  start_server();
}

static void teardown(void) {
  stop(&agent_pid, SIGKILL);
  stop(&server_pid, SIGKILL);
  pg_test_drop();
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
}

static void pair(const char *name) {
  char *code = mint_code("alice");
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", code,
                      "--name", name);
  cr_assert_eq(o->status, 0, "pair: %s", o->err);
  free(o);
  free(code);
}

static json_t *devices_json(void) {
  struct out *o = RUN(SERVER, "devices", "--json", "--state", state);
  cr_assert_eq(o->status, 0);
  json_t *j = json_loads(o->out, 0, NULL);
  free(o);
  cr_assert(json_is_array(j));
  return j;
}

static bool device_online(void) {
  json_t *d = devices_json();
  bool on = json_is_true(json_object_get(json_array_get(d, 0), "online"));
  json_decref(d);
  return on;
}

static void wait_online(void) {
  bool on = false; /* what was seen, not asked once more (it may flap: e2e.h's start_agent) */
  for (int i = 0; i < 250 && !(on = device_online()); i++)
    msleep(20);
  cr_assert(on, "the agent did not connect");
}

static char *pack(const char *name, const char *manifest, const char *script) {
  char pdir[400], path[500], cmd[1200];
  snprintf(pdir, sizeof(pdir), "%s/%s", dir, name);
  mkdir(pdir, 0755);
  snprintf(path, sizeof(path), "%s/manifest.json", pdir);
  FILE *f = fopen(path, "w");
  fputs(manifest, f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/run.sh", pdir);
  f = fopen(path, "w");
  fputs(script, f);
  fclose(f);
  char *out = malloc(512);
  snprintf(out, 512, "%s/%s.cpkg", dir, name);
  snprintf(cmd, sizeof(cmd), "%s pack %s -o %s --state %s 2>/dev/null", SERVER, pdir, out, state);
  cr_assert_eq(system(cmd), 0);
  return out;
}

static const char *job_state(const char *id, json_t **out_job) {
  struct out *o = RUN(SERVER, "job", id, "--json", "--state", state);
  cr_assert_eq(o->status, 0, "job: %s", o->err);
  json_t *j = json_loads(o->out, 0, NULL);
  free(o);
  cr_assert(j);
  if (out_job)
    *out_job = j;
  static char st[32];
  snprintf(st, sizeof(st), "%s", json_string_value(json_object_get(j, "state")));
  if (!out_job)
    json_decref(j);
  return st;
}

static bool wait_state(const char *id, const char *want, int ms) {
  for (int t = 0; t < ms; t += 50) {
    if (strcmp(job_state(id, NULL), want) == 0)
      return true;
    msleep(50);
  }
  return false;
}

TestSuite(daemon, .init = setup, .fini = teardown, .timeout = 120);

Test(daemon, pairing_prints_the_same_string_on_both_sides_and_the_device_comes_online) {
  char *code = mint_code("alice");
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", code,
                      "--name", "laptop");
  cr_assert_eq(o->status, 0, "%s", o->err);
  char *sas = strstr(o->err, "authentication string ");
  cr_assert(sas);
  char s[12];
  memcpy(s, sas + strlen("authentication string "), 11);
  s[11] = '\0';
  char log[400];
  snprintf(log, sizeof(log), "%s/server.log", dir);
  cr_assert(wait_log(log, s, 2000), "the server printed another string than %s", s);
  free(o);
  /* the code is single-use */
  o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", code);
  cr_assert_neq(o->status, 0);
  free(o);
  start_agent();
  wait_online();
  json_t *d = devices_json();
  json_t *dev = json_array_get(d, 0);
  cr_assert_str_eq(json_string_value(json_object_get(dev, "name")), "laptop");
  cr_assert_str_eq(json_string_value(json_object_get(dev, "owner")), "alice");
  cr_assert_str_eq(json_string_value(json_object_get(dev, "platform")), "linux");
  cr_assert_str_eq(json_string_value(json_object_get(dev, "state")), "active");
  json_decref(d);
  free(code);
}

Test(daemon, the_code_on_stdin_works_and_stays_out_of_argv) {
  char *code = mint_code("alice");
  char line[128];
  snprintf(line, sizeof(line), "%s\n", code);
  struct out *o = run(line, (const char *const[]){AGENT, "--config", agentdir, "pair", "--server",
                                                  server_addr, NULL});
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  free(code);
}

Test(daemon, a_wrong_code_fails_stores_nothing_and_five_failures_burn_the_code) {
  char *code = mint_code("alice");
  char bad[128];
  snprintf(bad, sizeof(bad), "%s", code);
  size_t n = strlen(bad);
  bad[n - 1] = bad[n - 1] == 'a' ? 'b' : 'a'; /* same id, wrong secret */
  for (int i = 0; i < 5; i++) {
    struct out *o =
        RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", bad);
    cr_assert_eq(o->status, 1, "attempt %d: %s", i, o->err);
    cr_assert(strstr(o->err, "could not prove"), "%s", o->err);
    free(o);
  }
  char path[400];
  snprintf(path, sizeof(path), "%s/pairing.json", agentdir);
  cr_assert(access(path, F_OK) != 0, "nothing is stored after a failed pairing");
  /* burned: the right code no longer works */
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", code);
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  free(code);
}

Test(daemon, an_agent_refuses_a_server_whose_key_is_not_the_pinned_one) {
  pair("laptop");
  /* another server with its own keys on a new state, same address */
  stop(&server_pid, SIGTERM);
  char cmd[1600];
  snprintf(cmd, sizeof(cmd), "mv %s %s.orig && %s init --state %s >/dev/null 2>&1", state, state,
           SERVER, state);
  cr_assert_eq(system(cmd), 0);
  char log[400];
  snprintf(log, sizeof(log), "%s/server.log", dir);
  const char *argv[] = {SERVER, "run", "--state", state, "--listen", server_addr, NULL};
  server_pid = spawn_logged(log, argv);
  msleep(300);
  start_agent();
  char alog[400];
  snprintf(alog, sizeof(alog), "%s/agent.log", dir);
  cr_assert(wait_log(alog, "not the one pinned", 5000));
  cr_assert(!log_has(alog, "connected to"));
}

Test(daemon, dispatch_wait_prints_the_result_and_job_json_keeps_it) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg =
      pack("hello", "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "echo \"hi $1\"\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", state, "--", "there");
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *r = json_loads(o->out, 0, NULL);
  cr_assert(r, "stdout is the result JSON: %s", o->out);
  cr_assert_str_eq(json_string_value(json_object_get(r, "stdout")), "hi there\n");
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "sandbox"), "level")),
                   "isolated");
  const char *id = json_string_value(json_object_get(r, "job_id"));
  json_t *job;
  cr_assert_str_eq(job_state(id, &job), "done");
  cr_assert_str_eq(json_string_value(json_object_get(job, "user")), "alice");
  cr_assert(json_is_object(json_object_get(job, "result")));
  json_decref(job);
  json_decref(r);
  free(o);
  /* without --wait: the job id alone */
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  cr_assert_eq(o->status, 0);
  cr_assert_eq(strlen(o->out), 33, "a job id and a newline: '%s'", o->out);
  free(o);
  free(pkg);
}

/* A package larger than the server's send window (1 MiB queued per
 * connection): its first chunks go with the job, the rest as the
 * connection drains; the job sees every byte. */
Test(daemon, a_package_larger_than_the_send_window_arrives_whole) {
  pair("laptop");
  start_agent();
  wait_online();
  size_t n = 3u << 20;
  char *script = malloc(n + 128);
  int at = snprintf(script, n + 128, "wc -c < run.sh; cksum < run.sh\n#");
  uint32_t x = 2463534242u; /* xorshift: bytes that no compression would shrink */
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    script[at++] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[x % 62];
  }
  script[at++] = '\n';
  script[at] = '\0';
  char path[600], cmd[1400], want[128] = "";
  char *pkg = pack("big", "{\"name\":\"big\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   script);
  snprintf(path, sizeof(path), "%s/big/run.sh", dir);
  snprintf(cmd, sizeof(cmd), "wc -c < '%s'; cksum < '%s'", path, path);
  FILE *p = popen(cmd, "r");
  size_t got = fread(want, 1, sizeof(want) - 1, p);
  want[got] = '\0';
  pclose(p);
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  json_t *r = json_loads(o->out, 0, NULL);
  cr_assert(r, "stdout is the result JSON: %s", o->out);
  cr_assert_str_eq(json_string_value(json_object_get(r, "stdout")), want);
  json_decref(r);
  free(o);
  free(pkg);
  free(script);
}

Test(daemon, no_eligible_device_for_another_user_or_an_offline_device) {
  pair("laptop");
  char *pkg = pack("hello", "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "");
  /* bob has no device; alice's is offline */
  struct out *o = RUN(SERVER, "dispatch", "--user", "bob", pkg, "--state", state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "no_eligible_device"), "%s", o->err);
  free(o);
  /* queueing for an offline device is tests/server/test_queue.c's; here refused */
  o = RUN(SERVER, "dispatch", "--user", "alice", "--no-queue", pkg, "--state", state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "offline"), "the reason per candidate: %s", o->err);
  free(o);
  start_agent();
  wait_online();
  json_t *d = devices_json();
  const char *id = json_string_value(json_object_get(json_array_get(d, 0), "id"));
  /* bob naming alice's device: refused, and the device never hears of it */
  o = RUN(SERVER, "dispatch", "--user", "bob", "--device", id, pkg, "--state", state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "no_eligible_device"));
  free(o);
  char alog[400];
  snprintf(alog, sizeof(alog), "%s/agent.log", dir);
  cr_assert(!log_has(alog, "job "));
  json_decref(d);
  free(pkg);
}

Test(daemon, cancel_kills_the_job_and_records_cancelled) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg =
      pack("slow", "{\"name\":\"slow\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 300.424242\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  cr_assert_eq(o->status, 0);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", o->out);
  free(o);
  cr_assert(wait_state(id, "running", 5000));
  o = RUN(SERVER, "cancel", id, "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  json_t *job;
  for (int i = 0; i < 100; i++) {
    job_state(id, &job);
    if (json_is_object(json_object_get(job, "result")))
      break;
    json_decref(job);
    job = NULL;
    msleep(50);
  }
  cr_assert(job, "the agent's result arrived");
  cr_assert_str_eq(json_string_value(json_object_get(job, "state")), "cancelled");
  cr_assert_str_eq(json_string_value(json_object_get(
                       json_object_get(json_object_get(job, "result"), "error"), "code")),
                   "cancelled");
  json_decref(job);
  cr_assert_neq(system("pgrep -f '^sleep 300.424242' >/dev/null"), 0, "the job's process is gone");
  free(pkg);
}

Test(daemon, an_agent_that_dies_mid_job_reports_agent_restarted) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg =
      pack("slow", "{\"name\":\"slow\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 300.434343\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", o->out);
  free(o);
  cr_assert(wait_state(id, "running", 5000));
  stop(&agent_pid, SIGKILL);
  start_agent();
  cr_assert(wait_state(id, "failed", 10000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(
                       json_object_get(json_object_get(job, "result"), "error"), "code")),
                   "agent_restarted");
  json_decref(job);
  /* nothing of the job outlives the restart (bwrap's parent-death signal,
   * or the restarted agent reaping the job's cgroups) */
  bool gone = false;
  for (int i = 0; i < 150 && !gone; i++) {
    gone = system("pgrep -f '^sleep 300.434343' >/dev/null") != 0;
    if (!gone)
      msleep(20);
  }
  cr_assert(gone, "a process of the job outlived its agent's restart");
  free(pkg);
}

Test(daemon, a_result_survives_the_server_dying_and_is_redelivered) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg =
      pack("short", "{\"name\":\"short\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 2; echo finished\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", o->out);
  free(o);
  cr_assert(wait_state(id, "running", 5000));
  stop(&server_pid, SIGKILL); /* the job finishes while the server is gone */
  msleep(2500);
  start_server();
  cr_assert(wait_state(id, "done", 15000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                   "finished\n");
  json_decref(job);
  /* acked: the spool is empty again */
  char path[500];
  snprintf(path, sizeof(path), "%s/spool/%s.result", agentdir, id);
  for (int i = 0; i < 50 && access(path, F_OK) == 0; i++)
    msleep(50);
  cr_assert(access(path, F_OK) != 0, "acked results leave the spool");
  free(pkg);
}

Test(daemon, sigterm_stops_the_daemon_cleanly) {
  pair("laptop");
  start_agent();
  wait_online();
  kill(server_pid, SIGTERM);
  int st;
  waitpid(server_pid, &st, 0);
  server_pid = -1;
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  char log[400];
  snprintf(log, sizeof(log), "%s/server.log", dir);
  cr_assert(log_has(log, "shutting down"));
  cr_assert(!device_online(), "devices are marked offline");
}

Test(daemon, revoke_closes_the_live_session_and_the_device_stays_out) {
  pair("laptop");
  start_agent();
  wait_online();
  json_t *d = devices_json();
  char id[40];
  snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(json_array_get(d, 0), "id")));
  json_decref(d);
  struct out *o = RUN(SERVER, "revoke", id, "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  char alog[400];
  snprintf(alog, sizeof(alog), "%s/agent.log", dir);
  cr_assert(wait_log(alog, "revoked", 3000), "the agent was told");
  d = devices_json();
  json_t *dev = json_array_get(d, 0);
  cr_assert_str_eq(json_string_value(json_object_get(dev, "state")), "revoked");
  cr_assert(json_is_false(json_object_get(dev, "online")));
  json_decref(d);
  /* a new agent process with the same identity is refused at hello */
  stop(&agent_pid, SIGKILL);
  (void)!truncate(alog, 0);
  start_agent();
  cr_assert(wait_log(alog, "revoked", 5000));
  cr_assert(!log_has(alog, "connected to"));
}

static void agent_config(const char *json) {
  char path[400];
  mkdir(agentdir, 0700);
  snprintf(path, sizeof(path), "%s/config.json", agentdir);
  FILE *f = fopen(path, "w");
  fputs(json, f);
  fclose(f);
}

Test(daemon, another_users_code_pairs_the_device_to_that_user) {
  char *code = mint_code("bob");
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", code);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "of user bob"), "%s", o->err);
  free(o);
  json_t *d = devices_json();
  cr_assert_str_eq(json_string_value(json_object_get(json_array_get(d, 0), "owner")), "bob");
  json_decref(d);
  free(code);
}

Test(daemon, unpair_tells_the_server_and_wipes_the_keys) {
  pair("laptop");
  struct out *o = RUN(AGENT, "--config", agentdir, "unpair");
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->err, "the server revoked this device"), "%s", o->err);
  free(o);
  char path[400];
  snprintf(path, sizeof(path), "%s/identity.key", agentdir);
  cr_assert(access(path, F_OK) != 0);
  json_t *d = devices_json();
  cr_assert_str_eq(json_string_value(json_object_get(json_array_get(d, 0), "state")), "revoked");
  json_decref(d);
}

Test(daemon, a_device_below_min_sandbox_is_never_chosen) {
  agent_config("{\"bwrap_path\": \"/nonexistent/bwrap\", \"lowest_level\": \"contained\"}");
  pair("weak");
  start_agent();
  wait_online();
  char *pkg = pack("iso", "{\"name\":\"iso\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "below min_sandbox"), "%s", o->err);
  free(o);
  char alog[400];
  snprintf(alog, sizeof(alog), "%s/agent.log", dir);
  cr_assert(!log_has(alog, "job "));
  free(pkg);
}

Test(daemon, a_job_whose_device_does_not_come_back_expires_with_device_lost) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg = pack("lost",
                   "{\"name\":\"lost\",\"version\":\"1\",\"timeout_s\":2,"
                   "\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "sleep 30\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", o->out);
  free(o);
  cr_assert(wait_state(id, "running", 5000));
  stop(&agent_pid, SIGKILL); /* and it never comes back */
  cr_assert(wait_state(id, "expired", 10000), "state %s", job_state(id, NULL));
  struct out *j = RUN(SERVER, "jobs", "--json", "--state", state);
  cr_assert(strstr(j->out, "device_lost"), "%s", j->out);
  free(j);
  free(pkg);
}

Test(daemon, fifty_concurrent_jobs_on_one_agent_all_finish_with_their_own_output) {
  agent_config("{\"max_jobs\": 50}");
  pair("big");
  start_agent();
  wait_online();
  char *pkg = pack("par",
                   "{\"name\":\"par\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"limits\":{\"memory_mb\":32,\"output_kb\":1}}",
                   "sleep 1; echo \"job $1\"\n");
  char ids[50][33];
  for (int i = 0; i < 50; i++) {
    char arg[16];
    snprintf(arg, sizeof(arg), "%d", i);
    struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state, "--", arg);
    cr_assert_eq(o->status, 0, "job %d: %s", i, o->err);
    snprintf(ids[i], sizeof(ids[i]), "%.32s", o->out);
    free(o);
  }
  for (int i = 0; i < 50; i++) {
    if (!wait_state(ids[i], "done", 60000)) { /* say why: its result, stderr and all */
      json_t *job;
      const char *st = job_state(ids[i], &job);
      char *why = json_dumps(json_object_get(job, "result"), JSON_COMPACT);
      cr_assert_fail("job %d: %s: %s", i, st, why ? why : "no result");
    }
    json_t *job;
    job_state(ids[i], &job);
    char want[32];
    snprintf(want, sizeof(want), "job %d\n", i);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                     want);
    json_decref(job);
  }
  free(pkg);
}

/* ---- operating the daemon: the lock, liveness, signals, drain, logs,
 * readiness, metrics ---- */

static char *server_log_path(void) {
  static char log[400];
  snprintf(log, sizeof(log), "%s/server.log", dir);
  return log;
}

static bool alive(pid_t pid) {
  return waitpid(pid, NULL, WNOHANG) == 0;
}

/* Wait for pid to exit within ms; its wait status, or -1. */
static int wait_exit(pid_t pid, int ms) {
  for (int t = 0; t < ms; t += 20) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return st;
    msleep(20);
  }
  return -1;
}

/* A command in the background, its stdout and stderr into files. */
static pid_t spawn_to(const char *out, const char *err, const char *const *argv) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE *o = fopen(out, "w"), *e = fopen(err, "w");
    dup2(fileno(o), 1);
    dup2(fileno(e), 2);
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  return pid;
}

static void slurp_file(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* The id of the first job in state `want`, within ms. */
static bool find_job(const char *want, char id[33], int ms) {
  for (int t = 0; t < ms; t += 50) {
    struct out *o = RUN(SERVER, "jobs", "--json", "--limit", "0", "--state", state);
    json_t *a = json_loads(o->out, 0, NULL);
    free(o);
    size_t i;
    json_t *j;
    bool found = false;
    json_array_foreach(a, i, j) {
      if (!found && strcmp(json_string_value(json_object_get(j, "state")), want) == 0) {
        snprintf(id, 33, "%s", json_string_value(json_object_get(j, "id")));
        found = true;
      }
    }
    json_decref(a);
    if (found)
      return true;
    msleep(50);
  }
  return false;
}

/* `dispatch --wait` of pkg in the background, its stdout and stderr in
 * out and err (DIR/wait.out, DIR/wait.err); returns once its job runs,
 * with the job's id, or -1. */
static pid_t dispatch_wait_running(const char *pkg, char out[400], char err[400], char id[33]) {
  snprintf(out, 400, "%s/wait.out", dir);
  snprintf(err, 400, "%s/wait.err", dir);
  pid_t waiter = spawn_to(out, err,
                          (const char *const[]){SERVER, "dispatch", "--user", "alice", pkg,
                                                "--wait", "--state", state, NULL});
  return find_job("running", id, 5000) ? waiter : -1;
}

Test(daemon, a_second_run_on_the_same_state_is_refused_and_the_first_stays_reachable) {
  pair("laptop");
  start_agent();
  wait_online();
  struct out *o = RUN(SERVER, "run", "--state", state, "--listen", "127.0.0.1:0");
  cr_assert_eq(o->status, 1, "%s", o->err);
  char want[64];
  snprintf(want, sizeof(want), "pid %d", (int)server_pid);
  cr_assert(strstr(o->err, want), "names the holder's pid: %s", o->err);
  cr_assert_eq(strchr(o->err, '\n'), o->err + strlen(o->err) - 1, "one line: %s", o->err);
  cr_assert(strncmp(o->err, "cordon-server: ", 15) == 0, "%s", o->err);
  free(o);
  /* the first still owns its socket, its devices and its agents */
  char sock[400];
  snprintf(sock, sizeof(sock), "%s/admin.sock", state);
  cr_assert_eq(access(sock, F_OK), 0, "the admin socket is still there");
  cr_assert(device_online(), "the device is still online through the first daemon");
  char *pkg =
      pack("hello", "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "echo still\n");
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert(strstr(o->out, "still"), "%s", o->out);
  free(o);
  free(pkg);
}

Test(daemon, devices_say_online_unknown_when_the_server_is_stopped) {
  pair("laptop");
  start_agent();
  wait_online();
  struct out *o = RUN(SERVER, "devices", "--state", state);
  cr_assert(strstr(o->out, " online "), "%s", o->out);
  free(o);
  stop(&server_pid, SIGKILL); /* not even a chance to mark it offline */
  json_t *d = devices_json();
  cr_assert(json_is_null(json_object_get(json_array_get(d, 0), "online")),
            "unknown, not the database's stale flag");
  json_decref(d);
  o = RUN(SERVER, "devices", "--state", state);
  cr_assert_eq(o->status, 0);
  cr_assert(strstr(o->out, " unknown "), "%s", o->out);
  cr_assert(strstr(o->err, "unknown (daemon not running)"), "%s", o->err);
  free(o);
  o = RUN(SERVER, "jobs", "--json", "--state", state);
  cr_assert_eq(o->status, 0);
  free(o);
}

Test(daemon, sighup_keeps_the_daemon_running_and_reopens_its_log_file) {
  pair("laptop");
  start_agent();
  wait_online();
  kill(server_pid, SIGHUP);
  cr_assert(wait_log(server_log_path(), "msg=\"SIGHUP: no log file to reopen\"", 3000));
  cr_assert(alive(server_pid), "SIGHUP did not kill it");
  cr_assert(device_online());
  /* with --log-file: moved away, then SIGHUP: a new file with the next lines */
  stop(&server_pid, SIGTERM);
  char file[400], moved[420];
  snprintf(file, sizeof(file), "%s/cordon.log", dir);
  snprintf(moved, sizeof(moved), "%s.1", file);
  (void)!truncate(server_log_path(), 0);
  server_pid = spawn_logged(server_log_path(),
                            (const char *const[]){SERVER, "run", "--state", state, "--listen",
                                                  server_addr, "--log-file", file, NULL});
  cr_assert(wait_log(file, "msg=listening", 5000), "the lines go to the file");
  cr_assert(!log_has(server_log_path(), "msg=listening"), "and not to stderr");
  cr_assert_eq(rename(file, moved), 0);
  kill(server_pid, SIGHUP);
  cr_assert(wait_log(file, "msg=\"SIGHUP: log file reopened\"", 3000), "a new file");
  cr_assert(!log_has(moved, "reopened"), "the old file has nothing after the move");
  cr_assert(alive(server_pid));
  wait_online();
  struct out *o = RUN(SERVER, "devices", "--state", state);
  cr_assert(strstr(o->out, " online "), "%s", o->out);
  free(o);
}

Test(daemon, sigterm_drains_a_running_job_delivers_its_result_and_exits_0) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg =
      pack("drain", "{\"name\":\"drain\",\"version\":\"2\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 2; echo drained\n");
  char out[400], err[400], id[33];
  pid_t waiter = dispatch_wait_running(pkg, out, err, id);
  cr_assert(waiter > 0, "the job runs");
  kill(server_pid, SIGTERM);
  cr_assert(wait_log(server_log_path(), "msg=\"signal: draining, then shutting down\"", 2000));
  cr_assert(alive(server_pid), "it waits for the running job");
  /* no new jobs while it drains */
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "shutting down"), "%s", o->err);
  free(o);
  int st = wait_exit(server_pid, 15000);
  server_pid = -1;
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
  cr_assert(log_has(server_log_path(), "msg=\"drained: shutting down\" jobs_left=0"));
  /* the waiter got the result, and the database has it */
  st = wait_exit(waiter, 5000);
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "dispatch --wait status %d", st);
  static char text[1 << 16];
  slurp_file(out, text, sizeof(text));
  json_t *r = json_loads(text, 0, NULL);
  cr_assert(r, "the result JSON: %s", text);
  cr_assert_str_eq(json_string_value(json_object_get(r, "stdout")), "drained\n");
  json_decref(r);
  cr_assert_str_eq(job_state(id, NULL), "done");
  free(pkg);
}

Test(daemon, a_drain_that_times_out_tells_the_waiter_the_job_id_and_state) {
  stop(&server_pid, SIGTERM);
  start_server_with((const char *const[]){"--drain-timeout", "1", NULL});
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg =
      pack("late", "{\"name\":\"late\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 4; echo late\n");
  char out[400], err[400], id[33];
  pid_t waiter = dispatch_wait_running(pkg, out, err, id);
  cr_assert(waiter > 0);
  kill(server_pid, SIGTERM);
  int st = wait_exit(server_pid, 5000);
  server_pid = -1;
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
  cr_assert(log_has(server_log_path(), "msg=\"drain timed out: shutting down\" jobs_left=1"));
  st = wait_exit(waiter, 5000);
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
  static char text[1 << 14];
  slurp_file(err, text, sizeof(text));
  cr_assert(strstr(text, id), "the job id: %s", text);
  cr_assert(strstr(text, "it is running"), "its state: %s", text);
  cr_assert(!strstr(text, "internal_error") && !strstr(text, "no reply"), "%s", text);
  /* the job went on; the next daemon gets its result, once */
  start_server();
  cr_assert(wait_state(id, "done", 20000), "state %s", job_state(id, NULL));
  json_t *job;
  job_state(id, &job);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(job, "result"), "stdout")),
                   "late\n");
  json_decref(job);
  free(pkg);
}

/* One logfmt value at *p: quoted with \" \\ \xNN escapes, or bare. */
static bool logfmt_value(const char **p) {
  const char *s = *p;
  if (*s == '"') {
    for (s++; *s && *s != '"'; s++) {
      if ((unsigned char)*s < 0x20)
        return false;
      if (*s == '\\') {
        s++;
        if (*s == 'x') {
          if (!strchr("0123456789abcdef", s[1]) || !strchr("0123456789abcdef", s[2]) || !s[1] ||
              !s[2])
            return false;
          s += 2;
        } else if (*s != '"' && *s != '\\') {
          return false;
        }
      }
    }
    if (*s != '"')
      return false;
    *p = s + 1;
    return true;
  }
  if (!*s || *s == ' ')
    return false;
  for (; *s && *s != ' '; s++)
    if ((unsigned char)*s < 0x21 || *s == '"' || *s == '=')
      return false;
  *p = s;
  return true;
}

/* ts=<RFC 3339 UTC, ms> level=<level> prog=cordon-server msg=<value> then
 * key=value pairs, one space apart, nothing else. */
static bool logfmt_line(const char *line) {
  int y, mo, d, h, mi, sec, ms, n = 0;
  char level[8];
  if (sscanf(line, "ts=%4d-%2d-%2dT%2d:%2d:%2d.%3dZ level=%7s %n", &y, &mo, &d, &h, &mi, &sec, &ms,
             level, &n) != 8 ||
      n == 0)
    return false;
  if (strcmp(level, "debug") && strcmp(level, "info") && strcmp(level, "warn") &&
      strcmp(level, "error"))
    return false;
  const char *p = line + n;
  if (strncmp(p, "prog=cordon-server msg=", 23) != 0)
    return false;
  p += 23;
  if (!logfmt_value(&p))
    return false;
  while (*p == ' ') {
    p++;
    const char *k = p;
    while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.')
      p++;
    if (p == k || *p != '=')
      return false;
    p++;
    if (!logfmt_value(&p))
      return false;
  }
  return *p == '\0';
}

Test(daemon, every_log_line_of_a_run_is_a_timestamp_a_level_and_logfmt_and_no_secret) {
  stop(&server_pid, SIGTERM);
  start_server_with((const char *const[]){"--log-level", "debug", NULL});
  char *code = mint_code("alice");
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", code,
                      "--name", "name with \"quotes\" and = sign");
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  start_agent();
  wait_online();
  char *pkg =
      pack("hello", "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "echo hi; exit 3\n");
  o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--wait", "--state", state, "--",
          "secret-arg");
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  stop(&agent_pid, SIGTERM);
  stop(&server_pid, SIGTERM);
  static char log[1 << 18];
  slurp_file(server_log_path(), log, sizeof(log));
  int lines = 0;
  bool debug = false;
  for (char *line = log, *nl; *line; line = nl + 1) {
    nl = strchr(line, '\n');
    cr_assert(nl, "every line ends: %s", line);
    *nl = '\0';
    cr_assert(logfmt_line(line), "not logfmt: %s", line);
    debug |= strstr(line, " level=debug ") != NULL;
    lines++;
  }
  slurp_file(server_log_path(), log, sizeof(log));
  cr_assert_gt(lines, 8);
  cr_assert(debug, "--log-level debug lets debug lines through");
  /* the lifecycle, with fields */
  cr_assert(strstr(log, "msg=\"device paired\" device="), "%s", log);
  cr_assert(strstr(log, "msg=\"device connected\" device="), "%s", log);
  cr_assert(strstr(log, " addr=127.0.0.1 "), "%s", log);
  cr_assert(strstr(log, "msg=\"admin request\" op=dispatch uid="), "%s", log);
  cr_assert(strstr(log, "msg=\"job sent\" job="), "%s", log);
  cr_assert(strstr(log, " package=hello@1 "), "%s", log);
  cr_assert(strstr(log, "msg=\"job finished\""), "%s", log);
  cr_assert(strstr(log, " outcome=failed exit_code=3 signal=- "), "%s", log);
  cr_assert(strstr(log, " level=isolated "), "%s", log);
  cr_assert(strstr(log, "msg=\"device disconnected\""), "%s", log);
  /* never a secret: not the code, not the job's arguments */
  cr_assert(!strstr(log, code), "the pairing code is not logged");
  cr_assert(!strstr(log, "secret-arg"), "job arguments are not logged");
  free(code);
  free(pkg);
}

Test(daemon, a_failed_pairing_is_logged_with_its_source_address_and_reason) {
  char *code = mint_code("alice");
  char bad[128];
  snprintf(bad, sizeof(bad), "%s", code);
  size_t n = strlen(bad);
  bad[n - 1] = bad[n - 1] == 'a' ? 'b' : 'a'; /* same id, wrong secret */
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code", bad);
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  cr_assert(
      wait_log(server_log_path(), "msg=\"pairing failed\" addr=127.0.0.1 reason=no_proof", 3000));
  cr_assert(log_has(server_log_path(), " attempts_left=4 "));
  o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code",
          "00000-00000-00000-00000-00000-00000-00000-00000");
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  cr_assert(wait_log(server_log_path(),
                     "msg=\"pairing failed\" addr=127.0.0.1 reason=unknown_code code=0000000000",
                     3000));
  cr_assert(!log_has(server_log_path(), code + 12), "never the secret part of a code");
  free(code);
}

Test(daemon, the_notify_socket_gets_ready_status_watchdog_and_stopping) {
  stop(&server_pid, SIGTERM);
  char path[400];
  snprintf(path, sizeof(path), "%s/notify.sock", dir);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  cr_assert_lt(strlen(path), sizeof(a.sun_path));
  memcpy(a.sun_path, path, strlen(path) + 1);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  struct timeval tv = {0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setenv("NOTIFY_SOCKET", path, 1);
  setenv("WATCHDOG_USEC", "200000", 1);
  start_server();
  bool ready = false, status = false, watchdog = false;
  for (int i = 0; i < 50 && !(ready && status && watchdog); i++) {
    char buf[512];
    ssize_t k = recv(fd, buf, sizeof(buf) - 1, 0);
    if (k <= 0)
      continue;
    buf[k] = '\0';
    ready |= strcmp(buf, "READY=1") == 0;
    status |= strcmp(buf, "STATUS=0 devices online, 0 jobs running") == 0;
    watchdog |= strcmp(buf, "WATCHDOG=1") == 0;
  }
  cr_assert(ready && status && watchdog, "ready %d status %d watchdog %d", ready, status, watchdog);
  cr_assert(log_has(server_log_path(), " watchdog=yes"));
  kill(server_pid, SIGTERM);
  bool stopping = false;
  for (int i = 0; i < 25 && !stopping; i++) {
    char buf[512];
    ssize_t k = recv(fd, buf, sizeof(buf) - 1, 0);
    if (k > 0) {
      buf[k] = '\0';
      stopping = strncmp(buf, "STOPPING=1", 10) == 0;
    }
  }
  cr_assert(stopping);
  int st = wait_exit(server_pid, 5000);
  server_pid = -1;
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(fd);
}

Test(daemon, metrics_parse_as_prometheus_text_and_their_job_counts_match_jobs) {
  stop(&server_pid, SIGTERM);
  start_server_with((const char *const[]){"--metrics", "127.0.0.1:0", NULL});
  int mport = prom_port_from_log(server_log_path());
  /* a failed pairing, then a device and three jobs: done, failed, cancelled */
  struct out *o = RUN(AGENT, "--config", agentdir, "pair", "--server", server_addr, "--code",
                      "00000-00000-00000-00000-00000-00000-00000-00000");
  free(o);
  pair("laptop");
  start_agent();
  wait_online();
  char *ok = pack("ok", "{\"name\":\"ok\",\"version\":\"1\",\"entry\":[\"/bin/true\"]}", "");
  char *bad = pack("bad", "{\"name\":\"bad\",\"version\":\"1\",\"entry\":[\"/bin/false\"]}", "");
  char *slow =
      pack("slow", "{\"name\":\"slow\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 300.454545\n");
  o = RUN(SERVER, "dispatch", "--user", "alice", ok, "--wait", "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", bad, "--wait", "--state", state);
  cr_assert_eq(o->status, 1, "%s", o->err);
  free(o);
  o = RUN(SERVER, "dispatch", "--user", "alice", slow, "--state", state);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", o->out);
  free(o);
  cr_assert(wait_state(id, "running", 5000));
  o = RUN(SERVER, "cancel", id, "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  free(o);
  static char body[1 << 17];
  cr_assert_eq(http_get(mport, "/metrics", body, sizeof(body)), 200);
  /* the gauges are the database's: the same counts as `jobs` */
  o = RUN(SERVER, "jobs", "--json", "--limit", "0", "--state", state);
  json_t *jobs = json_loads(o->out, 0, NULL);
  free(o);
  static const char *const states[] = {"queued", "sent",    "running",  "done",
                                       "failed", "expired", "cancelled"};
  for (size_t s = 0; s < sizeof(states) / sizeof(states[0]); s++) {
    size_t want = 0, i;
    json_t *j;
    json_array_foreach(jobs, i, j) want +=
        strcmp(json_string_value(json_object_get(j, "state")), states[s]) == 0;
    char series[64];
    snprintf(series, sizeof(series), "cordon_jobs{state=\"%s\"}", states[s]);
    cr_assert_eq(prom_value(body, series), (double)want, "%s: %s", series, body);
  }
  json_decref(jobs);
  cr_assert_eq(prom_value(body, "cordon_jobs{state=\"done\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_jobs{state=\"failed\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_jobs{state=\"cancelled\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_sessions_online"), 1);
  cr_assert_eq(prom_value(body, "cordon_devices{state=\"active\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_jobs_dispatched_total"), 3);
  cr_assert_eq(prom_value(body, "cordon_jobs_finished_total{state=\"done\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_jobs_finished_total{state=\"failed\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_jobs_finished_total{state=\"cancelled\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_pairings_total"), 1);
  cr_assert_eq(prom_value(body, "cordon_pairing_failures_total{reason=\"unknown_code\"}"), 1);
  cr_assert_eq(prom_value(body, "cordon_dispatch_latency_seconds_count"), 3);
  cr_assert_eq(prom_value(body, "cordon_dispatch_latency_seconds_bucket{le=\"+Inf\"}"), 3);
  cr_assert_geq(prom_value(body, "cordon_job_duration_seconds_count"), 2);
  cr_assert_gt(prom_value(body, "cordon_sent_bytes_total"), 0);
  cr_assert_eq(http_get(mport, "/healthz", body, sizeof(body)), 200);
  cr_assert_str_eq(body, "ok\n");
  cr_assert_eq(http_get(mport, "/nothing", body, sizeof(body)), 404);
  free(ok);
  free(bad);
  free(slow);
}

Test(daemon, a_result_after_its_job_expired_is_logged_late_and_the_job_stays_expired) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg = pack("stuck",
                   "{\"name\":\"stuck\",\"version\":\"1\",\"timeout_s\":2,"
                   "\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "sleep 30\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
  char id[33];
  snprintf(id, sizeof(id), "%.32s", o->out);
  free(o);
  cr_assert(wait_state(id, "running", 5000));
  kill(agent_pid, SIGSTOP); /* its result cannot come before the deadline */
  cr_assert(wait_state(id, "expired", 10000), "state %s", job_state(id, NULL));
  kill(agent_pid, SIGCONT); /* the agent's timeout fires now, and it reports */
  char want[128];
  snprintf(want, sizeof(want), "msg=\"late result\" job=%s ", id);
  cr_assert(wait_log(server_log_path(), want, 10000), "logged late");
  cr_assert(log_has(server_log_path(), " code=late "));
  snprintf(want, sizeof(want), "msg=\"job finished\" job=%s ", id);
  cr_assert(!log_has(server_log_path(), want), "not logged as finished");
  json_t *job;
  cr_assert_str_eq(job_state(id, &job), "expired");
  cr_assert(json_is_object(json_object_get(job, "result")), "kept with the job");
  json_decref(job);
  free(pkg);
}

/* A queued job neither holds a drain up nor is sent during it (sending it
 * would start a job the drain then cuts off): it stays queued for the next
 * daemon, which sends it. The metrics count it as queued. */
Test(daemon, a_drain_neither_waits_for_nor_sends_a_queued_job_and_metrics_count_it) {
  stop(&server_pid, SIGTERM);
  start_server_with((const char *const[]){"--metrics", "127.0.0.1:0", NULL});
  int mport = prom_port_from_log(server_log_path());
  agent_config("{\"max_jobs\": 1}");
  pair("laptop");
  start_agent();
  wait_online();
  char *hold =
      pack("hold", "{\"name\":\"hold\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "sleep 3; echo held\n");
  char *next =
      pack("next", "{\"name\":\"next\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
           "echo next\n");
  char out[400], err[400], id[33], qid[33];
  pid_t waiter = dispatch_wait_running(hold, out, err, id);
  cr_assert(waiter > 0, "the first job runs");
  /* the device is at its max_jobs: the second one waits in the queue */
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", next, "--state", state);
  cr_assert_eq(o->status, 0, "%s", o->err);
  snprintf(qid, sizeof(qid), "%.32s", o->out);
  free(o);
  cr_assert_str_eq(job_state(qid, NULL), "queued");
  static char body[1 << 17];
  cr_assert_eq(http_get(mport, "/metrics", body, sizeof(body)), 200);
  cr_assert_eq(prom_value(body, "cordon_jobs{state=\"queued\"}"), 1, "%s", body);
  cr_assert_eq(prom_value(body, "cordon_jobs{state=\"running\"}"), 1, "%s", body);
  kill(server_pid, SIGTERM);
  int st = wait_exit(server_pid, 15000);
  server_pid = -1;
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
  cr_assert(log_has(server_log_path(), "msg=\"drained: shutting down\" jobs_left=0"));
  char sent[80];
  snprintf(sent, sizeof(sent), "msg=\"job sent\" job=%s ", qid);
  cr_assert(!log_has(server_log_path(), sent), "not sent while draining");
  cr_assert_str_eq(job_state(id, NULL), "done");
  cr_assert_str_eq(job_state(qid, NULL), "queued", "it waits for the next daemon");
  st = wait_exit(waiter, 5000);
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "dispatch --wait status %d", st);
  start_server();
  cr_assert(wait_state(qid, "done", 20000), "state %s", job_state(qid, NULL));
  free(hold);
  free(next);
}

/* The end of a job: done with its output, or failed/expired with a code. */
static const char *wait_final(const char *id, int ms, char why[200]) {
  for (int t = 0; t < ms; t += 50) {
    json_t *job;
    const char *st = job_state(id, &job);
    bool final = strcmp(st, "done") == 0 || strcmp(st, "failed") == 0 ||
                 strcmp(st, "expired") == 0 || strcmp(st, "cancelled") == 0;
    if (final) {
      json_t *res = json_object_get(job, "result");
      const char *out = json_string_value(json_object_get(res, "stdout"));
      const char *code = json_string_value(json_object_get(job, "error"));
      if (!code)
        code = json_string_value(json_object_get(json_object_get(res, "error"), "code"));
      snprintf(why, 200, "%s", strcmp(st, "done") == 0 ? (out ? out : "") : (code ? code : ""));
      json_decref(job);
      return st;
    }
    json_decref(job);
    msleep(50);
  }
  snprintf(why, 200, "still %s", job_state(id, NULL));
  return NULL;
}

/* kill -9 of either side at each step of a job (just sent, running, just
 * finished): the job ends with its result or with an explicit failure,
 * never stuck and never without a word (the durable-write budget of
 * docs/ARCHITECTURE.md keeps this). */
Test(daemon, killing_either_side_at_each_step_ends_the_job_with_a_result_or_a_failure,
     .timeout = 240) {
  pair("laptop");
  start_agent();
  wait_online();
  char *pkg = pack("steps",
                   "{\"name\":\"steps\",\"version\":\"1\",\"timeout_s\":2,"
                   "\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "sleep 0.5; echo ok\n");
  static const char *const steps[] = {"sent", "running", "finished"};
  for (int side = 0; side < 2; side++) {
    for (int k = 0; k < 3; k++) {
      struct out *o = RUN(SERVER, "dispatch", "--user", "alice", pkg, "--state", state);
      cr_assert_eq(o->status, 0, "dispatch: %s", o->err);
      char id[33];
      snprintf(id, sizeof(id), "%.32s", o->out);
      free(o);
      if (k == 1)
        cr_assert(wait_state(id, "running", 5000), "state %s", job_state(id, NULL));
      if (k == 2)
        cr_assert(wait_state(id, "done", 5000), "state %s", job_state(id, NULL));
      if (side == 0) {
        stop(&server_pid, SIGKILL);
        msleep(k == 0 ? 0 : 700); /* the job may end while the server is gone */
        start_server();
      } else {
        stop(&agent_pid, SIGKILL);
        start_agent();
      }
      char why[200];
      const char *st = wait_final(id, 20000, why);
      cr_assert(st, "%s killed after %s: the job did not end (%s)", side ? "agent" : "server",
                steps[k], why);
      if (strcmp(st, "done") == 0)
        cr_assert_str_eq(why, "ok\n", "%s killed after %s", side ? "agent" : "server", steps[k]);
      else
        cr_assert(why[0], "%s killed after %s: %s without an error code", side ? "agent" : "server",
                  steps[k], st);
      /* a job that had finished stays done with its result */
      if (k == 2)
        cr_assert_str_eq(st, "done", "%s killed after finished: %s (%s)", side ? "agent" : "server",
                         st, why);
      wait_online();
    }
  }
  free(pkg);
}
