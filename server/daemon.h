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
 * routes them (the handler column of ADMIN_OPS names its daemon_op_*).
 *
 * Around the loop, also daemon.c's: the state directory's lock (lock.c),
 * the log's target (logfile.c, journal.c), systemd's notify socket
 * (notify.c) and the metrics listener (http.c, metrics.c). */
#ifndef CORDON_SERVER_DAEMON_H
#define CORDON_SERVER_DAEMON_H

#include <stdbool.h>

#include "core/error.h"
#include "core/log.h"
#include "net/conn.h"

#define DAEMON_DRAIN_TIMEOUT_S 30 /* --drain-timeout's default */
#define DAEMON_STATUS_MS 5000     /* how often STATUS= is brought up to date */

struct daemon_options {
  const char *state_dir;
  const char *host;
  int port;
  const struct net_limits *limits; /* NULL: net_limits_default() */
  unsigned job_grace_s;            /* deadline = timeout_s + this; 0: 120 */
  unsigned queue_ttl_s;            /* how long a queued job waits by default; 0: 1 h */
  int drain_timeout_s;             /* SIGTERM: wait this long for results; < 0: the default */
  const char *log_file;            /* NULL: stderr (or the journal under systemd) */
  enum core_log_level log_level;   /* lines below it are dropped (0: debug) */
  const char *metrics_host;        /* NULL: no /metrics listener */
  int metrics_port;
  bool require_approval; /* newly paired devices are pending until device approve */
  /* --advertise: the cluster's addresses every welcome lists (0..16, each
   * valid for msg_addr_parse()); borrowed */
  const char *const *advertise;
  size_t n_advertise;
};

/* Run until stopped. One daemon per state directory (server/lock.h): a
 * second one gets -EBUSY naming the first's pid, before it touches
 * anything. SIGHUP reopens the log file. SIGTERM or SIGINT drains: new
 * dispatches are refused, the daemon waits up to drain_timeout_s for the
 * results of the jobs running on connected devices, then every session
 * gets `goaway shutdown` and the daemon stops; a second signal stops it at
 * once. Under systemd it speaks the notify protocol (server/notify.h).
 * Returns 0 after a clean shutdown (uv_loop_close() returned 0), or an
 * error with diag. */
int daemon_run(const struct daemon_options *opt, struct cordon_diag *diag);

#endif
