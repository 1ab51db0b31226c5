/* cordon-agent status [--json]: what sandbox this device can give, its
 * pairing, and whether `run` is connected (CONFIG/connection). */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "agent/cli.h"
#include "agent/commands.h"
#include "agent/state.h"
#include "compat/posix.h"
#include "core/id.h"
#include "platform/paths.h"
#include "platform/sandbox.h"

int agent_cmd_status(const struct agent_config *cfg, bool json_only) {
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
  }
  /* written by `run` as it connects and disconnects (agent/session.c) */
  char cpath[4200], cstate[32] = "";
  snprintf(cpath, sizeof(cpath), "%s/connection", cfg->dir);
  FILE *cf = fopen(cpath, "re");
  if (cf) {
    if (!fgets(cstate, sizeof(cstate), cf))
      cstate[0] = '\0';
    fclose(cf);
  }
  json_object_set_new(o, "connected", json_boolean(paired && strncmp(cstate, "connected", 9) == 0));
  if (json_only) {
    agent_print_json(o);
  } else {
    /* people: a short summary on stderr keeps stdout for JSON only */
    fprintf(stderr, "best level: %s%s%s\n", sandbox_level_name(best), reason ? " — " : "",
            reason ? reason : "");
    agent_print_json(o);
  }
  json_decref(o);
  sandbox_probe_free(probe);
  return 0;
}
