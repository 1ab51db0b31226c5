/* One local job: a private directory, the staged package, the sandbox plan.
 * Used by `exec` and `explain` (and by `run` for dispatched jobs). */
#ifndef CORDON_AGENT_JOB_H
#define CORDON_AGENT_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/config.h"
#include "core/id.h"
#include "core/result.h"
#include "platform/sandbox.h"

struct agent_job {
  char id[CORDON_ID_HEX_SIZE];
  char *dir;          /* <config>/jobs/<id>, 0700 (0711 when root) */
  char *package_path; /* <dir>/package */
  int package_fd;     /* O_PATH of the staged package */
  struct manifest *manifest;
  uint8_t index_hash[32]; /* of a .cpkg's signed index; zero for a DIR */
  struct sandbox_policy policy;
  struct sandbox_probe *probe;
  struct sandbox_plan *plan;
  struct sandbox_job sjob;
  struct job_result result;
};

/* CONFIG/jobs, made if missing (0700; for a root agent CONFIG and it are
 * made 0711, see docs/ARCHITECTURE.md), its path into out_jobs. 0, or -errno
 * with diag. */
int agent_job_dir_prepare(const struct agent_config *cfg, char *out_jobs, size_t len,
                          struct cordon_diag *diag);
/* Make the job directory and stage a source DIR (copy) or a .cpkg (verify
 * while unpacking). A local input problem (bad manifest, unreadable DIR,
 * a symlink in DIR) returns CORDON_E_USAGE or CORDON_E_MANIFEST_INVALID
 * with diag; a refused .cpkg fills job->result.error and returns its code. */
int agent_job_prepare(struct agent_job *job, const struct agent_config *cfg, const char *source,
                      const char *trust_file, struct cordon_diag *diag);
/* The publisher keys this device trusts: trust_file (may be NULL),
 * config.json's trusted_publishers and CONFIG/trusted/ *.pub. */
struct cpkg_trust;
int agent_job_load_trust(const struct agent_config *cfg, const char *trust_file,
                         struct cpkg_trust **out_trust, struct cordon_diag *diag);
/* A dispatched job (id from its ticket): make its directory and return an
 * O_RDONLY fd of the empty staging directory for the streaming stager. */
int agent_job_begin_stream(struct agent_job *job, const struct agent_config *cfg, const char *id,
                           int *out_stage_fd, struct cordon_diag *diag);
/* The package verified: take the manifest, make the package readable. */
int agent_job_end_stream(struct agent_job *job, struct manifest *m, struct cordon_diag *diag);
/* Probe and plan; refusals are recorded in job->result. */
int agent_job_plan(struct agent_job *job, char *const *args, size_t n_args, bool thorough_probe);
/* Remove the job directory, free everything. */
void agent_job_release(struct agent_job *job);

#endif
