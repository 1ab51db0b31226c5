/* cordon-agent run as a daemon an operator can trust, with real processes:
 * the real agent binary against a scripted server in this process (the
 * real net/conn layer, message codec, tickets and a .cpkg signed by
 * server/pack.c), real isolated jobs. One run per config directory;
 * `status` and `metrics` from the living agent, not from a file; SIGHUP
 * re-reads the ceiling; SIGTERM drains and the result arrives after the
 * restart exactly once; sd_notify readiness; logfmt lines; exit 3 when
 * the device is gone; staging the job user cannot reach is refused at
 * start. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pwd.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "scripted_server.h"

#define MAX_JOBS 8

struct seen_result {
  uint8_t id[16];
  int n;         /* copies received */
  char code[64]; /* error code, "" for none */
  bool exited;
  long exit_code;
  char out[256];
  bool isolated; /* the sandbox level it ran at */
};

static struct {
  int hellos, running;
  char goaway[64];          /* the last goaway code the agent sent */
  const char *answer_hello; /* NULL: welcome; else a goaway code */
  struct seen_result res[MAX_JOBS];
  int n_res;
} T;

/* ---- the scripted server ---- */

static struct seen_result *result_for(const uint8_t id[16]) {
  for (int i = 0; i < T.n_res; i++)
    if (memcmp(T.res[i].id, id, 16) == 0)
      return &T.res[i];
  cr_assert_lt(T.n_res, MAX_JOBS);
  struct seen_result *r = &T.res[T.n_res++];
  memset(r, 0, sizeof(*r));
  memcpy(r->id, id, 16);
  return r;
}

/* A hello is answered with T.answer_hello's goaway when set; results are
 * recorded (and acked by the scripted server). */
static bool on_msg(struct net_conn *c, const struct msg *m) {
  if (m->type == MSG_HELLO && T.answer_hello) {
    struct msg g = {.type = MSG_GOAWAY};
    g.goaway.code = (char *)T.answer_hello;
    g.goaway.message = "scripted";
    send_msg(c, &g);
    net_conn_flush_close(c, 0);
    return true;
  }
  if (m->type == MSG_HELLO) {
    T.hellos++;
  } else if (m->type == MSG_RUNNING) {
    T.running++;
  } else if (m->type == MSG_GOAWAY) {
    snprintf(T.goaway, sizeof(T.goaway), "%s", m->goaway.code);
  } else if (m->type == MSG_RESULT) {
    struct seen_result *r = result_for(m->result.job_id);
    r->n++;
    snprintf(r->code, sizeof(r->code), "%s", m->result.has_error ? m->result.error.code : "");
    r->exited = m->result.has_exit_code;
    r->exit_code = (long)m->result.exit_code;
    snprintf(r->out, sizeof(r->out), "%.*s", (int)m->result.stdout_buf.len,
             (const char *)m->result.stdout_buf.data);
    r->isolated = m->result.sandbox.has_level && m->result.sandbox.level == MSG_LEVEL_ISOLATED;
  }
  return false;
}

static bool disconnected(void) {
  return S.conn == NULL;
}

static const uint8_t *job_id(int k) {
  static uint8_t ids[MAX_JOBS][16];
  static bool made[MAX_JOBS];
  if (!made[k]) {
    randombytes_buf(ids[k], 16);
    made[k] = true;
  }
  return ids[k];
}

static const uint8_t *want_id;
static int want_n;
static bool have_result(void) {
  for (int i = 0; i < T.n_res; i++)
    if (memcmp(T.res[i].id, want_id, 16) == 0 && T.res[i].n >= want_n)
      return true;
  return false;
}

/* Wait for the n-th copy of id's result. */
static struct seen_result *wait_result(const uint8_t *id, int n, int ms) {
  want_id = id;
  want_n = n;
  cr_assert(spin(ms, have_result), "no result (copy %d) within %d ms; agent log:\n%s", n, ms,
            slurp(S.log));
  return result_for(id);
}

static int copies_of(const uint8_t *id) {
  for (int i = 0; i < T.n_res; i++)
    if (memcmp(T.res[i].id, id, 16) == 0)
      return T.res[i].n;
  return 0;
}
/* ---- the agent's side ---- */

