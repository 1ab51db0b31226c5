/* `cordon-agent run --service` (agent/cmd_service.h): agent_cmd_run as
 * the service the OS's service manager started (platform/service.h's
 * service_run). Apart from agent/cmd_service.c so that the `service`
 * command does not pull in the run loop. */
#include <errno.h>
#include <stdio.h>

#include "agent/cmd_service.h"
#include "agent/commands.h"
#include "compat/posix.h"
#include "platform/service.h"

#define PROG "cordon-agent"

static int fail(int err, const char *detail) {
  fprintf(stderr, PROG ": %s: %s\n", cordon_err_name(err), detail);
  return err == CORDON_E_USAGE ? 2 : 1;
}

static int run_as_service(void *ctx) {
  const struct agent_config *cfg = ctx;
  fprintf(stderr, PROG ": started by the Service Control Manager\n");
  int rc = agent_cmd_run(cfg, NULL);
  fprintf(stderr, PROG ": service stopped (exit status %d)\n", rc);
  return rc;
}

static void stop_service(void *ctx) {
  (void)ctx;
  agent_run_request_stop();
}

int agent_cmd_run_service(const struct agent_config *cfg) {
  struct service_options o = {.scope = service_default_scope(), .config_dir = cfg->dir};
  int r = service_run(&o, run_as_service, stop_service, (void *)cfg);
  if (r == -ENOTSUP)
    return fail(CORDON_E_USAGE, "--service is for the Windows Service Control Manager only");
  if (r == CORDON_E_USAGE)
    return fail(CORDON_E_USAGE,
                "run --service: this process was not started by the Service Control "
                "Manager (run it without --service in a console)");
  if (r < 0)
    return fail(r, "cannot connect to the Service Control Manager");
  /* the run's own exit status, which the service manager was told */
  return r;
}
