/* Running the agent as a service: a systemd unit on Linux
 * (platform/linux/service_linux.c), a launchd LaunchAgent on macOS
 * (platform/macos/service_macos.c). One implementation per OS, chosen by
 * CMake.
 *
 * The definition text (unit or plist) comes from a pure function so it can
 * be tested and shipped by packages; the other calls write files and ask
 * the service manager (systemctl, launchctl, always by absolute path).
 * With `root` set, every path written is placed under that directory and
 * nothing else happens: no account, no service manager. That is how the
 * tests and the package build use it.
 *
 * Nothing here prints. Failures return a negated errno or a CORDON_E_*
 * code with a one-line detail in diag.
 */
#ifndef CORDON_PLATFORM_SERVICE_H
#define CORDON_PLATFORM_SERVICE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

enum service_scope {
  SERVICE_SCOPE_SYSTEM, /* Linux: a system unit, jobs as job_user */
  SERVICE_SCOPE_USER,   /* the invoking user's own service manager */
};

struct service_options {
  enum service_scope scope;
  const char *agent_path; /* absolute path of cordon-agent to run */
  const char *config_dir; /* passed as --config; NULL: the agent's default */
  const char *job_user;   /* system scope: the account jobs run as */
  /* user scope: the user the service is for. home NULL means the invoking
   * user: $HOME when absolute, else the passwd entry, and getuid(). */
  const char *home; /* where the unit or plist goes, and the logs */
  unsigned uid;     /* launchctl domain gui/<uid> */
  const char *root; /* NULL, or write everything below this directory, activate nothing */
};

/* The absolute path of the running program (for ExecStart/ProgramArguments). */
int service_self_path(char *out, size_t len);

/* The scope `service install` uses without --user/--system on this OS. */
enum service_scope service_default_scope(void);
/* "systemd" or "launchd" */
const char *service_manager_name(void);

/* The service definition (systemd unit, launchd plist) for o. Pure:
 * touches nothing (reads $HOME only when o->home is unset). Returns 0 and a malloc'd string,
 * -ENOMEM, or CORDON_E_USAGE (scope not supported here, path not absolute). */
int service_render(const struct service_options *o, char **out_text);

/* Where the definition is installed for o (root applied). */
int service_definition_path(const struct service_options *o, char *out, size_t len);

/* Write the definition (0644, atomically) and the directories the agent
 * needs; system scope also creates the job user's account. Then register
 * it with the service manager so it starts at boot or login (it is not
 * started: see service_start). Idempotent. */
int service_install(const struct service_options *o, struct cordon_diag *diag);

/* Stop it, unregister it and remove the definition. The agent's state
 * directory and the job user's account are left (packages purge them).
 * Removing what is not installed is not an error. */
int service_uninstall(const struct service_options *o, struct cordon_diag *diag);

int service_start(const struct service_options *o, struct cordon_diag *diag);
int service_stop(const struct service_options *o, struct cordon_diag *diag);

/* {"manager", "scope", "path", "installed", "enabled", "active", "detail"};
 * enabled/active are null when the service manager cannot be asked. */
int service_status(const struct service_options *o, json_t **out_status);

#endif
