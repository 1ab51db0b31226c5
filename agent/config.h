/* The agent's config.json: the device owner's ceiling (docs/DESIGN.md section 3).
 * A missing directory or file means the defaults. Unknown keys, bad types
 * and out-of-range values are refused with the field named.
 *
 * A loaded config is read-only and counted: `run` re-reads config.json on
 * SIGHUP, and each job keeps a reference to the config it started with
 * (agent_config_ref), so a job that is running keeps its ceiling.
 * agent_config_free drops one reference. References are taken and dropped
 * on one thread (the loop's). */
#ifndef CORDON_AGENT_CONFIG_H
#define CORDON_AGENT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "platform/sandbox.h"

#define AGENT_CONFIG_MAX_BYTES (64 * 1024)

struct agent_config {
  char *dir; /* the config directory */
  bool net;
  char **grant_roots;
  size_t n_grant_roots;
  enum sandbox_level lowest_level;
  char *job_user;
  char *bwrap_path;
  char **trusted_publishers; /* public key files (see docs/OPERATIONS.md) */
  size_t n_trusted_publishers;
  unsigned max_jobs;
  unsigned refs; /* agent_config_ref/agent_config_free only */
};

/* dir NULL: the platform default. Errors: CORDON_E_CONFIG_INVALID with diag. */
int agent_config_load(const char *dir, struct agent_config **out_config, struct cordon_diag *diag);
/* Drop a reference; the last one frees. NULL is fine. */
void agent_config_free(struct agent_config *c);
/* Take a reference (c may be a const view of a loaded config: the count
 * is the only thing that changes); returns c. */
const struct agent_config *agent_config_ref(const struct agent_config *c);
/* grant_roots joined by ',' into buf (cut to fit), for the log. */
void agent_config_grant_roots_text(const struct agent_config *c, char *buf, size_t buf_len);
/* The sandbox policy view of the config; borrows c's strings. */
void agent_config_policy(const struct agent_config *c, struct sandbox_policy *out_policy);

#endif
