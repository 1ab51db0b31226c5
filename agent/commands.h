/* The agent's commands, one file each (agent/cmd_<name>.c, `run` in
 * agent/run.c); main.c parses the command line and dispatches. Each returns
 * the process exit status (agent/cli.h) and has printed its errors once. */
#ifndef CORDON_AGENT_COMMANDS_H
#define CORDON_AGENT_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/cli.h"
#include "agent/config.h"
#include "agent/stop.h"

/* HOST:PORT (the last colon splits, so HOST may not be empty): 0, or -1
 * when s is not that; outputs are written only on success. */
int agent_parse_host_port(const char *s, char *host, size_t host_len, int *out_port);

/* status: diagnostics as JSON on stdout (json_only: no summary on stderr). */
int agent_cmd_status(const struct agent_config *cfg, bool json_only);
/* exec (explain false) or explain a DIR or FILE.cpkg; trust_file may be
 * NULL. The result (exec) or the plan (explain) is JSON on stdout. */
int agent_cmd_exec(const struct agent_config *cfg, const char *source, const char *trust_file,
                   char *const *args, size_t n_args, bool explain);
int agent_cmd_pair(const struct agent_config *cfg, const char *server, const char *code,
                   const char *name);
int agent_cmd_unpair(const struct agent_config *cfg);
/* run until SIGTERM/SIGINT or agent_run_request_stop; 0 after a clean stop. */
int agent_cmd_run(const struct agent_config *cfg);

#endif
