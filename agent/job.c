#include "agent/job.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/cpkg_stage.h"
#include "agent/trust.h"
#include "compat/posix.h"
#include "platform/fs.h"
#include "platform/paths.h"

int agent_job_dir_prepare(const struct agent_config *cfg, char *out_jobs, size_t len,
                          struct cordon_diag *diag) {
  /* A root agent's jobs reach their package by path as the job user: the
   * state and jobs dirs are then searchable (0711), never listable; a job
   * id holds 80 random bits (docs/protocol/ticket.md). */
  bool root = geteuid() == 0;
  int r = fs_mkdir_p(cfg->dir, 0700);
  char jobs[PATH_MAX];
  if (r == 0 && snprintf(jobs, sizeof(jobs), "%s/jobs", cfg->dir) >= (int)sizeof(jobs))
    r = -ENAMETOOLONG;
  if (r == 0 && mkdir(jobs, root ? 0711 : 0700) < 0 && errno != EEXIST)
    r = -errno;
  if (r == 0 && root && (chmod(cfg->dir, 0711) < 0 || chmod(jobs, 0711) < 0))
    r = -errno;
  if (r == 0 && snprintf(out_jobs, len, "%s", jobs) >= (int)len)
    r = -ENAMETOOLONG;
  if (r < 0)
    return cordon_diag_set(diag, r, "cannot create %s/jobs: %s", cfg->dir, strerror(-r));
  return 0;
}

/* id: the job id (CORDON_ID_HEX_LEN hex digits) from a ticket, or NULL
 * for a new random one. */
static int make_job_dir(struct agent_job *job, const struct agent_config *cfg, const char *id,
                        struct cordon_diag *diag) {
  uint8_t raw[CORDON_ID_LEN];
  cordon_id_random(raw);
  if (id)
    snprintf(job->id, sizeof(job->id), "%s", id);
  else
    cordon_id_to_hex(raw, job->id);
  memcpy(job->result.job_id, job->id, sizeof(job->id));
  mode_t dmode = geteuid() == 0 ? 0711 : 0700;
  char jobs[PATH_MAX];
  int r = agent_job_dir_prepare(cfg, jobs, sizeof(jobs), diag);
  if (r < 0)
    return r;
  if (asprintf(&job->dir, "%s/%s", jobs, job->id) < 0) {
    job->dir = NULL;
    return -ENOMEM;
  }
  if (mkdir(job->dir, dmode) < 0) {
    r = -errno;
    free(job->dir);
    job->dir = NULL;
    return cordon_diag_set(diag, r, "cannot create the job directory: %s", strerror(-r));
  }
  if (asprintf(&job->package_path, "%s/package", job->dir) < 0) {
    job->package_path = NULL;
    return -ENOMEM;
  }
  if (mkdir(job->package_path, 0700) < 0)
    return cordon_diag_set(diag, -errno, "cannot create the staging directory: %s",
                           strerror(errno));
  return 0;
}

/* A source directory: its manifest is read first (an invalid one is a
 * local input error, exit 2), then its files are copied. */
