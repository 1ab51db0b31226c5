/* cordon error codes.
 *
 * Functions return 0 on success and a negative value on failure: either a
 * negated errno (POSIX) or one of the CORDON_E_* codes below. The codes are
 * stable strings on the wire and in result JSON (docs/PROTOCOL.md lists
 * them); this X-macro table is the only place they are defined.
 *
 * Library code never prints: it may fill a `struct cordon_diag` with a one-
 * line detail (which field, which file) for the program to log once.
 */
#ifndef CORDON_CORE_ERROR_H
#define CORDON_CORE_ERROR_H

#include <stddef.h>

#define CORDON_ERR_MAP(X)                                                                          \
  X(SANDBOX_UNAVAILABLE, "sandbox_unavailable", "the required sandbox level is not available")     \
  X(CAPABILITY_DENIED, "capability_denied",                                                        \
    "the package asks for more than the device owner allows")                                      \
  X(SCOPE_TOO_BROAD, "scope_too_broad", "a filesystem grant is too broad")                         \
  X(SIGNATURE_INVALID, "signature_invalid", "signature verification failed")                       \
  X(UNKNOWN_KEY, "unknown_key", "signed by a key that is not trusted")                             \
  X(PACKAGE_CORRUPT, "package_corrupt", "the package is corrupt")                                  \
  X(PACKAGE_TOO_LARGE, "package_too_large", "the package exceeds a size limit")                    \
  X(MANIFEST_INVALID, "manifest_invalid", "the manifest is invalid")                               \
  X(CONFIG_INVALID, "config_invalid", "the configuration is invalid")                              \
  X(TICKET_EXPIRED, "ticket_expired", "the ticket has expired")                                    \
  X(TICKET_REPLAYED, "ticket_replayed", "the ticket's job id was already seen")                    \
  X(WRONG_DEVICE, "wrong_device", "the ticket is for another device, user or session")             \
  X(SPAWN_FAILED, "spawn_failed", "the job could not be started")                                  \
  X(JOB_USER_MISSING, "job_user_missing", "the job user account does not exist")                   \
  X(NO_ELIGIBLE_DEVICE, "no_eligible_device", "no device can run this job")                        \
  X(CANCELLED, "cancelled", "the job was cancelled")                                               \
  X(AGENT_RESTARTED, "agent_restarted", "the agent restarted while the job ran")                   \
  X(AGENT_STOPPED, "agent_stopped", "the agent was stopped before the job finished")               \
  X(DEVICE_LOST, "device_lost", "the device did not come back before the deadline")                \
  X(QUEUE_EXPIRED, "queue_expired", "no eligible device came online before the queue deadline")    \
  X(PLATFORM_MISMATCH, "platform_mismatch", "the package does not support this platform")          \
  X(RESULT_UNSTORABLE, "result_unstorable",                                                        \
    "the server could not store the result: it was recorded without its output")                   \
  X(USAGE, "usage", "bad usage")                                                                   \
  /* the server's administration (cordon-server): what a command named */                          \
  X(NOT_FOUND, "not_found", "no such user, device, job or code")                                   \
  X(ALREADY_EXISTS, "already_exists", "it already exists")                                         \
  X(NOT_RUNNING, "not_running", "it is not running")                                               \
  X(PROTOCOL, "protocol_error", "protocol error")                                                  \
  X(CRYPTO, "crypto_failed", "cryptographic operation failed")                                     \
  X(LIMIT, "limit_exceeded", "input exceeds a limit")                                              \
  X(INTERNAL, "internal_error", "internal error")

enum cordon_err {
  CORDON_E_BASE_ = -10000,
#define CORDON_ERR_ENUM_(name, str, msg) CORDON_E_##name,
  CORDON_ERR_MAP(CORDON_ERR_ENUM_)
#undef CORDON_ERR_ENUM_
      CORDON_E_END_
};

/* Stable code string for err ("io_error" for a negated errno). */
const char *cordon_err_name(int err);
/* Human message for err (strerror for a negated errno). */
const char *cordon_err_message(int err);
/* Map a stable code string back to its value; 0 if unknown. */
int cordon_err_from_name(const char *name);

/* A one-line detail for the caller to log; never holds secrets. */
struct cordon_diag {
  char msg[512];
};

/* Rewrite, in place, every control byte (below 0x20, and 0x7f) of the
 * NUL-terminated string in buf as the four characters \xNN (a C1 control,
 * UTF-8 c2 80..c2 9f, as \x80..\x9f), cutting the
 * tail when the result would not fit in size bytes. Messages cordon prints
 * name bytes that packages and peers chose; a terminal must not act on them. */
void cordon_escape_controls(char *buf, size_t size);
/* Format into diag (NULL-safe), control bytes escaped; returns err so
 * callers can `return diag_set(...)`. */
int cordon_diag_set(struct cordon_diag *diag, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
