/* Jobs in the daemon: the job state machine around server/db.h's graph.
 *
 * dispatch  evaluate every device of the user (active, the package's
 *           platform, level >= min_sandbox, the labels of --where; then
 *           online and below its max_jobs) and take the least loaded
 *           (running / max_jobs), then the most recently seen; commit the
 *           job (queued -> sent) before anything is sent, then a signed
 *           ticket and the package in chunks, paced by the connection's
 *           queue. With no device online but one that would fit, the job
 *           is queued: its package is copied to STATE/queue/<id>.cpkg and
 *           it waits (in the database) until queue_expires;
 * queue     a device that comes online, a job that ends and every tick send
 *           queued jobs, oldest first, each to the best device available
 *           then (eligibility checked again), within each device's max_jobs;
 *           a job still queued at queue_expires ends expired, queue_expired;
 * explain   the same evaluation, every candidate and why, nothing sent;
 * results   recorded exactly once (then acked), whatever the job's state;
 *           a result from another device, or for a job this device was not
 *           sent, is answered error wrong_device + ack and not stored;
 * cancel    recorded first, then told to the device;
 * expiry    every second, sent jobs past their deadline become expired
 *           (device_lost).
 * Admin requests that wait for a job (dispatch --wait, wait) are answered
 * when it is over.
 *
 * Uses sessions through server/session.h (find, send, goaway) and answers
 * the admin socket through server/admin_sock.h; neither calls in here: the
 * daemon (server/daemon.c) routes session messages, session events and
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
#include "server/keys.h"
#include "server/session.h"

#define JOBS_DEFAULT_GRACE_S 120      /* deadline = timeout_s + this */
#define JOBS_DEFAULT_QUEUE_TTL_S 3600 /* how long a queued job waits by default */
#define JOBS_QUEUE_DIR "queue"        /* in the state directory: queued packages */

struct jobs_config {
  uv_loop_t *loop;
  struct server_db *db;
  struct sessions *sessions;
  const char *state_dir;       /* STATE: queued packages go to STATE/queue */
  const uint8_t *ticket_sk;    /* Ed25519 secret key (64 bytes) that signs tickets */
  const uint8_t *publisher_pk; /* the key packages must be signed with (32 bytes) */
  /* when set, packages may be signed by any of its publisher keys (the
   * current one and older ones not retired) instead; read at each use */
  const struct server_keyring *keyring;
  unsigned grace_s;     /* 0: JOBS_DEFAULT_GRACE_S */
  unsigned queue_ttl_s; /* 0: JOBS_DEFAULT_QUEUE_TTL_S */
  /* bytes of a result's JSON stored with its output; 0 (and anything
   * above it): SERVER_DB_RESULT_MAX, which every valid result fits. Lower
   * only in tests (CORDON_RESULT_STORE_MAX): a result above it is recorded
   * without its output (result_unstorable) */
  size_t result_max;
  struct events *events; /* job state changes and output are published here */
};

struct jobs;

/* Everything in cfg is borrowed for the jobs' lifetime. 0 or -ENOMEM. */
int jobs_new(const struct jobs_config *cfg, struct jobs **out_jobs);
/* At start, before the daemon accepts a connection: make STATE/queue,
 * expire the jobs past their deadline or queue deadline (device_lost,
 * queue_expired) and drop the packages of jobs no longer queued. */
void jobs_recover(struct jobs *j);
/* Start the timer (expiry, the queue), after jobs_recover (called here if
 * it was not). */
void jobs_start(struct jobs *j);
/* Shutdown: stop the timer, forget the jobs in flight (their deadlines
 * decide them at the next start) and tell whoever waits for one. */
void jobs_close(struct jobs *j);
/* The daemon drains: queued jobs stay queued (in the database and
 * STATE/queue, for the next daemon) instead of being sent to devices that
 * connect or get room meanwhile; expiry and results go on. */
void jobs_drain(struct jobs *j);
/* After the loop has finished. NULL-safe. */
void jobs_free(struct jobs *j);

/* A message of an active session: running, result and output (live
 * output, published on the events as EVENT_JOB_OUTPUT: see messages.md
 * 6.17 for what is relayed). false for any other type. */
bool jobs_on_message(struct jobs *j, struct session *s, struct msg *m);
/* The session is going: jobs still being sent to it stop (their deadline
 * decides them). */
void jobs_on_session_closed(struct jobs *j, struct session *s);
/* A device's session is active: its queued jobs may go. */
void jobs_on_device_online(struct jobs *j, struct session *s);
/* Another server queued a job (server/cluster.h): the queue is scanned now. */
void jobs_scan_queue(struct jobs *j);
/* STATE/queue keeps only the packages of jobs still queued (another server
 * may have sent one this server queued). */
void jobs_sweep_queue(struct jobs *j);

/* Admin ops (server/admin_ops.h), on checked requests. */
/* A dispatch whose key names a job of its user: answered with that job
 * (true), also while the daemon drains; false: nothing was answered. */
bool jobs_op_dispatch_known(struct jobs *j, struct admin_conn *c, const json_t *req);
void jobs_op_dispatch(struct jobs *j, struct admin_conn *c, const json_t *req);
/* The job the request names, as the daemon read it (found; for cancel, not
 * over yet). */
void jobs_op_cancel(struct jobs *j, struct admin_conn *c, const struct server_db_job *job);
void jobs_op_wait(struct jobs *j, struct admin_conn *c, const struct server_db_job *job);
/* The job's output events as they come, then its wait reply as the end. */
void jobs_op_follow(struct jobs *j, struct admin_conn *c, const struct server_db_job *job);

#endif