static void write_config(const char *json) {
  char path[300];
  snprintf(path, sizeof(path), "%s/config.json", S.cfg);
  FILE *f = fopen(path, "w");
  fputs(json, f);
  fclose(f);
}
static void setup(void) {
  memset(&T, 0, sizeof(T));
  ss_setup("cordon-daemon", on_msg);
}

static void teardown(void) {
  ss_teardown();
}

static bool alive(pid_t pid) {
  return waitpid(pid, NULL, WNOHANG) == 0;
}
static const char *wanted_line;
static bool log_has_wanted(void) {
  return log_has(wanted_line);
}
static bool wait_log(const char *needle, int ms) {
  wanted_line = needle;
  return spin(ms, log_has_wanted);
}

struct out {
  int status;
  char out[1 << 16], err[1 << 13];
};

/* `cordon-agent --config CFG ARGS...`, synchronously (the server does not
 * run meanwhile: these commands only ask the agent's control socket). */
static struct out *cli(const char *cfg, const char *const *args) {
  struct out *o = calloc(1, sizeof(*o));
  int po[2], pe[2];
  cr_assert(pipe(po) == 0 && pipe(pe) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]);
    close(pe[0]);
    const char *argv[16] = {AGENT, "--config", cfg};
    size_t n = 3;
    for (size_t i = 0; args[i] && n < 15; i++)
      argv[n++] = args[i];
    argv[n] = NULL;
    execv(AGENT, (char **)argv);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  size_t n = 0;
  ssize_t k;
  while ((k = read(po[0], o->out + n, sizeof(o->out) - 1 - n)) > 0)
    n += (size_t)k;
  n = 0;
  while ((k = read(pe[0], o->err + n, sizeof(o->err) - 1 - n)) > 0)
    n += (size_t)k;
  close(po[0]);
  close(pe[0]);
  int st;
  waitpid(pid, &st, 0);
  o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return o;
}

#define CLI(...) cli(S.cfg, (const char *const[]){__VA_ARGS__, NULL})

static json_t *status_json(void) {
  struct out *o = CLI("status", "--json");
  cr_assert_eq(o->status, 0, "status: %s", o->err);
  json_error_t e;
  json_t *j = json_loads(o->out, 0, &e);
  cr_assert(json_is_object(j), "status JSON: %s\n%s", e.text, o->out);
  free(o);
  return j;
}

/* ---- one run per config directory ---- */

Test(agent_daemon, a_second_run_on_the_same_config_is_refused_naming_the_holder, .init = setup,
     .fini = teardown, .timeout = 60) {
  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected), "the first agent did not connect:\n%s", slurp(S.log));
  struct out *o = CLI("run");
  cr_assert_eq(o->status, 2, "second run: %d %s", o->status, o->err);
  char want[64];
  snprintf(want, sizeof(want), "(pid %ld holds ", (long)S.agent);
  cr_assert(strstr(o->err, want), "names the holder: %s", o->err);
  cr_assert(strstr(o->err, "agent.lock"), "%s", o->err);
  cr_assert_eq(strchr(o->err, '\n') - o->err + 1, (long)strlen(o->err), "one line: %s", o->err);
  free(o);
  /* the first one still answers, and is still the one connected */
  json_t *s = status_json();
  cr_assert(json_is_true(json_object_get(s, "running")));
  cr_assert_eq(json_integer_value(json_object_get(s, "pid")), S.agent);
  cr_assert(json_is_true(json_object_get(s, "connected")));
  json_decref(s);
  cr_assert_eq(T.hellos, 1, "the second never connected");
  kill(S.agent, SIGTERM);
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = 0;
  /* the lock went with it: a new run starts */
  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected));
}

/* ---- liveness from the living ---- */