static int stage_source_dir(struct agent_job *job, const struct agent_config *cfg,
                            const char *source, struct cordon_diag *diag) {
  char mpath[PATH_MAX];
  if (snprintf(mpath, sizeof(mpath), "%s/manifest.json", source) >= (int)sizeof(mpath))
    return cordon_diag_set(diag, CORDON_E_USAGE, "%s: path too long", source);
  int r = manifest_load_file(mpath, &job->manifest, diag);
  if (r < 0)
    return r == CORDON_E_MANIFEST_INVALID ? r : CORDON_E_USAGE;
  r = make_job_dir(job, cfg, NULL, diag);
  if (r < 0)
    return r;
  int src = open(source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int dst = open(job->package_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (src < 0 || dst < 0) {
    r = cordon_diag_set(diag, CORDON_E_USAGE, "%s: %s", source, strerror(errno));
  } else {
    r = fs_copy_tree(src, dst, diag);
    if (r < 0 && r != CORDON_E_PACKAGE_TOO_LARGE)
      r = CORDON_E_USAGE;
  }
  if (src >= 0)
    close(src);
  if (r == 0 && fchmod(dst, 0755) < 0) /* readable, never writable, by the job */
    r = -errno;
  if (dst >= 0)
    close(dst);
  return r;
}

/* The publisher keys this device trusts: --trust, config.json's
 * trusted_publishers, and the *.pub files in CONFIG/trusted. A bad key file is a local
 * input error. */
int agent_job_load_trust(const struct agent_config *cfg, const char *trust_file,
                         struct cpkg_trust **out_trust, struct cordon_diag *diag) {
  struct cpkg_trust *trust;
  int r = cpkg_trust_new(&trust);
  if (r < 0)
    return r;
  if (trust_file)
    r = agent_trust_load_file(trust, trust_file, diag);
  for (size_t i = 0; r == 0 && i < cfg->n_trusted_publishers; i++)
    r = agent_trust_load_file(trust, cfg->trusted_publishers[i], diag);
  char dir[PATH_MAX];
  if (r == 0 && snprintf(dir, sizeof(dir), "%s/%s", cfg->dir, AGENT_TRUSTED_DIR) < (int)sizeof(dir))
    r = agent_trust_load_dir(trust, dir, diag);
  if (r < 0) {
    cpkg_trust_free(trust);
    return r;
  }
  *out_trust = trust;
  return 0;
}

/* A signed package: verified while it is unpacked; a refusal is a job
 * that was attempted, so it is recorded in the result. */
static int stage_cpkg(struct agent_job *job, const struct agent_config *cfg, const char *source,
                      const char *trust_file, struct cordon_diag *diag) {
  struct cpkg_trust *trust;
  int r = agent_job_load_trust(cfg, trust_file, &trust, diag);
  if (r < 0)
    return r == CORDON_E_CONFIG_INVALID || r == CORDON_E_LIMIT ? CORDON_E_USAGE : r;
  r = make_job_dir(job, cfg, NULL, diag);
  if (r < 0)
    goto out_trust;
  int dst = open(job->package_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dst < 0) {
    r = cordon_diag_set(diag, -errno, "staging: %s", strerror(errno));
    goto out_trust;
  }
  struct cordon_diag why = {{0}};
  r = agent_cpkg_stage(source, trust, dst, &job->manifest, job->index_hash, &why);
  if (r == 0 && fchmod(dst, 0755) < 0)
    r = -errno;
  close(dst);
  if (r < 0) {
    if (r == -ENOENT || r == -EACCES || r == -EISDIR) {
      cordon_diag_set(diag, CORDON_E_USAGE, "%s: %s", source, why.msg[0] ? why.msg : strerror(-r));
      r = CORDON_E_USAGE;
    } else {
      job_result_fail(&job->result, r, "%s", why.msg[0] ? why.msg : cordon_err_message(r));
    }
  }
out_trust:
  cpkg_trust_free(trust);
  return r;
}

int agent_job_prepare(struct agent_job *job, const struct agent_config *cfg, const char *source,
                      const char *trust_file, struct cordon_diag *diag) {
  memset(job, 0, sizeof(*job));
  job->package_fd = -1;
  job_result_init(&job->result);
  agent_config_policy(cfg, &job->policy);

  struct stat st;
  if (stat(source, &st) < 0)
    return cordon_diag_set(diag, CORDON_E_USAGE, "%s: %s", source, strerror(errno));
  int r;
  if (S_ISDIR(st.st_mode)) {
    r = stage_source_dir(job, cfg, source, diag);
  } else if (S_ISREG(st.st_mode)) {
    r = stage_cpkg(job, cfg, source, trust_file, diag);
  } else {
    return cordon_diag_set(diag, CORDON_E_USAGE, "%s: not a directory or a .cpkg file", source);
  }
  if (r < 0)
    return r;
  job->package_fd = open(job->package_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (job->package_fd < 0)
    return cordon_diag_set(diag, -errno, "staging: %s", strerror(errno));
  return 0;
}

int agent_job_begin_stream(struct agent_job *job, const struct agent_config *cfg, const char *id,
                           int *out_stage_fd, struct cordon_diag *diag) {
  memset(job, 0, sizeof(*job));
  job->package_fd = -1;
  job_result_init(&job->result);
  agent_config_policy(cfg, &job->policy);
  int r = make_job_dir(job, cfg, id, diag);
  if (r < 0)
    return r;
  int fd = open(job->package_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return cordon_diag_set(diag, -errno, "staging: %s", strerror(errno));
  *out_stage_fd = fd;
  return 0;
}

int agent_job_end_stream(struct agent_job *job, struct manifest *m, struct cordon_diag *diag) {
  job->manifest = m;
  if (chmod(job->package_path, 0755) < 0)
    return cordon_diag_set(diag, -errno, "staging: %s", strerror(errno));
  job->package_fd = open(job->package_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (job->package_fd < 0)
    return cordon_diag_set(diag, -errno, "staging: %s", strerror(errno));
  return 0;
}

int agent_job_plan(struct agent_job *job, char *const *args, size_t n_args, bool thorough_probe) {
  int r = sandbox_probe_new(&job->policy, thorough_probe, &job->probe);
  if (r < 0)
    return r;
  job->sjob = (struct sandbox_job){
      .manifest = job->manifest,
      .args = args,
      .n_args = n_args,
      .job_id = job->id,
      .package_dirfd = job->package_fd,
      .package_path = job->package_path,
      .job_dir = job->dir,
      .cancel_fd = -1,
  };
  return sandbox_plan_new(&job->policy, job->probe, &job->sjob, &job->result, &job->plan);
}

void agent_job_release(struct agent_job *job) {
  if (!job)
    return;
  sandbox_plan_free(job->plan);
  sandbox_probe_free(job->probe);
  manifest_free(job->manifest);
  if (job->package_fd >= 0)
    close(job->package_fd);
  if (job->dir) {
    char *slash = strrchr(job->dir, '/');
    *slash = '\0';
    int jobs = open(job->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (jobs >= 0) {
      (void)fs_remove_tree_at(jobs, slash + 1);
      close(jobs);
    }
  }
  free(job->dir);
  free(job->package_path);
  job_result_release(&job->result);
  memset(job, 0, sizeof(*job));
  job->package_fd = -1;
}
