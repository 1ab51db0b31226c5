#include "agent/ctl_client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compat/posix.h"
#include "platform/daemon.h"

int agent_ctl_ask(const char *config_dir, enum agent_ctl_op op, json_t **out_payload,
                  struct cordon_diag *diag) {
  char path[256];
  int r = daemon_ctl_path(config_dir, AGENT_CTL_SOCKET, path, sizeof(path));
  if (r == -ENOTSUP)
    return r;
  if (r < 0)
    return cordon_diag_set(diag, r, "%s/%s: the path is too long for a socket", config_dir,
                           AGENT_CTL_SOCKET);
  const char *req = op == AGENT_CTL_STATUS ? "{\"op\":\"status\"}\n" : "{\"op\":\"metrics\"}\n";
  char *reply;
  size_t len;
  r = daemon_ctl_request(path, req, AGENT_CTL_REPLY_MAX, AGENT_CTL_ASK_MS, &reply, &len);
  if (r == -ECONNREFUSED || r == -ENOENT)
    return -ECONNREFUSED;
  if (r < 0)
    return cordon_diag_set(diag, r, "asking the agent at %s: %s", path, strerror(-r));
  json_error_t jerr;
  json_t *root = json_loadb(reply, len, JSON_REJECT_DUPLICATES, &jerr);
  free(reply);
  const char *key = op == AGENT_CTL_STATUS ? "status" : "metrics";
  json_t *payload = json_object_get(root, key);
  if (!json_is_true(json_object_get(root, "ok")) ||
      !(op == AGENT_CTL_STATUS ? json_is_object(payload) : json_is_string(payload))) {
    const char *msg = json_string_value(json_object_get(json_object_get(root, "error"), "message"));
    r = cordon_diag_set(diag, CORDON_E_PROTOCOL, "the agent at %s answered %s", path,
                        msg ? msg : "something else than a reply");
    json_decref(root);
    return r;
  }
  json_incref(payload);
  json_decref(root);
  *out_payload = payload;
  return 0;
}
