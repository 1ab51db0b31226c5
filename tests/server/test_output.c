/* The daemon's handling of live output (`output`, protocol version 2,
 * docs/protocol/messages.md §6.17) against peers written from the docs
 * (net/ and proto/ only, in this process): output is relayed only from the
 * device the job was sent to while the job is in flight and below its
 * output cap; a hostile peer's output for another device's job, output
 * past the cap and output after the result are ignored without closing
 * anyone's session. What the daemon relays it publishes on its event bus,
 * in the branch that logs "job output relayed" (debug), which is what this
 * test sees from outside the daemon's process. */
#include "e2e.h"

#include <sodium.h>

#include "agent/state.h"
#include "core/id.h"
#include "core/result.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/noise.h"
#include "proto/receipt.h"
#include "proto/result_msg.h"

/* The daemon again, logging at debug level (same state and address). */
static void restart_server_at_debug(void) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  (void)!truncate(e2e_server_log, 0);
  const char *argv[] = {SERVER,   "run",         "--state", e2e_state, "--listen",
                        e2e_addr, "--log-level", "debug",   NULL};
  e2e_server_pid = spawn_logged(e2e_server_log, argv);
  cr_assert(wait_in(e2e_server_log, "msg=listening", 5000), "the server did not start again");
}

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_setup();
}

TestSuite(output, .init = setup, .fini = e2e_teardown, .timeout = 120);

/* ---- a peer: one session as a paired device ---- */

#define PEER_MSGS 64

struct peer {
  uv_loop_t loop;
  struct net_conn *conn;
  bool ready, closed;
  struct msg got[PEER_MSGS];
  size_t n, seen;
  struct agent_pairing keys; /* the device's receipt signing key */
};

static int peer_ready(struct net_conn *c) {
  struct peer *p = net_conn_data(c);
  p->ready = true;
  return 0;
}

static void peer_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct peer *p = net_conn_data(c);
  struct msg m;
  cr_assert_eq(msg_decode(data, len, &m, NULL), 0, "the server sent a bad message");
  if (p->n < PEER_MSGS)
    p->got[p->n++] = m;
  else
    msg_release(&m);
}

static void peer_close(struct net_conn *c, int err) {
  (void)err;
  struct peer *p = net_conn_data(c);
  p->closed = true;
  p->conn = NULL;
}

static const struct net_conn_ops peer_ops = {
    .on_ready = peer_ready, .on_record = peer_record, .on_close = peer_close};

static void peer_spin(struct peer *p, int ms) {
  for (int t = 0; t < ms; t += 10) {
    uv_run(&p->loop, UV_RUN_NOWAIT);
    msleep(10);
  }
}

static void peer_send(struct peer *p, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  struct cordon_diag d = {{0}};
  cr_assert_eq(msg_encode_alloc(m, &buf, &len, &d), 0, "%s", d.msg);
  cr_assert_eq(net_conn_send(p->conn, buf, len), 0);
  free(buf);
  uv_run(&p->loop, UV_RUN_NOWAIT);
}

static struct msg *peer_next(struct peer *p, enum msg_type t, int ms) {
  for (int waited = 0;; waited += 10) {
    for (; p->seen < p->n; p->seen++)
      if (p->got[p->seen].type == t)
        return &p->got[p->seen++];
    if (waited >= ms || p->closed)
      return NULL;
    peer_spin(p, 10);
  }
}

/* Connect as agent a (its identity and device id); hello for 1..2, welcome 2. */
static void peer_session(struct peer *p, const struct e2e_agent *a) {
  uint8_t *priv = NULL;
  struct agent_pairing pr;
  cr_assert_eq(agent_identity_load(a->dir, &priv, NULL), 0);
  cr_assert_eq(agent_pairing_load(a->dir, &pr, NULL), 0);
  memset(p, 0, sizeof(*p));
  cr_assert_eq(uv_loop_init(&p->loop), 0);
  struct net_limits lim;
  net_limits_default(&lim);
  lim.idle_ms = lim.quiet_ms = 0;
  int port = atoi(strrchr(e2e_addr, ':') + 1);
  cr_assert_eq(net_connect(&p->loop, "127.0.0.1", port, priv, NOISE_MODE_SESSION, &lim, &peer_ops,
                           p, &p->conn),
               0);
  sodium_free(priv);
  cr_assert_eq(agent_signing_key_load(a->dir, &p->keys, NULL), 0);
  for (int i = 0; i < 500 && !p->ready && !p->closed; i++)
    peer_spin(p, 10);
  cr_assert(p->ready, "handshake");
  struct msg h = {.type = MSG_HELLO};
  h.hello.proto_min = 1;
  h.hello.proto_max = MSG_PROTO_VERSION_OUTPUT;
  h.hello.agent_version = "output-test";
  h.hello.has_device_id = true;
  memcpy(h.hello.device_id, pr.device_id, CORDON_ID_LEN);
  h.hello.platform = "linux";
  h.hello.best_level = MSG_LEVEL_ISOLATED;
  h.hello.max_jobs = 4;
  h.hello.has_sign_key = true; /* as cordon's agent: its receipts are signed */
  memcpy(h.hello.sign_key, p->keys.sign_pk, sizeof(h.hello.sign_key));
  peer_send(p, &h);
  struct msg *w = peer_next(p, MSG_WELCOME, 5000);
  cr_assert_not_null(w, "welcome");
  cr_assert_eq(w->welcome.version, MSG_PROTO_VERSION_OUTPUT, "the server speaks version 2");
}

