/* The daemon against a peer written from docs/protocol/ (net/ and proto/
 * only, in this process), for the cases a real agent never produces: a
 * result naming another device, results for jobs the device was not sent,
 * a pairing connection kept open after pair_done, a session that stays
 * silent. And a real agent whose spool holds such a result. */
#include "e2e.h"
#include "peer.h"

#include <sodium.h>

#include "agent/state.h"
#include "core/id.h"
#include "core/result.h"
#include "net/conn.h"
#include "proto/msg.h"
#include "proto/noise.h"
#include "proto/pairing.h"
#include "proto/receipt.h"
#include "proto/result_msg.h"

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  e2e_setup();
}

TestSuite(peer, .init = setup, .fini = e2e_teardown, .timeout = 120);

static const char manifest[] =
    "{\"name\":\"hello\",\"version\":\"1\",\"entry\":[\"/bin/sh\",\"run.sh\"]}";

Test(peer, a_result_naming_another_device_is_refused_and_not_stored) {
  struct e2e_agent *a = pair_agent(0, "one", NULL), *b = pair_agent(1, "two", NULL);
  struct peer p;
  peer_session(&p, a);
  char *pkg = pack("hello", manifest, "echo hi\n");
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, "--no-queue", pkg,
                      "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  struct msg *j = peer_next(&p, MSG_JOB, 5000);
  cr_assert_not_null(j, "the job reaches the peer");
  uint8_t raw[CORDON_ID_LEN];
  memcpy(raw, j->job.job_id, CORDON_ID_LEN);
  send_result(&p, raw, b->id); /* on a's session, in b's name */
  expect_refused(&p, raw);
  json_t *job;
  cr_assert_str_eq(job_state(id, &job), "sent", "nothing recorded");
  cr_assert(json_is_null(json_object_get(job, "result")));
  json_decref(job);
  /* its own result is still taken */
  send_signed_result(&p, raw, a->id, &j->job.ticket, false);
  cr_assert_not_null(peer_next(&p, MSG_ACK, 5000));
  cr_assert(wait_state(id, "done", 5000), "state %s", job_state(id, NULL));
  peer_release(&p);
  free(pkg);
}

Test(peer, a_result_for_a_job_this_device_was_not_sent_is_answered_and_acked) {
  struct e2e_agent *a = pair_agent(0, "one", NULL), *b = pair_agent(1, "two", NULL);
  struct peer p;
  peer_session(&p, a);
  /* a job id the server never made */
  uint8_t unknown[CORDON_ID_LEN];
  cordon_id_random(unknown);
  send_result(&p, unknown, a->id);
  expect_refused(&p, unknown);
  /* another device's job (queued for b, which is offline) */
  char *pkg = pack("hello", manifest, "echo hi\n");
  struct out *o =
      RUN(SERVER, "dispatch", "--user", "alice", "--device", b->id, pkg, "--state", e2e_state);
  char id[33];
  job_id_of(o, id);
  free(o);
  uint8_t raw[CORDON_ID_LEN];
  cordon_id_from_hex(id, raw);
  send_result(&p, raw, a->id);
  expect_refused(&p, raw);
  json_t *job;
  cr_assert_str_eq(job_state(id, &job), "queued", "b's job is untouched");
  cr_assert(json_is_null(json_object_get(job, "result")));
  json_decref(job);
  cr_assert(!p.closed, "the session goes on");
  peer_release(&p);
  free(pkg);
}

Test(peer, a_real_agent_drops_a_refused_result_from_its_spool) {
  struct e2e_agent *a = pair_agent(0, "one", NULL);
  /* a result for a job the server does not know, as the agent spools it */
  struct job_result r;
  job_result_init(&r);
  job_result_fail(&r, CORDON_E_CANCELLED, "left over");
  uint8_t job[CORDON_ID_LEN], dev[CORDON_ID_LEN];
  cordon_id_random(job);
  cordon_id_from_hex(a->id, dev);
  struct msg m;
  result_to_msg(&r, job, dev, &m);
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(&m, &buf, &len, NULL), 0);
  job_result_release(&r);
  char hex[CORDON_ID_HEX_SIZE], path[600];
  cordon_id_to_hex(job, hex);
  snprintf(path, sizeof(path), "%s/spool", a->dir);
  mkdir(path, 0700);
  snprintf(path, sizeof(path), "%s/spool/%s.result", a->dir, hex);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  cr_assert_eq(fwrite(buf, 1, len, f), len);
  fclose(f);
  free(buf);
  start_agent(a);
  for (int i = 0; i < 250 && access(path, F_OK) == 0; i++)
    msleep(20);
  cr_assert(access(path, F_OK) != 0, "the spool drained");
  char want[128];
  snprintf(want, sizeof(want), "msg=\"result refused\" job=%s device=%s ", hex, a->id);
  cr_assert(wait_in(e2e_server_log, want, 2000));
  cr_assert(device_online(a->id), "and the agent stays connected");
}

