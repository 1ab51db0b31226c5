/* The scripted server the agent tests run the real `cordon-agent run`
 * against, in the test's process: the real net/conn layer (Noise session
 * handshake), the real message codec, tickets signed with a key the agent
 * was paired with and .cpkg packages signed by server/pack.c. Its state is
 * S; a test keeps its own state beside it.
 *
 * Every record goes first to S.on_msg (when set): it returns true when it
 * has dealt with the message itself. Otherwise a hello is welcomed
 * (version S.version, the server's clock, S.servers), a ping is ponged and a result
 * acked; anything else is dropped. The helpers are static, one copy per
 * test file, like tests/server/e2e.h. */
#ifndef CORDON_TESTS_AGENT_SCRIPTED_SERVER_H
#define CORDON_TESTS_AGENT_SCRIPTED_SERVER_H

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
#define SS_FN static __attribute__((unused))

struct pkg {
  char path[300];
  uint8_t hash[32];
  uint64_t size;
};

static struct {
  uv_loop_t loop;
  uv_timer_t tick;
  struct net_server *srv;
  uint8_t server_priv[32], server_pub[32];
  uint8_t ticket_pk[32], ticket_sk[64];
  uint8_t pub_pk[32], pub_sk[64];
  uint8_t device_id[16], session_id[16];
  struct net_conn *conn; /* the live session */
  int closes;            /* connections closed */
  int64_t skew_ms;       /* the scripted server's clock: the real one + this */
  uint16_t version;      /* what the welcome says */
  char **servers;        /* what the welcome lists (welcome.servers; NULL: none) */
  size_t n_servers;
  bool (*on_msg)(struct net_conn *c, const struct msg *m);
  char dir[128], cfg[200], log[240];
  pid_t agent;
} S;

SS_FN int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

SS_FN int64_t server_now(void) {
  return now_ms() + S.skew_ms;
}

/* The file at path (up to 256 KiB), in a new string ("" when unreadable). */
SS_FN char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return strdup("");
  static char buf[1 << 18];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

SS_FN bool log_has(const char *needle) {
  char *s = slurp(S.log);
  bool has = strstr(s, needle) != NULL;
  free(s);
  return has;
}

SS_FN void send_msg(struct net_conn *c, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(m, &buf, &len, NULL), 0);
  net_conn_send(c, buf, len);
  free(buf);
}

/* Welcome c as a new session (a fresh session id); it is the live one. */
SS_FN void ss_welcome(struct net_conn *c) {
  struct msg w = {.type = MSG_WELCOME};
  w.welcome.version = S.version;
  w.welcome.time_ms = (uint64_t)server_now();
  randombytes_buf(w.welcome.server_id, 16);
  randombytes_buf(S.session_id, 16);
  memcpy(w.welcome.session_id, S.session_id, 16);
  w.welcome.ping_ms = 15000;
  w.welcome.servers = S.servers;
  w.welcome.n_servers = S.n_servers;
  send_msg(c, &w);
  S.conn = c;
}

SS_FN void ss_ack(struct net_conn *c, const uint8_t job_id[16]) {
  struct msg ack = {.type = MSG_ACK};
  memcpy(ack.ack.job_id, job_id, 16);
  send_msg(c, &ack);
}

SS_FN void ss_on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct msg m;
  if (msg_decode(data, len, &m, NULL) < 0)
    return;
  if (S.on_msg && S.on_msg(c, &m)) {
    /* the test's own */
  } else if (m.type == MSG_HELLO) {
    ss_welcome(c);
  } else if (m.type == MSG_PING) {
    struct msg p = {.type = MSG_PONG};
    p.pong.nonce = m.ping.nonce;
    send_msg(c, &p);
  } else if (m.type == MSG_RESULT) {
    ss_ack(c, m.result.job_id);
  }
  msg_release(&m);
}

SS_FN void ss_on_close(struct net_conn *c, int err) {
  (void)err;
  if (c == S.conn)
    S.conn = NULL;
  S.closes++;
}

SS_FN int ss_on_ready(struct net_conn *c) {
  (void)c;
  return 0;
}

