/* Durability off the event loop and off a job's way: fsync a file that is
 * already in place, then its directory, on a short-lived detached thread
 * (synchronously when no thread can be started). Used for the seen entry
 * and the result spool (docs/ARCHITECTURE.md, "Durable writes"): the file
 * is visible at once; only a crash of the machine before the sync can
 * lose it. Paths longer than PATH_MAX are not synced. Nothing logged. */
#ifndef CORDON_AGENT_BGSYNC_H
#define CORDON_AGENT_BGSYNC_H

/* dir: the directory holding path. */
void agent_bgsync(const char *dir, const char *path);

#endif
