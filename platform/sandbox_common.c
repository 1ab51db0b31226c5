#include "platform/sandbox_common.h"

#include <string.h>

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
