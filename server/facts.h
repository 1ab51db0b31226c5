/* What a device reports about itself in every hello, kept as its facts
 * (devices.facts, server/db.h): a JSON object of strings, the shape
 * `cordon-server device show --json` prints under "facts". */
#ifndef CORDON_SERVER_FACTS_H
#define CORDON_SERVER_FACTS_H

#include "proto/msg.h"

/* {"agent_version", "platform", "mechanism" (when sent), then every entry
 * of the hello's facts map (when the protocol carries one)} as compact JSON
 * text, heap (free()), at most SERVER_DB_FACTS_MAX bytes; NULL when out of
 * memory or too large (the facts are then not updated). */
char *server_facts_from_hello(const struct msg_hello *h);

#endif
