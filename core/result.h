/* The job result of docs/DESIGN.md section 5, and its JSON form.
 *
 * A result owns its output buffers (at most the manifest's output cap each).
 * job_result_to_json() writes a stream as a JSON string when it is text
 * (result_output_is_text: valid UTF-8 with no control byte but tab, newline
 * and carriage return), otherwise as null with <name>_base64; the caller
 * owns the returned json_t. Either way a stream of n bytes takes at most
 * 2n + 4 characters of JSON with its quotes (a string then escapes only "
 * and \, as two characters each; base64 takes 4 per 3 bytes, rounded up:
 * 4 for a single byte), so no output can make a result longer than
 * RESULT_JSON_MAX (docs/DESIGN.md section 5.2).
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

/* Bytes of one captured stream, at most: the largest limits.output_kb. */
#define RESULT_OUTPUT_MAX ((size_t)MANIFEST_OUTPUT_KB_MAX * 1024)
/* Characters of JSON that the value of a stream of n bytes takes, at most
 * (the quotes included). */
#define RESULT_STREAM_JSON_MAX(n) (2 * (size_t)(n) + 4)
/* Characters of a result's JSON (JSON_COMPACT) besides its two streams'
 * values, at most: the keys, the ids, the numbers, the sandbox fields and
 * an error whose message (511 bytes) is all control bytes (\u00XX each);
 * about 4.6 KiB at worst (tests/core/test_result.c builds it). */
#define RESULT_JSON_ENVELOPE_MAX 16384
/* The longest result JSON a valid manifest allows: what the server's store
 * takes (server/db.h SERVER_DB_RESULT_MAX). */
#define RESULT_JSON_MAX (2 * RESULT_STREAM_JSON_MAX(RESULT_OUTPUT_MAX) + RESULT_JSON_ENVELOPE_MAX)

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
/* true if a stream goes into the JSON as a string: valid UTF-8 without a
 * byte below 0x20 other than \t, \n and \r (JSON writes those as six
 * characters, \u00XX). */
bool result_output_is_text(const uint8_t *s, size_t len);

/* The captured bytes of stream name ("stdout", "stderr") of the result JSON
 * object: its string, or the standard base64 (padded) of <name>_base64 when
 * the string is null; a result that carries a string full of escapes (an
 * agent or server from before control bytes went to base64) reads the
 * same. The form is checked before anything is allocated: a string or a
 * base64 text for more than max bytes is refused. 0 with *out_data
 * (malloc'd, never NULL; the caller frees it) and *out_len; -ENODATA: the
 * result holds no output for it (null and no <name>_base64: a result the
 * server recorded without its output, docs/PROTOCOL.md); -EINVAL: not an
 * object, both forms, a value of another type, or bad base64; -E2BIG: over
 * max; -ENOMEM. */
int job_result_output_decode(const json_t *result, const char *name, size_t max, uint8_t **out_data,
                             size_t *out_len);

#endif
