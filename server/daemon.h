/* The cordon-server daemon: agents' sessions and pairing over net/conn, the
 * admin socket, job dispatch. One libuv loop, one thread. */
#ifndef CORDON_SERVER_DAEMON_H
#define CORDON_SERVER_DAEMON_H

#include "net/conn.h"
#include "core/error.h"

#define SERVER_ADMIN_SOCKET "admin.sock"
#define SERVER_PING_MS 15000u
#define SERVER_PAIR_RATE_MAX 10          /* pairing connections per address ... */
#define SERVER_PAIR_RATE_WINDOW_MS 60000 /* ... per minute */

struct daemon_options {
  const char *state_dir;
  const char *host;
  int port;
  const struct net_limits *limits; /* NULL: net_limits_default() */
  unsigned job_grace_s;            /* deadline = timeout_s + this; 0: 120 */
};

/* Run until SIGTERM/SIGINT. Returns 0 after a clean shutdown
 * (uv_loop_close() returned 0), or an error with diag. */
int daemon_run(const struct daemon_options *opt, struct cordon_diag *diag);

#endif
