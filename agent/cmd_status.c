/* cordon-agent status [--json]: what sandbox this device can give, its
 * pairing, whether the job user can reach the staging directory, and what
 * the running agent says about itself, asked over its control socket
 * (agent/ctl_client.h): "running" false and "connected" null when nothing
 * answers; never guessed from a file. A summary of a few lines on stdout,
 * or with --json the whole report as JSON. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "agent/cli.h"
#include "agent/commands.h"
#include "agent/ctl_client.h"
#include "agent/hello.h"
#include "agent/servers.h"
#include "agent/state.h"
#include "compat/posix.h"
#include "core/id.h"
#include "platform/daemon.h"
#include "platform/paths.h"
#include "platform/sandbox.h"

/* "staging": can the job user reach CONFIG/jobs (or, before `run` made
 * it, the directory CONFIG is in: run makes CONFIG and CONFIG/jobs 0711
 * itself)? */
static json_t *staging_json(const struct agent_config *cfg) {
  char jobs[PATH_MAX], target[PATH_MAX];
  snprintf(jobs, sizeof(jobs), "%s/jobs", cfg->dir);
  struct stat st;
  if (stat(jobs, &st) == 0) {
    snprintf(target, sizeof(target), "%s", jobs);
  } else {
    snprintf(target, sizeof(target), "%s", cfg->dir);
    char *slash = strrchr(target, '/');
    if (slash && slash != target)
      *slash = '\0';
    else if (slash)
      slash[1] = '\0';
  }
  struct cordon_diag diag = {{0}};
  int r = daemon_job_reach_check(cfg->job_user, target, &diag);
  json_t *o = json_object();
  json_object_set_new(o, "dir", json_string(jobs));
  json_object_set_new(o, "checked", json_string(target));
  if (r == 0) {
    json_object_set_new(o, "reachable", json_true());
    json_object_set_new(o, "problem", json_null());
  } else {
    json_object_set_new(o, "reachable", r == CORDON_E_CONFIG_INVALID ? json_false() : json_null());
    json_object_set_new(o, "problem", json_string(diag.msg));
  }
  return o;
}

/* The cluster's addresses the agent knows (agent/servers.h), the pairing
 * address first, and the one that worked last; a damaged file says so. */
static void known_servers_json(const struct agent_config *cfg, const struct agent_pairing *pairing,
                               json_t *o) {
  struct agent_servers known;
  agent_servers_init(&known, pairing);
  struct cordon_diag diag = {{0}};
  int r = agent_servers_load(cfg->dir, &known, &diag);
  json_t *a = json_array();
  for (size_t i = 0; i < known.n; i++)
    json_array_append_new(a, json_string(known.list[i].text));
  json_object_set_new(o, "servers", a);
  json_object_set_new(o, "last_server", json_string(known.list[known.last].text));
  json_object_set_new(o, "servers_problem", r < 0 ? json_string(diag.msg) : json_null());
}

/* What the running agent says, into o; a line for people into summary. */
static void live_json(const struct agent_config *cfg, json_t *o, char *summary, size_t len) {
  json_t *live = NULL;
  struct cordon_diag diag = {{0}};
  int r = agent_ctl_ask(cfg->dir, AGENT_CTL_STATUS, &live, &diag);
  const char *keys[] = {"pid", "connected_since", "draining", "jobs_running", "last_error"};
  if (r == 0) {
    json_object_set_new(o, "running", json_true());
    json_t *cur = json_object_get(live, "server"); /* the session's address, or the attempt's */
    json_object_set(o, "current_server", json_is_string(cur) ? cur : json_null());
    json_object_set(o, "connected", json_object_get(live, "connected"));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
      json_t *v = json_object_get(live, keys[i]);
      json_object_set(o, keys[i], v ? v : json_null());
    }
    json_object_set_new(o, "live_detail", json_null());
    const char *since = json_string_value(json_object_get(live, "connected_since"));
    snprintf(summary, len, "agent: running (pid %lld), %s%s%s, %zu job(s) running",
             (long long)json_integer_value(json_object_get(live, "pid")),
             since ? "connected since " : "not connected", since ? since : "",
             json_is_true(json_object_get(live, "draining")) ? ", stopping" : "",
             json_array_size(json_object_get(live, "jobs_running")));
    json_decref(live);
    return;
  }
  const char *detail = r == -ECONNREFUSED ? NULL
                       : r == -ENOTSUP
                           ? "this platform has no control socket: ask the service manager"
                           : diag.msg;
  json_object_set_new(o, "running", r == -ECONNREFUSED ? json_false() : json_null());
  json_object_set_new(o, "connected", json_null());
  json_object_set_new(o, "current_server", json_null());
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    json_object_set_new(o, keys[i], json_null());
  json_object_set_new(o, "live_detail", detail ? json_string(detail) : json_null());
  snprintf(summary, len, "agent: %s%s",
           r == -ECONNREFUSED ? "not running" : "unknown: ", detail ? detail : "");
}