Test(agent_daemon, status_after_kill_9_says_not_running, .init = setup, .fini = teardown,
     .timeout = 60) {
  struct out *o = CLI("status", "--json");
  json_t *s = json_loads(o->out, 0, NULL);
  cr_assert(json_is_false(json_object_get(s, "running")), "before any run: %s", o->out);
  cr_assert(json_is_null(json_object_get(s, "connected")));
  json_decref(s);
  free(o);

  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected));
  s = status_json();
  cr_assert(json_is_true(json_object_get(s, "running")));
  cr_assert(json_is_true(json_object_get(s, "connected")));
  cr_assert(json_is_string(json_object_get(s, "connected_since")));
  cr_assert_eq(json_array_size(json_object_get(s, "jobs_running")), 0);
  cr_assert(json_is_null(json_object_get(s, "last_error")));
  json_decref(s);

  kill(S.agent, SIGKILL);
  waitpid(S.agent, NULL, 0);
  S.agent = 0;
  char sock[300];
  snprintf(sock, sizeof(sock), "%s/agent.sock", S.cfg);
  struct stat st;
  cr_assert_eq(stat(sock, &st), 0, "the killed agent's socket file is still there");
  s = status_json();
  cr_assert(json_is_false(json_object_get(s, "running")), "not running after kill -9");
  cr_assert(json_is_null(json_object_get(s, "connected")), "connected is unknown");
  cr_assert(json_is_null(json_object_get(s, "jobs_running")));
  cr_assert(json_is_true(json_object_get(s, "paired")), "the pairing is still there");
  json_decref(s);
  o = CLI("status");
  cr_assert(strstr(o->out, "\nagent: not running\n"), "the summary on stdout: %s", o->out);
  free(o);
  o = CLI("metrics");
  cr_assert_eq(o->status, 1);
  cr_assert(strstr(o->err, "not running"), "%s", o->err);
  cr_assert_eq(o->out[0], '\0');
  free(o);
  /* a new agent replaces the stale socket (once the killed one's
   * connection is seen closed, so that `connected` is the new one's) */
  cr_assert(spin(10000, disconnected));
  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected));
  s = status_json();
  cr_assert(json_is_true(json_object_get(s, "running")));
  json_decref(s);
}

/* A raw client: the request bytes, the reply line (NUL-terminated). */
static void ask_raw(const char *req, size_t len, char *reply, size_t cap) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  cr_assert_lt(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/agent.sock", S.cfg),
               (int)sizeof(sa.sun_path));
  cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
  cr_assert_eq(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
  size_t n = 0;
  ssize_t k;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  while (n < cap - 1 && poll(&p, 1, 5000) == 1 && (k = read(fd, reply + n, cap - 1 - n)) > 0)
    n += (size_t)k;
  reply[n] = '\0';
  close(fd);
}

Test(agent_daemon, the_control_socket_is_0600_and_refuses_what_is_not_a_request, .init = setup,
     .fini = teardown, .timeout = 60) {
  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected));
  char sock[300];
  snprintf(sock, sizeof(sock), "%s/agent.sock", S.cfg);
  struct stat st;
  cr_assert_eq(stat(sock, &st), 0);
  cr_assert(S_ISSOCK(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, 0600);
  char reply[4096];
  ask_raw("{\"op\":\"shutdown\"}\n", 18, reply, sizeof(reply));
  json_t *j = json_loads(reply, 0, NULL);
  cr_assert(json_is_false(json_object_get(j, "ok")), "%s", reply);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                   "usage");
  json_decref(j);
  static char big[5000];
  memset(big, 'x', sizeof(big));
  ask_raw(big, sizeof(big), reply, sizeof(reply));
  j = json_loads(reply, 0, NULL);
  cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                   "limit_exceeded", "%s", reply);
  json_decref(j);
  ask_raw("{\"op\":\"status\"}\n", 16, reply, sizeof(reply));
  j = json_loads(reply, 0, NULL);
  cr_assert(json_is_true(json_object_get(j, "ok")), "still answering: %s", reply);
  json_decref(j);
  cr_assert(alive(S.agent));
}

/* ---- SIGHUP ---- */

static double metric(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; (p = strstr(p, series)); p += n)
    if ((p == text || p[-1] == '\n') && p[n] == ' ')
      return strtod(p + n + 1, NULL);
  cr_assert_fail("no %s in\n%s", series, text);
  return -1;
}

