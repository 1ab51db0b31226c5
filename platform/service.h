/* Running the agent as a service, one interface for every OS; CMake
 * compiles one implementation:
 *   Linux    a systemd unit (platform/linux/service_linux.c)
 *   macOS    a launchd LaunchAgent (platform/macos/service_macos.c)
 *   Windows  a Service Control Manager service (platform/windows/service_windows.c)
 * Linux and macOS share their POSIX part (platform/posix/service_posix.c:
 * the invoking user, running the manager's tool, writing the definition).
 *
 * systemd and launchd keep a definition file (unit, plist) in a scope
 * (system or user): service_has_scopes() is true, --user/--system/--root
 * apply, and service_definition_path() is that file. The SCM keeps one
 * system-wide service in its own database: service_has_scopes() is false
 * and service_definition_path() is the service's name.
 *
 * The definition text (unit, plist, the SCM's command line) comes from a
 * pure function so it can be tested and shipped by packages; the other
 * calls write files and ask the service manager (systemctl, launchctl,
 * always by absolute path; the SCM's API). With `root` set (systemd,
 * launchd), every path written is placed under that directory and nothing
 * else happens: no account, no service manager. That is how the tests and
 * the package build use it.
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
  SERVICE_SCOPE_SYSTEM, /* Linux: a system unit, jobs as job_user; the SCM's only one */
  SERVICE_SCOPE_USER,   /* the invoking user's own service manager */
};

/* the words after the options in the SCM's command line, at most */
#define SERVICE_MAX_RUN_WORDS 4
/* a buffer for service_self_path and service_definition_path */
#define SERVICE_PATH_MAX 4096

struct service_options {
  enum service_scope scope;
  const char *agent_path; /* absolute path of cordon-agent to run (service_self_path) */
  const char *config_dir; /* passed as --config; NULL: the agent's default */
  const char *job_user;   /* system scope: the account jobs run as */
  /* user scope: the user the service is for. home NULL means the invoking
   * user: $HOME when absolute, else the passwd entry, and getuid(). */
  const char *home; /* where the unit or plist goes, and the logs */
  unsigned uid;     /* launchctl domain gui/<uid> */
  const char *root; /* NULL, or write everything below this directory, activate nothing */
  /* The SCM only (systemd and launchd ignore them): */
  const char *name;     /* NULL: "cordon-agent" (tests use their own) */
  const char *account;  /* NULL: "NT SERVICE\<name>"; "LocalSystem" is refused */
  const char *run_args; /* the words after the options, separated by spaces (at
                         * most SERVICE_MAX_RUN_WORDS); NULL: "run --service" */
};

/* The absolute path of the running program (for ExecStart,
 * ProgramArguments, the SCM's command line). */
int service_self_path(char *out, size_t len);

/* The scope `service install` uses without --user/--system on this OS. */
enum service_scope service_default_scope(void);
/* "systemd", "launchd" or "scm" */
const char *service_manager_name(void);
/* true: definition files in scopes (systemd, launchd); false: the SCM. */
bool service_has_scopes(void);

/* The service definition for o: the systemd unit, the launchd plist, or
 * the command line the SCM starts ("<agent>" [--config "<dir>"]
 * <run_args>, each word quoted as the C runtime needs) and a newline.
 * Pure: touches nothing (reads $HOME only when o->home is unset). Returns
 * 0 and a malloc'd string, -ENOMEM, -EINVAL (the SCM: too many or too
 * long run_args), or CORDON_E_USAGE (scope not supported here, path not
 * absolute). */
int service_render(const struct service_options *o, char **out_text);

/* Where the definition is installed for o (root applied): a file, or the
 * SCM's name for the service. */
int service_definition_path(const struct service_options *o, char *out, size_t len);

/* Write the definition (0644, atomically) and the directories the agent
 * needs; systemd's system scope also creates the job user's account. Then
 * register it with the service manager so it starts at boot or login (it
 * is not started: see service_start). The SCM: create or update the
 * service (automatic start, restarted after a failure, as the virtual
 * account NT SERVICE\<name>) and give its config directory a protected
 * DACL (SYSTEM, Administrators, the service account). Idempotent. */
int service_install(const struct service_options *o, struct cordon_diag *diag);

/* Stop it, unregister it and remove the definition. The agent's state
 * directory and the job user's account are left (packages purge them).
 * Removing what is not installed is not an error. */
int service_uninstall(const struct service_options *o, struct cordon_diag *diag);

/* The SCM: wait (at most 30 s) for RUNNING or STOPPED. */
int service_start(const struct service_options *o, struct cordon_diag *diag);
int service_stop(const struct service_options *o, struct cordon_diag *diag);

/* systemd, launchd: {"manager", "scope", "path", "installed", "enabled",
 * "active", "detail"}; enabled/active are null when the service manager
 * cannot be asked. The SCM: {"manager": "scm", "name", "installed",
 * "state" ("stopped", "running", ...; null when not installed), "start"
 * ("auto", "demand", ...), "account", "command_line", "detail"}. */
int service_status(const struct service_options *o, json_t **out_status);

/* `cordon-agent run --service`: the agent as the service its manager
 * started, for a manager that must be answered (the SCM). Reports
 * running, sends stderr to <o->config_dir>/service.log (a service has no
 * console; past 4 MiB at start the old log is kept as service.log.1),
 * calls run(ctx) and returns its result after reporting stopped. A stop
 * or shutdown request calls stop(ctx) from another thread: it must only
 * signal run to finish and return. Returns CORDON_E_USAGE without calling
 * anything when the process was not started by the service manager, and
 * -ENOTSUP where the manager starts a plain `run` (systemd, launchd). */
int service_run(const struct service_options *o, int (*run)(void *ctx), void (*stop)(void *ctx),
                void *ctx);

#endif
