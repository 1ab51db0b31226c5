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
/* `run`'s options. */
struct agent_run_options {
  /* SIGTERM: how long running jobs may go on before they are cancelled
   * (0: at once) */
  unsigned drain_timeout_s;
};
#define AGENT_DRAIN_TIMEOUT_DEFAULT_S 30
#define AGENT_DRAIN_TIMEOUT_MAX_S 86400

/* run until SIGTERM/SIGINT or agent_run_request_stop (a drain: no new
 * jobs, running ones finish or are cancelled after drain_timeout_s, every
 * result spooled); SIGHUP re-reads config.json. 0 after a clean stop;
 * AGENT_EXIT_UNPAIRED when not paired or the server says the device was
 * revoked or unpaired; 2 when another `run` holds the config directory or
 * the job user cannot reach it; 1 for other failures. opt NULL: the
 * defaults. */
int agent_cmd_run(const struct agent_config *cfg, const struct agent_run_options *opt);
/* metrics: the running agent's Prometheus text on stdout. */
int agent_cmd_metrics(const struct agent_config *cfg);

#endif
