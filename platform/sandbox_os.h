/* Below the OS line: what each platform/<os>/ layer implements for the
 * sandbox, and what the OS-neutral policy layer (platform/sandbox.c,
 * platform/grants.c) hands it.
 *
 * platform/sandbox.c owns every public function of platform/sandbox.h and
 * does what is the same on every OS: the platform check, the job user, the
 * network ceiling, the level against min_sandbox and lowest_level, the
 * grant rules and the forbidden table (platform/grants.h), the result's
 * level fields, the run prologue and explain's common fields. An OS layer
 * only probes its mechanisms, resolves paths and builds and runs the
 * mechanism.
 *
 * A new OS implements these 11 functions (sandbox_<os>.c and
 * grants_<os>.c), plus platform/paths.h and platform/fs.h:
 *   sandbox_os_probe_new, sandbox_os_probe_free, sandbox_os_probe_json,
 *   sandbox_os_plan_new, sandbox_os_plan_free, sandbox_os_plan_explain,
 *   sandbox_os_run, sandbox_os_reap_leftovers,
 *   sandbox_os_place_add, sandbox_os_place_within, sandbox_os_place_free.
 */
#ifndef CORDON_PLATFORM_SANDBOX_OS_H
#define CORDON_PLATFORM_SANDBOX_OS_H

#include <jansson.h>
#include <stdbool.h>

#include "core/manifest.h"
#include "core/result.h"
#include "platform/grants.h"
#include "platform/sandbox.h"
#include "platform/strv.h"

struct sandbox_os_probe; /* each OS layer's own */
struct sandbox_os_plan;  /* each OS layer's own */

/* What the OS layer found, for the policy layer. Strings are static or
 * borrowed from the OS probe. */
struct sandbox_facts {
  enum sandbox_level best; /* for a job that asks for nothing special */
  const char *reason;      /* why best is below isolated; NULL when isolated */
  /* why no job may run here (refused with job_user_missing); NULL if they may */
  const char *user_error;
  const char *user_name; /* who jobs run as, for explain; NULL if unknown */
  bool has_home;         /* the job user has a home: grants of "~" resolve */
  /* the OS runs nothing below this level (Windows has no `none`) */
  enum sandbox_level lowest_runnable;
  /* the level never depends on the job (macOS: always none): it is checked
   * first and named in the result of every refusal */
  bool level_fixed;
};

struct sandbox_probe {
  struct sandbox_facts facts;
  struct sandbox_os_probe *os;
};

/* The plan as the policy layer made it; the OS layer reads it and fills
 * argv/envp while planning. */
struct sandbox_plan {
  const struct sandbox_policy *policy;
  const struct sandbox_probe *probe;
  const struct sandbox_job *job;
  const struct manifest_argv *entry; /* this OS's entry of the manifest */
  /* the OS layer may lower the level while planning (Windows: a grant that
   * cannot be anchored); the policy layer checks it again afterwards */
  enum sandbox_level level;
  const char *reason;
  bool net; /* the job may use the network (asked for and allowed) */
  struct strv argv;
  struct strv envp; /* empty when the mechanism sets the environment (bwrap) */
  struct sandbox_os_plan *os;
};

/* ---- probing (sandbox_<os>.c) ---- */

/* Probe the host (see sandbox_probe_new). Fills *out_facts and *out_probe
 * on success; 0 or -ENOMEM. */
int sandbox_os_probe_new(const struct sandbox_policy *policy, bool thorough,
                         struct sandbox_os_probe **out_probe, struct sandbox_facts *out_facts);
void sandbox_os_probe_free(struct sandbox_os_probe *p);
/* The probes for `status` ({"bwrap": {...}, ...}); caller owns. */
json_t *sandbox_os_probe_json(const struct sandbox_os_probe *p);

/* ---- planning ---- */

