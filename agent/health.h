/* What a running `cordon-agent run` knows about itself, for `status`,
 * `metrics` (agent/ctl.h) and the service manager's STATUS= line: the
 * session's state and since when, the last error, and counters (jobs by
 * outcome, connection attempts, sessions, message bytes). The session
 * (agent/session.c) and the dispatcher (agent/dispatch.c) write it; plain
 * storage owned by the runner, loop thread only. */
#ifndef CORDON_AGENT_HEALTH_H
#define CORDON_AGENT_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/result.h"

/* How a job ended, for the jobs_total metric and the log's outcome=. */
#define AGENT_OUTCOMES(X)                                                                          \
  X(SUCCEEDED, "succeeded") /* ran and exited 0 */                                                 \
  X(FAILED, "failed")       /* ran and exited non-zero */                                          \
  X(KILLED, "killed")       /* ended by a signal (memory, cpu, processes) */                       \
  X(TIMED_OUT, "timed_out") /* its timeout_s fired */                                              \
  X(CANCELLED, "cancelled") /* cancelled by the server */                                          \
  X(LOST, "lost")           /* the agent restarted or stopped, or the connection closed first */   \
  X(REFUSED, "refused")     /* never started: a ticket, package, ceiling or sandbox refusal */

enum agent_outcome {
#define AGENT_OUTCOME_ENUM(id, name) AGENT_OUTCOME_##id,
  AGENT_OUTCOMES(AGENT_OUTCOME_ENUM)
#undef AGENT_OUTCOME_ENUM
      AGENT_OUTCOME_N
};

const char *agent_outcome_name(enum agent_outcome o);
enum agent_outcome agent_outcome_of(const struct job_result *r);

struct agent_health {
  uint64_t started_ms;         /* wall clock, ms since the epoch */
  char server[300];            /* HOST:PORT of the paired server */
  bool connected;              /* a session is up (the welcome came) */
  uint64_t connected_since_ms; /* when it came; valid while connected */
  uint64_t disconnected_ms;    /* when the last session ended; 0: none yet */
  char last_error[512];        /* "" or the last problem, for people */
  uint64_t last_error_ms;      /* 0: none */
  bool draining;               /* SIGTERM: no new jobs, running ones finishing */
  uint64_t outcomes[AGENT_OUTCOME_N];
  uint64_t connects; /* connection attempts */
  uint64_t sessions; /* sessions established */
  uint64_t bytes_sent, bytes_received;
};

void agent_health_init(struct agent_health *h);
/* Remember a problem (formatted, cut to fit) with the time. */
void agent_health_error(struct agent_health *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
