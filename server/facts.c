#include "server/facts.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/db.h"

char *server_facts_from_hello(const struct msg_hello *h) {
  json_t *o = json_object();
  if (!o)
    return NULL;
  if (h->agent_version)
    json_object_set_new(o, "agent_version", json_string(h->agent_version));
  if (h->platform)
    json_object_set_new(o, "platform", json_string(h->platform));
  if (h->mechanism)
    json_object_set_new(o, "mechanism", json_string(h->mechanism));
#ifdef MSG_FACTS_MAX /* the protocol's facts map (the agent's probes) */
  for (size_t i = 0; h->facts && i < h->n_facts; i++)
    if (h->facts[i].key && h->facts[i].value)
      json_object_set_new(o, h->facts[i].key, json_string(h->facts[i].value));
#endif
  char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  if (text && strlen(text) > SERVER_DB_FACTS_MAX) {
    free(text);
    text = NULL;
  }
  return text;
}
