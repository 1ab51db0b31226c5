/* The sandbox interface: probe what this device can give, plan a job, run it.
 *
 * One implementation per OS under platform/<os>/ (CMake compiles exactly
 * one). The agent hands the platform a policy (the device owner's ceiling
 * from config.json) and a job (manifest, arguments, staged package); the
 * platform decides the strongest level it can apply, refuses what the policy
 * or min_sandbox forbid, and fills a struct job_result truthfully.
 *
 * Nothing here prints. Refusals come back as CORDON_E_* codes with the
 * detail in the result's error_message.
 */
#ifndef CORDON_PLATFORM_SANDBOX_H
#define CORDON_PLATFORM_SANDBOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/manifest.h"
#include "core/result.h"

/* The device owner's ceiling and the agent's own facts. Borrowed strings. */
struct sandbox_policy {
  bool net_allowed;
  const char *const *grant_roots; /* "~", "~/x" or absolute */
  size_t n_grant_roots;
  enum sandbox_level lowest_level;
  const char *job_user;   /* used when the agent runs as root */
  const char *bwrap_path; /* Linux; never searched in PATH */
  const char *state_dir;  /* the agent's config dir: always forbidden */
};

/* Live output (optional): each piece of a stream as it is read, within
 * the manifest's output cap (exactly the bytes the result keeps, in
 * order; nothing past the cap). stream 0 is stdout, 1 stderr; offset is
 * the bytes of that stream before data. Called on the thread that runs
 * sandbox_run or on a reader thread of the platform, possibly at the same
 * time for the two streams; it must not block, and data is valid during
 * the call only. */
typedef void (*sandbox_output_fn)(void *ctx, int stream, uint64_t offset, const uint8_t *data,
                                  size_t len);

struct sandbox_job {
  const struct manifest *manifest;
  char *const *args; /* appended to the entry */
  size_t n_args;
  const char *job_id;       /* 32 hex chars */
  int package_dirfd;        /* the staged package: read-only for the job */
  const char *package_path; /* its host path (for contained mode) */
  /* private per-job directory of the agent (0700; 0711 for a root agent,
   * whose job user reaches its package and, on Linux, the mount point of
   * its workspace tmpfs there by path) */
  const char *job_dir;
  int cancel_fd;               /* -1, or readable when the job must be cancelled */
  sandbox_output_fn on_output; /* NULL: no live output */
  void *output_ctx;
};

struct sandbox_probe;
struct sandbox_plan;

/* Probe the host. `thorough` runs real trial sandboxes (for `status`);
 * otherwise only cheap checks are made (for every job). */
int sandbox_probe_new(const struct sandbox_policy *policy, bool thorough,
                      struct sandbox_probe **out_probe);
void sandbox_probe_free(struct sandbox_probe *p);
/* The best level for a job that asks for nothing special, and why it is
 * below isolated (NULL when isolated). */
enum sandbox_level sandbox_probe_best(const struct sandbox_probe *p, const char **out_reason);
/* {"bwrap": {...}, "userns": {...}, ...}; caller owns. */
json_t *sandbox_probe_json(const struct sandbox_probe *p);

/* Decide the level, check the ceiling, resolve grants. On refusal returns a
 * CORDON_E_* code and fills result (error, requested, level if known). */
int sandbox_plan_new(const struct sandbox_policy *policy, const struct sandbox_probe *probe,
                     const struct sandbox_job *job, struct job_result *result,
                     struct sandbox_plan **out_plan);
void sandbox_plan_free(struct sandbox_plan *plan);
/* {"level", "downgrade_reason", "argv", "seccomp", "limits", ...}; caller owns. */
json_t *sandbox_plan_explain(const struct sandbox_plan *plan);

/* Run the planned job to completion (or timeout) and fill result. Returns 0
 * when the job was started (whatever its exit), or a CORDON_E_* code. */
int sandbox_run(struct sandbox_plan *plan, struct job_result *result);

/* A previous agent process died while this job ran: kill and remove what
 * of the job may still be alive (Linux: the job's cgroups). Returns the
 * number of processes killed, or a negated errno. */
int sandbox_reap_leftovers(const char *job_id);

/* At the start of the agent that holds the agent lock of state_dir (its
 * config directory), before any job: kill and remove what earlier
 * processes of this agent instance left in the OS's job containers, and
 * get ready to run jobs (Linux: the instance's job cgroups, see
 * platform/linux/cgroup.h; elsewhere nothing). Returns the number of
 * processes killed, or a negated errno. */
int sandbox_sweep_leftovers(const char *state_dir);

/* A job never outlives its agent (Linux). The end of a job must not rest
 * on bwrap's --die-with-parent or on the parent-death signal of the init
 * of the job's PID namespace: the init runs as the job's uid, and a job
 * that changed it would run on, unsupervised and past its timeout. The
 * reaper is a small process the agent's `run` forks once it holds the
 * agent lock, before any thread starts (and `exec` before its job): it
 * waits on a unix socket only the agent holds, over which the agent hands
 * it a pidfd of each isolated job's namespace init as soon as bwrap names
 * it (dropped once that init has exited); when the socket ends (the agent
 * is gone, whatever killed it) it SIGKILLs every init it holds, which
 * ends each whole namespace, then kills and removes the job cgroups of
 * that agent process (job-<its pid>-<n>: never what a newer agent of the
 * instance made), then exits. It ignores the signals a terminal or a
 * service manager sends the agent's group: only the socket's end makes
 * it act. Elsewhere (Windows: Job Objects close with the agent; macOS: no
 * containers) there is none.
 *
 * Start it for the agent of state_dir: 0, or a negated errno (the caller
 * logs it: the jobs are then swept at the next start only). */
int sandbox_reaper_start(const char *state_dir);

/* A per-user agent that can make no job cgroup asks the machine for one
 * before it does anything else: on Linux, where a systemd user manager
 * runs, it re-executes argv in a transient user scope with Delegate=yes
 * (platform/linux/user_scope.h; not verified on the test hosts, which run
 * no systemd). Returns only when it does not: 0, with *out_why saying why
 * (root, a cgroup already, no user manager, ...), or a negated errno when
 * the exec itself failed. Elsewhere it returns 0 at once. */
int sandbox_enter_user_cgroup(int argc, char *const *argv, const char **out_why);

#endif
