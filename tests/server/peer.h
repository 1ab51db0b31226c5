/* A peer written from docs/protocol/ (net/ and proto/ only, in the test's
 * process) speaking to the daemon of e2e.h as a paired device would: a
 * session with the device's identity, messages sent and awaited, results
 * signed with its key. For what a real agent never sends. Header-only:
 * one test program includes it once, after e2e.h. */
#ifndef CORDON_TESTS_SERVER_PEER_H
#define CORDON_TESTS_SERVER_PEER_H

#include <sodium.h>

#include "agent/state.h"
#include "core/id.h"
#include "core/result.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/noise.h"
#include "proto/receipt.h"
#include "proto/result_msg.h"

#define PEER_MSGS 1024

struct peer {
  uv_loop_t loop;
  struct net_conn *conn;
  bool ready, closed;
  int close_err;
  struct msg got[PEER_MSGS];
  size_t n, seen;
  struct agent_pairing keys; /* the device's signing key, in a session */
};

static int peer_ready(struct net_conn *c) {
  struct peer *p = net_conn_data(c);
  p->ready = true;
  return 0;
}

E2E_FN void peer_record(struct net_conn *c, const uint8_t *data, size_t len) {
  struct peer *p = net_conn_data(c);
  struct msg m;
  struct cordon_diag d = {{0}};
  cr_assert_eq(msg_decode(data, len, &m, &d), 0, "the server sent a bad message: %s", d.msg);
  if (p->n < PEER_MSGS)
    p->got[p->n++] = m;
  else
    msg_release(&m);
}

E2E_FN void peer_close(struct net_conn *c, int err) {
  struct peer *p = net_conn_data(c);
  p->closed = true;
  p->close_err = err;
  p->conn = NULL;
}

static const struct net_conn_ops peer_ops = {
    .on_ready = peer_ready, .on_record = peer_record, .on_close = peer_close};

E2E_FN void peer_spin(struct peer *p, int ms) {
  for (int t = 0; t < ms; t += 10) {
    uv_run(&p->loop, UV_RUN_NOWAIT);
    msleep(10);
  }
}

E2E_FN void peer_connect(struct peer *p, const uint8_t *priv, enum noise_mode mode) {
  memset(p, 0, sizeof(*p));
  cr_assert_eq(uv_loop_init(&p->loop), 0);
  struct net_limits lim;
  net_limits_default(&lim);
  lim.idle_ms = 0; /* the server's deadlines are under test, not ours */
  lim.quiet_ms = 0;
  int port = atoi(strrchr(e2e_addr, ':') + 1);
  cr_assert_eq(net_connect(&p->loop, "127.0.0.1", port, priv, mode, &lim, &peer_ops, p, &p->conn),
               0);
  for (int i = 0; i < 500 && !p->ready && !p->closed; i++)
    peer_spin(p, 10);
  cr_assert(p->ready, "handshake");
}

E2E_FN void peer_send(struct peer *p, const struct msg *m) {
  uint8_t *buf;
  size_t len;
  struct cordon_diag d = {{0}};
  cr_assert_eq(msg_encode_alloc(m, &buf, &len, &d), 0, "%s", d.msg);
  cr_assert_eq(net_conn_send(p->conn, buf, len), 0);
  free(buf);
  uv_run(&p->loop, UV_RUN_NOWAIT);
}

/* The next message of type t after the last one returned (others are
 * skipped), within ms; NULL when none came. */
E2E_FN struct msg *peer_next(struct peer *p, enum msg_type t, int ms) {
  for (int waited = 0;; waited += 10) {
    for (; p->seen < p->n; p->seen++)
      if (p->got[p->seen].type == t)
        return &p->got[p->seen++];
    if (waited >= ms || p->closed)
      return NULL;
    peer_spin(p, 10);
  }
}