Test(agent_daemon, sighup_keeps_it_running_and_the_next_job_gets_the_new_ceiling, .init = setup,
     .fini = teardown, .timeout = 90) {
  write_config("{\"net\": true}");
  struct pkg p =
      make_package("net",
                   "{\"name\":\"net\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"capabilities\":{\"net\":true}}",
                   "echo ok\n");
  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected));
  send_job_id(&p, job_id(0));
  struct seen_result *r = wait_result(job_id(0), 1, 20000);
  cr_assert_str_eq(r->code, "", "allowed the network: %s", r->code);
  cr_assert(r->exited && r->exit_code == 0, "%ld %s", r->exit_code, r->out);

  write_config("{\"net\": false}");
  kill(S.agent, SIGHUP);
  cr_assert(wait_log("msg=\"config reloaded\" net=false", 5000), "%s", slurp(S.log));
  cr_assert(alive(S.agent), "SIGHUP does not stop the agent");
  cr_assert(S.conn, "nor its session");
  send_job_id(&p, job_id(1));
  r = wait_result(job_id(1), 1, 20000);
  cr_assert_str_eq(r->code, "capability_denied", "the new ceiling applies");

  /* a broken config.json: logged, the ceiling in force is kept */
  write_config("{\"net\": fals");
  kill(S.agent, SIGHUP);
  cr_assert(wait_log("config reload failed", 5000), "%s", slurp(S.log));
  cr_assert(alive(S.agent));
  send_job_id(&p, job_id(2));
  r = wait_result(job_id(2), 1, 20000);
  cr_assert_str_eq(r->code, "capability_denied");

  write_config("{\"net\": false}"); /* the commands below read it too */
  struct out *o = CLI("metrics");
  cr_assert_eq(o->status, 0, "%s", o->err);
  cr_assert_eq(metric(o->out, "cordon_agent_jobs_total{outcome=\"succeeded\"}"), 1);
  cr_assert_eq(metric(o->out, "cordon_agent_jobs_total{outcome=\"refused\"}"), 2);
  cr_assert_eq(metric(o->out, "cordon_agent_connected"), 1);
  cr_assert_eq(metric(o->out, "cordon_agent_jobs_running"), 0);
  cr_assert_gt(metric(o->out, "cordon_agent_received_bytes_total"), (double)p.size * 3);
  free(o);
  json_t *s = status_json();
  const char *last =
      json_string_value(json_object_get(json_object_get(s, "last_error"), "message"));
  cr_assert(last && strstr(last, "config reload failed"), "the last error: %s", last);
  json_decref(s);
  kill(S.agent, SIGTERM);
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = 0;
}

/* ---- SIGTERM drains ---- */

static const char *spool_path(const uint8_t *id, char *buf, size_t len) {
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", id[i]);
  snprintf(buf, len, "%s/spool/%s.result", S.cfg, hex);
  return buf;
}

static bool one_running(void) {
  return T.running >= 1;
}