static void peer_release(struct peer *p) {
  if (p->conn)
    net_conn_close(p->conn, 0);
  for (int i = 0; i < 100 && !p->closed; i++)
    peer_spin(p, 10);
  uv_run(&p->loop, UV_RUN_DEFAULT);
  uv_loop_close(&p->loop);
  for (size_t i = 0; i < p->n; i++)
    msg_release(&p->got[i]);
  sodium_free((void *)p->keys.sign_sk);
}

static void send_output(struct peer *p, const uint8_t job[CORDON_ID_LEN], uint64_t offset,
                        const char *text) {
  struct msg m = {.type = MSG_OUTPUT};
  memcpy(m.output.job_id, job, CORDON_ID_LEN);
  m.output.stream = MSG_STREAM_STDOUT;
  m.output.offset = offset;
  m.output.data.data = (uint8_t *)text;
  m.output.data.len = strlen(text);
  peer_send(p, &m);
}

/* A result of a job that exited 0, its receipt bound to ticket. */
static void send_result(struct peer *p, const uint8_t job[CORDON_ID_LEN], const char *dev_hex,
                        const struct msg_bytes *ticket) {
  struct job_result r;
  job_result_init(&r);
  r.ran = r.exited = true;
  r.level_known = true;
  r.level = SANDBOX_LEVEL_ISOLATED;
  snprintf(r.mechanism, sizeof(r.mechanism), "bwrap");
  uint8_t dev[CORDON_ID_LEN];
  cr_assert_eq(cordon_id_from_hex(dev_hex, dev), 0);
  struct msg m;
  result_to_msg(&r, job, dev, &m);
  m.result.has_started_ms = m.result.has_ended_ms = true;
  m.result.started_ms = m.result.ended_ms = 1767225600000ull;
  cr_assert_eq(receipt_sign_result(&m.result, ticket->data, ticket->len, p->keys.sign_sk), 0);
  peer_send(p, &m);
  job_result_release(&r);
}

/* Serve both peers while waiting for needle in the server's log. */
static bool log_wait(struct peer *a, struct peer *b, const char *needle, int ms) {
  for (int t = 0; t < ms; t += 20) {
    if (count_in(e2e_server_log, needle) > 0)
      return true;
    peer_spin(a, 10);
    peer_spin(b, 10);
  }
  return false;
}

Test(output, only_the_devices_own_output_below_the_cap_is_relayed) {
  struct e2e_agent *a = pair_agent(0, "one", NULL), *b = pair_agent(1, "two", NULL);
  restart_server_at_debug();
  struct peer pa, pb;
  peer_session(&pa, a);
  peer_session(&pb, b);
  char *pkg = pack("talk",
                   "{\"name\":\"talk\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"],"
                   "\"limits\":{\"output_kb\":1}}",
                   "echo hi\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, "--no-queue", pkg,
                      "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  struct msg *j = peer_next(&pa, MSG_JOB, 5000);
  cr_assert_not_null(j, "the job reaches a");
  uint8_t raw[CORDON_ID_LEN];
  memcpy(raw, j->job.job_id, CORDON_ID_LEN);
  struct msg run = {.type = MSG_RUNNING};
  memcpy(run.running.job_id, raw, CORDON_ID_LEN);
  peer_send(&pa, &run);
  cr_assert(wait_state(id, "running", 5000));

  char line[256];
  /* b, hostile: output for a's job */
  send_output(&pb, raw, 0, "forged by b\n");
  snprintf(line, sizeof(line), "msg=\"job output ignored\" job=%s device=%s", id, b->id);
  cr_assert(log_wait(&pa, &pb, line, 5000), "b's output is ignored:\n%s", line);
  snprintf(line, sizeof(line), "msg=\"job output relayed\" job=%s", id);
  cr_assert_eq(count_in(e2e_server_log, line), 0, "nothing of b's was relayed");

  /* a, its own job: relayed */
  send_output(&pa, raw, 0, "hi\n");
  snprintf(line, sizeof(line), "msg=\"job output relayed\" job=%s device=%s", id, a->id);
  cr_assert(log_wait(&pa, &pb, line, 5000), "a's output is relayed");

  /* past the cap of 1 KiB, and the same bytes again: ignored, and logged
   * (each session's first ones are; tests/server/test_flood.c: the rest) */
  send_output(&pa, raw, 1024, "past the cap\n");
  snprintf(line, sizeof(line), "device=%s reason=\"past the cap or relayed already\" suppressed=0",
           a->id);
  cr_assert(log_wait(&pa, &pb, line, 5000), "output past the cap is ignored");
  send_output(&pa, raw, 0, "hi\n"); /* relayed already */
  send_output(&pb, raw, 3, "x\n");  /* b's second */
  snprintf(line, sizeof(line), "device=%s reason=\"another device's job\" suppressed=0", b->id);
  cr_assert(log_wait(&pa, &pb, line, 5000), "b's second is ignored too");

  /* the result ends the job: later output is ignored, the job is done */
  send_result(&pa, raw, a->id, &j->job.ticket);
  cr_assert_not_null(peer_next(&pa, MSG_ACK, 5000));
  cr_assert(wait_state(id, "done", 5000));
  for (int i = 0; i < 2; i++)
    send_output(&pa, raw, 3, "late\n");
  snprintf(line, sizeof(line), "device=%s reason=\"not a job in flight\" suppressed=0", a->id);
  cr_assert(log_wait(&pa, &pb, line, 5000), "output after the result is ignored");

  snprintf(line, sizeof(line), "msg=\"job output relayed\" job=%s", id);
  cr_assert_eq(count_in(e2e_server_log, line), 1, "relayed once: a's first output");
  cr_assert(!pa.closed && !pb.closed, "no session was closed for any of it");
  cr_assert_eq(count_in(e2e_server_log, "protocol_error"), 0);
  peer_release(&pa);
  peer_release(&pb);
  free(pkg);
}
