/* The admin socket, command-line side: one request to the running daemon,
 * one reply (server/admin_ops.h is the protocol). */
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

#endif
