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
#include "peer.h"

/* The daemon again, logging at debug level (same state and address). */
static void restart_server_at_debug(void) {
  e2e_stop(&e2e_server_pid, SIGTERM);
  e2e_log_restart(e2e_server_log);
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

/* ---- a peer: one session as a paired device (peer.h) ---- */

/* Connect as agent a; hello for 1..2, welcome 2. */
static void output_session(struct peer *p, const struct e2e_agent *a) {
  struct msg *w = peer_session_as(p, a, 1, MSG_PROTO_VERSION_OUTPUT, "output-test");
  cr_assert_eq(w->welcome.version, MSG_PROTO_VERSION_OUTPUT, "the server speaks version 2");
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
  output_session(&pa, a);
  output_session(&pb, b);
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
  send_signed_result(&pa, raw, a->id, &j->job.ticket, false);
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
