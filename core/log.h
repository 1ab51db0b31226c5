/* The daemons' log: one logfmt line per event,
 *
 *   ts=2026-12-01T10:05:47.123Z level=info prog=cordon-server msg="job sent" job=6bf9… device=a7b1…
 *
 * an RFC 3339 UTC timestamp with milliseconds, a level, the program, the
 * message and key=value fields (values quoted when they hold a space, '=',
 * '"' or nothing; control bytes escaped as \xNN, so a line is always one
 * line). Library code does not log; the programs and their daemons do,
 * through these functions, so the format is decided in one place. Lines
 * below the level set with core_log_set_level are dropped. Secrets are
 * never passed here.
 *
 * A writer set with core_log_set_writer receives each event instead of
 * stderr (e.g. the systemd journal, with the level as its priority and
 * the fields as journal fields). Not thread-safe to reconfigure while
 * other threads log; logging itself may happen from any thread. */
#ifndef CORDON_CORE_LOG_H
#define CORDON_CORE_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum core_log_level {
  CORE_LOG_DEBUG,
  CORE_LOG_INFO,
  CORE_LOG_WARN,
  CORE_LOG_ERROR,
};

/* The prog= field of every line; a static string ("cordon-server"). */
void core_log_set_program(const char *name);
/* The lowest level written (default info). */
void core_log_set_level(enum core_log_level min);
bool core_log_enabled(enum core_log_level level);
/* "debug", "info", "warn", "error": 0, or -EINVAL (out untouched). */
int core_log_level_parse(const char *name, enum core_log_level *out_level);
const char *core_log_level_name(enum core_log_level level);

/* An event: the message and n_kv key/value pairs (kv[2i], kv[2i+1]), and
 * the whole logfmt line without its newline. */
struct core_log_event {
  enum core_log_level level;
  const char *program;
  const char *msg;
  const char *const *kv;
  size_t n_kv;
  const char *line;
};
typedef void (*core_log_writer_fn)(const struct core_log_event *ev, void *ctx);
/* NULL restores stderr. */
void core_log_set_writer(core_log_writer_fn fn, void *ctx);

/* An event with fields: key, value, key, value, ..., NULL. A NULL value
 * ends the list too (so an absent optional value cannot shift the pairs,
 * pass "" or "-" instead). At most 16 pairs. */
void core_log_kv(enum core_log_level level, const char *msg, ...) __attribute__((sentinel));
/* A formatted message at a level, no fields. */
void core_logl(enum core_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* core_logl at info. */
void core_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Format an event into buf (always NUL-terminated, cut at size); returns
 * the length written. ms is milliseconds since the epoch. For tests and
 * writers that need the line themselves. */
size_t core_log_format(char *buf, size_t size, unsigned long long ms, enum core_log_level level,
                       const char *program, const char *msg, const char *const *kv, size_t n_kv);

#endif
