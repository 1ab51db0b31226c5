/* A cluster's key rotations reach every server through the database
 * (docs/SECURITY.md, "Several servers, one identity"; docs/OPERATIONS.md,
 * "Rotating keys"). `keys rotate` and `keys retire` on one server write the
 * new key files, sealed under the cluster's Noise static key (which the
 * database never holds), into the one row of cluster_keys with their
 * serial (server/db.h, server/keys.h). Every daemon on PostgreSQL reads
 * the row's serial at its start, before it listens, and every
 * KEYSYNC_POLL_MS: a serial above its own chain's is fetched, opened,
 * checked to extend its chain, installed into its state directory and
 * then loaded and announced as a SIGHUP does (the hook). A lower serial
 * is answered by writing its own (a rotation whose write did not reach
 * the database); an equal one is left alone. A row that does not open or
 * does not extend the chain is refused with one ERROR line per row
 * content; nothing is written then and the server keeps its keys.
 *
 * With SQLite (one server) keysync_new gives NULL and every call does
 * nothing. */
#ifndef CORDON_SERVER_KEYSYNC_H
#define CORDON_SERVER_KEYSYNC_H

#include <stdint.h>
#include <uv.h>

#include "server/db.h"
#include "server/keys.h"

#define KEYSYNC_POLL_MS 3000u /* how often a daemon reads the row's serial */

struct keysync;

struct keysync_hooks {
  void *data;
  /* new key files of serial are in the state directory: reload them and
   * announce them (what SIGHUP does) */
  void (*installed)(void *data, uint64_t serial);
};

/* loop, db, state_dir, noise_priv (the 32-byte Noise static secret) and
 * ring (the daemon's keyring: its chain is what a bundle must extend) are
 * borrowed for the keysync's lifetime. *out NULL on SQLite. 0 or -ENOMEM. */
int keysync_new(uv_loop_t *loop, struct server_db *db, const char *state_dir,
                const uint8_t *noise_priv, const struct server_keyring *ring,
                const struct keysync_hooks *hooks, struct keysync **out);
/* Read the row now and act on it (the comment above): 1 when keys were
 * installed (the hook ran), 0 when nothing was to do, a negative error
 * when the row was refused or unreadable (logged). */
int keysync_check(struct keysync *ks);
/* Check every KEYSYNC_POLL_MS from now on. */
void keysync_start(struct keysync *ks);
/* Its timer goes (before the loop's last run). NULL-safe. */
void keysync_close(struct keysync *ks);
/* After the loop has finished. NULL-safe. */
void keysync_free(struct keysync *ks);

#endif
