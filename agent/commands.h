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

/* status: a summary on stdout, or (json) the whole report as JSON. */
int agent_cmd_status(const struct agent_config *cfg, bool json);
/* exec and explain. source: a DIR or FILE.cpkg, or NULL for an ad-hoc
 * command: args[0] is the command and the rest its arguments, in a package
 * of a default manifest whose capabilities are net, ro and rw. */
struct agent_exec_options {
  const char *source;
  const char *trust; /* may be NULL */
  char *const *args; /* after "--" */
  size_t n_args;
  bool explain; /* the plan, not a run */
  bool json;    /* explain: the whole plan as JSON; ad-hoc exec: the result JSON */
  bool net;
  const char *const *ro, *const *rw; /* grant paths */
  size_t n_ro, n_rw;
};
/* exec: a package's result is JSON on stdout; an ad-hoc command's output
 * is its own (--json: the result JSON) and the exit status is its own.
 * explain: a summary on stdout (--json: the whole plan). */
int agent_cmd_exec(const struct agent_config *cfg, const struct agent_exec_options *o);
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
