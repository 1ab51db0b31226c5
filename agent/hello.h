/* The agent's hello: versions, platform, the sandbox it can give, and its
 * inventory (facts: the probes' results, docs/protocol/messages.md 6.1). */
#ifndef CORDON_AGENT_HELLO_H
#define CORDON_AGENT_HELLO_H

#include <jansson.h>
#include <stddef.h>

#include "agent/cli.h"
#include "agent/config.h"
#include "proto/msg.h"

#define AGENT_FACTS_MAX 16

struct agent_facts {
  enum sandbox_level best;
  char reason[64];
  unsigned max_jobs;
  /* the inventory: keys are string literals, values are copies */
  const char *fact_key[AGENT_FACTS_MAX];
  char fact_value[AGENT_FACTS_MAX][MSG_FACT_VALUE_MAX + 1];
  size_t n_facts;
};

/* Probe the sandbox as a job would see it (the cheap probe: best and
 * reason), and the inventory with the thorough probe `status` runs (a
 * trial sandbox): agent_version, os, and of bwrap_version, userns,
 * seccomp, landlock_abi, cgroup_version, cgroup_controllers, appcontainer,
 * job_object, job_user those this platform's probes report. Called when
 * `run` starts and on SIGHUP, and by `pair`; every hello sends the last
 * result. */
int agent_facts_probe(const struct agent_config *cfg, struct agent_facts *out_facts);
/* The inventory facts found in probes (sandbox_probe_json), appended to
 * f (at most AGENT_FACTS_MAX in all). */
void agent_facts_add_probes(struct agent_facts *f, json_t *probes);
/* Fill a hello; strings point into f and cfg, and its facts into wire
 * (AGENT_FACTS_MAX entries of the caller's): keep them alive while m is
 * used. */
void agent_hello_fill(const struct agent_facts *f, const struct agent_config *cfg,
                      struct msg_fact wire[AGENT_FACTS_MAX], struct msg *out_msg);

#endif