Test(agent_daemon, sigterm_during_a_job_drains_and_the_result_arrives_after_restart_once,
     .init = setup, .fini = teardown, .timeout = 90) {
  struct pkg p =
      make_package("nap", "{\"name\":\"nap\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "sleep 2; echo finished\n");
  S.agent = START("--drain-timeout", "30");
  cr_assert(spin(10000, connected));
  send_job_id(&p, job_id(0));
  cr_assert(spin(20000, one_running), "the job did not start:\n%s", slurp(S.log));
  kill(S.agent, SIGTERM);
  cr_assert(spin(5000, disconnected), "the agent closed its session");
  cr_assert_str_eq(T.goaway, "shutdown", "and said why first");
  json_t *s = status_json(); /* still answering while it drains */
  cr_assert(json_is_true(json_object_get(s, "draining")));
  cr_assert_eq(json_array_size(json_object_get(s, "jobs_running")), 1);
  json_decref(s);
  int st = wait_exit(S.agent, 15000);
  S.agent = 0;
  cr_assert_eq(st, 0, "a drained agent exits 0:\n%s", slurp(S.log));
  cr_assert_eq(copies_of(job_id(0)), 0, "the result was not sent on a closed session");
  char spooled[400];
  cr_assert_eq(access(spool_path(job_id(0), spooled, sizeof(spooled)), F_OK), 0,
               "the finished job's result is spooled");
  cr_assert(log_has("msg=\"SIGTERM: stopping\" running=1 drain_timeout_s=30"), "%s", slurp(S.log));

  S.agent = START("--drain-timeout", "30");
  struct seen_result *r = wait_result(job_id(0), 1, 10000);
  cr_assert_str_eq(r->code, "", "it ran to its end: %s", r->code);
  cr_assert(r->exited && r->exit_code == 0);
  cr_assert_str_eq(r->out, "finished\n");
  spin(1000, NULL);
  cr_assert_eq(copies_of(job_id(0)), 1, "exactly once");
  cr_assert_neq(access(spooled, F_OK), 0, "acked: out of the spool");
  /* and not again after another restart */
  kill(S.agent, SIGTERM);
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = START("--drain-timeout", "30");
  cr_assert(spin(10000, connected));
  spin(1000, NULL);
  cr_assert_eq(copies_of(job_id(0)), 1, "exactly once, across restarts");
}

Test(agent_daemon, the_drain_timeout_cancels_what_is_still_running, .init = setup, .fini = teardown,
     .timeout = 90) {
  struct pkg p = make_package(
      "long", "{\"name\":\"long\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
      "sleep 60\n");
  S.agent = START("--drain-timeout", "1");
  cr_assert(spin(10000, connected));
  send_job_id(&p, job_id(0));
  cr_assert(spin(20000, one_running));
  int64_t t0 = now_ms();
  kill(S.agent, SIGTERM);
  int st = wait_exit(S.agent, 15000);
  S.agent = 0;
  cr_assert_eq(st, 0, "%s", slurp(S.log));
  cr_assert_lt(now_ms() - t0, 10000, "it did not wait for the job");
  cr_assert(log_has("cancelling the running jobs\" reason=\"drain timeout\""), "%s", slurp(S.log));
  S.agent = start_agent_env(NULL, NULL);
  struct seen_result *r = wait_result(job_id(0), 1, 10000);
  cr_assert_str_eq(r->code, "agent_stopped", "stopping the agent is not an operator's cancel");
  spin(500, NULL);
  cr_assert_eq(copies_of(job_id(0)), 1);
}

/* ---- the device is gone ---- */

Test(agent_daemon, a_revoked_device_exits_3_and_an_unpaired_one_too, .init = setup,
     .fini = teardown, .timeout = 60) {
  T.answer_hello = MSG_GOAWAY_REVOKED;
  S.agent = start_agent_env(NULL, NULL);
  int st = wait_exit(S.agent, 10000);
  S.agent = 0;
  cr_assert_eq(st, 3, "revoked: exit %d\n%s", st, slurp(S.log));
  cr_assert(log_has("code=revoked"), "%s", slurp(S.log));
  char empty[300];
  snprintf(empty, sizeof(empty), "%s/never-paired", S.dir);
  struct out *o = cli(empty, (const char *const[]){"run", NULL});
  cr_assert_eq(o->status, 3, "not paired: %d %s", o->status, o->err);
  cr_assert(strstr(o->err, "not paired"), "%s", o->err);
  free(o);
}

/* ---- systemd's notification socket ---- */

static int bind_notify(struct sockaddr_un *sa, socklen_t *len, bool abstract) {
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  cr_assert(fd >= 0);
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  if (abstract) {
    int n =
        snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "cordon-notify-%ld", (long)getpid());
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  } else {
    cr_assert_lt(snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/notify", S.dir),
                 (int)sizeof(sa->sun_path));
    *len = sizeof(*sa);
  }
  cr_assert_eq(bind(fd, (struct sockaddr *)sa, *len), 0, "%s", strerror(errno));
  return fd;
}

static char notes[64][600];
static int n_notes;
static int notify_fd;

