/* The addresses of the paired cluster the agent knows, and which of them
 * worked last (docs/OPERATIONS.md, "Several servers"). Every server of a
 * cluster holds the same identity, so every address is checked against the
 * one key pinned at pairing; an address is only where to try.
 *
 * The known list is, in this order and without repeats (compared as
 * text): the address given at pairing (pairing.json: always first, never
 * dropped), the addresses the last welcome listed (welcome.servers), and
 * the address that welcome came from (so a server that lists none, or not
 * itself, is still known). It is kept in CONFIG/servers.json, 0600,
 * written to a temporary name, fsynced and renamed:
 *   {"servers": ["b.example:7443", "[2001:db8::2]:7443"], "last": "b.example:7443"}
 * ("servers": the known list without the pairing address, each entry as
 * msg_addr_parse() accepts it; "last": one of the known list). A missing
 * file means the pairing address alone.
 *
 * Plain storage; nothing here logs. */
#ifndef CORDON_AGENT_SERVERS_H
#define CORDON_AGENT_SERVERS_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/state.h"
#include "core/error.h"
#include "proto/msg.h"

#define AGENT_SERVERS_FILE "servers.json"
/* the pairing address, a welcome's list and the address it came from */
#define AGENT_SERVERS_MAX (MSG_SERVERS_MAX + 2)
#define AGENT_SERVERS_FILE_MAX 16384

struct agent_server {
  char text[MSG_ADDR_MAX + 8]; /* "host:port", "[v6]:port": for the file, the log and status */
  char host[MSG_ADDR_MAX + 1]; /* what net_connect takes (no brackets) */
  int port;
};

struct agent_servers {
  struct agent_server list[AGENT_SERVERS_MAX]; /* [0]: the pairing address */
  size_t n;                                    /* 1..AGENT_SERVERS_MAX */
  size_t last;                                 /* the one that worked last (0 before any) */
};

/* The pairing address alone. */
void agent_servers_init(struct agent_servers *s, const struct agent_pairing *p);
/* After agent_servers_init: add what dir/servers.json says. 0 (also when
 * there is no file), or CORDON_E_CONFIG_INVALID with diag when it is
 * damaged (too large, not JSON, an unknown key, more than
 * AGENT_SERVERS_MAX - 1 entries, an entry msg_addr_parse() refuses, a
 * "last" not in the list); s is then the pairing address alone. */
int agent_servers_load(const char *dir, struct agent_servers *s, struct cordon_diag *diag);
/* A welcome came from s->list[used] with list (n entries, valid for
 * msg_addr_parse(); NULL or 0: none). The known list becomes the pairing
 * address, list, and the used address, without repeats; "last" is the
 * used address. true when the list or "last" changed (save it). */
bool agent_servers_learn(struct agent_servers *s, size_t used, char *const *list, size_t n);
/* Write dir/servers.json. 0 or an error with diag. */
int agent_servers_save(const char *dir, const struct agent_servers *s, struct cordon_diag *diag);
/* The known list joined with "," into buf (cut to fit), for the log. */
void agent_servers_text(const struct agent_servers *s, char *buf, size_t len);

#endif
