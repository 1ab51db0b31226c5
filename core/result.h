/* The job result of docs/DESIGN.md section 5, and its JSON form.
 *
 * A result owns its output buffers (at most the manifest's output cap each).
 * result_to_json() emits strings for valid UTF-8 output and *_base64 fields
 * otherwise; the caller owns the returned json_t.
 */
#ifndef CORDON_PROTO_RESULT_H
#define CORDON_PROTO_RESULT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/manifest.h"

/* How one limit was enforced; names are the §5 vocabulary. */
enum limit_mech {
  LIMIT_MECH_NONE = 0,
  LIMIT_MECH_CGROUP,
  LIMIT_MECH_RLIMIT,
  LIMIT_MECH_JOB,
  LIMIT_MECH_TMPFS,
  LIMIT_MECH_PID_NAMESPACE,
  LIMIT_MECH_PGROUP,
};
const char *limit_mech_name(enum limit_mech m);

/* What ended the job's tree (docs/DESIGN.md §5.1, kill_scope): NONE when
 * the job ended by itself and nothing of it was left to kill. */
enum kill_scope {
  KILL_SCOPE_NONE = 0,
  KILL_SCOPE_PID_NAMESPACE, /* SIGKILL to the namespace's init, by pidfd */
  KILL_SCOPE_CGROUP,        /* every process of the job's cgroup */
  KILL_SCOPE_DESCENDANTS,   /* the agent's descendants, it being a subreaper */
  KILL_SCOPE_PGROUP,        /* the job's process groups (macOS) */
  KILL_SCOPE_JOB,           /* the job's Job Object (Windows) */
};
/* "pid-namespace", ...; NULL for KILL_SCOPE_NONE. */
const char *kill_scope_name(enum kill_scope k);

struct result_buf {
  uint8_t *data;
  size_t len;
  bool truncated;
};

struct job_result {
  char job_id[33];
  char device_id[65];
  bool ran;    /* false when refused: exit/signal are null */
  bool exited; /* exit_code valid */
  int exit_code;
  int signal; /* valid when ran && !exited */
  struct result_buf out, err;
  uint64_t wall_ms;
  bool timed_out;
  int oom_killed; /* 1, 0, or -1 when the mechanism cannot tell */
  unsigned orphans_killed;
  enum kill_scope kill_scope;
  enum sandbox_level requested;
  enum sandbox_level level;
  bool level_known; /* false when refused before a level was chosen */
  char mechanism[96];
  const char *downgrade_reason; /* static string, reason_store, or NULL */
  char reason_store[64];        /* a received reason (result_from_msg) */
  enum limit_mech lim_memory, lim_processes, lim_cpu, lim_time, lim_disk;
  int error; /* 0 or a CORDON_E_* code */
  char error_message[512];
};

/* Keep at most cap bytes in b (whose data holds cap bytes); anything beyond
 * is dropped and b->truncated set. */
void result_buf_append(struct result_buf *b, const uint8_t *data, size_t n, size_t cap);

void job_result_init(struct job_result *r);
void job_result_release(struct job_result *r);
/* Set error and message (formatted); returns err. */
int job_result_fail(struct job_result *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Turn r into the result of a job that never ran (docs/protocol/messages.md
 * section 6.8, "A job that never ran"), for a start that failed after the
 * level and limits were filled in: no exit code or signal, empty output,
 * wall_ms 0, no level, mechanism or limits; job_id, device_id, requested
 * and the error are kept. The output buffers stay allocated. */
void job_result_not_run(struct job_result *r);

/* NULL on allocation failure. */
json_t *job_result_to_json(const struct job_result *r);

/* true if the bytes are valid UTF-8 (no overlongs, no surrogates). */
bool utf8_valid(const uint8_t *s, size_t len);

#endif
