/* Logging to the systemd journal natively: a core/log.h writer that sends
 * each event with sd_journal_sendv (libsystemd), with the level as its
 * PRIORITY, the program as SYSLOG_IDENTIFIER, the logfmt text from msg= on
 * as MESSAGE, and every field as CORDON_<KEY> (upper case), so that
 * `journalctl CORDON_JOB=…` finds a job's lines.
 *
 * Used only when stderr is the journal (JOURNAL_STREAM names stderr's
 * device and inode, as systemd sets it for a service whose output goes to
 * the journal) and the build has libsystemd (CORDON_WITH_SYSTEMD=1);
 * otherwise lines stay on stderr. A line the journal refuses is written to
 * stderr instead (one that libsystemd drops because the socket went away
 * is lost: under systemd the socket belongs to PID 1 and does not go).
 * Both daemons install it the same way (svc_journal_open_if_stderr). */
#ifndef CORDON_SVC_JOURNAL_H
#define CORDON_SVC_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/log.h"

/* Whether JOURNAL_STREAM names the file open on fd 2. */
bool journal_stream_is_stderr(void);
/* Whether this build can write to the journal. */
bool journal_available(void);
/* Install the writer (core_log_set_writer). 0, -ENOENT when the
 * journal's socket is not there (libsystemd would drop every line
 * silently), or -ENOTSUP without libsystemd. */
int journal_install(void);
/* Whether the writer is installed. */
bool journal_active(void);
/* What both daemons do when they log to stderr: install the writer when
 * stderr is the journal and this build can write to it (no journal
 * socket after all: the lines stay on stderr). Whether it was installed. */
bool journal_install_if_stderr(void);

/* Pure, for the writer and its tests: the journal's syslog priority of a
 * level, and the field name of a logfmt key: "CORDON_" then the key upper
 * cased, every byte outside [A-Z0-9_] as '_' (at most size - 1 bytes,
 * NUL-terminated). */
int journal_priority(enum core_log_level level);
void journal_field_name(const char *key, char *buf, size_t size);

#endif