E2E_FN void peer_release(struct peer *p) {
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

/* A session as agent a (its identity, its device id): a hello offering
 * versions proto_min..proto_max as agent_version, then the welcome (the
 * message returned). */
E2E_FN struct msg *peer_session_as(struct peer *p, const struct e2e_agent *a, uint16_t proto_min,
                                   uint16_t proto_max, const char *agent_version) {
  uint8_t *priv = NULL;
  struct agent_pairing pr;
  cr_assert_eq(agent_identity_load(a->dir, &priv, NULL), 0);
  cr_assert_eq(agent_pairing_load(a->dir, &pr, NULL), 0);
  peer_connect(p, priv, NOISE_MODE_SESSION);
  sodium_free(priv);
  cr_assert_eq(agent_signing_key_load(a->dir, &p->keys, NULL), 0);
  struct msg h = {.type = MSG_HELLO};
  h.hello.proto_min = proto_min;
  h.hello.proto_max = proto_max;
  h.hello.agent_version = (char *)agent_version;
  h.hello.has_device_id = true;
  memcpy(h.hello.device_id, pr.device_id, CORDON_ID_LEN);
  h.hello.platform = "linux";
  h.hello.best_level = MSG_LEVEL_ISOLATED;
  h.hello.max_jobs = 4;
  h.hello.has_sign_key = true; /* as cordon's agent: the key its receipts are signed with */
  memcpy(h.hello.sign_key, p->keys.sign_pk, sizeof(h.hello.sign_key));
  peer_send(p, &h);
  struct msg *w = peer_next(p, MSG_WELCOME, 5000);
  cr_assert_not_null(w, "welcome");
  return w;
}

/* A session as agent a, offering the versions this build speaks. */
E2E_FN void peer_session(struct peer *p, const struct e2e_agent *a) {
  peer_session_as(p, a, MSG_PROTO_VERSION_MIN, MSG_PROTO_VERSION_MAX, "peer-test");
}

/* A well-formed result of a job that ran and exited 0, as device dev,
 * its receipt signed with the session device's key and bound to ticket
 * (NULL: unbound). tamper: flip a bit of the signature. */
E2E_FN void send_signed_result(struct peer *p, const uint8_t job_id[CORDON_ID_LEN],
                               const char *dev_hex, const struct msg_bytes *ticket, bool tamper) {
  struct job_result r;
  job_result_init(&r);
  r.ran = r.exited = true;
  r.level_known = true;
  r.level = SANDBOX_LEVEL_ISOLATED;
  snprintf(r.mechanism, sizeof(r.mechanism), "bwrap");
  uint8_t dev[CORDON_ID_LEN];
  cr_assert_eq(cordon_id_from_hex(dev_hex, dev), 0);
  struct msg m;
  result_to_msg(&r, job_id, dev, &m);
  m.result.has_started_ms = m.result.has_ended_ms = true;
  m.result.started_ms = m.result.ended_ms = 1767225600000ull;
  cr_assert_eq(receipt_sign_result(&m.result, ticket ? ticket->data : NULL,
                                   ticket ? ticket->len : 0, p->keys.sign_sk),
               0);
  if (tamper)
    m.result.receipt_sig[10] ^= 0x20;
  peer_send(p, &m);
  job_result_release(&r);
}

E2E_FN void send_result(struct peer *p, const uint8_t job_id[CORDON_ID_LEN], const char *dev_hex) {
  send_signed_result(p, job_id, dev_hex, NULL, false);
}

/* After a refused result: error wrong_device for that job, then its ack. */
E2E_FN void expect_refused(struct peer *p, const uint8_t job_id[CORDON_ID_LEN]) {
  struct msg *e = peer_next(p, MSG_ERROR, 5000);
  cr_assert_not_null(e, "the result is answered");
  cr_assert_str_eq(e->error.code, "wrong_device");
  cr_assert(e->error.has_job_id);
  cr_assert_eq(memcmp(e->error.job_id, job_id, CORDON_ID_LEN), 0);
  struct msg *a = peer_next(p, MSG_ACK, 5000);
  cr_assert_not_null(a, "then acked, so that a spool lets it go");
  cr_assert_eq(memcmp(a->ack.job_id, job_id, CORDON_ID_LEN), 0);
}

#endif
