/* The asking side of the control protocol (agent/ctl.h), for `status` and
 * `metrics`: one request to CONFIG/agent.sock and its reply, within
 * AGENT_CTL_ASK_MS. Never reads a file to guess: no answer means no
 * agent. */
#ifndef CORDON_AGENT_CTL_CLIENT_H
#define CORDON_AGENT_CTL_CLIENT_H

#include <jansson.h>

#include "agent/ctl.h"
#include "core/error.h"

#define AGENT_CTL_ASK_MS 3000

/* 0 and *out_payload (the reply's "status" object or "metrics" string;
 * json_decref it). -ECONNREFUSED when no agent answers (nothing listens,
 * or no socket at all); -ENOTSUP where the platform has no control
 * socket; another code with diag when an agent may be there but did not
 * answer properly (permission, timeout, a malformed or error reply). */
int agent_ctl_ask(const char *config_dir, enum agent_ctl_op op, json_t **out_payload,
                  struct cordon_diag *diag);

#endif
