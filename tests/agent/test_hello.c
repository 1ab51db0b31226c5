/* The agent's hello as it goes on the wire: its real version and the
 * inventory of the real probes on this machine (facts), encoded and
 * decoded by the strict codec. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/hello.h"

static const char *fact(const struct msg_hello *h, const char *key) {
  for (size_t i = 0; i < h->n_facts; i++)
    if (strcmp(h->facts[i].key, key) == 0)
      return h->facts[i].value;
  return NULL;
}

Test(agent_hello, carries_the_version_and_the_probes_inventory) {
  char dir[] = "/tmp/cordon-hello-XXXXXX";
  cr_assert(mkdtemp(dir));
  struct agent_config *cfg;
  struct cordon_diag d = {{0}};
  cr_assert_eq(agent_config_load(dir, &cfg, &d), 0, "%s", d.msg);
  struct agent_facts f;
  cr_assert_eq(agent_facts_probe(cfg, &f), 0);
  struct msg m;
  struct msg_fact wire[AGENT_FACTS_MAX];
  agent_hello_fill(&f, cfg, wire, &m);
  uint8_t *buf;
  size_t len;
  cr_assert_eq(msg_encode_alloc(&m, &buf, &len, &d), 0, "%s", d.msg);
  struct msg got;
  cr_assert_eq(msg_decode(buf, len, &got, &d), 0, "%s", d.msg);
  free(buf);
  const struct msg_hello *h = &got.hello;
  cr_assert_str_eq(h->agent_version, CORDON_VERSION);
  cr_assert_str_eq(fact(h, "agent_version"), CORDON_VERSION);
  cr_assert_not_null(fact(h, "os"));
  if (strcmp(CORDON_PLATFORM_NAME, "linux") == 0) {
    cr_assert(strncmp(fact(h, "os"), "Linux ", 6) == 0, "%s", fact(h, "os"));
    const char *bw = fact(h, "bwrap_version");
    cr_assert_not_null(bw);
    if (access("/usr/bin/bwrap", X_OK) == 0)
      cr_assert(strncmp(bw, "bubblewrap ", 11) == 0, "%s", bw);
    cr_assert_not_null(fact(h, "userns"));
    cr_assert(strcmp(fact(h, "seccomp"), "available") == 0 ||
              strcmp(fact(h, "seccomp"), "unavailable") == 0);
    const char *ll = fact(h, "landlock_abi");
    cr_assert(ll && ll[0] >= '0' && ll[0] <= '9', "%s", ll ? ll : "(none)");
    const char *cg = fact(h, "cgroup_version");
    cr_assert(cg && (strcmp(cg, "1") == 0 || strcmp(cg, "2") == 0 || strcmp(cg, "hybrid") == 0 ||
                     strcmp(cg, "none") == 0),
              "%s", cg ? cg : "(none)");
    cr_assert_not_null(fact(h, "cgroup_controllers"));
  }
  msg_release(&got);
  agent_config_free(cfg);
  rmdir(dir);
}
