/* One daemon per state directory: STATE/daemon.lock, an flock(2) held by
 * `cordon-server run` for its whole life. The holder writes its pid into
 * the file so that a second `run` can name it; the lock itself, not the
 * pid, decides (a stale pid in an unlocked file means nothing). The lock
 * is released by the kernel when the holder exits, however it exits.
 *
 * Everything that belongs to the running daemon alone (STATE/admin.sock,
 * marking every device offline at start) is done only after the lock is
 * taken, and the socket is removed only by its holder. */
#ifndef CORDON_SERVER_LOCK_H
#define CORDON_SERVER_LOCK_H

#include <sys/types.h>

#include "core/error.h"

#define SERVER_LOCK_FILE "daemon.lock" /* in the state directory, 0600 */

struct server_lock;

/* Take STATE/daemon.lock without waiting and write our pid into it.
 * Returns 0 and *out_lock, or -EBUSY with diag "STATE is in use by
 * cordon-server pid N" when another process holds it (pid 0 when it has
 * not written one yet), or another negated errno with diag. */
int server_lock_take(const char *state_dir, struct server_lock **out_lock,
                     struct cordon_diag *diag);
/* Release the lock (the file stays, with no pid in it). NULL-safe. */
void server_lock_release(struct server_lock *l);

#endif
