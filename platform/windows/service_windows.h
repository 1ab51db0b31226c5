/* cordon-agent as a Windows service (Service Control Manager).
 *
 * The service is SERVICE_WIN32_OWN_PROCESS, started automatically, and
 * restarted by the SCM after a failure (5 s, three times, counter reset
 * after a day). It runs as the virtual account NT SERVICE\<name> (an
 * unrestricted per-service SID, not an administrator, no password), so
 * the jobs it runs get a restricted token of that account; LocalSystem is
 * refused. Its config directory (default %ProgramData%\cordon) is given a
 * protected DACL: SYSTEM, Administrators and the service account only.
 *
 * Declared here, not in platform/service.h (the systemd/launchd interface),
 * until the two are merged: see docs/WINDOWS.md. Nothing here prints;
 * errors are negated errno values or CORDON_E_* with a detail in diag.
 */
#ifndef CORDON_PLATFORM_WINDOWS_SERVICE_WINDOWS_H
#define CORDON_PLATFORM_WINDOWS_SERVICE_WINDOWS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <wchar.h>

#include "core/error.h"

#define SERVICE_WINDOWS_DEFAULT_NAME "cordon-agent"

struct service_windows_options {
  const char *name;       /* NULL: "cordon-agent" (tests use their own) */
  const char *agent_path; /* absolute path of cordon-agent.exe; NULL: this program */
  const char *config_dir; /* passed as --config; NULL: the agent's default */
  const char *account;    /* NULL: "NT SERVICE\<name>"; "LocalSystem" is refused */
  const char *run_args;   /* the words after the options, separated by single
                           * spaces (at most SERVICE_WINDOWS_MAX_RUN_WORDS);
                           * NULL: "run --service" */
};

#define SERVICE_WINDOWS_MAX_RUN_WORDS 4

/* The command line the SCM starts: "<agent>" [--config "<dir>"] <run_args>,
 * each word quoted as the C runtime needs. Pure. 0, CORDON_E_USAGE
 * (relative agent path), -EINVAL (too many or too long run_args), -ENOMEM. */
int service_windows_command_line(const struct service_windows_options *o, wchar_t **out_cmdline);

/* The SID of the virtual account NT SERVICE\<name>: S-1-5-80- and the
 * SHA-1 of the upper-cased UTF-16 name as five 32-bit numbers. */
int service_windows_sid(const char *name, char *out, size_t len);

/* Create (or update: idempotent) the service and protect its config dir. */
int service_windows_install(const struct service_windows_options *o, struct cordon_diag *diag);
/* Stop and delete it; deleting what is not installed is not an error. The
 * config directory is left. */
int service_windows_uninstall(const struct service_windows_options *o, struct cordon_diag *diag);
/* Start or stop it and wait (at most 30 s) for RUNNING or STOPPED. */
int service_windows_start(const struct service_windows_options *o, struct cordon_diag *diag);
int service_windows_stop(const struct service_windows_options *o, struct cordon_diag *diag);
/* {"manager": "scm", "name", "installed", "state" ("stopped", "running",
 * ...; null when not installed), "start": "auto"/"demand"/..., "account",
 * "command_line", "detail"}. */
int service_windows_status(const struct service_windows_options *o, json_t **out_status);

/* The service's main, for `cordon-agent run`: when the SCM started this
 * process, reports RUNNING, calls run(ctx) and returns its result after
 * reporting STOPPED; a STOP or SHUTDOWN control calls stop(ctx) (from the
 * SCM's thread: it must only signal run to finish — cancel or finish the
 * running jobs, deliver their results — and return). Returns
 * CORDON_E_USAGE without calling anything when the process was not
 * started by the SCM: the caller then runs in the console. */
int service_windows_dispatch(const char *name, int (*run)(void *ctx), void (*stop)(void *ctx),
                             void *ctx);

#endif
