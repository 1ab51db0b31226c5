/* The sandbox policy, written once for every OS (platform/sandbox.h).
 *
 * Everything a job is refused for, and everything the result says about
 * the level, is decided here; platform/<os>/ only probes, resolves paths
 * and runs its mechanism (platform/sandbox_os.h). The order of the checks
 * is the contract: platform, job user, network, level (on an OS whose
 * level is fixed, the level first), grants, then the mechanism's own.
 */
#include "platform/sandbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "platform/grants.h"
#include "platform/paths.h"
#include "platform/sandbox_os.h"

int sandbox_probe_new(const struct sandbox_policy *policy, bool thorough,
                      struct sandbox_probe **out_probe) {
  struct sandbox_probe *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  int r = sandbox_os_probe_new(policy, thorough, &p->os, &p->facts);
  if (r < 0) {
    free(p);
    return r;
  }
  *out_probe = p;
  return 0;
}

void sandbox_probe_free(struct sandbox_probe *p) {
  if (!p)
    return;
  sandbox_os_probe_free(p->os);
  free(p);
}

enum sandbox_level sandbox_probe_best(const struct sandbox_probe *p, const char **out_reason) {
  if (out_reason)
    *out_reason = p->facts.reason;
  return p->facts.best;
}

json_t *sandbox_probe_json(const struct sandbox_probe *p) {
  return sandbox_os_probe_json(p->os);
}

/* ---- planning ---- */

static void set_level(struct job_result *result, enum sandbox_level level, const char *reason) {
  result->level = level;
  result->level_known = true;
  result->downgrade_reason = reason;
}

/* Refuse a level below what the package, the device owner or the OS
 * accepts; the result names the level this device can give. */
static int check_level(const struct sandbox_policy *policy, const struct sandbox_facts *f,
                       const struct manifest *m, enum sandbox_level level, const char *reason,
                       struct job_result *result) {
  if (level >= m->min_sandbox && level >= policy->lowest_level && level >= f->lowest_runnable)
    return 0;
  set_level(result, level, reason);
  bool pkg = level < m->min_sandbox;
  return job_result_fail(
      result, CORDON_E_SANDBOX_UNAVAILABLE, "this device can give '%s' (%s); the %s requires '%s'",
      sandbox_level_name(level), reason ? reason : "no reason", pkg ? "package" : "device owner",
      sandbox_level_name(pkg ? m->min_sandbox : policy->lowest_level));
}

int sandbox_plan_new(const struct sandbox_policy *policy, const struct sandbox_probe *probe,
                     const struct sandbox_job *job, struct job_result *result,
                     struct sandbox_plan **out_plan) {
  const struct manifest *m = job->manifest;
  const struct sandbox_facts *f = &probe->facts;
  int r;
  result->requested = m->min_sandbox;
  const struct manifest_argv *entry = manifest_entry_for(m, paths_platform_bit());
  if (!entry)
    return job_result_fail(result, CORDON_E_PLATFORM_MISMATCH, "the package does not run on %s",
                           paths_platform_name());
  if (f->level_fixed) {
    set_level(result, f->best, f->reason);
    if ((r = check_level(policy, f, m, f->best, f->reason, result)) < 0)
      return r;
  }
  if (f->user_error)
    return job_result_fail(result, CORDON_E_JOB_USER_MISSING, "%s", f->user_error);
  if (m->net && !policy->net_allowed)
    return job_result_fail(result, CORDON_E_CAPABILITY_DENIED,
                           "the package asks for the network; the device owner does not allow it");
  if ((r = check_level(policy, f, m, f->best, f->reason, result)) < 0)
    return r;

  struct sandbox_plan *plan = calloc(1, sizeof(*plan));
  if (!plan)
    return -ENOMEM;
  plan->policy = policy;
  plan->probe = probe;
  plan->job = job;
  plan->entry = entry;
  plan->level = f->best;
  plan->reason = f->reason;
  plan->net = m->net && policy->net_allowed;
  strv_init(&plan->argv);
  strv_init(&plan->envp);

  /* Grants are checked at every level: too broad is refused on every OS. */
  struct sandbox_grants grants;
  struct cordon_diag diag = {{0}};
  r = sandbox_grants_check(policy, probe->os, f->has_home, m, &grants, &diag);
  if (r < 0) {
    job_result_fail(result, r, "%s", diag.msg[0] ? diag.msg : cordon_err_message(r));
    goto out_fail;
  }
  r = sandbox_os_plan_new(plan, &grants, result, &plan->os);
  sandbox_grants_release(&grants);
  if (r < 0)
    goto out_fail;
  /* the mechanism may have given less than the probe promised */
  if ((r = check_level(policy, f, m, plan->level, plan->reason, result)) < 0)
    goto out_fail;
  if ((r = plan->argv.err ? plan->argv.err : plan->envp.err) < 0)
    goto out_fail;
  *out_plan = plan;
  return 0;
out_fail:
  sandbox_plan_free(plan);
  return r;
}

void sandbox_plan_free(struct sandbox_plan *plan) {
  if (!plan)
    return;
  sandbox_os_plan_free(plan->os);
  strv_release(&plan->argv);
  strv_release(&plan->envp);
  free(plan);
}

