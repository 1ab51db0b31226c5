/* The admin API, STATE/admin.sock: the one table of its operations,
 * shared by the daemon (server/admin_sock.c frames it, the handlers are
 * named here) and every client (server/admin_client.c, the Python client
 * clients/python/cordon_admin.py). docs/protocol/admin.md is its public
 * specification; this comment and that page say the same.
 *
 * One JSON object per line each way, many requests one after the other on
 * one connection (the next is read once the previous one is answered):
 *   request  {"op": NAME, ARG: value, ...}   the args of the op's schema;
 *                                            any other key is refused
 *   reply    {"ok": true, ...}               the op's own result keys
 *            {"ok": false, "code": CODE, "message": TEXT}
 *                                            CODE a core/error.h name
 * A request with "bytes": N is followed by exactly N raw bytes (dispatch:
 * the package), N <= ADMIN_BODY_MAX, checked before anything is stored.
 * The first request may be hello (the version exchange); a connection
 * that starts with another op speaks version 1. A streaming op (watch,
 * follow) answers {"ok": true}, then event lines {"event": NAME, ...}.
 *
 * An op is named once, in ADMIN_OPS: its wire name, the daemon's handler
 * (a function of server/daemon.c; the client never expands that column),
 * the args it requires and those it may take (bits of ADMIN_ARGS), and the
 * message of the usage error for a request that does not fit. A new op:
 * one line here, one handler, its section in docs/protocol/admin.md.
 * Pure: no I/O. */
#ifndef CORDON_SERVER_ADMIN_OPS_H
#define CORDON_SERVER_ADMIN_OPS_H

#include <jansson.h>
#include <stdbool.h>

#include "core/error.h"

#define ADMIN_SOCKET_FILE "admin.sock" /* in the state directory: 0660 cordon-admin, or 0600 */
#define ADMIN_GROUP                                                                                \
  "cordon-admin"               /* members may use the socket (besides root and the daemon's user) */
#define ADMIN_VERSION 1        /* the protocol version this build speaks */
#define ADMIN_REQUEST_MAX 8192 /* a request line with its newline is shorter */
#define ADMIN_REPLY_MAX (16u << 20) /* bytes of a reply line */
#define ADMIN_BODY_MAX (1ull << 30) /* raw bytes after a request ("bytes"): the package */
#define ADMIN_STREAM_QUEUE_MAX                                                                     \
  (1u << 20)                   /* unsent bytes of a watch/follow before it is dropped              \
                                */
#define ADMIN_CONN_MAX 64      /* connections at once; more are closed at once */
#define ADMIN_JOBS_MAX 1000000 /* jobs: the largest "limit" */

enum admin_type {
  ADMIN_STRING,
  ADMIN_ARRAY, /* its elements are the handler's to check */
  ADMIN_BOOL,
  ADMIN_INT, /* a JSON integer */
};

/* Every argument an op may take: id, JSON key, type. */
#define ADMIN_ARGS(X)                                                                              \
  X(USER, "user", ADMIN_STRING)        /* a user's name */                                         \
  X(DEVICE, "device", ADMIN_STRING)    /* a device id */                                           \
  X(PACKAGE, "package", ADMIN_STRING)  /* an absolute path to a .cpkg (daemon's user, root) */     \
  X(ARGS, "args", ADMIN_ARRAY)         /* the job's arguments, strings */                          \
  X(WAIT, "wait", ADMIN_BOOL)          /* reply only once the job is over */                       \
  X(JOB, "job", ADMIN_STRING)          /* a job id */                                              \
  X(WHERE, "where", ADMIN_ARRAY)       /* "KEY=VALUE" labels the device must have */               \
  X(NO_QUEUE, "no_queue", ADMIN_BOOL)  /* refuse rather than queue when no device is online */     \
  X(QUEUE_TTL, "queue_ttl", ADMIN_INT) /* seconds a queued job waits; absent: the daemon's */      \
  X(EXPLAIN, "explain", ADMIN_BOOL)    /* say which device and why, send nothing */                \
  X(KEY, "key", ADMIN_STRING)  /* idempotency: the user's job with this key, or a new one */       \
  X(BYTES, "bytes", ADMIN_INT) /* raw bytes that follow the line: the package */                   \
  X(VERSIONS, "versions", ADMIN_ARRAY) /* hello: the versions the client speaks, integers */       \
  X(LIMIT, "limit", ADMIN_INT)         /* jobs: at most this many, newest first (0: all) */        \
  X(SET, "set", ADMIN_ARRAY)           /* label: "KEY=VALUE" labels to set */                      \
  X(REMOVE, "remove", ADMIN_ARRAY)     /* label: keys to remove */

