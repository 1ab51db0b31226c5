/* agent/session.c at the edges, with real processes: the real agent
 * binary against a scripted server in this process.
 * - A clock step inside a live session: the test steps the server's clock
 *   (the same as the agent's clock stepping the other way). The agent
 *   learns the server's clock from every ping and pong, so a step is
 *   absorbed within one ping interval: a running job keeps running, and
 *   the tickets after the next pong are judged on the server's new time.
 * - A goaway's retry_ms: the agent does not reconnect sooner. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/state.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/ticket.h"
#include "server/pack.h"

#define AGENT CORDON_BINARY_DIR "/cordon-agent"
#define STEP_MS (-15 * 60 * 1000) /* the server's clock goes back 15 min */

struct pkg {
  char path[300];
  uint8_t hash[32];
  uint64_t size;
};

static struct {
  uv_loop_t loop;
  uv_timer_t tick;
  struct net_server *srv;
  uint8_t server_priv[32], server_pub[32], ticket_pk[32], ticket_sk[64], pub_pk[32], pub_sk[64];
  uint8_t device_id[16], session_id[16];
  struct net_conn *conn;
  int64_t skew_ms; /* the scripted server's clock: the real one + this */
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
  char dir[128], cfg[200], log[240];
  pid_t agent;
} T;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t server_now(void) {
  return now_ms() + T.skew_ms;
}

static void send_msg(struct net_conn *c, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(m, &buf, &len, NULL), 0);
  net_conn_send(c, buf, len);
  free(buf);
}

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct msg m;
  if (msg_decode(data, len, &m, NULL) < 0)
    return;
  if (m.type == MSG_HELLO && T.hellos < 4)
    T.hello_ms[T.hellos] = now_ms();
  if (m.type == MSG_HELLO && T.hellos++ == 0 && T.goaway_retry_ms != UINT32_MAX) {
    struct msg g = {.type = MSG_GOAWAY};
    g.goaway.code = MSG_GOAWAY_SHUTDOWN;
    g.goaway.message = "scripted";
    g.goaway.has_retry_ms = T.goaway_retry_ms > 0;
    g.goaway.retry_ms = T.goaway_retry_ms;
    send_msg(c, &g);
    net_conn_flush_close(c, 0);
  } else if (m.type == MSG_HELLO) {
    struct msg w = {.type = MSG_WELCOME};
    w.welcome.version = MSG_PROTO_VERSION_MAX;
    w.welcome.time_ms = (uint64_t)server_now();
    randombytes_buf(w.welcome.server_id, 16);
    randombytes_buf(T.session_id, 16);
    memcpy(w.welcome.session_id, T.session_id, 16);
    w.welcome.ping_ms = 15000;
    send_msg(c, &w);
    T.conn = c;
  } else if (m.type == MSG_PING) {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m.ping.nonce;
    p.pong.has_time_ms = true;
    p.pong.time_ms = (uint64_t)server_now();
    send_msg(c, &p);
    if (T.skew_ms)
      T.pongs_after_step++;
  } else if (m.type == MSG_RUNNING) {
    T.running++;
  } else if (m.type == MSG_RESULT) {
    int i = 0;
    while (i < T.n_res && memcmp(T.res[i].id, m.result.job_id, 16) != 0)
      i++;
    cr_assert_lt(i, 4);
    if (i == T.n_res)
      memcpy(T.res[T.n_res++].id, m.result.job_id, 16);
    T.res[i].n++;
    snprintf(T.res[i].code, sizeof(T.res[i].code), "%s",
             m.result.has_error ? m.result.error.code : "");
    snprintf(T.res[i].out, sizeof(T.res[i].out), "%.*s", (int)m.result.stdout_buf.len,
             (const char *)m.result.stdout_buf.data);
    struct msg ack = {.type = MSG_ACK};
    memcpy(ack.ack.job_id, m.result.job_id, 16);
    send_msg(c, &ack);
  }
  msg_release(&m);
}

static void on_close(struct net_conn *c, int err) {
  (void)err;
  if (c == T.conn)
    T.conn = NULL;
}

static int on_ready(struct net_conn *c) {
  (void)c;
  return 0;
}

static const struct net_conn_ops ops = {
    .on_ready = on_ready, .on_record = on_record, .on_close = on_close};