Test(peer, the_server_closes_a_pairing_connection_after_pair_done) {
  char *code = mint_code("alice");
  char code_id[PAIRING_CODE_ID_CHARS + 1];
  uint8_t key[PAIRING_KEY_LEN], pub[NOISE_KEY_LEN];
  cr_assert_eq(pairing_code_derive(code, code_id, key), 0);
  uint8_t *priv = sodium_malloc(NOISE_KEY_LEN);
  cr_assert_eq(noise_keypair_generate(pub, priv), 0);
  struct peer p;
  peer_connect(&p, priv, NOISE_MODE_PAIRING);
  sodium_free(priv);
  struct msg h = {.type = MSG_HELLO};
  h.hello.proto_min = MSG_PROTO_VERSION_MIN;
  h.hello.proto_max = MSG_PROTO_VERSION_MAX;
  h.hello.agent_version = "peer-test";
  h.hello.pair_code = code_id;
  h.hello.name = "raw";
  h.hello.platform = "linux";
  h.hello.best_level = MSG_LEVEL_ISOLATED;
  h.hello.max_jobs = 1;
  peer_send(&p, &h);
  cr_assert_not_null(peer_next(&p, MSG_WELCOME, 5000));
  struct msg *sp = peer_next(&p, MSG_PAIR_PROOF, 5000);
  cr_assert_not_null(sp);
  uint8_t hh[NOISE_HASH_LEN];
  net_conn_handshake_hash(p.conn, hh);
  cr_assert_eq(pairing_mac_verify(key, PAIRING_ROLE_SERVER, hh, sp->pair_proof.mac), 0);
  struct msg proof = {.type = MSG_PAIR_PROOF};
  proof.pair_proof.role = MSG_ROLE_AGENT;
  pairing_mac(key, PAIRING_ROLE_AGENT, hh, proof.pair_proof.mac);
  peer_send(&p, &proof);
  cr_assert_not_null(peer_next(&p, MSG_PAIR_DONE, 5000), "paired");
  /* we say nothing more and close nothing: the server closes */
  for (int i = 0; i < 300 && !p.closed; i++)
    peer_spin(&p, 10);
  cr_assert(p.closed, "the server closed the pairing connection after pair_done");
  cr_assert_eq(p.close_err, 0, "an orderly end between two records, not %d", p.close_err);
  cr_assert_null(peer_next(&p, MSG_GOAWAY, 0), "closed without a goaway");
  json_t *d = devices_json();
  cr_assert_eq(json_array_size(d), 1, "and the device was recorded");
  json_decref(d);
  peer_release(&p);
  free(code);
}

Test(peer, a_silent_session_is_pinged_and_a_pong_keeps_it) {
  struct e2e_agent *a = pair_agent(0, "one", NULL);
  struct peer p;
  peer_session(&p, a);
  /* the server pings after 2 * ping_ms (30 s) of silence */
  struct msg *ping = peer_next(&p, MSG_PING, 40000);
  cr_assert_not_null(ping, "the server pinged a silent session");
  struct msg pong = {.type = MSG_PONG};
  pong.pong.nonce = ping->ping.nonce;
  peer_send(&p, &pong);
  peer_spin(&p, 1000);
  cr_assert(!p.closed, "answered: the session stays");
  cr_assert(device_online(a->id));
  peer_release(&p);
}

/* A job dispatched to the peer's device: its id (hex and raw) and the job
 * message the peer got. */
static struct msg *job_to_peer(struct peer *p, const struct e2e_agent *a, const char *pkg,
                               char id[33], uint8_t raw[CORDON_ID_LEN]) {
  struct out *o = RUN(SERVER, "dispatch", "--user", "alice", "--device", a->id, "--no-queue", pkg,
                      "--state", e2e_state);
  job_id_of(o, id);
  free(o);
  struct msg *j = peer_next(p, MSG_JOB, 5000);
  cr_assert_not_null(j, "the job reaches the peer");
  memcpy(raw, j->job.job_id, CORDON_ID_LEN);
  return j;
}

/* A device replaying one result, well and badly signed, as fast as it can
 * write: their signatures are checked on the thread pool, out of the
 * loop's order, and every one is still answered as it would be alone: the
 * good ones acked, the bad ones refused and acked; one result recorded.
 * (The pool keeps up here: the cap on what waits for it,
 * JOBS_VERIFYING_MAX, is not reached.) */