enum admin_arg {
#define ADMIN_ARG_ENUM_(id, key, type) ADMIN_ARG_##id,
  ADMIN_ARGS(ADMIN_ARG_ENUM_)
#undef ADMIN_ARG_ENUM_
      ADMIN_ARG_COUNT_
};

#define ADMIN_A(id) (1u << ADMIN_ARG_##id)

/* id, name, handler, required args, optional args, usage message (NULL
 * when no request can miss).
 * Replies (beyond "ok"); docs/protocol/admin.md has every key:
 *   hello     "version" (the highest both speak), "server" (name/version),
 *             "ops" [names]; no common version: code usage
 *   ping      -
 *   sessions  "sessions" [{"device", "user", "address", "since" (Unix
 *             seconds)}]: the devices connected now; "draining": bool
 *   dispatch  "job_id", "device" (null while queued for any device),
 *             "state" ("sent" or "queued"), "queue_expires" (Unix seconds,
 *             queued only); with wait, "job" (the `job --json` object) once
 *             it is over; no device: code no_eligible_device and
 *             "candidates" [{"device", "name", "reason"}]; with explain,
 *             nothing is sent: "decision" ("send", "queue" or "refuse"),
 *             "device" (the one it would take, or null) and "candidates"
 *             [{"device", "name", "online", "running", "max_jobs",
 *             "last_seen", "labels", "reason" (null when eligible),
 *             "chosen"}]; while the daemon drains: code io_error; a waiter
 *             whose job is not over when the daemon stops: code io_error
 *             with "job_id" and "state". The package: "package" (a path)
 *             or "bytes" (it follows the line), exactly one; with key, a
 *             job the user dispatched with the same key before is answered
 *             (its "job_id", "device", "state", "existing": true, also
 *             while the daemon drains) and no second one is made; the same
 *             key with another package is code usage
 *   cancel    "state": "cancelled"
 *   revoke    "disconnected": whether a live session was closed
 *   wait      "job" (the `job --json` object) once the job is over: at once
 *             for a finished job; a job cancelled on its device is over
 *             when its result arrives or its deadline passes
 *   job       "job": the `job --json` object
 *   jobs      "jobs": [the `jobs --json` objects], newest first
 *   devices   "devices": [the `devices --json` objects]
 *   device    "device": one `devices --json` object
 *   label     "labels": {KEY: VALUE} the device's labels after the change
 *   watch     then {"event": "job_state" | "device_online" |
 *             "device_offline", ...} lines until the client closes
 *   follow    then {"event": "output", "stream", "offset", "data"
 *             (base64)} lines, and last {"event": "end", "ok", "job"} (the
 *             `wait` reply with "event": "end") once the job is over
 * A stream that cannot keep up (ADMIN_STREAM_QUEUE_MAX unsent bytes) ends
 * with {"event": "error", "ok": false, "code": "limit_exceeded", ...}, one
 * the daemon stops under with code io_error; then the connection is
 * closed. */
#define ADMIN_OPS(X)                                                                               \
  X(HELLO, "hello", daemon_op_hello, ADMIN_A(VERSIONS), 0, "hello needs versions")                 \
  X(PING, "ping", daemon_op_ping, 0, 0, NULL)                                                      \
  X(SESSIONS, "sessions", daemon_op_sessions, 0, 0, NULL)                                          \
  X(DISPATCH, "dispatch", daemon_op_dispatch, ADMIN_A(USER),                                       \
    ADMIN_A(PACKAGE) | ADMIN_A(BYTES) | ADMIN_A(DEVICE) | ADMIN_A(ARGS) | ADMIN_A(WAIT) |          \
        ADMIN_A(WHERE) | ADMIN_A(NO_QUEUE) | ADMIN_A(QUEUE_TTL) | ADMIN_A(EXPLAIN) | ADMIN_A(KEY), \
    "dispatch needs user, package and args")                                                       \
  X(CANCEL, "cancel", daemon_op_cancel, ADMIN_A(JOB), 0, "no such job")                            \
  X(REVOKE, "revoke", daemon_op_revoke, ADMIN_A(DEVICE), 0, "revoke needs a device")               \
  X(WAIT, "wait", daemon_op_wait, ADMIN_A(JOB), 0, "wait needs a job")                             \
  X(JOB, "job", daemon_op_job, ADMIN_A(JOB), 0, "job needs a job")                                 \
  X(JOBS, "jobs", daemon_op_jobs, 0, ADMIN_A(USER) | ADMIN_A(LIMIT), "jobs takes user and limit")  \
  X(DEVICES, "devices", daemon_op_devices, 0, ADMIN_A(USER), "devices takes a user")               \
  X(DEVICE, "device", daemon_op_device, ADMIN_A(DEVICE), 0, "device needs a device")               \
  X(LABEL, "label", daemon_op_label, ADMIN_A(DEVICE), ADMIN_A(SET) | ADMIN_A(REMOVE),              \
    "label needs a device, and set and remove are arrays")                                         \
  X(WATCH, "watch", daemon_op_watch, 0, 0, NULL)                                                   \
  X(FOLLOW, "follow", daemon_op_follow, ADMIN_A(JOB), 0, "follow needs a job")

