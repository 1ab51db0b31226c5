/* The admin socket, command-line side: requests to the running daemon
 * (docs/protocol/admin.md; server/admin_ops.h is the table). Each call
 * is a connection of its own that speaks version 1 without a hello, which
 * the protocol allows. */
#ifndef CORDON_SERVER_ADMIN_CLIENT_H
#define CORDON_SERVER_ADMIN_CLIENT_H

#include <jansson.h>

#include "core/error.h"

/* Check req (admin_request_new + admin_request_set) against the op table,
 * send it to the daemon of state_dir and wait for its reply, however long
 * it takes (a dispatch --wait lasts as long as the job). Returns 0 and
 * *out_reply (ok or not: admin_reply_is_ok), -ECONNREFUSED/-ENOENT when no
 * daemon runs, CORDON_E_USAGE for a request the table refuses, or another
 * error, with diag. */
int admin_call(const char *state_dir, const json_t *req, json_t **out_reply,
               struct cordon_diag *diag);
/* The same, but the daemon must answer within timeout_ms (0: no limit):
 * -ETIMEDOUT otherwise. For questions that should be answered at once. */
int admin_call_within(const char *state_dir, const json_t *req, unsigned timeout_ms,
                      json_t **out_reply, struct cordon_diag *diag);
/* The same with the request's bytes: req's "bytes" (ADMIN_ARG_BYTES, set
 * here) is the size of the regular file open on body_fd, whose contents
 * follow the line. */
int admin_call_with_file(const char *state_dir, json_t *req, int body_fd, json_t **out_reply,
                         struct cordon_diag *diag);

/* A streaming op (watch, follow): its first line (the reply) in
 * *out_reply; when it is ok, the stream's lines come from
 * admin_stream_next. */
struct admin_stream;
int admin_stream_open(const char *state_dir, const json_t *req, struct admin_stream **out_stream,
                      json_t **out_reply, struct cordon_diag *diag);
/* The next line (new reference). CORDON_E_PROTOCOL when the daemon closed
 * the connection or sent something that is not a JSON object. */
int admin_stream_next(struct admin_stream *st, json_t **out_line, struct cordon_diag *diag);
/* NULL-safe. */
void admin_stream_close(struct admin_stream *st);

#endif