Test(peer, a_flood_of_replayed_results_is_answered_in_full_and_recorded_once) {
  struct e2e_agent *a = pair_agent(0, "one", NULL);
  struct peer p;
  peer_session(&p, a);
  char *pkg = pack("hello", manifest, "echo hi\n");
  char id[33];
  uint8_t raw[CORDON_ID_LEN];
  struct msg *j = job_to_peer(&p, a, pkg, id, raw);
  enum { FLOOD = 320 };
  int bad = 0;
  for (int i = 0; i < FLOOD; i++) {
    bool tamper = i % 4 == 3;
    bad += tamper;
    send_signed_result(&p, raw, a->id, &j->job.ticket, tamper);
  }
  int acks = 0, errors = 0;
  for (int waited = 0; waited < 20000 && acks < FLOOD; waited += 10) {
    acks = errors = 0;
    for (size_t i = 0; i < p.n; i++) {
      acks += p.got[i].type == MSG_ACK;
      if (p.got[i].type == MSG_ERROR) {
        errors++;
        cr_assert_str_eq(p.got[i].error.code, "signature_invalid");
      }
    }
    if (acks < FLOOD)
      peer_spin(&p, 10);
  }
  cr_assert_eq(acks, FLOOD, "every result acked (%d of %d)", acks, FLOOD);
  cr_assert_eq(errors, bad, "each badly signed one refused (%d of %d)", errors, bad);
  cr_assert(!p.closed, "the session stays");
  cr_assert(wait_state(id, "done", 5000), "state %s", job_state(id, NULL));
  char want[128];
  snprintf(want, sizeof(want), "msg=\"job finished\" job=%s", id);
  /* the line follows the commit that made the state done */
  cr_assert(wait_in(e2e_server_log, want, 5000), "its result logged");
  cr_assert_eq(count_in(e2e_server_log, want), 1, "recorded once");
  peer_release(&p);
  free(pkg);
}

/* A result whose receipt signature does not verify: error
 * signature_invalid, then its ack (it can never be recorded); nothing is
 * stored, and the same result correctly signed is taken afterwards. */
Test(peer, a_result_with_a_bad_receipt_signature_is_refused_and_not_stored) {
  struct e2e_agent *a = pair_agent(0, "one", NULL);
  struct peer p;
  peer_session(&p, a);
  char *pkg = pack("hello", manifest, "echo hi\n");
  char id[33];
  uint8_t raw[CORDON_ID_LEN];
  struct msg *j = job_to_peer(&p, a, pkg, id, raw);
  const char *cases[] = {"tampered", "unbound", "another ticket"};
  for (size_t c = 0; c < 3; c++) {
    uint8_t other[RECEIPT_TICKET_LEN];
    memcpy(other, j->job.ticket.data, sizeof(other));
    other[150] ^= 1;
    struct msg_bytes ob = {other, sizeof(other)};
    if (c == 0)
      send_signed_result(&p, raw, a->id, &j->job.ticket, true);
    else
      send_signed_result(&p, raw, a->id, c == 1 ? NULL : &ob, false);
    struct msg *e = peer_next(&p, MSG_ERROR, 5000);
    cr_assert_not_null(e, "%s: the result is answered", cases[c]);
    cr_assert_str_eq(e->error.code, "signature_invalid", "%s", cases[c]);
    cr_assert(e->error.has_job_id);
    cr_assert_eq(memcmp(e->error.job_id, raw, CORDON_ID_LEN), 0);
    struct msg *ack = peer_next(&p, MSG_ACK, 5000);
    cr_assert_not_null(ack, "%s: then acked, so that a spool lets it go", cases[c]);
    json_t *job;
    cr_assert_str_eq(job_state(id, &job), "sent", "%s: nothing recorded", cases[c]);
    cr_assert(json_is_null(json_object_get(job, "result")));
    json_decref(job);
  }
  char want[128];
  snprintf(want, sizeof(want), "msg=\"result refused\" job=%s device=%s code=bad_receipt", id,
           a->id);
  cr_assert(wait_in(e2e_server_log, want, 2000));
  struct out *r = RUN(SERVER, "job", id, "--receipt", "-", "--state", e2e_state);
  cr_assert_neq(r->status, 0, "no receipt stored");
  free(r);
  send_signed_result(&p, raw, a->id, &j->job.ticket, false);
  cr_assert_not_null(peer_next(&p, MSG_ACK, 5000));
  cr_assert(wait_state(id, "done", 5000), "state %s", job_state(id, NULL));
  peer_release(&p);
  free(pkg);
}
