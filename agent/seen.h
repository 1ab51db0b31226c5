/* The seen-job journal of `cordon-agent run`: the ids of the jobs this
 * device has accepted, so a job sent again (a replayed ticket) is refused,
 * across restarts too. SEEN/<id> (SEEN is CONFIG/seen, 0700; the id in
 * lowercase hex) holds its ticket's expiry in decimal ms since the epoch on
 * the server's clock. An entry is pruned a minute after that expiry, when
 * the ticket is refused as expired anyway. Files only, nothing logged;
 * plain storage (no release); one thread. */
#ifndef CORDON_AGENT_SEEN_H
#define CORDON_AGENT_SEEN_H

#include <stdint.h>

#include "core/id.h"

/* how long past its ticket's expiry an id is kept */
#define AGENT_SEEN_GRACE_MS 60000

struct agent_seen {
  char dir[3072];
};

/* Name CONFIG/seen (a longer path is cut) and make it, 0700: 0 or -errno
 * (the name is set either way). */
int agent_seen_init(struct agent_seen *s, const char *config_dir);
/* CORDON_E_TICKET_REPLAYED when id is in the journal; otherwise record it
 * with expires_ms (created O_EXCL, visible at once, fsynced with its
 * directory by a short-lived thread): 0 or -errno. */
int agent_seen_check_and_add(const struct agent_seen *s, const uint8_t id[CORDON_ID_LEN],
                             uint64_t expires_ms);
/* Drop the entries whose expiry is more than AGENT_SEEN_GRACE_MS before
 * now_ms (server clock); unreadable entries are kept. */
void agent_seen_prune(const struct agent_seen *s, int64_t now_ms);
/* At start: remove every SEEN/.<name>.tmp a crash left. One named for a
 * job id (SEEN/.<id>.tmp) means the agent died while it accepted that job,
 * before the job was spooled as running: fn is called with the id (NULL
 * fn: only removed), so the job can be reported agent_restarted. */
void agent_seen_recover_temps(const struct agent_seen *s,
                              void (*fn)(void *ctx, const uint8_t id[CORDON_ID_LEN]), void *ctx);

#endif
