/* cordon-agent metrics: the running agent's counters in the Prometheus
 * text exposition format on stdout (the one command whose stdout is not
 * JSON: it is meant for a scraper or node_exporter's textfile collector),
 * asked over the control socket (agent/ctl_client.h). Not running: the
 * one-line error and exit 1. */
#include <errno.h>
#include <stdio.h>

#include "agent/cli.h"
#include "agent/commands.h"
#include "agent/ctl_client.h"
#include "compat/posix.h"

int agent_cmd_metrics(const struct agent_config *cfg) {
  json_t *text = NULL;
  struct cordon_diag diag = {{0}};
  int r = agent_ctl_ask(cfg->dir, AGENT_CTL_METRICS, &text, &diag);
  if (r == -ECONNREFUSED) {
    char msg[600];
    snprintf(msg, sizeof(msg), "no cordon-agent run answers for %s (not running)", cfg->dir);
    return agent_fail(r, msg);
  }
  if (r == -ENOTSUP)
    return agent_fail(r, "this platform has no control socket to ask the agent");
  if (r < 0)
    return agent_fail(r, diag.msg);
  fputs(json_string_value(text), stdout);
  fflush(stdout);
  json_decref(text);
  return 0;
}
