/* The daemon's metrics, served as Prometheus text at /metrics
 * (server/metrics_http.c) and read nowhere else.
 *
 * Two kinds: counters and histograms that the parts bump as things happen
 * (the functions below; one process-wide set, the daemon is one thread),
 * and gauges read at scrape time from the live state and the database
 * (struct metrics_gauges, filled by the daemon). metrics_render() turns a
 * snapshot of both into the text exposition format, version 0.0.4: pure,
 * for the tests and the responder alike.
 *
 * Label values are fixed sets (the tables below), never data from a peer:
 * a device cannot make the output grow. */
#ifndef CORDON_SERVER_METRICS_H
#define CORDON_SERVER_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a pairing failed: id, label. The agent is told the same for all. */
#define METRICS_PAIR_FAILURES(X)                                                                   \
  X(RATE_LIMITED, "rate_limited") /* too many attempts from the address */                         \
  X(NO_CODE, "no_code")           /* the hello named no code, or a malformed one */                \
  X(UNKNOWN_CODE, "unknown_code") /* no such code */                                               \
  X(CODE_USED, "code_used")       /* the code already paired a device */                           \
  X(CODE_BURNED, "code_burned")   /* out of attempts, or revoked */                                \
  X(CODE_EXPIRED, "code_expired") /* past its --ttl */                                             \
  X(BAD_PROOF, "bad_proof")       /* a wrong code: the agent's proof does not match it */          \
  X(NO_PROOF, "no_proof")         /* closed before its proof: the agent's code did not   */        \
                                  /* match the server's proof, or it went away           */        \
  X(STORE_FAILED, "store_failed") /* the code was right; recording the device failed */

enum metrics_pair_failure {
#define METRICS_ENUM_(id, label) METRICS_PAIR_##id,
  METRICS_PAIR_FAILURES(METRICS_ENUM_)
#undef METRICS_ENUM_
      METRICS_PAIR_COUNT_
};

/* Why a result from an agent was not recorded as the job's outcome. */
#define METRICS_RESULT_REFUSALS(X)                                                                 \
  X(NOT_THIS_DEVICE, "not_this_device")   /* unknown job, or another device's */                   \
  X(ALREADY_RECORDED, "already_recorded") /* a second result (acked again) */                      \
  X(LATE, "late")                         /* the job had expired: kept, state unchanged */         \
  X(NOT_SENT, "not_sent")                 /* the job was never sent */                             \
  X(MALFORMED, "malformed")               /* the result could not be read */                       \
  X(STORE_FAILED, "store_failed")         /* the database failed */                                \
  X(BAD_RECEIPT, "bad_receipt")           /* its receipt signature did not verify */               \
  X(UNSTORABLE, "unstorable")             /* too large to store: recorded without its output */

enum metrics_result_refusal {
#define METRICS_ENUM_(id, label) METRICS_REFUSAL_##id,
  METRICS_RESULT_REFUSALS(METRICS_ENUM_)
#undef METRICS_ENUM_
      METRICS_REFUSAL_COUNT_
};

/* Job states as the database names them (server_db_job_state order). */
#define METRICS_JOB_STATES 7

/* --- events (counters and histograms) -------------------------------------- */

void metrics_connection_accepted(void);
void metrics_pairing_succeeded(void);
void metrics_pairing_failed(enum metrics_pair_failure why);
void metrics_bytes_sent(uint64_t n);
void metrics_job_dispatched(void);
/* From the dispatch request to the agent's `running`. */
void metrics_dispatch_latency(uint64_t ms);
/* A job reached final_state (its db state) with a result that took
 * wall_ms, or without one (wall_ms < 0: expired). */
void metrics_job_finished(int final_state, int64_t wall_ms);
void metrics_result_refused(enum metrics_result_refusal why);
/* A commit group of the jobs ended: committed (err 0) or failed. */
void metrics_db_group(int err);

/* --- the gauges, read at scrape time --------------------------------------- */

struct metrics_gauges {
  size_t sessions_online; /* active sessions */
  size_t connections;     /* TCP connections (any phase) */
  size_t devices_active, devices_revoked;
  bool have_db;                      /* the counts below were read */
  uint64_t jobs[METRICS_JOB_STATES]; /* by server_db_job_state */
  bool draining;
  uint64_t start_time_s;
  uint64_t db_commits; /* server_db_commit_count */
  const char *instance; /* server/cluster.h: this process's instance id (NULL: none) */
};

/* The exposition text (heap, NUL-terminated) of the counters so far and g.
 * 0 and *out_text, *out_len; or -ENOMEM. */
int metrics_render(const struct metrics_gauges *g, char **out_text, size_t *out_len);

/* Tests: every counter and histogram back to zero. */
void metrics_reset(void);

#endif
