/* Durability off the event loop and off a job's way: fsync a file that is
 * already in place, then its directory, on a short-lived detached thread
 * (synchronously when no thread can be started); then, optionally, remove
 * another file that was only needed until then. Used for the seen entry
 * and the result spool (docs/ARCHITECTURE.md, "Durable writes"): the file
 * is visible at once; only a crash of the machine before the sync can
 * lose it. Paths longer than PATH_MAX are not synced (nor is the other
 * file removed). Nothing logged.
 *
 * The process waits at exit (atexit) for the syncs in flight, at most
 * AGENT_BGSYNC_EXIT_WAIT_MS. */
#ifndef CORDON_AGENT_BGSYNC_H
#define CORDON_AGENT_BGSYNC_H

#include <stdbool.h>

#define AGENT_BGSYNC_EXIT_WAIT_MS 5000

/* dir: the directory holding path. */
void agent_bgsync(const char *dir, const char *path);

/* The same, then unlink(then_unlink) once path and dir are synced (also
 * when path is gone by then: whoever removed it had no more use for it). */
void agent_bgsync_then_unlink(const char *dir, const char *path, const char *then_unlink);

/* Wait until every sync started before is done, at most ms milliseconds:
 * true when none is left. */
bool agent_bgsync_wait(unsigned ms);

#endif
