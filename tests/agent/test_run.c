/* cordon-agent run against a scripted server: every ticket check the agent
 * makes before anything is staged or run (signature, device/user/session,
 * job/package/args binding, expiry, replay). The server side is the real
 * net/conn layer and message codec in this process; the agent is the real
 * binary. */
#include <criterion/criterion.h>
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

#define AGENT CORDON_BINARY_DIR "/cordon-agent"

enum {
  J_REPLAY_FIRST,
  J_REPLAY_AGAIN,
  J_OTHER_SESSION,
  J_EXPIRED,
  J_BAD_SIG,
  J_ARGS,
  J_OTHER_DEVICE,
  J_N
};

static struct {
  uv_loop_t loop;
  uv_timer_t deadline;
  struct net_server *srv;
  uint8_t server_priv[32], server_pub[32];
  uint8_t ticket_pk[32], ticket_sk[64];
  uint8_t device_id[16];
  uint8_t session_id[16];
  uint8_t job_ids[J_N][16];
  char codes[J_N][64];
  int results;
  char dir[64];
} T;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_msg(struct net_conn *c, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(m, &buf, &len, NULL), 0);
  net_conn_send(c, buf, len);
  free(buf);
}

/* A job for kind k: a ticket (tampered as the kind asks) and a 16-byte
 * package of zeros (never valid: if the ticket passed, staging refuses). */
static void send_job(struct net_conn *c, int k, int reuse_id_of) {
  uint8_t *id = T.job_ids[reuse_id_of >= 0 ? reuse_id_of : k];
  char *args[] = {"a", "b"};
  struct ticket t = {0};
  memcpy(t.job_id, id, 16);
  memcpy(t.device_id, T.device_id, 16);
  if (k == J_OTHER_DEVICE)
    t.device_id[0] ^= 1;
  ticket_user_tag("alice", t.user_tag);
  memcpy(t.session_id, T.session_id, 16);
  if (k == J_OTHER_SESSION)
    t.session_id[0] ^= 1;
  uint8_t pkg[16] = {0};
  crypto_generichash(t.index_hash, 32, pkg, sizeof(pkg), NULL, 0);
  ticket_args_hash(args, 2, t.args_hash);
  t.issued_ms = (uint64_t)now_ms();
  t.expires_ms = k == J_EXPIRED ? t.issued_ms - 60000 : t.issued_ms + 600000;
  uint8_t body[TICKET_BODY_LEN];
  ticket_encode(&t, body);
  struct msg m = {.type = MSG_JOB};
  memcpy(m.job.job_id, id, 16);
  m.job.ticket.data = body;
  m.job.ticket.len = sizeof(body);
  ticket_sign(body, T.ticket_sk, m.job.ticket_sig);
  if (k == J_BAD_SIG)
    m.job.ticket_sig[5] ^= 0x20;
  memcpy(m.job.pkg_hash, t.index_hash, 32);
  m.job.pkg_size = sizeof(pkg);
  char *other[] = {"a", "c"};
  m.job.args = k == J_ARGS ? other : args;
  m.job.n_args = 2;
  send_msg(c, &m);
  struct msg ch = {.type = MSG_CHUNK};
  memcpy(ch.chunk.job_id, id, 16);
  ch.chunk.offset = 0;
  ch.chunk.data.data = pkg;
  ch.chunk.data.len = sizeof(pkg);
  send_msg(c, &ch);
}

static int next_kind = 0;

static void on_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct msg m;
  if (msg_decode(data, len, &m, NULL) < 0)
    return;
  if (m.type == MSG_HELLO) {
    struct msg w = {.type = MSG_WELCOME};
    w.welcome.version = MSG_PROTO_VERSION_MAX;
    w.welcome.time_ms = (uint64_t)now_ms();
    randombytes_buf(w.welcome.server_id, 16);
    memcpy(w.welcome.session_id, T.session_id, 16);
    w.welcome.ping_ms = 15000;
    send_msg(c, &w);
    send_job(c, J_REPLAY_FIRST, -1);
    next_kind = 1;
  } else if (m.type == MSG_RESULT) {
    for (int k = 0; k < J_N; k++)
      if (memcmp(m.result.job_id, T.job_ids[k], 16) == 0 && m.result.has_error) {
        int slot = k == J_REPLAY_FIRST && T.codes[J_REPLAY_FIRST][0] ? J_REPLAY_AGAIN : k;
        snprintf(T.codes[slot], sizeof(T.codes[slot]), "%s", m.result.error.code);
      }
    struct msg ack = {.type = MSG_ACK};
    memcpy(ack.ack.job_id, m.result.job_id, 16);
    send_msg(c, &ack);
    T.results++;
    /* one job at a time, so each result belongs to the job just sent */
    if (next_kind < J_N) {
      int k = next_kind++;
      send_job(c, k, k == J_REPLAY_AGAIN ? J_REPLAY_FIRST : -1);
    } else {
      uv_stop(&T.loop);
    }
  }
  msg_release(&m);
}

