/* The agent's commands, one file each; main.c parses and dispatches. */
#ifndef CORDON_AGENT_COMMANDS_H
#define CORDON_AGENT_COMMANDS_H

#include <stddef.h>

#include "agent/config.h"

/* Print "cordon-agent: <code>: <message>" (message NULL: the code's own);
 * returns the exit status for err (2 for usage, else 1). */
int agent_fail(int err, const char *message);
int agent_usage(const char *message);

int agent_parse_host_port(const char *s, char *host, size_t host_len, int *out_port);

int agent_cmd_pair(const struct agent_config *cfg, const char *server, const char *code,
                   const char *name);
int agent_cmd_unpair(const struct agent_config *cfg);
/* run until SIGTERM/SIGINT or agent_run_request_stop; 0 after a clean stop. */
int agent_cmd_run(const struct agent_config *cfg);
/* Make agent_cmd_run stop as SIGTERM does (running jobs are cancelled and
 * their results spooled). Safe from any thread; a request made before the
 * run's loop is up stops it as soon as it is. */
void agent_run_request_stop(void);

#endif
