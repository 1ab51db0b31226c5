/* systemd's readiness protocol (sd_notify(3)), spoken directly: one
 * datagram of "KEY=VALUE\n" lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or "@name" in the abstract namespace). No
 * library: tests bind their own socket and read what arrives.
 *
 * The daemon sends READY=1 once its listener and database are up,
 * STATUS=… when the numbers change, STOPPING=1 when it drains, and
 * WATCHDOG=1 from its event loop when $WATCHDOG_USEC asks for it (and
 * $WATCHDOG_PID, if set, is this process). Without $NOTIFY_SOCKET every
 * call does nothing and returns 0. */
#ifndef CORDON_SERVER_NOTIFY_H
#define CORDON_SERVER_NOTIFY_H

#include <stdint.h>

#include "core/error.h"

struct notify;

/* Read $NOTIFY_SOCKET and open a datagram socket for it. 0 and *out (NULL
 * when there is no socket to talk to), -EINVAL with diag for a value that
 * is no socket address, or -errno. */
int notify_open(struct notify **out, struct cordon_diag *diag);
void notify_close(struct notify *n); /* NULL-safe */

/* Send text (lines "KEY=VALUE", '\n' between them) as one datagram. 0, or
 * -errno (the caller logs it once; a lost notification is not fatal). */
int notify_send(struct notify *n, const char *text);

/* The watchdog interval $WATCHDOG_USEC asks for, in microseconds, or 0
 * when there is none for this process. */
uint64_t notify_watchdog_usec(void);

#endif