static void on_tick(uv_timer_t *t) {
  (void)t;
}

static bool spin(int ms, bool (*cond)(void)) {
  int64_t end = now_ms() + ms;
  while (!(cond && cond()) && now_ms() < end)
    uv_run(&T.loop, UV_RUN_ONCE);
  return cond && cond();
}

static char *slurp(const char *path) {
  static char buf[1 << 16];
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = '\0';
  return buf;
}

static struct pkg make_package(const char *name, const char *script) {
  struct pkg p;
  char src[300], path[340];
  snprintf(src, sizeof(src), "%s/src-%s", T.dir, name);
  cr_assert_eq(mkdir(src, 0755), 0);
  snprintf(path, sizeof(path), "%s/manifest.json", src);
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"name\":\"%s\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}", name);
  fclose(f);
  snprintf(path, sizeof(path), "%s/run.sh", src);
  f = fopen(path, "w");
  fputs(script, f);
  fclose(f);
  snprintf(p.path, sizeof(p.path), "%s/%s.cpkg", T.dir, name);
  struct pack_summary sum;
  struct cordon_diag d = {{0}};
  cr_assert_eq(pack_dir(src, p.path, T.pub_sk, &sum, &d), 0, "%s", d.msg);
  memcpy(p.hash, sum.index_hash, 32);
  p.size = sum.size;
  return p;
}

/* A job with a ticket issued on the server's clock, valid for 10 min. */
static void send_job(const struct pkg *p, const uint8_t id[16]) {
  cr_assert(T.conn);
  struct ticket t = {0};
  memcpy(t.job_id, id, 16);
  memcpy(t.device_id, T.device_id, 16);
  ticket_user_tag("alice", t.user_tag);
  memcpy(t.session_id, T.session_id, 16);
  memcpy(t.index_hash, p->hash, 32);
  ticket_args_hash(NULL, 0, t.args_hash);
  t.issued_ms = (uint64_t)server_now();
  t.expires_ms = t.issued_ms + 600000;
  uint8_t body[TICKET_BODY_LEN];
  ticket_encode(&t, body);
  struct msg m = {.type = MSG_JOB};
  memcpy(m.job.job_id, id, 16);
  m.job.ticket.data = body;
  m.job.ticket.len = sizeof(body);
  ticket_sign(body, T.ticket_sk, m.job.ticket_sig);
  memcpy(m.job.pkg_hash, p->hash, 32);
  m.job.pkg_size = p->size;
  send_msg(T.conn, &m);
  FILE *f = fopen(p->path, "rb");
  static uint8_t buf[32768];
  uint64_t off = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    struct msg ch = {.type = MSG_CHUNK};
    memcpy(ch.chunk.job_id, id, 16);
    ch.chunk.offset = off;
    ch.chunk.data.data = buf;
    ch.chunk.data.len = n;
    send_msg(T.conn, &ch);
    off += n;
  }
  fclose(f);
}

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  memset(&T, 0, sizeof(T));
  T.goaway_retry_ms = UINT32_MAX; /* none: welcome at once */
  snprintf(T.dir, sizeof(T.dir), "/tmp/cordon-clock-XXXXXX");
  cr_assert(mkdtemp(T.dir));
  chmod(T.dir, 0755);
  snprintf(T.cfg, sizeof(T.cfg), "%s/agent", T.dir);
  snprintf(T.log, sizeof(T.log), "%s/agent.log", T.dir);
  noise_keypair_generate(T.server_pub, T.server_priv);
  crypto_sign_keypair(T.ticket_pk, T.ticket_sk);
  crypto_sign_keypair(T.pub_pk, T.pub_sk);
  randombytes_buf(T.device_id, 16);
  uv_loop_init(&T.loop);
  uv_timer_init(&T.loop, &T.tick);
  uv_timer_start(&T.tick, on_tick, 10, 10);
  struct net_limits lim;
  net_limits_default(&lim);
  cr_assert_eq(net_server_new(&T.loop, "127.0.0.1", 0, T.server_priv, 1u << NOISE_MODE_SESSION,
                              &lim, &ops, NULL, &T.srv),
               0);
  uint8_t agent_pub[32], *agent_priv = sodium_malloc(32);
  noise_keypair_generate(agent_pub, agent_priv);
  struct agent_pairing p = {0};
  snprintf(p.host, sizeof(p.host), "127.0.0.1");
  p.port = net_server_port(T.srv);
  memcpy(p.server_key, T.server_pub, 32);
  memcpy(p.device_id, T.device_id, 16);
  snprintf(p.user, sizeof(p.user), "alice");
  snprintf(p.name, sizeof(p.name), "test");
  memcpy(p.ticket_key, T.ticket_pk, 32);
  uint8_t pubs[1][32];
  memcpy(pubs[0], T.pub_pk, 32);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_pairing_save(T.cfg, agent_priv, &p, (const uint8_t(*)[32])pubs, 1, &d), 0,
               "%s", d.msg);
  sodium_free(agent_priv);
}

