/* Process-tree helpers from /proc (world-readable stat files only). */
#ifndef CORDON_PLATFORM_LINUX_PROCS_H
#define CORDON_PLATFORM_LINUX_PROCS_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

/* Collect up to max descendants of root (not root itself) into out.
 * Returns how many were found (may exceed max; only max are stored). */
size_t procs_descendants(pid_t root, pid_t *out, size_t max);

/* SIGKILL every descendant of root but spare and its descendants (0:
 * none spared), repeatedly, until none is left or a bound is reached.
 * Each is signalled through a pidfd opened before the tree is read again,
 * and only if it is still in the tree then, so a pid reused meanwhile by
 * a process outside the tree is never hit (by pid without pidfds).
 * Returns how many were found on the first pass. */
size_t procs_kill_descendants(pid_t root, pid_t spare);

/* Collect up to max zombie children of parent (processes re-parented to
 * a subreaper that died). Returns how many were found. */
size_t procs_zombie_children(pid_t parent, pid_t *out, size_t max);
/* The threads whose real uid is uid, by /proc (RLIMIT_NPROC's count):
 * the figure of a moment. */
size_t procs_count_uid(uid_t uid);

#endif
