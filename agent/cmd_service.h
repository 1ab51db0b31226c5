/* `cordon-agent service install|uninstall|start|stop|status`: the agent as
 * a service of this OS's service manager (platform/service.h does the
 * work): a system or per-user systemd unit or launchd LaunchAgent, or a
 * Windows service of the Service Control Manager. One file for every OS.
 *
 * Actions: install, uninstall, start, stop, status, and print (the unit or
 * plist that install would write, on stdout).
 * argv[0] is the word "service" and argv[1] the action; options may follow
 * in any order:
 *   --user | --system   scope (default: system on Linux, user on macOS)
 *   --root DIR          write the service files below DIR and touch nothing
 *                       else (no account, no service manager): packaging, tests
 *                       (these three are refused where the manager has no
 *                       scopes: the Windows SCM)
 *   --agent-path PATH   the cordon-agent the service runs (default: this one)
 *   --json              status: JSON only (the default prints a summary on
 *                       stderr and the JSON on stdout)
 *   --config DIR        the agent's config dir (also accepted before
 *                       `service`, which is what cfg holds): the service runs
 *                       the agent with --config DIR
 *   --default-config    leave --config out of the unit (the agent's default
 *                       for the service's user; used for the shipped units)
 * Returns the process exit status: 0 done, 1 failed, 2 bad usage. Errors are
 * printed once on stderr as "cordon-agent: <code>: <message>".
 */
#ifndef CORDON_AGENT_CMD_SERVICE_H
#define CORDON_AGENT_CMD_SERVICE_H

#include "agent/config.h"

int agent_cmd_service(int argc, char **argv, const struct agent_config *cfg);

/* `run --service`: agent_cmd_run as the service the OS's service manager
 * started, where that manager must be answered (the Windows SCM, which
 * stops it through agent_run_request_stop; the log goes to
 * <config>/service.log). Exit status as agent_cmd_run; 2 when the process
 * was not started by the service manager, or where the manager runs a
 * plain `run` (systemd, launchd). */
int agent_cmd_run_service(const struct agent_config *cfg);

#endif
