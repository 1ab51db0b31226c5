/* Logging to the systemd journal natively: a core/log.h writer that sends
 * each event to journald's socket (/run/systemd/journal/socket) in the
 * journal's native protocol, spoken directly (no libsystemd), with the
 * level as its PRIORITY, the program as SYSLOG_IDENTIFIER, the logfmt text
 * from msg= on as MESSAGE, msg itself as CORDON_MSG, and every field as
 * CORDON_<KEY> (upper case), so that `journalctl CORDON_JOB=…` finds a
 * job's lines.
 *
 * The protocol (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/): one
 * AF_UNIX/SOCK_DGRAM datagram per entry, each field "NAME=value\n", or,
 * for a value holding a newline, "NAME\n", its length as 64-bit little
 * endian, the value, "\n". An entry too large for one datagram (the send
 * fails with EMSGSIZE: above the socket's send buffer, 208 KiB by
 * default) is written to a memfd, sealed (no write, grow, shrink or
 * further seal) and passed alone with SCM_RIGHTS in an empty datagram, as
 * the protocol documents; nothing is cut.
 *
 * Never blocks: the socket is non-blocking. A line that finds the
 * journal's queue full (EAGAIN) is dropped and counted (journal_dropped);
 * the next line that gets through carries the count so far as
 * CORDON_JOURNAL_DROPPED. stderr is not used then: under systemd it is the
 * journal's own stream, which would block. Any other failure (the socket
 * gone or not a socket, no memory, no memfd) writes the line to stderr
 * instead: it is not lost.
 *
 * Used only when stderr is the journal (JOURNAL_STREAM names stderr's
 * device and inode, as systemd sets it for a service whose output goes to
 * the journal) and the build writes to the journal (CORDON_WITH_SYSTEMD=1,
 * Linux); otherwise lines stay on stderr. Both daemons install it the same
 * way (journal_install_if_stderr). Logging may happen from any thread. */
#ifndef CORDON_SVC_JOURNAL_H
#define CORDON_SVC_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/log.h"

/* Whether JOURNAL_STREAM names the file open on fd 2. */
bool journal_stream_is_stderr(void);
/* Whether this build can write to the journal. */
bool journal_available(void);
/* Install the writer (core_log_set_writer). 0, -ENOENT when the journal's
 * socket is not there, another -errno when no socket can be made, or
 * -ENOTSUP in a build without the journal. */
int journal_install(void);
/* Whether the writer is installed. */
bool journal_active(void);
/* What both daemons do when they log to stderr: install the writer when
 * stderr is the journal and this build can write to it (no journal
 * socket after all: the lines stay on stderr). Whether it was installed. */
bool journal_install_if_stderr(void);
/* The lines dropped so far because the journal's queue was full. */
unsigned long long journal_dropped(void);

/* Pure, for the writer and its tests: the journal's syslog priority of a
 * level, and the field name of a logfmt key: "CORDON_" then the key upper
 * cased, every byte outside [A-Z0-9_] as '_' (at most size - 1 bytes,
 * NUL-terminated; a valid journal field name when size <= 65). */
int journal_priority(enum core_log_level level);
void journal_field_name(const char *key, char *buf, size_t size);

#endif