static const struct net_conn_ops ss_ops = {
    .on_ready = ss_on_ready, .on_record = ss_on_record, .on_close = ss_on_close};

SS_FN void ss_on_tick(uv_timer_t *t) {
  (void)t;
}

/* Run the server until cond() holds or ms pass; returns cond(). */
SS_FN bool spin(int ms, bool (*cond)(void)) {
  int64_t end = now_ms() + ms;
  while (!(cond && cond()) && now_ms() < end)
    uv_run(&S.loop, UV_RUN_ONCE);
  return cond && cond();
}

SS_FN bool connected(void) {
  return S.conn != NULL;
}

/* A package signed by the publisher the agent trusts. */
SS_FN struct pkg make_package(const char *name, const char *manifest, const char *script) {
  struct pkg p;
  char src[300], path[340];
  snprintf(src, sizeof(src), "%s/src-%s", S.dir, name);
  cr_assert_eq(mkdir(src, 0755), 0);
  snprintf(path, sizeof(path), "%s/manifest.json", src);
  FILE *f = fopen(path, "w");
  fputs(manifest, f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/run.sh", src);
  f = fopen(path, "w");
  fputs(script, f);
  fclose(f);
  snprintf(p.path, sizeof(p.path), "%s/%s.cpkg", S.dir, name);
  struct pack_summary sum;
  struct cordon_diag d = {{0}};
  cr_assert_eq(pack_dir(src, p.path, S.pub_sk, &sum, &d), 0, "%s", d.msg);
  memcpy(p.hash, sum.index_hash, 32);
  p.size = sum.size;
  return p;
}

/* A ticket for job id of package index_hash on the live session: the
 * paired device, user alice, no args, issued on the server's clock and
 * valid for 10 min. */
SS_FN struct ticket ss_ticket(const uint8_t id[16], const uint8_t index_hash[32]) {
  struct ticket t = {0};
  memcpy(t.job_id, id, 16);
  memcpy(t.device_id, S.device_id, 16);
  ticket_user_tag("alice", t.user_tag);
  memcpy(t.session_id, S.session_id, 16);
  memcpy(t.index_hash, index_hash, 32);
  ticket_args_hash(NULL, 0, t.args_hash);
  t.issued_ms = (uint64_t)server_now();
  t.expires_ms = t.issued_ms + 600000;
  return t;
}

/* The job message for ticket t (encoded into body, signed with the ticket
 * key) and a package of pkg_size bytes hashing to t's index hash. */
SS_FN struct msg ss_job(const struct ticket *t, uint8_t body[TICKET_BODY_LEN], uint64_t pkg_size) {
  ticket_encode(t, body);
  struct msg m = {.type = MSG_JOB};
  memcpy(m.job.job_id, t->job_id, 16);
  m.job.ticket.data = body;
  m.job.ticket.len = TICKET_BODY_LEN;
  ticket_sign(body, S.ticket_sk, m.job.ticket_sig);
  memcpy(m.job.pkg_hash, t->index_hash, 32);
  m.job.pkg_size = pkg_size;
  return m;
}

/* Dispatch pkg as job id on the live session: the job (ss_ticket's
 * ticket), its chunks. */
SS_FN void send_job_id(const struct pkg *p, const uint8_t id[16]) {
  cr_assert(S.conn, "no session to send the job on");
  struct ticket t = ss_ticket(id, p->hash);
  uint8_t body[TICKET_BODY_LEN];
  struct msg m = ss_job(&t, body, p->size);
  send_msg(S.conn, &m);
  FILE *f = fopen(p->path, "rb");
  cr_assert(f);
  static uint8_t buf[32768];
  uint64_t off = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    struct msg ch = {.type = MSG_CHUNK};
    memcpy(ch.chunk.job_id, id, 16);
    ch.chunk.offset = off;
    ch.chunk.data.data = buf;
    ch.chunk.data.len = n;
    send_msg(S.conn, &ch);
    off += n;
  }
  fclose(f);
}

/* Pair an agent config directory cfg with this server (user alice, the
 * ticket key, one trusted publisher: pub_pk). */
