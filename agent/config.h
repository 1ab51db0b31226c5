/* The agent's config.json: the device owner's ceiling (docs/DESIGN.md section 3).
 * A missing directory or file means the defaults. Unknown keys, bad types
 * and out-of-range values are refused with the field named. */
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
};

/* dir NULL: the platform default. Errors: CORDON_E_CONFIG_INVALID with diag. */
int agent_config_load(const char *dir, struct agent_config **out_config, struct cordon_diag *diag);
void agent_config_free(struct agent_config *c);
/* The sandbox policy view of the config; borrows c's strings. */
void agent_config_policy(const struct agent_config *c, struct sandbox_policy *out_policy);

#endif
