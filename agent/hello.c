#include "agent/hello.h"

#include <stdio.h>
#include <string.h>

#include "compat/posix.h"
#include "platform/paths.h"

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
  *out_facts = f;
  return 0;
}

void agent_hello_fill(const struct agent_facts *f, const struct agent_config *cfg,
                      struct msg *out_msg) {
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
}