enum admin_op {
#define ADMIN_OP_ENUM_(id, name, handler, required, optional, usage) ADMIN_OP_##id,
  ADMIN_OPS(ADMIN_OP_ENUM_)
#undef ADMIN_OP_ENUM_
      ADMIN_OP_COUNT_
};

/* Reply keys. */
#define ADMIN_REPLY_OK "ok"
#define ADMIN_REPLY_CODE "code"
#define ADMIN_REPLY_MESSAGE "message"
#define ADMIN_REPLY_JOB_ID "job_id"
#define ADMIN_REPLY_DEVICE "device"
#define ADMIN_REPLY_JOB "job"
#define ADMIN_REPLY_CANDIDATES "candidates"
#define ADMIN_REPLY_STATE "state"
#define ADMIN_REPLY_DISCONNECTED "disconnected"
#define ADMIN_REPLY_QUEUE_EXPIRES "queue_expires"
#define ADMIN_REPLY_DECISION "decision"
#define ADMIN_REPLY_SESSIONS "sessions"
#define ADMIN_REPLY_DRAINING "draining"
#define ADMIN_REPLY_EXISTING "existing"
#define ADMIN_REPLY_VERSION "version"
#define ADMIN_REPLY_SERVER "server"
#define ADMIN_REPLY_OPS "ops"
#define ADMIN_REPLY_JOBS "jobs"
#define ADMIN_REPLY_DEVICES "devices"
#define ADMIN_REPLY_LABELS "labels"
#define ADMIN_REPLY_EVENT "event"

/* The wire name of op and the JSON key of arg; NULL when out of range. */
const char *admin_op_name(enum admin_op op);
const char *admin_arg_key(enum admin_arg arg);

/* --- requests ------------------------------------------------------------- */

/* A new request {"op": name} (new reference), or NULL when out of memory. */
json_t *admin_request_new(enum admin_op op);
/* Set arg to value (stolen). 0, or -ENOMEM (also for a NULL value: the
 * json_*() that made it ran out of memory). */
int admin_request_set(json_t *req, enum admin_arg arg, json_t *value);

/* Check req against the table: "op" names an op, every required arg is
 * there, every other key is one of the op's args and has its type. 0 and
 * *out_op, or CORDON_E_USAGE with diag "missing op", "unknown op",
 * "unknown key 'K' for op OP" or the op's usage message. */
int admin_request_check(const json_t *req, enum admin_op *out_op, struct cordon_diag *diag);

/* The string value of arg in a checked request, NULL when absent. */
const char *admin_request_string(const json_t *req, enum admin_arg arg);
/* The value of arg (borrowed), NULL when absent. */
json_t *admin_request_get(const json_t *req, enum admin_arg arg);
/* A boolean arg: true only when present and true. */
bool admin_request_flag(const json_t *req, enum admin_arg arg);
/* An integer arg, or dflt when absent. */
long long admin_request_int(const json_t *req, enum admin_arg arg, long long dflt);

/* Parse one request line (len bytes, without its newline): a JSON object
 * checked with admin_request_check, and the raw bytes it announces
 * ("bytes": 0..ADMIN_BODY_MAX; 0 when absent). 0 with *out_req (new
 * reference), *out_op and *out_bytes; CORDON_E_USAGE ("request is not a
 * JSON object", or admin_request_check's) or CORDON_E_PACKAGE_TOO_LARGE
 * ("bytes" above ADMIN_BODY_MAX or below 0), with diag; when the check
 * refuses a request whose "bytes" is in range, *out_bytes is still set, so
 * that the caller can read past them. The daemon's parser (and the fuzz
 * target's). */
int admin_request_parse(const char *line, size_t len, json_t **out_req, enum admin_op *out_op,
                        unsigned long long *out_bytes, struct cordon_diag *diag);

/* --- replies -------------------------------------------------------------- */

/* {"ok": true} (new reference; NULL when out of memory). */
json_t *admin_reply_ok(void);
/* {"ok": false, "code": cordon_err_name(err), "message": message}. */
json_t *admin_reply_error(int err, const char *message);
/* Whether a reply says ok. */
bool admin_reply_is_ok(const json_t *reply);
/* The error of a reply that is not ok: its code (-EIO for "io_error",
 * CORDON_E_INTERNAL when it names none this build knows) and message
 * (NULL when absent). */
int admin_reply_err(const json_t *reply, const char **out_message);

#endif
