/* The admin socket, daemon side: a UNIX socket in the state directory.
 * With the group ADMIN_GROUP on this system it is 0660 and of that group,
 * else 0600; a peer (SO_PEERCRED) must be the daemon's user, root, or a
 * member of that group (its gid or a supplementary group, getgrouplist),
 * else its connection is closed at once, with a log line and no reply.
 * docs/protocol/admin.md is the protocol; server/admin_ops.h its table.
 *
 * Framing only: a connection carries request lines one after the other;
 * the next is read once the previous is answered (reading pauses while a
 * request waits, e.g. for a job to end). A line that is too long, not a
 * JSON object or not an op of the table is answered here (and logged
 * with the caller's uid and pid); a request announcing "bytes" has them
 * read into a file of spool_dir first. Every other request goes to
 * on_request, which answers it now or later with admin_conn_reply, or
 * turns the connection into a stream (admin_conn_stream_*). Knows
 * nothing of the ops' meaning. */
#ifndef CORDON_SERVER_ADMIN_SOCK_H
#define CORDON_SERVER_ADMIN_SOCK_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "server/admin_ops.h"

/* A request line, and its body's bytes, come within this of their first
 * byte (the body: of its previous bytes), else a final limit_exceeded line
 * and the connection closes; so does a connection idle between requests
 * for ADMIN_IDLE_TIMEOUT_MS. Neither runs while a request is answered or a
 * stream is sent. A uid other than the daemon's and root holds at most
 * ADMIN_UID_CONN_MAX (16) of the ADMIN_CONN_MAX connections, and all those
 * uids together at most ADMIN_CONN_MAX - 8: 8 are kept for the daemon's
 * user and root. */
#define ADMIN_REQUEST_TIMEOUT_MS 30000
#define ADMIN_IDLE_TIMEOUT_MS 60000

struct admin_sock;
struct admin_conn; /* one connection: alive until the peer closes it, a deadline passes, or the
                      socket */

struct admin_sock_config {
  const char *path;        /* the socket; a stale file there is removed first */
  const char *spool_dir;   /* request bodies go to spool_dir/upload-XXXXXX (old ones are
                              removed at open: the caller holds the state's lock) */
  const char *group;       /* ADMIN_GROUP, or NULL: owner and root only */
  size_t stream_queue_max; /* 0: ADMIN_STREAM_QUEUE_MAX */
  /* 0: ADMIN_REQUEST_TIMEOUT_MS, ADMIN_IDLE_TIMEOUT_MS (docs/protocol/admin.md, "Timeouts") */
  uint64_t request_timeout_ms, idle_timeout_ms;
};

/* req is borrowed for the call; body_path names the request's "bytes"
 * (NULL when it had none), a file removed when on_request returns: open
 * it before, if it is needed later. */
typedef void admin_request_fn(void *data, struct admin_conn *c, const json_t *req, enum admin_op op,
                              const char *body_path);
/* A stream's connection is going (the peer closed it, it fell behind, or
 * the socket closes): the last call that names c. */
typedef void admin_gone_fn(void *ctx, struct admin_conn *c);

/* Listen. Returns 0 and *out_sock, or a negative uv error; on failure the
 * handle is being closed: run the loop before closing it. */
int admin_sock_open(uv_loop_t *loop, const struct admin_sock_config *cfg,
                    admin_request_fn *on_request, void *data, struct admin_sock **out_sock);
/* Stop accepting; close idle connections, end streams (an "error" event
 * line, then gone). A request still waiting gets its reply, then its
 * connection closes. */
void admin_sock_close(struct admin_sock *a);
/* After the loop has finished (every connection is gone). NULL-safe. */
void admin_sock_free(struct admin_sock *a);

/* Answer the request (reply stolen; NULL: close without one); then the
 * next request line is read. */
void admin_conn_reply(struct admin_conn *c, json_t *reply);
/* Answer {"ok": true} and turn c into a stream of lines; gone(ctx, c) is
 * called once when it goes before admin_conn_stream_end. 0 or -ENOMEM
 * (then c was answered with an error). */
int admin_conn_stream_start(struct admin_conn *c, admin_gone_fn *gone, void *ctx);
/* One line of the stream (stolen). 0, or -ENOBUFS when the peer is more
 * than stream_queue_max bytes behind: then the stream is ended with an
 * "error" line limit_exceeded, gone was called and c is closing; the
 * caller must not use c (nor what gone freed) again. */
int admin_conn_stream_send(struct admin_conn *c, json_t *line);
/* The stream's last line (stolen); gone is not called; the next request
 * line is read. */
void admin_conn_stream_end(struct admin_conn *c, json_t *line);

/* Who is asking (SO_PEERCRED at accept), for the daemon's log. */
void admin_conn_peer(const struct admin_conn *c, long *out_uid, long *out_pid);
/* Whether the peer is the daemon's own user or root (may name paths). */
bool admin_conn_is_owner(const struct admin_conn *c);
/* How many requests this connection has carried, this one included. */
unsigned long admin_conn_requests(const struct admin_conn *c);
/* The protocol version agreed by hello (ADMIN_VERSION until then). */
int admin_conn_version(const struct admin_conn *c);
void admin_conn_set_version(struct admin_conn *c, int version);

#endif
