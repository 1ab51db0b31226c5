#include "agent/hello.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compat/posix.h"
#include "platform/paths.h"

static void put(struct agent_facts *f, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(struct agent_facts *f, const char *key, const char *fmt, ...) {
  if (f->n_facts >= AGENT_FACTS_MAX)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->fact_value[f->n_facts], sizeof(f->fact_value[0]), fmt, ap);
  va_end(ap);
  /* the wire's name format: no control characters (a probe's text may
   * carry a tab or a newline) */
  for (char *c = f->fact_value[f->n_facts]; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      *c = ' ';
  f->fact_key[f->n_facts++] = key;
}

static json_t *at(json_t *o, const char *a, const char *b) {
  return json_object_get(json_object_get(o, a), b);
}

static void put_bool(struct agent_facts *f, const char *key, json_t *v, const char *yes,
                     const char *no) {
  if (json_is_boolean(v))
    put(f, key, "%s", json_is_true(v) ? yes : no);
}

/* The inventory out of sandbox_probe_json(): each platform's probes name
 * what they found; a fact is sent for each of those keys that is there. */
void agent_facts_add_probes(struct agent_facts *f, json_t *pr) {
  json_t *bw = json_object_get(pr, "bwrap");
  if (bw) {
    json_t *v = json_object_get(bw, "version");
    if (json_is_string(v))
      put(f, "bwrap_version", "%s", json_string_value(v));
    else
      put(f, "bwrap_version", "%s",
          json_is_true(json_object_get(bw, "present")) ? "unknown" : "absent");
  }
  put_bool(f, "userns", at(pr, "userns", "allowed"), "allowed", "denied");
  put_bool(f, "seccomp", at(pr, "seccomp", "available"), "available", "unavailable");
  json_t *ll = at(pr, "landlock", "abi");
  if (json_is_integer(ll))
    put(f, "landlock_abi", "%lld", (long long)json_integer_value(ll));
  json_t *cg = json_object_get(pr, "cgroups");
  if (cg) {
    bool v2 = json_is_string(json_object_get(cg, "v2_mount")), v1 = false;
    const char *k;
    json_t *v;
    json_object_foreach(cg, k, v) {
      if (strncmp(k, "v1_", 3) == 0 && json_is_object(v))
        v1 = true;
    }
    put(f, "cgroup_version", "%s", v2 && v1 ? "hybrid" : v2 ? "2" : v1 ? "1" : "none");
    char ctl[128] = "";
    json_object_foreach(json_object_get(cg, "job_tree"), k, v) {
      if (json_is_true(v))
        snprintf(ctl + strlen(ctl), sizeof(ctl) - strlen(ctl), "%s%s", ctl[0] ? " " : "", k);
    }
    put(f, "cgroup_controllers", "%s", ctl);
  }
  json_t *ac = json_object_get(pr, "appcontainer");
  if (json_is_object(ac)) {
    json_t *trial = json_object_get(ac, "trial");
    put(f, "appcontainer", "%s",
        !json_is_true(json_object_get(ac, "api_present")) ? "absent"
        : json_is_boolean(trial) ? (json_is_true(trial) ? "works" : "fails")
                                 : "present");
  }
  put_bool(f, "job_object", at(pr, "job_object", "available"), "available", "unavailable");
  json_t *ju = json_object_get(pr, "job_user");
  if (json_is_string(json_object_get(ju, "name")))
    put(f, "job_user", "%s", json_string_value(json_object_get(ju, "name")));
}

int agent_facts_probe(const struct agent_config *cfg, struct agent_facts *out_facts) {
  struct sandbox_policy pol;
  agent_config_policy(cfg, &pol);
  struct sandbox_probe *p;
  int r = sandbox_probe_new(&pol, false, &p);
  if (r < 0)
    return r;
  const char *reason;
  struct agent_facts f = {0};
  f.best = sandbox_probe_best(p, &reason);
  /* the owner's floor: a level below it is of no use to anyone */
  snprintf(f.reason, sizeof(f.reason), "%s", reason ? reason : "");
  f.max_jobs = cfg->max_jobs;
  sandbox_probe_free(p);
  put(&f, "agent_version", "%s", AGENT_VERSION);
  char os[MSG_FACT_VALUE_MAX + 1];
  paths_os_version(os, sizeof(os));
  put(&f, "os", "%s", os);
  /* the inventory: what `status` finds, trial sandbox included */
  if (sandbox_probe_new(&pol, true, &p) == 0) {
    json_t *j = sandbox_probe_json(p);
    agent_facts_add_probes(&f, j);
    json_decref(j);
    sandbox_probe_free(p);
  }
  *out_facts = f;
  return 0;
}

void agent_hello_fill(const struct agent_facts *f, const struct agent_config *cfg,
                      struct msg_fact wire[AGENT_FACTS_MAX], struct msg *out_msg) {
  (void)cfg;
  memset(out_msg, 0, sizeof(*out_msg));
  out_msg->type = MSG_HELLO;
  struct msg_hello *h = &out_msg->hello;
  h->proto_min = MSG_PROTO_VERSION_MIN;
  h->proto_max = MSG_PROTO_VERSION_MAX;
  h->agent_version = AGENT_VERSION;
  h->platform = (char *)paths_platform_name();
  h->best_level = (enum msg_level)f->best;
  h->downgrade_reason = f->best == SANDBOX_LEVEL_ISOLATED ? NULL : (char *)f->reason;
  h->max_jobs = f->max_jobs;
  for (size_t i = 0; i < f->n_facts; i++) {
    wire[i].key = (char *)f->fact_key[i];
    wire[i].value = (char *)f->fact_value[i];
  }
  h->facts = wire;
  h->n_facts = f->n_facts;
}
