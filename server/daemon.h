/* The cordon-server daemon: one libuv loop, one thread.
 *
 * daemon.c owns the loop, the keys, the database handle, the signals and
 * the shutdown, and composes the parts; calls go one way, down:
 *
 *   daemon.c ──> session.c     agents' connections: hello, welcome,
 *      │                       ping, unpair, goaway, online state
 *      ├──────> pair.c         pairing mode ──> session.c
 *      ├──────> jobs.c         dispatch, results, cancel, expiry
 *      │                          ──> session.c, admin_sock.c
 *      ├──────> admin_sock.c   the local admin socket (framing only)
 *      └──────> admin_ops.c    the admin ops' one table
 *   and all of them ──> db*.c, net/, proto/, core/
 *
 * Upward events are callbacks that daemon.c installs: session.c reports
 * pairing messages, job messages and closes through struct session_hooks,
 * admin_sock.c reports requests through its admin_request_fn; daemon.c
 * routes them (the handler column of ADMIN_OPS names its daemon_op_*). */
#ifndef CORDON_SERVER_DAEMON_H
#define CORDON_SERVER_DAEMON_H

#include "core/error.h"
#include "net/conn.h"

struct daemon_options {
  const char *state_dir;
  const char *host;
  int port;
  const struct net_limits *limits; /* NULL: net_limits_default() */
  unsigned job_grace_s;            /* deadline = timeout_s + this; 0: 120 */
  unsigned queue_ttl_s;            /* how long a queued job waits by default; 0: 1 h */
};

/* Run until SIGTERM/SIGINT. Returns 0 after a clean shutdown
 * (uv_loop_close() returned 0), or an error with diag. */
int daemon_run(const struct daemon_options *opt, struct cordon_diag *diag);

#endif