static void teardown(void) {
  if (T.agent > 0) {
    kill(T.agent, SIGKILL);
    waitpid(T.agent, NULL, 0);
  }
  net_server_close(T.srv);
  uv_close((uv_handle_t *)&T.tick, NULL);
  uv_run(&T.loop, UV_RUN_DEFAULT);
  uv_loop_close(&T.loop);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", T.dir);
  (void)!system(cmd);
}

static void start_agent(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(T.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    execl(AGENT, AGENT, "--config", T.cfg, "run", (char *)NULL);
    _exit(127);
  }
  T.agent = pid;
}

static bool connected(void) {
  return T.conn != NULL;
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
  cr_assert(spin(ms, have_wanted), "no result:\n%s", slurp(T.log));
  return code_of(id);
}

Test(session, a_clock_step_inside_a_session_is_absorbed_at_the_next_pong_and_jobs_keep_running,
     .init = setup, .fini = teardown, .timeout = 90) {
  struct pkg slow = make_package("slow", "sleep 14; echo slept\n");
  struct pkg quick = make_package("quick", "echo quick\n");
  start_agent();
  cr_assert(spin(10000, connected), "%s", slurp(T.log));
  uint8_t a[16], b[16], c[16];
  randombytes_buf(a, 16), randombytes_buf(b, 16), randombytes_buf(c, 16);
  send_job(&slow, a);
  cr_assert(spin(20000, one_running), "%s", slurp(T.log));

  T.skew_ms = STEP_MS; /* the step */
  send_job(&quick, b);
  cr_assert_str_eq(wait_code(b, 5000), "ticket_expired",
                   "right after the step the old offset judges the ticket: the step is real");
  /* the agent pings after 10 s of quiet; the pong carries the new time */
  cr_assert(spin(20000, a_pong_after_the_step), "%s", slurp(T.log));
  spin(200, NULL);
  send_job(&quick, c);
  cr_assert_str_eq(wait_code(c, 20000), "", "after the pong the new clock judges it: it ran");
  cr_assert_str_eq(wait_code(a, 30000), "", "the job that ran across the step kept running");
  cr_assert_str_eq(out_of(a), "slept\n");
  cr_assert(strstr(slurp(T.log), "the clock offset to the server changed"), "and it is logged");
}

static bool two_hellos(void) {
  return T.hellos >= 2;
}

Test(session, a_goaway_retry_ms_is_waited_before_reconnecting, .init = setup, .fini = teardown,
     .timeout = 60) {
  T.goaway_retry_ms = 3000;
  start_agent();
  cr_assert(spin(20000, two_hellos), "%s", slurp(T.log));
  int64_t waited = T.hello_ms[1] - T.hello_ms[0];
  cr_assert_geq(waited, 3000, "not sooner than retry_ms: %lld ms", (long long)waited);
  cr_assert_lt(waited, 6000, "and not much later: %lld ms", (long long)waited);
  cr_assert(spin(5000, connected));
  cr_assert(strstr(slurp(T.log), "reconnecting when the server asked"), "%s", slurp(T.log));
}

Test(session, a_goaway_without_retry_ms_reconnects_with_the_backoff, .init = setup,
     .fini = teardown, .timeout = 60) {
  T.goaway_retry_ms = 0;
  start_agent();
  cr_assert(spin(20000, two_hellos), "%s", slurp(T.log));
  int64_t waited = T.hello_ms[1] - T.hello_ms[0];
  cr_assert_lt(waited, 2000, "the first backoff is 0.25..0.5 s: %lld ms", (long long)waited);
}