static void drain_notes(void) {
  char buf[600];
  ssize_t n;
  while (n_notes < 64 && (n = recv(notify_fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) > 0) {
    buf[n] = '\0';
    snprintf(notes[n_notes++], sizeof(notes[0]), "%s", buf);
  }
}

static const char *note_wanted;
static bool have_note(void) {
  drain_notes();
  for (int i = 0; i < n_notes; i++)
    if (strstr(notes[i], note_wanted))
      return true;
  return false;
}

static bool wait_note(const char *what, int ms) {
  note_wanted = what;
  return spin(ms, have_note);
}

Test(agent_daemon, a_notify_socket_hears_ready_status_watchdog_and_stopping, .init = setup,
     .fini = teardown, .timeout = 60) {
  struct sockaddr_un sa;
  socklen_t len;
  notify_fd = bind_notify(&sa, &len, false);
  n_notes = 0;
  char env_sock[200];
  snprintf(env_sock, sizeof(env_sock), "NOTIFY_SOCKET=%s", sa.sun_path);
  const char *env[] = {env_sock, "WATCHDOG_USEC=200000", NULL};
  S.agent = start_agent_env(env, (const char *const[]){"--drain-timeout", "5", NULL});
  cr_assert(wait_note("READY=1", 10000), "no READY=1:\n%s", slurp(S.log));
  int ready = 0;
  while (!strstr(notes[ready], "READY=1"))
    ready++;
  cr_assert(strstr(notes[ready], "\nSTATUS="), "READY=1 comes with a status: %s", notes[ready]);
  cr_assert(wait_note("STATUS=connected to 127.0.0.1:", 10000), "%s", notes[n_notes - 1]);
  cr_assert(wait_note("WATCHDOG=1", 3000), "the loop says it is alive");
  int watchdogs = 0;
  spin(1000, NULL);
  drain_notes();
  for (int i = 0; i < n_notes; i++)
    watchdogs += strcmp(notes[i], "WATCHDOG=1") == 0;
  cr_assert_geq(watchdogs, 5, "every 100 ms for a 200 ms watchdog: %d", watchdogs);
  kill(S.agent, SIGTERM);
  cr_assert(wait_note("STOPPING=1", 5000));
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = 0;
  close(notify_fd);
}

Test(agent_daemon, an_abstract_notify_socket_hears_ready_and_a_watchdog_for_another_pid_is_not_fed,
     .init = setup, .fini = teardown, .timeout = 60) {
  struct sockaddr_un sa;
  socklen_t len;
  notify_fd = bind_notify(&sa, &len, true);
  n_notes = 0;
  char env_sock[200];
  snprintf(env_sock, sizeof(env_sock), "NOTIFY_SOCKET=@%s", sa.sun_path + 1);
  const char *env[] = {env_sock, "WATCHDOG_USEC=100000", "WATCHDOG_PID=1", NULL};
  S.agent = start_agent_env(env, NULL);
  cr_assert(wait_note("READY=1", 10000), "no READY=1:\n%s", slurp(S.log));
  spin(600, NULL);
  note_wanted = "WATCHDOG=1";
  cr_assert(!have_note(), "WATCHDOG_PID names another process");
  close(notify_fd);
}

/* ---- logs ---- */

/* One logfmt line: ts=... level=... prog=... msg=... then key=value
 * pairs; values bare (no space, '"' or '=') or quoted with \" \\ \xNN
 * escapes. Returns the number of pairs (keys[i], vals[i] unescaped), or
 * -1 with why. */
static int parse_logfmt(const char *line, char keys[][32], char vals[][512], int max,
                        const char **why) {
  const char *p = line;
  int n = 0;
  while (*p) {
    if (n == max)
      return *why = "too many pairs", -1;
    int k = 0;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.')
      if (k < 31)
        keys[n][k++] = *p++;
      else
        return *why = "key too long", -1;
    keys[n][k] = '\0';
    if (k == 0 || *p != '=')
      return *why = "expected key=", -1;
    p++;
    int v = 0;
    if (*p == '"') {
      p++;
      while (*p && *p != '"') {
        char c = *p++;
        if (c == '\\') {
          if (*p == '"' || *p == '\\') {
            c = *p++;
          } else if (*p == 'x' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
            char hex[3] = {p[1], p[2], 0};
            c = (char)strtol(hex, NULL, 16);
            p += 3;
          } else {
            return *why = "bad escape", -1;
          }
        } else if ((unsigned char)c < 0x20) {
          return *why = "control byte", -1;
        }
        if (v < 511)
          vals[n][v++] = c;
      }
      if (*p != '"')
        return *why = "unterminated quote", -1;
      p++;
    } else {
      while (*p && *p != ' ') {
        if (*p == '"' || *p == '=' || (unsigned char)*p < 0x20)
          return *why = "bad bare value", -1;
        if (v < 511)
          vals[n][v++] = *p;
        p++;
      }
      if (v == 0)
        return *why = "empty bare value", -1;
    }
    vals[n][v] = '\0';
    n++;
    if (*p == ' ' && p[1])
      p++;
    else if (*p)
      return *why = "expected one space", -1;
  }
  return n;
}

static bool ts_ok(const char *ts) {
  /* 2026-12-01T10:05:47.123Z */
  const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (strlen(ts) != strlen(shape))
    return false;
  for (size_t i = 0; shape[i]; i++)
    if (shape[i] == 'd' ? !isdigit((unsigned char)ts[i]) : ts[i] != shape[i])
      return false;
  return true;
}

static const char *field(char keys[][32], char vals[][512], int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(keys[i], key) == 0)
      return vals[i];
  return NULL;
}

