/* cordon-agent run against a scripted server: every ticket check the agent
 * makes before anything is staged or run (signature, device/user/session,
 * job/package/args binding, expiry, replay). The server side is the real
 * net/conn layer and message codec in this process; the agent is the real
 * binary. */
#include "scripted_server.h"

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
  uv_timer_t deadline;
  uint8_t job_ids[J_N][16];
  char codes[J_N][64];
  int results;
} T;

/* A job for kind k: a ticket (tampered as the kind asks) and a 16-byte
 * package of zeros (never valid: if the ticket passed, staging refuses). */
static void send_job(struct net_conn *c, int k, int reuse_id_of) {
  uint8_t *id = T.job_ids[reuse_id_of >= 0 ? reuse_id_of : k];
  char *args[] = {"a", "b"};
  uint8_t pkg[16] = {0}, index_hash[32];
  crypto_generichash(index_hash, 32, pkg, sizeof(pkg), NULL, 0);
  struct ticket t = ss_ticket(id, index_hash);
  if (k == J_OTHER_DEVICE)
    t.device_id[0] ^= 1;
  if (k == J_OTHER_SESSION)
    t.session_id[0] ^= 1;
  ticket_args_hash(args, 2, t.args_hash);
  if (k == J_EXPIRED)
    t.expires_ms = t.issued_ms - 60000;
  uint8_t body[TICKET_BODY_LEN];
  struct msg m = ss_job(&t, body, sizeof(pkg));
  if (k == J_BAD_SIG)
    m.job.ticket_sig[5] ^= 0x20;
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

/* Every message is this test's own: the welcome starts the first job,
 * each result the next one; anything else is dropped. */
static bool on_msg(struct net_conn *c, const struct msg *m) {
  if (m->type == MSG_HELLO) {
    ss_welcome(c);
    send_job(c, J_REPLAY_FIRST, -1);
    next_kind = 1;
  } else if (m->type == MSG_RESULT) {
    for (int k = 0; k < J_N; k++)
      if (memcmp(m->result.job_id, T.job_ids[k], 16) == 0 && m->result.has_error) {
        int slot = k == J_REPLAY_FIRST && T.codes[J_REPLAY_FIRST][0] ? J_REPLAY_AGAIN : k;
        snprintf(T.codes[slot], sizeof(T.codes[slot]), "%s", m->result.error.code);
      }
    ss_ack(c, m->result.job_id);
    T.results++;
    /* one job at a time, so each result belongs to the job just sent */
    if (next_kind < J_N) {
      int k = next_kind++;
      send_job(c, k, k == J_REPLAY_AGAIN ? J_REPLAY_FIRST : -1);
    } else {
      uv_stop(&S.loop);
    }
  }
  return true;
}

static void on_deadline(uv_timer_t *t) {
  (void)t;
  uv_stop(&S.loop);
}
Test(agent_run, refuses_every_bad_ticket_before_staging_with_its_own_code, .timeout = 60) {
  ss_setup("cordon-run", on_msg);
  memset(&T, 0, sizeof(T));
  for (int k = 0; k < J_N; k++)
    randombytes_buf(T.job_ids[k], 16);

  pid_t pid = start_agent_env(NULL, NULL);
  uv_timer_init(&S.loop, &T.deadline);
  uv_timer_start(&T.deadline, on_deadline, 30000, 0);
  uv_run(&S.loop, UV_RUN_DEFAULT);
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
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "test $(ls %s/seen | wc -l) -eq 1", S.cfg);
  cr_assert_eq(system(cmd), 0, "exactly the accepted job id is journaled");
  uv_close((uv_handle_t *)&T.deadline, NULL);
  cr_assert_eq(ss_teardown(), 0);
}