static json_t *strv_json(const struct strv *s) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < s->n; i++)
    json_array_append_new(a, json_string(s->v[i]));
  return a;
}

json_t *sandbox_plan_explain(const struct sandbox_plan *plan) {
  const struct manifest *m = plan->job->manifest;
  const struct sandbox_facts *f = &plan->probe->facts;
  struct job_result lim;
  job_result_init(&lim);
  json_t *os = sandbox_os_plan_explain(plan, &lim);
  json_t *o = json_object();
  if (!o || !os) {
    json_decref(o);
    json_decref(os);
    return NULL;
  }
  json_object_set_new(o, "level", json_string(sandbox_level_name(plan->level)));
  json_object_set_new(o, "downgrade_reason",
                      plan->reason ? json_string(plan->reason) : json_null());
  json_object_set_new(o, "requested", json_string(sandbox_level_name(m->min_sandbox)));
  json_object_set_new(o, "mechanism", json_string(lim.mechanism));
  json_object_set_new(o, "argv", strv_json(&plan->argv));
  if (plan->envp.n)
    json_object_set_new(o, "env", strv_json(&plan->envp));
  json_object_set_new(o, "seccomp", json_null());
  json_object_set_new(o, "net", json_boolean(plan->net));
  json_object_set_new(o, "limits", sandbox_limits_json(m, &lim));
  json_object_set_new(o, "job_user",
                      f->user_name && f->user_name[0] ? json_string(f->user_name) : json_null());
  json_object_update(o, os);
  json_decref(os);
  return o;
}

/* ---- running ---- */

int sandbox_run(struct sandbox_plan *plan, struct job_result *res) {
  const struct manifest *m = plan->job->manifest;
  size_t cap = (size_t)m->output_kb * 1024;
  res->level = plan->level;
  res->level_known = true;
  res->downgrade_reason = plan->reason;
  res->requested = m->min_sandbox;
  res->out.data = malloc(cap ? cap : 1);
  res->err.data = malloc(cap ? cap : 1);
  if (!res->out.data || !res->err.data)
    return -ENOMEM;
  return sandbox_os_run(plan, res);
}

int sandbox_sweep_leftovers(const char *state_dir) {
  return sandbox_os_sweep_leftovers(state_dir);
}

int sandbox_reaper_start(const char *state_dir) {
  return sandbox_os_reaper_start(state_dir);
}

int sandbox_enter_user_cgroup(int argc, char *const *argv, const char **out_why) {
  *out_why = NULL;
  return sandbox_os_enter_user_cgroup(argc, argv, out_why);
}

int sandbox_reap_leftovers(const char *job_id) {
  return sandbox_os_reap_leftovers(job_id);
}

/* ---- helpers for the OS layers ---- */

json_t *sandbox_limits_json(const struct manifest *m, const struct job_result *mechs) {
  struct {
    const char *name;
    uint64_t value;
    const char *unit;
    enum limit_mech mech;
  } rows[] = {
      {"memory", m->memory_mb, "MiB", mechs->lim_memory},
      {"processes", m->processes, "processes", mechs->lim_processes},
      {"cpu", m->cpu_s, "s", mechs->lim_cpu},
      {"time", m->timeout_s, "s", mechs->lim_time},
      {"disk", m->disk_mb, "MiB", mechs->lim_disk},
  };
  json_t *lim = json_object();
  if (!lim)
    return NULL;
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    json_object_set_new(lim, rows[i].name,
                        json_pack("{s:I, s:s, s:s}", "value", (json_int_t)rows[i].value, "unit",
                                  rows[i].unit, "enforced_by", limit_mech_name(rows[i].mech)));
  json_object_set_new(lim, "output",
                      json_pack("{s:I, s:s, s:s}", "value", (json_int_t)m->output_kb, "unit",
                                "KiB per stream", "enforced_by",
                                "agent (reads at most this much, discards the rest)"));
  return lim;
}

void sandbox_direct_argv_env(const struct manifest *m, const struct manifest_argv *entry,
                             char *const *args, size_t n_args, const char *package_path,
                             const char *workspace, const char *path_env, const char *home,
                             const char *user, struct strv *argv, struct strv *envp) {
  const char *argv0 = entry->argv[0];
  if (argv0[0] == '/')
    strv_add(argv, argv0);
  else
    strv_addf(argv, "%s/%s", package_path, argv0);
  for (size_t i = 1; i < entry->argc; i++)
    strv_add(argv, entry->argv[i]);
  for (size_t i = 0; i < n_args; i++)
    strv_add(argv, args[i]);
  strv_addf(envp, "PATH=%s", path_env);
  strv_addf(envp, "HOME=%s", home);
  strv_addf(envp, "USER=%s", user);
  strv_addf(envp, "LOGNAME=%s", user);
  strv_addf(envp, "PACKAGE=%s", package_path);
  strv_addf(envp, "WORKSPACE=%s", workspace);
  strv_addf(envp, "TMPDIR=%s", workspace);
  bool lang = false;
  for (size_t i = 0; i < m->n_env; i++) {
    lang |= strcmp(m->env[i].name, "LANG") == 0;
    strv_addf(envp, "%s=%s", m->env[i].name, m->env[i].value);
  }
  if (!lang)
    strv_add(envp, "LANG=C.UTF-8");
}
