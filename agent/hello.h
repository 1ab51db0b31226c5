/* The agent's hello: versions, platform, and the sandbox it can give. */
#ifndef CORDON_AGENT_HELLO_H
#define CORDON_AGENT_HELLO_H

#include "agent/cli.h"
#include "agent/config.h"
#include "proto/msg.h"

struct agent_facts {
  enum sandbox_level best;
  char reason[64];
  unsigned max_jobs;
};

/* Probe the sandbox (cheap probe) as a job would see it. */
int agent_facts_probe(const struct agent_config *cfg, struct agent_facts *out_facts);
/* Fill a hello; strings point into facts/cfg (keep them alive). */
void agent_hello_fill(const struct agent_facts *f, const struct agent_config *cfg,
                      struct msg *out_msg);

#endif