/* Build the mechanism for a plan the policy layer accepted, with the
 * judged grants (borrowed: copy what must outlive the call). May lower
 * plan->level and set plan->reason. On refusal returns a CORDON_E_* code
 * with the reason in result (or a negated errno). */
int sandbox_os_plan_new(struct sandbox_plan *plan, const struct sandbox_grants *grants,
                        struct job_result *result, struct sandbox_os_plan **out_os);
void sandbox_os_plan_free(struct sandbox_os_plan *os);
/* explain's OS fields (caller owns; they replace common fields of the same
 * name), and in *limits the lim_* and mechanism a run is expected to use. */
json_t *sandbox_os_plan_explain(const struct sandbox_plan *plan, struct job_result *limits);

/* ---- running ---- */

/* Run the job. The level fields, requested and the output buffers of res
 * (out.data, err.data: output_kb KiB each) are set already. Same returns
 * as sandbox_run. */
int sandbox_os_run(struct sandbox_plan *plan, struct job_result *res);
/* See sandbox_reap_leftovers. */
int sandbox_os_reap_leftovers(const char *job_id);
/* See sandbox_sweep_leftovers. */
int sandbox_os_sweep_leftovers(const char *state_dir);
/* See sandbox_reaper_start. */
int sandbox_os_reaper_start(const char *state_dir);

/* See sandbox_enter_user_cgroup. */
int sandbox_os_enter_user_cgroup(int argc, char *const *argv, const char **out_why);

/* ---- places (grants_<os>.c) ---- */

enum sandbox_place_base {
  SANDBOX_BASE_HOME, /* path is relative to the job user's home ("" the home) */
  SANDBOX_BASE_ROOT, /* path is absolute, '/'-separated ("/etc/shadow") */
  SANDBOX_BASE_HOST, /* path is a host path as the agent was given it (state_dir) */
};

enum sandbox_place_use {
  /* what a job may be given, and the grant roots: resolved the way the
   * job user reaches it; an error when it does not resolve */
  SANDBOX_PLACE_GRANT,
  /* a secret: where the OS compares by identity, resolved with the
   * agent's rights, and nothing added when it does not exist; a path
   * otherwise. A '*' in it is expanded where the OS can. */
  SANDBOX_PLACE_SECRET,
  /* a name, existing or not: never resolved, compared by path (a
   * SANDBOX_BASE_HOME name lies below the home's resolved path) */
  SANDBOX_PLACE_NAME,
};

/* Resolve base/path for use and append what it names to list (nothing,
 * for a secret that does not exist). 0, or a negated errno (for a grant:
 * why it does not resolve). */
int sandbox_os_place_add(const struct sandbox_os_probe *p, enum sandbox_place_base base,
                         const char *path, enum sandbox_place_use use, struct sandbox_places *list);
/* Is inner the same place as outer or inside it? */
bool sandbox_os_place_within(const struct sandbox_place *inner, const struct sandbox_place *outer);
/* Free an OS handle of a place (NULL accepted). */
void sandbox_os_place_free(struct sandbox_os_place *os);

/* ---- helpers the policy layer gives the OS layers (sandbox.c) ---- */

/* explain's "limits" object: each limit's value, unit and what enforces it
 * (mechs gives the lim_* fields). NULL on allocation failure. */
json_t *sandbox_limits_json(const struct manifest *m, const struct job_result *mechs);

/* argv and environment for a job started directly (no bwrap): the entry
 * (a relative entry[0] is a file of the package), the dispatch arguments,
 * and PATH, HOME, USER, LOGNAME, PACKAGE, WORKSPACE, TMPDIR, the manifest's
 * env and LANG=C.UTF-8 unless the manifest sets LANG. Errors land in the
 * strv's sticky err. */
void sandbox_direct_argv_env(const struct manifest *m, const struct manifest_argv *entry,
                             char *const *args, size_t n_args, const char *package_path,
                             const char *workspace, const char *path_env, const char *home,
                             const char *user, struct strv *argv, struct strv *envp);

#endif