/* The summary for people: the level and why, the inventory, the pairing,
 * the running agent, and staging when it is a problem. */
static void print_summary(json_t *o, const char *live) {
  const char *best = json_string_value(json_object_get(o, "best_level"));
  const char *why = json_string_value(json_object_get(o, "downgrade_reason"));
  printf("level: %s%s%s (lowest accepted: %s)\n", best, why ? ", downgraded: " : "", why ? why : "",
         json_string_value(json_object_get(o, "lowest_level")));
  json_t *probes = json_object_get(o, "probes");
  struct agent_facts f = {0};
  agent_facts_add_probes(&f, probes);
  char os[MSG_FACT_VALUE_MAX + 1];
  paths_os_version(os, sizeof(os));
  printf("platform: %s, %s\n", json_string_value(json_object_get(o, "platform")), os);
  for (size_t i = 0; i < f.n_facts; i++)
    printf("  %-20s %s\n", f.fact_key[i], f.fact_value[i]);
  json_t *bw = json_object_get(probes, "bwrap");
  if (json_is_boolean(json_object_get(bw, "trial")))
    printf("  %-20s %s%s%s\n", "bwrap_trial",
           json_is_true(json_object_get(bw, "trial")) ? "ok" : "failed",
           json_is_string(json_object_get(bw, "error")) ? ": " : "",
           json_is_string(json_object_get(bw, "error"))
               ? json_string_value(json_object_get(bw, "error"))
               : "");
  if (json_is_true(json_object_get(o, "paired")))
    printf("paired: device %s of user %s, server %s\n",
           json_string_value(json_object_get(o, "device_id")),
           json_string_value(json_object_get(o, "user")),
           json_string_value(json_object_get(o, "server")));
  else
    printf("paired: no (`" AGENT_PROG " pair --server HOST:PORT` enrols this device)\n");
  json_t *servers = json_object_get(o, "servers");
  if (json_array_size(servers) > 1 || json_is_string(json_object_get(o, "current_server"))) {
    printf("servers:");
    for (size_t i = 0; i < json_array_size(servers); i++)
      printf("%s %s%s", i ? "," : "", json_string_value(json_array_get(servers, i)),
             i == 0 ? " (paired)" : "");
    printf("; last worked: %s; current: %s\n", json_string_value(json_object_get(o, "last_server")),
           json_is_string(json_object_get(o, "current_server"))
               ? json_string_value(json_object_get(o, "current_server"))
               : "-");
  }
  printf("%s\n", live);
  json_t *staging = json_object_get(o, "staging");
  if (json_is_true(json_object_get(staging, "reachable")))
    printf("staging: %s reachable by the job user\n",
           json_string_value(json_object_get(staging, "dir")));
  else
    printf("staging: %s\n", json_is_string(json_object_get(staging, "problem"))
                                ? json_string_value(json_object_get(staging, "problem"))
                                : "unknown");
  printf("(`" AGENT_PROG " status --json` prints every probe)\n");
  fflush(stdout);
}

int agent_cmd_status(const struct agent_config *cfg, bool json) {
  struct sandbox_policy pol;
  agent_config_policy(cfg, &pol);
  struct sandbox_probe *probe;
  int r = sandbox_probe_new(&pol, true, &probe);
  if (r < 0) {
    agent_say_error(r, "probing the sandbox failed");
    return 1;
  }
  const char *reason;
  enum sandbox_level best = sandbox_probe_best(probe, &reason);
  json_t *o = json_object();
  json_object_set_new(o, "best_level", json_string(sandbox_level_name(best)));
  json_object_set_new(o, "downgrade_reason", reason ? json_string(reason) : json_null());
  json_object_set_new(o, "platform", json_string(paths_platform_name()));
  json_object_set_new(o, "probes", sandbox_probe_json(probe));
  json_object_set_new(o, "config_dir", json_string(cfg->dir));
  json_object_set_new(o, "lowest_level", json_string(sandbox_level_name(cfg->lowest_level)));
  struct agent_pairing pairing;
  bool paired = agent_pairing_load(cfg->dir, &pairing, NULL) == 0;
  json_object_set_new(o, "paired", json_boolean(paired));
  if (paired) {
    char dev[CORDON_ID_HEX_SIZE], server[300];
    cordon_id_to_hex(pairing.device_id, dev);
    snprintf(server, sizeof(server), "%s:%d", pairing.host, pairing.port);
    json_object_set_new(o, "device_id", json_string(dev));
    json_object_set_new(o, "server", json_string(server));
    json_object_set_new(o, "user", json_string(pairing.user));
    known_servers_json(cfg, &pairing, o);
  }
  char summary[700];
  live_json(cfg, o, summary, sizeof(summary));
  json_t *staging = staging_json(cfg);
  json_object_set_new(o, "staging", staging);
  if (json)
    agent_print_json(o);
  else
    print_summary(o, summary);
  json_decref(o);
  sandbox_probe_free(probe);
  return 0;
}