Test(agent_daemon, every_log_line_is_logfmt_with_the_fields_an_operator_needs, .init = setup,
     .fini = teardown, .timeout = 90) {
  struct pkg p = make_package(
      "hello", "{\"name\":\"hello\",\"version\":\"2.1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
      "echo \"a \\\"quoted\\\" line\"; exit 3\n");
  S.agent = START("--log-level", "debug", "--drain-timeout", "5");
  cr_assert(spin(10000, connected));
  send_job_id(&p, job_id(0));
  wait_result(job_id(0), 1, 20000);
  kill(S.agent, SIGTERM);
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = 0;

  char *log = slurp(S.log);
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", job_id(0)[i]);
  static char keys[24][32], vals[24][512];
  int lines = 0;
  bool started = false, finished = false, connected_line = false, ended = false, debug = false;
  for (char *save, *line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    const char *why = "";
    int n = parse_logfmt(line, keys, vals, 24, &why);
    cr_assert_geq(n, 4, "not logfmt (%s): %s", why, line);
    cr_assert_str_eq(keys[0], "ts", "%s", line);
    cr_assert(ts_ok(vals[0]), "RFC 3339 UTC with ms: %s", line);
    cr_assert_str_eq(keys[1], "level");
    cr_assert(strcmp(vals[1], "debug") == 0 || strcmp(vals[1], "info") == 0 ||
                  strcmp(vals[1], "warn") == 0 || strcmp(vals[1], "error") == 0,
              "%s", line);
    debug |= strcmp(vals[1], "debug") == 0;
    cr_assert_str_eq(keys[2], "prog");
    cr_assert_str_eq(vals[2], "cordon-agent");
    cr_assert_str_eq(keys[3], "msg");
    const char *msg = vals[3];
    if (strcmp(msg, "job started") == 0) {
      started = true;
      cr_assert_str_eq(field(keys, vals, n, "job"), hex);
      cr_assert_str_eq(field(keys, vals, n, "package"), "hello@2.1");
      cr_assert_str_eq(field(keys, vals, n, "user"), "alice");
      cr_assert(field(keys, vals, n, "level"), "%s", line);
    } else if (strcmp(msg, "job finished") == 0) {
      finished = true;
      cr_assert_str_eq(field(keys, vals, n, "job"), hex);
      cr_assert_str_eq(field(keys, vals, n, "package"), "hello@2.1");
      cr_assert_str_eq(field(keys, vals, n, "outcome"), "failed");
      cr_assert_str_eq(field(keys, vals, n, "exit_code"), "3");
      cr_assert(field(keys, vals, n, "level"), "%s", line);
      cr_assert(isdigit((unsigned char)field(keys, vals, n, "duration_ms")[0]), "%s", line);
    } else if (strcmp(msg, "connected to the server") == 0) {
      connected_line = true;
      cr_assert(strncmp(field(keys, vals, n, "server"), "127.0.0.1:", 10) == 0, "%s", line);
      cr_assert_str_eq(field(keys, vals, n, "user"), "alice");
    } else if (strcmp(msg, "session ended") == 0) {
      ended = true;
      cr_assert_str_eq(field(keys, vals, n, "reason"), "stopping", "%s", line);
    }
    lines++;
  }
  cr_assert(started && finished && connected_line && ended && debug,
            "started %d finished %d connected %d ended %d debug %d:\n%s", started, finished,
            connected_line, ended, debug, slurp(S.log));
  free(log);

  /* --log-level error: nothing below it */
  (void)!truncate(S.log, 0);
  S.agent = START("--log-level", "error");
  cr_assert(spin(10000, connected));
  kill(S.agent, SIGTERM);
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = 0;
  cr_assert(!log_has("level=info"), "%s", slurp(S.log));
  struct out *o = CLI("run", "--log-level", "loud");
  cr_assert_eq(o->status, 2);
  cr_assert(strstr(o->err, "--log-level"), "%s", o->err);
  free(o);
  o = CLI("status", "--log-level", "debug");
  cr_assert_eq(o->status, 2, "run only");
  free(o);
}

/* ---- staging the job user can reach ---- */

static bool is_root_with_job_user(void) {
  return geteuid() == 0 && getpwnam("cordon-job") != NULL;
}

