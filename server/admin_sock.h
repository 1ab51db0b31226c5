/* The admin socket, daemon side: a UNIX socket in the state directory
 * (0600, and every peer must be the daemon's own user, SO_PEERCRED). Each
 * connection carries one request line and gets one reply line, then it is
 * closed (server/admin_ops.h is the protocol).
 *
 * Framing only: a line that is too long or not a JSON object is answered
 * here; every other request goes to on_request, which answers it (now or
 * later, e.g. when a job ends) with admin_conn_reply. Knows nothing of the
 * ops. */
#ifndef CORDON_SERVER_ADMIN_SOCK_H
#define CORDON_SERVER_ADMIN_SOCK_H

#include <jansson.h>
#include <uv.h>

struct admin_sock;
struct admin_conn; /* one connection, alive until its reply is written */

/* req is borrowed for the call. */
typedef void admin_request_fn(void *data, struct admin_conn *c, json_t *req);

/* Listen on path (a stale socket file there is removed first; created with
 * mode 0600). Returns 0 and *out_sock, or a negative uv error; on failure
 * the handle is being closed: run the loop before closing it. */
int admin_sock_open(uv_loop_t *loop, const char *path, admin_request_fn *on_request, void *data,
                    struct admin_sock **out_sock);
/* Stop accepting. Connections already accepted still get their replies. */
void admin_sock_close(struct admin_sock *a);
/* After the loop has finished (every connection is gone). NULL-safe. */
void admin_sock_free(struct admin_sock *a);

/* Write reply (stolen; NULL: close without one) as one line, then close. */
void admin_conn_reply(struct admin_conn *c, json_t *reply);
/* Who is asking: the peer's uid and pid (SO_PEERCRED at accept), for the
 * daemon's log. */
void admin_conn_peer(const struct admin_conn *c, long *out_uid, long *out_pid);

#endif
