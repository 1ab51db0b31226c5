/* The admin socket, client side: one JSON request line, one JSON reply. */
#ifndef CORDON_SERVER_ADMIN_CLIENT_H
#define CORDON_SERVER_ADMIN_CLIENT_H

#include <jansson.h>

#include "core/error.h"

/* Send req to the daemon of state_dir and wait for its reply (no timeout
 * when wait is set: a dispatch --wait lasts as long as the job). Returns 0
 * and *out_reply, -ECONNREFUSED/-ENOENT when no daemon runs, or an error. */
int admin_call(const char *state_dir, json_t *req, json_t **out_reply, struct cordon_diag *diag);

#endif
