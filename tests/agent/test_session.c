/* agent/session.c at the edges, with real processes: the real agent
 * binary against a scripted server in this process.
 * - A clock step inside a live session: the test steps the server's clock
 *   (the same as the agent's clock stepping the other way). The agent
 *   learns the server's clock from every ping and pong, so a step is
 *   absorbed within one ping interval: a running job keeps running, and
 *   the tickets after the next pong are judged on the server's new time.
 * - A goaway's retry_ms: the agent does not reconnect sooner. */
#include "scripted_server.h"

#define STEP_MS (-15 * 60 * 1000) /* the server's clock goes back 15 min */

static struct {
  int hellos;
  int64_t hello_ms[4];
  uint32_t goaway_retry_ms; /* answer the first hello with goaway shutdown and this */
  int pongs_after_step, running;
  struct {
    uint8_t id[16];
    char code[64], out[64];
    int n;
  } res[4];
  int n_res;
} T;

/* The first hello may get a goaway; pongs carry the server's clock;
 * results are recorded (and acked by the scripted server). */
static bool on_msg(struct net_conn *c, const struct msg *m) {
  if (m->type == MSG_HELLO && T.hellos < 4)
    T.hello_ms[T.hellos] = now_ms();
  if (m->type == MSG_HELLO && T.hellos++ == 0 && T.goaway_retry_ms != UINT32_MAX) {
    struct msg g = {.type = MSG_GOAWAY};
    g.goaway.code = MSG_GOAWAY_SHUTDOWN;
    g.goaway.message = "scripted";
    g.goaway.has_retry_ms = T.goaway_retry_ms > 0;
    g.goaway.retry_ms = T.goaway_retry_ms;
    send_msg(c, &g);
    net_conn_flush_close(c, 0);
    return true;
  }
  if (m->type == MSG_PING) {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m->ping.nonce;
    p.pong.has_time_ms = true;
    p.pong.time_ms = (uint64_t)server_now();
    send_msg(c, &p);
    if (S.skew_ms)
      T.pongs_after_step++;
    return true;
  }
  if (m->type == MSG_RUNNING) {
    T.running++;
  } else if (m->type == MSG_RESULT) {
    int i = 0;
    while (i < T.n_res && memcmp(T.res[i].id, m->result.job_id, 16) != 0)
      i++;
    cr_assert_lt(i, 4);
    if (i == T.n_res)
      memcpy(T.res[T.n_res++].id, m->result.job_id, 16);
    T.res[i].n++;
    snprintf(T.res[i].code, sizeof(T.res[i].code), "%s",
             m->result.has_error ? m->result.error.code : "");
    snprintf(T.res[i].out, sizeof(T.res[i].out), "%.*s", (int)m->result.stdout_buf.len,
             (const char *)m->result.stdout_buf.data);
  }
  return false;
}

/* A package that runs script with /bin/sh. */
static struct pkg make_script_package(const char *name, const char *script) {
  char manifest[200];
  snprintf(manifest, sizeof(manifest),
           "{\"name\":\"%s\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}", name);
  return make_package(name, manifest, script);
}

static void setup(void) {
  memset(&T, 0, sizeof(T));
  T.goaway_retry_ms = UINT32_MAX; /* none: welcome at once */
  ss_setup("cordon-clock", on_msg);
}

static void teardown(void) {
  ss_teardown();
}

static void start_agent(void) {
  S.agent = start_agent_env(NULL, NULL);
}

static bool one_running(void) {
  return T.running >= 1;
}
static bool a_pong_after_the_step(void) {
  return T.pongs_after_step >= 1;
}
static int find(const uint8_t id[16]) {
  for (int i = 0; i < T.n_res; i++)
    if (memcmp(T.res[i].id, id, 16) == 0)
      return i;
  return -1;
}

static const char *code_of(const uint8_t id[16]) {
  int i = find(id);
  return i < 0 ? NULL : T.res[i].code;
}

static const char *out_of(const uint8_t id[16]) {
  int i = find(id);
  return i < 0 ? NULL : T.res[i].out;
}

static const uint8_t *wanted;
static bool have_wanted(void) {
  return find(wanted) >= 0;
}

/* Serve until job id's result is in: its code ("" for none). */
static const char *wait_code(const uint8_t id[16], int ms) {
  wanted = id;
  cr_assert(spin(ms, have_wanted), "no result:\n%s", slurp(S.log));
  return code_of(id);
}

Test(session, a_clock_step_inside_a_session_is_absorbed_at_the_next_pong_and_jobs_keep_running,
     .init = setup, .fini = teardown, .timeout = 90) {
  struct pkg slow = make_script_package("slow", "sleep 14; echo slept\n");
  struct pkg quick = make_script_package("quick", "echo quick\n");
  start_agent();
  cr_assert(spin(10000, connected), "%s", slurp(S.log));
  uint8_t a[16], b[16], c[16];
  randombytes_buf(a, 16), randombytes_buf(b, 16), randombytes_buf(c, 16);
  send_job_id(&slow, a);
  cr_assert(spin(20000, one_running), "%s", slurp(S.log));

  S.skew_ms = STEP_MS; /* the step */
  send_job_id(&quick, b);
  cr_assert_str_eq(wait_code(b, 5000), "ticket_expired",
                   "right after the step the old offset judges the ticket: the step is real");
  /* the agent pings after 10 s of quiet; the pong carries the new time */
  cr_assert(spin(20000, a_pong_after_the_step), "%s", slurp(S.log));
  spin(200, NULL);
  send_job_id(&quick, c);
  cr_assert_str_eq(wait_code(c, 20000), "", "after the pong the new clock judges it: it ran");
  cr_assert_str_eq(wait_code(a, 30000), "", "the job that ran across the step kept running");
  cr_assert_str_eq(out_of(a), "slept\n");
  cr_assert(log_has("the server's clock moved against this machine's boot-time clock"),
            "and it is logged");
}

static bool two_hellos(void) {
  return T.hellos >= 2;
}

Test(session, a_goaway_retry_ms_is_waited_before_reconnecting, .init = setup, .fini = teardown,
     .timeout = 60) {
  T.goaway_retry_ms = 3000;
  start_agent();
  cr_assert(spin(20000, two_hellos), "%s", slurp(S.log));
  int64_t waited = T.hello_ms[1] - T.hello_ms[0];
  cr_assert_geq(waited, 3000, "not sooner than retry_ms: %lld ms", (long long)waited);
  cr_assert_lt(waited, 6000, "and not much later: %lld ms", (long long)waited);
  cr_assert(spin(5000, connected));
  cr_assert(log_has("reconnecting when the server asked"), "%s", slurp(S.log));
}

Test(session, a_goaway_without_retry_ms_reconnects_with_the_backoff, .init = setup,
     .fini = teardown, .timeout = 60) {
  T.goaway_retry_ms = 0;
  start_agent();
  cr_assert(spin(20000, two_hellos), "%s", slurp(S.log));
  int64_t waited = T.hello_ms[1] - T.hello_ms[0];
  cr_assert_lt(waited, 2000, "the first backoff is 0.25..0.5 s: %lld ms", (long long)waited);
}
