/* What every agent command prints, in one place: the one-line error on
 * stderr, "cordon-agent: <code>: <message>", and JSON on stdout (stdout
 * carries JSON only). The exit statuses are main.c's contract: 0 done,
 * 1 ran and failed or was refused, 2 bad usage or malformed local input,
 * AGENT_EXIT_UNPAIRED (`run` only) not paired, or revoked or unpaired by
 * the server: restarting cannot help until someone pairs the device (the
 * systemd units say RestartPreventExitStatus=). Nothing here exits or
 * keeps state. */
#ifndef CORDON_AGENT_CLI_H
#define CORDON_AGENT_CLI_H

#include <jansson.h>

#include "core/error.h"

#define AGENT_PROG "cordon-agent"
#define AGENT_EXIT_UNPAIRED 3

/* "cordon-agent: <code name>: <detail>" on stderr; detail NULL or empty:
 * the code's own message. */
void agent_say_error(int err, const char *detail);
/* agent_say_error, then the exit status for err: 2 for CORDON_E_USAGE,
 * else 1. */
int agent_fail(int err, const char *message);
/* A usage error (CORDON_E_USAGE): prints it and returns 2. */
int agent_usage(const char *message);
/* j, indented and in insertion order, and a newline on stdout, flushed;
 * j is borrowed. Prints nothing when j cannot be encoded. */
void agent_print_json(json_t *j);

#endif