SS_FN void pair_agent(const char *cfg) {
  uint8_t agent_pub[32], *agent_priv = sodium_malloc(32);
  noise_keypair_generate(agent_pub, agent_priv);
  struct agent_pairing p = {0};
  snprintf(p.host, sizeof(p.host), "127.0.0.1");
  p.port = net_server_port(S.srv);
  memcpy(p.server_key, S.server_pub, 32);
  memcpy(p.device_id, S.device_id, 16);
  snprintf(p.user, sizeof(p.user), "alice");
  snprintf(p.name, sizeof(p.name), "test");
  memcpy(p.ticket_key, S.ticket_pk, 32);
  uint8_t pubs[1][32];
  memcpy(pubs[0], S.pub_pk, 32);
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_pairing_save(cfg, agent_priv, &p, (const uint8_t(*)[32])pubs, 1, &d), 0, "%s",
               d.msg);
  sodium_free(agent_priv);
}

/* A fresh server on an ephemeral loopback port, its keys, a temporary
 * directory /tmp/<prefix>-XXXXXX (0755) and an agent config directory in
 * it (S.cfg) paired with the server; the agent logs to S.log. */
SS_FN void ss_setup(const char *prefix, bool (*on_msg)(struct net_conn *c, const struct msg *m)) {
  cr_assert(sodium_init() >= 0);
  memset(&S, 0, sizeof(S));
  S.version = MSG_PROTO_VERSION_MAX;
  S.on_msg = on_msg;
  snprintf(S.dir, sizeof(S.dir), "/tmp/%s-XXXXXX", prefix);
  cr_assert(mkdtemp(S.dir));
  chmod(S.dir, 0755);
  snprintf(S.cfg, sizeof(S.cfg), "%s/agent", S.dir);
  snprintf(S.log, sizeof(S.log), "%s/agent.log", S.dir);
  noise_keypair_generate(S.server_pub, S.server_priv);
  crypto_sign_keypair(S.ticket_pk, S.ticket_sk);
  crypto_sign_keypair(S.pub_pk, S.pub_sk);
  randombytes_buf(S.device_id, 16);
  uv_loop_init(&S.loop);
  uv_timer_init(&S.loop, &S.tick);
  uv_timer_start(&S.tick, ss_on_tick, 10, 10);
  struct net_limits lim;
  net_limits_default(&lim);
  cr_assert_eq(net_server_new(&S.loop, "127.0.0.1", 0, S.server_priv, 1u << NOISE_MODE_SESSION,
                              &lim, &ss_ops, NULL, &S.srv),
               0);
  pair_agent(S.cfg);
}

/* Kill a live agent, close the server and the loop (its result: that of
 * uv_loop_close), remove the directory. */
SS_FN int ss_teardown(void) {
  if (S.agent > 0) {
    kill(S.agent, SIGKILL);
    waitpid(S.agent, NULL, 0);
  }
  net_server_close(S.srv);
  uv_close((uv_handle_t *)&S.tick, NULL);
  uv_run(&S.loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&S.loop);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", S.dir);
  (void)!system(cmd);
  return rc;
}

/* Start `cordon-agent --config CFG run ARGS...` with stderr into the log;
 * env: NULL-terminated "NAME=value" strings added to the environment. */
SS_FN pid_t start_agent_env(const char *const *env, const char *const *args) {
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(S.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    for (size_t i = 0; env && env[i]; i++)
      putenv((char *)env[i]);
    const char *argv[16] = {AGENT, "--config", S.cfg, "run"};
    size_t n = 4;
    for (size_t i = 0; args && args[i] && n < 15; i++)
      argv[n++] = args[i];
    argv[n] = NULL;
    execv(AGENT, (char **)argv);
    _exit(127);
  }
  return pid;
}

#define START(...) start_agent_env(NULL, (const char *const[]){__VA_ARGS__, NULL})

/* Its exit status (128 + signal when killed), serving it meanwhile; -1
 * when it is still running after ms. */
SS_FN int wait_exit(pid_t pid, int ms) {
  int64_t end = now_ms() + ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (now_ms() >= end)
      return -1;
    uv_run(&S.loop, UV_RUN_ONCE);
  }
}

#endif