Test(agent_daemon, a_config_under_a_0700_directory_is_refused_at_start_with_the_mode_it_needs,
     .init = setup, .fini = teardown, .timeout = 90) {
  if (!is_root_with_job_user())
    cr_skip_test("needs root and the cordon-job account (scripts/test-setup.sh)");
  char priv[150];
  snprintf(priv, sizeof(priv), "%s/private", S.dir);
  cr_assert_eq(mkdir(priv, 0700), 0);
  snprintf(S.cfg, sizeof(S.cfg), "%s/agent", priv);
  pair_agent(S.cfg);
  struct out *o = CLI("run");
  cr_assert_eq(o->status, 2, "refused at start: %d %s", o->status, o->err);
  char want[400];
  snprintf(want, sizeof(want), "%s is mode 0700", priv);
  cr_assert(strstr(o->err, want), "names the directory and its mode: %s", o->err);
  snprintf(want, sizeof(want), "needs o+x (chmod o+x %s, mode 0701)", priv);
  cr_assert(strstr(o->err, want), "and the mode it needs: %s", o->err);
  cr_assert(strstr(o->err, "cordon-agent: config_invalid: the job user cordon-job cannot reach "),
            "%s", o->err);
  cr_assert_eq(strchr(o->err, '\n') - o->err + 1, (long)strlen(o->err), "one line: %s", o->err);
  free(o);
  cr_assert_eq(T.hellos, 0, "it never connected");
  json_t *s = status_json();
  json_t *staging = json_object_get(s, "staging");
  cr_assert(json_is_false(json_object_get(staging, "reachable")), "status says so too");
  cr_assert(strstr(json_string_value(json_object_get(staging, "problem")), "chmod o+x"));
  json_decref(s);

  /* searchable (not listable) by others: jobs run, isolated */
  cr_assert_eq(chmod(priv, 0711), 0);
  s = status_json();
  cr_assert(json_is_true(json_object_get(json_object_get(s, "staging"), "reachable")));
  json_decref(s);
  struct pkg p =
      make_package("iso", "{\"name\":\"iso\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}",
                   "cat run.sh >/dev/null && echo staged\n");
  S.agent = START("--drain-timeout", "5");
  cr_assert(spin(10000, connected), "%s", slurp(S.log));
  send_job_id(&p, job_id(0));
  struct seen_result *r = wait_result(job_id(0), 1, 20000);
  cr_assert_str_eq(r->code, "", "%s", r->code);
  cr_assert(r->exited && r->exit_code == 0);
  cr_assert_str_eq(r->out, "staged\n");
  cr_assert(r->isolated, "at level isolated");
  kill(S.agent, SIGTERM);
  cr_assert_eq(wait_exit(S.agent, 10000), 0);
  S.agent = 0;
}

Test(agent_daemon, status_checks_the_job_users_reach_by_owner_group_and_other_bits, .init = setup,
     .fini = teardown, .timeout = 60) {
  if (!is_root_with_job_user())
    cr_skip_test("needs root and the cordon-job account (scripts/test-setup.sh)");
  struct passwd *pw = getpwnam("cordon-job");
  const struct {
    unsigned mode;
    bool group_is_job_users;
    bool reachable;
    const char *needs;
  } cases[] = {
      {0700, false, false, "needs o+x"}, {0701, false, true, NULL},
      {0740, true, false, "needs g+x"},  {0750, true, true, NULL},
      {0705, true, false, "needs g+x"}, /* the group's bits decide, not the others' */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char parent[200], cfg[240];
    snprintf(parent, sizeof(parent), "%s/p%zu", S.dir, i);
    cr_assert_eq(mkdir(parent, 0700), 0);
    cr_assert_eq(chown(parent, 0, cases[i].group_is_job_users ? pw->pw_gid : 0), 0);
    cr_assert_eq(chmod(parent, cases[i].mode), 0);
    snprintf(cfg, sizeof(cfg), "%s/agent", parent); /* not made yet: its parent is checked */
    struct out *o = cli(cfg, (const char *const[]){"status", "--json", NULL});
    cr_assert_eq(o->status, 0, "%s", o->err);
    json_t *s = json_loads(o->out, 0, NULL);
    json_t *st = json_object_get(s, "staging");
    cr_assert_eq(json_is_true(json_object_get(st, "reachable")), cases[i].reachable,
                 "mode %04o: %s", cases[i].mode, o->out);
    const char *problem = json_string_value(json_object_get(st, "problem"));
    if (cases[i].needs)
      cr_assert(problem && strstr(problem, cases[i].needs), "mode %04o: %s", cases[i].mode,
                problem);
    json_decref(s);
    free(o);
  }
}