static void on_close(struct net_conn *c, int err) {
  (void)c;
  (void)err;
}

static int on_ready(struct net_conn *c) {
  (void)c;
  return 0;
}

static const struct net_conn_ops ops = {
    .on_ready = on_ready, .on_record = on_record, .on_close = on_close};

static void on_deadline(uv_timer_t *t) {
  (void)t;
  uv_stop(&T.loop);
}

Test(agent_run, refuses_every_bad_ticket_before_staging_with_its_own_code, .timeout = 60) {
  cr_assert(sodium_init() >= 0);
  memset(&T, 0, sizeof(T));
  snprintf(T.dir, sizeof(T.dir), "/tmp/cordon-run-XXXXXX");
  cr_assert(mkdtemp(T.dir));
  noise_keypair_generate(T.server_pub, T.server_priv);
  crypto_sign_keypair(T.ticket_pk, T.ticket_sk);
  randombytes_buf(T.device_id, 16);
  randombytes_buf(T.session_id, 16);
  for (int k = 0; k < J_N; k++)
    randombytes_buf(T.job_ids[k], 16);
  uv_loop_init(&T.loop);
  struct net_limits lim;
  net_limits_default(&lim);
  cr_assert_eq(net_server_new(&T.loop, "127.0.0.1", 0, T.server_priv, 1u << NOISE_MODE_SESSION,
                              &lim, &ops, NULL, &T.srv),
               0);
  /* the agent's side of a pairing with this server */
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
  randombytes_buf(pubs[0], 32);
  cr_assert_eq(agent_pairing_save(T.dir, agent_priv, &p, (const uint8_t(*)[32])pubs, 1, NULL), 0);
  sodium_free(agent_priv);

  pid_t pid = fork();
  if (pid == 0) {
    char log[128];
    snprintf(log, sizeof(log), "%s/agent.log", T.dir);
    FILE *f = fopen(log, "w");
    dup2(fileno(f), 2);
    execl(AGENT, AGENT, "--config", T.dir, "run", (char *)NULL);
    _exit(127);
  }
  uv_timer_init(&T.loop, &T.deadline);
  uv_timer_start(&T.deadline, on_deadline, 30000, 0);
  uv_run(&T.loop, UV_RUN_DEFAULT);
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);

  cr_assert_eq(T.results, J_N, "results received: %d", T.results);
  /* the first one passed every ticket check: its 16 zero bytes are no package */
  cr_assert_str_eq(T.codes[J_REPLAY_FIRST], "package_corrupt");
  cr_assert_str_eq(T.codes[J_REPLAY_AGAIN], "ticket_replayed");
  cr_assert_str_eq(T.codes[J_OTHER_SESSION], "wrong_device");
  cr_assert_str_eq(T.codes[J_OTHER_DEVICE], "wrong_device");
  cr_assert_str_eq(T.codes[J_EXPIRED], "ticket_expired");
  cr_assert_str_eq(T.codes[J_BAD_SIG], "signature_invalid");
  cr_assert_str_eq(T.codes[J_ARGS], "signature_invalid");
  char seen[128];
  snprintf(seen, sizeof(seen), "%s/seen", T.dir);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "test $(ls %s | wc -l) -eq 1", seen);
  cr_assert_eq(system(cmd), 0, "exactly the accepted job id is journaled");
  net_server_close(T.srv);
  uv_close((uv_handle_t *)&T.deadline, NULL);
  uv_run(&T.loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&T.loop), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", T.dir);
  (void)!system(cmd);
}
