/* Jobs in the daemon: the job state machine around server/db.h's graph.
 *
 * dispatch  choose a device of the user (online, the package's platform,
 *           level >= min_sandbox, below its concurrency), commit the job
 *           (queued -> sent) before anything is sent, then a signed ticket
 *           and the package in chunks, paced by the connection's queue;
 * results   recorded exactly once (then acked), whatever the job's state;
 * cancel    recorded first, then told to the device;
 * expiry    every second, jobs past their deadline become expired
 *           (device_lost).
 * Admin requests that wait for a job are answered when it is over.
 *
 * Uses sessions through server/session.h (find, send, goaway) and answers
 * the admin socket through server/admin_sock.h; neither calls in here: the
 * daemon (server/daemon.c) routes session messages, session closes and
 * admin ops to the functions below. */
#ifndef CORDON_SERVER_JOBS_H
#define CORDON_SERVER_JOBS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "proto/msg.h"
#include "server/admin_sock.h"
#include "server/db.h"
#include "server/session.h"

#define JOBS_DEFAULT_GRACE_S 120 /* deadline = timeout_s + this */

struct jobs_config {
  uv_loop_t *loop;
  struct server_db *db;
  struct sessions *sessions;
  const uint8_t *ticket_sk;    /* Ed25519 secret key (64 bytes) that signs tickets */
  const uint8_t *publisher_pk; /* the key packages must be signed with (32 bytes) */
  unsigned grace_s;            /* 0: JOBS_DEFAULT_GRACE_S */
};

struct jobs;

/* Everything in cfg is borrowed for the jobs' lifetime. 0 or -ENOMEM. */
int jobs_new(const struct jobs_config *cfg, struct jobs **out_jobs);
/* Start the expiry timer. */
void jobs_start(struct jobs *j);
/* Shutdown: stop the timer, forget the jobs in flight (their deadlines
 * decide them at the next start) and tell whoever waits for one. */
void jobs_close(struct jobs *j);
/* After the loop has finished. NULL-safe. */
void jobs_free(struct jobs *j);

/* A message of an active session: running and result. false for any other
 * type. */
bool jobs_on_message(struct jobs *j, struct session *s, struct msg *m);
/* The session is going: jobs still being sent to it stop (their deadline
 * decides them). */
void jobs_on_session_closed(struct jobs *j, struct session *s);

/* Admin ops (server/admin_ops.h), on checked requests. */
void jobs_op_dispatch(struct jobs *j, struct admin_conn *c, const json_t *req);
void jobs_op_cancel(struct jobs *j, struct admin_conn *c, const json_t *req);

#endif
